//! Compile-time checks of `graph!` (one `ui/*.rs` per rule, named after it, with the expected
//! compiler output in `ui/*.stderr`) and programs that must compile (`pass/*.rs`).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p cudagraph-tests --test ui`
//! and read the diff; they are made with the toolchain pinned in `rust-toolchain.toml`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/pass/*.rs");
}
