//! The 2-D Poisson problem that `cg` and `jacobi` solve: `-Δu = f` on the unit square with
//! `u = 0` on the boundary, on an `n × n` grid of unknowns (spacing `h = 1/(n+1)`), where `f` is
//! chosen so that the exact solution is `u(x, y) = x(1-x) y(1-y)`. Included with `#[path]`.

/// The grid coordinates `(x, y)` of unknown `k`.
pub fn at(n: u32, k: u32) -> (f64, f64) {
    let h = 1.0 / f64::from(n + 1);
    (f64::from(k / n + 1) * h, f64::from(k % n + 1) * h)
}

/// `h² f` at every unknown (the system is `A u = h² f`).
pub fn rhs(n: u32) -> Vec<f64> {
    let h = 1.0 / f64::from(n + 1);
    (0..n * n)
        .map(|k| {
            let (x, y) = at(n, k);
            h * h * 2.0 * (x * (1.0 - x) + y * (1.0 - y))
        })
        .collect()
}

/// The largest absolute difference between `u` and the exact solution at the unknowns.
pub fn exact_error(n: u32, u: &[f64]) -> f64 {
    (0..n * n)
        .map(|k| {
            let (x, y) = at(n, k);
            (u[k as usize] - x * (1.0 - x) * y * (1.0 - y)).abs()
        })
        .fold(0.0, f64::max)
}
