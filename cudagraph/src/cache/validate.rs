//! What every call is checked for before any driver call.

use cudarc::driver::sys::CUcontext;

use super::Shape;
use crate::error::{Error, NodeSite, Result};
use crate::kind::{Limits, NodeParams};
use crate::plan::Plan;

/// Checks everything the driver would refuse or get wrong, before any driver call, so that an
/// error leaves nothing enqueued: zero or over-limit launch dimensions, copy lengths, empty
/// buffers (each kind's [`NodeKind::validate`](crate::kind::NodeKind::validate)), buffers of
/// another context; and for a `graph!` call (`handles`: its plan and
/// [`CallId`](crate::operand::CallId)), that every node's buffer handles are its own
/// ([`check_handles`]).
///
/// Contexts: each node's buffers must be of the context the node runs on (a kernel: its
/// `kernels!` struct's; every other node: the stream's), except that a copy between device
/// buffers may cross contexts (a peer copy) and captured work may use buffers of any context
/// ([`NodeKind::contexts_ok`](crate::kind::NodeKind::contexts_ok)); else
/// [`Error::WrongContext`]. Peer copies whose pair of contexts `peers` has not enabled yet are
/// noted in it, for the cache to enable before anything is enqueued.
#[cfg(test)]
pub(super) fn validate(
    shape: &dyn Shape,
    nodes: &[Option<NodeParams<'_>>],
    ctx: CUcontext,
    limits: Option<&Limits>,
    handles: Option<(&Plan, u64)>,
    peers: &mut Peers,
) -> Result<()> {
    validate_changed(shape, (nodes, &[]), &[], ctx, limits, handles, peers)
}

/// [`validate`] of the nodes that `clean` does not mark (`clean[i]`: node `i` is a kernel node
/// whose words, [`NodeParams::pack`] with this call's handles by place, equal those of a node
/// that passed this check in the same context: see [`GraphCache::clean_nodes`]). Every check
/// of a kernel node depends on its words only, given the context (its limits) and, for
/// `graph!`, the plan (the places it lists for the node): its dimensions, device scalars'
/// lengths and argument count, its buffers' contexts and handles' places are all in them.
///
/// [`GraphCache::clean_nodes`]: super::GraphCache
///
/// `dirty`: with a `clean` of every node, the ranges (first, count) of the others, walked
/// instead of every node ([`walked_ranges`](super::walked_ranges)).
pub(super) fn validate_changed(
    shape: &dyn Shape,
    (nodes, clean): (&[Option<NodeParams<'_>>], &[bool]),
    dirty: &[(u32, u32)],
    ctx: CUcontext,
    limits: Option<&Limits>,
    handles: Option<(&Plan, u64)>,
    peers: &mut Peers,
) -> Result<()> {
    let mut ops = crate::operand::NO_ACCESSES;
    peers.pending.clear();
    for (i, n) in
        super::walked_ranges(nodes.len(), clean, dirty).flat_map(|r| r.map(|i| (i, &nodes[i])))
    {
        let site = || shape.site(i);
        let Some(n) = n else { continue };
        if clean.get(i) == Some(&true) {
            continue;
        }
        n.validate(limits, &site)?;
        let len = n.accesses(&mut ops);
        let ops = &mut ops[..len];
        if !n.contexts_ok(ctx, ops) {
            return Err(Error::WrongContext { site: site() });
        }
        if let Some((a, b)) = n.peer() {
            peers.need(a, b, i);
        }
        if let Some((plan, call)) = handles {
            check_handles(plan, shape.plan_index(i), call, ops)?;
            check_conditions(nodes, n, call, &site)?;
        }
    }
    Ok(())
}

/// A kernel node's [`Condition`](crate::Condition) arguments must be conditions of this
/// `graph!` call (made by its `condition(..)` statements) that drive a conditional node present
/// in this variant: only those get a handle of the exec (any other would reach the kernel's
/// `cudaGraphSetConditional` as handle 0, or as another graph's slot).
fn check_conditions(
    nodes: &[Option<NodeParams<'_>>],
    n: &NodeParams<'_>,
    call: u64,
    site: &dyn Fn() -> crate::NodeSite,
) -> Result<()> {
    let NodeParams::Kernel(k) = n else { return Ok(()) };
    let mut bad = false;
    k.for_each_condition(&mut |_, slot, owner| {
        let driven =
            nodes.iter().flatten().any(|m| m.conditional().is_some_and(|(s, _)| s == slot));
        bad |= owner != call || !driven;
    });
    if bad {
        let why = "a condition argument that is not this call's, or drives no device statement \
                   (`device_while`, `device_if`, `device_switch`) present in this call: the \
                   kernel would get no conditional handle"
            .into();
        return Err(Error::InvalidNode { site: site(), why });
    }
    Ok(())
}

/// Every buffer handle `ops` of node `i` must be one that `graph!` call `call` made for a
/// place the plan lists among that node's accesses, written only where the plan says so, and no
/// written place may appear twice: so the plan's edges, made from those accesses, order every
/// buffer the node touches. A handle of another call or of a builder (kept from elsewhere, or
/// passed through a method of the user's) is refused, naming the node.
pub(super) fn check_handles(
    plan: &Plan,
    i: usize,
    call: u64,
    ops: &mut [(u64, bool, CUcontext)],
) -> Result<()> {
    let listed = plan.nodes[i].accesses;
    let mut bad = false;
    for (tag, write, _) in ops.iter_mut() {
        match crate::operand::place_of(*tag, call) {
            Some(p) => {
                bad |= !listed.iter().any(|a| a.place == p && (a.write || !*write));
                *tag = u64::from(p);
            }
            None => bad = true,
        }
    }
    // No written place twice in one node (only a method of the user's can do that).
    let twice = !bad
        && ops.len() > 1
        && ops.iter().enumerate().any(|(j, a)| ops[..j].iter().any(|b| b.0 == a.0 && (a.1 || b.1)));
    if !(bad || twice) {
        return Ok(());
    }
    let why = if bad {
        "a buffer handle that this statement's own `&`/`&mut` operands did not borrow in this \
         call (a handle kept from another call or builder)"
    } else {
        "one buffer passed twice to one node, and written: the operands would alias"
    };
    Err(Error::InvalidNode { site: NodeSite::of(plan, &plan.nodes[i]), why: why.into() })
}

/// The pairs of contexts whose peer access a cache enabled (`cuCtxEnablePeerAccess`, both
/// ways), and those that the call being validated needs and that are not enabled yet.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// Enabled pairs, each ordered `(lower, higher)`.
    pub(crate) enabled: Vec<(CUcontext, CUcontext)>,
    /// Pairs to enable for this call, ordered, with the first node needing each.
    pub(crate) pending: Vec<(CUcontext, CUcontext, usize)>,
}

// SAFETY: context handles, only compared and passed to the driver by the cache that owns them
// (not `Sync`), while the contexts are alive (their buffers are borrowed by the call).
unsafe impl Send for Peers {}

impl Peers {
    /// Notes that node `node` copies between contexts `a` and `b`.
    fn need(&mut self, a: CUcontext, b: CUcontext, node: usize) {
        let (lo, hi) = if (a as usize) <= (b as usize) { (a, b) } else { (b, a) };
        let known =
            self.enabled.contains(&(lo, hi)) || self.pending.iter().any(|p| (p.0, p.1) == (lo, hi));
        if !known {
            self.pending.push((lo, hi, node));
        }
    }
}
