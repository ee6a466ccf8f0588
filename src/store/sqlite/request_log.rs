//! The request log in SQLite: batches inserted in one transaction, read back with filters.

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, Row, params, params_from_iter};

use super::{SqliteStore, rollup};
use crate::store::StoreError;
use crate::store::request_log::{LogQuery, LogRow, Pace};
use crate::store::rollup::{MINUTE_MS, Rollups};

/// How long a log write waits for a lock another process holds before it fails; the writer
/// then spills the batch to its journal instead of stalling behind the lock.
const LOG_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// How far back a new rollup table is filled from existing rows: the scorecard's longest
/// window, and a minute more.
const BACKFILL_MS: i64 = 24 * 3_600_000 + MINUTE_MS;

pub(super) const COLUMNS: &str =
    "id, time_ms, key_id, user, route, outcome, step, provider, model, attempts,
     status, latency_ms, ttft_ms, overhead_ms, tokens_in, tokens_out, cost_usd, stream, partial,
     error, cache, trace_id";

impl SqliteStore {
    /// Inserts a batch of rows, and folds them into the rollups, in one transaction: all of
    /// them or, on error, none, sharing the core at `pace` meanwhile. A row whose id is
    /// already stored is skipped, so a batch can be replayed; returns how many rows were new.
    pub async fn insert_log(
        &self,
        rows: impl Into<std::sync::Arc<[LogRow]>>,
        pace: Pace,
    ) -> Result<usize, StoreError> {
        let rows = rows.into();
        self.with_busy_limit(LOG_BUSY_TIMEOUT, move |connection| {
            Ok(insert_rows(connection, &rows, pace)?)
        })
        .await
    }

    /// Rows matching `query`, oldest first.
    pub async fn query_log(&self, query: LogQuery) -> Result<Vec<LogRow>, StoreError> {
        self.read(move |connection| {
            let mut conditions = Vec::new();
            let mut values: Vec<SqlValue> = Vec::new();
            if let Some(since) = query.since_ms {
                values.push(since.into());
                conditions.push(format!("time_ms >= ?{}", values.len()));
            }
            if let Some(until) = query.until_ms {
                values.push(until.into());
                conditions.push(format!("time_ms < ?{}", values.len()));
            }
            if let Some(user) = query.user {
                values.push(user.into());
                conditions.push(format!("user = ?{}", values.len()));
            }
            if let Some(outcome) = query.outcome {
                values.push(outcome.into());
                conditions.push(format!("outcome = ?{}", values.len()));
            }
            if let Some(route) = query.route {
                values.push(route.into());
                conditions.push(format!("route = ?{}", values.len()));
            }
            if let Some(trace_id) = query.trace_id {
                values.push(trace_id.into());
                conditions.push(format!("trace_id = ?{}", values.len()));
            }
            if let Some(key_id) = query.key_id {
                values.push(key_id.into());
                conditions.push(format!("key_id = ?{}", values.len()));
            }
            if let Some(id) = query.id {
                values.push(id.into());
                conditions.push(format!("id = ?{}", values.len()));
            }
            if let Some((low, high)) = query.status {
                values.push(i64::from(low).into());
                values.push(i64::from(high).into());
                let n = values.len();
                conditions.push(format!("status BETWEEN ?{} AND ?{n}", n - 1));
            }
            let filter = if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            };
            // The newest `limit` rows, turned back to oldest first for reading.
            let limit = query.limit.map(|l| l as i64).unwrap_or(-1);
            let sql = format!(
                "SELECT * FROM (SELECT {COLUMNS} FROM request_log {filter}
                     ORDER BY time_ms DESC, id DESC LIMIT {limit})
                 ORDER BY time_ms, id"
            );
            let mut statement = connection.prepare(&sql)?;
            let rows = statement.query_map(params_from_iter(values), read_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// How many rows the log holds.
    pub async fn count_log(&self) -> Result<u64, StoreError> {
        self.with(|connection| {
            let count: i64 =
                connection.query_row("SELECT COUNT(*) FROM request_log", [], |r| r.get(0))?;
            Ok(count as u64)
        })
        .await
    }

    /// Deletes rows older than `before_ms`; returns how many went.
    pub async fn purge_log(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let purged = tx.execute(
                "DELETE FROM request_log WHERE time_ms < ?1",
                params![before_ms],
            )?;
            // A minute's rollup goes once the whole minute is past retention.
            tx.execute(
                "DELETE FROM log_rollup WHERE minute_ms < ?1",
                params![before_ms - MINUTE_MS],
            )?;
            tx.commit()?;
            Ok(purged)
        })
        .await
    }
}

