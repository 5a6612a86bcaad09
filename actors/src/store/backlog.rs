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

    /// Refuses a turn while `max` are waiting. (Checked, not counted:
    /// a turn is counted when it is sent to the Store, so one that never
    /// reaches it — its session actor died with it in its mailbox —
    /// leaves no count behind. Turns accepted at once may pass the bound
    /// by as many as are on their way meanwhile.)
    pub fn check(&self) -> Result<(), BacklogFull> {
        let unwritten = self.unwritten();
        if unwritten >= self.max {
            return Err(BacklogFull {
                unwritten,
                max: self.max,
                retry_after: self.retry_after,
            });
        }
        Ok(())
    }

    /// A turn sent to the Store (the session actor's `AppendTurn`).
    pub fn sent(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// The Store took a turn (into the backend, or dropped as forgotten).
    pub fn handled(&self) {
        // Never below zero: a tool or bench may drive a Store with turns
        // no session counted.
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
        let accept = || b.check().map(|()| b.sent());
        accept().unwrap();
        accept().unwrap();
        b.handled();
        b.set_buffered(1); // the backend holds the handled turn
        accept().unwrap();
        let full = b.check().unwrap_err();
        assert_eq!((full.unwritten, full.max), (3, 3));
        assert_eq!(full.retry_after, Duration::from_secs(2));
        assert_eq!(b.unwritten(), 3, "a refused turn is not counted");
        b.set_buffered(0); // the batch was written
        accept().unwrap();
        assert_eq!(b.unwritten(), 3);
        for _ in 0..5 {
            b.handled();
        }
        assert_eq!(b.unwritten(), 0, "never below zero");
    }
}
