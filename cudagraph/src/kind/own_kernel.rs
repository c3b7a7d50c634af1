//! The crate's own kernels (`fill`'s and the readback's): CUDA C++ compiled by NVRTC once per
//! process, its module loaded once per context and kept for later calls in that context.

use std::sync::{Arc, OnceLock, RwLock, Weak};

use cudarc::driver::{CudaContext, CudaFunction};

/// One kernel of the crate's own: its source and name, its PTX (compiled on first use), and
/// the function loaded in each context that used it.
pub(crate) struct OwnKernel {
    source: &'static str,
    name: &'static str,
    /// Whether a context's failure to load is kept (every later call there makes the same
    /// choice) or tried again at the next call (a compile failure is always kept: the PTX is
    /// made once per process).
    keep_failures: bool,
    ptx: OnceLock<Result<cudarc::nvrtc::Ptx, String>>,
    /// Read by every statement that makes a node of the kernel (every call): a read lock, so
    /// threads running calls at once do not wait for each other.
    loaded: RwLock<Vec<Loaded>>,
}

/// The kernel's function in one context, or why it could not be had there.
struct Loaded {
    /// The context's handle: the key.
    key: usize,
    /// The context object it was loaded through (whose clone the module holds).
    ctx: Weak<CudaContext>,
    function: Result<CudaFunction, Arc<str>>,
}

impl OwnKernel {
    pub(crate) const fn new(source: &'static str, name: &'static str, keep_failures: bool) -> Self {
        OwnKernel {
            source,
            name,
            keep_failures,
            ptx: OnceLock::new(),
            loaded: RwLock::new(Vec::new()),
        }
    }

    /// The kernel in `ctx`: loaded the first time (`cuModuleLoadData`, `cuModuleGetFunction`),
    /// then the same function. With `keep_failures`, a failure is kept too, so that every call
    /// in that context makes the same choice (its reason shared, not copied, by each call);
    /// else a failed load is tried again at the next call. The compile and the load run
    /// outside the table's lock.
    ///
    /// The table keeps each function, and so its module and context, alive while the context
    /// is used elsewhere; an entry whose context only the table keeps alive (the program
    /// dropped every object of it) is dropped when another context loads the kernel, so a
    /// program that makes and drops contexts keeps at most one of them alive this way. A
    /// function a graph's node still holds stays loaded through that node.
    ///
    /// `usable`, asked before the first load in a context only: `Err` where the kernel must
    /// not be used there (kept as that context's failure).
    pub(crate) fn function(
        &self,
        ctx: &Arc<CudaContext>,
        usable: impl FnOnce(&Arc<CudaContext>) -> Result<(), String>,
    ) -> Result<CudaFunction, Arc<str>> {
        let key = ctx.cu_ctx() as usize;
        {
            let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = loaded.iter().find(|e| e.key == key) {
                return e.function.clone();
            }
        }
        let ptx = usable(ctx).and_then(|()| self.ptx.get_or_init(|| compile(self.source)).clone());
        let function = ptx
            .and_then(|ptx| {
                let module = ctx.load_module(ptx).map_err(|e| format!("cuModuleLoadData: {e}"))?;
                module.load_function(self.name).map_err(|e| format!("cuModuleGetFunction: {e}"))
            })
            .map_err(Arc::from);
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        // Contexts alive only through this table: their module's hold (a loaded function) and
        // the upgrade here.
        loaded.retain(|e| {
            let held_here = if e.function.is_ok() { 2 } else { 1 };
            e.ctx.upgrade().is_some_and(|c| Arc::strong_count(&c) > held_here)
        });
        // (Another thread may have loaded it meanwhile: the first entry stays.)
        if let Some(e) = loaded.iter().find(|e| e.key == key) {
            return e.function.clone();
        }
        if function.is_err() && !self.keep_failures {
            return function;
        }
        loaded.push(Loaded { key, ctx: Arc::downgrade(ctx), function: function.clone() });
        function
    }
}

