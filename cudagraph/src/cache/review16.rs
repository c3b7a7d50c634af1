//! Review 16 (commits 4d0deaf and 280e5f7: a kernel node's unchanged-call words start with one
//! word of tag, flags, argument count and 4-bit-per-argument layout; plain arguments of 1 to 14
//! bytes pack their bytes alone; a `kernels!` launch packs no context word, its function
//! deciding it; nodes are compared one at a time and a node that differs is packed again,
//! writing). Attacked against the mock driver.
//!
//! The nodes here pack exactly as `KernelLaunch::pack` does (`pack_head` with `ctx: None`, then
//! `KernelArgs::pack` relative to the node's context): `LK` is review_unchanged's `RK`
//! without its context word. Each argument is a [`DynArg`]: any kind of argument the crate
//! passes (plain values of 0 to 16 bytes, read/write handles of this call or of another,
//! device scalars of either length, conditions), so that two types at one position, which two
//! kernels of one signature-agnostic call site could pass, are compared too.
//!
//! - `launch_words_are_one_to_one_with_what_validation_and_the_exec_see`: every node, and
//!   every sequence of two nodes, whose words are equal has equal parameters (function, node
//!   context, dims, programmatic, each argument's bytes, pointer bits, handle place/write and
//!   context, device scalar lengths, condition slots); and each node's words compare equal to
//!   themselves when packed comparing (the first packing), so the second, writing packing of a
//!   diverging node is the same sequence.
//! - `unchanged_launch_calls_equal_the_exec_last_launch`: 600 calls over the cache, with
//!   argument kinds, places, contexts (a node of a second device) and functions changing at
//!   random: a call counted unchanged has exactly the parameters of the last call that launched
//!   that exec (a call refused by validation is allowed: it launches nothing).
//! - `a_conditional_node_never_packs`: a call with a `Condition` argument always has the
//!   device statement that drives it, whose node does not pack, so the condition's owner
//!   (which the words do not hold, and which `validate` checks) never meets the unchanged path.
use std::collections::HashMap;

use super::review_unchanged::{RK, r as rd, w as wr};
use super::tests::{self, CTX, Mock, plan_node};
use super::{GraphCache, GraphCall, Site};
use crate::Condition;
use crate::error::Result;
use crate::kind::kernel::{Compare, KernelArgs, Pack};
use crate::kind::{ConditionalParams, ConditionalType, KernelNode, LaunchDims, NodeParams};
use crate::operand::{DevRead, DevWrite, DeviceScalar, KernelArg, NO_ACCESSES, place_of};
use crate::plan::{Access, NodeKind, Plan};
use cudarc::driver::sys::CUcontext;

/// A second context (a second device's).
const CTX1: CUcontext = 0x1100 as CUcontext;
/// The `graph!` call whose handles are packed by place.
const ID: u64 = 7;

