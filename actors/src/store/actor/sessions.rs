//! The Store actor's handling of sessions and their turns: opening,
//! appending, ending (and ending again what could not be written), closing
//! orphans, and their reads.

use super::*;

impl StoreState {
    /// Handles a message about sessions and their turns (`handle` routes only
    /// those here).
    pub(super) async fn handle_sessions(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::OpenSession(rec) => match t.open_session(&rec).await {
                Ok(()) => self.wrote(myself).await,
                Err(e) => self.failed("open_session", &e),
            },
            StoreMsg::AppendTurn {
                session_id,
                seq,
                value,
            } => {
                let res = t.append_turn(session_id, seq, &value).await;
                self.backlog.handled();
                match res {
                    Ok(()) => {
                        self.stats.turns_written += 1;
                        self.wrote(myself).await;
                    }
                    Err(e) => self.failed("append_turn", &e),
                }
            }
            StoreMsg::EndSession(rec) => {
                let at = rec.ended_at.unwrap_or(rec.started_at);
                let res = t.end_session(&rec, at).await;
                self.generations
                    .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                match res {
                    Ok(()) => {
                        index_ended(&self.search, &t, &rec).await;
                        self.wrote(myself).await
                    }
                    Err(e) => {
                        // Not lost: written again until it is (a caller
                        // asking for durability meanwhile is told it is
                        // not written yet).
                        self.stats.write_errors += 1;
                        error!(error = %e, session_id = %rec.session_id, "a session's end could not be written; trying again");
                        self.end_later(myself, rec);
                    }
                }
            }
            StoreMsg::RetryEnds => self.retry_ends(myself).await,
            StoreMsg::CloseOrphan {
                session_id,
                reason,
                at,
                reply,
            } => {
                let res = t.close_orphan(session_id, reason, at).await;
                if let Ok(Some(rec)) = &res {
                    self.generations
                        .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                    index_ended(&self.search, &t, rec).await;
                }
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::LoadSession { session_id, reply } => {
                self.read_off(reply, move |b| {
                    Box::pin(async move { b.load_session(session_id).await })
                });
            }
            StoreMsg::GetSession(id, reply) => {
                let _ = reply.send(t.session(id).await);
            }
            StoreMsg::ListSessions(agent, reply) => self.read_off(reply, move |b| {
                Box::pin(async move { b.sessions(agent.as_deref()).await })
            }),
            StoreMsg::ListOpenSessions(reply) => {
                self.read_off(reply, |b| Box::pin(async move { b.open_sessions().await }))
            }
            StoreMsg::PageSessions { listing, reply } => self.read_off(reply, move |b| {
                Box::pin(async move { b.list_sessions(&listing).await })
            }),
            StoreMsg::GetTurns(id, reply) => {
                self.read_off(reply, move |b| Box::pin(async move { b.turns(id).await }))
            }
            StoreMsg::GetNumberedTurns(id, reply) => self.read_off(reply, move |b| {
                Box::pin(async move { b.numbered_turns(id).await })
            }),
            _ => error!("a message reached the handler of another kind"),
        }
    }

    /// Writes again the ends that could not be written (but those of
    /// sessions forgotten meanwhile), in order, until one fails again (the
    /// rest then wait with it); re-arms with a longer wait while any is
    /// left.
    async fn retry_ends(&mut self, myself: &ActorRef<StoreMsg>) {
        let t = self.backend.clone();
        let waiting = std::mem::take(&mut self.unended);
        for rec in waiting {
            if self.forgotten.contains(&rec.session_id) {
                continue;
            }
            if !self.unended.is_empty() {
                // The store is still out of reach: the rest wait too.
                self.unended.push(rec);
                continue;
            }
            let at = rec.ended_at.unwrap_or(rec.started_at);
            match t.end_session(&rec, at).await {
                Ok(()) => {
                    tracing::info!(session_id = %rec.session_id, "a session's end was written once the store could be reached");
                    self.generations
                        .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                    index_ended(&self.search, &t, &rec).await;
                    self.wrote(myself).await;
                }
                Err(_) => self.unended.push(rec),
            }
        }
        if self.unended.is_empty() {
            self.retry_ends_after = RETRY_ENDS_FIRST;
        } else {
            warn!(
                sessions = self.unended.len(),
                "sessions' ends still cannot be written; trying again"
            );
            self.retry_ends_after = (self.retry_ends_after * 2).min(RETRY_ENDS_MAX);
            myself.send_after(self.retry_ends_after, || StoreMsg::RetryEnds);
        }
    }
}
