//! Review of the unchanged-call fast path (`GraphCache::unchanged`): attacks against the mock
//! driver. The kernel node here packs through the real `KernelArgs::pack` of its argument tuple
//! (as `KernelLaunch` does), so the words compared are the ones `graph!` calls make.
//!
//! `run_checked` below repeats `GraphCache::run_checked`'s graph-mode steps that need no stream
//! (`unchanged`, `validate` when not unchanged, `enable_peers`, `run_validated`), with the
//! call's handles checked as for a `graph!` call (`handles`: the call id).
use super::tests::{self, CTX, Mock, STREAM, plan_node};
use super::validate::validate;
use super::{GraphCache, GraphCall, Site};
use crate::error::{Error, Result};
use crate::kind::kernel::{Compare, KernelArgs, Pack, pack_head};
use crate::kind::memcpy::Copy1d;
use crate::kind::{KernelNode, LaunchDims, MemcpyParams, Memory, NodeParams};
use crate::operand::{DevRead, DevWrite, DeviceScalar};
use crate::plan::{Access, NodeKind, Plan, PlanNode};
use cudarc::driver::sys::{CUcontext, CUfunction};

/// Another context than [`CTX`] (a second device's).
const CTX1: CUcontext = 0x1100 as CUcontext;

/// A kernel node of function `func` with the argument tuple `args`, packed as `KernelLaunch`
/// packs (`pack_head`, then `KernelArgs::pack`), with a context word of its own unless
/// `CTX_WORD` is false (then exactly as `KernelLaunch`, whose function decides its context:
/// review16's `LK`).
#[derive(Clone)]
pub(super) struct RK<A, const CTX_WORD: bool = true> {
    pub(super) func: usize,
    pub(super) on: CUcontext,
    pub(super) dims: LaunchDims,
    pub(super) programmatic: bool,
    pub(super) args: A,
}

impl<A, const CTX_WORD: bool> crate::operand::sealed::Sealed for RK<A, CTX_WORD> {}

impl<A: KernelArgs, const CTX_WORD: bool> KernelNode for RK<A, CTX_WORD> {
    fn function(&self) -> CUfunction {
        self.func as CUfunction
    }
    fn node_context(&self) -> Option<CUcontext> {
        Some(self.on)
    }
    fn dims(&self) -> LaunchDims {
        self.dims
    }
    fn programmatic(&self) -> bool {
        self.programmatic
    }
    fn arg_count(&self) -> usize {
        A::LEN
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        self.args.for_each(f)
    }
    fn accesses(&self, out: &mut crate::operand::Accesses) -> usize {
        self.args.accesses(out)
    }
    fn for_each_condition(&self, f: &mut dyn FnMut(usize, u32, u64)) {
        self.args.conditions(f)
    }
    fn for_each_device_scalar(&self, f: &mut dyn FnMut(usize, usize)) {
        self.args.device_scalars(f)
    }
    fn pointer_args(&self) -> u16 {
        self.args.pointers()
    }
    fn pack(&self, out: &mut Pack<'_>) -> bool {
        let (f, l, ctx) = (self.function(), self.args.layout(), CTX_WORD.then_some(Some(self.on)));
        pack_head(out, f, ctx, &self.dims, self.programmatic, A::LEN, l);
        self.args.pack(out, Some(self.on));
        true
    }
}

type Args = (u32, DevWrite<'static, u32>);

/// A read handle of `ptr` (`len` elements, context `ctx`) tagged as place `place` of call `id`.
pub(super) fn r(
    ptr: u64,
    len: usize,
    ctx: CUcontext,
    id: u64,
    place: u32,
) -> DevRead<'static, u32> {
    let mut h = DevRead::new(ptr, len, ctx);
    h.tag = crate::operand::tag(id, place);
    h
}

/// A write handle of `ptr` (`len` elements, context `ctx`) tagged as place `place` of call `id`.
pub(super) fn w(
    ptr: u64,
    len: usize,
    ctx: CUcontext,
    id: u64,
    place: u32,
) -> DevWrite<'static, u32> {
    let mut h = DevWrite::new(ptr, len, ctx);
    h.tag = crate::operand::tag(id, place);
    h
}

