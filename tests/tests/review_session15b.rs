//! Review 15b (commit 4f4c2e9: a `graph!` call's unchanged-call words are made as its
//! statements are evaluated, `GraphCache::words` lends the words of the variant launched last,
//! `__private::word_node` puts each node in, `run_words` gives them back and skips validation
//! and every update when they are equal): safe code only, against that equality. A wrong
//! "unchanged" launches an exec holding the pointers of an earlier call.
//!
//! Every call is compared exactly with the eager oracle (`GraphCache::eager()`) run on mirror
//! buffers with the same inputs. Between calls, buffers are permuted among the places, or one is
//! freed at once and its memory taken by a decoy filled with a marker before a new buffer
//! replaces it: an exec left holding a freed pointer writes into a decoy (checked after every
//! call) and leaves the new buffer unwritten. What each test attacks (all: pass on a GPU):
//! - `words_follow_every_choice_over_many_calls`: 400 calls of one body with chunked
//!   statements, a host `if`/`else` whose branches are the same statement, a nested `if`
//!   whose inner branch is the outer `else`'s statement, an unrolled `for` around an `if`, a
//!   user method choosing one of two kernels of one signature, launch dims changing between a
//!   full and a half grid, and statements not chunkable (a macro in an argument), with scalars,
//!   branches and buffers changing or repeating at random.
//! - `bodies_stopped_after_their_words_were_lent`: the body panics, or returns early through
//!   `?` in an argument, after `words` lent the variant's words (in a plain statement after a
//!   chunk, or inside a host `if` branch): nothing runs, and every later call is still right.
//! - `one_cache_shared_by_two_sites_a_builder_and_every_setting`: two `graph!` sites and a
//!   `GraphBuilder` on one cache, alternately, beside a second cache of one variant
//!   (`with_max_variants(1)`) on the same buffers, with `Mode::Eager`/`Instantiate` switches,
//!   `clear`, and `set_execs_per_variant` changes between calls.
//! - `hand_made_words_between_calls`: `GraphCache::words` and `word_node` called by hand (with
//!   the real plan of the call site, from `cudagraph::plans()`): words dropped, words held
//!   across the site's next call, words of another cache, nodes put in twice.
//! - `user_deref_that_changes_buffers_or_panics`: a `DerefMut` of the user's returning the other
//!   of two buffer sets on every call and panicking on some.

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, read_all, same_all};
use cudagraph::__private::{Guards, acquire_mut_into, begin_call, word_node, zero};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{DevWrite, GraphCache, KernelCall, Mode, graph};

const N: u32 = 1 << 14;
const LEN: usize = N as usize;
/// Steps of the slow kernel: a slow first writer, so that later nodes run late.
const SPINS: u32 = 1 << 12;
const MARKER: u32 = 0xdead_beef;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// Half of `cfg`'s threads: a launch with these dims leaves the upper half unwritten.
fn half() -> LaunchConfig {
    LaunchConfig { grid_dim: (N / 512, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

impl Ops {
    /// A method of the user's choosing one of two kernels of one signature at run time.
    fn pick<'k, 'b>(
        &'k self,
        first: bool,
        n: u32,
        a: u32,
        b: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, u32, u32, DevWrite<'b, u32>)> {
        if first { self.iota(n, a, b, x) } else { self.affine_inplace(n, a, b, x) }
    }
}

/// Xorshift.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n) as usize
    }
    fn flip(&mut self) -> bool {
        self.below(2) == 0
    }
}

/// One call's inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Choice {
    a: u32,
    b: u32,
    half: bool,
    f1: bool,
    f2: bool,
    f3: bool,
    pick: bool,
}

impl Choice {
    /// Few values each, so that calls often repeat.
    fn new(r: &mut Rng) -> Self {
        Choice {
            a: 1 + r.below(2) as u32,
            b: 7 * r.below(2) as u32,
            half: r.below(4) == 0,
            f1: r.flip(),
            f2: r.flip(),
            f3: r.flip(),
            pick: r.flip(),
        }
    }
}

