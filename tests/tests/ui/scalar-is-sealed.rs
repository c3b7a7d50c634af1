use cudagraph::DevWrite;
use cudagraph::__private::Scalar;

// Scalar kernel positions take plain values only. `Scalar` is sealed: a type of the user's
// cannot declare itself a scalar and hand a buffer handle to a kernel behind the graph's back.
struct Smuggled<'a>(DevWrite<'a, u32>);

impl<'a> Scalar for Smuggled<'a> {
    type Value = DevWrite<'a, u32>;
    fn value(self) -> DevWrite<'a, u32> {
        self.0
    }
}

fn main() {}
