//! Durable state: virtual keys, provider keys and the request log.
//!
//! `Store` is an enum over backends so that PostgreSQL slots in beside SQLite without
//! trait objects; each method is async, and the SQLite backend runs its queries on the
//! blocking pool behind one connection (one writer, WAL mode for readers in other processes).

#[cfg(any(test, feature = "test-fixtures"))]
pub mod contract;
pub mod postgres;
pub mod request_log;
pub mod response_state;
pub mod rollup;
pub mod sqlite;

use std::time::{SystemTime, UNIX_EPOCH};

use crate::secret::Secret;

use request_log::{LogQuery, LogRow, Pace};
use response_state::StoredResponse;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// A provider secret as the store keeps it: sealed by `keys::vault`, opaque here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "unsupported store url `{0}`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST:PORT/DB"
    )]
    UnsupportedUrl(String),
    #[error("store url: {0}")]
    BadUrl(String),
    #[error("store error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL store error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("PostgreSQL store unreachable: {0}")]
    Pool(String),
    /// `at` is host, port and database: never the password.
    #[error("cannot reach PostgreSQL at {at}: {why}")]
    Connect { at: String, why: String },
    #[error("store task failed: {0}")]
    Task(String),
    #[error("the store did not answer within {0:?} ([store] timeout)")]
    Timeout(std::time::Duration),
}

/// `work`, or [`StoreError::Timeout`] once it has taken `limit` (`[store] timeout`): a store
/// that stops answering (a hung server, a network that drops packets with the connection
/// open) fails what waits on it instead of holding it for ever.
///
/// `work` is boxed: a store call's future is kilobytes, and held inline it enlarges the future
/// of whatever awaits it. In a handler that is every client API request's future, which
/// `connection::Tracked` moves three times (8k instructions of memcpy per 4 KB chat request
/// when the Responses API's store calls were inline).
pub async fn within<T>(
    limit: std::time::Duration,
    work: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, Box::pin(work))
        .await
        .unwrap_or(Err(StoreError::Timeout(limit)))
}

/// Limits a virtual key sets for itself, over its role's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u64>,
    /// Spend budgets in millionths of a US dollar, per UTC day and per calendar month.
    pub budget_per_day_micros: Option<u64>,
    pub budget_per_month_micros: Option<u64>,
}

/// A virtual key as stored: never the key itself, only its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualKey {
    pub id: String,
    /// Hex SHA-256 of the whole key.
    pub hash: String,
    /// The key's first characters, to recognise it in a list.
    pub prefix: String,
    pub user: String,
    pub role: String,
    pub permissions: Vec<String>,
    /// The models (routes or provider/model) it may use; `None` for all.
    pub models: Option<Vec<String>>,
    pub limits: LimitOverrides,
    pub created_ms: i64,
    pub revoked_ms: Option<i64>,
    /// When the key stops working; `None` for never.
    pub expires_ms: Option<i64>,
}

impl VirtualKey {
    /// Whether the key carries a permission such as `debug`.
    pub fn has_permission(&self, permission: &str) -> bool {
        self.permissions.iter().any(|p| p == permission)
    }

    /// Whether the key has expired by `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }

    /// `revoked`, `expired` or `active`, as lists show it.
    pub fn state(&self, now_ms: i64) -> &'static str {
        if self.revoked_ms.is_some() {
            "revoked"
        } else if self.expired(now_ms) {
            "expired"
        } else {
            "active"
        }
    }

    /// The key as `vkeys list` shows it.
    pub fn masked(&self) -> String {
        format!("{}…", self.prefix)
    }
}

/// Where a version of a provider key stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// The version in use.
    Active,
    /// Replaced by a rotation; a rollback within the window restores it.
    History,
    /// Rolled back from; never used again.
    Retired,
}

impl KeyState {
    /// The name `keys list` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::History => "history",
            KeyState::Retired => "retired",
        }
    }
}

/// A provider key to store (a new key, or a rotation of an existing id).
#[derive(Clone, Debug)]
pub struct NewProviderKey {
    pub provider: String,
    pub key_id: String,
    pub sealed: Sealed,
    pub weight: u32,
    pub expires_ms: Option<i64>,
}

/// One version of a provider key, as stored: the secret only sealed.
#[derive(Clone, Debug)]
pub struct ProviderKeyRow {
    pub provider: String,
    pub key_id: String,
    pub version: i64,
    pub sealed: Sealed,
    pub weight: u32,
    pub created_ms: i64,
    /// When this version was replaced (rotation) or retired (rollback).
    pub rotated_ms: Option<i64>,
    pub expires_ms: Option<i64>,
    pub state: KeyState,
}

