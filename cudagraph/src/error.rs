//! The one error type of the crate.

use std::fmt;

use cudarc::driver::DriverError;

use crate::plan::{Plan, PlanNode};

/// Where a node comes from: its label, its statement text and its source location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSite {
    /// The `let` name or the kernel name / `copy` / `memset` / `zero`.
    pub label: &'static str,
    /// The statement's source text.
    pub text: &'static str,
    /// Source file of the `graph!` call.
    pub file: &'static str,
    /// Line of the statement (1-based).
    pub line: u32,
    /// Column of the statement (1-based).
    pub column: u32,
}

impl NodeSite {
    pub(crate) fn of(plan: &Plan, node: &PlanNode) -> Self {
        NodeSite {
            label: node.label,
            text: node.text,
            file: plan.file,
            line: node.line,
            column: node.column,
        }
    }
}

impl fmt::Display for NodeSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` (`{}`) at {}:{}:{}",
            self.label, self.text, self.file, self.line, self.column
        )
    }
}

/// A CUDA driver error with the name of the driver call that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError {
    /// The driver call, e.g. `cuGraphLaunch`.
    pub call: &'static str,
    /// The driver's result.
    pub error: DriverError,
}

impl fmt::Display for CudaError {
    /// `call returned CUDA_ERROR_NAME: description`; the description comes from the driver
    /// (`cuGetErrorString`), so it is left out where no driver can be loaded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} returned {:?}", self.call, self.error.0)?;
        if crate::raw::driver_present()
            && let Ok(text) = self.error.error_string()
        {
            write!(f, ": {}", text.to_string_lossy())?;
        }
        Ok(())
    }
}

impl std::error::Error for CudaError {}

/// Everything that can go wrong in `cudagraph`. After any of these, nothing of the failing call
/// was enqueued on the stream and the [`GraphCache`](crate::GraphCache) is still usable; the one
/// exception is a driver error part way through a call in [`Mode::Eager`](crate::Mode::Eager),
/// which leaves the statements before it enqueued, as eager launches do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) could not be loaded.
    #[error(
        "no CUDA driver found: libcuda could not be loaded (is an NVIDIA GPU and driver installed?)"
    )]
    NoDriver,
    /// A driver call failed on one node.
    #[error("{site}: {source}")]
    Node {
        /// The failing node.
        site: NodeSite,
        /// The driver call and its result.
        source: CudaError,
    },
    /// A driver call failed on the graph as a whole (create, instantiate, launch, upload).
    #[error("graph at {file}:{line}: {source}")]
    Graph {
        /// Source file of the `graph!` call.
        file: &'static str,
        /// Line of the `graph!` call.
        line: u32,
        /// The driver call and its result.
        source: CudaError,
    },
    /// The CUDA context is unusable: a kernel faulted earlier (an illegal address, a trap, a
    /// misaligned access, a device-side assert, …; in a graph or anywhere else in the context),
    /// and the driver now answers every call in this context with that sticky error. `file` and
    /// `line` name the call that found it (a `graph!` call, a builder's `launch`, an `eager!`),
    /// not the kernel that faulted, which the driver does not say; `compute-sanitizer` does.
    /// Nothing of the call was enqueued. The context cannot recover: drop its caches and
    /// buffers (their destruction fails quietly, as cudarc's does) and end the process to use
    /// the device again.
    #[error(
        "graph at {file}:{line}: the CUDA context is unusable after a kernel fault (a sticky \
         error: every later call in this context fails; end the process to use the device \
         again): {source}"
    )]
    ContextFault {
        /// Source file of the call that found the fault.
        file: &'static str,
        /// Line of that call.
        line: u32,
        /// The driver call that returned the sticky error, and the error.
        source: CudaError,
    },
    /// A `copy` whose source and destination lengths differ.
    #[error("{site}: copy length mismatch: source has {src} elements, destination has {dst}")]
    CopyLength {
        /// The failing node.
        site: NodeSite,
        /// Source length, elements.
        src: usize,
        /// Destination length, elements.
        dst: usize,
    },
    /// A copy, memset, zero or fill of an empty buffer, or a graph-owned buffer (`alloc`) of 0
    /// bytes (the driver refuses 0-byte memcpy, memset and memory allocation nodes).
    #[error("{site}: empty buffer: a graph cannot hold a 0-byte {what} node")]
    Empty {
        /// The failing node.
        site: NodeSite,
        /// `memcpy`, `memset`, `2-D memcpy`, `2-D memset`, `fill` or `graph-owned allocation`.
        what: &'static str,
    },
    /// A launch with a zero grid or block dimension.
    #[error(
        "{site}: launch with grid {grid:?} and block {block:?}: every dimension must be at least 1"
    )]
    ZeroDims {
        /// The failing node.
        site: NodeSite,
        /// Grid dimensions, blocks.
        grid: (u32, u32, u32),
        /// Block dimensions, threads.
        block: (u32, u32, u32),
    },
    /// Launch dimensions or shared memory over the device's limits.
    #[error("{site}: {why}")]
    LaunchLimit {
        /// The failing node.
        site: NodeSite,
        /// Which limit, with the values.
        why: String,
    },
    /// A node that cannot be part of the graph: in a [`GraphBuilder`](crate::GraphBuilder), a
    /// buffer handle or node of another builder, an `after` node that is not earlier, or one
    /// buffer passed twice to one node with a write; in `graph!`, a buffer handle that the
    /// statement's own operands did not borrow in this call.
    #[error("{site}: {why}")]
    InvalidNode {
        /// The failing node.
        site: NodeSite,
        /// What is wrong.
        why: String,
    },
    /// Two buffers of one call overlap in memory and one of them is written (views of one
    /// allocation made more than once): the graph would have no edge between their nodes.
    /// Nothing was enqueued.
    #[error("{first} and {second}: their buffers overlap in memory and one is written")]
    Aliasing {
        /// The first statement (or builder node) using one of the buffers.
        first: NodeSite,
        /// The first statement (or builder node) using the other.
        second: NodeSite,
    },
    /// A buffer of another CUDA context than the one its node runs on: a kernel node runs on
    /// its `kernels!` struct's context (device), every other node on the stream's; only copies
    /// between device buffers (peer copies) and captured work may cross contexts.
    #[error(
        "{site}: buffer belongs to another CUDA context than the stream (or, for a kernel, than its `kernels!` struct's context): a node reads and writes memory of the device it runs on; only device-to-device copies and captured work may cross devices"
    )]
    WrongContext {
        /// The failing node.
        site: NodeSite,
    },
    /// `cuGraphExecUpdate` refused to update an exec from a rebuilt graph (the cache then
    /// re-instantiated it; see [`GraphCache::last_refusal`](crate::GraphCache::last_refusal)).
    #[error("{site}: cuGraphExecUpdate refused the update ({result:?}, {source})")]
    UpdateRefused {
        /// The node the driver named (the first node when it named none).
        site: NodeSite,
        /// The driver's reason.
        result: cudarc::driver::sys::CUgraphExecUpdateResult,
        /// The driver call's result.
        source: CudaError,
    },
    /// A function named in `kernels!` was not found in the loaded module
    /// (`cuModuleGetFunction`). With `CUDA_ERROR_NOT_FOUND` the message adds the usual cause: a
    /// kernel not declared `extern "C"`, whose symbol is then a C++ mangled name
    /// (`_Z5scalejfPf` for `scale`).
    #[error("kernel function `{name}` not found in the module: {source}{}", missing_hint(source))]
    MissingFunction {
        /// The kernel's name.
        name: &'static str,
        /// The driver call and its result.
        source: CudaError,
    },
    /// Loading a module failed.
    #[error("loading the module for `{kernels}` failed: {source}")]
    Module {
        /// The `kernels!` struct.
        kernels: &'static str,
        /// The driver call and its result.
        source: CudaError,
    },
    /// NVRTC failed to compile a kernel source.
    #[error("NVRTC failed to compile the kernels: {0}")]
    Compile(#[from] cudarc::nvrtc::CompileError),
    /// Any other driver call.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A host node's closure (`host(…)` in `graph!`) panicked while a launch of this cache ran
    /// it (on the driver's thread, where the panic was caught). Returned by the next call on the
    /// cache, which enqueues nothing; the call after it runs normally. Work after the host node
    /// in the panicking launch ran as usual.
    #[error("{site}: the host function panicked during an earlier launch: {message}")]
    HostFunction {
        /// The host node.
        site: NodeSite,
        /// The panic's message.
        message: String,
    },
    /// The closure of a [`capture`](crate::capture) returned this error. The capture was ended
    /// and its graph destroyed; the stream is usable.
    #[error("capture at {file}:{line}: the closure returned an error: {source}")]
    Capture {
        /// Source file of the `capture` call.
        file: &'static str,
        /// Line of the `capture` call.
        line: u32,
        /// The closure's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A [`capture`](crate::capture) was invalidated by the driver: a call inside the closure
    /// that a capture cannot record (`synchronize`, a wait on an event recorded outside the
    /// capture, a copy to pageable host memory, …) or a stream forked from the capture and not
    /// joined back. The capture was ended and nothing was kept; the stream is usable.
    #[error("capture at {file}:{line} was invalidated: {source}{}", invalidation_hint(source))]
    CaptureInvalidated {
        /// Source file of the `capture` call.
        file: &'static str,
        /// Line of the `capture` call.
        line: u32,
        /// `cuStreamEndCapture`'s result, or the closure's driver error that invalidated it.
        source: CudaError,
    },
    /// An explicit kernel node of a capture, or a buffer handle for one, refused before any
    /// driver call: nothing was added to the capture, launched or sent to the exec (see
    /// [`Refusal`]). `site` names the kernel (or the method, for a handle) and the source
    /// location of the call.
    #[error("{site}: {why}")]
    NodeRefused {
        /// The kernel (label: its name; text: the method) or handle (label: `read` / `write`)
        /// and where the call is.
        site: NodeSite,
        /// Why.
        why: Refusal,
    },
    /// `cuGraphExecUpdate` refused to update a captured [`Exec`](crate::Exec) from a graph
    /// ([`Exec::update`](crate::Exec::update)); the exec is unchanged.
    #[error("graph update at {file}:{line}: cuGraphExecUpdate refused ({result:?}, {source})")]
    GraphUpdateRefused {
        /// Source file of the `update` call.
        file: &'static str,
        /// Line of the `update` call.
        line: u32,
        /// The driver's reason (`CUgraphExecUpdateResultInfo::result`).
        result: cudarc::driver::sys::CUgraphExecUpdateResult,
        /// The driver call's result.
        source: CudaError,
    },
    /// The cache's [`InstantiateFlags`](crate::InstantiateFlags) cannot be used together:
    /// `device_launch` with `auto_free_on_launch`, which the driver refuses for every graph.
    /// Refused by the crate before `cuGraphInstantiateWithParams`: nothing was instantiated or
    /// enqueued, and the cache's existing execs stay usable (a call they can take by an update
    /// still runs).
    #[error("graph at {file}:{line}: {why}")]
    InstantiateFlags {
        /// Source file of the `graph!` call (or the builder's `launch`).
        file: &'static str,
        /// Line of that call.
        line: u32,
        /// Which flags, and why.
        why: &'static str,
    },
}

/// Why an explicit kernel node of a capture ([`Capture::kernel`](crate::Capture::kernel),
/// [`Exec::set_kernel`](crate::Exec::set_kernel)) or a buffer handle for one
/// ([`Capture::read`](crate::Capture::read), [`Capture::write`](crate::Capture::write),
/// [`Exec::read`](crate::Exec::read), [`Exec::write`](crate::Exec::write)) was refused
/// ([`Error::NodeRefused`]). `arg` is the kernel parameter's index (0-based), absent for a
/// view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The view, or the buffer argument `arg`, is not inside one operand that the capture
    /// lists (or that the exec holds): a node could use memory that no borrow keeps alive.
    NotAnOperand {
        /// The kernel parameter, or `None` for a view.
        arg: Option<usize>,
    },
    /// The view, or the buffer argument `arg`, is written but lies only inside operands that
    /// the capture lists (or the exec holds) as `&`, read-only.
    ReadOnly {
        /// The kernel parameter, or `None` for a view.
        arg: Option<usize>,
    },
    /// Two buffer arguments of one kernel overlap in memory and one of them is written.
    Overlap {
        /// The first parameter.
        first: usize,
        /// The second parameter.
        second: usize,
    },
    /// The node is not one of the graph this exec was instantiated from (another capture, a
    /// `capture` statement of `graph!`, or a graph the exec was only updated from).
    OtherGraph,
    /// The node was run eagerly ([`Mode::Eager`](crate::Mode::Eager)): there is no node to set.
    NotRecorded,
    /// The launch is of another kernel function, or passes arguments of other sizes, than the
    /// node's.
    OtherFunction,
    /// The exec has no operand `index` (it has `operands`).
    NoOperand {
        /// The index asked for.
        index: usize,
        /// How many operands the exec has.
        operands: usize,
    },
    /// Operand `index` has another element type than the one asked for.
    ElementType {
        /// The operand.
        index: usize,
    },
    /// Operand `index` is not written by the graph (listed `&` in the capture, or held `&`).
    NotWritten {
        /// The operand.
        index: usize,
    },
    /// Operand `index` is pinned host memory, which a kernel node does not take.
    HostMemory {
        /// The operand.
        index: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = |arg: &Option<usize>| match arg {
            Some(a) => format!("buffer argument {a}"),
            None => "the view".to_string(),
        };
        match self {
            Refusal::NotAnOperand { arg } => write!(
                f,
                "{} is not inside one listed operand of the capture (or one the exec holds)",
                what(arg)
            ),
            Refusal::ReadOnly { arg } => {
                write!(f, "{} is written but lies only inside operands borrowed `&`", what(arg))
            }
            Refusal::Overlap { first, second } => write!(
                f,
                "buffer arguments {first} and {second} overlap in memory and one is written"
            ),
            Refusal::OtherGraph => {
                f.write_str("the node is not one of the graph this exec was instantiated from")
            }
            Refusal::NotRecorded => {
                f.write_str("the kernel ran eagerly (Mode::Eager): there is no node to set")
            }
            Refusal::OtherFunction => f.write_str(
                "the launch is of another kernel function (or argument sizes) than the node's",
            ),
            Refusal::NoOperand { index, operands } => {
                write!(f, "there is no operand {index}: the exec has {operands}")
            }
            Refusal::ElementType { index } => {
                write!(f, "operand {index} has another element type")
            }
            Refusal::NotWritten { index } => {
                write!(f, "operand {index} is not written by the graph (borrowed `&`)")
            }
            Refusal::HostMemory { index } => {
                write!(f, "operand {index} is pinned host memory: a kernel takes device memory")
            }
        }
    }
}

impl From<DriverError> for Error {
    /// A driver error from a cudarc call outside `cudagraph` (allocation, copy, context), so
    /// that `?` works on cudarc results in functions returning [`Result`].
    fn from(error: DriverError) -> Self {
        Error::Cuda(CudaError { call: "a cudarc driver call", error })
    }
}

/// `Result<T, cudagraph::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Tags a driver result with the call that produced it.
pub(crate) trait Call<T> {
    fn call(self, call: &'static str) -> Result<T, CudaError>;
}

impl<T> Call<T> for Result<T, DriverError> {
    fn call(self, call: &'static str) -> Result<T, CudaError> {
        self.map_err(|error| CudaError { call, error })
    }
}

/// What usually causes an invalidated capture with this error, for its message.
fn invalidation_hint(source: &CudaError) -> &'static str {
    use cudarc::driver::sys::CUresult as R;
    match source.error.0 {
        R::CUDA_ERROR_STREAM_CAPTURE_ISOLATION => {
            " (did the closure use a buffer it did not list? cudarc waits on such a buffer's \
             events, recorded outside the capture; list it with `&x` or `&mut x`)"
        }
        R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED => {
            " (a call that cannot be captured, such as a synchronize, ran inside the closure)"
        }
        _ => "",
    }
}

