//! The request log in PostgreSQL. A batch goes in as one `INSERT … SELECT FROM UNNEST(…)`
//! of column arrays: one statement and one round trip whatever its size, and its
//! `ON CONFLICT DO NOTHING RETURNING id` says which rows were new, so a replayed batch is
//! stored, and counted in the rollups, exactly once.

use std::collections::HashSet;
use std::sync::Arc;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{PgStore, rollup};
use crate::store::StoreError;
use crate::store::request_log::{LogQuery, LogRow};
use crate::store::rollup::{MINUTE_MS, Rollups};

pub(super) const COLUMNS: &str =
    "id, time_ms, key_id, user_name, route, outcome, step, provider, model, attempts,
     status, latency_ms, ttft_ms, overhead_ms, tokens_in, tokens_out, cost_usd, stream, partial,
     error, cache, trace_id";

const INSERT: &str = "INSERT INTO request_log (id, time_ms, key_id, user_name, route, outcome,
         step, provider, model, attempts, status, latency_ms, ttft_ms, overhead_ms, tokens_in,
         tokens_out, cost_usd, stream, partial, error, cache, trace_id)
     SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[],
         $6::text[], $7::int8[], $8::text[], $9::text[], $10::text[], $11::int4[],
         $12::float8[], $13::float8[], $14::float8[], $15::int8[], $16::int8[], $17::float8[],
         $18::bool[], $19::bool[], $20::text[], $21::text[], $22::text[])
     ON CONFLICT (id) DO NOTHING
     RETURNING id";

/// A batch as column arrays, the shape `UNNEST` takes.
#[derive(Default)]
struct Columns<'a> {
    id: Vec<&'a str>,
    time_ms: Vec<i64>,
    key_id: Vec<Option<&'a str>>,
    user: Vec<Option<&'a str>>,
    route: Vec<Option<&'a str>>,
    outcome: Vec<&'a str>,
    step: Vec<Option<i64>>,
    provider: Vec<Option<&'a str>>,
    model: Vec<Option<&'a str>>,
    attempts: Vec<String>,
    status: Vec<i32>,
    latency_ms: Vec<f64>,
    ttft_ms: Vec<Option<f64>>,
    overhead_ms: Vec<f64>,
    tokens_in: Vec<Option<i64>>,
    tokens_out: Vec<Option<i64>>,
    cost_usd: Vec<Option<f64>>,
    stream: Vec<bool>,
    partial: Vec<bool>,
    error: Vec<Option<&'a str>>,
    cache: Vec<Option<&'a str>>,
    trace_id: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    fn of(rows: &'a [LogRow]) -> Columns<'a> {
        let mut c = Columns::default();
        for row in rows {
            c.id.push(&row.id);
            c.time_ms.push(row.time_ms);
            c.key_id.push(row.key_id.as_deref());
            c.user.push(row.user.as_deref());
            c.route.push(row.route.as_deref());
            c.outcome.push(&row.outcome);
            c.step.push(row.step.map(|s| s as i64));
            c.provider.push(row.provider.as_deref());
            c.model.push(row.model.as_deref());
            // Serialising plain strings and numbers cannot fail.
            c.attempts
                .push(serde_json::to_string(&row.attempts).unwrap_or_default());
            c.status.push(i32::from(row.status));
            c.latency_ms.push(row.latency_ms);
            c.ttft_ms.push(row.ttft_ms);
            c.overhead_ms.push(row.overhead_ms);
            c.tokens_in.push(row.tokens_in.map(|t| t as i64));
            c.tokens_out.push(row.tokens_out.map(|t| t as i64));
            c.cost_usd.push(row.cost_usd);
            c.stream.push(row.stream);
            c.partial.push(row.partial);
            c.error.push(row.error.as_deref());
            c.cache.push(row.cache.as_deref());
            c.trace_id.push(row.trace_id.as_deref());
        }
        c
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 22] {
        [
            &self.id,
            &self.time_ms,
            &self.key_id,
            &self.user,
            &self.route,
            &self.outcome,
            &self.step,
            &self.provider,
            &self.model,
            &self.attempts,
            &self.status,
            &self.latency_ms,
            &self.ttft_ms,
            &self.overhead_ms,
            &self.tokens_in,
            &self.tokens_out,
            &self.cost_usd,
            &self.stream,
            &self.partial,
            &self.error,
            &self.cache,
            &self.trace_id,
        ]
    }
}

