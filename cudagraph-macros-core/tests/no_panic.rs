//! `graph!` and `kernels!` never panic: whatever tokens they get, they expand to something (the
//! generated code, or `compile_error!`s and a stub of the right type).
//!
//! Two generators: fully random token trees over the DSL's words, punctuation, literals and
//! nested groups; and "near misses", graph bodies (and `kernels!` structs) built from valid
//! statements, then given a few random mutations anywhere in the tree (a token dropped,
//! duplicated, swapped with another, replaced by a wrong word or a random token inserted, a
//! group's delimiters removed), which get much deeper into the checker than random trees do. The `cargo fuzz` target in `../fuzz` covers the same
//! ground with arbitrary text, for long runs.

use std::str::FromStr;

use proc_macro2::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm};

/// Words of the DSL and of Rust that steer the parser down its different branches.
const WORDS: &[&str] = &[
    "copy", "memset", "zero", "launch", "after", "let", "if", "else", "for", "in", "mut", "self",
    "k", "u", "v", "x", "bufs", "i", "a", "b", "cfg", "cache", "stream", "struct", "fn", "pub",
    "return", "loop", "match", "while", "move", "ref", "async", "unsafe", "impl", "dyn", "_",
];

/// Punctuation, multi-character operators included.
const PUNCTS: &[&str] = &[
    "&", ",", ";", ".", "=", "..", "..=", "!", "*", "+", "-", "/", "%", ":", "::", "#", "?", "<",
    ">", "->", "=>", "&&", "||", "|", "@", "'", "$", "~", "^",
];

