//! Review 12 (brief 1, session commits b62da1d..23c612e): the one-word-per-argument encoding of
//! the unchanged-call check (`Pack::push_arg`, `KernelArgs::pack(out, node_ctx)`), attacked
//! against the mock driver.
//!
//! The words are decoded back here, with a decoder written from `pack_head`'s documentation
//! (session 16: the kernel tag, flags, argument count and layout in the first word, the
//! function, the context only when it is not the function's, one word of 1-D dimensions) and
//! `push_arg`'s (bits 0..=15 length or 0xffff and a length word, bit 63 device scalar, bits
//! 61..=62 context class, bit 60 handle, bit 59 written, bit 57 and bits 16..=47 the place, bit
//! 58 foreign). If
//! every word sequence decodes to exactly what `validate` and `KernelState` look at (function,
//! context, dims, argument bytes, each argument's context, handle place and write, device scalar
//! length), equal words imply equal parameters, which is what the fast path relies on.
use super::review_unchanged::RK;
use super::tests::{self, CTX, Mock, STREAM, plan_node};
use super::validate::validate;
use super::{GraphCache, GraphCall, Site};
use crate::error::{Error, Result};
use crate::kind::kernel::{Compare, KernelArgs, Pack};
use crate::kind::{KernelNode, LaunchDims, NodeParams};
use crate::operand::{DevRead, DevWrite, DeviceScalar, NO_ACCESSES, NO_BUFFER_ARGS, place_of, tag};
use crate::plan::{Access, NodeKind, Plan};
use cudarc::driver::sys::CUcontext;

/// Another context than [`CTX`].
const CTX1: CUcontext = 0x1100 as CUcontext;

// `RK`: review_unchanged's mock kernel node, packed exactly as `KernelLaunch::pack` packs.

fn rk<A>(args: A) -> RK<A> {
    RK { func: 0x10, on: CTX, dims: LaunchDims::new(4, 32), programmatic: false, args }
}

/// What a handle names, as `validate` sees it for a `graph!` call (`check_handles`): a place of
/// this call, or not one of its places (refused); for a builder's call, nothing (not checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Named {
    Place(u32),
    Foreign,
    Builder,
}

/// One argument as `validate` and the node's state see it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Arg {
    bytes: Vec<u8>,
    /// `None`: no context (a plain scalar); `Some(None)`: the node's; `Some(Some(c))`: another.
    ctx: Option<Option<usize>>,
    handle: Option<(Named, bool)>,
    scalar_len: Option<usize>,
}

/// The node as `validate` and the node's state see it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    func: u64,
    ctx: u64,
    dims: [u32; 7],
    programmatic: bool,
    pointers: u16,
    args: Vec<Arg>,
}

/// `k`'s parameters straight from its arguments (not through `pack`).
fn expected<A: KernelArgs>(k: &RK<A>, call: Option<u64>) -> Node {
    let mut bytes = Vec::new();
    k.args.for_each(&mut |b| bytes.push(b.to_vec()));
    let mut bufs = NO_BUFFER_ARGS;
    let n = k.args.buffers(&mut bufs);
    let mut acc = NO_ACCESSES;
    let m = k.args.accesses(&mut acc);
    assert_eq!(n, m, "every handle here has a range");
    let mut scalars = vec![None; A::LEN];
    k.args.device_scalars(&mut |i, len| scalars[i] = Some(len));
    let ptrs = k.args.pointers();
    let args = bytes
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            let j = bufs[..n].iter().position(|b| b.arg == i);
            assert_eq!(ptrs >> i & 1 == 1, j.is_some(), "pointer bit of argument {i}");
            let ctx = j.map(|j| bufs[j].ctx).map(|c| (c != k.on).then_some(c as usize));
            let handle = j.map(|j| {
                let (t, w, _) = acc[j];
                let named = match call {
                    None => Named::Builder,
                    Some(id) => place_of(t, id).map_or(Named::Foreign, Named::Place),
                };
                (named, w)
            });
            Arg { bytes, ctx, handle, scalar_len: scalars[i] }
        })
        .collect();
    let d = k.dims;
    Node {
        func: k.func as u64,
        ctx: k.on as u64,
        dims: [d.grid.0, d.grid.1, d.grid.2, d.block.0, d.block.1, d.block.2, d.shared_bytes],
        programmatic: k.programmatic,
        pointers: ptrs,
        args,
    }
}

