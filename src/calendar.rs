//! Calendar dates from days since the Unix epoch and back (proleptic Gregorian, UTC): what
//! the budgets' months and the log's timestamps both need. chrono does the arithmetic; a
//! hand-written version was measured and saved no scenario's instructions (see
//! docs/src/development.md, "Dependencies, and why").

use chrono::{Datelike, NaiveDate};

/// The (year, month 1-12, day 1-31) of the day `days` after 1970-01-01 (before it, if
/// negative); `None` past chrono's range (about 262,000 years either way).
pub(crate) fn civil_from_days(days: i64) -> Option<(i64, i64, i64)> {
    let date = NaiveDate::from_epoch_days(i32::try_from(days).ok()?)?;
    Some((
        i64::from(date.year()),
        i64::from(date.month()),
        i64::from(date.day()),
    ))
}

/// The day since 1970-01-01 of a (year, month 1-12, day 1-31); `None` for a date that does
/// not exist.
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(year).ok()?,
        u32::try_from(month).ok()?,
        u32::try_from(day).ok()?,
    )?;
    Some(i64::from(date.to_epoch_days()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leap_days_and_round_trips() {
        // 2028-02-29 exists; the day after it is March 1st.
        let leap = days_from_civil(2028, 2, 29).unwrap();
        assert_eq!(civil_from_days(leap), Some((2028, 2, 29)));
        assert_eq!(civil_from_days(leap + 1), Some((2028, 3, 1)));
        assert_eq!(civil_from_days(0), Some((1970, 1, 1)));
        assert_eq!(civil_from_days(-1), Some((1969, 12, 31)));
        assert_eq!(days_from_civil(2027, 2, 29), None);
        for day in (-40_000..40_000).step_by(37) {
            let (y, m, d) = civil_from_days(day).unwrap();
            assert_eq!(days_from_civil(y, m, d), Some(day));
        }
    }

    #[test]
    fn consecutive_days_step_through_the_gregorian_calendar() {
        // Every day from 1970 to 2400 against month lengths and the leap rule written out
        // apart: the day advances by one, or the month (or the year) turns over onto the 1st.
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let length = |y: i64, m: i64| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut previous = civil_from_days(0).unwrap();
        for days in 1..157_000 {
            let (y, m, d) = civil_from_days(days).unwrap();
            let (py, pm, pd) = previous;
            let expected = if pd < length(py, pm) {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), expected, "day {days}");
            previous = (y, m, d);
        }
    }
}