/// A token tree before it becomes `proc_macro2` tokens: a plain value that proptest can
/// generate, shrink and print.
#[derive(Clone, Debug)]
enum Tok {
    /// An identifier or keyword (`r#…` for a raw one).
    Ident(String),
    /// A raw identifier `r#…`.
    Raw(&'static str),
    /// An operator, as `Joint` characters then an `Alone` one.
    Punct(&'static str),
    /// One punctuation character as lexed (multi-character operators are `Joint` runs).
    Char(char, Spacing),
    /// A literal as lexed.
    Lit(String),
    Int(u64, &'static str),
    Float(f64),
    Str(String),
    Group(Delimiter, Vec<Tok>),
}

fn to_stream(toks: &[Tok]) -> TokenStream {
    let mut out = Vec::<TokenTree>::new();
    for t in toks {
        match t {
            Tok::Ident(w) => out.push(
                match w.strip_prefix("r#") {
                    Some(raw) => Ident::new_raw(raw, Span::call_site()),
                    None => Ident::new(w, Span::call_site()),
                }
                .into(),
            ),
            Tok::Char(c, spacing) => out.push(Punct::new(*c, *spacing).into()),
            Tok::Lit(l) => out.push(Literal::from_str(l).expect("lexed literal").into()),
            Tok::Raw(w) => out.push(Ident::new_raw(w, Span::call_site()).into()),
            Tok::Punct(p) => {
                let chars: Vec<char> = p.chars().collect();
                for (i, &c) in chars.iter().enumerate() {
                    let spacing = if i + 1 < chars.len() { Spacing::Joint } else { Spacing::Alone };
                    out.push(Punct::new(c, spacing).into());
                }
            }
            Tok::Int(v, suffix) => out.push(
                match *suffix {
                    "" => Literal::u64_unsuffixed(*v),
                    "u8" => Literal::u8_suffixed(*v as u8),
                    "u32" => Literal::u32_suffixed(*v as u32),
                    "i64" => Literal::i64_suffixed(*v as i64),
                    _ => Literal::usize_suffixed(*v as usize),
                }
                .into(),
            ),
            Tok::Float(f) => out.push(Literal::f64_unsuffixed(*f).into()),
            Tok::Str(s) => out.push(Literal::string(s).into()),
            Tok::Group(d, inner) => out.push(Group::new(*d, to_stream(inner)).into()),
        }
    }
    out.into_iter().collect()
}

fn leaf() -> impl Strategy<Value = Tok> {
    prop_oneof![
        6 => prop::sample::select(WORDS).prop_map(|w| Tok::Ident(w.to_string())),
        1 => prop::sample::select(&["copy", "after", "k", "u"][..]).prop_map(Tok::Raw),
        5 => prop::sample::select(PUNCTS).prop_map(Tok::Punct),
        2 => (prop_oneof![0..8u64, any::<u64>()], prop::sample::select(&["", "u8", "u32", "i64", "usize"][..]))
            .prop_map(|(v, s)| Tok::Int(v, s)),
        1 => (-1.0e3..1.0e3f64).prop_map(Tok::Float),
        1 => prop::sample::select(&["", "x", "copy", "a b"][..]).prop_map(|s| Tok::Str(s.into())),
    ]
}

fn delimiter() -> impl Strategy<Value = Delimiter> {
    prop::sample::select(
        &[Delimiter::Parenthesis, Delimiter::Bracket, Delimiter::Brace, Delimiter::None][..],
    )
}

/// Random token trees, groups nested up to 4 deep.
fn random_tokens() -> impl Strategy<Value = Vec<Tok>> {
    let tree = leaf().prop_recursive(4, 48, 6, |inner| {
        (delimiter(), prop::collection::vec(inner, 0..8)).prop_map(|(d, v)| Tok::Group(d, v))
    });
    prop::collection::vec(tree, 0..16)
}

/// Random tokens inside the body braces after a well-formed `CACHE, STREAM,` prefix, so they
/// reach the statement parser.
fn random_bodies() -> impl Strategy<Value = Vec<Tok>> {
    random_tokens().prop_map(|body| {
        vec![
            Tok::Punct("&"),
            Tok::Ident("mut".into()),
            Tok::Ident("cache".into()),
            Tok::Punct(","),
            Tok::Punct("&"),
            Tok::Ident("stream".into()),
            Tok::Punct(","),
            Tok::Group(Delimiter::Brace, body),
        ]
    })
}

// ---- Near misses: valid statements, then mutated. ----

fn place() -> impl Strategy<Value = String> {
    // Places indexed by a loop variable are errors outside a `for`: fewer of them.
    let plain = prop::sample::select(
        &["u", "v", "w", "self.u", "f.v", "f.host", "bufs[0]", "bufs[1]", "(*p).q"][..],
    );
    let indexed = prop::sample::select(&["bufs[i]", "bufs[i + 1]", "host[2 * j]"][..]);
    prop_oneof![4 => plain, 1 => indexed].prop_map(str::to_string)
}

fn operand() -> impl Strategy<Value = String> {
    (any::<bool>(), place())
        .prop_map(|(w, p)| if w { format!("&mut {p}") } else { format!("&{p}") })
}

fn op() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (
            prop::sample::select(&["stencil", "axpy", "scale", "after", "copy"][..]),
            prop::collection::vec(
                prop_oneof![operand(), Just("n".to_string()), Just("0.5".to_string())],
                0..4
            ),
            prop::sample::select(&["cfg", "(grid, block)", "(g, b, 0)", "c.cells"][..]),
        )
            .prop_map(|(k, args, cfg)| format!("k.{k}({}).launch({cfg})", args.join(", "))),
        1 => (place(), place()).prop_map(|(s, d)| format!("copy(&{s}, &mut {d})")),
        1 => (place(), prop::sample::select(&["0u32", "1u8", "0.0f32", "-1i16", "x"][..]))
            .prop_map(|(d, v)| format!("memset(&mut {d}, {v})")),
        1 => place().prop_map(|d| format!("zero(&mut {d})")),
    ]
}

/// One statement: a node (maybe named, maybe with `.after`), or an `if` / `for` around a few.
fn statement() -> impl Strategy<Value = String> {
    const NAMES: &[&str] = &["a", "b", "c", "d", "s"];
    let node = (
        prop::option::weighted(0.3, prop::sample::select(NAMES)),
        op(),
        prop_oneof![3 => Just(Vec::new()), 1 => prop::collection::vec(prop::sample::select(NAMES), 1..3)],
    )
        .prop_map(|(name, op, after)| {
            let after = if after.is_empty() {
                String::new()
            } else {
                format!(".after({})", after.join(", "))
            };
            match name {
                Some(n) => format!("let {n} = {op}{after};"),
                None => format!("{op}{after};"),
            }
        });
    node.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            (
                prop::collection::vec(inner.clone(), 0..4),
                prop::collection::vec(inner.clone(), 0..3)
            )
                .prop_map(|(t, e)| format!(
                    "if flag {{ {} }} else {{ {} }}",
                    t.concat(),
                    e.concat()
                )),
            (
                prop::sample::select(&["i", "j"][..]),
                0..3u64,
                0..5u64,
                any::<bool>(),
                prop::collection::vec(inner, 0..3)
            )
                .prop_map(|(var, a, b, closed, body)| {
                    format!(
                        "for {var} in {a}..{}{b} {{ {} }}",
                        if closed { "=" } else { "" },
                        body.concat()
                    )
                }),
        ]
    })
}

