//! Enable/disable equivalence with variants (issue 15): a host `if` of two branches of kernel
//! nodes, run as `graph!`'s cached variants (one exec per branch), and the same two branches as
//! one raw driver exec holding both, the branch not taken disabled with `cuGraphNodeSetEnabled`,
//! give exactly the same integers over a sequence of branch choices (switches, repeats, a
//! first step on the branch that starts disabled), with the taken branch's first scalar changing
//! every step (a per-node update in both). Both are also checked against a host model after
//! every step. `examples/src/toggle.rs` measures the two against each other.
//!
//! GPU test, `#[ignore = "needs a CUDA GPU"]`: `cargo test -p cudagraph-tests --test toggle --
//! --ignored` (or `.devbin/run.sh`).

use std::ffi::c_void;
use std::ptr;

use cudagraph::cudarc::driver::DevicePtr;
use cudagraph::cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS, CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode,
};
use cudagraph::{GraphCache, graph};

mod common;
use common::{Result, assert_same, gpu, host};

/// Elements (several blocks, the last one partial).
const N: u32 = 777;
/// Threads per block.
const BLOCK: u32 = 128;

/// `(a, b)` of each kernel `affine_inplace(n, a, b, x)` (`x = a x + b + i`) of branch A and of
/// branch B; a `b` of `None` is the step's scalar.
const BRANCH_A: [(u32, Option<u32>); 3] = [(3, None), (7, Some(11)), (0x9e37, Some(5))];
const BRANCH_B: [(u32, Option<u32>); 2] = [(5, None), (13, Some(2))];

/// The step's scalar at step `i`.
fn scalar(i: usize) -> u32 {
    (i as u32).wrapping_mul(31).wrapping_add(1)
}

/// Kernel node parameters of `affine_inplace(n, a, b, x)`; `args` holds the four values'
/// addresses and must live while the parameters are used.
fn params(
    f: CUfunction,
    args: &mut [*mut c_void; 4],
    vals: &mut (u32, u32, u32, CUdeviceptr),
) -> CUDA_KERNEL_NODE_PARAMS {
    *args = [
        ptr::from_mut(&mut vals.0).cast(),
        ptr::from_mut(&mut vals.1).cast(),
        ptr::from_mut(&mut vals.2).cast(),
        ptr::from_mut(&mut vals.3).cast(),
    ];
    CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: N.div_ceil(BLOCK),
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: BLOCK,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: args.as_mut_ptr(),
        extra: ptr::null_mut(),
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}

/// The raw exec of both branches: A's nodes then B's, one chain (the union of the branches
/// with the edges of their hazards on `x`, in program order).
struct Toggled {
    graph: CUgraph,
    exec: CUgraphExec,
    /// A's nodes, then B's.
    nodes: Vec<CUgraphNode>,
    f: CUfunction,
    x: CUdeviceptr,
}

impl Toggled {
    fn new(f: CUfunction, x: CUdeviceptr) -> Result<Toggled> {
        let mut graph = ptr::null_mut();
        // SAFETY: the test's context is current on this thread.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
        let mut t = Toggled { graph, exec: ptr::null_mut(), nodes: vec![], f, x };
        for (a, b) in BRANCH_A.iter().chain(&BRANCH_B) {
            let mut vals = (N, *a, b.unwrap_or(0), x);
            let mut args = [ptr::null_mut(); 4];
            let p = params(f, &mut args, &mut vals);
            let deps: Vec<CUgraphNode> = t.nodes.last().copied().into_iter().collect();
            let mut node = ptr::null_mut();
            // SAFETY: the graph is live, `deps` are its nodes, `p` points to one value per
            // parameter of `affine_inplace(unsigned, unsigned, unsigned, unsigned *)`.
            unsafe {
                sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &p)
            }
            .result()?;
            t.nodes.push(node);
        }
        // SAFETY: the graph is live.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut t.exec, graph, 0) }.result()?;
        Ok(t)
    }

    /// The nodes of branch A (`true`) or B.
    fn branch(&self, a: bool) -> &[CUgraphNode] {
        let (na, _) = self.nodes.split_at(BRANCH_A.len());
        if a { na } else { &self.nodes[BRANCH_A.len()..] }
    }

    fn set_enabled(&self, node: CUgraphNode, on: bool) -> Result {
        // SAFETY: a kernel node of the graph the exec was made from, which is alive.
        unsafe { sys::cuGraphNodeSetEnabled(self.exec, node, u32::from(on)) }.result()?;
        Ok(())
    }

    fn enabled(&self, node: CUgraphNode) -> Result<bool> {
        let mut on = 7u32;
        // SAFETY: as `set_enabled`; writes one uint.
        unsafe { sys::cuGraphNodeGetEnabled(self.exec, node, &mut on) }.result()?;
        Ok(on != 0)
    }

    /// The first node of the branch gets the step's scalar.
    fn set_scalar(&self, a: bool, s: u32) -> Result {
        let mul = if a { BRANCH_A[0].0 } else { BRANCH_B[0].0 };
        let mut vals = (N, mul, s, self.x);
        let mut args = [ptr::null_mut(); 4];
        let p = params(self.f, &mut args, &mut vals);
        // SAFETY: a kernel node of the exec's graph, the same function and parameter layout.
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, self.branch(a)[0], &p) }
            .result()?;
        Ok(())
    }
}

