//! The embedding API: [`RuntimeBuilder`] starts the actors on a data folder,
//! [`Runtime`] is the handle a voice server keeps.
//!
//! Recording a turn is a registry read and one cast: no await, no lock held
//! across an actor. Everything else is a call with a timeout.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ractor::{call_t, Actor, ActorRef};
use recall_actors::clock::Clock;
use recall_actors::context::{AssembledContext, ContextError};
use recall_actors::model::{
    truncate_chars, BlockLabel, ConversationSummary, ConversationTurn, DeadLetter, EndReason,
    FactRecord, InputError, MemoryBlock, SessionRecord, SummaryType, Visibility,
};
use recall_actors::prompt::{PromptError, PromptTemplate, Prompts, SESSION_VARS};
use recall_actors::reflect::extractive::ExtractiveReflect;
use recall_actors::reflect::{Reflect, ReflectError};
use recall_actors::registry::{Registry, RouteError, Routed, UnknownConnection};
use recall_actors::session::{SessionMsg, SessionView};
use recall_actors::settings::{ReflectorKind, Settings, SettingsError};
use recall_actors::store::{
    Generations, StoreActor, StoreArgs, StoreError, StoreMsg, StoreStats, Trees,
};
use recall_actors::supervisor::{
    SessionSupervisor, StartError, SupervisorArgs, SupervisorMsg, SupervisorStats,
};
use recall_actors::watchdog::{
    LiveTopics, WatchdogActor, WatchdogArgs, WatchdogError, WatchdogMsg, WatchdogStats,
};
use tokio::sync::watch;
use tracing::{info, warn};
use uuid::Uuid;

use crate::embeddings::OpenAiEmbed;
use crate::llm::OpenAiReflect;
use recall_actors::embed::{Embed, EmbedError, HashingEmbed};
use recall_actors::prompt::RollupPrompts;
use recall_actors::rollup::{RollupActor, RollupArgs, RollupError, RollupMsg, RollupStats};
use recall_actors::search::SearchIndex;
use recall_actors::settings::EmbedKind;
use recall_actors::static_embed::StaticEmbed;

mod context;
mod forget;
mod hierarchy;
mod reembed;
mod replay;
pub use context::{ContextCacheStats, ContextOptions};
pub use hierarchy::TopicView;
pub use reembed::ReembedProgress;
pub use replay::{ReplayChange, ReplayFailure, ReplayProgress, ReplayReport, ReplayRequest};

