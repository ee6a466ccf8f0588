//! How breakers are named in Redis and what the channel carries.

use std::sync::Arc;

use serde::Deserialize;

use crate::config::{ModelName, ProviderId};
use crate::router::health::DeploymentId;

/// A breaker's field in the shared hash: `[provider, model, key id]` as JSON, which no
/// name can make ambiguous.
pub fn field(id: &DeploymentId) -> String {
    serde_json::json!([id.provider.as_str(), id.model.as_str(), id.key.as_deref()]).to_string()
}

/// The breaker a field names; `None` for a field this version cannot read.
pub fn parse_field(field: &str) -> Option<DeploymentId> {
    let (provider, model, key): (String, String, Option<String>) =
        serde_json::from_str(field).ok()?;
    Some(DeploymentId {
        provider: ProviderId(Arc::from(provider)),
        model: ModelName(Arc::from(model)),
        key: key.map(Arc::from),
    })
}

/// One message on the channel, as the scripts encode it.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// The cluster-wide version this change made.
    pub v: u64,
    /// `open`, `closed` or `reset`.
    pub kind: String,
    /// The instance that made it.
    pub origin: String,
    /// `open` and `closed`: the breaker's field.
    #[serde(default)]
    pub field: String,
    /// `open`: how long it stays open from now, and this open's cooldown.
    #[serde(default)]
    pub remaining_ms: u64,
    #[serde(default)]
    pub cooldown_ms: u64,
    /// `reset`: which breakers (empty for all).
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: String,
}

/// One open breaker in the shared hash: `version until_ms cooldown_ms`, `until` on the
/// Redis server's clock.
pub fn parse_entry(value: &str) -> Option<(u64, u64, u64)> {
    let mut parts = value.split(' ').map(str::parse::<u64>);
    let (Some(Ok(v)), Some(Ok(until)), Some(Ok(cooldown))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((v, until, cooldown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_whatever_the_names() {
        let id = DeploymentId {
            provider: ProviderId(Arc::from("a b")),
            model: ModelName(Arc::from("org/model \"x\"")),
            key: Some(Arc::from("k1")),
        };
        assert_eq!(parse_field(&field(&id)), Some(id.clone()));
        let keyless = DeploymentId { key: None, ..id };
        assert_eq!(parse_field(&field(&keyless)), Some(keyless));
        assert_eq!(parse_field("nonsense"), None);
        assert_eq!(
            parse_entry("3 1700000000000 10000"),
            Some((3, 1_700_000_000_000, 10_000))
        );
        assert_eq!(parse_entry("3 x"), None);
    }
}
