//! Procedural macros of [`cudagraph`](https://docs.rs/cudagraph): `graph!` and `kernels!`.
//! Use them through `cudagraph`, which re-exports them and documents them.
//!
//! One pass per module: [`parse`] (syn's Rust syntax lowered into [`ast`]), [`check`] (names,
//! dependencies, places; all errors collected), [`expand`] (the generated code, or after errors
//! a fallback of the right type so only the real errors show).

pub(crate) mod ast;
pub(crate) mod check;
pub(crate) mod expand;
pub(crate) mod kernels;
pub(crate) mod parse;

use proc_macro::TokenStream;

/// See `cudagraph::graph!`.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    graph_impl(input.into()).into()
}

/// See `cudagraph::kernels!`.
#[proc_macro]
pub fn kernels(input: TokenStream) -> TokenStream {
    match syn::parse::<kernels::KernelsInput>(input) {
        Ok(k) => kernels::expand(k).into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn graph_impl(tokens: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
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

#[cfg(test)]
mod tests;
