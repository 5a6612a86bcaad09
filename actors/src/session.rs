//! SessionActor: one per live session.
//!
//! Owns the session's turns and its silence timer. Receives `Turn`, `Touch`,
//! `End`, its own `SilenceElapsed`, and `Inspect`. Sends every turn to the
//! Store as it arrives (`AppendTurn`), and when it ends, the ended record to
//! the Store (`EndSession`) and to the supervisor (`SessionEnded`).
//!
//! The silence window counts from the session's start and from every turn
//! or touch. A turn only moves the deadline; the timer, when it fires early,
//! re-arms for the time left. So the hot path never touches a timer.
//!
//! Ending marks the connection ended in the registry first, then drains the
//! mailbox: a turn that was already on its way is still recorded in this
//! session, and any later one opens a new session on the connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::model::{ConversationTurn, EndReason, SessionRecord};
use crate::prompt::{conversation_text, PromptTemplate};
use crate::reflect::parse::parse_reflection;
use crate::reflect::{Reflect, ReflectRequest};
use crate::registry::Registry;
use crate::store::{StoreError, StoreMsg};
use crate::supervisor::SupervisorMsg;
use crate::watchdog::WatchdogMsg;
use crate::window::{FoldJob, FoldPolicy, LongMemory, RollingMemory, WindowJob, WindowMemory};

pub enum SessionMsg {
    /// A completed exchange; the hot path casts this.
    Turn(ConversationTurn),
    /// The user is speaking but no turn is complete: defer the silence end
    /// (counted from when the caller touched, not when this is handled).
    Touch(Instant),
    /// End the session for this reason (first reason wins).
    End(EndReason),
    /// The silence timer fired; stale generations are ignored.
    SilenceElapsed(u64),
    /// The session as it is now.
    Inspect(RpcReplyPort<SessionView>),
    /// What a context read needs: the rolling memory and the gap's turns
    /// (kept in the session's [`LiveView`] too).
    Working(RpcReplyPort<Arc<WorkingView>>),
    /// Answer once every turn handled so far is flushed to disk: the flush
    /// is sent to the Store behind those turns' writes.
    Sync(RpcReplyPort<Result<(), StoreError>>),
    /// A window summary came back (`Err` with why it failed).
    WindowDone {
        id: u64,
        result: Result<String, String>,
    },
    /// A fold into the long narrative came back.
    FoldDone {
        id: u64,
        result: Result<String, String>,
    },
    /// Answers once every message sent before it is handled: a barrier.
    Ping(RpcReplyPort<()>),
    /// Panic inside the actor: exercises the crash path in tests.
    InjectPanic,
}

/// A live session's record and turns, and its rolling memory as a read
/// sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub record: SessionRecord,
    /// The turns kept in memory: the newest (at most about
    /// `session.max_turns_in_memory`); all of them are on disk.
    pub turns: Vec<ConversationTurn>,
    /// The latest completed window summary, if any.
    pub memory: Option<WindowMemory>,
    /// The first message (sequence number) not covered by `memory`: the
    /// gap starts at turn `gap_start / 2`.
    pub gap_start: u64,
    /// False while a newer window summary is still being made (the read
    /// fell back to an older one, with a larger gap).
    pub caught_up: bool,
}

/// The part of a live session a context read uses: the latest completed
/// window summary and the turns after it, not the whole call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkingView {
    pub session_id: uuid::Uuid,
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The latest completed narrative of the call's older part.
    pub long: Option<LongMemory>,
    /// The window summaries after it, oldest first.
    pub windows: Vec<WindowMemory>,
    /// The raw turns after the last window.
    pub gap: Vec<ConversationTurn>,
}

/// What a context read last got from a live session's actor, shared by
/// the actor, the registry and readers: a read takes it as it is while no
/// turn was sent to the actor since and no window summary completed,
/// instead of asking the actor (a round trip through its mailbox and two
/// thread wake-ups, the largest part of a cached context read's tail).
#[derive(Debug, Default)]
pub struct LiveView {
    /// Turns cast to the actor, counted by the registry before each cast.
    sent: AtomicU64,
    /// Window summaries and folds the actor has taken in.
    changes: AtomicU64,
    kept: std::sync::Mutex<Option<KeptView>>,
}

