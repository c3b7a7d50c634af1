// Review 15: a user type implementing `__private::Segment<'a>` can only write node parameters
// that live for `'a` into the caller's list, not ones borrowed from itself (which `entries`'
// caller could keep past the segment: `Segment<'a>` is implemented for `&'a (..)` tuples,
// whose nodes are borrowed for `'a`).
use cudagraph::MemsetParams;
use cudagraph::__private::{IntoNode, NodeParams, Segment};

struct Own<'a>(MemsetParams<'a>);

impl<'a> Segment<'a> for Own<'a> {
    fn statements(&self) -> usize {
        1
    }
    fn fill(&self, out: &mut [Option<NodeParams<'a>>]) {
        out[0] = Some(self.0.node());
    }
}

fn main() {}
