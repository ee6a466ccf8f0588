//! The embedded store: one SQLite file, migrated on open.

mod held;
mod provider_keys;
mod request_log;
mod response_state;
mod rollup;

use std::sync::Arc;

use held::{BUSY_TIMEOUT, Held};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::{LimitOverrides, StoreError, VirtualKey, now_ms};

/// Each entry moves the schema one version on; `PRAGMA user_version` records how far.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
     INSERT INTO meta (key, value) VALUES ('generation', 0);
     CREATE TABLE virtual_keys (
         id TEXT PRIMARY KEY,
         hash TEXT NOT NULL UNIQUE,
         prefix TEXT NOT NULL,
         user TEXT NOT NULL,
         role TEXT NOT NULL,
         permissions TEXT NOT NULL,
         models TEXT,
         requests_per_minute INTEGER,
         tokens_per_minute INTEGER,
         max_concurrent INTEGER,
         created_ms INTEGER NOT NULL,
         revoked_ms INTEGER
     );",
    "CREATE TABLE provider_keys (
         provider TEXT NOT NULL,
         key_id TEXT NOT NULL,
         version INTEGER NOT NULL,
         nonce BLOB NOT NULL,
         ciphertext BLOB NOT NULL,
         weight INTEGER NOT NULL,
         created_ms INTEGER NOT NULL,
         rotated_ms INTEGER,
         expires_ms INTEGER,
         state TEXT NOT NULL,
         PRIMARY KEY (provider, key_id, version)
     );
     CREATE TABLE sealed_meta (name TEXT PRIMARY KEY, nonce BLOB NOT NULL, ciphertext BLOB NOT NULL);",
    // The request log. Attempts are a JSON array: always read whole, never queried apart.
    "CREATE TABLE request_log (
         id TEXT PRIMARY KEY,
         time_ms INTEGER NOT NULL,
         key_id TEXT,
         user TEXT,
         route TEXT,
         outcome TEXT NOT NULL,
         step INTEGER,
         provider TEXT,
         model TEXT,
         attempts TEXT NOT NULL,
         status INTEGER NOT NULL,
         latency_ms REAL NOT NULL,
         ttft_ms REAL,
         overhead_ms REAL NOT NULL,
         tokens_in INTEGER,
         tokens_out INTEGER,
         cost_usd REAL,
         stream INTEGER NOT NULL,
         partial INTEGER NOT NULL,
         error TEXT
     );
     CREATE INDEX request_log_time ON request_log (time_ms);",
    // Per-minute rollups of the log, one row per series (kind 0 overall, 1 route,
    // 2 provider/model) and minute: what the scorecard reads. Latencies are sketches.
    "CREATE TABLE log_rollup (
         minute_ms INTEGER NOT NULL,
         kind INTEGER NOT NULL,
         name TEXT NOT NULL,
         model TEXT NOT NULL,
         requests INTEGER NOT NULL,
         success INTEGER NOT NULL,
         fallback INTEGER NOT NULL,
         degraded INTEGER NOT NULL,
         error INTEGER NOT NULL,
         rejected INTEGER NOT NULL,
         client_error INTEGER NOT NULL,
         rate_limited INTEGER NOT NULL,
         attempts INTEGER NOT NULL,
         tokens_in INTEGER NOT NULL,
         tokens_out INTEGER NOT NULL,
         cost_usd REAL NOT NULL,
         latency BLOB NOT NULL,
         ttft BLOB NOT NULL,
         PRIMARY KEY (kind, name, model, minute_ms)
     ) WITHOUT ROWID;
     CREATE INDEX log_rollup_minute ON log_rollup (minute_ms);",
    // Virtual keys may expire; NULL is never.
    "ALTER TABLE virtual_keys ADD COLUMN expires_ms INTEGER;",
    // The state of responses served on `/v1/responses`, for `previous_response_id`.
    // Keyed by scope too: an id a provider made could repeat, but never reach another key's.
    // `IF NOT EXISTS`: a test may rewind `user_version` over a schema that already has them.
    "CREATE TABLE IF NOT EXISTS response_state (
         scope TEXT NOT NULL,
         id TEXT NOT NULL,
         created_ms INTEGER NOT NULL,
         input TEXT NOT NULL,
         response TEXT NOT NULL,
         PRIMARY KEY (scope, id)
     );
     -- Each stored response's output items by id, for the `item_reference`s of a later turn.
     CREATE TABLE IF NOT EXISTS response_items (
         scope TEXT NOT NULL,
         id TEXT NOT NULL,
         response_id TEXT NOT NULL,
         created_ms INTEGER NOT NULL,
         item TEXT NOT NULL,
         PRIMARY KEY (scope, id)
     );
     CREATE INDEX IF NOT EXISTS response_items_time ON response_items (created_ms);
     CREATE INDEX IF NOT EXISTS response_state_time ON response_state (created_ms);",
    // A key's own spend budgets, in micro-dollars per UTC day and per calendar month; NULL
    // leaves its role's.
    "ALTER TABLE virtual_keys ADD COLUMN budget_per_day_micros INTEGER;
     ALTER TABLE virtual_keys ADD COLUMN budget_per_month_micros INTEGER;",
    // What the response cache did for the request: hit, miss, bypass or coalesced.
    "ALTER TABLE request_log ADD COLUMN cache TEXT;",
    // The request's W3C trace id, when it was traced: `switchyard logs --trace-id`.
    "ALTER TABLE request_log ADD COLUMN trace_id TEXT;
     CREATE INDEX IF NOT EXISTS request_log_trace ON request_log (trace_id);",
];

