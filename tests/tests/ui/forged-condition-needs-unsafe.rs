use cudagraph::Condition;

// A device condition is a slot of one call, whose conditional handle a kernel sets with
// `cudaGraphSetConditional`: conditions come only from `condition(..)` in `graph!` and
// `GraphBuilder::condition`. The hidden constructor that `graph!` expands to is an `unsafe fn`.
fn main() {
    let _forged: Condition = cudagraph::__private::condition(&cudagraph::__private::begin_call(), 7, 1);
}