/// `source`'s PTX, or why there is none. With cudarc's run-time loading, a missing NVRTC
/// library is a panic inside `compile_ptx`, not an error, and a program with a driver and no
/// NVRTC must still run `graph!` (its `copy` needed no NVRTC before the readback kernel): so the
/// library is looked for first (its usual names, as the driver is by `raw::driver_present`),
/// and a panic of the compile is taken as an error too (names this list lacks; with
/// `panic = "abort"` only the look-up helps).
fn compile(source: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    const NAMES: &[&str] = &[
        "libnvrtc.so",
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11",
        "libnvrtc.so.10",
        "libnvrtc.so.9",
        "libnvrtc.so.1",
    ];
    // SAFETY: only dlopens the NVRTC library (its initializers run, as on cudarc's first call);
    // nothing of it is called here, and the handle is closed again.
    let present = cfg!(windows)
        || NAMES.iter().any(|&name| unsafe { libloading::Library::new(name) }.is_ok());
    if !present {
        return Err("NVRTC: the library (libnvrtc.so) was not found".into());
    }
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(source)) {
        Ok(Ok(ptx)) => Ok(ptx),
        Ok(Err(e)) => Err(format!("NVRTC: {e}")),
        Err(_) => Err("NVRTC: the library could not be loaded".into()),
    }
}

/// `impl NodeKind for $kind` whose nodes (`&$node`, a [`KernelNode`](super::kernel::KernelNode))
/// are kernel nodes of one of the crate's own kernels: every method is the kernel kind's, after
/// `$check(p, site)` for `validate` (the node's own refusals, before the kernel's checks).
macro_rules! own_kernel_kind {
    ($kind:ident, $node:ident, $check:expr) => {
        const _: () = {
            use cudarc::driver::CudaStream;
            use cudarc::driver::sys::{CUcontext, CUgraphNodeParams};
            use $crate::error::{Error, NodeSite};
            use $crate::kind::kernel::{Kernel, KernelNode, KernelState, Limits};
            use $crate::kind::{NodeKind, Reports};
            use $crate::operand::Accesses;

            impl NodeKind for $kind {
                type Params<'a> = &'a $node<'a>;
                type State = KernelState;
                const ADD: &'static str = <Kernel as NodeKind>::ADD;
                const SET: &'static str = <Kernel as NodeKind>::SET;
                const EAGER: &'static str = <Kernel as NodeKind>::EAGER;

                fn validate(
                    p: &&$node<'_>,
                    limits: Option<&Limits>,
                    site: &dyn Fn() -> NodeSite,
                ) -> Result<(), Error> {
                    let check: fn(&$node<'_>, &dyn Fn() -> NodeSite) -> Result<(), Error> = $check;
                    check(p, site)?;
                    Kernel::validate(&(*p as &dyn KernelNode), limits, site)
                }
                fn accesses(p: &&$node<'_>, out: &mut Accesses) -> usize {
                    KernelNode::accesses(*p, out)
                }
                fn state(p: &&$node<'_>) -> KernelState {
                    Kernel::state(&(*p as &dyn KernelNode))
                }
                fn record(s: &mut KernelState, p: &&$node<'_>) -> bool {
                    Kernel::record(s, &(*p as &dyn KernelNode))
                }
                fn settable(old: &KernelState, new: &&$node<'_>) -> bool {
                    Kernel::settable(old, &(*new as &dyn KernelNode))
                }
                fn with_params<R>(
                    s: &mut KernelState,
                    ctx: CUcontext,
                    f: impl FnOnce(&mut CUgraphNodeParams) -> R,
                ) -> R {
                    Kernel::with_params(s, ctx, f)
                }
                fn carry(old: &mut KernelState, new: &mut KernelState) {
                    Kernel::carry(old, new)
                }
                unsafe fn eager(
                    p: &&$node<'_>,
                    stream: &CudaStream,
                    reports: &std::sync::Arc<Reports>,
                    site: &dyn Fn() -> NodeSite,
                ) -> Result<(), Error> {
                    // SAFETY: the caller's contract, as for a kernel node.
                    unsafe { Kernel::eager(&(*p as &dyn KernelNode), stream, reports, site) }
                }
            }
        };
    };
}
pub(crate) use own_kernel_kind;
