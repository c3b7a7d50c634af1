//! Feeds arbitrary text to `graph!`'s and `kernels!`'s expansion: they must never panic.
//!
//! ```text
//! cargo +nightly fuzz run graph corpus/graph seeds/graph -- -max_total_time=600
//! ```
//! (from `cudagraph-macros-core/fuzz`; new inputs go to the ignored `corpus/graph`, the tracked
//! seed bodies in `seeds/graph` are read only). Each input is used four ways: as the whole
//! `graph!` input, as a body `graph!(&mut cache, &stream, { INPUT })` (most of the checker is only
//! reached past the `CACHE, STREAM,` prefix), as the whole `kernels!` input and as the inside of
//! `kernels! { struct K { INPUT } }`.

#![no_main]

use std::str::FromStr;

use libfuzzer_sys::fuzz_target;
use proc_macro2::TokenStream;
use quote::quote;

fuzz_target!(|data: &[u8]| {
    // `span-locations` keeps every lexed string in a thread-local source map; drop the previous
    // inputs' text so a long run does not grow without bound. (proc-macro2 built with
    // `--cfg fuzzing`, as cargo-fuzz builds it, keeps no source map at all and every span is at
    // line 0, column 0; the span-location code is exercised by `tests/no_panic.rs` instead.)
    proc_macro2::extra::invalidate_current_thread_spans();
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(tokens) = TokenStream::from_str(text) else { return };
    for input in [tokens.clone(), quote!(&mut cache, &stream, { #tokens })] {
        assert!(!cudagraph_macros_core::graph(input).is_empty());
    }
    for input in [tokens.clone(), quote!(pub struct K { #tokens })] {
        assert!(!cudagraph_macros_core::kernels(input).is_empty());
    }
});
