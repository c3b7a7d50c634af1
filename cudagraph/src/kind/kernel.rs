//! Kernel nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_KERNEL`): typed calls made by
//! `kernels!` methods, their launch dimensions, and how an exec stores and updates them.

use core::ffi::c_void;
use core::ptr;

use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS_v3, CUcontext, CUfunction, CUgraphNodeParams, CUgraphNodeType,
};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use std::sync::Arc;

use super::NodeKind;
use crate::error::{Call, CudaError, Error, NodeSite};
use crate::operand::{Accesses, BufferArg, BufferArgs, KernelArg, sealed};
use crate::raw;

/// Most kernel parameters one kernel node may have.
pub const MAX_KERNEL_PARAMS: usize = 16;

/// The argument tuple of a kernel call.
pub trait KernelArgs {
    /// Number of arguments.
    const LEN: usize;
    /// Calls `f` with each argument's bytes, in parameter order.
    fn for_each(&self, f: &mut dyn FnMut(&[u8]));
    /// Calls `f` with the context of each buffer argument.
    fn for_each_context(&self, f: &mut dyn FnMut(CUcontext));
    /// Each buffer argument's [`KernelArg::access`] and context, in order, into `out`; returns
    /// how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// Each buffer argument's parameter index, address range, written flag and context, in
    /// order, into `out`; returns how many.
    #[doc(hidden)]
    fn buffers(&self, out: &mut BufferArgs) -> usize;
    /// Each [`Condition`](crate::Condition) argument's `(index, slot, owner)` (the owner: the
    /// number of the call or builder that made it).
    #[doc(hidden)]
    fn conditions(&self, f: &mut dyn FnMut(usize, u32, u64));
    /// Each [`DeviceScalar`](crate::DeviceScalar) argument's `(index, buffer length)`.
    #[doc(hidden)]
    fn device_scalars(&self, f: &mut dyn FnMut(usize, usize));
    /// Bit `i` set when argument `i` carries a device address (a buffer or device scalar: it
    /// reports a context), clear for plain scalars.
    #[doc(hidden)]
    fn pointers(&self) -> u16;
    /// Appends what the cache compares of the arguments between calls (see
    /// [`KernelNode::pack`]): for a plain argument (see [`Self::layout`]) its bytes in 8-byte
    /// words (zero-padded); for any other, one word of its kind, length and handle
    /// ([`Pack::push_arg`]), its bytes, its context when it is not `node_ctx`, and, for a
    /// device scalar, its buffer's length.
    #[doc(hidden)]
    fn pack(&self, out: &mut Pack<'_>, node_ctx: Option<CUcontext>);
    /// The arguments' forms in a kernel node's words, 4 bits per argument (argument `i` in bits
    /// `4 * i ..`): its length in bytes, 1 to 14, for a plain argument (no context, handle,
    /// device scalar or condition: only its bytes are packed), `0xf` for any other (a word of
    /// its kind and length comes first, [`Pack::push_arg`]), 0 past the last argument.
    #[doc(hidden)]
    fn layout(&self) -> u64;
}

/// An argument's 4 bits of [`KernelArgs::layout`]: its length for a plain one, else `0xf`.
#[inline(always)]
fn arg_form<T: KernelArg + ?Sized>(a: &T) -> u64 {
    let len = a.bytes().len();
    let plain = a.context().is_none()
        && a.access().is_none()
        && a.device_scalar_len().is_none()
        && a.condition().is_none()
        && (1..=14).contains(&len);
    if plain { len as u64 } else { 0xf }
}

/// One node's words (see [`KernelNode::pack`]), either compared with the words of the last
/// call of the same variant (each word's difference folded into one, in registers: no branch
/// and no store per word) or written out. Made by [`Compare::node`], which packs a node that
/// differs a second time, writing.
#[doc(hidden)]
pub struct Pack<'a> {
    /// The `graph!` call whose buffer handles are packed by place (see [`Pack::push_handle`]).
    call: Option<u64>,
    /// Comparing: the last call's words, from this node's first on.
    last: &'a [u64],
    /// Comparing: words made so far.
    pos: usize,
    /// Comparing: the bits in which any word so far differs from `last`'s (or is past its end).
    diff: u64,
    /// Writing: where the words go.
    out: Option<&'a mut Vec<u64>>,
}

/// A call's nodes as words (see [`KernelNode::pack`]), compared node by node with the words of
/// the last call of the same variant ([`Self::node`]): while they agree nothing is written;
/// from the first node that differs on, the whole new sequence is written out, for the cache
/// to keep.
pub(crate) struct Compare<'a> {
    call: Option<u64>,
    last: &'a [u64],
    /// Words of the nodes so far, all equal to `last`'s first ones (while `!diverged`).
    pos: usize,
    diverged: bool,
    out: &'a mut Vec<u64>,
}

impl<'a> Compare<'a> {
    /// Compares with `last`; the new words go to `out` (emptied) once they differ. `call`: the
    /// id of the `graph!` call whose handles are checked (`None` for a builder's call).
    pub(crate) fn new(last: &'a [u64], out: &'a mut Vec<u64>, call: Option<u64>) -> Self {
        out.clear();
        Compare { call, last, pos: 0, diverged: false, out }
    }

    /// One node's words, made by `pack` (which returns `false` for a node that does not pack:
    /// then so does this, and the words are of no use). See [`compare_node`].
    #[inline(always)]
    pub(crate) fn node<W: NodeWords + ?Sized>(&mut self, node: &W) -> bool {
        let (call, last) = (self.call, self.last);
        compare_node(call, last, &mut self.pos, &mut self.diverged, self.out, node)
    }

    /// How many words the nodes so far made (while they agree with `last`, its first ones;
    /// after, `out`'s, which then begins with those).
    pub(crate) fn len(&self) -> usize {
        if self.diverged { self.out.len() } else { self.pos }
    }

    /// Whether the words equal `last` exactly; if not, `out` holds them all.
    pub(crate) fn finish(self) -> bool {
        if !self.diverged && self.pos == self.last.len() {
            return true;
        }
        if !self.diverged {
            self.out.extend_from_slice(&self.last[..self.pos]);
        }
        false
    }
}

/// What packs one node's words for [`compare_node`]: a closure `|p| …`, or a statement's node
/// ([`IntoNode::words`](super::IntoNode), through `OfNode`), whose packing is inlined where it
/// is compared (a closure packing a node at two call sites is not inlined at either: its
/// `Pack` then lives in memory, a load and store per word).
pub(crate) trait NodeWords {
    /// Packs the node; `false` for a node that does not pack.
    fn pack_words(&self, p: &mut Pack<'_>) -> bool;
}

impl<F: Fn(&mut Pack<'_>) -> bool> NodeWords for F {
    #[inline(always)]
    fn pack_words(&self, p: &mut Pack<'_>) -> bool {
        self(p)
    }
}

/// A statement's node as [`NodeWords`].
pub(crate) struct OfNode<'n, N>(pub(crate) &'n N);

impl<N: super::IntoNode> NodeWords for OfNode<'_, N> {
    #[inline(always)]
    fn pack_words(&self, p: &mut Pack<'_>) -> bool {
        self.0.words(p)
    }
}

/// One node's words against `last` from `*pos` on, while the words so far agreed
/// (`!*diverged`): packed by `node` comparing, and when they agree, `*pos` moves past them.
/// At the first node that differs, the agreeing words go to `out`, `*diverged` is set and the
/// node is packed again, writing (a node's words depend on its parameters only), as is every
/// node after it.
#[inline(always)]
pub(crate) fn compare_node<W: NodeWords + ?Sized>(
    call: Option<u64>,
    last: &[u64],
    pos: &mut usize,
    diverged: &mut bool,
    out: &mut Vec<u64>,
    node: &W,
) -> bool {
    if !*diverged {
        let rest = last.get(*pos..).unwrap_or(&[]);
        let mut p = Pack { call, last: rest, pos: 0, diff: 0, out: None };
        if !node.pack_words(&mut p) {
            return false;
        }
        if p.diff == 0 {
            *pos += p.pos;
            return true;
        }
        diverge(last, *pos, diverged, out);
    }
    write_node(call, out, node)
}

/// [`compare_node`] past the first node that differs: the node's words written out.
#[inline(never)]
pub(crate) fn write_node<W: NodeWords + ?Sized>(
    call: Option<u64>,
    out: &mut Vec<u64>,
    node: &W,
) -> bool {
    node.pack_words(&mut Pack { call, last: &[], pos: 0, diff: 0, out: Some(out) })
}

/// [`compare_node`] at the first node that differs: the words that agreed go to `out`.
#[cold]
#[inline(never)]
fn diverge(last: &[u64], pos: usize, diverged: &mut bool, out: &mut Vec<u64>) {
    *diverged = true;
    out.extend_from_slice(&last[..pos]);
}

/// What a buffer handle names in a [`Pack`]'s call.
enum HandlePlace {
    /// A builder's call: its handles are checked on every call, not packed by place.
    Unchecked,
    /// Place `p` of this `graph!` call.
    Place(u32),
    /// None of this call's places: a word no valid handle makes, so `validate` runs.
    Foreign,
}