/// The graph's buffers, the oracle's, and decoys holding freed memory.
struct Pools {
    g: Vec<CudaSlice<u32>>,
    e: Vec<CudaSlice<u32>>,
    decoys: Vec<CudaSlice<u32>>,
}

impl Pools {
    fn new(s: &Arc<CudaStream>, n: usize) -> Result<Self> {
        let g = (0..n).map(|i| s.clone_htod(&host::iota(N, 3, i as u32)));
        let e = (0..n).map(|i| s.clone_htod(&host::iota(N, 3, i as u32)));
        Ok(Pools {
            g: g.collect::<std::result::Result<_, _>>()?,
            e: e.collect::<std::result::Result<_, _>>()?,
            decoys: Vec::new(),
        })
    }

    /// Between calls: two buffers swapped places, or one freed at once (its memory taken by a
    /// decoy) and replaced by a new one, or nothing (half the time).
    fn churn(&mut self, r: &mut Rng, s: &Arc<CudaStream>, call: u32) -> Result {
        let n = self.g.len() as u64;
        match r.below(4) {
            0 => {
                let (i, j) = (r.below(n), r.below(n));
                self.g.swap(i, j);
                self.e.swap(i, j);
            }
            1 => {
                let i = r.below(n);
                let fresh = host::iota(N, 5, call);
                drop(self.g.remove(i));
                self.decoys.push(s.clone_htod(&vec![MARKER; LEN])?);
                self.g.insert(i, s.clone_htod(&fresh)?);
                self.e[i] = s.clone_htod(&fresh)?;
                if self.decoys.len() > 6 {
                    self.decoys.remove(0);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The graph's buffers equal the oracle's, and no decoy was written.
    #[track_caller]
    fn check(&self, s: &Arc<CudaStream>, what: &str) -> Result {
        same_all(&read_all(s, &self.g)?, &read_all(s, &self.e)?, what);
        for (i, d) in self.decoys.iter().enumerate() {
            assert_same(&s.clone_dtoh(d)?, &vec![MARKER; LEN], &format!("{what}: decoy {i}"));
        }
        Ok(())
    }
}

/// Chunks, host `if`s whose branches are one statement, a nested `if`, an unrolled `for` around
/// an `if`, a kernel chosen at run time, dims chosen at run time, a statement with a macro in
/// an argument (built in place), and a named node used in `.after(…)`.
fn many(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &mut [CudaSlice<u32>],
    c: Choice,
) -> cudagraph::Result<()> {
    let dims = if c.half { half() } else { cfg() };
    graph!(cache, s, {
        k.slow_iota(N, SPINS, c.a, c.b, &mut p[0]).launch(cfg());
        k.affine(N, 3, c.b, &p[0], &mut p[1]).launch(dims);
        if c.f1 {
            k.affine_inplace(N, c.a, 1, &mut p[1]).launch(cfg());
        } else {
            k.affine_inplace(N, c.a, 1, &mut p[1]).launch(cfg());
        }
        if c.f2 {
            if c.f3 {
                k.mix(N, &p[1], &mut p[2]).launch(cfg());
            }
        } else {
            k.mix(N, &p[1], &mut p[2]).launch(cfg());
        }
        for r in 0..3 {
            if c.f3 {
                k.affine_inplace(N, r + 1, c.a, &mut p[3]).launch(cfg());
            }
        }
        k.pick(c.pick, N, 5, c.a, &mut p[4]).launch(cfg());
        let z = zero(&mut p[5]);
        k.affine(N, 1, u32::from(matches!(c.a, 1)), &p[4], &mut p[5]).launch(dims).after(z);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn words_follow_every_choice_over_many_calls() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut pools = Pools::new(&s, 6)?;
    let (mut cache, mut oracle) = (GraphCache::new(), GraphCache::eager());
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut c = Choice::new(&mut r);
    for call in 0..400u32 {
        pools.churn(&mut r, &s, call)?;
        if r.flip() {
            c = Choice::new(&mut r);
        }
        many(&mut cache, &k, &s, &mut pools.g, c)?;
        many(&mut oracle, &k, &s, &mut pools.e, c)?;
        pools.check(&s, &format!("call {call}, {c:?}"))?;
    }
    let st = cache.stats();
    assert!(st.unchanged_calls > 20, "the words path was taken: {st:?}");
    Ok(())
}

/// Where [`stopping`] stops.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    No,
    PanicPlain,
    ErrPlain,
    PanicInIf,
    ErrInIf,
}

fn at(stop: Stop, here: [Stop; 2]) -> std::result::Result<u32, String> {
    if stop == here[0] {
        panic!("stopped: {stop:?}");
    }
    if stop == here[1] {
        return Err(format!("stopped: {stop:?}"));
    }
    Ok(1)
}

/// A chunk, a host `if`, a plain statement that may stop (`?` or a panic in an argument) after
/// the chunk's words, and one inside an `if` branch.
fn stopping(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &mut [CudaSlice<u32>],
    c: Choice,
    stop: Stop,
) -> std::result::Result<(), String> {
    graph!(cache, s, {
        k.iota(N, c.a, c.b, &mut p[0]).launch(cfg());
        k.affine(N, 3, c.b, &p[0], &mut p[1]).launch(cfg());
        if c.f1 {
            k.affine_inplace(N, c.a, 1, &mut p[1]).launch(cfg());
        }
        k.affine(N, at(stop, [Stop::PanicPlain, Stop::ErrPlain])?, c.a, &p[1], &mut p[2])
            .launch(cfg());
        if c.f2 {
            k.mix(N, &p[2], &mut p[3]).launch(cfg());
            k.affine_inplace(N, at(stop, [Stop::PanicInIf, Stop::ErrInIf])?, 2, &mut p[3])
                .launch(cfg());
        }
    })
    .map_err(|e| e.to_string())
}

/// [`stopping`], a panic caught: `Err` with its text.
fn stopping_caught(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &mut [CudaSlice<u32>],
    c: Choice,
    stop: Stop,
) -> std::result::Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stopping(cache, k, s, p, c, stop)))
        .unwrap_or_else(|panic| {
            Err(panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "panic".into()))
        })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bodies_stopped_after_their_words_were_lent() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut pools = Pools::new(&s, 4)?;
    let (mut cache, mut oracle) = (GraphCache::new(), GraphCache::eager());
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut c = Choice::new(&mut r);
    let stops = [Stop::No, Stop::PanicPlain, Stop::ErrPlain, Stop::PanicInIf, Stop::ErrInIf];
    let mut stopped = 0;
    for call in 0..300u32 {
        pools.churn(&mut r, &s, call)?;
        if r.flip() {
            c = Choice::new(&mut r);
        }
        // Most calls run; a stop usually follows or precedes a call of the same inputs.
        let stop = if r.below(3) == 0 { stops[1 + r.below(4)] } else { Stop::No };
        let got = stopping_caught(&mut cache, &k, &s, &mut pools.g, c, stop);
        let want = stopping_caught(&mut oracle, &k, &s, &mut pools.e, c, stop);
        assert_eq!(got, want, "call {call}, {c:?}, {stop:?}");
        let late = matches!(stop, Stop::PanicInIf | Stop::ErrInIf);
        assert_eq!(got.is_err(), stop != Stop::No && (!late || c.f2), "call {call}");
        stopped += usize::from(got.is_err());
        pools.check(&s, &format!("call {call}, {c:?}, {stop:?}"))?;
    }
    assert!(stopped > 30, "{stopped} calls stopped");
    let st = cache.stats();
    assert!(st.unchanged_calls > 20, "the words path was taken: {st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_cache_shared_by_two_sites_a_builder_and_every_setting() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut pools = Pools::new(&s, 6)?;
    let mut caches = [GraphCache::new(), GraphCache::with_max_variants(1)];
    let mut oracle = GraphCache::eager();
    let mut r = Rng(0x51_7cc1_b727_220a);
    let mut c = Choice::new(&mut r);
    for call in 0..400u32 {
        pools.churn(&mut r, &s, call)?;
        if r.flip() {
            c = Choice::new(&mut r);
        }
        let what = format!("call {call}, {c:?}");
        let cache = &mut caches[usize::from(r.below(4) == 0)];
        match r.below(12) {
            0 => {
                // A builder call on the same cache (another site).
                let mut g = cache.builder(&s);
                let w = g.write(&mut pools.g[0]);
                g.kernel(k.iota(N, c.a, 9, w).launch(cfg()));
                g.launch()?;
                graph!(&mut oracle, &s, { k.iota(N, c.a, 9, &mut pools.e[0]).launch(cfg()) })?;
            }
            1 => {
                // One call in `Mode::Eager`.
                cache.set_mode(Mode::Eager);
                many(cache, &k, &s, &mut pools.g, c)?;
                cache.set_mode(Mode::Graph);
                many(&mut oracle, &k, &s, &mut pools.e, c)?;
            }
            2 => {
                // One call in `Mode::Instantiate`: uploaded, not run.
                cache.set_mode(Mode::Instantiate);
                many(cache, &k, &s, &mut pools.g, c)?;
                cache.set_mode(Mode::Graph);
            }
            3 => cache.clear(),
            4 => cache.set_execs_per_variant(1 + r.below(3)),
            5..=7 => {
                // The other site.
                let stop = Stop::No;
                stopping(cache, &k, &s, &mut pools.g, c, stop).expect("site B");
                stopping(&mut oracle, &k, &s, &mut pools.e, c, stop).expect("site B, eager");
            }
            _ => {
                many(cache, &k, &s, &mut pools.g, c)?;
                many(&mut oracle, &k, &s, &mut pools.e, c)?;
            }
        }
        pools.check(&s, &what)?;
    }
    let st = caches[0].stats();
    assert!(st.unchanged_calls > 10, "the words path was taken: {st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hand_made_words_between_calls() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    // The plan of `many`'s call site, as any safe code can find it.
    let plan = cudagraph::plans()
        .find(|p| p.file == file!() && p.nodes.iter().any(|n| n.text.contains("pick")))
        .expect("the plan of `many`");
    let mut pools = Pools::new(&s, 6)?;
    let mut scratch = s.alloc_zeros::<u32>(LEN)?;
    let (mut cache, mut other, mut oracle) =
        (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut c = Choice::new(&mut r);
    for call in 0..300u32 {
        pools.churn(&mut r, &s, call)?;
        if r.flip() {
            c = Choice::new(&mut r);
        }
        let what = format!("call {call}, {c:?}");
        // A node of scratch's, of another call.
        let id = begin_call();
        let mut guards = Guards::<1>::new();
        let (_r, w) = acquire_mut_into(&mut scratch, &s, &id, 0, &mut guards);
        let node = zero(w);
        // Each call of `many` on the graph's buffers is matched by one of the oracle on its own.
        let mut run = |cache: &mut GraphCache, pools: &mut Pools| -> Result {
            many(cache, &k, &s, &mut pools.g, c)?;
            many(&mut oracle, &k, &s, &mut pools.e, c)
        };
        match r.below(5) {
            0 => {
                // Words made by hand and dropped: the variant's words are lost.
                let mut words = cache.words(plan, &id);
                word_node(&mut words, &node);
                drop(words);
                run(&mut cache, &mut pools)?;
            }
            1 => {
                // Words of this cache held across its next call.
                let mut words = cache.words(plan, &begin_call());
                run(&mut cache, &mut pools)?;
                word_node(&mut words, &node);
                word_node(&mut words, &node);
                drop(words);
            }
            2 => {
                // Words of another cache (which runs the same site too) held across this
                // cache's call.
                run(&mut other, &mut pools)?;
                let mut words = other.words(plan, &id);
                word_node(&mut words, &node);
                run(&mut cache, &mut pools)?;
                drop(words);
            }
            _ => run(&mut cache, &mut pools)?,
        }
        if r.below(3) == 0 {
            // Words made at once before the next call, never given back.
            drop(cache.words(plan, &begin_call()));
        }
        drop(guards);
        if r.below(5) == 2 {
            // The other cache must still be right too (its words may be lost).
            run(&mut other, &mut pools)?;
        }
        pools.check(&s, &what)?;
    }
    Ok(())
}

/// Hands out one of two buffer sets, the other one on each call; panics on the turns listed.
struct Shifty {
    sets: [Vec<CudaSlice<u32>>; 2],
    turn: Cell<usize>,
    panic_on: Vec<usize>,
}

impl std::ops::Deref for Shifty {
    type Target = [CudaSlice<u32>];
    fn deref(&self) -> &[CudaSlice<u32>] {
        &self.sets[self.turn.get() % 2]
    }
}

impl std::ops::DerefMut for Shifty {
    fn deref_mut(&mut self) -> &mut [CudaSlice<u32>] {
        let t = self.turn.get();
        self.turn.set(t + 1);
        assert!(!self.panic_on.contains(&t), "Shifty: turn {t}");
        &mut self.sets[t % 2]
    }
}

fn shifty(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    sh: &mut Shifty,
    c: Choice,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.iota(N, c.a, c.b, &mut sh[0]).launch(cfg());
        k.affine(N, 2, 1, &sh[0], &mut sh[1]).launch(cfg());
        if c.f1 {
            k.mix(N, &sh[1], &mut sh[2]).launch(cfg());
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn user_deref_that_changes_buffers_or_panics() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let set = |b: u32| -> Result<Vec<CudaSlice<u32>>> {
        Ok((0..3)
            .map(|i| s.clone_htod(&host::iota(N, 1, b + i)))
            .collect::<std::result::Result<_, _>>()?)
    };
    let panic_on: Vec<usize> = (0..200).filter(|t| t % 7 == 3).collect();
    let mut g =
        Shifty { sets: [set(0)?, set(10)?], turn: Cell::new(0), panic_on: panic_on.clone() };
    let mut e = Shifty { sets: [set(0)?, set(10)?], turn: Cell::new(0), panic_on };
    let (mut cache, mut oracle) = (GraphCache::new(), GraphCache::eager());
    let mut r = Rng(0x0bad_cafe_f00d_d00d);
    let mut c = Choice::new(&mut r);
    for call in 0..120u32 {
        if r.flip() {
            c = Choice::new(&mut r);
        }
        let what = format!("call {call}, {c:?}");
        let run = |cache: &mut GraphCache, sh: &mut Shifty| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shifty(cache, &k, &s, sh, c)))
                .map_err(drop)
        };
        let got = run(&mut cache, &mut g);
        let want = run(&mut oracle, &mut e);
        assert_eq!(got.is_ok(), want.is_ok(), "{what}");
        if let (Ok(a), Ok(b)) = (got, want) {
            a?;
            b?;
        }
        assert_eq!(g.turn.get(), e.turn.get(), "{what}");
        for i in 0..2 {
            same_all(
                &read_all(&s, &g.sets[i])?,
                &read_all(&s, &e.sets[i])?,
                &format!("{what}: set {i}"),
            );
        }
        if call % 10 == 9 {
            // One set freed at once, its memory taken by a decoy, and replaced.
            let i = r.below(2);
            let b = 100 + call;
            g.sets[i] = Vec::new();
            let decoy = s.clone_htod(&vec![MARKER; LEN * 3])?;
            g.sets[i] = set(b)?;
            e.sets[i] = set(b)?;
            let c2 = c;
            let turn = g.turn.get();
            if !g.panic_on.contains(&turn) {
                shifty(&mut cache, &k, &s, &mut g, c2)?;
                shifty(&mut oracle, &k, &s, &mut e, c2)?;
            }
            assert_same(&s.clone_dtoh(&decoy)?, &vec![MARKER; LEN * 3], &format!("{what}: decoy"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls > 5, "the words path was taken: {st:?}");
    Ok(())
}
