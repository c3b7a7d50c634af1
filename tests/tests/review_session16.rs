//! Review 16 (commits 4d0deaf and 280e5f7: a kernel node's unchanged-call words with a 1-D
//! dims word, a per-argument layout and no context word for `kernels!` launches; and
//! `Ledger::before` skipping a place whose own stream is the place before's). Safe code only.
//! The CPU side (every argument kind at one position, dims forms, more than 8 arguments, node
//! pairs) is `cudagraph/src/cache/review16.rs`; here the two things only a GPU shows:
//! - `dims_forms_alternate_exactly`: one statement launched with dims that differ only in what
//!   the 1-D word leaves out (a 2-D grid of the same block count, a 2-D block of the same
//!   thread count, dynamic shared memory), alternating with calls that repeat (unchanged):
//!   a wrong unchanged call leaves part of the buffer unwritten or written with another
//!   scalar; each call is compared exactly with the eager oracle on a mirror buffer.
//! - `own_streams_interleaved_a_b_a_are_all_ordered`: a call whose places' own streams come
//!   A, B, A (the skip of 280e5f7 looks only at the place before): slow writers on A and B
//!   just before, the buffers dropped right after the call and their memory taken by decoys
//!   filled with a marker. A stream the ledger skipped shows as outputs computed from
//!   unwritten inputs, or decoys written by the call.
//!
//! Both must pass on a GPU.

mod common;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, LaunchDims, graph};

const N: u32 = 1 << 14;
const LEN: usize = N as usize;
/// Steps of the slow writers (a few milliseconds on an H200).
const SPINS: u32 = 1 << 14;
const MARKER: u32 = 0xdead_beef;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dims_forms_alternate_exactly() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let forms = [
        LaunchDims::new(N / 256, 256),
        // Half the blocks in x (the kernel indexes by x only): the upper half unwritten.
        LaunchDims { grid: (N / 512, 2, 1), block: (256, 1, 1), shared_bytes: 0 },
        // Half the threads in x: every other half-block unwritten.
        LaunchDims { grid: (N / 256, 1, 1), block: (128, 2, 1), shared_bytes: 0 },
        // Dynamic shared memory only (not in the kernel's results, but in the words).
        LaunchDims::new(N / 256, 256).shared(16),
        // A grid past 2^16 blocks in x would be the 1-D word's own; a block of 1024 threads.
        LaunchDims::new(N / 1024, 1024),
    ];
    let mut cache = GraphCache::new();
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut mirror = s.alloc_zeros::<u32>(LEN)?;
    let mut step = 0usize;
    for call in 0..60u32 {
        // Runs of repeated calls (unchanged), then another form or scalar.
        if call % 3 == 0 {
            step = (step * 7 + 3) % 10;
        }
        let d = forms[step % forms.len()];
        let a = (step / forms.len()) as u32 + 1;
        s.memset_zeros(&mut x)?;
        s.memset_zeros(&mut mirror)?;
        graph!(&mut cache, &s, {
            k.iota(N, a, step as u32, &mut x).launch(d);
        })?;
        let mut eager = GraphCache::eager();
        graph!(&mut eager, &s, {
            k.iota(N, a, step as u32, &mut mirror).launch(d);
        })?;
        let (got, want) = (s.clone_dtoh(&x)?, s.clone_dtoh(&mirror)?);
        assert_same(&got, &want, &format!("call {call}, dims {d:?}, a {a}"));
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 20, "{st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn own_streams_interleaved_a_b_a_are_all_ordered() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
    let (mut on_a, mut on_b) = (GraphCache::new(), GraphCache::new());
    let mut cache = GraphCache::new();
    let mut o0 = s.alloc_zeros::<u32>(LEN)?;
    let mut o1 = s.alloc_zeros::<u32>(LEN)?;
    let mut o2 = s.alloc_zeros::<u32>(LEN)?;
    let mut o3 = s.alloc_zeros::<u32>(LEN)?;
    for call in 0..20u32 {
        let mut x1 = a.alloc_zeros::<u32>(LEN)?;
        let mut y = b.alloc_zeros::<u32>(LEN)?;
        let mut x2 = a.alloc_zeros::<u32>(LEN)?;
        let mut y2 = b.alloc_zeros::<u32>(LEN)?;
        graph!(&mut on_a, &a, {
            k.slow_iota(N, SPINS, 1, call, &mut x1).launch(cfg());
            k.slow_iota(N, SPINS, 2, call, &mut x2).launch(cfg());
        })?;
        graph!(&mut on_b, &b, {
            k.slow_iota(N, SPINS, 3, call, &mut y).launch(cfg());
            k.slow_iota(N, SPINS, 4, call, &mut y2).launch(cfg());
        })?;
        // Places in the order x1 (A), y (B), x2 (A), y2 (B): every own stream follows another.
        graph!(&mut cache, &s, {
            k.mix(N, &x1, &mut o0).launch(cfg());
            k.mix(N, &y, &mut o1).launch(cfg());
            k.mix(N, &x2, &mut o2).launch(cfg());
            k.mix(N, &y2, &mut o3).launch(cfg());
        })?;
        // Freed at once (on A and B), their memory taken by decoys on the same streams.
        drop((x1, y, x2, y2));
        let decoys = [
            a.clone_htod(&vec![MARKER; LEN])?,
            a.clone_htod(&vec![MARKER; LEN])?,
            b.clone_htod(&vec![MARKER; LEN])?,
            b.clone_htod(&vec![MARKER; LEN])?,
        ];
        for (i, (out, m)) in [&o0, &o1, &o2, &o3].into_iter().zip([1u32, 3, 2, 4]).enumerate() {
            let want = host::mix(&host::slow_iota(N, SPINS, m, call));
            assert_same(&s.clone_dtoh(out)?, &want, &format!("call {call}, output {i}"));
        }
        for d in &decoys {
            let got = a.clone_dtoh(d)?;
            assert!(got.iter().all(|&v| v == MARKER), "call {call}: a decoy was written");
        }
        b.synchronize()?;
    }
    Ok(())
}
