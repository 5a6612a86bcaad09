//! The Store actor: the shell around a [`Backend`] that serializes writes,
//! runs the reads that scan off its own task, group-commits flushes and
//! keeps the search index and the generation counters in step.
//!
//! A read that scans (a session's turns, a listing, the inbox) runs on the
//! blocking pool so that turn writes never wait behind it. It is started
//! only when the actor reaches its message, after every write sent before
//! it was applied, so a caller still reads its own writes; a point read (one
//! record by id) is answered here, as it costs less than the hand-off.

use std::sync::Arc;

use super::*;

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
        // Made from a forgotten summary, or is one.
        let built_from_gone = |s: &ConversationSummary| {
            gone.contains(&s.summary_id) || s.source_summary_ids.iter().any(|id| gone.contains(id))
        };
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
        let t = state.backend.clone();
        let Some(msg) = state.unless_forgotten(msg).await else {
            return Ok(());
        };
        match msg {
            StoreMsg::OpenSession(rec) => match t.open_session(&rec).await {
                Ok(()) => state.wrote(&myself).await,
                Err(e) => state.failed("open_session", &e),
            },
            StoreMsg::AppendTurn {
                session_id,
                seq,
                value,
            } => {
                let res = t.append_turn(session_id, seq, &value).await;
                state.backlog.handled();
                match res {
                    Ok(()) => {
                        state.stats.turns_written += 1;
                        state.wrote(&myself).await;
                    }
                    Err(e) => state.failed("append_turn", &e),
                }
            }
            StoreMsg::EndSession(rec) => {
                let at = rec.ended_at.unwrap_or(rec.started_at);
                let res = t.end_session(&rec, at).await;
                state
                    .generations
                    .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                match res {
                    Ok(()) => {
                        index_ended(&state.search, &t, &rec).await;
                        state.wrote(&myself).await
                    }
                    Err(e) => {
                        // Not lost: written again until it is (a caller
                        // asking for durability meanwhile is told it is
                        // not written yet).
                        state.stats.write_errors += 1;
                        error!(error = %e, session_id = %rec.session_id, "a session's end could not be written; trying again");
                        state.end_later(&myself, rec);
                    }
                }
            }
            StoreMsg::RetryEnds => {
                let waiting = std::mem::take(&mut state.unended);
                for rec in waiting {
                    if state.forgotten.contains(&rec.session_id) {
                        continue;
                    }
                    if !state.unended.is_empty() {
                        // The store is still out of reach: the rest wait too.
                        state.unended.push(rec);
                        continue;
                    }
                    let at = rec.ended_at.unwrap_or(rec.started_at);
                    match t.end_session(&rec, at).await {
                        Ok(()) => {
                            tracing::info!(session_id = %rec.session_id, "a session's end was written once the store could be reached");
                            state.generations.bump_user(
                                &rec.agent_id,
                                &rec.user_id,
                                Parts::SESSIONS,
                            );
                            index_ended(&state.search, &t, &rec).await;
                            state.wrote(&myself).await;
                        }
                        Err(_) => state.unended.push(rec),
                    }
                }
                if state.unended.is_empty() {
                    state.retry_ends_after = RETRY_ENDS_FIRST;
                } else {
                    warn!(
                        sessions = state.unended.len(),
                        "sessions' ends still cannot be written; trying again"
                    );
                    state.retry_ends_after = (state.retry_ends_after * 2).min(RETRY_ENDS_MAX);
                    myself.send_after(state.retry_ends_after, || StoreMsg::RetryEnds);
                }
            }
            StoreMsg::CloseOrphan {
                session_id,
                reason,
                at,
                reply,
            } => {
                let res = t.close_orphan(session_id, reason, at).await;
                if let Ok(Some(rec)) = &res {
                    state
                        .generations
                        .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                    index_ended(&state.search, &t, rec).await;
                }
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::LoadSession { session_id, reply } => {
                state.read_off(reply, move |b| {
                    Box::pin(async move { b.load_session(session_id).await })
                });
            }
            StoreMsg::Forget {
                user_id,
                agent_id,
                sessions,
                again,
                reply,
            } => {
                // An end waiting to be written again is theirs no more.
                state.unended.retain(|r| {
                    !(r.user_id == user_id && agent_id.as_deref().is_none_or(|a| a == r.agent_id))
                });
                let mut res = if again {
                    t.forget_user_again(&user_id, agent_id.as_deref()).await
                } else {
                    t.forget_user(&user_id, agent_id.as_deref()).await
                };
                // What is left of the calls this forget ended, whoever
                // removed their records first; a failure here is the
                // forget's, after what it did commit is cleaned up below.
                let mut left = Ok(());
                if let (Ok(r), false) = (&mut res, sessions.is_empty()) {
                    let ended = match t.forget_sessions(&sessions).await {
                        Ok(n) => t.keep_forgotten(&sessions).await.map(|()| n),
                        Err(e) => Err(e),
                    };
                    match ended {
                        Ok(n) => {
                            r.sessions += n;
                            r.removed_ids.extend(sessions.iter().copied());
                        }
                        Err(e) => left = Err(e),
                    }
                }
                if let Ok(r) = &res {
                    for agent in &r.agents {
                        state.generations.bump(agent, Parts::ALL);
                        let (ids, user) = (r.removed_ids.clone(), user_id.clone());
                        state.search.update(agent, move |ix| {
                            for id in ids {
                                ix.remove(id);
                            }
                            ix.remove_user(&user);
                        });
                    }
                    state.forgotten.extend(r.removed_ids.iter().copied());
                }
                let _ = reply.send(left.and(res));
            }
            StoreMsg::Forgetting(ids) => state.forgotten.extend(ids),
            StoreMsg::ForgetCalls { sessions, reply } => {
                let res = match t.forget_sessions(&sessions).await {
                    Ok(n) => t.keep_forgotten(&sessions).await.map(|()| n),
                    Err(e) => Err(e),
                };
                if res.is_ok() {
                    state.forgotten.extend(sessions.iter().copied());
                    // Their agents' indexes and contexts are read afresh.
                    state.search.clear();
                }
                let _ = reply.send(res);
            }
            StoreMsg::ReviseSession {
                summary,
                facts,
                reply,
            } => {
                let res = t.revise_session(&summary, &facts).await;
                if let Ok(r) = &res {
                    if r.stored {
                        state.generations.bump(&summary.agent_id, Parts::ALL);
                        let (old, added, moved) = (
                            r.old.as_ref().map(|o| o.summary_id),
                            r.facts_added.clone(),
                            r.facts_moved.clone(),
                        );
                        let s = summary.clone();
                        let mut vectors = vectors_for(
                            &state.search,
                            &t,
                            &summary.agent_id,
                            added.iter().chain(&moved).collect(),
                        )
                        .await;
                        state.search.update(&summary.agent_id, move |ix| {
                            if let Some(old) = old {
                                ix.remove(old);
                            }
                            ix.put_summary(&s, None);
                            index_facts(ix, added.iter().chain(&moved), &mut vectors);
                        });
                        state.wrote(&myself).await;
                    }
                }
                let _ = reply.send(res);
            }
            StoreMsg::StampDerivation {
                summary_id,
                derivation,
                reply,
            } => {
                let res = t.stamp_derivation(summary_id, &derivation).await;
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::CompleteReflection {
                summary,
                blocks,
                facts,
                reply,
            } => {
                let res = t.store_reflection(&summary, &blocks, &facts).await;
                // The user's summary, facts and blocks (a reflection writes
                // the user's own, never the agent's); every user's facts
                // where a fact is shared (the summary counter it moves in
                // the agent's record is the watchdog's, not part of a
                // context). A reflection without a shared fact leaves the
                // other users' cached contexts current.
                let (agent, user) = (&summary.agent_id, &summary.user_id);
                let theirs = Parts::SUMMARIES
                    | Parts::FACTS
                    | if blocks.is_empty() {
                        Parts::NONE
                    } else {
                        Parts::BLOCKS
                    };
                state.generations.bump_user(agent, user, theirs);
                if matches!(res, Ok(Reflected { shared: true, .. })) {
                    state.generations.bump(agent, Parts::FACTS);
                }
                let res = res.map(|r| r.stored);
                if res.as_ref().is_ok_and(|stored| *stored)
                    && state.search.tracks(&summary.agent_id)
                {
                    // The facts that survived de-duplication, and those on
                    // their subjects, as they now stand.
                    let subjects: std::collections::BTreeSet<&String> =
                        facts.iter().filter_map(|f| f.subject.as_ref()).collect();
                    let touched: Vec<FactRecord> = match facts.first() {
                        Some(f) => t
                            .user_facts(&f.agent_id, &f.user_id)
                            .await
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|s| {
                                facts.iter().any(|c| c.fact_id == s.fact_id)
                                    || s.subject.as_ref().is_some_and(|x| subjects.contains(x))
                            })
                            .collect(),
                        None => Vec::new(),
                    };
                    let s = summary.clone();
                    let mut vectors = fact_vectors(&*t, touched.iter().collect()).await;
                    state.search.update(&summary.agent_id, move |ix| {
                        ix.put_summary(&s, None);
                        index_facts(ix, &touched, &mut vectors);
                    });
                }
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::ListFacts {
                agent_id,
                user_id,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.visible_facts(&agent_id, &user_id).await })
            }),
            StoreMsg::GetFact(id, reply) => {
                let _ = reply.send(t.fact(id).await);
            }
            StoreMsg::SetFactVisibility {
                fact_id,
                user_id,
                visibility,
                reply,
            } => {
                let res = t.set_fact_visibility(fact_id, &user_id, visibility).await;
                if let Ok(f) = &res {
                    state.generations.bump(&f.agent_id, Parts::FACTS);
                    let f2 = f.clone();
                    let mut vectors = vectors_for(&state.search, &t, &f.agent_id, vec![&f2]).await;
                    state
                        .search
                        .update(&f.agent_id, move |ix| index_facts(ix, [&f2], &mut vectors));
                }
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::DeleteFact {
                fact_id,
                user_id,
                reply,
            } => {
                let res = t.delete_fact(fact_id, &user_id).await;
                if let Ok((f, moved)) = &res {
                    state.generations.bump(&f.agent_id, Parts::FACTS);
                    let (id, moved) = (f.fact_id, moved.clone());
                    let mut vectors =
                        vectors_for(&state.search, &t, &f.agent_id, moved.iter().collect()).await;
                    state.search.update(&f.agent_id, move |ix| {
                        ix.remove(id);
                        index_facts(ix, &moved, &mut vectors);
                    });
                }
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res.map(|(f, _)| f));
            }
            StoreMsg::DeadLetter { letter, reply } => {
                let res = t.dead_letter(&letter).await;
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::Requeue {
                session_id,
                at,
                reply,
            } => {
                let res = t.requeue(session_id, at).await;
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutBlock { block, reply } => {
                let res = t.put_block(&block).await;
                state.generations.bump(&block.agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::SetPersistentContext {
                agent_id,
                lines,
                reply,
            } => {
                let res = t.set_persistent_context(&agent_id, lines).await;
                state.generations.bump(&agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::MarkContextBuilt {
                agent_id,
                version,
                expires_at,
            } => match t.mark_context_built(&agent_id, version, expires_at).await {
                Ok(()) => state.wrote(&myself).await,
                Err(e) => state.failed("mark_context_built", &e),
            },
            StoreMsg::GetSession(id, reply) => {
                let _ = reply.send(t.session(id).await);
            }
            StoreMsg::ListSessions(agent, reply) => state.read_off(reply, move |b| {
                Box::pin(async move { b.sessions(agent.as_deref()).await })
            }),
            StoreMsg::ListOpenSessions(reply) => {
                state.read_off(reply, |b| Box::pin(async move { b.open_sessions().await }))
            }
            StoreMsg::PageSessions { listing, reply } => state.read_off(reply, move |b| {
                Box::pin(async move { b.list_sessions(&listing).await })
            }),
            StoreMsg::GetTurns(id, reply) => {
                state.read_off(reply, move |b| Box::pin(async move { b.turns(id).await }))
            }
            StoreMsg::GetNumberedTurns(id, reply) => state.read_off(reply, move |b| {
                Box::pin(async move { b.numbered_turns(id).await })
            }),
            StoreMsg::GetSummary(id, reply) => {
                let _ = reply.send(t.summary(id).await);
            }
            StoreMsg::ListSummaries {
                agent_id,
                kind,
                since,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.summaries(&agent_id, kind, since).await })
            }),
            StoreMsg::PageSummaries {
                agent_id,
                listing,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.list_summaries(&agent_id, &listing).await })
            }),
            StoreMsg::GetBlocks(agent, reply) => state.read_off(reply, move |b| {
                Box::pin(async move { b.blocks(&agent).await })
            }),
            StoreMsg::GetUserBlocks {
                agent_id,
                user_id,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.user_blocks(&agent_id, &user_id).await })
            }),
            StoreMsg::ListAgents(reply) => {
                state.read_off(reply, |b| Box::pin(async move { b.agents().await }))
            }
            StoreMsg::GetAgent(agent_id, reply) => {
                let _ = reply.send(t.agent(&agent_id).await);
            }
            StoreMsg::LatestSummary {
                agent_id,
                kind,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.latest_summary(&agent_id, kind).await })
            }),
            StoreMsg::ListQueue(reply) => {
                state.read_off(reply, |b| Box::pin(async move { b.queued().await }))
            }
            StoreMsg::ListDeadLetters(reply) => {
                state.read_off(reply, |b| Box::pin(async move { b.dead_letters().await }))
            }
            StoreMsg::AgentDeadLetters {
                agent_id,
                after,
                limit,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.agent_dead_letters(&agent_id, after, limit).await })
            }),
            StoreMsg::GetDeadLetter(id, reply) => {
                let _ = reply.send(t.find_dead_letter(id).await);
            }
            // Off the writer: a shared backend counts in the database.
            StoreMsg::CountDeadLetters(reply) => state.read_off(reply, |b| {
                Box::pin(async move { b.dead_letter_count().await })
            }),
            StoreMsg::PutRollup {
                summary,
                supersedes,
                vector,
                reply,
            } => {
                let res = t.put_rollup(&summary, supersedes, vector.as_ref()).await;
                if let Ok(true) = res {
                    // A rollup is one user's.
                    state.generations.bump_user(
                        &summary.agent_id,
                        &summary.user_id,
                        Parts::SUMMARIES,
                    );
                    let s = summary.clone();
                    state.search.update(&summary.agent_id, move |ix| {
                        if let Some(old) = supersedes {
                            ix.remove(old);
                        }
                        ix.put_summary(&s, vector);
                    });
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::RollupCursor {
                agent_id,
                level,
                reply,
            } => {
                let _ = reply.send(t.rollup_cursor(&agent_id, level).await);
            }
            StoreMsg::SetRollupCursor {
                agent_id,
                level,
                period,
                reply,
            } => {
                let res = t.set_rollup_cursor(&agent_id, level, period).await;
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::Inbox {
                after,
                limit,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.inbox(after.as_deref(), limit).await })
            }),
            StoreMsg::InboxDone { keys, reply } => {
                let res = t.inbox_done(&keys).await;
                if res.is_ok() {
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::Topics {
                agent_id,
                user_id,
                reply,
            } => state.read_off(reply, move |b| {
                Box::pin(async move { b.topics(&agent_id, user_id.as_deref()).await })
            }),
            StoreMsg::PutTopic {
                topic,
                summary,
                vector,
                reply,
            } => {
                let res = t.put_topic(&topic, &summary, vector.as_ref()).await;
                if res.is_ok() {
                    // The topic and its summary, one user's.
                    state.generations.bump_user(
                        &topic.agent_id,
                        &topic.user_id,
                        Parts::TOPICS | Parts::SUMMARIES,
                    );
                    let s = summary.clone();
                    state
                        .search
                        .update(&summary.agent_id, move |ix| ix.put_summary(&s, vector));
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutVectors {
                agent_id,
                items,
                reply,
            } => {
                let res = t.put_vectors(&items).await;
                if let Ok(stored) = &res {
                    let stored = stored.clone();
                    state.search.update(&agent_id, move |ix| {
                        for (id, v) in items {
                            if stored.contains(&id) {
                                ix.set_vector(id, v);
                            }
                        }
                    });
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res.map(|_| ()));
            }
            StoreMsg::PutTurnVectors {
                agent_id,
                session_id,
                items,
                reply,
            } => {
                let res = t.put_turn_vectors(session_id, &items).await;
                if let Ok(stored) = &res {
                    let stored: std::collections::HashSet<u32> = stored.iter().copied().collect();
                    state.search.update(&agent_id, move |ix| {
                        for (seq, v) in items {
                            if stored.contains(&seq) {
                                ix.set_vector(TurnRef { session_id, seq }.doc_id(), v);
                            }
                        }
                    });
                    state.wrote(&myself).await;
                }
                let _ = reply.send(res.map(|_| ()));
            }
            StoreMsg::Barrier(reply) => {
                let _ = reply.send(());
            }
            StoreMsg::Flush(reply) => {
                // Answered by the next flush to begin: now, or after the
                // one in progress (it may have begun before this caller's
                // writes).
                state.flush_next.push(reply);
                if !state.flushing {
                    state.start_flush(&myself);
                }
            }
            StoreMsg::Stats(reply) => {
                state.stats.skipped_records = t.skipped_records();
                let _ = reply.send(state.stats);
            }
            StoreMsg::FlushTick => {
                state.tick_armed = false;
                if state.dirty && !state.flushing {
                    state.start_flush(&myself);
                }
            }
            StoreMsg::FlushDone(res) => {
                state.flushing = false;
                state.stats.flushes += 1;
                if let Err(err) = &res {
                    // The data stays in the backend's cache; mark it dirty
                    // so the next tick tries again.
                    state.stats.write_errors += 1;
                    state.dirty = true;
                    error!(error = %err, "flush failed");
                }
                let failed =
                    std::mem::take(&mut state.flush_waiters_failed) + state.unended.len() as u64;
                for reply in state.flush_waiters.drain(..) {
                    let _ = reply.send(match &res {
                        Err(err) => Err(StoreError::FlushFailed(err.clone())),
                        Ok(()) if failed > 0 => Err(StoreError::WritesFailed(failed)),
                        Ok(()) => Ok(()),
                    });
                }
                if !state.flush_next.is_empty() {
                    state.start_flush(&myself);
                } else if state.dirty {
                    state.arm(&myself);
                }
                debug!("flushed");
            }
        }
        // (A read off this actor may write the batch meanwhile: the count
        // is then high until the next message, which the flush ticks
        // that follow every write bring.)
        state.backlog.set_buffered(t.buffered_turns());
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
