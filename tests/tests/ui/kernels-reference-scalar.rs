use cudagraph::kernels;

// `&T` is a device scalar (a one-element buffer); a reference to a reference is no kernel parameter.
kernels! {
    struct K {
        fn scale(n: &&u32, a: f32, x: &mut [f32]);
    }
}

fn main() {}