impl PgStore {
    /// Inserts a batch of rows, and folds the new ones into the rollups, in one
    /// transaction: all of them or, on error, none. Returns how many rows were new.
    pub async fn insert_log(&self, rows: Arc<[LogRow]>) -> Result<usize, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let mut client = self.client().await?;
        let insert = client.prepare_cached(INSERT).await?;
        let tx = client.transaction().await?;
        let columns = Columns::of(&rows);
        let stored = tx.query(&insert, &columns.params()).await?;
        let new: HashSet<&str> = stored.iter().map(|r| r.get::<_, &str>(0)).collect();
        let mut rollups = Rollups::default();
        // Only a row stored now counts: a replayed one is in the rollups already.
        for row in rows.iter().filter(|r| new.contains(r.id.as_str())) {
            rollups.add(row);
        }
        if !rollups.is_empty() {
            rollup::merge(&tx, rollups).await?;
        }
        tx.commit().await?;
        Ok(new.len())
    }

    /// Rows matching `query`, oldest first.
    pub async fn query_log(&self, query: LogQuery) -> Result<Vec<LogRow>, StoreError> {
        let mut conditions = Vec::new();
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let mut add = |condition: &str, value: Box<dyn ToSql + Sync + Send>| {
            values.push(value);
            conditions.push(format!("{condition} ${}", values.len()));
        };
        if let Some(since) = query.since_ms {
            add("time_ms >=", Box::new(since));
        }
        if let Some(until) = query.until_ms {
            add("time_ms <", Box::new(until));
        }
        if let Some(user) = query.user {
            add("user_name =", Box::new(user));
        }
        if let Some(outcome) = query.outcome {
            add("outcome =", Box::new(outcome));
        }
        if let Some(route) = query.route {
            add("route =", Box::new(route));
        }
        if let Some(trace_id) = query.trace_id {
            add("trace_id =", Box::new(trace_id));
        }
        if let Some(key_id) = query.key_id {
            add("key_id =", Box::new(key_id));
        }
        if let Some(id) = query.id {
            add("id =", Box::new(id));
        }
        if let Some((low, high)) = query.status {
            add("status >=", Box::new(i32::from(low)));
            add("status <=", Box::new(i32::from(high)));
        }
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let limit = query
            .limit
            .map_or_else(|| "ALL".to_owned(), |l| l.to_string());
        // The newest `limit` rows, turned back to oldest first for reading.
        let sql = format!(
            "SELECT * FROM (SELECT {COLUMNS} FROM request_log {filter}
                 ORDER BY time_ms DESC, id DESC LIMIT {limit}) AS newest
             ORDER BY time_ms, id"
        );
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|v| v.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let client = self.client().await?;
        let rows = client.query(&sql, &params).await?;
        rows.iter().map(read_row).collect()
    }

    /// How many rows the log holds.
    pub async fn count_log(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let count: i64 = client
            .query_one("SELECT COUNT(*) FROM request_log", &[])
            .await?
            .get(0);
        Ok(count as u64)
    }

    /// Deletes rows older than `before_ms`; returns how many went.
    pub async fn purge_log(&self, before_ms: i64) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let purged = tx
            .execute("DELETE FROM request_log WHERE time_ms < $1", &[&before_ms])
            .await?;
        // A minute's rollup goes once the whole minute is past retention.
        tx.execute(
            "DELETE FROM log_rollup WHERE minute_ms < $1",
            &[&(before_ms - MINUTE_MS)],
        )
        .await?;
        tx.commit().await?;
        Ok(purged as usize)
    }
}

fn read_row(row: &Row) -> Result<LogRow, StoreError> {
    let attempts: String = row.try_get(9)?;
    let count = |i: usize| {
        row.try_get::<_, Option<i64>>(i)
            .map(|v| v.map(|v| v as u64))
    };
    let status: i32 = row.try_get(10)?;
    Ok(LogRow {
        id: row.try_get(0)?,
        time_ms: row.try_get(1)?,
        key_id: row.try_get(2)?,
        user: row.try_get(3)?,
        route: row.try_get::<_, Option<String>>(4)?.map(Arc::from),
        outcome: row.try_get(5)?,
        step: row.try_get::<_, Option<i64>>(6)?.map(|s| s as usize),
        provider: row.try_get::<_, Option<String>>(7)?.map(Arc::from),
        model: row.try_get::<_, Option<String>>(8)?.map(Arc::from),
        // A row this code wrote always parses; an unreadable one shows no attempts.
        attempts: serde_json::from_str(&attempts).unwrap_or_default(),
        status: u16::try_from(status).unwrap_or(0),
        latency_ms: row.try_get(11)?,
        ttft_ms: row.try_get(12)?,
        overhead_ms: row.try_get(13)?,
        tokens_in: count(14)?,
        tokens_out: count(15)?,
        cost_usd: row.try_get(16)?,
        stream: row.try_get(17)?,
        partial: row.try_get(18)?,
        error: row.try_get(19)?,
        cache: row.try_get(20)?,
        trace_id: row.try_get(21)?,
    })
}
