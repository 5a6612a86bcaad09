//! The Store: the sled database, and StoreActor, its only writer.
//!
//! Owns the database and its trees (layout in [`crate::keys`]). Receives
//! writes as casts from session actors, the supervisor, reflectors and the
//! watchdog, and queries as calls; sends itself `FlushTick`/`FlushDone` to
//! group-commit. Writes that span trees run in one sled transaction, so a
//! crash never leaves a session ended without its reflection queued, or a
//! summary stored with its job still pending.
//!
//! Durability: with `store.flush = "group_commit"` a write reaches the
//! process's sled cache at once and the disk within `flush_interval_ms` plus
//! one flush; with `"every_write"` before the next message is handled. A
//! `Flush` (a durable turn, `Runtime::flush`) is answered once a flush that
//! began after it asked is over; flushes run on the blocking pool while
//! the actor goes on with writes, so callers that ask meanwhile share the
//! next one.
//!
//! # Layout
//!
//! [`Trees`] (here) is the open database; each record kind's reads and
//! writes are an `impl Trees` of their own file:
//!
//! - `trees`: opening the data folder; one record by key, or a scan.
//! - `sessions`: sessions and turns.
//! - `summaries`: summaries, memory blocks and per-agent bookkeeping.
//! - `facts`: facts and their history.
//! - `jobs`: the reflection queue, dead letters and what a finished
//!   reflection stores.
//! - `hierarchy`: rollups, rollup cursors, the Rollup actor's inbox,
//!   topics, vectors and the search index.
//! - `forget`: forgetting a user; `replay`: a replay's new versions.
//! - `mirror`: in-memory mirrors of the trees a context reads, by
//!   (agent, user); `context`: the reads a context is assembled from;
//!   `generations`: which of those parts a write changed.
//! - `msg`: [`StoreMsg`]; `actor`: [`StoreActor`], the shell that
//!   serializes the writes and group-commits flushes.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use tracing::{debug, error, warn};
use uuid::Uuid;

use crate::embed::StoredVector;
use crate::keys;
use crate::model::{
    AgentMeta, BlockLabel, ConversationSummary, ConversationTurn, DeadLetter, EarlierValue,
    EndReason, Fact, FactRecord, MemoryBlock, ReflectionJob, SessionRecord, SummaryType, Topic,
    Visibility,
};
use crate::period::Level;
use crate::search::{SearchIndex, TurnRef};
use crate::settings::{FlushPolicy, StoreSettings};
use chrono::NaiveDate;

mod actor;
mod context;
mod facts;
mod forget;
mod generations;
mod hierarchy;
mod jobs;
mod mirror;
mod msg;
mod replay;
mod sessions;
mod summaries;
mod trees;

pub use actor::{StoreActor, StoreArgs, StoreState};
pub use context::{ContextParts, ContextSources, CurrentFacts, StoredBlocks};
pub use facts::{dedup_facts, reconcile_facts, FactChanges};
pub use forget::{ForgetReport, PendingForget};
pub use generations::{Generations, Parts, Stamp};
pub use hierarchy::InboxEntry;
pub use mirror::{Mirror, Owned};
pub use msg::{LoadedSession, StoreMsg, StoreStats};
pub use replay::Revision;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data folder {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot open data folder {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error("data folder {} is in use by another process", path.display())]
    Locked { path: PathBuf },
    #[error("data folder {} is corrupt or not a recall data folder: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "data folder {} has schema version {found}; this build of recall reads version {expected}",
        path.display()
    )]
    IncompatibleSchema {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("storage error")]
    Sled(#[from] sled::Error),
    #[error("cannot encode or decode a record")]
    Codec(#[from] serde_json::Error),
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    #[error("no summary {0}")]
    SummaryNotFound(Uuid),
    #[error("summary {0} cannot be revised: {1}")]
    InvalidRevision(Uuid, &'static str),
    #[error("no dead letter for session {0}")]
    DeadLetterNotFound(Uuid),
    #[error("the store is not running")]
    Unavailable,
    #[error("no fact {0}")]
    FactNotFound(Uuid),
    #[error("fact {0} belongs to another user; only its owner may change or delete it")]
    NotFactOwner(Uuid),
    #[error("{0} write(s) failed since the last flush; see the logs")]
    WritesFailed(u64),
    #[error("a read off the Store actor did not finish")]
    ReadAborted(#[source] tokio::task::JoinError),
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => StoreError::Sled(e),
        }
    }
}

/// How long opening waits for the data folder's lock, and how often it looks.
const LOCK_WAIT: Duration = Duration::from_secs(2);
const LOCK_POLL: Duration = Duration::from_millis(20);

/// sled reports a held folder lock as an I/O error carrying the
/// `WouldBlock` it got, wrapped in a message.
fn is_lock_error(e: &sled::Error) -> bool {
    match e {
        sled::Error::Io(io) => {
            io.kind() == std::io::ErrorKind::WouldBlock
                || io.to_string().contains("could not acquire lock")
        }
        _ => false,
    }
}

/// Flushes sled, recording how long it took.
fn timed_flush(db: &sled::Db) -> sled::Result<usize> {
    let started = std::time::Instant::now();
    let res = db.flush();
    metrics::histogram!("recall_store_flush_seconds").record(started.elapsed().as_secs_f64());
    res
}

/// A fact's key, encoded value and id.
type FactRow = (Vec<u8>, Vec<u8>, Uuid);

type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    Ok(serde_json::to_vec(v)?)
}

fn tx_encode<T: Serialize>(v: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ConflictableTransactionError::Abort(StoreError::Codec(e)))
}

/// The open database and its trees.
#[derive(Clone)]
pub struct Trees {
    pub db: sled::Db,
    pub meta: sled::Tree,
    pub sessions: sled::Tree,
    pub open: sled::Tree,
    pub turns: sled::Tree,
    pub summaries: sled::Tree,
    pub summary_index: sled::Tree,
    pub blocks: sled::Tree,
    pub queue: sled::Tree,
    pub dead: sled::Tree,
    pub agents: sled::Tree,
    pub facts: sled::Tree,
    /// fact id → its `facts` key.
    pub fact_index: sled::Tree,
    /// (agent, level) → the last period rolled up.
    pub rollup_cursors: sled::Tree,
    /// Session summaries and facts the Rollup actor has not taken in yet
    /// (topics, late rollups, vectors).
    pub rollup_inbox: sled::Tree,
    pub topics: sled::Tree,
    /// Item id → its vector.
    pub embeddings: sled::Tree,
    /// Hashes of the facts a user deleted (see [`keys::fact_tombstone`]).
    pub fact_tombstones: sled::Tree,
    /// Whether reflections queue their summary and facts for the Rollup
    /// actor (off when rollups are: nothing would take them out).
    pub fill_inbox: bool,
    /// Tree and key of each record skipped because it did not decode.
    skipped: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<Vec<u8>>>>,
    /// Every session record, summary, fact and topic, in memory once a
    /// context read first asks (see [`Mirror`]).
    mirror_sessions: std::sync::Arc<Mirror<SessionRecord>>,
    mirror_summaries: std::sync::Arc<Mirror<ConversationSummary>>,
    mirror_facts: std::sync::Arc<Mirror<FactRecord>>,
    mirror_topics: std::sync::Arc<Mirror<Topic>>,
}

#[cfg(test)]
mod tests;