/// A token tree of lexed text, so mutations can work on it.
fn lex(src: &str) -> Vec<Tok> {
    fn conv(ts: TokenStream) -> Vec<Tok> {
        let mut out = Vec::new();
        for tt in ts {
            out.push(match tt {
                TokenTree::Ident(i) => Tok::Ident(i.to_string()),
                TokenTree::Punct(p) => Tok::Char(p.as_char(), p.spacing()),
                TokenTree::Literal(l) => Tok::Lit(l.to_string()),
                TokenTree::Group(g) => Tok::Group(g.delimiter(), conv(g.stream())),
            });
        }
        out
    }
    conv(TokenStream::from_str(src).expect("generated statements lex"))
}

#[derive(Clone, Debug)]
enum Mutation {
    Drop,
    Duplicate,
    Swap(usize),
    Word(&'static str),
    Insert(Tok),
    Unwrap,
}

fn mutation() -> impl Strategy<Value = (usize, usize, Mutation)> {
    let m = prop_oneof![
        3 => Just(Mutation::Drop),
        2 => Just(Mutation::Duplicate),
        2 => any::<usize>().prop_map(Mutation::Swap),
        3 => prop::sample::select(WORDS).prop_map(Mutation::Word),
        2 => leaf().prop_map(Mutation::Insert),
        1 => Just(Mutation::Unwrap),
    ];
    (any::<usize>(), any::<usize>(), m)
}

/// Every token sequence of the tree (the top level and each group's content), as paths of
/// group indices.
fn sequences(toks: &[Tok], path: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(path.clone());
    for (i, t) in toks.iter().enumerate() {
        if let Tok::Group(_, inner) = t {
            path.push(i);
            sequences(inner, path, out);
            path.pop();
        }
    }
}

fn sequence_at<'a>(toks: &'a mut Vec<Tok>, path: &[usize]) -> &'a mut Vec<Tok> {
    match path.split_first() {
        None => toks,
        Some((&i, rest)) => match &mut toks[i] {
            Tok::Group(_, inner) => sequence_at(inner, rest),
            _ => unreachable!("paths lead through groups"),
        },
    }
}

/// Applies `m` at position `at` of the `which`-th token sequence.
fn mutate(toks: &mut Vec<Tok>, (which, at, m): (usize, usize, Mutation)) {
    let mut seqs = Vec::new();
    sequences(toks, &mut Vec::new(), &mut seqs);
    let seq = sequence_at(toks, &seqs[which % seqs.len()]);
    if seq.is_empty() {
        if let Mutation::Insert(t) = m {
            seq.push(t);
        }
        return;
    }
    let at = at % seq.len();
    match m {
        Mutation::Drop => {
            seq.remove(at);
        }
        Mutation::Duplicate => seq.insert(at, seq[at].clone()),
        Mutation::Swap(other) => {
            let other = other % seq.len();
            seq.swap(at, other);
        }
        Mutation::Word(w) => seq[at] = Tok::Ident(w.to_string()),
        Mutation::Insert(t) => seq.insert(at, t),
        Mutation::Unwrap => {
            if let Tok::Group(_, inner) = seq[at].clone() {
                seq.splice(at..=at, inner);
            }
        }
    }
}

/// A `graph!` input of a few valid statements, then up to four mutations anywhere in it (the
/// `CACHE, STREAM,` prefix included).
fn near_miss() -> impl Strategy<Value = Vec<Tok>> {
    (
        prop::collection::vec(statement(), 0..8),
        prop_oneof![1 => Just(Vec::new()), 2 => prop::collection::vec(mutation(), 1..5)],
    )
        .prop_map(|(stmts, muts)| {
            let mut toks = lex(&format!("&mut cache, &stream, {{ {} }}", stmts.concat()));
            for m in muts {
                mutate(&mut toks, m);
            }
            toks
        })
}

/// `kernels!` inputs: a struct of a few signatures, mutated.
fn near_miss_kernels() -> impl Strategy<Value = Vec<Tok>> {
    let param = prop::sample::select(
        &["n: u32", "a: f32", "x: &[f32]", "y: &mut [f32]", "p: (u8, u8)", "self", "r: &mut u32"][..],
    );
    let sig =
        (prop::sample::select(&["f", "g", "r#match"][..]), prop::collection::vec(param, 0..5))
            .prop_map(|(n, ps)| format!("fn {n}({});", ps.join(", ")));
    (prop::collection::vec(sig, 0..4), prop::collection::vec(mutation(), 0..4)).prop_map(
        |(sigs, muts)| {
            let mut toks = lex(&format!("/// Doc.\npub struct K {{ {} }}", sigs.concat()));
            for m in muts {
                mutate(&mut toks, m);
            }
            toks
        },
    )
}

