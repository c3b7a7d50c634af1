//! Issue 31 (session 20): the guards of an array acquired in one loop
//! (`__private::acquire_mut_each`) are compared with the last call's words in one piece (one
//! bounds check, the differences folded into one word), and put into the words one by one
//! only where they were not compared (the words diverged at an earlier place) or differ. Two
//! arrays in one body, an indexed run (the iterations differ only in their elements, so the
//! later iterations' nodes are not compared: the guards' words alone tell a changed call): a
//! call after elements of the first, the second or both were swapped, exchanged between the
//! arrays or replaced by new buffers must be a changed call, and the same call again an
//! unchanged one; a graph that took a changed call for unchanged would apply the other
//! array's operation to an exchanged element, or write a replaced (freed) buffer. Element 0
//! (whose handle the first iteration's node compares) is never changed. Compared with the
//! same calls in `Mode::Eager` on buffers of the same contents (integers: exact).
//!
//! Host-side parts (which calls count as unchanged) also run on the CPU stub driver:
//! `REVIEW17_STUB=1 LD_LIBRARY_PATH=<dir of the libraries .ci/stub-driver builds> cargo test
//! -p cudagraph-tests --test array_words -- --ignored` (values are not compared there).

mod common;

use std::sync::Arc;

use common::review17::same_all;
use common::{Ops, Result, gpu, read_all};
use cudagraph::GraphCache;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};

const LEN: usize = 4096;
const N: u32 = LEN as u32;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `a[i] = 3 a[i] + 1` and `b[i] = 5 b[i] + 2` for each of 4 elements: two arrays, each
/// acquired in one loop.
fn two_arrays(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    a: &mut [CudaSlice<u32>],
    b: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    cudagraph::graph!(cache, s, {
        for i in 0..4 {
            k.affine_inplace(N, 3, 1, &mut a[i]).launch(c);
            k.affine_inplace(N, 5, 2, &mut b[i]).launch(c);
        }
    })
}

/// Four buffers of distinct contents: element `e` of array `tag` holds `i + 1000 e + 100000 tag`.
fn array(s: &Arc<CudaStream>, tag: u32) -> Result<Vec<CudaSlice<u32>>> {
    (0..4u32)
        .map(|e| {
            let v: Vec<u32> = (0..N).map(|i| i + 1000 * e + 100_000 * tag).collect();
            Ok(s.clone_htod(&v)?)
        })
        .collect()
}

/// What is done to both sets of arrays before a call.
#[derive(Clone, Copy, Debug)]
enum Change {
    None,
    /// Two elements of `a` swapped (the same buffers: seen in the counts only).
    SwapA(usize, usize),
    /// `a[i]` and `b[j]` exchanged.
    Exchange(usize, usize),
    /// `a[i]` replaced by a new buffer of the same contents, the old one freed.
    NewA(usize),
    /// `b[i]` replaced by a new buffer of the same contents, the old one freed.
    NewB(usize),
    /// `b[3]` replaced by a buffer 16 elements longer with the same first `LEN` values.
    LongerB3,
}

fn apply(
    s: &Arc<CudaStream>,
    c: Change,
    a: &mut [CudaSlice<u32>],
    b: &mut [CudaSlice<u32>],
) -> Result {
    match c {
        Change::None => {}
        Change::SwapA(x, y) => a.swap(x, y),
        Change::Exchange(i, j) => std::mem::swap(&mut a[i], &mut b[j]),
        Change::NewA(i) => a[i] = s.clone_htod(&s.clone_dtoh(&a[i])?)?,
        Change::NewB(i) => b[i] = s.clone_htod(&s.clone_dtoh(&b[i])?)?,
        Change::LongerB3 => {
            let mut v = s.clone_dtoh(&b[3])?;
            v.extend(0..16);
            b[3] = s.clone_htod(&v)?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_array_compared_in_one_piece_notices_every_changed_element() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut a, mut b) = (array(&s, 1)?, array(&s, 2)?);
    let (mut ea, mut eb) = (array(&s, 1)?, array(&s, 2)?);
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    // Each step's change and whether the call must be unchanged.
    let steps = [
        (Change::None, false),
        (Change::None, true),
        // The first array differs: the second is not compared in one piece (diverged words).
        (Change::SwapA(1, 3), false),
        (Change::None, true),
        (Change::Exchange(2, 1), false),
        (Change::None, true),
        (Change::NewA(3), false),
        (Change::None, true),
        // Only the second array differs: compared in one piece, then put one by one.
        (Change::NewB(1), false),
        (Change::None, true),
        (Change::LongerB3, false),
        (Change::None, true),
    ];
    for (step, &(change, unchanged)) in steps.iter().enumerate() {
        apply(&s, change, &mut a, &mut b)?;
        apply(&s, change, &mut ea, &mut eb)?;
        let before = cache.stats().unchanged_calls;
        two_arrays(&mut cache, &k, &s, &mut a, &mut b)?;
        two_arrays(&mut eager, &k, &s, &mut ea, &mut eb)?;
        let counted = cache.stats().unchanged_calls - before == 1;
        assert_eq!(
            counted,
            unchanged,
            "step {step} ({change:?}): counted unchanged {counted}, want {unchanged}: {:?}",
            cache.stats()
        );
        same_all(&read_all(&s, &a)?, &read_all(&s, &ea)?, &format!("step {step} ({change:?}), a"));
        same_all(&read_all(&s, &b)?, &read_all(&s, &eb)?, &format!("step {step} ({change:?}), b"));
    }
    Ok(())
}
