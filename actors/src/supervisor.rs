//! SessionSupervisor: spawns and monitors session actors and reflectors.
//!
//! Receives `Start`/`Reopen` (spawn a linked `SessionActor`), `SessionEnding`
//! and `SessionEnded` from sessions, `Enqueue` for recovered or requeued
//! reflections, `ReflectionFinished` from reflectors, `EndAll` at shutdown,
//! and supervision events. Sends `CloseOrphan` to the Store when a session
//! actor panics, so the crashed session is ended with reason `crashed` from
//! its stored turns and reflected.
//!
//! Reflections run at most `reflector.max_concurrent` at a time; the rest
//! wait in memory here and durably in the Store's queue tree.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    call_t, Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio::sync::watch;
use tracing::{error, info, warn};
use uuid::Uuid;

use crate::clock::Clock;
use crate::model::{validate_id, DeadLetter, EndReason, InputError, ReflectionJob, SessionRecord};
use crate::prompt::{PromptTemplate, Prompts};
use crate::reflect::Reflect;
use crate::reflector::{ReflectorActor, ReflectorArgs};
use crate::registry::{Busy, Owner, Registry};
use crate::rollup::RollupMsg;
use crate::session::{LiveView, SessionActor, SessionArgs, SessionMsg, WindowDeps};
use crate::settings::Settings;
use crate::store::StoreMsg;
use crate::watchdog::WatchdogMsg;

/// How long the supervisor waits on the Store when a session crashed.
const STORE_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("connection {0:?} already has a live session")]
    ConnectionBusy(String),
    #[error("connection {0:?} was recently another agent's; use a new connection id")]
    ConnectionOwned(String),
    #[error("the runtime is shutting down")]
    ShuttingDown,
    #[error(
        "agent {agent_id:?} has {max} live sessions (session.max_live_per_agent); end one first"
    )]
    TooManySessions { agent_id: String, max: usize },
    #[error("the server has {max} live sessions (session.max_live); end one first")]
    TooManyLive { max: usize },
    #[error("cannot spawn the session actor")]
    Spawn(#[source] ractor::SpawnErr),
}

/// The outcome of one reflection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReflectionOutcome {
    /// A new summary was stored.
    Stored,
    /// The summary existed already; nothing changed.
    Duplicate,
    /// The retry budget ran out; the job is in the dead-letter tree.
    DeadLettered,
    /// The session was missing from the store; nothing to reflect on.
    Missing,
}

/// Counters published on a watch channel after every message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SupervisorStats {
    pub live_sessions: usize,
    /// Sessions that decided to end but have not reported ended yet.
    pub ending_sessions: usize,
    /// Connections waiting for a session to (re)open.
    pub opening: usize,
    pub sessions_started: u64,
    pub sessions_ended: u64,
    pub sessions_crashed: u64,
    pub reflections_running: usize,
    pub reflections_queued: usize,
    pub summaries_stored: u64,
    pub duplicates: u64,
    pub dead_lettered: u64,
    /// In-session window summaries started, completed and failed, and
    /// folds into long narratives completed.
    pub windows_started: u64,
    pub windows_completed: u64,
    pub windows_failed: u64,
    pub folds_completed: u64,
    /// How far window summaries lag: at each round of a live call past
    /// the threshold, the messages not yet in a completed window; the
    /// rounds sampled, their sum and the most.
    pub window_lag_rounds: u64,
    pub window_lag_sum: u64,
    pub window_lag_max: u64,
}

/// In-session summaries made at once (`session.window_concurrency`, or
/// by the summarizer when 0).
fn window_concurrency(settings: &Settings, summarizer: &str) -> usize {
    match settings.session.window_concurrency {
        0 if summarizer == "extractive" => std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .max(1),
        0 => settings.reflector.max_concurrent.max(1),
        n => n,
    }
}

impl SupervisorStats {
    /// No session is ending or opening and no reflection runs or waits.
    pub fn idle(&self) -> bool {
        self.ending_sessions == 0
            && self.opening == 0
            && self.reflections_running == 0
            && self.reflections_queued == 0
    }
}

