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

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::{Expr, Ident};

use crate::ast::{Flat, Op};

/// The probe of `nodes`' names (nothing when no name is used twice).
pub(crate) fn probe(nodes: &[Flat<'_>]) -> TokenStream {
    // Every occurrence of each probed name, names in order of first use.
    let mut order: Vec<String> = Vec::new();
    let mut uses: HashMap<String, Vec<Ident>> = HashMap::new();
    let mut add = |i: &Ident| {
        let name = name(i);
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
            "this `{name}` is of another macro context than the `{name}` at line {line}:{column} of this `graph!` body"
        );
        let note = format!(
            "`graph!` keys places and receivers by their text: every `{name}` of the body must be written in one macro context, so that one name is one variable (under `macro_rules!` hygiene a macro's own `{name}` and its caller's `{name}` are two; a macro defined inside a function, whose own `{name}` may name the function's, counts as another context too): give the macro's variable another name, or pass it to the macro"
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

/// An identifier's name as text, unraw (`r#x` is `x`): how `graph!` compares names.
pub(crate) fn name(i: &Ident) -> String {
    syn::ext::IdentExt::unraw(i).to_string()
}

/// Whether two identifiers are one name (`r#x` is `x`).
pub(crate) fn same_name(a: &Ident, b: &Ident) -> bool {
    syn::ext::IdentExt::unraw(a) == syn::ext::IdentExt::unraw(b)
}

/// Whether `tokens` use the name `var` (raw or not; not as a field or method after `.`).
pub(crate) fn mentions(tokens: TokenStream, var: &Ident) -> bool {
    let mut after_dot = false;
    tokens.into_iter().any(|tt| {
        let field = after_dot;
        after_dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
        match tt {
            TokenTree::Ident(i) => !field && same_name(&i, var),
            TokenTree::Group(g) => mentions(g.stream(), var),
            _ => false,
        }
    })
}

/// Device conditions: `graph!` resolves the name a device statement gives (`device_while(c,
/// …)`) to the latest declaration before it in scope, by text, where rustc resolves the
/// expansion's `let c: Condition` by hygiene and by the expansion's blocks, which are flatter
/// than the body's (an unrolled `for`'s iteration and a device statement's bodies are no Rust
/// block there). Each declaration also binds a marker of a type of its own, named after it with
/// its span (`__cudagraph_cond_c`), and each device statement passes the marker its name
/// resolves to, with its span, to a function that takes only the marker of the declaration
/// `graph!` resolved: any other one (a macro's `c` beside its caller's, a `c` of a finished
/// iteration or device body) is a compile error (review 19b). These are the marker types and
/// check functions, one per condition slot.
pub(crate) fn condition_marks(names: &[Ident]) -> TokenStream {
    let mut out = TokenStream::new();
    for (k, name) in names.iter().enumerate() {
        let (ty, tr, check) = condition_items(k as u32);
        let (line, column) = crate::errors::line_column(name.span());
        let name = self::name(name);
        let message = format!(
            "this `{name}` is not the device condition `{name}` declared at line {line}:{column}, which `graph!` resolved for this device statement"
        );
        out.extend(quote! {
            #[allow(non_camel_case_types, dead_code)]
            struct #ty;
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "another device condition of this name",
                note = "`graph!` resolves a device statement's condition by its text, to the latest declaration before it in the same block; here rustc resolves the name to another one (a `condition` of a finished `for` iteration or device body, or one of another macro context): give the conditions distinct names"
            )]
            trait #tr {}
            impl #tr for #ty {}
            #[allow(dead_code)]
            fn #check<T: #tr>(_: &T) {}
        });
    }
    out
}

/// The names of slot `k`'s marker type, trait and check function.
fn condition_items(k: u32) -> (Ident, Ident, Ident) {
    let s = Span::mixed_site();
    (
        format_ident!("__CudagraphCondition{}", k, span = s),
        format_ident!("__CudagraphIsCondition{}", k, span = s),
        format_ident!("__cudagraph_is_condition{}", k, span = s),
    )
}

/// The marker variable of the condition named `name` (with its span, so its hygiene).
fn condition_marker(name: &Ident) -> Ident {
    format_ident!("__cudagraph_cond_{}", self::name(name), span = name.span())
}

/// Declaration `name` of slot `slot`: its marker.
pub(crate) fn condition_mark(name: &Ident, slot: u32) -> TokenStream {
    let (ty, _, _) = condition_items(slot);
    let mark = condition_marker(name);
    quote! {
        #[allow(unused_variables)]
        let #mark = #ty;
    }
}

/// A device statement naming `cond`, which `graph!` resolved to slot `slot`: the check.
pub(crate) fn condition_check(cond: &Ident, slot: u32) -> TokenStream {
    let (_, _, check) = condition_items(slot);
    let mark = condition_marker(cond);
    quote_spanned! {cond.span()=>
        #check(&#mark);
    }
}
