//! Parsing: `graph!`'s input is ordinary Rust syntax (a block), parsed by `syn` and lowered into
//! the DSL's types. Every statement that is not a graph statement is an error on its own tokens;
//! all errors of one body are collected.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Block, Expr, ExprMethodCall, Ident, Lit, Pat, RangeLimits, Stmt, Token};

use crate::ast::{Arg, Condition, GraphInput, If, Item, Node, Op, Operand, normalize};
use crate::errors::Errors;

mod loops;

/// Most iterations one literal `for` may unroll to.
pub const MAX_UNROLL: u64 = 4096;

/// Most statements all `for`s of one body may unroll to together (nested loops multiply).
pub const MAX_UNROLLED_STATEMENTS: usize = 16384;

const ALLOWED: &str = "allowed statements: `KERNELS.name(args).launch(cfg)`, `copy(&src, &mut dst)`, \
`memset(&mut dst, value)`, `fill(&mut dst, value)`, `zero(&mut dst)`, `capture(&a, &mut b, |s, (a, b)| { … })`, `child(&mut graph)`, `host(&a, &mut b, move |(a, b)| { … })`, `empty()`, `event_record(&event)`, `event_wait(&event)`, `let tmp = alloc::<T>(n)` (a graph-owned buffer; `free(&mut tmp)`), `copy_2d(&src, src_rows, &mut dst, dst_rows)`, `memset_2d(&mut dst, rows, value)`, each optionally `let name = …` and `.after(names)`; \
`if cond { … } else { … }`; `for i in 0..N { … }` (integer literal bounds: unrolled; other `usize` bounds: a run-time count); \
`let c = condition(default);` then `device_while(c, { … })`, `device_if(c, { … })`, `device_if(c, { … }, { … })` or `device_switch(c, { … }, …)`";

/// The raw input before lowering.
pub struct RawInput {
    pub cache: Expr,
    pub stream: Expr,
    pub body: Block,
}

impl Parse for RawInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let cache = input.parse()?;
        input.parse::<Token![,]>()?;
        let stream = input.parse()?;
        input.parse::<Token![,]>()?;
        let body = input.parse()?;
        input.parse::<Option<Token![,]>>()?;
        Ok(RawInput { cache, stream, body })
    }
}

/// Parses and lowers `graph!`'s input. Returns the DSL (with the statements that could be
/// lowered) and the errors found.
pub fn parse(tokens: TokenStream) -> syn::Result<(GraphInput, Errors)> {
    let raw: RawInput = syn::parse2(tokens)?;
    let mut errors = Errors::default();
    let mut body = lower_block(&raw.body.stmts, &mut errors);
    add_frees(&mut body);
    let input = GraphInput {
        cache: raw.cache,
        stream: raw.stream,
        body,
        body_span: raw.body.brace_token.span.join(),
        register_plan: true,
        probes: core::mem::take(&mut errors.2),
    };
    Ok((input, errors))
}

