//! The Store actor's flushes (group commit), stats and barrier.

use super::*;

impl StoreState {
    /// Handles a message about flushes, stats and the barrier (`handle` routes
    /// only those here).
    pub(super) async fn handle_control(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        match msg {
            StoreMsg::Barrier(reply) => {
                let _ = reply.send(());
            }
            StoreMsg::Flush(reply) => {
                // Answered by the next flush to begin: now, or after the
                // one in progress (it may have begun before this caller's
                // writes).
                self.flush_next.push(reply);
                if !self.flushing {
                    self.start_flush(myself);
                }
            }
            StoreMsg::Stats(reply) => {
                self.stats.skipped_records = self.backend.skipped_records();
                let _ = reply.send(self.stats);
            }
            StoreMsg::FlushTick => {
                self.tick_armed = false;
                if self.dirty && !self.flushing {
                    self.start_flush(myself);
                }
            }
            StoreMsg::FlushDone(res) => {
                self.flushing = false;
                self.stats.flushes += 1;
                if let Err(err) = &res {
                    // The data stays in the backend's cache; mark it dirty
                    // so the next tick tries again.
                    self.stats.write_errors += 1;
                    self.dirty = true;
                    error!(error = %err, "flush failed");
                }
                let failed =
                    std::mem::take(&mut self.flush_waiters_failed) + self.unended.len() as u64;
                for reply in self.flush_waiters.drain(..) {
                    let _ = reply.send(match &res {
                        Err(err) => Err(StoreError::FlushFailed(err.clone())),
                        Ok(()) if failed > 0 => Err(StoreError::WritesFailed(failed)),
                        Ok(()) => Ok(()),
                    });
                }
                if !self.flush_next.is_empty() {
                    self.start_flush(myself);
                } else if self.dirty {
                    self.arm(myself);
                }
                debug!("flushed");
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