impl<'a> Pack<'a> {
    /// A buffer handle `tag`, written or not: for a `graph!` call, the place it names if it is
    /// one of this call's (else a word no valid handle makes, `u64::MAX`), so that words equal
    /// to those of a validated call mean handles of this call for the same places, which the
    /// plan lists for the same nodes ([`check_handles`](crate::cache)); for a builder's call, 0.
    #[inline(always)]
    pub(crate) fn push_handle(&mut self, tag: u64, write: bool) {
        let w = match self.handle_place(tag) {
            HandlePlace::Unchecked => 0,
            HandlePlace::Place(p) => 1 << 33 | u64::from(write) << 32 | u64::from(p),
            HandlePlace::Foreign => u64::MAX,
        };
        self.push(w);
    }

    /// What a buffer handle `tag` names, for [`Self::push_handle`] and [`Self::push_arg`].
    #[inline(always)]
    fn handle_place(&self, tag: u64) -> HandlePlace {
        match self.call {
            None => HandlePlace::Unchecked,
            Some(id) => {
                crate::operand::place_of(tag, id).map_or(HandlePlace::Foreign, HandlePlace::Place)
            }
        }
    }

    /// A kernel argument's first word: its length in bytes (bits 0..=15; `0xffff`: the
    /// length follows in a word of its own), whether it is a device scalar (bit 63), its
    /// context (bits 61..=62: none, `node_ctx`, or another one, which [`KernelArgs::pack`]
    /// pushes after the bytes), and its handle (bit 60: it has one; bit 59: written; for a
    /// `graph!` call, bit 57 and in bits 16..=47 the place it names, or bit 58 when it names
    /// none of this call's places, as [`Self::push_handle`]). Returns the other context, whose
    /// word the caller pushes after the bytes (with the device scalar's length), so the
    /// sequence stays one-to-one with what it describes.
    #[inline(always)]
    pub(crate) fn push_arg(
        &mut self,
        len: usize,
        scalar: Option<usize>,
        ctx: Option<CUcontext>,
        node_ctx: Option<CUcontext>,
        access: Option<(u64, bool)>,
    ) -> Option<CUcontext> {
        let other = ctx.filter(|_| ctx != node_ctx);
        let ctx_kind: u64 = match (ctx, other) {
            (None, _) => 0,
            (Some(_), None) => 1,
            (Some(_), Some(_)) => 2,
        };
        let handle = match access {
            None => 0,
            Some((tag, write)) => {
                let place = match self.handle_place(tag) {
                    HandlePlace::Unchecked => 0,
                    HandlePlace::Place(p) => 1 << 57 | u64::from(p) << 16,
                    HandlePlace::Foreign => 1 << 58,
                };
                1 << 60 | u64::from(write) << 59 | place
            }
        };
        let short = len.min(0xffff) as u64;
        self.push(short | u64::from(scalar.is_some()) << 63 | ctx_kind << 61 | handle);
        if short == 0xffff {
            self.push(len as u64);
        }
        other
    }

    /// One word: written out, or compared with `last`'s next word (a word past `last`'s end
    /// differs in every bit).
    #[inline(always)]
    pub(crate) fn push(&mut self, w: u64) {
        match &mut self.out {
            Some(out) => out.push(w),
            None => {
                let x = self.last.get(self.pos).map_or(!w, |&x| x);
                self.diff |= x ^ w;
                self.pos += 1;
            }
        }
    }

    /// `b` as 8-byte words, the last one zero-padded.
    #[inline(always)]
    pub(crate) fn push_bytes(&mut self, b: &[u8]) {
        match (<[u8; 8]>::try_from(b), <[u8; 4]>::try_from(b)) {
            (Ok(w), _) => self.push(u64::from_ne_bytes(w)),
            (_, Ok(w)) => self.push(u64::from(u32::from_ne_bytes(w))),
            _ => {
                for c in b.chunks(8) {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    self.push(u64::from_ne_bytes(w));
                }
            }
        }
    }
}

/// The first word of a `graph!` call's words made with its statements ([`CallWords`]): no
/// word sequence [`NodeParams::pack`](super::NodeParams) makes for a node list starts with it
/// (those start with a node kind, 2 to 4, a kernel's first word, whose top 4 bits are
/// [`KERNEL_TAG`]'s, or 0 for an absent node), so the two kinds of words never compare equal.
pub(crate) const WORDS_TAG: u64 = 0xc0de_0000_0000_0001;

/// The second word of a call's words that hold every place's guard ([`CallWords::guard`],
/// put in before any node's): no node's words start with it (see [`WORDS_TAG`]), so a call's
/// words with guards never equal words without.
pub(crate) const GUARDS_TAG: u64 = 0xc0de_0000_0000_0002;

/// The word that marks a run's later iterations in a call's words
/// ([`word_repeat`](crate::__private::word_repeat)), where a statement evaluated by itself
/// would have put its node's first word: no node's words start with it (see [`WORDS_TAG`]).
pub(crate) const RUN_TAG: u64 = 0xc0de_0000_0000_0003;

/// A place of several buffers in a call's guard words ([`CallWords::guard`]), or'ed with
/// their count: no single buffer's range starts there (the top of the address space).
const PARTS_TAG: u64 = 0xffff_0000_0000_0000;

/// A guard's second word: its length in bytes, and bit 63 when written. (A range of 2^63
/// bytes or more does not exist.)
#[inline(always)]
fn guard_word(bytes: u64, write: bool) -> u64 {
    bytes | u64::from(write) << 63
}

/// How a guard's range `(start, bytes, write)` differs from its words `expected` (a pair of
/// [`CallWords::guards_ahead`]): `0` when they are equal, so that an array's differences fold
/// into one word.
#[inline(always)]
pub(crate) fn guard_diff(expected: [u64; 2], (start, bytes, write): (u64, u64, bool)) -> u64 {
    (expected[0] ^ start) | (expected[1] ^ guard_word(bytes, write))
}

/// The unchanged-call words of one `graph!` call, made statement by statement as its body is
/// evaluated ([`word_node`](crate::__private::word_node)), while each node's parameters are
/// fresh in the processor's cache, and compared as they are made with the words of the
/// variant the cache launched last. Made by [`GraphCache::words`](crate::GraphCache::words),
/// handed back with the call ([`GraphCache::run_words`](crate::GraphCache::run_words)), which
/// gives that variant its words back. Not public API.
#[doc(hidden)]
pub struct CallWords {
    /// The [`GraphCache`](crate::GraphCache) that made it (its id).
    pub(crate) cache: u64,
    /// The variant whose words `last` are: its index (`from`, [`NO_VARIANT`] when none) and
    /// serial. (Two fields, not an `Option` of a pair, and `present` 4 bytes: the struct,
    /// moved by value through the expansion, stays at most 128 bytes, which the compiler
    /// moves without a `memcpy` call: 90 instructions of a one-kernel call otherwise,
    /// callgrind on `.ci/host-profile`'s stub driver.)
    pub(crate) from: u32,
    pub(crate) from_serial: u64,
    pub(crate) plan: &'static crate::plan::Plan,
    /// The `graph!` call whose handles are packed by place.
    pub(crate) call: u64,
    pub(crate) last: Vec<u64>,
    pub(crate) out: Vec<u64>,
    /// See [`Pack`]: words made so far equal to `last`'s first ones, while not `diverged`.
    pub(crate) pos: usize,
    pub(crate) diverged: bool,
    /// Whether every node so far packed (and the cache is in graph mode): only then are the
    /// words compared and kept.
    pub(crate) ok: bool,
    /// Nodes packed.
    pub(crate) present: u32,
    /// Whether every place's guard was put in, as its place was acquired
    /// ([`Guards::with_words`](crate::__private::Guards::with_words)): equal words then mean
    /// equal address ranges, so the aliasing check of the call they equal holds.
    pub(crate) guarded: bool,
    /// Whether a guard's buffer lives on a stream other than the call's (or is a place of
    /// several buffers): only then has the stream ledger anything to order. Meaningful only
    /// when `guarded`.
    pub(crate) foreign: bool,
    /// Whether the words up to the end of the guards (every place's) equal `last`'s, in
    /// graph mode: this call's buffers have the address ranges of the call that made `last`,
    /// which passed the aliasing check with them. Meaningful only when `guarded`.
    pub(crate) guards_same: bool,
    /// Where each node's words begin, in statement order ([`WordItem`]): a changed call's
    /// nodes whose words equal those of the exec it updates need no validation or comparison
    /// (`GraphCache::clean_nodes`).
    pub(crate) items: Vec<WordItem>,
}

/// [`CallWords::from`]'s index when its words were compared with no variant's.
pub(crate) const NO_VARIANT: u32 = u32::MAX;

