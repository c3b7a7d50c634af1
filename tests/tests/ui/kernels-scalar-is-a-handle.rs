use cudagraph::kernels;

// A scalar kernel parameter is a plain value: declaring a handle type there would pass a
// pointer the graph cannot see.
kernels! {
    struct K {
        fn fill(n: u32, x: cudagraph::DevWrite<'static, u32>);
    }
}

fn main() {}
