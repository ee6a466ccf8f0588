//! The cluster store: PostgreSQL, shared by every gateway instance.
//!
//! A small pool of connections serves reads and writes; the schema is migrated at start
//! under an advisory lock (see [`migrate`]); every change bumps the generation counter and
//! sends a `NOTIFY` in the same transaction, which [`listen`] turns into a reload on every
//! instance. TLS follows libpq's `sslmode` and `sslrootcert` (see [`tls`]).

#[cfg(any(test, feature = "test-fixtures"))]
pub mod instances;
mod listen;
mod migrate;
mod provider_keys;
mod request_log;
mod response_state;
mod rollup;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod testdb;
#[cfg(test)]
mod tests;
mod tls;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Row;
use tokio_postgres_rustls::MakeRustlsConnect;

pub use listen::Listener;

use super::sqlite::hash_key;
use super::{LimitOverrides, StoreError, VirtualKey, now_ms};
use crate::secret::Secret;

/// The channel every change is announced on; the payload is the new generation.
pub const CHANNEL: &str = "switchyard_store";

/// Connections in the pool: the log writer, the key reloads, the scorecard and the CLI's
/// occasional writes never need more at once.
const POOL_SIZE: usize = 4;

/// How long connecting, or waiting for a pooled connection, may take before the call fails
/// (and the log writer spills to its journal instead of stalling).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Serialises provider-key changes across instances, so two rotations of one key never
/// pick the same version.
const KEYS_LOCK: i64 = 0x5357_5944_4b45_5953; // "SWYDKEYS"

/// PostgreSQL behind a pool.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// What the listener connects with (shared: clones of the store are many, and cheap).
    config: std::sync::Arc<tokio_postgres::Config>,
    connector: MakeRustlsConnect,
}

/// Whether a store URL names PostgreSQL.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Where the store is and how to reach it: the driver's config, and TLS as the URL's
/// `sslmode` and `sslrootcert` say (see [`tls`]).
#[derive(Clone)]
pub struct Target {
    pub config: tokio_postgres::Config,
    tls: tls::Mode,
    root_cert: Option<String>,
}

impl Target {
    /// Parses a `postgres://user[:password]@host[:port]/db[?sslmode=…&sslrootcert=…]` URL.
    pub fn parse(url: &str) -> Result<Target, String> {
        // The driver knows `sslmode` only up to `require`, and not `sslrootcert`: both are
        // taken out here, and the rest of the URL is the driver's to read.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut tls = tls::Mode::Prefer;
        let mut root_cert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("sslmode", value) => tls = tls::Mode::parse(value)?,
                ("sslrootcert", path) => {
                    let path = url::form_urlencoded::parse(path.as_bytes())
                        .next()
                        .map_or_else(|| path.to_owned(), |(k, _)| k.into_owned());
                    if !std::path::Path::new(&path).is_file() {
                        return Err(format!("sslrootcert `{path}` is not a file"));
                    }
                    root_cert = Some(path);
                }
                _ => rest.push(pair),
            }
        }
        if root_cert.is_some() && tls == tls::Mode::Disable {
            return Err("sslrootcert is set but sslmode=disable turns TLS off".into());
        }
        let driver_url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: tokio_postgres::Config = driver_url
            .parse()
            // The driver's message never repeats the URL, so no password leaks through it.
            .map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
        if config.get_dbname().is_none() {
            return Err(
                "the PostgreSQL URL names no database (postgres://user@host:port/db)".into(),
            );
        }
        config.ssl_mode(tls.negotiation());
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("switchyard");
        Ok(Target {
            config,
            tls,
            root_cert,
        })
    }

    /// The connector every connection to this target is made with.
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        tls::connector(self.tls, self.root_cert.as_deref())
    }

    /// Host, port and database, without the password: what logs and errors may show.
    pub fn shown(&self) -> String {
        shown_url(&self.config)
    }
}

/// `error` and what caused it: the driver's words for a failed handshake stop at "error
/// performing TLS handshake", and the reason (a certificate for another name, an unknown
/// issuer) is in its source. None of them repeats the URL.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut said = error.to_string();
    let mut cause = error.source();
    // Bounded: nothing stops a source chain from looping back on itself.
    for _ in 0..8 {
        let Some(error) = cause else { break };
        let words = error.to_string();
        if !said.contains(&words) {
            said.push_str(": ");
            said.push_str(&words);
        }
        cause = error.source();
    }
    said
}

/// The URL without its password: what logs and errors may show.
pub fn shown_url(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("{host}:{port}/{db}")
}

impl PgStore {
    /// Connects, and migrates the schema (once, whatever the number of instances starting).
    pub async fn open(url: &str) -> Result<PgStore, StoreError> {
        PgStore::open_with(url, None).await
    }

    /// As [`PgStore::open`], with the password from `[store] password_env` or `password_file`.
    pub async fn open_with(url: &str, password: Option<&Secret>) -> Result<PgStore, StoreError> {
        let mut target = Target::parse(url).map_err(StoreError::BadUrl)?;
        if let Some(password) = password {
            target.config.password(password.expose());
        }
        let connector = target.connector().map_err(StoreError::BadUrl)?;
        let config = target.config;
        let manager = Manager::from_config(
            config.clone(),
            connector.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Pool(e.to_string()))?;
        let store = PgStore {
            pool,
            config: std::sync::Arc::new(config),
            connector,
        };
        // The first connection says at once, and by address, what stands in the way: a host
        // that does not answer, a certificate refused, a password wrong.
        drop(store.client().await?);
        migrate::run(&store).await?;
        Ok(store)
    }

