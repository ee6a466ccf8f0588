//! The request log's per-minute rollups in SQLite: merged in by the writer's transaction,
//! read by the scorecard through the read connection.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::SqliteStore;
use super::request_log::{COLUMNS, read_row};
use crate::store::StoreError;
use crate::store::rollup::{Counts, MINUTE_MS, Rollup, RollupData, Rollups, Series, Sketch};

/// How far back a new rollup table is filled from existing rows: the scorecard's longest
/// window, and a minute more.
const BACKFILL_MS: i64 = 24 * 3_600_000 + MINUTE_MS;

const ROLLUP_COLUMNS: &str = "minute_ms, kind, name, model, requests, success, fallback, degraded,
     error, rejected, attempts, tokens_in, tokens_out, cost_usd, latency, ttft";

/// The stored key of a series: its kind, then its names (empty when it has none).
fn key(series: &Series) -> (i64, &str, &str) {
    match series {
        Series::Overall => (0, "", ""),
        Series::Route(route) => (1, route, ""),
        Series::Deployment { provider, model } => (2, provider, model),
    }
}

fn series(kind: i64, name: String, model: String) -> Series {
    match kind {
        0 => Series::Overall,
        1 => Series::Route(name),
        _ => Series::Deployment {
            provider: name,
            model,
        },
    }
}

/// Merges `rollups` into the table, inside the caller's transaction.
pub(super) fn merge(tx: &Transaction<'_>, rollups: Rollups) -> rusqlite::Result<()> {
    let mut select = tx.prepare_cached(&format!(
        "SELECT {ROLLUP_COLUMNS} FROM log_rollup
         WHERE kind = ?1 AND name = ?2 AND model = ?3 AND minute_ms = ?4"
    ))?;
    let mut upsert = tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO log_rollup ({ROLLUP_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
    ))?;
    for mut rollup in rollups.into_rollups() {
        let (kind, name, model) = key(&rollup.series);
        let stored = select
            .query_row(params![kind, name, model, rollup.minute_ms], read_rollup)
            .optional()?;
        if let Some(stored) = stored {
            rollup.data.merge(&stored.data);
        }
        let c = &rollup.data.counts;
        let count = |n: u64| n as i64;
        upsert.execute(params![
            rollup.minute_ms,
            kind,
            name,
            model,
            count(c.requests),
            count(c.success),
            count(c.fallback),
            count(c.degraded),
            count(c.error),
            count(c.rejected),
            count(c.attempts),
            count(c.tokens_in),
            count(c.tokens_out),
            c.cost_usd,
            rollup.data.latency.encode(),
            rollup.data.ttft.encode(),
        ])?;
    }
    Ok(())
}

fn read_rollup(row: &rusqlite::Row<'_>) -> rusqlite::Result<Rollup> {
    let count = |i: usize| row.get::<_, i64>(i).map(|v| v.max(0) as u64);
    let latency: Vec<u8> = row.get(14)?;
    let ttft: Vec<u8> = row.get(15)?;
    Ok(Rollup {
        minute_ms: row.get(0)?,
        series: series(row.get(1)?, row.get(2)?, row.get(3)?),
        data: RollupData {
            counts: Counts {
                requests: count(4)?,
                success: count(5)?,
                fallback: count(6)?,
                degraded: count(7)?,
                error: count(8)?,
                rejected: count(9)?,
                attempts: count(10)?,
                tokens_in: count(11)?,
                tokens_out: count(12)?,
                cost_usd: row.get(13)?,
            },
            latency: Sketch::decode(&latency),
            ttft: Sketch::decode(&ttft),
        },
    })
}

/// Fills a new rollup table from the last day of rows already in the log.
pub(super) fn backfill(connection: &mut Connection, now_ms: i64) -> rusqlite::Result<()> {
    let tx = connection.transaction()?;
    let mut rollups = Rollups::default();
    {
        let mut statement = tx.prepare(&format!(
            "SELECT {COLUMNS} FROM request_log WHERE time_ms >= ?1"
        ))?;
        let mut rows = statement.query(params![now_ms - BACKFILL_MS])?;
        while let Some(row) = rows.next()? {
            rollups.add(&read_row(row)?);
        }
    }
    merge(&tx, rollups)?;
    tx.commit()
}

impl SqliteStore {
    /// Feeds every rollup of a minute that starts after `after_ms` to `fold`, on the read
    /// connection, so a long read never holds up the writer.
    pub async fn fold_rollups<A: Send + 'static>(
        &self,
        after_ms: i64,
        mut state: A,
        fold: impl Fn(&mut A, Rollup) + Send + 'static,
    ) -> Result<A, StoreError> {
        self.read(move |connection| {
            let mut statement = connection.prepare_cached(&format!(
                "SELECT {ROLLUP_COLUMNS} FROM log_rollup WHERE minute_ms > ?1"
            ))?;
            let mut rows = statement.query(params![after_ms])?;
            while let Some(row) = rows.next()? {
                fold(&mut state, read_rollup(row)?);
            }
            Ok(state)
        })
        .await
    }
}
