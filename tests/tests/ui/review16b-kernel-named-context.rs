use cudagraph::kernels;

// `context` is a method `kernels!` generates: a kernel of that name is refused with the macro's
// own message, on the kernel's name (review 16b: it was a duplicate definition before).
kernels! {
    struct K {
        fn context(n: u32, x: &mut [u32]);
    }
}

fn main() {}