    /// A pooled connection.
    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Connect {
            at: self.shown(),
            why: with_causes(&e),
        })
    }

    /// Where the store is, without its password.
    pub fn shown(&self) -> String {
        shown_url(&self.config)
    }

    /// Starts listening for changes made by any instance; see [`Listener`].
    pub fn listen(&self) -> Listener {
        Listener::start((*self.config).clone(), self.connector.clone())
    }

    pub async fn insert_virtual_key(&self, key: VirtualKey) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO virtual_keys (id, hash, prefix, user_name, role, permissions, models,
                 requests_per_minute, tokens_per_minute, max_concurrent, created_ms, revoked_ms,
                 expires_ms, budget_per_day_micros, budget_per_month_micros)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            &[
                &key.id,
                &key.hash,
                &key.prefix,
                &key.user,
                &key.role,
                &key.permissions.join(","),
                &key.models.as_ref().map(|m| m.join(",")),
                &key.limits.requests_per_minute.map(|v| v as i64),
                &key.limits.tokens_per_minute.map(|v| v as i64),
                &key.limits.max_concurrent.map(|v| v as i64),
                &key.created_ms,
                &key.revoked_ms,
                &key.expires_ms,
                &key.limits.budget_per_day_micros.map(|v| v as i64),
                &key.limits.budget_per_month_micros.map(|v| v as i64),
            ],
        )
        .await?;
        bump_generation(&tx).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn virtual_keys(&self) -> Result<Vec<VirtualKey>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, hash, prefix, user_name, role, permissions, models,
                        requests_per_minute, tokens_per_minute, max_concurrent, created_ms,
                        revoked_ms, expires_ms, budget_per_day_micros, budget_per_month_micros
                 FROM virtual_keys ORDER BY created_ms, id",
                &[],
            )
            .await?;
        rows.iter().map(read_virtual_key).collect()
    }

    pub async fn revoke_virtual_key(&self, key_or_id: &str) -> Result<bool, StoreError> {
        let (column, value) = if key_or_id.starts_with("sy-") {
            ("hash", hash_key(key_or_id))
        } else {
            ("id", key_or_id.to_owned())
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let sql = format!(
            "UPDATE virtual_keys SET revoked_ms = $1 WHERE {column} = $2 AND revoked_ms IS NULL"
        );
        let changed = tx.execute(&sql, &[&now_ms(), &value]).await?;
        if changed > 0 {
            bump_generation(&tx).await?;
        }
        tx.commit().await?;
        Ok(changed > 0)
    }

    /// Replaces a live key's role, permissions, models, limits and expiry, matched by id.
    pub async fn update_virtual_key(&self, key: VirtualKey) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let changed = tx
            .execute(
                "UPDATE virtual_keys SET role = $2, permissions = $3, models = $4,
                     requests_per_minute = $5, tokens_per_minute = $6, max_concurrent = $7,
                     expires_ms = $8, budget_per_day_micros = $9, budget_per_month_micros = $10
                 WHERE id = $1 AND revoked_ms IS NULL",
                &[
                    &key.id,
                    &key.role,
                    &key.permissions.join(","),
                    &key.models.as_ref().map(|m| m.join(",")),
                    &key.limits.requests_per_minute.map(|v| v as i64),
                    &key.limits.tokens_per_minute.map(|v| v as i64),
                    &key.limits.max_concurrent.map(|v| v as i64),
                    &key.expires_ms,
                    &key.limits.budget_per_day_micros.map(|v| v as i64),
                    &key.limits.budget_per_month_micros.map(|v| v as i64),
                ],
            )
            .await?;
        if changed > 0 {
            bump_generation(&tx).await?;
        }
        tx.commit().await?;
        Ok(changed > 0)
    }

    pub async fn meta_value(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT value FROM meta WHERE key = $1", &[&key])
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn set_meta_value(&self, key: &str, value: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &value],
            )
            .await?;
        Ok(())
    }

    pub async fn generation(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT value FROM meta WHERE key = 'generation'", &[])
            .await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }
}

fn read_virtual_key(row: &Row) -> Result<VirtualKey, StoreError> {
    let permissions: String = row.try_get(5)?;
    let models: Option<String> = row.try_get(6)?;
    let limit = |i: usize| {
        row.try_get::<_, Option<i64>>(i)
            .map(|v| v.map(|v| v as u64))
    };
    Ok(VirtualKey {
        id: row.try_get(0)?,
        hash: row.try_get(1)?,
        prefix: row.try_get(2)?,
        user: row.try_get(3)?,
        role: row.try_get(4)?,
        permissions: split_list(&permissions),
        models: models.as_deref().map(split_list),
        limits: LimitOverrides {
            requests_per_minute: limit(7)?,
            tokens_per_minute: limit(8)?,
            max_concurrent: limit(9)?,
            budget_per_day_micros: limit(13)?,
            budget_per_month_micros: limit(14)?,
        },
        created_ms: row.try_get(10)?,
        revoked_ms: row.try_get(11)?,
        expires_ms: row.try_get(12)?,
    })
}

/// Moves the generation on and announces it; the `NOTIFY` goes out when the transaction
/// commits, never for a change rolled back.
pub(super) async fn bump_generation(
    tx: &deadpool_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "WITH bumped AS (
             UPDATE meta SET value = value + 1 WHERE key = 'generation' RETURNING value
         )
         SELECT pg_notify($1, value::text) FROM bumped",
        &[&CHANNEL],
    )
    .await?;
    Ok(())
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
