//! The DSL's types. Every node keeps the tokens it came from, so `check` and `expand` can put
//! errors and generated code on the user's own spans.

use proc_macro2::{Span, TokenStream};
use syn::{Expr, Ident};

/// `graph!(CACHE, STREAM, { ITEMS })`.
pub struct GraphInput {
    /// The cache expression, e.g. `&mut cache`.
    pub cache: Expr,
    /// The stream expression, e.g. `&stream`.
    pub stream: Expr,
    /// The statements, in source order.
    pub body: Vec<Item>,
    /// Span of the `{ … }` body.
    pub body_span: Span,
    /// Whether the plan is registered for `cudagraph::plans()` (`graph!`: yes; `eager!`: no).
    pub register_plan: bool,
    /// Compile-time checks that every use of an unrolled `for`'s variable is that variable
    /// (`parse::loop_variable_probe`), emitted with the expansion.
    pub probes: proc_macro2::TokenStream,
}

/// One statement of the body.
#[allow(clippy::large_enum_variant)] // a short-lived AST, built once per expansion
pub enum Item {
    /// A graph node.
    Node(Node),
    /// A host-evaluated `if`/`else`.
    If(If),
    /// One iteration of an unrolled graph `for`: names bound in it are in scope only inside it.
    Scope(Vec<Item>),
    /// The iterations of one unrolled graph `for` (each a [`Item::Scope`]), kept together so
    /// that a run of iterations (`expand`'s `repeat_runs`) is only looked for inside one `for`:
    /// two adjacent `for`s that print alike may name different variables (one written with a
    /// caller's variable, one with a `macro_rules!` variable of the same spelling: review 18b).
    /// Transparent otherwise: no scope of its own.
    For(Vec<Item>),
    /// A graph `for` whose bounds are not literals: its count is evaluated at every call and is
    /// part of the variant key (see `crate::loops`).
    Loop(Loop),
    /// `let name = condition(default);`: a device condition (no node).
    Condition(Condition),
}

/// `for VAR in START..END { BODY }` (or `..=`) with bounds that are `usize` expressions.
pub struct Loop {
    /// The loop variable (`None` for `_`).
    pub var: Option<Ident>,
    /// First value.
    pub start: Expr,
    /// End bound.
    pub end: Expr,
    /// `..=` rather than `..`.
    pub closed: bool,
    /// The body, lowered once.
    pub body: Vec<Item>,
    /// The loop's header text, e.g. `for i in 0..k` (for plans).
    pub text: String,
    /// The header's tokens, `for i in 0..k` (for errors on the loop as a whole).
    pub head: TokenStream,
}

/// A device condition declared with `let name = condition(default);`.
pub struct Condition {
    /// The name kernels and the device statement use.
    pub name: Ident,
    /// Its value at the start of every launch (a `u32` expression, evaluated at every call).
    pub default: Expr,
    /// The `condition` word.
    pub func: Ident,
}

/// `if COND { THEN } else { ELSE }`, evaluated on the host at every call.
pub struct If {
    /// The condition.
    pub cond: Expr,
    /// Statements of the `then` branch.
    pub then: Vec<Item>,
    /// Statements of the `else` branch (empty when there is none).
    pub els: Vec<Item>,
}

/// One node statement: `let NAME = OP.after(DEPS);`.
pub struct Node {
    /// `let` name, if any.
    pub name: Option<Ident>,
    /// What the node does.
    pub op: Op,
    /// Names in `.after(…)`.
    pub after: Vec<Ident>,
    /// The statement's tokens (for spans and text).
    pub tokens: TokenStream,
    /// Span of the whole statement.
    pub span: Span,
}