/// Where a statement's node (or a run's later nodes) begins in a call's words
/// ([`CallWords::items`]). Its words end where the next item's begin (or at the words' end);
/// the words before the first node item are the call's own (its tag and every place's guard,
/// put in before any node's: [`Guards::take_words`](crate::__private::Guards::take_words)).
///
/// Items of no nodes come first, one per array acquired in one loop
/// ([`acquire_mut_each`](crate::__private::acquire_mut_each)): the span of the call's own words
/// that its elements' guards and contexts are ([`CallWords::elements`]), `template` words from
/// `start` ([`UNKNOWN_SPAN`] when not known).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct WordItem {
    /// The position of its first word.
    pub(crate) start: usize,
    /// The node-list entries it stands for, in order: 1 for a node, `n` for a run's later
    /// iterations ([`word_repeat`](crate::__private::word_repeat)); 0 for an array's span.
    pub(crate) nodes: u64,
    /// For a run: the items before it that its nodes depend on besides its own words (its
    /// first iteration's nodes, at most this many); 0 for a node; for an array's span, its
    /// length in words.
    pub(crate) template: u32,
}

/// An array span's length ([`WordItem::template`]) that did not fit: its words are not known
/// apart from the other places', so every place's are compared.
pub(crate) const UNKNOWN_SPAN: u32 = u32::MAX;

impl CallWords {
    /// Packs one node ([`NodeParams::pack`](super::NodeParams), [`compare_node`]): a node that
    /// does not pack stops the words (the call then takes the node-by-node path).
    #[inline(always)]
    pub(crate) fn node<W: NodeWords + ?Sized>(&mut self, node: &W) {
        if self.ok {
            self.item(1, 0);
            let CallWords { call, last, pos, diverged, out, .. } = self;
            self.ok = compare_node(Some(*call), last, pos, diverged, out, node);
            self.present += 1;
        }
    }
}

impl CallWords {
    /// The words made so far: their count, compared in place or written out.
    #[inline(always)]
    fn position(&self) -> usize {
        if self.diverged { self.out.len() } else { self.pos }
    }

    /// Where the words made next begin (for [`Self::elements`]).
    #[inline(always)]
    pub(crate) fn at(&self) -> usize {
        self.position()
    }

    /// The words from `start` to here are the guards and contexts of the elements of one
    /// array acquired in one loop, which is all that a run's later nodes depend on of the
    /// call's own words besides the run's and its first iteration's words: an item of no
    /// nodes marks them ([`WordItem`]).
    #[inline(always)]
    pub(crate) fn elements(&mut self, start: usize) {
        if self.ok {
            let len = self.position().checked_sub(start).and_then(|l| u32::try_from(l).ok());
            let template = len.filter(|&l| l != UNKNOWN_SPAN).unwrap_or(UNKNOWN_SPAN);
            self.items.push(WordItem { start, nodes: 0, template });
        }
    }

    /// An item of `nodes` node-list entries beginning here ([`WordItem`]).
    #[inline(always)]
    fn item(&mut self, nodes: u64, template: u32) {
        let start = self.position();
        self.items.push(WordItem { start, nodes, template });
    }

    /// A word, compared as a node's are (not counted as a node).
    #[inline(always)]
    pub(crate) fn word(&mut self, w: u64) {
        if self.ok {
            self.words(&[w]);
        }
    }

    /// Words compared with `last` in place, while they agree (no store), else written out:
    /// [`compare_node`] without a node, inlined where the words are made.
    #[inline(always)]
    fn words<const K: usize>(&mut self, w: &[u64; K]) {
        if !self.diverged {
            let p = self.pos;
            if self.last.get(p..p + K).is_some_and(|l| l == w) {
                self.pos = p + K;
                return;
            }
            diverge(&self.last, p, &mut self.diverged, &mut self.out);
        }
        self.out.extend_from_slice(w);
    }

    /// The `2 * M` words of `last` that the guards of `M` places acquired in one loop
    /// ([`acquire_mut_each`](crate::__private::acquire_mut_each)) must equal for the call to
    /// stay unchanged, as `[start, guard_word]` pairs: `None` unless the words are compared
    /// in place (kept, not diverged) and `last` holds that many more. The caller compares
    /// them all and then [`Self::skip_guards`], or puts each guard with [`Self::guard`].
    #[inline(always)]
    pub(crate) fn guards_ahead<const M: usize>(&self) -> Option<&[[u64; 2]; M]> {
        if !self.ok || self.diverged {
            return None;
        }
        let rest = self.last.get(self.pos..self.pos.checked_add(2 * M)?)?;
        rest.as_chunks::<2>().0.try_into().ok()
    }

    /// The `M` guards of [`Self::guards_ahead`], found equal to them.
    #[inline(always)]
    pub(crate) fn skip_guards<const M: usize>(&mut self) {
        self.pos += 2 * M;
    }

    /// A place's guard (see [`Self::guarded`]): its address range and whether it is written
    /// (`(start, bytes, write)`).
    #[inline(always)]
    pub(crate) fn guard(&mut self, (start, bytes, write): (u64, u64, bool)) {
        if self.ok {
            self.words(&[start, guard_word(bytes, write)]);
        }
    }

    /// [`Self::guard`] of a place of several buffers: their count, then each one's.
    #[inline(never)]
    pub(crate) fn guard_parts(&mut self, children: &[crate::operand::Guard<'_>]) {
        if self.ok {
            self.words(&[PARTS_TAG | children.len() as u64]);
            for c in children {
                self.words(&[c.start, guard_word(c.bytes, c.write)]);
            }
        }
    }

    /// One handle as words: its place (as [`Pack::push_handle`], `write` or not), address,
    /// length and context (an operand of a run's later iterations that names no array element:
    /// see [`word_handle`](crate::__private::word_handle)).
    #[inline(always)]
    pub(crate) fn handle<H: crate::operand::ElementHandle>(&mut self, h: &H, write: bool) {
        if self.ok {
            let CallWords { call, last, pos, diverged, out, .. } = self;
            let (tag, addr, len, ctx) = h.fields();
            let pack = |p: &mut Pack<'_>| {
                p.push_handle(tag, write);
                p.push(addr);
                p.push(len);
                p.push(ctx);
                true
            };
            self.ok = compare_node(Some(*call), last, pos, diverged, out, &pack);
        }
    }

    /// `n` more nodes, each equal to one already put in (see
    /// [`word_repeat`](crate::__private::word_repeat)): counted, and marked by one word,
    /// [`RUN_TAG`], where the same statements evaluated one by one would have put a node's.
    /// `first`: the statements of the run's first iteration, the nodes put in last, which
    /// with this item's words (the tag, then [`Self::handle`]'s) and the guards decide the
    /// `n` nodes.
    #[inline(always)]
    pub(crate) fn repeat(&mut self, n: u64, first: u32) {
        if self.ok {
            self.item(n, first);
            self.word(RUN_TAG);
            // At most the node list's length (a plan's, below 2^32 entries).
            self.present += n as u32;
        }
    }
}

macro_rules! kernel_args {
    ($($t:ident $i:tt),*) => {
        impl<$($t: KernelArg),*> KernelArgs for ($($t,)*) {
            const LEN: usize = 0 $(+ { let _ = $i; 1 })*;
            #[allow(unused_variables)]
            fn for_each(&self, f: &mut dyn FnMut(&[u8])) {
                $(f(self.$i.bytes());)*
            }
            #[allow(unused_variables)]
            fn for_each_context(&self, f: &mut dyn FnMut(CUcontext)) {
                $(if let Some(c) = self.$i.context() { f(c) })*
            }
            #[allow(unused_variables, unused_mut)]
            #[inline]
            fn accesses(&self, out: &mut Accesses) -> usize {
                let mut n = 0;
                $(if let (Some((t, w)), Some(c)) = (self.$i.access(), self.$i.context()) {
                    out[n] = (t, w, c);
                    n += 1;
                })*
                n
            }
            #[allow(unused_variables)]
            fn device_scalars(&self, f: &mut dyn FnMut(usize, usize)) {
                $(if let Some(len) = self.$i.device_scalar_len() { f($i, len) })*
            }
            #[allow(unused_mut)]
            fn pointers(&self) -> u16 {
                let mut m = 0u16;
                $(if self.$i.context().is_some() { m |= 1 << $i; })*
                m
            }
            #[allow(unused_variables)]
            fn conditions(&self, f: &mut dyn FnMut(usize, u32, u64)) {
                $(if let Some((slot, owner)) = self.$i.condition() { f($i, slot, owner) })*
            }
            #[allow(unused_variables)]
            #[inline(always)]
            fn pack(&self, out: &mut Pack<'_>, node_ctx: Option<CUcontext>) {
                $(
                    let b = self.$i.bytes();
                    if arg_form(&self.$i) != 0xf {
                        // A plain argument: its length is in the layout.
                        out.push_bytes(b);
                    } else {
                    let scalar = self.$i.device_scalar_len();
                    let access = self.$i.access();
                    let other = out.push_arg(b.len(), scalar, self.$i.context(), node_ctx, access);
                    out.push_bytes(b);
                    if let Some(c) = other {
                        out.push(c as u64);
                    }
                    if let Some(len) = scalar {
                        out.push(len as u64);
                    }
                    }
                )*
            }
            #[allow(unused_mut)]
            #[inline(always)]
            fn layout(&self) -> u64 {
                let mut l = 0u64;
                $(l |= arg_form(&self.$i) << (4 * $i);)*
                l
            }
            #[allow(unused_variables, unused_mut)]
            fn buffers(&self, out: &mut BufferArgs) -> usize {
                let mut n = 0;
                $(if let (Some((start, bytes)), Some((_, write)), Some(ctx)) =
                    (self.$i.range(), self.$i.access(), self.$i.context())
                {
                    out[n] = BufferArg { arg: $i, start, bytes, write, ctx };
                    n += 1;
                })*
                n
            }
        }
    };
}
kernel_args!();
kernel_args!(A 0);
kernel_args!(A 0, B 1);
kernel_args!(A 0, B 1, C 2);
kernel_args!(A 0, B 1, C 2, D 3);
kernel_args!(A 0, B 1, C 2, D 3, E 4);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

