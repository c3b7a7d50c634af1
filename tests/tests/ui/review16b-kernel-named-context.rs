use cudagraph::kernels;

// `context` is a method `kernels!` generates but not one of its reserved names: a kernel of that
// name is a duplicate definition (it must not compile, whichever of the two would win).
kernels! {
    struct K {
        fn context(n: u32, x: &mut [u32]);
    }
}

fn main() {}
