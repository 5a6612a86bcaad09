//! Calendar periods in an agent's time zone: local days and weeks as UTC
//! bounds, and the next local time a rollup is due. Days are 23 or 25
//! hours long across a daylight-saving change; a local hour that does not
//! exist that day (the clocks jumped over it) is taken as the first instant
//! after the jump, one that happens twice as its first occurrence.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// The rollup levels with a calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Daily,
    Weekly,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Daily => "daily",
            Level::Weekly => "weekly",
        }
    }

    /// Local days one period of this level spans.
    pub fn days(self) -> i64 {
        match self {
            Level::Daily => 1,
            Level::Weekly => 7,
        }
    }
}

/// The UTC instant of `date` at `time` local: the earliest if the local
/// time happens twice, the end of the jump if it does not happen.
pub fn local_instant(tz: &Tz, date: NaiveDate, time: NaiveTime) -> DateTime<Utc> {
    let naive = NaiveDateTime::new(date, time);
    if let Some(t) = tz.from_local_datetime(&naive).earliest() {
        return t.with_timezone(&Utc);
    }
    // In a gap: the first local minute after it. Gaps are at most a few
    // hours; past a day, fall back to reading the local time as UTC.
    let mut probe = naive;
    for _ in 0..(24 * 60) {
        probe += Duration::minutes(1);
        if let Some(t) = tz.from_local_datetime(&probe).earliest() {
            return t.with_timezone(&Utc);
        }
    }
    Utc.from_utc_datetime(&naive)
}

/// The local date of an instant.
pub fn local_date(tz: &Tz, t: DateTime<Utc>) -> NaiveDate {
    t.with_timezone(tz).date_naive()
}

/// The UTC bounds `[start, end)` of the period of `level` starting on the
/// local date `start`.
pub fn bounds(tz: &Tz, level: Level, start: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
    let end = start + Duration::days(level.days());
    (
        local_instant(tz, start, NaiveTime::MIN),
        local_instant(tz, end, NaiveTime::MIN),
    )
}

/// The first day of the week containing `date`, weeks starting on
/// `week_start`.
pub fn week_of(date: NaiveDate, week_start: chrono::Weekday) -> NaiveDate {
    let back = (date.weekday().num_days_from_monday() + 7 - week_start.num_days_from_monday()) % 7;
    date - Duration::days(back as i64)
}

/// The first period of `level` containing `date`.
pub fn period_of(level: Level, date: NaiveDate, week_start: chrono::Weekday) -> NaiveDate {
    match level {
        Level::Daily => date,
        Level::Weekly => week_of(date, week_start),
    }
}

/// The next instant strictly after `after` at which the local clock shows
/// `hour`:00, plus `offset` (an agent's place in the spread).
pub fn next_due(tz: &Tz, after: DateTime<Utc>, hour: u32, offset: Duration) -> DateTime<Utc> {
    let time = NaiveTime::from_hms_opt(hour.min(23), 0, 0).unwrap_or(NaiveTime::MIN);
    let mut date = local_date(tz, after) - Duration::days(1);
    loop {
        let due = local_instant(tz, date, time) + offset;
        if due > after {
            return due;
        }
        date += Duration::days(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Weekday;

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn days_are_23_and_25_hours_across_daylight_saving() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let (s, e) = bounds(&berlin, Level::Daily, d("2026-03-29"));
        assert_eq!(s, utc("2026-03-28T23:00:00Z"));
        assert_eq!(e - s, Duration::hours(23));
        let (s, e) = bounds(&berlin, Level::Daily, d("2026-10-25"));
        assert_eq!(s, utc("2026-10-24T22:00:00Z"));
        assert_eq!(e - s, Duration::hours(25));
        let (s, e) = bounds(&berlin, Level::Weekly, d("2026-03-23"));
        assert_eq!(e - s, Duration::hours(7 * 24 - 1));
    }

    #[test]
    fn an_hour_the_clocks_skip_is_taken_after_the_jump() {
        let ny: Tz = "America/New_York".parse().unwrap();
        // 2026-03-08 02:00 EST jumps to 03:00 EDT
        let t = local_instant(
            &ny,
            d("2026-03-08"),
            NaiveTime::from_hms_opt(2, 30, 0).unwrap(),
        );
        assert_eq!(t, utc("2026-03-08T07:00:00Z"));
        // 2026-11-01 01:30 happens twice: the first (EDT) one
        let t = local_instant(
            &ny,
            d("2026-11-01"),
            NaiveTime::from_hms_opt(1, 30, 0).unwrap(),
        );
        assert_eq!(t, utc("2026-11-01T05:30:00Z"));
    }

    #[test]
    fn next_due_follows_the_local_clock() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let off = Duration::zero();
        // 03:00 local is 01:00 UTC in summer, 02:00 UTC in winter
        let a = next_due(&berlin, utc("2026-10-24T12:00:00Z"), 3, off);
        assert_eq!(a, utc("2026-10-25T02:00:00Z"));
        let b = next_due(&berlin, a, 3, off);
        assert_eq!(b, utc("2026-10-26T02:00:00Z"));
        let c = next_due(&berlin, utc("2026-03-28T12:00:00Z"), 3, off);
        assert_eq!(c, utc("2026-03-29T01:00:00Z"));
        // exactly at the due instant: the next day's
        assert_eq!(next_due(&berlin, c, 3, off), utc("2026-03-30T01:00:00Z"));
        // an offset moves it, and a due time is never in the past
        let e = next_due(
            &Tz::UTC,
            utc("2026-01-01T03:05:00Z"),
            3,
            Duration::minutes(10),
        );
        assert_eq!(e, utc("2026-01-01T03:10:00Z"));
    }

    #[test]
    fn weeks_start_on_the_configured_day() {
        assert_eq!(week_of(d("2026-11-22"), Weekday::Mon), d("2026-11-16"));
        assert_eq!(week_of(d("2026-11-23"), Weekday::Mon), d("2026-11-23"));
        assert_eq!(week_of(d("2026-11-22"), Weekday::Sun), d("2026-11-22"));
        assert_eq!(week_of(d("2026-11-21"), Weekday::Sun), d("2026-11-15"));
    }
}