/// What usually causes `cuModuleGetFunction` to find no kernel, for its message.
fn missing_hint(source: &CudaError) -> &'static str {
    if source.error.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND {
        " (is the kernel declared `extern \"C\"`? Without it, its symbol in the module is a C++ \
         mangled name such as `_Z5scalejfPf`, which `kernels!` does not look up)"
    } else {
        ""
    }
}

/// Whether `e` is a sticky error: one after which the driver fails every call in the context
/// (`cuda.h`: "This leaves the process in an inconsistent state and any further CUDA work will
/// return the same error"; a device-side assert: the context must be destroyed).
pub(crate) fn is_sticky(e: DriverError) -> bool {
    use cudarc::driver::sys::CUresult as R;
    matches!(
        e.0,
        R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_ASSERT
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
    )
}

impl Error {
    /// The driver call and result behind this error, where it has one.
    pub fn driver_error(&self) -> Option<&CudaError> {
        match self {
            Error::Node { source, .. }
            | Error::Graph { source, .. }
            | Error::ContextFault { source, .. }
            | Error::UpdateRefused { source, .. }
            | Error::MissingFunction { source, .. }
            | Error::Module { source, .. }
            | Error::Cuda(source)
            | Error::CaptureInvalidated { source, .. }
            | Error::GraphUpdateRefused { source, .. } => Some(source),
            _ => None,
        }
    }

