//! The request log's per-minute rollups in SQLite: merged in by the writer's transaction,
//! read by the scorecard through the read connection.

use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, Transaction, params};

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::rollup::{Counts, Rollup, RollupData, Rollups, Series, Sketch};

const ROLLUP_COLUMNS: &str = "minute_ms, kind, name, model, requests, success, fallback, degraded,
     error, rejected, client_error, rate_limited, attempts, tokens_in, tokens_out, cost_usd,
     latency, ttft";

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

/// The SQL function that adds two stored sketches, so a rollup merges inside its upsert.
const SKETCH_MERGE: &str = "sketch_merge";

/// Teaches `connection` [`SKETCH_MERGE`]; every connection that merges rollups needs it.
pub(super) fn register(connection: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    connection.create_scalar_function(SKETCH_MERGE, 2, flags, |context| {
        let blob = |i| context.get_raw(i).as_blob().unwrap_or_default();
        let mut stored = Sketch::decode(blob(0));
        stored.merge(&Sketch::decode(blob(1)));
        Ok(stored.encode())
    })
}

/// Merges `rollups` into the table, inside the caller's transaction: one upsert a series,
/// which adds the counts and sketches to the stored row's in SQLite. (Reading the row back
/// and writing it whole cost the writer a third of its time per batch.)
pub(super) fn merge(tx: &Transaction<'_>, rollups: Rollups) -> rusqlite::Result<()> {
    let mut upsert = tx.prepare_cached(&format!(
        "INSERT INTO log_rollup ({ROLLUP_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT (kind, name, model, minute_ms) DO UPDATE SET
             requests = requests + excluded.requests,
             success = success + excluded.success,
             fallback = fallback + excluded.fallback,
             degraded = degraded + excluded.degraded,
             error = error + excluded.error,
             rejected = rejected + excluded.rejected,
             client_error = client_error + excluded.client_error,
             rate_limited = rate_limited + excluded.rate_limited,
             attempts = attempts + excluded.attempts,
             tokens_in = tokens_in + excluded.tokens_in,
             tokens_out = tokens_out + excluded.tokens_out,
             cost_usd = cost_usd + excluded.cost_usd,
             latency = {SKETCH_MERGE}(latency, excluded.latency),
             ttft = {SKETCH_MERGE}(ttft, excluded.ttft)"
    ))?;
    for rollup in rollups.into_rollups() {
        let (kind, name, model) = key(&rollup.series);
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
            count(c.client_error),
            count(c.rate_limited),
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
    let latency: Vec<u8> = row.get(16)?;
    let ttft: Vec<u8> = row.get(17)?;
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
                client_error: count(10)?,
                rate_limited: count(11)?,
                attempts: count(12)?,
                tokens_in: count(13)?,
                tokens_out: count(14)?,
                cost_usd: row.get(15)?,
            },
            latency: Sketch::decode(&latency),
            ttft: Sketch::decode(&ttft),
        },
    })
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::Duration;

    use crate::store::now_ms;
    use crate::store::request_log::{LogAttempt, LogRow, Pace};
    use crate::store::rollup::{MINUTE_MS, Rollup, Rollups, Series};
    use crate::store::sqlite::SqliteStore;

    fn row(i: usize, time_ms: i64) -> LogRow {
        let provider = ["p0", "p1", "p2"][i % 3];
        LogRow {
            id: format!("row-{i}"),
            time_ms,
            key_id: None,
            user: None,
            route: Some(["r0", "r1"][i % 2].into()),
            outcome: "success".into(),
            step: Some(0),
            provider: Some(provider.into()),
            model: Some("m".into()),
            attempts: vec![LogAttempt {
                step: 0,
                provider: provider.into(),
                model: "m".into(),
                failure: None,
                status: Some(200),
                latency_ms: (i % 1000) as f64,
                reached_upstream: true,
                hedge: false,
            }],
            status: 200,
            latency_ms: (i % 1000) as f64,
            ttft_ms: None,
            overhead_ms: 0.1,
            tokens_in: Some(1),
            tokens_out: Some(1),
            cost_usd: None,
            stream: false,
            partial: false,
            error: None,
            cache: None,
            trace_id: None,
        }
    }

    fn temp_db() -> String {
        let path =
            std::env::temp_dir().join(format!("switchyard-rollup-{}.db", uuid::Uuid::now_v7()));
        path.to_string_lossy().into_owned()
    }

    fn remove(path: &str) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }

    #[tokio::test]
    async fn a_day_of_300k_rows_is_read_as_at_most_1440_rollups_a_series() {
        let store = SqliteStore::open_memory().await.unwrap();
        let now = now_ms();
        let count = 300_000;
        let day = 86_400_000;
        for chunk in (0..count).collect::<Vec<_>>().chunks(20_000) {
            let rows: Vec<LogRow> = chunk
                .iter()
                .map(|&i| row(i, now - (i as i64 * day) / count as i64))
                .collect();
            store.insert_log(rows, Pace::FlatOut).await.unwrap();
        }
        let after = now - day;
        let (per_series, requests) = store
            .fold_rollups(
                after,
                (HashMap::<Series, usize>::new(), 0u64),
                |(per_series, requests), rollup: Rollup| {
                    *per_series.entry(rollup.series.clone()).or_default() += 1;
                    if rollup.series == Series::Overall {
                        *requests += rollup.data.counts.requests;
                    }
                },
            )
            .await
            .unwrap();
        // Overall, two routes and three deployments, each at most one rollup a minute.
        assert_eq!(per_series.len(), 6, "{per_series:?}");
        for (series, rows) in &per_series {
            assert!(*rows <= 1440, "{series:?}: {rows} rollups read");
        }
        // Everything but the oldest minute, which starts before the window.
        assert!(requests > count as u64 - 300, "{requests}");
        let all = store
            .fold_rollups(0, 0u64, |n, rollup: Rollup| {
                if rollup.series == Series::Overall {
                    *n += rollup.data.counts.requests;
                }
            })
            .await
            .unwrap();
        assert_eq!(all, count as u64, "every row is in the rollups once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_scorecard_read_does_not_hold_up_the_writer() {
        let path = temp_db();
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .insert_log(vec![row(0, now_ms())], Pace::FlatOut)
            .await
            .unwrap();
        let (entered, inside) = mpsc::channel::<()>();
        let (release, released) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new((entered, released)));
        let reader = store.clone();
        // A read that stays in the middle of its rows until the test lets it go.
        let read = tokio::spawn(async move {
            reader
                .fold_rollups(0, (), move |_, _| {
                    let gate = gate.lock().unwrap();
                    let _ = gate.0.send(());
                    let _ = gate.1.recv();
                })
                .await
                .unwrap()
        });
        tokio::task::spawn_blocking(move || inside.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap()
            .expect("the read is under way");
        let write = store.insert_log(vec![row(1, now_ms())], Pace::FlatOut);
        let written = tokio::time::timeout(Duration::from_secs(10), write).await;
        // Dropped, not just sent to: the read's later rollups go through without waiting.
        release.send(()).unwrap();
        drop(release);
        read.await.unwrap();
        assert_eq!(written.expect("the write is not held up").unwrap(), 1);
        remove(&path);
    }

    #[tokio::test]
    async fn batches_in_one_minute_add_up_in_one_rollup_row() {
        let store = SqliteStore::open_memory().await.unwrap();
        let minute = now_ms().div_euclid(MINUTE_MS) * MINUTE_MS;
        let rows: Vec<LogRow> = (0..40).map(|i| row(i * 6, minute + i as i64)).collect();
        let mut expected = Rollups::default();
        for batch in rows.chunks(7) {
            store
                .insert_log(batch.to_vec(), Pace::FlatOut)
                .await
                .unwrap();
            batch.iter().for_each(|r| expected.add(r));
        }
        let mut expected: Vec<Rollup> = expected.into_rollups().collect();
        let mut stored = store
            .fold_rollups(0, Vec::new(), |all, rollup: Rollup| all.push(rollup))
            .await
            .unwrap();
        let order = |r: &Rollup| (r.minute_ms, r.series.clone());
        expected.sort_by_key(order);
        stored.sort_by_key(order);
        assert_eq!(stored, expected, "six batches merged as one");
        assert_eq!(stored[0].data.counts.requests, 40);
    }

    #[tokio::test]
    async fn a_replayed_row_is_not_counted_twice_in_the_rollups() {
        let store = SqliteStore::open_memory().await.unwrap();
        let rows = vec![row(0, now_ms()), row(1, now_ms())];
        store.insert_log(rows.clone(), Pace::FlatOut).await.unwrap();
        store.insert_log(rows, Pace::FlatOut).await.unwrap();
        let requests = store
            .fold_rollups(0, 0u64, |n, rollup: Rollup| {
                if rollup.series == Series::Overall {
                    *n += rollup.data.counts.requests;
                }
            })
            .await
            .unwrap();
        assert_eq!(requests, 2);
    }

    #[tokio::test]
    async fn a_store_from_before_the_rollups_is_backfilled() {
        let path = temp_db();
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .insert_log(vec![row(0, now_ms())], Pace::FlatOut)
            .await
            .unwrap();
        drop(store);
        // As an older version left it: no rollup table (nor later migrations), rows in the log.
        // The backfill reads the log as this build does, so it runs after every migration.
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .execute_batch(
                "DROP TABLE log_rollup; ALTER TABLE virtual_keys DROP COLUMN expires_ms;
                 ALTER TABLE virtual_keys DROP COLUMN budget_per_day_micros;
                 ALTER TABLE virtual_keys DROP COLUMN budget_per_month_micros;
                 ALTER TABLE request_log DROP COLUMN cache;
                 DROP INDEX request_log_trace; ALTER TABLE request_log DROP COLUMN trace_id;
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        drop(connection);
        let store = SqliteStore::open(&path).await.unwrap();
        let requests = store
            .fold_rollups(0, 0u64, |n, rollup: Rollup| {
                if rollup.series == Series::Overall {
                    *n += rollup.data.counts.requests;
                }
            })
            .await
            .unwrap();
        assert_eq!(requests, 1);
        remove(&path);
    }
}