/// The operation of a node.
#[allow(clippy::large_enum_variant)] // a short-lived AST, built once per expansion
pub enum Op {
    /// `RECEIVER.KERNEL(ARGS).launch(CFG)`.
    Launch {
        /// The `kernels!` struct expression.
        receiver: Expr,
        /// The kernel method.
        kernel: Ident,
        /// The arguments.
        args: Vec<Arg>,
        /// Span of the argument list's parentheses.
        parens: Span,
        /// The user's `launch` word.
        launch: Ident,
        /// The launch configuration.
        cfg: Expr,
    },
    /// `copy(&SRC, &mut DST)`.
    Copy {
        /// The `copy` word.
        func: Ident,
        /// Source (read).
        src: Operand,
        /// Destination (written).
        dst: Operand,
    },
    /// `memset(&mut DST, VALUE)`.
    Memset {
        /// The `memset` word.
        func: Ident,
        /// Destination.
        dst: Operand,
        /// The value.
        value: Expr,
    },
    /// `copy_2d(&SRC, SRC_ROWS, &mut DST, DST_ROWS)`: a pitched 2-D copy.
    Copy2d {
        /// The `copy_2d` word.
        func: Ident,
        /// Source (read).
        src: Operand,
        /// The source's rows (`cudagraph::Rows`).
        src_rows: Expr,
        /// Destination (written).
        dst: Operand,
        /// The destination's rows.
        dst_rows: Expr,
    },
    /// `memset_2d(&mut DST, ROWS, VALUE)`: a pitched 2-D memset.
    Memset2d {
        /// The `memset_2d` word.
        func: Ident,
        /// Destination.
        dst: Operand,
        /// Its rows (`cudagraph::Rows`).
        rows: Expr,
        /// The value.
        value: Expr,
    },
    /// `fill(&mut DST, VALUE)`: every element set to a value of any size, by the crate's fill
    /// kernel (see `cudagraph::fill`).
    Fill {
        /// The `fill` word.
        func: Ident,
        /// Destination.
        dst: Operand,
        /// The value.
        value: Expr,
    },
    /// `zero(&mut DST)`.
    Zero {
        /// The `zero` word.
        func: Ident,
        /// Destination.
        dst: Operand,
    },
    /// `child(&mut G)`: a captured `Graph` embedded as a child graph.
    Child {
        /// The `child` word.
        func: Ident,
        /// The graph (written: its operands are acquired as the graph borrows them).
        graph: Operand,
    },
    /// `event_record(EVENT)` / `event_wait(EVENT)`: a cudarc event recorded or waited for.
    Event {
        /// The `event_record` or `event_wait` word.
        func: Ident,
        /// The event expression (`&Arc<CudaEvent>`).
        event: Expr,
    },
    /// `let NAME = alloc::<TY>(LEN);`: a graph-owned buffer, made by a memory allocation node
    /// (which writes it) and usable as `&NAME` / `&mut NAME` by later statements.
    Alloc {
        /// The `alloc` word.
        func: Ident,
        /// The element type.
        ty: syn::Type,
        /// The length in elements (a `usize` expression, evaluated once per call, before the
        /// statements' parameters).
        len: Expr,
        /// The buffer as a place (its `let` name), written.
        buffer: Operand,
    },
    /// `free(&mut NAME)`: the memory free node of a graph-owned buffer; added by the macro after
    /// the last statement of the body for a buffer not freed explicitly.
    Free {
        /// The `free` word (the `alloc` word's span when added by the macro).
        func: Ident,
        /// The buffer, written.
        buffer: Operand,
    },
    /// `empty()`: a node without work, a join point for `.after`.
    Empty {
        /// The `empty` word.
        func: Ident,
    },
    /// `host(&A, &mut B, …, CLOSURE)`: a closure run on the host by the launch, on the
    /// listed pinned host buffers.
    Host {
        /// The `host` word.
        func: Ident,
        /// The pinned host buffers the closure uses, in order (may be none).
        operands: Vec<Operand>,
        /// The closure: `|(a, b, …)| { … }`.
        closure: Expr,
    },
    /// `capture(&A, &mut B, …, CLOSURE)`: stream work recorded into a child graph.
    Capture {
        /// The `capture` word.
        func: Ident,
        /// The buffers the captured work uses, in order.
        operands: Vec<Operand>,
        /// `key = EXPR` before the closure: what the recording depends on besides the operands
        /// (the closure is then a `fn`: `|s, key, (a, b, …)| { … }`, recorded again only when
        /// the key or the operands change).
        key: Option<Expr>,
        /// The closure doing the stream work: `|s, (a, b, …)| { … }`.
        closure: Expr,
    },
    /// `device_while(c, { … })`, `device_if(c, { … })`, `device_if(c, { … }, { … })`,
    /// `device_switch(c, { … }, …)`: a conditional node; its bodies' nodes follow it.
    Conditional {
        /// The `device_*` word.
        func: Ident,
        /// The device condition's name.
        cond: Ident,
        /// The bodies, in the driver's order (`if`: then, else; `switch`: case 0, 1, …).
        bodies: Vec<Vec<Item>>,
    },
}

/// A kernel argument.
pub enum Arg {
    /// Any expression passed by value.
    Scalar(Expr),
    /// `&place` or `&mut place`.
    Buffer(Operand),
}