pub enum SupervisorMsg {
    /// Start a session on a connection.
    Start {
        agent_id: String,
        user_id: String,
        connection_id: String,
        reply: RpcReplyPort<Result<SessionRecord, StartError>>,
    },
    /// A turn arrived for a connection whose session ended: open a new one
    /// and hand it the pending turns.
    Reopen { connection_id: String },
    /// A session actor stopped; its record is final.
    SessionEnded { record: SessionRecord },
    /// Reflect on this job (recovered at start, or retried from the dead
    /// letters).
    Enqueue(ReflectionJob),
    /// A reflector is done with its job.
    ReflectionFinished {
        session_id: Uuid,
        outcome: ReflectionOutcome,
    },
    /// End every live session with `reason`; replies with how many.
    EndAll {
        reason: EndReason,
        reply: RpcReplyPort<usize>,
    },
    /// Sessions a forget is about to end: not reflected on (their user
    /// asked to be forgotten; nothing of theirs goes to the summarizer).
    Forgetting(Vec<Uuid>),
    /// Forget connections that ended longer ago than the reopen window.
    Prune,
    /// The counters, after every message sent before this one.
    Stats(RpcReplyPort<SupervisorStats>),
}

pub struct SupervisorArgs {
    pub settings: Settings,
    pub registry: Arc<Registry>,
    pub store: ActorRef<StoreMsg>,
    pub reflect: Arc<dyn Reflect>,
    pub prompts: Arc<Prompts>,
    pub clock: Clock,
    pub stats: watch::Sender<SupervisorStats>,
    /// Told when a reflection stored a summary (it takes in new summaries
    /// from the Store's inbox).
    pub rollup: Option<ActorRef<RollupMsg>>,
    /// Told live calls' latest words (topic shifts).
    pub watchdog: Option<ActorRef<WatchdogMsg>>,
    /// In-session summaries (windows and folds) started whose outcome has
    /// not yet been sent back to their session: what
    /// `Runtime::wait_windows` waits on.
    pub windows_in_flight: watch::Sender<usize>,
    /// Turns sent to the Store and not yet written (each session counts
    /// the turns it sends).
    pub backlog: Arc<crate::store::Backlog>,
}

/// Turns between a live call's reports of its latest words to the watchdog.
const TOPIC_TURNS: usize = 3;

pub struct SupervisorState {
    /// What sessions need for their window summaries.
    window: Arc<WindowDeps>,
    settings: Settings,
    registry: Arc<Registry>,
    store: ActorRef<StoreMsg>,
    reflect: Arc<dyn Reflect>,
    prompts: Arc<Prompts>,
    clock: Clock,
    stats_tx: watch::Sender<SupervisorStats>,
    stats: SupervisorStats,
    rollup: Option<ActorRef<RollupMsg>>,
    /// Live session actors: actor id → (session id, connection id).
    sessions: HashMap<ActorId, (Uuid, String)>,
    /// Live session actors of each agent (`session.max_live_per_agent`).
    live_per_agent: HashMap<ActorId, String>,
    per_agent: HashMap<String, usize>,
    /// Running reflectors and their jobs.
    reflectors: HashMap<ActorId, ReflectionJob>,
    /// Sessions with a reflection running or waiting.
    scheduled: HashSet<Uuid>,
    waiting: VecDeque<ReflectionJob>,
    /// Sessions a forget is ending, until they report ended.
    forgetting: HashSet<Uuid>,
    shutting_down: bool,
}

pub struct SessionSupervisor;

impl SupervisorState {
    fn publish(&mut self) {
        self.stats.live_sessions = self.sessions.len();
        self.stats.reflections_running = self.reflectors.len();
        self.stats.reflections_queued = self.waiting.len();
        self.stats.opening = self.registry.opening_connections().len();
        self.stats.ending_sessions = self.registry.ending();
        let c = &self.window.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        self.stats.windows_started = get(&c.windows_started);
        self.stats.windows_completed = get(&c.windows_completed);
        self.stats.windows_failed = get(&c.windows_failed);
        self.stats.folds_completed = get(&c.folds_completed);
        self.stats.window_lag_rounds = get(&c.lag_rounds);
        self.stats.window_lag_sum = get(&c.lag_sum);
        self.stats.window_lag_max = get(&c.lag_max);
        let stats = self.stats;
        // Notify only on change: waiters re-check on every notification.
        self.stats_tx.send_if_modified(|old| {
            let changed = *old != stats;
            *old = stats;
            changed
        });
    }

