//! Review 32: the guessed memo hit (`GraphCache::guess`, `Variant::followed_by`) against the
//! mock driver. Sequences of `graph!`-like calls (words made as the statements are evaluated,
//! `tests::run_words_kernels`' steps) over buffer sets, host `if` variants (keys) and contexts,
//! mixed with `clear`, `set_execs_per_variant`, mode switches, calls whose body panicked (their
//! words dropped while a variant's are lent), and calls of another call site on the same cache.
//! After every call that launched (or uploaded), the exec the mock launched holds this call's
//! parameters; and a cache that guesses does exactly what one that never guesses does (the
//! same results, driver calls and counters): the guess only spares packing and searching.
use super::tests::{CTX, K, Mock, STREAM, kernel_args, kernel_plan, walk_cache, wk};
use super::{GraphCache, GraphCall, Mode, Site};
use crate::error::Result;
use crate::kind::{KernelNode, NodeParams};
use crate::plan::Plan;
use cudarc::driver::sys::CUcontext;

/// Another context than [`CTX`].
const CTX1: CUcontext = 0x1100 as CUcontext;

/// The call id of [`call_words`]' calls (as `tests::WORDS_CALL`).
const CALL: u64 = 7;

/// One step of [`guessing_changes_nothing_but_the_search`].
#[derive(Clone, Debug)]
enum Step {
    /// A call of buffer set `set` (each kernel's pointer), scalar `scalar`, host `if` key
    /// `key`, context `ctx` (0 or 1).
    Call {
        set: u8,
        scalar: u8,
        key: u8,
        ctx: u8,
    },
    /// Calls of the buffer sets and keys `order` (scalar 0, context 0), `reps` times over.
    Turns(Vec<(u8, u8)>, u8),
    /// The same call, whose body panicked after `after` nodes: its words dropped.
    Panic {
        set: u8,
        after: u8,
    },
    Clear,
    Execs(usize),
    Mode(u8),
    /// A call of another call site (another plan) on the same cache.
    Other(u8),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0..4u8, 0..2u8, 0..2u8, prop_oneof![9 => Just(0u8), 1 => Just(1u8)])
            .prop_map(|(set, scalar, key, ctx)| Step::Call { set, scalar, key, ctx }),
        6 => (
            proptest::collection::vec((0..3u8, prop_oneof![4 => Just(0u8), 1 => Just(1u8)]), 1..4),
            1..5u8
        )
            .prop_map(|(order, reps)| Step::Turns(order, reps)),
        1 => (0..4u8, 0..4u8).prop_map(|(set, after)| Step::Panic { set, after }),
        1 => Just(Step::Clear),
        1 => (1..5usize).prop_map(Step::Execs),
        1 => prop_oneof![2 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)].prop_map(Step::Mode),
        1 => (0..2u8).prop_map(Step::Other),
    ]
}

/// The kernels of a call: kernel `i` writes `0xa000 + 0x1000 * set + 0x100 * i`.
fn kernels(n: usize, set: u8, scalar: u8, ctx: CUcontext) -> Vec<K> {
    (0..n)
        .map(|i| {
            let ptr = 0xa000 + 0x1000 * u64::from(set) + 0x100 * i as u64;
            let mut k = wk(i, 1 + u32::from(scalar), ptr);
            k.ctx = ctx;
            k
        })
        .collect()
}

