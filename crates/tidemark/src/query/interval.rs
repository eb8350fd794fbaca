//! Date-histogram intervals: fixed widths and UTC calendar units, the bucket a
//! timestamp falls in and the bucket after it, without overflow at the ends of time.

use crate::time::{civil_from_days, days_from_civil};

/// A date-histogram interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// A fixed width in milliseconds.
    Fixed(i64),
    /// A calendar unit, in UTC.
    Calendar(CalendarUnit),
}

/// Calendar units of a `calendar_interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarUnit {
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day (UTC).
    Day,
    /// An ISO week, starting on Monday.
    Week,
    /// A calendar month.
    Month,
    /// A quarter (January, April, July, October).
    Quarter,
    /// A calendar year.
    Year,
}

impl Interval {
    /// The start of the bucket holding `ts` (saturated at `i64::MIN` for a start before
    /// it).
    pub fn bucket_start(self, ts: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        match self {
            Interval::Calendar(
                CalendarUnit::Month | CalendarUnit::Quarter | CalendarUnit::Year,
            ) => {
                let months = self.index(ts);
                let step = self.months().unwrap_or(1);
                let total = months.saturating_mul(step);
                days_from_civil(total.div_euclid(12), total.rem_euclid(12) + 1, 1)
                    .saturating_mul(DAY)
            }
            _ => self
                .index(ts)
                .saturating_mul(self.width_millis().unwrap_or(1))
                .saturating_add(self.offset_millis()),
        }
    }

    /// The start of the bucket after the one starting at `start` (saturated at
    /// `i64::MAX` for a start after it).
    pub fn next_start(self, start: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        let next = self.index(start).saturating_add(1);
        match self.months() {
            Some(step) => {
                let total = next.saturating_mul(step);
                days_from_civil(total.div_euclid(12), total.rem_euclid(12) + 1, 1)
                    .saturating_mul(DAY)
            }
            None => next
                .saturating_mul(self.width_millis().unwrap_or(1))
                .saturating_add(self.offset_millis()),
        }
    }

    /// How many buckets the range from the bucket holding `lo` to the one holding `hi`
    /// spans (0 when `hi < lo`): what an empty-bucket walk would create, computed
    /// without walking.
    pub(super) fn buckets_between(self, lo: i64, hi: i64) -> u128 {
        if hi < lo {
            return 0;
        }
        // Bucket numbers grow with time; in i128, the difference of two cannot overflow.
        let (a, b) = (i128::from(self.index(lo)), i128::from(self.index(hi)));
        u128::try_from(b - a + 1).unwrap_or(0)
    }

    /// The number of the bucket holding `ts`, counted from the one starting at the epoch
    /// (for weeks, at the first Monday after it; for months, quarters and years, at
    /// year 0).
    pub(super) fn index(self, ts: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        match self.months() {
            Some(step) => {
                let (y, m, _) = civil_from_days(ts.div_euclid(DAY));
                y.saturating_mul(12).saturating_add(m - 1).div_euclid(step)
            }
            None => ts
                .saturating_sub(self.offset_millis())
                .div_euclid(self.width_millis().unwrap_or(1)),
        }
    }

    /// The width of a bucket that has one.
    pub(super) fn width_millis(self) -> Option<i64> {
        Some(match self {
            Interval::Fixed(w) => w.max(1),
            Interval::Calendar(CalendarUnit::Minute) => 60_000,
            Interval::Calendar(CalendarUnit::Hour) => 3_600_000,
            Interval::Calendar(CalendarUnit::Day) => 86_400_000,
            Interval::Calendar(CalendarUnit::Week) => 7 * 86_400_000,
            Interval::Calendar(_) => return None,
        })
    }

    /// Where fixed-width buckets start: weeks on Mondays (1970-01-01 was a Thursday,
    /// so Mondays are 4 days later modulo 7), everything else on the epoch.
    pub(super) fn offset_millis(self) -> i64 {
        match self {
            Interval::Calendar(CalendarUnit::Week) => 4 * 86_400_000,
            _ => 0,
        }
    }

