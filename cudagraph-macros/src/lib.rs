//! Procedural macros of [`cudagraph`](https://docs.rs/cudagraph): `graph!` and `kernels!`.
//! Use them through `cudagraph`, which re-exports and documents them. The logic lives in
//! `cudagraph-macros-core`; this crate only crosses the proc-macro boundary.

use proc_macro::TokenStream;

/// See `cudagraph::graph!`.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    cudagraph_macros_core::graph(input.into()).into()
}

/// See `cudagraph::kernels!`.
#[proc_macro]
pub fn eager(input: TokenStream) -> TokenStream {
    cudagraph_macros_core::eager(input.into()).into()
}

#[proc_macro]
pub fn kernels(input: TokenStream) -> TokenStream {
    cudagraph_macros_core::kernels(input.into()).into()
}
