// Review 20b: a user `InertGuard` impl: the trait is not nameable (private module) and sealed.
struct Mine;
impl<'a> cudagraph::operand::InertGuard<'a> for Mine {
    const REMADE: bool = true;
    fn inert_range(&self) -> (Option<&'a cudagraph::cudarc::driver::CudaStream>, u64, u64) { (None, 0, 1 << 40) }
}
fn main() {}
