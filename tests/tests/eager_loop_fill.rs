//! GPU tests of `eager!` (typed eager launches of `kernels!` methods), graph `for` loops with a
//! run-time count, and `fill` of 8-byte (and other) element types; each compares the graph's
//! result with the same statements run eagerly with `eager!` and with a host model.

mod common;

use common::{assert_same, gpu, host, serial};
use cudagraph::{Error, GraphCache, eager, graph};

const N: u32 = 1000;
const CFG: (u32, u32) = (N.div_ceil(128), 128);

/// Host model of `affine_inplace` applied with `b = base + i` for `i in 0..count`.
fn looped_model(count: usize, base: u32) -> Vec<u32> {
    let mut x = host::iota(N, 1, 0);
    for i in 0..count {
        host::affine_inplace(&mut x, 3, base + i as u32);
    }
    x
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_launch_matches_graph() -> common::Result {
    let _s = serial();
    let (_ctx, stream, k) = gpu()?;
    let (mut x, mut y) =
        (stream.alloc_zeros::<u32>(N as usize)?, stream.alloc_zeros::<u32>(N as usize)?);
    let (mut x2, mut y2) =
        (stream.alloc_zeros::<u32>(N as usize)?, stream.alloc_zeros::<u32>(N as usize)?);
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        k.iota(N, 2, 1, &mut x).launch(CFG);
        k.affine(N, 5, 7, &x, &mut y).launch(CFG);
        k.affine_inplace(N, 3, 4, &mut y).launch(CFG);
    })?;
    // The eager baseline, one statement per call and as one body.
    eager!(&stream, k.iota(N, 2, 1, &mut x2).launch(CFG))?;
    eager!(&stream, {
        k.affine(N, 5, 7, &x2, &mut y2).launch(CFG);
        k.affine_inplace(N, 3, 4, &mut y2).launch(CFG);
    })?;
    let (got, eager) = (stream.clone_dtoh(&y)?, stream.clone_dtoh(&y2)?);
    let mut want = host::affine(&host::iota(N, 2, 1), 5, 7);
    host::affine_inplace(&mut want, 3, 4);
    assert_same(&got, &eager, "graph vs eager!");
    assert_same(&eager, &want, "eager! vs host");
    assert_eq!(cache.stats().launches, 1);
    // Same errors as inside `graph!`: zero grid, before anything is enqueued.
    let before = stream.clone_dtoh(&y2)?;
    let r = eager!(&stream, {
        k.affine_inplace(N, 3, 4, &mut y2).launch(CFG);
        k.affine_inplace(N, 3, 4, &mut y2).launch((0u32, 128u32));
    });
    assert!(matches!(r, Err(Error::ZeroDims { .. })), "{r:?}");
    assert_same(&stream.clone_dtoh(&y2)?, &before, "nothing enqueued after an eager! error");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn runtime_loop_count_is_part_of_the_variant() -> common::Result {
    let _s = serial();
    let (_ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(N as usize)?;
    let mut x2 = stream.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let counts = [3usize, 5, 3, 0, 5, 1];
    for (call, &count) in counts.iter().enumerate() {
        let base = 10 * call as u32;
        graph!(&mut cache, &stream, {
            k.iota(N, 1, 0, &mut x).launch(CFG);
            for i in 0..count {
                k.affine_inplace(N, 3, base + i as u32, &mut x).launch(CFG);
            }
        })?;
        eager!(&stream, {
            k.iota(N, 1, 0, &mut x2).launch(CFG);
            for i in 0..count {
                k.affine_inplace(N, 3, base + i as u32, &mut x2).launch(CFG);
            }
        })?;
        let (got, eager) = (stream.clone_dtoh(&x)?, stream.clone_dtoh(&x2)?);
        assert_same(&got, &eager, &format!("count {count}: graph vs eager!"));
        assert_same(&got, &looped_model(count, base), &format!("count {count}: graph vs host"));
    }
    let s = cache.stats();
    // Counts 3, 5, 0 and 1: four topologies; the second 3 and 5 are hits with updated scalars.
    assert_eq!((s.builds, s.hits, s.launches), (4, 2, 6), "{s:?}");
    assert!(s.node_updates > 0, "{s:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fill_sets_8_byte_and_other_elements() -> common::Result {
    let _s = serial();
    let (_ctx, stream, _k) = gpu()?;
    let n = 100_003usize;
    let mut d = stream.alloc_zeros::<f64>(n)?;
    let mut u = stream.alloc_zeros::<u64>(n)?;
    let mut h = stream.alloc_zeros::<i16>(n)?;
    let mut b = stream.alloc_zeros::<u8>(n)?;
    let mut d2 = stream.alloc_zeros::<f64>(n)?;
    let mut cache = GraphCache::new();
    // The last call fills another buffer of the same length: a pointer change.
    for (call, value) in [2.5f64, -1.0e300, 2.5, 0.125].into_iter().enumerate() {
        let big = u64::MAX - call as u64;
        let target = if call == 3 { &mut d2 } else { &mut d };
        graph!(&mut cache, &stream, {
            fill(&mut *target, value);
            fill(&mut u, big);
            fill(&mut h, -7i16 - call as i16);
            fill(&mut b, 0xA5u8);
        })?;
        assert_same(&stream.clone_dtoh(&*target)?, &vec![value; n], "f64 fill");
        assert_same(&stream.clone_dtoh(&u)?, &vec![big; n], "u64 fill");
        assert_same(&stream.clone_dtoh(&h)?, &vec![-7 - call as i16; n], "i16 fill");
        assert_same(&stream.clone_dtoh(&b)?, &vec![0xA5u8; n], "u8 fill");
    }
    let s = cache.stats();
    // One build; each later call updates the changed values and pointers in place (the kernel
    // node's ladder).
    assert_eq!((s.builds, s.instantiations, s.exec_updates), (1, 1, 0), "{s:?}");
    assert!(s.node_updates >= 9, "{s:?}");
    // eager! runs the same fill kernel.
    let mut d3 = stream.alloc_zeros::<f64>(n)?;
    eager!(&stream, fill(&mut d3, 0.125))?;
    assert_same(&stream.clone_dtoh(&d2)?, &stream.clone_dtoh(&d3)?, "graph vs eager! fill");
    Ok(())
}
