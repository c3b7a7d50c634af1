//! `#[programmatic]` on a kernel declaration of `kernels!`: the kernel waits for the kernels
//! before it (`griddepcontrol.wait`) in its own code, so `graph!` and `GraphBuilder` give the
//! edges into its node from kernel nodes the programmatic kind, and eager launches let it start
//! early. Kept apart from `kernels`, which calls the four functions below.

use proc_macro2::{Ident, Span};
use syn::{Attribute, FnArg, Meta};

use crate::errors::Errors;

/// The attribute's name.
const NAME: &str = "programmatic";

/// Whether `attrs` (a kernel declaration's) declare the kernel `#[programmatic]`. A
/// malformed or repeated attribute is an error in `errors` (and still counts as declared).
pub fn declared(attrs: &[Attribute], errors: &mut Errors) -> bool {
    let mut found = false;
    for a in attrs.iter().filter(|a| a.path().is_ident(NAME)) {
        if !matches!(a.meta, Meta::Path(_)) {
            errors.push(a, "`#[programmatic]` takes no arguments");
        } else if found {
            errors.push(a, "`#[programmatic]` is given twice");
        }
        found = true;
    }
    found
}

/// Errors for `#[programmatic]` where it means nothing: on the `kernels!` struct (`attrs`) or
/// on a kernel parameter (`params`). It belongs on a kernel declaration (`fn name(…);`).
/// Returns the struct's attributes without it (rustc would not know it).
pub fn misplaced<'a>(
    attrs: Vec<Attribute>,
    params: impl IntoIterator<Item = &'a FnArg>,
    errors: &mut Errors,
) -> Vec<Attribute> {
    let on_params = params.into_iter().flat_map(|p| match p {
        FnArg::Typed(t) => &t.attrs[..],
        FnArg::Receiver(r) => &r.attrs[..],
    });
    for a in attrs.iter().chain(on_params).filter(|a| a.path().is_ident(NAME)) {
        errors.push(
            a,
            "`#[programmatic]` goes on a kernel declaration inside `kernels!` (`#[programmatic] \
             fn name(…);`): it says that this kernel waits for the kernels before it",
        );
    }
    attrs.into_iter().filter(|a| !a.path().is_ident(NAME)).collect()
}

/// The `KernelCall` constructor a kernel method calls: `new_programmatic` for a kernel
/// declared `#[programmatic]`, else `new`.
pub fn constructor(programmatic: bool) -> Ident {
    Ident::new(if programmatic { "new_programmatic" } else { "new" }, Span::call_site())
}

/// The line added to a programmatic kernel method's docs.
pub const METHOD_DOC: &str = " Declared `#[programmatic]`: edges into its node from kernel nodes are programmatic (it may start before they finish, and waits for them with `griddepcontrol.wait`; see `load`'s safety contract).";

/// The `# Safety` paragraph of `load` about the kernels declared `#[programmatic]` (`names`),
/// empty when there are none.
pub fn load_doc(names: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let list = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    format!(
        "\n\n Kernels declared `#[programmatic]` ({list}): on a device of compute capability 9.0 or later, every thread of each executes `griddepcontrol.wait` (CUDA C: `cudaGridDependencySynchronize()`) before it reads or writes any buffer *and before it returns*, including a thread that returns early (`if (i >= n) return;`): making it the kernel's first statement does both. The module must be compiled for that architecture (NVRTC `arch: sm_90` or the device's own): code behind `#if __CUDA_ARCH__ >= 900` compiled for an older one has no wait. Why: `graph!` lets such a kernel start before the kernels it depends on finished (programmatic edges; programmatic stream serialization in `Mode::Eager`), so a thread that touched memory first would race with them; and it relies on the kernel finishing only after them (a thread that returned without waiting could let the grid finish first), since the transitive reduction of the edges drops an edge that a path through this kernel implies, and a later node ordered through it would then see unfinished data. `griddepcontrol.launch_dependents` (`cudaTriggerProgrammaticLaunchCompletion()`) is allowed anywhere; the edges do not wait for it. On older devices or drivers the edges are plain and the wait does nothing."
    )
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use crate::kernels;

    fn expand(tokens: proc_macro2::TokenStream) -> String {
        crate::kernels(tokens).to_string()
    }

    #[test]
    fn a_programmatic_kernel_uses_the_programmatic_constructor_and_is_listed() {
        let out = expand(quote! {
            pub struct K {
                #[programmatic]
                fn wait_first(n: u32, x: &mut [f32]);
                fn plain(n: u32, x: &[f32]);
            }
        });
        assert!(!out.contains("compile_error"), "{out}");
        assert_eq!(out.matches("KernelCall :: new_programmatic (").count(), 1, "{out}");
        assert_eq!(out.matches("KernelCall :: new (").count(), 1, "{out}");
        assert!(out.contains("PROGRAMMATIC : & 'static [& 'static str] = & [\"wait_first\"]"));
        assert!(out.contains("Kernels declared `#[programmatic]` (`wait_first`)"), "{out}");
        // The attribute itself is not emitted: rustc would not know it.
        assert!(!out.contains("# [programmatic]"), "{out}");
    }

    #[test]
    fn no_programmatic_kernel_no_contract_paragraph() {
        let out = expand(quote! { struct K { fn a(x: &mut [u32]); } });
        assert!(!out.contains("Kernels declared `#[programmatic]`"), "{out}");
        assert!(out.contains("PROGRAMMATIC : & 'static [& 'static str] = & []"), "{out}");
    }

    fn errors(tokens: proc_macro2::TokenStream) -> Vec<String> {
        let input: kernels::KernelsInput = syn::parse2(tokens).expect("parses");
        let out = kernels::expand(input).to_string();
        out.split("compile_error ! {").skip(1).map(|e| e.to_string()).collect()
    }

    #[test]
    fn misuse_is_an_error_on_the_attribute() {
        let e = errors(quote! {
            #[programmatic]
            struct K {
                #[programmatic(yes)]
                fn a(x: &mut [u32]);
                #[programmatic]
                #[programmatic]
                fn b(#[programmatic] n: u32);
            }
        });
        let all = e.join("\n");
        assert_eq!(e.len(), 4, "{all}");
        assert_eq!(all.matches("goes on a kernel declaration").count(), 2, "{all}");
        assert!(all.contains("takes no arguments"), "{all}");
        assert!(all.contains("is given twice"), "{all}");
    }
}