#[derive(Debug)]
struct KeptView {
    /// Turns the actor had handled, and changes taken in, when it made
    /// the view.
    turns: u64,
    changes: u64,
    view: Arc<WorkingView>,
}

impl LiveView {
    /// A turn is about to be cast to the actor.
    pub fn turn_sent(&self) {
        self.sent.fetch_add(1, Ordering::AcqRel);
    }

    /// The view the actor last made, if it still holds: every turn sent
    /// was in it and nothing completed since.
    pub fn current(&self) -> Option<Arc<WorkingView>> {
        let sent = self.sent.load(Ordering::Acquire);
        let changes = self.changes.load(Ordering::Acquire);
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.as_ref()
            .filter(|k| k.turns == sent && k.changes == changes)
            .map(|k| k.view.clone())
    }

    fn keep(&self, turns: u64, view: Arc<WorkingView>) {
        let changes = self.changes.load(Ordering::Acquire);
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(KeptView {
            turns,
            changes,
            view,
        });
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }
}

/// What window summaries need, shared by every session.
/// Least time between two reports of a live call's words to the watchdog.
const TOPIC_REPORT_INTERVAL: Duration = Duration::from_secs(30);

pub struct WindowDeps {
    pub reflect: Arc<dyn Reflect>,
    pub system: String,
    pub prompt: PromptTemplate,
    pub timeout: Duration,
    pub start_messages: u64,
    pub window_messages: u64,
    /// Raw-turn tokens that trigger an early window summary.
    pub max_session_tokens: usize,
    /// Folds older windows into the long narrative.
    pub long_prompt: PromptTemplate,
    pub fold: FoldPolicy,
    /// Messages after the latest window's end before the next starts.
    pub every_messages: u64,
    /// In-session summaries (windows and folds) running at once, across
    /// sessions: derived work that may lag, kept from taking the cores
    /// the turns need. A summary waiting here keeps its session's one
    /// place in flight, so the next covers what came meanwhile.
    pub permits: Arc<tokio::sync::Semaphore>,
    pub counters: WindowCounters,
    /// Summaries started whose outcome is not yet sent back to their
    /// session.
    pub in_flight: tokio::sync::watch::Sender<usize>,
    /// Told a live call's latest user messages every `topic_turns` turns
    /// (topic shifts); `None` turns that off.
    pub watchdog: Option<ActorRef<WatchdogMsg>>,
    pub topic_turns: usize,
    /// Counts the turns sent to the Store until it writes them.
    pub backlog: Arc<crate::store::Backlog>,
}

/// In-session summaries made so far, across sessions.
#[derive(Debug, Default)]
pub struct WindowCounters {
    pub windows_started: std::sync::atomic::AtomicU64,
    pub windows_completed: std::sync::atomic::AtomicU64,
    pub windows_failed: std::sync::atomic::AtomicU64,
    pub folds_completed: std::sync::atomic::AtomicU64,
    /// At each round past the threshold, the messages not yet in a
    /// completed window (how far the summaries lag): the rounds sampled,
    /// their sum, the most.
    pub lag_rounds: std::sync::atomic::AtomicU64,
    pub lag_sum: std::sync::atomic::AtomicU64,
    pub lag_max: std::sync::atomic::AtomicU64,
}

/// One in-session summary counted in flight until dropped.
struct InFlight(tokio::sync::watch::Sender<usize>);