impl ProviderKeyRow {
    /// Whether a request may use this version now.
    pub fn usable(&self, now_ms: i64) -> bool {
        self.state == KeyState::Active && self.expires_ms.is_none_or(|at| at > now_ms)
    }
}

/// The store, whichever backend holds it.
#[derive(Clone)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Store {
    /// Opens (and migrates) the store `url` names, PostgreSQL's with `password` (`[store]
    /// password_env` or `password_file`) when given.
    pub async fn connect(url: &str, password: Option<&Secret>) -> Result<Store, StoreError> {
        if postgres::is_postgres_url(url) {
            return Ok(Store::Postgres(PgStore::open_with(url, password).await?));
        }
        Store::open(url).await
    }

    /// Opens (and migrates) the store `url` names.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        if postgres::is_postgres_url(url) {
            return Ok(Store::Postgres(PgStore::open(url).await?));
        }
        if url == "sqlite::memory:" {
            return Ok(Store::Sqlite(SqliteStore::open_memory().await?));
        }
        match url.strip_prefix("sqlite://") {
            Some(path) if !path.is_empty() => Ok(Store::Sqlite(SqliteStore::open(path).await?)),
            _ => Err(StoreError::UnsupportedUrl(url.to_owned())),
        }
    }

    /// Adds a virtual key.
    pub async fn insert_virtual_key(&self, key: VirtualKey) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.insert_virtual_key(key).await,
            Store::Postgres(store) => store.insert_virtual_key(key).await,
        }
    }

    /// Every virtual key, revoked ones included.
    pub async fn virtual_keys(&self) -> Result<Vec<VirtualKey>, StoreError> {
        match self {
            Store::Sqlite(store) => store.virtual_keys().await,
            Store::Postgres(store) => store.virtual_keys().await,
        }
    }

    /// Revokes a key given whole (`sy-…`) or by id; false when no live key matched.
    pub async fn revoke_virtual_key(&self, key_or_id: &str) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.revoke_virtual_key(key_or_id).await,
            Store::Postgres(store) => store.revoke_virtual_key(key_or_id).await,
        }
    }

    /// Replaces a live key's role, permissions, models, limits and expiry (matched by id;
    /// the rest of `key` is ignored); false when no live key has that id.
    pub async fn update_virtual_key(&self, key: VirtualKey) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.update_virtual_key(key).await,
            Store::Postgres(store) => store.update_virtual_key(key).await,
        }
    }

    /// Stores a provider key, rotating an existing id; returns the new version.
    pub async fn put_provider_key(&self, key: NewProviderKey) -> Result<i64, StoreError> {
        match self {
            Store::Sqlite(store) => store.put_provider_key(key).await,
            Store::Postgres(store) => store.put_provider_key(key).await,
        }
    }

    /// Every version of every provider key.
    pub async fn provider_keys(&self) -> Result<Vec<ProviderKeyRow>, StoreError> {
        match self {
            Store::Sqlite(store) => store.provider_keys().await,
            Store::Postgres(store) => store.provider_keys().await,
        }
    }

    /// Restores the version a rotation replaced within `window_ms`; `None` when there is none.
    pub async fn rollback_provider_key(
        &self,
        provider: &str,
        key_id: &str,
        window_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        match self {
            Store::Sqlite(store) => {
                store
                    .rollback_provider_key(provider, key_id, window_ms)
                    .await
            }
            Store::Postgres(store) => {
                store
                    .rollback_provider_key(provider, key_id, window_ms)
                    .await
            }
        }
    }

    /// Removes a provider key with its history.
    pub async fn remove_provider_key(
        &self,
        provider: &str,
        key_id: &str,
    ) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.remove_provider_key(provider, key_id).await,
            Store::Postgres(store) => store.remove_provider_key(provider, key_id).await,
        }
    }

    /// Deletes expired keys and history older than the rollback window.
    pub async fn purge_provider_keys(&self, window_ms: i64) -> Result<usize, StoreError> {
        match self {
            Store::Sqlite(store) => store.purge_provider_keys(window_ms).await,
            Store::Postgres(store) => store.purge_provider_keys(window_ms).await,
        }
    }

    /// A number the gateway keeps beside its data under `key` (never a secret); `None`
    /// until one is set.
    pub async fn meta_value(&self, key: &str) -> Result<Option<i64>, StoreError> {
        match self {
            Store::Sqlite(store) => store.meta_value(key).await,
            Store::Postgres(store) => store.meta_value(key).await,
        }
    }

    /// Sets [`Store::meta_value`]'s number under `key`.
    pub async fn set_meta_value(&self, key: &str, value: i64) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.set_meta_value(key, value).await,
            Store::Postgres(store) => store.set_meta_value(key, value).await,
        }
    }

    /// The master key's check value, stored on first use and compared ever after.
    pub async fn master_key_check(&self, fresh: Sealed) -> Result<Sealed, StoreError> {
        match self {
            Store::Sqlite(store) => store.init_sealed_meta("master_key_check", fresh).await,
            Store::Postgres(store) => store.init_sealed_meta("master_key_check", fresh).await,
        }
    }

    /// Appends a batch of request-log rows in one transaction, skipping ids already stored;
    /// returns how many were new.
    pub async fn insert_log(
        &self,
        rows: impl Into<std::sync::Arc<[LogRow]>>,
    ) -> Result<usize, StoreError> {
        self.insert_log_at(rows, Pace::FlatOut).await
    }

    /// [`Store::insert_log`] at `pace`: SQLite inserts on a core of this machine, which it
    /// shares at that pace; PostgreSQL inserts on its own.
    pub async fn insert_log_at(
        &self,
        rows: impl Into<std::sync::Arc<[LogRow]>>,
        pace: Pace,
    ) -> Result<usize, StoreError> {
        match self {
            Store::Sqlite(store) => store.insert_log(rows.into(), pace).await,
            Store::Postgres(store) => store.insert_log(rows.into()).await,
        }
    }

    /// Request-log rows matching `query`, oldest first.
    pub async fn query_log(&self, query: LogQuery) -> Result<Vec<LogRow>, StoreError> {
        match self {
            Store::Sqlite(store) => store.query_log(query).await,
            Store::Postgres(store) => store.query_log(query).await,
        }
    }

    /// Feeds `fold` every per-minute rollup of a minute that starts after `after_ms`, read
    /// beside the writer rather than behind it.
    pub async fn fold_rollups<A: Send + 'static>(
        &self,
        after_ms: i64,
        state: A,
        fold: impl Fn(&mut A, rollup::Rollup) + Send + 'static,
    ) -> Result<A, StoreError> {
        match self {
            Store::Sqlite(store) => store.fold_rollups(after_ms, state, fold).await,
            Store::Postgres(store) => store.fold_rollups(after_ms, state, fold).await,
        }
    }

    /// How many rows the request log holds.
    pub async fn count_log(&self) -> Result<u64, StoreError> {
        match self {
            Store::Sqlite(store) => store.count_log().await,
            Store::Postgres(store) => store.count_log().await,
        }
    }

    /// Deletes request-log rows older than `before_ms` (the `[log] retention`).
    pub async fn purge_log(&self, before_ms: i64) -> Result<usize, StoreError> {
        match self {
            Store::Sqlite(store) => store.purge_log(before_ms).await,
            Store::Postgres(store) => store.purge_log(before_ms).await,
        }
    }

    /// Stores a served response's state (`/v1/responses` with `store: true`).
    pub async fn put_response(&self, stored: StoredResponse) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.put_response(stored).await,
            Store::Postgres(store) => store.put_response(stored).await,
        }
    }

    /// The stored response `id`, if `scope` (a virtual key's id) stored it.
    pub async fn response(
        &self,
        id: &str,
        scope: &str,
    ) -> Result<Option<StoredResponse>, StoreError> {
        match self {
            Store::Sqlite(store) => store.response(id, scope).await,
            Store::Postgres(store) => store.response(id, scope).await,
        }
    }

    /// A stored response's output item `id` (JSON text), if `scope` stored it.
    pub async fn response_item(&self, id: &str, scope: &str) -> Result<Option<String>, StoreError> {
        match self {
            Store::Sqlite(store) => store.response_item(id, scope).await,
            Store::Postgres(store) => store.response_item(id, scope).await,
        }
    }

    /// Deletes the stored response `id` of `scope`; false when there was none.
    pub async fn delete_response(&self, id: &str, scope: &str) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.delete_response(id, scope).await,
            Store::Postgres(store) => store.delete_response(id, scope).await,
        }
    }

    /// Deletes responses stored before `before_ms` (the request log's retention).
    pub async fn purge_responses(&self, before_ms: i64) -> Result<usize, StoreError> {
        match self {
            Store::Sqlite(store) => store.purge_responses(before_ms).await,
            Store::Postgres(store) => store.purge_responses(before_ms).await,
        }
    }

    /// A number that changes whenever anything in the store changes, from any process.
    pub async fn generation(&self) -> Result<i64, StoreError> {
        match self {
            Store::Sqlite(store) => store.generation().await,
            Store::Postgres(store) => store.generation().await,
        }
    }
}

/// Milliseconds since the epoch, how the store keeps time.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
