//! The log's timestamp, written by hand.
//!
//! tracing-subscriber's [`SystemTime`] writes RFC 3339 with microseconds through seven
//! `write!` calls with padding, about 2,000 instructions a line: a quarter of the access
//! line. [`UtcMicros`] writes the same 27 bytes from a buffer filled digit by digit.

use std::fmt;
use std::time::UNIX_EPOCH;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

use crate::calendar::civil_from_days;

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
    let (year, month, day) = civil_from_days(days)?;
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