/// `k`'s words (compared with nothing: all written out).
fn words(k: &dyn KernelNode, call: Option<u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut p = Compare::new(&[], &mut out, call);
    assert!(p.node(&|p: &mut Pack<'_>| k.pack(p)));
    assert!(!p.finish());
    out
}

/// Decodes `w` as `pack_head`'s and `push_arg`'s documentation describe, refusing any word
/// with a bit that means nothing, and any leftover word.
fn decode(w: &[u64], call: Option<u64>) -> Node {
    let mut it = w.iter().copied();
    let mut next = || it.next().expect("words end early");
    let h = next();
    assert_eq!(h >> 60, 1, "kernel tag: {h:#x}");
    assert_eq!(h >> 48 & 0xfff, 0, "bits 48..=59 unused: {h:#x}");
    assert_eq!(h >> 9 & 0x7f | h >> 3 & 1, 0, "bits 3 and 9..=15 unused: {h:#x}");
    let programmatic = h & 1 == 1;
    let has_ctx = h >> 1 & 1 == 1;
    let one_d = h >> 2 & 1 == 1;
    let count = (h >> 4 & 0x1f) as usize;
    let func = next();
    let layout = if count > 8 {
        assert_eq!(h >> 16 & 0xffff_ffff, 0, "a layout in the first word of {count} args");
        next()
    } else {
        h >> 16 & 0xffff_ffff
    };
    assert_eq!(layout.checked_shr(4 * count as u32).unwrap_or(0), 0, "layout past the args");
    let ctx = if has_ctx { next() } else { 0 };
    let dims = if one_d {
        let d = next();
        [d as u32, 1, 1, (d >> 32 & 0xffff) as u32, 1, 1, (d >> 48) as u32]
    } else {
        let half = |x: u64| [x as u32, (x >> 32) as u32];
        let [g0, g1] = half(next());
        let [g2, b0] = half(next());
        let [b1, b2] = half(next());
        let shared = next();
        assert!(shared >> 32 == 0, "shared word {shared:#x}");
        let d = [g0, g1, g2, b0, b1, b2, shared as u32];
        // The 1-D form is used whenever it fits.
        assert!(!(g1 == 1 && g2 == 1 && b1 == 1 && b2 == 1 && b0 < 1 << 16 && d[6] < 1 << 16));
        d
    };
    let mut args = Vec::new();
    let mut pointers = 0u16;
    for i in 0..count {
        let form = (layout >> (4 * i) & 0xf) as usize;
        assert!(form != 0, "argument {i} without a form");
        if form != 0xf {
            // A plain argument: its bytes only.
            let mut bytes = Vec::with_capacity(8);
            for _ in 0..form.div_ceil(8) {
                bytes.extend_from_slice(&next().to_ne_bytes());
            }
            assert!(bytes[form..].iter().all(|&b| b == 0), "padding");
            bytes.truncate(form);
            args.push(Arg { bytes, ctx: None, handle: None, scalar_len: None });
            continue;
        }
        let a = next();
        let short = (a & 0xffff) as usize;
        let len = if short == 0xffff { next() as usize } else { short };
        let scalar = a >> 63 & 1 == 1;
        let ctx_class = a >> 61 & 3;
        let has_handle = a >> 60 & 1 == 1;
        let write = a >> 59 & 1 == 1;
        let foreign = a >> 58 & 1 == 1;
        let placed = a >> 57 & 1 == 1;
        let place = (a >> 16) as u32;
        assert_eq!(a >> 48 & 0x1ff, 0, "bits 48..=56 unused: {a:#x}");
        if !placed {
            assert_eq!(place, 0, "a place without bit 57: {a:#x}");
        }
        assert!(has_handle || !(write || foreign || placed), "handle bits without bit 60: {a:#x}");
        let handle = has_handle.then(|| {
            let named = match (call, placed, foreign) {
                (None, false, false) => Named::Builder,
                (Some(_), true, false) => Named::Place(place),
                (Some(_), false, true) => Named::Foreign,
                other => panic!("handle bits {other:?} in {a:#x}"),
            };
            (named, write)
        });
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len.div_ceil(8) {
            bytes.extend_from_slice(&next().to_ne_bytes());
        }
        assert!(bytes[len..].iter().all(|&b| b == 0), "padding");
        bytes.truncate(len);
        // `push_bytes`: a 4-byte argument is its `u32` zero-extended, the same bytes here.
        let ctx = match ctx_class {
            0 => None,
            1 => Some(None),
            2 => Some(Some(next() as usize)),
            _ => panic!("context class 3 in {a:#x}"),
        };
        // The pointer arguments: those with a context.
        pointers |= u16::from(ctx.is_some()) << i;
        let scalar_len = scalar.then(|| next() as usize);
        args.push(Arg { bytes, ctx, handle, scalar_len });
    }
    assert!(it.next().is_none(), "words left over");
    Node { func, ctx, dims, programmatic, pointers, args }
}

/// Decodes `k`'s words and compares with its parameters; returns the words.
#[track_caller]
fn roundtrip<A: KernelArgs>(what: &str, k: &RK<A>, call: Option<u64>) -> (String, Vec<u64>) {
    let w = words(k, call);
    assert_eq!(decode(&w, call), expected(k, call), "{what}");
    (what.to_string(), w)
}

/// `N` plain bytes as one kernel argument (bytemuck's `Pod` stops at 4096-byte arrays).
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Raw<const N: usize>([u8; N]);
// SAFETY: an array of bytes: no padding, any bit pattern.
unsafe impl<const N: usize> bytemuck::NoUninit for Raw<N> {}
// SAFETY: as above; a kernel parameter of `N` bytes.
unsafe impl<const N: usize> cudarc::driver::DeviceRepr for Raw<N> {}

/// `N` bytes, the last one 1.
fn raw<const N: usize>() -> Box<Raw<N>> {
    let mut b = Box::new(Raw([0u8; N]));
    b.0[N - 1] = 1;
    b
}

fn wr(ptr: u64, len: usize, ctx: CUcontext, t: u64) -> DevWrite<'static, u32> {
    let mut h = DevWrite::new(ptr, len, ctx);
    h.tag = t;
    h
}

fn rd(ptr: u64, len: usize, ctx: CUcontext, t: u64) -> DevRead<'static, u32> {
    let mut h = DevRead::new(ptr, len, ctx);
    h.tag = t;
    h
}

