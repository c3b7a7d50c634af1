// CUDA graph objects are not internally synchronized: a captured Graph or Exec may move between
// threads (Send) but not be shared by them (not Sync).
fn shared<T: Sync>() {}
fn sent<T: Send>() {}

fn main() {
    sent::<cudagraph::Graph<'static>>();
    sent::<cudagraph::Exec<'static>>();
    sent::<cudagraph::Released>();
    shared::<cudagraph::Graph<'static>>();
    shared::<cudagraph::Exec<'static>>();
}
