//! `InstantiateFlags::device_launch` (`CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`, launched from
//! the host): a fan of kernels and a copy into pinned memory, called unchanged, with a scalar
//! changed (a node updated in place), with its buffers swapped between two sets (memoized
//! execs) and with an element of its `BufferArray` replaced, each call against the same steps in
//! `Mode::Eager` (exact, integers); and a body the flag cannot instantiate (a host node) is the
//! call's error, after which the cache works. Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::{Ops, Result, buffers, gpu_untracked, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{BufferArray, GraphCache, InstantiateFlags, PinnedBuffer, Rows, graph};

const N: u32 = 1024;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn flagged() -> GraphCache {
    let mut c = GraphCache::new();
    c.set_instantiate_flags(InstantiateFlags { device_launch: true, ..Default::default() });
    c
}

macro_rules! steps {
    ($name:ident, $bufs:ty) => {
        /// `p` updated with `a`, 16 elements from it, `p` again, its first two words copied
        /// into `host`.
        fn $name(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            p: &mut CudaSlice<u32>,
            bufs: &mut $bufs,
            host: &mut PinnedBuffer<u32>,
            a: u32,
        ) -> cudagraph::Result<()> {
            const ROWS: Rows = Rows::dense(2, 1);
            graph!(cache, s, {
                k.affine_inplace(N, a, 1, &mut *p).launch(cfg());
                for i in 0..16 {
                    k.affine(N, 2 * i + 1, i, &*p, &mut bufs[i]).launch(cfg());
                }
                k.affine_inplace(N, 3, 7, &mut *p).launch(cfg());
                copy_2d(&*p, ROWS, &mut *host, ROWS);
            })
        }
    };
}
steps!(step, BufferArray<u32>);
steps!(step_vec, [CudaSlice<u32>]);

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_launch_execs_compute_what_eager_computes() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut ps = [s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?];
    let mut ops = [s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?];
    let mut arr: BufferArray<u32> = buffers(&s, 16, LEN)?.into();
    let mut oracle = buffers(&s, 16, LEN)?;
    let mut host = PinnedBuffer::<u32>::zeros(&s, 2)?;
    let mut ohost = PinnedBuffer::<u32>::zeros(&s, 2)?;
    let (mut cache, mut eager) = (flagged(), GraphCache::eager());
    for call in 0..40u32 {
        // Calls 0–9 unchanged, 10–19 a new scalar each, 20–29 `p` swapped every call (two
        // execs memoized), 30–39 unchanged again after element 5 is replaced at call 30.
        let a = if (10..20).contains(&call) { call } else { 5 };
        let w = if (20..30).contains(&call) { (call % 2) as usize } else { 0 };
        if call == 30 {
            arr[5] = s.alloc_zeros::<u32>(LEN)?;
            oracle[5] = s.alloc_zeros::<u32>(LEN)?;
        }
        step(&mut cache, &k, &s, &mut ps[w], &mut arr, &mut host, a)?;
        step_vec(&mut eager, &k, &s, &mut ops[w], &mut oracle, &mut ohost, a)?;
        let what = format!("call {call}");
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &what);
        same_all(&read_all(&s, &ps)?, &read_all(&s, &ops)?, &what);
        assert_eq!(host.as_slice()?, ohost.as_slice()?, "{what}: the copy");
    }
    let st = cache.stats();
    assert_eq!(st.builds - st.memo_builds, 1, "one variant: {st:?}");
    assert!(st.node_updates > 0 && st.memo_hits > 0, "updates and memo hits: {st:?}");
    assert_eq!(st.instantiations, st.builds, "no re-instantiation: {st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_body_a_device_graph_cannot_hold_is_the_calls_error() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = flagged();
    let r = graph!(&mut cache, &s, {
        k.iota(N, 1, 2, &mut x).launch(cfg());
        host(move |()| ());
    });
    let e = r.expect_err("a host node in a device-launch graph");
    let text = e.to_string();
    assert!(text.to_lowercase().contains("instantiat"), "names the instantiation: {text}");
    // The cache and the buffer stay usable: the same kernel without the host node.
    graph!(&mut cache, &s, {
        k.iota(N, 3, 4, &mut x).launch(cfg());
    })?;
    let want = common::host::iota(N, 3, 4);
    assert_eq!(s.clone_dtoh(&x)?, want, "after the refusal");
    Ok(())
}