/// Grid, block and dynamic shared memory of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchDims {
    /// Grid dimensions, blocks.
    pub grid: (u32, u32, u32),
    /// Block dimensions, threads.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory, bytes.
    pub shared_bytes: u32,
}

impl From<LaunchConfig> for LaunchDims {
    fn from(c: LaunchConfig) -> Self {
        LaunchDims { grid: c.grid_dim, block: c.block_dim, shared_bytes: c.shared_mem_bytes }
    }
}
impl From<(u32, u32)> for LaunchDims {
    /// `(grid, block)`, 1-D.
    fn from((g, b): (u32, u32)) -> Self {
        LaunchDims { grid: (g, 1, 1), block: (b, 1, 1), shared_bytes: 0 }
    }
}
impl From<((u32, u32, u32), (u32, u32, u32))> for LaunchDims {
    /// `(grid, block)`, 3-D.
    fn from((grid, block): ((u32, u32, u32), (u32, u32, u32))) -> Self {
        LaunchDims { grid, block, shared_bytes: 0 }
    }
}
impl LaunchDims {
    /// A 1-D launch of `grid` blocks of `block` threads, no dynamic shared memory.
    pub fn new(grid: u32, block: u32) -> Self {
        LaunchDims { grid: (grid, 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub fn shared(self, bytes: u32) -> Self {
        LaunchDims { shared_bytes: bytes, ..self }
    }
}

mod launch_sealed {
    pub trait Sealed {}
}

/// A launch configuration `.launch(cfg)` takes (sealed): a cudarc `LaunchConfig`, a
/// [`LaunchDims`] (`LaunchDims::new(grid, block).shared(bytes)`), `(grid, block)` with `u32`
/// (1-D) or `(u32, u32, u32)` (3-D) dimensions, or `((gx, gy, gz), (bx, by, bz), shared_bytes)`.
/// A tuple of three `u32`s is refused: it reads as a 3-D grid as easily as
/// `(grid, block, shared_bytes)`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a launch configuration",
    label = "expected `LaunchConfig`, `LaunchDims`, `(grid, block)` or `((gx, gy, gz), (bx, by, bz))`",
    note = "a tuple of three numbers is refused: it reads as `(grid, block, shared_bytes)` as easily as a 3-D grid; write `LaunchDims::new(grid, block).shared(shared_bytes)` for a 1-D launch with dynamic shared memory, `((gx, gy, gz), (bx, by, bz))` for a 3-D grid, and `((gx, gy, gz), (bx, by, bz), shared_bytes)` for both"
)]
pub trait LaunchCfg: launch_sealed::Sealed {
    /// Grid, block and dynamic shared memory.
    fn dims(self) -> LaunchDims;
}
macro_rules! launch_cfg {
    ($($t:ty => |$v:ident| $e:expr;)*) => {$(
        impl launch_sealed::Sealed for $t {}
        impl LaunchCfg for $t {
            fn dims(self) -> LaunchDims {
                let $v = self;
                $e
            }
        }
    )*};
}
launch_cfg! {
    LaunchConfig => |c| LaunchDims { grid: c.grid_dim, block: c.block_dim, shared_bytes: c.shared_mem_bytes };
    LaunchDims => |d| d;
    (u32, u32) => |t| LaunchDims::new(t.0, t.1);
    ((u32, u32, u32), (u32, u32, u32)) => |t| LaunchDims { grid: t.0, block: t.1, shared_bytes: 0 };
    ((u32, u32, u32), (u32, u32, u32), u32) => |t| LaunchDims { grid: t.0, block: t.1, shared_bytes: t.2 };
}

/// One kernel of a `kernels!` struct's module: its function, the context the module was loaded
/// in (where its nodes run) and its name. `Functions` holds one per kernel method, so that a
/// kernel call holds one reference to it (a node value 24 bytes smaller than with the function,
/// context and name each).
pub(crate) struct KernelEntry {
    pub(crate) function: CudaFunction,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) name: &'static str,
}

/// A kernel function of a `kernels!` struct with the context its module was loaded in: the
/// context (device) its nodes run on. Made by generated code (`Functions::kernel`).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct KernelFn<'f> {
    pub(crate) entry: &'f KernelEntry,
}

impl<'f> KernelFn<'f> {
    /// The kernel of `entry`.
    #[inline(always)]
    pub(crate) fn new(entry: &'f KernelEntry) -> Self {
        KernelFn { entry }
    }
}

/// A typed kernel call made by a `kernels!` method, waiting for `.launch(cfg)`.
#[must_use = "a kernel call does nothing until `.launch(cfg)` inside `graph!`"]
pub struct KernelCall<'f, A> {
    /// The function, the context its module was loaded in (its node runs there) and its name.
    entry: &'f KernelEntry,
    args: A,
    /// Declared `#[programmatic]` in `kernels!`: every thread waits for the kernels before it
    /// (`griddepcontrol.wait`) before it touches memory or returns.
    programmatic: bool,
}

impl<'f, A: KernelArgs> KernelCall<'f, A> {
    /// Made by the methods of a [`kernels!`](crate::kernels) struct (`_name`: the kernel's name,
    /// which `function` holds).
    ///
    /// # Safety
    /// `function` takes exactly the parameters `A` passes (their types, in order), and reads
    /// only the buffers passed as [`DevRead`] and writes only those passed as [`DevWrite`],
    /// within their lengths: the contract of `kernels!`'s `load`.
    #[doc(hidden)]
    pub unsafe fn new(function: KernelFn<'f>, _name: &'static str, args: A) -> Self {
        KernelCall { entry: function.entry, args, programmatic: false }
    }

    /// Made by the methods of a [`kernels!`](crate::kernels) struct for a kernel declared
    /// `#[programmatic]`: edges into its node from kernel nodes become programmatic edges, and
    /// its eager launch lets it start before the kernel before it finished.
    ///
    /// # Safety
    /// As [`Self::new`]; and, when it runs on a device of compute capability 9.0 or later,
    /// every thread of `function` executes `griddepcontrol.wait` (CUDA C:
    /// `cudaGridDependencySynchronize()`) before it reads or writes any buffer and before it
    /// returns: the `#[programmatic]` contract of `kernels!`'s `load`.
    #[doc(hidden)]
    pub unsafe fn new_programmatic(function: KernelFn<'f>, _name: &'static str, args: A) -> Self {
        KernelCall { entry: function.entry, args, programmatic: true }
    }

    /// Launch configuration: a cudarc `LaunchConfig`, a [`LaunchDims`]
    /// (`LaunchDims::new(grid, block).shared(bytes)`), or `(grid, block)` with `u32` or
    /// `(u32, u32, u32)` dimensions (see [`LaunchCfg`]).
    ///
    /// Not marked `#[inline]`: inlined into every statement, it makes the launch in place (4 µs
    /// less of an unchanged 1000-node call, `.ci/host-profile`), but a 1000-statement body then
    /// takes about 1 s longer to build (2.5 s instead of 1.5, `build_cost`).
    pub fn launch(self, cfg: impl LaunchCfg) -> KernelLaunch<'f, A> {
        KernelLaunch { call: self, dims: cfg.dims() }
    }
}

/// A kernel launch: function, arguments and launch dimensions of one kernel node.
pub struct KernelLaunch<'f, A> {
    call: KernelCall<'f, A>,
    dims: LaunchDims,
}

impl<'f, A: KernelArgs> KernelLaunch<'f, A> {
    pub(crate) fn parts(&self) -> (&'f CudaFunction, &A) {
        (&self.call.entry.function, &self.call.args)
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.call.entry.name
    }
    /// The CUDA function.
    pub fn function(&self) -> &CudaFunction {
        &self.call.entry.function
    }
    /// The context the function was loaded in (its `kernels!` struct's): the node runs on its
    /// device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.call.entry.ctx
    }
    /// Grid, block and shared memory.
    pub fn dims(&self) -> LaunchDims {
        self.dims
    }
    /// Whether the kernel is declared `#[programmatic]` in `kernels!` (see
    /// [`EdgeKind`](crate::EdgeKind)).
    pub fn programmatic(&self) -> bool {
        self.call.programmatic
    }
}