    /// The months in a calendar-month, quarter or year bucket.
    pub(super) fn months(self) -> Option<i64> {
        match self {
            Interval::Calendar(CalendarUnit::Month) => Some(1),
            Interval::Calendar(CalendarUnit::Quarter) => Some(3),
            Interval::Calendar(CalendarUnit::Year) => Some(12),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn calendar_buckets_start_on_unit_boundaries() {
        // 2025-11-30T13:45:00Z is a Sunday.
        let ts = 1_764_510_300_000;
        let cal = |u| Interval::Calendar(u);
        assert_eq!(cal(CalendarUnit::Hour).bucket_start(ts), 1_764_507_600_000);
        assert_eq!(cal(CalendarUnit::Day).bucket_start(ts), 1_764_460_800_000);
        // The Monday before: 2025-11-24.
        assert_eq!(
            cal(CalendarUnit::Week).bucket_start(ts),
            1_764_460_800_000 - 6 * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Month).bucket_start(ts),
            days_from_civil(2025, 11, 1) * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Quarter).bucket_start(ts),
            days_from_civil(2025, 10, 1) * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Year).bucket_start(ts),
            days_from_civil(2025, 1, 1) * DAY
        );
        let dec = days_from_civil(2025, 12, 1) * DAY;
        assert_eq!(
            cal(CalendarUnit::Month).next_start(dec),
            days_from_civil(2026, 1, 1) * DAY
        );
        assert_eq!(Interval::Fixed(60_000).bucket_start(-1), -60_000);
    }

    /// Walks from the bucket of `lo` to the bucket of `hi` as an empty-bucket fill does.
    fn walk(interval: Interval, lo: i64, hi: i64) -> Vec<i64> {
        let (mut k, hi) = (interval.bucket_start(lo), interval.bucket_start(hi));
        let mut out = Vec::new();
        while k <= hi {
            out.push(k);
            k = interval.next_start(k);
        }
        out
    }

    #[test]
    fn bucket_counts_equal_the_walk_for_every_interval() {
        let cal = Interval::Calendar;
        let intervals = [
            Interval::Fixed(1),
            Interval::Fixed(7_000),
            Interval::Fixed(DAY),
            cal(CalendarUnit::Minute),
            cal(CalendarUnit::Hour),
            cal(CalendarUnit::Day),
            cal(CalendarUnit::Week),
            cal(CalendarUnit::Month),
            cal(CalendarUnit::Quarter),
            cal(CalendarUnit::Year),
        ];
        // 2025-11-30T13:45:00Z, and ranges around it, before the epoch and across it.
        let ts = 1_764_510_300_000;
        let ranges = [
            (ts, ts),
            (ts, ts + 1),
            (ts - 3 * DAY, ts + 40 * DAY),
            (ts - 800 * DAY, ts + 30 * DAY + 5),
            (-400 * DAY - 1, 30 * DAY),
            (-1, 0),
            (ts, ts - 1),
        ];
        for interval in intervals {
            for (lo, hi) in ranges {
                if matches!(interval, Interval::Fixed(1)) && hi - lo > 10_000_000 {
                    continue;
                }
                let walked = walk(interval, lo, hi);
                let (a, b) = (interval.bucket_start(lo), interval.bucket_start(hi));
                assert_eq!(
                    interval.buckets_between(a, b),
                    walked.len() as u128,
                    "{interval:?} {lo}..={hi}"
                );
                // Each walked start is the start of its own bucket.
                assert!(walked.iter().all(|k| interval.bucket_start(*k) == *k));
            }
        }
    }

    #[test]
    fn bucket_arithmetic_saturates_at_the_ends_of_time() {
        let cal = Interval::Calendar;
        for interval in [
            Interval::Fixed(3),
            Interval::Fixed(i64::MAX),
            cal(CalendarUnit::Week),
            cal(CalendarUnit::Month),
            cal(CalendarUnit::Year),
        ] {
            let lo = interval.bucket_start(i64::MIN);
            let hi = interval.bucket_start(i64::MAX);
            assert!(lo <= hi, "{interval:?}");
            assert!(interval.next_start(hi) >= hi, "{interval:?}");
            assert!(interval.next_start(lo) > lo, "{interval:?}");
            assert!(interval.buckets_between(lo, hi) >= 1, "{interval:?}");
        }
        assert_eq!(
            Interval::Fixed(1).buckets_between(i64::MIN, i64::MAX),
            1 << 64
        );
    }
}
