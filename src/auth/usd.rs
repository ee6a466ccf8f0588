//! Amounts of US dollars as operators write them (`5`, `12.50`), and the micro-dollars
//! (millionths of a dollar) the store and the budget engine count in.
//!
//! The text is read as a decimal, digit by digit, never through a float: `0.1 + 0.2` is
//! exactly 300 000 micro-dollars, and an amount finer than a micro-dollar is refused rather
//! than rounded, so what an operator typed is what a key gets.

use serde_json::Value;

/// Micro-dollars in a dollar.
pub const MICROS_PER_USD: u64 = 1_000_000;

/// The most a budget may be, in micro-dollars: what a signed 64-bit column keeps, in both
/// store backends.
pub const MAX_MICROS: u64 = i64::MAX as u64;

/// Why a text is not an amount of dollars; shown after the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsdError {
    #[error("`{0}` is not an amount of US dollars (write it as 5 or 12.50)")]
    NotAnAmount(String),
    #[error("must be a number of US dollars, such as 5 or 12.50")]
    NotANumber,
    #[error("must be a finite amount of US dollars")]
    NotFinite,
    #[error("must not be negative")]
    Negative,
    #[error("has more than 6 decimal places: amounts count in millionths of a dollar")]
    TooFine,
    #[error("must be at most {} US dollars", format(MAX_MICROS))]
    TooLarge,
}

/// Reads a decimal amount of dollars (`5`, `12.50`, `.5`, `1e-6`) as micro-dollars.
pub fn parse(text: &str) -> Result<u64, UsdError> {
    let not_an_amount = || UsdError::NotAnAmount(text.to_owned());
    let trimmed = text.trim();
    let (negative, unsigned) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    let lower = unsigned.to_ascii_lowercase();
    if lower.starts_with("inf") || lower == "nan" {
        return Err(UsdError::NotFinite);
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(not_an_amount());
    }
    let exponent = match exponent {
        None => 0,
        Some(e) => parse_exponent(e).ok_or_else(not_an_amount)?,
    };
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        // Zero in any spelling; `-0` is as negative as it looks to whoever typed it.
        return if negative {
            Err(UsdError::Negative)
        } else {
            Ok(0)
        };
    }
    if negative {
        return Err(UsdError::Negative);
    }
    // The amount is `digits` × 10^scale micro-dollars; trailing zeros only move the scale.
    let significant = digits.trim_end_matches('0');
    let trailing = (digits.len() - significant.len()) as i64;
    let scale = 6 - fraction.len() as i64 + exponent + trailing;
    if scale < 0 {
        return Err(UsdError::TooFine);
    }
    // u128 holds 38 digits; more than 20 could never fit a u64 anyway.
    if significant.len() as i64 + scale > 20 {
        return Err(UsdError::TooLarge);
    }
    let value: u128 = significant.parse().map_err(|_| not_an_amount())?;
    let micros = value * 10u128.pow(scale as u32);
    match u64::try_from(micros) {
        Ok(micros) if micros <= MAX_MICROS => Ok(micros),
        _ => Err(UsdError::TooLarge),
    }
}

/// An exponent's digits, saturated far beyond any amount that could fit.
fn parse_exponent(text: &str) -> Option<i64> {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.parse::<i64>().unwrap_or(i64::MAX / 2).min(1_000_000);
    Some(sign * value)
}

/// Reads a JSON value's text as an amount: only a JSON number is one. The text is the
/// body's own (a raw value), so `12.50` is read exactly as written.
pub fn parse_json(raw: &str) -> Result<u64, UsdError> {
    let raw = raw.trim();
    match raw.bytes().next() {
        Some(b'-' | b'0'..=b'9') => parse(raw),
        _ => Err(UsdError::NotANumber),
    }
}

