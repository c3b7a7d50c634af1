use cudagraph::kernels;

kernels! {
    struct K {
        fn scale(n: &&u32, a: f32, x: &mut [f32]);
    }
}

fn main() {}
