//! The periods budgets count in: the UTC calendar day and the UTC calendar month.
//!
//! Days are numbered from the Unix epoch and months as `year * 12 + month - 1`, so both are
//! plain integers that name a counter and compare across instances; the Redis script does
//! the same arithmetic on the Redis server's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::calendar;

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

/// The (year, month, day) of a day since the epoch, for the unsigned days budgets count in.
/// Days past chrono's range (some five million years from now) read as its last day.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let days = i64::try_from(days).unwrap_or(i64::MAX);
    let (year, month, day) = calendar::civil_from_days(days)
        .or_else(|| calendar::civil_from_days(i64::from(chrono::NaiveDate::MAX.to_epoch_days())))
        .unwrap_or((1970, 1, 1));
    (year as u64, month as u64, day as u64)
}

/// The day since the epoch of a date budgets count in (a real one: the 1st of a month).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let day = calendar::days_from_civil(year as i64, month as i64, day as i64);
    day.map_or(u64::MAX / DAY_MS, |day| day as u64)
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
    fn the_epoch_and_a_leap_month() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        // February 2028 has 29 days: its month ends on March 1st.
        let february = Calendar::at(days_from_civil(2028, 2, 10) * DAY_MS);
        assert_eq!(
            iso8601(february.end_ms(Period::Month)),
            "2028-03-01T00:00:00Z"
        );
    }
}
