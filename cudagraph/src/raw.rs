//! Thin `unsafe` layer over the driver's `cuGraph*` calls, which cudarc exposes only in
//! [`cudarc::driver::sys`].
//!
//! Each function makes exactly one driver call and turns its `CUresult` into a
//! `Result<_, DriverError>`. Nothing here owns anything: the safe layer
//! ([`GraphCache`](crate::GraphCache)) does.
//! Driver reference: <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html>.

use core::ffi::{c_char, c_void};
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::DriverError;
use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS_v3, CUdeviceptr, CUgraph, CUgraphEdgeData, CUgraphExec,
    CUgraphNode, CUgraphNodeParams, CUstream,
};

/// `cuGraphCreate`: a new, empty graph.
///
/// # Safety
/// A CUDA context must be current on this thread.
pub unsafe fn graph_create() -> Result<CUgraph, DriverError> {
    let mut graph = ptr::null_mut();
    unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
    Ok(graph)
}

/// `cuGraphDestroy`.
///
/// # Safety
/// `graph` came from [`graph_create`] and is not used afterwards. Execs instantiated from it
/// stay valid (the driver copies the graph at instantiation).
pub unsafe fn graph_destroy(graph: CUgraph) -> Result<(), DriverError> {
    unsafe { sys::cuGraphDestroy(graph) }.result()
}

/// `cuGraphAddNode_v2`: adds a node of any kind after `deps`, with edge data `edges[i]` on the
/// edge from `deps[i]` (ports and type, e.g. [`PROGRAMMATIC_EDGE`]); `edges` empty: every edge
/// plain (the driver's default edge data).
///
/// # Safety
/// `graph` is live; every node of `deps` belongs to it; `edges` is empty or as long as `deps`,
/// and a programmatic edge joins two kernel nodes; `params` is a valid description of a node of
/// type `params.type_` whose pointers are valid for the call (kernel arguments are copied during
/// the call) and, for the memory it names, whenever the node runs.
pub unsafe fn add_node(
    graph: CUgraph,
    deps: &[CUgraphNode],
    edges: &[CUgraphEdgeData],
    params: &mut CUgraphNodeParams,
) -> Result<CUgraphNode, DriverError> {
    debug_assert!(edges.is_empty() || edges.len() == deps.len());
    let mut node = ptr::null_mut();
    let data = if edges.is_empty() { ptr::null() } else { edges.as_ptr() };
    unsafe { sys::cuGraphAddNode_v2(&mut node, graph, deps.as_ptr(), data, deps.len(), params) }
        .result()?;
    Ok(node)
}

/// `cuGraphConditionalHandleCreate` with `CU_GRAPH_COND_ASSIGN_DEFAULT`: a conditional handle of
/// `graph` (usable by a conditional node of `graph` or of any of its bodies) whose value is set to
/// `default` at the start of every launch of an exec instantiated from `graph`.
///
/// # Safety
/// `graph` is live; `ctx` is its context and current.
pub unsafe fn conditional_handle_create(
    graph: CUgraph,
    ctx: sys::CUcontext,
    default: u32,
) -> Result<u64, DriverError> {
    let mut handle: sys::CUgraphConditionalHandle = 0;
    let flags = sys::CU_GRAPH_COND_ASSIGN_DEFAULT;
    unsafe { sys::cuGraphConditionalHandleCreate(&mut handle, graph, ctx, default, flags) }
        .result()?;
    Ok(handle)
}

/// `cuCtxEnablePeerAccess(peer, 0)` with `ctx` current: kernels and copies of `ctx` may access
/// `peer`'s memory directly. Returns `false`, enabling nothing, when the two contexts are of
/// one device or `cuDeviceCanAccessPeer` says `ctx`'s device cannot access `peer`'s (a copy
/// between them then goes through host memory); `true` when enabled, or already enabled
/// (`CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`, from an earlier cache or from the user). Also
/// grants `ctx`'s device read-write access to the current memory pool of `peer`'s device
/// (`cuMemPoolSetAccess`: stream-ordered allocations, cudarc's buffers, need it besides peer
/// access). The current context is restored (`cuCtxPushCurrent` / `cuCtxPopCurrent`).
///
/// # Safety
/// Both contexts are alive.
pub unsafe fn enable_peer_access(
    ctx: sys::CUcontext,
    peer: sys::CUcontext,
) -> Result<bool, DriverError> {
    /// The device of `c` (`cuCtxGetDevice` with `c` pushed).
    unsafe fn device(c: sys::CUcontext) -> Result<sys::CUdevice, DriverError> {
        unsafe { sys::cuCtxPushCurrent_v2(c) }.result()?;
        let mut d: sys::CUdevice = 0;
        let r = unsafe { sys::cuCtxGetDevice(&mut d) }.result();
        let mut popped = ptr::null_mut();
        unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result()?;
        r.map(|()| d)
    }
    // SAFETY (each call): the caller's contract; every push is popped.
    let (a, b) = unsafe { (device(ctx)?, device(peer)?) };
    if a == b {
        return Ok(false);
    }
    let mut can = 0;
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) }.result()?;
    if can == 0 {
        return Ok(false);
    }
    unsafe { sys::cuCtxPushCurrent_v2(ctx) }.result()?;
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
    let mut popped = ptr::null_mut();
    unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result()?;
    match r {
        sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
        r => r.result()?,
    }
    // Memory of the stream-ordered allocator (`cuMemAllocAsync`, which cudarc uses for every
    // buffer) is not covered by context peer access: its pool must grant the other device
    // access too, or the driver refuses a memcpy node between the two devices
    // (`CUDA_ERROR_INVALID_VALUE`, measured on the 2-GPU H200 machine, CUDA 13.0). So `a` gets
    // read-write access to the memory of `b`'s current pool.
    let mut pool: sys::CUmemoryPool = ptr::null_mut();
    // SAFETY: `b` is a device handle from `cuCtxGetDevice`; `pool` is written by the call.
    unsafe { sys::cuDeviceGetMemPool(&mut pool, b) }.result()?;
    // SAFETY: all-zero is a valid access descriptor (invalid location type, no access), then
    // filled in.
    let mut desc: sys::CUmemAccessDesc = unsafe { core::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    #[cfg(not(feature = "cuda-13020"))]
    {
        desc.location.id = a;
    }
    #[cfg(feature = "cuda-13020")]
    {
        desc.location.__bindgen_anon_1.id = a;
    }
    desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: `pool` is a live pool of device `b`; one descriptor.
    unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }.result()?;
    Ok(true)
}

