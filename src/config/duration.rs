//! Durations as the config writes them: `"250ms"`, `"30s"`, `"2m"`, `"24h"`, `"30d"`, read by
//! humantime.

use std::time::Duration;

/// Parses a duration string; the error says what was expected, the caller adds the field.
/// humantime reads it, so `"1h 30m"` and `"2days"` are durations too.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    humantime::parse_duration(text).map_err(|error| {
        format!("`{text}` is not a duration like 250ms, 30s, 2m, 24h or 30d ({error})")
    })
}

/// Formats a duration the way the config writes it, for `switchyard check`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1_000) {
        format!("{millis}ms")
    } else if !millis.is_multiple_of(60_000) {
        format!("{}s", millis / 1_000)
    } else if !millis.is_multiple_of(3_600_000) {
        format!("{}m", millis / 60_000)
    } else {
        format!("{}h", millis / 3_600_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
    }

    #[test]
    fn rejects_missing_or_unknown_units_and_says_what_it_wanted() {
        for text in ["30", "3x", "s", "", "-1s"] {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains("like 250ms, 30s"), "{text}: {error}");
        }
    }

    #[test]
    fn reads_compound_and_spelled_out_units() {
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("2days"), Ok(Duration::from_secs(2 * 86_400)));
    }

    #[test]
    fn formats_round_trip() {
        for text in ["250ms", "30s", "2m", "24h", "1500ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
