//! Reflection jobs and dead letters: the durable queue, what a finished
//! reflection stores (its summary, blocks and facts, and the rollup
//! inbox rows they need) and the moves between queue and dead letters.

use super::*;

impl Trees {
    pub fn queued(&self) -> Result<Vec<ReflectionJob>, StoreError> {
        let mut jobs: Vec<ReflectionJob> =
            self.scan(&self.queue, keys::TREE_QUEUE, self.queue.iter())?;
        jobs.sort_by_key(|j| (j.enqueued_at, j.session_id));
        Ok(jobs)
    }

    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let mut out: Vec<DeadLetter> = self.scan(&self.dead, keys::TREE_DEAD, self.dead.iter())?;
        out.sort_by_key(|d| (d.failed_at, d.session_id));
        Ok(out)
    }

    /// Moves a job to the dead letters, unless the session has its summary
    /// by now (a replay made it while the reflection was backing off).
    pub fn dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let summarized = self
            .summary_index
            .contains_key(letter.session_id.as_bytes())?;
        (&self.queue, &self.dead).transaction(|(queue, dead)| {
            let key = keys::session(letter.session_id);
            queue.remove(&key)?;
            if !summarized {
                dead.insert(&key, tx_encode(letter)?)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    pub fn requeue(
        &self,
        session_id: Uuid,
        at: DateTime<Utc>,
    ) -> Result<ReflectionJob, StoreError> {
        let key = keys::session(session_id);
        let letter: DeadLetter = self
            .dead
            .get(key)?
            .and_then(|v| self.decode(keys::TREE_DEAD, &key, &v))
            .ok_or(StoreError::DeadLetterNotFound(session_id))?;
        let job = ReflectionJob {
            session_id,
            agent_id: letter.agent_id,
            enqueued_at: at,
        };
        (&self.queue, &self.dead).transaction(|(queue, dead)| {
            dead.remove(&key)?;
            queue.insert(&key, tx_encode(&job)?)?;
            Ok(())
        })?;
        Ok(job)
    }

    pub fn store_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<Reflected, StoreError> {
        // Facts are planned against the user's before the transaction
        // (sled transactions cannot scan); the Store actor is the only
        // writer, so nothing changes in between.
        let changes = self.plan_facts(facts, summary.period_start, false)?;
        let id = summary.summary_id;
        let skey = keys::summary_of(summary);
        let mut meta = self.agent(&summary.agent_id)?;
        meta.summary_version += 1;
        let fact_rows = Self::fact_rows(changes.added.iter().chain(&changes.updated))?;
        let shared = changes
            .added
            .iter()
            .chain(&changes.updated)
            .any(|f| f.visibility == Visibility::Shared);
        // The Rollup actor takes new session summaries and facts in from
        // its inbox (topics, late rollups, vectors for search).
        let agent_key = summary.agent_id.as_bytes();
        let inbox_rows = self.inbox_rows(summary, &changes.added);
        let stored = (
            &self.summaries,
            &self.summary_index,
            &self.queue,
            &self.dead,
            &self.agents,
            &self.blocks,
            &self.facts,
            &self.fact_index,
            &self.rollup_inbox,
        )
            .transaction(
                |(
                    summaries,
                    index,
                    queue,
                    dead,
                    agents,
                    blocks_tree,
                    facts_tree,
                    fact_index,
                    inbox,
                )| {
                    let key = keys::session(id);
                    queue.remove(&key)?;
                    dead.remove(&key)?;
                    if index.get(id.as_bytes())?.is_some() {
                        return Ok(false);
                    }
                    summaries.insert(skey.as_slice(), tx_encode(summary)?)?;
                    index.insert(id.as_bytes(), skey.as_slice())?;
                    agents.insert(keys::agent(&summary.agent_id), tx_encode(&meta)?)?;
                    // Drawn from this user's conversation: theirs, never the
                    // agent's (which only its operator writes).
                    for b in blocks {
                        let key = keys::user_block(&b.agent_id, b.label, &summary.user_id);
                        blocks_tree.insert(key, tx_encode(b)?)?;
                    }
                    for (key, value, id) in &fact_rows {
                        facts_tree.insert(key.as_slice(), value.as_slice())?;
                        fact_index.insert(id.as_bytes(), key.as_slice())?;
                    }
                    for key in &inbox_rows {
                        inbox.insert(key.as_slice(), agent_key)?;
                    }
                    Ok(true)
                },
            )?;
        if stored {
            self.note_summaries([skey]);
            self.note_facts(fact_rows.iter().map(|(k, _, _)| k));
        }
        Ok(Reflected { stored, shared })
    }

    pub fn drop_job(&self, session_id: Uuid) -> Result<(), StoreError> {
        self.queue.remove(keys::session(session_id))?;
        Ok(())
    }
}

impl Trees {
    /// [`Trees::store_reflection`]: whether the summary was new.
    pub fn complete_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<bool, StoreError> {
        Ok(self.store_reflection(summary, blocks, facts)?.stored)
    }

    /// The inbox rows of a new session summary and its new facts (none with
    /// rollups off: nothing would take them out).
    pub(super) fn inbox_rows(
        &self,
        summary: &ConversationSummary,
        facts: &[FactRecord],
    ) -> Vec<[u8; 25]> {
        if !self.fill_inbox {
            return Vec::new();
        }
        std::iter::once(keys::inbox(
            summary.period_start,
            keys::INBOX_SUMMARY,
            summary.summary_id,
        ))
        .chain(
            facts
                .iter()
                .map(|f| keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id)),
        )
        .collect()
    }
}