    async fn spawn_session(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        record: SessionRecord,
    ) -> Result<(ActorRef<SessionMsg>, Arc<LiveView>), StartError> {
        let view = Arc::new(LiveView::default());
        let args = SessionArgs {
            record: record.clone(),
            max_turns_in_memory: self.settings.session.max_turns_in_memory,
            max_bytes_in_memory: self.settings.session.max_bytes_in_memory,
            pending: Vec::new(),
            registry: self.registry.clone(),
            store: self.store.clone(),
            supervisor: myself.clone(),
            silence: self.settings.silence_timeout(),
            clock: self.clock,
            window: self.window.clone(),
            view: view.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, SessionActor, args, myself.get_cell())
            .await
            .map_err(StartError::Spawn)?;
        self.sessions.insert(
            actor.get_id(),
            (record.session_id, record.connection_id.clone()),
        );
        self.live_per_agent
            .insert(actor.get_id(), record.agent_id.clone());
        *self.per_agent.entry(record.agent_id.clone()).or_default() += 1;
        self.stats.sessions_started += 1;
        Ok((actor, view))
    }

    /// A session actor is gone: out of the live counts.
    fn remove_live(&mut self, id: &ActorId) -> Option<(Uuid, String)> {
        if let Some(agent) = self.live_per_agent.remove(id) {
            if let Some(n) = self.per_agent.get_mut(&agent) {
                *n -= 1;
                if *n == 0 {
                    self.per_agent.remove(&agent);
                }
            }
        }
        self.sessions.remove(id)
    }

    fn new_record(&self, agent_id: &str, user_id: &str, connection_id: &str) -> SessionRecord {
        SessionRecord {
            session_id: self.registry.new_session_id(),
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            connection_id: connection_id.to_string(),
            started_at: self.clock.now(),
            ended_at: None,
            end_reason: None,
            turn_count: 0,
        }
    }

    async fn schedule(&mut self, myself: &ActorRef<SupervisorMsg>, job: ReflectionJob) {
        if !self.scheduled.insert(job.session_id) {
            return;
        }
        self.waiting.push_back(job);
        self.start_waiting(myself).await;
    }

    async fn start_waiting(&mut self, myself: &ActorRef<SupervisorMsg>) {
        while self.reflectors.len() < self.settings.reflector.max_concurrent {
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            let args = ReflectorArgs {
                job: job.clone(),
                store: self.store.clone(),
                supervisor: myself.clone(),
                reflect: self.reflect.clone(),
                prompts: self.prompts.clone(),
                settings: self.settings.reflector.clone(),
                blocks: self.settings.blocks.clone(),
                clock: self.clock,
            };
            match Actor::spawn_linked(None, ReflectorActor, args, myself.get_cell()).await {
                Ok((actor, _)) => {
                    self.reflectors.insert(actor.get_id(), job);
                }
                Err(err) => {
                    // The job is still in the store's queue tree and resumes
                    // at the next start.
                    error!(session_id = %job.session_id, error = %err, "cannot spawn reflector");
                    self.scheduled.remove(&job.session_id);
                }
            }
        }
    }

    /// Starts a session on a connection free for this agent, within the
    /// bounds on live sessions.
    async fn start_session(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        agent_id: String,
        user_id: String,
        connection_id: String,
    ) -> Result<SessionRecord, StartError> {
        validate_id("agent_id", &agent_id)?;
        validate_id("user_id", &user_id)?;
        validate_id("connection_id", &connection_id)?;
        if self.shutting_down {
            return Err(StartError::ShuttingDown);
        }
        match self.registry.is_free_for(&connection_id, &agent_id) {
            Ok(()) => {}
            Err(Busy::Live) => return Err(StartError::ConnectionBusy(connection_id.clone())),
            Err(Busy::OtherAgent) => {
                return Err(StartError::ConnectionOwned(connection_id.clone()))
            }
        }
        let all = self.settings.session.max_live;
        if self.sessions.len() >= all {
            return Err(StartError::TooManyLive { max: all });
        }
        let max = self.settings.session.max_live_per_agent;
        if self.per_agent.get(&agent_id).is_some_and(|n| *n >= max) {
            return Err(StartError::TooManySessions {
                agent_id: agent_id.clone(),
                max,
            });
        }
        let record = self.new_record(&agent_id, &user_id, &connection_id);
        let (actor, view) = self.spawn_session(myself, record.clone()).await?;
        let owner = Owner {
            agent_id: agent_id.as_str().into(),
            user_id: user_id.as_str().into(),
        };
        self.registry
            .insert_live(&connection_id, owner, record.session_id, actor, view);
        Ok(record)
    }

