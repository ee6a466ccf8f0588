//! `GET /admin/requests` (the request log, filtered, as JSON or CSV) and
//! `GET /admin/requests/{id}` (one request with its attempts in order): what the console's
//! log view reads.
//!
//! Every filter is the store's (`LogQuery`), so a search reads only the rows it answers with.

mod csv;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Admin;
use crate::config::parse_duration;
use crate::server::{ApiError, AppState};
use crate::store::now_ms;
use crate::store::request_log::{LogQuery, LogRow};

/// Rows a JSON answer holds unless `limit` says otherwise.
const DEFAULT_LIMIT: usize = 100;
/// The most rows one answer holds (a CSV export's size too).
const MAX_LIMIT: usize = 10_000;

/// `GET /admin/requests`'s query. Times are epoch milliseconds, or a duration ago (`15m`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestFilter {
    /// A virtual key's id.
    key: Option<String>,
    user: Option<String>,
    route: Option<String>,
    outcome: Option<String>,
    /// An exact status (`429`) or a class (`5xx`).
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<usize>,
    /// `json` (the default) or `csv`.
    format: Option<String>,
}

/// A status filter: one code, or a class of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatusFilter {
    Exact(u16),
    Class(u16),
}

impl StatusFilter {
    fn parse(text: &str) -> Result<StatusFilter, ApiError> {
        let text = text.trim();
        let bad = || ApiError::InvalidRequest {
            message: "status must be a code such as 429 or a class such as 5xx".into(),
            param: Some("status"),
        };
        if let Some(class) = text.strip_suffix("xx").or_else(|| text.strip_suffix("XX")) {
            return match class.parse::<u16>() {
                Ok(digit @ 1..=5) if class.len() == 1 => Ok(StatusFilter::Class(digit)),
                _ => Err(bad()),
            };
        }
        match text.parse::<u16>() {
            Ok(code @ 100..=599) => Ok(StatusFilter::Exact(code)),
            _ => Err(bad()),
        }
    }

    /// The statuses it matches, both bounds included.
    fn bounds(self) -> (u16, u16) {
        match self {
            StatusFilter::Exact(code) => (code, code),
            StatusFilter::Class(digit) => (digit * 100, digit * 100 + 99),
        }
    }
}

/// A time bound: epoch milliseconds, or a duration before `now`.
fn time_bound(text: &str, param: &'static str, now: i64) -> Result<i64, ApiError> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let ago = parse_duration(text).map_err(|_| ApiError::InvalidRequest {
        message: format!("{param} must be epoch milliseconds or a duration ago such as 15m"),
        param: Some(param),
    })?;
    let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
    Ok(now.saturating_sub(ago))
}

/// Whether it is asked for as CSV.
fn wants_csv(format: Option<&str>) -> Result<bool, ApiError> {
    match format {
        None | Some("json") => Ok(false),
        Some("csv") => Ok(true),
        Some(_) => Err(ApiError::InvalidRequest {
            message: "format must be json or csv".into(),
            param: Some("format"),
        }),
    }
}

/// The rows that match, newest first, and whether older matches may exist beyond them.
struct Found {
    rows: Vec<LogRow>,
    more: bool,
}

async fn find(state: &AppState, filter: RequestFilter, csv: bool) -> Result<Found, ApiError> {
    let now = now_ms();
    let status = filter
        .status
        .as_deref()
        .map(StatusFilter::parse)
        .transpose()?;
    let limit = filter
        .limit
        .unwrap_or(if csv { MAX_LIMIT } else { DEFAULT_LIMIT })
        .clamp(1, MAX_LIMIT);
    let query = LogQuery {
        since_ms: filter
            .since
            .as_deref()
            .map(|s| time_bound(s, "since", now))
            .transpose()?,
        until_ms: filter
            .until
            .as_deref()
            .map(|u| time_bound(u, "until", now))
            .transpose()?,
        outcome: filter.outcome.filter(|o| !o.is_empty()),
        route: filter.route.filter(|r| !r.is_empty()),
        user: filter.user.filter(|u| !u.is_empty()),
        key_id: filter.key.filter(|k| !k.is_empty()),
        status: status.map(StatusFilter::bounds),
        // One more than asked for tells whether there are more.
        limit: Some(limit + 1),
        ..LogQuery::default()
    };
    // Oldest first from the store; the newest first here.
    let mut rows: Vec<LogRow> = state.store.query_log(query).await.map_err(unreadable)?;
    rows.reverse();
    let more = rows.len() > limit;
    rows.truncate(limit);
    Ok(Found { rows, more })
}

/// The log, filtered, newest first: JSON (`{requests, more}`), or CSV with `format=csv`.
pub async fn list(
    _: Admin,
    State(state): State<AppState>,
    filter: Result<Query<RequestFilter>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(filter) = filter.map_err(|e| ApiError::InvalidRequest {
        message: e.body_text(),
        param: None,
    })?;
    let csv = wants_csv(filter.format.as_deref())?;
    let found = find(&state, filter, csv).await?;
    if csv {
        let disposition = format!(
            "attachment; filename=\"switchyard-requests-{}.csv\"",
            now_ms()
        );
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                (header::CONTENT_DISPOSITION, disposition),
                (header::CACHE_CONTROL, "no-store".to_owned()),
            ],
            csv::rows(&found.rows),
        )
            .into_response());
    }
    let requests: Vec<Value> = found.rows.iter().map(summary).collect();
    Ok(Json(json!({ "requests": requests, "more": found.more })).into_response())
}

/// One request, its attempts in the order they were made.
pub async fn one(
    _: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // The id is not echoed: a caller may paste a key where an id belongs.
    let missing = || ApiError::Missing("no logged request has that id".into());
    let query = LogQuery {
        id: Some(id),
        ..LogQuery::default()
    };
    let rows = state.store.query_log(query).await.map_err(unreadable)?;
    let found = rows.into_iter().next();
    // Attempts are stored in the order they were made (a hedge beside its step 0).
    let row = found.ok_or_else(missing)?;
    Ok(Json(detail(&row)))
}

/// A row as the list shows it: everything but the attempts, which it counts.
fn summary(row: &LogRow) -> Value {
    let mut value = detail(row);
    if let Some(object) = value.as_object_mut() {
        object.remove("attempts");
        object.insert("attempt_count".into(), json!(row.attempts.len()));
    }
    value
}

/// A row whole, attempts included.
fn detail(row: &LogRow) -> Value {
    serde_json::to_value(row).unwrap_or(Value::Null)
}

fn unreadable(error: crate::store::StoreError) -> ApiError {
    tracing::error!(%error, "admin: cannot read the request log");
    ApiError::Internal("the request log cannot be read")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_codes_or_classes() {
        assert_eq!(
            StatusFilter::parse("429").ok(),
            Some(StatusFilter::Exact(429))
        );
        assert_eq!(
            StatusFilter::parse("5xx").ok(),
            Some(StatusFilter::Class(5))
        );
        assert_eq!(StatusFilter::Class(5).bounds(), (500, 599));
        assert_eq!(StatusFilter::Exact(429).bounds(), (429, 429));
        for bad in ["6xx", "55xx", "abc", "99", "600"] {
            assert!(StatusFilter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_epoch_ms_or_a_duration_ago() {
        assert_eq!(
            time_bound("1700000000000", "since", 0).ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(time_bound("15m", "since", 1_000_000).ok(), Some(100_000));
        assert!(time_bound("yesterday", "since", 0).is_err());
    }
}
