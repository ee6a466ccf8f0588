//! `[limits] lease`: how long a Redis concurrency slot outlives an instance that stopped
//! renewing it.

use std::time::Duration;

use super::Errors;
use crate::config::DEFAULT_LEASE;

/// A held slot is renewed every third of its lease, so a lease under a second would keep
/// Redis busy with renewals and expire on any hiccup.
pub(super) fn validate(errors: &mut Errors, value: Option<&str>) -> Duration {
    let lease = errors.duration("limits.lease", value, DEFAULT_LEASE);
    if lease < Duration::from_secs(1) {
        errors.add("limits.lease", "must be at least 1s");
        return DEFAULT_LEASE;
    }
    lease
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{Config, ConfigError};

    fn lease(text: &str) -> Result<Duration, ConfigError> {
        Config::parse(&format!("[limits]\n{text}")).map(|c| c.limits.lease)
    }

    #[test]
    fn the_lease_defaults_to_30s_and_takes_a_duration() {
        assert_eq!(lease("").unwrap(), Duration::from_secs(30));
        assert_eq!(lease("lease = \"2m\"").unwrap(), Duration::from_secs(120));
    }

    #[test]
    fn a_lease_under_a_second_or_unreadable_names_its_field() {
        for bad in ["lease = \"500ms\"", "lease = \"soon\""] {
            let error = lease(bad).unwrap_err().to_string();
            assert!(error.contains("limits.lease"), "{bad}: {error}");
        }
    }
}
