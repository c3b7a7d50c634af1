//! Review 33d (re-entrance and keyed host functions). Not run in this session (no GPU).

use std::sync::Mutex;

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, Mode, graph};

static SEEN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Item 4: a keyed `capture` statement whose recording holds a `Capture::host` function is
/// replayed by later calls whose operands are the same memory. The host function holds the
/// addresses it was recorded with; a later call after the pinned buffer was freed and another
/// allocated (often at the same address) must run it over that call's buffer only: it reads
/// what the caller wrote into the buffer the call listed, never the freed one's contents (a
/// replay is taken only for the same address, length, type, context and allocation id; for a
/// host function the same address is the listed buffer, since the call borrows it while it
/// runs). Also a third call with a buffer of another length: recorded again, not replayed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review33d_a_keyed_host_function_replayed_reads_the_current_calls_buffer()
-> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    SEEN.lock().unwrap().clear();
    for (round, len) in [(1u32, 4usize), (2, 4), (3, 4), (4, 8), (5, 4)] {
        // SAFETY: plain u32s, written below before any read.
        let mut h = unsafe { ctx.alloc_pinned_with_flags::<u32>(len, 0) }?;
        h.as_mut_slice()?.fill(round);
        graph!(&mut cache, &stream, {
            capture(&h, key = 0u32, |s, _k, (hv,)| {
                s.host((&hv,), |(h,)| SEEN.lock().unwrap().push(h[0] + 100 * h.len() as u32))
            });
        })?;
        stream.synchronize()?;
        // `h` is freed here (after the launch), and the next round's may get its address.
    }
    assert_eq!(*SEEN.lock().unwrap(), [401, 402, 403, 804, 405]);
    Ok(())
}

/// Item 1: a `host` closure (on a worker, while the launch waits for it) makes a `graph!` call
/// of another cache, which it owns, on another stream, over buffers it owns; and a `capture`
/// statement's closure makes one (of a third cache) on the call's stream. Both nested calls
/// run through their own thread-local state (the worker's origin and pool; the caller's saved
/// and restored around the closure), and the outer call's results stay exact.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review33d_graph_calls_nested_in_host_and_capture_closures()
-> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let inner_stream = ctx.new_stream()?;
    let src = stream.clone_htod(&[7u32; 64])?;
    let mut dst = stream.alloc_zeros::<u32>(64)?;
    // SAFETY: plain u32s, written by the copies before read.
    let mut h = unsafe { ctx.alloc_pinned_with_flags::<u32>(64, 0) }?;
    let mut mid = stream.alloc_zeros::<u32>(64)?;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u32>>();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut third = GraphCache::new();
        // Owned by the host closure: a cache, a stream, a device buffer and a pinned one.
        let mut owned = GraphCache::new();
        let s2 = inner_stream.clone();
        let b = s2.clone_htod(&[9u32; 64])?;
        // SAFETY: plain u32s, written by the copy before read.
        let mut out = unsafe { ctx.alloc_pinned_with_flags::<u32>(64, 0) }?;
        let tx = tx.clone();
        graph!(&mut cache, &stream, {
            copy(&src, &mut mid);
            capture(&mid, &mut dst, |s, (m, mut d)| {
                graph!(&mut third, &stream, {
                    copy(&src, &mut h);
                })
                .map_err(|e| e.to_string())?;
                s.copy(&m, &mut d).map_err(|e| e.to_string())
            });
            host(move |()| {
                graph!(&mut owned, &s2, {
                    copy(&b, &mut out);
                })
                .expect("nested call");
                s2.synchronize().expect("the inner stream");
                tx.send(out.as_slice().expect("read").to_vec()).expect("send");
            });
        })?;
        stream.synchronize()?;
        assert_eq!(stream.clone_dtoh(&dst)?, vec![7u32; 64], "{mode:?}");
        assert_eq!(rx.recv()?, vec![9u32; 64], "{mode:?}");
        assert_eq!(h.as_slice()?.to_vec(), vec![7u32; 64], "{mode:?}");
    }
    Ok(())
}
