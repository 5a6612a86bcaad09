//! The embedding API: [`RuntimeBuilder`] starts the actors on a data folder,
//! [`Runtime`] is the handle a voice server keeps.
//!
//! Recording a turn is a registry read and one cast: no await, no lock held
//! across an actor. Everything else is a call with a timeout, through one
//! helper (`ask`, and `Runtime::store` for the Store).
//!
//! # Layout
//!
//! - this file: the [`Runtime`] handle, `ask` (a call with a timeout),
//!   and the queries' and reports' types ([`SessionQuery`],
//!   [`SummaryQuery`], [`SessionStatus`], [`LiveContext`],
//!   [`RuntimeStats`], [`ShutdownReport`]).
//! - `builder`: [`RuntimeBuilder`], starting the actors, recovery.
//! - `sessions`: the hot path and the live sessions: starting, recording
//!   turns ([`Turn`]), touches ([`TouchOptions`]), ending
//!   ([`EndOptions`]), owner checks, reading a context
//!   ([`Runtime::context`]) and clearing the working context.
//! - `queries`: stored sessions, turns, summaries, blocks, facts, dead
//!   letters.
//! - `assembly`: assembling a context ([`ContextOptions`]) from its
//!   sources, the cache of prepared sources ([`SourceCacheStats`]), and
//!   query vectors made ahead ([`Runtime::prepare_message`]).
//! - `hierarchy`: rollups, topics, archival search and its indexes.
//! - `replay`: re-deriving an agent's summaries and facts from the stored
//!   turns.
//! - `forget`: forgetting a user.
//! - `remember`: facts a user states outside a call ([`Runtime::remember`]).
//! - `mirror`: the Letta mirror ([`Runtime::sync_mirror`]).
//! - `reembed`: re-embedding what another embedder embedded.
//! - `lifecycle`: stats, barriers, the watchdog's refresh, readiness,
//!   shutdown.
//! - `cluster`: the work instances sharing one PostgreSQL schema share
//!   (heartbeats, leases, claimed reflections, the change feed, forgets
//!   made elsewhere).
//! - `error`: [`StartupError`], [`RecallError`].
//! - `testing`: hooks for tests (feature `testkit`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ractor::{call_t, Actor, ActorRef, RpcReplyPort};
use recall_actors::clock::Clock;
use recall_actors::context::{AssembledContext, ContextError, TokenCounter};
use recall_actors::model::{
    truncate_chars, BlockLabel, BlockWriter, ConversationSummary, ConversationTurn, DeadLetter,
    EndReason, FactRecord, InputError, MemoryBlock, SessionRecord, SummaryType, Visibility,
};
use recall_actors::prompt::{PromptError, PromptTemplate, Prompts, SESSION_VARS};
use recall_actors::reflect::extractive::ExtractiveReflect;
use recall_actors::reflect::{Reflect, ReflectError};
use recall_actors::registry::{ConnState, Registry, RouteError, Routed, UnknownConnection};
use recall_actors::session::{SessionMsg, SessionView};
use recall_actors::settings::{ReflectorKind, Settings, SettingsError, StoreKind};
use recall_actors::store::{
    read_blocking, repair_agent_blocks, Backlog, BacklogFull, Generations, PgBackend,
    SessionListing, SharedBackend, StoreActor, StoreArgs, StoreError, StoreMsg, StoreStats,
    SummaryListing, Trees,
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

mod assembly;
mod builder;
mod cluster;
mod error;
mod forget;
mod hierarchy;
mod lifecycle;
mod mirror;
mod queries;
mod reembed;
mod remember;
mod replay;
mod sessions;
#[cfg(any(test, feature = "testkit"))]
mod testing;

pub use assembly::{ContextOptions, SourceCacheStats};
pub use builder::RuntimeBuilder;

/// The old name of [`SourceCacheStats`].
#[deprecated(note = "renamed to SourceCacheStats")]
pub type ContextCacheStats = SourceCacheStats;
use error::unavailable;
pub use error::{RecallError, StartupError};
pub use hierarchy::TopicView;
pub use reembed::ReembedProgress;
pub use remember::{Remembered, MAX_STATEMENT_BYTES};
pub use replay::{ReplayChange, ReplayFailure, ReplayProgress, ReplayReport, ReplayRequest};
pub use sessions::{EndOptions, TouchOptions, Turn};

/// Timeout of calls into the actors, in ms.
const CALL_TIMEOUT_MS: u64 = 30_000;

/// Asks an actor and waits at most `timeout_ms` for the answer: an actor
/// that is gone, or late, is [`RecallError::Unavailable`] named `name`.
pub(crate) async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    name: &'static str,
    timeout_ms: u64,
    msg: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Result<T, RecallError> {
    call_t!(actor, msg, timeout_ms).map_err(unavailable(name))
}

impl Runtime {
    /// Asks the Store ([`ask`]); the error it answers with is passed on.
    pub(crate) async fn store<T: Send + 'static>(
        &self,
        msg: impl FnOnce(RpcReplyPort<Result<T, StoreError>>) -> StoreMsg,
    ) -> Result<T, RecallError> {
        Ok(ask(&self.inner.store, "store", CALL_TIMEOUT_MS, msg).await??)
    }

    /// Returns once the Store has handled every message sent before: a
    /// read of its trees then sees those writes.
    pub(crate) async fn store_barrier(&self) -> Result<(), RecallError> {
        ask(
            &self.inner.store,
            "store",
            CALL_TIMEOUT_MS,
            StoreMsg::Barrier,
        )
        .await
    }
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

/// How many records a listing (sessions, summaries, dead letters,
/// topics) returns when it names no limit.
pub const LIST_DEFAULT_LIMIT: usize = 100;
/// The most records a listing may ask for: a larger `limit` is refused
/// (the next page is asked for with `before`).
pub const LIST_MAX_LIMIT: usize = 1000;

/// Which summaries [`Runtime::find_summaries`] returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryQuery {
    pub kind: Option<SummaryType>,
    pub user_id: Option<String>,
    /// Summaries whose period ends at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Summaries whose period starts at or before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// The summaries listed after this one (the last of the page before).
    pub before: Option<Uuid>,
    /// 1 to [`LIST_MAX_LIMIT`]; [`LIST_DEFAULT_LIMIT`] when `None`.
    pub limit: Option<usize>,
}

