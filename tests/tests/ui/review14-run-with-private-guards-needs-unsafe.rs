// Review 14: handing `GraphCache::run` a node list and a `Guards::all()` built by hand from the
// safe `__private` functions still needs `unsafe`.
use cudagraph::__private::{Guards, acquire_mut_into, begin_call, zero};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, Plan};

static PLAN: Plan = Plan {
    file: file!(),
    line: 1,
    places: &["a"],
    nodes: &[],
    conditions: 0,
    bodies: &[],
};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a = s.alloc_zeros::<u32>(16)?;
    let call = begin_call();
    let mut g = Guards::<1>::new();
    let (_r, w) = acquire_mut_into(&mut a, &s, &call, 0, &mut g);
    let node = zero(w);
    let nodes = [Some(cudagraph::__private::IntoNode::node(&node))];
    let mut cache = GraphCache::new();
    cache.run(&PLAN, &call, 0, &s, &nodes, g.all())
}
