//! The logic of `cudagraph`'s macros, `graph!` and `kernels!`, as plain functions from
//! `proc_macro2::TokenStream` to `proc_macro2::TokenStream`, so that unit tests, the fuzzer and
//! the compile-cost benchmark can call them without the compiler. `cudagraph-macros` is the thin
//! proc-macro shim over this crate.
//!
//! One pass per module: `parse` (Rust syntax lowered into `ast`), `check` (names, dependencies,
//! places; all errors collected), `expand` (the generated code, or after errors a fallback of the
//! right type so only the real errors show), and `kernels` for `kernels!`. Each module uses only
//! the ones before it: `errors` → `ast` → `parse` → `check` → `expand` for `graph!` and `eager!`,
//! `errors` → `ast` → `programmatic` → `kernels` for `kernels!` (`tests/tests/layers.rs` in the
//! workspace checks it). Run-time `for` loops are lowered in `parse::loops` and generated in
//! `expand::loops`.

pub(crate) mod ast;
pub(crate) mod check;
pub(crate) mod errors;
pub(crate) mod expand;
pub(crate) mod hygiene;
pub(crate) mod kernels;
pub(crate) mod parse;
pub(crate) mod programmatic;

use proc_macro2::{Span, TokenStream, TokenTree};

/// Most levels of nesting (delimiters, or prefix operators such as closures `|| || …`) the macros
/// accept. `syn`'s recursive parser would overflow rustc's stack somewhere between 500 and 5000
/// levels (found by fuzzing), which aborts the compiler instead of reporting an error.
pub const MAX_NESTING: usize = 384;

/// An error on the first token nested deeper than [`MAX_NESTING`].
fn too_deep(tokens: &TokenStream) -> Option<syn::Error> {
    fn walk(tokens: TokenStream, depth: usize) -> Option<Span> {
        let mut prefix_run = 0;
        for tt in tokens {
            match tt {
                TokenTree::Group(g) if depth >= MAX_NESTING => return Some(g.span()),
                TokenTree::Group(g) => {
                    prefix_run = 0;
                    if let Some(s) = walk(g.stream(), depth + 1) {
                        return Some(s);
                    }
                }
                TokenTree::Punct(p) if matches!(p.as_char(), '|' | '!' | '-' | '*' | '&') => {
                    prefix_run += 1;
                    if prefix_run > 2 * MAX_NESTING {
                        return Some(p.span());
                    }
                }
                TokenTree::Ident(i) if i == "move" => {}
                _ => prefix_run = 0,
            }
        }
        None
    }
    walk(tokens.clone(), 0).map(|span| {
        syn::Error::new(span, format!("expression nested more than {MAX_NESTING} levels deep"))
    })
}

/// Expansion of `graph!(CACHE, STREAM, { BODY })`. Never panics: malformed input expands to
/// `compile_error!`s on the offending tokens and an expression of the right type.
pub fn graph(tokens: TokenStream) -> TokenStream {
    if let Some(e) = too_deep(&tokens) {
        return expand::fallback(e);
    }
    let (input, mut errors) = match parse::parse(tokens) {
        Ok(x) => x,
        Err(e) => return expand::fallback(e),
    };
    let checked = check::check(&input, &mut errors);
    match errors.combine() {
        None => expand::expand(&input, &checked),
        Some(e) => expand::fallback(e),
    }
}

/// Expansion of `eager!(STREAM, STATEMENT)` or `eager!(STREAM, { BODY })`: the statements of a
/// `graph!` body, checked as `graph!` checks them, launched one by one on the stream through a
/// cache in `Mode::Eager` (no graph is built). Never panics.
pub fn eager(tokens: TokenStream) -> TokenStream {
    if let Some(e) = too_deep(&tokens) {
        return expand::fallback(e);
    }
    let (input, mut errors) = match parse::parse_eager(tokens) {
        Ok(x) => x,
        Err(e) => return expand::fallback(e),
    };
    check::no_device_control_flow(&input.body, &mut errors);
    let checked = check::check(&input, &mut errors);
    match errors.combine() {
        None => expand::expand(&input, &checked),
        Some(e) => expand::fallback(e),
    }
}

/// Expansion of `kernels! { … }`. Never panics.
pub fn kernels(tokens: TokenStream) -> TokenStream {
    if let Some(e) = too_deep(&tokens) {
        return e.to_compile_error();
    }
    match syn::parse2::<kernels::KernelsInput>(tokens) {
        Ok(k) => kernels::expand(k),
        Err(e) => e.to_compile_error(),
    }
}

#[cfg(test)]
mod tests;