/// Timeout of calls into the actors, in ms.
const CALL_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot read prompt template {}", path.display())]
    PromptFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("prompt template {} is invalid", path.display())]
    Prompt {
        path: PathBuf,
        #[source]
        source: PromptError,
    },
    #[error("cannot set up the reflector")]
    Reflector(#[source] ReflectError),
    #[error("cannot set up the embedder")]
    Embedder(#[source] EmbedError),
    /// `embed.kind = "local"` and the model folder cannot be used.
    #[cfg(feature = "local-embed")]
    #[error("cannot load the local embedding model")]
    LocalModel(#[source] crate::local_embed::ModelError),
    /// `embed.kind = "local"` in a build without the model runner.
    #[error("embed.kind = \"local\" needs recall built with the local-embed feature (cargo build --release --features local-embed)")]
    LocalEmbedNotBuilt,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot spawn the {0} actor")]
    Spawn(&'static str, #[source] ractor::SpawnErr),
    #[error("recovery failed: {0}")]
    Recovery(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    UnknownConnection(#[from] UnknownConnection),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Watchdog(#[from] WatchdogError),
    #[error("block {label} takes at most {limit} characters; got {len}")]
    BlockTooLong {
        label: BlockLabel,
        len: usize,
        limit: usize,
    },
    #[error("block {0} is rebuilt by the watchdog; set persistent context instead")]
    ManagedBlock(BlockLabel),
    #[error("the {0} actor is unavailable: {1}")]
    Unavailable(&'static str, String),
    #[error("{0}")]
    NotDurable(String),
    #[error(transparent)]
    Context(#[from] ContextError),
    #[error("connection {0:?} belongs to another agent or user now")]
    NotOwner(String),
    #[error(transparent)]
    Rollup(#[from] RollupError),
    #[error("rollups are off (rollup.enabled = false)")]
    RollupsOff,
    #[error("cannot embed the query")]
    Embed(#[from] EmbedError),
    #[error("the summarizer failed")]
    Summarizer(#[source] ReflectError),
    #[error("the summarizer's answer was not the JSON asked for; the current summary is kept")]
    NotReflection,
    #[error(transparent)]
    Index(#[from] recall_actors::search::BuildError),
}

fn unavailable<E: std::fmt::Display>(actor: &'static str) -> impl FnOnce(E) -> RecallError {
    move |e| RecallError::Unavailable(actor, e.to_string())
}

/// A stored session and whether it is still live.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SessionStatus {
    #[serde(flatten)]
    pub record: SessionRecord,
    pub live: bool,
}

/// One live session in an agent's working context with a user.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LiveContext {
    pub session: SessionRecord,
    pub turn_count: usize,
    /// About four characters per token.
    pub token_estimate: usize,
    pub last_activity_at: chrono::DateTime<chrono::Utc>,
    /// Seconds since the last turn (or the start, without turns).
    pub idle_secs: f64,
}

/// Which summaries [`Runtime::find_summaries`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryQuery {
    pub kind: Option<SummaryType>,
    pub user_id: Option<String>,
    /// Summaries whose period ends at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Summaries whose period starts at or before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    pub limit: Option<usize>,
}

/// Starts a [`Runtime`].
pub struct RuntimeBuilder {
    data_dir: PathBuf,
    settings: Settings,
    reflect: Option<Arc<dyn Reflect>>,
    embed: Option<Arc<dyn Embed>>,
    clock: Option<Clock>,
    api_key: Option<String>,
    seed: Option<u64>,
}

impl RuntimeBuilder {
    /// A runtime storing its data under `data_dir` (created if missing),
    /// with default settings and the reflector they name.
    pub fn new(data_dir: impl AsRef<Path>) -> Self {
        RuntimeBuilder {
            data_dir: data_dir.as_ref().to_path_buf(),
            settings: Settings::default(),
            reflect: None,
            embed: None,
            clock: None,
            api_key: None,
            seed: None,
        }
    }

    /// Use this `Embed` implementation instead of the one the settings name.
    pub fn embed(mut self, embed: Arc<dyn Embed>) -> Self {
        self.embed = Some(embed);
        self
    }

    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Use this `Reflect` implementation instead of the one the settings name.
    pub fn reflect(mut self, reflect: Arc<dyn Reflect>) -> Self {
        self.reflect = Some(reflect);
        self
    }

    /// The clock timestamps come from (default: the system clock).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Draw session ids from `seed` instead of at random: with a virtual
    /// clock, the same calls give the same ids every run (`recall
    /// simulate`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The API key for `reflector.kind = "openai"`; by default it is read
    /// from the environment variable named by `reflector.openai.api_key_env`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The API key given to the builder, else the named variable's value.
    fn key_from(&self, env: &str) -> Option<String> {
        self.api_key.clone().or_else(|| std::env::var(env).ok())
    }

    fn prompts(&self) -> Result<Prompts, StartupError> {
        let mut prompts = Prompts::builtin();
        let file = &self.settings.reflector.prompt_file;
        if !file.is_empty() {
            let path = PathBuf::from(file);
            let text =
                std::fs::read_to_string(&path).map_err(|source| StartupError::PromptFile {
                    path: path.clone(),
                    source,
                })?;
            prompts.session = PromptTemplate::parse(&text, SESSION_VARS)
                .map_err(|source| StartupError::Prompt { path, source })?;
        }
        Ok(prompts)
    }

    /// Opens the data folder, starts the actors and recovers: sessions left
    /// open are ended with reason `recovered` and reflected, and queued
    /// reflections resume.
    pub async fn start(self) -> Result<Runtime, StartupError> {
        self.settings.validate()?;
        let prompts = Arc::new(self.prompts()?);
        let reflect: Arc<dyn Reflect> = match (&self.reflect, self.settings.reflector.kind) {
            (Some(r), _) => r.clone(),
            (None, ReflectorKind::Extractive) => Arc::new(ExtractiveReflect),
            (None, ReflectorKind::Openai) => {
                let key = self.key_from(&self.settings.reflector.openai.api_key_env);
                Arc::new(
                    OpenAiReflect::new(&self.settings.reflector.openai, key)
                        .map_err(StartupError::Reflector)?,
                )
            }
        };
        let embed: Arc<dyn Embed> = match (&self.embed, self.settings.embed.kind) {
            (Some(e), _) => e.clone(),
            (None, EmbedKind::Hashing) => {
                Arc::new(HashingEmbed::new(self.settings.embed.dimensions))
            }
            (None, EmbedKind::Static) => {
                Arc::new(StaticEmbed::builtin().map_err(StartupError::Embedder)?)
            }
            (None, EmbedKind::Openai) => {
                let key = self.key_from(&self.settings.embed.openai.api_key_env);
                Arc::new(
                    OpenAiEmbed::new(&self.settings.embed.openai, key)
                        .map_err(StartupError::Embedder)?,
                )
            }
            (None, EmbedKind::Local) => local_embedder(&self.settings.embed.local).await?,
        };
        // Related words (retrieval) read the built-in word table: parsed
        // now, once per process, not in the first read that asks.
        if self.settings.context.retrieval_related_words > 0 {
            tokio::task::spawn_blocking(StaticEmbed::builtin)
                .await
                .map_err(|e| StartupError::Embedder(EmbedError::Failed(e.to_string())))?
                .map_err(StartupError::Embedder)?;
        }
        let rollup_prompts =
            Arc::new(
                RollupPrompts::builtin().map_err(|source| StartupError::Prompt {
                    path: PathBuf::from("config/prompts"),
                    source,
                })?,
            );
        let clock = self.clock.unwrap_or_else(Clock::system);
        let settings = self.settings;
        let dir = self.data_dir.clone();
        let store_settings = settings.store.clone();
        let mut trees = tokio::task::spawn_blocking(move || Trees::open(&dir, &store_settings))
            .await
            .map_err(|e| StartupError::Recovery(format!("opening the store panicked: {e}")))??;
        trees.fill_inbox = settings.rollup.enabled;
        // A forget a crash cut short is finished before any actor starts,
        // so none of them reads (or sends out) what was to be forgotten.
        {
            let t = trees.clone();
            let finished = tokio::task::spawn_blocking(move || {
                let mut n = 0;
                for (user_id, agent_id) in t.pending_forgets()? {
                    t.forget_user(&user_id, agent_id.as_deref())?;
                    n += 1;
                }
                Ok::<_, StoreError>(n)
            })
            .await
            .map_err(|e| StartupError::Recovery(format!("finishing a forget panicked: {e}")))??;
            if finished > 0 {
                info!(finished, "finished forgets a crash had cut short");
            }
        }
        if trees.fill_inbox {
            // A folder from before rollups: its summaries join topics too.
            let t = trees.clone();
            let queued = tokio::task::spawn_blocking(move || t.backfill_inbox())
                .await
                .map_err(|e| {
                    StartupError::Recovery(format!("queueing summaries panicked: {e}"))
                })??;
            if queued > 0 {
                info!(
                    queued,
                    "queued stored summaries and facts for rollups and topics"
                );
            }
        }

        let generations = Arc::new(Generations::default());
        let search = Arc::new(SearchIndex::new(&embed));
        // Readers that scan (context sources, index builds, retrieved
        // turns) read a clone of the trees off the Store actor, after a
        // barrier when they must see its earlier writes.
        let reader = trees.clone();
        let (store, _) = Actor::spawn(
            None,
            StoreActor,
            StoreArgs {
                trees,
                settings: settings.store.clone(),
                generations: generations.clone(),
                search: search.clone(),
            },
        )
        .await
        .map_err(|e| StartupError::Spawn("store", e))?;
        let (rollup_stats_tx, rollup_stats) = watch::channel(RollupStats::default());
        let rollup = if settings.rollup.enabled {
            let (rollup, _) = Actor::spawn(
                None,
                RollupActor,
                RollupArgs {
                    store: store.clone(),
                    reflect: reflect.clone(),
                    embed: embed.clone(),
                    prompts: rollup_prompts,
                    settings: settings.rollup.clone(),
                    attempt_timeout: Duration::from_secs(settings.reflector.attempt_timeout_secs),
                    clock,
                    stats: rollup_stats_tx,
                },
            )
            .await
            .map_err(|e| StartupError::Spawn("rollup", e))?;
            Some(rollup)
        } else {
            None
        };
        let live_topics = Arc::new(LiveTopics::default());
        let (watchdog, _) = Actor::spawn(
            None,
            WatchdogActor,
            WatchdogArgs {
                store: store.clone(),
                settings: settings.watchdog.clone(),
                block_limit: settings.blocks.background_context_limit,
                clock,
                embed: embed.clone(),
                topic_threshold: settings.rollup.topic_threshold_for(embed.closeness()),
                live_topics: live_topics.clone(),
            },
        )
        .await
        .map_err(|e| StartupError::Spawn("watchdog", e))?;
        let registry = match self.seed {
            Some(seed) => Registry::seeded(seed),
            None => Registry::new(),
        };
        let (stats_tx, stats_rx) = watch::channel(SupervisorStats::default());
        let (windows_tx, windows_in_flight) = watch::channel(0usize);
        let (supervisor, _) = Actor::spawn(
            None,
            SessionSupervisor,
            SupervisorArgs {
                settings: settings.clone(),
                registry: registry.clone(),
                store: store.clone(),
                reflect: reflect.clone(),
                prompts: prompts.clone(),
                clock,
                stats: stats_tx,
                rollup: rollup.clone(),
                watchdog: Some(watchdog.clone()),
                windows_in_flight: windows_tx,
            },
        )
        .await
        .map_err(|e| StartupError::Spawn("supervisor", e))?;

        let runtime = Runtime {
            inner: Arc::new(Inner {
                reflect,
                prompts,
                context_cache: context::ContextCache::new(settings.context.cache_entries),
                settings,
                generations,
                clock,
                registry,
                store,
                supervisor,
                watchdog,
                windows_in_flight,
                rollup,
                search,
                reader: std::sync::RwLock::new(Some(reader)),
                embed,
                query_vectors: Arc::new(context::QueryVectors::new(1024)),
                tokio: tokio::runtime::Handle::current(),
                reembed: watch::Sender::new(reembed::ReembedProgress::default()),
                live_topics,
                rollup_stats,
                stats: stats_rx,
            }),
            recovered: Vec::new(),
        };
        let runtime = runtime.recover().await?;
        runtime.warm_indexes();
        runtime.start_reembedding();
        Ok(runtime)
    }
}

struct Inner {
    settings: Settings,
    /// What reflections run through, for replays.
    reflect: Arc<dyn Reflect>,
    prompts: Arc<Prompts>,
    generations: Arc<Generations>,
    context_cache: context::ContextCache,
    clock: Clock,
    registry: Arc<Registry>,
    store: ActorRef<StoreMsg>,
    supervisor: ActorRef<SupervisorMsg>,
    watchdog: ActorRef<WatchdogMsg>,
    /// In-session summaries whose outcome is not yet back with their
    /// session.
    windows_in_flight: watch::Receiver<usize>,
    /// `None` with `rollup.enabled = false`.
    rollup: Option<ActorRef<RollupMsg>>,
    search: Arc<SearchIndex>,
    /// The Store's trees, for reads off its actor; taken away when the
    /// runtime stops, so the folder is released with the Store.
    reader: std::sync::RwLock<Option<Trees>>,
    embed: Arc<dyn Embed>,
    /// Messages' vectors, for retrieval by meaning.
    query_vectors: Arc<context::QueryVectors>,
    /// The tokio runtime the actors run on: for work started from calls
    /// that may come from outside it ([`Runtime::prepare_message`]).
    tokio: tokio::runtime::Handle,
    /// Re-embedding of what another embedder embedded.
    reembed: watch::Sender<reembed::ReembedProgress>,
    live_topics: Arc<LiveTopics>,
    rollup_stats: watch::Receiver<RollupStats>,
    stats: watch::Receiver<SupervisorStats>,
}

/// A handle on a running recall runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
    recovered: Vec<SessionRecord>,
}

/// Counters of every actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStats {
    pub supervisor: SupervisorStats,
    pub store: StoreStats,
    pub watchdog: WatchdogStats,
    /// Zero with rollups off.
    pub rollup: RollupStats,
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Live sessions ended with reason `shutdown`.
    pub sessions_ended: usize,
    /// Reflections still running or queued when the grace period ran out;
    /// they stay in the durable queue and resume at the next start.
    pub reflections_left: usize,
}

impl Runtime {
    pub fn builder(data_dir: impl AsRef<Path>) -> RuntimeBuilder {
        RuntimeBuilder::new(data_dir)
    }

    async fn recover(mut self) -> Result<Self, StartupError> {
        let store = &self.inner.store;
        let open = call_t!(store, StoreMsg::ListOpenSessions, CALL_TIMEOUT_MS)
            .map_err(|e| StartupError::Recovery(e.to_string()))??;
        let at = self.inner.clock.now();
        for rec in open {
            let session_id = rec.session_id;
            let closed = call_t!(
                store,
                |reply| StoreMsg::CloseOrphan {
                    session_id,
                    reason: EndReason::Recovered,
                    at,
                    reply
                },
                CALL_TIMEOUT_MS
            )
            .map_err(|e| StartupError::Recovery(e.to_string()))??;
            if let Some(rec) = closed {
                info!(%session_id, turns = rec.turn_count, "recovered a session left open");
                self.recovered.push(rec);
            }
        }
        let queued = call_t!(store, StoreMsg::ListQueue, CALL_TIMEOUT_MS)
            .map_err(|e| StartupError::Recovery(e.to_string()))??;
        if !queued.is_empty() {
            info!(jobs = queued.len(), "resuming queued reflections");
        }
        for job in queued {
            self.inner
                .supervisor
                .cast(SupervisorMsg::Enqueue(job))
                .map_err(|e| StartupError::Recovery(e.to_string()))?;
        }
        Ok(self)
    }

    /// Sessions found open at start and ended with reason `recovered`.
    pub fn recovered(&self) -> &[SessionRecord] {
        &self.recovered
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Starts a session on a connection (a voice call opening).
    pub async fn start_session(
        &self,
        agent_id: &str,
        user_id: &str,
        connection_id: &str,
    ) -> Result<SessionRecord, RecallError> {
        let res = call_t!(
            self.inner.supervisor,
            |reply| SupervisorMsg::Start {
                agent_id: agent_id.to_string(),
                user_id: user_id.to_string(),
                connection_id: connection_id.to_string(),
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("supervisor"))??;
        Ok(res)
    }

    fn check_message(&self, field: &'static str, text: &str) -> Result<(), InputError> {
        let max = self.inner.settings.session.max_message_chars;
        // bytes bound chars from above: count only when it could matter
        if text.len() > max {
            let len = text.chars().count();
            if len > max {
                return Err(InputError::TooLong { field, len, max });
            }
        }
        Ok(())
    }

    /// Records a completed exchange. Non-blocking: validates, reads the
    /// connection table and casts to the session actor. Returns the id of
    /// the session the turn went to. A turn for a connection whose session
    /// ended opens a new session there (and gets its id); a turn for a
    /// connection never started is `UnknownConnection`.
    pub fn record_turn(
        &self,
        connection_id: &str,
        user_message: impl Into<String>,
        agent_response: impl Into<String>,
    ) -> Result<Uuid, RecallError> {
        self.record_turn_inner(
            connection_id,
            None,
            user_message.into(),
            agent_response.into(),
        )
    }

    /// [`record_turn`](Self::record_turn) only if the connection belongs to
    /// this agent and user, checked atomically with the routing: for
    /// callers (a WebSocket stream) that hold a connection id longer than
    /// its session may last. Otherwise `NotOwner`, and nothing is recorded.
    pub fn record_turn_as(
        &self,
        connection_id: &str,
        agent_id: &str,
        user_id: &str,
        user_message: impl Into<String>,
        agent_response: impl Into<String>,
    ) -> Result<Uuid, RecallError> {
        self.record_turn_inner(
            connection_id,
            Some((agent_id, user_id)),
            user_message.into(),
            agent_response.into(),
        )
    }

    fn record_turn_inner(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
        user_message: String,
        agent_response: String,
    ) -> Result<Uuid, RecallError> {
        if user_message.trim().is_empty() && agent_response.trim().is_empty() {
            return Err(InputError::EmptyTurn.into());
        }
        self.check_message("user_message", &user_message)?;
        self.check_message("agent_response", &agent_response)?;
        let turn = ConversationTurn {
            user_message,
            agent_response,
            timestamp: self.inner.clock.now(),
        };
        let routed = match self
            .inner
            .registry
            .route_turn_as(connection_id, owner, turn)
        {
            Ok(r) => r,
            Err(RouteError::Unknown(e)) => return Err(e.into()),
            Err(RouteError::NotOwner) => {
                return Err(RecallError::NotOwner(connection_id.to_string()))
            }
        };
        if let Routed::NeedsOpen(_) = routed {
            self.inner
                .supervisor
                .cast(SupervisorMsg::Reopen {
                    connection_id: connection_id.to_string(),
                })
                .map_err(unavailable("supervisor"))?;
        }
        Ok(routed.session_id())
    }

    /// Records a turn and returns once it is on disk (flushed), whatever
    /// the flush policy: for callers that cannot afford the group-commit
    /// window for this turn.
    pub async fn record_turn_durable(
        &self,
        connection_id: &str,
        user_message: impl Into<String>,
        agent_response: impl Into<String>,
    ) -> Result<Uuid, RecallError> {
        let session_id = self.record_turn(connection_id, user_message, agent_response)?;
        self.confirm_durable(connection_id, session_id).await
    }

    /// [`record_turn_durable`](Self::record_turn_durable) with the owner
    /// check of [`record_turn_as`](Self::record_turn_as).
    pub async fn record_turn_durable_as(
        &self,
        connection_id: &str,
        agent_id: &str,
        user_id: &str,
        user_message: impl Into<String>,
        agent_response: impl Into<String>,
    ) -> Result<Uuid, RecallError> {
        let session_id = self.record_turn_as(
            connection_id,
            agent_id,
            user_id,
            user_message,
            agent_response,
        )?;
        self.confirm_durable(connection_id, session_id).await
    }

    /// Returns once the turns routed to `session_id` so far are on disk.
    async fn confirm_durable(
        &self,
        connection_id: &str,
        session_id: Uuid,
    ) -> Result<Uuid, RecallError> {
        let not_durable = |why: &str| {
            RecallError::NotDurable(format!(
                "turn recorded in session {session_id} but not confirmed on disk: {why}"
            ))
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(CALL_TIMEOUT_MS);
        loop {
            match self.inner.registry.current(connection_id) {
                // The session actor forwards a flush to the Store after the
                // turn's write, from its own mailbox, so the flush cannot
                // overtake the write.
                Some((id, Some(actor))) if id == session_id => {
                    match call_t!(actor, SessionMsg::Sync, CALL_TIMEOUT_MS) {
                        Ok(res) => return Ok(res.map(|()| session_id)?),
                        Err(ractor::RactorErr::Messaging(_)) => {
                            // The actor stopped (ended) meanwhile: it wrote
                            // the turn before stopping.
                            if actor
                                .wait(Some(Duration::from_millis(CALL_TIMEOUT_MS)))
                                .await
                                .is_err()
                            {
                                return Err(not_durable("the session did not stop in time"));
                            }
                            self.flush().await?;
                            return Ok(session_id);
                        }
                        Err(_) => return Err(not_durable("the session did not answer in time")),
                    }
                }
                // The session is still being opened with the turn pending.
                Some((id, None)) if id == session_id => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(not_durable("the session did not open in time"));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                // The session ended: its actor wrote every turn before it
                // stopped, so these writes are queued at the Store already.
                _ => {
                    if !self.wait_session_stopped(session_id).await {
                        return Err(not_durable("the session did not stop in time"));
                    }
                    self.flush().await?;
                    return Ok(session_id);
                }
            }
        }
    }

    /// Waits until an ended session's actor has stopped, i.e. its final
    /// record reached the supervisor. False if that takes too long.
    async fn wait_session_stopped(&self, session_id: Uuid) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(CALL_TIMEOUT_MS);
        while self.inner.registry.is_ending(session_id) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }

    /// The user is speaking: defer the silence timeout.
    pub fn touch(&self, connection_id: &str) -> Result<(), RecallError> {
        match self.inner.registry.live(connection_id) {
            Some((_, actor)) => {
                // A session that just began ending has nothing to defer.
                let _ = actor.cast(SessionMsg::Touch(tokio::time::Instant::now()));
                Ok(())
            }
            None if self.inner.registry.session_of(connection_id).is_some() => Ok(()),
            None => Err(UnknownConnection(connection_id.to_string()).into()),
        }
    }

    /// Ends the connection's live session (the call disconnected). Returns
    /// its id, or `None` if it had already ended.
    pub fn end_session(&self, connection_id: &str) -> Result<Option<Uuid>, RecallError> {
        self.end_session_because(connection_id, EndReason::Disconnect)
    }

    /// Ends the connection's live session for `reason`: `disconnect` or
    /// `cleared` (the reasons a caller can give). Idempotent.
    pub fn end_session_because(
        &self,
        connection_id: &str,
        reason: EndReason,
    ) -> Result<Option<Uuid>, RecallError> {
        if !matches!(reason, EndReason::Disconnect | EndReason::Cleared) {
            return Err(InputError::Invalid {
                field: "reason",
                reason: format!(
                    "{reason} is recorded by the runtime itself; a caller ends a session with disconnect or cleared"
                ),
            }
            .into());
        }
        match self.inner.registry.live(connection_id) {
            Some((id, actor)) => {
                // Marked here, not only in the actor, so that a turn sent
                // after this returns opens a new session.
                self.inner.registry.mark_ended(connection_id, id);
                let _ = actor.cast(SessionMsg::End(reason));
                Ok(Some(id))
            }
            // A late turn is reopening the connection: that session ends
            // as soon as it opens, with the turn in it.
            None => match self.inner.registry.request_end(connection_id, reason) {
                Some(id) => Ok(Some(id)),
                None if self.inner.registry.session_of(connection_id).is_some() => Ok(None),
                None => Err(UnknownConnection(connection_id.to_string()).into()),
            },
        }
    }

    /// The agent and user a connection belongs to (live, opening or
    /// recently ended), or `None` for a connection unknown here.
    pub fn connection_owner(&self, connection_id: &str) -> Option<(String, String)> {
        self.inner
            .registry
            .owner(connection_id)
            .map(|o| (o.agent_id.to_string(), o.user_id.to_string()))
    }

    /// Whether a connection is (still) this agent's and user's.
    pub fn connection_owned_by(&self, connection_id: &str, agent_id: &str, user_id: &str) -> bool {
        self.inner
            .registry
            .owned_by(connection_id, agent_id, user_id)
    }

    /// A stored session with its live state: for a live session the turn
    /// count is the one so far.
    pub async fn session_status(
        &self,
        session_id: Uuid,
    ) -> Result<Option<SessionStatus>, RecallError> {
        let Some(mut record) = self.session(session_id).await? else {
            return Ok(None);
        };
        let mut live = false;
        if record.ended_at.is_none() {
            if let Some((id, Some(actor))) = self.inner.registry.current(&record.connection_id) {
                if id == session_id {
                    if let Ok(view) = call_t!(actor, SessionMsg::Inspect, CALL_TIMEOUT_MS) {
                        record = view.record;
                        live = true;
                    }
                }
            }
            if !live {
                // Ended meanwhile: read the final record.
                let _ = self.wait_session_stopped(session_id).await;
                if let Some(r) = self.session(session_id).await? {
                    live = r.ended_at.is_none();
                    record = r;
                }
            }
        }
        Ok(Some(SessionStatus { record, live }))
    }

    /// The working context of an agent with a user: their live sessions,
    /// turn counts, a token estimate and the time since the last turn (the
    /// operator view of `recall context show`).
    pub async fn live_contexts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<LiveContext>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let now = self.inner.clock.now();
        let mut out = Vec::new();
        for live in self.inner.registry.live_of(agent_id, user_id) {
            // A session that ended meanwhile does not answer: skip it.
            let Ok(view) = call_t!(live.actor, SessionMsg::Inspect, CALL_TIMEOUT_MS) else {
                continue;
            };
            let chars: usize = view
                .turns
                .iter()
                .map(|t| t.user_message.chars().count() + t.agent_response.chars().count())
                .sum();
            let last = view
                .turns
                .last()
                .map(|t| t.timestamp)
                .unwrap_or(view.record.started_at);
            out.push(LiveContext {
                turn_count: view.turns.len(),
                // About four characters per token (seed 002).
                token_estimate: chars.div_ceil(4),
                last_activity_at: last,
                idle_secs: (now - last).num_milliseconds().max(0) as f64 / 1000.0,
                session: view.record,
            });
        }
        out.sort_by_key(|c| c.session.started_at);
        Ok(out)
    }

    /// The context for the agent's next LLM call with `user_id`: core
    /// memory blocks, the facts the user may see, the user's session
    /// summaries, the live session's turns, then `current_message`, within
    /// `budget_tokens` (see [`recall_actors::context`]). Reads what is
    /// stored and what the live session holds; never waits on an LLM.
    pub async fn context(
        &self,
        agent_id: &str,
        user_id: &str,
        current_message: &str,
        budget_tokens: usize,
    ) -> Result<AssembledContext, RecallError> {
        self.context_with(
            agent_id,
            user_id,
            current_message,
            budget_tokens,
            ContextOptions::default(),
        )
        .await
    }

    /// [`Runtime::context`] with options: e.g. without the live call, for
    /// a caller that sends the call's own messages to its LLM itself.
    pub async fn context_with(
        &self,
        agent_id: &str,
        user_id: &str,
        current_message: &str,
        budget_tokens: usize,
        options: ContextOptions,
    ) -> Result<AssembledContext, RecallError> {
        self.assemble_context(
            agent_id,
            user_id,
            current_message,
            budget_tokens,
            true,
            options,
        )
        .await
    }

    /// [`Runtime::context`] read entirely from the store, bypassing the
    /// cache: what the cached read must always equal.
    #[doc(hidden)]
    pub async fn context_uncached(
        &self,
        agent_id: &str,
        user_id: &str,
        current_message: &str,
        budget_tokens: usize,
    ) -> Result<AssembledContext, RecallError> {
        self.assemble_context(
            agent_id,
            user_id,
            current_message,
            budget_tokens,
            false,
            ContextOptions::default(),
        )
        .await
    }

    /// Entries, hits and misses of the context cache.
    pub fn context_cache_stats(&self) -> ContextCacheStats {
        self.inner.context_cache.stats()
    }

    /// Clears the working context of an agent with a user: ends their live
    /// sessions with reason `cleared` (each is still reflected on). Returns
    /// the sessions ended.
    pub fn clear_context(&self, agent_id: &str, user_id: &str) -> Result<Vec<Uuid>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let mut ended = Vec::new();
        for live in self.inner.registry.live_of(agent_id, user_id) {
            if self
                .inner
                .registry
                .mark_ended(&live.connection_id, live.session_id)
            {
                let _ = live.actor.cast(SessionMsg::End(EndReason::Cleared));
                ended.push(live.session_id);
            }
        }
        // Sessions a late turn is reopening end as soon as they open.
        for conn in self.inner.registry.opening_of(agent_id, user_id) {
            if let Some(id) = self.inner.registry.request_end(&conn, EndReason::Cleared) {
                ended.push(id);
            }
        }
        Ok(ended)
    }

    /// The live session on a connection, with its turns so far.
    pub async fn live_session(
        &self,
        connection_id: &str,
    ) -> Result<Option<SessionView>, RecallError> {
        let Some((_, actor)) = self.inner.registry.live(connection_id) else {
            return Ok(None);
        };
        // An actor that ended meanwhile does not answer: report no session.
        Ok(call_t!(actor, SessionMsg::Inspect, CALL_TIMEOUT_MS).ok())
    }

    pub async fn session(&self, session_id: Uuid) -> Result<Option<SessionRecord>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::GetSession,
            CALL_TIMEOUT_MS,
            session_id
        )
        .map_err(unavailable("store"))??)
    }

    /// Stored sessions, oldest first, of one agent or of all.
    pub async fn sessions(
        &self,
        agent_id: Option<&str>,
    ) -> Result<Vec<SessionRecord>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::ListSessions,
            CALL_TIMEOUT_MS,
            agent_id.map(str::to_string)
        )
        .map_err(unavailable("store"))??)
    }

    /// A session's stored turns, in order.
    pub async fn turns(&self, session_id: Uuid) -> Result<Vec<ConversationTurn>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::GetTurns,
            CALL_TIMEOUT_MS,
            session_id
        )
        .map_err(unavailable("store"))??)
    }

    /// An agent's summaries of one type, oldest first.
    pub async fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Vec<ConversationSummary>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            |reply| StoreMsg::ListSummaries {
                agent_id: agent_id.to_string(),
                kind,
                since: None,
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??)
    }

    /// An agent's summaries matching `query`, newest first.
    pub async fn find_summaries(
        &self,
        agent_id: &str,
        query: &SummaryQuery,
    ) -> Result<Vec<ConversationSummary>, RecallError> {
        let kinds: Vec<SummaryType> = match query.kind {
            Some(k) => vec![k],
            None => SummaryType::ALL.to_vec(),
        };
        let mut out = Vec::new();
        for kind in kinds {
            // The store's key is the period start; filter below on the
            // period instead.
            let found = self.summaries(agent_id, kind).await?;
            out.extend(found.into_iter().filter(|s| {
                query.user_id.as_deref().is_none_or(|u| s.user_id == u)
                    && query.since.is_none_or(|t| s.period_end >= t)
                    && query.until.is_none_or(|t| s.period_start <= t)
            }));
        }
        out.sort_by(|a, b| {
            (b.period_end, b.created_at, b.summary_id).cmp(&(
                a.period_end,
                a.created_at,
                a.summary_id,
            ))
        });
        if let Some(limit) = query.limit {
            out.truncate(limit);
        }
        Ok(out)
    }

    pub async fn summary(
        &self,
        summary_id: Uuid,
    ) -> Result<Option<ConversationSummary>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::GetSummary,
            CALL_TIMEOUT_MS,
            summary_id
        )
        .map_err(unavailable("store"))??)
    }

    /// The agent's stored blocks. `background_context` among them holds
    /// only the agent's persistent context; `relationship` and
    /// `self_perception` are the latest reflection's, of whichever user (see
    /// [`Runtime::user_block`] for what one user's context shows).
    pub async fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::GetBlocks,
            CALL_TIMEOUT_MS,
            agent_id.to_string()
        )
        .map_err(unavailable("store"))??)
    }

    /// One of the agent's stored blocks (see [`Runtime::blocks`]).
    pub async fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, RecallError> {
        Ok(self
            .blocks(agent_id)
            .await?
            .into_iter()
            .find(|b| b.label == label))
    }

    /// A block as one user's context shows it. `background_context` is
    /// rendered now from the user's own summary hierarchy (the agent's
    /// stored block holds only its persistent context); another label is
    /// the block drawn from this user's conversations if there is one, else
    /// the agent's own, never one drawn from another user's. `None` when
    /// there is nothing.
    pub async fn user_block(
        &self,
        agent_id: &str,
        user_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        if label == BlockLabel::BackgroundContext {
            let value = self.user_background_context(agent_id, user_id).await?;
            return Ok((!value.is_empty()).then(|| MemoryBlock {
                agent_id: agent_id.to_string(),
                label,
                value,
                limit: self.inner.settings.blocks.limit(label),
                updated_at: self.inner.clock.now(),
                source_user_id: Some(user_id.to_string()),
            }));
        }
        let theirs = call_t!(
            self.inner.store,
            |reply| StoreMsg::GetUserBlocks {
                agent_id: agent_id.to_string(),
                user_id: user_id.to_string(),
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??
        .into_iter()
        .find(|b| b.label == label);
        if theirs.is_some() {
            return Ok(theirs);
        }
        Ok(self
            .block(agent_id, label)
            .await?
            .filter(|b| b.source_user_id.is_none()))
    }

    /// Writes a block the agent owns (`persona`, `human`, `self_perception`,
    /// `relationship`). Over its limit is an error and nothing is written.
    pub async fn set_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        value: &str,
    ) -> Result<MemoryBlock, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        if label == BlockLabel::BackgroundContext {
            return Err(RecallError::ManagedBlock(label));
        }
        let limit = self.inner.settings.blocks.limit(label);
        let len = value.chars().count();
        if len > limit {
            return Err(RecallError::BlockTooLong { label, len, limit });
        }
        let block = MemoryBlock {
            agent_id: agent_id.to_string(),
            label,
            value: value.to_string(),
            limit,
            updated_at: self.inner.clock.now(),
            source_user_id: None,
        };
        let b = block.clone();
        call_t!(
            self.inner.store,
            |reply| StoreMsg::PutBlock { block: b, reply },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??;
        Ok(block)
    }

    /// Replaces the agent's persistent context lines (always shown in
    /// `background_context`); the watchdog picks them up on its next tick.
    pub async fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        let limit = self.inner.settings.blocks.background_context_limit;
        for line in &lines {
            if line.chars().count() > limit {
                return Err(InputError::TooLong {
                    field: "persistent context line",
                    len: line.chars().count(),
                    max: limit,
                }
                .into());
            }
            if line.contains('\n') {
                return Err(InputError::Invalid {
                    field: "persistent context line",
                    reason: format!("{:?} spans several lines", truncate_chars(line, 40)),
                }
                .into());
            }
        }
        call_t!(
            self.inner.store,
            |reply| StoreMsg::SetPersistentContext {
                agent_id: agent_id.to_string(),
                lines,
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??;
        Ok(())
    }

    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, RecallError> {
        Ok(
            call_t!(self.inner.store, StoreMsg::ListDeadLetters, CALL_TIMEOUT_MS)
                .map_err(unavailable("store"))??,
        )
    }

    /// The facts `user_id` may see of an agent's: their own and every
    /// user's shared ones, oldest first. Values a later call replaced are
    /// listed too, as history: their `superseded_by` names the fact that
    /// replaced them ([`FactRecord::is_current`] tells them apart).
    pub async fn facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        Ok(call_t!(
            self.inner.store,
            |reply| StoreMsg::ListFacts {
                agent_id: agent_id.to_string(),
                user_id: user_id.to_string(),
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??)
    }

    pub async fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, RecallError> {
        Ok(call_t!(
            self.inner.store,
            StoreMsg::GetFact,
            CALL_TIMEOUT_MS,
            fact_id
        )
        .map_err(unavailable("store"))??)
    }

    /// Shares a fact with the agent's other users, or makes it private
    /// again; only the user it belongs to may.
    pub async fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, RecallError> {
        recall_actors::model::validate_id("user_id", user_id)?;
        Ok(call_t!(
            self.inner.store,
            |reply| StoreMsg::SetFactVisibility {
                fact_id,
                user_id: user_id.to_string(),
                visibility,
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??)
    }

    /// Deletes a fact; only the user it belongs to may. If it was the
    /// current value of its subject, the value it replaced is current
    /// again.
    pub async fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<FactRecord, RecallError> {
        recall_actors::model::validate_id("user_id", user_id)?;
        Ok(call_t!(
            self.inner.store,
            |reply| StoreMsg::DeleteFact {
                fact_id,
                user_id: user_id.to_string(),
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??)
    }

    /// The dead letter of a session, if its reflection failed for good.
    pub async fn dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, RecallError> {
        Ok(self
            .dead_letters()
            .await?
            .into_iter()
            .find(|d| d.session_id == session_id))
    }

    /// Moves a dead letter back into the queue and reflects on it again.
    pub async fn retry_dead_letter(&self, session_id: Uuid) -> Result<(), RecallError> {
        let at = self.inner.clock.now();
        let job = call_t!(
            self.inner.store,
            |reply| StoreMsg::Requeue {
                session_id,
                at,
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("store"))??;
        self.inner
            .supervisor
            .cast(SupervisorMsg::Enqueue(job))
            .map_err(unavailable("supervisor"))
    }

    /// Rebuilds changed `background_context` blocks now, without waiting
    /// for the watchdog's timer. Returns how many were rebuilt.
    pub async fn refresh_background_context(&self) -> Result<usize, RecallError> {
        Ok(call_t!(
            self.inner.watchdog,
            WatchdogMsg::RefreshNow,
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("watchdog"))??)
    }

    /// Flushes everything written so far to disk.
    pub async fn flush(&self) -> Result<(), RecallError> {
        Ok(call_t!(self.inner.store, StoreMsg::Flush, CALL_TIMEOUT_MS)
            .map_err(unavailable("store"))??)
    }

    pub async fn stats(&self) -> Result<RuntimeStats, RecallError> {
        let store = call_t!(self.inner.store, StoreMsg::Stats, CALL_TIMEOUT_MS)
            .map_err(unavailable("store"))?;
        let watchdog = call_t!(self.inner.watchdog, WatchdogMsg::Stats, CALL_TIMEOUT_MS)
            .map_err(unavailable("watchdog"))?;
        let rollup = *self.inner.rollup_stats.borrow();
        // A call, so that every message sent before this one is counted
        // (and the window counters are read now).
        let supervisor = call_t!(self.inner.supervisor, SupervisorMsg::Stats, CALL_TIMEOUT_MS)
            .map_err(unavailable("supervisor"))?;
        Ok(RuntimeStats {
            supervisor,
            store,
            watchdog,
            rollup,
        })
    }

    /// The supervisor's counters as they change.
    pub fn watch_stats(&self) -> watch::Receiver<SupervisorStats> {
        self.inner.stats.clone()
    }

    /// A barrier: returns once the live sessions and the watchdog have
    /// handled every message sent to them before this call, including
    /// what timers due at this instant sent (a silence timeout). What they
    /// sent on while handling them (a session's end to the supervisor, a
    /// window summary started) is then on its way.
    pub async fn sync(&self) -> Result<(), RecallError> {
        // A timer that fired at this instant is a task ready to run, and
        // tokio runs the tasks ready when one yields before it resumes: its
        // message is sent before the pings below.
        tokio::task::yield_now().await;
        for (_, _, actor) in self.inner.registry.live_sessions() {
            // A session that stops first reported its end as it stopped.
            let _ = call_t!(actor, SessionMsg::Ping, CALL_TIMEOUT_MS);
        }
        call_t!(self.inner.watchdog, WatchdogMsg::Stats, CALL_TIMEOUT_MS)
            .map_err(unavailable("watchdog"))?;
        Ok(())
    }

    /// In-session summaries (windows and folds) started whose outcome is
    /// not yet back with their session.
    pub fn windows_in_flight(&self) -> usize {
        *self.inner.windows_in_flight.borrow()
    }

    /// Waits until every in-session summary (window or fold) started has
    /// come back and its session has taken it in, and those it started in
    /// turn. A summary that hangs is waited for until its timeout
    /// (`reflector.attempt_timeout_secs`).
    pub async fn wait_windows(&self) -> Result<(), RecallError> {
        let mut rx = self.inner.windows_in_flight.clone();
        loop {
            self.sync().await?;
            rx.wait_for(|n| *n == 0)
                .await
                .map_err(unavailable("supervisor"))?;
            // The outcomes are handled, and any fold they start counted.
            self.sync().await?;
            if *rx.borrow() == 0 {
                return Ok(());
            }
        }
    }

    /// Waits until no session is ending or reopening, no reflection runs
    /// or waits, and the summaries stored are taken into topics and search.
    /// Live sessions may remain; their window summaries may still run
    /// ([`wait_windows`](Self::wait_windows)).
    pub async fn wait_idle(&self) -> Result<(), RecallError> {
        self.sync().await?;
        let mut rx = self.inner.stats.clone();
        loop {
            rx.borrow_and_update();
            // A call, so that every message sent before it is counted.
            let s = call_t!(self.inner.supervisor, SupervisorMsg::Stats, CALL_TIMEOUT_MS)
                .map_err(unavailable("supervisor"))?;
            if s.idle() {
                // New summaries are taken in (topics, vectors, late
                // rollups) before the runtime counts as idle.
                if let Some(r) = &self.inner.rollup {
                    // It may be in the middle of a rollup run: wait long.
                    // What it could not take in (the embedder is down)
                    // stays in the inbox for later; that is not busy.
                    let res = call_t!(r, RollupMsg::DrainInbox, hierarchy::ROLLUP_TIMEOUT_MS)
                        .map_err(unavailable("rollup"))?;
                    if let Err(err) = res {
                        warn!(error = %err, "new summaries not taken in yet");
                    }
                }
                return Ok(());
            }
            rx.changed().await.map_err(unavailable("supervisor"))?;
        }
    }

    /// Ends live sessions (`shutdown`), drains reflections for up to 30 s,
    /// flushes and stops the actors.
    pub async fn shutdown(self) -> Result<ShutdownReport, RecallError> {
        self.shutdown_with_grace(Duration::from_secs(30)).await
    }

    /// Like [`shutdown`](Self::shutdown) with a chosen grace period for
    /// reflections still running; those left stay queued on disk.
    pub async fn shutdown_with_grace(self, grace: Duration) -> Result<ShutdownReport, RecallError> {
        let inner = &self.inner;
        let ended = call_t!(
            inner.supervisor,
            |reply| SupervisorMsg::EndAll {
                reason: EndReason::Shutdown,
                reply
            },
            CALL_TIMEOUT_MS
        )
        .map_err(unavailable("supervisor"))?;
        let mut rx = inner.stats.clone();
        let drained = tokio::time::timeout(grace, async {
            loop {
                let s = *rx.borrow_and_update();
                if s.live_sessions == 0 && s.idle() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let s = *inner.stats.borrow();
        if drained.is_err() {
            warn!(
                running = s.reflections_running,
                queued = s.reflections_queued,
                "shutdown grace period over; unfinished reflections resume at next start"
            );
        }
        let _ = inner
            .watchdog
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        if let Some(r) = &inner.rollup {
            let _ = r.stop_and_wait(None, Some(Duration::from_secs(5))).await;
        }
        let _ = inner
            .supervisor
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        let flushed = self.flush().await;
        self.release_reader();
        inner.search.close().await;
        let _ = inner
            .store
            .stop_and_wait(None, Some(Duration::from_secs(10)))
            .await;
        flushed?;
        Ok(ShutdownReport {
            sessions_ended: ended,
            reflections_left: s.reflections_running + s.reflections_queued,
        })
    }

    /// Whether the Store's in-memory records (sessions, summaries, facts,
    /// topics) are built and hold what its trees hold, once every write
    /// sent before is done (for tests).
    #[doc(hidden)]
    pub async fn store_mirrors_match(&self) -> Result<bool, RecallError> {
        call_t!(self.inner.store, StoreMsg::Barrier, CALL_TIMEOUT_MS)
            .map_err(unavailable("store"))?;
        Ok(self.reader()?.mirrors_match()?)
    }

    /// A handle on the Store's trees for a read off its actor.
    pub(crate) fn reader(&self) -> Result<Trees, RecallError> {
        self.inner
            .reader
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(RecallError::Store(StoreError::Unavailable))
    }

    fn release_reader(&self) {
        *self.inner.reader.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Stops every actor at once without ending sessions or draining: what
    /// a crash leaves behind, minus the unflushed window. For tests.
    pub async fn abort(self) {
        let inner = &self.inner;
        let _ = inner
            .watchdog
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
        if let Some(r) = &inner.rollup {
            let _ = r.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        let _ = inner
            .supervisor
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
        for (_, _, actor) in inner.registry.live_sessions() {
            let _ = actor.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        self.release_reader();
        inner.search.close().await;
        let _ = inner
            .store
            .kill_and_wait(Some(Duration::from_secs(5)))
            .await;
    }

    /// Makes the live session actor on `connection_id` panic (crash-path
    /// tests).
    #[doc(hidden)]
    pub fn inject_session_panic(&self, connection_id: &str) -> bool {
        match self.inner.registry.live(connection_id) {
            Some((_, actor)) => actor.cast(SessionMsg::InjectPanic).is_ok(),
            None => false,
        }
    }
}

/// The in-process embedder of `embed.local` (the model is read on the
/// blocking pool).
#[cfg(feature = "local-embed")]
async fn local_embedder(
    settings: &recall_actors::settings::LocalEmbedSettings,
) -> Result<Arc<dyn Embed>, StartupError> {
    let settings = settings.clone();
    let started = std::time::Instant::now();
    let embed =
        tokio::task::spawn_blocking(move || crate::local_embed::LocalEmbed::load(&settings))
            .await
            .map_err(|e| StartupError::Recovery(format!("loading the model panicked: {e}")))?
            .map_err(StartupError::LocalModel)?;
    tracing::info!(
        embedder = embed.name(),
        dimensions = embed.dimensions(),
        ms = started.elapsed().as_millis() as u64,
        "local embedding model loaded"
    );
    Ok(Arc::new(embed))
}

#[cfg(not(feature = "local-embed"))]
async fn local_embedder(
    _: &recall_actors::settings::LocalEmbedSettings,
) -> Result<Arc<dyn Embed>, StartupError> {
    Err(StartupError::LocalEmbedNotBuilt)
}