/// Kernel `func` with scalar `s` writing place `place` of call `id` at `ptr`.
fn kn(s: u32, ptr: u64, id: u64, place: u32) -> RK<Args> {
    RK {
        func: 0x10,
        on: CTX,
        dims: LaunchDims::new(4, 32),
        programmatic: false,
        args: (s, w(ptr, 64, CTX, id, place)),
    }
}

/// A node of the mock plans here (always taken).
fn node(kind: NodeKind, accesses: Vec<Access>) -> PlanNode {
    plan_node(kind, accesses, "")
}

/// The mock plans here: one host condition, so that keys 0 and 1 are both valid.
fn leak_plan(nodes: Vec<PlanNode>, places: usize) -> &'static Plan {
    tests::leak_plan(nodes, places, 1)
}

/// Node `i` a kernel writing place `i` (independent nodes).
fn kernels_plan(n: usize) -> &'static Plan {
    let wr = |p| Access { place: p, write: true };
    leak_plan((0..n as u32).map(|i| node(NodeKind::Kernel("k"), vec![wr(i)])).collect(), n)
}

/// `GraphCache::run_checked`'s graph-mode steps (see the module's doc), with the call's words
/// made as `graph!` makes them (`GraphCache::words`, each present node in order, then
/// `run_words`'s `take_back` and `unchanged_words`).
fn run_checked(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    key: u64,
    nodes: &[Option<NodeParams<'_>>],
    call_id: u64,
) -> Result<()> {
    let mut words = cache.words(plan, &crate::operand::CallId(call_id));
    for n in nodes.iter().flatten() {
        words.node(&|p: &mut Pack<'_>| n.pack(p));
    }
    let words = cache.take_back(words);
    run_rest(cache, plan, key, nodes, call_id, Some(words))
}

/// [`run_checked`] with the node list packed by the cache (`GraphCache::unchanged`), as for a
/// builder's call or a body with `capture` statements.
fn run_checked_list(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    key: u64,
    nodes: &[Option<NodeParams<'_>>],
    call_id: u64,
) -> Result<()> {
    run_rest(cache, plan, key, nodes, call_id, None)
}

fn run_rest(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    key: u64,
    nodes: &[Option<NodeParams<'_>>],
    call_id: u64,
    words: Option<super::Words>,
) -> Result<()> {
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
    let handles = Some((plan, call_id));
    let same = match words {
        Some(w) => cache.unchanged_words(&call, CTX, w, handles).0,
        None => cache.unchanged(&call, CTX, nodes, handles)?,
    };
    if same.is_none() {
        validate(call.shape, nodes, CTX, cache.limits.as_ref(), handles, &mut cache.peers)?;
    }
    cache.enable_peers(call.shape)?;
    cache.forget_clean();
    cache.run_validated(call, (CTX, None), STREAM, &mut super::Nodes::Ready(nodes), same)
}

fn kernel_nodes<'a, K: KernelNode>(ks: &[&'a K]) -> Vec<Option<NodeParams<'a>>> {
    ks.iter().map(|&k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect()
}

/// A refused call notes the peer pairs of its copies (`validate`) before it is refused; a later
/// unchanged call skips `validate`, which is what empties that list, and `run_checked` enables
/// peer access for every pair left in it on every call: the unchanged call enables the pair of
/// another, refused call (whose contexts it does not hold: they may be gone by then), and an
/// error of that enabling fails the unchanged call, naming a node of the refused one.
#[test]
fn an_unchanged_call_enables_no_peer_pair_of_an_earlier_refused_call() {
    let wr = |p| Access { place: p, write: true };
    let rd = |p| Access { place: p, write: false };
    // n0 kernel writes 0; n1 copies 1 into 2 (key 1 only); n2 kernel writes 3.
    let plan = leak_plan(
        vec![
            node(NodeKind::Kernel("a"), vec![wr(0)]),
            node(NodeKind::Memcpy, vec![rd(1), wr(2)]),
            node(NodeKind::Kernel("b"), vec![wr(3)]),
        ],
        4,
    );
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let key0 = |id| {
        let (a, b) = (kn(1, 0xa0, id, 0), kn(2, 0xb0, id, 3));
        move |cache: &mut GraphCache<Mock>| {
            let nodes = [
                Some(NodeParams::Kernel(&a as &dyn KernelNode)),
                None,
                Some(NodeParams::Kernel(&b)),
            ];
            run_checked(cache, plan, 0, &nodes, id)
        }
    };
    key0(1)(&mut cache).unwrap();
    key0(2)(&mut cache).unwrap();
    assert_eq!(cache.stats().unchanged_calls, 1);
    // Key 1: a peer copy (CTX -> CTX1), then a kernel with a zero grid: refused by `validate`
    // after it noted the pair.
    let a = kn(1, 0xa0, 3, 0);
    let mut zero = kn(2, 0xb0, 3, 3);
    zero.dims = LaunchDims::new(0, 32);
    let mut c = MemcpyParams::recorded(Copy1d {
        src: Memory::Device(0x100),
        dst: Memory::Device(0x200),
        src_len: 4,
        dst_len: 4,
        elem_size: 4,
        src_ctx: CTX,
        dst_ctx: CTX1,
        host_buffer: 0,
    });
    (c.src_tag, c.dst_tag) = (crate::operand::tag(3, 1), crate::operand::tag(3, 2));
    let nodes = [
        Some(NodeParams::Kernel(&a as &dyn KernelNode)),
        Some(NodeParams::Memcpy(&c)),
        Some(NodeParams::Kernel(&zero)),
    ];
    let e = run_checked(&mut cache, plan, 1, &nodes, 3).unwrap_err();
    assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
    mock.calls();
    // Key 0 again, unchanged: it copies nothing between contexts.
    key0(4)(&mut cache).unwrap();
    let s = cache.stats();
    assert_eq!(s.unchanged_calls, 2, "{s:?}");
    assert_eq!(mock.calls(), ["launch"], "the unchanged call enabled a refused call's peer pair");
    assert_eq!(s.peer_enables, 0, "{s:?}");
}

/// The fast path checks every node's handles against the call's own id and plan: a handle of
/// another call, a place the node does not list, or one written place twice in one node, are
/// refused as `validate` refuses them, with nothing launched, on a call whose words equal the
/// last call's.
#[test]
fn an_unchanged_call_still_refuses_handles_of_another_call_or_place() {
    let plan = kernels_plan(2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let run = |cache: &mut GraphCache<Mock>, a: &RK<Args>, b: &RK<Args>, id| {
        run_checked(cache, plan, 0, &kernel_nodes(&[a, b]), id)
    };
    run(&mut cache, &kn(1, 0xa0, 1, 0), &kn(2, 0xb0, 1, 1), 1).unwrap();
    run(&mut cache, &kn(1, 0xa0, 2, 0), &kn(2, 0xb0, 2, 1), 2).unwrap();
    assert_eq!(cache.stats().unchanged_calls, 1);
    mock.calls();
    let refused = |r: Result<()>, what: &str| match r {
        Err(Error::InvalidNode { .. }) => {}
        r => panic!("{what}: expected InvalidNode, got {r:?}"),
    };
    // Node 1 (after an agreeing node 0) with a handle of call 2, in call 3.
    refused(run(&mut cache, &kn(1, 0xa0, 3, 0), &kn(2, 0xb0, 2, 1), 3), "handle of another call");
    // Node 1 with place 0 of this call (listed for node 0 only).
    refused(run(&mut cache, &kn(1, 0xa0, 4, 0), &kn(2, 0xb0, 4, 0), 4), "place of another node");
    assert!(mock.calls().is_empty());
    // One written place twice in one node (only a method of the user's could pass that): a
    // node of its own plan writing places 0 and 1, both handles at one address; first with
    // two places (accepted, then unchanged), then with place 0 twice: the same words.
    let wr = |p| Access { place: p, write: true };
    let plan2 = leak_plan(vec![node(NodeKind::Kernel("k"), vec![wr(0), wr(1)])], 2);
    let two = |id: u64, p2: u32| -> RK<_> {
        RK {
            func: 0x30,
            on: CTX,
            dims: LaunchDims::new(4, 32),
            programmatic: false,
            args: (1u32, w(0xa0, 64, CTX, id, 0), w(0xa0, 64, CTX, id, p2)),
        }
    };
    run_checked(&mut cache, plan2, 0, &kernel_nodes(&[&two(6, 1)]), 6).unwrap();
    run_checked(&mut cache, plan2, 0, &kernel_nodes(&[&two(7, 1)]), 7).unwrap();
    assert_eq!(cache.stats().unchanged_calls, 2);
    mock.calls();
    let again = run_checked(&mut cache, plan2, 0, &kernel_nodes(&[&two(8, 0)]), 8);
    refused(again, "one written place twice");
    assert!(mock.calls().is_empty());
}

/// A device scalar of another length at the same address, a buffer of another context, a grid
/// over the limit: not the last call's words, so `validate` refuses them.
#[test]
fn an_unchanged_call_with_a_device_scalar_of_another_length_is_refused() {
    type S = (u32, DeviceScalar<DevRead<'static, u32>>);
    let plan =
        leak_plan(vec![node(NodeKind::Kernel("k"), vec![Access { place: 0, write: false }])], 1);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let ks = |id: u64, len: usize, ctx: CUcontext| -> RK<S> {
        let mut h = DevRead::new(0xa0, len, ctx);
        h.tag = crate::operand::tag(id, 0);
        RK {
            func: 0x40,
            on: CTX,
            dims: LaunchDims::new(1, 1),
            programmatic: false,
            args: (1u32, DeviceScalar::new(h)),
        }
    };
    run_checked(&mut cache, plan, 0, &kernel_nodes(&[&ks(1, 1, CTX)]), 1).unwrap();
    run_checked(&mut cache, plan, 0, &kernel_nodes(&[&ks(2, 1, CTX)]), 2).unwrap();
    assert_eq!(cache.stats().unchanged_calls, 1);
    mock.calls();
    let e = run_checked(&mut cache, plan, 0, &kernel_nodes(&[&ks(3, 2, CTX)]), 3).unwrap_err();
    assert!(matches!(e, Error::InvalidNode { .. }), "{e}");
    let e = run_checked(&mut cache, plan, 0, &kernel_nodes(&[&ks(4, 1, CTX1)]), 4).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    assert!(mock.calls().is_empty());
    run_checked(&mut cache, plan, 0, &kernel_nodes(&[&ks(5, 1, CTX)]), 5).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
}

/// Two variants of one site, called alternately, each with its own parameters: each keeps the
/// words of its own exec; a change of one variant reaches its exec (the arguments the driver
/// read hold the new scalar), and the other stays unchanged.
#[test]
fn alternating_variants_keep_the_words_of_their_own_exec() {
    let plan = kernels_plan(2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    // The update ladder in place: one exec per variant (no memo of parameter sets).
    cache.set_execs_per_variant(1);
    let call = |cache: &mut GraphCache<Mock>, key: u64, s: u32, id: u64| {
        let (a, b) = (kn(s, 0xa0, id, 0), kn(s + 1, 0xb0, id, 1));
        run_checked(cache, plan, key, &kernel_nodes(&[&a, &b]), id)
    };
    call(&mut cache, 0, 10, 1).unwrap();
    call(&mut cache, 1, 20, 2).unwrap();
    mock.calls();
    call(&mut cache, 0, 10, 3).unwrap();
    call(&mut cache, 1, 20, 4).unwrap();
    assert_eq!(mock.calls(), ["launch", "launch"]);
    assert_eq!(cache.stats().unchanged_calls, 2);
    // Variant 0 with variant 1's parameters: a change for variant 0.
    call(&mut cache, 0, 20, 5).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "set_kernel grid=4", "launch"]);
    // Variant 1 with variant 0's first parameters: a change too.
    call(&mut cache, 1, 10, 6).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "set_kernel grid=4", "launch"]);
    call(&mut cache, 0, 20, 7).unwrap();
    call(&mut cache, 1, 10, 8).unwrap();
    assert_eq!(mock.calls(), ["launch", "launch"]);
    assert_eq!(cache.stats().unchanged_calls, 4);
}

/// `set_programmatic`, eviction, `clear` and another call site: a call equal to the words of
/// an exec it does not launch is never taken for unchanged; with the setting back, the old
/// variant's exec still holds its own last call, and a call equal to that one is unchanged,
/// one equal to the other variant's is sent.
#[test]
fn programmatic_setting_eviction_clear_and_sites_never_reuse_another_execs_words() {
    let plan = kernels_plan(2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    // The update ladder in place: one exec per variant (no memo of parameter sets).
    cache.set_execs_per_variant(1);
    let call = |cache: &mut GraphCache<Mock>, plan, key: u64, s: u32| {
        let (a, b) = (kn(s, 0xa0, 1, 0), kn(s, 0xb0, 1, 1));
        run_checked(cache, plan, key, &kernel_nodes(&[&a, &b]), 1)
    };
    call(&mut cache, plan, 0, 1).unwrap();
    cache.set_programmatic(false);
    mock.calls();
    call(&mut cache, plan, 0, 1).unwrap();
    assert_eq!(cache.stats().builds, 2, "another programmatic setting: another variant");
    call(&mut cache, plan, 0, 2).unwrap();
    cache.set_programmatic(true);
    mock.calls();
    // The programmatic variant's exec holds scalar 1, not 2.
    call(&mut cache, plan, 0, 2).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "set_kernel grid=4", "launch"]);
    call(&mut cache, plan, 0, 2).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    let unchanged = cache.stats().unchanged_calls;
    // Eviction: one variant kept.
    let mut one = GraphCache::with_driver(mock.clone(), 1);
    call(&mut one, plan, 0, 1).unwrap();
    call(&mut one, plan, 1, 1).unwrap();
    call(&mut one, plan, 0, 1).unwrap();
    assert_eq!((one.stats().builds, one.stats().unchanged_calls), (3, 0));
    // `clear`, then the same call: built again.
    cache.clear();
    call(&mut cache, plan, 0, 2).unwrap();
    assert_eq!(cache.stats().unchanged_calls, unchanged);
    // Another site with the same nodes, then the first again: each clears the other's.
    let other = kernels_plan(2);
    let builds = cache.stats().builds;
    call(&mut cache, other, 0, 2).unwrap();
    call(&mut cache, plan, 0, 2).unwrap();
    let s = cache.stats();
    assert_eq!((s.builds, s.unchanged_calls), (builds + 2, unchanged), "{s:?}");
}

