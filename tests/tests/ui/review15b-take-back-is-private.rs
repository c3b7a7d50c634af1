// Review 15b: only `run_words` gives lent words back to their variant (`take_back`), and only
// `unchanged_words` decides from them: both are private, so words made and filled by hand
// cannot be put back as a variant's words or taken as unchanged.
use cudagraph::GraphCache;
use cudagraph::__private::begin_call;

fn main() {
    let plan = cudagraph::plans().next().expect("a plan");
    let mut cache = GraphCache::new();
    let words = cache.words(plan, &begin_call());
    let back = cache.take_back(words);
    let _ = back;
}
