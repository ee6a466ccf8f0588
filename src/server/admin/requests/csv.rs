//! The request log as CSV (RFC 4180, written by the `csv` crate), for a spreadsheet.
//!
//! A cell a spreadsheet would read as a formula (one that starts with `=`, `+`, `-`, `@`,
//! a tab or a carriage return) is prefixed with `'`: an error message an upstream wrote,
//! or a user name a key was issued for, must not run when the export is opened.

use std::borrow::Cow;

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
    let lines = std::iter::once(COLUMNS.map(str::to_owned).to_vec()).chain(rows.iter().map(cells));
    written(lines)
}

/// Lines of cells as CSV, each cell defused.
fn written(lines: impl Iterator<Item = Vec<String>>) -> String {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    for line in lines {
        // Writing to memory fails only on a line of another length, which none is.
        let _ = writer.write_record(line.iter().map(|cell| defused(cell).into_owned()));
    }
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

fn cells(row: &LogRow) -> Vec<String> {
    let text = |v: Option<&str>| v.unwrap_or("").to_owned();
    let number = |v: Option<String>| v.unwrap_or_default();
    vec![
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
}

/// A cell a spreadsheet would run, made text; a negative number is a number, not a formula.
fn defused(cell: &str) -> Cow<'_, str> {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && cell.parse::<f64>().is_err() {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::written;

    fn line(cells: &[&str]) -> String {
        written(std::iter::once(
            cells.iter().map(|c| (*c).to_owned()).collect(),
        ))
    }

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(line(&["plain", "a,b"]), "plain,\"a,b\"\r\n");
        assert_eq!(line(&["say \"hi\""]), "\"say \"\"hi\"\"\"\r\n");
        assert_eq!(
            line(&["=HYPERLINK(\"x\")"]),
            "\"'=HYPERLINK(\"\"x\"\")\"\r\n"
        );
        assert_eq!(line(&["@SUM(A1)", "-1.5"]), "'@SUM(A1),-1.5\r\n");
    }
}
