//! Stats, barriers and shutdown.

use super::*;

impl Runtime {
    /// Rebuilds changed `background_context` blocks now, without waiting
    /// for the watchdog's timer. Returns how many were rebuilt.
    pub async fn refresh_background_context(&self) -> Result<usize, RecallError> {
        Ok(ask(
            &self.inner.watchdog,
            "watchdog",
            CALL_TIMEOUT_MS,
            WatchdogMsg::RefreshNow,
        )
        .await??)
    }

    /// Flushes everything written so far to disk.
    pub async fn flush(&self) -> Result<(), RecallError> {
        self.store(StoreMsg::Flush).await
    }

    pub async fn stats(&self) -> Result<RuntimeStats, RecallError> {
        let store = ask(&self.inner.store, "store", CALL_TIMEOUT_MS, StoreMsg::Stats).await?;
        let watchdog = ask(
            &self.inner.watchdog,
            "watchdog",
            CALL_TIMEOUT_MS,
            WatchdogMsg::Stats,
        )
        .await?;
        let rollup = *self.inner.rollup_stats.borrow();
        // A call, so that every message sent before this one is counted
        // (and the window counters are read now).
        let supervisor = ask(
            &self.inner.supervisor,
            "supervisor",
            CALL_TIMEOUT_MS,
            SupervisorMsg::Stats,
        )
        .await?;
        Ok(RuntimeStats {
            supervisor,
            store,
            watchdog,
            rollup,
        })
    }

    /// The supervisor's counters as they change.
    pub fn watch_stats(&self) -> watch::Receiver<SupervisorStats> {
        self.inner.stats.clone()
    }

    /// A barrier: returns once the live sessions and the watchdog have
    /// handled every message sent to them before this call, including
    /// what timers due at this instant sent (a silence timeout). What they
    /// sent on while handling them (a session's end to the supervisor, a
    /// window summary started) is then on its way.
    pub async fn sync(&self) -> Result<(), RecallError> {
        // A timer that fired at this instant is a task ready to run, and
        // tokio runs the tasks ready when one yields before it resumes: its
        // message is sent before the pings below.
        tokio::task::yield_now().await;
        for (_, _, actor) in self.inner.registry.live_sessions() {
            // A session that stops first reported its end as it stopped.
            let _ = call_t!(actor, SessionMsg::Ping, CALL_TIMEOUT_MS);
        }
        ask(
            &self.inner.watchdog,
            "watchdog",
            CALL_TIMEOUT_MS,
            WatchdogMsg::Stats,
        )
        .await?;
        Ok(())
    }

    /// In-session summaries (windows and folds) started whose outcome is
    /// not yet back with their session.
    pub fn windows_in_flight(&self) -> usize {
        *self.inner.windows_in_flight.borrow()
    }

    /// Waits until every in-session summary (window or fold) started has
    /// come back and its session has taken it in, and those it started in
    /// turn. A summary that hangs is waited for until its timeout
    /// (`reflector.attempt_timeout_secs`).
    pub async fn wait_windows(&self) -> Result<(), RecallError> {
        let mut rx = self.inner.windows_in_flight.clone();
        loop {
            self.sync().await?;
            rx.wait_for(|n| *n == 0)
                .await
                .map_err(unavailable("supervisor"))?;
            // The outcomes are handled, and any fold they start counted.
            self.sync().await?;
            if *rx.borrow() == 0 {
                return Ok(());
            }
        }
    }

    /// Waits until no session is ending or reopening, no reflection runs
    /// or waits, and the summaries stored are taken into topics and search.
    /// Live sessions may remain; their window summaries may still run
    /// ([`wait_windows`](Self::wait_windows)).
    pub async fn wait_idle(&self) -> Result<(), RecallError> {
        self.sync().await?;
        let mut rx = self.inner.stats.clone();
        loop {
            rx.borrow_and_update();
            // A call, so that every message sent before it is counted.
            let s = ask(
                &self.inner.supervisor,
                "supervisor",
                CALL_TIMEOUT_MS,
                SupervisorMsg::Stats,
            )
            .await?;
            if s.idle() {
                // New summaries are taken in (topics, vectors, late
                // rollups) before the runtime counts as idle.
                if let Some(r) = &self.inner.rollup {
                    // It may be in the middle of a rollup run: wait long.
                    // What it could not take in (the embedder is down)
                    // stays in the inbox for later; that is not busy.
                    let res = ask(
                        r,
                        "rollup",
                        hierarchy::ROLLUP_TIMEOUT_MS,
                        RollupMsg::DrainInbox,
                    )
                    .await?;
                    match res {
                        // Another instance takes them in.
                        Err(RollupError::Elsewhere) | Ok(_) => {}
                        Err(err) => warn!(error = %err, "new summaries not taken in yet"),
                    }
                }
                return Ok(());
            }
            rx.changed().await.map_err(unavailable("supervisor"))?;
        }
    }

    /// Ends live sessions (`shutdown`), drains reflections for up to 30 s,
    /// flushes and stops the actors.
    pub async fn shutdown(self) -> Result<ShutdownReport, RecallError> {
        self.shutdown_with_grace(Duration::from_secs(30)).await
    }

    /// Like [`shutdown`](Self::shutdown) with a chosen grace period for
    /// reflections still running; those left stay queued on disk.
    pub async fn shutdown_with_grace(self, grace: Duration) -> Result<ShutdownReport, RecallError> {
        let inner = &self.inner;
        let ended = ask(&inner.supervisor, "supervisor", CALL_TIMEOUT_MS, |reply| {
            SupervisorMsg::EndAll {
                reason: EndReason::Shutdown,
                reply,
            }
        })
        .await?;
        let mut rx = inner.stats.clone();
        let drained = tokio::time::timeout(grace, async {
            loop {
                let s = *rx.borrow_and_update();
                if s.live_sessions == 0 && s.idle() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let s = *inner.stats.borrow();
        if drained.is_err() {
            warn!(
                running = s.reflections_running,
                queued = s.reflections_queued,
                "shutdown grace period over; unfinished reflections resume at next start"
            );
        }
        let _ = inner
            .watchdog
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        // (What the mirror did not write yet, it writes at the next start.)
        if let Some(m) = inner.mirror.get() {
            let _ = m
                .actor
                .stop_and_wait(None, Some(Duration::from_secs(5)))
                .await;
        }
        if let Some(r) = &inner.rollup {
            let _ = r.stop_and_wait(None, Some(Duration::from_secs(5))).await;
        }
        let _ = inner
            .supervisor
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        let flushed = self.flush().await;
        // The other instances sharing the store take over what is left.
        inner.cluster.stop();
        if let Ok(backend) = self.reader() {
            if let Err(err) = backend.retire().await {
                warn!(error = %err, "leases and claims not let go; they lapse");
            }
        }
        self.release_reader();
        inner.search.close().await;
        let _ = inner
            .store
            .stop_and_wait(None, Some(Duration::from_secs(10)))
            .await;
        flushed?;
        Ok(ShutdownReport {
            sessions_ended: ended,
            reflections_left: s.reflections_running + s.reflections_queued,
        })
    }

    /// The storage backend's name, once it answers (`/readyz`): a database
    /// that does not is an error.
    pub async fn store_ready(&self) -> Result<&'static str, RecallError> {
        let backend = self.reader()?;
        backend.ping().await?;
        Ok(backend.name())
    }

    /// A handle on the Store's backend for a read off its actor.
    pub(crate) fn reader(&self) -> Result<SharedBackend, RecallError> {
        Ok(self.inner.reader.get()?)
    }

    pub(super) fn release_reader(&self) {
        self.inner.reader.release();
    }
}
