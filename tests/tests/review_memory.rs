//! Review (safe-code attack) of graph-owned memory, 2-D copies and memsets and instantiate
//! flags: each GPU test drives one path where a graph-owned buffer's placeholder must resolve to
//! the right variant's address (per-node updates inside a device body, across two variants of
//! one cache, with a row offset, after a re-instantiation under the upload flag), and compares
//! the result with the host model (and eager launches where `eager!` can run the body).
//!
//! Written without a GPU at hand: these tests were compiled but NOT yet run on a GPU.

mod common;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, InstantiateFlags, Rows, eager, graph};

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

/// A graph-owned buffer written inside a device body (a conditional node's body graph) and
/// read after it: a changed scalar of the body's kernel is a per-node update of a node in the
/// body, whose buffer argument must resolve to the variant's allocation again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_scratch_buffer_written_in_a_device_body_keeps_its_address_through_updates() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 777u32;
    let mut out = s.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();
    for (call, a) in [1u32, 2, 2, 5].into_iter().enumerate() {
        graph!(&mut cache, &s, {
            let t = alloc::<u32>(n as usize);
            let c = condition(1);
            device_if(c, {
                k.iota(n, a, 7, &mut t).launch(cfg(n));
            });
            k.mix(n, &t, &mut out).launch(cfg(n));
        })?;
        let want = host::mix(&host::iota(n, a, 7));
        assert_same(&s.clone_dtoh(&out)?, &want, &format!("call {call}, a {a}"));
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "{st:?}");
    assert!(st.node_updates > 0, "the changed scalar went per node: {st:?}");
    Ok(())
}

/// Two variants of one cache (a host `if`), each a graph of its own with its own allocation
/// for the same place (the same placeholder): alternating between them with scalars changed on
/// every call, each variant's per-node updates must use its own graph's address.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_two_variants_with_one_scratch_place_each_resolve_their_own_address() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 1025u32;
    let mut out = s.alloc_zeros::<u32>(n as usize)?;
    let mut held = s.alloc_zeros::<u32>(n as usize)?;
    let mut want = s.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();
    let calls = [(false, 1u32), (true, 2), (false, 3), (true, 4), (true, 5), (false, 6)];
    for (call, (flag, a)) in calls.into_iter().enumerate() {
        graph!(&mut cache, &s, {
            let t = alloc::<u32>(n as usize);
            k.iota(n, a, 7, &mut t).launch(cfg(n));
            if flag {
                k.affine(n, a, 1, &t, &mut out).launch(cfg(n));
            } else {
                k.mix(n, &t, &mut out).launch(cfg(n));
            }
        })?;
        eager!(&s, {
            k.iota(n, a, 7, &mut held).launch(cfg(n));
            if flag {
                k.affine(n, a, 1, &held, &mut want).launch(cfg(n));
            } else {
                k.mix(n, &held, &mut want).launch(cfg(n));
            }
        })?;
        let t = host::iota(n, a, 7);
        let model = if flag { host::affine(&t, a, 1) } else { host::mix(&t) };
        let got = s.clone_dtoh(&out)?;
        assert_same(&got, &model, &format!("call {call}: graph vs host model"));
        assert_same(&got, &s.clone_dtoh(&want)?, &format!("call {call}: graph vs eager"));
    }
    let st = cache.stats();
    assert_eq!((cache.len(), st.builds), (2, 2), "{st:?}");
    assert!(st.node_updates > 0, "{st:?}");
    Ok(())
}

/// 2-D copies and a 2-D memset through a graph-owned buffer with a pitch wider than its rows:
/// the memset's first row (`from_row`) and value change per call (per-node updates, the row
/// offset added to the resolved address), the pitch once (a new allocation size: a
/// re-instantiation). Only the rows are read back (the gaps are never written nor read).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_pitched_copies_and_memsets_through_a_scratch_buffer_match_eager_and_the_model() -> Result
{
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    let (w, h) = (5usize, 4usize);
    let src_host: Vec<u32> = (0..(w * h) as u32).map(|i| 1000 + i).collect();
    let src = s.clone_htod(&src_host)?;
    let mut dst = s.alloc_zeros::<u32>(w * h)?;
    let mut dst_eager = s.alloc_zeros::<u32>(w * h)?;
    let mut cache = GraphCache::new();
    for (call, (pitch, row, v)) in
        [(8usize, 3usize, 9u32), (8, 1, 9), (8, 1, 11), (13, 0, 5), (13, 3, 6)]
            .into_iter()
            .enumerate()
    {
        let set = Rows::new(2, 1, pitch).from_row(row);
        graph!(&mut cache, &s, {
            let t = alloc::<u32>(pitch * h);
            copy_2d(&src, Rows::dense(w, h), &mut t, Rows::new(w, h, pitch));
            memset_2d(&mut t, set, v);
            copy_2d(&t, Rows::new(w, h, pitch), &mut dst, Rows::dense(w, h));
        })?;
        eager!(&s, {
            let t = alloc::<u32>(pitch * h);
            copy_2d(&src, Rows::dense(w, h), &mut t, Rows::new(w, h, pitch));
            memset_2d(&mut t, set, v);
            copy_2d(&t, Rows::new(w, h, pitch), &mut dst_eager, Rows::dense(w, h));
        })?;
        let mut model = src_host.clone();
        model[row * w..row * w + 2].fill(v);
        let got = s.clone_dtoh(&dst)?;
        assert_same(&got, &model, &format!("call {call}: graph vs host model"));
        assert_same(&s.clone_dtoh(&dst_eager)?, &model, &format!("call {call}: eager vs model"));
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "{st:?}");
    assert!(st.reinstantiations >= 1, "the pitch change re-instantiates: {st:?}");
    assert!(st.node_updates > 0, "{st:?}");
    Ok(())
}

/// Re-instantiations of a graph with memory nodes (the allocation's size changes) under the
/// upload and auto-free flags, launched back to back without synchronizing (the old exec may
/// still run while the new one is instantiated and uploaded on the call's stream): every
/// call's result is the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_resized_scratch_under_upload_and_auto_free_flags_back_to_back() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut cache = GraphCache::new();
    cache.set_instantiate_flags(InstantiateFlags {
        upload: true,
        auto_free_on_launch: true,
        ..Default::default()
    });
    let calls = [(256u32, 1u32), (4096, 2), (4096, 3), (300, 4), (65536, 5), (300, 6)];
    let mut outs = Vec::new();
    for &(n, a) in &calls {
        let mut out = s.alloc_zeros::<u32>(n as usize)?;
        graph!(&mut cache, &s, {
            let t = alloc::<u32>(n as usize);
            k.slow_iota(n, 2000, a, 7, &mut t).launch(cfg(n));
            k.mix(n, &t, &mut out).launch(cfg(n));
        })?;
        outs.push(out);
    }
    for (call, (&(n, a), out)) in calls.iter().zip(&outs).enumerate() {
        let want = host::mix(&host::slow_iota(n, 2000, a, 7));
        assert_same(&s.clone_dtoh(out)?, &want, &format!("call {call}, n {n}"));
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "{st:?}");
    assert!(st.reinstantiations >= 4, "every size change re-instantiates: {st:?}");
    assert_eq!(st.exec_updates, 0, "{st:?}");
    Ok(())
}
