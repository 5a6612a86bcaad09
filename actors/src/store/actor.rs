//! The Store actor: the shell around a [`Backend`] that serializes writes,
//! runs the reads that scan off its own task, group-commits flushes and
//! keeps the search index and the generation counters in step.
//!
//! A read that scans (a session's turns, a listing, the inbox) runs on the
//! blocking pool so that turn writes never wait behind it. It is started
//! only when the actor reaches its message, after every write sent before
//! it was applied, so a caller still reads its own writes; a point read (one
//! record by id) is answered here, as it costs less than the hand-off.
//!
//! This file holds the shell (state, flushes, the guard for what was
//! forgotten) and `handle`, which hands each message to the handler of its
//! kind of record: `sessions`, `summaries`, `blocks`, `facts`, `jobs`
//! (reflections and dead letters), `rollups` (with the inbox), `topics`
//! (with vectors), `forget` and `control` (flushes, stats), each in
//! `actor/`.

use std::sync::Arc;

use super::*;

mod blocks;
mod control;
mod facts;
mod forget;
mod jobs;
mod mirror;
mod rollups;
mod sessions;
mod summaries;
mod topics;

/// Indexes an ended call's turns for retrieval, if the agent's index is
/// built or being built (a call's worth of turns, read back from the
/// backend just written: tens of microseconds in sled).
async fn index_ended(search: &SearchIndex, t: &SharedBackend, rec: &SessionRecord) {
    if !search.tracks(&rec.agent_id) {
        return;
    }
    let (user, id) = (rec.user_id.clone(), rec.session_id);
    let turns = match t.numbered_turns(id).await {
        Ok(turns) => turns,
        Err(err) => {
            warn!(session_id = %id, error = %err, "turns not indexed");
            return;
        }
    };
    let inline = search.inline();
    search.update(&rec.agent_id, move |ix| {
        ix.put_turns_with(&user, id, &turns, inline.as_deref())
    });
}

/// The stored vectors of facts to index, read only when the agent's index
/// is built or being built (an update would be dropped otherwise).
async fn vectors_for(
    search: &SearchIndex,
    t: &SharedBackend,
    agent_id: &str,
    facts: Vec<&FactRecord>,
) -> HashMap<Uuid, StoredVector> {
    if !search.tracks(agent_id) {
        return HashMap::new();
    }
    fact_vectors(&**t, facts).await
}

/// The ids forgotten within [`FORGOTTEN_FOR`], oldest first: bounded by
/// the forgets of that window, not by every forget since the start.
#[derive(Default)]
pub(crate) struct Forgotten {
    ids: std::collections::HashSet<Uuid>,
    order: std::collections::VecDeque<(tokio::time::Instant, Uuid)>,
}

impl Forgotten {
    fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn contains(&self, id: &Uuid) -> bool {
        self.ids.contains(id)
    }

    /// The ids a backend kept, forgotten at the times given (oldest
    /// first): each is let go of when its window ends, as if held since.
    fn restore(&mut self, mut kept: Vec<(Uuid, DateTime<Utc>)>) {
        kept.sort_by_key(|(_, at)| *at);
        let (now, wall) = (tokio::time::Instant::now(), Utc::now());
        for (id, at) in kept {
            let age = (wall - at).to_std().unwrap_or_default();
            if age < FORGOTTEN_FOR && self.ids.insert(id) {
                let since = now.checked_sub(age).unwrap_or(now);
                self.order.push_back((since, id));
            }
        }
    }

