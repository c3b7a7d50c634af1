//! The progress bar of the long examples (`bench`, `stress`): one bar on standard error, drawn
//! only when standard error is a terminal, so logs, pipes and device runs get exactly the plain
//! lines they got before. Included with `#[path]` by each example.
//!
//! Everything these examples print goes through [`out!`] and [`status`], which lift the bar while
//! the line is written, so a line never lands in the middle of the bar. The bar is redrawn only
//! when its position or message changes (no ticker thread), and the examples change it between
//! measurements, never inside a timed loop.

use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// The bar, made hidden when standard error is not a terminal.
fn bar() -> &'static ProgressBar {
    BAR.get_or_init(|| {
        // `stderr_with_hz` draws nothing when standard error is not a terminal.
        let pb = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4));
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:32}] {pos}/{len} {msg}  {elapsed} elapsed, about {eta} left",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        pb.set_style(style);
        pb
    })
}

/// Starts a phase of `len` units (steps, calls, measurements) named `prefix`, at position 0.
pub fn start(prefix: &str, len: u64) {
    let pb = bar();
    pb.reset();
    pb.set_prefix(prefix.to_string());
    pb.set_length(len);
    pb.set_position(0);
    pb.set_message("");
}

/// Moves the bar to `pos` units of the current phase.
#[allow(dead_code)] // used by stress, not by bench
pub fn set(pos: u64) {
    bar().set_position(pos);
}

/// Advances the bar by one unit.
#[allow(dead_code)] // used by bench, not by stress
pub fn inc() {
    bar().inc(1);
}

/// Names what runs now (after the position).
#[allow(dead_code)] // used by bench, not by stress
pub fn message(msg: &str) {
    bar().set_message(msg.to_string());
}

/// Ends the bar: it disappears from the terminal.
pub fn finish() {
    if let Some(pb) = BAR.get() {
        pb.finish_and_clear();
    }
}

/// Runs `f` (which prints) with the bar lifted.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    match BAR.get() {
        Some(pb) if !pb.is_hidden() && !pb.is_finished() => pb.suspend(f),
        _ => f(),
    }
}

/// One status line on standard error (as before the bar existed), with the bar lifted.
#[allow(dead_code)] // used by bench, not by stress
pub fn status(line: &str) {
    suspend(|| eprintln!("{line}"));
}

/// `println!` with the bar lifted.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::progress::suspend(|| println!($($t)*))
    };
}
pub(crate) use out;
