// Review 15b: `CallWords` (the words a call compares with the variant launched last) is made
// only by `GraphCache::words`: its fields are private, so words naming another cache, variant,
// plan or call, or claiming to equal the last call's, cannot be written, read or set by hand.
use cudagraph::__private::CallWords;

fn main() {
    let plan = cudagraph::plans().next().expect("a plan");
    let forged = CallWords {
        cache: 1,
        from: 0,
        from_serial: 1,
        plan,
        call: 1,
        last: Vec::new(),
        out: Vec::new(),
        pos: 0,
        diverged: false,
        ok: true,
        present: 0,
        guarded: true,
        foreign: false,
        guards_same: true,
        items: Vec::new(),
    };
    let _ = forged;
}
