//! Summaries (and a replay's new versions of them), memory blocks and the
//! per-agent bookkeeping of the background context.

use super::*;

impl Trees {
    pub fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError> {
        let Some(key) = self.summary_index.get(id.as_bytes())? else {
            return Ok(None);
        };
        self.get(&self.summaries, keys::TREE_SUMMARIES, &key)
    }

    /// An agent's summaries of one type, oldest first, ending at or after
    /// `since` when given.
    pub fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let prefix = keys::summaries_prefix(agent_id, kind);
        match since {
            None => self.scan(
                &self.summaries,
                keys::TREE_SUMMARIES,
                self.summaries.scan_prefix(&prefix),
            ),
            Some(t) => {
                let start = keys::summaries_since(agent_id, kind, t);
                let iter = self.summaries.range(start..).take_while(|r| {
                    r.as_ref()
                        .map(|(k, _)| k.starts_with(&prefix))
                        .unwrap_or(true)
                });
                self.scan(&self.summaries, keys::TREE_SUMMARIES, iter)
            }
        }
    }

    /// The agent's blocks (agent-wide: the operator's, and the watchdog's
    /// `background_context`).
    pub fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError> {
        let iter = self
            .blocks
            .scan_prefix(keys::blocks_prefix(agent_id))
            .filter(|r| {
                r.as_ref()
                    .map(|(k, _)| keys::is_agent_block(agent_id, k))
                    .unwrap_or(true)
            });
        self.scan(&self.blocks, keys::TREE_BLOCKS, iter)
    }

    /// The blocks reflections drew from one user's conversations.
    pub fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError> {
        let blocks: Vec<MemoryBlock> = self.scan(
            &self.blocks,
            keys::TREE_BLOCKS,
            self.blocks
                .scan_prefix(keys::blocks_prefix(agent_id))
                .filter(|r| {
                    r.as_ref()
                        .map(|(k, _)| !keys::is_agent_block(agent_id, k))
                        .unwrap_or(true)
                }),
        )?;
        Ok(blocks
            .into_iter()
            .filter(|b| b.source_user_id.as_deref() == Some(user_id))
            .collect())
    }

    pub fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError> {
        self.get(
            &self.blocks,
            keys::TREE_BLOCKS,
            &keys::block(agent_id, label),
        )
    }

    pub fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError> {
        Ok(self
            .get(&self.agents, keys::TREE_AGENTS, keys::agent(agent_id))?
            .unwrap_or_default())
    }

    pub fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError> {
        let mut out = Vec::new();
        for item in self.agents.iter() {
            let (k, v) = item?;
            let Ok(id) = String::from_utf8(k.to_vec()) else {
                warn!(key = ?k, "skipping agent record with a non-utf8 id");
                continue;
            };
            if let Some(meta) = self.decode(keys::TREE_AGENTS, &k, &v) {
                out.push((id, meta));
            }
        }
        Ok(out)
    }
    /// An agent's newest current summary of `kind` (by period end).
    pub fn latest_summary(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Option<ConversationSummary>, StoreError> {
        for item in self
            .summaries
            .scan_prefix(keys::summaries_prefix(agent_id, kind))
            .rev()
        {
            let (k, v) = item?;
            if let Some(s) = self.decode::<ConversationSummary>(keys::TREE_SUMMARIES, &k, &v) {
                if s.is_current() {
                    return Ok(Some(s));
                }
            }
        }
        Ok(None)
    }

    pub fn put_block(&self, block: &MemoryBlock) -> Result<(), StoreError> {
        self.blocks
            .insert(keys::block(&block.agent_id, block.label), encode(block)?)?;
        Ok(())
    }

    /// [`SummaryStore::reclaim_agent_block`]: one batch of the blocks tree.
    pub fn reclaim_agent_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        let agent_key = keys::block(agent_id, label);
        let user_key = keys::user_block(agent_id, label, user_id);
        let Some(agent_wide) =
            self.get::<MemoryBlock>(&self.blocks, keys::TREE_BLOCKS, &agent_key)?
        else {
            return Ok(false);
        };
        let theirs = self.get::<MemoryBlock>(&self.blocks, keys::TREE_BLOCKS, &user_key)?;
        let record = super::super::blocks::reclaimed(&agent_wide, theirs.as_ref(), user_id);
        let mut batch = ::sled::Batch::default();
        if let Some(r) = &record {
            batch.insert(user_key, encode(r)?);
        }
        batch.remove(agent_key);
        self.blocks.apply_batch(batch)?;
        Ok(record.is_some())
    }

    pub fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), StoreError> {
        let mut meta = self.agent(agent_id)?;
        meta.persistent_context = lines;
        meta.summary_version += 1;
        self.agents.insert(keys::agent(agent_id), encode(&meta)?)?;
        Ok(())
    }

    pub fn mark_context_built(
        &self,
        agent_id: &str,
        version: u64,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let mut meta = self.agent(agent_id)?;
        meta.context_version = version;
        meta.context_expires_at = expires_at;
        self.agents.insert(keys::agent(agent_id), encode(&meta)?)?;
        Ok(())
    }

    /// Stores `new` (whose `supersedes` names the current version of the
    /// same session's summary) and marks the old one superseded, in one
    /// transaction, with the facts of `facts` the user has not got and did
    /// not delete.
    pub fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError> {
        if self.summary_index.contains_key(new.summary_id.as_bytes())? {
            return Ok(Revision::default());
        }
        let Some(old_id) = new.supersedes else {
            return Err(StoreError::InvalidRevision(
                new.summary_id,
                "it names no version it replaces",
            ));
        };
        let Some(mut old) = self.summary(old_id)? else {
            return Err(StoreError::SummaryNotFound(old_id));
        };
        let why = revision_refused(&old, new);
        if let Some(why) = why {
            return Err(StoreError::InvalidRevision(old_id, why));
        }
        // Facts are about the user, not about one version of a summary:
        // the new reflection adds what the user has not got yet, never one
        // they deleted, and takes nothing away (the same fact may rest on
        // other sessions too). What it adds on a one-valued subject takes
        // its place in that subject's history by when the call was.
        let changes = self.plan_facts(facts, new.period_start, true)?;

        old.superseded_by = Some(new.summary_id);
        let old_row = (keys::summary_of(&old), encode(&old)?);
        let new_key = keys::summary_of(new);
        let mut meta = self.agent(&new.agent_id)?;
        meta.summary_version += 1;
        let added_rows = Self::fact_rows(changes.added.iter().chain(&changes.updated))?;
        // The Rollup actor revises the day and week, moves the session to
        // the new version in its topic, and makes vectors.
        let inbox_rows = self.inbox_rows(new, &changes.added);
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.facts,
            &self.fact_index,
            &self.rollup_inbox,
        )
            .transaction(
                |(summaries, index, agents, facts_tree, fact_index, inbox)| {
                    summaries.insert(old_row.0.as_slice(), old_row.1.as_slice())?;
                    summaries.insert(new_key.as_slice(), tx_encode(new)?)?;
                    index.insert(new.summary_id.as_bytes(), new_key.as_slice())?;
                    agents.insert(keys::agent(&new.agent_id), tx_encode(&meta)?)?;
                    for (k, v, id) in &added_rows {
                        facts_tree.insert(k.as_slice(), v.as_slice())?;
                        fact_index.insert(id.as_bytes(), k.as_slice())?;
                    }
                    for row in &inbox_rows {
                        inbox.insert(&row[..], new.agent_id.as_bytes())?;
                    }
                    Ok::<_, ConflictableTransactionError<StoreError>>(())
                },
            )?;
        self.note_summaries([&old_row.0, &new_key]);
        self.note_facts(added_rows.iter().map(|(k, _, _)| k));
        Ok(Revision {
            stored: true,
            old: Some(old),
            facts_added: changes.added,
            facts_moved: changes.updated,
        })
    }

    /// Records that a summary is what its inputs derive today (a replay
    /// found the same content): the next replay skips it.
    pub fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError> {
        let Some(mut s) = self.summary(summary_id)? else {
            return Err(StoreError::SummaryNotFound(summary_id));
        };
        s.derivation = Some(derivation.to_string());
        let key = keys::summary_of(&s);
        self.summaries.insert(key.as_slice(), encode(&s)?)?;
        self.note_summaries([key]);
        Ok(())
    }
}