/// Micro-dollars as dollars, with no trailing zeros: `12.5`, `5`, `0.000001`.
pub fn format(micros: u64) -> String {
    let (whole, fraction) = (micros / MICROS_PER_USD, micros % MICROS_PER_USD);
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:06}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// Micro-dollars as a JSON number of dollars: whole dollars as an integer (`5`), others as
/// the nearest double, which prints as the exact decimal (`12.5`) for any amount under a
/// billion dollars.
pub fn to_json(micros: u64) -> Value {
    if micros.is_multiple_of(MICROS_PER_USD) {
        return Value::from(micros / MICROS_PER_USD);
    }
    // Both operands are exact in a double; the quotient is correctly rounded.
    Value::from(micros as f64 / MICROS_PER_USD as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_become_exact_micro_dollars() {
        let cases = [
            ("5", 5_000_000),
            ("12.50", 12_500_000),
            ("12.5", 12_500_000),
            ("0.1", 100_000),
            (".5", 500_000),
            ("5.", 5_000_000),
            ("0.000001", 1),
            ("1e-6", 1),
            ("1.5E3", 1_500_000_000),
            ("2.5e+1", 25_000_000),
            ("1.0000000", 1_000_000),
            ("0", 0),
            ("000.000", 0),
            (" 7 ", 7_000_000),
            ("+3", 3_000_000),
            ("9223372036854.775807", MAX_MICROS),
            ("1234.567891", 1_234_567_891),
        ];
        for (text, micros) in cases {
            assert_eq!(parse(text), Ok(micros), "{text}");
        }
    }

    #[test]
    fn what_is_not_an_exact_amount_is_refused_and_says_why() {
        let cases = [
            ("-1", UsdError::Negative),
            ("-0.5", UsdError::Negative),
            ("-0", UsdError::Negative),
            ("1.0000001", UsdError::TooFine),
            ("1e-7", UsdError::TooFine),
            ("NaN", UsdError::NotFinite),
            ("inf", UsdError::NotFinite),
            ("-Infinity", UsdError::NotFinite),
            ("9223372036854.775808", UsdError::TooLarge),
            ("18446744073709.551616", UsdError::TooLarge),
            ("1e30", UsdError::TooLarge),
            ("1e999999999999999999999", UsdError::TooLarge),
            (
                "99999999999999999999999999999999999999999",
                UsdError::TooLarge,
            ),
        ];
        for (text, error) in cases {
            assert_eq!(parse(text), Err(error), "{text}");
        }
        for text in [
            "", ".", "five", "1.2.3", "1e", "1e+", "$5", "5 USD", "1_000", "0x10",
        ] {
            assert_eq!(
                parse(text),
                Err(UsdError::NotAnAmount(text.into())),
                "{text:?}"
            );
        }
        // Zero with a negative exponent too fine to matter is still zero.
        assert_eq!(parse("0e-99"), Ok(0));
        assert!(
            UsdError::TooLarge
                .to_string()
                .contains("9223372036854.775807")
        );
    }

    #[test]
    fn only_json_numbers_are_amounts() {
        assert_eq!(parse_json("12.50"), Ok(12_500_000));
        assert_eq!(parse_json("1e-6"), Ok(1));
        assert_eq!(parse_json("-2"), Err(UsdError::Negative));
        for raw in ["\"5\"", "true", "[5]", "{}"] {
            assert_eq!(parse_json(raw), Err(UsdError::NotANumber), "{raw}");
        }
    }

    #[test]
    fn micro_dollars_show_as_short_dollars_and_read_back() {
        for (micros, text) in [
            (5_000_000, "5"),
            (12_500_000, "12.5"),
            (1, "0.000001"),
            (1_234_567_891, "1234.567891"),
            (0, "0"),
            (MAX_MICROS, "9223372036854.775807"),
        ] {
            assert_eq!(format(micros), text);
            assert_eq!(parse(text), Ok(micros));
        }
        assert_eq!(to_json(5_000_000).to_string(), "5");
        assert_eq!(to_json(12_500_000).to_string(), "12.5");
        assert_eq!(to_json(1_234_567_891).to_string(), "1234.567891");
        // The JSON a GET shows is read back by a PATCH as the same amount.
        for micros in [1, 999_999, 100_000_001, 999_999_999_999_999] {
            let shown = to_json(micros).to_string();
            assert_eq!(parse_json(&shown), Ok(micros), "{shown}");
        }
    }
}
