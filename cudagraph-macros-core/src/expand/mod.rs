//! Expansion of a checked `graph!` body, and the fallback after errors.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::Expr;
use syn::spanned::Spanned;

use crate::ast::{Arg, GraphInput, Item, Node, Op, Operand, normalize};
use crate::check::Checked;
use crate::errors::line_column;

mod loops;

/// A distinct place of the body.
pub(crate) struct PlaceInfo<'a> {
    index: usize,
    written: bool,
    /// The operand whose place expression is borrowed (see [`borrow_rank`]).
    first: &'a Operand,
    /// One operand per other spelling of the place (`x` beside `*x`), checked to be a `Place`.
    others: Vec<&'a Operand>,
    /// For an element of an array acquired in one loop (see [`mark_arrays`]): the array's
    /// number and the element's position in it.
    array: Option<(usize, usize)>,
}

/// Which spelling of a place to borrow, highest first: an indexed element without deref (so
/// elements of one array can be split, see [`acquisitions`]), then the one with the most outer
/// derefs: `&mut *x` needs no `mut` binding where `x: &mut CudaSlice<T>`, `&mut x` does.
fn borrow_rank(o: &Operand) -> (bool, usize) {
    (matches!(o.place, Expr::Index(_)), crate::ast::strip_derefs(&o.place).1)
}

/// The places of the body by key, in order of first use.
fn places<'a>(checked: &Checked<'a>) -> (Vec<String>, HashMap<String, PlaceInfo<'a>>) {
    let mut order = Vec::new();
    let mut map: HashMap<String, PlaceInfo<'a>> = HashMap::new();
    for f in &checked.nodes {
        for o in f.node.op.operands() {
            let n = map.len();
            let info = map.entry(o.key.clone()).or_insert_with(|| {
                order.push(o.key.clone());
                PlaceInfo { index: n, written: false, first: o, others: Vec::new(), array: None }
            });
            info.written |= o.write;
            let text = normalize(&o.place);
            if text != normalize(&info.first.place)
                && !info.others.iter().any(|p| normalize(&p.place) == text)
            {
                if borrow_rank(o) > borrow_rank(info.first) {
                    info.others.push(std::mem::replace(&mut info.first, o));
                } else {
                    info.others.push(o);
                }
            }
        }
    }
    (order, map)
}