/// The migration that adds the rollups; a store that had rows before it is backfilled.
const ROLLUP_MIGRATION: usize = 3;

/// SQLite behind one writing connection, and one more for long reads.
#[derive(Clone)]
pub struct SqliteStore {
    connection: Arc<Held>,
    /// The scorecard's reads; WAL lets them run beside the writer. An in-memory store has
    /// one connection, so there it is the same one.
    reader: Arc<Held>,
}

impl SqliteStore {
    /// Opens the file at `path`, creating and migrating it as needed.
    pub async fn open(path: &str) -> Result<SqliteStore, StoreError> {
        let path = path.to_owned();
        let connection = blocking(move || {
            let is_new = !std::path::Path::new(&path).exists();
            let connection = Connection::open(&path)?;
            if is_new {
                // Loud, because a store created by mistake (a wrong path) looks like every
                // key was lost: the operator must be able to see which file this is.
                let shown = std::path::absolute(&path).unwrap_or_else(|_| path.clone().into());
                tracing::warn!(path = %shown.display(), "created a new, empty store");
            }
            // WAL lets the CLI write while a gateway reads; the busy timeout rides out the
            // moments they collide instead of failing.
            connection.pragma_update(None, "journal_mode", "WAL")?;
            // In WAL mode NORMAL never corrupts the database; a power cut may lose the last
            // commits, not a process crash. FULL would fsync every request-log batch, which
            // at low load means every request: the writer's largest cost by far.
            connection.pragma_update(None, "synchronous", "NORMAL")?;
            Ok(connection)
        })
        .await?;
        let store = SqliteStore::migrated(connection).await?;
        let path = path_of(&store).await?;
        let reader = blocking(move || Held::new(Connection::open(&path)?)).await?;
        Ok(SqliteStore {
            reader: Arc::new(reader),
            ..store
        })
    }

    /// An in-memory store, for the demo and tests.
    pub async fn open_memory() -> Result<SqliteStore, StoreError> {
        let connection = blocking(|| Ok(Connection::open_in_memory()?)).await?;
        SqliteStore::migrated(connection).await
    }

    async fn migrated(connection: Connection) -> Result<SqliteStore, StoreError> {
        rollup::register(&connection)?;
        let connection = Arc::new(Held::new(connection)?);
        let store = SqliteStore {
            reader: connection.clone(),
            connection,
        };
        store
            .with(|connection| {
                let version: i64 =
                    connection.pragma_query_value(None, "user_version", |r| r.get(0))?;
                let mut backfill = false;
                for (index, migration) in
                    MIGRATIONS.iter().enumerate().skip(version.max(0) as usize)
                {
                    let tx = connection.transaction()?;
                    tx.execute_batch(migration)?;
                    tx.pragma_update(None, "user_version", index as i64 + 1)?;
                    tx.commit()?;
                    backfill |= index == ROLLUP_MIGRATION;
                }
                // Once every migration ran: the backfill reads rows as this build has them.
                if backfill {
                    request_log::backfill_rollups(connection, now_ms())?;
                }
                Ok(())
            })
            .await?;
        Ok(store)
    }

