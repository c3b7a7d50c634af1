//! Event record and wait nodes (`event_record(&e)`, `event_wait(&e)` in `graph!`,
//! `GraphBuilder::event_record`/`event_wait`), on the GPU: GPU timing of a known slow kernel
//! against the same events recorded eagerly around it, and a wait that orders a graph's kernel
//! after work on another stream (timestamps).

mod common;

use std::sync::Arc;

use common::{Result, gpu};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::cudarc::driver::sys::CUevent_flags;
use cudagraph::{GraphCache, Mode, graph};

fn one() -> LaunchConfig {
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }
}

const SPINS: u32 = 1 << 21;

/// `start` and `stop` recorded around a slow kernel inside the graph measure what the same
/// events recorded eagerly around the same kernel measure (within 25 %), call after call, for
/// both modes and the builder; the second call swaps in other events (a node update).
#[test]
#[ignore = "needs a CUDA GPU"]
fn events_recorded_around_a_slow_kernel_time_it() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut t = s.alloc_zeros::<u64>(1)?;
    // Eager reference: cudarc's own records around the kernel alone.
    // Timing events (cudarc's `new_event(None)` disables timing).
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let (e0, e1) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
    let mut reference = Vec::new();
    for _ in 0..3 {
        e0.record(&s)?;
        graph!(&mut GraphCache::eager(), &s, {
            k.slow_stamp(SPINS, &mut t).launch(one());
        })?;
        e1.record(&s)?;
        reference.push(e0.elapsed_ms(&e1)?);
    }
    reference.sort_by(f32::total_cmp);
    let want = reference[1];
    assert!(want > 0.1, "the slow kernel takes {want} ms: too fast to time");
    let pairs: Vec<(Arc<_>, Arc<_>)> = (0..2)
        .map(|_| Ok((Arc::new(ctx.new_event(timing)?), Arc::new(ctx.new_event(timing)?))))
        .collect::<Result<_>>()?;
    for (what, mode, builder) in [
        ("graph!", Mode::Graph, false),
        ("eager", Mode::Eager, false),
        ("builder", Mode::Graph, true),
    ] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for call in 0..4 {
            let (start, stop) = &pairs[call % 2];
            if builder {
                let mut g = cache.builder(&s);
                let tw = g.write(&mut t);
                let t0 = g.event_record(start);
                let kern = g.kernel(k.slow_stamp(SPINS, tw).launch(one()));
                g.after(kern, &[t0]);
                let t1 = g.event_record(stop);
                g.after(t1, &[kern]);
                g.launch()?;
            } else {
                graph!(&mut cache, &s, {
                    let t0 = event_record(start);
                    let kern = k.slow_stamp(SPINS, &mut t).launch(one()).after(t0);
                    event_record(stop).after(kern);
                })?;
            }
            let got = start.elapsed_ms(stop)?;
            assert!(
                (got - want).abs() <= 0.25 * want,
                "{what}, call {call}: the graph's events measured {got} ms, eager {want} ms"
            );
        }
        if mode == Mode::Graph {
            let st = cache.stats();
            assert_eq!(st.builds, 1, "{what}: events swapped by node updates: {st:?}");
            assert!(st.node_updates >= 2, "{what}: {st:?}");
        }
    }
    Ok(())
}

/// A kernel of the graph after `event_wait(&ready)` starts only after the slow kernel that
/// another stream ran before recording `ready` ended; graph!, eager mode and the builder.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_after_an_event_wait_starts_after_the_other_streams_work() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let ready = Arc::new(ctx.new_event(None)?);
    for (what, mode, builder) in [
        ("graph!", Mode::Graph, false),
        ("eager", Mode::Eager, false),
        ("builder", Mode::Graph, true),
    ] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for round in 0..3 {
            let mut a = other.alloc_zeros::<u64>(1)?;
            let mut b = s.alloc_zeros::<u64>(1)?;
            other.synchronize()?;
            s.synchronize()?;
            graph!(&mut GraphCache::eager(), &other, {
                k.slow_stamp(SPINS, &mut a).launch(one());
            })?;
            ready.record(&other)?;
            if builder {
                let mut g = cache.builder(&s);
                let bw = g.write(&mut b);
                let w = g.event_wait(&ready);
                let kern = g.kernel(k.stamp(bw).launch(one()));
                g.after(kern, &[w]);
                g.launch()?;
            } else {
                graph!(&mut cache, &s, {
                    let w = event_wait(&ready);
                    k.stamp(&mut b).launch(one()).after(w);
                })?;
            }
            let (slow_end, start) = (other.clone_dtoh(&a)?[0], s.clone_dtoh(&b)?[0]);
            assert!(
                start >= slow_end,
                "{what}, round {round}: the kernel after the wait started at {start} ns, before \
                 the other stream's kernel ended at {slow_end} ns"
            );
        }
    }
    Ok(())
}