/// A plain edge: the dependent node starts once the node before it finished (the driver's
/// default edge data).
pub const PLAIN_EDGE: CUgraphEdgeData =
    CUgraphEdgeData { from_port: 0, to_port: 0, type_: 0, reserved: [0; 5] };

/// A programmatic edge between two kernel nodes: type `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`
/// from port `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`. The dependent kernel may start once every
/// thread block of the kernel before it has started; its `griddepcontrol.wait`
/// (`cudaGridDependencySynchronize()`) then waits until that kernel finished and its writes are
/// visible. The port measured fastest on the H200 (DESIGN.md: a chain of tiny kernels, 0.41 µs
/// per node against 0.58 µs from port `PROGRAMMATIC` and 0.73 µs with plain edges).
pub const PROGRAMMATIC_EDGE: CUgraphEdgeData = CUgraphEdgeData {
    from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER as u8,
    to_port: 0,
    type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
    reserved: [0; 5],
};

/// `cuDriverGetVersion`: the driver's CUDA version, `1000 * major + 10 * minor` (12030 for
/// CUDA 12.3).
pub fn driver_version() -> Result<i32, DriverError> {
    let mut v = 0;
    // SAFETY: writes one int; needs no context.
    unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
    Ok(v)
}

/// `cuGraphInstantiateWithFlags(graph, 0)`.
///
/// # Safety
/// `graph` is live and its context is current.
pub unsafe fn instantiate(graph: CUgraph) -> Result<CUgraphExec, DriverError> {
    let mut exec = ptr::null_mut();
    unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }.result()?;
    Ok(exec)
}

/// `cuGraphInstantiateWithParams`: [`instantiate`] with `flags`
/// (`CUgraphInstantiate_flags`: `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`,
/// `…_UPLOAD` (uploads the exec on `upload` as part of the instantiation, as `cuGraphUpload`
/// would), `…_USE_NODE_PRIORITY`); with no flag, `cuGraphInstantiateWithFlags(graph, 0)`.
///
/// # Safety
/// `graph` is live and its context is current; `upload` is live and of that context when the
/// upload flag is set.
pub unsafe fn instantiate_with(
    graph: CUgraph,
    flags: u64,
    upload: CUstream,
) -> Result<CUgraphExec, DriverError> {
    if flags == 0 {
        // SAFETY: the caller's contract.
        return unsafe { instantiate(graph) };
    }
    let mut exec = ptr::null_mut();
    let mut p = sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
        flags,
        hUploadStream: upload,
        hErrNode_out: ptr::null_mut(),
        result_out: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
    };
    // SAFETY: the caller's contract; `p` and `exec` are valid for the call.
    unsafe { sys::cuGraphInstantiateWithParams(&mut exec, graph, &mut p) }.result()?;
    Ok(exec)
}

/// `cuGraphExecDestroy`.
///
/// # Safety
/// `exec` came from [`instantiate`] and is not used afterwards. The driver lets launches already
/// enqueued finish.
pub unsafe fn exec_destroy(exec: CUgraphExec) -> Result<(), DriverError> {
    unsafe { sys::cuGraphExecDestroy(exec) }.result()
}

