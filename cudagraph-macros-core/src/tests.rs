//! Parser and checker tests: plain functions over `proc_macro2` token streams, no compiler plugin.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::{Arg, GraphInput, Item, Op};
use crate::check::{Checked, check};
use crate::errors::Errors;
use crate::parse::{MAX_UNROLL, parse};

/// `graph!`'s input lowered, asserting that `parse` itself succeeded.
fn lower(tokens: TokenStream) -> (GraphInput, Errors) {
    match parse(tokens) {
        Ok(x) => x,
        Err(e) => panic!("graph! input does not parse: {e}"),
    }
}

/// Messages of every parse and check error of `tokens`, in the order found.
fn errors_of(tokens: TokenStream) -> Vec<String> {
    let (input, mut errors) = lower(tokens);
    check(&input, &mut errors);
    errors.messages()
}

/// Checks `tokens`, asserts there is no error and hands the result to `f`.
fn checked(tokens: TokenStream, f: impl FnOnce(&Checked<'_>)) {
    let (input, mut errors) = lower(tokens);
    let c = check(&input, &mut errors);
    assert_eq!(errors.messages(), Vec::<String>::new());
    f(&c);
}

/// One line per node: `label: kind place/r place/w …`, with ` if COND` when conditional.
fn summary(c: &Checked<'_>) -> Vec<String> {
    c.nodes
        .iter()
        .map(|f| {
            let node = f.node;
            let kind = match &node.op {
                Op::Launch { kernel, .. } => format!("kernel {kernel}"),
                Op::Copy { .. } => "copy".into(),
                Op::Memset { .. } => "memset".into(),
                Op::Zero { .. } => "zero".into(),
                Op::Fill { .. } => "fill".into(),
                Op::Capture { .. } => "capture".into(),
                Op::Child { .. } => "child".into(),
                Op::Host { .. } => "host".into(),
                Op::Empty { .. } => "empty".into(),
                Op::Alloc { .. } => "alloc".into(),
                Op::Copy2d { .. } => "copy_2d".into(),
                Op::Memset2d { .. } => "memset_2d".into(),
                Op::Free { .. } => "free".into(),
                Op::Event { func, .. } => func.to_string(),
                Op::Conditional { func, cond, .. } => format!("{func}({cond})"),
            };
            let mut line = format!("{}: {kind}", node.label());
            for o in node.op.operands() {
                line += &format!(" {}/{}", o.key, if o.write { "w" } else { "r" });
            }
            if !f.condition.is_empty() {
                line += &format!(" if {}", f.condition);
            }
            if let Some((c, b)) = f.body {
                line += &format!(" in n{c}.{b}");
            }
            line
        })
        .collect()
}

/// Parses `src` as text, so tokens have distinct source positions (tokens made by `quote!` all
/// share one).
fn text(src: &str) -> TokenStream {
    src.parse().expect("valid tokens")
}

#[test]
fn statements_lower_to_node_kinds() {
    checked(
        quote!(&mut cache, &stream, {
            k.stencil(nx, ny, 0.5, &u, &mut v).launch(cfg);
            copy(&v, &mut host);
            memset(&mut flags, 0u32);
            zero(&mut u);
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "stencil: kernel stencil u/r v/w",
                    "copy: copy v/r host/w",
                    "memset: memset flags/w",
                    "zero: zero u/w",
                ]
            );
            assert_eq!(c.after, [[0u32; 0]; 4]);
            assert_eq!(c.conditions, 0);
        },
    );
}

#[test]
fn host_statements_list_pinned_buffers_and_order_like_nodes() {
    checked(
        quote!(&mut cache, &stream, {
            copy(&x, &mut pin);
            let h = host(&pin, &mut out, move |(p, o)| o.copy_from_slice(p));
            host(move |()| count.fetch_add(1, Relaxed));
            copy(&out, &mut y);
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "copy: copy x/r pin/w",
                    "h: host pin/r out/w",
                    "host: host",
                    "copy: copy out/r y/w"
                ]
            );
        },
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            host(&pin);
        })),
        ["`host` takes the pinned host buffers the closure reads (`&x`) and writes (`&mut y`), \
          then the closure, which gets them as slices: `host(&a, &mut b, move |(a, b)| { … })` \
          (`host(move |()| { … })` with none)"]
    );
}

#[test]
fn input_keeps_cache_stream_and_launch_parts() {
    let (input, errors) = lower(quote!(&mut self.cache, &streams[1], {
        k.axpy(n, 2.0, &x, &mut y).launch((4, 256));
    }));
    assert!(errors.messages().is_empty());
    assert_eq!(crate::ast::normalize(&input.cache), "&mut self.cache");
    assert_eq!(crate::ast::normalize(&input.stream), "&streams[1]");
    let crate::ast::Item::Node(node) = &input.body[0] else { panic!("a node") };
    let Op::Launch { receiver, kernel, args, cfg, .. } = &node.op else { panic!("a launch") };
    assert_eq!(crate::ast::normalize(receiver), "k");
    assert_eq!(kernel, "axpy");
    assert_eq!(crate::ast::normalize(cfg), "(4, 256)");
    let args: Vec<String> = args
        .iter()
        .map(|a| match a {
            Arg::Scalar(e) => format!("scalar {}", crate::ast::normalize(e)),
            Arg::Buffer(o) => format!("buffer {} {}", o.key, o.write),
        })
        .collect();
    assert_eq!(args, ["scalar n", "scalar 2.0", "buffer x false", "buffer y true"]);
}

#[test]
fn labels_are_let_names_or_statement_words() {
    checked(
        quote!(&mut c, &s, {
            let s1 = k.stencil(&u, &mut v).launch(cfg);
            k.boundary(&mut v).launch(cfg);
            let clear = zero(&mut f);
            let up = copy(&h, &mut u);
            memset(&mut f, 1u8);
        }),
        |c| {
            let labels: Vec<String> = c.nodes.iter().map(|f| f.node.label()).collect();
            assert_eq!(labels, ["s1", "boundary", "clear", "up", "memset"]);
        },
    );
}