/// A call refused part way (after its words were made) leaves the kept words those of the
/// exec; a call refused after an earlier node changed does too.
#[test]
fn a_refused_call_between_unchanged_calls_changes_no_kept_words() {
    let plan = kernels_plan(2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    // The update ladder in place: one exec per variant (no memo of parameter sets).
    cache.set_execs_per_variant(1);
    let call = |cache: &mut GraphCache<Mock>, s: u32, grid1: u32, id: u64| {
        let a = kn(s, 0xa0, id, 0);
        let mut b = kn(2, 0xb0, id, 1);
        b.dims = LaunchDims::new(grid1, 32);
        run_checked(cache, plan, 0, &kernel_nodes(&[&a, &b]), id)
    };
    call(&mut cache, 1, 4, 1).unwrap();
    call(&mut cache, 1, 4, 2).unwrap();
    mock.calls();
    // Node 0 changed, node 1 refused.
    let e = call(&mut cache, 7, 0, 3).unwrap_err();
    assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
    // The same call with node 1 valid: node 0's change is sent.
    call(&mut cache, 1, 4, 4).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    call(&mut cache, 7, 4, 5).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    call(&mut cache, 1, 4, 6).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
}

/// Parameter sets that differ in anything the exec or `validate` depends on pack to different
/// words: argument lengths, device scalar against buffer, a device scalar's length, contexts,
/// dims split between grid and block, shared memory, `#[programmatic]`, function.
#[test]
fn different_parameters_pack_to_different_words() {
    fn base<A>(args: A) -> RK<A> {
        RK { func: 0x10, on: CTX, dims: LaunchDims::new(4, 32), programmatic: false, args }
    }
    fn words(k: &dyn KernelNode) -> Vec<u64> {
        let mut out = Vec::new();
        let mut p = Compare::new(&[], &mut out, Some(7));
        assert!(p.node(&|p: &mut Pack<'_>| k.pack(p)));
        assert!(!p.finish());
        out
    }
    let r = |len, ctx| DevRead::<u32>::new(0xa0, len, ctx);
    let mut all: Vec<(String, Vec<u64>)> = Vec::new();
    let mut add = |what: &str, w: Vec<u64>| all.push((what.to_string(), w));
    add("u32 u32", words(&base((1u32, 2u32))));
    add("u64", words(&base((2u64 << 32 | 1,))));
    add("u32 u32 u32", words(&base((1u32, 2u32, 0u32))));
    add("[u8;12]", words(&base(([1u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],))));
    add("buffer", words(&base((r(1, CTX),))));
    add("buffer ctx1", words(&base((r(1, CTX1),))));
    add("scalar len 1", words(&base((DeviceScalar::new(r(1, CTX)),))));
    add("scalar len 2", words(&base((DeviceScalar::new(r(2, CTX)),))));
    add("plain 0xa0", words(&base((0xa0u64,))));
    add("condition 0xa0", words(&base((crate::Condition::new(0xa0, 0, 0),))));
    let mut k = base((1u32, 2u32));
    k.dims = LaunchDims { grid: (4, 32, 1), block: (1, 1, 1), shared_bytes: 0 };
    add("dims moved", words(&k));
    k.dims = LaunchDims::new(4, 32).shared(1);
    add("shared", words(&k));
    let mut k = base((1u32, 2u32));
    k.programmatic = true;
    add("programmatic", words(&k));
    k.programmatic = false;
    k.on = CTX1;
    add("node ctx1", words(&k));
    k.on = CTX;
    k.func = 0x20;
    add("function", words(&k));
    let mut equal = Vec::new();
    for (i, (a, wa)) in all.iter().enumerate() {
        for (b, wb) in &all[..i] {
            if wa == wb {
                equal.push(format!("{a} = {b}"));
            }
        }
    }
    // (A `Condition` and a plain `u64` of the same value packed alike before session 16; the
    // layout in the first word now tells a plain argument from any other.)
    assert_eq!(equal, Vec::<String>::new(), "{all:?}");
}

/// The two ways to the unchanged-call check, the call's words made with its statements
/// (`graph!`) and the node list packed by the cache, take the same steps: two caches run the
/// same 400 calls (buffers swapped between two and three sets, a scalar changed now and then,
/// host `if`s switching the variant, a node absent), one each way, and their stats and driver
/// calls agree after every call.
#[test]
fn words_made_with_the_statements_decide_as_the_node_list_does() {
    let plan = kernels_plan(3);
    let (ma, mb) = (Mock::default(), Mock::default());
    let mut a = GraphCache::with_driver(ma.clone(), 8);
    let mut b = GraphCache::with_driver(mb.clone(), 8);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for call in 1..=400u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let set = if call < 200 { call % 2 } else { call % 3 };
        let scalar = if x.is_multiple_of(17) { 9 } else { 1 };
        let key = u64::from(x.is_multiple_of(11));
        let (k0, k1, k2) = (
            kn(scalar, 0xa00 + 0x100 * set, call, 0),
            kn(2, 0xb00 + 0x100 * set, call, 1),
            kn(3, 0xc00, call, 2),
        );
        let nodes = [
            Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
            Some(NodeParams::Kernel(&k1 as &dyn KernelNode)),
            (key == 0).then_some(NodeParams::Kernel(&k2 as &dyn KernelNode)),
        ];
        run_checked(&mut a, plan, key, &nodes, call).unwrap();
        run_checked_list(&mut b, plan, key, &nodes, call).unwrap();
        assert_eq!(a.stats(), b.stats(), "call {call}");
        assert_eq!(ma.calls(), mb.calls(), "call {call}");
    }
    let s = a.stats();
    assert!(s.unchanged_calls > 100 && s.memo_hits > 100, "{s:?}");
}

/// Words are lent the words of the variant launched last, which `take_back` gives back: words
/// given to another cache, or back after that variant was removed, give nothing back and are
/// not taken as unchanged (the other cache's call is checked node by node); words never given
/// back (a body that panicked) leave the variant without words, so its next call is compared
/// node by node too, and sends nothing new.
#[test]
fn words_given_to_another_cache_or_never_given_back_are_not_unchanged() {
    fn list(p: &(RK<Args>, RK<Args>)) -> Vec<Option<NodeParams<'_>>> {
        kernel_nodes(&[&p.0, &p.1])
    }
    let plan = kernels_plan(2);
    let (ma, mb) = (Mock::default(), Mock::default());
    let mut a = GraphCache::with_driver(ma.clone(), 8);
    let mut b = GraphCache::with_driver(mb.clone(), 8);
    let pair = |id| (kn(1, 0xa0, id, 0), kn(2, 0xb0, id, 1));
    for id in 1..=2 {
        let p = pair(id);
        run_checked(&mut a, plan, 0, &list(&p), id).unwrap();
        run_checked(&mut b, plan, 0, &list(&p), id).unwrap();
    }
    assert_eq!((a.stats().unchanged_calls, b.stats().unchanged_calls), (1, 1));
    // Words made by `a`, equal to its last call's, given to `b`.
    let p = pair(3);
    let nodes = list(&p);
    let mut words = a.words(plan, &crate::operand::CallId(3));
    for n in nodes.iter().flatten() {
        words.node(&|q: &mut Pack<'_>| n.pack(q));
    }
    let words = b.take_back(words);
    assert!(!words.ok, "words of another cache");
    run_rest(&mut b, plan, 0, &nodes, 3, Some(words)).unwrap();
    assert_eq!(b.stats().unchanged_calls, 1, "checked node by node");
    assert_eq!(b.stats().node_updates, 0, "nothing changed");
    // `a` lent its variant's words and never got them back: its next call is compared node
    // by node (no update sent), and the one after is unchanged again.
    ma.calls();
    let p = pair(4);
    run_checked(&mut a, plan, 0, &list(&p), 4).unwrap();
    assert_eq!(a.stats().unchanged_calls, 1);
    assert_eq!(a.stats().node_updates, 0);
    assert_eq!(ma.calls(), ["launch"]);
    let p = pair(5);
    run_checked(&mut a, plan, 0, &list(&p), 5).unwrap();
    assert_eq!(a.stats().unchanged_calls, 2);
    // Words lent by a variant removed before they come back: nothing given back.
    let p = pair(6);
    let nodes = list(&p);
    let mut words = a.words(plan, &crate::operand::CallId(6));
    for n in nodes.iter().flatten() {
        words.node(&|q: &mut Pack<'_>| n.pack(q));
    }
    a.clear();
    let words = a.take_back(words);
    assert!(words.from.is_none() && !words.ok);
    run_rest(&mut a, plan, 0, &nodes, 6, Some(words)).unwrap();
    assert_eq!(a.stats().unchanged_calls, 2, "built anew");
    assert_eq!(a.stats().builds, 2);
}

/// Words of another plan or another call id (their handles were packed as that call's places)
/// are not this call's: checked node by node, and a handle of another call is refused.
#[test]
fn words_of_another_call_are_not_this_calls() {
    let plan = kernels_plan(2);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let pair = |id| (kn(1, 0xa0, id, 0), kn(2, 0xb0, id, 1));
    for id in 1..=2 {
        let p = pair(id);
        run_checked(&mut cache, plan, 0, &kernel_nodes(&[&p.0, &p.1]), id).unwrap();
    }
    assert_eq!(cache.stats().unchanged_calls, 1);
    // Words made for call 3 from call 3's nodes, run with call 4's id and call 3's handles.
    let p = pair(3);
    let nodes = kernel_nodes(&[&p.0, &p.1]);
    let mut words = cache.words(plan, &crate::operand::CallId(3));
    for n in nodes.iter().flatten() {
        words.node(&|q: &mut Pack<'_>| n.pack(q));
    }
    let words = cache.take_back(words);
    let e = run_rest(&mut cache, plan, 0, &nodes, 4, Some(words)).unwrap_err();
    assert!(matches!(e, Error::InvalidNode { .. }), "{e}");
    assert_eq!(cache.stats().unchanged_calls, 1);
}

/// Words lost now and then (made, then dropped before the call, as by a body that panicked)
/// and hand-made words held across a call never make a call unchanged whose exec was last
/// launched with other parameters: over 300 calls (buffers swapped between two and three sets,
/// scalars and keys changing), every call counted unchanged equals, word for word, the last
/// call that launched the same exec (whatever the node-list path, given the same calls without
/// lost words, would have done instead: the two caches' execs differ once words are lost).
#[test]
fn lost_or_held_words_never_make_a_call_unchanged_that_is_not() {
    use crate::kind::kernel::WORDS_TAG;
    let plan = kernels_plan(3);
    let mut a = GraphCache::with_driver(Mock::default(), 8);
    let words_of = |nodes: &[Option<NodeParams<'_>>], id: u64| -> Vec<u64> {
        let mut out = Vec::new();
        let mut p = Compare::new(&[], &mut out, Some(id));
        p.node(&|p: &mut Pack<'_>| {
            p.push(WORDS_TAG);
            true
        });
        for n in nodes.iter().flatten() {
            assert!(p.node(&|p: &mut Pack<'_>| n.pack(p)));
        }
        assert!(!p.finish());
        out
    };
    let mut launched: std::collections::HashMap<u64, Vec<u64>> = Default::default();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut held = None;
    let mut lost = 0;
    for call in 1..=300u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let set = if call < 150 { call % 2 } else { call % 3 };
        let scalar = if x.is_multiple_of(13) { 5 } else { 1 };
        let key = u64::from(x.is_multiple_of(7));
        let (k0, k1, k2) = (
            kn(scalar, 0xa00 + 0x100 * set, call, 0),
            kn(2, 0xb00 + 0x100 * set, call, 1),
            kn(3, 0xc00, call, 2),
        );
        let nodes = [
            Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
            Some(NodeParams::Kernel(&k1 as &dyn KernelNode)),
            (key == 0).then_some(NodeParams::Kernel(&k2 as &dyn KernelNode)),
        ];
        match x % 5 {
            // Words made and dropped (lost), before the call.
            0 => {
                drop(a.words(plan, &crate::operand::CallId(call)));
                lost += 1;
            }
            // Words made and held across this call, dropped before the next.
            1 => held = Some(a.words(plan, &crate::operand::CallId(call))),
            _ => {}
        }
        let before = a.stats().unchanged_calls;
        run_checked(&mut a, plan, key, &nodes, call).unwrap();
        drop(held.take());
        let i = (0..a.variants.len()).max_by_key(|&i| a.variants[i].last_use).unwrap();
        let words = words_of(&nodes, call);
        let last = launched.insert(a.variants[i].serial, words.clone());
        if a.stats().unchanged_calls > before {
            assert_eq!(last.as_ref(), Some(&words), "call {call}: unchanged, other parameters");
        }
    }
    let s = a.stats();
    assert!(s.unchanged_calls + s.memo_hits > 50 && lost > 30, "{s:?}");
}
