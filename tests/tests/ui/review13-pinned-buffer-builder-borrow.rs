// Review 13: a `GraphBuilder` that lists a `PinnedBuffer` borrows it until the builder is
// launched or dropped: the host cannot write it (`as_mut_slice`) between the listing and the
// launch, when its note would not yet say that a copy is about to read it.
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &CudaStream,
    y: &mut CudaSlice<u32>,
    h: &mut PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let (hr, yw) = (g.read(&*h), g.write(y));
    g.copy(hr, yw);
    h.as_mut_slice()?[0] = 1;
    g.launch()
}

fn main() {}
