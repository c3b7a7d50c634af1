//! Which edges of a plan exist in which structural variant, from the nodes' host conditions.
//!
//! A node's [`condition`](super::PlanNode::condition) is the `&&` of the conditions of the host
//! `if` branches around it, an `else` branch's written `!(c)`. Read back as a formula over its
//! atoms (the conditions' texts, split at top-level `&&`; `for …` parts of a run-time loop are
//! always true), every assignment of the atoms is a variant: the nodes whose formula holds are
//! present, and [`scoped_edges`](super::scoped_edges) gives its edges, as the cache builds them.
//! Atoms are compared by text: two `if`s with the same condition text are taken to have the same
//! value (they are evaluated on the host in the same call).

use std::collections::HashMap;

use super::{Plan, scoped_edges};

/// Most distinct atoms whose variants are enumerated (2¹² = 4096 assignments).
pub(super) const MAX_ATOMS: usize = 12;

/// A host condition as a formula.
enum Cond {
    /// Always true (no condition, or a run-time `for`).
    True,
    /// The atom with this index is true.
    Atom(usize),
    /// The negation, from an `else` branch's `!(c)`.
    Not(Box<Cond>),
    /// All of them, from `&&`.
    And(Vec<Cond>),
}

impl Cond {
    fn holds(&self, bits: u32) -> bool {
        match self {
            Cond::True => true,
            Cond::Atom(i) => bits >> i & 1 == 1,
            Cond::Not(c) => !c.holds(bits),
            Cond::And(cs) => cs.iter().all(|c| c.holds(bits)),
        }
    }
}