    /// Opens the session `session_id` of `owner` that a late turn on an
    /// ended connection is waiting for (the registry holds the turn).
    async fn reopen(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        connection_id: String,
        owner: Owner,
        session_id: Uuid,
    ) {
        let mut record = self.new_record(&owner.agent_id, &owner.user_id, &connection_id);
        // The id the turn's caller was given.
        record.session_id = session_id;
        match self.spawn_session(myself, record.clone()).await {
            Ok((actor, view)) => {
                info!(session_id = %record.session_id, connection_id, "turn after session end opened a new session");
                let end_requested =
                    self.registry
                        .promote(&connection_id, record.session_id, actor.clone(), view);
                if self.shutting_down {
                    let _ = actor.cast(SessionMsg::End(EndReason::Shutdown));
                } else if let Some(reason) = end_requested {
                    self.registry.mark_ended(&connection_id, record.session_id);
                    let _ = actor.cast(SessionMsg::End(reason));
                }
            }
            Err(err) => {
                // Keep the pending turns and try again shortly.
                error!(connection_id, error = %err, "cannot reopen session; retrying");
                myself.send_after(Duration::from_millis(100), move || SupervisorMsg::Reopen {
                    connection_id,
                });
            }
        }
    }

    /// A session actor stopped with its final record: it leaves the live
    /// sessions, and is reflected on if it has turns and is not being
    /// forgotten.
    async fn session_ended(&mut self, myself: &ActorRef<SupervisorMsg>, record: SessionRecord) {
        self.registry.finished_ending(record.session_id);
        let reason = record
            .end_reason
            .map(EndReason::as_str)
            .unwrap_or("unknown");
        metrics::counter!("recall_sessions_ended_total", "reason" => reason).increment(1);
        self.stats.sessions_ended += 1;
        let ended: Vec<ActorId> = self
            .sessions
            .iter()
            .filter(|(_, (id, _))| *id == record.session_id)
            .map(|(actor, _)| *actor)
            .collect();
        for actor in ended {
            self.remove_live(&actor);
        }
        let forgotten = self.forgetting.remove(&record.session_id);
        if record.turn_count > 0 && !forgotten {
            let job = ReflectionJob {
                session_id: record.session_id,
                agent_id: record.agent_id.clone(),
                enqueued_at: record.ended_at.unwrap_or(record.started_at),
            };
            self.schedule(myself, job).await;
        }
    }
}

