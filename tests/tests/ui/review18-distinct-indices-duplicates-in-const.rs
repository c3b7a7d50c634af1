// Review 18: `graph!` makes its `DistinctIndices` in a `const`, where two equal indices do not
// compile (`__cudagraph_each_mut` then trusts them to be distinct).
use cudagraph::__private::DistinctIndices;

const SAME: DistinctIndices<3> = DistinctIndices::new([3, 1, 3]);

fn main() {
    let _ = SAME;
}
