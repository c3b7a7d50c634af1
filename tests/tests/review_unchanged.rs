//! Review of the unchanged-call fast path (`Stats::unchanged_calls`) on the GPU: unchanged
//! calls mixed with everything that could make the cached exec differ from the call (eager
//! calls, the programmatic setting, another variant, another stream, eviction), each compared
//! with eager cudarc launches; and, with two GPUs (feature `multi-gpu`), the peer pairs of a
//! refused call, which an unchanged call must not enable.

use std::sync::Arc;

use cudagraph::cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Mode, Result, graph, kernels};

const SRC: &str = include_str!("../kernels/update.cu");
const N: u32 = 256;

kernels! {
    /// Kernels of `tests/kernels/update.cu`.
    pub struct K {
        fn affine(n: u32, a: i32, b: i32, x: &[i32], y: &mut [i32]);
        fn append_digit(n: u32, a: i32, y: &mut [i32]);
    }
}

fn setup() -> Result<(Arc<CudaContext>, Arc<CudaStream>, K)> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, compile_ptx(SRC)?) }?;
    Ok((ctx, stream, k))
}

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

fn host(stream: &Arc<CudaStream>, x: &CudaSlice<i32>) -> Vec<i32> {
    stream.clone_dtoh(x).expect("copy to host")
}

fn func<'a>(k: &'a K, name: &str) -> &'a CudaFunction {
    k.function(name).expect("declared")
}

/// One call's choices: mode, programmatic setting, host `if`, scalar, input buffer, stream.
#[derive(Clone, Copy, Debug)]
struct Step {
    eager: bool,
    programmatic: bool,
    digit: bool,
    a: i32,
    input: usize,
    stream: usize,
}

/// Runs of equal calls with, between them, calls in `Mode::Eager`, with the programmatic setting
/// off (another variant), of the other host `if` branch (another variant), from another stream
/// and with another input buffer; after every call the output is compared with eager cudarc
/// launches, so a launch of an exec holding another call's parameters shows up as a wrong value.
#[test]
#[ignore = "needs a CUDA GPU"]
fn unchanged_calls_mixed_with_eager_calls_settings_and_variants_match_eager() -> Result<()> {
    let (ctx, stream, k) = setup()?;
    let streams = [stream.clone(), ctx.new_stream()?];
    let inputs = [
        stream.clone_htod(&(0..N as i32).collect::<Vec<_>>())?,
        stream.clone_htod(&vec![5i32; N as usize])?,
    ];
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::with_max_variants(2);
    let p = Step { eager: false, programmatic: true, digit: true, a: 2, input: 0, stream: 0 };
    let steps = [
        p,
        p,
        Step { eager: true, a: 3, ..p },
        p,
        Step { programmatic: false, a: 3, ..p },
        Step { programmatic: false, a: 3, ..p },
        p,
        Step { a: 3, ..p },
        Step { digit: false, a: 4, ..p },
        Step { a: 3, ..p },
        Step { stream: 1, a: 3, ..p },
        Step { input: 1, a: 3, ..p },
        Step { eager: true, input: 1, a: 3, ..p },
        Step { input: 1, a: 3, ..p },
        // Three variants over two slots: each evicts one.
        Step { programmatic: false, input: 1, a: 3, ..p },
        Step { digit: false, input: 1, a: 3, ..p },
        Step { input: 1, a: 3, ..p },
        Step { input: 1, a: 3, ..p },
    ];
    let mut unchanged = Vec::new();
    let mut programmatic_variant = false;
    for (i, s) in steps.iter().enumerate() {
        cache.set_mode(if s.eager { Mode::Eager } else { Mode::Graph });
        cache.set_programmatic(s.programmatic);
        let (a, digit, st) = (s.a, s.digit, &streams[s.stream]);
        let which = s.input;
        let before = cache.stats();
        graph!(&mut cache, st, {
            k.affine(N, a, 1, &inputs[which], &mut y).launch(cfg(N));
            if digit {
                k.append_digit(N, a, &mut y).launch(cfg(N));
            }
        })?;
        st.synchronize()?;
        let f = func(&k, "affine");
        // SAFETY: the kernel's parameter types; buffers of N elements.
        unsafe {
            stream
                .launch_builder(f)
                .arg(&N)
                .arg(&a)
                .arg(&1i32)
                .arg(&inputs[which])
                .arg(&mut e)
                .launch(cfg(N))
        }?;
        if digit {
            let f = func(&k, "append_digit");
            // SAFETY: as above.
            unsafe { stream.launch_builder(f).arg(&N).arg(&a).arg(&mut e).launch(cfg(N)) }?;
        }
        assert_eq!(host(&stream, &y), host(&stream, &e), "step {i}: {s:?}");
        let after = cache.stats();
        if after.unchanged_calls > before.unchanged_calls {
            unchanged.push(i);
        }
        if i == 4 {
            // The programmatic setting off is another variant where the device has programmatic
            // dependent launch (compute capability 9.0 and CUDA 12.3), else the same one.
            programmatic_variant = after.builds > before.builds;
        }
    }
    // Unchanged: equal to the last call of a variant still cached, and nothing else.
    let want: &[usize] = if programmatic_variant {
        &[1, 3, 5, 6, 9, 10, 13, 17]
    } else {
        &[1, 3, 5, 9, 10, 13, 14, 16, 17]
    };
    assert_eq!(unchanged, want, "{:?}", cache.stats());
    Ok(())
}

