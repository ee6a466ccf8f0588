//! Provider keys: which secret to send to which provider, and which keys are benched.
//!
//! The store keeps every key sealed (`vault`), with its versions and history
//! (`provider_keys`); the gateway holds the usable ones, opened, in a [`KeyRing`] that each
//! request picks from, and reloads it whenever the store changes.

pub mod provider_keys;
pub mod vault;
pub mod weighted;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::HashMap;
use tokio::time::Instant;

use crate::config::ProviderId;

pub use crate::secret::Secret;

/// One usable key of a provider.
#[derive(Clone, Debug)]
pub struct KeyLease {
    /// The key's id, safe to log.
    pub id: Arc<str>,
    pub secret: Secret,
    /// A Bedrock step's AWS credentials, which sign its request; `secret` is then their
    /// secret access key, scrubbed from answers as a key is. Their `Debug` redacts them.
    pub aws: Option<Arc<aws_credential_types::Credentials>>,
}

struct ProviderKey {
    lease: KeyLease,
    /// The stored version this secret is; a rotation makes a fresh entry, bench and all.
    version: i64,
    /// Wall-clock expiry, in epoch milliseconds.
    expires_ms: Option<i64>,
    benched_until: Option<Instant>,
    /// Its share of the provider's traffic, relative to the other keys'.
    weight: u32,
    /// Smooth weighted round robin's running value (see `router::balance`).
    current: i64,
}

impl ProviderKey {
    fn usable(&self, now: Instant, tried: &[Arc<str>]) -> bool {
        let benched = self.benched_until.is_some_and(|until| until > now);
        !benched && !self.expired() && !tried.contains(&self.lease.id)
    }

    fn expired(&self) -> bool {
        self.expires_ms
            .is_some_and(|at| at <= crate::store::now_ms())
    }
}

/// A usable key as the store holds it, opened.
pub struct LoadedKey {
    pub provider: ProviderId,
    pub id: String,
    pub version: i64,
    pub secret: Secret,
    pub weight: u32,
    pub expires_ms: Option<i64>,
}

/// Every provider's keys, with the benches that 401/403 answers put them on.
#[derive(Default)]
pub struct KeyRing {
    // A sync mutex: held for a few instructions, never across an await. The router's health
    // table calls in while holding its own lock, so nothing here may call back out.
    providers: Mutex<HashMap<ProviderId, Vec<ProviderKey>>>,
}

impl KeyRing {
    /// Replaces every key with `keys`, the store's usable ones. A key whose id and version
    /// are unchanged keeps its bench and its place in the weighted rotation.
    pub fn replace_all(&self, keys: Vec<LoadedKey>) {
        let mut providers = self.lock();
        let mut previous = std::mem::take(&mut *providers);
        for key in keys {
            let kept = previous.get_mut(&key.provider).and_then(|old| {
                let at = old
                    .iter()
                    .position(|k| *k.lease.id == *key.id && k.version == key.version)?;
                Some(old.swap_remove(at))
            });
            let entry = ProviderKey {
                lease: KeyLease {
                    id: Arc::from(key.id.as_str()),
                    secret: key.secret,
                    aws: None,
                },
                version: key.version,
                expires_ms: key.expires_ms,
                benched_until: kept.as_ref().and_then(|k| k.benched_until),
                weight: key.weight.max(1),
                current: kept.map_or(0, |k| k.current),
            };
            providers.entry(key.provider).or_default().push(entry);
        }
    }

    /// Adds a key of weight 1, or replaces the key of the same id.
    pub fn put(&self, provider: &ProviderId, id: &str, secret: Secret) {
        self.put_weighted(provider, id, secret, 1);
    }

    /// Adds a key that takes `weight` shares of the provider's traffic (at least 1), or
    /// replaces the key of the same id.
    pub fn put_weighted(&self, provider: &ProviderId, id: &str, secret: Secret, weight: u32) {
        let mut providers = self.lock();
        let keys = providers.entry(provider.clone()).or_default();
        keys.retain(|k| &*k.lease.id != id);
        keys.push(ProviderKey {
            lease: KeyLease {
                id: Arc::from(id),
                secret,
                aws: None,
            },
            version: 0,
            expires_ms: None,
            benched_until: None,
            weight: weight.max(1),
            current: 0,
        });
    }

    /// A key of the provider that is not benched and not in `tried`, chosen by weight.
    pub fn pick(&self, provider: &ProviderId, tried: &[Arc<str>]) -> Option<KeyLease> {
        self.pick_where(provider, tried, |_| true)
    }

