// A handle of an exec's operand borrows the exec: it cannot be kept across a launch, a release
// or an update, which take the exec `&mut` (or by value) and may end its borrow of the buffer.
use cudagraph::Exec;

fn launch(exec: &mut Exec<'_>, stream: &cudagraph::cudarc::driver::CudaStream) -> cudagraph::Result<()> {
    let x = exec.read::<u32>(0)?;
    exec.launch(stream)?;
    let _ = x.len();
    Ok(())
}

fn main() {}
