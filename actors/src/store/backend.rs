//! The storage interface: the persistence of every record kind behind one
//! trait, [`Backend`], made of a sub-trait per kind.
//!
//! The Store actor, the runtime's readers and the tools (re-embedding,
//! search index builds) reach the records through this interface alone,
//! so a second backend is added beside sled (`store/sled/`) by
//! implementing these traits in a module of its own, without touching the
//! actors. What every backend must keep:
//!
//! - **Atomic writes across kinds.** A method that writes several kinds
//!   (ending a session and queuing its reflection; storing a reflection's
//!   summary, blocks and facts and dequeuing its job) changes all of them
//!   or none.
//! - **Read after write.** A read begun after a write returned sees it
//!   (the Store actor runs reads that scan off its own task, but only after
//!   the writes before them; see `actor`).
//! - **Idempotent summaries.** A summary whose id is stored already is not
//!   stored again (`complete_reflection`, `put_rollup` return false).
//! - **Undecodable records skipped, not fatal**: counted once each in
//!   [`Backend::skipped_records`].
//! - **Durability on [`Backend::flush`]**: what was written before it is on
//!   disk (or committed) when it returns.
//!
//! Methods are async, so a backend over the network waits without holding
//! a thread. The Store actor awaits writes one at a time, in order, on its
//! own task, so a backend whose writes are local and short (sled's) does
//! them inline; reads that scan it runs on the blocking pool (see
//! [`read_blocking`]), where a backend may block.

use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::search::AgentIndex;

/// Which sessions [`SessionStore::list_sessions`] returns: newest first
/// (by start time, then id), at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionListing {
    /// Only these agents' sessions (`None`: every agent's).
    pub agents: Option<Vec<String>>,
    pub user_id: Option<String>,
    /// Only live sessions (`true`) or only ended ones (`false`).
    pub live: Option<bool>,
    /// Only sessions after this position in the listing: the start time
    /// and id of the last session of the page before.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: usize,
}

/// Which of an agent's summaries [`SummaryStore::list_summaries`]
/// returns: newest first (by period end, then id), at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryListing {
    /// One type (every type's without).
    pub kind: Option<SummaryType>,
    pub user_id: Option<String>,
    /// Summaries whose period ends at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Summaries whose period starts at or before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only summaries after this position in the listing: the period end
    /// and id of the last summary of the page before.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: usize,
}

impl SummaryListing {
    /// Whether a summary passes the filters (the position aside).
    pub fn admits(&self, s: &ConversationSummary) -> bool {
        self.kind.is_none_or(|k| s.summary_type == k)
            && self.user_id.as_deref().is_none_or(|u| s.user_id == u)
            && self.since.is_none_or(|t| s.period_end >= t)
            && self.until.is_none_or(|t| s.period_start <= t)
    }
}