/// `&place` or `&mut place`.
#[derive(Clone)]
pub struct Operand {
    /// `true` for `&mut`.
    pub write: bool,
    /// The place expression (`u`, `self.u`, `bufs[0]`, `*x`).
    pub place: Expr,
    /// The place as a normalized string: two operands name the same place iff equal. Outer
    /// derefs are left out (see [`strip_derefs`]), so `x` and `*x` are one place.
    pub key: String,
    /// Span of the whole operand, `&` included.
    pub span: Span,
}

impl Op {
    /// The node's default label: the kernel name or the statement word.
    pub fn word(&self) -> String {
        match self {
            Op::Launch { kernel, .. } => kernel.to_string(),
            Op::Copy { .. } => "copy".into(),
            Op::Memset { .. } => "memset".into(),
            Op::Zero { .. } => "zero".into(),
            Op::Fill { .. } => "fill".into(),
            Op::Capture { .. } => "capture".into(),
            Op::Host { .. } => "host".into(),
            Op::Empty { .. } => "empty".into(),
            Op::Alloc { .. } => "alloc".into(),
            Op::Copy2d { .. } => "copy_2d".into(),
            Op::Memset2d { .. } => "memset_2d".into(),
            Op::Free { .. } => "free".into(),
            Op::Event { func, .. } => func.to_string(),
            Op::Child { .. } => "child".into(),
            Op::Conditional { func, .. } => func.to_string(),
        }
    }

    /// The buffer operands, in source order.
    pub fn operands(&self) -> Vec<&Operand> {
        match self {
            Op::Launch { args, .. } => args
                .iter()
                .filter_map(|a| match a {
                    Arg::Buffer(o) => Some(o),
                    Arg::Scalar(_) => None,
                })
                .collect(),
            Op::Copy { src, dst, .. } | Op::Copy2d { src, dst, .. } => vec![src, dst],
            Op::Memset2d { dst, .. } => vec![dst],
            Op::Memset { dst, .. } | Op::Zero { dst, .. } | Op::Fill { dst, .. } => vec![dst],
            Op::Capture { operands, .. } | Op::Host { operands, .. } => operands.iter().collect(),
            Op::Child { graph, .. } => vec![graph],
            Op::Alloc { buffer, .. } | Op::Free { buffer, .. } => vec![buffer],
            Op::Empty { .. } | Op::Event { .. } => vec![],
            Op::Conditional { .. } => Vec::new(),
        }
    }
}

impl Node {
    /// The node's label: its `let` name or its word.
    pub fn label(&self) -> String {
        self.name.as_ref().map_or_else(|| self.op.word(), Ident::to_string)
    }
}

/// A node with its position in the flattened body.
pub struct Flat<'a> {
    /// The node.
    pub node: &'a Node,
    /// Host condition under which it is present (`""` when always).
    pub condition: String,
    /// The scopes enclosing it, outermost first: each `if` branch and each iteration of a graph
    /// `for` is one, `(number, what)`. A name is in scope where its binding's path is a prefix.
    pub scope: Vec<(u32, &'static str)>,
    /// The run-time `for` (numbered in source order from 0) whose body holds the node, if any.
    pub looped: Option<u32>,
    /// The device body it is in: `(index of the conditional node in the flat list, body)`.
    pub body: Option<(usize, u32)>,
}

