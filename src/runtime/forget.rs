//! Forgetting a user through the runtime: their live calls end first, then
//! the Store removes every record of theirs and every record built from
//! them, and the agents' `background_context` blocks are rebuilt.

use recall_actors::model::validate_id;
use recall_actors::model::EndReason;
use recall_actors::session::SessionMsg;
use recall_actors::store::{ForgetReport, StoreMsg};
use tracing::{info, warn};

use super::{ask, unavailable, RecallError, Runtime};

/// A forget scans every tree once: longer than a plain call.
const FORGET_TIMEOUT_MS: u64 = 10 * 60 * 1000;

impl Runtime {
    /// Forgets `user_id`, with one agent or with every agent: ends their
    /// live calls (reason `cleared`, and not reflected on), removes their
    /// turns, sessions, summaries of every layer, facts, topics, the blocks
    /// drawn from their conversations, reflection jobs, dead letters,
    /// vectors and search entries, then rebuilds the agents'
    /// `background_context`. Returns what was removed; forgetting a user
    /// with nothing stored removes nothing.
    pub async fn forget_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, RecallError> {
        let report = self.forget_here(user_id, agent_id, false).await?;
        // Other instances over the same database end the user's live calls
        // they hold, and forget what those wrote meanwhile. (Without the
        // announcement, a call of theirs on another instance would write
        // them back when it ends.)
        if let Ok(backend) = self.reader() {
            if let Err(e) = backend.publish_forget(user_id, agent_id).await {
                warn!(user_id, error = %e, "the forget was not announced to the other instances");
            }
        }
        Ok(report)
    }

    /// Forgets here what another instance forgot. An announced user is
    /// forgotten here as there. Forget log entries (found by their hash,
    /// when the announcement may have been missed) are made safe to meet
    /// again: the database removal was committed with the entry, so only
    /// what this instance holds goes — the covered users' calls that
    /// started before the forget (ended unreflected, what they wrote
    /// removed), their cached contexts, the search indexes they may be in
    /// (rebuilt from the store) and every message's vector. A call a
    /// returning user started after the forget is theirs to keep, and so is
    /// everything stored since.
    pub(super) async fn forgot_elsewhere(&self, forgot: super::cluster::Forgot) {
        use super::cluster::Forgot;
        match forgot {
            Forgot::Announced(user_id, agent_id) => {
                if let Err(e) = self.forget_here(&user_id, agent_id.as_deref(), true).await {
                    warn!(user_id, error = %e, "forgetting a user another instance forgot failed");
                }
            }
            Forgot::Logged(entries) => {
                self.inner.query_vectors.clear();
                for e in &entries {
                    match &e.agent_id {
                        Some(a) => self.inner.search.clear_agent(a),
                        None => self.inner.search.clear(),
                    }
                }
                let mut held = self.inner.registry.owners();
                held.extend(self.inner.source_cache.owners());
                held.sort();
                held.dedup();
                for (agent, user) in held {
                    let Some(e) = entries.iter().find(|e| e.covers(&agent, &user)) else {
                        continue;
                    };
                    self.inner.source_cache.remove_user(&user, Some(&agent));
                    self.inner.live_topics.remove_user(&user, Some(&agent));
                    if let Err(err) = self.end_calls_before(&agent, &user, e.at).await {
                        warn!(user_id = user, error = %err, "ending the calls of a user another instance forgot failed");
                    }
                }
            }
        }
    }

    /// Tells the Store and the supervisor that these live sessions are
    /// being forgotten, before they end: their last writes are dropped and
    /// they are not reflected on.
    fn forgetting(&self, ids: &[uuid::Uuid]) -> Result<(), RecallError> {
        self.inner
            .store
            .cast(StoreMsg::Forgetting(ids.to_vec()))
            .map_err(unavailable("store"))?;
        self.inner
            .supervisor
            .cast(recall_actors::supervisor::SupervisorMsg::Forgetting(
                ids.to_vec(),
            ))
            .map_err(unavailable("supervisor"))?;
        Ok(())
    }