impl Drop for Toggled {
    fn drop(&mut self) {
        // SAFETY: both ours; the driver lets launches in flight finish.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

/// The host model of one step.
fn model(x: &mut [u32], take_a: bool, s: u32) {
    let branch: &[(u32, Option<u32>)] = if take_a { &BRANCH_A } else { &BRANCH_B };
    for &(a, b) in branch {
        host::affine_inplace(x, a, b.unwrap_or(s));
    }
}

/// 48 branch choices: the first on B (disabled when the exec is made), then runs of repeats and
/// single switches from a fixed generator.
fn choices() -> Vec<bool> {
    let mut state = 0x2545_f491u32;
    let mut v = vec![false];
    while v.len() < 48 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let take_a = state >> 31 == 1;
        let run = 1 + (state >> 28 & 3) as usize;
        v.extend(std::iter::repeat_n(take_a, run));
    }
    v.truncate(48);
    v
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn enable_disable_equals_variants() -> Result {
    let (ctx, stream, k) = gpu()?;
    ctx.bind_to_thread()?;
    let len = N as usize;
    let (mut x, y) = (stream.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?);
    let f = k.function("affine_inplace").expect("declared in kernels!").cu_function();
    let y_ptr = {
        let (p, _guard) = y.device_ptr(&stream);
        p
    };
    let t = Toggled::new(f, y_ptr)?;
    // Made with both branches enabled: disable B, as a toggled host `if` would at its build.
    for &node in t.branch(false) {
        t.set_enabled(node, false)?;
    }
    let mut on_a = true;
    let mut cache = GraphCache::new();
    let mut want = vec![0u32; len];
    let cfg = (N.div_ceil(BLOCK), BLOCK);
    let seq = choices();
    assert!(seq.contains(&true) && seq.windows(2).any(|w| w[0] == w[1]));
    for (i, &take_a) in seq.iter().enumerate() {
        let s = scalar(i);
        graph!(&mut cache, &stream, {
            if take_a {
                k.affine_inplace(N, 3, s, &mut x).launch(cfg);
                k.affine_inplace(N, 7, 11, &mut x).launch(cfg);
                k.affine_inplace(N, 0x9e37, 5, &mut x).launch(cfg);
            } else {
                k.affine_inplace(N, 5, s, &mut x).launch(cfg);
                k.affine_inplace(N, 13, 2, &mut x).launch(cfg);
            }
        })?;

        if take_a != on_a {
            for &node in t.branch(on_a) {
                t.set_enabled(node, false)?;
            }
            for &node in t.branch(take_a) {
                t.set_enabled(node, true)?;
            }
            on_a = take_a;
        }
        for &node in t.branch(take_a) {
            assert!(t.enabled(node)?, "step {i}: a node of the taken branch is disabled");
        }
        for &node in t.branch(!take_a) {
            assert!(!t.enabled(node)?, "step {i}: a node of the branch not taken is enabled");
        }
        t.set_scalar(take_a, s)?;
        // SAFETY: exec and stream of one context; `y` outlives the launch (synchronized below).
        unsafe { sys::cuGraphLaunch(t.exec, stream.cu_stream()) }.result()?;

        model(&mut want, take_a, s);
        let (gx, gy) = (stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?);
        let branch = if take_a { "A" } else { "B" };
        assert_same(
            &gy,
            &gx,
            &format!("step {i} (branch {branch}): toggled exec vs graph! variants"),
        );
        assert_same(&gx, &want, &format!("step {i} (branch {branch}): graph! vs host model"));
    }
    stream.synchronize()?;
    let st = cache.stats();
    assert_eq!((st.builds, st.instantiations), (2, 2), "one build and exec per branch: {st:?}");
    drop(t);
    drop(y);
    ctx.check_err()?;
    Ok(())
}
