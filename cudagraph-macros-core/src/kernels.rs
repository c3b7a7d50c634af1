//! `kernels!`: typed kernel signatures and the struct that loads them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, ForeignItemFn, Ident, Pat, Token, Type, Visibility, braced};

use crate::errors::Errors;
use crate::programmatic;

/// Most parameters a kernel declared in `kernels!` may have.
pub const MAX_PARAMS: usize = 16;

/// Names of the methods `kernels!` generates besides the kernels.
const RESERVED: &[&str] = &["load", "function", "module", "context", "NAMES", "PROGRAMMATIC"];

/// `ATTRS VIS struct NAME { fn name(params); … }`.
pub struct KernelsInput {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub fns: Vec<ForeignItemFn>,
}

impl Parse for KernelsInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        input.parse::<Token![struct]>()?;
        let name = input.parse()?;
        let content;
        braced!(content in input);
        let mut fns = Vec::new();
        while !content.is_empty() {
            fns.push(content.parse()?);
        }
        Ok(KernelsInput { attrs, vis, name, fns })
    }
}

/// A kernel parameter.
pub enum Param {
    /// Passed by value.
    Scalar(Type),
    /// `&[T]`: device memory the kernel reads.
    Read(Type),
    /// `&mut [T]`: device memory the kernel writes.
    Write(Type),
    /// `&T`: a device scalar the kernel reads (a one-element buffer).
    ReadOne(Type),
    /// `&mut T`: a device scalar the kernel writes (a one-element buffer).
    WriteOne(Type),
}

/// Classifies a parameter type.
pub fn param(ty: &Type) -> Param {
    if let Type::Reference(r) = ty
        && let Type::Slice(s) = &*r.elem
    {
        let elem = (*s.elem).clone();
        return if r.mutability.is_some() { Param::Write(elem) } else { Param::Read(elem) };
    }
    if let Type::Reference(r) = ty
        && let Type::Path(_) = &*r.elem
    {
        let elem = (*r.elem).clone();
        return if r.mutability.is_some() { Param::WriteOne(elem) } else { Param::ReadOne(elem) };
    }
    Param::Scalar(ty.clone())
}

