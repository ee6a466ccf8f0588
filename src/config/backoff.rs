//! The retry backoff policy: validated with the rest of the config, applied by the chain
//! (`router::retry`), so the policy type sits here, below both.

use std::time::Duration;

/// Exponential backoff with full jitter: the n-th retry waits a uniform time in
/// `[0, min(max, base * 2^n)]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

/// Why a backoff could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    #[error("backoff base must be greater than zero")]
    ZeroBase,
    #[error("backoff max must not be less than its base")]
    MaxBelowBase,
}

impl Backoff {
    /// The product contract's defaults (docs/src/configuration.md, `[retry]`): base 1 s, capped at 8 s.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(8),
    };

    /// The longest any single wait can be.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Checks the bounds once, here, so every delay later is within them.
    pub fn try_new(base: Duration, max: Duration) -> Result<Backoff, BackoffError> {
        if base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if max < base {
            return Err(BackoffError::MaxBelowBase);
        }
        Ok(Backoff { base, max })
    }

    /// The largest wait before retry number `retry` (0 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        // 2^31 seconds already passes any sane cap, so clamp the shift to avoid overflow.
        let factor = 1u32 << retry.min(31);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The jittered wait before retry number `retry`; `unit` is a uniform draw in `[0, 1]`.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        self.ceiling(retry).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The wait before the next retry: the jittered backoff, but never less than what the
    /// provider asked for. `None` when that wait would not end before the deadline, so the
    /// chain should move on rather than sleep past it.
    pub fn wait_before_retry(
        &self,
        retry: u32,
        unit: f64,
        retry_after: Option<Duration>,
        remaining: Duration,
    ) -> Option<Duration> {
        let wait = self.delay(retry, unit).max(retry_after.unwrap_or_default());
        (wait < remaining).then_some(wait)
    }
}
