//! Calendar dates from days since the Unix epoch and back (Howard Hinnant's algorithms,
//! proleptic Gregorian, UTC): what the budgets' months and the log's timestamps both need.

/// The (year, month 1-12, day 1-31) of the day `days` after 1970-01-01 (before it, if
/// negative).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day since 1970-01-01 of a (year, month 1-12, day 1-31).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leap_days_and_round_trips() {
        // 2028-02-29 exists; the day after it is March 1st.
        let leap = days_from_civil(2028, 2, 29);
        assert_eq!(civil_from_days(leap), (2028, 2, 29));
        assert_eq!(civil_from_days(leap + 1), (2028, 3, 1));
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        for day in (-40_000..40_000).step_by(37) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
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
        let mut previous = civil_from_days(0);
        for days in 1..157_000 {
            let (y, m, d) = civil_from_days(days);
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
