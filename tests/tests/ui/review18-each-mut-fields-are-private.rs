// Review 18: an `EachMut` is made only by `__cudagraph_each_mut` (bounds checked, indices
// distinct): its fields are private.
use cudagraph::__private::EachMut;

fn main() {
    let mut v = [0u32; 4];
    let _ = EachMut::<'_, u32, 2> {
        base: v.as_mut_ptr(),
        idx: &[0, 0],
        _slice: core::marker::PhantomData,
    };
}
