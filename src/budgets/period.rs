//! The periods budgets count in: the UTC calendar day and the UTC calendar month.
//!
//! Days are numbered from the Unix epoch and months as `year * 12 + month - 1`, so both are
//! plain integers that name a counter and compare across instances; the Redis script does
//! the same arithmetic on the Redis server's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY_MS: u64 = 86_400_000;

/// Which budget of a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    /// The UTC calendar day.
    Day,
    /// The UTC calendar month.
    Month,
}

impl Period {
    /// `day` or `month`, for messages and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }
}

/// Where a moment falls: its day and month, and how long until each ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calendar {
    pub day: u64,
    pub month: u64,
    /// Milliseconds since the Unix epoch.
    pub now_ms: u64,
}

impl Calendar {
    /// Where `now_ms` (milliseconds since the Unix epoch) falls.
    pub fn at(now_ms: u64) -> Calendar {
        let day = now_ms / DAY_MS;
        let (year, month, _) = civil_from_days(day);
        Calendar {
            day,
            month: year * 12 + month - 1,
            now_ms,
        }
    }

    /// The wall clock now.
    pub fn now() -> Calendar {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Calendar::at(u64::try_from(now.as_millis()).unwrap_or(u64::MAX))
    }

    /// How long until `period` ends.
    pub fn reset(&self, period: Period) -> Duration {
        Duration::from_millis(self.end_ms(period).saturating_sub(self.now_ms))
    }

    /// When `period` ends, in milliseconds since the Unix epoch.
    pub fn end_ms(&self, period: Period) -> u64 {
        match period {
            Period::Day => (self.day + 1) * DAY_MS,
            Period::Month => {
                let next = self.month + 1;
                days_from_civil(next / 12, next % 12 + 1, 1) * DAY_MS
            }
        }
    }
}

/// A moment as ISO 8601 in UTC, to the second: `2026-12-01T00:00:00Z`.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (year, month, day) = civil_from_days(secs / 86_400);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The (year, month 1-12, day 1-31) of a day since 1970-01-01: Howard Hinnant's algorithm,
/// here for days on or after the epoch only.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The day since 1970-01-01 of a (year, month 1-12, day) on or after the epoch.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-30T16:46:53Z.
    const LATE_NOVEMBER: u64 = 1_796_057_213_000;

    #[test]
    fn days_and_months_end_at_utc_midnight() {
        let at = Calendar::at(LATE_NOVEMBER);
        assert_eq!(iso8601(LATE_NOVEMBER), "2026-11-30T16:46:53Z");
        assert_eq!(iso8601(at.end_ms(Period::Day)), "2026-12-01T00:00:00Z");
        assert_eq!(iso8601(at.end_ms(Period::Month)), "2026-12-01T00:00:00Z");
        assert_eq!(at.month, 2026 * 12 + 10);
        let december = Calendar::at(at.end_ms(Period::Month) + 1);
        assert_eq!(december.month, at.month + 1);
        assert_eq!(
            iso8601(december.end_ms(Period::Month)),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            at.reset(Period::Day),
            Duration::from_millis(at.end_ms(Period::Day) - LATE_NOVEMBER)
        );
    }

    #[test]
    fn leap_days_and_round_trips() {
        // 2028-02-29 exists; the month after February 2028 begins on March 1st.
        let leap = days_from_civil(2028, 2, 29);
        assert_eq!(civil_from_days(leap), (2028, 2, 29));
        assert_eq!(civil_from_days(leap + 1), (2028, 3, 1));
        for day in (0..40_000).step_by(37) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
    }
}
