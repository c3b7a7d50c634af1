//! Host nodes' wait flags: the pool of [`Flag`]s, words of mapped pinned memory, that a host
//! node's mem-op wait polls (`kind/handoff.rs` says how), and the real driver's
//! [`Driver`] impl ([`Cuda`]), whose [`host_flag`](Driver::host_flag) takes a flag from the pool.
//! That impl lives here, above `raw`, because `raw` owns nothing and the pool owns the pinned
//! pages.
//!
//! Flags are 4-byte words of mapped pinned memory (`cuMemHostAlloc`, portable and device-mapped),
//! one cache line apart, allocated a page at a time per context and never freed: the context
//! that allocated a page is kept for the process ([`raw::keep_primary_context`]), so a page
//! never dangles. A flag goes back to its context's pool when the driver says no graph or exec
//! can read it any more: the template graph of its node owns a user object whose destructor
//! returns it (the driver runs that destructor after the last exec holding the node was
//! destroyed and its launches completed), and an eager statement's flag is returned by a
//! second host function after its wait.

use core::ffi::c_void;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use cudarc::driver::DriverError;
use cudarc::driver::sys::{
    self, CUcontext, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUgraphNodeParams,
    CUstream,
};

use crate::raw::{
    self, Cuda, Driver, Flag, HostFlag, add_node, conditional_handle_create, enable_peer_access,
    exec_destroy, exec_node_set_params, exec_update, graph_create, graph_destroy,
    graph_own_user_object, instantiate_with, launch, upload,
};

/// Bytes allocated at a time for flags.
const PAGE: usize = 64 << 10;
/// Bytes between two flags (one cache line, so that the device's polling of one flag does not
/// share a line with the host's writes of another).
const STRIDE: usize = 64;

/// A context's flags: whether its primary context is kept, and its free flags.
#[derive(Default)]
struct Pool {
    kept: bool,
    free: Vec<&'static Flag>,
}

/// Flag pools by context.
static FLAGS: Mutex<Option<HashMap<usize, Pool>>> = Mutex::new(None);
/// Flags taken and not given back, over every context.
static IN_USE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many flags are taken and not given back (a graph or exec, or an eager statement, may
/// still read them). For tests.
pub fn in_use() -> usize {
    IN_USE.load(Ordering::SeqCst)
}

fn with_pool<R>(ctx: usize, f: impl FnOnce(&mut Pool) -> R) -> R {
    let mut pools = FLAGS.lock().unwrap_or_else(|e| e.into_inner());
    f(pools.get_or_insert_with(HashMap::new).entry(ctx).or_default())
}

/// A free flag of the current context `ctx`, allocating a page of them when none is free
/// (`cuMemHostAlloc`; the first time for a context, `cuDevicePrimaryCtxRetain` too).
///
/// # Safety
/// `ctx` is current on this thread.
pub(crate) unsafe fn take(ctx: CUcontext) -> Result<&'static Flag, DriverError> {
    let key = ctx as usize;
    let r = with_pool(key, |pool| {
        if let Some(f) = pool.free.pop() {
            return Ok(f);
        }
        if !pool.kept {
            // SAFETY: the caller's contract (a context is current).
            unsafe { raw::keep_primary_context() }?;
            pool.kept = true;
        }
        // SAFETY: a context is current; the page lives as long as it, which is the process.
        let (host, device) = unsafe { raw::mem_host_alloc_mapped(PAGE) }?;
        let flags: Vec<Flag> = (0..PAGE / STRIDE)
            .map(|i| Flag {
                host: host.cast::<u8>().wrapping_add(i * STRIDE).cast(),
                device: device + (i * STRIDE) as u64,
                ctx: key,
            })
            .collect();
        let flags: &'static [Flag] = Vec::leak(flags);
        pool.free.extend(flags[1..].iter());
        Ok(&flags[0])
    });
    if r.is_ok() {
        IN_USE.fetch_add(1, Ordering::SeqCst);
    }
    r
}

/// Returns `flag` to its context's pool. No CUDA call: callable from driver threads.
pub(crate) fn give(flag: &'static Flag) {
    with_pool(flag.ctx, |pool| pool.free.push(flag));
    IN_USE.fetch_sub(1, Ordering::SeqCst);
}

