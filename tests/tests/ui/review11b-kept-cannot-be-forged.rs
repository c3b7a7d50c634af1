// Review 11b: a `Kept` names an output by its capture and index; safe code cannot make one
// (its fields are private): an exec hands out only the outputs its own capture kept.
use cudagraph::Kept;

fn forge() -> Kept<u32> {
    Kept { index: 0, capture: 1, _elem: std::marker::PhantomData }
}

fn main() {
    let _ = forge;
}
