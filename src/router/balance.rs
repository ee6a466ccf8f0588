//! Choosing among a step's healthy deployments (or a provider's keys): by weight, or by
//! recent latency.
//!
//! Weighted choice is nginx's smooth weighted round robin rather than a random draw: over
//! any run of requests each candidate's share stays within one request of its weight's
//! share, so a 3:1 split is 3:1 after 8 requests, not only after thousands, and no
//! candidate gets long streaks. Candidates that are not eligible (open, benched, already
//! tried) simply sit a round out; the others share their traffic by weight.

use std::time::Duration;

use tokio::time::Instant;

// Keys rotate by the same rule as deployments; `keys` sits below `router`, so it owns it.
pub use crate::keys::weighted::smooth_pick;

/// How much one new sample moves the latency estimate.
const ALPHA: f64 = 0.3;
/// An estimate that no new sample refreshes halves every this long. An endpoint that was
/// slow once is thus retried now and then, rather than shunned forever on old news.
const HALF_LIFE: Duration = Duration::from_secs(10);

/// An exponentially weighted moving average of one endpoint's latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    seconds: f64,
    at: Instant,
}

impl Ewma {
    /// An estimate that starts from its first sample.
    pub fn new(sample: Duration, now: Instant) -> Ewma {
        Ewma {
            seconds: sample.as_secs_f64(),
            at: now,
        }
    }

    /// Takes in one more sample.
    pub fn observe(&mut self, sample: Duration, now: Instant) {
        self.seconds =
            self.estimate(now).as_secs_f64() * (1.0 - ALPHA) + sample.as_secs_f64() * ALPHA;
        self.at = now;
    }

    /// The estimate now, decayed for the time since its last sample.
    pub fn estimate(&self, now: Instant) -> Duration {
        let idle = now.saturating_duration_since(self.at).as_secs_f64();
        let decay = 0.5f64.powf(idle / HALF_LIFE.as_secs_f64());
        Duration::from_secs_f64((self.seconds * decay).max(0.0))
    }
}

/// The index of the lowest latency among `estimates` (`None` for never measured, which
/// counts as fastest, so every endpoint gets measured); ties go to the earliest.
pub fn fastest(estimates: &[Option<Duration>]) -> Option<usize> {
    estimates
        .iter()
        .enumerate()
        .min_by_key(|(_, e)| e.unwrap_or(Duration::ZERO))
        .map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(weights: &[u32], rounds: usize) -> Vec<usize> {
        let mut current = vec![0i64; weights.len()];
        let mut counts = vec![0usize; weights.len()];
        for _ in 0..rounds {
            let candidates = current.iter_mut().zip(weights.iter().copied()).collect();
            counts[smooth_pick(candidates).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn splits_exactly_by_weight_and_smoothly() {
        assert_eq!(picks(&[3, 1], 8), [6, 2]);
        assert_eq!(picks(&[5, 3, 2], 1000), [500, 300, 200]);
        // Smooth: a 5:1:1 split never sends more than 3 in a row to the heavy one.
        let mut current = [0i64; 3];
        let order: Vec<usize> = (0..7)
            .map(|_| {
                let candidates = current.iter_mut().zip([5, 1, 1]).collect();
                smooth_pick(candidates).unwrap()
            })
            .collect();
        assert_eq!(order, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn nothing_to_pick_from() {
        assert_eq!(smooth_pick(Vec::new()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_estimate_follows_samples_and_decays_when_idle() {
        let now = Instant::now();
        let mut ewma = Ewma::new(Duration::from_millis(100), now);
        ewma.observe(Duration::from_millis(200), now);
        let near = |d: Duration, ms: f64| (d.as_secs_f64() * 1e3 - ms).abs() < 1e-6;
        assert!(near(ewma.estimate(now), 130.0), "{:?}", ewma.estimate(now));
        tokio::time::advance(HALF_LIFE).await;
        assert!(near(ewma.estimate(Instant::now()), 65.0));
    }

    #[test]
    fn the_unmeasured_count_as_fastest_and_ties_go_first() {
        let ms = Duration::from_millis;
        assert_eq!(fastest(&[Some(ms(5)), None]), Some(1));
        assert_eq!(fastest(&[Some(ms(5)), Some(ms(3))]), Some(1));
        assert_eq!(fastest(&[None, None]), Some(0));
        assert_eq!(fastest(&[]), None);
    }
}
