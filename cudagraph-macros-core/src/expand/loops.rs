//! The code of graph `for` loops whose bounds are not integer literals (lowered and checked by
//! `parse::loops`): the body's nodes pushed once per iteration, the iteration counted, and the
//! node list handed to `GraphCache::run_looped` with each loop's node range and count.

use std::collections::HashMap;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::{Holder, NodeCounter, PlaceInfo, emit_items, local};
use crate::ast::Loop;
use crate::check::Checked;

/// The code of a run-time `for`: its bounds evaluated once per call, then the body's node values
/// pushed once per iteration into the `Vec`s declared in `decls`, and the iteration counted in
/// `__cudagraph_c{k}`.
pub(crate) fn emit(
    l: &Loop,
    places: &HashMap<String, PlaceInfo<'_>>,
    counter: &mut NodeCounter,
    decls: &mut TokenStream,
) -> TokenStream {
    let c = local(format!("__cudagraph_c{}", counter.loops));
    counter.loops += 1;
    decls.extend(quote!(let mut #c: usize = 0;));
    let body = emit_items(&l.body, places, counter, Holder::Looped, decls);
    let (s, e) = (local("__cudagraph_s"), local("__cudagraph_e"));
    let (start, end) = (&l.start, &l.end);
    let var = match &l.var {
        Some(v) => quote!(#v),
        None => quote!(_),
    };
    let range = if l.closed { quote!(#s..=#e) } else { quote!(#s..#e) };
    let start = quote_spanned!(start.span()=> let #s: usize = #start;);
    let end = quote_spanned!(end.span()=> let #e: usize = #end;);
    quote! {{
        #start
        #end
        for #var in #range {
            #c += 1;
            #body
        }
    }}
}

/// The call of a body with run-time `for`s: the node list built at run time (each loop's nodes
/// once per iteration, iteration by iteration) and handed to `GraphCache::run_looped` with each
/// loop's node range in the plan and its count.
pub(crate) fn run_call(
    checked: &Checked<'_>,
    entry: &dyn Fn(usize) -> TokenStream,
    cache: &Ident,
    call: &Ident,
    key: &Ident,
    stream: &Ident,
    guards: &TokenStream,
) -> TokenStream {
    let nodes = local("__cudagraph_nodes");
    let t = local("__cudagraph_t");
    let n = checked.nodes.len();
    let (mut pushes, mut ranges, mut counts) = (TokenStream::new(), Vec::new(), Vec::new());
    let mut i = 0;
    while i < n {
        match checked.nodes[i].looped {
            None => {
                let e = entry(i);
                pushes.extend(quote!(#nodes.push(#e);));
                i += 1;
            }
            Some(k) => {
                let first = i;
                while i < n && checked.nodes[i].looped == Some(k) {
                    i += 1;
                }
                let items = (first..i).map(|j| {
                    let v = local(format!("__cudagraph_n{j}"));
                    quote!(#nodes.push(::cudagraph::__private::node(&#v[#t]));)
                });
                let c = local(format!("__cudagraph_c{k}"));
                pushes.extend(quote!(for #t in 0..#c { #(#items)* }));
                let (f, len) = (first as u32, (i - first) as u32);
                ranges.push(quote!((#f, #len)));
                counts.push(c);
            }
        }
    }
    quote! {
        let mut #nodes = ::std::vec::Vec::new();
        #pushes
        // SAFETY: the plan was generated from this body (`run_looped` checks each node's handles
        // against its accesses, and the node list against the loops' ranges and counts), and
        // the guards are its places' borrows, in place order.
        unsafe {
            #cache.run_looped(
                &__CUDAGRAPH_PLAN, &#call, #key, &[#(#ranges),*], &[#(#counts),*],
                #stream, &#nodes, #guards,
            )
        }
    }
}
