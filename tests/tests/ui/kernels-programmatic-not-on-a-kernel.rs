//! `#[programmatic]` belongs on a kernel declaration: on the struct or on a parameter it would
//! mean nothing, so it is an error there, and a malformed or repeated one is an error too.

use cudagraph::kernels;

kernels! {
    #[programmatic]
    pub struct K {
        fn scale(#[programmatic] n: u32, x: &mut [f32]);
        #[programmatic(yes)]
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
        #[programmatic]
        #[programmatic]
        fn copy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

fn main() {}