    /// `self`, or [`Error::ContextFault`] at `(file, line)` when its driver error is sticky.
    pub(crate) fn or_context_fault(self, (file, line): (&'static str, u32)) -> Error {
        match self.driver_error() {
            Some(&source)
                if is_sticky(source.error) && !matches!(self, Error::ContextFault { .. }) =>
            {
                Error::ContextFault { file, line, source }
            }
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult as R;

    #[test]
    fn sticky_driver_errors_become_context_faults_at_the_call_site() {
        let node = |error| Error::Node {
            site: NodeSite { label: "n", text: "k.f()", file: "a.rs", line: 7, column: 9 },
            source: CudaError { call: "cuGraphAddNode_v2", error: DriverError(error) },
        };
        let e = node(R::CUDA_ERROR_ILLEGAL_ADDRESS).or_context_fault(("a.rs", 5));
        match &e {
            Error::ContextFault { file: "a.rs", line: 5, source } => {
                assert_eq!(source.call, "cuGraphAddNode_v2");
                assert_eq!(source.error.0, R::CUDA_ERROR_ILLEGAL_ADDRESS);
            }
            e => panic!("expected ContextFault, got {e:?}"),
        }
        let msg = e.to_string();
        assert!(msg.starts_with("graph at a.rs:5: the CUDA context is unusable"), "{msg}");
        for sticky in [R::CUDA_ERROR_LAUNCH_FAILED, R::CUDA_ERROR_ASSERT, R::CUDA_ERROR_INVALID_PC]
        {
            assert!(matches!(
                node(sticky).or_context_fault(("a.rs", 5)),
                Error::ContextFault { .. }
            ));
        }
        // Not sticky: the error stays what it was.
        let e = node(R::CUDA_ERROR_OUT_OF_MEMORY).or_context_fault(("a.rs", 5));
        assert!(matches!(e, Error::Node { .. }), "{e:?}");
        assert!(matches!(Error::NoDriver.or_context_fault(("a.rs", 5)), Error::NoDriver));
    }

    #[test]
    fn a_kernel_not_found_hints_at_extern_c() {
        let missing = |error| Error::MissingFunction {
            name: "scale",
            source: CudaError { call: "cuModuleGetFunction", error: DriverError(error) },
        };
        let msg = missing(R::CUDA_ERROR_NOT_FOUND).to_string();
        assert!(msg.starts_with("kernel function `scale` not found in the module"), "{msg}");
        assert!(msg.contains("extern \"C\""), "{msg}");
        assert!(msg.contains("mangled name"), "{msg}");
        let msg = missing(R::CUDA_ERROR_INVALID_CONTEXT).to_string();
        assert!(!msg.contains("extern"), "{msg}");
    }
}
