//! The hygiene probe of the names `graph!` keys by their text.
//!
//! `graph!` tells places and receivers apart by their tokens' text: `&mut x` in two statements is
//! one place, borrowed once, through one spelling; `k.f(…)` and `k.g(…)` share one receiver,
//! made once. Text ignores `macro_rules!` hygiene: in a body that a macro builds from its
//! caller's tokens and its own, the caller's `x` and the macro's `x` print alike but are two
//! variables, and keyed as one, a statement would act on the other one's buffer (review 18b).
//! So every variable name used in a place (its root, and its index variables) or as a path
//! receiver must name one binding wherever it is written in the body. Rustc checks it: the probe
//! binds the name with its first occurrence's span to a value of a type local to the probe, and
//! passes every other occurrence, with its own span, to a function that only takes that type.
//! An occurrence of another macro context does not see the probe's binding (hygiene), names
//! another variable, and is a compile error on it. The probe compiles to nothing.
//!
//! Names that start with an uppercase letter are not probed: they name statics, constants and
//! unit structs by Rust's conventions, which a `let` cannot shadow (`let` bindings cannot
//! shadow statics), and items are not hygienic under `macro_rules!` (one text, one item). The
//! residual is a local variable with an uppercase name (rustc's `non_snake_case` lint warns on
//! it) written alike in a macro and its caller: SAFETY.md, 14.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Expr, Ident};

use crate::ast::{Flat, Op};

/// The probe of `nodes`' names (nothing when no name is used twice).
pub(crate) fn probe(nodes: &[Flat<'_>]) -> TokenStream {
    // Every occurrence of each probed name, names in order of first use.
    let mut order: Vec<String> = Vec::new();
    let mut uses: HashMap<String, Vec<Ident>> = HashMap::new();
    let mut add = |i: &Ident| {
        let name = syn::ext::IdentExt::unraw(i).to_string();
        if !probed(&name) {
            return;
        }
        uses.entry(name.clone())
            .or_insert_with(|| {
                order.push(name);
                Vec::new()
            })
            .push(i.clone());
    };
    for f in nodes {
        for o in f.node.op.operands() {
            place_names(&o.place, &mut add);
        }
        if let Op::Launch { receiver, .. } = &f.node.op {
            let mut r = receiver;
            while let Expr::Paren(p) = r {
                r = &p.expr;
            }
            if let Some(i) = single_ident(r) {
                add(i);
            }
        }
    }
    let mut out = TokenStream::new();
    for (n, name) in order.iter().enumerate() {
        let all = &uses[name];
        // An unrolled `for` repeats its body's tokens, spans and all: one check per distinct
        // span. A span is told apart by its `Debug` text only where that text holds the span's
        // syntax context (rustc's `#N bytes(a..b)`); elsewhere every occurrence is checked.
        let mut seen = HashSet::new();
        let mut distinct = all.iter().filter(|i| {
            let d = format!("{:?}", i.span());
            !d.starts_with('#') || seen.insert(d)
        });
        let first = distinct.next().expect("a name has an occurrence");
        let others: Vec<&Ident> = distinct.collect();
        if others.is_empty() {
            continue;
        }
        let (line, column) = crate::errors::line_column(first.span());
        let ty = format_ident!("__CudagraphName{n}", span = Span::mixed_site());
        let tr = format_ident!("__CudagraphOneName{n}", span = Span::mixed_site());
        let check = format_ident!("__cudagraph_one_name{n}", span = Span::mixed_site());
        let message = format!(
            "this `{name}` names another variable than the `{name}` at line {line}:{column} of this `graph!` body"
        );
        let note = format!(
            "`graph!` keys places and receivers by their text: every `{name}` of the body must name one variable, and under `macro_rules!` hygiene a macro's own `{name}` and its caller's `{name}` are two; give the macro's variable another name"
        );
        let checks = others.iter().map(|i| {
            quote_spanned! {i.span()=>
                #check(&#i);
            }
        });
        out.extend(quote! {
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "a variable of another macro context",
                note = #note
            )]
            trait #tr {}
            struct #ty;
            impl #tr for #ty {}
            fn #check<T: #tr + ?Sized>(_: &T) {}
            let #first = #ty;
            #(#checks)*
        });
    }
    if out.is_empty() {
        return out;
    }
    quote! {
        #[allow(unused_variables, non_camel_case_types, non_snake_case, clippy::let_unit_value)]
        {
            #out
        }
    }
}

/// Whether occurrences of `name` are probed: a variable's name by Rust's conventions (not an
/// uppercase item's, nor a keyword).
fn probed(name: &str) -> bool {
    !matches!(name, "self" | "Self" | "crate" | "super" | "_")
        && !name.starts_with(|c: char| c.is_uppercase())
}

/// The identifier of a path of one segment (`x`, not `a::x` nor `<T>::x`).
fn single_ident(e: &Expr) -> Option<&Ident> {
    match e {
        Expr::Path(p) if p.qself.is_none() && p.path.leading_colon.is_none() => p.path.get_ident(),
        _ => None,
    }
}

/// The variable names a place uses: its root and its index variables (not fields).
fn place_names(e: &Expr, add: &mut impl FnMut(&Ident)) {
    match e {
        Expr::Path(_) => {
            if let Some(i) = single_ident(e) {
                add(i);
            }
        }
        Expr::Field(f) => place_names(&f.base, add),
        Expr::Index(i) => {
            place_names(&i.expr, add);
            place_names(&i.index, add);
        }
        Expr::Paren(p) => place_names(&p.expr, add),
        Expr::Unary(u) => place_names(&u.expr, add),
        Expr::Binary(b) => {
            place_names(&b.left, add);
            place_names(&b.right, add);
        }
        _ => {}
    }
}