    /// Like [`KeyRing::pick`], among the keys whose id `eligible` accepts too (the router
    /// passes the keys whose breaker admits).
    pub fn pick_where(
        &self,
        provider: &ProviderId,
        tried: &[Arc<str>],
        mut eligible: impl FnMut(&str) -> bool,
    ) -> Option<KeyLease> {
        let now = Instant::now();
        let mut providers = self.lock();
        let mut candidates: Vec<&mut ProviderKey> = providers
            .get_mut(provider)?
            .iter_mut()
            .filter(|key| key.usable(now, tried) && eligible(&key.lease.id))
            .collect();
        let weights = candidates
            .iter_mut()
            .map(|key| {
                let weight = key.weight;
                (&mut key.current, weight)
            })
            .collect();
        let chosen = weighted::smooth_pick(weights)?;
        Some(candidates[chosen].lease.clone())
    }

    /// The ids of the provider's keys that are neither benched nor in `tried`.
    pub fn usable(&self, provider: &ProviderId, tried: &[Arc<str>]) -> Vec<Arc<str>> {
        let now = Instant::now();
        let providers = self.lock();
        providers.get(provider).map_or_else(Vec::new, |keys| {
            keys.iter()
                .filter(|key| key.usable(now, tried))
                .map(|key| key.lease.id.clone())
                .collect()
        })
    }

    /// When the soonest of the provider's keys, not expired nor in `tried`, that are only
    /// benched (a 401/403 or its `retry-after`) comes back; `None` when none is. A step
    /// without a usable key is then `benched`, not `no_key`, since it comes back by itself.
    pub fn benched_until(&self, provider: &ProviderId, tried: &[Arc<str>]) -> Option<Instant> {
        let now = Instant::now();
        let providers = self.lock();
        providers
            .get(provider)?
            .iter()
            .filter(|key| !key.expired() && !tried.contains(&key.lease.id))
            .filter_map(|key| key.benched_until.filter(|until| *until > now))
            .min()
    }

    /// Keeps a key out of use for `cooldown`, after the provider refused it.
    pub fn bench(&self, provider: &ProviderId, id: &str, cooldown: Duration) {
        let mut providers = self.lock();
        if let Some(key) = providers
            .get_mut(provider)
            .and_then(|keys| keys.iter_mut().find(|k| &*k.lease.id == id))
        {
            key.benched_until = Some(Instant::now() + cooldown);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProviderId, Vec<ProviderKey>>> {
        // A poisoned lock only means another request panicked mid-update of a plain map;
        // the map is still consistent, so keep serving.
        self.providers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> ProviderId {
        ProviderId(Arc::from("p"))
    }

    #[test]
    fn secret_never_prints() {
        let lease = KeyLease {
            id: Arc::from("main"),
            secret: Secret::new("sk-very-secret"),
            aws: None,
        };
        assert!(!format!("{lease:?}").contains("sk-very-secret"));
    }

    #[tokio::test(start_paused = true)]
    async fn benched_key_is_skipped_until_its_cooldown_ends() {
        let ring = KeyRing::default();
        ring.put(&provider(), "a", Secret::new("1"));
        ring.put(&provider(), "b", Secret::new("2"));
        ring.bench(&provider(), "a", Duration::from_secs(60));
        assert_eq!(&*ring.pick(&provider(), &[]).unwrap().id, "b");
        assert!(ring.pick(&provider(), &[Arc::from("b")]).is_none());
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(&*ring.pick(&provider(), &[]).unwrap().id, "a");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_share_traffic_by_weight_among_the_usable_ones() {
        let ring = KeyRing::default();
        ring.put_weighted(&provider(), "big", Secret::new("1"), 3);
        ring.put(&provider(), "small", Secret::new("2"));
        let mut picks = Vec::new();
        for _ in 0..8 {
            picks.push(ring.pick(&provider(), &[]).unwrap().id.to_string());
        }
        assert_eq!(picks.iter().filter(|id| *id == "big").count(), 6);
        ring.bench(&provider(), "big", Duration::from_secs(60));
        assert_eq!(&*ring.pick(&provider(), &[]).unwrap().id, "small");
        assert_eq!(ring.usable(&provider(), &[]), [Arc::from("small")]);
        let only_big = ring.pick_where(&provider(), &[], |id| id == "big");
        assert!(only_big.is_none());
    }

    #[test]
    fn expired_keys_are_never_picked_and_rotations_start_unbenched() {
        let ring = KeyRing::default();
        let key = |id: &str, version, expires_ms| LoadedKey {
            provider: provider(),
            id: id.into(),
            version,
            secret: Secret::new("s"),
            weight: 1,
            expires_ms,
        };
        ring.replace_all(vec![key("old", 1, Some(crate::store::now_ms() - 1))]);
        assert!(ring.pick(&provider(), &[]).is_none(), "expired");

        ring.replace_all(vec![key("main", 1, None)]);
        ring.bench(&provider(), "main", Duration::from_secs(60));
        ring.replace_all(vec![key("main", 1, None)]);
        assert!(
            ring.pick(&provider(), &[]).is_none(),
            "the same version keeps its bench"
        );
        ring.replace_all(vec![key("main", 2, None)]);
        assert!(
            ring.pick(&provider(), &[]).is_some(),
            "a rotated version starts fresh"
        );
    }
}
