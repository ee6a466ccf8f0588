//! Provider keys as operators manage them: put (and rotate), roll back, remove, list, all
//! through the store, sealed by the vault; and the gateway's ring, reloaded from the store.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::vault::{KeySource, MASTER_KEY_ENV, Vault, VaultError};
use super::{KeyRing, LoadedKey, Secret};
use crate::config::{Config, ProviderId};
use crate::store::{KeyState, NewProviderKey, Store, StoreError, now_ms};

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error("no provider is named `{0}`")]
    UnknownProvider(String),
    #[error("a key id is 1-64 letters, digits, `-`, `_` or `.`")]
    BadKeyId,
    #[error("the secret is empty")]
    EmptySecret,
    #[error("weight must be at least 1")]
    BadWeight,
    #[error("`{provider}` has no key `{key_id}`")]
    NoSuchKey { provider: String, key_id: String },
    #[error("`{provider}` key `{key_id}` has no earlier version within the rollback window")]
    NothingToRollBack { provider: String, key_id: String },
    #[error("`{0}` has several keys: name one with --id")]
    AmbiguousKey(String),
    #[error("expires_in (--expires) must be more than 0 and at most {MAX_EXPIRES_IN_DAYS}d")]
    BadExpiry,
}

/// The furthest a key's expiry may lie ahead: a hundred years is "never" in practice, and
/// dates stay well inside what the store and `keys list` can hold.
pub const MAX_EXPIRES_IN_DAYS: u64 = 36_500;

/// A key as `keys list` and `GET /admin/keys` show it: never the secret, at most its last 4.
#[derive(Clone, Debug, Serialize)]
pub struct KeyView {
    pub provider: String,
    pub id: String,
    pub version: i64,
    /// `****` and the last four characters, or only `****` for a short secret.
    pub secret: String,
    pub weight: u32,
    pub created_ms: i64,
    /// When the version in use replaced the one before, if it did.
    pub rotated_ms: Option<i64>,
    pub expires_ms: Option<i64>,
    pub state: &'static str,
    /// Earlier versions a rollback could restore.
    pub history: usize,
}

/// Provider keys in the store, and the ring the gateway sends from.
pub struct ProviderKeys {
    store: Store,
    vault: Vault,
    /// The configured providers, which a reload may change.
    providers: Mutex<Vec<ProviderId>>,
    rollback_window: Duration,
    /// What requests pick from: the usable keys, opened.
    pub ring: KeyRing,
    /// Rows the last reload could not decrypt, and every row already reported, so each is
    /// logged once however often the store reloads.
    unreadable: AtomicUsize,
    reported: Mutex<HashSet<(String, String, i64)>>,
}

impl ProviderKeys {
    /// Opens the vault for the store and checks that its master key is the store's.
    pub async fn open(
        store: Store,
        config: &Config,
        master_key: Option<&str>,
    ) -> Result<ProviderKeys, KeyError> {
        let vault = Vault::for_store(&config.store.url, master_key)?;
        let kept = store.master_key_check(vault.check_value()?).await?;
        vault.verify(&kept)?;
        Ok(ProviderKeys {
            store,
            vault,
            providers: Mutex::new(providers_of(config)),
            rollback_window: config.keys.rollback_window,
            ring: KeyRing::default(),
            unreadable: AtomicUsize::new(0),
            reported: Mutex::new(HashSet::new()),
        })
    }

    /// The master key's vault, for what else the gateway seals under it (compaction items).
    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    /// Where the master key came from, to say once at start.
    pub fn announce(&self) {
        match &self.vault.source {
            KeySource::Generated(path) => tracing::warn!(
                path = %path.display(),
                "{MASTER_KEY_ENV} is not set: generated a master key file (mode 0600) beside the database; back it up"
            ),
            KeySource::File(path) => {
                tracing::info!(path = %path.display(), "master key read from its key file")
            }
            KeySource::Environment => tracing::info!("master key read from {MASTER_KEY_ENV}"),
            KeySource::Ephemeral => {
                tracing::info!("in-memory store: provider keys last as long as this process")
            }
        }
    }