/// Any kernel argument the crate passes, at one position.
#[derive(Clone, Copy)]
enum DynArg {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    A3([u8; 3]),
    A14([u8; 14]),
    A15([u8; 15]),
    A16([u8; 16]),
    Empty,
    R(DevRead<'static, u32>),
    W(DevWrite<'static, u32>),
    SR(DeviceScalar<DevRead<'static, u32>>),
    SW(DeviceScalar<DevWrite<'static, u32>>),
    C(Condition),
}

// SAFETY: test-only; each variant's own argument's answers.
unsafe impl KernelArg for DynArg {
    fn bytes(&self) -> &[u8] {
        match self {
            DynArg::U8(x) => x.bytes(),
            DynArg::U16(x) => x.bytes(),
            DynArg::U32(x) => x.bytes(),
            DynArg::U64(x) => x.bytes(),
            DynArg::A3(x) => &x[..],
            DynArg::A14(x) => &x[..],
            DynArg::A15(x) => &x[..],
            DynArg::A16(x) => &x[..],
            DynArg::Empty => &[],
            DynArg::R(h) => h.bytes(),
            DynArg::W(h) => h.bytes(),
            DynArg::SR(h) => h.bytes(),
            DynArg::SW(h) => h.bytes(),
            DynArg::C(c) => c.bytes(),
        }
    }
    fn context(&self) -> Option<CUcontext> {
        match self {
            DynArg::R(h) => h.context(),
            DynArg::W(h) => h.context(),
            DynArg::SR(h) => h.context(),
            DynArg::SW(h) => h.context(),
            _ => None,
        }
    }
    fn access(&self) -> Option<(u64, bool)> {
        match self {
            DynArg::R(h) => h.access(),
            DynArg::W(h) => h.access(),
            DynArg::SR(h) => h.access(),
            DynArg::SW(h) => h.access(),
            _ => None,
        }
    }
    fn range(&self) -> Option<(u64, u64)> {
        match self {
            DynArg::R(h) => h.range(),
            DynArg::W(h) => h.range(),
            DynArg::SR(h) => h.range(),
            DynArg::SW(h) => h.range(),
            _ => None,
        }
    }
    fn device_scalar_len(&self) -> Option<usize> {
        match self {
            DynArg::SR(h) => h.device_scalar_len(),
            DynArg::SW(h) => h.device_scalar_len(),
            _ => None,
        }
    }
    fn condition(&self) -> Option<(u32, u64)> {
        match self {
            DynArg::C(c) => c.condition(),
            _ => None,
        }
    }
}

/// A kernel node packed as `KernelLaunch::pack` packs it: no context word (the function
/// decides it), the arguments' contexts relative to the node's.
type LK<A> = RK<A, false>;

/// The argument kinds and values compared: bytes that collide across kinds (8 as a length, a
/// plain 0xa0 and a handle at 0xa0, zero bytes of every length), handles of this call's places
/// 0 and 1 (read, written; of either context; one of another call), device scalars of length
/// 1 and 2, conditions of slots 0 and 8.
fn arg_kinds(id: u64, ctx: CUcontext) -> Vec<DynArg> {
    use DynArg::*;
    let mut v = vec![
        U8(0),
        U8(8),
        U16(8),
        U16(0),
        U32(8),
        U32(0),
        U32(0x1_0000),
        U64(8),
        U64(0),
        U64(0xa0),
        U64(0xa0 | 1 << 60),
        U64(0x1_0000_0008),
        A3([8, 0, 0]),
        A14([0; 14]),
        A14([8; 14]),
        A15([0; 15]),
        A15([8; 15]),
        A16([0; 16]),
        A16([8; 16]),
        Empty,
        C(Condition::new(0, 0, id)),
        C(Condition::new(8, 0, id)),
    ];
    for c in [ctx, if ctx == CTX { CTX1 } else { CTX }] {
        for place in [0, 1] {
            v.push(R(rd(0xa0, 8, c, id, place)));
            v.push(W(wr(0xa0, 8, c, id, place)));
        }
        for len in [1, 2] {
            v.push(SR(DeviceScalar::new(rd(0xa0, len, c, id, 0))));
            v.push(SW(DeviceScalar::new(wr(0xa0, len, c, id, 0))));
        }
    }
    // A handle of another call (packed as "foreign", whatever it names).
    v.push(W(wr(0xa0, 8, ctx, id + 1, 0)));
    v
}

/// Everything of `k` that `validate`, `check_handles`, `check_conditions` (but the owner, see
/// `a_conditional_node_never_packs`) and the exec's node (`KernelState`) depend on, for call
/// `call`'s handles.
fn params(k: &dyn KernelNode, call: u64) -> String {
    let mut s = format!(
        "f{:#x} on {:?} {:?} prog {} n {} ptr {:#x} args",
        k.function() as usize,
        k.node_context(),
        k.dims(),
        k.programmatic(),
        k.arg_count(),
        k.pointer_args(),
    );
    k.for_each_arg(&mut |b| s += &format!(" {b:?}"));
    let mut acc = NO_ACCESSES;
    let n = k.accesses(&mut acc);
    for &(t, w, c) in &acc[..n] {
        s += &format!(" handle {:?} {w} {c:?}", place_of(t, call));
    }
    k.for_each_device_scalar(&mut |i, l| s += &format!(" scalar {i} {l}"));
    k.for_each_condition(&mut |i, slot, _| s += &format!(" cond {i} {slot}"));
    s
}

/// `nodes`' words, written out (compared with nothing).
fn words(nodes: &[&dyn KernelNode], call: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut p = Compare::new(&[], &mut out, Some(call));
    for k in nodes {
        assert!(p.node(&|p: &mut Pack<'_>| k.pack(p)));
    }
    let equal = p.finish();
    assert!(nodes.is_empty() || !equal);
    out
}

/// Whether `nodes`' words, packed comparing, equal `last` (and if not, the written words).
fn compare(nodes: &[&dyn KernelNode], last: &[u64], call: u64) -> (bool, Vec<u64>) {
    let mut out = Vec::new();
    let mut p = Compare::new(last, &mut out, Some(call));
    for k in nodes {
        assert!(p.node(&|p: &mut Pack<'_>| k.pack(p)));
    }
    let equal = p.finish();
    (equal, out)
}

fn boxed<A: KernelArgs + 'static>(
    func: usize,
    on: CUcontext,
    dims: LaunchDims,
    programmatic: bool,
    args: A,
) -> Box<dyn KernelNode> {
    Box::new(LK { func, on, dims, programmatic, args })
}

/// The nodes compared: one argument of every kind under every dims form, programmatic or not,
/// for two functions (each of its own context); two arguments of every pair of kinds; nine
/// and sixteen arguments (the layout in a word of its own) with one position of every kind.
fn all_nodes() -> Vec<Box<dyn KernelNode>> {
    let dims = [
        LaunchDims::new(4, 32),
        LaunchDims::new(4, 0xffff),
        LaunchDims::new(4, 0x1_0000),
        LaunchDims::new(4, 32).shared(0xffff),
        LaunchDims::new(4, 32).shared(0x1_0000),
        LaunchDims { grid: (4, 1, 1), block: (32, 1, 2), shared_bytes: 0 },
        LaunchDims { grid: (4, 2, 1), block: (32, 1, 1), shared_bytes: 0 },
        LaunchDims { grid: (u32::MAX, 1, 1), block: (32, 1, 1), shared_bytes: 0 },
        // Halves that a 1-D word could be read as (grid.x | block.x << 32 | shared << 48).
        LaunchDims { grid: (32, 1, 1), block: (4, 1, 1), shared_bytes: 0 },
        LaunchDims { grid: (4, 1, 1), block: (1, 1, 1), shared_bytes: 32 },
    ];
    let mut out: Vec<Box<dyn KernelNode>> = Vec::new();
    for (func, on) in [(0x10, CTX), (0x20, CTX1)] {
        let kinds = arg_kinds(ID, on);
        for &d in &dims {
            for prog in [false, true] {
                out.push(boxed(func, on, d, prog, ()));
                for &a in &kinds {
                    out.push(boxed(func, on, d, prog, (a,)));
                }
            }
        }
        let d = LaunchDims::new(4, 32);
        for &a in &kinds {
            for &b in &kinds {
                out.push(boxed(func, on, d, false, (a, b)));
            }
        }
        let p = DynArg::U32(1);
        for &a in &kinds {
            out.push(boxed(func, on, d, false, (p, p, p, p, p, p, p, p, a)));
            out.push(boxed(func, on, d, false, (a, p, p, p, p, p, p, p, p)));
            out.push(boxed(func, on, d, false, (p, p, p, p, p, p, p, a)));
            let s = (p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, a);
            out.push(boxed(func, on, d, false, s));
        }
    }
    out
}

#[test]
fn launch_words_are_one_to_one_with_what_validation_and_the_exec_see() {
    let nodes = all_nodes();
    let mut seen: HashMap<Vec<u64>, String> = HashMap::new();
    let mut clashes = Vec::new();
    let mut note = |w: Vec<u64>, p: String| {
        if let Some(q) = seen.get(&w) {
            if *q != p && clashes.len() < 10 {
                clashes.push(format!("{w:x?}:\n  {q}\n  {p}"));
            }
        } else {
            seen.insert(w, p);
        }
    };
    for k in &nodes {
        let k: &dyn KernelNode = &**k;
        let w = words(&[k], ID);
        // Packed comparing, a node's words equal its written words (the two packings agree),
        // and any other last words are told apart, with the new words written out whole.
        assert_eq!(compare(&[k], &w, ID), (true, vec![]), "{}", params(k, ID));
        let mut other = w.clone();
        *other.last_mut().unwrap() ^= 1;
        assert_eq!(compare(&[k], &other, ID), (false, w.clone()), "{}", params(k, ID));
        note(w, params(k, ID));
    }
    // Sequences of two nodes (a node list's words are their concatenation): a sample of every
    // seventh node against every eleventh, both orders.
    let a: Vec<&dyn KernelNode> = nodes.iter().step_by(7).map(|b| &**b).collect();
    let b: Vec<&dyn KernelNode> = nodes.iter().step_by(11).map(|b| &**b).collect();
    for &x in &a {
        for &y in &b {
            for pair in [[x, y], [y, x]] {
                let w = words(&pair, ID);
                note(w, format!("{} | {}", params(pair[0], ID), params(pair[1], ID)));
            }
        }
    }
    assert!(clashes.is_empty(), "equal words, other parameters:\n{}", clashes.join("\n"));
    assert!(seen.len() > 5000, "{}", seen.len());
}

/// A plan of two kernel nodes, each allowed to write places 0 and 1, and a host `if`.
fn two_kernels_plan() -> &'static Plan {
    let acc = vec![Access { place: 0, write: true }, Access { place: 1, write: true }];
    let nodes = vec![
        plan_node(NodeKind::Kernel("a"), acc.clone(), ""),
        plan_node(NodeKind::Kernel("b"), acc, ""),
    ];
    tests::leak_plan(nodes, 2, 1)
}

/// As review_unchanged's `run_checked`: the words made with the statements, then the cache's
/// graph-mode steps.
fn run_words(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    key: u64,
    nodes: &[Option<NodeParams<'_>>],
    call_id: u64,
) -> Result<()> {
    let mut w = cache.words(plan, &crate::operand::CallId(call_id));
    for n in nodes.iter().flatten() {
        w.node(&|p: &mut Pack<'_>| n.pack(p));
    }
    let w = cache.take_back(w);
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
    let handles = Some((plan, call_id));
    let same = cache.unchanged_words(&call, CTX, w, handles).0;
    if same.is_none() {
        super::validate::validate(
            call.shape,
            nodes,
            CTX,
            cache.limits.as_ref(),
            handles,
            &mut cache.peers,
        )?;
    }
    cache.enable_peers(call.shape)?;
    cache.forget_clean();
    cache.run_validated(call, (CTX, None), tests::STREAM, &mut super::Nodes::Ready(nodes), same)
}

#[test]
fn unchanged_launch_calls_equal_the_exec_last_launch() {
    let plan = two_kernels_plan();
    let mut cache = GraphCache::with_driver(Mock::default(), 8);
    let mut launched: HashMap<u64, Vec<String>> = HashMap::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n) as usize
    };
    let (mut refused, mut unchanged) = (0, 0);
    // The choices of the last call, each drawn again with probability 1/4 (so calls repeat).
    let mut c = [0usize; 6];
    for call in 1..=600u64 {
        let sizes = [2, 2, 7, 7, 5, 2];
        for (ci, n) in c.iter_mut().zip(sizes) {
            if next(4) == 0 {
                *ci = next(n as u64);
            }
        }
        let k0 = arg_kinds(call, CTX);
        let k1 = arg_kinds(call, CTX1);
        let small0 = [k0[4], k0[7], k0[22], k0[23], k0[24], k0[25], k0[30]];
        let small1 = [k1[7], k1[9], k1[24], k1[25], k1[13]];
        let n0 = LK {
            func: [0x10, 0x30][c[0]],
            on: CTX,
            dims: [LaunchDims::new(4, 32), LaunchDims::new(4, 0x1_0000)][c[1]],
            programmatic: false,
            args: (small0[c[2]], small0[c[3]]),
        };
        // A kernel of another device (its function of that context).
        let n1 = LK {
            func: 0x20,
            on: CTX1,
            dims: LaunchDims::new(4, 32),
            programmatic: false,
            // (Two arguments: the mock driver reads two of every node it sets.)
            args: (small1[c[4]], DynArg::U64(5)),
        };
        let key = c[5] as u64;
        let nodes = [
            Some(NodeParams::Kernel(&n0 as &dyn KernelNode)),
            (key == 0).then_some(NodeParams::Kernel(&n1 as &dyn KernelNode)),
        ];
        let before = cache.stats().unchanged_calls;
        if run_words(&mut cache, plan, key, &nodes, call).is_err() {
            refused += 1;
            continue;
        }
        let i = (0..cache.variants.len()).max_by_key(|&i| cache.variants[i].last_use).unwrap();
        let now: Vec<String> = nodes
            .iter()
            .map(|n| match n {
                Some(NodeParams::Kernel(k)) => params(*k, call),
                _ => "absent".into(),
            })
            .collect();
        let last = launched.insert(cache.variants[i].serial, now.clone());
        if cache.stats().unchanged_calls > before {
            unchanged += 1;
            assert_eq!(last.as_ref(), Some(&now), "call {call}: unchanged, other parameters");
        }
    }
    assert!(unchanged > 20 && refused > 20, "unchanged {unchanged}, refused {refused}");
}

#[test]
fn a_conditional_node_never_packs() {
    for ty in [ConditionalType::If, ConditionalType::While, ConditionalType::Switch] {
        let c = ConditionalParams::new(0, ty, 1, 0);
        let n = NodeParams::Conditional(c);
        let mut out = Vec::new();
        let mut p = Compare::new(&[], &mut out, Some(ID));
        assert!(!p.node(&|p: &mut Pack<'_>| n.pack(p)), "a conditional node packed: {ty:?}");
    }
}
