// Review 20: `__private::PlaceIndices` (the place numbers `acquire_mut_each` writes its guards at
// with `get_unchecked`) cannot be forged outside `new`: its field is private.
use cudagraph::__private::PlaceIndices;

static FORGED: PlaceIndices<1, 1> = PlaceIndices([7]);

fn main() {
    let _ = &FORGED;
}
