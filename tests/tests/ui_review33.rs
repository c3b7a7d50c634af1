//! Review 33's compile-fail cases alone (`tests/ui/review33-*.rs`; `ui.rs` runs them with the
//! rest): `cargo test -p cudagraph-tests --test ui_review33`.

#[test]
fn ui_review33() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/review33-*.rs");
}