/// Sessions and their turns.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Records a newly started session as open.
    async fn open_session(&self, record: &SessionRecord) -> Result<(), StoreError>;
    /// Stores turn `seq` of a session (`value` is the turn's JSON, encoded
    /// by the session actor off the Store's task).
    async fn append_turn(&self, session_id: Uuid, seq: u32, value: &[u8])
        -> Result<(), StoreError>;
    /// Stores an ended session and, if it has turns, queues its reflection,
    /// atomically.
    async fn end_session(
        &self,
        record: &SessionRecord,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    async fn session(&self, id: Uuid) -> Result<Option<SessionRecord>, StoreError>;
    /// A session's turns, in order.
    async fn turns(&self, id: Uuid) -> Result<Vec<ConversationTurn>, StoreError>;
    /// A session's turns with their sequence numbers, in order.
    async fn numbered_turns(&self, id: Uuid) -> Result<Vec<(u32, ConversationTurn)>, StoreError>;
    /// One stored turn.
    async fn turn(&self, id: Uuid, seq: u32) -> Result<Option<ConversationTurn>, StoreError>;
    /// Every session, or one agent's, by start time.
    async fn sessions(&self, agent_id: Option<&str>) -> Result<Vec<SessionRecord>, StoreError>;
    /// One user's sessions with an agent, by start time.
    async fn user_sessions(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<SessionRecord>, StoreError>;
    /// The sessions not ended, by start time.
    async fn open_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// The sessions `listing` asks for, newest first: read in that order
    /// from an index, stopping once `listing.limit` are found, so a page
    /// costs about what it returns however many sessions are stored (a
    /// listing of live sessions reads the live ones).
    async fn list_sessions(
        &self,
        listing: &SessionListing,
    ) -> Result<Vec<SessionRecord>, StoreError>;

    /// A session and its turns, for a reflection.
    async fn load_session(&self, id: Uuid) -> Result<Option<LoadedSession>, StoreError> {
        let Some(rec) = self.session(id).await? else {
            return Ok(None);
        };
        Ok(Some((rec, self.turns(id).await?)))
    }

    /// Ends a session whose actor is gone (it panicked, or the process
    /// died), counting its turns from the store. Returns the ended record,
    /// or `None` if it was not open.
    async fn close_orphan(
        &self,
        session_id: Uuid,
        reason: EndReason,
        at: DateTime<Utc>,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let Some(mut rec) = self.session(session_id).await? else {
            return Err(StoreError::SessionNotFound(session_id));
        };
        if !rec.is_open() {
            return Ok(None);
        }
        let turns = self.turns(session_id).await?;
        rec.turn_count = turns.len() as u32;
        // A recovered session was last known alive at its last turn; a
        // crashed one ends now.
        rec.ended_at = Some(match reason {
            EndReason::Recovered => turns.last().map(|l| l.timestamp).unwrap_or(rec.started_at),
            _ => at,
        });
        rec.end_reason = Some(reason);
        self.end_session(&rec, at).await?;
        Ok(Some(rec))
    }
}

/// Summaries (with their versions), memory blocks and per-agent
/// bookkeeping.
#[async_trait]
pub trait SummaryStore: Send + Sync {
    async fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError>;
    /// An agent's summaries of one type, oldest first, ending at or after
    /// `since` when given.
    async fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError>;
    /// An agent's summaries that `listing` asks for, newest first, read in
    /// that order and stopping once `listing.limit` are found.
    async fn list_summaries(
        &self,
        agent_id: &str,
        listing: &SummaryListing,
    ) -> Result<Vec<ConversationSummary>, StoreError>;
    /// An agent's newest current summary of `kind` (by period end).
    async fn latest_summary(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Option<ConversationSummary>, StoreError>;
    /// Stores a replay's new version of a session summary (its
    /// `supersedes` names the current one, marked replaced in the same
    /// write) with the facts of `facts` the user has not got and did not
    /// delete.
    async fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError>;
    /// Records how a stored summary was derived (which summarizer).
    async fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError>;
    /// The agent's blocks (agent-wide: the operator's, and the watchdog's
    /// `background_context`).
    async fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError>;
    /// The blocks reflections drew from one user's conversations.
    async fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError>;
    async fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError>;
    /// Stores an agent-wide block (replacing the one with its label).
    async fn put_block(&self, block: &MemoryBlock) -> Result<(), StoreError>;
    /// Makes the agent-wide block `label` (one a reflection on `user_id`'s
    /// call wrote, in an older version) that user's own, unless theirs was
    /// written later, and removes it, in one write. Returns whether it
    /// became theirs.
    async fn reclaim_agent_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        user_id: &str,
    ) -> Result<bool, StoreError>;
    /// An agent's bookkeeping (the default for an agent never seen).
    async fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError>;
    async fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError>;
    /// Replaces the operator's persistent context lines of an agent (and
    /// moves its summary version, so its context is assembled afresh).
    async fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), StoreError>;
    /// Records that the Watchdog built the agent's background context at
    /// `version`.
    async fn mark_context_built(
        &self,
        agent_id: &str,
        version: u64,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError>;
}

/// Facts and their history.
#[async_trait]
pub trait FactStore: Send + Sync {
    /// One user's facts, current and earlier, oldest first.
    async fn user_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError>;
    /// What `user_id` may see of an agent's facts: their own and every
    /// user's shared ones, current and earlier, oldest first.
    async fn visible_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError>;
    /// Every fact stored for an agent, every user, current and earlier.
    async fn agent_facts(&self, agent_id: &str) -> Result<Vec<FactRecord>, StoreError>;
    async fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, StoreError>;
    /// Changes a fact's visibility, as `user_id` (its owner).
    async fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, StoreError>;
    /// Deletes a fact (and its vector) as `user_id` (its owner), leaving a
    /// tombstone so a later reflection does not store it again. Returns it
    /// and the facts of its subject whose place in the history moved.
    async fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<(FactRecord, Vec<FactRecord>), StoreError>;
    /// Stores facts a user states outside a call (all about one user,
    /// stated at `stated_at`) as a reflection stores a call's: one the
    /// user has already is not stored again, and a new value of a
    /// one-valued subject replaces the earlier one. One the user deleted
    /// is stored again: they said it anew. New facts are queued for the
    /// Rollup actor (their vectors). Returns what changed.
    async fn put_stated_facts(
        &self,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
    ) -> Result<FactChanges, StoreError>;
}

/// What storing a reflection did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reflected {
    /// False when the session had its summary already (nothing but the
    /// queue changed).
    pub stored: bool,
    /// Whether a fact it wrote is shared (every user of the agent sees it
    /// change).
    pub shared: bool,
}

