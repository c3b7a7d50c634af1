use cudagraph::PinnedBuffer;

// Review 33: a `PinnedBuffer` moved to another thread (it is `Send`) cannot leave a slice of it
// behind: `as_slice` borrows it, so the move is refused while the slice lives.
fn main() -> cudagraph::Result<()> {
    let ctx = cudagraph::context(0)?;
    let s = ctx.per_thread_stream();
    let pb = PinnedBuffer::<u32>::zeros(&s, 4)?;
    let view = pb.as_slice()?;
    std::thread::spawn(move || drop(pb));
    println!("{}", view[0]);
    Ok(())
}