impl<A: KernelArgs> KernelLaunch<'_, A> {
    /// Calls `f` with this launch as the driver's kernel node parameters
    /// (`CU_GRAPH_NODE_TYPE_KERNEL`), laid out as the cache lays out its kernel nodes;
    /// `kernelParams` points into storage that lives only during `f`.
    pub(crate) fn with_node_params<R>(&self, f: impl FnOnce(&mut CUgraphNodeParams) -> R) -> R {
        let mut state = KernelState::new(self);
        // The node's own context: no `ctx` in the parameters (the current one, as before).
        let ctx = state.ctx;
        Kernel::with_params(&mut state, ctx, f)
    }

    /// Each argument's size in bytes, in parameter order.
    pub(crate) fn arg_sizes(&self) -> Vec<u32> {
        let mut sizes = Vec::with_capacity(A::LEN);
        self.call.args.for_each(&mut |b| sizes.push(b.len() as u32));
        sizes
    }

    /// Each buffer argument into `out`; returns how many (see [`KernelArgs::buffers`]).
    pub(crate) fn buffers(&self, out: &mut BufferArgs) -> usize {
        self.call.args.buffers(out)
    }
}

/// Object-safe view of a [`KernelLaunch`], used by the cache (sealed).
pub trait KernelNode: sealed::Sealed {
    /// The CUDA function's handle.
    fn function(&self) -> CUfunction;
    /// The function itself, which keeps its module loaded while a graph holds it.
    fn function_owner(&self) -> Option<&CudaFunction> {
        None
    }
    /// The context the function was loaded in, where the node runs (`None`: the call's).
    fn context(&self) -> Option<&Arc<CudaContext>> {
        None
    }
    /// [`Self::context`]'s handle.
    #[doc(hidden)]
    fn node_context(&self) -> Option<CUcontext> {
        self.context().map(|c| c.cu_ctx())
    }
    /// Grid, block and shared memory.
    fn dims(&self) -> LaunchDims;
    /// Whether the kernel is declared `#[programmatic]` (waits for the kernels before it in
    /// every thread, see [`EdgeKind`](crate::EdgeKind)).
    fn programmatic(&self) -> bool {
        false
    }
    /// Number of arguments.
    fn arg_count(&self) -> usize;
    /// Calls `f` with each argument's bytes, in order.
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8]));
    /// Each buffer argument's `(tag, written, context)` (see [`Handle`]) into `out`; returns how
    /// many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// Each [`Condition`](crate::Condition) argument's `(index, slot, owner)`.
    #[doc(hidden)]
    fn for_each_condition(&self, _f: &mut dyn FnMut(usize, u32, u64)) {}
    /// Each [`DeviceScalar`](crate::DeviceScalar) argument's `(index, buffer length)`.
    #[doc(hidden)]
    fn for_each_device_scalar(&self, _f: &mut dyn FnMut(usize, usize)) {}
    /// Bit `i` set when argument `i` carries a device address: only those may be a graph-owned
    /// buffer's placeholder, which the cache resolves (see `kind::alloc`); a plain scalar is
    /// sent as it is, whatever its value. The default, every argument, suits kinds whose
    /// arguments are all addresses or too small to be one.
    #[doc(hidden)]
    fn pointer_args(&self) -> u16 {
        u16::MAX
    }
    /// Appends to `out` everything of this node that an exec's node and the call's validation
    /// depend on: function, context (unless the function decides it, see [`pack_head`]),
    /// launch dimensions, `#[programmatic]`, argument count and each argument's form (which
    /// also says which carry device addresses), bytes, context, device scalar length and
    /// buffer handle (as the place it names in the call, [`Pack::push_handle`]), in an encoding
    /// that is unambiguous (equal words mean equal parameters). Returns `false` for a node that does
    /// not pack: the call then takes the node-by-node path. Two calls of one variant whose
    /// words are equal need no validation and no update (the cache's unchanged call,
    /// [`Stats::unchanged_calls`](crate::Stats::unchanged_calls)).
    #[doc(hidden)]
    fn pack(&self, _out: &mut Pack<'_>) -> bool {
        false
    }
}

/// A kernel node's words in a call's ([`NodeParams::pack`](super::NodeParams) and
/// [`IntoNode::words`](super::IntoNode)): [`KernelNode::pack`], whose first word
/// ([`pack_head`]) carries the kind.
#[inline(always)]
pub(crate) fn pack_node<K: KernelNode + ?Sized>(k: &K, out: &mut Pack<'_>) -> bool {
    k.pack(out)
}

/// The top 4 bits of a kernel node's first word ([`pack_head`]): no other node's words start
/// with a word this large (theirs start with their kind, 2 to 4, or 0 for an absent node), nor
/// a call's words ([`WORDS_TAG`]).
const KERNEL_TAG: u64 = 1 << 60;

/// The words [`KernelNode::pack`] puts before a kernel node's arguments, one-to-one with what
/// they describe:
/// - a first word: [`KERNEL_TAG`]; bit 0 `programmatic`; bit 1 a context word follows; bit 2
///   the launch is 1-D with block and shared memory below 2^16 (one word of dimensions); bits
///   4..=8 the number of arguments; for at most 8 arguments, bits 16..=47 the argument
///   `layout` ([`KernelArgs::layout`]);
/// - the function's handle;
/// - for more than 8 arguments, the layout;
/// - with `ctx: Some(c)`, the context (`c`, 0 for none). `ctx: None` for a node whose context
///   its function decides: a `kernels!` kernel's, loaded in its struct's context (a function
///   handle names one function of one module of one context while it is loaded, and a
///   variant's nodes keep the functions of the words they were last launched with loaded);
/// - the dimensions: `grid.x | block.x << 32 | shared_bytes << 48` for the 1-D form, else
///   `(grid.x, grid.y)`, `(grid.z, block.x)`, `(block.y, block.z)` and `shared_bytes`, two
///   32-bit halves a word.
#[doc(hidden)]
#[inline(always)]
pub fn pack_head(
    out: &mut Pack<'_>,
    func: CUfunction,
    ctx: Option<Option<CUcontext>>,
    d: &LaunchDims,
    programmatic: bool,
    args: usize,
    layout: u64,
) {
    let pair = |a: u32, b: u32| u64::from(a) | u64::from(b) << 32;
    let one_d = d.grid.1 == 1
        && d.grid.2 == 1
        && d.block.1 == 1
        && d.block.2 == 1
        && d.block.0 < 1 << 16
        && d.shared_bytes < 1 << 16;
    let few = args <= 8;
    out.push(
        KERNEL_TAG
            | u64::from(programmatic)
            | u64::from(ctx.is_some()) << 1
            | u64::from(one_d) << 2
            | (args as u64 & 0x1f) << 4
            | if few { (layout & 0xffff_ffff) << 16 } else { 0 },
    );
    out.push(func as u64);
    if !few {
        out.push(layout);
    }
    if let Some(c) = ctx {
        out.push(c.map_or(0, |c| c as u64));
    }
    if one_d {
        out.push(pair(d.grid.0, d.block.0) | u64::from(d.shared_bytes) << 48);
    } else {
        out.push(pair(d.grid.0, d.grid.1));
        out.push(pair(d.grid.2, d.block.0));
        out.push(pair(d.block.1, d.block.2));
        out.push(u64::from(d.shared_bytes));
    }
}

impl<A: KernelArgs> KernelNode for KernelLaunch<'_, A> {
    fn for_each_condition(&self, f: &mut dyn FnMut(usize, u32, u64)) {
        self.call.args.conditions(f)
    }
    fn for_each_device_scalar(&self, f: &mut dyn FnMut(usize, usize)) {
        self.call.args.device_scalars(f)
    }
    fn pointer_args(&self) -> u16 {
        self.call.args.pointers()
    }
    fn function(&self) -> CUfunction {
        self.call.entry.function.cu_function()
    }
    fn function_owner(&self) -> Option<&CudaFunction> {
        Some(&self.call.entry.function)
    }
    fn context(&self) -> Option<&Arc<CudaContext>> {
        Some(&self.call.entry.ctx)
    }
    fn dims(&self) -> LaunchDims {
        self.dims
    }
    fn programmatic(&self) -> bool {
        self.call.programmatic
    }
    fn arg_count(&self) -> usize {
        A::LEN
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        self.call.args.for_each(f)
    }
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.call.args.accesses(out)
    }
    #[inline(always)]
    fn pack(&self, out: &mut Pack<'_>) -> bool {
        let (call, args) = (&self.call, &self.call.args);
        // The context is the one the function was loaded in (`Functions::kernel`): implied by
        // the function's handle, not packed (see `pack_head`); the arguments' contexts are
        // packed relative to it.
        let func = call.entry.function.cu_function();
        pack_head(out, func, None, &self.dims, call.programmatic, A::LEN, args.layout());
        args.pack(out, Some(call.entry.ctx.cu_ctx()));
        true
    }
}

/// The kernel entry a statement's kernel call was made with (see
/// [`made_by`](crate::__private::made_by)). Sealed.
#[doc(hidden)]
pub trait MadeBy: sealed::Sealed {
    /// The address of its [`KernelEntry`].
    fn entry(&self) -> *const ();
}
impl<A: KernelArgs> MadeBy for KernelLaunch<'_, A> {
    #[inline(always)]
    fn entry(&self) -> *const () {
        (self.call.entry as *const KernelEntry).cast()
    }
}

