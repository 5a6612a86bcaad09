//! The sled backend behind the storage interface: each method runs the
//! [`Trees`] method of its name, inline (sled's reads and writes are local
//! and short; the Store actor runs the scanning reads on the blocking pool).

use async_trait::async_trait;

use super::*;

#[async_trait]
impl SessionStore for Trees {
    async fn open_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        Trees::open_session(self, record)
    }
    async fn append_turn(
        &self,
        session_id: Uuid,
        seq: u32,
        value: &[u8],
    ) -> Result<(), StoreError> {
        Trees::append_turn(self, session_id, seq, value)
    }
    async fn end_session(
        &self,
        record: &SessionRecord,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Trees::end_session(self, record, at)
    }
    async fn session(&self, id: Uuid) -> Result<Option<SessionRecord>, StoreError> {
        Trees::session(self, id)
    }
    async fn turns(&self, id: Uuid) -> Result<Vec<ConversationTurn>, StoreError> {
        Trees::turns(self, id)
    }
    async fn numbered_turns(&self, id: Uuid) -> Result<Vec<(u32, ConversationTurn)>, StoreError> {
        Trees::numbered_turns(self, id)
    }
    async fn turn(&self, id: Uuid, seq: u32) -> Result<Option<ConversationTurn>, StoreError> {
        Trees::turn(self, id, seq)
    }
    async fn sessions(&self, agent_id: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        Trees::sessions(self, agent_id)
    }
    async fn user_sessions(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        Trees::user_sessions(self, agent_id, user_id)
    }
    async fn open_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        Trees::open_sessions(self)
    }
    async fn list_sessions(
        &self,
        listing: &SessionListing,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        Trees::list_sessions(self, listing)
    }
}

#[async_trait]
impl SummaryStore for Trees {
    async fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError> {
        Trees::summary(self, id)
    }
    async fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        Trees::summaries(self, agent_id, kind, since)
    }
    async fn list_summaries(
        &self,
        agent_id: &str,
        listing: &SummaryListing,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        Trees::list_summaries(self, agent_id, listing)
    }
    async fn latest_summary(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Option<ConversationSummary>, StoreError> {
        Trees::latest_summary(self, agent_id, kind)
    }
    async fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError> {
        Trees::revise_session(self, new, facts)
    }
    async fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError> {
        Trees::stamp_derivation(self, summary_id, derivation)
    }
    async fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError> {
        Trees::blocks(self, agent_id)
    }
    async fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError> {
        Trees::user_blocks(self, agent_id, user_id)
    }
    async fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError> {
        Trees::block(self, agent_id, label)
    }
    async fn put_block(&self, block: &MemoryBlock) -> Result<(), StoreError> {
        Trees::put_block(self, block)
    }
    async fn reclaim_agent_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        Trees::reclaim_agent_block(self, agent_id, label, user_id)
    }
    async fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError> {
        Trees::agent(self, agent_id)
    }
    async fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError> {
        Trees::agents(self)
    }
    async fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), StoreError> {
        Trees::set_persistent_context(self, agent_id, lines)
    }
    async fn mark_context_built(
        &self,
        agent_id: &str,
        version: u64,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        Trees::mark_context_built(self, agent_id, version, expires_at)
    }
}

#[async_trait]
impl FactStore for Trees {
    async fn user_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        Trees::user_facts(self, agent_id, user_id)
    }
    async fn visible_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        Trees::visible_facts(self, agent_id, user_id)
    }
    async fn agent_facts(&self, agent_id: &str) -> Result<Vec<FactRecord>, StoreError> {
        Trees::agent_facts(self, agent_id)
    }
    async fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, StoreError> {
        Trees::fact(self, fact_id)
    }
    async fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, StoreError> {
        Trees::set_fact_visibility(self, fact_id, user_id, visibility)
    }
    async fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<(FactRecord, Vec<FactRecord>), StoreError> {
        Trees::delete_fact(self, fact_id, user_id)
    }
    async fn put_stated_facts(
        &self,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
    ) -> Result<FactChanges, StoreError> {
        Trees::put_stated_facts(self, facts, stated_at)
    }
}

#[async_trait]
impl JobStore for Trees {
    async fn queued(&self) -> Result<Vec<ReflectionJob>, StoreError> {
        Trees::queued(self)
    }
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        Trees::dead_letters(self)
    }
    async fn agent_dead_letters(
        &self,
        agent_id: &str,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Trees::agent_dead_letters(self, agent_id, after, limit)
    }
    async fn find_dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, StoreError> {
        Trees::find_dead_letter(self, session_id)
    }
    async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        Ok(Trees::dead_letter_count(self))
    }
    async fn store_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<Reflected, StoreError> {
        Trees::store_reflection(self, summary, blocks, facts)
    }
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        Trees::dead_letter(self, letter)
    }
    async fn requeue(
        &self,
        session_id: Uuid,
        at: DateTime<Utc>,
    ) -> Result<ReflectionJob, StoreError> {
        Trees::requeue(self, session_id, at)
    }
    async fn drop_job(&self, session_id: Uuid) -> Result<(), StoreError> {
        Trees::drop_job(self, session_id)
    }
}