    /// Ends `user_id`'s live calls with `agent_id` that started before
    /// `before`, unreflected, and removes what they wrote.
    async fn end_calls_before(
        &self,
        agent_id: &str,
        user_id: &str,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), RecallError> {
        let registry = &self.inner.registry;
        let mut older = Vec::new();
        for live in registry.live_of(agent_id, user_id) {
            let view = ractor::call_t!(live.actor, SessionMsg::Inspect, super::CALL_TIMEOUT_MS);
            if view.is_ok_and(|v| v.record.started_at < before) {
                older.push(live);
            }
        }
        if older.is_empty() {
            return Ok(());
        }
        let ids: Vec<uuid::Uuid> = older.iter().map(|l| l.session_id).collect();
        self.forgetting(&ids)?;
        for live in &older {
            if registry.mark_ended(&live.connection_id, live.session_id) {
                let _ = live.actor.cast(SessionMsg::End(EndReason::Cleared));
            }
        }
        for id in &ids {
            if !self.wait_session_stopped(*id).await {
                warn!(session_id = %id, "a session being forgotten did not stop in time");
            }
        }
        ask(&self.inner.store, "store", FORGET_TIMEOUT_MS, |reply| {
            StoreMsg::ForgetCalls {
                sessions: ids,
                reply,
            }
        })
        .await??;
        Ok(())
    }

    /// [`forget_user`](Self::forget_user) on this instance only; `again`
    /// for a forget another instance made (and logged).
    pub(super) async fn forget_here(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
        again: bool,
    ) -> Result<ForgetReport, RecallError> {
        validate_id("user_id", user_id)?;
        if let Some(a) = agent_id {
            validate_id("agent_id", a)?;
        }
        let agents = match agent_id {
            Some(a) => [a.to_string()].into(),
            None => self.inner.registry.agents_of(user_id),
        };
        // Their live calls are not reflected on: the supervisor hears of
        // them before they end (the seed's tracker would have summarized
        // them, sending a forgotten user's words to the summarizer). So are
        // the ones a late turn is reopening, which end as soon as they open.
        let live: Vec<uuid::Uuid> = agents
            .iter()
            .flat_map(|a| {
                let registry = &self.inner.registry;
                let live = registry
                    .live_of(a, user_id)
                    .into_iter()
                    .map(|l| l.session_id);
                live.chain(registry.opening_sessions_of(a, user_id))
            })
            .collect();
        if !live.is_empty() {
            // Before they end: their last writes are dropped, and what of
            // them is stored goes with the forget, even where another
            // instance removed their records first.
            self.forgetting(&live)?;
        }
        let mut ended = Vec::new();
        for agent in &agents {
            ended.extend(self.clear_context(agent, user_id)?);
        }
        // Their last writes reach the Store before the forget does; any
        // that come later are dropped by the Store, which remembers what it
        // forgot.
        for id in ended {
            if !self.wait_session_stopped(id).await {
                warn!(session_id = %id, "a session being forgotten did not stop in time");
            }
        }
        let report = ask(&self.inner.store, "store", FORGET_TIMEOUT_MS, |reply| {
            StoreMsg::Forget {
                user_id: user_id.to_string(),
                agent_id: agent_id.map(str::to_string),
                sessions: live,
                again,
                reply,
            }
        })
        .await??;
        // Nothing of theirs stays in memory either.
        self.inner.source_cache.remove_user(user_id, agent_id);
        // Messages' vectors are held by their text, the user's words:
        // every one goes (they are remade on the next read).
        self.inner.query_vectors.clear();
        self.inner.live_topics.remove_user(user_id, agent_id);
        self.inner.registry.forget_ended(user_id, agent_id);
        // The forget itself is done; a block that could not be rebuilt now
        // is rebuilt at the watchdog's next run (the old one is deleted).
        if let Err(e) = self.refresh_background_context().await {
            warn!(error = %e, "background context not rebuilt after a forget");
        }
        info!(
            user_id,
            agent_id,
            sessions = report.sessions,
            summaries = report.session_summaries
                + report.daily_summaries
                + report.weekly_summaries
                + report.topic_summaries,
            facts = report.facts,
            "forgot a user"
        );
        Ok(report)
    }
}
