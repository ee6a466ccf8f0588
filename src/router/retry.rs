//! Backoff between retries of one step: exponential with full jitter, and `retry-after`.

use std::time::{Duration, SystemTime};

// The policy is validated config, so `config` owns it; the chain only applies it.
pub use crate::config::backoff::{Backoff, BackoffError};

/// The longest wait a `retry-after` can ask for; anything longer is read as this.
///
/// A provider's header is untrusted input: `1e300` or `18446744073709551615` would overflow
/// a `Duration` or an `Instant` later. A day is far past any request deadline, so saturating
/// here changes no wait, and a bench of a day still says "stay away".
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses `retry-after`, as delta seconds or as an HTTP date, into a wait from `now`, at most
/// [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(seconds) = value.parse::<u64>() {
        Duration::from_secs(seconds)
    } else if let Ok(seconds) = value.parse::<f64>() {
        if seconds.is_nan() || seconds < 0.0 {
            return None;
        }
        // Too big for a `Duration` (or infinite): as long as a wait can be.
        Duration::try_from_secs_f64(seconds).unwrap_or(MAX_RETRY_AFTER)
    } else {
        let date = httpdate::parse_http_date(value).ok()?;
        date.duration_since(now).unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn backoff() -> Backoff {
        Backoff::try_new(Duration::from_secs(1), Duration::from_secs(8)).unwrap()
    }

    #[test]
    fn rejects_bad_bounds() {
        assert_eq!(
            Backoff::try_new(Duration::ZERO, Duration::from_secs(1)),
            Err(BackoffError::ZeroBase)
        );
        assert_eq!(
            Backoff::try_new(Duration::from_secs(2), Duration::from_secs(1)),
            Err(BackoffError::MaxBelowBase)
        );
    }

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = backoff();
        let ceilings: Vec<u64> = (0..6).map(|n| b.ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, [1, 2, 4, 8, 8, 8]);
    }

    #[test]
    fn retry_after_wins_over_a_shorter_backoff() {
        let wait = backoff().wait_before_retry(
            0,
            0.1,
            Some(Duration::from_secs(3)),
            Duration::from_secs(60),
        );
        assert_eq!(wait, Some(Duration::from_secs(3)));
    }

    #[test]
    fn no_wait_runs_past_the_deadline() {
        let wait = backoff().wait_before_retry(
            0,
            0.0,
            Some(Duration::from_secs(3600)),
            Duration::from_secs(60),
        );
        assert_eq!(wait, None);
    }

    #[test]
    fn parses_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        // 1445412480 is Wed, 21 Oct 2015 07:28:00 GMT.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn absurd_retry_afters_saturate_instead_of_panicking() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        for value in [
            "1e300",
            "1e400",
            "18446744073709551615",
            "99999999999999999999999",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert_eq!(
                parse_retry_after(value, now),
                Some(MAX_RETRY_AFTER),
                "{value}"
            );
        }
        assert_eq!(parse_retry_after("NaN", now), None);
        assert_eq!(parse_retry_after("-1e300", now), None);
    }

    proptest! {
        #[test]
        fn every_delay_stays_within_zero_and_the_cap(
            base_ms in 1u64..5_000,
            extra_ms in 0u64..60_000,
            retry in 0u32..64,
            unit in 0.0f64..=1.0,
        ) {
            let b = Backoff::try_new(Duration::from_millis(base_ms), Duration::from_millis(base_ms + extra_ms)).unwrap();
            let delay = b.delay(retry, unit);
            prop_assert!(delay <= b.ceiling(retry));
            prop_assert!(delay <= Duration::from_millis(base_ms + extra_ms));
        }

        #[test]
        fn any_retry_after_parses_without_panic_and_within_the_bound(
            value in prop_oneof![
                any::<String>(),
                "[+-]?[0-9]{0,40}(\\.[0-9]{0,20})?([eE][+-]?[0-9]{1,5})?",
                "(Mon|Fri), [0-9]{2} (Jan|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
            ],
            now_secs in 0u64..=u64::from(u32::MAX),
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs);
            if let Some(wait) = parse_retry_after(&value, now) {
                prop_assert!(wait <= MAX_RETRY_AFTER, "{value:?} gave {wait:?}");
            }
        }

        #[test]
        fn total_wait_never_passes_the_deadline(
            deadline_ms in 1u64..120_000,
            retry_afters in proptest::collection::vec(proptest::option::of(0u64..10_000), 1..10),
            units in proptest::collection::vec(0.0f64..=1.0, 10),
        ) {
            let b = backoff();
            let deadline = Duration::from_millis(deadline_ms);
            let mut elapsed = Duration::ZERO;
            for (retry, after) in retry_afters.iter().enumerate() {
                let remaining = deadline.saturating_sub(elapsed);
                let after = after.map(Duration::from_millis);
                match b.wait_before_retry(retry as u32, units[retry], after, remaining) {
                    Some(wait) => elapsed += wait,
                    None => break,
                }
                prop_assert!(elapsed < deadline);
            }
        }
    }
}
