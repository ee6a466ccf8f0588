//! Versioned migrations, run at start under a session advisory lock: of N instances starting
//! at once, one migrates while the others wait, then find nothing left to do.

use super::PgStore;
use crate::store::{StoreError, now_ms};

/// Held while migrating; any instance of any version takes the same one.
const MIGRATION_LOCK: i64 = 0x5357_5944_4d49_4752; // "SWYDMIGR"

/// Each entry moves the schema one version on; `schema_migrations` records which ran.
/// Times are epoch milliseconds, as in SQLite; `user` is a reserved word here, so the
/// key's user is `user_name`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
     INSERT INTO meta (key, value) VALUES ('generation', 0);
     CREATE TABLE virtual_keys (
         id TEXT PRIMARY KEY,
         hash TEXT NOT NULL UNIQUE,
         prefix TEXT NOT NULL,
         user_name TEXT NOT NULL,
         role TEXT NOT NULL,
         permissions TEXT NOT NULL,
         models TEXT,
         requests_per_minute BIGINT,
         tokens_per_minute BIGINT,
         max_concurrent BIGINT,
         created_ms BIGINT NOT NULL,
         revoked_ms BIGINT
     );
     CREATE TABLE provider_keys (
         provider TEXT NOT NULL,
         key_id TEXT NOT NULL,
         version BIGINT NOT NULL,
         nonce BYTEA NOT NULL,
         ciphertext BYTEA NOT NULL,
         weight BIGINT NOT NULL,
         created_ms BIGINT NOT NULL,
         rotated_ms BIGINT,
         expires_ms BIGINT,
         state TEXT NOT NULL,
         PRIMARY KEY (provider, key_id, version)
     );
     CREATE TABLE sealed_meta (name TEXT PRIMARY KEY, nonce BYTEA NOT NULL, ciphertext BYTEA NOT NULL);",
    // The request log; attempts are a JSON array, always read whole, never queried apart.
    "CREATE TABLE request_log (
         id TEXT PRIMARY KEY,
         time_ms BIGINT NOT NULL,
         key_id TEXT,
         user_name TEXT,
         route TEXT,
         outcome TEXT NOT NULL,
         step BIGINT,
         provider TEXT,
         model TEXT,
         attempts TEXT NOT NULL,
         status INTEGER NOT NULL,
         latency_ms DOUBLE PRECISION NOT NULL,
         ttft_ms DOUBLE PRECISION,
         overhead_ms DOUBLE PRECISION NOT NULL,
         tokens_in BIGINT,
         tokens_out BIGINT,
         cost_usd DOUBLE PRECISION,
         stream BOOLEAN NOT NULL,
         partial BOOLEAN NOT NULL,
         error TEXT
     );
     CREATE INDEX request_log_time ON request_log (time_ms);",
    // Per-minute rollups: what the scorecard reads (see `store::rollup`).
    "CREATE TABLE log_rollup (
         minute_ms BIGINT NOT NULL,
         kind BIGINT NOT NULL,
         name TEXT NOT NULL,
         model TEXT NOT NULL,
         requests BIGINT NOT NULL,
         success BIGINT NOT NULL,
         fallback BIGINT NOT NULL,
         degraded BIGINT NOT NULL,
         error BIGINT NOT NULL,
         rejected BIGINT NOT NULL,
         client_error BIGINT NOT NULL,
         rate_limited BIGINT NOT NULL,
         attempts BIGINT NOT NULL,
         tokens_in BIGINT NOT NULL,
         tokens_out BIGINT NOT NULL,
         cost_usd DOUBLE PRECISION NOT NULL,
         latency BYTEA NOT NULL,
         ttft BYTEA NOT NULL,
         PRIMARY KEY (kind, name, model, minute_ms)
     );
     CREATE INDEX log_rollup_minute ON log_rollup (minute_ms);",
    // Virtual keys may expire; NULL is never.
    "ALTER TABLE virtual_keys ADD COLUMN expires_ms BIGINT;",
    // The state of responses served on `/v1/responses`, for `previous_response_id`, keyed
    // by scope too (see `store::response_state`).
    "CREATE TABLE response_state (
         scope TEXT NOT NULL,
         id TEXT NOT NULL,
         created_ms BIGINT NOT NULL,
         input TEXT NOT NULL,
         response TEXT NOT NULL,
         PRIMARY KEY (scope, id)
     );
     CREATE TABLE response_items (
         scope TEXT NOT NULL,
         id TEXT NOT NULL,
         response_id TEXT NOT NULL,
         created_ms BIGINT NOT NULL,
         item TEXT NOT NULL,
         PRIMARY KEY (scope, id)
     );
     CREATE INDEX response_items_time ON response_items (created_ms);
     CREATE INDEX response_state_time ON response_state (created_ms);",
    // A key's own spend budgets, in micro-dollars per UTC day and per calendar month; NULL
    // leaves its role's.
    "ALTER TABLE virtual_keys ADD COLUMN budget_per_day_micros BIGINT;
     ALTER TABLE virtual_keys ADD COLUMN budget_per_month_micros BIGINT;",
    // What the response cache did for the request: hit, miss, bypass or coalesced.
    "ALTER TABLE request_log ADD COLUMN cache TEXT;",
    // The request's W3C trace id, when it was traced: `switchyard logs --trace-id`.
    "ALTER TABLE request_log ADD COLUMN trace_id TEXT;
     CREATE INDEX request_log_trace ON request_log (trace_id);",
];

/// How many versions this build knows; a database further on was migrated by a newer one.
pub const VERSIONS: usize = MIGRATIONS.len();

/// Brings the schema up to date.
pub(super) async fn run(store: &PgStore) -> Result<(), StoreError> {
    let mut client = store.client().await?;
    // A session lock, released below or, should this process die, with its connection.
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let migrated = apply(&mut client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    migrated?;
    unlocked?;
    Ok(())
}

async fn apply(client: &mut deadpool_postgres::Client) -> Result<(), StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version BIGINT PRIMARY KEY,
                 applied_ms BIGINT NOT NULL
             )",
        )
        .await?;
    let done: i64 = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .await?
        .get(0);
    if done as usize > VERSIONS {
        return Err(StoreError::Task(format!(
            "the PostgreSQL schema is at version {done}, newer than this build knows \
             ({VERSIONS}): upgrade Switchyard"
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(done.max(0) as usize) {
        let version = index as i64 + 1;
        let tx = client.transaction().await?;
        tx.batch_execute(migration).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)",
            &[&version, &now_ms()],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version, "PostgreSQL store migrated");
    }
    Ok(())
}
