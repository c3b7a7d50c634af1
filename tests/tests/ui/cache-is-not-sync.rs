// CUDA graph objects are not internally synchronized: a GraphCache may move between threads
// (Send) but not be shared by them (not Sync).
use cudagraph::GraphCache;

fn shared<T: Sync>(_: &T) {}

fn main() {
    let cache = GraphCache::new();
    shared(&cache);
}