/// A kernel statement's value in `graph!`: only a [`KernelLaunch`], made by a
/// [`kernels!`](crate::kernels) method and `.launch(cfg)` (sealed).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel launch made by a `kernels!` method",
    label = "a kernel statement must be `KERNELS.name(args…).launch(cfg)` with a kernel declared in `kernels!`",
    note = "methods of your own on a `kernels!` struct cannot be graph statements: the graph could not see which buffers they use"
)]
pub trait LaunchNode: sealed::Sealed {
    /// The launch itself (an associated type, so that a refused statement reports one error).
    type Launch: super::IntoNode;
    /// The launch itself.
    fn into_statement(self) -> Self::Launch;
}
impl<'f, A: KernelArgs> LaunchNode for KernelLaunch<'f, A> {
    type Launch = Self;
    #[inline(always)]
    fn into_statement(self) -> Self {
        self
    }
}

/// `a == b` for two argument byte strings of one length, without a `memcmp` call for the
/// 4- and 8-byte arguments that make up almost every kernel's list (the comparison runs for
/// every argument of every node on every call).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    match (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) {
        (Ok(x), Ok(y)) => u64::from_ne_bytes(x) == u64::from_ne_bytes(y),
        _ => match (<[u8; 4]>::try_from(a), <[u8; 4]>::try_from(b)) {
            (Ok(x), Ok(y)) => u32::from_ne_bytes(x) == u32::from_ne_bytes(y),
            _ => a == b,
        },
    }
}

/// A kernel node's last parameters: the argument bytes live in `args`, each argument at an
/// 8-byte-aligned offset, so `kernelParams` can point into it.
pub(crate) struct KernelState {
    func: CUfunction,
    /// The context the function was loaded in (null: the call's), where the node runs.
    ctx: CUcontext,
    /// Keeps `func`'s module loaded while this node may run or be updated.
    owner: Option<CudaFunction>,
    /// The function the variant's template graph names for this node (the one it was built
    /// with; per-node updates change only the exec), kept loaded while the template lives.
    template: Option<CudaFunction>,
    dims: LaunchDims,
    /// Declared `#[programmatic]`, as when the node was added: the kinds of its edges follow
    /// from it, so a call whose kernel for this node is declared otherwise needs another graph.
    programmatic: bool,
    args: Box<[u64]>,
    offsets: Box<[(u32, u32)]>,
    /// [`Condition`](crate::Condition) arguments `(index, slot)`: their stored bytes are the
    /// slot; the driver gets the bound conditional handle ([`super::conditional::handle`]).
    conds: Box<[(u32, u32)]>,
    /// [`KernelNode::pointer_args`]: the arguments a placeholder may be resolved in.
    pointers: u16,
}

impl KernelState {
    fn new(k: &dyn KernelNode) -> Self {
        let mut offsets = Vec::with_capacity(k.arg_count());
        let mut words = 0u32;
        k.for_each_arg(&mut |b| {
            offsets.push((words * 8, b.len() as u32));
            words += (b.len() as u32).div_ceil(8);
        });
        let mut s = KernelState {
            func: k.function(),
            ctx: k.node_context().unwrap_or(ptr::null_mut()),
            owner: k.function_owner().cloned(),
            template: k.function_owner().cloned(),
            dims: k.dims(),
            programmatic: k.programmatic(),
            args: vec![0u64; words as usize].into_boxed_slice(),
            offsets: offsets.into_boxed_slice(),
            conds: Box::new([]),
            pointers: k.pointer_args(),
        };
        let mut conds = Vec::new();
        k.for_each_condition(&mut |i, slot, _| conds.push((i as u32, slot)));
        s.conds = conds.into_boxed_slice();
        let stored = s.store_args(k);
        debug_assert!(stored.is_some(), "storage laid out from `k` itself");
        s
    }

    fn arg_bytes_mut(&mut self) -> &mut [u8] {
        let len = self.args.len() * 8;
        // SAFETY: `args` is `len` initialized bytes; u8 has no alignment or validity invariant.
        unsafe { core::slice::from_raw_parts_mut(self.args.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Copies `k`'s argument bytes in; returns whether any byte changed, or `None` when `k`'s
    /// arguments have other sizes than these were stored with (a builder node of another
    /// kernel), after which these hold no usable arguments and need [`Self::new`].
    fn store_args(&mut self, k: &dyn KernelNode) -> Option<bool> {
        if k.arg_count() != self.offsets.len() {
            return None;
        }
        let offsets = core::mem::take(&mut self.offsets);
        let bytes = self.arg_bytes_mut();
        let (mut changed, mut same_layout) = (false, true);
        let mut i = 0;
        k.for_each_arg(&mut |b| {
            match offsets.get(i) {
                Some(&(off, len)) if len as usize == b.len() => {
                    let slot = &mut bytes[off as usize..(off + len) as usize];
                    if !same_bytes(slot, b) {
                        slot.copy_from_slice(b);
                        changed = true;
                    }
                }
                _ => same_layout = false,
            }
            i += 1;
        });
        self.offsets = offsets;
        same_layout.then_some(changed)
    }

    /// Calls `f` with the driver's view of these parameters. `kernelParams` points into
    /// `self.args` and is only valid during `f`. `ctx`: the context of the graph (or stream);
    /// a node of another context names its own in the parameters' `ctx` (a kernel of another
    /// device in a multi-device graph), else the field stays null (the current context).
    fn with_params<R>(
        &mut self,
        ctx: CUcontext,
        f: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS_v3) -> R,
    ) -> R {
        let Self { func, ctx: own, dims, args, offsets, conds, pointers, .. } = self;
        let layout = ArgLayout { offsets, pointers: *pointers, conds };
        params_of((*func, *own, ctx), *dims, args, &layout, f)
    }
}

/// Where a kernel's argument bytes lie in its stored words (see [`params_of`]).
struct ArgLayout<'a> {
    /// Each argument's `(byte offset, length)` in the words.
    offsets: &'a [(u32, u32)],
    /// [`KernelNode::pointer_args`].
    pointers: u16,
    /// [`Condition`](crate::Condition) arguments `(index, slot)`.
    conds: &'a [(u32, u32)],
}

/// Calls `f` with the driver's view of a kernel's parameters: function `func` of context
/// `own` (null: the call's), launched in `ctx` (the graph's or stream's), its argument bytes
/// in `args` at `layout`. `kernelParams` points into `args` and is only valid during `f`.
/// A node of another context names its own in the parameters' `ctx` (a kernel of another
/// device in a multi-device graph), else the field stays null (the current context).
fn params_of<R>(
    (func, own, ctx): (CUfunction, CUcontext, CUcontext),
    d: LaunchDims,
    args: &mut [u64],
    layout: &ArgLayout<'_>,
    f: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS_v3) -> R,
) -> R {
    let own = if own.is_null() || own == ctx { ptr::null_mut() } else { own };
    let mut ptrs = [ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
    let base = args.as_mut_ptr().cast::<u8>();
    for (p, &(off, len)) in ptrs.iter_mut().zip(layout.offsets.iter()) {
        debug_assert!((off + len) as usize <= args.len() * 8);
        // SAFETY: `off` is within `args` by construction (`KernelState::new`, `eager_args`).
        *p = unsafe { base.add(off as usize) }.cast();
    }
    // Pointer arguments to graph-owned buffers point at their bound addresses instead of
    // their placeholders (see `super::alloc`): the stored bytes keep the placeholder, so an
    // unchanged argument stays unchanged between calls.
    let mut scratch = [0u64; MAX_KERNEL_PARAMS];
    let all = ptrs.iter_mut().zip(layout.offsets.iter()).zip(&mut scratch).enumerate();
    for (i, ((p, &(off, len)), r)) in all {
        if len != 8 || layout.pointers & (1 << i) == 0 {
            continue;
        }
        let at = off as usize / 8;
        if let Some(&word) = args.get(at)
            && super::alloc::is_placeholder(word)
        {
            *r = super::alloc::resolve(word);
            *p = ptr::from_mut(r).cast();
        }
    }
    // Condition arguments point at the bound handles instead of their slots.
    let mut handles = [0u64; MAX_KERNEL_PARAMS];
    for (h, &(i, slot)) in handles.iter_mut().zip(layout.conds.iter()) {
        *h = super::conditional::handle(slot);
        if let Some(p) = ptrs.get_mut(i as usize) {
            *p = ptr::from_mut(h).cast();
        }
    }
    let params = CUDA_KERNEL_NODE_PARAMS_v3 {
        func,
        gridDimX: d.grid.0,
        gridDimY: d.grid.1,
        gridDimZ: d.grid.2,
        blockDimX: d.block.0,
        blockDimY: d.block.1,
        blockDimZ: d.block.2,
        sharedMemBytes: d.shared_bytes,
        kernelParams: ptrs.as_mut_ptr(),
        extra: raw::NO_EXTRA,
        kern: ptr::null_mut(),
        ctx: own,
    };
    f(&params)
}

/// Argument words an eager launch lays out on the stack ([`eager_args`]); a kernel with more
/// argument bytes is laid out in a [`KernelState`].
const EAGER_WORDS: usize = 64;

/// `k`'s argument bytes laid out in `words` as [`KernelState::new`] lays them out (each
/// argument from a word boundary, its last word zero-padded), and their `(offset, length)` in
/// `offsets`; the words written and the argument count, or `None` when they need more than
/// `words` or [`MAX_KERNEL_PARAMS`] entries. (No allocation: an eager launch made a
/// `KernelState` per kernel per call, two heap blocks and two `CudaFunction` clones, 40 % of
/// eager mode's own host time on the CPU stub driver; and no `memset`/`memcpy` call: each word
/// is written whole.)
fn eager_args<'w>(
    k: &dyn KernelNode,
    words: &'w mut [core::mem::MaybeUninit<u64>; EAGER_WORDS],
    offsets: &mut [(u32, u32); MAX_KERNEL_PARAMS],
) -> Option<(&'w mut [u64], usize)> {
    let (mut n, mut at, mut fits) = (0usize, 0usize, true);
    k.for_each_arg(&mut |b| {
        let end = at + b.len().div_ceil(8);
        match (offsets.get_mut(n), words.get_mut(at..end)) {
            (Some(o), Some(dst)) if fits => {
                *o = ((at * 8) as u32, b.len() as u32);
                if let [w] = dst {
                    // One word (a scalar or a pointer: most arguments).
                    w.write(word_of(b));
                } else {
                    for (w, c) in dst.iter_mut().zip(b.chunks(8)) {
                        w.write(word_of(c));
                    }
                }
            }
            _ => fits = false,
        }
        n += 1;
        at = end;
    });
    if !fits {
        return None;
    }
    // SAFETY: the loop wrote every word before `at` (each argument's words, from where the one
    // before ended); `MaybeUninit<u64>` has `u64`'s layout.
    let done = unsafe { &mut *(ptr::from_mut(&mut words[..at]) as *mut [u64]) };
    Some((done, n))
}

