//! `switchyard logs`: the stored request log as a table for people or JSON lines for tools.
//!
//! Rows hold strings clients chose (a direct `provider/model` is any text after the slash),
//! so the table escapes control characters: a name must not move the cursor, clear the
//! operator's screen or start a line that looks like another row.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::store::request_log::{LogQuery, LogRow};
use crate::store::{Store, StoreError};

/// How often `--follow` asks the store for new rows.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// The virtual keys' display names by key id: the key's masked prefix, never its secret.
pub type KeyNames = HashMap<String, String>;

/// Why `switchyard logs` stopped.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("cannot read the request log: {0}")]
    Store(#[from] StoreError),
    #[error("cannot write: {0}")]
    Write(#[from] std::io::Error),
    #[error("cannot write a row as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Loads [`KeyNames`] from the store.
pub async fn key_names(store: &Store) -> Result<KeyNames, StoreError> {
    Ok(store
        .virtual_keys()
        .await?
        .into_iter()
        .map(|key| (key.id.clone(), key.masked()))
        .collect())
}

/// Prints the rows `query` selects, as a table or JSON lines; with `follow`, keeps printing
/// new rows as they are stored, until the process is stopped.
pub async fn print(
    store: &Store,
    mut query: LogQuery,
    json: bool,
    follow: bool,
    out: &mut (impl std::io::Write + Send),
) -> Result<(), LogsError> {
    let mut names = key_names(store).await?;
    let rows = store.query_log(query.clone()).await?;
    write_rows(&rows, &names, json, true, out)?;
    if !follow {
        return Ok(());
    }
    // Rows are read from the newest time seen on; those at that very millisecond that were
    // already printed are skipped by id.
    query.limit = None;
    let mut seen_at = rows.last().map(|r| r.time_ms);
    let mut seen: HashSet<String> = rows
        .iter()
        .filter(|r| Some(r.time_ms) == seen_at)
        .map(|r| r.id.clone())
        .collect();
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        query.since_ms = seen_at.or(query.since_ms);
        let fresh: Vec<LogRow> = store
            .query_log(query.clone())
            .await?
            .into_iter()
            .filter(|r| !seen.contains(&r.id))
            .collect();
        let Some(last) = fresh.last().map(|r| r.time_ms) else {
            continue;
        };
        if fresh
            .iter()
            .any(|r| r.key_id.as_ref().is_some_and(|k| !names.contains_key(k)))
        {
            names = key_names(store).await?;
        }
        write_rows(&fresh, &names, json, false, out)?;
        if seen_at != Some(last) {
            seen.clear();
        }
        seen_at = Some(last);
        seen.extend(
            fresh
                .iter()
                .filter(|r| r.time_ms == last)
                .map(|r| r.id.clone()),
        );
    }
}

fn write_rows(
    rows: &[LogRow],
    names: &KeyNames,
    json: bool,
    header: bool,
    out: &mut impl std::io::Write,
) -> Result<(), LogsError> {
    if json {
        for row in rows {
            serde_json::to_writer(&mut *out, row)?;
            out.write_all(b"\n")?;
        }
    } else {
        let text = table(rows, names);
        let text = if header {
            text.as_str()
        } else {
            text.split_once('\n').map_or("", |(_, body)| body)
        };
        out.write_all(text.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The outcomes `--outcome` accepts.
pub const OUTCOMES: [&str; 7] = [
    "success",
    "fallback",
    "degraded",
    "error",
    "client_error",
    "rejected",
    "health_check",
];

/// One line per row, with a header; attempts summed up as `provider/model:class` hops. The
/// key is shown by its name in `names` (its masked prefix), never its secret.
pub fn table(rows: &[LogRow], names: &KeyNames) -> String {
    let mut out = format!(
        "{:<23}  {:<36}  {:<14}  {:<16}  {:<12}  {:<9}  {:>3}  {:<24}  {:>9}  {:>9}  {:>11}  {:>10}  {}\n",
        "TIME (UTC)",
        "ID",
        "KEY",
        "USER",
        "ROUTE",
        "OUTCOME",
        "ST",
        "SERVED BY",
        "LATENCY",
        "TTFT",
        "TOKENS",
        "COST $",
        "ATTEMPTS"
    );
    for row in rows {
        let row = &printable_row(row);
        let served = match (&row.provider, &row.model) {
            (Some(p), Some(m)) => format!("{p}/{m}"),
            _ => "-".into(),
        };
        let tokens = match (row.tokens_in, row.tokens_out) {
            (None, None) => "-".into(),
            (i, o) => format!("{}/{}", i.unwrap_or(0), o.unwrap_or(0)),
        };
        let attempts: Vec<String> = row
            .attempts
            .iter()
            .map(|a| {
                let result = a.failure.as_deref().unwrap_or("ok");
                format!("{}/{}:{result}", a.provider, a.model)
            })
            .collect();
        let mut attempts = attempts.join(" → ");
        if let Some(error) = &row.error {
            let _ = write!(attempts, " ({error})");
        }
        if let Some(cache) = &row.cache {
            let _ = write!(attempts, " [cache {cache}]");
        }
        let key = row
            .key_id
            .as_ref()
            .map(|id| names.get(id).map_or(id.as_str(), String::as_str))
            .unwrap_or("-");
        let _ = writeln!(
            out,
            "{:<23}  {:<36}  {:<14}  {:<16}  {:<12}  {:<9}  {:>3}  {:<24}  {:>9}  {:>9}  {:>11}  {:>10}  {}",
            utc(row.time_ms),
            row.id,
            key,
            row.user.as_deref().unwrap_or("-"),
            row.route.as_deref().unwrap_or("-"),
            row.outcome,
            row.status,
            served,
            format!("{:.1}ms", row.latency_ms),
            row.ttft_ms
                .map(|t| format!("{t:.1}ms"))
                .unwrap_or_else(|| "-".into()),
            tokens,
            row.cost_usd
                .map(|c| format!("{c:.6}"))
                .unwrap_or_else(|| "-".into()),
            attempts.trim(),
        );
    }
    out
}

/// The row with every string it shows made [`printable`].
fn printable_row(row: &LogRow) -> LogRow {
    let text = |s: &String| printable(s).into_owned();
    let optional = |s: &Option<String>| s.as_ref().map(text);
    let name = |s: &Arc<str>| Arc::from(printable(s));
    let optional_name = |s: &Option<Arc<str>>| s.as_ref().map(name);
    let mut row = row.clone();
    row.id = text(&row.id);
    row.outcome = text(&row.outcome);
    row.route = optional_name(&row.route);
    row.user = optional(&row.user);
    row.key_id = optional(&row.key_id);
    row.provider = optional_name(&row.provider);
    row.model = optional_name(&row.model);
    row.error = optional(&row.error);
    row.cache = optional(&row.cache);
    row.trace_id = optional(&row.trace_id);
    for attempt in &mut row.attempts {
        attempt.provider = name(&attempt.provider);
        attempt.model = name(&attempt.model);
        attempt.failure = optional(&attempt.failure);
    }
    row
}

/// `text` safe to print to a terminal: control characters, and the invisible ones that
/// reorder or hide text (bidi overrides, zero-width marks), written as escapes like `\n`
/// and `\u{1b}`.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unprintable(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in UTC, from epoch milliseconds.
pub fn utc(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let of_day = ms.rem_euclid(86_400_000);
    let Some((year, month, day)) = crate::calendar::civil_from_days(days) else {
        // Hundreds of thousands of years away: no calendar to write it in.
        return format!("{ms} ms since 1970");
    };
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1_000 % 60,
        of_day % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::{printable, table, utc};
    use crate::store::request_log::LogRow;

    #[test]
    fn a_row_says_what_the_cache_did() {
        let row = |id: &str, cache: Option<&str>, attempts: serde_json::Value| -> LogRow {
            serde_json::from_value(serde_json::json!({
                "id": id, "time_ms": 0, "key_id": null, "user": null, "route": "r",
                "outcome": "success", "step": 0, "provider": "p", "model": "m",
                "attempts": attempts, "status": 200, "latency_ms": 1.0, "ttft_ms": null,
                "overhead_ms": 1.0, "tokens_in": null, "tokens_out": null, "cost_usd": null,
                "stream": false, "partial": false, "error": null, "cache": cache,
            }))
            .unwrap()
        };
        let attempt = serde_json::json!([{"step": 0, "provider": "p", "model": "m",
            "failure": null, "status": 200, "latency_ms": 1.0, "reached_upstream": true}]);
        let rows = [
            row("hit", Some("hit"), serde_json::json!([])),
            row("miss", Some("miss"), attempt.clone()),
            row("plain", None, attempt),
        ];
        let table = table(&rows, &Default::default());
        let line = |id: &str| table.lines().find(|l| l.contains(id)).unwrap().to_owned();
        assert!(line("hit").ends_with("[cache hit]"), "{table}");
        assert!(line("miss").ends_with("p/m:ok [cache miss]"), "{table}");
        assert!(line("plain").ends_with("p/m:ok"), "{table}");
    }

    #[test]
    fn control_and_invisible_characters_are_escaped() {
        assert_eq!(printable("groq/llama-3.1 é"), "groq/llama-3.1 é");
        assert_eq!(
            printable("a\u{1b}[2J\r\nb\tc\u{7f}\u{202e}d\u{200b}"),
            "a\\u{1b}[2J\\r\\nb\\tc\\u{7f}\\u{202e}d\\u{200b}"
        );
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000");
        assert_eq!(utc(1_795_996_799_999), "2026-11-29 23:59:59.999");
    }
}
