// Review 15: a node list for `__private::entries` typed with `'static` parameters (to keep
// them past the call) makes the statements' borrow `'static`.
use cudagraph::__private::{NodeParams, empty, entries, entry};

fn main() {
    let z = empty();
    let e = entry(&z);
    let mut out: [Option<NodeParams<'static>>; 1] = [const { None }; 1];
    entries(&mut out, &[&e]);
}