#[async_trait]
impl HierarchyStore for Trees {
    async fn put_rollup(
        &self,
        summary: &ConversationSummary,
        supersedes: Option<Uuid>,
        vector: Option<&StoredVector>,
    ) -> Result<bool, StoreError> {
        Trees::put_rollup(self, summary, supersedes, vector)
    }
    async fn put_rollups(&self, batch: &RollupBatch) -> Result<Vec<bool>, StoreError> {
        Trees::put_rollups(self, batch)
    }
    async fn rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
    ) -> Result<Option<NaiveDate>, StoreError> {
        Trees::rollup_cursor(self, agent_id, level)
    }
    async fn set_rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
        period: NaiveDate,
    ) -> Result<(), StoreError> {
        Trees::set_rollup_cursor(self, agent_id, level, period)
    }
    async fn backfill_inbox(&self) -> Result<usize, StoreError> {
        Trees::backfill_inbox(self)
    }
    async fn inbox(
        &self,
        after: Option<&InboxKey>,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        Trees::inbox(self, after, limit)
    }
    async fn inbox_done(&self, done: &[InboxKey]) -> Result<(), StoreError> {
        Trees::inbox_done(self, done)
    }
    async fn topics(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
    ) -> Result<Vec<Topic>, StoreError> {
        Trees::topics(self, agent_id, user_id)
    }
    async fn put_topic(
        &self,
        topic: &Topic,
        summary: &ConversationSummary,
        vector: Option<&StoredVector>,
    ) -> Result<(), StoreError> {
        Trees::put_topic(self, topic, summary, vector)
    }
    async fn put_vectors(&self, items: &[(Uuid, StoredVector)]) -> Result<Vec<Uuid>, StoreError> {
        Trees::put_vectors(self, items)
    }
    async fn put_turn_vectors(
        &self,
        session_id: Uuid,
        items: &[(u32, StoredVector)],
    ) -> Result<Vec<u32>, StoreError> {
        Trees::put_turn_vectors(self, session_id, items)
    }
    async fn vector(&self, id: Uuid) -> Result<Option<StoredVector>, StoreError> {
        Trees::vector(self, id)
    }
}

#[async_trait]
impl ForgetStore for Trees {
    async fn pending_forgets(&self) -> Result<Vec<PendingForget>, StoreError> {
        Trees::pending_forgets(self)
    }
    async fn forget_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        Trees::forget_user(self, user_id, agent_id)
    }
    async fn forgotten_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
        Trees::forgotten_since(self, since)
    }
    async fn keep_forgotten(&self, ids: &[Uuid]) -> Result<(), StoreError> {
        Trees::keep_forgotten(self, ids.iter().copied(), Utc::now())
    }
    async fn forget_log(&self) -> Result<Vec<ForgetEntry>, StoreError> {
        Trees::forget_log(self)
    }
}

#[async_trait]
impl SourceStore for Trees {
    async fn source_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<SourceParts, StoreError> {
        Trees::source_parts(self, agent_id, user_id, parts)
    }
}

/// One process per data folder: every open session is this one's to end at
/// start, and every queued reflection its to run.
#[async_trait]
impl ClusterStore for Trees {
    async fn orphaned_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        Trees::open_sessions(self)
    }

    async fn claim_jobs(&self, limit: usize) -> Result<Vec<ReflectionJob>, StoreError> {
        let mut jobs = Trees::queued(self)?;
        jobs.truncate(limit);
        Ok(jobs)
    }
}

#[async_trait]
impl MirrorStore for Trees {
    async fn mirrored(&self, remote: &str) -> Result<Vec<MirroredSummary>, StoreError> {
        let mut out = Vec::new();
        for item in self
            .mirror_ledger
            .scan_prefix(keys::mirror_ledger_prefix(remote))
        {
            let (k, v) = item?;
            if let Some(entry) = self.decode(keys::TREE_MIRROR_LEDGER, &k, &v) {
                out.push(entry);
            }
        }
        Ok(out)
    }
    async fn put_mirrored(&self, remote: &str, entry: &MirroredSummary) -> Result<(), StoreError> {
        let key = keys::mirror_ledger(remote, entry.summary_id);
        self.mirror_ledger.insert(key, encode(entry)?)?;
        Ok(())
    }
    async fn drop_mirrored(&self, remote: &str, summary_id: Uuid) -> Result<(), StoreError> {
        self.mirror_ledger
            .remove(keys::mirror_ledger(remote, summary_id))?;
        Ok(())
    }
    async fn mirrored_remotes(&self) -> Result<Vec<(String, usize)>, StoreError> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for key in self.mirror_ledger.iter().keys() {
            let key = key?;
            let Some(end) = key.iter().position(|&b| b == 0) else {
                continue;
            };
            let remote = String::from_utf8_lossy(&key[..end]);
            match out.last_mut() {
                Some((r, n)) if *r == remote => *n += 1,
                _ => out.push((remote.into_owned(), 1)),
            }
        }
        Ok(out)
    }
}