/// Up to 8 bytes as one word, zero-padded (the bytes first in memory, as a copy into a zeroed
/// word puts them).
#[inline(always)]
fn word_of(c: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    match c.len() {
        8 => w.copy_from_slice(c),
        4 => w[..4].copy_from_slice(c),
        2 => w[..2].copy_from_slice(c),
        1 => w[0] = c[0],
        len => w[..len.min(8)].copy_from_slice(&c[..len.min(8)]),
    }
    u64::from_ne_bytes(w)
}

/// Launch limits of a device, read once per cache and context (`cuDeviceGetAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) ctx: CUcontext,
    pub(crate) threads_per_block: u64,
    pub(crate) block: (u32, u32, u32),
    pub(crate) grid: (u32, u32, u32),
    pub(crate) shared_bytes: u32,
    /// Programmatic dependent launch works here ([`supports_programmatic`]).
    pub(crate) programmatic: bool,
    /// And programmatic edges inside the bodies of conditional nodes are used: only with a
    /// driver of CUDA 13.0 or later, the one they were measured with (H200, 2026-12-01);
    /// older drivers get plain edges there ([`Stats::programmatic_fallbacks`](crate::Stats)).
    pub(crate) programmatic_bodies: bool,
}

impl Limits {
    pub(crate) fn of(stream: &CudaStream) -> Result<Limits, CudaError> {
        use sys::CUdevice_attribute as A;
        let c = stream.context();
        let a = |attr| c.attribute(attr).map(|v| v as u32).call("cuDeviceGetAttribute");
        let programmatic = supports_programmatic(c)?;
        Ok(Limits {
            ctx: c.cu_ctx(),
            threads_per_block: u64::from(a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            block: (
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ),
            grid: (
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ),
            shared_bytes: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            programmatic,
            programmatic_bodies: programmatic
                && raw::driver_version().call("cuDriverGetVersion")? >= 13000,
        })
    }

    /// Why `d` exceeds these limits, if it does.
    pub(crate) fn exceeded(&self, d: &LaunchDims) -> Option<String> {
        let (b, g) = (d.block, d.grid);
        let threads = u64::from(b.0) * u64::from(b.1) * u64::from(b.2);
        let over = |v: (u32, u32, u32), m: (u32, u32, u32)| v.0 > m.0 || v.1 > m.1 || v.2 > m.2;
        if threads > self.threads_per_block {
            Some(format!(
                "block {b:?} has {threads} threads; the device allows {}",
                self.threads_per_block
            ))
        } else if over(b, self.block) {
            Some(format!("block {b:?} exceeds the device's maximum block {:?}", self.block))
        } else if over(g, self.grid) {
            Some(format!("grid {g:?} exceeds the device's maximum grid {:?}", self.grid))
        } else if d.shared_bytes > self.shared_bytes {
            Some(format!(
                "{} bytes of dynamic shared memory; the device allows {} per block",
                d.shared_bytes, self.shared_bytes
            ))
        } else {
            None
        }
    }
}

/// The kernel node kind.
pub(crate) struct Kernel;

impl Kernel {
    /// The eager launch of a programmatic kernel, named in errors.
    const EAGER_PROGRAMMATIC: &'static str = "cuLaunchKernelEx (programmatic stream serialization)";
}

/// Whether programmatic dependent launch works on `ctx`'s device: compute capability 9.0 or
/// later and a driver of CUDA 12.3 or later (`cuDeviceGetAttribute`, `cuDriverGetVersion`).
/// Elsewhere edges into programmatic kernels are plain and their eager launches ordinary.
pub(crate) fn supports_programmatic(ctx: &cudarc::driver::CudaContext) -> Result<bool, CudaError> {
    let major = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .call("cuDeviceGetAttribute")?;
    Ok(major >= 9 && raw::driver_version().call("cuDriverGetVersion")? >= 12030)
}

impl NodeKind for Kernel {
    type Params<'a> = &'a dyn KernelNode;
    type State = KernelState;
    const ADD: &'static str = "cuGraphAddNode_v2 (kernel)";
    const SET: &'static str = "cuGraphExecKernelNodeSetParams_v2";
    const EAGER: &'static str = "cuLaunchKernel";

    fn validate(
        k: &&dyn KernelNode,
        limits: Option<&Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let d = k.dims();
        let (g, b) = (d.grid, d.block);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(Error::ZeroDims { site: site(), grid: g, block: b });
        }
        if let Some(why) = limits.and_then(|l| l.exceeded(&d)) {
            return Err(Error::LaunchLimit { site: site(), why });
        }
        let mut wrong = None;
        k.for_each_device_scalar(&mut |i, len| {
            if len != 1 && wrong.is_none() {
                wrong = Some((i, len));
            }
        });
        if let Some((i, len)) = wrong {
            let why = format!(
                "parameter {} (of 1, 2, …) is a device scalar (`&T`/`&mut T` in `kernels!`): its buffer must have exactly 1 element, not {len}",
                i + 1
            );
            return Err(Error::InvalidNode { site: site(), why });
        }
        if k.arg_count() > MAX_KERNEL_PARAMS {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            return Err(Error::Node { site: site(), source: CudaError { call: Self::ADD, error } });
        }
        Ok(())
    }

    fn accesses(k: &&dyn KernelNode, out: &mut Accesses) -> usize {
        k.accesses(out)
    }

    fn state(k: &&dyn KernelNode) -> KernelState {
        KernelState::new(*k)
    }

    fn record(s: &mut KernelState, k: &&dyn KernelNode) -> bool {
        let k = *k;
        let mut changed = match s.store_args(k) {
            Some(changed) => changed,
            // Another parameter list (a builder node of another kernel).
            None => {
                let template = s.template.take();
                *s = KernelState::new(k);
                s.template = template;
                true
            }
        };
        if s.func != k.function() {
            s.func = k.function();
            s.owner = k.function_owner().cloned();
            s.pointers = k.pointer_args();
            // And its `Condition` arguments (review 16: none of safe code's statements changes
            // them with the function, whose declaration fixes them; kept in step anyway).
            let mut conds = Vec::new();
            k.for_each_condition(&mut |i, slot, _| conds.push((i as u32, slot)));
            if *s.conds != *conds {
                s.conds = conds.into_boxed_slice();
            }
            changed = true;
        }
        let ctx = k.node_context().unwrap_or(ptr::null_mut());
        changed |= s.ctx != ctx;
        s.ctx = ctx;
        // Written only when it changed: copying the returned value as a whole right after the
        // call that wrote it stalls on store forwarding (measured: 40 % of this function).
        let dims = k.dims();
        if s.dims != dims {
            s.dims = dims;
            changed = true;
        }
        changed
    }

    /// A function of another context is not set into a node of this one: the driver's rule
    /// for that is not measured, so the ladder goes to a whole-exec update.
    fn settable(old: &KernelState, new: &&dyn KernelNode) -> bool {
        old.ctx == new.node_context().unwrap_or(ptr::null_mut())
    }

    fn context(k: &&dyn KernelNode) -> Option<CUcontext> {
        k.node_context()
    }

