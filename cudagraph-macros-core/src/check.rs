//! Checking: every rule that needs the whole body (names, dependencies, places), with all
//! errors collected.

use std::collections::HashMap;

use crate::ast::{Flat, FlatCondition, GraphInput, Item, Node, Op, flatten};
use crate::errors::{Errors, line_column};

/// Most host `if`s one body may have (one bit each of the variant key).
pub const MAX_CONDITIONS: u32 = 64;

/// The checked body: the flattened nodes and, for each, the indices of its `.after` nodes.
pub struct Checked<'a> {
    /// Nodes in order with their conditions.
    pub nodes: Vec<Flat<'a>>,
    /// Resolved `.after` indices per node.
    pub after: Vec<Vec<u32>>,
    /// Number of host `if`s.
    pub conditions: u32,
    /// Nodes inside device bodies: `(node, conditional node, body)`, by node.
    pub bodies: Vec<(u32, u32, u32)>,
    /// The device condition each device statement names, as `graph!` resolves it (the
    /// condition's slot), by node; `None` for other statements.
    pub cond_slot: Vec<Option<u32>>,
    /// The device conditions' names, by slot.
    pub cond_names: Vec<syn::Ident>,
}

/// Checks names, dependencies and places of `input`, adding to `errors`.
pub fn check<'a>(input: &'a GraphInput, errors: &mut Errors) -> Checked<'a> {
    let (nodes, conditions, conds) = flatten(&input.body);
    if conditions > MAX_CONDITIONS {
        errors.push(
            quote::quote_spanned!(input.body_span=> {}),
            format!("a graph body may have at most {MAX_CONDITIONS} host `if`s"),
        );
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, f) in nodes.iter().enumerate() {
        if let Some(name) = &f.node.name {
            if let Some(&first) = names.get(&crate::hygiene::name(name)) {
                // One error on the second name (a second `error:` on the first one would read as
                // another error). The same position twice means one `let` unrolled by a `for`.
                let (line, column) =
                    line_column(nodes[first].node.name.as_ref().expect("named").span());
                let msg = if (line, column) == line_column(name.span()) {
                    format!(
                        "duplicate node name `{name}`: a `let` inside a graph `for` names a node in every iteration, and node names must be unique"
                    )
                } else {
                    format!(
                        "duplicate node name `{name}`: line {line} already names a node `{name}`; node names must be unique"
                    )
                };
                errors.push(name, msg);
            } else {
                names.insert(crate::hygiene::name(name), i);
            }
        }
    }
    // The driver refuses host and event nodes in a conditional node's body graphs, and a host
    // closure runs once per launch, not once per iteration.
    for f in &nodes {
        let word = match &f.node.op {
            Op::Host { func, .. } | Op::Event { func, .. } if f.body.is_some() => func,
            _ => continue,
        };
        errors.push(
            word,
            format!(
                "`{word}` cannot be inside a device body: a conditional node's body graph holds \
                 kernel, memcpy, memset, fill, empty, child-graph and device statements only (the \
                 driver's rule); put it before or after the device statement"
            ),
        );
    }
    check_graph_owned(&nodes, errors);
    let mut after = Vec::with_capacity(nodes.len());
    for (i, f) in nodes.iter().enumerate() {
        let mut deps = Vec::new();
        for a in &f.node.after {
            let s = crate::hygiene::name(a);
            match names.get(&s) {
                Some(&j) if j < i && !in_scope(&nodes[j].scope, &f.scope) => {
                    let bound = nodes[j].node.name.as_ref().expect("named");
                    let (line, column) = line_column(bound.span());
                    // The outermost scope of the binding that does not enclose this statement.
                    let what = nodes[j].scope.iter().find(|s| !f.scope.contains(s)).map_or("", |s| s.1);
                    let why = if what.contains("device") {
                        "a device body is a graph of its own"
                    } else if what.contains("for") {
                        "every iteration binds its own node"
                    } else {
                        "when that branch is not taken the node does not exist"
                    };
                    errors.push(
                        a,
                        format!(
                            "node `{s}` is not in scope here: it is bound at line {line}:{column} inside {what}, and a name is in scope only inside the branch or loop body that binds it and the statements nested there ({why})"
                        ),
                    );
                }
                Some(&j) if j < i && nodes[j].body != f.body => {
                    errors.push(
                        a,
                        format!(
                            "node `{s}` is in another graph: a device body is a graph of its own, and `.after(…)` orders nodes of the same body (or of the same graph around it) only"
                        ),
                    );
                }
                Some(&j) if j < i => deps.push(j as u32),
                Some(&j) if j == i => errors.push(a, format!("node `{s}` cannot depend on itself")),
                Some(_) => errors.push(
                    a,
                    format!("node `{s}` is defined later: `.after(…)` names earlier nodes only"),
                ),
                None => errors.push(a, format!("unknown node `{s}` in `.after(…)`: name a node with `let {s} = …;` before this statement")),
            }
        }
        check_places(f.node, errors);
        after.push(deps);
    }
    let cond_slot = check_device_conditions(&nodes, &conds, errors);
    setter_edges(&nodes, &mut after);
    capture_edges(&nodes, &mut after);
    let bodies = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.body.map(|(c, b)| (i as u32, c as u32, b)))
        .collect();
    let cond_names = conds.iter().map(|c| c.decl.name.clone()).collect();
    Checked { nodes, after, conditions, bodies, cond_slot, cond_names }
}

