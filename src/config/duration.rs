//! Durations as the config writes them: `"250ms"`, `"30s"`, `"2m"`, `"24h"`, `"30d"`.

use std::time::Duration;

/// Parses a duration string; the error says what was expected, the caller adds the field.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit (use ms, s, m, h or d)"))?;
    let (digits, unit) = text.split_at(split);
    let amount: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let millis_per_unit = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "`{text}` has unknown unit `{unit}` (use ms, s, m, h or d)"
            ));
        }
    };
    amount
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Formats a duration the way the config writes it, for `switchyard check`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis % 1_000 != 0 {
        format!("{millis}ms")
    } else if millis % 60_000 != 0 {
        format!("{}s", millis / 1_000)
    } else if millis % 3_600_000 != 0 {
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
    fn rejects_missing_or_unknown_units() {
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("3w").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s").unwrap_err().contains("whole number"));
    }

    #[test]
    fn formats_round_trip() {
        for text in ["250ms", "30s", "2m", "24h", "1500ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
