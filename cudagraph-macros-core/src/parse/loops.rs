//! Lowering of graph `for` loops whose bounds are not integer literals: `for i in 0..k { … }`
//! with `usize` bounds evaluated at every call. The body is lowered and checked once; at run time each
//! iteration adds the body's nodes again, and the iteration count is part of the variant key
//! (each distinct count is one cached topology). Literal bounds are still unrolled at compile
//! time (`parse::unroll`), which costs nothing at run time.
//!
//! Rules of a run-time body, checked once here: no host `if` (its branch bits could differ
//! between iterations), no run-time `for` inside (a literal one is unrolled), and no place that
//! names the loop variable (every place is borrowed once before the body runs).

use quote::{ToTokens, quote};
use syn::{Expr, Ident, RangeLimits};

use super::lower_block;
use crate::ast::{Item, Loop, Op, normalize};
use crate::errors::Errors;

/// Lowers `for VAR in START..END { BODY }` with non-literal bounds, or reports why it cannot be a
/// graph `for`.
pub(crate) fn lower(f: &syn::ExprForLoop, var: Option<Ident>, errors: &mut Errors) -> Option<Item> {
    let Expr::Range(r) = &*f.expr else {
        errors.push(
            &f.expr,
            "a graph `for` iterates over a range: `for i in 0..4` (literal bounds: unrolled at compile time) or `for i in 0..k` (`usize` bounds: a run-time count)",
        );
        return None;
    };
    let (Some(start), Some(end)) = (r.start.as_deref(), r.end.as_deref()) else {
        errors.push(&f.expr, "a graph `for` range needs both bounds: `for i in 0..k`");
        return None;
    };
    let body = lower_block(&f.body.stmts, errors);
    errors.1 += body.len();
    check_body(&body, var.as_ref(), errors);
    let text = format!(
        "for {} in {}",
        var.as_ref().map_or("_".into(), Ident::to_string),
        normalize(&f.expr)
    );
    Some(Item::Loop(Loop {
        var,
        start: start.clone(),
        end: end.clone(),
        closed: matches!(r.limits, RangeLimits::Closed(_)),
        body,
        text,
        head: {
            let (for_token, pat, in_token, range) = (&f.for_token, &f.pat, &f.in_token, &f.expr);
            quote!(#for_token #pat #in_token #range)
        },
    }))
}

fn check_body(items: &[Item], var: Option<&Ident>, errors: &mut Errors) {
    for item in items {
        match item {
            Item::Node(n) => {
                if let Op::Conditional { func, .. } = &n.op {
                    errors.push(
                        func,
                        format!(
                            "`{func}` cannot be inside a graph `for` with a run-time count (its body is a graph of its own, built once per conditional node): use literal bounds to unroll the loop, or loop on the device inside the body"
                        ),
                    );
                }
                let Some(var) = var else { continue };
                for o in n.op.operands() {
                    if crate::hygiene::mentions(o.place.to_token_stream(), var) {
                        errors.push(
                            &o.place,
                            format!(
                                "a place inside a run-time graph `for` cannot use the loop variable `{var}`: every place is borrowed once before the body runs; use literal bounds (`for {var} in 0..4`) to unroll the loop, or pick the buffer before `graph!`"
                            ),
                        );
                    }
                }
            }
            Item::If(i) => errors.push(
                &i.cond,
                "a host `if` cannot be inside a graph `for` with a run-time count (each iteration could take another branch): move it out of the loop, or use literal bounds to unroll the loop",
            ),
            Item::Condition(c) => errors.push(
                &c.func,
                "a device condition cannot be declared inside a graph `for` with a run-time count (its device statement cannot be there either): declare it outside the loop, or use literal bounds to unroll the loop",
            ),
            Item::Scope(body) | Item::For(body) => check_body(body, var, errors),
            Item::Loop(l) => errors.push(
                &l.start,
                "a graph `for` with a run-time count cannot be inside another one: give one of the two literal bounds",
            ),
        }
    }
}

/// Rejects graph `for`s with a run-time count in a body of device statement `word`: a device body
/// is built as its own graph, once, and cannot repeat its nodes a run-time number of times
/// (nested device statements check their own bodies).
pub(crate) fn check_device_body(items: &[Item], word: &Ident, errors: &mut Errors) {
    for item in items {
        match item {
            Item::Loop(l) => errors.push(
                &l.head,
                format!(
                    "a graph `for` with a run-time count cannot be inside a body of `{word}` (a device body is a graph of its own, built once): use literal bounds to unroll it, or loop on the device with a `device_while`"
                ),
            ),
            Item::Scope(body) | Item::For(body) => check_device_body(body, word, errors),
            Item::If(i) => {
                check_device_body(&i.then, word, errors);
                check_device_body(&i.els, word, errors);
            }
            Item::Node(_) | Item::Condition(_) => {}
        }
    }
}
