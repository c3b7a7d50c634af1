//! A `CaptureKey` is kept by the cache with its recording, and a `GraphCache` is `Send`: a key
//! of the user's that is not `Send` (an `Rc` shared with the closure's caller) would move to
//! another thread with the cache while the caller keeps its other `Rc`. Implementing
//! `CaptureKey` for it is refused (`CaptureKey: Send`).

use std::rc::Rc;

use cudagraph::CaptureKey;

#[derive(Clone)]
struct Shared(Rc<u32>);

impl CaptureKey for Shared {
    fn same(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

fn main() {}
