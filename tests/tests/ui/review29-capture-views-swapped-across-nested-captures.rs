// Review 29: a standalone capture begun inside a `capture` statement's closure (refused at run
// time while the outer one captures, but not in `Mode::Eager`, where the outer closure runs on
// the stream) must not be able to trade its view for the outer one's: the inner capture would
// then record work on a buffer it did not list (and the outer view would leave its closure).
// Each closure's views have that closure's own higher-ranked lifetime.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, graph};

fn run(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    a: &mut CudaSlice<f32>,
    b: &mut CudaSlice<f32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        capture(&mut *a, |_, (mut outer,)| {
            let g = cudagraph::capture(s, (&mut *b,), |c, (mut inner,)| {
                std::mem::swap(&mut inner, &mut outer);
                c.zero(&mut inner)
            })?;
            drop(g);
            Ok::<(), cudagraph::Error>(())
        });
    })
}

fn main() {}