/// `cuGraphLaunch`: enqueues the whole exec on `stream`.
///
/// # Safety
/// `exec` and `stream` are live and of the same context; every pointer the exec's nodes use
/// stays valid until the launch completes.
pub unsafe fn launch(exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError> {
    unsafe { sys::cuGraphLaunch(exec, stream) }.result()
}

/// `cuGraphUpload`: uploads the exec's work descriptors ahead of its first launch.
///
/// # Safety
/// As [`launch`].
pub unsafe fn upload(exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError> {
    unsafe { sys::cuGraphUpload(exec, stream) }.result()
}

/// New parameters for one node of an exec (kernel, memcpy, memset, child graph, …; the
/// driver's rules per kind apply). Values are copied during the call.
///
/// A kernel node's go through `cuGraphExecKernelNodeSetParams_v2`, every other kind's through
/// the generic `cuGraphExecNodeSetParams`. The same kernel parameters sent through the generic
/// call made a GPU-bound step slower on the H200 (driver 580): `heat`'s step with its three
/// kernels' pointers set before every launch ran 10.26–10.70 µs per step against 8.66–9.30
/// with the kernel call, host time alike (`examples/probes/heat_floor.cu`, modes `gset` and
/// `set`, 2026-12-04).
///
/// # Safety
/// `node` is a node of type `params.type_` of the graph `exec` was instantiated from; `params`
/// as in [`add_node`].
pub unsafe fn exec_node_set_params(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: &mut CUgraphNodeParams,
) -> Result<(), DriverError> {
    if params.type_ == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
        // SAFETY: a kernel node's parameters are the union's `kernel` member.
        let k = unsafe { &params.__bindgen_anon_1.kernel };
        let kernel = sys::CUDA_KERNEL_NODE_PARAMS_v2 {
            func: k.func,
            gridDimX: k.gridDimX,
            gridDimY: k.gridDimY,
            gridDimZ: k.gridDimZ,
            blockDimX: k.blockDimX,
            blockDimY: k.blockDimY,
            blockDimZ: k.blockDimZ,
            sharedMemBytes: k.sharedMemBytes,
            kernelParams: k.kernelParams,
            extra: k.extra,
            kern: k.kern,
            ctx: k.ctx,
        };
        // SAFETY: the caller's contract; the argument pointers are read during the call.
        return unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &kernel) }.result();
    }
    unsafe { sys::cuGraphExecNodeSetParams(exec, node, params) }.result()
}

/// `cuGraphExecUpdate_v2`: updates every node of `exec` from `graph`, which must have the
/// same topology. On refusal the driver's result info (result code, failing node) is returned.
///
/// # Safety
/// Both are live and of the current context.
pub unsafe fn exec_update(
    exec: CUgraphExec,
    graph: CUgraph,
) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)> {
    let mut info = sys::CUgraphExecUpdateResultInfo {
        result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
        errorNode: ptr::null_mut(),
        errorFromNode: ptr::null_mut(),
    };
    unsafe { sys::cuGraphExecUpdate_v2(exec, graph, &mut info) }.result().map_err(|e| (e, info))
}

/// `cuGraphDebugDotPrint` with verbose flags, writing Graphviz DOT to `path`.
///
/// # Safety
/// `graph` is live.
pub unsafe fn debug_dot_print(graph: CUgraph, path: *const c_char) -> Result<(), DriverError> {
    let flags = sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32;
    unsafe { sys::cuGraphDebugDotPrint(graph, path, flags) }.result()
}

/// `path` as [`debug_dot_print`] takes it: the path's own bytes (a lossy conversion would write
/// another file), NUL-terminated. Else why not, as the call to name in the error.
pub(crate) fn dot_path(path: &std::path::Path) -> Result<std::ffi::CString, &'static str> {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    #[cfg(not(unix))]
    let bytes = path.to_str().ok_or("cuGraphDebugDotPrint (path is not UTF-8)")?.as_bytes();
    std::ffi::CString::new(bytes).map_err(|_| "cuGraphDebugDotPrint (path contains NUL)")
}

/// `cuLaunchKernel`: one eager kernel launch on `stream` (the eager oracle's path).
///
/// # Safety
/// `params` as for a kernel node in [`add_node`], with `stream` live in the current context.
pub unsafe fn launch_kernel(
    params: &CUDA_KERNEL_NODE_PARAMS_v3,
    stream: CUstream,
) -> Result<(), DriverError> {
    let p = params;
    unsafe {
        sys::cuLaunchKernel(
            p.func,
            p.gridDimX,
            p.gridDimY,
            p.gridDimZ,
            p.blockDimX,
            p.blockDimY,
            p.blockDimZ,
            p.sharedMemBytes,
            stream,
            p.kernelParams,
            p.extra,
        )
    }
    .result()
}