/// `eager!`'s input: `STREAM, STATEMENT` or `STREAM, { BODY }`, lowered as a `graph!` body with
/// a cache in `Mode::Eager` made for the call, and no registered plan.
pub fn parse_eager(tokens: TokenStream) -> syn::Result<(GraphInput, Errors)> {
    struct RawEager {
        stream: Expr,
        body: Block,
    }
    impl Parse for RawEager {
        fn parse(input: ParseStream) -> syn::Result<Self> {
            let stream = input.parse()?;
            input.parse::<Token![,]>()?;
            let body = if input.peek(syn::token::Brace) {
                let b: Block = input.parse()?;
                input.parse::<Option<Token![,]>>()?;
                b
            } else {
                let rest: TokenStream = input.parse()?;
                let rest = {
                    let mut r: Vec<TokenTree> = rest.into_iter().collect();
                    if matches!(r.last(), Some(TokenTree::Punct(p)) if p.as_char() == ',') {
                        r.pop();
                    }
                    r.into_iter().collect::<TokenStream>()
                };
                syn::parse2(quote::quote!({ #rest; }))?
            };
            Ok(RawEager { stream, body })
        }
    }
    let raw: RawEager = syn::parse2(tokens)?;
    let mut errors = Errors::default();
    let mut body = lower_block(&raw.body.stmts, &mut errors);
    add_frees(&mut body);
    let input = GraphInput {
        cache: syn::parse_quote!(&mut ::cudagraph::GraphCache::eager()),
        stream: raw.stream,
        body,
        body_span: raw.body.brace_token.span.join(),
        register_plan: false,
        probes: core::mem::take(&mut errors.2),
    };
    Ok((input, errors))
}

/// Appends, after the last statement of the body, the free node of every graph-owned buffer
/// (`let tmp = alloc::<T>(n);` at the top level) that no `free(&mut tmp)` frees: so it is freed
/// after its last use, wherever that is (an `if` branch, a `for` body, a device body), and its
/// hazards order the free node after every use.
pub(crate) fn add_frees(body: &mut Vec<Item>) {
    fn frees(items: &[Item], out: &mut Vec<String>) {
        for item in items {
            match item {
                Item::Node(n) => match &n.op {
                    Op::Free { buffer, .. } => out.push(buffer.key.clone()),
                    Op::Conditional { bodies, .. } => bodies.iter().for_each(|b| frees(b, out)),
                    _ => {}
                },
                Item::If(i) => {
                    frees(&i.then, out);
                    frees(&i.els, out);
                }
                Item::Scope(b) | Item::For(b) => frees(b, out),
                Item::Loop(l) => frees(&l.body, out),
                Item::Condition(_) => {}
            }
        }
    }
    let mut freed = Vec::new();
    frees(body, &mut freed);
    let mut added = Vec::new();
    for item in body.iter() {
        let Item::Node(n) = item else { continue };
        let Op::Alloc { func, buffer, .. } = &n.op else { continue };
        if freed.contains(&buffer.key) {
            continue;
        }
        let func = Ident::new("free", func.span());
        let place = &buffer.place;
        let tokens = quote::quote_spanned!(n.span=> free(&mut #place););
        let buffer = Operand { write: true, ..buffer.clone() };
        added.push(Item::Node(Node {
            name: None,
            op: Op::Free { func, buffer },
            after: Vec::new(),
            tokens,
            span: n.span,
        }));
    }
    body.extend(added);
}

/// `let NAME = alloc::<TY>(LEN)`: `c` is the call, `name` the `let` name.
fn lower_alloc(c: &syn::ExprCall, name: Option<&Ident>, errors: &mut Errors) -> Option<Op> {
    const USAGE: &str = "let tmp = alloc::<f32>(n);";
    let Expr::Path(p) = &*c.func else { return None };
    let seg = &p.path.segments[0];
    let func = seg.ident.clone();
    let ty = match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            syn::GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    };
    let Some(ty) = ty else {
        errors.push(c, format!("`alloc` takes the element type and the length: `{USAGE}`"));
        return None;
    };
    if c.args.len() != 1 {
        errors.push(c, format!("`alloc` takes one argument, the length in elements: `{USAGE}`"));
        return None;
    }
    let Some(name) = name else {
        errors
            .push(c, format!("a graph-owned buffer is used through its name: bind it, `{USAGE}`"));
        return None;
    };
    let place: Expr = syn::parse_quote_spanned!(name.span()=> #name);
    let key = crate::hygiene::name(name);
    let buffer = Operand { write: true, place, key, span: c.span() };
    Some(Op::Alloc { func, ty, len: c.args[0].clone(), buffer })
}

fn is_alloc(c: &syn::ExprCall) -> bool {
    matches!(&*c.func, Expr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1
        && p.path.leading_colon.is_none() && p.path.segments[0].ident == "alloc")
}

/// How many statements `items` hold once unrolled (both branches of a host `if`, a run-time
/// `for`'s body once): what [`MAX_UNROLLED_STATEMENTS`] limits.
fn statements(items: &[Item]) -> usize {
    items
        .iter()
        .map(|i| match i {
            Item::Node(_) | Item::Condition(_) => 1,
            Item::Scope(v) | Item::For(v) => statements(v),
            Item::If(f) => statements(&f.then) + statements(&f.els),
            Item::Loop(l) => statements(&l.body),
        })
        .sum()
}

pub(crate) fn lower_block(stmts: &[Stmt], errors: &mut Errors) -> Vec<Item> {
    let mut items = Vec::new();
    for stmt in stmts {
        match stmt {
            Stmt::Local(local) => {
                let name = match &local.pat {
                    Pat::Ident(p)
                        if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() =>
                    {
                        Some(p.ident.clone())
                    }
                    other => {
                        errors.push(
                            other,
                            "a graph `let` binds a plain name: `let name = statement;`",
                        );
                        None
                    }
                };
                let Some(init) = &local.init else {
                    errors.push(
                        local,
                        "a graph `let` needs a statement: `let name = k.kernel(args).launch(cfg);`",
                    );
                    continue;
                };
                if let Some((_, diverge)) = &init.diverge {
                    errors.push(diverge, "`let … else` is not a graph statement");
                    continue;
                }
                if let Some(item) = lower_condition(name.clone(), &init.expr, errors) {
                    items.push(item);
                    continue;
                }
                if let Some(op) = lower_node(&init.expr, stmt, name.clone(), errors)
                    && name.is_some()
                {
                    items.push(Item::Node(op));
                }
            }
            Stmt::Expr(Expr::If(e), _) => {
                if let Some(i) = lower_if(e, errors) {
                    items.push(Item::If(i));
                }
            }
            Stmt::Expr(Expr::ForLoop(f), _) => {
                let iterations = unroll(f, errors);
                // An unrolled `for`'s iterations stay together (`Item::For`), so that a run of
                // iterations is only ever looked for inside one `for` (review 18b: two
                // adjacent `for`s that print alike, one written with a caller's variable and
                // one with a `macro_rules!` variable of the same spelling, were one run, and
                // the second's values were in no word).
                if !iterations.is_empty() && iterations.iter().all(|i| matches!(i, Item::Scope(_)))
                {
                    items.push(Item::For(iterations));
                } else {
                    items.extend(iterations);
                }
            }
            Stmt::Expr(e, _) => {
                if let Some(node) = lower_node(e, stmt, None, errors) {
                    items.push(Item::Node(node));
                }
            }
            Stmt::Item(item) => {
                errors.push(item, format!("items are not graph statements; {ALLOWED}"))
            }
            Stmt::Macro(m) => {
                errors.push(m, format!("macro calls are not graph statements; {ALLOWED}"))
            }
        }
    }
    items
}

fn lower_if(e: &syn::ExprIf, errors: &mut Errors) -> Option<If> {
    if contains_let(&e.cond) {
        errors.push(
            &e.cond,
            "a graph `if` condition is a plain `bool` evaluated on the host; `if let` bindings are not allowed (every place of the body is borrowed before the conditions run): compute the condition before `graph!`",
        );
    }
    let then = lower_block(&e.then_branch.stmts, errors);
    let els = match &e.else_branch {
        None => Vec::new(),
        Some((_, else_expr)) => match &**else_expr {
            Expr::Block(b) => lower_block(&b.block.stmts, errors),
            Expr::If(inner) => vec![Item::If(lower_if(inner, errors)?)],
            other => {
                errors.push(other, "expected `else { … }` or `else if`");
                Vec::new()
            }
        },
    };
    Some(If { cond: (*e.cond).clone(), then, els })
}

/// `for i in A..B { body }` with integer literal bounds: the body once per value, with every
/// `i` token replaced by the literal.
fn unroll(f: &syn::ExprForLoop, errors: &mut Errors) -> Vec<Item> {
    let var = match &*f.pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() => {
            Some(p.ident.clone())
        }
        Pat::Wild(_) => None,
        other => {
            errors.push(other, "a graph `for` binds a plain name: `for i in 0..N`");
            return Vec::new();
        }
    };
    let bounds = match &*f.expr {
        Expr::Range(r) => match (r.start.as_deref(), r.end.as_deref()) {
            (Some(a), Some(b)) => int_lit(a).zip(int_lit(b)).map(|(a, b)| match r.limits {
                RangeLimits::HalfOpen(_) => (a, b),
                RangeLimits::Closed(_) => (a, b.saturating_add(1)),
            }),
            _ => None,
        },
        _ => None,
    };
    let Some((start, end)) = bounds else {
        // Bounds that are not literals: a run-time count, the body lowered once.
        return loops::lower(f, var, errors).into_iter().collect();
    };
    if end.saturating_sub(start) > MAX_UNROLL {
        errors.push(&f.expr, format!("a graph `for` unrolls to at most {MAX_UNROLL} iterations"));
        return Vec::new();
    }
    let body = f.body.to_token_stream();
    if let Some(v) = &var {
        errors.2.extend(loop_variable_probe(v, &body));
    }
    let mut items = Vec::new();
    if start >= end {
        // No iteration: still check the body's statements once, so that it cannot hide errors.
        lower_block(&f.body.stmts, errors);
    }
    for k in start..end {
        let tokens = match &var {
            Some(v) => substitute(body.clone(), v, k),
            None => body.clone(),
        };
        if errors.1 > MAX_UNROLLED_STATEMENTS {
            errors.push(
                &f.expr,
                format!("the `for`s of this body unroll to more than {MAX_UNROLLED_STATEMENTS} statements"),
            );
            break;
        }
        match syn::parse2::<Block>(tokens) {
            Ok(block) => {
                // The iteration's statements, those of `for`s nested in it included (they
                // counted themselves while lowering: set, not add, so none counts twice).
                let before = errors.1;
                let lowered = lower_block(&block.stmts, errors);
                errors.1 = before + statements(&lowered);
                items.push(Item::Scope(lowered));
            }
            Err(e) => {
                errors.add(e);
                break;
            }
        }
    }
    items
}

/// `let` in a condition (`if let`, `if a && let …`).
fn contains_let(e: &Expr) -> bool {
    match e {
        Expr::Let(_) => true,
        Expr::Binary(b) => contains_let(&b.left) || contains_let(&b.right),
        Expr::Paren(p) => contains_let(&p.expr),
        _ => false,
    }
}

fn int_lit(e: &Expr) -> Option<u64> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// `tokens` with every use of the variable `var` replaced by `value`; a field or method name
/// that happens to be spelled like it (`p.i`, `x.i()`) is kept.
/// A block rustc checks, for `for var in A..B { body }` unrolled by [`substitute`], which
/// replaces every `var` token of the body by its text: a binding of `var` with the pattern's
/// span, then each token `substitute` replaces, as an expression of its own span. A token of
/// another macro context (a caller's `i` inside a `macro_rules!` argument, beside the macro's
/// own `for i`) does not name that binding under `macro_rules!` hygiene, so it is a compile
/// error on that token (review 18b: it was replaced as the loop variable, silently naming
/// other places). Compiles to nothing.
fn loop_variable_probe(var: &Ident, body: &TokenStream) -> TokenStream {
    fn uses(tokens: TokenStream, var: &Ident, out: &mut Vec<Ident>) {
        let mut after_dot = false;
        for tt in tokens {
            let field = after_dot;
            after_dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
            match tt {
                TokenTree::Ident(i) if !field && crate::hygiene::same_name(&i, var) => out.push(i),
                TokenTree::Group(g) => uses(g.stream(), var, out),
                _ => {}
            }
        }
    }
    let mut found = Vec::new();
    uses(body.clone(), var, &mut found);
    if found.is_empty() {
        return TokenStream::new();
    }
    let checks = found.iter().map(|i| {
        quote::quote_spanned! {i.span()=>
            ::cudagraph::__private::loop_variable(&#i);
        }
    });
    quote::quote! {
        #[allow(unused_variables, clippy::let_unit_value)]
        {
            let #var = ::cudagraph::__private::LoopVariable;
            #(#checks)*
        }
    }
}

fn substitute(tokens: TokenStream, var: &Ident, value: u64) -> TokenStream {
    let mut after_dot = false;
    tokens
        .into_iter()
        .map(|tt| {
            let field = after_dot;
            after_dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
            (tt, field)
        })
        .map(|(tt, field)| match tt {
            TokenTree::Ident(ref i) if !field && crate::hygiene::same_name(i, var) => {
                let mut lit = proc_macro2::Literal::u64_unsuffixed(value);
                // At `i` for error messages, but marked as macro output: lints such as
                // clippy's `erasing_op` would otherwise fire on the user's `2 * i` with `i = 0`.
                lit.set_span(Span::call_site().located_at(i.span()));
                TokenTree::Literal(lit)
            }
            TokenTree::Group(g) => {
                let mut n =
                    proc_macro2::Group::new(g.delimiter(), substitute(g.stream(), var, value));
                n.set_span(g.span());
                TokenTree::Group(n)
            }
            other => other,
        })
        .collect()
}

/// `device_while(c, { … })`, `device_if(c, { … })`, `device_if(c, { … }, { … })`,
/// `device_switch(c, { … }, { … }, …)`: the condition's name, then the bodies as blocks of graph
/// statements.
fn lower_device(c: &syn::ExprCall, func: Ident, errors: &mut Errors) -> Option<Op> {
    let word = func.to_string();
    let usage = match word.as_str() {
        "device_while" => "device_while(c, { … })",
        "device_if" => "device_if(c, { … })` or `device_if(c, { … }, { … })",
        _ => "device_switch(c, { case 0 }, { case 1 }, …)",
    };
    let bodies_ok = match word.as_str() {
        "device_while" => c.args.len() == 2,
        "device_if" => c.args.len() == 2 || c.args.len() == 3,
        _ => c.args.len() >= 2,
    };
    if !bodies_ok {
        errors.push(c, format!("`{word}` takes a device condition and its bodies: `{usage}`"));
        return None;
    }
    let cond = match &c.args[0] {
        Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            p.path.get_ident().cloned()
        }
        other => {
            errors.push(
                other,
                format!("the first argument of `{word}` is the name of a device condition declared with `let c = condition(default);`"),
            );
            None
        }
    };
    let mut bodies = Vec::new();
    for a in c.args.iter().skip(1) {
        match a {
            Expr::Block(b) if b.label.is_none() => {
                let body = lower_block(&b.block.stmts, errors);
                loops::check_device_body(&body, &func, errors);
                bodies.push(body);
            }
            other => errors.push(
                other,
                format!("a body of `{word}` is a block of graph statements: `{usage}`"),
            ),
        }
    }
    (bodies.len() + 1 == c.args.len()).then_some(())?;
    Some(Op::Conditional { func, cond: cond?, bodies })
}

/// `let name = condition(default);`.
fn lower_condition(name: Option<Ident>, init: &Expr, errors: &mut Errors) -> Option<Item> {
    let Expr::Call(c) = strip_parens(init) else { return None };
    let func = match &*c.func {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().cloned(),
        _ => None,
    }?;
    if func != "condition" {
        return None;
    }
    if c.args.len() != 1 {
        errors.push(c, "`condition` takes the value the condition has at the start of every launch: `let c = condition(default);` (a `u32`)");
        return Some(Item::Scope(Vec::new()));
    }
    let name = name?;
    Some(Item::Condition(Condition { name, default: c.args[0].clone(), func }))
}

/// Lowers one node statement (`OP`, `OP.after(…)`), with `stmt` giving its tokens.
fn lower_node(expr: &Expr, stmt: &Stmt, name: Option<Ident>, errors: &mut Errors) -> Option<Node> {
    let mut e = strip_parens(expr);
    let mut after = Vec::new();
    if let Expr::MethodCall(m) = e
        && m.method == "after"
    {
        {
            for a in &m.args {
                match a {
                    Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
                        after.push(p.path.get_ident().unwrap().clone());
                    }
                    other => errors
                        .push(other, "`.after(…)` takes names of earlier nodes: `.after(a, b)`"),
                }
            }
            if m.args.is_empty() {
                errors.push(&m.method, "`.after(…)` needs at least one node name");
            }
            e = strip_parens(&m.receiver);
        }
    }
    let op = match e {
        Expr::MethodCall(m) if m.method == "launch" => lower_launch(m, errors)?,
        Expr::MethodCall(m) if m.method == "after" => {
            errors.push(&m.method, "write all dependencies in one `.after(a, b)`");
            return None;
        }
        Expr::MethodCall(m) => {
            errors.push(
                m,
                format!(
                    "a kernel launch needs `.launch(cfg)`: write `{}.launch(cfg)`",
                    normalize(m)
                ),
            );
            return None;
        }
        Expr::Call(c) if is_alloc(c) => lower_alloc(c, name.as_ref(), errors)?,
        Expr::Call(c) => lower_call(c, errors)?,
        other => {
            errors.push(other, format!("not a graph statement; {ALLOWED}"));
            return None;
        }
    };
    Some(Node { name, op, after, tokens: stmt.to_token_stream(), span: stmt.span() })
}

fn strip_parens(mut e: &Expr) -> &Expr {
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    e
}

fn lower_launch(m: &ExprMethodCall, errors: &mut Errors) -> Option<Op> {
    if m.args.len() != 1 {
        // On `launch(…)`, not on the whole statement.
        let mut call = m.method.to_token_stream();
        m.paren_token.surround(&mut call, |t| m.args.to_tokens(t));
        errors.push(call, "`.launch(cfg)` takes one launch configuration: `LaunchConfig`, `LaunchDims`, `(grid, block)` or `((gx, gy, gz), (bx, by, bz))`");
        return None;
    }
    let cfg = m.args[0].clone();
    let Expr::MethodCall(call) = strip_parens(&m.receiver) else {
        errors.push(
            &m.receiver,
            "`.launch(cfg)` follows a kernel call: `k.kernel(args).launch(cfg)`",
        );
        return None;
    };
    if let Some(t) = &call.turbofish {
        errors.push(t, "kernel calls take no generic arguments");
    }
    let mut args = Vec::new();
    let mut ok = true;
    for a in &call.args {
        match a {
            Expr::Reference(_) => match lower_operand(a, None, errors) {
                Some(o) => args.push(Arg::Buffer(o)),
                None => ok = false,
            },
            other => args.push(Arg::Scalar(other.clone())),
        }
    }
    ok.then(|| Op::Launch {
        receiver: (*call.receiver).clone(),
        kernel: call.method.clone(),
        args,
        parens: call.paren_token.span.join(),
        launch: m.method.clone(),
        cfg,
    })
}

fn lower_call(c: &syn::ExprCall, errors: &mut Errors) -> Option<Op> {
    let func = match &*c.func {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().cloned(),
        _ => None,
    };
    let Some(func) = func else {
        errors.push(c, format!("not a graph statement; {ALLOWED}"));
        return None;
    };
    let args: Vec<&Expr> = c.args.iter().collect();
    let word = func.to_string();
    let arity = |n: usize, usage: &str, errors: &mut Errors| {
        if args.len() != n {
            errors.push(
                c,
                format!("`{word}` takes {n} argument{}: `{usage}`", if n == 1 { "" } else { "s" }),
            );
            false
        } else {
            true
        }
    };
    match word.as_str() {
        "device_while" | "device_if" | "device_switch" => lower_device(c, func, errors),
        "condition" => {
            errors.push(
                c,
                "a device condition is declared with a name: `let c = condition(default);`",
            );
            None
        }
        "copy" => {
            if !arity(2, "copy(&src, &mut dst)", errors) {
                return None;
            }
            let src = lower_operand(args[0], Some(false), errors);
            let dst = lower_operand(args[1], Some(true), errors);
            Some(Op::Copy { func, src: src?, dst: dst? })
        }
        "memset" => {
            if !arity(2, "memset(&mut dst, value)", errors) {
                return None;
            }
            let dst = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Memset { func, dst, value: args[1].clone() })
        }
        "fill" => {
            if !arity(2, "fill(&mut dst, value)", errors) {
                return None;
            }
            let dst = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Fill { func, dst, value: args[1].clone() })
        }
        "zero" => {
            if !arity(1, "zero(&mut dst)", errors) {
                return None;
            }
            let dst = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Zero { func, dst })
        }
        "child" => {
            if !arity(1, "child(&mut graph)", errors) {
                return None;
            }
            let graph = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Child { func, graph })
        }
        "event_record" | "event_wait" => {
            if !arity(1, &format!("{word}(&event)"), errors) {
                return None;
            }
            Some(Op::Event { func, event: args[0].clone() })
        }
        "copy_2d" => {
            if !arity(4, "copy_2d(&src, src_rows, &mut dst, dst_rows)", errors) {
                return None;
            }
            let src = lower_operand(args[0], Some(false), errors);
            let dst = lower_operand(args[2], Some(true), errors);
            Some(Op::Copy2d {
                func,
                src: src?,
                src_rows: args[1].clone(),
                dst: dst?,
                dst_rows: args[3].clone(),
            })
        }
        "memset_2d" => {
            if !arity(3, "memset_2d(&mut dst, rows, value)", errors) {
                return None;
            }
            let dst = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Memset2d { func, dst, rows: args[1].clone(), value: args[2].clone() })
        }
        "free" => {
            if !arity(1, "free(&mut tmp)", errors) {
                return None;
            }
            let buffer = lower_operand(args[0], Some(true), errors)?;
            Some(Op::Free { func, buffer })
        }
        "empty" => {
            if !arity(0, "let joined = empty().after(a, b);", errors) {
                return None;
            }
            Some(Op::Empty { func })
        }
        "host" => {
            const USAGE: &str = "host(&a, &mut b, move |(a, b)| { … })";
            let closure = match args.last() {
                Some(Expr::Closure(_)) => args[args.len() - 1].clone(),
                _ => {
                    errors.push(
                        c,
                        format!(
                            "`host` takes the pinned host buffers the closure reads (`&x`) and \
                             writes (`&mut y`), then the closure, which gets them as slices: \
                             `{USAGE}` (`host(move |()| {{ … }})` with none)"
                        ),
                    );
                    return None;
                }
            };
            let listed = &args[..args.len() - 1];
            let operands: Vec<Option<Operand>> =
                listed.iter().map(|e| lower_operand(e, None, errors)).collect();
            let operands = operands.into_iter().collect::<Option<Vec<_>>>()?;
            Some(Op::Host { func, operands, closure })
        }
        "capture" => {
            const USAGE: &str = "capture(&a, &mut b, |s, (a, b)| { … })";
            let closure = match args.last() {
                Some(Expr::Closure(_)) => args[args.len() - 1].clone(),
                _ => {
                    errors.push(
                        c,
                        format!(
                            "`capture` takes the buffers the captured work reads (`&x`) and \
                             writes (`&mut y`), then a closure that does the work on their views: \
                             `{USAGE}`"
                        ),
                    );
                    return None;
                }
            };
            let mut listed = &args[..args.len() - 1];
            // `key = EXPR` right before the closure.
            let mut key = None;
            if let Some(Expr::Assign(a)) = listed.last()
                && matches!(&*a.left, Expr::Path(p) if p.path.is_ident("key"))
            {
                key = Some((*a.right).clone());
                listed = &listed[..listed.len() - 1];
            }
            if listed.is_empty() {
                errors.push(
                    c,
                    format!(
                        "`capture` needs the list of buffers the captured work uses, before the \
                         closure, so the graph can order it: `{USAGE}`"
                    ),
                );
                return None;
            }
            let operands: Vec<Option<Operand>> =
                listed.iter().map(|e| lower_operand(e, None, errors)).collect();
            let operands = operands.into_iter().collect::<Option<Vec<_>>>()?;
            Some(Op::Capture { func, operands, key, closure })
        }
        _ => {
            errors.push(&func, format!("`{word}` is not a graph statement; {ALLOWED}"));
            None
        }
    }
}