#[test]
fn place_keys_name_fields_indices_and_derefs() {
    checked(
        quote!(&mut c, &s, {
            k.a(&self.u, &mut s.f.g).launch(cfg);
            k.b(&bufs[0], &mut bufs[1 + 1]).launch(cfg);
            k.c(&(x), &mut *y).launch(cfg);
            k.d(&grid[j], &mut m[2][3]).launch(cfg);
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "a: kernel a self.u/r s.f.g/w",
                    "b: kernel b bufs[0]/r bufs[2]/w",
                    "c: kernel c x/r y/w",
                    "d: kernel d grid[j]/r m[2][3]/w",
                ]
            );
        },
    );
}

#[test]
fn after_resolves_to_earlier_node_indices() {
    checked(
        quote!(&mut c, &s, {
            let a = k.x(&mut u).launch(cfg);
            let b = zero(&mut v);
            k.y(&mut w).launch(cfg).after(a);
            let d = memset(&mut f, 0u32).after(b, a);
            (copy(&u, &mut h)).after(d);
        }),
        |c| assert_eq!(c.after, [vec![], vec![], vec![0], vec![1, 0], vec![3]]),
    );
}

/// Captures share what no listed buffer shows (a library handle's workspace): each is ordered
/// after every earlier capture of its block, even with disjoint operands.
#[test]
fn capture_statements_are_ordered_after_earlier_captures_of_their_block() {
    checked(
        quote!(&mut c, &s, {
            capture(&a, |s, (a,)| Ok::<(), E>(()));
            let x = k.x(&mut u).launch(cfg);
            capture(&mut b, |s, (b,)| Ok::<(), E>(()));
            capture(&mut e, key = 1u32, |s, k, (e,)| Ok::<(), E>(())).after(x);
        }),
        |c| assert_eq!(c.after, [vec![], vec![], vec![0], vec![1, 0, 2]]),
    );
    checked(
        quote!(&mut c, &s, {
            capture(&a, |s, (a,)| Ok::<(), E>(()));
            capture(&mut b, |s, (b,)| Ok::<(), E>(()));
            capture(&mut e, key = 1u32, |s, k, (e,)| Ok::<(), E>(()));
        }),
        |c| assert_eq!(c.after, [vec![], vec![0], vec![0, 1]]),
    );
}

#[test]
fn after_unknown_later_and_self_are_errors() {
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.x(&mut u).launch(cfg).after(nope);
        })),
        [
            "unknown node `nope` in `.after(…)`: name a node with `let nope = …;` before this statement"
        ]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.x(&mut u).launch(cfg).after(b);
            let b = zero(&mut v);
        })),
        ["node `b` is defined later: `.after(…)` names earlier nodes only"]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            let a = k.x(&mut u).launch(cfg).after(a);
        })),
        ["node `a` cannot depend on itself"]
    );
}

#[test]
fn after_takes_names_only() {
    let errors = errors_of(quote!(&mut c, &s, {
        let a = zero(&mut u);
        zero(&mut v).after(a.b, 3);
        zero(&mut w).after();
        zero(&mut x).after(a).after(a);
    }));
    assert_eq!(
        errors,
        [
            "`.after(…)` takes names of earlier nodes: `.after(a, b)`",
            "`.after(…)` takes names of earlier nodes: `.after(a, b)`",
            "`.after(…)` needs at least one node name",
            "write all dependencies in one `.after(a, b)`",
        ]
    );
}

#[test]
fn duplicate_names_are_one_error_on_the_second() {
    // Distinct source positions: the message names the first one's line.
    let errors =
        errors_of(text("&mut c, &s, {\n    let a = zero(&mut u);\n    let a = zero(&mut v);\n}"));
    assert_eq!(
        errors,
        ["duplicate node name `a`: line 2 already names a node `a`; node names must be unique"]
    );
    // One `let` unrolled by a `for`: one error, repeated identically for each later iteration
    // (rustc shows identical errors once).
    let errors = errors_of(text(
        "&mut c, &s, {\n    for i in 0..3 {\n        let a = zero(&mut b[i]);\n    }\n}",
    ));
    let msg = "duplicate node name `a`: a `let` inside a graph `for` names a node in every iteration, and node names must be unique";
    assert_eq!(errors, [msg, msg]);
}

#[test]
fn temporaries_are_rejected_as_operands() {
    let msg = "a buffer operand must be a place (a variable, a field or an indexed element such as `u`, `self.u`, `bufs[0]`), not a temporary or a call: a temporary would be dropped before the GPU runs";
    let errors = errors_of(quote!(&mut c, &s, {
        k.a(&make_buf(), &mut v).launch(cfg);
        k.b(&bufs.clone(), &mut v).launch(cfg);
        k.c(&u, &mut bufs[next()]).launch(cfg);
        copy(&u.slice(0..4), &mut v);
        zero(&mut vec![1]);
    }));
    assert_eq!(errors, [msg; 5]);
}

#[test]
fn operands_need_their_reference_marker() {
    let errors = errors_of(quote!(&mut c, &s, {
        copy(&mut a, &mut b);
        copy(a, &mut b);
        copy(&a, b);
        memset(&x, 0u32);
        zero(&x);
    }));
    assert_eq!(
        errors,
        [
            "this operand is only read: write `&a`",
            "a buffer operand is a place marked `&` (read) or `&mut` (write): write `&a`",
            "a buffer operand is a place marked `&` (read) or `&mut` (write): write `&mut b`",
            "this operand is written: write `&mut x`",
            "this operand is written: write `&mut x`",
        ]
    );
}

#[test]
fn suggestions_print_a_deref_next_to_its_operand() {
    let errors = errors_of(quote!(&mut c, &s, {
        memset(&*result_d, 0u32);
        copy(&mut **a, &mut b);
        zero(*x.y);
    }));
    assert_eq!(
        errors,
        [
            "this operand is written: write `&mut *result_d`",
            "this operand is only read: write `&**a`",
            "a buffer operand is a place marked `&` (read) or `&mut` (write): write `&mut *x.y`",
        ]
    );
    // A multiplication keeps its spaces; a deref after an operator or a delimiter does not.
    let n = |e: syn::Expr| crate::ast::normalize(&e);
    assert_eq!(n(syn::parse_quote!(bufs[i * 2])), "bufs[i * 2]");
    assert_eq!(n(syn::parse_quote!(a * *b)), "a * *b");
    assert_eq!(n(syn::parse_quote!((*a).b)), "(*a).b");
    assert_eq!(n(syn::parse_quote!(f(*a, &*b))), "f(*a, &*b)");
}