    /// Runs `work` on the blocking pool with the read connection.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.reader.run(BUSY_TIMEOUT, work).await
    }

    /// Runs `work` on the blocking pool with the connection.
    pub(super) async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.connection.run(BUSY_TIMEOUT, work).await
    }

    /// As [`SqliteStore::with`], waiting at most `busy_limit` on another process's lock.
    pub(super) async fn with_busy_limit<T: Send + 'static>(
        &self,
        busy_limit: std::time::Duration,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.connection.run(busy_limit, work).await
    }

    pub async fn insert_virtual_key(&self, key: VirtualKey) -> Result<(), StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            tx.execute(
                "INSERT INTO virtual_keys (id, hash, prefix, user, role, permissions, models,
                     requests_per_minute, tokens_per_minute, max_concurrent, created_ms, revoked_ms,
                     expires_ms, budget_per_day_micros, budget_per_month_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                params![
                    key.id,
                    key.hash,
                    key.prefix,
                    key.user,
                    key.role,
                    key.permissions.join(","),
                    key.models.as_ref().map(|m| m.join(",")),
                    key.limits.requests_per_minute.map(|v| v as i64),
                    key.limits.tokens_per_minute.map(|v| v as i64),
                    key.limits.max_concurrent.map(|v| v as i64),
                    key.created_ms,
                    key.revoked_ms,
                    key.expires_ms,
                    key.limits.budget_per_day_micros.map(|v| v as i64),
                    key.limits.budget_per_month_micros.map(|v| v as i64),
                ],
            )?;
            bump_generation(&tx)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    pub async fn virtual_keys(&self) -> Result<Vec<VirtualKey>, StoreError> {
        self.with(|connection| {
            let mut statement = connection.prepare(
                "SELECT id, hash, prefix, user, role, permissions, models, requests_per_minute,
                        tokens_per_minute, max_concurrent, created_ms, revoked_ms, expires_ms,
                        budget_per_day_micros, budget_per_month_micros
                 FROM virtual_keys ORDER BY created_ms, id",
            )?;
            let rows = statement.query_map([], |row| {
                let permissions: String = row.get(5)?;
                let models: Option<String> = row.get(6)?;
                let limit = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(|v| v as u64));
                Ok(VirtualKey {
                    id: row.get(0)?,
                    hash: row.get(1)?,
                    prefix: row.get(2)?,
                    user: row.get(3)?,
                    role: row.get(4)?,
                    permissions: split_list(&permissions),
                    models: models.as_deref().map(split_list),
                    limits: LimitOverrides {
                        requests_per_minute: limit(7)?,
                        tokens_per_minute: limit(8)?,
                        max_concurrent: limit(9)?,
                        budget_per_day_micros: limit(13)?,
                        budget_per_month_micros: limit(14)?,
                    },
                    created_ms: row.get(10)?,
                    revoked_ms: row.get(11)?,
                    expires_ms: row.get(12)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    pub async fn revoke_virtual_key(&self, key_or_id: &str) -> Result<bool, StoreError> {
        let (column, value) = if key_or_id.starts_with("sy-") {
            ("hash", hash_key(key_or_id))
        } else {
            ("id", key_or_id.to_owned())
        };
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let sql = format!(
                "UPDATE virtual_keys SET revoked_ms = ?1 WHERE {column} = ?2 AND revoked_ms IS NULL"
            );
            let changed = tx.execute(&sql, params![now_ms(), value])?;
            if changed > 0 {
                bump_generation(&tx)?;
            }
            tx.commit()?;
            Ok(changed > 0)
        })
        .await
    }

    pub async fn update_virtual_key(&self, key: VirtualKey) -> Result<bool, StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let changed = tx.execute(
                "UPDATE virtual_keys SET role = ?2, permissions = ?3, models = ?4,
                     requests_per_minute = ?5, tokens_per_minute = ?6, max_concurrent = ?7,
                     expires_ms = ?8, budget_per_day_micros = ?9, budget_per_month_micros = ?10
                 WHERE id = ?1 AND revoked_ms IS NULL",
                params![
                    key.id,
                    key.role,
                    key.permissions.join(","),
                    key.models.as_ref().map(|m| m.join(",")),
                    key.limits.requests_per_minute.map(|v| v as i64),
                    key.limits.tokens_per_minute.map(|v| v as i64),
                    key.limits.max_concurrent.map(|v| v as i64),
                    key.expires_ms,
                    key.limits.budget_per_day_micros.map(|v| v as i64),
                    key.limits.budget_per_month_micros.map(|v| v as i64),
                ],
            )?;
            if changed > 0 {
                bump_generation(&tx)?;
            }
            tx.commit()?;
            Ok(changed > 0)
        })
        .await
    }

    pub async fn meta_value(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let key = key.to_owned();
        self.with(move |connection| {
            Ok(connection
                .query_row("SELECT value FROM meta WHERE key = ?1", [&key], |r| {
                    r.get(0)
                })
                .optional()?)
        })
        .await
    }

    pub async fn set_meta_value(&self, key: &str, value: i64) -> Result<(), StoreError> {
        let key = key.to_owned();
        self.with(move |connection| {
            connection.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                rusqlite::params![key, value],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn generation(&self) -> Result<i64, StoreError> {
        self.with(|connection| {
            let value = connection
                .query_row("SELECT value FROM meta WHERE key = 'generation'", [], |r| {
                    r.get(0)
                })
                .optional()?;
            Ok(value.unwrap_or(0))
        })
        .await
    }
}

/// The file the writing connection has open.
async fn path_of(store: &SqliteStore) -> Result<String, StoreError> {
    store
        .with(|connection| {
            connection
                .path()
                .map(str::to_owned)
                .ok_or_else(|| StoreError::Task("the store has no file".into()))
        })
        .await
}

/// Hex SHA-256 of a whole virtual key: what the store keeps instead of the key.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(super) fn bump_generation(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'generation'",
        [],
    )?;
    Ok(())
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, secret: &str) -> VirtualKey {
        VirtualKey {
            id: id.into(),
            hash: hash_key(secret),
            prefix: secret[..9].into(),
            user: "ana".into(),
            role: "ae".into(),
            permissions: vec!["debug".into()],
            models: Some(vec!["smart".into(), "groq/llama".into()]),
            limits: LimitOverrides {
                requests_per_minute: Some(5),
                ..LimitOverrides::default()
            },
            created_ms: 1,
            revoked_ms: None,
            expires_ms: None,
        }
    }

    #[tokio::test]
    async fn keys_round_trip_and_revocation_bumps_the_generation() {
        let store = SqliteStore::open_memory().await.unwrap();
        let secret = "sy-abcdefghijklmnop";
        store.insert_virtual_key(key("k1", secret)).await.unwrap();
        let keys = store.virtual_keys().await.unwrap();
        assert_eq!(keys, vec![key("k1", secret)]);
        let before = store.generation().await.unwrap();
        assert!(store.revoke_virtual_key(secret).await.unwrap());
        assert!(
            !store.revoke_virtual_key(secret).await.unwrap(),
            "already revoked"
        );
        assert!(store.generation().await.unwrap() > before);
        assert!(store.virtual_keys().await.unwrap()[0].revoked_ms.is_some());
    }

    #[tokio::test]
    async fn keys_stored_before_expiry_existed_never_expire() {
        let connection = Connection::open_in_memory().unwrap();
        // The schema as released before the expiry migration, with a key in it.
        for migration in &MIGRATIONS[..4] {
            connection.execute_batch(migration).unwrap();
        }
        connection.pragma_update(None, "user_version", 4).unwrap();
        connection
            .execute(
                "INSERT INTO virtual_keys (id, hash, prefix, user, role, permissions, created_ms)
                 VALUES ('old', 'h', 'sy-old', 'ana', 'ae', '', 1)",
                [],
            )
            .unwrap();
        let store = SqliteStore::migrated(connection).await.unwrap();
        let keys = store.virtual_keys().await.unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].expires_ms, None);
        assert_eq!(keys[0].limits, LimitOverrides::default(), "nor set budgets");
    }

    #[tokio::test]
    async fn reopening_a_file_keeps_its_data() {
        let path =
            std::env::temp_dir().join(format!("switchyard-store-{}.db", uuid::Uuid::now_v7()));
        let path = path.to_string_lossy().into_owned();
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .insert_virtual_key(key("k1", "sy-0123456789abcdef"))
            .await
            .unwrap();
        drop(store);
        let again = SqliteStore::open(&path).await.unwrap();
        assert_eq!(again.virtual_keys().await.unwrap().len(), 1);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }

    /// A write whose caller stopped waiting (its `[store] timeout`) while another process
    /// held the database's write lock: the call gives its connection up at once, instead of
    /// holding it for the whole lock wait (5 s) while every later call queues behind it, and
    /// its write never happens.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_given_up_on_lets_go_of_its_connection_and_never_lands() {
        let path =
            std::env::temp_dir().join(format!("switchyard-store-{}.db", uuid::Uuid::now_v7()));
        let path = path.to_string_lossy().into_owned();
        let store = SqliteStore::open(&path).await.unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let given_up = crate::store::within(
            std::time::Duration::from_millis(50),
            store.insert_virtual_key(key("k1", "sy-0123456789abcdef")),
        )
        .await;
        assert!(
            matches!(given_up, Err(StoreError::Timeout(_))),
            "{given_up:?}"
        );
        // A read on the same connection: WAL lets it past the other's lock, and only the
        // abandoned write could hold it up. Far under the 5 s that write would wait.
        let read = crate::store::within(std::time::Duration::from_secs(2), store.generation());
        assert_eq!(read.await.unwrap(), 0, "the connection is free");
        other.execute_batch("ROLLBACK").unwrap();
        assert!(store.virtual_keys().await.unwrap().is_empty());
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
}