    /// Seeds `api_key_env` keys into the store as id `env`, only where that cannot undo a
    /// change made since: when the provider has no key in the store at all, or when the
    /// environment's value itself changed since it was last seeded. A fingerprint of the
    /// value seeded last (8 bytes of a SHA-256, never the value) is kept in the store for
    /// that. Says at start, for each provider, which it did.
    pub async fn seed_from_env(&self, config: &Config) -> Result<(), KeyError> {
        let current = self.open_current().await?;
        for provider in &config.providers {
            let Some(var) = &provider.api_key_env else {
                continue;
            };
            let Some(secret) = std::env::var(var).ok().filter(|v| !v.trim().is_empty()) else {
                tracing::warn!(provider = %provider.id, env = %var, "api_key_env is not set");
                continue;
            };
            let name = provider.id.as_str();
            let fingerprint = seed_fingerprint(name, secret.trim());
            let meta = format!("env_seed:{name}");
            let seeded_last = self.store.meta_value(&meta).await?;
            let has_keys = current.keys().any(|(p, _)| p == name);
            let seed = match (has_keys, seeded_last) {
                (false, _) => Some("the store had no key for it"),
                (true, Some(last)) if last != fingerprint => {
                    Some("its value changed since it was last seeded")
                }
                (true, _) => None,
            };
            match seed {
                Some(why) => {
                    self.put(name, "env", &secret, 1, None).await?;
                    tracing::info!(provider = %name, env = %var, "seeded its key from {var}: {why}");
                }
                None => tracing::info!(
                    provider = %name,
                    env = %var,
                    "kept the store's keys: {var} is unchanged since it was last seeded \
                     (a key rotated or rolled back since stands)"
                ),
            }
            if seeded_last != Some(fingerprint) {
                self.store.set_meta_value(&meta, fingerprint).await?;
            }
        }
        Ok(())
    }