/// `cuLaunchKernelEx` with the launch attribute
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` set: the kernel may start before the
/// kernel enqueued before it on `stream` finished, once that kernel's thread blocks have all
/// started or triggered; its `griddepcontrol.wait` waits for that kernel's completion (the
/// eager oracle's launch of a programmatic kernel).
///
/// # Safety
/// As [`launch_kernel`]; and the kernel waits (`griddepcontrol.wait`) in every thread before it
/// touches memory or returns (the contract of `#[programmatic]` in `kernels!`).
pub unsafe fn launch_kernel_programmatic(
    params: &CUDA_KERNEL_NODE_PARAMS_v3,
    stream: CUstream,
) -> Result<(), DriverError> {
    let p = params;
    // SAFETY (zeroed): the union is plain data; only `programmaticStreamSerializationAllowed`
    // is read for this attribute.
    let mut value: sys::CUlaunchAttributeValue = unsafe { core::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: p.gridDimX,
        gridDimY: p.gridDimY,
        gridDimZ: p.gridDimZ,
        blockDimX: p.blockDimX,
        blockDimY: p.blockDimY,
        blockDimZ: p.blockDimZ,
        sharedMemBytes: p.sharedMemBytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    unsafe { sys::cuLaunchKernelEx(&config, p.func, p.kernelParams, p.extra) }.result()
}

/// `cuMemcpyAsync`: `bytes` bytes from `src` to `dst` (unified addresses: device or pinned host).
///
/// # Safety
/// Both ranges are valid for `bytes` bytes until the copy ran; `stream` live.
pub unsafe fn memcpy_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> Result<(), DriverError> {
    unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream) }.result()
}

/// `cuMemcpyHtoDAsync_v2`: `bytes` bytes from host memory at `src` to device memory at `dst`.
/// Inside a stream capture it records a memcpy node. Driver reference:
/// <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html>.
///
/// # Safety
/// `src` is pinned host memory and `dst` device memory of `stream`'s context, each valid for
/// `bytes` bytes until the copy ran (for a recorded copy: every launch of the recording); the
/// context is current and `stream` live.
pub unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> Result<(), DriverError> {
    unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src, bytes, stream) }.result()
}

/// `cuMemcpyDtoHAsync_v2`: `bytes` bytes from device memory at `src` to host memory at `dst`.
/// Inside a stream capture it records a memcpy node.
///
/// # Safety
/// As [`memcpy_htod_async`], the other way: `dst` pinned host memory, `src` device memory.
pub unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> Result<(), DriverError> {
    unsafe { sys::cuMemcpyDtoHAsync_v2(dst, src, bytes, stream) }.result()
}

/// `cuMemsetD8Async` / `cuMemsetD16Async` / `cuMemsetD32Async` of `n` elements of
/// `element_size` bytes at `d` to `v`.
///
/// # Safety
/// `d` is valid for `n * element_size` bytes until the memset ran; `stream` live.
pub unsafe fn memset_async(
    d: sys::CUdeviceptr,
    v: u32,
    element_size: u32,
    n: usize,
    stream: CUstream,
) -> Result<(), DriverError> {
    match element_size {
        1 => unsafe { sys::cuMemsetD8Async(d, v as u8, n, stream) }.result(),
        2 => unsafe { sys::cuMemsetD16Async(d, v as u16, n, stream) }.result(),
        _ => unsafe { sys::cuMemsetD32Async(d, v, n, stream) }.result(),
    }
}

/// `cuMemAllocAsync`: `bytes` bytes of device memory from the device's default memory pool,
/// usable by work enqueued on `stream` after this call (stream-ordered allocation).
///
/// # Safety
/// `stream` is alive and its context current.
pub unsafe fn mem_alloc_async(
    bytes: usize,
    stream: CUstream,
) -> Result<sys::CUdeviceptr, DriverError> {
    let mut d: sys::CUdeviceptr = 0;
    // SAFETY: the caller's contract; `d` is a valid out-pointer.
    unsafe { sys::cuMemAllocAsync(&mut d, bytes, stream) }.result()?;
    Ok(d)
}

/// `cuMemFree`: frees `d` now (a graph allocation no launch is using any more too).
///
/// # Safety
/// `d` is a live allocation of the current context that no work still uses.
pub unsafe fn mem_free(d: sys::CUdeviceptr) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuMemFree_v2(d) }.result()
}

/// `cuMemFreeAsync`: frees `d` once the work enqueued on `stream` so far is done.
///
/// # Safety
/// `d` came from [`mem_alloc_async`] and is not freed yet; nothing enqueued after this call
/// uses it; `stream` live.
pub unsafe fn mem_free_async(d: sys::CUdeviceptr, stream: CUstream) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuMemFreeAsync(d, stream) }.result()
}

/// `cuDeviceGetGraphMemAttribute` of a 64-bit attribute (every `CUgraphMem_attribute`).
pub fn graph_mem_attribute(
    device: sys::CUdevice,
    attr: sys::CUgraphMem_attribute,
) -> Result<u64, DriverError> {
    let mut v: u64 = 0;
    // SAFETY: every graph memory attribute is a `cuuint64_t`; `v` is a valid out-pointer; an
    // invalid device is an error return.
    unsafe { sys::cuDeviceGetGraphMemAttribute(device, attr, (&raw mut v).cast()) }.result()?;
    Ok(v)
}

/// `cuLaunchHostFunc`: `f(user)` runs on a driver thread once `stream`'s earlier work is done.
///
/// # Safety
/// `stream` is alive and its context current; `f` may be called with `user` once, from another
/// thread, and must not call CUDA.
pub unsafe fn launch_host_func(
    stream: CUstream,
    f: unsafe extern "C" fn(*mut c_void),
    user: *mut c_void,
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { sys::cuLaunchHostFunc(stream, Some(f), user) }.result()
}