/// The reflection queue and dead letters, and what a finished reflection
/// stores.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// The queued reflections, oldest first.
    async fn queued(&self) -> Result<Vec<ReflectionJob>, StoreError>;
    /// The dead letters, oldest first.
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError>;
    /// Up to `limit` of an agent's dead letters, oldest first (after the
    /// one failed at `after`'s time with `after`'s session id, when
    /// given), read in that order and no further.
    async fn agent_dead_letters(
        &self,
        agent_id: &str,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError>;
    /// A session's dead letter.
    async fn find_dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, StoreError>;
    /// How many dead letters are stored, without reading them (a gauge
    /// set at every `/metrics` scrape).
    async fn dead_letter_count(&self) -> Result<u64, StoreError>;
    /// Stores a session summary, the blocks its reflection produced (as
    /// its user's own, never the agent's) and its facts (de-duplicated,
    /// each placed in its subject's history),
    /// dequeues the job and clears any dead letter, atomically; queues the
    /// summary and new facts for the Rollup actor when rollups are on.
    async fn store_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<Reflected, StoreError>;
    /// Moves a job to the dead letters, unless the session has its
    /// summary by now.
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError>;
    /// Moves a dead letter back to the queue.
    async fn requeue(
        &self,
        session_id: Uuid,
        at: DateTime<Utc>,
    ) -> Result<ReflectionJob, StoreError>;
    /// Removes a session's queued reflection, if any.
    async fn drop_job(&self, session_id: Uuid) -> Result<(), StoreError>;

    /// [`JobStore::store_reflection`]: whether the summary was new.
    async fn complete_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<bool, StoreError> {
        Ok(self.store_reflection(summary, blocks, facts).await?.stored)
    }
}