    fn extend(&mut self, ids: impl IntoIterator<Item = Uuid>) {
        let now = tokio::time::Instant::now();
        while let Some(&(at, id)) = self.order.front() {
            if now.duration_since(at) < FORGOTTEN_FOR {
                break;
            }
            self.order.pop_front();
            self.ids.remove(&id);
        }
        for id in ids {
            if self.ids.insert(id) {
                self.order.push_back((now, id));
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

pub struct StoreArgs {
    pub backend: SharedBackend,
    pub settings: StoreSettings,
    /// Bumped, per part and per agent or user, on every context-relevant
    /// write.
    pub generations: std::sync::Arc<Generations>,
    /// Kept current after every write for agents whose index is built.
    pub search: std::sync::Arc<SearchIndex>,
    /// Acknowledged turns not yet written, counted down as they are.
    pub backlog: std::sync::Arc<Backlog>,
}

pub struct StoreState {
    backend: SharedBackend,
    settings: StoreSettings,
    generations: std::sync::Arc<Generations>,
    search: std::sync::Arc<SearchIndex>,
    backlog: std::sync::Arc<Backlog>,
    dirty: bool,
    /// Writes since the last flush began: the group-commit batch.
    batch: u64,
    /// Writes that failed since the last explicit `Flush`.
    failed_since_flush: u64,
    /// Ids forgotten lately: a reflection, rollup or topic update that
    /// read them before the forget must not write them back.
    forgotten: Forgotten,
    /// Ended sessions whose end could not be written (the store was out
    /// of reach), written again until it is: a session the caller ended
    /// must not stay open, unreflected, until the next start. At most one
    /// per session, so bounded by the live sessions.
    unended: Vec<SessionRecord>,
    /// The wait before the next try of `unended`, doubled up to
    /// [`RETRY_ENDS_MAX`].
    retry_ends_after: Duration,
    flushing: bool,
    tick_armed: bool,
    /// `Flush` callers waiting for the flush in progress (it began after
    /// they asked), with the failed writes it reports to them.
    flush_waiters: Vec<RpcReplyPort<Result<(), StoreError>>>,
    flush_waiters_failed: u64,
    /// `Flush` callers that asked while a flush was in progress: the next
    /// flush is theirs.
    flush_next: Vec<RpcReplyPort<Result<(), StoreError>>>,
    stats: StoreStats,
}

pub struct StoreActor;

/// The first wait before an end that could not be written is tried again,
/// and the longest.
const RETRY_ENDS_FIRST: Duration = Duration::from_millis(500);
const RETRY_ENDS_MAX: Duration = Duration::from_secs(5);

impl StoreState {
    async fn wrote(&mut self, myself: &ActorRef<StoreMsg>) {
        self.stats.writes += 1;
        match self.settings.flush {
            FlushPolicy::EveryWrite => {
                self.stats.flushes += 1;
                metrics::histogram!("recall_store_batch_writes").record(1.0);
                if let Err(err) = self.backend.flush().await {
                    self.stats.write_errors += 1;
                    error!(error = %err, "flush failed");
                }
            }
            FlushPolicy::GroupCommit => {
                self.dirty = true;
                self.batch += 1;
                self.arm(myself);
            }
        }
    }

    /// Starts a flush of everything written so far on the blocking pool
    /// (`FlushDone` when it is over); the callers waiting for the next
    /// flush are now waiting for this one. The actor goes on handling
    /// writes meanwhile: one flush serves every caller that asked before it
    /// began, so durable turns from many calls share flushes.
    fn start_flush(&mut self, myself: &ActorRef<StoreMsg>) {
        self.dirty = false;
        self.flushing = true;
        metrics::histogram!("recall_store_batch_writes").record(self.batch as f64);
        self.batch = 0;
        if !self.flush_next.is_empty() {
            self.flush_waiters = std::mem::take(&mut self.flush_next);
            // A caller asking for durability learns of any write that
            // failed since the last explicit flush, not only of its own.
            self.flush_waiters_failed = std::mem::take(&mut self.failed_since_flush);
        }
        let backend = self.backend.clone();
        let me = myself.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let res = handle.block_on(backend.flush());
            let _ = me.cast(StoreMsg::FlushDone(res.map_err(Arc::new)));
        });
    }

    fn arm(&mut self, myself: &ActorRef<StoreMsg>) {
        if !self.tick_armed && !self.flushing {
            self.tick_armed = true;
            myself.send_after(
                Duration::from_millis(self.settings.flush_interval_ms),
                || StoreMsg::FlushTick,
            );
        }
    }

    /// The one guard for what was forgotten: a write about a forgotten
    /// session or summary (a call's last turns sent before the forget and
    /// arriving after it, or a reflection, rollup, topic update, replay or
    /// dead letter that was running meanwhile) is answered as a no-op and
    /// dropped; any other message comes back to be handled.
    async fn unless_forgotten(&self, msg: StoreMsg) -> Option<StoreMsg> {
        let gone = &self.forgotten;
        if gone.is_empty() {
            return Some(msg);
        }
        let built_from_gone = |s: &ConversationSummary| self.built_from_forgotten(s);
        let backend = &self.backend;
        match msg {
            StoreMsg::AppendTurn { session_id, .. } if gone.contains(&session_id) => {
                self.backlog.handled();
                debug!("turn of a forgotten session dropped");
            }
            StoreMsg::EndSession(rec) if gone.contains(&rec.session_id) => {
                debug!(session_id = %rec.session_id, "end of a forgotten session dropped");
            }
            StoreMsg::ReviseSession { summary, reply, .. }
                if summary.supersedes.is_some_and(|id| gone.contains(&id)) =>
            {
                let _ = reply.send(Ok(Revision::default()));
            }
            StoreMsg::CompleteReflection { summary, reply, .. }
                if gone.contains(&summary.summary_id) =>
            {
                debug!(session_id = %summary.summary_id, "reflection of a forgotten session dropped");
                let _ = backend.drop_job(summary.summary_id).await;
                let _ = reply.send(Ok(false));
            }
            StoreMsg::PutRollup { summary, reply, .. } if built_from_gone(&summary) => {
                debug!(summary_id = %summary.summary_id, "rollup of forgotten summaries dropped");
                let _ = reply.send(Ok(false));
            }
            StoreMsg::PutTopic { summary, reply, .. } if built_from_gone(&summary) => {
                debug!(summary_id = %summary.summary_id, "topic of forgotten summaries dropped");
                let _ = reply.send(Ok(()));
            }
            // A reflection of a forgotten session gave up (or found the
            // session gone): nothing of it is kept.
            StoreMsg::DeadLetter { letter, reply } if gone.contains(&letter.session_id) => {
                let _ = backend.drop_job(letter.session_id).await;
                let _ = reply.send(Ok(()));
            }
            msg => return Some(msg),
        }
        None
    }

    /// Whether a summary was forgotten, or made from one that was.
    pub(super) fn built_from_forgotten(&self, s: &ConversationSummary) -> bool {
        let gone = &self.forgotten;
        gone.contains(&s.summary_id) || s.source_summary_ids.iter().any(|id| gone.contains(id))
    }

    /// Answers a read that scans from the blocking pool (see the module's
    /// notes): the writes handled before it are in; the ones after it do
    /// not wait for it.
    fn read_off<T, F>(&self, reply: RpcReplyPort<Result<T, StoreError>>, read: F)
    where
        T: Send + 'static,
        F: for<'b> FnOnce(&'b dyn Backend) -> futures::future::BoxFuture<'b, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let backend = self.backend.clone();
        tokio::spawn(async move {
            let _ = reply.send(read_blocking(backend, read).await);
        });
    }