impl InFlight {
    fn new(count: &tokio::sync::watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// The bytes of a turn's text.
fn turn_bytes(t: &ConversationTurn) -> usize {
    t.user_message.len() + t.agent_response.len()
}

fn bump(c: &std::sync::atomic::AtomicU64) {
    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

pub struct SessionArgs {
    pub record: SessionRecord,
    /// Turns kept in memory (`session.max_turns_in_memory`).
    pub max_turns_in_memory: usize,
    /// Bytes of their text kept in memory (`session.max_bytes_in_memory`).
    pub max_bytes_in_memory: usize,
    /// Turns that arrived while the session was being opened.
    pub pending: Vec<ConversationTurn>,
    pub registry: Arc<Registry>,
    pub store: ActorRef<StoreMsg>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub silence: Duration,
    pub clock: Clock,
    pub window: Arc<WindowDeps>,
    /// Shared with the registry's entry for the connection.
    pub view: Arc<LiveView>,
}

pub struct SessionState {
    record: SessionRecord,
    /// The newest turns; the `evicted` before them are on disk only.
    turns: Vec<ConversationTurn>,
    evicted: usize,
    max_turns_in_memory: usize,
    /// Bytes of text of `turns`, and their bound.
    held_bytes: usize,
    max_bytes_in_memory: usize,
    registry: Arc<Registry>,
    store: ActorRef<StoreMsg>,
    supervisor: ActorRef<SupervisorMsg>,
    silence: Duration,
    clock: Clock,
    last_activity: Instant,
    /// When the latest user messages last went to the watchdog.
    topic_reported: Option<Instant>,
    generation: u64,
    timer: Option<JoinHandle<Result<(), ractor::MessagingErr<SessionMsg>>>>,
    ending: Option<EndReason>,
    /// `recall_turns_recorded_total`, looked up once rather than per turn.
    turns_recorded: metrics::Counter,
    rolling: RollingMemory,
    window: Arc<WindowDeps>,
    view: Arc<LiveView>,
    /// `Turn` messages handled (what the registry counts as sent).
    turns_received: u64,
}

pub struct SessionActor;

impl SessionState {
    fn arm(&mut self, myself: &ActorRef<SessionMsg>, after: Duration) {
        if let Some(t) = self.timer.take() {
            t.abort();
        }
        self.generation += 1;
        let generation = self.generation;
        self.timer = Some(myself.send_after(after, move || SessionMsg::SilenceElapsed(generation)));
    }

    /// Turns in the session so far, in memory or not.
    fn total(&self) -> usize {
        self.evicted + self.turns.len()
    }

    /// Where turn number `n` of the session is in memory (or the first
    /// kept, if it is evicted).
    fn kept(&self, n: usize) -> usize {
        n.saturating_sub(self.evicted).min(self.turns.len())
    }

    /// Past either cap (turns, bytes), the oldest turns leave memory, an
    /// eighth of the cap at a time (so the move is paid once per many
    /// turns). They are on disk already: the session's reflection reads
    /// them there, and the windows made of them stay. Two windows' turns
    /// stay whatever their size, for the next window summary.
    fn evict(&mut self) {
        let cap = self.max_turns_in_memory;
        let keep = ((self.window.window_messages as usize).div_ceil(2) * 2).min(cap);
        let over_turns = self.turns.len() > cap + (cap / 8).max(1);
        let over_bytes = self.held_bytes > self.max_bytes_in_memory && self.turns.len() > keep;
        if !(over_turns || over_bytes) {
            return;
        }
        let target = self.max_bytes_in_memory - self.max_bytes_in_memory / 8;
        let mut out = self.turns.len().saturating_sub(cap);
        let mut bytes = self.held_bytes - self.turns[..out].iter().map(turn_bytes).sum::<usize>();
        while bytes > target && self.turns.len() - out > keep {
            bytes -= turn_bytes(&self.turns[out]);
            out += 1;
        }
        self.turns.drain(..out);
        self.evicted += out;
        self.held_bytes = bytes;
    }

    fn record_turn(&mut self, myself: &ActorRef<SessionMsg>, turn: ConversationTurn) {
        let seq = self.total() as u32;
        match StoreMsg::append_turn(self.record.session_id, seq, &turn) {
            Ok(msg) => {
                // Counted before the cast: the Store may take it at once.
                self.window.backlog.sent();
                if self.store.cast(msg).is_err() {
                    self.window.backlog.handled();
                    error!(session_id = %self.record.session_id, seq, "store is gone; turn kept in memory only");
                }
            }
            // Strings and a timestamp always encode; keep the turn anyway.
            Err(err) => {
                error!(session_id = %self.record.session_id, error = %err, "cannot encode turn")
            }
        }
        // Silence counts from when the turn was recorded, not from when
        // this actor got to it.
        let at = self.clock.instant_of(turn.timestamp);
        self.last_activity = self.last_activity.max(at);
        self.held_bytes += turn_bytes(&turn);
        self.turns.push(turn);
        self.evict();
        self.record.turn_count = self.total() as u32;
        self.turns_recorded.increment(1);
        let job = self.rolling.round_ended().or_else(|| {
            // The token ceiling (seed 002): raw turns since the last window
            // summary over `max_session_tokens` are summarized early.
            let gap = self.kept((self.rolling.read().gap_start / 2) as usize);
            let chars: usize = self.turns[gap..]
                .iter()
                .map(|t| t.user_message.chars().count() + t.agent_response.chars().count())
                .sum();
            if chars.div_ceil(4) > self.window.max_session_tokens {
                self.rolling.summarize_early()
            } else {
                None
            }
        });
        if let Some(job) = job {
            self.start_window(myself, job);
        }
        let next = self.rolling.next_seq();
        if next > self.window.start_messages {
            use std::sync::atomic::Ordering::Relaxed;
            let behind = next - self.rolling.read().gap_start;
            let c = &self.window.counters;
            c.lag_rounds.fetch_add(1, Relaxed);
            c.lag_sum.fetch_add(behind, Relaxed);
            c.lag_max.fetch_max(behind, Relaxed);
        }
        self.report_topic();
    }

    /// Every few turns, the latest user messages go to the watchdog, which
    /// refreshes the agent's block early if the call moved to another of
    /// the user's topics.
    fn report_topic(&mut self) {
        let every = self.window.topic_turns;
        let Some(watchdog) = &self.window.watchdog else {
            return;
        };
        if every == 0 || !self.total().is_multiple_of(every) || self.turns.len() < every {
            return;
        }
        // At most one report per interval: a shift needs no faster answer,
        // and busy calls should not keep the watchdog and the Store busy.
        let now = Instant::now();
        if self
            .topic_reported
            .is_some_and(|t| now.duration_since(t) < TOPIC_REPORT_INTERVAL)
        {
            return;
        }
        self.topic_reported = Some(now);
        let text = self.turns[self.turns.len() - every..]
            .iter()
            .map(|t| t.user_message.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let _ = watchdog.cast(WatchdogMsg::LiveTurns {
            agent_id: self.record.agent_id.clone(),
            user_id: self.record.user_id.clone(),
            text,
        });
    }

    /// Summarizes a window in the background; the result comes back as
    /// `WindowDone`. Nothing waits on it.
    fn start_window(&self, myself: &ActorRef<SessionMsg>, job: WindowJob) {
        bump(&self.window.counters.windows_started);
        let first = self.kept((job.start_seq / 2) as usize);
        let last = self.kept((job.end_seq / 2) as usize + 1);
        let turns: Vec<ConversationTurn> = self.turns[first..last.max(first)].to_vec();
        if turns.is_empty() {
            // Its turns all left memory while summaries lagged: it fails,
            // and the next window covers what follows (the session's
            // reflection reads every turn from disk).
            let _ = myself.cast(SessionMsg::WindowDone {
                id: job.id,
                result: Err("the window's turns are no longer in memory".into()),
            });
            return;
        }
        let previous = job
            .base_id
            .and_then(|id| self.rolling.memories().iter().find(|m| m.id == id))
            .and_then(|m| m.summary.clone())
            .unwrap_or_default();
        let conversation = conversation_text(&turns);
        let request = ReflectRequest {
            system: self.window.system.clone(),
            prompt: self.window.prompt.render(&[&previous, &conversation]),
            session: self.record.clone(),
            turns,
            sources: Vec::new(),
            max_chars: None,
        };
        self.summarize_in_background(myself, request, conversation, move |result| {
            SessionMsg::WindowDone { id: job.id, result }
        });
    }

    /// Runs an in-session summary (a window or a fold) within the attempt
    /// timeout and sends its outcome back to this actor as `done(result)`.
    /// The session may have ended meanwhile: then nothing is updated.
    fn summarize_in_background(
        &self,
        myself: &ActorRef<SessionMsg>,
        request: ReflectRequest,
        fallback_text: String,
        done: impl FnOnce(Result<String, String>) -> SessionMsg + Send + 'static,
    ) {
        let deps = self.window.clone();
        let me = myself.clone();
        let session_id = self.record.session_id;
        let what = if request.sources.is_empty() {
            "window summary"
        } else {
            "long narrative fold"
        };
        let in_flight = InFlight::new(&deps.in_flight);
        tokio::spawn(async move {
            // (never closed: the semaphore lives as long as the deps)
            let _permit = deps.permits.acquire().await;
            let result = match tokio::time::timeout(
                deps.timeout,
                deps.reflect.reflect_in_background(request),
            )
            .await
            {
                Ok(Ok(raw)) => Ok(parse_reflection(&raw, &fallback_text).summary),
                Ok(Err(e)) => Err(e.chain()),
                Err(_) => Err(format!("no answer within {:?}", deps.timeout)),
            };
            if let Err(e) = &result {
                warn!(%session_id, error = %e, "{what} failed");
            }
            let _ = me.cast(done(result));
            // Counted out after the outcome is on its way (or if the
            // task dies first).
            drop(in_flight);
        });
    }

    /// Folds older windows into the long narrative in the background; the
    /// result comes back as `FoldDone`.
    fn start_fold(&self, myself: &ActorRef<SessionMsg>, job: FoldJob) {
        let mut sources = self.rolling.fold_sources(&job);
        let previous = match job.base_id {
            Some(_) if !sources.is_empty() => sources.remove(0),
            _ => String::new(),
        };
        let listed = sources
            .iter()
            .map(|s| format!("- {s}"))
            .collect::<Vec<_>>()
            .join("\n");
        if !previous.is_empty() {
            sources.insert(0, previous.clone());
        }
        let request = ReflectRequest {
            system: self.window.system.clone(),
            prompt: self.window.long_prompt.render(&[&previous, &listed]),
            session: self.record.clone(),
            turns: Vec::new(),
            sources,
            max_chars: None,
        };
        self.summarize_in_background(myself, request, listed, move |result| {
            SessionMsg::FoldDone { id: job.id, result }
        });
    }

    fn begin_end(&mut self, myself: &ActorRef<SessionMsg>, reason: EndReason) {
        if self.ending.is_some() {
            return;
        }
        self.ending = Some(reason);
        if let Some(t) = self.timer.take() {
            t.abort();
        }
        self.registry
            .mark_ended(&self.record.connection_id, self.record.session_id);
        // Handle what is already queued, then stop.
        if myself.drain().is_err() {
            myself.stop(None);
        }
    }
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        args.store
            .cast(StoreMsg::OpenSession(args.record.clone()))?;
        let started = args.clock.instant_of(args.record.started_at);
        let mut state = SessionState {
            record: args.record,
            turns: Vec::new(),
            evicted: 0,
            max_turns_in_memory: args.max_turns_in_memory.max(1),
            held_bytes: 0,
            max_bytes_in_memory: args.max_bytes_in_memory,
            registry: args.registry,
            store: args.store,
            supervisor: args.supervisor,
            silence: args.silence,
            clock: args.clock,
            last_activity: started,
            generation: 0,
            timer: None,
            ending: None,
            turns_recorded: metrics::counter!("recall_turns_recorded_total"),
            // A threshold in messages; the state counts sequence numbers.
            rolling: RollingMemory::new(
                args.window.start_messages.saturating_sub(1),
                args.window.window_messages,
            )
            .with_fold(args.window.fold)
            .with_every(args.window.every_messages),
            window: args.window,
            topic_reported: None,
            view: args.view,
            turns_received: 0,
        };
        for t in args.pending {
            state.record_turn(&myself, t);
        }
        let left = (state.last_activity + state.silence).saturating_duration_since(Instant::now());
        state.arm(&myself, left);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.abort();
        }
        // Stopped without an End (the supervisor went away): a shutdown.
        let reason = state.ending.unwrap_or(EndReason::Shutdown);
        if state.ending.is_none() {
            state
                .registry
                .mark_ended(&state.record.connection_id, state.record.session_id);
        }
        let mut record = state.record.clone();
        record.ended_at = Some(state.clock.now());
        record.end_reason = Some(reason);
        record.turn_count = state.total() as u32;
        info!(
            session_id = %record.session_id,
            agent_id = %record.agent_id,
            reason = %reason,
            turns = record.turn_count,
            "session ended"
        );
        if let Err(err) = state.store.cast(StoreMsg::EndSession(record.clone())) {
            // The session stays open in the store and is recovered at the
            // next start, so nothing is lost.
            error!(session_id = %record.session_id, error = %err, "store is gone; session left open for recovery");
        }
        let _ = state
            .supervisor
            .cast(SupervisorMsg::SessionEnded { record });
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Turn(turn) => {
                state.turns_received += 1;
                state.record_turn(&myself, turn)
            }
            SessionMsg::Touch(at) => state.last_activity = state.last_activity.max(at),
            SessionMsg::End(reason) => state.begin_end(&myself, reason),
            SessionMsg::SilenceElapsed(generation) => {
                if generation != state.generation || state.ending.is_some() {
                    return Ok(());
                }
                let deadline = state.last_activity + state.silence;
                let now = Instant::now();
                if now >= deadline {
                    debug!(session_id = %state.record.session_id, "silence timeout");
                    state.begin_end(&myself, EndReason::SilenceTimeout);
                } else {
                    state.arm(&myself, deadline - now);
                }
            }
            SessionMsg::Inspect(reply) => {
                let read = state.rolling.read();
                let _ = reply.send(SessionView {
                    record: state.record.clone(),
                    turns: state.turns.clone(),
                    memory: read.memory.cloned(),
                    gap_start: read.gap_start,
                    caught_up: read.caught_up,
                });
            }
            SessionMsg::Working(reply) => {
                let read = state.rolling.layered();
                let gap = state.kept((read.gap_start / 2) as usize);
                let view = Arc::new(WorkingView {
                    session_id: state.record.session_id,
                    started_at: state.record.started_at,
                    long: read.long.cloned(),
                    windows: read.windows.into_iter().cloned().collect(),
                    gap: state.turns[gap..].to_vec(),
                });
                state.view.keep(state.turns_received, view.clone());
                let _ = reply.send(view);
            }
            SessionMsg::WindowDone { id, result } => {
                state.view.changed();
                match result {
                    Ok(summary) => {
                        bump(&state.window.counters.windows_completed);
                        state.rolling.completed(id, summary);
                        if let Some(job) = state.rolling.maybe_fold() {
                            state.start_fold(&myself, job);
                        }
                    }
                    Err(_) => {
                        bump(&state.window.counters.windows_failed);
                        state.rolling.failed(id)
                    }
                }
            }
            SessionMsg::FoldDone { id, result } => {
                state.view.changed();
                match result {
                    Ok(summary) => {
                        bump(&state.window.counters.folds_completed);
                        state.rolling.fold_completed(id, summary)
                    }
                    Err(_) => state.rolling.fold_failed(id),
                }
            }
            SessionMsg::Sync(reply) => {
                if let Err(ractor::MessagingErr::SendErr(StoreMsg::Flush(reply))) =
                    state.store.cast(StoreMsg::Flush(reply))
                {
                    let _ = reply.send(Err(StoreError::Unavailable));
                }
            }
            SessionMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            SessionMsg::InjectPanic => {
                panic!("injected panic in session {}", state.record.session_id)
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(gap: &[&str]) -> Arc<WorkingView> {
        Arc::new(WorkingView {
            session_id: uuid::Uuid::nil(),
            started_at: chrono::DateTime::UNIX_EPOCH,
            long: None,
            windows: Vec::new(),
            gap: gap
                .iter()
                .map(|m| ConversationTurn {
                    user_message: m.to_string(),
                    agent_response: String::new(),
                    timestamp: chrono::DateTime::UNIX_EPOCH,
                })
                .collect(),
        })
    }

    #[test]
    fn a_kept_view_holds_until_a_turn_is_sent_or_a_summary_completes() {
        let live = LiveView::default();
        assert!(live.current().is_none(), "nothing kept yet");
        live.keep(0, view(&[]));
        assert!(live.current().is_some());
        // a turn on its way: the actor must be asked (behind the turn)
        live.turn_sent();
        assert!(live.current().is_none());
        // a view made before the actor handled it still does not hold
        live.keep(0, view(&[]));
        assert!(live.current().is_none());
        live.keep(1, view(&["hi"]));
        assert_eq!(live.current().map(|v| v.gap.len()), Some(1));
        // a window summary taken in
        live.changed();
        assert!(live.current().is_none());
        live.keep(1, view(&["hi"]));
        assert!(live.current().is_some());
    }
}
