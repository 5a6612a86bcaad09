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
        let row = keys::agent_dead_letter(letter);
        let added = (&self.queue, &self.dead, &self.agent_dead_letters).transaction(
            |(queue, dead, by_agent)| {
                let key = keys::session(letter.session_id);
                queue.remove(&key)?;
                if summarized {
                    return Ok(false);
                }
                let old = dead.insert(&key, tx_encode(letter)?)?;
                // A letter written again (its failure time moved) keeps
                // one index row.
                if let Some(old) = old.as_deref().and_then(letter_of) {
                    by_agent.remove(keys::agent_dead_letter(&old))?;
                }
                by_agent.insert(row.as_slice(), &[])?;
                Ok(old.is_none())
            },
        )?;
        // Counted from what the committed run found (a run that conflicted
        // and ran again counts nothing).
        self.dead_letters_moved(u64::from(added), 0);
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
        let row = keys::agent_dead_letter(&letter);
        let job = ReflectionJob {
            session_id,
            agent_id: letter.agent_id,
            enqueued_at: at,
        };
        let removed = (&self.queue, &self.dead, &self.agent_dead_letters).transaction(
            |(queue, dead, by_agent)| {
                let gone = dead.remove(&key)?;
                by_agent.remove(row.as_slice())?;
                queue.insert(&key, tx_encode(&job)?)?;
                Ok(gone.is_some())
            },
        )?;
        self.dead_letters_moved(0, u64::from(removed));
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
        let (stored, undead) = (
            &self.summaries,
            &self.summary_index,
            &self.queue,
            &self.dead,
            &self.agent_dead_letters,
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
                    dead_by_agent,
                    agents,
                    blocks_tree,
                    facts_tree,
                    fact_index,
                    inbox,
                )| {
                    let key = keys::session(id);
                    queue.remove(&key)?;
                    let undead = dead.remove(&key)?;
                    if let Some(letter) = undead.as_deref().and_then(letter_of) {
                        dead_by_agent.remove(keys::agent_dead_letter(&letter))?;
                    }
                    let undead = undead.is_some();
                    if index.get(id.as_bytes())?.is_some() {
                        return Ok((false, undead));
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
                    Ok((true, undead))
                },
            )?;
        self.dead_letters_moved(0, u64::from(undead));
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

/// A stored dead letter, decoded inside a transaction (one that does not
/// decode has no index row to take with it).
fn letter_of(bytes: &[u8]) -> Option<DeadLetter> {
    serde_json::from_slice(bytes).ok()
}

impl Trees {
    /// Moves the count of dead letters by what a committed write added and
    /// removed.
    pub(super) fn dead_letters_moved(&self, added: u64, removed: u64) {
        use std::sync::atomic::Ordering;
        if added == removed {
            return;
        }
        let _ = self
            .dead_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some((n + added).saturating_sub(removed))
            });
    }

    /// How many dead letters are stored (no scan: see `dead_count`).
    pub fn dead_letter_count(&self) -> u64 {
        self.dead_count.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Counts the dead letters, once at open.
    pub(super) fn count_dead_letters(&self) -> Result<(), StoreError> {
        let mut n = 0u64;
        for item in self.dead.iter().keys() {
            item?;
            n += 1;
        }
        self.dead_count
            .store(n, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Builds the (agent, failure time) index of dead letters for a data
    /// folder from before it, once.
    pub(super) fn index_dead_letters(&self) -> Result<usize, StoreError> {
        if self.meta.contains_key(keys::AGENT_DEAD_LETTERS_BUILT)? {
            return Ok(0);
        }
        let mut batch = ::sled::Batch::default();
        let mut n = 0;
        for letter in self.scan::<DeadLetter>(&self.dead, keys::TREE_DEAD, self.dead.iter())? {
            batch.insert(keys::agent_dead_letter(&letter), &[]);
            n += 1;
        }
        self.agent_dead_letters.apply_batch(batch)?;
        self.meta.insert(keys::AGENT_DEAD_LETTERS_BUILT, &[1u8])?;
        Ok(n)
    }

    /// A session's dead letter, if its reflection failed for good.
    pub fn find_dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, StoreError> {
        self.get(&self.dead, keys::TREE_DEAD, &keys::session(session_id))
    }

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
