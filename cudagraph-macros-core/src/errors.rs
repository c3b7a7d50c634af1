//! Diagnostics shared by every pass: the errors of one invocation, collected and reported
//! together in source order, and where a span starts.

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Errors collected over one invocation, reported together; with the statements unrolled so
/// far (`.1`) and the hygiene probes of unrolled `for`s' variables (`.2`: see
/// `parse::loop_variable_probe`), which the expansion emits for rustc to check.
#[derive(Default)]
pub struct Errors(Vec<syn::Error>, pub(crate) usize, pub(crate) proc_macro2::TokenStream);

impl Errors {
    /// An error on `tokens`' span.
    pub fn push(&mut self, tokens: impl ToTokens, msg: impl Display) {
        self.0.push(syn::Error::new_spanned(tokens, msg));
    }
    /// An error as is.
    pub fn add(&mut self, e: syn::Error) {
        self.0.push(e);
    }
    /// All errors as one `syn::Error` (`None` when there are none), in source order whichever
    /// pass found them.
    pub fn combine(mut self) -> Option<syn::Error> {
        self.0.sort_by_key(|e| line_column(e.span()));
        self.0.into_iter().reduce(|mut a, b| {
            a.combine(b);
            a
        })
    }
    /// The messages, for tests.
    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

/// Line and column (1-based) of a span.
pub fn line_column(span: Span) -> (u32, u32) {
    let lc = span.start();
    (lc.line as u32, lc.column as u32 + 1)
}
