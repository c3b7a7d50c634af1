// A PinnedBuffer notes where the device last used it (a Cell): it may move between threads
// (Send) but not be shared by them (not Sync).
use cudagraph::PinnedBuffer;

fn shared<T: Sync>(_: &T) {}

fn check(b: &PinnedBuffer<u32>) {
    shared(b);
}

fn main() {}
