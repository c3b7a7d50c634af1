//! Review 7 (brief 1): snippets that should NOT compile but do. Each is a safe-code use-after-free
//! or unordered device use, reached through the public (doc-hidden) API. They are compiled here
//! (this file must build) and never called: `review7.rs` has the GPU tests that run them and
//! must pass once the holes are closed.
#![allow(dead_code)]

use std::sync::Arc;

use cudagraph::HostWork;
use cudagraph::__private::AcquireMut;
use cudagraph::cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};

/// HOLE (kind/host.rs `HostWork for HostParams`, `take_job`): `HostWork` is public and
/// unsealed in use (re-exported at the crate root; its methods are `#[doc(hidden)]` but
/// callable), and `take_job` returns a `Box<dyn FnOnce() + Send>` — `'static` — that builds
/// `&mut [T]` from the raw address of the handle's pinned buffer (`SendRaw`). Nothing ties the
/// job to the handle's borrow `'a`: the buffer can be dropped (`cuMemFreeHost`) and the job
/// run afterwards, writing freed memory. Safe code only (`alloc_pinned` is cudarc's own
/// `unsafe`, for uninitialized memory, and is zero-filled first).
pub fn host_job_outlives_its_pinned_buffer(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
) -> Result<Box<dyn FnOnce() + Send>, Box<dyn std::error::Error>> {
    // SAFETY (cudarc's contract): written before read.
    let mut p: PinnedHostSlice<u32> = unsafe { ctx.alloc_pinned::<u32>(1 << 20) }?;
    p.as_mut_slice()?.fill(0);
    let job = {
        let (_, w, guard) = p.acquire_mut(stream);
        let params = cudagraph::__private::host((w,), |(v,): (&mut [u32],)| v.fill(0xdead_beef));
        let job = params.take_job().expect("the closure");
        drop(guard);
        job
    };
    drop(p); // cuMemFreeHost: the job still holds its address
    Ok(job)
}

/// The same with a `GraphBuilder` handle instead of `__private::AcquireMut` (still
/// `__private::host` to make the `HostParams`).
pub fn host_job_from_a_builder_handle_outlives_the_builder(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
) -> Result<Box<dyn FnOnce() + Send>, Box<dyn std::error::Error>> {
    // SAFETY (cudarc's contract): written before read.
    let mut p: PinnedHostSlice<u32> = unsafe { ctx.alloc_pinned::<u32>(1 << 20) }?;
    p.as_mut_slice()?.fill(0);
    let mut cache = cudagraph::GraphCache::new();
    let job = {
        let mut g = cache.builder(stream);
        let w = g.write(&mut p);
        let params = cudagraph::__private::host((w,), |(v,): (&mut [u32],)| v.fill(0xdead_beef));
        let job = params.take_job().expect("the closure");
        drop(params);
        drop(g);
        job
    };
    drop(p);
    Ok(job)
}

mod common;
use cudagraph::__private::NodeParams;
use cudagraph::cudarc::driver::CudaSlice;

/// HOLE (kind/captured.rs `CapturedWork for CaptureParams`, `run_eager`, reached through
/// `__private::capture` + `__private::node` → `NodeParams::Captured(&dyn CapturedWork)`, whose
/// doc-hidden methods are callable on the trait object without naming the unexported trait):
/// a safe runner of a capture closure outside the cache. Its operands' handles come from
/// `__private::acquire_mut`, whose `Guard` safe code may drop *before* the run: the buffer's
/// events are then recorded before the closure's kernel, and no ledger makes the buffer's own
/// stream wait. A buffer of another stream dropped right after is freed (`cuMemFreeAsync` on
/// its own stream, after those events) while the slow kernel still writes it.
pub fn captured_work_run_eagerly_after_its_guard_was_dropped(
    stream: &Arc<CudaStream>,
    k: &common::Ops,
    buf: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let n = buf.len() as u32;
    let call = cudagraph::__private::begin_call();
    let (_, w, guard) = cudagraph::__private::acquire_mut(buf, stream, &call, 0);
    drop(guard);
    let params = cudagraph::__private::capture(stream, (w,), |cap, (mut v,)| {
        cap.kernel(
            k.slow_iota(n, 1 << 22, 1, 0, cap.write(&mut v)?)
                .launch(cudagraph::cudarc::driver::LaunchConfig::for_num_elems(n)),
        )?;
        Ok::<(), cudagraph::Error>(())
    });
    let site = cudagraph::NodeSite { label: "x", text: "x", file: "x", line: 1, column: 1 };
    match cudagraph::__private::node(&params) {
        Some(NodeParams::Captured(c)) => c.run_eager(&|| site.clone()),
        _ => Ok(()),
    }
}
