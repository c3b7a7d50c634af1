// Review 23: a handle's allocation id (`HostWrite::id`, a `PinnedBuffer`'s own) must come from
// the buffer it points into. Safe code cannot build a handle itself (with another buffer's
// address, or another id): its fields are `pub(crate)` and it has no public constructor.
use cudagraph::HostWrite;

fn forged<'a>() -> HostWrite<'a, u32> {
    HostWrite {
        ptr: 0x1000 as *mut core::ffi::c_void,
        len: 4,
        ctx: core::ptr::null_mut(),
        tag: 0,
        own: None,
        id: 1 << 63 | 1,
        _borrow: core::marker::PhantomData,
    }
}

fn main() {
    let _ = forged();
}
