//! The Store actor's messages.

use super::*;

/// A session record with its turns in order.
pub type LoadedSession = (SessionRecord, Vec<ConversationTurn>);

/// Counters the Store reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub turns_written: u64,
    pub writes: u64,
    pub flushes: u64,
    pub write_errors: u64,
    /// Stored records skipped (with a warning) because they did not decode.
    pub skipped_records: u64,
}

pub enum StoreMsg {
    /// Record a newly started session as open.
    OpenSession(SessionRecord),
    /// Persist one turn, already encoded by the session actor so the Store
    /// spends its time on sled alone.
    AppendTurn {
        session_id: Uuid,
        seq: u32,
        value: Vec<u8>,
    },
    /// Persist an ended session and queue its reflection if it has turns.
    EndSession(SessionRecord),
    /// End a session whose actor is gone (panicked, or the process died),
    /// counting its turns from the store. Replies with the ended record, or
    /// `None` if it was not open.
    CloseOrphan {
        session_id: Uuid,
        reason: EndReason,
        at: DateTime<Utc>,
        reply: RpcReplyPort<Result<Option<SessionRecord>, StoreError>>,
    },
    /// A session and its turns, for a reflection.
    LoadSession {
        session_id: Uuid,
        reply: RpcReplyPort<Result<Option<LoadedSession>, StoreError>>,
    },
    /// Store a session summary (idempotently), its block updates and the
    /// facts it found (de-duplicated, conflicts flagged).
    CompleteReflection {
        summary: Box<ConversationSummary>,
        blocks: Vec<MemoryBlock>,
        facts: Vec<Fact>,
        reply: RpcReplyPort<Result<bool, StoreError>>,
    },
    /// The facts a user may see: their own and the agent's shared ones,
    /// current and earlier (`superseded_by` set).
    ListFacts {
        agent_id: String,
        user_id: String,
        reply: RpcReplyPort<Result<Vec<FactRecord>, StoreError>>,
    },
    GetFact(Uuid, RpcReplyPort<Result<Option<FactRecord>, StoreError>>),
    /// Change a fact's visibility, as `user_id` (its owner).
    SetFactVisibility {
        fact_id: Uuid,
        user_id: String,
        visibility: Visibility,
        reply: RpcReplyPort<Result<FactRecord, StoreError>>,
    },
    /// Delete a fact, as `user_id` (its owner).
    DeleteFact {
        fact_id: Uuid,
        user_id: String,
        reply: RpcReplyPort<Result<FactRecord, StoreError>>,
    },
    /// Store facts a user states outside a call (all about one user),
    /// as a reflection stores a call's: see
    /// [`FactStore::put_stated_facts`].
    PutStatedFacts {
        facts: Vec<Fact>,
        stated_at: DateTime<Utc>,
        reply: RpcReplyPort<Result<FactChanges, StoreError>>,
    },
    /// Remove every record of a user (with one agent, or all), and every
    /// record built from theirs.
    Forget {
        user_id: String,
        agent_id: Option<String>,
        /// The live calls this forget ended: whatever of them is stored
        /// goes too, even where another instance removed their records
        /// first.
        sessions: Vec<Uuid>,
        /// Another instance made (and logged) this forget: it is not
        /// logged again.
        again: bool,
        reply: RpcReplyPort<Result<ForgetReport, StoreError>>,
    },
    /// Remove what is left of these ended calls (their user was forgotten
    /// elsewhere, whose removal is committed): how many had anything.
    ForgetCalls {
        sessions: Vec<Uuid>,
        reply: RpcReplyPort<Result<usize, StoreError>>,
    },
    /// These live sessions are being forgotten (sent before they end):
    /// their later writes are dropped.
    Forgetting(Vec<Uuid>),
    /// Store a replay's new version of a session summary (its `supersedes`
    /// names the current one) and bring the session's facts in line.
    ReviseSession {
        summary: Box<ConversationSummary>,
        facts: Vec<Fact>,
        reply: RpcReplyPort<Result<Revision, StoreError>>,
    },
    /// Record a summary's derivation fingerprint (a replay found it
    /// unchanged).
    StampDerivation {
        summary_id: Uuid,
        derivation: String,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Move a job out of the queue into the dead-letter tree.
    DeadLetter {
        letter: DeadLetter,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Move a dead letter back into the queue.
    Requeue {
        session_id: Uuid,
        at: DateTime<Utc>,
        reply: RpcReplyPort<Result<ReflectionJob, StoreError>>,
    },
    /// Write a block (the caller checked its limit).
    PutBlock {
        block: MemoryBlock,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Replace an agent's persistent context lines and mark it changed.
    SetPersistentContext {
        agent_id: String,
        lines: Vec<String>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Record that the background context was rebuilt at `version`.
    MarkContextBuilt {
        agent_id: String,
        version: u64,
        expires_at: Option<DateTime<Utc>>,
    },
    GetSession(
        Uuid,
        RpcReplyPort<Result<Option<SessionRecord>, StoreError>>,
    ),
    ListSessions(
        Option<String>,
        RpcReplyPort<Result<Vec<SessionRecord>, StoreError>>,
    ),
    ListOpenSessions(RpcReplyPort<Result<Vec<SessionRecord>, StoreError>>),
    /// A page of sessions, newest first (read no further than it goes).
    PageSessions {
        listing: SessionListing,
        reply: RpcReplyPort<Result<Vec<SessionRecord>, StoreError>>,
    },
    GetTurns(
        Uuid,
        RpcReplyPort<Result<Vec<ConversationTurn>, StoreError>>,
    ),
    /// A session's turns with their sequence numbers.
    GetNumberedTurns(
        Uuid,
        RpcReplyPort<Result<Vec<(u32, ConversationTurn)>, StoreError>>,
    ),
    GetSummary(
        Uuid,
        RpcReplyPort<Result<Option<ConversationSummary>, StoreError>>,
    ),
    ListSummaries {
        agent_id: String,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
        reply: RpcReplyPort<Result<Vec<ConversationSummary>, StoreError>>,
    },
    /// A page of an agent's summaries, newest first (read no further than
    /// it goes).
    PageSummaries {
        agent_id: String,
        listing: SummaryListing,
        reply: RpcReplyPort<Result<Vec<ConversationSummary>, StoreError>>,
    },
    GetBlocks(String, RpcReplyPort<Result<Vec<MemoryBlock>, StoreError>>),
    /// The blocks reflections drew from one user's conversations with an
    /// agent.
    GetUserBlocks {
        agent_id: String,
        user_id: String,
        reply: RpcReplyPort<Result<Vec<MemoryBlock>, StoreError>>,
    },
    ListAgents(RpcReplyPort<Result<Vec<(String, AgentMeta)>, StoreError>>),
    /// The mirror ledger's entries of a remote agent (see
    /// [`crate::mirror`]).
    Mirrored {
        remote: String,
        reply: RpcReplyPort<Result<Vec<MirroredSummary>, StoreError>>,
    },
    /// Records what a remote agent holds of a summary.
    PutMirrored {
        remote: String,
        entry: MirroredSummary,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Removes a summary's ledger entry (its passages are gone there).
    DropMirrored {
        remote: String,
        summary_id: Uuid,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    GetAgent(String, RpcReplyPort<Result<AgentMeta, StoreError>>),
    /// An agent's newest current summary of a type.
    LatestSummary {
        agent_id: String,
        kind: SummaryType,
        reply: RpcReplyPort<Result<Option<ConversationSummary>, StoreError>>,
    },
    ListQueue(RpcReplyPort<Result<Vec<ReflectionJob>, StoreError>>),
    ListDeadLetters(RpcReplyPort<Result<Vec<DeadLetter>, StoreError>>),
    /// Up to `limit` of an agent's dead letters, oldest first.
    AgentDeadLetters {
        agent_id: String,
        /// The failure time and session id of the letter the page follows.
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: usize,
        reply: RpcReplyPort<Result<Vec<DeadLetter>, StoreError>>,
    },
    /// A session's dead letter.
    GetDeadLetter(Uuid, RpcReplyPort<Result<Option<DeadLetter>, StoreError>>),
    /// How many dead letters are stored (no letter is read).
    CountDeadLetters(RpcReplyPort<Result<u64, StoreError>>),
    /// Store a daily or weekly rollup (once per id), marking the version
    /// it supersedes. Replies whether it was new.
    PutRollup {
        summary: Box<ConversationSummary>,
        supersedes: Option<Uuid>,
        vector: Option<StoredVector>,
        reply: RpcReplyPort<Result<bool, StoreError>>,
    },
    /// Store rollups (each once per id, marking the version it
    /// supersedes), then move cursors past them: a rollup pass's writes
    /// for several agents, in one message and one write where the backend
    /// can. Replies, for each rollup in order, whether it was new.
    PutRollups {
        batch: RollupBatch,
        reply: RpcReplyPort<Result<Vec<bool>, StoreError>>,
    },
    RollupCursor {
        agent_id: String,
        level: Level,
        reply: RpcReplyPort<Result<Option<NaiveDate>, StoreError>>,
    },
    /// Record that the agent's periods of `level` up to the one starting
    /// on `period` are rolled up.
    SetRollupCursor {
        agent_id: String,
        level: Level,
        period: NaiveDate,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// The oldest `limit` items waiting for the Rollup actor, after the
    /// entry at `after` if given.
    Inbox {
        after: Option<InboxKey>,
        limit: usize,
        reply: RpcReplyPort<Result<Vec<InboxEntry>, StoreError>>,
    },
    /// Items the Rollup actor has taken in.
    InboxDone {
        keys: Vec<InboxKey>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    Topics {
        agent_id: String,
        user_id: Option<String>,
        reply: RpcReplyPort<Result<Vec<Topic>, StoreError>>,
    },
    /// Write a topic and its topic summary.
    PutTopic {
        topic: Box<Topic>,
        summary: Box<ConversationSummary>,
        vector: Option<StoredVector>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Store the vectors of an agent's summaries or facts.
    PutVectors {
        agent_id: String,
        items: Vec<(Uuid, StoredVector)>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Vectors of an ended call's turns, by sequence number (made by an
    /// embedder that captures meaning, for retrieval).
    PutTurnVectors {
        agent_id: String,
        session_id: Uuid,
        items: Vec<(u32, StoredVector)>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Replies once every message sent before it is handled: a reader
    /// that then reads the trees directly sees those writes.
    Barrier(RpcReplyPort<()>),
    /// Flush everything written so far to disk, then reply.
    Flush(RpcReplyPort<Result<(), StoreError>>),
    Stats(RpcReplyPort<StoreStats>),
    /// Group commit: time to flush what is dirty.
    FlushTick,
    /// Write again the session ends whose write failed (the store could
    /// not be reached).
    RetryEnds,
    /// A background flush finished.
    FlushDone(Result<(), std::sync::Arc<StoreError>>),
}

impl StoreMsg {
    /// The `AppendTurn` message for turn `seq` of a session.
    pub fn append_turn(
        session_id: Uuid,
        seq: u32,
        turn: &ConversationTurn,
    ) -> Result<StoreMsg, serde_json::Error> {
        Ok(StoreMsg::AppendTurn {
            session_id,
            seq,
            value: serde_json::to_vec(turn)?,
        })
    }
}
