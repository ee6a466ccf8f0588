//! What a scrape says of config reloads: how many were applied or refused, and which config
//! is live, so an operator rolling a change out can see every instance took it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Which config is live: a digest of it and when it was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigStamp {
    /// The first 16 hex digits of the SHA-256 of the validated config, secrets left out:
    /// instances running the same config show the same digest, whatever the file's comments.
    pub sha256: String,
    /// When it was loaded, in milliseconds since the epoch.
    pub loaded_at_ms: i64,
}

/// `switchyard_config_reloads_total`'s label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadResult {
    /// `ok` or `error`.
    pub result: &'static str,
}

/// `switchyard_config_info`'s label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigDigest {
    pub sha256: String,
}

/// The reload metrics.
#[derive(Default)]
pub struct ReloadMetrics {
    reloads: Family<ReloadResult, Counter>,
    info: Family<ConfigDigest, Gauge>,
    loaded_at: Gauge,
}

impl ReloadMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "switchyard_config_reloads",
            "Config reloads (SIGHUP or POST /admin/reload), by result: ok or error",
            self.reloads.clone(),
        );
        registry.register(
            "switchyard_config_info",
            "Always 1; its sha256 label names the config live now",
            self.info.clone(),
        );
        registry.register(
            "switchyard_config_loaded_timestamp_seconds",
            "When the live config was loaded, in seconds since the epoch",
            self.loaded_at.clone(),
        );
    }

    /// A config went live, at start or by a reload.
    pub fn loaded(&self, stamp: &ConfigStamp) {
        self.info.clear();
        self.info
            .get_or_create(&ConfigDigest {
                sha256: stamp.sha256.clone(),
            })
            .set(1);
        self.loaded_at.set(stamp.loaded_at_ms / 1000);
    }

    /// Counts a reload's result.
    pub fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&ReloadResult { result }).inc();
    }
}