    fn with_params<R>(
        s: &mut KernelState,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        s.with_params(ctx, |k| {
            let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL);
            p.__bindgen_anon_1.kernel = *k;
            f(&mut p)
        })
    }

    fn kernel(k: &&dyn KernelNode) -> Option<bool> {
        Some(k.programmatic())
    }

    /// A kernel moved to another context (device) changes the kinds of its edges (plain
    /// across devices) and is never set into the node per node: another graph.
    fn same_edges(s: &KernelState, k: &&dyn KernelNode) -> bool {
        s.programmatic == k.programmatic() && s.ctx == k.node_context().unwrap_or(ptr::null_mut())
    }

    fn carry(old: &mut KernelState, new: &mut KernelState) {
        // The kept graph still names the functions it was built with.
        new.template = old.template.take();
    }

    unsafe fn eager(
        k: &&dyn KernelNode,
        stream: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let mut conds = false;
        k.for_each_condition(&mut |_, _, _| conds = true);
        if conds {
            return Err(super::conditional::eager_refused(site()));
        }
        let err = |source| Error::Node { site: site(), source };
        let run = |stream: &CudaStream| {
            let programmatic =
                k.programmatic() && supports_programmatic(stream.context()).map_err(err)?;
            let s = stream.cu_stream();
            type Launch = unsafe fn(
                &CUDA_KERNEL_NODE_PARAMS_v3,
                sys::CUstream,
            ) -> Result<(), cudarc::driver::DriverError>;
            let (launch, call): (Launch, _) = if programmatic {
                (raw::launch_kernel_programmatic, Self::EAGER_PROGRAMMATIC)
            } else {
                (raw::launch_kernel, Self::EAGER)
            };
            // SAFETY: the caller's contract; `kernelParams` points into the arguments' words
            // during the call; a programmatic launch is of a kernel declared `#[programmatic]`
            // (it waits); the stream is of the function's context, which is current.
            let go = |p: &CUDA_KERNEL_NODE_PARAMS_v3| unsafe { launch(p, s) };
            let ctx = stream.context().cu_ctx();
            // The arguments on the stack (`eager_args`), or in a `KernelState` when they do
            // not fit there.
            let mut words = [const { core::mem::MaybeUninit::<u64>::uninit() }; EAGER_WORDS];
            let mut offsets = [(0u32, 0u32); MAX_KERNEL_PARAMS];
            let launched = match eager_args(*k, &mut words, &mut offsets) {
                Some((words, n)) => {
                    let pointers = k.pointer_args();
                    let layout = ArgLayout { offsets: &offsets[..n], pointers, conds: &[] };
                    let own = k.node_context().unwrap_or(ptr::null_mut());
                    params_of((k.function(), own, ctx), k.dims(), words, &layout, go)
                }
                None => KernelState::new(*k).with_params(ctx, go),
            };
            launched.call(call).map_err(err)
        };
        match k.context() {
            // A kernel of another device runs on a stream of its own context.
            Some(c) if c.cu_ctx() != stream.context().cu_ctx() => {
                super::on_context(stream, c, site, run)
            }
            _ => run(stream),
        }
    }
}

#[cfg(test)]
mod pack_tests {
    use super::{Compare, Pack};
    use proptest::prelude::*;

    proptest! {
        /// Whatever the last words and the new ones (equal, a prefix, longer, differing
        /// anywhere), split into nodes anyhow, `finish` says whether they are equal, and when
        /// they are not, `out` holds exactly the new words: a node that differs is packed
        /// again, writing, after the words that agreed, and loses nothing.
        #[test]
        fn compare_reports_equality_and_keeps_the_new_words(
            last in proptest::collection::vec(0u64..4, 0..12),
            new in proptest::collection::vec(0u64..4, 0..12),
            cuts in proptest::collection::vec(1usize..4, 12),
        ) {
            let mut out = vec![99];
            let mut p = Compare::new(&last, &mut out, None);
            let (mut at, mut cut) = (0, cuts.iter());
            while at < new.len() {
                let n = (*cut.next().unwrap()).min(new.len() - at);
                let node = &new[at..at + n];
                let packed = p.node(&|p: &mut Pack<'_>| {
                    node.iter().for_each(|&w| p.push(w));
                    true
                });
                prop_assert!(packed);
                at += n;
            }
            let equal = p.finish();
            prop_assert_eq!(equal, last == new);
            if !equal {
                prop_assert_eq!(&out, &new);
            }
        }
    }
}

#[cfg(test)]
mod record_tests {
    use super::{Kernel, KernelNode, LaunchDims};
    use crate::kind::NodeKind;
    use cudarc::driver::sys::CUfunction;

    /// A kernel node of two 8-byte arguments, `cond` the one that is a `Condition` (its slot).
    struct Two {
        func: usize,
        cond: usize,
    }
    impl crate::operand::sealed::Sealed for Two {}
    impl KernelNode for Two {
        fn function(&self) -> CUfunction {
            self.func as CUfunction
        }
        fn dims(&self) -> LaunchDims {
            LaunchDims::new(1, 32)
        }
        fn arg_count(&self) -> usize {
            2
        }
        fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
            f(&7u64.to_ne_bytes());
            f(&7u64.to_ne_bytes());
        }
        fn accesses(&self, _: &mut crate::operand::Accesses) -> usize {
            0
        }
        fn for_each_condition(&self, f: &mut dyn FnMut(usize, u32, u64)) {
            f(self.cond, 7, 1)
        }
    }

    /// A node recorded with another function whose `Condition` is another argument (same sizes)
    /// has its conditions taken from the new function's, not kept from the old one's.
    #[test]
    fn a_new_function_brings_its_own_condition_arguments() {
        let (a, b) = (Two { func: 0x10, cond: 0 }, Two { func: 0x20, cond: 1 });
        let mut s = Kernel::state(&(&a as &dyn KernelNode));
        assert_eq!(*s.conds, [(0, 7)]);
        assert!(Kernel::record(&mut s, &(&b as &dyn KernelNode)));
        assert_eq!(*s.conds, [(1, 7)]);
        assert!(!Kernel::record(&mut s, &(&b as &dyn KernelNode)));
        assert_eq!(*s.conds, [(1, 7)]);
    }
}

#[cfg(test)]
mod eager_tests {
    use super::{
        ArgLayout, EAGER_WORDS, KernelNode, KernelState, LaunchDims, MAX_KERNEL_PARAMS, eager_args,
        params_of,
    };
    use cudarc::driver::sys::CUfunction;
    use proptest::prelude::*;

    /// A kernel node whose arguments are the given byte strings.
    struct Args(Vec<Vec<u8>>);
    impl crate::operand::sealed::Sealed for Args {}
    impl KernelNode for Args {
        fn function(&self) -> CUfunction {
            0x10 as CUfunction
        }
        fn dims(&self) -> LaunchDims {
            LaunchDims::new(1, 32)
        }
        fn arg_count(&self) -> usize {
            self.0.len()
        }
        fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
            self.0.iter().for_each(|a| f(a));
        }
        fn accesses(&self, _: &mut crate::operand::Accesses) -> usize {
            0
        }
        fn pointer_args(&self) -> u16 {
            0
        }
    }

    /// The bytes each `kernelParams` entry points at, `len` of them per argument.
    fn pointed(
        p: &cudarc::driver::sys::CUDA_KERNEL_NODE_PARAMS_v3,
        lens: &[usize],
    ) -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                // SAFETY: entry `i` points at `len` bytes of the laid-out arguments during `f`.
                unsafe {
                    let at = *p.kernelParams.add(i);
                    core::slice::from_raw_parts(at.cast::<u8>(), len).to_vec()
                }
            })
            .collect()
    }

    proptest! {
        /// The stack layout of an eager launch hands the driver the same argument bytes as a
        /// `KernelState` does, and declines (the `KernelState` path then) exactly when the
        /// arguments need more than its words or entries.
        #[test]
        fn eager_arguments_are_laid_out_as_a_kernel_states(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..20)
        ) {
            let k = Args(args.clone());
            let lens: Vec<usize> = args.iter().map(Vec::len).collect();
            let words: usize = lens.iter().map(|l| l.div_ceil(8)).sum();
            let mut w = [const { core::mem::MaybeUninit::<u64>::uninit() }; EAGER_WORDS];
            let mut offsets = [(0u32, 0u32); MAX_KERNEL_PARAMS];
            let got = eager_args(&k, &mut w, &mut offsets);
            let fits = words <= EAGER_WORDS && args.len() <= MAX_KERNEL_PARAMS;
            prop_assert_eq!(got.is_some(), fits);
            if args.len() > MAX_KERNEL_PARAMS {
                return Ok(());
            }
            let mut state = KernelState::new(&k);
            let want = state.with_params(core::ptr::null_mut(), |p| pointed(p, &lens));
            prop_assert_eq!(&want, &args);
            if let Some((words, n)) = got {
                prop_assert_eq!(n, args.len());
                let layout = ArgLayout { offsets: &offsets[..n], pointers: 0, conds: &[] };
                let ctx = core::ptr::null_mut();
                let eager = params_of((k.function(), ctx, ctx), k.dims(), words, &layout, |p| {
                    pointed(p, &lens)
                });
                prop_assert_eq!(&eager, &args);
                // The same words, padding included.
                prop_assert_eq!(&words[..], &state.args[..]);
            }
        }
    }
}
