//! Forgetting a user through the runtime: their live calls end first, then
//! the Store removes every record of theirs and every record built from
//! them, and the agents' `background_context` blocks are rebuilt.

use recall_actors::model::validate_id;
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

    /// Forgets here what another instance forgot: an announced user, or
    /// the users held here whom forget log entries cover (their calls,
    /// cached contexts and messages' vectors), when the announcement may
    /// have been missed.
    pub(super) async fn forgot_elsewhere(&self, forgot: super::cluster::Forgot) {
        use super::cluster::Forgot;
        let users: Vec<(String, Option<String>)> = match forgot {
            Forgot::Announced(user_id, agent_id) => vec![(user_id, agent_id)],
            Forgot::Logged(entries) => {
                // Nothing of a message may stay, whoever it was about.
                self.inner.query_vectors.clear();
                let mut held = self.inner.registry.owners();
                held.extend(self.inner.context_cache.owners());
                let mut found: Vec<(String, Option<String>)> = Vec::new();
                for (agent, user) in held {
                    for e in entries.iter().filter(|e| e.covers(&agent, &user)) {
                        found.push((user.clone(), e.agent_id.clone()));
                    }
                }
                found.sort();
                found.dedup();
                found
            }
        };
        for (user_id, agent_id) in users {
            if let Err(e) = self.forget_here(&user_id, agent_id.as_deref(), true).await {
                warn!(user_id, error = %e, "forgetting a user another instance forgot failed");
            }
        }
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
            self.inner
                .store
                .cast(StoreMsg::Forgetting(live.clone()))
                .map_err(unavailable("store"))?;
            self.inner
                .supervisor
                .cast(recall_actors::supervisor::SupervisorMsg::Forgetting(
                    live.clone(),
                ))
                .map_err(unavailable("supervisor"))?;
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
        self.inner.context_cache.remove_user(user_id, agent_id);
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