impl Actor for SessionSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        // Prune the connection table once per reopen window.
        let window = Duration::from_secs(args.settings.session.reopen_window_secs.max(1));
        myself.send_interval(window, || SupervisorMsg::Prune);
        let window = Arc::new(WindowDeps {
            reflect: args.reflect.clone(),
            system: args.prompts.system.clone(),
            prompt: PromptTemplate::parse(
                crate::prompt::WINDOW_SUMMARY,
                crate::prompt::WINDOW_VARS,
            )?,
            timeout: Duration::from_secs(args.settings.reflector.attempt_timeout_secs),
            start_messages: args.settings.session.window_start_messages,
            window_messages: args.settings.session.window_messages,
            max_session_tokens: args.settings.context.max_session_tokens,
            long_prompt: PromptTemplate::parse(
                crate::prompt::LONG_SUMMARY,
                crate::prompt::LONG_VARS,
            )?,
            fold: crate::window::FoldPolicy {
                windows: args.settings.session.long_fold_windows,
                chars: args.settings.session.long_fold_chars,
            },
            every_messages: args.settings.session.window_every_messages,
            permits: Arc::new(tokio::sync::Semaphore::new(window_concurrency(
                &args.settings,
                args.reflect.name(),
            ))),
            counters: Default::default(),
            in_flight: args.windows_in_flight,
            watchdog: args.watchdog.clone(),
            topic_turns: TOPIC_TURNS,
            backlog: args.backlog.clone(),
        });
        Ok(SupervisorState {
            window,
            settings: args.settings,
            registry: args.registry,
            store: args.store,
            reflect: args.reflect,
            prompts: args.prompts,
            clock: args.clock,
            stats_tx: args.stats,
            rollup: args.rollup,
            stats: SupervisorStats::default(),
            sessions: HashMap::new(),
            live_per_agent: HashMap::new(),
            per_agent: HashMap::new(),
            reflectors: HashMap::new(),
            scheduled: HashSet::new(),
            waiting: VecDeque::new(),
            forgetting: HashSet::new(),
            shutting_down: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Start {
                agent_id,
                user_id,
                connection_id,
                reply,
            } => {
                let res = state
                    .start_session(&myself, agent_id, user_id, connection_id)
                    .await;
                let _ = reply.send(res);
            }
            SupervisorMsg::Reopen { connection_id } => {
                let Some((owner, session_id)) = state.registry.opening(&connection_id) else {
                    return Ok(());
                };
                state
                    .reopen(&myself, connection_id, owner, session_id)
                    .await
            }
            SupervisorMsg::SessionEnded { record } => state.session_ended(&myself, record).await,
            SupervisorMsg::Enqueue(job) => state.schedule(&myself, job).await,
            SupervisorMsg::Forgetting(ids) => {
                state.waiting.retain(|j| !ids.contains(&j.session_id));
                for id in &ids {
                    if !state.reflectors.values().any(|j| j.session_id == *id) {
                        state.scheduled.remove(id);
                    }
                }
                state.forgetting.extend(ids);
            }
            SupervisorMsg::ReflectionFinished {
                session_id,
                outcome,
            } => {
                match outcome {
                    ReflectionOutcome::Stored => {
                        state.stats.summaries_stored += 1;
                        if let Some(r) = &state.rollup {
                            let _ = r.cast(RollupMsg::Poke);
                        }
                    }
                    ReflectionOutcome::Duplicate => state.stats.duplicates += 1,
                    ReflectionOutcome::DeadLettered => state.stats.dead_lettered += 1,
                    ReflectionOutcome::Missing => {}
                }
                state.scheduled.remove(&session_id);
            }
            SupervisorMsg::EndAll { reason, reply } => {
                state.shutting_down = true;
                let live = state.registry.live_sessions();
                for (_, _, actor) in &live {
                    let _ = actor.cast(SessionMsg::End(reason));
                }
                let _ = reply.send(live.len());
            }
            SupervisorMsg::Stats(reply) => {
                state.publish();
                let _ = reply.send(state.stats);
            }
            SupervisorMsg::Prune => {
                let window = Duration::from_secs(state.settings.session.reopen_window_secs);
                let n = state.registry.prune(window);
                if n > 0 {
                    info!(forgotten = n, "pruned ended connections");
                }
            }
        }
        state.publish();
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                let id = cell.get_id();
                if let Some(job) = state.reflectors.remove(&id) {
                    state.scheduled.remove(&job.session_id);
                    state.start_waiting(&myself).await;
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let id = cell.get_id();
                if let Some((session_id, connection_id)) = state.remove_live(&id) {
                    state.stats.sessions_crashed += 1;
                    metrics::counter!("recall_sessions_ended_total", "reason" => "crashed")
                        .increment(1);
                    error!(%session_id, connection_id, error = %err, "session actor crashed; recovering from the store");
                    state.registry.mark_ended(&connection_id, session_id);
                    let at = state.clock.now();
                    let res = call_t!(
                        state.store,
                        |reply| StoreMsg::CloseOrphan {
                            session_id,
                            reason: EndReason::Crashed,
                            at,
                            reply
                        },
                        STORE_TIMEOUT_MS
                    );
                    match res {
                        Ok(Ok(Some(record))) if record.turn_count > 0 => {
                            let job = ReflectionJob {
                                session_id,
                                agent_id: record.agent_id,
                                enqueued_at: at,
                            };
                            state.schedule(&myself, job).await;
                        }
                        Ok(Ok(_)) => {}
                        // The session stays open in the store; the next
                        // start recovers it.
                        Ok(Err(e)) => {
                            error!(%session_id, error = %e, "cannot close crashed session")
                        }
                        Err(e) => {
                            error!(%session_id, error = %e, "store unreachable closing crashed session")
                        }
                    }
                    state.registry.finished_ending(session_id);
                } else if let Some(job) = state.reflectors.remove(&id) {
                    let session_id = job.session_id;
                    warn!(%session_id, error = %err, "reflector crashed; dead-lettering its job");
                    state.scheduled.remove(&session_id);
                    let letter = DeadLetter {
                        session_id,
                        agent_id: job.agent_id,
                        user_id: String::new(),
                        attempts: 0,
                        error: format!("reflector panicked: {err}"),
                        error_kind: "panic".into(),
                        failed_at: state.clock.now(),
                    };
                    let res = call_t!(
                        state.store,
                        |reply| StoreMsg::DeadLetter { letter, reply },
                        STORE_TIMEOUT_MS
                    );
                    if let Err(e) = res {
                        error!(%session_id, error = %e, "cannot dead-letter; job stays queued");
                    }
                    state.stats.dead_lettered += 1;
                    state.start_waiting(&myself).await;
                }
            }
            _ => {}
        }
        state.publish();
        Ok(())
    }
}