/// Which stored sessions [`Runtime::list_sessions`] returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionQuery {
    /// Only these agents' sessions (every agent's when `None`).
    pub agents: Option<Vec<String>>,
    pub user_id: Option<String>,
    /// Only live sessions (`true`) or only ended ones (`false`).
    pub live: Option<bool>,
    /// The sessions listed after this one (the last of the page before).
    pub before: Option<Uuid>,
    /// 1 to [`LIST_MAX_LIMIT`]; [`LIST_DEFAULT_LIMIT`] when `None`.
    pub limit: Option<usize>,
}

/// A listing's limit: the default when it names none; 0 or more than the
/// maximum is refused.
pub(crate) fn listing_limit(limit: Option<usize>) -> Result<usize, InputError> {
    match limit {
        None => Ok(LIST_DEFAULT_LIMIT),
        Some(0) => Err(InputError::Invalid {
            field: "limit",
            reason: "must be at least 1".into(),
        }),
        Some(n) if n > LIST_MAX_LIMIT => Err(InputError::Invalid {
            field: "limit",
            reason: format!("at most {LIST_MAX_LIMIT}"),
        }),
        Some(n) => Ok(n),
    }
}

struct Inner {
    settings: Settings,
    /// What reflections run through, for replays.
    reflect: Arc<dyn Reflect>,
    prompts: Arc<Prompts>,
    generations: Arc<Generations>,
    source_cache: assembly::SourceCache,
    clock: Clock,
    registry: Arc<Registry>,
    store: ActorRef<StoreMsg>,
    /// Acknowledged turns not yet written, and their bound.
    backlog: Arc<Backlog>,
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
    reader: recall_actors::store::Reader,
    embed: Arc<dyn Embed>,
    /// How a context's tokens are counted (`context.tokenizer`).
    counter: Arc<dyn TokenCounter>,
    /// Messages' vectors, for retrieval by meaning.
    query_vectors: Arc<assembly::QueryVectors>,
    /// The tokio runtime the actors run on: for work started from calls
    /// that may come from outside it ([`Runtime::prepare_message`]).
    tokio: tokio::runtime::Handle,
    /// Re-embedding of what another embedder embedded.
    reembed: watch::Sender<reembed::ReembedProgress>,
    live_topics: Arc<LiveTopics>,
    rollup_stats: watch::Receiver<RollupStats>,
    stats: watch::Receiver<SupervisorStats>,
    /// The tasks of this instance's share of a store others share (and
    /// the one telling the mirror of changes).
    cluster: cluster::Cluster,
    /// The Letta mirror, once started (never without `[letta]`).
    mirror: std::sync::OnceLock<mirror::Mirrored>,
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
}
