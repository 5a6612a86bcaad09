//! Hooks for tests (the `testkit` feature): stopping abruptly, a
//! panicking session, comparing the Store's mirrors with its trees.

use super::*;

impl Runtime {
    /// Whether the Store's in-memory records (sessions, summaries, facts,
    /// topics) are built and hold what its trees hold, once every write
    /// sent before is done (for tests).
    #[doc(hidden)]
    pub async fn store_mirrors_match(&self) -> Result<bool, RecallError> {
        self.store_barrier().await?;
        Ok(self.reader()?.caches_match().await?)
    }

    /// Stops every actor at once without ending sessions or draining: what
    /// a crash leaves behind, minus the unflushed window. For tests.
    pub async fn abort(self) {
        let inner = &self.inner;
        let _ = inner
            .watchdog
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
        if let Some(r) = &inner.rollup {
            let _ = r.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        if let Some(m) = inner.mirror.get() {
            let _ = m.actor.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        let _ = inner
            .supervisor
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
        for (_, _, actor) in inner.registry.live_sessions() {
            let _ = actor.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        self.release_reader();
        inner.search.close().await;
        let _ = inner
            .store
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
    }

    /// Makes the live session actor on `connection_id` panic (crash-path
    /// tests).
    #[doc(hidden)]
    pub fn inject_session_panic(&self, connection_id: &str) -> bool {
        match self.inner.registry.live(connection_id) {
            Some((_, actor)) => actor.cast(SessionMsg::InjectPanic).is_ok(),
            None => false,
        }
    }
}
