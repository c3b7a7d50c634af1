use cudagraph::Place;

struct MyBuffer;

impl Place for MyBuffer {}

fn main() {}