    /// Stores a key; an existing id is rotated. Returns the new version.
    pub async fn put(
        &self,
        provider: &str,
        key_id: &str,
        secret: &str,
        weight: u32,
        expires_in: Option<Duration>,
    ) -> Result<i64, KeyError> {
        self.known(provider)?;
        let valid_id = !key_id.is_empty()
            && key_id.len() <= 64
            && key_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !valid_id {
            return Err(KeyError::BadKeyId);
        }
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(KeyError::EmptySecret);
        }
        if weight == 0 {
            return Err(KeyError::BadWeight);
        }
        let key = NewProviderKey {
            provider: provider.to_owned(),
            key_id: key_id.to_owned(),
            sealed: self.vault.seal(provider, key_id, secret)?,
            weight,
            expires_ms: expires_in.map(|d| expires_at(now_ms(), d)).transpose()?,
        };
        Ok(self.store.put_provider_key(key).await?)
    }

    /// Restores the version the last rotation replaced. With no id, the provider's only key.
    pub async fn rollback(&self, provider: &str, key_id: Option<&str>) -> Result<i64, KeyError> {
        let key_id = self.resolve_id(provider, key_id).await?;
        let window = self.rollback_window.as_millis() as i64;
        self.store
            .rollback_provider_key(provider, &key_id, window)
            .await?
            .ok_or(KeyError::NothingToRollBack {
                provider: provider.to_owned(),
                key_id,
            })
    }

    /// Removes a key and its history. With no id, the provider's only key.
    pub async fn remove(&self, provider: &str, key_id: Option<&str>) -> Result<(), KeyError> {
        let key_id = self.resolve_id(provider, key_id).await?;
        if self.store.remove_provider_key(provider, &key_id).await? {
            Ok(())
        } else {
            Err(KeyError::NoSuchKey {
                provider: provider.to_owned(),
                key_id,
            })
        }
    }

    /// Every key's version in use (or its newest), masked.
    pub async fn list(&self) -> Result<Vec<KeyView>, KeyError> {
        let rows = self.store.provider_keys().await?;
        let mut views: Vec<KeyView> = Vec::new();
        for row in &rows {
            let history = rows
                .iter()
                .filter(|r| {
                    r.provider == row.provider
                        && r.key_id == row.key_id
                        && r.state == KeyState::History
                })
                .count();
            let first_created = rows
                .iter()
                .filter(|r| r.provider == row.provider && r.key_id == row.key_id)
                .map(|r| r.created_ms)
                .min()
                .unwrap_or(row.created_ms);
            if row.state != KeyState::Active {
                continue;
            }
            // An unreadable row is listed, so the operator can see it and rotate or remove it.
            let opened = self.vault.open(&row.provider, &row.key_id, &row.sealed);
            let readable = opened.is_ok();
            views.push(KeyView {
                provider: row.provider.clone(),
                id: row.key_id.clone(),
                version: row.version,
                secret: opened.map_or_else(|_| "(unreadable)".into(), |s| mask(s.expose())),
                weight: row.weight,
                created_ms: first_created,
                rotated_ms: (row.version > 1).then_some(row.created_ms),
                expires_ms: row.expires_ms,
                state: if !readable {
                    "unreadable"
                } else if row.usable(now_ms()) {
                    "active"
                } else {
                    "expired"
                },
                history,
            });
        }
        Ok(views)
    }

    /// Loads the store's usable keys into the ring.
    ///
    /// A row that does not decrypt (sealed under another master key, or damaged) is skipped
    /// and reported, never fatal: one bad row must not stop every other key, and the virtual
    /// keys loaded after them, from reaching the gateway.
    pub async fn reload(&self) -> Result<(), KeyError> {
        let now = now_ms();
        let mut loaded = Vec::new();
        let mut unreadable = 0;
        for row in self.store.provider_keys().await? {
            if !row.usable(now) {
                continue;
            }
            let secret = match self.vault.open(&row.provider, &row.key_id, &row.sealed) {
                Ok(secret) => secret,
                Err(error) => {
                    unreadable += 1;
                    self.report_unreadable(&row.provider, &row.key_id, row.version, &error);
                    continue;
                }
            };
            loaded.push(LoadedKey {
                secret,
                provider: ProviderId(row.provider.as_str().into()),
                id: row.key_id,
                version: row.version,
                weight: row.weight,
                expires_ms: row.expires_ms,
            });
        }
        self.ring.replace_all(loaded);
        self.unreadable.store(unreadable, Ordering::Relaxed);
        Ok(())
    }

    /// How many usable rows the last reload could not decrypt (and so skipped).
    pub fn unreadable_rows(&self) -> usize {
        self.unreadable.load(Ordering::Relaxed)
    }

    fn report_unreadable(&self, provider: &str, key_id: &str, version: i64, error: &VaultError) {
        let row = (provider.to_owned(), key_id.to_owned(), version);
        // Poison only means a panic mid-insert; the set is still a set.
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        if reported.insert(row) {
            tracing::error!(
                provider,
                key_id,
                version,
                error = %error,
                "a provider key does not decrypt under this master key; it is skipped until rotated or removed"
            );
        }
    }

    /// Deletes expired keys and history older than the rollback window.
    pub async fn purge(&self) -> Result<usize, KeyError> {
        Ok(self
            .store
            .purge_provider_keys(self.rollback_window.as_millis() as i64)
            .await?)
    }

    async fn open_current(&self) -> Result<HashMap<(String, String), Secret>, KeyError> {
        let mut current = HashMap::new();
        for row in self.store.provider_keys().await? {
            // An unreadable row counts as absent, so seeding replaces it with a readable one.
            if row.state == KeyState::Active
                && let Ok(secret) = self.vault.open(&row.provider, &row.key_id, &row.sealed)
            {
                current.insert((row.provider, row.key_id), secret);
            }
        }
        Ok(current)
    }

    async fn resolve_id(&self, provider: &str, key_id: Option<&str>) -> Result<String, KeyError> {
        self.known(provider)?;
        if let Some(key_id) = key_id {
            return Ok(key_id.to_owned());
        }
        let mut ids: Vec<String> = self
            .store
            .provider_keys()
            .await?
            .into_iter()
            .filter(|r| r.provider == provider)
            .map(|r| r.key_id)
            .collect();
        ids.dedup();
        match ids.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(KeyError::NoSuchKey {
                provider: provider.to_owned(),
                key_id: "(any)".into(),
            }),
            _ => Err(KeyError::AmbiguousKey(provider.to_owned())),
        }
    }

    /// Takes a reloaded config's providers, so keys can be put for the ones it adds.
    pub fn set_providers(&self, config: &Config) {
        *self.providers.lock().unwrap_or_else(|e| e.into_inner()) = providers_of(config);
    }

    fn known(&self, provider: &str) -> Result<(), KeyError> {
        let providers = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        if providers.iter().any(|p| p.as_str() == provider) {
            Ok(())
        } else {
            Err(KeyError::UnknownProvider(provider.to_owned()))
        }
    }
}