#[test]
fn outer_derefs_name_the_same_place() {
    checked(
        quote!(&mut c, &s, {
            if a {
                k.scale(n, &mut *x).launch(cfg);
            } else {
                copy(&x, &mut (*y));
            }
            copy(&**y, &mut x);
            copy(&(*s).b, &mut *s.b);
        }),
        |c| {
            let keys: Vec<Vec<&str>> = c
                .nodes
                .iter()
                .map(|f| f.node.op.operands().iter().map(|o| o.key.as_str()).collect())
                .collect();
            // `(*s).b` keeps its inner deref: `s.b` may be another field where `s` is a smart
            // pointer with a field `b` of its own.
            assert_eq!(keys, [vec!["x"], vec!["x", "y"], vec!["y", "x"], vec!["(*s).b", "s.b"]]);
        },
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.axpy(n, &x, &mut *x).launch(cfg);
        })),
        [
            "`x` is used twice in one statement and written: read one buffer and write another (ping-pong buffers, swapped after the step), or split the buffer first (`split_at_mut`) so the two operands are different places"
        ]
    );
}

#[test]
fn same_place_twice_with_a_write_is_an_error() {
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.axpy(n, &x, &mut x).launch(cfg);
        })),
        [
            "`x` is used twice in one statement and written: read one buffer and write another (ping-pong buffers, swapped after the step), or split the buffer first (`split_at_mut`) so the two operands are different places"
        ]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            copy(&bufs[0 + 1], &mut bufs[1]);
        })),
        [
            "`bufs[1]` is used twice in one statement and written: read one buffer and write another (ping-pong buffers, swapped after the step), or split the buffer first (`split_at_mut`) so the two operands are different places"
        ]
    );
    // Two reads of one place, or one place in two statements, are fine.
    checked(
        quote!(&mut c, &s, {
            k.add(&x, &x, &mut y).launch(cfg);
            k.scale(&mut x).launch(cfg);
            copy(&x, &mut y);
        }),
        |c| assert_eq!(c.nodes.len(), 3),
    );
}

#[test]
fn launch_needs_launch_with_one_cfg() {
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.scale(n, &mut x);
        })),
        ["a kernel launch needs `.launch(cfg)`: write `k.scale(n, &mut x).launch(cfg)`"]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            let a = k.scale(n, &mut x).after(b);
        })),
        ["a kernel launch needs `.launch(cfg)`: write `k.scale(n, &mut x).launch(cfg)`"]
    );
    let cfg_msg = "`.launch(cfg)` takes one launch configuration: `LaunchConfig`, `LaunchDims`, `(grid, block)` or `((gx, gy, gz), (bx, by, bz))`";
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.scale(n, &mut x).launch(4, 256);
            k.scale(n, &mut x).launch();
        })),
        [cfg_msg, cfg_msg]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            scale(&mut x).launch(cfg);
        })),
        ["`.launch(cfg)` follows a kernel call: `k.kernel(args).launch(cfg)`"]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            k.scale::<f32>(&mut x).launch(cfg);
        })),
        ["kernel calls take no generic arguments"]
    );
}

#[test]
fn statement_words_check_their_arity() {
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            copy(&a);
            memset(&mut a, 0u32, 4);
            zero(&mut a, &mut b);
        })),
        [
            "`copy` takes 2 arguments: `copy(&src, &mut dst)`",
            "`memset` takes 2 arguments: `memset(&mut dst, value)`",
            "`zero` takes 1 argument: `zero(&mut dst)`",
        ]
    );
}

#[test]
fn for_with_literal_bounds_unrolls() {
    checked(
        quote!(&mut c, &s, {
            for i in 0..3 {
                k.axpy(n, &x, &mut bufs[i]).launch(cfg);
            }
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "axpy: kernel axpy x/r bufs[0]/w",
                    "axpy: kernel axpy x/r bufs[1]/w",
                    "axpy: kernel axpy x/r bufs[2]/w",
                ]
            );
        },
    );
    // Inclusive bounds, `_`, nested loops, index arithmetic folded into the key.
    checked(
        quote!(&mut c, &s, {
            for _ in 1..=2 {
                zero(&mut x);
            }
            for i in 0..2 {
                for j in 0..2 {
                    copy(&a[i], &mut m[2 * i + j]);
                }
            }
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "zero: zero x/w",
                    "zero: zero x/w",
                    "copy: copy a[0]/r m[0]/w",
                    "copy: copy a[0]/r m[1]/w",
                    "copy: copy a[1]/r m[2]/w",
                    "copy: copy a[1]/r m[3]/w",
                ]
            );
        },
    );
    checked(
        quote!(&mut c, &s, {
            for i in 3..3 {
                zero(&mut b[i]);
            }
        }),
        |c| assert!(c.nodes.is_empty()),
    );
}

#[test]
fn for_runtime_count_rules() {
    // Non-literal bounds are a run-time count: the body is checked once, with its own rules.
    let place = "a place inside a run-time graph `for` cannot use the loop variable `i`: every place is borrowed once before the body runs; use literal bounds (`for i in 0..4`) to unroll the loop, or pick the buffer before `graph!`";
    let errors = errors_of(quote!(&mut c, &s, {
        for i in 0..n {
            zero(&mut b[i]);
        }
        for i in 0.. {
            zero(&mut b[i]);
        }
        for i in v {
            zero(&mut b[i]);
        }
        for i in 0..N + 1 {
            zero(&mut b[i]);
            k.f(i as u32, &mut x).launch(cfg);
        }
        for _ in 0..n {
            if go {
                zero(&mut x);
            }
            for _ in 0..m {
                zero(&mut x);
            }
            for j in 0..2 {
                zero(&mut b[j]);
            }
        }
    }));
    assert_eq!(
        errors,
        [
            place.to_string(),
            "a graph `for` range needs both bounds: `for i in 0..k`".into(),
            "a graph `for` iterates over a range: `for i in 0..4` (literal bounds: unrolled at compile time) or `for i in 0..k` (`usize` bounds: a run-time count)".into(),
            place.into(),
            "a host `if` cannot be inside a graph `for` with a run-time count (each iteration could take another branch): move it out of the loop, or use literal bounds to unroll the loop".into(),
            "a graph `for` with a run-time count cannot be inside another one: give one of the two literal bounds".into(),
        ]
    );
    // Accepted: scalars may use the loop variable; one node per body statement in the plan.
    let ok = errors_of(quote!(&mut c, &s, {
        for i in a..=b {
            let s = k.f(i as u32, &mut x).launch(cfg);
            fill(&mut y, 1.5f64).after(s);
        }
    }));
    assert!(ok.is_empty(), "{ok:?}");
    let big = (MAX_UNROLL + 1) as usize;
    assert_eq!(
        errors_of(quote!(&mut c, &s, { for i in 0..#big { zero(&mut b[i]); } })),
        [format!("a graph `for` unrolls to at most {MAX_UNROLL} iterations")]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            for (i, j) in 0..2 {
                zero(&mut b[i]);
            }
        })),
        ["a graph `for` binds a plain name: `for i in 0..N`"]
    );
}

