//! The request log as CSV (RFC 4180), for a spreadsheet.
//!
//! A cell a spreadsheet would read as a formula (one that starts with `=`, `+`, `-`, `@`,
//! a tab or a carriage return) is prefixed with `'`: an error message an upstream wrote,
//! or a user name a key was issued for, must not run when the export is opened.

use std::fmt::Write;

use crate::budgets::period::iso8601;
use crate::store::request_log::LogRow;

/// The header line's columns, in order.
const COLUMNS: [&str; 21] = [
    "id",
    "time",
    "time_ms",
    "key_id",
    "user",
    "route",
    "outcome",
    "status",
    "provider",
    "model",
    "attempts",
    "latency_ms",
    "ttft_ms",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "stream",
    "partial",
    "cache",
    "error",
    "trace_id",
];

/// The rows, a header line first, each line ended by CRLF.
pub fn rows(rows: &[LogRow]) -> String {
    let mut out = String::with_capacity(64 + rows.len() * 200);
    line(&mut out, COLUMNS.iter().map(|c| (*c).to_owned()));
    for row in rows {
        let text = |v: Option<&str>| v.unwrap_or("").to_owned();
        let number = |v: Option<String>| v.unwrap_or_default();
        line(
            &mut out,
            [
                row.id.clone(),
                iso8601(u64::try_from(row.time_ms).unwrap_or(0)),
                row.time_ms.to_string(),
                text(row.key_id.as_deref()),
                text(row.user.as_deref()),
                text(row.route.as_deref()),
                row.outcome.clone(),
                row.status.to_string(),
                text(row.provider.as_deref()),
                text(row.model.as_deref()),
                row.attempts.len().to_string(),
                format!("{:.1}", row.latency_ms),
                number(row.ttft_ms.map(|t| format!("{t:.1}"))),
                number(row.tokens_in.map(|t| t.to_string())),
                number(row.tokens_out.map(|t| t.to_string())),
                number(row.cost_usd.map(|c| format!("{c:.6}"))),
                row.stream.to_string(),
                row.partial.to_string(),
                text(row.cache.as_deref()),
                text(row.error.as_deref()),
                text(row.trace_id.as_deref()),
            ]
            .into_iter(),
        );
    }
    out
}

fn line(out: &mut String, cells: impl Iterator<Item = String>) {
    for (index, cell) in cells.enumerate() {
        if index > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", quoted(&cell));
    }
    out.push_str("\r\n");
}

/// A cell, quoted when it must be, and defused when a spreadsheet would run it.
fn quoted(cell: &str) -> String {
    let defused = if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && !is_number(cell) {
        format!("'{cell}")
    } else {
        cell.to_owned()
    };
    if defused.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", defused.replace('"', "\"\""))
    } else {
        defused
    }
}

/// A negative number is a number, not a formula.
fn is_number(cell: &str) -> bool {
    cell.parse::<f64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(quoted("plain"), "plain");
        assert_eq!(quoted("a,b"), "\"a,b\"");
        assert_eq!(quoted("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(quoted("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(quoted("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(quoted("-1.5"), "-1.5");
    }
}
