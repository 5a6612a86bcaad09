//! Turns acknowledged to their callers and not yet written: counted, and
//! bounded by `store.max_unwritten_turns`.
//!
//! A turn is acknowledged before it is written (group commit), so while
//! the backend cannot write — PostgreSQL down, or slower than the calls —
//! acknowledged turns wait in memory: in the mailboxes on their way to the
//! Store, and in the PostgreSQL backend's next batch, which a failed write
//! keeps for the next attempt. Nothing there is ever dropped; instead,
//! once `max` are waiting, new turns are refused ([`BacklogFull`]: the
//! server's `503 store_unavailable` with `Retry-After`) until the backend
//! writes again. A refused turn was never acknowledged, so the caller
//! knows to send it again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The count, shared by the runtime (which admits turns) and the Store
/// (which hands them to the backend).
#[derive(Debug)]
pub struct Backlog {
    /// Admitted, not yet handled by the Store actor.
    queued: AtomicU64,
    /// Handed to the backend, waiting for its next batch write.
    buffered: AtomicU64,
    max: u64,
    retry_after: Duration,
}

/// A turn refused because `max` acknowledged turns are still unwritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{unwritten} acknowledged turns are waiting to be written (store.max_unwritten_turns = {max}): \
     the store cannot be reached or is not keeping up; this turn was not recorded, send it again later"
)]
pub struct BacklogFull {
    pub unwritten: u64,
    pub max: u64,
    /// When to try again: about when the backend's next write attempt
    /// has an answer.
    pub retry_after: Duration,
}

impl Default for Backlog {
    /// No bound (tools and benches that drive a Store directly).
    fn default() -> Self {
        Backlog::new(u64::MAX, Duration::from_secs(1))
    }
}

impl Backlog {
    pub fn new(max: u64, retry_after: Duration) -> Backlog {
        Backlog {
            queued: AtomicU64::new(0),
            buffered: AtomicU64::new(0),
            max,
            retry_after,
        }
    }

    /// Counts a turn in, or refuses it when `max` are waiting. A turn
    /// counted in must be counted out by [`handled`](Self::handled) (the
    /// Store takes it) or [`withdraw`](Self::withdraw) (it was not sent).
    pub fn admit(&self) -> Result<(), BacklogFull> {
        let queued = self.queued.fetch_add(1, Ordering::AcqRel);
        let unwritten = queued + self.buffered.load(Ordering::Acquire);
        if unwritten >= self.max {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(BacklogFull {
                unwritten,
                max: self.max,
                retry_after: self.retry_after,
            });
        }
        Ok(())
    }

    /// A turn admitted and then not sent (its connection was unknown).
    pub fn withdraw(&self) {
        self.handled();
    }

    /// The Store took a turn (into the backend, or dropped as forgotten).
    pub fn handled(&self) {
        // Never below zero: a turn sent without `admit` (the session
        // actor's own pending turns are admitted once, by their caller).
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Turns the backend holds for its next batch write.
    pub fn set_buffered(&self, n: u64) {
        self.buffered.store(n, Ordering::Release);
    }

    /// Acknowledged turns not yet written.
    pub fn unwritten(&self) -> u64 {
        self.queued.load(Ordering::Acquire) + self.buffered.load(Ordering::Acquire)
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_at_the_bound_and_admits_again_once_turns_are_written() {
        let b = Backlog::new(3, Duration::from_secs(2));
        b.admit().unwrap();
        b.admit().unwrap();
        b.handled();
        b.set_buffered(1); // the backend holds the handled turn
        b.admit().unwrap();
        let full = b.admit().unwrap_err();
        assert_eq!((full.unwritten, full.max), (3, 3));
        assert_eq!(full.retry_after, Duration::from_secs(2));
        assert_eq!(b.unwritten(), 3, "a refused turn is not counted");
        b.set_buffered(0); // the batch was written
        b.admit().unwrap();
        assert_eq!(b.unwritten(), 3);
        b.withdraw();
        assert_eq!(b.unwritten(), 2);
        for _ in 0..5 {
            b.handled();
        }
        assert_eq!(b.unwritten(), 0, "never below zero");
    }
}
