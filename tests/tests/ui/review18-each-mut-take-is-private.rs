// Review 18: `__private::EachMut` (the elements of an array acquired in one loop) hands out each
// element's `&mut` only through `acquire_mut_each`, which takes each once: safe code cannot
// call `take`, so it cannot get two `&mut` to one element.
use cudagraph::__private::{DisjointMut, DistinctIndices};

fn main() {
    let mut v = [0u32; 4];
    let mut each = v.as_mut_slice().__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let a: &mut u32 = each.take(0);
    let b: &mut u32 = each.take(0);
    *a = 1;
    *b = 2;
}
