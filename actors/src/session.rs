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

use std::sync::Arc;
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, error, info};

use crate::clock::Clock;
use crate::model::{ConversationTurn, EndReason, SessionRecord};
use crate::registry::Registry;
use crate::store::{StoreError, StoreMsg};
use crate::supervisor::SupervisorMsg;

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
    /// Answer once every turn handled so far is flushed to disk: the flush
    /// is sent to the Store behind those turns' writes.
    Sync(RpcReplyPort<Result<(), StoreError>>),
    /// Panic inside the actor: exercises the crash path in tests.
    InjectPanic,
}

/// A live session's record and turn count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub record: SessionRecord,
    pub turns: Vec<ConversationTurn>,
}

pub struct SessionArgs {
    pub record: SessionRecord,
    /// Turns that arrived while the session was being opened.
    pub pending: Vec<ConversationTurn>,
    pub registry: Arc<Registry>,
    pub store: ActorRef<StoreMsg>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub silence: Duration,
    pub clock: Clock,
}

pub struct SessionState {
    record: SessionRecord,
    turns: Vec<ConversationTurn>,
    registry: Arc<Registry>,
    store: ActorRef<StoreMsg>,
    supervisor: ActorRef<SupervisorMsg>,
    silence: Duration,
    clock: Clock,
    last_activity: Instant,
    generation: u64,
    timer: Option<JoinHandle<Result<(), ractor::MessagingErr<SessionMsg>>>>,
    ending: Option<EndReason>,
    /// `recall_turns_recorded_total`, looked up once rather than per turn.
    turns_recorded: metrics::Counter,
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

    fn record_turn(&mut self, turn: ConversationTurn) {
        let seq = self.turns.len() as u32;
        match StoreMsg::append_turn(self.record.session_id, seq, &turn) {
            Ok(msg) => {
                if self.store.cast(msg).is_err() {
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
        self.turns.push(turn);
        self.record.turn_count = self.turns.len() as u32;
        self.turns_recorded.increment(1);
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
        };
        for t in args.pending {
            state.record_turn(t);
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
        record.turn_count = state.turns.len() as u32;
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
            SessionMsg::Turn(turn) => state.record_turn(turn),
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
                let _ = reply.send(SessionView {
                    record: state.record.clone(),
                    turns: state.turns.clone(),
                });
            }
            SessionMsg::Sync(reply) => {
                if let Err(ractor::MessagingErr::SendErr(StoreMsg::Flush(reply))) =
                    state.store.cast(StoreMsg::Flush(reply))
                {
                    let _ = reply.send(Err(StoreError::Unavailable));
                }
            }
            SessionMsg::InjectPanic => {
                panic!("injected panic in session {}", state.record.session_id)
            }
        }
        Ok(())
    }
}
