//! `[breaker]`: when a deployment's circuit opens, and how long it stays open.

use std::time::Duration;

use super::Errors;
use crate::config::BreakerConfig;
use crate::config::raw::RawBreaker;

/// The first open's cooldown, unless `cooldown` itself is shorter.
pub const DEFAULT_COOLDOWN_MIN: Duration = Duration::from_secs(10);
/// The longest cooldown by default: a recovered provider waits at most this long for the
/// probe that gives it its traffic back (failover benchmarks allow 30 s).
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(20);
/// The breaker remembers this many callers at most, so its memory stays fixed.
pub const MAX_MIN_CALLERS: u32 = 16;

pub fn breaker(errors: &mut Errors, raw: RawBreaker) -> BreakerConfig {
    let cooldown = errors.duration(
        "breaker.cooldown",
        raw.cooldown.as_deref(),
        DEFAULT_COOLDOWN,
    );
    let breaker = BreakerConfig {
        consecutive_failures: raw.consecutive_failures.unwrap_or(5),
        failure_rate: raw.failure_rate.unwrap_or(0.5),
        window: errors.duration(
            "breaker.window",
            raw.window.as_deref(),
            Duration::from_secs(60),
        ),
        min_requests: raw.min_requests.unwrap_or(20),
        cooldown,
        // A config that only shortens `cooldown` keeps working: the default minimum follows.
        cooldown_min: errors.duration(
            "breaker.cooldown_min",
            raw.cooldown_min.as_deref(),
            DEFAULT_COOLDOWN_MIN.min(cooldown),
        ),
        min_callers: raw.min_callers.unwrap_or(2),
    };
    if !(breaker.failure_rate > 0.0 && breaker.failure_rate <= 1.0) {
        errors.add("breaker.failure_rate", "must be in (0, 1]");
    }
    if breaker.window.is_zero() {
        errors.add("breaker.window", "must be greater than 0");
    }
    if breaker.consecutive_failures == 0 {
        errors.add("breaker.consecutive_failures", "must be at least 1");
    }
    if breaker.cooldown_min.is_zero() {
        errors.add("breaker.cooldown_min", "must be greater than 0");
    } else if breaker.cooldown_min > breaker.cooldown {
        errors.add(
            "breaker.cooldown_min",
            "must not be longer than breaker.cooldown",
        );
    }
    if !(1..=MAX_MIN_CALLERS).contains(&breaker.min_callers) {
        errors.add(
            "breaker.min_callers",
            format!("must be between 1 and {MAX_MIN_CALLERS}"),
        );
    }
    breaker
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;

    fn parse(breaker: &str) -> Result<Config, String> {
        Config::parse(&format!("[breaker]\n{breaker}\n")).map_err(|e| e.to_string())
    }

    #[test]
    fn cooldowns_default_to_ten_then_twenty_seconds_and_two_callers() {
        let config = parse("").unwrap();
        assert_eq!(config.breaker.cooldown_min, Duration::from_secs(10));
        assert_eq!(config.breaker.cooldown, Duration::from_secs(20));
        assert_eq!(config.breaker.min_callers, 2);
        // A short cooldown pulls the default minimum down with it.
        let config = parse("cooldown = \"1s\"").unwrap();
        assert_eq!(config.breaker.cooldown_min, Duration::from_secs(1));
    }

    #[test]
    fn bad_values_name_their_field() {
        let error = parse("cooldown = \"20s\"\ncooldown_min = \"30s\"").unwrap_err();
        assert!(error.contains("breaker.cooldown_min"), "{error}");
        let error = parse("cooldown_min = \"0s\"").unwrap_err();
        assert!(error.contains("breaker.cooldown_min"), "{error}");
        for callers in ["0", "17"] {
            let error = parse(&format!("min_callers = {callers}")).unwrap_err();
            assert!(error.contains("breaker.min_callers"), "{error}");
        }
    }
}
