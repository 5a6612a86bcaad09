//! Whether this instance may do work one instance at a time does (the
//! Rollup actor's, the Watchdog's), as the runtime's last renewal of the
//! backend's lease says.
//!
//! A lease renewed at `t` for `d` is taken to hold here until `t + d`
//! minus a margin, measured from before the renewal was asked, so it ends
//! here before another instance can take it in the database (its holder
//! stops, then the other starts).

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Lease {
    name: &'static str,
    /// `None`: held for good (one instance over its own store).
    until: Mutex<Option<Option<Instant>>>,
}

impl Lease {
    /// A lease this instance always holds (a store no other instance shares).
    pub fn always(name: &'static str) -> Lease {
        Lease {
            name,
            until: Mutex::new(None),
        }
    }

    /// A lease not held until a renewal says so.
    pub fn shared(name: &'static str) -> Lease {
        Lease {
            name,
            until: Mutex::new(Some(None)),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether this instance holds it now.
    pub fn held(&self) -> bool {
        match *self.until.lock().unwrap_or_else(|p| p.into_inner()) {
            None => true,
            Some(until) => until.is_some_and(|u| Instant::now() < u),
        }
    }

    /// The backend said it holds for `time` from `asked` (when the renewal
    /// was sent), or that another instance has it.
    pub fn renewed(&self, asked: Instant, time: Duration, held: bool) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_none() {
            return;
        }
        // A tenth of the lease, for the clocks' drift and the trip.
        *until = Some(held.then(|| asked + time - time / 10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_lease_holds_from_a_renewal_until_shortly_before_it_ends() {
        let l = Lease::shared("rollup");
        assert!(!l.held());
        l.renewed(Instant::now(), Duration::from_secs(60), true);
        assert!(l.held());
        l.renewed(Instant::now(), Duration::from_secs(60), false);
        assert!(!l.held(), "another instance has it");
        let long_ago = Instant::now() - Duration::from_secs(59);
        l.renewed(long_ago, Duration::from_secs(60), true);
        assert!(!l.held(), "ends a tenth early");
        let always = Lease::always("rollup");
        always.renewed(Instant::now(), Duration::from_secs(1), false);
        assert!(always.held());
    }
}