fn providers_of(config: &Config) -> Vec<ProviderId> {
    config.providers.iter().map(|p| p.id.clone()).collect()
}

/// When a key put now with `expires_in` expires, or why it cannot.
fn expires_at(now_ms: i64, expires_in: Duration) -> Result<i64, KeyError> {
    let max = Duration::from_secs(MAX_EXPIRES_IN_DAYS * 86_400);
    if expires_in.is_zero() || expires_in > max {
        return Err(KeyError::BadExpiry);
    }
    // At most a hundred years in milliseconds: far inside an i64.
    let millis = i64::try_from(expires_in.as_millis()).map_err(|_| KeyError::BadExpiry)?;
    now_ms.checked_add(millis).ok_or(KeyError::BadExpiry)
}

/// `keys list`: one key a line, its secret masked.
pub fn table(keys: &[KeyView]) -> String {
    let date = |ms: i64| {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
    };
    let mut out = format!(
        "{:<14}  {:<16}  {:>7}  {:<10}  {:>6}  {:<29}  {:<29}  {:<29}  {:<8}  {}\n",
        "PROVIDER",
        "ID",
        "VERSION",
        "SECRET",
        "WEIGHT",
        "CREATED",
        "ROTATED",
        "EXPIRES",
        "STATE",
        "HISTORY"
    );
    for key in keys {
        out.push_str(&format!(
            "{:<14}  {:<16}  {:>7}  {:<10}  {:>6}  {:<29}  {:<29}  {:<29}  {:<8}  {}\n",
            key.provider,
            key.id,
            key.version,
            key.secret,
            key.weight,
            date(key.created_ms),
            key.rotated_ms.map(date).unwrap_or_else(|| "-".into()),
            key.expires_ms.map(date).unwrap_or_else(|| "never".into()),
            key.state,
            key.history,
        ));
    }
    out
}

/// `****` and at most the last four characters; only `****` for a secret under 12.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < 12 {
        return "****".into();
    }
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("****{tail}")
}

/// What the store keeps of the `api_key_env` value it seeded last: 8 bytes of a SHA-256 over
/// the provider and the value, enough to tell a changed value, and nothing to recover it by.
fn seed_fingerprint(provider: &str, secret: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"switchyard api_key_env seed\0")
        .chain_update(provider.as_bytes())
        .chain_update([0])
        .chain_update(secret.as_bytes())
        .finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_must_be_ahead_and_within_a_hundred_years() {
        let now = 1_700_000_000_000;
        let day = Duration::from_secs(86_400);
        assert_eq!(expires_at(now, day).unwrap(), now + 86_400_000);
        assert!(expires_at(now, day * 36_500).is_ok());
        for bad in [
            Duration::ZERO,
            day * 36_501,
            // What `200000000000d` parses to: it used to wrap into the past.
            Duration::from_millis(200_000_000_000 * 86_400_000),
            Duration::MAX,
        ] {
            assert!(
                matches!(expires_at(now, bad), Err(KeyError::BadExpiry)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn masks_show_at_most_the_last_four_characters() {
        assert_eq!(mask("sk-proj-abcdefgh1234"), "****1234");
        assert_eq!(mask("short"), "****");
    }
}
