//! Review 7: `HostWork::take_job` is `unsafe`: a job taken out of a `host` statement's parameters
//! in safe code could outlive the pinned buffer it writes (it holds the buffer's address).
use std::sync::Arc;

use cudagraph::HostWork;
use cudagraph::__private::AcquireMut;
use cudagraph::cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};

pub fn host_job_outlives_its_pinned_buffer(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
) -> Result<(), Box<dyn std::error::Error>> {
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
    drop(job());
    Ok(())
}


fn main() {}
