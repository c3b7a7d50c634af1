//! Test support only. Under `cargo test --doc` it also compiles every Rust snippet of the README
//! and the guides in `docs/` (each a doctest; those that need a GPU are `no_run`).

/// The README's snippets.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct Readme;

/// `docs/capture.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/capture.md")]
pub struct CaptureGuide;

/// `docs/host-nodes.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/host-nodes.md")]
pub struct HostNodesGuide;

/// `docs/graph-owned-memory.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/graph-owned-memory.md")]
pub struct GraphOwnedMemoryGuide;

/// `docs/device-control-flow.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/device-control-flow.md")]
pub struct DeviceControlFlowGuide;

/// `docs/several-gpus.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/several-gpus.md")]
pub struct SeveralGpusGuide;

/// `docs/performance.md`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/performance.md")]
pub struct PerformanceGuide;
