//! Header values the gateway writes on every answer, made without a heap string: each
//! `format!` or `HeaderValue::from(number)` is an allocation and, for a float, a slow
//! formatter, on every request (README, "Performance").

use std::io::Write;
use std::time::Duration;

use axum::http::HeaderValue;

/// A count (attempts, a step's index): the small ones a chain has are static values.
pub fn count(n: usize) -> HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(n) {
        Some(digits) => HeaderValue::from_static(digits),
        None => HeaderValue::from(n),
    }
}

/// `duration` in milliseconds with three decimals, rounded to the nearest microsecond
/// (`0.042`): what `{:.3}` of the milliseconds as a float writes.
pub fn millis(duration: Duration) -> HeaderValue {
    let micros = (duration.as_nanos() + 500) / 1000;
    // u128's longest number, a point and three decimals.
    let mut text = [0u8; 44];
    let mut cursor = std::io::Cursor::new(&mut text[..]);
    let written = write!(cursor, "{}.{:03}", micros / 1000, micros % 1000);
    let len = usize::try_from(cursor.position()).unwrap_or(0);
    match written.ok().and(text.get(..len)) {
        Some(digits) => HeaderValue::from_bytes(digits).unwrap_or(HeaderValue::from_static("0")),
        None => HeaderValue::from_static("0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_their_decimal_digits_small_or_not() {
        for n in [0, 1, 9, 10, 11, 123, usize::MAX] {
            assert_eq!(count(n), n.to_string().as_str());
        }
    }

    #[test]
    fn millis_write_what_a_float_with_three_decimals_writes() {
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(499),
            Duration::from_nanos(500),
            Duration::from_micros(42),
            Duration::from_nanos(41_700),
            Duration::from_micros(999_999),
            Duration::from_millis(1),
            Duration::from_nanos(1_234_567),
            Duration::from_secs(3_600),
        ];
        for duration in cases {
            let float = format!("{:.3}", duration.as_secs_f64() * 1e3);
            assert_eq!(millis(duration), float.as_str(), "{duration:?}");
        }
        let longest = millis(Duration::MAX);
        assert!(longest.to_str().unwrap().ends_with(".000"), "{longest:?}");
    }
}
