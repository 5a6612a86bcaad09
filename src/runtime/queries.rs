//! Reading and changing what is stored: sessions, turns, summaries,
//! blocks, facts and dead letters.

use super::*;

impl Runtime {
    pub async fn session(&self, session_id: Uuid) -> Result<Option<SessionRecord>, RecallError> {
        self.store(|r| StoreMsg::GetSession(session_id, r)).await
    }

    /// Stored sessions, oldest first, of one agent or of all.
    pub async fn sessions(
        &self,
        agent_id: Option<&str>,
    ) -> Result<Vec<SessionRecord>, RecallError> {
        self.store(|r| StoreMsg::ListSessions(agent_id.map(str::to_string), r))
            .await
    }

    /// A session's stored turns, in order.
    pub async fn turns(&self, session_id: Uuid) -> Result<Vec<ConversationTurn>, RecallError> {
        self.store(|r| StoreMsg::GetTurns(session_id, r)).await
    }

    /// An agent's summaries of one type, oldest first.
    pub async fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Vec<ConversationSummary>, RecallError> {
        self.store(|reply| StoreMsg::ListSummaries {
            agent_id: agent_id.to_string(),
            kind,
            since: None,
            reply,
        })
        .await
    }

    /// An agent's summaries matching `query`, newest first (by period
    /// end), at most `query.limit`: the store reads them in that order and
    /// stops there.
    pub async fn find_summaries(
        &self,
        agent_id: &str,
        query: &SummaryQuery,
    ) -> Result<Vec<ConversationSummary>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        if let Some(u) = &query.user_id {
            recall_actors::model::validate_id("user_id", u)?;
        }
        let limit = listing_limit(query.limit)?;
        let before = match query.before {
            None => None,
            // Another agent's summary names no place in this listing.
            Some(id) => match self.summary(id).await? {
                Some(s) if s.agent_id == agent_id => Some((s.period_end, s.summary_id)),
                _ => return Err(StoreError::SummaryNotFound(id).into()),
            },
        };
        let listing = SummaryListing {
            kind: query.kind,
            user_id: query.user_id.clone(),
            since: query.since,
            until: query.until,
            before,
            limit,
        };
        self.store(|reply| StoreMsg::PageSummaries {
            agent_id: agent_id.to_string(),
            listing,
            reply,
        })
        .await
    }

    /// Stored sessions matching `query`, newest first (by start time), at
    /// most `query.limit`: the store reads them in that order and stops
    /// there.
    pub async fn list_sessions(
        &self,
        query: &SessionQuery,
    ) -> Result<Vec<SessionRecord>, RecallError> {
        for a in query.agents.iter().flatten() {
            recall_actors::model::validate_id("agent_id", a)?;
        }
        if let Some(u) = &query.user_id {
            recall_actors::model::validate_id("user_id", u)?;
        }
        let limit = listing_limit(query.limit)?;
        let before = match query.before {
            None => None,
            // A session of an agent outside the listing names no place in
            // it (and says nothing of that agent's sessions).
            Some(id) => match self.session(id).await? {
                Some(s)
                    if query
                        .agents
                        .as_ref()
                        .is_none_or(|a| a.contains(&s.agent_id)) =>
                {
                    Some((s.started_at, s.session_id))
                }
                // (a cursor naming nothing the listing holds: not found, as an
                // id in a path would be)
                _ => return Err(StoreError::SessionNotFound(id).into()),
            },
        };
        let listing = SessionListing {
            agents: query.agents.clone(),
            user_id: query.user_id.clone(),
            live: query.live,
            before,
            limit,
        };
        self.store(|reply| StoreMsg::PageSessions { listing, reply })
            .await
    }

    pub async fn summary(
        &self,
        summary_id: Uuid,
    ) -> Result<Option<ConversationSummary>, RecallError> {
        self.store(|r| StoreMsg::GetSummary(summary_id, r)).await
    }

    /// The agent's stored blocks: those its operator set
    /// ([`Runtime::set_block`]), and `background_context`, which holds only
    /// the agent's persistent context. A reflection never writes them: the
    /// `relationship` and `self_perception` it draws from a user's call are
    /// that user's (see [`Runtime::user_block`] for what one user's context
    /// shows).
    /// The agents the store holds a record of, by id.
    pub async fn agent_ids(&self) -> Result<Vec<String>, RecallError> {
        let agents = self.store(StoreMsg::ListAgents).await?;
        Ok(agents.into_iter().map(|(id, _)| id).collect())
    }

    pub async fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, RecallError> {
        self.store(|r| StoreMsg::GetBlocks(agent_id.to_string(), r))
            .await
    }

    /// One of the agent's stored blocks (see [`Runtime::blocks`]).
    pub async fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, RecallError> {
        Ok(self
            .blocks(agent_id)
            .await?
            .into_iter()
            .find(|b| b.label == label))
    }

    /// A block as one user's context shows it. `background_context` is
    /// rendered now from the user's own summary hierarchy (the agent's
    /// stored block holds only its persistent context); another label is
    /// the agent's own value followed by what this user's conversations
    /// added to it ([`recall_actors::assembly::user_view`]), either alone
    /// when there is one, never anything drawn from another user's. `None`
    /// when there is nothing.
    pub async fn user_block(
        &self,
        agent_id: &str,
        user_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        if label == BlockLabel::BackgroundContext {
            let value = self.user_background_context(agent_id, user_id).await?;
            return Ok((!value.is_empty()).then(|| MemoryBlock {
                agent_id: agent_id.to_string(),
                label,
                value,
                limit: self.inner.settings.blocks.limit(label),
                updated_at: self.inner.clock.now(),
                source_user_id: Some(user_id.to_string()),
                written_by: Some(BlockWriter::Watchdog),
            }));
        }
        let theirs = self
            .store(|reply| StoreMsg::GetUserBlocks {
                agent_id: agent_id.to_string(),
                user_id: user_id.to_string(),
                reply,
            })
            .await?;
        let agents = self.blocks(agent_id).await?;
        Ok(recall_actors::assembly::user_view(&agents, &theirs)
            .into_iter()
            .find(|b| b.label == label))
    }

    /// Writes a block the agent owns (`persona`, `human`, `self_perception`,
    /// `relationship`): every user's context shows it, followed, for
    /// `relationship` and `self_perception`, by what that user's calls
    /// added. Only this writes the agent's blocks (reflections write their
    /// user's). Over its limit is an error and nothing is written.
    pub async fn set_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        value: &str,
    ) -> Result<MemoryBlock, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        if label == BlockLabel::BackgroundContext {
            return Err(RecallError::ManagedBlock(label));
        }
        let limit = self.inner.settings.blocks.limit(label);
        let len = value.chars().count();
        if len > limit {
            return Err(RecallError::BlockTooLong { label, len, limit });
        }
        let block = MemoryBlock {
            agent_id: agent_id.to_string(),
            label,
            value: value.to_string(),
            limit,
            updated_at: self.inner.clock.now(),
            source_user_id: None,
            written_by: Some(BlockWriter::Operator),
        };
        let b = block.clone();
        self.store(|reply| StoreMsg::PutBlock { block: b, reply })
            .await?;
        Ok(block)
    }

    /// Replaces the agent's persistent context lines (always shown in
    /// `background_context`); the watchdog picks them up on its next tick.
    pub async fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        let limit = self.inner.settings.blocks.background_context_limit;
        for line in &lines {
            if line.chars().count() > limit {
                return Err(InputError::TooLong {
                    field: "persistent context line",
                    len: line.chars().count(),
                    max: limit,
                }
                .into());
            }
            if line.contains('\n') {
                return Err(InputError::Invalid {
                    field: "persistent context line",
                    reason: format!("{:?} spans several lines", truncate_chars(line, 40)),
                }
                .into());
            }
        }
        self.store(|reply| StoreMsg::SetPersistentContext {
            agent_id: agent_id.to_string(),
            lines,
            reply,
        })
        .await?;
        Ok(())
    }

    /// Every dead letter, oldest first (a read of them all; an agent's are
    /// listed a page at a time by [`Runtime::agent_dead_letters`]).
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, RecallError> {
        self.store(StoreMsg::ListDeadLetters).await
    }

    /// An agent's dead letters, oldest first, at most `limit` (1 to
    /// [`LIST_MAX_LIMIT`]; [`LIST_DEFAULT_LIMIT`] when `None`), after the
    /// agent's dead letter of session `after` when given (the next page).
    /// Retrying one takes it off the list, so the next are listed next.
    pub async fn agent_dead_letters(
        &self,
        agent_id: &str,
        after: Option<uuid::Uuid>,
        limit: Option<usize>,
    ) -> Result<Vec<DeadLetter>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        let limit = listing_limit(limit)?;
        let after = match after {
            None => None,
            // Another agent's letter names no place in this listing.
            Some(id) => match self.dead_letter(id).await? {
                Some(d) if d.agent_id == agent_id => Some((d.failed_at, d.session_id)),
                _ => return Err(StoreError::DeadLetterNotFound(id).into()),
            },
        };
        self.store(|reply| StoreMsg::AgentDeadLetters {
            agent_id: agent_id.to_string(),
            after,
            limit,
            reply,
        })
        .await
    }

    /// How many dead letters are stored, without reading them (the
    /// `recall_dead_letters` gauge).
    pub async fn dead_letter_count(&self) -> Result<u64, RecallError> {
        self.store(StoreMsg::CountDeadLetters).await
    }

    /// The facts `user_id` may see of an agent's: their own and every
    /// user's shared ones, oldest first. Values a later call replaced are
    /// listed too, as history: their `superseded_by` names the fact that
    /// replaced them ([`FactRecord::is_current`] tells them apart).
    pub async fn facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        self.store(|reply| StoreMsg::ListFacts {
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            reply,
        })
        .await
    }

    pub async fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, RecallError> {
        self.store(|r| StoreMsg::GetFact(fact_id, r)).await
    }

    /// Shares a fact with the agent's other users, or makes it private
    /// again; only the user it belongs to may.
    pub async fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, RecallError> {
        recall_actors::model::validate_id("user_id", user_id)?;
        self.store(|reply| StoreMsg::SetFactVisibility {
            fact_id,
            user_id: user_id.to_string(),
            visibility,
            reply,
        })
        .await
    }

    /// Deletes a fact; only the user it belongs to may. If it was the
    /// current value of its subject, the value it replaced is current
    /// again.
    pub async fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<FactRecord, RecallError> {
        recall_actors::model::validate_id("user_id", user_id)?;
        self.store(|reply| StoreMsg::DeleteFact {
            fact_id,
            user_id: user_id.to_string(),
            reply,
        })
        .await
    }

    /// The dead letter of a session, if its reflection failed for good.
    pub async fn dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, RecallError> {
        self.store(|r| StoreMsg::GetDeadLetter(session_id, r)).await
    }

    /// Moves a dead letter back into the queue and reflects on it again.
    pub async fn retry_dead_letter(&self, session_id: Uuid) -> Result<(), RecallError> {
        let at = self.inner.clock.now();
        let job = self
            .store(|reply| StoreMsg::Requeue {
                session_id,
                at,
                reply,
            })
            .await?;
        self.inner
            .supervisor
            .cast(SupervisorMsg::Enqueue(job))
            .map_err(unavailable("supervisor"))
    }
}
