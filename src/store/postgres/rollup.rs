//! The request log's per-minute rollups in PostgreSQL. Sketches merge in Rust, so the merge
//! reads the stored rollups, adds the batch's and writes them back, under a transaction
//! advisory lock: instances writing the same minute take turns instead of losing counts.

use std::collections::HashMap;

use tokio_postgres::Row;

use super::PgStore;
use crate::store::StoreError;
use crate::store::rollup::{Counts, Rollup, RollupData, Rollups, Series, Sketch};

/// Held by a transaction while it merges rollups.
const ROLLUP_LOCK: i64 = 0x5357_5944_524f_4c4c; // "SWYDROLL"

const ROLLUP_COLUMNS: &str = "minute_ms, kind, name, model, requests, success, fallback,
     degraded, error, rejected, client_error, rate_limited, attempts, tokens_in, tokens_out,
     cost_usd, latency, ttft";

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

/// Merges `rollups` into the table, inside the caller's transaction: one read and one
/// write, whatever the number of series.
pub(super) async fn merge(
    tx: &deadpool_postgres::Transaction<'_>,
    rollups: Rollups,
) -> Result<(), StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ROLLUP_LOCK])
        .await?;
    let mut rollups: Vec<Rollup> = rollups.into_rollups().collect();
    let (mut kinds, mut names, mut models, mut minutes) = (vec![], vec![], vec![], vec![]);
    for rollup in &rollups {
        let (kind, name, model) = key(&rollup.series);
        kinds.push(kind);
        names.push(name.to_owned());
        models.push(model.to_owned());
        minutes.push(rollup.minute_ms);
    }
    let stored = tx
        .query(
            &format!(
                "SELECT {ROLLUP_COLUMNS} FROM log_rollup
                 WHERE (kind, name, model, minute_ms) IN (
                     SELECT * FROM UNNEST($1::int8[], $2::text[], $3::text[], $4::int8[]))"
            ),
            &[&kinds, &names, &models, &minutes],
        )
        .await?;
    let mut stored: HashMap<(Series, i64), RollupData> = stored
        .iter()
        .map(read_rollup)
        .map(|r| r.map(|r| ((r.series, r.minute_ms), r.data)))
        .collect::<Result<_, StoreError>>()?;
    for rollup in &mut rollups {
        if let Some(data) = stored.remove(&(rollup.series.clone(), rollup.minute_ms)) {
            rollup.data.merge(&data);
        }
    }
    let column = |f: &dyn Fn(&Counts) -> u64| -> Vec<i64> {
        rollups.iter().map(|r| f(&r.data.counts) as i64).collect()
    };
    let requests = column(&|c| c.requests);
    let success = column(&|c| c.success);
    let fallback = column(&|c| c.fallback);
    let degraded = column(&|c| c.degraded);
    let error = column(&|c| c.error);
    let rejected = column(&|c| c.rejected);
    let client_error = column(&|c| c.client_error);
    let rate_limited = column(&|c| c.rate_limited);
    let attempts = column(&|c| c.attempts);
    let tokens_in = column(&|c| c.tokens_in);
    let tokens_out = column(&|c| c.tokens_out);
    let cost: Vec<f64> = rollups.iter().map(|r| r.data.counts.cost_usd).collect();
    let latency: Vec<Vec<u8>> = rollups.iter().map(|r| r.data.latency.encode()).collect();
    let ttft: Vec<Vec<u8>> = rollups.iter().map(|r| r.data.ttft.encode()).collect();
    tx.execute(
        &format!(
            "INSERT INTO log_rollup ({ROLLUP_COLUMNS})
             SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::text[], $4::text[], $5::int8[],
                 $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[],
                 $12::int8[], $13::int8[], $14::int8[], $15::int8[], $16::float8[],
                 $17::bytea[], $18::bytea[])
             ON CONFLICT (kind, name, model, minute_ms) DO UPDATE SET
                 requests = EXCLUDED.requests, success = EXCLUDED.success,
                 fallback = EXCLUDED.fallback, degraded = EXCLUDED.degraded,
                 error = EXCLUDED.error, rejected = EXCLUDED.rejected,
                 client_error = EXCLUDED.client_error, rate_limited = EXCLUDED.rate_limited,
                 attempts = EXCLUDED.attempts, tokens_in = EXCLUDED.tokens_in,
                 tokens_out = EXCLUDED.tokens_out, cost_usd = EXCLUDED.cost_usd,
                 latency = EXCLUDED.latency, ttft = EXCLUDED.ttft"
        ),
        &[
            &minutes,
            &kinds,
            &names,
            &models,
            &requests,
            &success,
            &fallback,
            &degraded,
            &error,
            &rejected,
            &client_error,
            &rate_limited,
            &attempts,
            &tokens_in,
            &tokens_out,
            &cost,
            &latency,
            &ttft,
        ],
    )
    .await?;
    Ok(())
}

fn read_rollup(row: &Row) -> Result<Rollup, StoreError> {
    let count = |i: usize| row.try_get::<_, i64>(i).map(|v| v.max(0) as u64);
    let latency: &[u8] = row.try_get(16)?;
    let ttft: &[u8] = row.try_get(17)?;
    Ok(Rollup {
        minute_ms: row.try_get(0)?,
        series: series(row.try_get(1)?, row.try_get(2)?, row.try_get(3)?),
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
                cost_usd: row.try_get(15)?,
            },
            latency: Sketch::decode(latency),
            ttft: Sketch::decode(ttft),
        },
    })
}

impl PgStore {
    /// Feeds every rollup of a minute that starts after `after_ms` to `fold`.
    pub async fn fold_rollups<A: Send + 'static>(
        &self,
        after_ms: i64,
        mut state: A,
        fold: impl Fn(&mut A, Rollup) + Send + 'static,
    ) -> Result<A, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {ROLLUP_COLUMNS} FROM log_rollup WHERE minute_ms > $1"),
                &[&after_ms],
            )
            .await?;
        for row in &rows {
            fold(&mut state, read_rollup(row)?);
        }
        Ok(state)
    }
}