    /// Keeps an end that could not be written, to be written again (the
    /// first one waiting arms the retry).
    fn end_later(&mut self, myself: &ActorRef<StoreMsg>, rec: SessionRecord) {
        let first = self.unended.is_empty();
        self.unended.retain(|r| r.session_id != rec.session_id);
        self.unended.push(rec);
        if first {
            myself.send_after(self.retry_ends_after, || StoreMsg::RetryEnds);
        }
    }

    fn failed(&mut self, what: &'static str, err: &StoreError) {
        self.stats.write_errors += 1;
        self.failed_since_flush += 1;
        error!(error = %err, what, "store write failed");
    }
}

impl Actor for StoreActor {
    type Msg = StoreMsg;
    type State = StoreState;
    type Arguments = StoreArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<StoreMsg>,
        args: StoreArgs,
    ) -> Result<StoreState, ActorProcessingErr> {
        // What was forgotten lately stays forgotten after a restart: a
        // write about it still under way elsewhere is dropped.
        let window = chrono::Duration::from_std(FORGOTTEN_FOR).unwrap_or_default();
        let mut forgotten = Forgotten::default();
        forgotten.restore(args.backend.forgotten_since(Utc::now() - window).await?);
        Ok(StoreState {
            backend: args.backend,
            settings: args.settings,
            generations: args.generations,
            search: args.search,
            backlog: args.backlog,
            dirty: false,
            batch: 0,
            failed_since_flush: 0,
            forgotten,
            unended: Vec::new(),
            retry_ends_after: RETRY_ENDS_FIRST,
            flushing: false,
            tick_armed: false,
            flush_waiters: Vec::new(),
            flush_waiters_failed: 0,
            flush_next: Vec::new(),
            stats: StoreStats::default(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<StoreMsg>,
        state: &mut StoreState,
    ) -> Result<(), ActorProcessingErr> {
        // A plain flush on the blocking pool, awaited: an asynchronous one
        // (sled's `flush_async`) can finish on a pool of the backend's own,
        // still holding the database (and the folder's lock) after this
        // actor has stopped.
        let backend = state.backend.clone();
        let handle = tokio::runtime::Handle::current();
        let res = match tokio::task::spawn_blocking(move || handle.block_on(backend.flush())).await
        {
            Ok(res) => res,
            Err(_) => state.backend.flush().await,
        };
        if let Err(err) = res {
            error!(error = %err, "final flush failed");
        }
        if !state.unended.is_empty() {
            // Still open in the store: the next start ends them
            // (`recovered`) and reflects on them.
            warn!(
                sessions = state.unended.len(),
                "ended sessions whose end could not be written are left open in the store"
            );
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StoreMsg>,
        msg: StoreMsg,
        state: &mut StoreState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(msg) = state.unless_forgotten(msg).await else {
            return Ok(());
        };
        // A handler per kind of record, each in a file of its own
        // (`actor/*.rs`).
        match msg {
            msg @ (StoreMsg::OpenSession(..)
            | StoreMsg::AppendTurn { .. }
            | StoreMsg::EndSession(..)
            | StoreMsg::RetryEnds
            | StoreMsg::CloseOrphan { .. }
            | StoreMsg::LoadSession { .. }
            | StoreMsg::GetSession(..)
            | StoreMsg::ListSessions(..)
            | StoreMsg::ListOpenSessions(..)
            | StoreMsg::PageSessions { .. }
            | StoreMsg::GetTurns(..)
            | StoreMsg::GetNumberedTurns(..)) => state.handle_sessions(&myself, msg).await,
            msg @ (StoreMsg::ReviseSession { .. }
            | StoreMsg::StampDerivation { .. }
            | StoreMsg::GetSummary(..)
            | StoreMsg::ListSummaries { .. }
            | StoreMsg::PageSummaries { .. }
            | StoreMsg::LatestSummary { .. }) => state.handle_summaries(&myself, msg).await,
            msg @ (StoreMsg::PutBlock { .. }
            | StoreMsg::SetPersistentContext { .. }
            | StoreMsg::MarkContextBuilt { .. }
            | StoreMsg::GetBlocks(..)
            | StoreMsg::GetUserBlocks { .. }
            | StoreMsg::ListAgents(..)
            | StoreMsg::GetAgent(..)) => state.handle_blocks(&myself, msg).await,
            msg @ (StoreMsg::ListFacts { .. }
            | StoreMsg::GetFact(..)
            | StoreMsg::SetFactVisibility { .. }
            | StoreMsg::DeleteFact { .. }
            | StoreMsg::PutStatedFacts { .. }) => state.handle_facts(&myself, msg).await,
            msg @ (StoreMsg::CompleteReflection { .. }
            | StoreMsg::DeadLetter { .. }
            | StoreMsg::Requeue { .. }
            | StoreMsg::ListQueue(..)
            | StoreMsg::ListDeadLetters(..)
            | StoreMsg::AgentDeadLetters { .. }
            | StoreMsg::GetDeadLetter(..)
            | StoreMsg::CountDeadLetters(..)) => state.handle_jobs(&myself, msg).await,
            msg @ (StoreMsg::PutRollup { .. }
            | StoreMsg::PutRollups { .. }
            | StoreMsg::RollupCursor { .. }
            | StoreMsg::SetRollupCursor { .. }
            | StoreMsg::Inbox { .. }
            | StoreMsg::InboxDone { .. }) => state.handle_rollups(&myself, msg).await,
            msg @ (StoreMsg::Topics { .. }
            | StoreMsg::PutTopic { .. }
            | StoreMsg::PutVectors { .. }
            | StoreMsg::PutTurnVectors { .. }) => state.handle_topics(&myself, msg).await,
            msg @ (StoreMsg::Mirrored { .. }
            | StoreMsg::PutMirrored { .. }
            | StoreMsg::DropMirrored { .. }) => state.handle_mirror(&myself, msg).await,
            msg @ (StoreMsg::Forget { .. }
            | StoreMsg::Forgetting(..)
            | StoreMsg::ForgetCalls { .. }) => state.handle_forget(msg).await,
            msg @ (StoreMsg::Barrier(..)
            | StoreMsg::Flush(..)
            | StoreMsg::Stats(..)
            | StoreMsg::FlushTick
            | StoreMsg::FlushDone(..)) => state.handle_control(&myself, msg).await,
        }
        // (A read off this actor may write the batch meanwhile: the count
        // is then high until the next message, which the flush ticks
        // that follow every write bring.)
        state.backlog.set_buffered(state.backend.buffered_turns());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn forgotten_ids_kept_by_the_backend_are_held_for_what_is_left_of_their_window() {
        let mut f = Forgotten::default();
        let (old, young, gone) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let hours = |h| Utc::now() - chrono::Duration::hours(h);
        f.restore(vec![(young, hours(1)), (gone, hours(7)), (old, hours(5))]);
        assert!(f.contains(&old) && f.contains(&young));
        assert!(!f.contains(&gone), "past its window already");
        tokio::time::advance(Duration::from_secs(3600 + 60)).await;
        f.extend([]);
        assert!(
            !f.contains(&old),
            "five hours old at the restart, gone an hour later"
        );
        assert!(f.contains(&young));
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_ids_are_kept_for_their_window_and_then_let_go() {
        let mut f = Forgotten::default();
        let (old, new) = (Uuid::from_u128(1), Uuid::from_u128(2));
        f.extend([old]);
        tokio::time::advance(FORGOTTEN_FOR - Duration::from_secs(1)).await;
        f.extend([old, new]);
        assert!(f.contains(&old) && f.contains(&new));
        assert_eq!(f.len(), 2, "an id forgotten twice is held once");
        tokio::time::advance(Duration::from_secs(2)).await;
        f.extend([]);
        assert!(!f.contains(&old), "past its window");
        assert!(f.contains(&new));
        tokio::time::advance(FORGOTTEN_FOR).await;
        f.extend([]);
        assert!(f.is_empty());
    }
}
