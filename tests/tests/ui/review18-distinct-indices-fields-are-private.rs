// Review 18: `DistinctIndices` (pairwise distinct indices and one past the largest) is made by
// `new` only: its fields are private.
use cudagraph::__private::DistinctIndices;

fn main() {
    let _ = DistinctIndices::<2>([0, 0], 0);
}
