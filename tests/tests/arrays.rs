//! Elements of one array of buffers written in an unrolled `for` (`&mut bufs[i]`), which
//! `graph!` acquires in one loop (`__private::acquire_mut_each`) with every place's guard put
//! into one `Guards` (issue 31 item 2): the same results as the eager oracle (`Mode::Eager`,
//! exact, integers), with the elements read and written again later in the body, swapped
//! between calls and replaced by another array; and a place that panics after an array was
//! acquired leaves every buffer usable. Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::{Ops, Result, buffers, gpu, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// Six elements written from `x`, five of them read into `out`'s elements, then `bufs[0]`
/// written again from three of them (a read of an element acquired for writing, and a write
/// after reads of the same element).
fn step(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut [CudaSlice<u32>],
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..6 {
            k.affine(N, 2 * i + 1, b + i, &x, &mut bufs[i]).launch(cfg());
        }
        for i in 0..5 {
            k.mix(N, &bufs[i + 1], &mut out[i]).launch(cfg());
        }
        k.combine3(N, &bufs[5], &out[0], &out[4], &mut bufs[0]).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn array_elements_of_an_unrolled_for_match_eager_across_swaps() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let x = s.clone_htod(&(0..N).map(|i| i.wrapping_mul(2_654_435_761)).collect::<Vec<_>>())?;
    // Two sets of arrays for the graph and the same two for the eager oracle.
    let (mut bufs, mut out) = (buffers(&s, 6, LEN)?, buffers(&s, 5, LEN)?);
    let (mut bufs2, mut out2) = (buffers(&s, 6, LEN)?, buffers(&s, 5, LEN)?);
    let (mut ebufs, mut eout) = (buffers(&s, 6, LEN)?, buffers(&s, 5, LEN)?);
    let (mut ebufs2, mut eout2) = (buffers(&s, 6, LEN)?, buffers(&s, 5, LEN)?);
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for call in 0..8u32 {
        step(&mut cache, &k, &s, &x, &mut bufs, &mut out, call)?;
        step(&mut eager, &k, &s, &x, &mut ebufs, &mut eout, call)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &ebufs)?, &format!("call {call}: bufs"));
        same_all(&read_all(&s, &out)?, &read_all(&s, &eout)?, &format!("call {call}: out"));
        // Elements swapped within an array, or the whole arrays replaced by the other set, as
        // the next call's buffers (pointer updates of the same variant).
        match call % 3 {
            0 => {
                bufs.swap(1, 4);
                ebufs.swap(1, 4);
            }
            1 => {
                std::mem::swap(&mut bufs, &mut bufs2);
                std::mem::swap(&mut out, &mut out2);
                std::mem::swap(&mut ebufs, &mut ebufs2);
                std::mem::swap(&mut eout, &mut eout2);
            }
            _ => {}
        }
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "one variant: {st:?}");
    assert!(st.node_updates > 0, "the swapped pointers were updated: {st:?}");
    assert!(st.unchanged_calls == 0, "every call changed a scalar: {st:?}");
    // The host-side sums differ between calls (the results are not all zero).
    assert!(read_all(&s, &bufs)?.iter().any(|b| b.iter().any(|&v| v != 0)));
    Ok(())
}

/// A place whose expression panics after an array's elements were acquired (an index out of
/// range): the acquired guards are dropped with nothing enqueued, and the same call with a valid
/// index then matches eager.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_place_that_panics_after_an_array_was_acquired_leaves_the_cache_usable() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = buffers(&s, 3, LEN)?;
    let mut others = buffers(&s, 2, LEN)?;
    let mut ebufs = buffers(&s, 3, LEN)?;
    let mut eothers = buffers(&s, 2, LEN)?;
    fn call(
        cache: &mut GraphCache,
        k: &Ops,
        s: &Arc<CudaStream>,
        bufs: &mut [CudaSlice<u32>],
        others: &mut [CudaSlice<u32>],
        j: usize,
    ) -> cudagraph::Result<()> {
        graph!(cache, s, {
            for i in 0..3 {
                k.iota(N, 3, i, &mut bufs[i]).launch(cfg());
            }
            k.mix(N, &bufs[2], &mut others[j]).launch(cfg());
        })
    }
    let mut cache = GraphCache::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        call(&mut cache, &k, &s, &mut bufs, &mut others, 7)
    }));
    assert!(r.is_err(), "others[7] is out of range");
    assert_eq!(cache.stats().builds, 0, "nothing was built or enqueued");
    for j in [1, 0, 1] {
        call(&mut cache, &k, &s, &mut bufs, &mut others, j)?;
        call(&mut GraphCache::eager(), &k, &s, &mut ebufs, &mut eothers, j)?;
        same_all(&read_all(&s, &others)?, &read_all(&s, &eothers)?, &format!("others, j = {j}"));
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &ebufs)?, &format!("bufs, j = {j}"));
    }
    Ok(())
}
