//! The nearest-rank percentile of sorted latencies, shared by the benches that report them
//! (`breakers`, `hedge`): a few lines, on no scenario's path, so no crate for it.

use std::time::Duration;

/// The nearest-rank `p` percentile (0 to 100) of `sorted`, which must not be empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