/// `cuStreamWaitValue32_v2` with `CU_STREAM_WAIT_VALUE_EQ`: later work on `stream` waits until
/// the 32-bit word at device address `addr` equals `value` (polled by the device).
///
/// # Safety
/// `stream` is alive and its context current; `addr` is device-visible memory (e.g. mapped
/// pinned host memory) that stays allocated until the wait completed.
pub unsafe fn stream_wait_value32(
    stream: CUstream,
    addr: sys::CUdeviceptr,
    value: u32,
) -> Result<(), DriverError> {
    let flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
    unsafe { sys::cuStreamWaitValue32_v2(stream, addr, value, flags) }.result()
}

/// `cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP`: `bytes` of
/// pinned host memory mapped into every context's address space; returns the host address and
/// the device address (`cuMemHostGetDevicePointer_v2`, the same number under unified
/// addressing).
///
/// # Safety
/// A CUDA context is current; the memory lives as long as the context that allocated it.
pub unsafe fn mem_host_alloc_mapped(
    bytes: usize,
) -> Result<(*mut c_void, sys::CUdeviceptr), DriverError> {
    let mut p = ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    unsafe { sys::cuMemHostAlloc(&mut p, bytes, flags) }.result()?;
    let mut d = 0;
    if let Err(e) = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) }.result() {
        // SAFETY: `p` was allocated just above and is not used elsewhere.
        let _ = unsafe { sys::cuMemFreeHost(p) };
        return Err(e);
    }
    Ok((p, d))
}

/// `cuDevicePrimaryCtxRetain` of the current context's device, kept for the rest of the
/// process: afterwards that primary context (and what it allocated) outlives every
/// `CudaContext`. Fails with `CUDA_ERROR_NOT_SUPPORTED` when the current context is not its
/// device's primary context (cudarc's contexts always are).
///
/// # Safety
/// A CUDA context is current.
pub unsafe fn keep_primary_context() -> Result<(), DriverError> {
    let mut ctx = ptr::null_mut();
    unsafe { sys::cuCtxGetCurrent(&mut ctx) }.result()?;
    let mut dev = 0;
    unsafe { sys::cuCtxGetDevice(&mut dev) }.result()?;
    let mut primary = ptr::null_mut();
    unsafe { sys::cuDevicePrimaryCtxRetain(&mut primary, dev) }.result()?;
    if primary != ctx {
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
        return Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED));
    }
    Ok(())
}

/// `cuUserObjectCreate` (one reference, `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`) then
/// `cuGraphRetainUserObject` with `CU_GRAPH_USER_OBJECT_MOVE`: `graph` owns the object, whose
/// `destroy(user)` runs on a driver thread once no graph or exec holds a reference and no launch
/// holding one is pending (clones of `graph`, as child graph nodes, and execs take their own).
///
/// On error, `destroy(user)` was called or will be (by the driver): it runs exactly once either
/// way.
///
/// # Safety
/// `graph` is live and its context current; `destroy` must not call CUDA and may be called with
/// `user` once, from any thread (this one included).
pub unsafe fn graph_own_user_object(
    graph: CUgraph,
    destroy: unsafe extern "C" fn(*mut c_void),
    user: *mut c_void,
) -> Result<(), DriverError> {
    let mut obj = ptr::null_mut();
    let flags = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
    if let Err(e) =
        unsafe { sys::cuUserObjectCreate(&mut obj, user, Some(destroy), 1, flags) }.result()
    {
        // SAFETY: the caller's contract; the driver has no object, so this is the one call.
        unsafe { destroy(user) };
        return Err(e);
    }
    let mv = sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32;
    if let Err(e) = unsafe { sys::cuGraphRetainUserObject(graph, obj, 1, mv) }.result() {
        // The reference is still this thread's: released, which runs `destroy`.
        let _ = unsafe { sys::cuUserObjectRelease(obj, 1) };
        return Err(e);
    }
    Ok(())
}

/// `cuEventRecord`: `event` completes when the work enqueued on `stream` so far has.
///
/// # Safety
/// `event` and `stream` live, of the current context.
pub unsafe fn record_event(event: sys::CUevent, stream: CUstream) -> Result<(), DriverError> {
    unsafe { sys::cuEventRecord(event, stream) }.result()
}

/// `cuStreamWaitEvent`: later work on `stream` waits for the last record of `event`.
///
/// # Safety
/// `event` and `stream` live, of the current context.
pub unsafe fn wait_event(stream: CUstream, event: sys::CUevent) -> Result<(), DriverError> {
    let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as u32;
    unsafe { sys::cuStreamWaitEvent(stream, event, flags) }.result()
}

