//! The runtime clock. Every timestamp recall records comes from here, and it
//! follows tokio's clock: under paused time (tests, `recall simulate`) the
//! recorded times advance exactly as far as the timers do.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Wall-clock time derived from tokio's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall_at_base: DateTime<Utc>,
    base: Instant,
}

impl Clock {
    /// A clock that reads `start` now and advances with tokio's clock.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Clock {
            wall_at_base: start,
            base: Instant::now(),
        }
    }

    /// The system clock, sampled once and then advanced monotonically, so a
    /// wall-clock step never makes a session end before it started.
    pub fn system() -> Self {
        Self::starting_at(Utc::now())
    }

    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.base);
        // A chrono Duration holds ±292 years of nanoseconds; a runtime that
        // has been up longer than that keeps its last representable time.
        match chrono::Duration::from_std(elapsed) {
            Ok(d) => self.wall_at_base + d,
            Err(_) => self.wall_at_base + chrono::Duration::MAX,
        }
    }

    /// The tokio instant at which this clock read (or will read) `at`;
    /// times before the clock started map to its start.
    pub fn instant_of(&self, at: DateTime<Utc>) -> Instant {
        match (at - self.wall_at_base).to_std() {
            Ok(d) => self.base + d,
            Err(_) => self.base,
        }
    }

    /// The tokio instant at which this clock will read `at` (now, if `at`
    /// is in the past).
    pub fn instant_at(&self, at: DateTime<Utc>) -> Instant {
        let ahead = (at - self.now()).to_std().unwrap_or(Duration::ZERO);
        Instant::now() + ahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_tokio_time() {
        let start = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        let clock = Clock::starting_at(start);
        assert_eq!(clock.now(), start);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), start + chrono::Duration::seconds(90));
    }
}