#[test]
fn errors_in_an_unrolled_body_repeat_identically() {
    // One per iteration, all equal (rustc shows identical errors once).
    let errors = errors_of(quote!(&mut c, &s, {
        for i in 0..2 {
            println!("{}", i);
        }
    }));
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0], errors[1]);
    assert!(errors[0].starts_with("macro calls are not graph statements; allowed statements:"));
}

#[test]
fn if_else_conditions_are_recorded() {
    checked(
        quote!(&mut c, &s, {
            zero(&mut x);
            if step % 100 == 0 {
                let r = k.residual(&u, &mut r).launch(cfg);
                copy(&r, &mut host);
            } else {
                memset(&mut f, 1u32);
            }
            if a {
                if b.c {
                    zero(&mut y);
                }
            } else if d {
                zero(&mut z);
            } else {
                zero(&mut w);
            }
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "zero: zero x/w",
                    "r: kernel residual u/r r/w if step % 100 == 0",
                    "copy: copy r/r host/w if step % 100 == 0",
                    "memset: memset f/w if !(step % 100 == 0)",
                    "zero: zero y/w if a && b.c",
                    "zero: zero z/w if !(a) && d",
                    "zero: zero w/w if !(a) && !(d)",
                ]
            );
            assert_eq!(c.conditions, 4);
        },
    );
}

#[test]
fn too_many_ifs_are_an_error() {
    let ifs = (0..=crate::check::MAX_CONDITIONS).map(|_| {
        quote!(if c {
            zero(&mut x);
        })
    });
    assert_eq!(
        errors_of(quote!(&mut c, &s, { #(#ifs)* })),
        [format!("a graph body may have at most {} host `if`s", crate::check::MAX_CONDITIONS)]
    );
}

#[test]
fn non_graph_statements_are_errors() {
    let allowed = "allowed statements: `KERNELS.name(args).launch(cfg)`, `copy(&src, &mut dst)`, \
`memset(&mut dst, value)`, `fill(&mut dst, value)`, `zero(&mut dst)`, `capture(&a, &mut b, |s, (a, b)| { … })`, \
`child(&mut graph)`, `host(&a, &mut b, move |(a, b)| { … })`, `empty()`, `event_record(&event)`, `event_wait(&event)`, `let tmp = alloc::<T>(n)` (a graph-owned buffer; `free(&mut tmp)`), `copy_2d(&src, src_rows, &mut dst, dst_rows)`, `memset_2d(&mut dst, rows, value)`, each optionally `let name = …` and `.after(names)`; \
`if cond { … } else { … }`; `for i in 0..N { … }` (integer literal bounds: unrolled; other `usize` bounds: a run-time count); \
`let c = condition(default);` then `device_while(c, { … })`, `device_if(c, { … })`, `device_if(c, { … }, { … })` or `device_switch(c, { … }, …)`";
    let not_graph = format!("not a graph statement; {allowed}");
    let cases: [(TokenStream, String); 9] = [
        (quote!(let x = 5;), not_graph.clone()),
        (quote!(a + b;), not_graph.clone()),
        (quote!(return;), not_graph.clone()),
        (quote!(loop {}), not_graph.clone()),
        (
            quote!(while go {
                zero(&mut x);
            }),
            not_graph.clone(),
        ),
        (
            quote!(println!("step {}", n);),
            format!("macro calls are not graph statements; {allowed}"),
        ),
        (
            quote!(
                fn helper() {}
            ),
            format!("items are not graph statements; {allowed}"),
        ),
        (quote!(scatter(&mut x);), format!("`scatter` is not a graph statement; {allowed}")),
        (quote!(ops::copy(&a, &mut b);), not_graph.clone()),
    ];
    for (stmt, msg) in cases {
        let errors = errors_of(quote!(&mut c, &s, { #stmt }));
        assert_eq!(errors, [msg], "for `{stmt}`");
    }
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            let (a, b) = zero(&mut x);
        })),
        ["a graph `let` binds a plain name: `let name = statement;`"]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            let a;
        })),
        ["a graph `let` needs a statement: `let name = k.kernel(args).launch(cfg);`"]
    );
    assert_eq!(
        errors_of(quote!(&mut c, &s, {
            let a = zero(&mut x) else { return };
        })),
        ["`let … else` is not a graph statement"]
    );
}

#[test]
fn all_errors_of_a_body_are_collected() {
    // Parse errors (in the body and in an `if`) and check errors, all from one invocation.
    let errors = errors_of(quote!(&mut c, &s, {
        let a = k.x(&mut u).launch(cfg).after(nope);
        println!("hi");
        if flag {
            k.y(&make(), &mut v).launch(cfg);
        }
        k.z(&w, &mut w).launch(cfg);
        let a = zero(&mut v);
    }));
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(errors[0].starts_with("macro calls are not graph statements"));
    assert!(errors[1].starts_with("a buffer operand must be a place"));
    assert!(errors[2].starts_with("duplicate node name `a`"));
    assert!(errors[3].starts_with("unknown node `nope`"));
    assert!(errors[4].starts_with("`w` is used twice in one statement"));
}

