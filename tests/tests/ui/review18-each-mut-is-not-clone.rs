// Review 18: an `EachMut` cannot be copied, so two `acquire_mut_each` calls cannot borrow the
// same elements through two copies of one.
use cudagraph::__private::{DisjointMut, DistinctIndices, EachMut};

fn twice<'a>(each: EachMut<'a, u32, 2>) -> (EachMut<'a, u32, 2>, EachMut<'a, u32, 2>) {
    (each.clone(), each)
}

fn main() {
    let mut v = [0u32; 4];
    let _ = twice(v.as_mut_slice().__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) }));
}
