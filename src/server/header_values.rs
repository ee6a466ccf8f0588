//! Header values the gateway writes on every answer, made without a heap string: each
//! `format!` or `HeaderValue::from(number)` is an allocation and, for a float, a slow
//! formatter, on every request (docs/src/performance.md).

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
/// (`0.042`): what `{:.3}` of the milliseconds as a float writes. The digits are written
/// by hand: `write!` cost 590 instructions a request, more than the rest of the header.
pub fn millis(duration: Duration) -> HeaderValue {
    let micros = (duration.as_nanos() + 500) / 1000;
    let Ok(micros) = u64::try_from(micros) else {
        // Past 584,000 years: written the slow way.
        return HeaderValue::from_str(&format!("{}.{:03}", micros / 1000, micros % 1000))
            .unwrap_or(HeaderValue::from_static("0"));
    };
    // u64's longest number, a point and three decimals, written from the end.
    let mut text = [0u8; 24];
    let at = digits_before(&mut text, 24, micros % 1000, 3);
    text[at - 1] = b'.';
    let at = digits_before(&mut text, at - 1, micros / 1000, 1);
    HeaderValue::from_bytes(&text[at..]).unwrap_or(HeaderValue::from_static("0"))
}

/// US dollars as the shortest number that reads back as the same `f64`, written as
/// serde_json writes it in the log's JSON (`0.0000475`; `3.6e-6` below a hundred-thousandth).
pub fn dollars(amount: f64) -> Option<HeaderValue> {
    if !amount.is_finite() {
        return None;
    }
    HeaderValue::from_str(ryu::Buffer::new().format_finite(amount)).ok()
}

/// Writes `n`'s decimal digits, at least `least` of them (zero-padded), to end just before
/// `end`; returns where they start.
fn digits_before(text: &mut [u8], end: usize, mut n: u64, least: usize) -> usize {
    let mut at = end;
    while n > 0 || end - at < least {
        at -= 1;
        text[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_read_back_as_the_same_figure() {
        for amount in [0.0, 0.0000475, 1.0 / 3.0, 12.5, 3.6e-6] {
            let value = dollars(amount).unwrap();
            let text = value.to_str().unwrap();
            assert_eq!(text.parse::<f64>().unwrap(), amount, "{text}");
            assert_eq!(text, serde_json::json!(amount).to_string());
        }
        assert_eq!(dollars(f64::NAN), None);
    }

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
            Duration::from_secs(u64::from(u32::MAX)),
        ];
        for duration in cases {
            let float = format!("{:.3}", duration.as_secs_f64() * 1e3);
            assert_eq!(millis(duration), float.as_str(), "{duration:?}");
        }
        let longest = millis(Duration::MAX);
        assert!(longest.to_str().unwrap().ends_with(".000"), "{longest:?}");
    }
}