#[test]
fn combined_errors_are_in_source_order() {
    let (input, mut errors) = lower(text(
        "&mut c, &s, {\n    zero(&mut u).after(nope);\n    memset(&x, 0u32);\n    k.a(&v, &mut v).launch(cfg);\n}",
    ));
    check(&input, &mut errors);
    // Found in pass order: the parse error of line 3 first, then the check errors of 2 and 4.
    let found = errors.messages();
    assert!(found[0].starts_with("this operand is written"), "{found:#?}");
    let combined = errors.combine().expect("errors");
    let lines: Vec<usize> = combined.into_iter().map(|e| e.span().start().line).collect();
    assert_eq!(lines, [2, 3, 4]);
}

#[test]
fn malformed_input_is_a_parse_error() {
    assert!(parse(quote!(&mut cache)).is_err());
    assert!(parse(quote!(&mut cache, &stream)).is_err());
    assert!(parse(quote!(&mut cache, &stream, zero(&mut x))).is_err());
    assert!(parse(quote!(&mut cache, &stream, {},)).is_ok());
}

#[test]
fn empty_body_has_no_nodes() {
    checked(quote!(&mut c, &s, {}), |c| {
        assert!(c.nodes.is_empty());
        assert!(c.after.is_empty());
        assert_eq!(c.conditions, 0);
    });
}

#[test]
fn if_let_conditions_are_rejected() {
    let e = errors_of(quote! { &mut c, &s, {
        if let Some(buf) = &mut other { zero(&mut buf); }
    }});
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("`if let` bindings are not allowed"), "{e:?}");
}

#[test]
fn parenthesized_deref_is_a_different_place() {
    // `*a.b` is the place `a.b` (an outer deref), `(*a).b` another (an inner one).
    checked(quote! { &mut c, &s, { zero(&mut *a.b); zero(&mut (*a).b); zero(&mut (x)); } }, |c| {
        assert_eq!(summary(c), ["zero: zero a.b/w", "zero: zero (*a).b/w", "zero: zero x/w"]);
    });
}

#[test]
fn unrolling_keeps_fields_and_methods_named_like_the_variable() {
    checked(
        quote! { &mut c, &s, { for n in 0..2 { k.f(p.n, n, &mut bufs[n]).launch(cfg); } } },
        |c| {
            let Op::Launch { args, .. } = &c.nodes[1].node.op else { panic!("a launch") };
            let Arg::Scalar(first) = &args[0] else { panic!("a scalar") };
            assert_eq!(crate::ast::normalize(first), "p.n");
            let Arg::Scalar(second) = &args[1] else { panic!("a scalar") };
            assert_eq!(crate::ast::normalize(second), "1");
            assert_eq!(summary(c)[1], "f: kernel f bufs[1]/w");
        },
    );
}

#[test]
fn a_loop_without_iterations_is_still_checked() {
    let e = errors_of(quote! { &mut c, &s, { for i in 0..0 { println!("x"); } } });
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("macro calls are not graph statements"), "{e:?}");
}

#[test]
fn constant_and_variable_index_expressions_are_places() {
    checked(
        quote! { &mut c, &s, { zero(&mut bufs[N - 1]); zero(&mut bufs[(j + 1) * 2]); } },
        |c| {
            assert_eq!(summary(c), ["zero: zero bufs[N - 1]/w", "zero: zero bufs[(j + 1) * 2]/w"]);
        },
    );
    let e = errors_of(quote! { &mut c, &s, { zero(&mut bufs[f()]); } });
    assert_eq!(e.len(), 1, "{e:?}");
}

#[test]
fn nested_loops_have_a_total_cap() {
    let e = errors_of(quote! { &mut c, &s, {
        for i in 0..4096 { for j in 0..4096 { zero(&mut x); } }
    }});
    assert!(e.iter().any(|m| m.contains("unroll to more than 16384 statements")), "{e:?}");
}

#[test]
fn nested_loops_count_each_statement_once() {
    // 3 × 3333 + 1 = 10 000 statements, under the cap (the inner loop's statements were
    // once counted again by the outer one, which refused this at 19 998).
    let e = errors_of(quote! { &mut c, &s, {
        zero(&mut x);
        for _ in 0..3 { for _ in 0..3333 { zero(&mut x); } }
    }});
    assert!(e.is_empty(), "{e:?}");
    let e = errors_of(quote! { &mut c, &s, {
        for _ in 0..5 { for _ in 0..3333 { zero(&mut x); } }
    }});
    assert!(e.iter().any(|m| m.contains("unroll to more than 16384 statements")), "{e:?}");
}

#[test]
fn device_statements_lower_to_a_conditional_node_followed_by_its_bodies() {
    checked(
        text(
            "&mut cache, &stream, {
                k.init(&mut x).launch(cfg);
                let c = condition(1);
                let w = device_while(c, {
                    k.step(c, &mut x).launch(cfg);
                    let d = condition(0);
                    k.test(d, &x).launch(cfg);
                    device_if(d, { zero(&mut y); }, { k.other(&mut y).launch(cfg); });
                });
                k.last(&x, &mut y).launch(cfg);
            }",
        ),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "init: kernel init x/w",
                    "w: device_while(c)",
                    "step: kernel step x/w in n1.0",
                    "test: kernel test x/r in n1.0",
                    "device_if: device_if(d) in n1.0",
                    "zero: zero y/w in n4.0",
                    "other: kernel other y/w in n4.1",
                    "last: kernel last x/r y/w",
                ]
            );
            assert_eq!(c.bodies, [(2, 1, 0), (3, 1, 0), (4, 1, 0), (5, 4, 0), (6, 4, 1)]);
        },
    );
}

#[test]
fn device_conditions_are_checked() {
    let (input, mut errors) = lower(text(
        "&mut cache, &stream, {
            let a = k.f(&mut x).launch(cfg);
            let c = condition(1);
            let unused = condition(1);
            device_while(flag, { k.f(&mut x).launch(cfg); });
            device_while(c, { let b = k.f(&mut x).launch(cfg).after(a); });
            k.g(&x).launch(cfg).after(b);
        }",
    ));
    check(&input, &mut errors);
    let m = errors.messages();
    assert_eq!(m.len(), 4, "{m:#?}");
    for what in [
        "drives no device statement",
        "`flag` is not a device condition",
        "node `a` is in another graph",
        "node `b` is not in scope here",
    ] {
        assert!(m.iter().any(|e| e.contains(what)), "{what}: {m:#?}");
    }
}