/// `&place` / `&mut place`; `want` is the required mutability where the statement fixes it.
fn lower_operand(e: &Expr, want: Option<bool>, errors: &mut Errors) -> Option<Operand> {
    let Expr::Reference(r) = e else {
        let hint = if want == Some(true) { "&mut " } else { "&" };
        errors.push(
            e,
            format!(
                "a buffer operand is a place marked `&` (read) or `&mut` (write): write `{hint}{}`",
                normalize(e)
            ),
        );
        return None;
    };
    let write = r.mutability.is_some();
    match want {
        Some(true) if !write => {
            errors.push(e, format!("this operand is written: write `&mut {}`", normalize(&r.expr)));
            return None;
        }
        Some(false) if write => {
            errors.push(e, format!("this operand is only read: write `&{}`", normalize(&r.expr)));
            return None;
        }
        _ => {}
    }
    if !is_place(&r.expr) {
        errors.push(
            &r.expr,
            "a buffer operand must be a place (a variable, a field or an indexed element such as `u`, `self.u`, `bufs[0]`), not a temporary or a call: a temporary would be dropped before the GPU runs",
        );
        return None;
    }
    // `x` and `*x` are one place (see `strip_derefs`): one borrow, ordered as one buffer.
    let key = place_key(crate::ast::strip_derefs(&r.expr).0);
    Some(Operand { write, place: (*r.expr).clone(), key, span: e.span() })
}