/// Expands `toks` with both macros and checks that each produced tokens.
fn expand_all(toks: &[Tok]) -> Result<(), TestCaseError> {
    let input = to_stream(toks);
    prop_assert!(!cudagraph_macros_core::graph(input.clone()).is_empty(), "graph: empty output");
    prop_assert!(!cudagraph_macros_core::kernels(input).is_empty(), "kernels: empty output");
    Ok(())
}

fn config(cases: u32) -> Config {
    // Regressions are kept as the named tests below, not in a persistence file. XorShift: the
    // default ChaCha generator, unoptimized in test builds, would take most of the run time.
    Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::XorShift,
        ..Config::default()
    }
}

// 5000 cases in all, about 10 s in a test build on two cores.
proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn random_token_trees_never_panic(toks in random_tokens()) {
        expand_all(&toks)?;
    }

    #[test]
    fn random_bodies_never_panic(toks in random_bodies()) {
        expand_all(&toks)?;
    }

    #[test]
    fn near_miss_kernels_never_panic(toks in near_miss_kernels()) {
        expand_all(&toks)?;
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn near_miss_bodies_never_panic(toks in near_miss()) {
        expand_all(&toks)?;
    }
}

/// Edge cases as plain tests: huge and shadowed loops, self and folded-index places, a raw
/// kernel name. Add here any input the fuzzer or the properties above find to panic.
#[test]
fn regressions() {
    for src in [
        "",
        "&mut cache, &stream, {}",
        "&mut cache, &stream, { for i in 0..=18446744073709551615 { zero(&mut x); } }",
        "&mut cache, &stream, { let a = zero(&mut bufs[0]).after(a); zero(&mut bufs[0 + 0]); }",
        "&mut cache, &stream, { for i in 0..2 { for i in 0..2 { zero(&mut bufs[i]); } } }",
        "struct K { fn r#match(x: &mut [f32]); }",
    ] {
        let tokens = TokenStream::from_str(src).expect("lexes");
        assert!(!cudagraph_macros_core::graph(tokens.clone()).is_empty(), "{src}");
        assert!(!cudagraph_macros_core::kernels(tokens).is_empty(), "{src}");
    }
}

/// `graph!` inputs nested `depth` deep: a `let` of closures `|| || … x`, and an operand in
/// parentheses `((…x…))`.
fn nested(depth: usize) -> [String; 2] {
    [
        format!("&mut cache, &stream, {{ let a = {}x; }}", "|| ".repeat(depth)),
        format!(
            "&mut cache, &stream, {{ zero(&mut {}x{}); }}",
            "(".repeat(depth),
            ")".repeat(depth)
        ),
    ]
}

/// Expands `inputs` on a thread with rustc's 8 MiB stack (proc macros run on rustc's thread).
fn on_rustc_stack(inputs: [String; 2]) {
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            for input in inputs {
                let tokens = TokenStream::from_str(&input).expect("lexes");
                assert!(!cudagraph_macros_core::graph(tokens).is_empty());
            }
        })
        .expect("spawn")
        .join()
        .expect("no panic");
}

/// Expressions nested a few hundred deep expand within rustc's stack, in a test (unoptimized)
/// build like the one a proc macro gets in a debug build.
#[test]
fn nested_expressions() {
    on_rustc_stack(nested(256));
}

/// Found by `cargo fuzz` (a `let` of about 1000 nested closures `|| || …`): `syn`'s recursive
/// expression parser overflowed the stack, which aborted the process (and would crash rustc).
/// Unoptimized it overflowed 8 MiB between 500 and 1000 levels, optimized between 2000 and 5000.
/// Now input nested deeper than `MAX_NESTING` is a compile error before `syn` parses it.
#[test]
fn deeply_nested_expressions() {
    on_rustc_stack(nested(5000));
    for input in nested(cudagraph_macros_core::MAX_NESTING * 2) {
        let out = cudagraph_macros_core::graph(TokenStream::from_str(&input).expect("lexes"));
        assert!(out.to_string().contains("nested more than"), "{out}");
    }
}