/// Whether the driver library can be loaded ([`crate::driver_available`]): the names cudarc's
/// loader finds the driver by (`libcuda.so`, then the driver's `libcuda.so.1`; `nvcuda.dll`).
///
/// Through `libloading` rather than cudarc's `is_culib_present`, which exists only with cudarc's
/// `dynamic-loading`: a dependency that asks cudarc for `dynamic-linking` (candle, in the
/// examples' `candle` feature) turns that off, and the program then links the driver instead.
pub(crate) fn driver_present() -> bool {
    const NAMES: &[&str] =
        if cfg!(windows) { &["nvcuda.dll"] } else { &["libcuda.so", "libcuda.so.1"] };
    // SAFETY: only dlopens the driver library (its initializers run, as on cudarc's first
    // call); no driver call is made, and the handle is closed again.
    NAMES.iter().any(|&name| unsafe { libloading::Library::new(name) }.is_ok())
}

/// A null `void*`, for the unused `extra` field of kernel parameters.
pub(crate) const NO_EXTRA: *mut *mut c_void = ptr::null_mut();

/// A host node's wait flag ([`Driver::host_flag`]): a word of mapped pinned memory of the
/// crate's pool, opaque.
#[doc(hidden)]
pub struct HostFlag(pub(crate) &'static Flag);

/// One flag: a 32-bit word in mapped pinned host memory, its device address, and the context
/// whose pool it returns to. Lives for the process (pages are never freed).
pub(crate) struct Flag {
    pub(crate) host: *mut u32,
    pub(crate) device: CUdeviceptr,
    pub(crate) ctx: usize,
}

// SAFETY: `host` points into pinned memory that is never freed; it is only accessed through
// `AtomicU32` (by the host) and by the device's wait.
unsafe impl Send for Flag {}
unsafe impl Sync for Flag {}

impl Flag {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `host` is 4-aligned (a multiple of `flags::STRIDE` into a page) and lives for the
        // process; the host only ever accesses it atomically.
        unsafe { AtomicU32::from_ptr(self.host) }
    }

    /// 0: the device's wait holds until [`Self::set`].
    pub(crate) fn reset(&self) {
        self.word().store(0, Ordering::SeqCst);
    }

    /// 1: the device's wait ends. Everything the closure wrote before is visible to the work
    /// after the wait (host stores are ordered, and the device reads after it sees the flag).
    pub(crate) fn set(&self) {
        self.word().store(1, Ordering::SeqCst);
    }
}

/// The driver calls the [`GraphCache`](crate::GraphCache) makes, behind a trait so that the
/// update ladder's decisions can be tested without a GPU. [`Cuda`] is the real driver; every
/// method is one call of the functions above. Implementations report errors as the driver would.
///
/// # Safety
/// Every method is `unsafe` with the contract of the raw function it stands for: handles passed
/// in are ones this driver returned and has not destroyed, the context is current, and parameter
/// pointers are valid for the call.
#[allow(clippy::missing_safety_doc)] // one contract for all methods, stated above
pub trait Driver {
    /// [`graph_create`].
    unsafe fn graph_create(&mut self) -> Result<CUgraph, DriverError>;
    /// [`graph_destroy`]; errors are ignored (nothing can be done about them).
    unsafe fn graph_destroy(&mut self, graph: CUgraph);
    /// [`add_node`].
    unsafe fn add_node(
        &mut self,
        graph: CUgraph,
        deps: &[CUgraphNode],
        edges: &[CUgraphEdgeData],
        params: &mut CUgraphNodeParams,
    ) -> Result<CUgraphNode, DriverError>;
    /// [`instantiate_with`]: `flags` are `CUgraphInstantiate_flags` bits, `upload` the stream of
    /// the upload flag.
    unsafe fn instantiate(
        &mut self,
        graph: CUgraph,
        flags: u64,
        upload: CUstream,
    ) -> Result<CUgraphExec, DriverError>;
    /// [`exec_destroy`]; errors are ignored.
    unsafe fn exec_destroy(&mut self, exec: CUgraphExec);
    /// [`exec_node_set_params`].
    unsafe fn set_node(
        &mut self,
        exec: CUgraphExec,
        node: CUgraphNode,
        params: &mut CUgraphNodeParams,
    ) -> Result<(), DriverError>;
    /// [`exec_update`]; on refusal the driver's result info.
    unsafe fn exec_update(
        &mut self,
        exec: CUgraphExec,
        graph: CUgraph,
    ) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)>;
    /// [`launch`].
    unsafe fn launch(&mut self, exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError>;
    /// [`upload`].
    unsafe fn upload(&mut self, exec: CUgraphExec, stream: CUstream) -> Result<(), DriverError>;
    /// [`conditional_handle_create`].
    unsafe fn conditional_handle(
        &mut self,
        graph: CUgraph,
        ctx: sys::CUcontext,
        default: u32,
    ) -> Result<u64, DriverError>;
    /// A wait flag for the template `graph` of a host node (`cuMemHostAlloc` for a page of
    /// them when the pool is empty), given back to the pool by a user object that `graph` owns
    /// ([`graph_own_user_object`]) once no graph or exec holds a copy of it. The default, for
    /// test drivers (which run no host function): `Ok(None)`, and the node has no wait.
    #[doc(hidden)]
    unsafe fn host_flag(
        &mut self,
        _graph: CUgraph,
        _ctx: sys::CUcontext,
    ) -> Result<Option<HostFlag>, DriverError> {
        Ok(None)
    }
    /// Records `*done` (made first when null: `cuEventCreate`, timing disabled) on `stream`
    /// after a launch of an exec whose graph has memory nodes, so that [`Self::wait_done`] can
    /// wait for that launch before the exec and its graph are destroyed. The default, for test
    /// drivers (which run nothing): nothing to wait for.
    #[doc(hidden)]
    unsafe fn record_done(
        &mut self,
        _done: &mut sys::CUevent,
        _stream: CUstream,
    ) -> Result<(), DriverError> {
        Ok(())
    }
    /// Waits for the launch [`Self::record_done`] recorded (`cuEventSynchronize`), then, when
    /// `destroy`, destroys the event. Errors are ignored (a launch that failed is over).
    #[doc(hidden)]
    unsafe fn wait_done(&mut self, _done: sys::CUevent, _destroy: bool) {}
    /// [`enable_peer_access`].
    unsafe fn enable_peer_access(
        &mut self,
        ctx: sys::CUcontext,
        peer: sys::CUcontext,
    ) -> Result<bool, DriverError>;
}