pub fn expand(input: KernelsInput) -> TokenStream {
    let mut errors = Errors::default();
    let KernelsInput { attrs, vis, name, fns } = input;
    let attrs = programmatic::misplaced(attrs, fns.iter().flat_map(|f| &f.sig.inputs), &mut errors);
    let name_str = name.to_string();
    let mut methods = Vec::new();
    let mut names = Vec::new();
    let mut programmatic_names = Vec::new();
    for f in &fns {
        let sig = &f.sig;
        if !sig.generics.params.is_empty() || sig.asyncness.is_some() || sig.unsafety.is_some() {
            errors.push(sig, "a kernel signature is `fn name(param: Type, …);` without generics, async or unsafe");
            continue;
        }
        if sig.inputs.len() > MAX_PARAMS {
            errors.push(&sig.inputs, format!("a kernel may have at most {MAX_PARAMS} parameters"));
            continue;
        }
        let kname = &sig.ident;
        let kstr = syn::ext::IdentExt::unraw(kname).to_string();
        if RESERVED.contains(&kstr.as_str()) {
            errors.push(kname, format!("`{kstr}` is a method `kernels!` generates (`load`, `function`, `module`, `context`); rename the kernel declaration"));
            continue;
        }
        if names.iter().any(|(n, _)| n == &kstr) {
            errors.push(kname, format!("kernel `{kstr}` is declared twice"));
            continue;
        }
        let index = names.len();
        let programmatic = programmatic::declared(&f.attrs, &mut errors);
        let mut params = Vec::new();
        let mut scalars = Vec::new();
        let mut types = Vec::new();
        let mut values = Vec::new();
        for (i, arg) in sig.inputs.iter().enumerate() {
            let FnArg::Typed(pt) = arg else {
                errors.push(arg, "kernel parameters are `name: Type`");
                continue;
            };
            let pname = match &*pt.pat {
                Pat::Ident(p) => p.ident.clone(),
                _ => format_ident!("arg{}", i),
            };
            match param(&pt.ty) {
                Param::Scalar(Type::Reference(r)) => {
                    errors.push(
                        r,
                        "kernel parameters are scalars passed by value (`n: u32`), buffers (`x: &[f32]` read, `x: &mut [f32]` written) or device scalars (`a: &f32` read, `a: &mut f32` written: a one-element buffer)",
                    );
                }
                Param::Scalar(t) => {
                    params.push(quote_spanned!(pt.span()=> #pname: #t));
                    scalars.push(quote_spanned!(t.span()=> #t: ::cudagraph::__private::Scalar));
                    types.push(quote!(#t));
                    values.push(quote!(#pname));
                }
                Param::Read(t) => {
                    params.push(quote_spanned!(pt.span()=> #pname: impl ::cudagraph::__private::ReadArg<'__cudagraph_b, #t>));
                    types.push(quote!(::cudagraph::DevRead<'__cudagraph_b, #t>));
                    values.push(quote!(::cudagraph::__private::ReadArg::into_read(#pname)));
                }
                Param::ReadOne(t) => {
                    params.push(quote_spanned!(pt.span()=> #pname: impl ::cudagraph::__private::ReadArg<'__cudagraph_b, #t>));
                    types.push(
                        quote!(::cudagraph::DeviceScalar<::cudagraph::DevRead<'__cudagraph_b, #t>>),
                    );
                    values.push(quote!(::cudagraph::DeviceScalar::new(::cudagraph::__private::ReadArg::into_read(#pname))));
                }
                Param::WriteOne(t) => {
                    params.push(quote_spanned!(pt.span()=> #pname: impl ::cudagraph::__private::WriteArg<'__cudagraph_b, #t>));
                    types.push(quote!(::cudagraph::DeviceScalar<::cudagraph::DevWrite<'__cudagraph_b, #t>>));
                    values.push(quote!(::cudagraph::DeviceScalar::new(::cudagraph::__private::WriteArg::into_write(#pname))));
                }
                Param::Write(t) => {
                    params.push(quote_spanned!(pt.span()=> #pname: impl ::cudagraph::__private::WriteArg<'__cudagraph_b, #t>));
                    types.push(quote!(::cudagraph::DevWrite<'__cudagraph_b, #t>));
                    values.push(quote!(::cudagraph::__private::WriteArg::into_write(#pname)));
                }
            }
        }
        let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
        let sig_doc = format!(
            " Kernel `{kstr}`: `{}`. Use inside `graph!` as `.{kstr}(…).launch(cfg)`.",
            crate::ast::normalize(sig)
        );
        let ctor = programmatic::constructor(programmatic);
        let programmatic_doc = programmatic.then(|| {
            programmatic_names.push(kstr.clone());
            let doc = programmatic::METHOD_DOC;
            quote!(#[doc = ""] #[doc = #doc])
        });
        methods.push(quote! {
            #(#docs)*
            #[doc = ""]
            #[doc = #sig_doc]
            #programmatic_doc
            #[allow(clippy::too_many_arguments)]
            #vis fn #kname<'__cudagraph_k, '__cudagraph_b>(
                &'__cudagraph_k self,
                #(#params),*
            ) -> ::cudagraph::KernelCall<'__cudagraph_k, (#(#types,)*)>
            where
                #(#scalars,)*
            {
                // SAFETY: function #index was resolved by `load`, whose caller vouched that the
                // kernel takes exactly these parameter types and stays within its buffers.
                unsafe { ::cudagraph::KernelCall::#ctor(self.__cudagraph.kernel(#index), #kstr, (#(#values,)*)) }
            }
        });
        names.push((kstr, index));
    }
    let (name_strs, name_indices): (Vec<_>, Vec<_>) = names.into_iter().unzip();
    let load_doc = format!(
        " Loads the module (`cuModuleLoadData`) and resolves every kernel of `{name_str}` once (`cuModuleGetFunction`).\n\n # Errors\n [`cudagraph::Error::Module`] if the module does not load; [`cudagraph::Error::MissingFunction`] naming the first kernel the module lacks.\n\n # Safety\n The declarations are trusted, as cudarc's `launch` trusts its caller: each kernel of the module has exactly the declared parameter types, and for every launch `graph!` makes it reads only its `&[T]` buffers and writes only its `&mut [T]` buffers, within their lengths. Everything else about a launch (lifetimes, ordering, aliasing, copies) is then checked by `graph!`.{}",
        programmatic::load_doc(&programmatic_names)
    );
    let errors = errors.combine().map(|e| e.to_compile_error());
    quote! {
        #errors
        #(#attrs)*
        #vis struct #name {
            /// The loaded functions: made only by `load`.
            __cudagraph: ::cudagraph::__private::Functions<#name>,
        }

        // SAFETY: each method named like a kernel is the one generated below, which makes that
        // kernel's call from its arguments alone.
        unsafe impl ::cudagraph::__private::Kernels for #name {
            type Struct = Self;
            #[inline(always)]
            fn __cudagraph_struct(&self) -> &Self {
                self
            }
            #[inline]
            fn __cudagraph_makes(&self, entry: *const (), method: &str) -> bool {
                self.__cudagraph.makes(entry, method)
            }
        }

        impl #name {
            /// `graph!`'s proof that a statement's receiver has this concrete type (see
            /// `cudagraph::__private::Concrete`).
            #[doc(hidden)]
            #[inline(always)]
            #vis fn __cudagraph_concrete(&self) -> ::cudagraph::__private::Concrete<Self> {
                // SAFETY: the inherent method of this `kernels!` struct, for itself.
                unsafe { ::cudagraph::__private::Concrete::new() }
            }

            /// Names of the kernels, in declaration order.
            #vis const NAMES: &'static [&'static str] = &[#(#name_strs),*];

            /// Names of the kernels declared `#[programmatic]`, in declaration order.
            #vis const PROGRAMMATIC: &'static [&'static str] = &[#(#programmatic_names),*];

            #[doc = #load_doc]
            #vis unsafe fn load(
                ctx: &::std::sync::Arc<::cudagraph::__private::CudaContext>,
                ptx: ::cudagraph::__private::Ptx,
            ) -> ::cudagraph::Result<Self> {
                // SAFETY: the caller of this `unsafe fn` vouches for the declarations (above).
                let functions = unsafe {
                    ::cudagraph::__private::Functions::load(ctx, ptx, #name_str, Self::NAMES)
                }?;
                ::core::result::Result::Ok(#name { __cudagraph: functions })
            }

            /// The CUDA function of kernel `name`, e.g. for launching it eagerly with cudarc.
            #vis fn function(&self, name: &str) -> ::core::option::Option<&::cudagraph::__private::CudaFunction> {
                match name {
                    #(#name_strs => ::core::option::Option::Some(self.__cudagraph.get(#name_indices)),)*
                    _ => ::core::option::Option::None,
                }
            }

            /// The loaded module.
            #vis fn module(&self) -> &::std::sync::Arc<::cudagraph::__private::CudaModule> {
                self.__cudagraph.module()
            }

            /// The context the module was loaded in (`load`'s): kernel nodes of this struct's
            /// kernels run on its device, whichever stream the `graph!` call uses.
            #vis fn context(&self) -> &::std::sync::Arc<::cudagraph::__private::CudaContext> {
                self.__cudagraph.context()
            }

            #(#methods)*
        }
    }
}
