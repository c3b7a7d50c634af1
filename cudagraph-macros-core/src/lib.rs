//! The logic of `cudagraph`'s macros, `graph!` and `kernels!`, as plain functions from
//! `proc_macro2::TokenStream` to `proc_macro2::TokenStream`, so that unit tests, the fuzzer and
//! the compile-cost benchmark can call them without the compiler. `cudagraph-macros` is the thin
//! proc-macro shim over this crate.
//!
//! One pass per module: `parse` (Rust syntax lowered into `ast`), `check` (names, dependencies,
//! places; all errors collected), `expand` (the generated code, or after errors a fallback of the
//! right type so only the real errors show), and `kernels` for `kernels!`.

pub(crate) mod ast;
pub(crate) mod check;
pub(crate) mod expand;
pub(crate) mod kernels;
pub(crate) mod parse;

use proc_macro2::TokenStream;

/// Expansion of `graph!(CACHE, STREAM, { BODY })`. Never panics: malformed input expands to
/// `compile_error!`s on the offending tokens and an expression of the right type.
pub fn graph(tokens: TokenStream) -> TokenStream {
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

/// Expansion of `kernels! { … }`. Never panics.
pub fn kernels(tokens: TokenStream) -> TokenStream {
    match syn::parse2::<kernels::KernelsInput>(tokens) {
        Ok(k) => kernels::expand(k),
        Err(e) => e.to_compile_error(),
    }
}

#[cfg(test)]
mod tests;
