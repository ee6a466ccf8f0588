//! Each hedging deployment's recent times to commit (a stream's first event, a whole JSON
//! answer), for a hedge whose delay is a percentile of them (`after = "p95"`).
//!
//! A ring of the last [`SAMPLES`] times per deployment: exact over that window, fixed in
//! memory, and quick to follow a provider that turns slow. A percentile is read by sorting a
//! copy of at most 256 numbers, which costs less than the request it decides about.

use std::time::Duration;

use foldhash::HashMap;

use crate::config::{ModelName, ProviderId};

/// How many recent times each deployment keeps.
pub const SAMPLES: usize = 256;
/// Fewer samples than this and no percentile is given: a hedge waiting on one does not fire.
pub const MIN_SAMPLES: usize = 20;
/// Deployments tracked at most. Only the step 0 of routes hedging by percentile feed this,
/// which config bounds; the cap only keeps reloads from growing it without end.
const MAX_TRACKED: usize = 1_000;

/// The last [`SAMPLES`] times to commit of one deployment.
#[derive(Clone, Debug, Default)]
pub struct CommitTimes {
    ring: Vec<Duration>,
    /// Where the next sample goes once the ring is full.
    next: usize,
}

impl CommitTimes {
    /// Takes in one more time, forgetting the oldest once full.
    pub fn observe(&mut self, sample: Duration) {
        if self.ring.len() < SAMPLES {
            self.ring.push(sample);
        } else {
            self.ring[self.next] = sample;
            self.next = (self.next + 1) % SAMPLES;
        }
    }

    /// The nearest-rank `percentile` (1 to 99) of the kept times; `None` with fewer than
    /// [`MIN_SAMPLES`] of them.
    pub fn percentile(&self, percentile: u8) -> Option<Duration> {
        if self.ring.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted = self.ring.clone();
        let rank = (usize::from(percentile) * sorted.len()).div_ceil(100);
        let index = rank.clamp(1, sorted.len()) - 1;
        let (_, value, _) = sorted.select_nth_unstable(index);
        Some(*value)
    }
}

/// Every tracked deployment's [`CommitTimes`].
#[derive(Default)]
pub(super) struct CommitTimeTable(HashMap<(ProviderId, ModelName), CommitTimes>);

impl CommitTimeTable {
    pub(super) fn observe(&mut self, provider: &ProviderId, model: &ModelName, sample: Duration) {
        let key = (provider.clone(), model.clone());
        if let Some(times) = self.0.get_mut(&key) {
            times.observe(sample);
        } else if self.0.len() < MAX_TRACKED {
            self.0.entry(key).or_default().observe(sample);
        }
    }

    pub(super) fn percentile(
        &self,
        provider: &ProviderId,
        model: &ModelName,
        percentile: u8,
    ) -> Option<Duration> {
        self.0
            .get(&(provider.clone(), model.clone()))?
            .percentile(percentile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_percentile_until_enough_samples() {
        let mut times = CommitTimes::default();
        for _ in 0..MIN_SAMPLES - 1 {
            times.observe(ms(10));
        }
        assert_eq!(times.percentile(95), None);
        times.observe(ms(10));
        assert_eq!(times.percentile(95), Some(ms(10)));
    }

    #[test]
    fn percentiles_are_nearest_rank_over_the_samples() {
        let mut times = CommitTimes::default();
        // 1..=100 ms, shuffled by a stride coprime to 100.
        for i in 0..100u64 {
            times.observe(ms((i * 37) % 100 + 1));
        }
        assert_eq!(times.percentile(50), Some(ms(50)));
        assert_eq!(times.percentile(95), Some(ms(95)));
        assert_eq!(times.percentile(99), Some(ms(99)));
    }

    #[test]
    fn the_ring_forgets_the_oldest_samples() {
        let mut times = CommitTimes::default();
        for _ in 0..SAMPLES {
            times.observe(ms(1_000));
        }
        assert_eq!(times.percentile(50), Some(ms(1_000)));
        // A provider that turned fast: once half the ring is new, the median follows.
        for _ in 0..SAMPLES / 2 + 1 {
            times.observe(ms(10));
        }
        assert_eq!(times.percentile(50), Some(ms(10)));
        assert_eq!(times.ring.len(), SAMPLES);
    }

    #[test]
    fn a_slow_tail_shows_in_the_high_percentiles_only() {
        let mut times = CommitTimes::default();
        for i in 0..200 {
            times.observe(if i % 20 == 0 { ms(1_000) } else { ms(100) });
        }
        assert_eq!(times.percentile(90), Some(ms(100)));
        assert_eq!(times.percentile(99), Some(ms(1_000)));
    }
}