/// The summary hierarchy: rollups, rollup cursors, the Rollup actor's
/// inbox, topics and vectors.
#[async_trait]
pub trait HierarchyStore: Send + Sync {
    /// Stores a rollup unless one with its id exists; with `supersedes`,
    /// the older version is marked replaced in the same write. Returns
    /// whether it was new.
    async fn put_rollup(
        &self,
        summary: &ConversationSummary,
        supersedes: Option<Uuid>,
        vector: Option<&StoredVector>,
    ) -> Result<bool, StoreError>;
    /// Stores a batch's rollups (as [`HierarchyStore::put_rollup`] each),
    /// then moves its cursors (as [`HierarchyStore::set_rollup_cursor`]).
    /// Returns, for each rollup in order, whether it was new. A failure
    /// part-way may leave some rollups stored and the cursors unmoved,
    /// never a cursor past a rollup that is not stored: the rollups are
    /// made again (with the same ids) and stored once.
    async fn put_rollups(&self, batch: &RollupBatch) -> Result<Vec<bool>, StoreError> {
        let mut stored = Vec::with_capacity(batch.rollups.len());
        for r in &batch.rollups {
            stored.push(
                self.put_rollup(&r.summary, r.supersedes, r.vector.as_ref())
                    .await?,
            );
        }
        for c in &batch.cursors {
            self.set_rollup_cursor(&c.agent_id, c.level, c.period)
                .await?;
        }
        Ok(stored)
    }
    /// The last period of `level` rolled up for the agent (its first day).
    async fn rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
    ) -> Result<Option<NaiveDate>, StoreError>;
    /// Moves the cursor forward to `period`, never back: a run that went
    /// on after its lease lapsed cannot undo a newer run's progress.
    async fn set_rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
        period: NaiveDate,
    ) -> Result<(), StoreError>;
    /// Queues for the Rollup actor every session summary and fact stored
    /// before there was an inbox, once. Returns how many were queued.
    async fn backfill_inbox(&self) -> Result<usize, StoreError>;
    /// Up to `limit` inbox entries, oldest first, after the entry at
    /// `after`.
    async fn inbox(
        &self,
        after: Option<&InboxKey>,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError>;
    /// Removes inbox entries taken in.
    async fn inbox_done(&self, keys: &[InboxKey]) -> Result<(), StoreError>;
    /// An agent's topics, or one user's.
    async fn topics(&self, agent_id: &str, user_id: Option<&str>)
        -> Result<Vec<Topic>, StoreError>;
    /// Stores a topic with its summary (and the summary's vector).
    async fn put_topic(
        &self,
        topic: &Topic,
        summary: &ConversationSummary,
        vector: Option<&StoredVector>,
    ) -> Result<(), StoreError>;
    /// Stores vectors of summaries and facts that still exist; returns the
    /// ids stored.
    async fn put_vectors(&self, items: &[(Uuid, StoredVector)]) -> Result<Vec<Uuid>, StoreError>;
    /// Stores vectors of a session's turns that still exist; returns their
    /// sequence numbers.
    async fn put_turn_vectors(
        &self,
        session_id: Uuid,
        items: &[(u32, StoredVector)],
    ) -> Result<Vec<u32>, StoreError>;
    async fn vector(&self, id: Uuid) -> Result<Option<StoredVector>, StoreError>;
}

/// The mirror's ledger: which passages each remote agent holds of which
/// summary (see [`crate::mirror`]). It names no user: a forgotten user's
/// entries stay until the mirror has deleted their passages.
#[async_trait]
pub trait MirrorStore: Send + Sync {
    /// A remote agent's entries, in summary id order.
    async fn mirrored(&self, remote: &str) -> Result<Vec<MirroredSummary>, StoreError>;
    /// Records (or replaces) what a remote agent holds of a summary.
    async fn put_mirrored(&self, remote: &str, entry: &MirroredSummary) -> Result<(), StoreError>;
    /// Removes a summary's entry (its passages are deleted there).
    async fn drop_mirrored(&self, remote: &str, summary_id: Uuid) -> Result<(), StoreError>;
    /// The remote agents the ledger has entries of, with how many.
    async fn mirrored_remotes(&self) -> Result<Vec<(String, usize)>, StoreError>;
}

/// Forgetting a user.
#[async_trait]
pub trait ForgetStore: Send + Sync {
    /// Forgets begun and not finished (a crash came in between): the user,
    /// and the agent it was limited to.
    async fn pending_forgets(&self) -> Result<Vec<PendingForget>, StoreError>;
    /// Removes every record of `user_id` (with one agent's, or with every
    /// agent's) and every record built from them, durably.
    async fn forget_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError>;
    /// [`ForgetStore::forget_user`] for a forget another instance made and
    /// logged: the same removal, not logged a second time.
    async fn forget_user_again(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        self.forget_user(user_id, agent_id).await
    }
    /// Removes what is left of these sessions whatever their records say:
    /// calls a forget ended here after another instance had removed their
    /// session records (their last turns, a re-written record, a queued
    /// reflection). Returns how many sessions had anything left. A store
    /// no other instance shares forgets its own calls whole and has none.
    async fn forget_sessions(&self, _ids: &[Uuid]) -> Result<usize, StoreError> {
        Ok(0)
    }
    /// Ids forgotten at or after `since`, with when (what the Store
    /// remembers at its start).
    async fn forgotten_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError>;
    /// Keeps `ids` as forgotten now, for [`FORGOTTEN_FOR`](super::FORGOTTEN_FOR)
    /// (the ids of calls a forget ended, which the backend's own forget
    /// may not have seen).
    async fn keep_forgotten(&self, ids: &[Uuid]) -> Result<(), StoreError>;
    /// The forget log, oldest first.
    async fn forget_log(&self) -> Result<Vec<ForgetEntry>, StoreError>;
}