#[test]
fn device_statements_and_run_time_for_do_not_nest() {
    // A device statement or condition in a run-time `for`, a run-time `for` in a device body
    // (also under an `if` or an unrolled `for` there): each an error on the user's tokens.
    let errors = errors_of(text(
        "&mut cache, &stream, {
            for _ in 0..n {
                let c = condition(1);
                device_while(c, { k.f(c, &mut x).launch(cfg); });
            }
            let d = condition(1);
            device_while(d, {
                for _ in 0..n { k.f(d, &mut x).launch(cfg); }
                if go { for _ in 0..m { zero(&mut y); } }
                for _ in 0..2 { for _ in a..b { zero(&mut y); } }
            });
        }",
    ));
    // The unrolled `for` reports its iterations once each (identical: rustc shows one).
    assert_eq!(errors.len(), 6, "{errors:#?}");
    assert!(errors[0].starts_with(
        "a device condition cannot be declared inside a graph `for` with a run-time count"
    ));
    assert!(
        errors[1]
            .starts_with("`device_while` cannot be inside a graph `for` with a run-time count")
    );
    for e in &errors[2..] {
        assert!(
            e.starts_with(
                "a graph `for` with a run-time count cannot be inside a body of `device_while`"
            ),
            "{e}"
        );
    }
}

#[test]
fn run_time_for_next_to_device_statements_and_fill_in_bodies() {
    // Accepted: a run-time `for` beside a device statement, `fill` and unrolled `for`s in a
    // body. The loop's nodes are outside every body; the bodies' nodes outside every loop.
    checked(
        text(
            "&mut cache, &stream, {
                for _ in 0..n { k.f(&mut x).launch(cfg); }
                let c = condition(1);
                device_while(c, {
                    fill(&mut y, 2.0f32);
                    for _ in 0..2 { k.g(c, &x, &mut y).launch(cfg); }
                });
            }",
        ),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "f: kernel f x/w if for _ in 0 .. n",
                    "device_while: device_while(c)",
                    "fill: fill y/w in n1.0",
                    "g: kernel g x/r y/w in n1.0",
                    "g: kernel g x/r y/w in n1.0",
                ]
            );
            let looped: Vec<_> = c.nodes.iter().map(|f| f.looped).collect();
            assert_eq!(looped, [Some(0), None, None, None, None]);
        },
    );
}

#[test]
fn eager_refuses_device_statements_at_compile_time() {
    let tokens = text(
        "&stream, {
            let c = condition(1);
            device_while(c, { k.f(c, &mut x).launch(cfg); });
            for _ in 0..n { zero(&mut x); }
        }",
    );
    let out = crate::eager(tokens).to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("cannot run in `eager!`"), "{out}");
    assert!(!out.contains("drives no device statement"), "{out}");
}

#[test]
fn a_graph_owned_buffer_is_a_place_from_its_alloc_to_its_free_added_after_the_last_statement() {
    checked(
        quote!(&mut c, &s, {
            let tmp = alloc::<f32>(n);
            k.a(n, &x, &mut tmp).launch(cfg);
            if flag {
                k.b(n, &tmp, &mut y).launch(cfg);
            }
            copy(&tmp, &mut z);
        }),
        |c| {
            assert_eq!(
                summary(c),
                [
                    "tmp: alloc tmp/w",
                    "a: kernel a x/r tmp/w",
                    "b: kernel b tmp/r y/w if flag",
                    "copy: copy tmp/r z/w",
                    "free: free tmp/w",
                ]
            );
        },
    );
    // An explicit free: no other is added, and it may come before other statements.
    checked(
        quote!(&mut c, &s, {
            let t = alloc::<u32>(8);
            zero(&mut t);
            free(&mut t);
            zero(&mut y);
        }),
        |c| {
            assert_eq!(
                summary(c),
                ["t: alloc t/w", "zero: zero t/w", "free: free t/w", "zero: zero y/w"]
            )
        },
    );
}