/// Every argument class the brief names decodes back to what it is (so no two different ones
/// share words): places across the 16-bit boundary up to the last one, read against written,
/// another call's and a builder's handle, tag 0, another context, device scalars of several
/// lengths against a buffer, a `Condition` and plain scalars, argument lengths around 0xffff
/// and a zero-length argument; and a builder's call, whose handles pack as no place.
#[test]
fn review12_every_argument_class_decodes_back_to_its_parameters() {
    const ID: u64 = 7;
    let last = (1u32 << 24) - 2;
    let mut all = Vec::new();
    for call in [Some(ID), None] {
        let c = if call.is_some() { "graph" } else { "builder" };
        for (p, label) in [(0u32, "0"), (1, "1"), (0xffff, "0xffff"), (0x1_0000, "0x10000")]
            .into_iter()
            .chain([(last, "last")])
        {
            let w = rk((1u32, wr(0xa0, 64, CTX, tag(ID, p))));
            all.push(roundtrip(&format!("{c}: write place {label}"), &w, call));
            let r = rk((1u32, rd(0xa0, 64, CTX, tag(ID, p))));
            all.push(roundtrip(&format!("{c}: read place {label}"), &r, call));
        }
        let other = rk((1u32, wr(0xa0, 64, CTX, tag(ID + 1, 0))));
        all.push(roundtrip(&format!("{c}: another call's place 0"), &other, call));
        let zero = rk((1u32, wr(0xa0, 64, CTX, 0)));
        all.push(roundtrip(&format!("{c}: tag 0"), &zero, call));
        let ctx1 = rk((1u32, wr(0xa0, 64, CTX1, tag(ID, 0))));
        all.push(roundtrip(&format!("{c}: buffer of another context"), &ctx1, call));
        for len in [1, 2, 1 << 40] {
            let s = rk((1u32, DeviceScalar::new(wr(0xa0, len, CTX, tag(ID, 0)))));
            all.push(roundtrip(&format!("{c}: device scalar of {len}"), &s, call));
            let s = rk((1u32, DeviceScalar::new(rd(0xa0, len, CTX1, tag(ID, 0)))));
            all.push(roundtrip(&format!("{c}: read device scalar of {len}, ctx1"), &s, call));
        }
        let u = rk((1u32, 0xa0u64));
        all.push(roundtrip(&format!("{c}: plain u64 0xa0"), &u, call));
        let cond = rk((1u32, crate::Condition::new(0xa0, 0, ID)));
        all.push(roundtrip(&format!("{c}: condition slot 0xa0"), &cond, call));
        let cond = rk((1u32, crate::Condition::new(0xa0, 0, ID + 1)));
        all.push(roundtrip(&format!("{c}: condition slot 0xa0 of another call"), &cond, call));
        let empty = rk((1u32, [0u8; 0]));
        all.push(roundtrip(&format!("{c}: zero-length argument"), &empty, call));
        let (fe, ff, big) = (raw::<0xfffe>(), raw::<0xffff>(), raw::<0x1_0000>());
        all.push(roundtrip(&format!("{c}: 0xfffe bytes"), &rk((*fe,)), call));
        all.push(roundtrip(&format!("{c}: 0xffff bytes"), &rk((*ff,)), call));
        all.push(roundtrip(&format!("{c}: 0x10000 bytes"), &rk((*big,)), call));
        // A 0xffff-byte argument followed by a u64 of 0xffff, against a 0xffff-byte argument
        // and a u64 whose bytes could be taken for a length word.
        let ff2 = rk((*ff, 0xffffu64));
        all.push(roundtrip(&format!("{c}: 0xffff bytes then u64 0xffff"), &ff2, call));
        // Session 16's head: plain arguments of 1 to 14 bytes (their length in the layout) and
        // 15 or 16 (a word of their form), more than 8 arguments (the layout in a word of its
        // own), dimensions in the 1-D word and not, `#[programmatic]`.
        let h = wr(0xa0, 64, CTX, tag(ID, 3));
        all.push(roundtrip(&format!("{c}: u8, [u8; 14]"), &rk((7u8, [9u8; 14])), call));
        all.push(roundtrip(&format!("{c}: [u8; 15], [u8; 16]"), &rk(([9u8; 15], [9u8; 16])), call));
        let nine = (1u8, 2u16, 3u32, 4u64, h, 6u32, [7u8; 3], 8u64, 9u32);
        all.push(roundtrip(&format!("{c}: 9 args"), &rk(nine), call));
        let sixteen = (1u32, 2u32, 3u32, 4u32, 5u32, 6u32, 7u32, 8u32);
        let sixteen = (sixteen, (9u32, 10u32, 11u32, 12u32, 13u32, 14u32, 15u32, h));
        let ((a0, a1, a2, a3, a4, a5, a6, a7), (b0, b1, b2, b3, b4, b5, b6, b7)) = sixteen;
        let sixteen = (a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7);
        all.push(roundtrip(&format!("{c}: 16 args"), &rk(sixteen), call));
        let dims = [
            ("3-D grid", LaunchDims { grid: (4, 2, 1), block: (32, 1, 1), shared_bytes: 0 }),
            ("3-D block", LaunchDims { grid: (4, 1, 1), block: (32, 1, 2), shared_bytes: 0 }),
            ("shared 0xffff", LaunchDims::new(4, 32).shared(0xffff)),
            ("shared 0x10000", LaunchDims::new(4, 32).shared(0x1_0000)),
            ("block 0xffff", LaunchDims::new(4, 0xffff)),
            ("block 0x10000", LaunchDims::new(4, 0x1_0000)),
            ("grid u32::MAX", LaunchDims::new(u32::MAX, 32)),
        ];
        for (what, d) in dims {
            let mut k = rk((1u32, h));
            k.dims = d;
            all.push(roundtrip(&format!("{c}: {what}"), &k, call));
            k.programmatic = true;
            all.push(roundtrip(&format!("{c}: {what}, programmatic"), &k, call));
        }
    }
    // Words equal across the list only where the parameters are equal too (the decoder checked
    // each): list them.
    let mut equal = Vec::new();
    for (i, (a, wa)) in all.iter().enumerate() {
        for (b, wb) in &all[..i] {
            // (A builder's call and a `graph!` call never compare: other sites.)
            if wa == wb && a.split(':').next() == b.split(':').next() {
                equal.push(format!("{a} = {b}"));
            }
        }
    }
    // Known and harmless: a condition packs as its slot (like a plain u64), whatever its owner;
    // a builder's handles pack without their place (a builder checks its handles itself); in
    // a `graph!` call, every handle that is not the call's packs as "foreign" (refused by
    // `validate`, so never the words of a validated call).
    for e in &equal {
        let builder_handles = e.matches("builder:").count() == 2 && !e.contains("scalar");
        let condition = ["condition", "plain u64"].iter().all(|s| e.contains(s))
            || e.matches("condition").count() == 2;
        let foreign = e.contains("tag 0") && e.contains("another call's");
        assert!(builder_handles || condition || foreign, "unexpected equal words: {e}");
    }
    println!("{} nodes, equal words: {equal:#?}", all.len());
}