/// `eager!` has no device control flow: a device statement's condition is set by kernels with
/// `cudaGraphSetConditional`, which has no meaning outside a graph (`Mode::Eager` refuses it at
/// run time too); reported at compile time on each outermost device statement's word.
pub fn no_device_control_flow(items: &[Item], errors: &mut Errors) {
    for item in items {
        match item {
            Item::Node(n) => {
                if let Op::Conditional { func, .. } = &n.op {
                    errors.push(
                        func,
                        format!(
                            "`{func}` cannot run in `eager!`: its condition is set on the device with `cudaGraphSetConditional`, which only a graph has; use `graph!`, or drive the loop from the host"
                        ),
                    );
                }
            }
            Item::If(i) => {
                no_device_control_flow(&i.then, errors);
                no_device_control_flow(&i.els, errors);
            }
            Item::Scope(body) | Item::For(body) => no_device_control_flow(body, errors),
            Item::Loop(l) => no_device_control_flow(&l.body, errors),
            Item::Condition(_) => {}
        }
    }
}

/// Each device statement (a conditional node) is ordered with every kernel, capture, child
/// graph and other device statement of its body: after those before it, before those after it.
/// A kernel that sets a device statement's condition must not run concurrently with the
/// conditional node reading it, and which kernels receive a condition is known only when they
/// are made (`Condition` is `Copy`: it can reach a kernel through host state, not only through
/// its name in the kernel's arguments, review 19c); a node in another body is ordered through
/// the device statement whose body holds it. Edges as by `.after` (of two nodes in exclusive
/// host-`if` branches, the absent one's edge is dropped in each variant).
fn setter_edges(nodes: &[Flat<'_>], after: &mut [Vec<u32>]) {
    let runs_kernels = |op: &Op| {
        matches!(
            op,
            Op::Launch { .. } | Op::Conditional { .. } | Op::Capture { .. } | Op::Child { .. }
        )
    };
    for (i, f) in nodes.iter().enumerate() {
        if !matches!(f.node.op, Op::Conditional { .. }) {
            continue;
        }
        for (j, g) in nodes.iter().enumerate() {
            if j == i || g.body != f.body || !runs_kernels(&g.node.op) {
                continue;
            }
            let (later, earlier) = if j < i { (i, j) } else { (j, i) };
            if !after[later].contains(&(earlier as u32)) {
                after[later].push(earlier as u32);
            }
        }
    }
}

/// Each `capture` statement is ordered after every earlier `capture` statement of its block
/// (an edge as by `.after`), whatever buffers they list: two captures may share a library
/// handle (a cuBLAS handle's workspace, a communicator's internal buffers) that no listed
/// buffer shows, so they never run concurrently. (Of two in exclusive host-`if` branches, the
/// absent one's edge is dropped in each variant, as for `.after`.)
fn capture_edges(nodes: &[Flat<'_>], after: &mut [Vec<u32>]) {
    for (i, f) in nodes.iter().enumerate() {
        if !matches!(f.node.op, Op::Capture { .. }) {
            continue;
        }
        for (j, g) in nodes[..i].iter().enumerate() {
            if matches!(g.node.op, Op::Capture { .. })
                && g.body == f.body
                && !after[i].contains(&(j as u32))
            {
                after[i].push(j as u32);
            }
        }
    }
}

/// Each device statement names a device condition declared before it in the same block, and
/// each declared condition is used by exactly one device statement. Returns each device
/// statement's condition slot (the expansion checks that rustc resolves the name to the same
/// declaration: `expand`, `__cudagraph_cond_*`).
fn check_device_conditions(
    nodes: &[Flat<'_>],
    conds: &[FlatCondition<'_>],
    errors: &mut Errors,
) -> Vec<Option<u32>> {
    let mut used = vec![false; conds.len()];
    let mut slots = vec![None; nodes.len()];
    for (i, f) in nodes.iter().enumerate() {
        let Op::Conditional { func, cond, .. } = &f.node.op else { continue };
        // The latest declaration of that name before the statement, as Rust resolves it.
        let decl = conds.iter().enumerate().rev().find(|(_, d)| {
            d.at <= i
                && crate::hygiene::same_name(&d.decl.name, cond)
                && in_scope(&d.scope, &f.scope)
        });
        match decl {
            Some((k, d)) if d.scope != f.scope => {
                let _ = k;
                errors.push(
                    cond,
                    format!("device condition `{cond}` is declared in an enclosing block: declare it in the block of its `{func}` (`let {cond} = condition(default);`)"),
                );
            }
            Some((k, _)) if used[k] => errors.push(
                cond,
                format!("device condition `{cond}` already drives another device statement: declare one condition per `{func}`"),
            ),
            Some((k, _)) => {
                used[k] = true;
                slots[i] = Some(k as u32);
            }
            None => errors.push(
                cond,
                format!("`{cond}` is not a device condition: a device statement's condition is set by kernels on the device; declare it before this statement with `let {cond} = condition(default);` and pass `{cond}` to the kernels that set it (a host value belongs in a host `if`)"),
            ),
        }
    }
    for (d, used) in conds.iter().zip(used) {
        if !used {
            let name = &d.decl.name;
            errors.push(
                name,
                format!("device condition `{name}` drives no device statement: use it in a `device_while`, `device_if` or `device_switch` of the same block"),
            );
        }
    }
    slots
}

/// Whether a name bound in scope path `bound` is visible from a statement in scope path `at`:
/// the binding's scopes all enclose the statement.
fn in_scope(bound: &[(u32, &'static str)], at: &[(u32, &'static str)]) -> bool {
    at.starts_with(bound)
}

/// The same place twice in one statement where one use writes: the node would race with itself.
fn check_places(node: &Node, errors: &mut Errors) {
    let ops = node.op.operands();
    for (i, a) in ops.iter().enumerate() {
        for b in &ops[..i] {
            if a.key == b.key && (a.write || b.write) {
                errors.push(
                    &a.place,
                    format!(
                        "`{}` is used twice in one statement and written: read one buffer and write another (ping-pong buffers, swapped after the step), or split the buffer first (`split_at_mut`) so the two operands are different places",
                        a.key
                    ),
                );
            }
        }
    }
}

/// Graph-owned buffers (`let tmp = alloc::<T>(n);`): allocated at the top level only (the
/// driver allows memory nodes in the top graph only, and the buffer exists once per call), used
/// only between its `alloc` and its `free` (the driver: "accessed by nodes ordered after the
/// allocation node but before the free node"), freed once, and never handed to `capture`,
/// `host` or `child` (stream work, host code and embedded graphs cannot reach graph memory
/// through this crate: its address is the graph's).
fn check_graph_owned(nodes: &[Flat<'_>], errors: &mut Errors) {
    let allocated: Vec<&str> = nodes
        .iter()
        .filter_map(|f| match &f.node.op {
            Op::Alloc { buffer, .. } => Some(buffer.key.as_str()),
            _ => None,
        })
        .collect();
    // Key -> (line of its alloc, line of its free if freed).
    let mut live: HashMap<&str, (u32, Option<u32>)> = HashMap::new();
    for f in nodes {
        let top = f.scope.is_empty() && f.body.is_none() && f.looped.is_none();
        match &f.node.op {
            Op::Alloc { func, buffer, .. } => {
                if !top {
                    errors.push(
                        func,
                        "`alloc` is a statement of the top level of the body only (not inside an `if`, a `for` or a device body): a graph-owned buffer exists once per call, and the driver allows memory nodes in the top graph only",
                    );
                }
                let line = line_column(func.span()).0;
                if let Some((first, _)) = live.insert(&buffer.key, (line, None)) {
                    errors.push(
                        &buffer.place,
                        format!(
                            "`{}` is already a graph-owned buffer (its `alloc` is at line {first}): each `alloc` needs a name of its own, even after a `free`",
                            buffer.key
                        ),
                    );
                }
                continue;
            }
            Op::Free { func, buffer } => {
                match live.get_mut(buffer.key.as_str()) {
                    None => errors.push(
                        &buffer.place,
                        format!(
                            "`free` takes a graph-owned buffer made earlier in this body by `let {} = alloc::<T>(n);`",
                            buffer.key
                        ),
                    ),
                    Some((_, Some(line))) => errors.push(
                        &buffer.place,
                        format!("`{}` is already freed at line {line}: a graph-owned buffer is freed once", buffer.key),
                    ),
                    Some((_, freed)) => {
                        if !top {
                            errors.push(
                                func,
                                "`free` is a statement of the top level of the body only (not inside an `if`, a `for` or a device body): the buffer is freed once per call",
                            );
                        }
                        *freed = Some(line_column(func.span()).0);
                    }
                }
                continue;
            }
            _ => {}
        }
        for o in f.node.op.operands() {
            let key = o.key.as_str();
            match live.get(key) {
                Some((_, Some(line))) => errors.push(
                    &o.place,
                    format!(
                        "`{key}` is used after its `free` at line {line}: a graph-owned buffer exists only between its `alloc` and its `free`"
                    ),
                ),
                Some(_) => {
                    if let Op::Capture { func, .. } | Op::Host { func, .. } | Op::Child { func, .. } =
                        &f.node.op
                    {
                        errors.push(
                            &o.place,
                            format!(
                                "`{key}` is a graph-owned buffer: `{func}` cannot use it (its memory exists only inside the graph, at an address the graph gives it); use kernel, copy, memset, zero and fill statements"
                            ),
                        );
                    }
                }
                None if allocated.contains(&key) => errors.push(
                    &o.place,
                    format!(
                        "`{key}` is used before its `let {key} = alloc::<T>(n);`: a graph-owned buffer exists only after its `alloc`"
                    ),
                ),
                None => {}
            }
        }
    }
}