/// The reads a context is assembled from.
#[async_trait]
pub trait SourceStore: Send + Sync {
    /// The asked parts of an (agent, user)'s context sources.
    async fn source_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<SourceParts, StoreError>;

    /// Everything an (agent, user)'s context is assembled from.
    async fn stored_sources(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<StoredSources, StoreError> {
        let parts = self.source_parts(agent_id, user_id, Parts::ALL).await?;
        Ok(StoredSources::from(parts))
    }
}

/// A change of what contexts are assembled from: `parts` of an agent's
/// context for every user, or for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub agent_id: String,
    /// `None`: every user of the agent.
    pub user_id: Option<String>,
    pub parts: Parts,
}

/// What the change feed of a shared backend brings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteChange {
    /// Another instance changed this.
    Changed(Change),
    /// Changes may have been missed (the feed's connection was lost):
    /// anything may have changed.
    Lost,
    /// Another instance forgot this user (with one agent, or every agent
    /// with `None`): their live calls here must end, unreflected, and
    /// nothing of theirs stay.
    Forgotten {
        user_id: String,
        agent_id: Option<String>,
    },
}

/// Work several instances over one backend share. The defaults are one
/// instance's: it owns every open session and queued reflection, and holds
/// every lease (sled: one process per data folder).
#[async_trait]
pub trait ClusterStore: Send + Sync {
    /// Whether other instances may share these records (the runtime then
    /// renews its heartbeat, claims work, holds leases and follows the
    /// change feed).
    fn shared(&self) -> bool {
        false
    }
    /// How long a heartbeat, claim or lease holds without renewal.
    fn lease_time(&self) -> Option<Duration> {
        None
    }
    /// Renews this instance's heartbeat and its claims.
    async fn heartbeat(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Open sessions no running instance has a call of (their instance is
    /// gone, or this is the only one), now this instance's to end.
    async fn orphaned_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Gives back open sessions [`ClusterStore::orphaned_sessions`] gave
    /// this instance and it could not end (another instance, or a later
    /// look, ends them).
    async fn release_sessions(&self, _ids: &[Uuid]) -> Result<(), StoreError> {
        Ok(())
    }
    /// Claims up to `limit` queued reflections no running instance holds,
    /// oldest first.
    async fn claim_jobs(&self, limit: usize) -> Result<Vec<ReflectionJob>, StoreError>;
    /// Takes, or keeps, the lease `name` for [`ClusterStore::lease_time`]:
    /// whether this instance holds it.
    async fn take_lease(&self, _name: &str) -> Result<bool, StoreError> {
        Ok(true)
    }
    /// Lets go of this instance's leases and claims (a clean stop).
    async fn retire(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Announces changes this instance made to the others.
    async fn publish(&self, _changes: &[Change]) -> Result<(), StoreError> {
        Ok(())
    }
    /// Announces to the others that this instance forgot a user.
    async fn publish_forget(
        &self,
        _user_id: &str,
        _agent_id: Option<&str>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Forget log entries after position `after` (0: from the start),
    /// with the position of the last: how an instance whose change feed
    /// was cut finds the forgets it was not told of.
    async fn forgets_after(&self, after: i64) -> Result<(i64, Vec<ForgetEntry>), StoreError> {
        Ok((after, Vec::new()))
    }
    /// The forget log's last position.
    async fn forget_log_head(&self) -> Result<i64, StoreError> {
        Ok(0)
    }
    /// The changes other instances make, as they are announced (`None`:
    /// nothing to follow).
    async fn follow(
        &self,
    ) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<RemoteChange>>, StoreError> {
        Ok(None)
    }
}

/// A storage backend: every record kind.
#[async_trait]
pub trait Backend:
    SessionStore
    + SummaryStore
    + FactStore
    + JobStore
    + HierarchyStore
    + ForgetStore
    + MirrorStore
    + SourceStore
    + ClusterStore
    + Send
    + Sync
    + 'static
{
    /// The backend's name, for logs and `/readyz`.
    fn name(&self) -> &'static str;
    /// Makes every write so far durable.
    async fn flush(&self) -> Result<(), StoreError>;
    /// Damaged records met (and skipped) since the backend was opened,
    /// each counted once.
    fn skipped_records(&self) -> u64;
    /// Turns appended and held in memory for the backend's next batch
    /// write (PostgreSQL's; a backend that writes each at once holds none).
    fn buffered_turns(&self) -> u64 {
        0
    }
    /// Whether the backend can be reached (a database answers; `/readyz`).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether the backend's in-memory caches match its records (a test
    /// hook; a backend without caches has nothing to compare).
    async fn caches_match(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    /// Builds an agent's search index from its current summaries of every
    /// type and its facts, with their stored vectors, and the turns of
    /// ended calls, with their stored vectors or, given an embedder that
    /// makes them on the spot, its; the turns' relative dates resolved in
    /// the agent's time zone, `zone`.
    async fn build_search_index(
        &self,
        agent_id: &str,
        inline: Option<&dyn crate::embed::Embed>,
        zone: chrono_tz::Tz,
    ) -> Result<AgentIndex, StoreError> {
        let mut ix = AgentIndex::new(agent_id, zone);
        for kind in SummaryType::ALL {
            for s in self.summaries(agent_id, kind, None).await? {
                if s.is_current() {
                    let v = self.vector(s.summary_id).await?;
                    ix.put_summary(&s, v);
                }
            }
        }
        // Current facts only: a value a later call replaced is history.
        for f in self.agent_facts(agent_id).await? {
            if f.is_current() {
                let v = self.vector(f.fact_id).await?;
                ix.put_fact(&f.fact, v);
            }
        }
        // The raw turns of every ended call (a live call's turns are in its
        // own context already).
        for s in self.sessions(Some(agent_id)).await? {
            if s.ended_at.is_some() {
                let turns = self.numbered_turns(s.session_id).await?;
                ix.put_turns_with(&s.user_id, s.session_id, &turns, inline);
                if inline.is_some() {
                    continue;
                }
                for (seq, _) in &turns {
                    let id = TurnRef {
                        session_id: s.session_id,
                        seq: *seq,
                    }
                    .doc_id();
                    if let Some(v) = self.vector(id).await? {
                        ix.set_vector(id, v);
                    }
                }
            }
        }
        Ok(ix)
    }
}

/// The stored vectors of the current facts among `facts`, to index them
/// with ([`index_facts`]).
pub async fn fact_vectors(
    backend: &dyn Backend,
    facts: Vec<&FactRecord>,
) -> HashMap<Uuid, StoredVector> {
    let ids: Vec<Uuid> = facts
        .into_iter()
        .filter(|f| f.is_current())
        .map(|f| f.fact_id)
        .collect();
    let mut out = HashMap::new();
    for id in ids {
        if let Ok(Some(v)) = backend.vector(id).await {
            out.insert(id, v);
        }
    }
    out
}

/// Brings a search index in line with facts that were added or moved:
/// current ones are searchable (with their stored vector, from
/// [`fact_vectors`]), earlier ones are not.
pub fn index_facts<'a>(
    ix: &mut AgentIndex,
    facts: impl IntoIterator<Item = &'a FactRecord>,
    vectors: &mut HashMap<Uuid, StoredVector>,
) {
    for f in facts {
        if f.is_current() {
            ix.put_fact(&f.fact, vectors.remove(&f.fact_id));
        } else {
            ix.remove(f.fact_id);
        }
    }
}

/// A backend shared by the Store actor and the readers.
pub type SharedBackend = Arc<dyn Backend>;

/// Runs a read on the blocking pool (a backend may do blocking work in
/// it, such as a sled scan) and waits for it without holding the caller's
/// thread.
pub async fn read_blocking<T, F>(backend: SharedBackend, read: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: for<'b> FnOnce(&'b dyn Backend) -> futures::future::BoxFuture<'b, Result<T, StoreError>>
        + Send
        + 'static,
{
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(read(&*backend)))
        .await
        .map_err(StoreError::ReadAborted)?
}
