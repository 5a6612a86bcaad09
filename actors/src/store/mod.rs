//! The Store: recall's records behind one storage interface, and
//! StoreActor, its only writer.
//!
//! The actor owns the backend (sled by default). Receives
//! writes as casts from session actors, the supervisor, reflectors and the
//! watchdog, and queries as calls; sends itself `FlushTick`/`FlushDone` to
//! group-commit. Writes that span record kinds are atomic in the backend, so
//! a crash never leaves a session ended without its reflection queued, or a
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
//! - `backend`: [`Backend`], the persistence of every record kind behind
//!   one interface (a sub-trait per kind); the actors never see more of a
//!   backend than that.
//! - `sled`: the sled backend, [`Trees`] (the default, embedded one);
//!   `postgres`: the PostgreSQL backend, [`PgBackend`] (several instances
//!   over one database).
//! - Backend-neutral logic and the types the interface speaks in:
//!   `facts` (which facts are worth storing, and where each stands in its
//!   subject's history), `blocks` (whose a block is, and the repair of
//!   agent-wide blocks an older version let reflections write), `forget`,
//!   `replay`, `hierarchy` (the inbox) and
//!   `sources` (what a context is assembled from); `generations`: which
//!   parts of a context a write changed.
//! - `transfer`: an export of every record of a store, and its import
//!   into an empty store of either backend.
//! - `msg`: [`StoreMsg`]; `actor`: [`StoreActor`], the shell that
//!   serializes the writes, runs the reads that scan off the writer and
//!   group-commits flushes, with a handler per kind of record in `actor/`.
//! - `contract` (tests): what every backend must do, run on each.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::sled::transaction::{ConflictableTransactionError, Transactional};
use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::{debug, error, warn};
use uuid::Uuid;

use crate::embed::StoredVector;
use crate::keys;
use crate::mirror::MirroredSummary;
use crate::model::{
    AgentMeta, BlockLabel, BlockWriter, ConversationSummary, ConversationTurn, DeadLetter,
    EarlierValue, EndReason, Fact, FactRecord, MemoryBlock, ReflectionJob, SessionRecord,
    SummaryType, Topic, Visibility,
};
use crate::period::Level;
use crate::search::{SearchIndex, TurnRef};
use crate::settings::{FlushPolicy, StoreSettings};
use chrono::NaiveDate;

mod actor;
mod backend;
mod backlog;
mod blocks;
#[cfg(test)]
pub(crate) mod contract;
mod facts;
mod forget;
mod generations;
mod hierarchy;
mod msg;
mod postgres;
mod reader;
mod replay;
mod sled;
mod sources;
pub mod transfer;

pub use self::postgres::{PgBackend, PG_SCHEMA_VERSION};
pub use self::sled::mirror::{Mirror, Owned};
pub use self::sled::{import_folder, Trees};
pub use actor::{StoreActor, StoreArgs, StoreState};
pub use backend::{
    fact_vectors, index_facts, read_blocking, Backend, Change, ClusterStore, FactStore,
    ForgetStore, HierarchyStore, JobStore, MirrorStore, Reflected, RemoteChange, SessionListing,
    SessionStore, SharedBackend, SourceStore, SummaryListing, SummaryStore,
};
pub use backlog::{Backlog, BacklogFull};
pub use blocks::{repair_agent_blocks, RepairedBlock, REFLECTION_LABELS};
pub use facts::{dedup_facts, plan_fact_changes, reconcile_facts, spoken_key, FactChanges};
pub use forget::{user_hash, ForgetEntry, ForgetReport, PendingForget, FORGOTTEN_FOR};
pub use generations::{Generations, Parts, Stamp, Watched};
pub use hierarchy::{CursorMove, InboxEntry, InboxItem, InboxKey, NewRollup, RollupBatch};
pub use msg::{LoadedSession, StoreMsg, StoreStats};
pub use reader::Reader;
pub use replay::{revision_refused, Revision};
pub use sources::{CurrentFacts, SourceParts, StoredBlocks, StoredSources};

pub use crate::store_error::StoreError;

/// The damaged records a backend met and skipped, each counted (and
/// reported) once however often it is read.
#[derive(Debug, Default)]
pub(crate) struct Skipped(std::sync::Mutex<std::collections::HashSet<Vec<u8>>>);

impl Skipped {
    /// Notes the record `key` of `table`; warns and counts it the first
    /// time.
    pub(crate) fn note(&self, table: &str, key: &[u8], shown: &dyn std::fmt::Debug, error: &str) {
        let mut id = table.as_bytes().to_vec();
        id.push(0);
        id.extend_from_slice(key);
        let first = self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
        if first {
            metrics::counter!("recall_store_skipped_records_total", "tree" => table.to_string())
                .increment(1);
            warn!(table, key = ?shown, error, "skipping undecodable record");
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }
}
