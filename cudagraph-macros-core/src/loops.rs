//! Graph `for` loops whose bounds are not integer literals: `for i in 0..k { … }` with `usize`
//! bounds evaluated at every call. The body is lowered and checked once; at run time each
//! iteration adds the body's nodes again, and the iteration count is part of the variant key
//! (each distinct count is one cached topology). Literal bounds are still unrolled at compile
//! time (`parse::unroll`), which costs nothing at run time.
//!
//! Rules of a run-time body, checked here once: no host `if` (its branch bits could differ
//! between iterations), no run-time `for` inside (a literal one is unrolled), and no place that
//! names the loop variable (every place is borrowed once before the body runs).

use std::collections::HashMap;

use proc_macro2::{TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident, RangeLimits};

use crate::ast::{Item, Loop, Op, normalize};
use crate::check::{Checked, Errors};
use crate::expand::{Holder, NodeCounter, PlaceInfo, emit_items, local};
use crate::parse::lower_block;

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
                    if mentions(o.place.to_token_stream(), var) {
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
            Item::Scope(body) => check_body(body, var, errors),
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
            Item::Scope(body) => check_device_body(body, word, errors),
            Item::If(i) => {
                check_device_body(&i.then, word, errors);
                check_device_body(&i.els, word, errors);
            }
            Item::Node(_) | Item::Condition(_) => {}
        }
    }
}

/// Whether `tokens` use the variable `var` (not a field or method of that name).
fn mentions(tokens: TokenStream, var: &Ident) -> bool {
    let mut after_dot = false;
    tokens.into_iter().any(|tt| {
        let field = after_dot;
        after_dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
        match tt {
            TokenTree::Ident(i) => i == *var && !field,
            TokenTree::Group(g) => mentions(g.stream(), var),
            _ => false,
        }
    })
}

/// The code of a run-time `for`: its bounds evaluated once per call, then the body's node values
/// pushed once per iteration into the `Vec`s declared in `decls`, and the iteration counted in
/// `__cudagraph_c{k}`.
pub(crate) fn emit(
    l: &Loop,
    places: &HashMap<String, PlaceInfo<'_>>,
    counter: &mut NodeCounter,
    decls: &mut TokenStream,
) -> TokenStream {
    let c = local(format!("__cudagraph_c{}", counter.loops));
    counter.loops += 1;
    decls.extend(quote!(let mut #c: usize = 0;));
    let body = emit_items(&l.body, places, counter, Holder::Looped, decls);
    let (s, e) = (local("__cudagraph_s"), local("__cudagraph_e"));
    let (start, end) = (&l.start, &l.end);
    let var = match &l.var {
        Some(v) => quote!(#v),
        None => quote!(_),
    };
    let range = if l.closed { quote!(#s..=#e) } else { quote!(#s..#e) };
    let start = quote_spanned!(start.span()=> let #s: usize = #start;);
    let end = quote_spanned!(end.span()=> let #e: usize = #end;);
    quote! {{
        #start
        #end
        for #var in #range {
            #c += 1;
            #body
        }
    }}
}

/// The call of a body with run-time `for`s: the node list built at run time (each loop's nodes
/// once per iteration, iteration by iteration) and handed to `GraphCache::run_looped` with each
/// loop's node range in the plan and its count.
pub(crate) fn run_call(
    checked: &Checked<'_>,
    entry: &dyn Fn(usize) -> TokenStream,
    cache: &Ident,
    call: &Ident,
    key: &Ident,
    stream: &Ident,
    guards: Vec<Ident>,
) -> TokenStream {
    let nodes = local("__cudagraph_nodes");
    let t = local("__cudagraph_t");
    let n = checked.nodes.len();
    let (mut pushes, mut ranges, mut counts) = (TokenStream::new(), Vec::new(), Vec::new());
    let mut i = 0;
    while i < n {
        match checked.nodes[i].looped {
            None => {
                let e = entry(i);
                pushes.extend(quote!(#nodes.push(#e);));
                i += 1;
            }
            Some(k) => {
                let first = i;
                while i < n && checked.nodes[i].looped == Some(k) {
                    i += 1;
                }
                let items = (first..i).map(|j| {
                    let v = local(format!("__cudagraph_n{j}"));
                    quote!(#nodes.push(::cudagraph::__private::node(&#v[#t]));)
                });
                let c = local(format!("__cudagraph_c{k}"));
                pushes.extend(quote!(for #t in 0..#c { #(#items)* }));
                let (f, len) = (first as u32, (i - first) as u32);
                ranges.push(quote!((#f, #len)));
                counts.push(c);
            }
        }
    }
    quote! {
        let mut #nodes = ::std::vec::Vec::new();
        #pushes
        // SAFETY: the plan was generated from this body (`run_looped` checks each node's handles
        // against its accesses, and the node list against the loops' ranges and counts), and
        // the guards are its places' borrows, in place order.
        unsafe {
            #cache.run_looped(
                &__CUDAGRAPH_PLAN, &#call, #key, &[#(#ranges),*], &[#(#counts),*],
                #stream, &#nodes, &[#(#guards),*],
            )
        }
    }
}
