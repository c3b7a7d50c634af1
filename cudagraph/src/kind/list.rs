//! A `graph!` call's node list, made from its statements' segments (one fat pointer per
//! chunk of statements, per other statement, or per run of identical iterations).

use core::cell::{Cell, OnceCell};

use super::kernel::{CallWords, OfNode};
use super::{IntoNode, NodeParams};

/// A statement's entry in the node list of a `graph!` call: its node parameters, or none
/// for a statement in a host `if` branch not taken. The list is an array of `&dyn Entry`
/// (a fat pointer per statement), turned into parameters by [`entries`](crate::__private::entries), one loop out of
/// line: an array literal of each statement's `Option<NodeParams>` made the release build
/// of a large body super-linear (issue 18).
pub trait Entry {
    /// The node's parameters, `None` when absent from this call.
    fn entry(&self) -> Option<NodeParams<'_>>;
}
impl<N: IntoNode> Entry for N {
    #[inline]
    fn entry(&self) -> Option<NodeParams<'_>> {
        Some(self.node())
    }
}
impl<N: IntoNode> Entry for Option<N> {
    #[inline]
    fn entry(&self) -> Option<NodeParams<'_>> {
        self.as_ref().map(IntoNode::node)
    }
}

/// A run of consecutive statements of the node list: a chunk's tuple of nodes (see
/// [`chunk`](crate::__private::chunk)), or one statement's [`Entry`]. The list is a slice of `&dyn Segment` (one fat
/// pointer per chunk of up to 16 statements), so that the function holding the body does
/// not name every statement a second time (its type and borrow checking grow faster than
/// linearly with its size: issue 18).
pub trait Segment<'a> {
    /// Statements in it.
    fn statements(&self) -> usize;
    /// Writes its statements' node parameters (`None` for one absent from this call) into
    /// `out`, whose length is [`statements`](Self::statements): one dynamic call per
    /// segment, not per statement (a call and a `match` per statement were 10 % of an
    /// unchanged 1000-node call, `.ci/host-profile`).
    fn fill(&self, out: &mut [Option<NodeParams<'a>>]);
    /// Whether its entries may be left unmade by a changed call (`fill_partial`): the later
    /// iterations of a run, not made yet, every one a kernel node.
    fn deferrable(&self) -> bool {
        false
    }
}
impl<'a> Segment<'a> for &'a dyn Entry {
    fn statements(&self) -> usize {
        1
    }
    fn fill(&self, out: &mut [Option<NodeParams<'a>>]) {
        if let [slot] = out {
            *slot = (*self).entry();
        }
    }
}
/// A chunk's tuple of nodes (see [`chunk`](crate::__private::chunk)).
pub trait NodeTuple {
    /// Statements in it.
    const LEN: usize;
    /// Whether every one of its nodes is a kernel node ([`IntoNode::KERNEL`]).
    const KERNELS: bool;
    /// Its nodes' parameters into `out` (of length [`Self::LEN`]).
    fn fill_nodes<'a>(&'a self, out: &mut [Option<NodeParams<'a>>]);
    /// Each of its nodes into `words`, in order (as `word_node` would).
    fn put_words(&self, words: &mut CallWords);
}
macro_rules! tuple_segment {
    ($n:literal: $($t:ident $i:tt),+) => {
        impl<$($t: IntoNode),+> NodeTuple for ($($t,)+) {
            const LEN: usize = $n;
            const KERNELS: bool = $($t::KERNEL)&&+;
            fn fill_nodes<'a>(&'a self, out: &mut [Option<NodeParams<'a>>]) {
                if let Ok(out) = <&mut [Option<NodeParams<'a>>; $n]>::try_from(out) {
                    $(out[$i] = Some(self.$i.node());)+
                }
            }
            fn put_words(&self, words: &mut CallWords) {
                $(words.node(&OfNode(&self.$i));)+
            }
        }
        impl<'a, $($t: IntoNode),+> Segment<'a> for &'a ($($t,)+) {
            fn statements(&self) -> usize {
                $n
            }
            fn fill(&self, out: &mut [Option<NodeParams<'a>>]) {
                self.fill_nodes(out);
            }
        }
    };
}
tuple_segment!(1: A 0);
tuple_segment!(2: A 0, B 1);
tuple_segment!(3: A 0, B 1, C 2);
tuple_segment!(4: A 0, B 1, C 2, D 3);
tuple_segment!(5: A 0, B 1, C 2, D 3, E 4);
tuple_segment!(6: A 0, B 1, C 2, D 3, E 4, F 5);
tuple_segment!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_segment!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_segment!(9: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_segment!(10: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_segment!(11: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_segment!(12: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_segment!(13: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_segment!(14: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_segment!(15: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_segment!(16: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

/// [`entries`](crate::__private::entries) into a slice (of the call's `N` statements).
pub(crate) fn fill_entries<'a>(out: &mut [Option<NodeParams<'a>>], segments: &[&dyn Segment<'a>]) {
    fill_segments(out, segments, None);
}

/// [`fill_entries`], but for the [`deferrable`](Segment::deferrable) segments, whose entries
/// stay as they are (`None`); their ranges of entries (first, count) into `deferred`, in order.
pub(crate) fn fill_partial<'a>(
    out: &mut [Option<NodeParams<'a>>],
    segments: &[&dyn Segment<'a>],
    deferred: &mut Vec<(u32, u32)>,
) {
    deferred.clear();
    fill_segments(out, segments, Some(deferred));
}

/// [`fill_entries`] (`deferred`: `None`) and [`fill_partial`].
#[inline(always)]
fn fill_segments<'a>(
    out: &mut [Option<NodeParams<'a>>],
    segments: &[&dyn Segment<'a>],
    mut deferred: Option<&mut Vec<(u32, u32)>>,
) {
    let n_all = out.len();
    // Filled in place by a plain loop (an iterator through `array::from_fn` moved each
    // entry through its adapters: 10 % of an unchanged 1000-node call, `.ci/host-profile`),
    // into the caller's array (one returned by value was copied once more: 24 KB for 1000
    // nodes). Each segment's count is read once. The segments are generated with the body:
    // a count that differs from `N` is a bug of the macro, and panics here.
    let mut k = 0;
    for s in segments {
        let n = s.statements();
        assert!(n_all - k >= n, "graph! node list: more than {n_all} statements");
        match deferred.as_deref_mut() {
            Some(d) if s.deferrable() => d.push((k as u32, n as u32)),
            _ => s.fill(&mut out[k..k + n]),
        }
        k += n;
    }
    assert_eq!(k, n_all, "graph! node list: fewer than {n_all} statements");
}

/// The entries [`fill_partial`] left unmade, made now: every segment still
/// [`deferrable`](Segment::deferrable) fills its entries.
pub(crate) fn fill_deferred<'a>(out: &mut [Option<NodeParams<'a>>], segments: &[&dyn Segment<'a>]) {
    let mut k = 0;
    for s in segments {
        let n = s.statements();
        if s.deferrable() {
            s.fill(&mut out[k..k + n]);
        }
        k += n;
    }
}

/// A chunk of statements whose nodes are made only when the node list is needed: the later
/// iterations of an indexed run of `graph!` (see [`word_repeat`](crate::__private::word_repeat)),
/// whose words are their elements' guards and contexts. `make` builds the chunk's tuple of nodes, at most once.
pub struct LazyChunk<F, R> {
    make: Cell<Option<F>>,
    nodes: OnceCell<R>,
}

impl<F: FnOnce() -> R, R> LazyChunk<F, R> {
    /// The chunk, not made yet.
    #[inline(always)]
    pub fn new(make: F) -> Self {
        LazyChunk { make: Cell::new(Some(make)), nodes: OnceCell::new() }
    }

    /// Makes its nodes now (if they were not) and puts each into `words`: the later
    /// iterations of a run whose statements `graph!` could not show to be `kernels!` methods
    /// ([`made_by`](crate::__private::made_by)), evaluated and compared as written.
    pub fn put_words(&self, words: &mut CallWords)
    where
        R: NodeTuple,
    {
        if let Some(nodes) = self.nodes() {
            nodes.put_words(words);
        }
    }

    /// Its nodes, made now if they were not. Out of line: its closure (up to 16 statements) is
    /// then compiled once, not in each caller (`fill` and `put_words`).
    #[inline(never)]
    fn nodes(&self) -> Option<&R> {
        if self.nodes.get().is_none() {
            let make = self.make.take()?;
            let _ = self.nodes.set(make());
        }
        self.nodes.get()
    }
}

impl<'a, F: FnOnce() -> R, R: NodeTuple> Segment<'a> for &'a LazyChunk<F, R> {
    fn statements(&self) -> usize {
        R::LEN
    }
    fn fill(&self, out: &mut [Option<NodeParams<'a>>]) {
        if let Some(nodes) = self.nodes() {
            nodes.fill_nodes(out);
        }
    }
    fn deferrable(&self) -> bool {
        R::KERNELS && self.nodes.get().is_none()
    }
}
