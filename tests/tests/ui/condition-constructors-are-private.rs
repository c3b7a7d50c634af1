use cudagraph::{Condition, ConditionalType};

// Neither a `Condition` nor a conditional node's parameters can be made from a bare slot: a
// forged slot would reach a kernel's `cudaGraphSetConditional` or a conditional node.
fn main() {
    let _c = Condition::new(7, 1, 0);
    let _p = cudagraph::__private::conditional(Condition::new(3, 0, 0), ConditionalType::While, 1);
}
