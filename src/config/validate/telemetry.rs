//! `[log]`, `[alerts]`, `[[prices]]` and `[admin]`: what the request log keeps, how it is
//! judged, and who may read the views of it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::Errors;
use crate::config::raw::{RawAdmin, RawAlerts, RawLog, RawPrice};
use crate::config::{
    AdminConfig, AlertsConfig, Durability, LogConfig, LogFormat, ModelName, Price, PriceOrigin,
    Provider, ProviderId, Token, WhenFull,
};

/// Thirty days of request log unless `[log] retention` says otherwise.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Two nines: a gateway with fallbacks should not serve worse than this.
pub const DEFAULT_AVAILABILITY_TARGET: f64 = 0.99;
/// One request in five served by a later step means the primary is in real trouble.
pub const DEFAULT_FALLBACK_RATE_MAX: f64 = 0.2;

/// Two scorecards at once: each reads a day of the log, and a dashboard polls every 5 s.
pub const DEFAULT_MAX_CONCURRENT_SCORECARDS: u32 = 2;

pub fn admin(errors: &mut Errors, raw: RawAdmin) -> AdminConfig {
    if raw
        .metrics_token
        .as_deref()
        .is_some_and(|t| t.trim().is_empty())
    {
        errors.add(
            "admin.metrics_token",
            "must not be empty (leave it out instead)",
        );
    }
    let max = raw
        .max_concurrent_scorecards
        .unwrap_or(DEFAULT_MAX_CONCURRENT_SCORECARDS);
    if max == 0 {
        errors.add("admin.max_concurrent_scorecards", "must be at least 1");
    }
    if raw.token_file.as_deref() == Some("") {
        errors.add("admin.token_file", "must not be empty");
    }
    AdminConfig {
        metrics_token: raw.metrics_token.as_deref().map(Token::new),
        max_concurrent_scorecards: max as usize,
        token_file: raw.token_file.map(std::path::PathBuf::from),
    }
}

/// Records the request log's queue holds: about 64 MiB of records at worst.
pub const DEFAULT_QUEUE_RECORDS: usize = 65_536;
/// The spill journal's cap: about a million and a half rows, hours of outage at 100 req/s.
pub const DEFAULT_SPILL_BYTES: u64 = 1 << 30;
/// Past this, the queue alone would hold gigabytes.
const MAX_QUEUE_RECORDS: u64 = 1 << 24;

pub fn log(errors: &mut Errors, raw: RawLog) -> LogConfig {
    let retention = errors.duration("log.retention", raw.retention.as_deref(), DEFAULT_RETENTION);
    if retention.is_zero() {
        errors.add("log.retention", "must be greater than 0");
    }
    let queue_records = match raw.queue_records {
        None => DEFAULT_QUEUE_RECORDS,
        Some(n) if (1..=MAX_QUEUE_RECORDS).contains(&n) => n as usize,
        Some(_) => {
            errors.add(
                "log.queue_records",
                format!("must be between 1 and {MAX_QUEUE_RECORDS}"),
            );
            DEFAULT_QUEUE_RECORDS
        }
    };
    let spill_bytes = raw.spill_bytes.unwrap_or(DEFAULT_SPILL_BYTES);
    let spill_path = match raw.spill_path {
        Some(path) if path.is_empty() => {
            errors.add("log.spill_path", "must not be empty");
            None
        }
        path => path.map(std::path::PathBuf::from),
    };
    let when_full = match raw.when_full.as_deref().unwrap_or("refuse") {
        "refuse" => WhenFull::Refuse,
        "drop" => WhenFull::Drop,
        other => {
            errors.add(
                "log.when_full",
                format!("`{other}` is not one of `refuse`, `drop`"),
            );
            WhenFull::Refuse
        }
    };
    let durability = match raw.durability.as_deref().unwrap_or("batched") {
        "batched" => Durability::Batched,
        "fsync" => Durability::Fsync,
        other => {
            errors.add(
                "log.durability",
                format!("`{other}` is not one of `batched`, `fsync`"),
            );
            Durability::Batched
        }
    };
    if durability == Durability::Fsync && spill_bytes == 0 {
        errors.add(
            "log.durability",
            "`fsync` writes records to the spill journal, so it needs spill_bytes > 0",
        );
    }
    let format = match raw.format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            errors.add(
                "log.format",
                format!("`{other}` is not one of `text`, `json`"),
            );
            LogFormat::Text
        }
    };
    LogConfig {
        retention,
        queue_records,
        spill_bytes,
        spill_path,
        when_full,
        durability,
        format,
        access_log: raw.access_log.unwrap_or(true),
    }
}

pub fn alerts(errors: &mut Errors, raw: RawAlerts) -> AlertsConfig {
    let alerts = AlertsConfig {
        availability_target: raw
            .availability_target
            .unwrap_or(DEFAULT_AVAILABILITY_TARGET),
        fallback_rate_max: raw.fallback_rate_max.unwrap_or(DEFAULT_FALLBACK_RATE_MAX),
    };
    for (field, value) in [
        ("alerts.availability_target", alerts.availability_target),
        ("alerts.fallback_rate_max", alerts.fallback_rate_max),
    ] {
        if !(0.0..=1.0).contains(&value) {
            errors.add(field, "must be between 0 and 1");
        }
    }
    alerts
}