/// A node of the mock plans here.
fn leak_plan(accesses: Vec<Access>, places: usize) -> &'static Plan {
    tests::leak_plan(vec![plan_node(NodeKind::Kernel("k"), accesses, "")], places, 1)
}

/// `GraphCache::run_checked`'s graph-mode steps (as `review_unchanged::run_checked`).
fn run_checked(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    k: &dyn KernelNode,
    call_id: u64,
) -> Result<()> {
    let nodes = [Some(NodeParams::Kernel(k))];
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key: 0, signature: &[] };
    let handles = Some((plan, call_id));
    let same = cache.unchanged(&call, CTX, &nodes, handles)?;
    if same.is_none() {
        validate(call.shape, &nodes, CTX, cache.limits.as_ref(), handles, &mut cache.peers)?;
    }
    cache.enable_peers(call.shape)?;
    cache.forget_clean();
    cache.run_validated(call, (CTX, None), STREAM, &mut super::Nodes::Ready(&nodes), same)
}

/// Places past 16 bits (the place sits in bits 16..=47 of the argument's word, next to the
/// length in bits 0..=15): a node listing place 0x10000 only, called with it (then unchanged),
/// then with the same address as place 0 (not listed), or as place 0x10001, or read where it
/// was written: each is another word, so `validate` refuses it with nothing launched.
#[test]
fn review12_places_past_16_bits_keep_their_own_words() {
    let p = 0x1_0000u32;
    let plan = leak_plan(vec![Access { place: p, write: true }], p as usize + 2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let node = |id: u64, place: u32| rk((1u32, wr(0xa0, 64, CTX, tag(id, place))));
    run_checked(&mut cache, plan, &node(1, p), 1).unwrap();
    run_checked(&mut cache, plan, &node(2, p), 2).unwrap();
    assert_eq!(cache.stats().unchanged_calls, 1);
    mock.calls();
    for (id, place) in [(3, 0u32), (4, p + 1)] {
        let e = run_checked(&mut cache, plan, &node(id, place), id).unwrap_err();
        assert!(matches!(e, Error::InvalidNode { .. }), "place {place:#x}: {e}");
    }
    // The same place read through a read handle where the node lists it written is allowed
    // (written implies read), but it is another word: validated, not taken for unchanged.
    let read = rk((1u32, rd(0xa0, 64, CTX, tag(5, p))));
    run_checked(&mut cache, plan, &read, 5).unwrap();
    mock.calls();
    assert_eq!(cache.stats().unchanged_calls, 1, "read vs written: not unchanged");
    run_checked(&mut cache, plan, &node(6, p), 6).unwrap();
    assert!(mock.calls().last().is_some_and(|c| c == "launch"));
}