/// The user-object destructor and host function that return a flag (`user` is the flag).
pub(crate) unsafe extern "C" fn give_back(user: *mut c_void) {
    // SAFETY: `user` is a `&'static Flag` handed to the driver by this module.
    give(unsafe { &*user.cast_const().cast::<Flag>() });
}

/// `flag` as the driver's `void*` for [`give_back`].
pub(crate) fn as_user(flag: &'static Flag) -> *mut c_void {
    (flag as *const Flag).cast_mut().cast()
}

// SAFETY (every method): forwards its caller's contract, which is the raw function's.
impl Driver for Cuda {
    unsafe fn host_flag(
        &mut self,
        graph: CUgraph,
        ctx: sys::CUcontext,
    ) -> Result<Option<HostFlag>, DriverError> {
        let flag = unsafe { take(ctx) }?;
        // On error the destructor ran or will run, which gives the flag back.
        unsafe { graph_own_user_object(graph, give_back, as_user(flag)) }?;
        Ok(Some(HostFlag(flag)))
    }
    unsafe fn graph_create(&mut self) -> Result<CUgraph, DriverError> {
        unsafe { graph_create() }
    }
    unsafe fn record_done(
        &mut self,
        done: &mut sys::CUevent,
        stream: CUstream,
    ) -> Result<(), DriverError> {
        if done.is_null() {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // SAFETY: `done` is a valid out-pointer; the context is current (the trait's
            // contract).
            unsafe { sys::cuEventCreate(done, flags) }.result()?;
        }
        // SAFETY: the event is ours, of the current context; `stream` live (the contract).
        unsafe { crate::raw::record_event(*done, stream) }
    }
    unsafe fn wait_done(&mut self, done: sys::CUevent, destroy: bool) {
        if done.is_null() {
            return;
        }
        // SAFETY: the event is ours and alive (made by `record_done`).
        unsafe {
            let _ = sys::cuEventSynchronize(done);
            if destroy {
                let _ = sys::cuEventDestroy_v2(done);
            }
        }
    }
    unsafe fn graph_destroy(&mut self, graph: CUgraph) {
        let _ = unsafe { graph_destroy(graph) };
    }
    unsafe fn add_node(
        &mut self,
        graph: CUgraph,
        deps: &[CUgraphNode],
        edges: &[CUgraphEdgeData],
        params: &mut CUgraphNodeParams,
    ) -> Result<CUgraphNode, DriverError> {
        unsafe { add_node(graph, deps, edges, params) }
    }
    unsafe fn instantiate(
        &mut self,
        graph: CUgraph,
        flags: u64,
        upload: CUstream,
    ) -> Result<CUgraphExec, DriverError> {
        unsafe { instantiate_with(graph, flags, upload) }
    }
    unsafe fn exec_destroy(&mut self, exec: CUgraphExec) {
        let _ = unsafe { exec_destroy(exec) };
    }
    unsafe fn set_node(
        &mut self,
        exec: CUgraphExec,
        node: CUgraphNode,
        params: &mut CUgraphNodeParams,
    ) -> Result<(), DriverError> {
        unsafe { exec_node_set_params(exec, node, params) }
    }
    unsafe fn exec_update(
        &mut self,
        exec: CUgraphExec,
        graph: CUgraph,
    ) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)> {
        unsafe { exec_update(exec, graph) }
    }
    unsafe fn launch(&mut self, exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError> {
        unsafe { launch(exec, stream) }
    }
    unsafe fn upload(&mut self, exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError> {
        unsafe { upload(exec, stream) }
    }
    unsafe fn conditional_handle(
        &mut self,
        graph: CUgraph,
        ctx: sys::CUcontext,
        default: u32,
    ) -> Result<u64, DriverError> {
        unsafe { conditional_handle_create(graph, ctx, default) }
    }
    unsafe fn enable_peer_access(
        &mut self,
        ctx: sys::CUcontext,
        peer: sys::CUcontext,
    ) -> Result<bool, DriverError> {
        unsafe { enable_peer_access(ctx, peer) }
    }
}
