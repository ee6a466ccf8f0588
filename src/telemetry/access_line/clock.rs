//! The log's timestamp, written by hand.
//!
//! tracing-subscriber's [`SystemTime`] writes RFC 3339 with microseconds through seven
//! `write!` calls with padding, about 2,000 instructions a line: a quarter of the access
//! line. [`UtcMicros`] writes the same 27 bytes from a buffer filled digit by digit.

use std::fmt;
use std::time::UNIX_EPOCH;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

/// The current time as tracing's [`SystemTime`] writes it (`2026-12-02T23:15:23.123456Z`).
#[derive(Clone, Copy, Debug, Default)]
pub struct UtcMicros;

impl FormatTime for UtcMicros {
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        let now = std::time::SystemTime::now();
        match now
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since| rfc3339_micros(since.as_secs(), since.subsec_micros()))
        {
            // Always ASCII digits and punctuation.
            Some(text) => writer.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?),
            // Before 1970 or after 9999: rare enough for the general formatter.
            None => SystemTime.format_time(writer),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for `seconds` since the epoch, if its year has four digits.
fn rfc3339_micros(seconds: u64, micros: u32) -> Option<[u8; 27]> {
    let days = i64::try_from(seconds / 86_400).ok()?;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) || micros >= 1_000_000 {
        return None;
    }
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    digits(&mut out[0..4], year as u64);
    digits(&mut out[5..7], month as u64);
    digits(&mut out[8..10], day as u64);
    digits(&mut out[11..13], of_day / 3_600);
    digits(&mut out[14..16], of_day % 3_600 / 60);
    digits(&mut out[17..19], of_day % 60);
    digits(&mut out[20..26], u64::from(micros));
    Some(out)
}

/// Writes `value` into `place` in decimal, zero-padded to its width (the value must fit).
fn digits(place: &mut [u8], mut value: u64) {
    for slot in place.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01: Howard Hinnant's
/// `civil_from_days`, exact for every day of the i64 range this can be given.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(seconds: u64, micros: u32) -> String {
        let bytes = rfc3339_micros(seconds, micros).expect("a four-digit year");
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn writes_what_rfc_3339_says_for_known_instants() {
        // Expected values from Python's datetime.fromtimestamp(s, timezone.utc).
        let known = [
            (0, 0, "1970-01-01T00:00:00.000000Z"),
            (951_782_400, 1, "2000-02-29T00:00:00.000001Z"),
            (946_684_799, 999_999, "1999-12-31T23:59:59.999999Z"),
            (1_709_164_800, 500_000, "2024-02-29T00:00:00.500000Z"),
            (1_764_717_323, 123_456, "2025-12-02T23:15:23.123456Z"),
            (4_107_542_400, 0, "2100-03-01T00:00:00.000000Z"),
            (4_102_444_800, 42, "2100-01-01T00:00:00.000042Z"),
            (253_402_300_799, 999_999, "9999-12-31T23:59:59.999999Z"),
        ];
        for (seconds, micros, expected) in known {
            assert_eq!(text(seconds, micros), expected, "{seconds} s");
        }
    }

    #[test]
    fn years_past_9999_are_left_to_the_general_formatter() {
        assert!(rfc3339_micros(253_402_300_800, 0).is_none());
    }

    #[test]
    fn consecutive_days_step_through_the_calendar() {
        // Every day from 1970 to 2400: the day advances by one, or the month (or year)
        // turns over onto the 1st, and month lengths follow the Gregorian leap rule.
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let length = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut previous = civil_from_days(0);
        assert_eq!(previous, (1970, 1, 1));
        for days in 1..157_000 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = previous;
            if pd < length(py, pm) {
                assert_eq!((y, m, d), (py, pm, pd + 1), "day {days}");
            } else if pm < 12 {
                assert_eq!((y, m, d), (py, pm + 1, 1), "day {days}");
            } else {
                assert_eq!((y, m, d), (py + 1, 1, 1), "day {days}");
            }
            previous = (y, m, d);
        }
    }

    #[test]
    fn agrees_with_tracing_to_the_second_now() {
        // The two clocks are read a moment apart: they may differ only in the microseconds,
        // or across a second's edge, so compare the seconds and retry once.
        let read = |timer: &dyn Fn(&mut Writer<'_>) -> fmt::Result| {
            let mut line = String::new();
            timer(&mut Writer::new(&mut line)).unwrap();
            line
        };
        let agree = || {
            let ours = read(&|w| UtcMicros.format_time(w));
            let theirs = read(&|w| SystemTime.format_time(w));
            assert_eq!(ours.len(), theirs.len(), "{ours} vs {theirs}");
            ours[..19] == theirs[..19]
        };
        assert!(agree() || agree());
    }
}
