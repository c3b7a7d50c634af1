//! Calls of a `graph!` body with run-time `for` loops (`for i in 0..k` with `usize` bounds):
//! the plan lists each loop body's nodes once; a call repeats them once per iteration. The
//! loops' counts are the variant's signature (compared in full, next to the host `if` bits), so
//! each distinct combination of counts is one cached topology; within it, later calls are
//! per-node updates like any `graph!` call.

use cudarc::driver::CudaStream;
use cudarc::driver::sys;

use super::{GraphCache, GraphCall, Shape, Site};
use crate::error::{CudaError, Error, NodeSite, Result};
use crate::kind::NodeParams;
use crate::operand::Guard;
use crate::plan::{Plan, scoped_edges_by};

/// A plan with its run-time loops expanded for one call.
pub(crate) struct Looped {
    plan: &'static Plan,
    /// Plan node of each call node.
    index: Vec<u32>,
    /// `.after` of each call node, in call node numbers (same iteration for a loop's own nodes).
    after: Vec<Vec<u32>>,
    /// The device body of each call node, `(conditional call node, body)`; device statements and
    /// their bodies are never inside a run-time loop (a compile error), so each is one call node.
    parent: Vec<Option<(u32, u32)>>,
}

impl Looped {
    /// The call's nodes for `loops` (each loop's plan node range `(first, len)`, in order and
    /// disjoint) run `counts` times; `None` when the ranges do not fit the plan.
    pub(crate) fn new(plan: &'static Plan, loops: &[(u32, u32)], counts: &[usize]) -> Option<Self> {
        if loops.len() != counts.len() {
            return None;
        }
        let n = plan.nodes.len();
        let (mut index, mut after) = (Vec::new(), Vec::new());
        // Call node number of each plan node outside loops, and each loop placed so far:
        // `(first, len, base, count)`, its node `first + j` of iteration `k` being call node
        // `base + k * len + j`. A node's `.after` edge to a node of another loop, or of no
        // loop, orders it after every copy of that node (`copies`; review 19d: such edges,
        // which the device statements' and the captures' orderings make, were dropped, so a
        // condition's setter inside a loop raced the device statement after it).
        let mut outside = vec![u32::MAX; n];
        let mut placed: Vec<(u32, u32, u32, u32)> = Vec::with_capacity(loops.len());
        let captured = |q: usize| matches!(plan.nodes[q].kind, crate::plan::NodeKind::Captured);
        let (mut p, mut l) = (0usize, 0usize);
        while p < n {
            match loops.get(l) {
                Some(&(first, len)) if first as usize == p => {
                    let end = p.checked_add(len as usize).filter(|&e| e <= n && len > 0)?;
                    let count = u32::try_from(counts[l]).ok()?;
                    let start = index.len() as u32;
                    for k in 0..count {
                        let base = start + k * len;
                        for q in p..end {
                            let mut deps = Vec::new();
                            for &a in plan.nodes[q].after {
                                if (p..end).contains(&(a as usize)) {
                                    deps.push(base + (a - first));
                                } else {
                                    copies(a, n, &outside, &placed, &mut deps)?;
                                }
                            }
                            // Captures of successive iterations never overlap either (as two
                            // `capture` statements of one block: `check::capture_edges`).
                            if k > 0 && captured(q) {
                                let prev = base - len;
                                deps.extend(
                                    (p..end)
                                        .filter(|&c| captured(c))
                                        .map(|c| prev + (c as u32 - first)),
                                );
                            }
                            after.push(deps);
                            index.push(q as u32);
                        }
                    }
                    placed.push((first, len, start, count));
                    p = end;
                    l += 1;
                }
                Some(&(first, _)) if (first as usize) < p => return None,
                _ => {
                    outside[p] = index.len() as u32;
                    let mut deps = Vec::new();
                    for &a in plan.nodes[p].after {
                        copies(a, n, &outside, &placed, &mut deps)?;
                    }
                    after.push(deps);
                    index.push(p as u32);
                    p += 1;
                }
            }
        }
        if l != loops.len() {
            return None;
        }
        // A body node's conditional node is outside every loop (else the plan is not one
        // `graph!` made).
        let parent = index
            .iter()
            .map(|&q| match plan.parent(q as usize) {
                None => Some(None),
                Some((c, b)) => outside.get(c).filter(|&&o| o != u32::MAX).map(|&o| Some((o, b))),
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Looped { plan, index, after, parent })
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

/// Every call node of plan node `a` made so far, into `out`: its one node outside loops, or its
/// copy in each iteration of the loop `placed` that holds it (none for a loop run 0 times, nor
/// for a node not made yet). `None` when `a` is not a node of the plan (`n` nodes).
fn copies(
    a: u32,
    n: usize,
    outside: &[u32],
    placed: &[(u32, u32, u32, u32)],
    out: &mut Vec<u32>,
) -> Option<()> {
    if a as usize >= n {
        return None;
    }
    if outside[a as usize] != u32::MAX {
        out.push(outside[a as usize]);
    } else if let Some(&(first, len, base, count)) =
        placed.iter().find(|&&(first, len, ..)| (first..first + len).contains(&a))
    {
        out.extend((0..count).map(|k| base + k * len + (a - first)));
    }
    Some(())
}

impl Shape for Looped {
    fn location(&self) -> (&'static str, u32) {
        (self.plan.file, self.plan.line)
    }
    fn site(&self, i: usize) -> NodeSite {
        Shape::site(self.plan, self.index[i] as usize)
    }
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)> {
        let node =
            |j: usize| (self.plan.nodes[self.index[j] as usize].accesses, &self.after[j][..]);
        let scope = |j: usize| self.parent[j];
        scoped_edges_by(self.index.len(), node, scope, present)
    }
    fn parent(&self, i: usize) -> Option<(usize, u32)> {
        self.parent[i].map(|(c, b)| (c as usize, b))
    }
    fn place_site(&self, place: usize) -> NodeSite {
        Shape::place_site(self.plan, place)
    }
    fn plan_index(&self, i: usize) -> usize {
        self.index[i] as usize
    }
}

impl GraphCache {
    /// [`GraphCache::run`] of a body with run-time `for`s. Called by generated code.
    ///
    /// `loops[k]` is loop `k`'s node range `(first, len)` in `plan.nodes`, `counts[k]` its
    /// iterations in this call; `nodes` lists the plan's nodes with each loop's range repeated
    /// `counts[k]` times, iteration by iteration. The variant is the host `if` bits `key` and
    /// the counts. Errors as [`GraphCache::run`]; a node list that does not fit the loops is
    /// [`Error::Graph`] with `CUDA_ERROR_INVALID_VALUE`, nothing enqueued.
    ///
    /// # Safety
    /// As [`GraphCache::run`].
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_looped(
        &mut self,
        plan: &'static Plan,
        call_id: &crate::operand::CallId,
        key: u64,
        loops: &[(u32, u32)],
        counts: &[usize],
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
        guards: &[Guard<'_>],
    ) -> Result<()> {
        let shape = Looped::new(plan, loops, counts).filter(|s| s.len() == nodes.len());
        let Some(shape) = shape.filter(|_| guards.len() == plan.places.len()) else {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            let source =
                CudaError { call: "GraphCache::run_looped (node list of another plan)", error };
            return Err(Error::Graph { file: plan.file, line: plan.line, source });
        };
        let signature: Vec<u32> =
            counts.iter().flat_map(|&c| [c as u32, (c as u64 >> 32) as u32]).collect();
        let call = GraphCall { shape: &shape, site: Site::Plan(plan), key, signature: &signature };
        let mut guards = guards;
        self.run_call(call, stream, super::Nodes::Ready(nodes), &mut guards, Some(call_id.0), None)
    }
}