/// The place as a string; two operands are the same place iff their keys are equal. Integer
/// constant indices are folded, so `bufs[0 + 1]` (from an unrolled `for`) is `bufs[1]`.
fn place_key(e: &Expr) -> String {
    match e {
        Expr::Field(f) => format!("{}.{}", place_key(&f.base), normalize(&f.member)),
        Expr::Index(i) => {
            let index = const_int(&i.index).map_or_else(|| normalize(&i.index), |v| v.to_string());
            format!("{}[{index}]", place_key(&i.expr))
        }
        // `(*a).b` and `*a.b` are different places: keep the parentheses around a deref.
        Expr::Paren(p) if matches!(*p.expr, Expr::Unary(_)) => format!("({})", place_key(&p.expr)),
        Expr::Paren(p) => place_key(&p.expr),
        Expr::Unary(u) => format!("*{}", place_key(&u.expr)),
        // A variable: its name unraw (`r#x` is `x`, review 19c).
        Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            crate::hygiene::name(p.path.get_ident().expect("one ident"))
        }
        other => normalize(other),
    }
}

/// The value of an integer constant expression of literals, `+ - * / %` and parentheses.
fn const_int(e: &Expr) -> Option<i128> {
    match e {
        Expr::Lit(_) => int_lit(e).map(i128::from),
        Expr::Paren(p) => const_int(&p.expr),
        Expr::Binary(b) => {
            let (l, r) = (const_int(&b.left)?, const_int(&b.right)?);
            match b.op {
                syn::BinOp::Add(_) => l.checked_add(r),
                syn::BinOp::Sub(_) => l.checked_sub(r),
                syn::BinOp::Mul(_) => l.checked_mul(r),
                syn::BinOp::Div(_) => l.checked_div(r),
                syn::BinOp::Rem(_) => l.checked_rem(r),
                _ => None,
            }
        }
        _ => None,
    }
}

/// An index that names one element without side effects: a constant expression or a variable.
/// An index that names one element without side effects: literals, variables, constants and
/// arithmetic on them. Non-constant indices are evaluated at run time; where one operand writes,
/// all elements of that array are borrowed together, and overlapping indices panic.
fn is_index(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => matches!(l.lit, Lit::Int(_)),
        Expr::Path(p) => p.qself.is_none(),
        Expr::Paren(p) => is_index(&p.expr),
        Expr::Binary(b) => {
            use syn::BinOp::*;
            matches!(b.op, Add(_) | Sub(_) | Mul(_) | Div(_) | Rem(_))
                && is_index(&b.left)
                && is_index(&b.right)
        }
        _ => false,
    }
}

fn is_place(e: &Expr) -> bool {
    match e {
        Expr::Path(p) => p.qself.is_none() && p.path.get_ident().is_some(),
        Expr::Field(f) => is_place(&f.base),
        Expr::Index(i) => is_place(&i.expr) && is_index(&i.index),
        Expr::Paren(p) => is_place(&p.expr),
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Deref(_)) && is_place(&u.expr),
        _ => false,
    }
}