/// The rows the store does not hold yet, inserted and folded into the rollups.
fn insert_rows(
    connection: &mut Connection,
    rows: &[LogRow],
    pace: Pace,
) -> rusqlite::Result<usize> {
    let tx = connection.transaction()?;
    let mut rollups = Rollups::default();
    let mut inserted = 0;
    {
        let mut insert = tx.prepare_cached(&format!(
            "INSERT OR IGNORE INTO request_log ({COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                     ?16, ?17, ?18, ?19, ?20, ?21, ?22)"
        ))?;
        for (index, row) in rows.iter().enumerate() {
            pace.offer_core_at(index);
            // Serialising plain strings and numbers cannot fail.
            let attempts = serde_json::to_string(&row.attempts).unwrap_or_default();
            let changed = insert.execute(params![
                row.id,
                row.time_ms,
                row.key_id,
                row.user,
                row.route,
                row.outcome,
                row.step.map(|s| s as i64),
                row.provider,
                row.model,
                attempts,
                row.status,
                row.latency_ms,
                row.ttft_ms,
                row.overhead_ms,
                row.tokens_in.map(|t| t as i64),
                row.tokens_out.map(|t| t as i64),
                row.cost_usd,
                row.stream,
                row.partial,
                row.error,
                row.cache,
                row.trace_id,
            ])?;
            // Only a row stored now counts: a replayed one is in the rollups already.
            if changed == 1 {
                rollups.add(row);
                inserted += 1;
            }
        }
    }
    if !rollups.is_empty() {
        rollup::merge(&tx, rollups)?;
    }
    tx.commit()?;
    Ok(inserted)
}

pub(super) fn read_row(row: &Row<'_>) -> rusqlite::Result<LogRow> {
    let attempts: String = row.get(9)?;
    let count = |i: usize| row.get::<_, Option<i64>>(i).map(|v| v.map(|v| v as u64));
    Ok(LogRow {
        id: row.get(0)?,
        time_ms: row.get(1)?,
        key_id: row.get(2)?,
        user: row.get(3)?,
        route: row.get(4)?,
        outcome: row.get(5)?,
        step: row.get::<_, Option<i64>>(6)?.map(|s| s as usize),
        provider: row.get(7)?,
        model: row.get(8)?,
        // A row this code wrote always parses; an unreadable one shows no attempts.
        attempts: serde_json::from_str(&attempts).unwrap_or_default(),
        status: row.get(10)?,
        latency_ms: row.get(11)?,
        ttft_ms: row.get(12)?,
        overhead_ms: row.get(13)?,
        tokens_in: count(14)?,
        tokens_out: count(15)?,
        cost_usd: row.get(16)?,
        stream: row.get(17)?,
        partial: row.get(18)?,
        error: row.get(19)?,
        cache: row.get(20)?,
        trace_id: row.get(21)?,
    })
}

/// Fills a new rollup table from the last day of rows already in the log.
pub(super) fn backfill_rollups(connection: &mut Connection, now_ms: i64) -> rusqlite::Result<()> {
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
    rollup::merge(&tx, rollups)?;
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, time_ms: i64, outcome: &str) -> LogRow {
        LogRow {
            id: id.into(),
            time_ms,
            key_id: None,
            user: Some("ana".into()),
            route: Some("r".into()),
            outcome: outcome.into(),
            step: Some(0),
            provider: Some("p".into()),
            model: Some("m".into()),
            attempts: vec![crate::store::request_log::LogAttempt {
                step: 0,
                provider: "p".into(),
                model: "m".into(),
                failure: None,
                status: Some(200),
                latency_ms: 1.5,
                reached_upstream: true,
                hedge: false,
            }],
            status: 200,
            latency_ms: 2.0,
            ttft_ms: Some(1.0),
            overhead_ms: 0.5,
            tokens_in: Some(3),
            tokens_out: Some(4),
            cost_usd: Some(0.25),
            stream: false,
            partial: false,
            error: None,
            cache: None,
            trace_id: None,
        }
    }

    #[tokio::test]
    async fn inserting_the_same_rows_twice_stores_each_once() {
        // A replayed spill journal sends rows the store may already hold.
        let store = SqliteStore::open_memory().await.unwrap();
        let rows = vec![row("a", 1_000, "success"), row("b", 2_000, "fallback")];
        assert_eq!(
            store.insert_log(rows.clone(), Pace::FlatOut).await.unwrap(),
            2
        );
        let again = vec![rows[1].clone(), row("c", 3_000, "success")];
        assert_eq!(
            store.insert_log(again, Pace::FlatOut).await.unwrap(),
            1,
            "only c is new"
        );
        assert_eq!(store.count_log().await.unwrap(), 3);
    }
}