/// Byte offsets of the top-level ` && ` separators of `s` (outside brackets and string literals).
fn top_level_ands(s: &str) -> Vec<usize> {
    let b = s.as_bytes();
    let (mut depth, mut in_str, mut out) = (0i32, false, Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'(' | b'[' | b'{' if !in_str => depth += 1,
            b')' | b']' | b'}' if !in_str => depth -= 1,
            b' ' if !in_str && depth == 0 && b[i..].starts_with(b" && ") => out.push(i),
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether `s` is `!(inner)` with the parenthesis after `!` closing at the end.
fn negated(s: &str) -> Option<&str> {
    let inner = s.strip_prefix("!(")?.strip_suffix(')')?;
    // `!(a) || !(b)` stays an atom: its first parenthesis closes before the end.
    let mut depth = 0i32;
    for c in inner.bytes() {
        match c {
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return None;
        }
    }
    (depth == 0).then_some(inner)
}

/// `s` as a formula, its atoms interned in `atoms`.
fn parse(s: &str, atoms: &mut Vec<String>) -> Cond {
    let s = s.trim();
    if s.is_empty() {
        return Cond::True;
    }
    let cuts = top_level_ands(s);
    if !cuts.is_empty() {
        let mut parts = Vec::new();
        let mut start = 0;
        for c in cuts.into_iter().chain([s.len()]) {
            parts.push(parse(&s[start..c], atoms));
            start = c + 4;
        }
        return Cond::And(parts);
    }
    if s.starts_with("for ") {
        return Cond::True;
    }
    if let Some(inner) = negated(s) {
        return Cond::Not(Box::new(parse(inner, atoms)));
    }
    let i = atoms.iter().position(|a| a == s).unwrap_or_else(|| {
        atoms.push(s.to_string());
        atoms.len() - 1
    });
    Cond::Atom(i)
}

/// Whether the plan has at most [`MAX_ATOMS`] distinct condition atoms (its variants can be
/// enumerated).
pub(super) fn enumerable(plan: &Plan) -> bool {
    let mut atoms = Vec::new();
    for n in plan.nodes {
        parse(n.condition, &mut atoms);
    }
    atoms.len() <= MAX_ATOMS
}

/// Every edge that exists in at least one variant, `(from, to, condition)`, sorted by `to`
/// (without conditions: [`Plan::edges`], in its order; else by `(to, from)`): `condition` is `""` when the edge exists in every variant that has node `to`,
/// else the host condition under which it does (given that `to` is present). `None` when the
/// plan has more than [`MAX_ATOMS`] distinct condition atoms.
pub(super) fn edge_conditions(plan: &Plan) -> Option<Vec<(u32, u32, String)>> {
    let mut atoms = Vec::new();
    let conds: Vec<Cond> = plan.nodes.iter().map(|n| parse(n.condition, &mut atoms)).collect();
    if atoms.len() > MAX_ATOMS {
        return None;
    }
    if atoms.is_empty() {
        // One variant, every node present: the plan's edges in their order.
        return Some(plan.edges().into_iter().map(|(a, b)| (a, b, String::new())).collect());
    }
    let variants = 1u32 << atoms.len();
    // Per edge, the assignments that have it; per distinct present set, its edges.
    let mut having: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    let mut known: HashMap<Vec<bool>, Vec<(u32, u32)>> = HashMap::new();
    for bits in 0..variants {
        let present: Vec<bool> = conds.iter().map(|c| c.holds(bits)).collect();
        let edges = known
            .entry(present)
            .or_insert_with_key(|present| scoped_edges(plan.nodes, plan.bodies, present));
        for &e in edges.iter() {
            having.entry(e).or_default().push(bits);
        }
    }
    let mut out: Vec<(u32, u32, String)> = having
        .into_iter()
        .map(|((a, b), with)| {
            let target: Vec<u32> = (0..variants).filter(|&v| conds[b as usize].holds(v)).collect();
            let condition =
                if with == target { String::new() } else { describe(&with, &target, &atoms) };
            (a, b, condition)
        })
        .collect();
    out.sort_unstable_by_key(|e| (e.1, e.0));
    Some(out)
}

/// The literals every assignment of `set` agrees on: `(atom, value)`.
fn common(set: &[u32], atoms: usize) -> Vec<(usize, bool)> {
    let Some(&first) = set.first() else { return Vec::new() };
    (0..atoms)
        .map(|i| (i, first >> i & 1 == 1))
        .filter(|&(i, v)| set.iter().all(|&s| (s >> i & 1 == 1) == v))
        .collect()
}

/// The assignments of `within` that satisfy all of `literals`.
fn satisfying(within: &[u32], literals: &[(usize, bool)]) -> Vec<u32> {
    within
        .iter()
        .copied()
        .filter(|&s| literals.iter().all(|&(i, v)| (s >> i & 1 == 1) == v))
        .collect()
}

/// One literal as text: the atom, or `!(atom)`.
fn literal(atoms: &[String], (i, v): (usize, bool)) -> String {
    let a = &atoms[i];
    if v { if a.contains("||") { format!("({a})") } else { a.clone() } } else { format!("!({a})") }
}

fn conjunction(atoms: &[String], literals: &[(usize, bool)]) -> String {
    let parts: Vec<String> = literals.iter().map(|&l| literal(atoms, l)).collect();
    parts.join(" && ")
}

/// A condition that holds, among the assignments `within`, exactly on `set` (a subset): one
/// conjunction when `set` is one, else the negation of one, else a disjunction of conjunctions.
/// Literals that hold on all of `within` are left out.
fn describe(set: &[u32], within: &[u32], atoms: &[String]) -> String {
    let fixed = common(within, atoms.len());
    let free = |ls: Vec<(usize, bool)>| -> Vec<(usize, bool)> {
        ls.into_iter().filter(|l| !fixed.contains(l)).collect()
    };
    let lits = free(common(set, atoms.len()));
    if satisfying(within, &lits) == set {
        return conjunction(atoms, &lits);
    }
    let rest: Vec<u32> = within.iter().copied().filter(|v| !set.contains(v)).collect();
    let not = free(common(&rest, atoms.len()));
    if !not.is_empty() && satisfying(within, &not) == rest {
        return format!("!({})", conjunction(atoms, &not));
    }
    // Each assignment of the atoms `within` leaves free, as one conjunction.
    let mut terms: Vec<String> = set
        .iter()
        .map(|&s| {
            let ls: Vec<(usize, bool)> = (0..atoms.len())
                .filter(|i| !fixed.iter().any(|f| f.0 == *i))
                .map(|i| (i, s >> i & 1 == 1))
                .collect();
            format!("({})", conjunction(atoms, &ls))
        })
        .collect();
    terms.dedup();
    terms.join(" || ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formula(s: &str) -> (Cond, Vec<String>) {
        let mut atoms = Vec::new();
        let c = parse(s, &mut atoms);
        (c, atoms)
    }

    #[test]
    fn conditions_parse_into_atoms_and_negations() {
        let (c, atoms) = formula("a && !(b.c == 1) && !(!(d))");
        assert_eq!(atoms, ["a", "b.c == 1", "d"]);
        // a true, b.c == 1 false, d true.
        assert!(c.holds(0b101));
        assert!(!c.holds(0b111));
        assert!(!c.holds(0b001));
        // An `else` of `if a && b` is the negation of both.
        let (c, atoms) = formula("!(x && y)");
        assert_eq!(atoms, ["x", "y"]);
        assert!(c.holds(0b01) && c.holds(0b10) && !c.holds(0b11));
        // Brackets and strings keep their `&&`; a run-time `for` is always true.
        let (_, atoms) = formula("f(a && b) && s == \"&& )\" && for i in 0..n");
        assert_eq!(atoms, ["f(a && b)", "s == \"&& )\""]);
        // `!(a) || !(b)` is one atom, not the negation of `a) || !(b`.
        let (_, atoms) = formula("!(a) || !(b)");
        assert_eq!(atoms, ["!(a) || !(b)"]);
    }

    #[test]
    fn descriptions_are_a_conjunction_its_negation_or_a_disjunction() {
        let atoms: Vec<String> = ["b", "c"].map(String::from).to_vec();
        let all = [0, 1, 2, 3];
        assert_eq!(describe(&[1, 3], &all, &atoms), "b");
        assert_eq!(describe(&[0], &all, &atoms), "!(b) && !(c)");
        assert_eq!(describe(&[0, 1, 2], &all, &atoms), "!(b && c)");
        assert_eq!(describe(&[1, 2], &all, &atoms), "(b && !(c)) || (!(b) && c)");
        // Literals every assignment of `within` has are left out.
        assert_eq!(describe(&[3], &[1, 3], &atoms), "c");
    }
}