/// The nodes of `items` in source order (then-branch before else-branch), with their conditions,
/// and the number of `if`s.
#[allow(clippy::type_complexity)]
pub fn flatten(items: &[Item]) -> (Vec<Flat<'_>>, u32, Vec<FlatCondition<'_>>) {
    struct Walk<'a> {
        out: Vec<Flat<'a>>,
        ifs: u32,
        scopes: u32,
        path: Vec<(u32, &'static str)>,
        loops: u32,
        looped: Option<u32>,
        body: Option<(usize, u32)>,
        conds: Vec<FlatCondition<'a>>,
    }
    impl<'a> Walk<'a> {
        fn scope(&mut self, what: &'static str, items: &'a [Item], cond: &str) {
            self.scopes += 1;
            self.path.push((self.scopes, what));
            self.items(items, cond);
            self.path.pop();
        }
        fn items(&mut self, items: &'a [Item], cond: &str) {
            for item in items {
                match item {
                    Item::Node(node) => {
                        self.out.push(Flat {
                            node,
                            condition: cond.to_string(),
                            scope: self.path.clone(),
                            looped: self.looped,
                            body: self.body,
                        });
                        if let Op::Conditional { bodies, .. } = &node.op {
                            let (idx, outer) = (self.out.len() - 1, self.body);
                            for (b, items) in bodies.iter().enumerate() {
                                self.body = Some((idx, b as u32));
                                self.scope("a device body", items, cond);
                            }
                            self.body = outer;
                        }
                    }
                    Item::Condition(c) => self.conds.push(FlatCondition {
                        decl: c,
                        scope: self.path.clone(),
                        at: self.out.len(),
                    }),
                    Item::If(i) => {
                        self.ifs += 1;
                        let c = normalize(&i.cond);
                        let join = |c: String| {
                            if cond.is_empty() { c } else { format!("{cond} && {c}") }
                        };
                        self.scope("an `if` branch", &i.then, &join(c.clone()));
                        self.scope("an `else` branch", &i.els, &join(format!("!({c})")));
                    }
                    Item::Scope(body) => self.scope("a graph `for` body", body, cond),
                    Item::For(iterations) => self.items(iterations, cond),
                    Item::Loop(l) => {
                        let outer = self.looped.replace(self.loops);
                        self.loops += 1;
                        let c = if cond.is_empty() {
                            l.text.clone()
                        } else {
                            format!("{cond} && {}", l.text)
                        };
                        self.scope("a graph `for` body", &l.body, &c);
                        self.looped = outer;
                    }
                }
            }
        }
    }
    let mut w = Walk {
        out: Vec::new(),
        ifs: 0,
        scopes: 0,
        path: Vec::new(),
        loops: 0,
        looped: None,
        body: None,
        conds: Vec::new(),
    };
    w.items(items, "");
    (w.out, w.ifs, w.conds)
}

/// A device condition declaration in flattened order (its slot is its index).
pub struct FlatCondition<'a> {
    pub decl: &'a Condition,
    pub scope: Vec<(u32, &'static str)>,
    /// How many nodes precede it.
    pub at: usize,
}

/// Tokens as text with rustc-like spacing removed around punctuation, for keys, labels and the
/// code that error messages suggest (`&mut *x`, not `& mut * x`).
pub fn normalize(tokens: &impl quote::ToTokens) -> String {
    let s = tight_derefs(&tokens.to_token_stream().to_string());
    s.replace(" . ", ".")
        .replace(" [", "[")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace("& mut ", "&mut ")
        .replace("& ", "&")
        .replace(" ,", ",")
        .replace(" ;", ";")
        .replace("! ", "!")
}

/// `text` (tokens separated by spaces, as `TokenStream::to_string` writes them) with the space
/// after each unary `*` removed: `& mut * x` becomes `& mut *x`, `* * x` becomes `**x`, `(* a)`
/// becomes `(*a)`, while a multiplication `a * b` keeps its spaces. A `*` is unary at the start,
/// or after an operator, an opening delimiter, a separator or a keyword that an expression
/// follows.
fn tight_derefs(text: &str) -> String {
    fn before_operand(prev: &str) -> bool {
        matches!(
            prev,
            "mut" | "as" | "return" | "in" | "let" | "if" | "match" | "while" | "else" | "break"
        ) || prev.ends_with(|c: char| "([{,;=&|!*+-/%^<>:.".contains(c))
    }
    let words: Vec<&str> = text.split(' ').collect();
    let mut out = String::with_capacity(text.len());
    for (i, w) in words.iter().enumerate() {
        out.push_str(w);
        // A group prints its opening delimiter glued to its first token: `(* a)`.
        let unary = match w.strip_suffix('*') {
            Some("") => i == 0 || before_operand(words[i - 1]),
            Some(head) => head.ends_with(['(', '[', '{']),
            None => false,
        };
        if i + 1 < words.len() && !unary {
            out.push(' ');
        }
    }
    out
}

/// `place` without its outer derefs (and the parentheses around them), and how many there were:
/// `**x` is `(x, 2)`, `(*x)` is `(x, 1)`, `(*a).b` is `((*a).b, 0)`.
///
/// Only outer derefs make `x` and `*x` one place: both are borrowed as graph buffers (`Place`),
/// and the only `Place`s that deref to another are `&P` and `&mut P` (no buffer type of the
/// crate or cudarc implements `Deref`), so both name the buffer of `*x`; the expansion checks
/// that every spelling used is a `Place`. An inner deref is kept: `x.b` and `(*x).b` differ
/// when `x` is a smart pointer with its own field `b`.
pub fn strip_derefs(place: &Expr) -> (&Expr, usize) {
    match place {
        Expr::Paren(p) => strip_derefs(&p.expr),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => {
            let (inner, n) = strip_derefs(&u.expr);
            (inner, n + 1)
        }
        _ => (place, 0),
    }
}