/// The generated code of a checked `graph!` call: acquire each place once, evaluate each
/// statement's node parameters, and hand them to `GraphCache::run` with the static plan.
pub fn expand(input: &GraphInput, checked: &Checked<'_>) -> TokenStream {
    let (order, mut places) = places(checked);
    let stream = local("__cudagraph_stream");
    let cache_var = local("__cudagraph_cache");
    let key = local("__cudagraph_key");
    let call = local("__cudagraph_call");

    // Graph-owned buffers: their element type and length, by place key.
    let scratch: HashMap<String, (&syn::Type, &Expr)> = checked
        .nodes
        .iter()
        .filter_map(|f| match &f.node.op {
            Op::Alloc { ty, len, buffer, .. } => Some((buffer.key.clone(), (ty, len))),
            _ => None,
        })
        .collect();
    mark_arrays(&order, &mut places, &scratch);
    let (stores, acquisitions) =
        acquisitions(&order, &places, &scratch, &stream.to_token_stream(), &call);
    let guards_var = local("__cudagraph_guards");
    let place_count = proc_macro2::Literal::usize_unsuffixed(order.len());
    let guards = quote!(#guards_var.all());
    // (A body without places puts no guard.)
    let guards_mut = if order.is_empty() { quote!() } else { quote!(mut) };

    // A body with captured work needs the stream's `Arc` (cudarc's stream calls take one).
    let captures = checked.nodes.iter().any(|f| matches!(f.node.op, Op::Capture { .. }));
    let looped_body = checked.nodes.iter().any(|f| f.looped.is_some());
    let mut counter = NodeCounter {
        next: 0,
        ifs: 0,
        loops: 0,
        conds: 0,
        chunks: 0,
        looped_body,
        // The call's words are made with its statements, except where the cache must see
        // the node list first (kept recordings of `capture` statements) or runs it otherwise
        // (run-time loops).
        words: !looped_body && !captures,
        chunk_of: Vec::new(),
        lazy: false,
        receivers: HashMap::new(),
        cond_slot: checked.cond_slot.clone(),
    };
    // Each receiver that is a path (`k`, `self::K`), made the `kernels!` struct itself once per
    // call (`__private::kernels`, whose `Kernels::Struct` projection took rustc about 2 ms of
    // release build per statement when made in every statement).
    let mut receivers_decl = TokenStream::new();
    let mut receivers: HashMap<String, syn::Ident> = HashMap::new();
    for f in &checked.nodes {
        if let Op::Launch { receiver: receiver @ Expr::Path(_), .. } = &f.node.op {
            let key = receiver.to_token_stream().to_string();
            if !receivers.contains_key(&key) {
                let k = local(format!("__cudagraph_k{}", receivers.len()));
                receivers_decl.extend(quote_spanned! {receiver.span()=>
                    let #k = ::cudagraph::__private::concrete(
                        ::cudagraph::__private::kernels(&#receiver),
                        |r| r.__cudagraph_concrete(),
                    );
                });
                receivers.insert(key, k);
            }
        }
    }
    counter.receivers = receivers;
    let mut decls = TokenStream::new();
    let body = emit_items(&input.body, &places, &mut counter, Holder::Plain, &mut decls);
    let entry = |i: usize| {
        let n = local(format!("__cudagraph_n{i}"));
        if counter.chunk_of.get(i).is_some_and(Option::is_some) {
            quote!(::cudagraph::__private::node(#n))
        } else if checked.nodes[i].condition.is_empty() {
            quote!(::cudagraph::__private::node(&#n))
        } else {
            quote!(::cudagraph::__private::node_if(&#n))
        }
    };
    let loops = checked.nodes.iter().any(|f| f.looped.is_some());

    let plan = plan(checked, &order, &places, input.register_plan);
    let cache = &input.cache;
    let stream_expr = &input.stream;
    let key_decl = if checked.conditions > 0 {
        quote!(let mut #key: u64 = 0;)
    } else {
        quote!(let #key: u64 = 0;)
    };
    let stream_decl = if captures {
        let arc = local("__cudagraph_stream_arc");
        quote! {
            let #arc: &::std::sync::Arc<::cudagraph::__private::CudaStream> = #stream_expr;
            let #stream: &::cudagraph::__private::CudaStream = #arc;
        }
    } else {
        quote!(let #stream: &::cudagraph::__private::CudaStream = #stream_expr;)
    };
    let count = proc_macro2::Literal::usize_unsuffixed(checked.nodes.len());
    let run = if loops {
        loops::run_call(checked, &entry, &cache_var, &call, &key, &stream, &guards)
    } else {
        // The node list in segments: one array per chunk (see `emit_chunk`), one entry per
        // other statement, in node order.
        let mut segments = Vec::new();
        for i in 0..checked.nodes.len() {
            match counter.chunk_of.get(i).copied().flatten() {
                Some((chunk, first)) => {
                    if first {
                        let c = local(format!("__cudagraph_chunk{chunk}"));
                        segments.push(quote!(&&#c));
                    }
                }
                None => {
                    let n = local(format!("__cudagraph_n{i}"));
                    segments.push(if checked.nodes[i].condition.is_empty() {
                        quote!(&::cudagraph::__private::entry(&#n))
                    } else {
                        quote!(&::cudagraph::__private::entry_if(&#n))
                    });
                }
            }
        }
        let nodes = local("__cudagraph_nodes");
        let run_call = if counter.words {
            let words = local("__cudagraph_words");
            quote! {
                // SAFETY: the plan was generated from this body (`run_words` checks each
                // node's handles against its accesses), the guards are its places' borrows,
                // in place order, and the words were made by this cache for this call, each
                // present node put in as its statement made it.
                // The node list is made from the segments only if the call needs it.
                unsafe {
                    #cache_var.run_words_in(
                        &__CUDAGRAPH_PLAN,
                        &#call,
                        #key,
                        #stream,
                        &mut #nodes,
                        &[#(#segments),*],
                        &mut #guards_var,
                        #words,
                    )
                }
            }
        } else {
            quote! {
                // SAFETY: the plan was generated from this body (`run` checks each node's
                // handles against its accesses), and the guards are its places' borrows, in
                // place order.
                unsafe {
                    #cache_var.run(&__CUDAGRAPH_PLAN, &#call, #key, #stream, &#nodes, #guards)
                }
            }
        };
        // One fat pointer per chunk or other statement, converted out of line (a literal of
        // every statement's parameters makes large bodies slow to compile).
        let fill = if counter.words {
            quote!()
        } else {
            quote!(::cudagraph::__private::entries(&mut #nodes, &[#(#segments),*]);)
        };
        // With words, the list is left uninitialized (`run_words_in` writes it only when the
        // call needs it: an unchanged call of 1000 statements stored 24 KB of `None`s).
        let init = if counter.words {
            quote!([const { ::core::mem::MaybeUninit::uninit() }; #count])
        } else {
            quote!([const { ::core::option::Option::None }; #count])
        };
        quote! {
            let mut #nodes = #init;
            #fill
            #run_call
        }
    };
    // With words, every guard goes into them as its place is acquired (`Guards::with_words`).
    let words = local("__cudagraph_words");
    let (guards_decl, words_decl) = if counter.words {
        let guards = quote! {
            let mut #words = #cache_var.words(&__CUDAGRAPH_PLAN, &#call);
            let mut #guards_var =
                ::cudagraph::__private::Guards::<#place_count>::with_words(#stream, #words);
        };
        (guards, quote!(let mut #words = #guards_var.take_words();))
    } else {
        let guards = quote! {
            let #guards_mut #guards_var = ::cudagraph::__private::Guards::<#place_count>::new();
        };
        (guards, quote!())
    };
    let probes = &input.probes;
    let names = crate::hygiene::probe(&checked.nodes);
    let condition_marks = crate::hygiene::condition_marks(&checked.cond_names);
    quote! {{
        let #cache_var: &mut ::cudagraph::GraphCache = #cache;
        #stream_decl
        #probes
        #names
        #condition_marks
        #plan
        let #call = ::cudagraph::__private::begin_call();
        #stores
        #guards_decl
        #acquisitions
        #words_decl
        #key_decl
        #receivers_decl
        #decls
        #body
        #run
    }}
}

/// Indexed places by the key of their base, in order of first use: each group's base
/// expression and its members' keys, for groups of two or more members of which one is written
/// (the borrow checker cannot split those by index on its own).
fn index_groups<'p>(
    order: &'p [String],
    places: &'p HashMap<String, PlaceInfo<'_>>,
) -> Vec<(&'p Expr, Vec<&'p str>)> {
    let mut groups: Vec<(String, &Expr, Vec<&str>)> = Vec::new();
    for key in order {
        let p = &places[key];
        if let Expr::Index(ix) = &p.first.place {
            let base = p.first.key[..p.first.key.rfind('[').expect("indexed key")].to_string();
            match groups.iter_mut().find(|g| g.0 == base) {
                Some(g) => g.2.push(key),
                None => groups.push((base, &ix.expr, vec![key])),
            }
        }
    }
    groups.retain(|g| g.2.len() > 1 && g.2.iter().any(|k| places[*k].written));
    groups.into_iter().map(|(_, base, members)| (base, members)).collect()
}

/// Whether every index of a group's members is an integer constant (their folded keys then
/// differ: the indices are distinct).
fn constant_indices(members: &[&str]) -> bool {
    members.iter().all(|k| {
        k.ends_with(']')
            && k[k.rfind('[').expect("indexed") + 1..k.len() - 1].parse::<u64>().is_ok()
    })
}

/// Marks the groups of [`index_groups`] acquired in one loop ([`PlaceInfo::array`]): constant
/// indices, every member written (`for i in 0..N { … &mut bufs[i] … }`, unrolled). Their
/// handles are then elements of one array, `__cudagraph_a{group}.at(k)`.
fn mark_arrays(
    order: &[String],
    places: &mut HashMap<String, PlaceInfo<'_>>,
    scratch: &HashMap<String, (&syn::Type, &Expr)>,
) {
    let arrays: Vec<Vec<String>> = index_groups(order, places)
        .into_iter()
        .filter(|(_, m)| {
            constant_indices(m) && m.iter().all(|k| places[*k].written && !scratch.contains_key(*k))
        })
        .map(|(_, m)| m.into_iter().map(str::to_string).collect())
        .collect();
    for (a, members) in arrays.iter().enumerate() {
        for (k, key) in members.iter().enumerate() {
            places.get_mut(key).expect("a place").array = Some((a, k));
        }
    }
}

/// One borrow per distinct place, its guard put into `__cudagraph_guards`. Elements of one
/// array or `Vec` indexed by different indices (`bufs[0]`, `bufs[1]`) where one is written are
/// borrowed together with `get_disjoint_mut`, which the borrow checker cannot split by index
/// on its own; overlapping indices panic. A group of constant indices, all written, is
/// acquired in one loop (see [`mark_arrays`]).
fn acquisitions(
    order: &[String],
    places: &HashMap<String, PlaceInfo<'_>>,
    scratch: &HashMap<String, (&syn::Type, &Expr)>,
    stream: &TokenStream,
    call: &syn::Ident,
) -> (TokenStream, TokenStream) {
    let guards = local("__cudagraph_guards");
    // The arrays' handle stores, declared before the guards: the guards may make an
    // element's guard from its handle (`__private::Guards::made`), so the stores outlive them.
    let mut stores = TokenStream::new();
    let groups = index_groups(order, places);
    let mut out = TokenStream::new();
    // A place spelled two ways (`x` and `*x`) is borrowed once, through `first`; each other
    // spelling is checked to be a graph buffer too (a shared borrow that ends at once), so the
    // two name one buffer (see `strip_derefs`) and a spelling that would not compile on its own
    // does not compile here either.
    for key in order {
        if scratch.contains_key(key) {
            continue;
        }
        for o in &places[key].others {
            let place = &o.place;
            out.extend(quote_spanned! {o.span=>
                ::cudagraph::__private::same_place(&#place);
            });
        }
    }
    let mut split: HashMap<usize, syn::Ident> = HashMap::new();
    for (gi, (base, keys)) in groups.iter().enumerate() {
        let members: Vec<&PlaceInfo<'_>> = keys.iter().map(|k| &places[*k]).collect();
        let idx: Vec<&Expr> = members
            .iter()
            .map(|p| match &p.first.place {
                Expr::Index(ix) => &*ix.index,
                _ => unreachable!("grouped places are indexed"),
            })
            .collect();
        let n = members.len();
        let ids = format_ident!("__CUDAGRAPH_IDX{}", gi);
        // Constant indices are distinct (their folded keys differ): checked once in a `const`,
        // leaving only bounds checks at run time. Others: `get_disjoint_mut` checks every call.
        let elements = if members[0].array.is_some() {
            // Acquired in one loop, each element borrowed in turn (`__private::EachMut`).
            quote_spanned! {members[0].first.span=>
                {
                    const #ids: ::cudagraph::__private::DistinctIndices<#n> =
                        ::cudagraph::__private::DistinctIndices::new([#(#idx),*]);
                    use ::cudagraph::__private::DisjointMut as _;
                    #base.__cudagraph_each_mut(&#ids)
                }
            }
        } else if constant_indices(keys) {
            quote_spanned! {members[0].first.span=>
                {
                    const #ids: ::cudagraph::__private::DistinctIndices<#n> =
                        ::cudagraph::__private::DistinctIndices::new([#(#idx),*]);
                    use ::cudagraph::__private::DisjointMut as _;
                    #base.__cudagraph_disjoint_mut_distinct(#ids)
                }
            }
        } else {
            // How the body spells each element, for the panic of indices equal at run time.
            let names = members.iter().map(|p| crate::ast::normalize(&p.first.place));
            quote_spanned! {members[0].first.span=>
                {
                    use ::cudagraph::__private::DisjointMut as _;
                    #base.__cudagraph_disjoint_mut([#(#idx),*], &[#(#names),*])
                }
            }
        };
        if let Some((a, _)) = members[0].array {
            // Acquired in one loop: element `k` is place `indices[k]`.
            let array = local(format!("__cudagraph_a{a}"));
            let indices = members.iter().map(|p| p.index as u32);
            let store = local(format!("__cudagraph_as{a}"));
            let places = format_ident!("__CUDAGRAPH_PLACES{}", a);
            let places_n = proc_macro2::Literal::usize_unsuffixed(order.len());
            stores.extend(quote_spanned! {members[0].first.span=>
                let mut #store = ::cudagraph::__private::EachStore::new();
            });
            out.extend(quote_spanned! {members[0].first.span=>
                let #array = ::cudagraph::__private::acquire_mut_each(
                    &mut #store, #elements, #stream, &#call,
                    {
                        const #places: ::cudagraph::__private::PlaceIndices<#n, #places_n> =
                            ::cudagraph::__private::PlaceIndices::new([#(#indices),*]);
                        &#places
                    },
                    &mut #guards,
                );
            });
            continue;
        }
        let elems: Vec<syn::Ident> =
            (0..n).map(|k| local(format!("__cudagraph_e{gi}_{k}"))).collect();
        out.extend(quote_spanned! {members[0].first.span=>
            let [#(#elems),*] = #elements;
        });
        for (p, e) in members.iter().zip(elems) {
            split.insert(p.index, e);
        }
    }
    for key in order {
        let p = &places[key];
        if p.array.is_some() {
            continue;
        }
        let (r, w) = handles(p.index);
        if let Some((ty, len)) = scratch.get(key) {
            // A graph-owned buffer: no place to borrow; its handles are made for this call.
            let s = local(format!("__cudagraph_s{}", p.index));
            let index = p.index as u32;
            let len = quote_spanned!(len.span()=> { let __n: usize = #len; __n });
            out.extend(quote_spanned! {p.first.span=>
                let #s = ::cudagraph::__private::scratch::<#ty, _>(
                    #stream, &#call, #index, #len, &mut #guards,
                );
                let (#r, #w) = (#s.read(), #s.write());
            });
            continue;
        }
        let place = match split.get(&p.index) {
            Some(e) if p.written => quote!(#e),
            Some(e) => quote!(&*#e),
            None if p.written => {
                let place = &p.first.place;
                quote_spanned!(p.first.span=> &mut #place)
            }
            None => {
                let place = &p.first.place;
                quote_spanned!(p.first.span=> &#place)
            }
        };
        // The call's parentheses get the span of the place's last token, so that the
        // `Place`/`PlaceMut` bound error is reported once, on the user's place.
        let last = p.first.place.to_token_stream().into_iter().last().map(|t| t.span());
        let index = p.index as u32;
        let mut args = proc_macro2::Group::new(
            proc_macro2::Delimiter::Parenthesis,
            quote!(#place, #stream, &#call, #index, &mut #guards),
        );
        args.set_span(last.unwrap_or(p.first.span));
        out.extend(if p.written {
            quote_spanned! {p.first.span=>
                let (#r, #w) = ::cudagraph::__private::acquire_mut_into #args;
            }
        } else {
            quote_spanned! {p.first.span=>
                let #r = ::cudagraph::__private::acquire_into #args;
            }
        });
    }
    (stores, out)
}

/// A local variable of the generated code. `mixed_site` hygiene: user code in the body (scalar
/// arguments, conditions) cannot name it, so it cannot read a buffer handle, tamper with node
/// parameters or the variant key.
pub(crate) fn local(name: impl std::fmt::Display) -> syn::Ident {
    syn::Ident::new(&name.to_string(), Span::mixed_site())
}

/// `tokens` with every span located at `at` and resolved as before
/// ([`Span::located_at`]): where a diagnostic points, not what a name means.
fn located_at(tokens: TokenStream, at: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|t| match t {
            proc_macro2::TokenTree::Group(g) => {
                let mut n = proc_macro2::Group::new(g.delimiter(), located_at(g.stream(), at));
                n.set_span(g.span().located_at(at));
                proc_macro2::TokenTree::Group(n)
            }
            mut t => {
                t.set_span(t.span().located_at(at));
                t
            }
        })
        .collect()
}

/// Place `i`'s read and write handles.
pub(crate) fn handles(i: usize) -> (syn::Ident, syn::Ident) {
    (local(format!("__cudagraph_r{i}")), local(format!("__cudagraph_w{i}")))
}

pub(crate) struct NodeCounter {
    pub(crate) next: usize,
    ifs: u32,
    pub(crate) loops: usize,
    /// Chunks emitted so far (see [`emit_items`]).
    pub(crate) chunks: usize,
    /// Whether the body has run-time loops (its node list is a `Vec`, not the array).
    pub(crate) looped_body: bool,
    /// Whether each statement's node goes into the call's words as it is made
    /// (`__private::word_node`, `GraphCache::run_words`).
    pub(crate) words: bool,
    /// By node index, the chunk of each statement built in one (its name is then a reference
    /// into the chunk), and whether it is the chunk's first.
    pub(crate) chunk_of: Vec<Option<(usize, bool)>>,
    /// Device conditions declared so far (the next one's slot).
    conds: u32,
    /// Whether the chunks being emitted are made only when the node list is needed (the later
    /// iterations of an indexed run, see [`repeat_runs`]): no words of their own.
    pub(crate) lazy: bool,
    /// The device condition each device statement names, as `graph!` resolved it, by node.
    pub(crate) cond_slot: Vec<Option<u32>>,
    /// The receivers of the body's kernel statements that are paths, by their tokens, and the
    /// local each is made into once per call (see [`expand`]).
    pub(crate) receivers: HashMap<String, syn::Ident>,
}

/// How a statement's node value is kept: always present, in an `if` branch (an `Option`), or in
/// a run-time `for` body (a `Vec`, one per iteration).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    Plain,
    Conditional,
    Looped,
}

/// Statements of `items`; nodes inside an `if` are `Option`s declared up front in `decls`, nodes
/// inside a run-time `for` `Vec`s.
pub(crate) fn emit_items(
    items: &[Item],
    places: &HashMap<String, PlaceInfo<'_>>,
    counter: &mut NodeCounter,
    holder: Holder,
    decls: &mut TokenStream,
) -> TokenStream {
    let mut out = TokenStream::new();
    // Consecutive plain statements are built in chunks, each inside a closure called through
    // an `#[inline(never)]` function: one function per chunk instead of one function holding
    // every statement, which LLVM optimizes in super-linear time (issue 18).
    let mut chunk: Vec<(syn::Ident, TokenStream)> = Vec::new();
    // The iterations of an unrolled `for` are emitted in line, so that their statements share
    // chunks: one chunk (a closure and three `let`s) per iteration made type checking and
    // clippy quadratic and overflowed rustc's stack in debug builds (nested debug-info scopes)
    // at 1000 iterations. Their names were resolved when the body was checked.
    // Runs of identical iterations (see `repeat_runs`) are made once, in a node list of its
    // own kind: only in a body whose node list is the array.
    let mut flat = Vec::with_capacity(items.len());
    if holder == Holder::Plain && !counter.looped_body && counter.words {
        let mut body = Body { places, counter, decls, chunk: &mut chunk, out: &mut out };
        body.runs(items, &mut flat);
    } else {
        unscope(items, &mut flat);
    }
    out.extend(emit_flat(&flat, places, counter, holder, decls, &mut chunk));
    flush(&mut chunk, counter, &mut out);
    out
}

/// What [`emit_items`] builds a plain body into.
struct Body<'b, 'p> {
    places: &'b HashMap<String, PlaceInfo<'p>>,
    counter: &'b mut NodeCounter,
    decls: &'b mut TokenStream,
    chunk: &'b mut Vec<(syn::Ident, TokenStream)>,
    out: &'b mut TokenStream,
}

impl Body<'_, '_> {
    /// `items` into `flat`, but each run of iterations emitted at once ([`Self::run`]). The
    /// iterations of an unrolled `for` that is no run are looked into for runs of their own.
    fn runs<'i>(&mut self, items: &'i [Item], flat: &mut Vec<&'i Item>) {
        for Run { item, times, iterations } in repeat_runs(items, self.places) {
            let body = match item {
                Item::Scope(body) => body,
                Item::For(iterations) => {
                    self.runs(iterations, flat);
                    continue;
                }
                _ => {
                    flat.push(item);
                    continue;
                }
            };
            if times == 1 {
                self.runs(body, flat);
                continue;
            }
            self.emit(flat);
            flat.clear();
            self.run(iterations);
        }
    }

    /// A run of iterations (see [`repeat_runs`]): the first iteration as written; the later
    /// ones in lazy chunks, made only when the node list is needed; then, in the call's words,
    /// either only the later iterations' array elements (when every kernel statement of the
    /// first iteration is a call its `kernels!` method made, `__private::made_by`: the later
    /// iterations then make the same calls on other elements), or every later node as written.
    fn run(&mut self, iterations: &[Item]) {
        flush(self.chunk, self.counter, self.out);
        let first_node = self.counter.next;
        self.emit(&items_of(&iterations[0]));
        flush(self.chunk, self.counter, self.out);
        // Where each node of the first iteration is: its chunk and its field there.
        let mut fields: HashMap<usize, usize> = HashMap::new();
        let mut made = Vec::new();
        for (i, node) in (first_node..self.counter.next).zip(statements_of(&iterations[0])) {
            let (c, _) = self.counter.chunk_of[i].expect("a run's statements are chunked");
            let field = fields.entry(c).or_insert(0);
            if let Op::Launch { receiver, kernel, .. } = &node.op {
                let chunk = local(format!("__cudagraph_chunk{c}"));
                let f = syn::Index::from(*field);
                let method = syn::ext::IdentExt::unraw(kernel).to_string();
                made.push(quote! {
                    ::cudagraph::__private::made_by(&#receiver, &#chunk.#f, #method)
                });
            }
            *field += 1;
        }
        // Each operand of the later iterations' statements that names no array element: its
        // handle (the same in every iteration). An element's handle is in the words with its
        // place's guard and its array's contexts (`__private::acquire_mut_each`).
        let mut singles: Vec<(usize, bool)> = Vec::new();
        if let Some(it) = iterations.get(1) {
            for node in statements_of(it) {
                for o in node.op.operands() {
                    let place = &self.places[&o.key];
                    if place.array.is_none() {
                        singles.push((place.index, o.write));
                    }
                }
            }
        }
        let (lazy_first, later_node) = (self.counter.chunks, self.counter.next);
        self.counter.lazy = true;
        let rest: Vec<&Item> = iterations[1..].iter().flat_map(items_of).collect();
        self.emit(&rest);
        flush(self.chunk, self.counter, self.out);
        self.counter.lazy = false;
        let copies = (self.counter.next - later_node) as u64;
        // The first iteration's statements: the nodes the later ones repeat.
        let first = (later_node - first_node) as u32;
        let w = local("__cudagraph_words");
        let compared = singles.iter().map(|&(index, write)| {
            let (r, wh) = handles(index);
            let h = if write { wh } else { r };
            quote!(::cudagraph::__private::word_handle(&mut #w, &#h, #write);)
        });
        let lazy =
            (lazy_first..self.counter.chunks).map(|c| local(format!("__cudagraph_chunk{c}")));
        let made = if made.is_empty() { quote!(true) } else { quote!(#(#made)&&*) };
        self.out.extend(quote! {
            if #made {
                ::cudagraph::__private::word_repeat(&mut #w, #copies, #first);
                #(#compared)*
            } else {
                #(#lazy.put_words(&mut #w);)*
            }
        });
    }

    /// Plain statements, chunked.
    fn emit(&mut self, flat: &[&Item]) {
        let (places, counter, decls) = (self.places, &mut *self.counter, &mut *self.decls);
        self.out.extend(emit_flat(flat, places, counter, Holder::Plain, decls, self.chunk));
    }
}

/// Emits the chunk being built, if any.
fn flush(
    chunk: &mut Vec<(syn::Ident, TokenStream)>,
    counter: &mut NodeCounter,
    out: &mut TokenStream,
) {
    if !chunk.is_empty() {
        let c = if counter.lazy {
            emit_lazy_chunk(chunk, counter.chunks)
        } else {
            emit_chunk(chunk, counter.chunks, !counter.looped_body, counter.words)
        };
        out.extend(c);
        counter.chunks += 1;
    }
}

/// A chunk of an indexed run's later iterations: its statements built only when the node list
/// is needed (`__private::LazyChunk`), their words being their elements' guards and contexts
/// (`__private::acquire_mut_each`).
fn emit_lazy_chunk(chunk: &mut Vec<(syn::Ident, TokenStream)>, number: usize) -> TokenStream {
    let c = local(format!("__cudagraph_chunk{number}"));
    let names: Vec<&syn::Ident> = chunk.iter().map(|(n, _)| n).collect();
    let lets = chunk.iter().map(|(n, v)| quote!(#[allow(unused_braces)] let #n = #v;));
    let out = quote! {
        let #c = ::cudagraph::__private::LazyChunk::new(|| {
            #(#lets)*
            (#(#names,)*)
        });
    };
    chunk.clear();
    out
}

/// The items of an iteration (a scope), nested iterations' included, in order.
fn items_of(it: &Item) -> Vec<&Item> {
    let mut one = Vec::new();
    if let Item::Scope(body) = it {
        unscope(body, &mut one);
    }
    one
}

/// The statements of an iteration (a scope), nested ones included, in order.
fn statements_of(it: &Item) -> Vec<&Node> {
    items_of(it)
        .into_iter()
        .map(|i| match i {
            Item::Node(n) => n,
            _ => unreachable!("a run's iterations hold statements only"),
        })
        .collect()
}

/// One item of a body for [`emit_items`], or the first of a run of `times` iterations.
struct Run<'a> {
    item: &'a Item,
    times: usize,
    /// The run's iterations (`item` first).
    iterations: &'a [Item],
}

/// The items of a body with each run of two or more consecutive iterations of unrolled `for`s
/// whose statements are all [`repeatable`] and have the same tokens but for which element of
/// an array acquired in one loop (see [`mark_arrays`]) each argument names (`&mut bufs[i]`) as
/// one [`Run`] of `times` iterations: the later iterations make the same nodes as the first,
/// on other elements, when their kernel statements are `kernels!` methods (checked at run
/// time: [`Body::run`]).
fn repeat_runs<'a>(items: &'a [Item], places: &HashMap<String, PlaceInfo<'_>>) -> Vec<Run<'a>> {
    let mut out: Vec<Run<'a>> = Vec::new();
    let mut last: Option<String> = None;
    for (at, item) in items.iter().enumerate() {
        let key = match item {
            Item::Scope(body) => iteration_key(body, places),
            _ => None,
        };
        match (&key, &last, out.last_mut()) {
            (Some(shape), Some(l), Some(run)) if shape == l => {
                run.times += 1;
                run.iterations = &items[at + 1 - run.times..=at];
            }
            _ => out.push(Run { item, times: 1, iterations: std::slice::from_ref(item) }),
        }
        last = key;
    }
    out
}

/// The tokens of an iteration whose statements are all [`repeatable`] (none in `if`s,
/// run-time loops or `condition` declarations), each argument that names an element of an array
/// acquired in one loop written as the array; else `None`.
fn iteration_key(body: &[Item], places: &HashMap<String, PlaceInfo<'_>>) -> Option<String> {
    let mut flat = Vec::new();
    unscope(body, &mut flat);
    let mut shape = String::new();
    for item in flat {
        let Item::Node(node) = item else { return None };
        if !repeatable(node) {
            return None;
        }
        shape.push_str(&shape_of(node, places));
        shape.push('\u{1}');
    }
    (!shape.is_empty()).then_some(shape)
}

/// A [`repeatable`] statement's tokens with each operand written as its place, or as its array
/// for an element of an array acquired in one loop.
fn shape_of(node: &Node, places: &HashMap<String, PlaceInfo<'_>>) -> String {
    let operand = |o: &Operand| match places.get(&o.key).and_then(|p| p.array) {
        Some((a, _)) => format!("[array {a} {}]", o.write),
        None => format!("[{} {}]", o.key, o.write),
    };
    let t = |e: &Expr| e.to_token_stream().to_string();
    match &node.op {
        Op::Launch { receiver, kernel, args, cfg, .. } => {
            let args: Vec<String> = args
                .iter()
                .map(|a| match a {
                    Arg::Scalar(e) => t(e),
                    Arg::Buffer(o) => operand(o),
                })
                .collect();
            format!("launch {} {kernel} ({}) {}", t(receiver), args.join(", "), t(cfg))
        }
        Op::Copy { src, dst, .. } => format!("copy {} {}", operand(src), operand(dst)),
        Op::Memset { dst, value, .. } => format!("memset {} {}", operand(dst), t(value)),
        Op::Fill { dst, value, .. } => format!("fill {} {}", operand(dst), t(value)),
        Op::Zero { dst, .. } => format!("zero {}", operand(dst)),
        Op::Empty { .. } => "empty".to_string(),
        _ => node.tokens.to_string(),
    }
}

/// Whether a statement evaluates the same node in every iteration of a run: a chunked kernel
/// launch, copy, memset, zero, fill or `empty()` whose expressions (receiver, scalar
/// arguments, configuration, value) are [`pure`]: literals, names, casts and tuples, arrays
/// and struct literals of them. A function or method call, an operator (which may be a
/// user's `impl`), a field (which may go through a user's `Deref`) or an index is not: it is
/// evaluated in every iteration, as written.
pub(crate) fn repeatable(node: &Node) -> bool {
    if !chunkable(node) {
        return false;
    }
    match &node.op {
        Op::Launch { receiver, args, cfg, .. } => {
            pure(receiver)
                && pure(cfg)
                && args.iter().all(|a| match a {
                    Arg::Scalar(e) => pure(e),
                    Arg::Buffer(_) => true,
                })
        }
        Op::Copy { .. } | Op::Zero { .. } | Op::Empty { .. } => true,
        Op::Memset { value, .. } | Op::Fill { value, .. } => pure(value),
        _ => false,
    }
}

/// See [`repeatable`].
fn pure(e: &Expr) -> bool {
    match e {
        Expr::Lit(_) => true,
        Expr::Path(p) => p.qself.is_none(),
        Expr::Paren(p) => pure(&p.expr),
        Expr::Group(g) => pure(&g.expr),
        Expr::Cast(c) => pure(&c.expr),
        Expr::Tuple(t) => t.elems.iter().all(pure),
        Expr::Array(a) => a.elems.iter().all(pure),
        Expr::Struct(s) => {
            s.qself.is_none()
                && s.fields.iter().all(|f| pure(&f.expr))
                && s.rest.as_deref().is_none_or(pure)
        }
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Neg(_)) && matches!(*u.expr, Expr::Lit(_)),
        _ => false,
    }
}

/// Statements of a flattened body, chunked into `chunk` (see [`emit_items`]).
fn emit_flat(
    flat: &[&Item],
    places: &HashMap<String, PlaceInfo<'_>>,
    counter: &mut NodeCounter,
    holder: Holder,
    decls: &mut TokenStream,
    chunk: &mut Vec<(syn::Ident, TokenStream)>,
) -> TokenStream {
    let mut out = TokenStream::new();
    for &item in flat {
        if holder == Holder::Plain
            && let Item::Node(node) = item
            && chunkable(node)
        {
            let n = local(format!("__cudagraph_n{}", counter.next));
            counter.chunk_of.resize(counter.next + 1, None);
            counter.chunk_of[counter.next] = Some((counter.chunks, chunk.is_empty()));
            counter.next += 1;
            chunk.push((n, node_value(node, places, &counter.receivers)));
            if chunk.len() == CHUNK {
                flush(chunk, counter, &mut out);
            }
            continue;
        }
        flush(chunk, counter, &mut out);
        match item {
            Item::Node(node) => {
                if let (Op::Conditional { cond, .. }, Some(Some(k))) =
                    (&node.op, counter.cond_slot.get(counter.next))
                {
                    out.extend(crate::hygiene::condition_check(cond, *k));
                }
                let n = local(format!("__cudagraph_n{}", counter.next));
                counter.next += 1;
                let value = node_value(node, places, &counter.receivers);
                if holder == Holder::Looped {
                    decls.extend(quote!(let mut #n = ::std::vec::Vec::new();));
                    let v = local("__cudagraph_v");
                    out.extend(quote! {
                        #[allow(unused_braces)]
                        let #v = #value;
                        #n.push(#v);
                    });
                } else if holder == Holder::Conditional {
                    decls.extend(quote!(let mut #n = ::core::option::Option::None;));
                    let v = local("__cudagraph_v");
                    let word = if counter.words {
                        let w = local("__cudagraph_words");
                        quote! {
                            if let ::core::option::Option::Some(#v) = &#n {
                                ::cudagraph::__private::word_node(&mut #w, #v);
                            }
                        }
                    } else {
                        quote!()
                    };
                    out.extend(quote! {
                        #[allow(unused_braces)]
                        let #v = #value;
                        #n = ::core::option::Option::Some(#v);
                        #word
                    });
                } else {
                    let word = word_node(&n, counter.words);
                    out.extend(quote!(#[allow(unused_braces)] let #n = #value; #word));
                }
                // A device statement's bodies follow it in the node list, present with it.
                if let Op::Conditional { bodies, .. } = &node.op {
                    for b in bodies {
                        out.extend(emit_items(b, places, counter, holder, decls));
                    }
                }
            }
            Item::Condition(c) => {
                let slot = counter.conds;
                counter.conds += 1;
                let (name, default, func) = (&c.name, &c.default, &c.func);
                let default = quote_spanned!(default.span()=> { let __d: u32 = #default; __d });
                // SAFETY: `#slot` numbers this `condition(..)` statement in the call's body.
                // (The block has the macro's span, so `unsafe_code` in the user's crate does
                // not see it as the user's.)
                let call = local("__cudagraph_call");
                let made =
                    quote!(unsafe { ::cudagraph::__private::condition(&#call, #slot, #default) });
                out.extend(quote_spanned! {func.span()=>
                    let #name: ::cudagraph::Condition = #made;
                });
                out.extend(crate::hygiene::condition_mark(name, slot));
            }
            Item::Scope(_) | Item::For(_) => unreachable!("`unscope` leaves no scope"),
            Item::Loop(l) => {
                out.extend(loops::emit(l, places, counter, decls));
            }
            Item::If(i) => {
                let bit = counter.ifs;
                let key_var = local("__cudagraph_key");
                counter.ifs += 1;
                let cond = &i.cond;
                let then = emit_items(&i.then, places, counter, Holder::Conditional, decls);
                let els = emit_items(&i.els, places, counter, Holder::Conditional, decls);
                out.extend(quote! {
                    if #cond {
                        #key_var |= 1u64 << #bit;
                        #then
                    } else {
                        #els
                    }
                });
            }
        }
    }
    out
}

/// `items` with the iterations of unrolled `for`s (scopes, nested or not) replaced by their
/// statements, in order.
fn unscope<'a>(items: &'a [Item], out: &mut Vec<&'a Item>) {
    for item in items {
        match item {
            Item::Scope(body) | Item::For(body) => unscope(body, out),
            _ => out.push(item),
        }
    }
}

/// Statements per chunk (see [`emit_items`]).
const CHUNK: usize = 16;

/// Whether a plain statement can be built inside a chunk's closure: a kernel, copy, memset,
/// zero, fill, empty or event statement whose tokens hold no `?`, `return`, `break`,
/// `continue`, `.await` or `yield` (which would act on the closure instead of the enclosing
/// function), no macro call (which could expand to one of them), and no assignment (a local
/// moved and assigned again in an argument would be captured by value: its new value would stay
/// in the closure). Other statements are built in place, as before chunks existed.
pub(crate) fn chunkable(node: &Node) -> bool {
    let kind = matches!(
        node.op,
        Op::Launch { .. }
            | Op::Copy { .. }
            | Op::Memset { .. }
            | Op::Zero { .. }
            | Op::Fill { .. }
            | Op::Empty { .. }
            | Op::Event { .. }
    );
    fn plain(t: TokenStream) -> bool {
        use proc_macro2::{Spacing, TokenTree};
        let tokens: Vec<TokenTree> = t.into_iter().collect();
        tokens.iter().enumerate().all(|(i, t)| match t {
            TokenTree::Group(g) => plain(g.stream()),
            TokenTree::Punct(p) => match p.as_char() {
                '?' => false,
                // A macro call: `name!`.
                '!' if i > 0
                    && matches!(tokens[i - 1], TokenTree::Ident(_))
                    && p.spacing() == Spacing::Alone =>
                {
                    false
                }
                // An assignment: an `=` that is not part of `==`, `!=`, `<=`, `>=` or `=>`.
                '=' => {
                    let joined_before = i > 0
                        && matches!(&tokens[i - 1], TokenTree::Punct(q)
                            if q.spacing() == Spacing::Joint && "=!<>".contains(q.as_char()));
                    let joined_after = p.spacing() == Spacing::Joint
                        && matches!(tokens.get(i + 1), Some(TokenTree::Punct(q)) if "=>".contains(q.as_char()));
                    joined_before || joined_after
                }
                _ => true,
            },
            TokenTree::Ident(i) => {
                !["return", "break", "continue", "await", "yield"].iter().any(|k| i == k)
            }
            TokenTree::Literal(_) => true,
        })
    }
    // The statement's own `let name =` is not an assignment in an argument.
    let mut tokens = node.tokens.clone().into_iter().peekable();
    if matches!(tokens.peek(), Some(proc_macro2::TokenTree::Ident(i)) if i == "let") {
        for t in tokens.by_ref() {
            if matches!(&t, proc_macro2::TokenTree::Punct(p) if p.as_char() == '=') {
                break;
            }
        }
    }
    kind && plain(tokens.collect())
}

/// One chunk: its statements built inside `__private::chunk(|| …)`, returned as one tuple that
/// stays in place and is one segment of the node list (`set_list`), or, in a body with a
/// run-time `for`, whose statements' names are references into it.
fn emit_chunk(
    chunk: &mut Vec<(syn::Ident, TokenStream)>,
    number: usize,
    set_list: bool,
    words: bool,
) -> TokenStream {
    let c = local(format!("__cudagraph_chunk{number}"));
    let names: Vec<&syn::Ident> = chunk.iter().map(|(n, _)| n).collect();
    let lets = chunk.iter().map(|(n, v)| quote!(#[allow(unused_braces)] let #n = #v;));
    let mut out = quote! {
        let #c = ::cudagraph::__private::chunk(|| {
            #(#lets)*
            (#(#names,)*)
        });
    };
    if words {
        // Each node into the call's words from its place in the chunk's tuple (a node put in
        // inside the closure, before it moved into the tuple, was copied once more).
        let w = local("__cudagraph_words");
        let fields = (0..chunk.len()).map(syn::Index::from);
        out.extend(quote!(#(::cudagraph::__private::word_node(&mut #w, &#c.#fields);)*));
    }
    if !set_list {
        // A body with a run-time `for` lists its nodes by name (see `loops`); the
        // node list of any other body takes the chunk's tuple as one segment.
        out.extend(quote!(let (#(ref #names,)*) = #c;));
    }
    chunk.clear();
    out
}

/// The statement that puts node `n` into the call's words, as soon as it is made (nothing
/// when the body makes no words).
fn word_node(n: &syn::Ident, words: bool) -> TokenStream {
    let w = local("__cudagraph_words");
    if words { quote!(::cudagraph::__private::word_node(&mut #w, &#n);) } else { quote!() }
}

/// The expression that evaluates a statement's node parameters.
fn node_value(
    node: &Node,
    places: &HashMap<String, PlaceInfo<'_>>,
    receivers: &HashMap<String, syn::Ident>,
) -> TokenStream {
    // The handle is a hygienic local; the block around it carries the operand's span, so a type
    // error on it (e.g. `&x` where the kernel writes) lands on the user's `&x`. (The statement
    // holding the node value allows `unused_braces`.)
    let operand = |o: &Operand| {
        let p = &places[&o.key];
        let h = match p.array {
            Some((a, k)) => {
                // The array gives write handles; a read takes the same buffer's read handle.
                let array = local(format!("__cudagraph_a{a}"));
                let k = proc_macro2::Literal::usize_unsuffixed(k);
                if o.write { quote!(#array.at(#k)) } else { quote!(#array.at(#k).read()) }
            }
            None => {
                let (r, w) = handles(p.index);
                if o.write { quote!(#w) } else { quote!(#r) }
            }
        };
        // The handle's tokens too are located at the operand (their hygiene unchanged): a block
        // whose type is wrong is reported at its tail expression, which was the whole `graph!`
        // (an argument missing before `&u` put `&u`'s handle where a scalar goes).
        let h = located_at(h, o.span);
        let mut block = proc_macro2::Group::new(proc_macro2::Delimiter::Brace, quote!(#h));
        block.set_span(o.span);
        quote!(#block)
    };
    match &node.op {
        Op::Launch { receiver, kernel, args, parens, launch, cfg } => {
            // Scalars pass through `scalar`, which takes plain values only (never a handle).
            let args = args.iter().map(|a| match a {
                Arg::Scalar(e) => quote_spanned!(e.span()=> ::cudagraph::__private::scalar(#e)),
                Arg::Buffer(o) => operand(o),
            });
            // The user's parentheses and `launch` word, so arity and configuration errors
            // point at them.
            let mut call =
                proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, quote!(#(#args),*));
            call.set_span(*parens);
            let receiver = match receivers.get(&receiver.to_token_stream().to_string()) {
                // A path: the struct made once per call (see `expand`), with the receiver's span.
                Some(k) => {
                    let mut g = proc_macro2::Group::new(proc_macro2::Delimiter::None, quote!(#k));
                    g.set_span(receiver.span());
                    quote!(#g)
                }
                None => {
                    quote_spanned! {receiver.span()=>
                        ::cudagraph::__private::concrete(
                            ::cudagraph::__private::kernels(&#receiver),
                            |r| r.__cudagraph_concrete(),
                        )
                    }
                }
            };
            let launch = quote!(#receiver.#kernel #call.#launch(#cfg));
            quote_spanned!(kernel.span()=> ::cudagraph::__private::kernel_node(#launch))
        }
        Op::Copy { func, src, dst } => {
            let (s, d) = (operand(src), operand(dst));
            let stream = local("__cudagraph_stream");
            quote_spanned!(func.span()=> ::cudagraph::__private::copy_on(#stream, #s, #d))
        }
        Op::Copy2d { func, src, src_rows, dst, dst_rows } => {
            let (s, d) = (operand(src), operand(dst));
            let sr =
                quote_spanned!(src_rows.span()=> { let __r: ::cudagraph::Rows = #src_rows; __r });
            let dr =
                quote_spanned!(dst_rows.span()=> { let __r: ::cudagraph::Rows = #dst_rows; __r });
            let stream = local("__cudagraph_stream");
            quote_spanned!(func.span()=> ::cudagraph::__private::copy_2d_on(#stream, #s, #sr, #d, #dr))
        }
        Op::Memset2d { func, dst, rows, value } => {
            let d = operand(dst);
            let r = quote_spanned!(rows.span()=> { let __r: ::cudagraph::Rows = #rows; __r });
            quote_spanned!(func.span()=> ::cudagraph::__private::memset_2d(#d, #r, #value))
        }
        Op::Memset { func, dst, value } => {
            let d = operand(dst);
            quote_spanned!(func.span()=> ::cudagraph::__private::memset(#d, #value))
        }
        Op::Fill { func, dst, value } => {
            let d = operand(dst);
            let stream = local("__cudagraph_stream");
            quote_spanned!(func.span()=> ::cudagraph::__private::fill(#stream, #d, #value))
        }
        Op::Zero { func, dst } => {
            let d = operand(dst);
            quote_spanned!(func.span()=> ::cudagraph::__private::zero(#d))
        }
        Op::Child { func, graph } => {
            let g = operand(graph);
            quote_spanned!(func.span()=> ::cudagraph::__private::child(#g))
        }
        Op::Empty { func } => quote_spanned!(func.span()=> ::cudagraph::__private::empty()),
        Op::Alloc { func, buffer, .. } => {
            let s = local(format!("__cudagraph_s{}", places[&buffer.key].index));
            quote_spanned!(func.span()=> #s.alloc_node())
        }
        Op::Free { func, buffer } => {
            let s = local(format!("__cudagraph_s{}", places[&buffer.key].index));
            quote_spanned!(func.span()=> #s.free_node())
        }
        Op::Event { func, event } => {
            quote_spanned!(func.span()=> ::cudagraph::__private::#func(#event))
        }
        Op::Host { func, operands, closure } => {
            let ops = operands.iter().map(operand);
            quote_spanned!(func.span()=> ::cudagraph::__private::host((#(#ops,)*), #closure))
        }
        Op::Conditional { func, cond, bodies } => {
            let size = bodies.len() as u32;
            let ty = match func.to_string().as_str() {
                "device_while" => quote!(While),
                "device_if" => quote!(If),
                _ => quote!(Switch),
            };
            quote_spanned! {cond.span()=>
                ::cudagraph::__private::conditional(#cond, ::cudagraph::ConditionalType::#ty, #size)
            }
        }
        Op::Capture { func, operands, key: None, closure } => {
            let ops = operands.iter().map(operand);
            let stream = local("__cudagraph_stream_arc");
            quote_spanned!(func.span()=> ::cudagraph::__private::capture(#stream, (#(#ops,)*), #closure))
        }
        Op::Capture { func, operands, key: Some(key), closure } => {
            let ops = operands.iter().map(operand);
            let stream = local("__cudagraph_stream_arc");
            quote_spanned! {func.span()=>
                ::cudagraph::__private::capture_keyed(#stream, (#(#ops,)*), #key, #closure)
            }
        }
    }
}

/// The static plan and its registration.
fn plan(
    checked: &Checked<'_>,
    order: &[String],
    places: &HashMap<String, PlaceInfo<'_>>,
    register: bool,
) -> TokenStream {
    let (line, _) = line_column(Span::call_site());
    // Each node's accesses; a conditional node's are the union of its bodies' (nested bodies
    // included: a body node comes after its conditional node, so walking backwards sees it
    // complete).
    let mut all: Vec<Vec<(usize, bool)>> = checked
        .nodes
        .iter()
        .map(|f| {
            let mut accesses: Vec<(usize, bool)> = Vec::new();
            for o in f.node.op.operands() {
                add_access(&mut accesses, places[&o.key].index, o.write);
            }
            accesses
        })
        .collect();
    for j in (0..all.len()).rev() {
        if let Some((c, _)) = checked.nodes[j].body {
            for (p, w) in all[j].clone() {
                add_access(&mut all[c], p, w);
            }
        }
    }
    let nodes = checked.nodes.iter().zip(&checked.after).zip(&all).map(|((f, after), accesses)| {
        let node = f.node;
        let label = node.label();
        let text = normalize(&node.tokens);
        let (l, c) = line_column(node.span);
        let kind = match &node.op {
            Op::Launch { kernel, .. } => {
                let k = kernel.to_string();
                quote!(::cudagraph::NodeKind::Kernel(#k))
            }
            Op::Copy { .. } | Op::Copy2d { .. } => quote!(::cudagraph::NodeKind::Memcpy),
            Op::Memset2d { .. } => quote!(::cudagraph::NodeKind::Memset),
            Op::Memset { .. } | Op::Zero { .. } => quote!(::cudagraph::NodeKind::Memset),
            Op::Fill { .. } => quote!(::cudagraph::NodeKind::Kernel("fill")),
            Op::Capture { .. } => quote!(::cudagraph::NodeKind::Captured),
            Op::Child { .. } => quote!(::cudagraph::NodeKind::Child),
            Op::Host { .. } => quote!(::cudagraph::NodeKind::Host),
            Op::Empty { .. } => quote!(::cudagraph::NodeKind::Empty),
            Op::Alloc { .. } => quote!(::cudagraph::NodeKind::MemAlloc),
            Op::Free { .. } => quote!(::cudagraph::NodeKind::MemFree),
            Op::Event { func, .. } if func == "event_record" => {
                quote!(::cudagraph::NodeKind::EventRecord)
            }
            Op::Event { .. } => quote!(::cudagraph::NodeKind::EventWait),
            Op::Conditional { func, .. } => {
                let w = func.to_string();
                quote!(::cudagraph::NodeKind::Conditional(#w))
            }
        };
        let accesses = accesses.iter().map(|&(p, w)| {
            let p = p as u32;
            quote!(::cudagraph::Access { place: #p, write: #w })
        });
        let cond = &f.condition;
        quote! {
            ::cudagraph::PlanNode {
                label: #label,
                text: #text,
                kind: #kind,
                line: #l,
                column: #c,
                accesses: &[#(#accesses),*],
                after: &[#(#after),*],
                condition: #cond,
            }
        }
    });
    let conditions = checked.conditions;
    let registration = register.then(|| {
        quote! {
            ::cudagraph::__private::inventory::submit! {
                ::cudagraph::__private::Registered(&__CUDAGRAPH_PLAN)
            }
        }
    });
    let bodies = checked.bodies.iter().map(|(n, c, b)| quote!((#n, #c, #b)));
    quote! {
        static __CUDAGRAPH_PLAN: ::cudagraph::Plan = ::cudagraph::Plan {
            file: ::core::file!(),
            line: #line,
            places: &[#(#order),*],
            nodes: &[#(#nodes),*],
            conditions: #conditions,
            bodies: &[#(#bodies),*],
        };
        #registration
    }
}

/// Adds access `(place, write)` to `accesses`, merging with the same place.
fn add_access(accesses: &mut Vec<(usize, bool)>, place: usize, write: bool) {
    match accesses.iter_mut().find(|a| a.0 == place) {
        Some(a) => a.1 |= write,
        None => accesses.push((place, write)),
    }
}

/// After errors: the errors, and an expression of the right type so no follow-on error appears.
pub fn fallback(error: syn::Error) -> TokenStream {
    let errors = error.to_compile_error();
    quote! {{
        #errors;
        ::core::result::Result::<(), ::cudagraph::Error>::Ok(())
    }}
}