pub fn prices(errors: &mut Errors, raw: Vec<RawPrice>, providers: &[Provider]) -> Vec<Price> {
    let mut seen = BTreeSet::new();
    let mut prices = Vec::with_capacity(raw.len());
    for (i, p) in raw.into_iter().enumerate() {
        errors.unknown_provider(format!("prices[{i}].provider"), &p.provider, providers);
        if p.model.is_empty() {
            errors.add(format!("prices[{i}].model"), "must not be empty");
        }
        if !seen.insert((p.provider.clone(), p.model.clone())) {
            errors.add(
                format!("prices[{i}].model"),
                format!("`{}/{}` is priced twice", p.provider, p.model),
            );
        }
        for (field, value) in [
            ("input_per_1m", p.input_per_1m),
            ("output_per_1m", p.output_per_1m),
            ("cached_input_per_1m", p.cached_input_per_1m.unwrap_or(0.0)),
            ("cache_write_per_1m", p.cache_write_per_1m.unwrap_or(0.0)),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                errors.add(
                    format!("prices[{i}].{field}"),
                    "must be a price of 0 or more",
                );
            }
        }
        prices.push(Price {
            provider: ProviderId(Arc::from(p.provider.as_str())),
            model: ModelName(Arc::from(p.model.as_str())),
            input_per_1m: p.input_per_1m,
            output_per_1m: p.output_per_1m,
            cached_input_per_1m: p.cached_input_per_1m,
            cache_write_per_1m: p.cache_write_per_1m,
            origin: PriceOrigin::File,
        });
    }
    prices
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const PROVIDER: &str =
        "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n";

    use crate::config::validate::errors_of as errors;

    #[test]
    fn defaults_and_a_priced_model() {
        let config = Config::parse(&format!(
            "{PROVIDER}[[prices]]\nprovider = \"a\"\nmodel = \"m\"\ninput_per_1m = 2.5\noutput_per_1m = 10.0\n"
        ))
        .unwrap();
        assert_eq!(config.log.retention.as_secs(), 30 * 24 * 3600);
        assert_eq!(config.log.queue_records, 65_536);
        assert_eq!(config.log.spill_bytes, 1 << 30);
        assert_eq!(config.log.spill_path, None);
        assert_eq!(config.log.when_full, crate::config::WhenFull::Refuse);
        assert_eq!(config.log.durability, crate::config::Durability::Batched);
        assert_eq!(config.alerts.availability_target, 0.99);
        assert_eq!(config.alerts.fallback_rate_max, 0.2);
        let cost = config.prices[0].cost(1_000_000, 100_000);
        assert!((cost - 3.5).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn errors_name_their_fields() {
        let errors = errors(&format!(
            "{PROVIDER}[log]\nretention = \"soon\"\n[alerts]\navailability_target = 1.5\n\
             [[prices]]\nprovider = \"ghost\"\nmodel = \"m\"\ninput_per_1m = -1.0\noutput_per_1m = 1.0\n"
        ));
        for field in [
            "log.retention",
            "alerts.availability_target",
            "prices[0].provider",
            "prices[0].input_per_1m",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(field)),
                "{field}: {errors:?}"
            );
        }
    }

    #[test]
    fn log_settings_name_their_fields() {
        let errors = errors(&format!(
            "{PROVIDER}[log]\nqueue_records = 0\nspill_bytes = 0\nspill_path = \"\"\n\
             when_full = \"wait\"\ndurability = \"fsync\"\n"
        ));
        for field in [
            "log.queue_records",
            "log.spill_path",
            "log.when_full",
            "log.durability",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(field)),
                "{field}: {errors:?}"
            );
        }
        let config = Config::parse(&format!(
            "{PROVIDER}[log]\nqueue_records = 16\nspill_bytes = 4096\nspill_path = \"/var/spill\"\n\
             when_full = \"drop\"\ndurability = \"fsync\"\n"
        ))
        .unwrap();
        assert_eq!(config.log.queue_records, 16);
        assert_eq!(config.log.when_full, crate::config::WhenFull::Drop);
        assert_eq!(
            config.log.spill_path.as_deref(),
            Some(std::path::Path::new("/var/spill"))
        );
    }

    #[test]
    fn unknown_price_fields_are_errors() {
        let errors = errors(&format!(
            "{PROVIDER}[[prices]]\nprovider = \"a\"\nmodel = \"m\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\ncurrency = \"eur\"\n"
        ));
        assert!(errors[0].starts_with("prices[0]"), "{errors:?}");
        assert!(errors[0].contains("currency"), "{errors:?}");
    }

    #[test]
    fn admin_settings_are_checked_and_the_token_is_never_printed() {
        let errors = errors("[admin]\nmetrics_token = \" \"\nmax_concurrent_scorecards = 0\n");
        for field in ["admin.metrics_token", "admin.max_concurrent_scorecards"] {
            assert!(
                errors.iter().any(|e| e.starts_with(field)),
                "{field}: {errors:?}"
            );
        }
        let config = Config::parse("[admin]\nmetrics_token = \"tok-3141592653\"\n").unwrap();
        assert_eq!(
            config.admin.metrics_token.as_ref().map(|t| t.expose()),
            Some("tok-3141592653")
        );
        assert_eq!(config.admin.max_concurrent_scorecards, 2);
        assert!(!format!("{config:?}").contains("tok-3141592653"));
    }
}
