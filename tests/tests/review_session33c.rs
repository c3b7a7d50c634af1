//! Review 33c (closures): what the crate runs of the user's code, and when.
//!
//! Test 1 runs its host side on the CPU stub driver: build it from `.ci/stub-driver`, then
//! `STUB_FRESH_RETAINS=1 STUB_FAIL_WAIT_VALUE=1 LD_LIBRARY_PATH=<stub dir> <this test binary> --ignored
//! --test-threads=1`. On a GPU whose driver supports stream memory operations the wait is never
//! refused and the test passes trivially. Both tests failed before the fix (`handoff::Gate`)
//! and pass with it on the stub.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudagraph::cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};
use cudagraph::{GraphCache, Mode, graph};

/// Test 1 (hole, fixed in this session: `handoff::Gate`): an eager `host` statement enqueues its callback (`cuLaunchHostFunc`),
/// which hands the closure to a worker, then the wait for the closure's flag
/// (`cuStreamWaitValue32_v2`). When that wait is refused the call returns the error, its
/// borrow of the pinned buffer ends and the guard's event completes when the callback returns,
/// but the closure still runs later on the worker, with a `&mut [u32]` into the buffer: the
/// caller may read it (`as_slice` waits for nothing more) or free it meanwhile. A call that
/// returns must leave no closure of it to run over its buffers.
#[test]
#[ignore = "needs a CUDA GPU, or the CPU stub driver with STUB_FAIL_WAIT_VALUE=1"]
fn review33c_an_eager_host_closure_whose_wait_was_refused_runs_after_the_call_returned()
-> Result<(), Box<dyn std::error::Error>> {
    no_late_run("host statement", |cache, stream, h, late| {
        graph!(cache, stream, {
            host(&mut *h, move |(h,)| late.write(h));
        })
    })
}

/// Test 2 (the same hole in `Capture::host`'s eager path, `capture_host.rs` `host_eager`; fixed
/// with test 1): a `capture` statement run in `Mode::Eager` whose host function's wait is
/// refused returns its error only once the host function can no longer run over the statement's
/// pinned operand.
#[test]
#[ignore = "needs a CUDA GPU, or the CPU stub driver with STUB_FAIL_WAIT_VALUE=1"]
fn review33c_an_eager_capture_host_function_whose_wait_was_refused_runs_after_the_call_returned()
-> Result<(), Box<dyn std::error::Error>> {
    no_late_run("Capture::host", |cache, stream, h, late| {
        graph!(cache, stream, {
            capture(&mut *h, |s, (mut hv,)| {
                let late = late.clone();
                s.host((&mut hv,), move |(h,)| late.write(h))
            });
        })
    })
}

/// Whether a closure ran after its call returned: [`Late::write`] notes it.
#[derive(Clone, Default)]
struct Late {
    returned: Arc<AtomicBool>,
    late: Arc<AtomicBool>,
}

impl Late {
    /// The closures' body: slow, then notes whether the call had returned, then writes `h`.
    fn write(&self, h: &mut [u32]) {
        std::thread::sleep(Duration::from_millis(300));
        if self.returned.load(Ordering::SeqCst) {
            self.late.store(true, Ordering::SeqCst);
        }
        h[0] = 7;
    }
}

/// Runs `call` in `Mode::Eager` on a pinned buffer, drops the buffer once the call returned,
/// and checks that a refused call (its wait refused) left no closure of it to run: none wrote
/// the buffer after the call returned. (Only a refused call is checked: the stub's device-side
/// wait does nothing, so after a successful call it cannot model the stream waiting for the
/// closure.)
fn no_late_run(
    what: &str,
    call: impl FnOnce(
        &mut GraphCache,
        &Arc<CudaStream>,
        &mut PinnedHostSlice<u32>,
        Late,
    ) -> cudagraph::Result<()>,
) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: plain u32s; the closure writes them before anyone reads them.
    let mut h = unsafe { ctx.alloc_pinned_with_flags::<u32>(4, 0) }?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let late = Late::default();
    let result = call(&mut cache, &stream, &mut h, late.clone());
    late.returned.store(true, Ordering::SeqCst);
    let refused = result.is_err();
    // The borrow ended: the caller may now read or free the buffer.
    drop(h);
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !(refused && late.late.load(Ordering::SeqCst)),
        "{what}: the closure ran after the call returned (refused: {refused}), writing a buffer \
         the caller had dropped"
    );
    Ok(())
}