/// A `graph!` call of `plan` with key `key` in context `ctx`, words made as its statements are
/// (every place's guard, then each node's), then `run_checked`'s graph-mode steps (no ledger,
/// no aliasing check). With `panic_after = Some(n)`, the body panics after `n` nodes: the words
/// are dropped and nothing runs. In [`Mode::Eager`] only the words are made and given back
/// (the eager run needs a real stream).
fn call_words(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    (key, ctx): (u64, CUcontext),
    ks: &[K],
    panic_after: Option<usize>,
) -> Option<Result<()>> {
    let nodes: Vec<_> = ks.iter().map(|k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect();
    let mut w = cache.words(plan, &crate::operand::CallId(CALL));
    for k in ks {
        w.guard((k.ptr, 4, true));
    }
    for (j, n) in nodes.iter().flatten().enumerate() {
        if panic_after == Some(j) {
            drop(w);
            return None;
        }
        w.node(&|p: &mut crate::kind::kernel::Pack<'_>| n.pack(p));
    }
    w.guarded = true;
    let w = cache.take_back(w);
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
    let handles = Some((plan, CALL));
    let (same, _) = cache.unchanged_words(&call, ctx, w, handles);
    if cache.mode == Mode::Eager {
        return None;
    }
    let mut list = super::Nodes::Ready(&nodes);
    let r = (|| {
        if same.is_none() {
            cache.validate_changed_call(&call, ctx, &mut list, handles)?;
        }
        cache.enable_peers(call.shape)?;
        cache.run_validated(call, (ctx, None), STREAM, &mut list, same)
    })();
    Some(r)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
    /// See the module's doc. Cache `a` guesses; `b` has its guess taken away before every
    /// call (as if the last call had been no memo hit).
    #[test]
    fn guessing_changes_nothing_but_the_search(
        steps in proptest::collection::vec(step(), 1..60),
        execs in 1..5usize,
        max in 2..7usize,
    ) {
        const N: usize = 3;
        let plan = kernel_plan(N);
        let other = kernel_plan(2);
        let (ma, mut a) = walk_cache(false, execs, max);
        let (mb, mut b) = walk_cache(false, execs, max);
        ma.track();
        mb.track();
        let mut lost = false;
        for (i, s) in steps.iter().enumerate() {
            let what = format!("step {i} {s:?}");
            b.guess = None;
            let calls: Vec<(u8, u8, u8, u8)> = match s {
                Step::Call { set, scalar, key, ctx } => vec![(*set, *scalar, *key, *ctx)],
                Step::Turns(order, reps) => (0..*reps)
                    .flat_map(|_| order.iter().map(|&(set, key)| (set, 0, key, 0)))
                    .collect(),
                _ => Vec::new(),
            };
            for (set, scalar, key, ctx) in calls {
                b.guess = None;
                let what = format!("{what}: call {:?}", (set, scalar, key, ctx));
                let ctx = if ctx == 0 { CTX } else { CTX1 };
                let ks = kernels(N, set, scalar, ctx);
                let key = u64::from(key);
                let ra = call_words(&mut a, plan, (key, ctx), &ks, None).map(|r| r.map_err(|e| e.to_string()));
                let rb = call_words(&mut b, plan, (key, ctx), &ks, None).map(|r| r.map_err(|e| e.to_string()));
                proptest::prop_assert_eq!(&ra, &rb, "{}", what);
                if let Some(Ok(())) = ra {
                    proptest::prop_assert_eq!(ma.launched_kernels(), kernel_args(&ks), "{}: a launched", what);
                    proptest::prop_assert_eq!(mb.launched_kernels(), kernel_args(&ks), "{}: b launched", what);
                }
                if !lost {
                    proptest::prop_assert_eq!(ma.calls(), mb.calls(), "{}: driver calls", what);
                    proptest::prop_assert_eq!(a.stats(), b.stats(), "{}: counters", what);
                }
            }
            match *s {
                Step::Call { .. } | Step::Turns(..) => {}
                Step::Panic { set, after } => {
                    let ks = kernels(N, set, 0, CTX);
                    let after = Some(usize::from(after) % N);
                    proptest::prop_assert!(call_words(&mut a, plan, (0, CTX), &ks, after).is_none());
                    proptest::prop_assert!(call_words(&mut b, plan, (0, CTX), &ks, after).is_none());
                    // The words lent to the call are lost: the guessing cache lent another
                    // exec's than `b` may have, so from here on they may differ in work (not in
                    // what they launch).
                    lost = true;
                }
                Step::Clear => {
                    a.clear();
                    b.clear();
                }
                Step::Execs(n) => {
                    a.set_execs_per_variant(n);
                    b.set_execs_per_variant(n);
                }
                Step::Mode(m) => {
                    let m = [Mode::Graph, Mode::Instantiate, Mode::Eager][usize::from(m)];
                    a.set_mode(m);
                    b.set_mode(m);
                }
                Step::Other(set) => {
                    let ks = kernels(2, set, 0, CTX);
                    let list: Vec<_> = ks.iter().map(|k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect();
                    if a.mode != Mode::Eager {
                        let ra = a.run_raw(other, 0, (CTX, None), STREAM, &list).map_err(|e| e.to_string());
                        let rb = b.run_raw(other, 0, (CTX, None), STREAM, &list).map_err(|e| e.to_string());
                        proptest::prop_assert_eq!(&ra, &rb, "{}", what);
                        if ra.is_ok() {
                            proptest::prop_assert_eq!(ma.launched_kernels(), kernel_args(&ks), "{}", what);
                        }
                    }
                }
            }
            if !lost {
                proptest::prop_assert_eq!(ma.calls(), mb.calls(), "{}: driver calls", what);
                proptest::prop_assert_eq!(a.stats(), b.stats(), "{}: counters", what);
                proptest::prop_assert_eq!(a.len(), b.len(), "{}", what);
            }
            ma.calls();
            mb.calls();
        }
    }
}