#[cfg(feature = "multi-gpu")]
mod two_devices {
    use super::*;
    use cudagraph::Error;

    const SRC_OPS: &str = include_str!("../kernels/ops.cu");

    kernels! {
        /// Kernels of `tests/kernels/ops.cu`.
        pub struct Ops {
            fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
        }
    }

    type Device = (Arc<CudaContext>, Arc<CudaStream>, Ops);

    /// Devices 0 and 1; fails (never skips) with fewer GPUs.
    fn two_gpus() -> Result<[Device; 2]> {
        assert!(cudagraph::driver_available(), "no CUDA driver: needs two NVIDIA GPUs");
        let found = CudaContext::device_count()?;
        assert!(found >= 2, "needs two GPUs, found {found}");
        let ptx = compile_ptx(SRC_OPS)?;
        let device = |ordinal: usize| -> Result<Device> {
            let ctx = CudaContext::new(ordinal)?;
            let stream = ctx.new_stream()?;
            // SAFETY: the declaration matches `kernels/ops.cu`'s `iota`, which stays in `x`.
            let k = unsafe { Ops::load(&ctx, ptx.clone()) }?;
            Ok((ctx, stream, k))
        };
        Ok([device(0)?, device(1)?])
    }

    /// One call site: `iota` on device 0; with `peer`, a copy to device 1 and a kernel with
    /// `grid` blocks (0: refused by validation after the copy's peer pair was noted).
    #[allow(clippy::too_many_arguments)]
    fn call(
        cache: &mut GraphCache,
        s0: &Arc<CudaStream>,
        k0: &Ops,
        a0: &mut CudaSlice<u32>,
        a1: &mut CudaSlice<u32>,
        c0: &mut CudaSlice<u32>,
        peer: bool,
        grid: u32,
    ) -> Result<()> {
        graph!(cache, s0, {
            k0.iota(N, 3, 1, &mut *a0).launch(LaunchConfig::for_num_elems(N));
            if peer {
                copy(&*a0, &mut *a1);
                k0.iota(N, 1, 1, &mut *c0).launch((grid, 128u32));
            }
        })
    }

    /// A call refused by validation after a peer copy's pair was noted, then an unchanged call
    /// of the other variant (no copy): peer access is enabled for no pair.
    #[test]
    #[ignore = "needs two CUDA GPUs"]
    fn an_unchanged_call_enables_no_peer_pair_of_a_refused_call() -> Result<()> {
        let [(_c0, s0, k0), (_c1, s1, _k1)] = two_gpus()?;
        let n = N as usize;
        let (mut a0, mut c0) = (s0.alloc_zeros::<u32>(n)?, s0.alloc_zeros::<u32>(n)?);
        let mut a1 = s1.alloc_zeros::<u32>(n)?;
        let mut cache = GraphCache::new();
        for _ in 0..2 {
            call(&mut cache, &s0, &k0, &mut a0, &mut a1, &mut c0, false, 2)?;
        }
        assert_eq!(cache.stats().unchanged_calls, 1);
        let e = call(&mut cache, &s0, &k0, &mut a0, &mut a1, &mut c0, true, 0).unwrap_err();
        assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
        call(&mut cache, &s0, &k0, &mut a0, &mut a1, &mut c0, false, 2)?;
        let s = cache.stats();
        assert_eq!(s.unchanged_calls, 2, "{s:?}");
        assert_eq!(s.peer_enables, 0, "an unchanged call enabled a refused call's pair: {s:?}");
        Ok(())
    }

    /// As above, with device 1 released (its context destroyed) before the unchanged call:
    /// the unchanged call must not touch the refused call's context at all.
    #[test]
    #[ignore = "needs two CUDA GPUs"]
    fn an_unchanged_call_after_a_refused_peer_call_survives_its_context_going_away() -> Result<()> {
        let [(_c0, s0, k0), (c1, s1, k1)] = two_gpus()?;
        let n = N as usize;
        let (mut a0, mut c0) = (s0.alloc_zeros::<u32>(n)?, s0.alloc_zeros::<u32>(n)?);
        let mut a1 = s1.alloc_zeros::<u32>(n)?;
        let mut cache = GraphCache::new();
        for _ in 0..2 {
            call(&mut cache, &s0, &k0, &mut a0, &mut a1, &mut c0, false, 2)?;
        }
        let e = call(&mut cache, &s0, &k0, &mut a0, &mut a1, &mut c0, true, 0).unwrap_err();
        assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
        // Device 1's last references: its primary context is released.
        drop((a1, k1, s1, c1));
        let mut spare = s0.alloc_zeros::<u32>(n)?;
        let r = call(&mut cache, &s0, &k0, &mut a0, &mut spare, &mut c0, false, 2);
        assert!(r.is_ok(), "the unchanged call failed: {r:?}");
        assert_eq!(cache.stats().unchanged_calls, 2, "{:?}", cache.stats());
        let want: Vec<u32> = (0..N).map(|i| i * 3 + 1).collect();
        assert_eq!(s0.clone_dtoh(&a0)?, want);
        Ok(())
    }
}