/// The CUDA driver, loaded at run time by cudarc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cuda;

// `impl Driver for Cuda` is in `flags.rs`: its `host_flag` takes a flag from the pool there,
// which owns pinned memory (this module owns nothing).

/// `cuStreamIsCapturing`: whether `stream` is capturing (`ACTIVE`), capturing an invalidated
/// sequence (`INVALIDATED`) or not (`NONE`).
///
/// # Safety
/// `stream` is live.
pub unsafe fn stream_capture_status(
    stream: CUstream,
) -> Result<sys::CUstreamCaptureStatus, DriverError> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    unsafe { sys::cuStreamIsCapturing(stream, &mut status) }.result()?;
    Ok(status)
}

/// `cuStreamBeginCapture_v2`: from now on, work enqueued on `stream` is recorded into a graph
/// instead of run.
///
/// # Safety
/// `stream` is live and not capturing; its context is current.
pub unsafe fn stream_begin_capture(
    stream: CUstream,
    mode: sys::CUstreamCaptureMode,
) -> Result<(), DriverError> {
    unsafe { sys::cuStreamBeginCapture_v2(stream, mode) }.result()
}

/// `cuStreamEndCapture`: ends the capture begun on `stream` and returns the captured graph,
/// which the caller then owns. The capture ends also when this fails (for instance with
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`): no graph is returned then.
///
/// # Safety
/// `stream` is live and capturing, begun by this thread (or in relaxed mode).
pub unsafe fn stream_end_capture(stream: CUstream) -> Result<CUgraph, DriverError> {
    let mut graph = ptr::null_mut();
    unsafe { sys::cuStreamEndCapture(stream, &mut graph) }.result()?;
    if graph.is_null() {
        return Err(DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
    }
    Ok(graph)
}

/// `cuGraphGetNodes`: the graph's nodes (first the count, then the handles).
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_nodes(graph: CUgraph) -> Result<Vec<CUgraphNode>, DriverError> {
    let mut n = 0;
    unsafe { sys::cuGraphGetNodes(graph, ptr::null_mut(), &mut n) }.result()?;
    if n == 0 {
        return Ok(Vec::new()); // the driver refuses a second call with 0 (measured: CUDA 13.0)
    }
    let mut nodes = vec![ptr::null_mut(); n];
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) }.result()?;
    nodes.truncate(n);
    Ok(nodes)
}

/// `cuGraphGetEdges_v2`: the graph's edges as `(from, to, edge data)` (first the count, then
/// the edges; the edge data, ports and types, is fetched so that the query is never lossy).
///
/// # Safety
/// `graph` is live.
pub unsafe fn graph_edges(
    graph: CUgraph,
) -> Result<Vec<(CUgraphNode, CUgraphNode, CUgraphEdgeData)>, DriverError> {
    let null = ptr::null_mut();
    let mut n = 0;
    unsafe { sys::cuGraphGetEdges_v2(graph, null, null, ptr::null_mut(), &mut n) }.result()?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut from = vec![ptr::null_mut(); n];
    let mut to = vec![ptr::null_mut(); n];
    let mut data = vec![PLAIN_EDGE; n];
    unsafe {
        sys::cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        )
    }
    .result()?;
    Ok(from.into_iter().zip(to).zip(data).take(n).map(|((f, t), d)| (f, t, d)).collect())
}

/// What [`stream_capture_info`] reports of a stream: its capture status, and while it is
/// capturing, the capture's unique id, the graph being captured and the nodes (with their edge
/// data) that the stream's next captured work would depend on.
#[derive(Clone, Debug)]
pub struct CaptureInfo {
    /// `ACTIVE`, `INVALIDATED` or `NONE`.
    pub status: sys::CUstreamCaptureStatus,
    /// The capture sequence's id, unique in the process (valid unless `status` is `NONE`).
    pub id: u64,
    /// The graph being captured (owned by the capture; null unless `status` is `ACTIVE`).
    pub graph: CUgraph,
    /// The stream's current capture dependencies, copied.
    pub deps: Vec<CUgraphNode>,
    /// Their edge data, copied (empty when the driver reports none: all default).
    pub edges: Vec<sys::CUgraphEdgeData>,
}

/// `cuStreamGetCaptureInfo_v3`: the stream's capture status and, while capturing, the capture's
/// id, its graph and the stream's current dependencies with their edge data (asked for, so that
/// the query is never refused as lossy), copied out of the driver's arrays (valid only until the
/// next call on the stream). Driver reference:
/// <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html>.
///
/// # Safety
/// `stream` is live and its context current.
pub unsafe fn stream_capture_info(stream: CUstream) -> Result<CaptureInfo, DriverError> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    let mut graph = ptr::null_mut();
    let mut deps: *const CUgraphNode = ptr::null();
    let mut edges: *const sys::CUgraphEdgeData = ptr::null();
    let mut n = 0;
    unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut edges,
            &mut n,
        )
    }
    .result()?;
    // SAFETY: the driver's arrays hold `n` entries each when not null, valid until the next
    // call on the stream; copied at once.
    let (deps, edges) = unsafe { (copy_out(deps, n), copy_out(edges, n)) };
    Ok(CaptureInfo { status, id, graph, deps, edges })
}

/// The `n` values at `p`, copied (none when `p` is null).
///
/// # Safety
/// `p` is null or points to `n` initialized values.
unsafe fn copy_out<T: Copy>(p: *const T, n: usize) -> Vec<T> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    unsafe { core::slice::from_raw_parts(p, n) }.to_vec()
}

/// `cuStreamUpdateCaptureDependencies_v2` with `CU_STREAM_SET_CAPTURE_DEPENDENCIES` and default
/// edge data: the stream's next captured work depends on `nodes` (instead of what it depended
/// on before).
///
/// # Safety
/// `stream` is live and capturing (status `ACTIVE`), its context current; `nodes` are nodes of
/// the graph being captured.
pub unsafe fn stream_set_capture_dependencies(
    stream: CUstream,
    nodes: &[CUgraphNode],
) -> Result<(), DriverError> {
    let mut nodes = nodes.to_vec();
    let flags =
        sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
    unsafe {
        sys::cuStreamUpdateCaptureDependencies_v2(
            stream,
            nodes.as_mut_ptr(),
            ptr::null(),
            nodes.len(),
            flags,
        )
    }
    .result()
}

/// `cuGraphMemAllocNodeGetParams`: the address and size in bytes of a memory allocation node
/// (`CU_GRAPH_NODE_TYPE_MEM_ALLOC`).
///
/// # Safety
/// `node` is a memory allocation node of a live graph.
pub unsafe fn mem_alloc_node(node: CUgraphNode) -> Result<(sys::CUdeviceptr, usize), DriverError> {
    // SAFETY: all-zero is a valid `CUDA_MEM_ALLOC_NODE_PARAMS` (plain data; the driver fills it).
    let mut p: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { core::mem::zeroed() };
    unsafe { sys::cuGraphMemAllocNodeGetParams(node, &mut p) }.result()?;
    Ok((p.dptr, p.bytesize))
}

/// `cuGraphMemFreeNodeGetParams`: the address a memory free node (`CU_GRAPH_NODE_TYPE_MEM_FREE`)
/// frees.
///
/// # Safety
/// `node` is a memory free node of a live graph.
pub unsafe fn mem_free_node(node: CUgraphNode) -> Result<sys::CUdeviceptr, DriverError> {
    let mut d: sys::CUdeviceptr = 0;
    unsafe { sys::cuGraphMemFreeNodeGetParams(node, &mut d) }.result()?;
    Ok(d)
}

/// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`: the id of the allocation holding
/// `p` (device or pinned host memory), unique in the process for its life ("every memory
/// allocation from any of the CUDA memory allocation APIs will have a unique ID"): a buffer
/// freed and another allocated at the same address have two ids. 0 when the driver cannot say
/// (an address no CUDA allocation holds, or no driver).
pub fn buffer_id(p: sys::CUdeviceptr) -> u64 {
    let mut id: u64 = 0;
    let attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID;
    // SAFETY: a query of any address; `id` is a valid out-pointer of the attribute's type
    // (`unsigned long long`).
    let r = unsafe { sys::cuPointerGetAttribute((&raw mut id).cast(), attr, p) };
    if r == sys::CUresult::CUDA_SUCCESS { id } else { 0 }
}

/// `cuGraphNodeGetType`: the kind of `node`.
///
/// # Safety
/// `node` is a node of a live graph.
pub unsafe fn node_type(node: CUgraphNode) -> Result<sys::CUgraphNodeType, DriverError> {
    let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    unsafe { sys::cuGraphNodeGetType(node, &mut t) }.result()?;
    Ok(t)
}