#[test]
fn graph_owned_buffer_misuse_is_refused() {
    // The name `t` allocated again after its free (two errors, checked below).
    let realloc = quote!({
        let t = alloc::<f32>(n);
        zero(&mut t);
        free(&mut t);
        let t = alloc::<f32>(n);
        zero(&mut t);
    });
    let cases: Vec<(TokenStream, &str)> = vec![
        (
            quote!({
                let t = alloc::<f32>(n);
                free(&mut t);
                zero(&mut t);
            }),
            "`t` is used after its `free` at line",
        ),
        (
            quote!({
                zero(&mut t);
                let t = alloc::<f32>(n);
            }),
            "`t` is used before its `let t = alloc::<T>(n);`",
        ),
        (
            quote!({
                if f {
                    let t = alloc::<f32>(n);
                    zero(&mut t);
                }
            }),
            "`alloc` is a statement of the top level of the body only",
        ),
        (
            quote!({
                for i in 0..2 {
                    let t = alloc::<f32>(n);
                }
            }),
            "`alloc` is a statement of the top level of the body only",
        ),
        (
            quote!({
                let t = alloc::<f32>(n);
                if f {
                    free(&mut t);
                }
            }),
            "`free` is a statement of the top level of the body only",
        ),
        (
            quote!({
                free(&mut x);
            }),
            "`free` takes a graph-owned buffer made earlier in this body",
        ),
        (
            quote!({
                let t = alloc::<f32>(n);
                free(&mut t);
                free(&mut t);
            }),
            "`t` is already freed at line",
        ),
        (
            quote!({
                let t = alloc::<f32>(n);
                host(&t, move |(t,)| {});
            }),
            "`t` is a graph-owned buffer: `host` cannot use it",
        ),
        (
            quote!({
                let t = alloc::<f32>(n);
                capture(&mut t, |s, (t,)| Ok(()));
            }),
            "`t` is a graph-owned buffer: `capture` cannot use it",
        ),
        (
            quote!({
                alloc::<f32>(n);
            }),
            "a graph-owned buffer is used through its name",
        ),
        // A name allocated again after its free would give two alloc nodes one place (one
        // slot): a per-node update would resolve the first buffer's uses to the second's
        // address. Refused, with a message of its own (and as a duplicate node name).
        (realloc.clone(), "duplicate node name `t`"),
        (realloc, "`t` is already a graph-owned buffer (its `alloc` is at line"),
        (
            quote!({
                let t = alloc(n);
            }),
            "`alloc` takes the element type and the length",
        ),
        (
            quote!({
                let t = alloc::<f32>(n, 4);
            }),
            "`alloc` takes one argument",
        ),
    ];
    for (body, want) in cases {
        let errors = errors_of(quote!(&mut c, &s, #body));
        assert!(
            errors.iter().any(|e| e.contains(want)),
            "body {body}: want an error containing {want:?}, got {errors:?}"
        );
    }
    // Inside a device body.
    let errors = errors_of(quote!(&mut c, &s, {
        let c = condition(1);
        device_while(c, {
            let t = alloc::<u32>(4);
            k.step(c, &mut t).launch(cfg);
        });
    }));
    assert!(
        errors.iter().any(|e| e.contains("`alloc` is a statement of the top level")),
        "{errors:?}"
    );
}

#[test]
fn statements_that_could_act_on_a_closure_are_not_chunked() {
    let (input, _) = lower(quote!(&mut c, &s, {
        k.f(n, &mut x).launch(cfg);
        let named = k.f(n != m, a <= b, &mut x).launch(cfg);
        k.f(
            |v| match v {
                _ => 1,
            },
            &mut x,
        )
        .launch(cfg);
        k.f(or_return!(n), &mut x).launch(cfg);
        k.f(
            {
                state = state.next();
                state.v
            },
            &mut x,
        )
        .launch(cfg);
        k.f(n.parse()?, &mut x).launch(cfg);
        k.f(
            {
                a += 1;
                a
            },
            &mut x,
        )
        .launch(cfg);
        k.f(v.await, &mut x).launch(cfg);
    }));
    let chunked: Vec<bool> = input
        .body
        .iter()
        .map(|item| match item {
            Item::Node(n) => crate::expand::chunkable(n),
            _ => panic!("statements only"),
        })
        .collect();
    assert_eq!(chunked, [true, true, true, false, false, false, false, false]);
}

#[test]
fn the_iterations_of_an_unrolled_for_share_chunks() {
    // 1000 iterations of one statement, nested or not: ceil(1000 / 16) = 63 chunks, as 1000
    // written-out statements get. One chunk per iteration made type checking and clippy
    // quadratic and overflowed rustc's stack in debug builds. (A call in an argument keeps
    // the iterations from being made once: `repeated_iterations_are_made_once`.)
    for body in [
        quote!({
            for _ in 0..1000 {
                k.add(n, one(), &mut x).launch(cfg);
            }
        }),
        quote!({
            for j in 0..10 {
                for i in 0..100 {
                    k.add(n, i, &mut x).launch(cfg);
                    k.add(n, j, &mut x).launch(cfg);
                }
            }
        }),
    ] {
        let out = crate::graph(quote!(&mut c, &s, #body)).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("LazyChunk"), "{out}");
        let chunks = out.matches("__private :: chunk (").count();
        let want = if out.contains("one ()") { 63 } else { 125 };
        assert_eq!(chunks, want, "chunks of {body}");
    }
}

/// Which bodies make runs of iterations (later iterations in `__private::LazyChunk`s, words
/// `word_repeat` when `made_by` holds): only iterations with the same tokens (but for array
/// elements, below) whose expressions are literals, names, casts, tuples and struct literals of
/// them; a call, an operator, a field, an index, a `condition`, an `if` or an event statement
/// keeps each iteration evaluated as written.
#[test]
fn repeated_iterations_are_made_once() {
    let cases = [
        // (body, nodes listed as copies of the first iteration's)
        (
            quote!({
                for _ in 0..1000 {
                    k.add(n, 1, &mut x).launch(cfg);
                }
            }),
            Some(999),
        ),
        (
            quote!({
                for i in 0..4 {
                    k.add(n, 1u32 as u32, &mut x).launch(CFG);
                    copy(&x, &mut y);
                }
            }),
            Some(6),
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(N, -1, &mut x).launch(((1, 1, 1), (32, 1, 1), 0));
                }
            }),
            Some(2),
        ),
        (
            quote!({
                for _ in 0..3 {
                    memset(&mut x, 0u8);
                    zero(&mut y);
                    fill(&mut z, 1.5f32);
                    empty();
                }
            }),
            Some(8),
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, Cfg { v: 1 }, &mut x).launch(cfg);
                }
            }),
            Some(2),
        ),
        // The outer run (its first iteration's three statements made once; nested runs are not).
        (
            quote!({
                for _ in 0..2 {
                    for _ in 0..3 {
                        k.add(n, 1, &mut x).launch(cfg);
                    }
                }
            }),
            Some(3),
        ),
        // Iterations that differ, each holding a run of its own (two runs of 2 copies).
        (
            quote!({
                for j in 0..2 {
                    k.add(n, j, &mut x).launch(cfg);
                    for _ in 0..3 {
                        k.add(n, 1, &mut x).launch(cfg);
                    }
                }
            }),
            Some(2),
        ),
        // Different tokens: the loop variable in use (as an array index: below).
        (
            quote!({
                for i in 0..3 {
                    k.add(n, i as u32, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        // Expressions evaluated as written.
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, next(), &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, a.b, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, a + 1, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, -a, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, v[0], &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k.add(n, 1, &mut x).launch(cfg());
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    self.k.add(n, 1, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    k().add(n, 1, &mut x).launch(cfg);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    memset(&mut x, f());
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    event_record(&e);
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    let c = condition(1);
                    device_while(c, {
                        k.add(n, 1, &mut x).launch(cfg);
                    });
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    if on {
                        k.add(n, 1, &mut x).launch(cfg);
                    }
                }
            }),
            None,
        ),
        (
            quote!({
                for _ in 0..3 {
                    host(&mut p, |(p,)| p[0] += 1);
                }
            }),
            None,
        ),
    ];
    // Indexed runs: iterations that differ only in the element of an array (acquired in one
    // loop: every element written) each argument names. Their later iterations are lazy
    // chunks; their words are the elements' guards and contexts (put in as the array is
    // acquired) and one `word_handle` per operand that is not an element.
    let indexed = [
        (
            quote!({
                for i in 0..3 {
                    k.add(n, 1, &mut bufs[i]).launch(cfg);
                }
            }),
            2,
            0,
        ),
        (
            quote!({
                for i in 0..1000 {
                    k.acc(n, &p, &mut bufs[i]).launch(cfg);
                }
            }),
            999,
            1,
        ),
        (
            quote!({
                for i in 0..4 {
                    k.acc(n, &bufs[i], &mut out[i]).launch(cfg);
                    k.add(n, 2, &mut bufs[i]).launch(cfg);
                }
            }),
            6,
            0,
        ),
        (
            quote!({
                for i in 0..3 {
                    k.add(n, 1, &mut bufs[i]).launch(cfg);
                    k.add(n, 1, &mut bufs[2 - i]).launch(cfg);
                }
            }),
            4,
            0,
        ),
    ];
    for (body, copies, handles) in indexed {
        let out = crate::graph(quote!(&mut c, &s, #body)).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("made_by"), "{out}");
        assert!(
            out.contains(&format!("word_repeat (& mut __cudagraph_words , {copies}u64 ,")),
            "{out}"
        );
        assert_eq!(out.matches("word_handle (").count(), handles, "{body}");
        assert!(out.contains("acquire_mut_each"), "{out}");
        assert!(out.contains("LazyChunk"), "{out}");
    }
    // Not indexed: elements only read (no array acquired in one loop), an element and a
    // whole place that differ, an index that is not a constant.
    for body in [
        quote!({
            for i in 0..3 {
                k.acc(n, &bufs[i], &mut x).launch(cfg);
            }
        }),
        quote!({
            for i in 0..3 {
                k.acc(n, &src[i], &mut dst[i]).launch(cfg);
            }
        }),
        quote!({
            for i in 0..3 {
                k.add(n, 1, &mut bufs[i + off]).launch(cfg);
            }
        }),
    ] {
        let out = crate::graph(quote!(&mut c, &s, #body)).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("word_repeat") && !out.contains("LazyChunk"), "{out}");
    }
    for (body, copies) in cases {
        let out = crate::graph(quote!(&mut c, &s, #body)).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        let made = out.find("word_repeat").map(|at| {
            let rest = &out[at..];
            let n = rest.split(',').nth(1).expect("a count");
            n.trim().split("u64").next().expect("a count").to_string()
        });
        let want = copies.map(|c: usize| c.to_string());
        assert_eq!(made, want, "copies of {body}:\n{out}");
        assert_eq!(out.contains("LazyChunk"), copies.is_some(), "{body}");
        if body.to_string().contains("for j in") {
            assert_eq!(out.matches("word_repeat").count(), 2, "{out}");
        }
    }
    // The first iteration's statement count follows the copies: two per iteration here.
    let out = crate::graph(quote!(&mut c, &s, {
        k.add(n, 1, &mut x).launch(cfg);
        for i in 0..3 {
            k.add(n, 1, &mut bufs[i]).launch(cfg);
            k.add(n, 1, &mut bufs[2 - i]).launch(cfg);
        }
    }))
    .to_string();
    assert!(out.contains("word_repeat (& mut __cudagraph_words , 4u64 , 2u32)"), "{out}");
}

/// Review 18b: two adjacent unrolled `for`s that print alike are two runs, not one (one may be
/// written with a caller's variable and the other with a `macro_rules!` variable of the same
/// spelling, which only hygiene tells apart): each `for`'s later iterations are counted on
/// their own, after its own first iteration.
#[test]
fn adjacent_fors_that_print_alike_are_separate_runs() {
    let out = crate::graph(quote!(&mut c, &s, {
        for _ in 0..2 {
            k.add(n, b, &mut x).launch(cfg);
        }
        for _ in 0..3 {
            k.add(n, b, &mut x).launch(cfg);
        }
    }))
    .to_string();
    assert!(!out.contains("compile_error"), "{out}");
    let repeats: Vec<&str> = out.match_indices("word_repeat").map(|(at, _)| &out[at..]).collect();
    assert_eq!(repeats.len(), 2, "{out}");
    assert!(repeats[0].contains("word_repeat (& mut __cudagraph_words , 1u64 , 1u32)"), "{out}");
    assert!(repeats[1].starts_with("word_repeat (& mut __cudagraph_words , 2u64 , 1u32)"), "{out}");
    // Before: one run of 5 iterations (4 copies of the first).
    assert!(!out.contains("4u64"), "{out}");
}

/// The names the hygiene probe binds (`let NAME = …`, in order of first use) and how many other
/// occurrences it checks.
fn probed_names(tokens: TokenStream) -> Vec<(String, usize)> {
    let (input, mut errors) = lower(tokens);
    let c = check(&input, &mut errors);
    assert_eq!(errors.messages(), Vec::<String>::new());
    let text = crate::hygiene::probe(&c.nodes).to_string();
    let mut out = Vec::new();
    for part in text.split("let ").skip(1) {
        let name = part.split(' ').next().expect("a name").to_string();
        let rest = part.split("let ").next().unwrap_or("");
        let checks = rest.matches("(& ").count();
        out.push((name, checks));
    }
    out
}

#[test]
fn hygiene_probe_checks_every_repeated_variable_of_places_and_receivers() {
    // Roots, index variables and path receivers used twice or more are probed; fields,
    // uppercase names (statics, constants), `self` and names used once are not.
    let probed = probed_names(text(
        "cache, stream, {
            k.f(&mut x, &a.b, &self.c).launch(cfg);
            k.g(&mut bufs[j], &x, &a.b).launch(cfg);
            other.h(&mut y[J], &self.c, &BUFS[0]).launch(cfg);
            copy(&BUFS[0], &mut bufs[j + 1]);
            let t = alloc::<u32>(4);
            copy(&x, &mut t);
            free(&mut t);
        }",
    ));
    assert_eq!(
        probed,
        vec![
            ("x".to_string(), 2),
            ("a".to_string(), 1),
            ("k".to_string(), 1),
            ("bufs".to_string(), 1),
            ("j".to_string(), 1),
            ("t".to_string(), 2),
        ]
    );
    // A body whose names are each used once has no probe.
    assert_eq!(probed_names(text("cache, stream, { k.f(&mut x, &y).launch(cfg); }")), vec![]);
}
