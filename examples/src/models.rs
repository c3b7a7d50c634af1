//! What the model examples (`mlp`, `alloc_capture`, `candle_mlp`) share: a parser for positive
//! integer arguments, deterministic inputs, the median of repeated timings and the verdict on
//! their outputs. Included with `#[path]` by each; each uses only part of it, hence the `allow`.

#![allow(dead_code)]

/// A positive integer argument.
pub fn positive(v: &str) -> Result<usize, String> {
    match v.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{v}` is not a positive integer")),
    }
}

/// Deterministic values in [-scale, scale].
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The median of repeated timings.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Whether the graph's output `got` passes (`same`: it equals the other runs' bit for bit, and
/// it is finite and not all zero), and the word the tables print for it.
pub fn verdict(got: &[f32], same: bool) -> (bool, &'static str) {
    let finite = got.iter().all(|v| v.is_finite()) && got.iter().any(|&v| v != 0.0);
    let word = if !finite {
        "ZERO/NaN"
    } else if same {
        "bit-exact"
    } else {
        "DIFFER"
    };
    (same && finite, word)
}
