//! StoreActor: the only writer to sled.
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

mod facts;
mod forget;
mod hierarchy;
mod replay;

pub use facts::{dedup_facts, reconcile_facts, FactChanges};
pub use forget::{ForgetReport, PendingForget};
pub use hierarchy::InboxEntry;
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

/// Who a mirrored record belongs to: the (agent, user) whose context reads
/// it, and whether every user of the agent sees it too (a shared fact).
pub trait Owned {
    fn owner(&self) -> (&str, &str);
    fn shared(&self) -> bool {
        false
    }
}

impl Owned for SessionRecord {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

impl Owned for ConversationSummary {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

impl Owned for FactRecord {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
    fn shared(&self) -> bool {
        self.visibility == Visibility::Shared
    }
}

impl Owned for Topic {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

/// The records of one group, by key.
type Group<T> = std::collections::BTreeMap<sled::IVec, std::sync::Arc<T>>;

/// What a [`Mirror`] holds: every record by key, and by group — each
/// (agent, user)'s, and each agent's shared ones (user "" in the key).
struct Held<T> {
    by_key: HashMap<sled::IVec, std::sync::Arc<T>>,
    groups: HashMap<(String, String), Group<T>>,
}

impl<T: Owned> Held<T> {
    fn groups_of(rec: &T) -> impl Iterator<Item = (String, String)> {
        let (agent, user) = rec.owner();
        let shared = rec.shared().then(|| (agent.to_string(), String::new()));
        std::iter::once((agent.to_string(), user.to_string())).chain(shared)
    }

    fn insert(&mut self, key: sled::IVec, rec: std::sync::Arc<T>) {
        self.remove(&key);
        for g in Self::groups_of(&rec) {
            self.groups
                .entry(g)
                .or_default()
                .insert(key.clone(), rec.clone());
        }
        self.by_key.insert(key, rec);
    }

    /// The records of `groups` that satisfy `keep`, each once: a record
    /// is in its owner's group and, when shared, in its agent's (user
    /// ""), so one a group before took by its owner is not taken again.
    fn select(
        &self,
        groups: &[(&str, &str)],
        keep: &impl Fn(&T) -> bool,
    ) -> Vec<std::sync::Arc<T>> {
        let mut out: Vec<std::sync::Arc<T>> = Vec::new();
        for (i, (agent, user)) in groups.iter().enumerate() {
            let Some(group) = self.groups.get(&(agent.to_string(), user.to_string())) else {
                continue;
            };
            let before = &groups[..i];
            let taken = |r: &T| {
                let (agent, user) = r.owner();
                before
                    .iter()
                    .any(|&g| g == (agent, user) || (r.shared() && g == (agent, "")))
            };
            out.extend(group.values().filter(|r| keep(r) && !taken(r)).cloned());
        }
        out
    }

    fn remove(&mut self, key: &[u8]) {
        let Some(old) = self.by_key.remove(key) else {
            return;
        };
        for g in Self::groups_of(&old) {
            if let Some(group) = self.groups.get_mut(&g) {
                group.remove(key);
                if group.is_empty() {
                    self.groups.remove(&g);
                }
            }
        }
    }
}

/// Every record of a tree, decoded and held in memory from the first read
/// that asks (one scan of the tree), grouped by the (agent, user) it
/// belongs to, then kept as the tree by the writes: each write names the
/// keys it wrote ([`Trees::mirror_note`]), and those are read back. A
/// context read after a write takes one user's records from here instead
/// of iterating the tree, which sled does at about a microsecond a record
/// (every user's, and for sessions every agent's). Dropped (and built again
/// at the next read) where a write cannot say what it wrote.
///
/// The scan that builds it runs outside the lock: a write meanwhile only
/// leaves its keys, read back when the scan is done, so the Store actor
/// never waits for a build.
pub struct Mirror<T> {
    state: std::sync::Mutex<MirrorState<T>>,
}

enum MirrorState<T> {
    Empty,
    /// A scan is running (the `u64` tells one build from the next); the
    /// keys written meanwhile.
    Building(u64, Vec<sled::IVec>),
    Ready(Held<T>),
}

impl<T> Default for Mirror<T> {
    fn default() -> Self {
        Mirror {
            state: std::sync::Mutex::new(MirrorState::Empty),
        }
    }
}

impl<T> Mirror<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, MirrorState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds of mirrors, numbered.
static MIRROR_BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Trees {
    /// Opens (or creates) the data folder and checks its schema version.
    /// sled panics on some kinds of damage; that becomes `Corrupt`.
    pub fn open(path: &Path, settings: &StoreSettings) -> Result<Trees, StoreError> {
        Self::open_waiting(path, settings, LOCK_WAIT)
    }

    fn open_waiting(
        path: &Path,
        settings: &StoreSettings,
        lock_wait: Duration,
    ) -> Result<Trees, StoreError> {
        if path.exists() && !path.is_dir() {
            return Err(StoreError::NotADirectory {
                path: path.to_path_buf(),
            });
        }
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(settings.cache_capacity_mb * 1024 * 1024)
            // recall's own flush policy is the one in force
            .flush_every_ms(None);
        // The folder's lock can outlive a runtime that has just stopped in
        // this process by a moment (a flush finishing on a blocking thread);
        // a lock still held after that belongs to another process.
        let mut waited = Duration::ZERO;
        let opened = loop {
            let res = catch_unwind(AssertUnwindSafe(|| config.open()));
            match &res {
                Ok(Err(e)) if is_lock_error(e) && waited < lock_wait => {
                    std::thread::sleep(LOCK_POLL);
                    waited += LOCK_POLL;
                }
                _ => break res,
            }
        };
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) if is_lock_error(&e) => {
                return Err(StoreError::Locked {
                    path: path.to_path_buf(),
                })
            }
            Ok(Err(sled::Error::Corruption { .. })) | Ok(Err(sled::Error::Unsupported(_))) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    message: "sled reported corruption".into(),
                })
            }
            Ok(Err(source)) => {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    source,
                })
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "sled panicked while opening".into());
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    message,
                });
            }
        };
        let tree = |name: &str| db.open_tree(name);
        let trees = Trees {
            meta: tree(keys::TREE_META)?,
            sessions: tree(keys::TREE_SESSIONS)?,
            open: tree(keys::TREE_OPEN)?,
            turns: tree(keys::TREE_TURNS)?,
            summaries: tree(keys::TREE_SUMMARIES)?,
            summary_index: tree(keys::TREE_SUMMARY_INDEX)?,
            blocks: tree(keys::TREE_BLOCKS)?,
            queue: tree(keys::TREE_QUEUE)?,
            dead: tree(keys::TREE_DEAD)?,
            agents: tree(keys::TREE_AGENTS)?,
            facts: tree(keys::TREE_FACTS)?,
            fact_index: tree(keys::TREE_FACT_INDEX)?,
            rollup_cursors: tree(keys::TREE_ROLLUP_CURSORS)?,
            rollup_inbox: tree(keys::TREE_ROLLUP_INBOX)?,
            topics: tree(keys::TREE_TOPICS)?,
            embeddings: tree(keys::TREE_EMBEDDINGS)?,
            fact_tombstones: tree(keys::TREE_FACT_TOMBSTONES)?,
            fill_inbox: true,
            skipped: Default::default(),
            mirror_sessions: Default::default(),
            mirror_summaries: Default::default(),
            mirror_facts: Default::default(),
            mirror_topics: Default::default(),
            db,
        };
        match trees.meta.get(keys::SCHEMA_KEY)? {
            None => {
                trees
                    .meta
                    .insert(keys::SCHEMA_KEY, &keys::SCHEMA_VERSION.to_be_bytes())?;
                trees.db.flush()?;
            }
            Some(v) => {
                let found = <[u8; 4]>::try_from(v.as_ref())
                    .map(u32::from_be_bytes)
                    .map_err(|_| StoreError::Corrupt {
                        path: path.to_path_buf(),
                        message: "the schema version record is unreadable".into(),
                    })?;
                if found != keys::SCHEMA_VERSION {
                    return Err(StoreError::IncompatibleSchema {
                        path: path.to_path_buf(),
                        found,
                        expected: keys::SCHEMA_VERSION,
                    });
                }
            }
        }
        Ok(trees)
    }

    /// A stored record, decoded. One that does not decode is skipped with a
    /// warning and counted (`skipped_records`, in the stats, `/readyz` and
    /// `/metrics`): one damaged record must not hide the rest of the data
    /// folder.
    fn decode<T: DeserializeOwned>(&self, tree: &str, key: &[u8], bytes: &[u8]) -> Option<T> {
        match serde_json::from_slice(bytes) {
            Ok(v) => Some(v),
            Err(err) => {
                self.skip(tree, key, &err.to_string());
                None
            }
        }
    }

    /// Counts and reports a damaged record once, however often it is read.
    fn skip(&self, tree: &str, key: &[u8], error: &str) {
        let mut id = tree.as_bytes().to_vec();
        id.push(0);
        id.extend_from_slice(key);
        let first = self
            .skipped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        if first {
            metrics::counter!("recall_store_skipped_records_total", "tree" => tree.to_string())
                .increment(1);
            warn!(tree, key = ?key, error, "skipping undecodable record");
        }
    }

    /// Damaged records met (and skipped) since this folder was opened, each
    /// counted once.
    pub fn skipped_records(&self) -> u64 {
        self.skipped.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    /// The record under `key`, decoded (a record that does not decode is
    /// skipped, like a missing one).
    fn get<T: DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        name: &str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        Ok(tree.get(key)?.and_then(|v| self.decode(name, key, &v)))
    }

    fn scan<T: DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        name: &str,
        iter: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    ) -> Result<Vec<T>, StoreError> {
        let _ = tree;
        let mut out = Vec::new();
        for item in iter {
            let (k, v) = item?;
            if let Some(rec) = self.decode(name, &k, &v) {
                out.push(rec);
            }
        }
        Ok(out)
    }

    /// The records of a mirrored tree in the groups asked (an (agent,
    /// user)'s, and with user "" the agent's shared ones) that satisfy
    /// `keep`, each once, in key order within a group; the first read scans
    /// the tree into the mirror (a read while another builds it reads the
    /// tree itself).
    fn mirrored<T: DeserializeOwned + Owned>(
        &self,
        mirror: &Mirror<T>,
        tree: &sled::Tree,
        name: &str,
        groups: &[(&str, &str)],
        keep: impl Fn(&T) -> bool,
    ) -> Result<Vec<std::sync::Arc<T>>, StoreError> {
        let build = {
            let mut state = mirror.lock();
            match &*state {
                MirrorState::Ready(held) => return Ok(held.select(groups, &keep)),
                MirrorState::Building(..) => None,
                MirrorState::Empty => {
                    let id = MIRROR_BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    *state = MirrorState::Building(id, Vec::new());
                    Some(id)
                }
            }
        };
        let mut held = Held {
            by_key: HashMap::new(),
            groups: HashMap::new(),
        };
        let scanned = (|| {
            for item in tree.iter() {
                let (k, v) = item?;
                if let Some(rec) = self.decode::<T>(name, &k, &v) {
                    held.insert(k, std::sync::Arc::new(rec));
                }
            }
            Ok::<_, StoreError>(())
        })();
        let Some(id) = build else {
            scanned?;
            return Ok(held.select(groups, &keep));
        };
        let mut state = mirror.lock();
        let MirrorState::Building(b, written) = &mut *state else {
            // Dropped meanwhile (a forget): this scan may predate it.
            drop(state);
            scanned?;
            return self.mirrored(mirror, tree, name, groups, keep);
        };
        if *b != id {
            drop(state);
            scanned?;
            return self.mirrored(mirror, tree, name, groups, keep);
        }
        if let Err(err) = scanned {
            *state = MirrorState::Empty;
            return Err(err);
        }
        let written = std::mem::take(written);
        if !self.read_back(&mut held, tree, name, &written) {
            *state = MirrorState::Empty;
            return Err(StoreError::Unavailable);
        }
        let out = held.select(groups, &keep);
        *state = MirrorState::Ready(held);
        Ok(out)
    }

    /// The records of `groups` from a mirror already built, `None` while it
    /// is not (the caller reads the tree; nothing is built here). The Store
    /// actor notes each of its writes in the mirrors as it makes them, so
    /// on the actor a built mirror holds what the tree holds.
    fn mirror_if_built<T: Owned>(
        mirror: &Mirror<T>,
        groups: &[(&str, &str)],
    ) -> Option<Vec<std::sync::Arc<T>>> {
        match &*mirror.lock() {
            MirrorState::Ready(held) => Some(held.select(groups, &|_| true)),
            _ => None,
        }
    }

    /// `keys` read back from `tree` into `held`; false if a read failed.
    fn read_back<T: DeserializeOwned + Owned, K: AsRef<[u8]>>(
        &self,
        held: &mut Held<T>,
        tree: &sled::Tree,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> bool {
        for key in keys {
            let key = key.as_ref();
            match tree.get(key) {
                Ok(Some(v)) => match self.decode::<T>(name, key, &v) {
                    Some(rec) => held.insert(sled::IVec::from(key), std::sync::Arc::new(rec)),
                    None => held.remove(key),
                },
                Ok(None) => held.remove(key),
                Err(err) => {
                    warn!(tree = name, error = %err, "a mirrored record did not read back; the mirror is built again");
                    return false;
                }
            }
        }
        true
    }

    /// After a write to a mirrored tree: the keys it wrote, read back into
    /// the mirror (a key gone or undecodable leaves it), or left for the
    /// build running. A read that fails drops the mirror, to be built
    /// again.
    fn mirror_note<T: DeserializeOwned + Owned, K: AsRef<[u8]>>(
        &self,
        mirror: &Mirror<T>,
        tree: &sled::Tree,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) {
        let mut state = mirror.lock();
        match &mut *state {
            MirrorState::Empty => {}
            MirrorState::Building(_, written) => {
                written.extend(keys.into_iter().map(|k| sled::IVec::from(k.as_ref())));
            }
            MirrorState::Ready(held) => {
                if !self.read_back(held, tree, name, keys) {
                    *state = MirrorState::Empty;
                }
            }
        }
    }

    /// After a write to the sessions tree.
    pub(crate) fn note_sessions<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(
            &self.mirror_sessions,
            &self.sessions,
            keys::TREE_SESSIONS,
            keys,
        );
    }

    /// After a write to the facts tree.
    pub(crate) fn note_facts<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(&self.mirror_facts, &self.facts, keys::TREE_FACTS, keys);
    }

    /// After a write to the summaries tree.
    pub(crate) fn note_summaries<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
            keys,
        );
    }

    /// After a write to the topics tree.
    pub(crate) fn note_topics<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(&self.mirror_topics, &self.topics, keys::TREE_TOPICS, keys);
    }

    /// After a write that cannot name its keys (a forget): every mirror is
    /// built again at the next read.
    pub(crate) fn drop_mirrors(&self) {
        *self.mirror_sessions.lock() = MirrorState::Empty;
        *self.mirror_summaries.lock() = MirrorState::Empty;
        *self.mirror_facts.lock() = MirrorState::Empty;
        *self.mirror_topics.lock() = MirrorState::Empty;
    }

    /// Whether every mirror is built and holds what its tree holds (for
    /// tests).
    #[doc(hidden)]
    pub fn mirrors_match(&self) -> Result<bool, StoreError> {
        fn same<T: DeserializeOwned + PartialEq + Owned>(
            t: &Trees,
            mirror: &Mirror<T>,
            tree: &sled::Tree,
            name: &str,
        ) -> Result<bool, StoreError> {
            let state = mirror.lock();
            let MirrorState::Ready(records) = &*state else {
                return Ok(false);
            };
            // The tree, grouped afresh.
            let mut fresh = Held {
                by_key: HashMap::new(),
                groups: HashMap::new(),
            };
            for item in tree.iter() {
                let (k, v) = item?;
                if let Some(rec) = t.decode::<T>(name, &k, &v) {
                    fresh.insert(k, std::sync::Arc::new(rec));
                }
            }
            let same_group = |a: &Group<T>, b: &Group<T>| {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, ra), (kb, rb))| ka == kb && **ra == **rb)
            };
            Ok(fresh.by_key.len() == records.by_key.len()
                && fresh.groups.len() == records.groups.len()
                && fresh
                    .groups
                    .iter()
                    .all(|(g, a)| records.groups.get(g).is_some_and(|b| same_group(a, b))))
        }
        Ok(same(
            self,
            &self.mirror_sessions,
            &self.sessions,
            keys::TREE_SESSIONS,
        )? && same(
            self,
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
        )? && same(self, &self.mirror_facts, &self.facts, keys::TREE_FACTS)?
            && same(self, &self.mirror_topics, &self.topics, keys::TREE_TOPICS)?)
    }

    /// Every record of `tree` that decodes and satisfies `keep`, with its
    /// key.
    fn matching<T: DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        name: &str,
        mut keep: impl FnMut(&T) -> bool,
    ) -> Result<Vec<(sled::IVec, T)>, StoreError> {
        let mut out = Vec::new();
        for item in tree.iter() {
            let (k, v) = item?;
            if let Some(rec) = self.decode::<T>(name, &k, &v) {
                if keep(&rec) {
                    out.push((k, rec));
                }
            }
        }
        Ok(out)
    }

    pub fn session(&self, id: Uuid) -> Result<Option<SessionRecord>, StoreError> {
        self.get(&self.sessions, keys::TREE_SESSIONS, &keys::session(id))
    }

    pub fn turns(&self, id: Uuid) -> Result<Vec<ConversationTurn>, StoreError> {
        self.scan(
            &self.turns,
            keys::TREE_TURNS,
            self.turns.scan_prefix(keys::turns_prefix(id)),
        )
    }

    /// A session's turns with their sequence numbers, in order.
    pub fn numbered_turns(&self, id: Uuid) -> Result<Vec<(u32, ConversationTurn)>, StoreError> {
        let mut out = Vec::new();
        for item in self.turns.scan_prefix(keys::turns_prefix(id)) {
            let (k, v) = item?;
            let Some(seq) = k.get(16..20).and_then(|b| <[u8; 4]>::try_from(b).ok()) else {
                self.skip(keys::TREE_TURNS, &k, "the key is not a turn key");
                continue;
            };
            if let Some(t) = self.decode::<ConversationTurn>(keys::TREE_TURNS, &k, &v) {
                out.push((u32::from_be_bytes(seq), t));
            }
        }
        Ok(out)
    }

    /// One stored turn.
    pub fn turn(&self, id: Uuid, seq: u32) -> Result<Option<ConversationTurn>, StoreError> {
        self.get(&self.turns, keys::TREE_TURNS, &keys::turn(id, seq))
    }

    /// The stored turns of a session from `seq - 1` to `seq + 1`, in order,
    /// each with its number: a retrieved turn and the turns either side of
    /// it. Three point reads: a range would copy the whole leaf it starts
    /// in (every key of it), which costs more than the three turns.
    pub fn turns_around(
        &self,
        id: Uuid,
        seq: u32,
    ) -> Result<Vec<(u32, ConversationTurn)>, StoreError> {
        let mut out = Vec::with_capacity(3);
        for n in [seq.checked_sub(1), Some(seq), seq.checked_add(1)]
            .into_iter()
            .flatten()
        {
            let k = keys::turn(id, n);
            if let Some(v) = self.turns.get(k)? {
                if let Some(t) = self.decode(keys::TREE_TURNS, &k, &v) {
                    out.push((n, t));
                }
            }
        }
        Ok(out)
    }

    pub fn sessions(&self, agent_id: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        let mut all: Vec<SessionRecord> =
            self.scan(&self.sessions, keys::TREE_SESSIONS, self.sessions.iter())?;
        if let Some(agent) = agent_id {
            all.retain(|s| s.agent_id == agent);
        }
        all.sort_by_key(|s| (s.started_at, s.session_id));
        Ok(all)
    }

    pub fn open_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.open.iter() {
            let (k, _) = item?;
            let Ok(id) = Uuid::from_slice(&k) else {
                self.skip(keys::TREE_OPEN, &k, "the key is not a session id");
                continue;
            };
            if let Some(rec) = self.session(id)? {
                out.push(rec);
            }
        }
        out.sort_by_key(|s| (s.started_at, s.session_id));
        Ok(out)
    }

    pub fn queued(&self) -> Result<Vec<ReflectionJob>, StoreError> {
        let mut jobs: Vec<ReflectionJob> =
            self.scan(&self.queue, keys::TREE_QUEUE, self.queue.iter())?;
        jobs.sort_by_key(|j| (j.enqueued_at, j.session_id));
        Ok(jobs)
    }

    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let mut out: Vec<DeadLetter> = self.scan(&self.dead, keys::TREE_DEAD, self.dead.iter())?;
        out.sort_by_key(|d| (d.failed_at, d.session_id));
        Ok(out)
    }

    pub fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError> {
        let Some(key) = self.summary_index.get(id.as_bytes())? else {
            return Ok(None);
        };
        self.get(&self.summaries, keys::TREE_SUMMARIES, &key)
    }

    /// An agent's summaries of one type, oldest first, ending at or after
    /// `since` when given.
    pub fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let prefix = keys::summaries_prefix(agent_id, kind);
        match since {
            None => self.scan(
                &self.summaries,
                keys::TREE_SUMMARIES,
                self.summaries.scan_prefix(&prefix),
            ),
            Some(t) => {
                let start = keys::summaries_since(agent_id, kind, t);
                let iter = self.summaries.range(start..).take_while(|r| {
                    r.as_ref()
                        .map(|(k, _)| k.starts_with(&prefix))
                        .unwrap_or(true)
                });
                self.scan(&self.summaries, keys::TREE_SUMMARIES, iter)
            }
        }
    }

    /// The agent's blocks (agent-wide; the latest reflection's
    /// `relationship`/`self_perception` among them).
    pub fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError> {
        let iter = self
            .blocks
            .scan_prefix(keys::blocks_prefix(agent_id))
            .filter(|r| {
                r.as_ref()
                    .map(|(k, _)| keys::is_agent_block(agent_id, k))
                    .unwrap_or(true)
            });
        self.scan(&self.blocks, keys::TREE_BLOCKS, iter)
    }

    /// The blocks reflections drew from one user's conversations.
    pub fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError> {
        let blocks: Vec<MemoryBlock> = self.scan(
            &self.blocks,
            keys::TREE_BLOCKS,
            self.blocks
                .scan_prefix(keys::blocks_prefix(agent_id))
                .filter(|r| {
                    r.as_ref()
                        .map(|(k, _)| !keys::is_agent_block(agent_id, k))
                        .unwrap_or(true)
                }),
        )?;
        Ok(blocks
            .into_iter()
            .filter(|b| b.source_user_id.as_deref() == Some(user_id))
            .collect())
    }

    pub fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError> {
        self.get(
            &self.blocks,
            keys::TREE_BLOCKS,
            &keys::block(agent_id, label),
        )
    }

    pub fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError> {
        Ok(self
            .get(&self.agents, keys::TREE_AGENTS, keys::agent(agent_id))?
            .unwrap_or_default())
    }

    pub fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError> {
        let mut out = Vec::new();
        for item in self.agents.iter() {
            let (k, v) = item?;
            let Ok(id) = String::from_utf8(k.to_vec()) else {
                warn!(key = ?k, "skipping agent record with a non-utf8 id");
                continue;
            };
            if let Some(meta) = self.decode(keys::TREE_AGENTS, &k, &v) {
                out.push((id, meta));
            }
        }
        Ok(out)
    }

    /// Ends a session and, if it has turns, queues its reflection: one
    /// transaction.
    pub fn end_session(&self, record: &SessionRecord, at: DateTime<Utc>) -> Result<(), StoreError> {
        let job = ReflectionJob {
            session_id: record.session_id,
            agent_id: record.agent_id.clone(),
            enqueued_at: at,
        };
        (&self.sessions, &self.open, &self.queue).transaction(|(sessions, open, queue)| {
            let key = keys::session(record.session_id);
            sessions.insert(&key, tx_encode(record)?)?;
            open.remove(&key)?;
            if record.turn_count > 0 {
                queue.insert(&key, tx_encode(&job)?)?;
            }
            Ok(())
        })?;
        self.note_sessions([keys::session(record.session_id)]);
        Ok(())
    }

    /// The inbox rows of a new session summary and its new facts (none with
    /// rollups off: nothing would take them out).
    fn inbox_rows(&self, summary: &ConversationSummary, facts: &[FactRecord]) -> Vec<[u8; 25]> {
        if !self.fill_inbox {
            return Vec::new();
        }
        std::iter::once(keys::inbox(
            summary.period_start,
            keys::INBOX_SUMMARY,
            summary.summary_id,
        ))
        .chain(
            facts
                .iter()
                .map(|f| keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id)),
        )
        .collect()
    }

    /// Stores a session summary, the blocks its reflection produced and
    /// its facts (de-duplicated, each placed in its subject's history),
    /// dequeues the job and clears any dead letter. Returns false (and
    /// changes nothing but the queue) when the summary already exists.
    pub fn complete_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<bool, StoreError> {
        Ok(self.reflection_done(summary, blocks, facts)?.0)
    }

    /// [`Trees::complete_reflection`], and whether a fact it wrote is
    /// shared (other users of the agent see it change).
    fn reflection_done(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<(bool, bool), StoreError> {
        // Facts are planned against the user's before the transaction
        // (sled transactions cannot scan); the Store actor is the only
        // writer, so nothing changes in between.
        let changes = self.plan_facts(facts, summary.period_start, false)?;
        let id = summary.summary_id;
        let skey = keys::summary_of(summary);
        let mut meta = self.agent(&summary.agent_id)?;
        meta.summary_version += 1;
        let fact_rows = Self::fact_rows(changes.added.iter().chain(&changes.updated))?;
        let shared = changes
            .added
            .iter()
            .chain(&changes.updated)
            .any(|f| f.visibility == Visibility::Shared);
        // The Rollup actor takes new session summaries and facts in from
        // its inbox (topics, late rollups, vectors for search).
        let agent_key = summary.agent_id.as_bytes();
        let inbox_rows = self.inbox_rows(summary, &changes.added);
        let stored = (
            &self.summaries,
            &self.summary_index,
            &self.queue,
            &self.dead,
            &self.agents,
            &self.blocks,
            &self.facts,
            &self.fact_index,
            &self.rollup_inbox,
        )
            .transaction(
                |(
                    summaries,
                    index,
                    queue,
                    dead,
                    agents,
                    blocks_tree,
                    facts_tree,
                    fact_index,
                    inbox,
                )| {
                    let key = keys::session(id);
                    queue.remove(&key)?;
                    dead.remove(&key)?;
                    if index.get(id.as_bytes())?.is_some() {
                        return Ok(false);
                    }
                    summaries.insert(skey.as_slice(), tx_encode(summary)?)?;
                    index.insert(id.as_bytes(), skey.as_slice())?;
                    agents.insert(keys::agent(&summary.agent_id), tx_encode(&meta)?)?;
                    for b in blocks {
                        let value = tx_encode(b)?;
                        // The agent's block holds the latest; a block drawn
                        // from one user's conversation is also kept as that
                        // user's.
                        blocks_tree.insert(keys::block(&b.agent_id, b.label), value.as_slice())?;
                        if let Some(user) = &b.source_user_id {
                            blocks_tree
                                .insert(keys::user_block(&b.agent_id, b.label, user), value)?;
                        }
                    }
                    for (key, value, id) in &fact_rows {
                        facts_tree.insert(key.as_slice(), value.as_slice())?;
                        fact_index.insert(id.as_bytes(), key.as_slice())?;
                    }
                    for key in &inbox_rows {
                        inbox.insert(key.as_slice(), agent_key)?;
                    }
                    Ok(true)
                },
            )?;
        if stored {
            self.note_summaries([skey]);
            self.note_facts(fact_rows.iter().map(|(k, _, _)| k));
        }
        Ok((stored, shared))
    }

    /// Moves a job to the dead letters, unless the session has its summary
    /// by now (a replay made it while the reflection was backing off).
    pub fn dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let summarized = self
            .summary_index
            .contains_key(letter.session_id.as_bytes())?;
        (&self.queue, &self.dead).transaction(|(queue, dead)| {
            let key = keys::session(letter.session_id);
            queue.remove(&key)?;
            if !summarized {
                dead.insert(&key, tx_encode(letter)?)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    pub fn requeue(
        &self,
        session_id: Uuid,
        at: DateTime<Utc>,
    ) -> Result<ReflectionJob, StoreError> {
        let key = keys::session(session_id);
        let letter: DeadLetter = self
            .dead
            .get(key)?
            .and_then(|v| self.decode(keys::TREE_DEAD, &key, &v))
            .ok_or(StoreError::DeadLetterNotFound(session_id))?;
        let job = ReflectionJob {
            session_id,
            agent_id: letter.agent_id,
            enqueued_at: at,
        };
        (&self.queue, &self.dead).transaction(|(queue, dead)| {
            dead.remove(&key)?;
            queue.insert(&key, tx_encode(&job)?)?;
            Ok(())
        })?;
        Ok(job)
    }
}

/// What is stored for an (agent, user)'s context, read in one go.
#[derive(Debug, Clone, Default)]
pub struct ContextSources {
    /// The agent-wide blocks.
    pub agent_blocks: Vec<MemoryBlock>,
    /// The blocks drawn from this user's conversations.
    pub user_blocks: Vec<MemoryBlock>,
    /// The current facts the user may see: their own and the agent's
    /// shared ones (a value a later call replaced is left out), each with
    /// the value it replaced ([`CurrentFacts::earlier`]).
    pub facts: CurrentFacts,
    /// The user's summaries of every type, oldest first (by period end,
    /// creation, id).
    pub summaries: Vec<std::sync::Arc<ConversationSummary>>,
    pub persistent_context: Vec<String>,
    /// The user's ended sessions with the agent, by end time.
    pub ended: Vec<std::sync::Arc<SessionRecord>>,
    /// The user's topics.
    pub topics: Vec<Topic>,
}

/// Current facts, oldest extracted first, and the values they replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentFacts {
    /// The records as the store decoded them (shared with its cache, so a
    /// read after a write decodes only what changed).
    pub facts: Vec<std::sync::Arc<FactRecord>>,
    /// For a fact of `facts` that replaced an earlier value on its subject
    /// (`home`: "Lives in Austin" then "Moved to Denver"), the latest value
    /// it replaced and until when that held, by the current fact's id.
    pub earlier: HashMap<Uuid, EarlierValue>,
}

impl CurrentFacts {
    /// The current facts among `visible` (every fact a user may see,
    /// current and earlier) and what each replaced.
    pub fn of(mut visible: Vec<std::sync::Arc<FactRecord>>) -> CurrentFacts {
        visible.sort_by_key(|f| (f.extracted_at, f.fact_id));
        CurrentFacts {
            earlier: facts::earlier_values(visible.iter().map(|f| &**f)),
            facts: visible.into_iter().filter(|f| f.is_current()).collect(),
        }
    }

    /// The value `fact_id` replaced, if it replaced one: for "earlier:
    /// Lives in Austin (until 2026-03-02)".
    pub fn earlier(&self, fact_id: Uuid) -> Option<&EarlierValue> {
        self.earlier.get(&fact_id)
    }

    /// The facts themselves.
    pub fn iter(&self) -> impl Iterator<Item = &Fact> {
        self.facts.iter().map(|f| &f.fact)
    }

    pub fn len(&self) -> usize {
        self.facts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }
}

/// What a context needs of a user's blocks and the agent's record.
#[derive(Debug, Clone, Default)]
pub struct StoredBlocks {
    /// The agent-wide blocks.
    pub agent_blocks: Vec<MemoryBlock>,
    /// The blocks drawn from this user's conversations.
    pub user_blocks: Vec<MemoryBlock>,
    pub persistent_context: Vec<String>,
}

/// The parts of an (agent, user)'s context sources that were asked for
/// ([`Trees::context_parts`]); `None` where not asked.
#[derive(Debug, Default)]
pub struct ContextParts {
    pub blocks: Option<StoredBlocks>,
    /// As [`ContextSources::facts`].
    pub facts: Option<CurrentFacts>,
    /// As [`ContextSources::summaries`].
    pub summaries: Option<Vec<std::sync::Arc<ConversationSummary>>>,
    /// As [`ContextSources::ended`].
    pub ended: Option<Vec<std::sync::Arc<SessionRecord>>>,
    pub topics: Option<Vec<Topic>>,
}

impl Trees {
    /// Everything an (agent, user)'s context is assembled from.
    pub fn context_sources(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<ContextSources, StoreError> {
        let parts = self.context_parts(agent_id, user_id, Parts::ALL)?;
        let blocks = parts.blocks.unwrap_or_default();
        Ok(ContextSources {
            agent_blocks: blocks.agent_blocks,
            user_blocks: blocks.user_blocks,
            persistent_context: blocks.persistent_context,
            facts: parts.facts.unwrap_or_default(),
            summaries: parts.summaries.unwrap_or_default(),
            ended: parts.ended.unwrap_or_default(),
            topics: parts.topics.unwrap_or_default(),
        })
    }

    /// The asked parts of an (agent, user)'s context sources: a read after
    /// a write reads again only what the write changed.
    pub fn context_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<ContextParts, StoreError> {
        if !parts.contains(Parts::SUMMARIES) {
            return self.context_parts_but_summaries(agent_id, user_id, parts);
        }
        // The summaries (the largest records) are scanned on a thread of
        // their own while this one reads the other parts: a read after a
        // write waits for the longer of the two, not both. (Inline when no
        // thread can be had, or nothing else is asked.)
        if parts == Parts::SUMMARIES {
            return Ok(ContextParts {
                summaries: Some(self.user_summaries(agent_id, user_id)?),
                ..Default::default()
            });
        }
        let (summaries, rest) = std::thread::scope(|scope| {
            let summaries = std::thread::Builder::new()
                .name("recall-context".into())
                .spawn_scoped(scope, || self.user_summaries(agent_id, user_id));
            let rest = self.context_parts_but_summaries(agent_id, user_id, parts);
            let summaries = match summaries {
                // A panic there is a panic here, as it would be inline.
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => self.user_summaries(agent_id, user_id),
            };
            (summaries, rest)
        });
        Ok(ContextParts {
            summaries: Some(summaries?),
            ..rest?
        })
    }

    /// A user's current summaries with an agent, of every type, oldest
    /// first (by period end, creation, id).
    fn user_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<std::sync::Arc<ConversationSummary>>, StoreError> {
        let mut summaries = self.mirrored(
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
            &[(agent_id, user_id)],
            |s| s.is_current(),
        )?;
        summaries.sort_by(|a, b| {
            (a.period_end, a.created_at, a.summary_id).cmp(&(
                b.period_end,
                b.created_at,
                b.summary_id,
            ))
        });
        Ok(summaries)
    }

    /// [`Trees::context_parts`] without the summaries.
    fn context_parts_but_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<ContextParts, StoreError> {
        let mut out = ContextParts::default();
        if parts.contains(Parts::SESSIONS) {
            let mut ended = self.mirrored(
                &self.mirror_sessions,
                &self.sessions,
                keys::TREE_SESSIONS,
                &[(agent_id, user_id)],
                |s| s.ended_at.is_some(),
            )?;
            ended.sort_by_key(|s| (s.ended_at, s.session_id));
            out.ended = Some(ended);
        }
        if parts.contains(Parts::FACTS) {
            // The user's own, and every user's shared ones.
            let visible = self.mirrored(
                &self.mirror_facts,
                &self.facts,
                keys::TREE_FACTS,
                &[(agent_id, user_id), (agent_id, "")],
                |_| true,
            )?;
            out.facts = Some(CurrentFacts::of(visible));
        }
        if parts.contains(Parts::BLOCKS) {
            out.blocks = Some(StoredBlocks {
                agent_blocks: self.blocks(agent_id)?,
                user_blocks: self.user_blocks(agent_id, user_id)?,
                persistent_context: self.agent(agent_id)?.persistent_context,
            });
        }
        if parts.contains(Parts::TOPICS) {
            let mut topics: Vec<Topic> = self
                .mirrored(
                    &self.mirror_topics,
                    &self.topics,
                    keys::TREE_TOPICS,
                    &[(agent_id, user_id)],
                    |_| true,
                )?
                .iter()
                .map(|t| (**t).clone())
                .collect();
            topics.sort_by_key(|t| (t.created_at, t.topic_id));
            out.topics = Some(topics);
        }
        Ok(out)
    }
}

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
        key: [u8; 20],
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
    /// Remove every record of a user (with one agent, or all), and every
    /// record built from theirs.
    Forget {
        user_id: String,
        agent_id: Option<String>,
        reply: RpcReplyPort<Result<ForgetReport, StoreError>>,
    },
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
    GetBlocks(String, RpcReplyPort<Result<Vec<MemoryBlock>, StoreError>>),
    /// The blocks reflections drew from one user's conversations with an
    /// agent.
    GetUserBlocks {
        agent_id: String,
        user_id: String,
        reply: RpcReplyPort<Result<Vec<MemoryBlock>, StoreError>>,
    },
    ListAgents(RpcReplyPort<Result<Vec<(String, AgentMeta)>, StoreError>>),
    GetAgent(String, RpcReplyPort<Result<AgentMeta, StoreError>>),
    /// An agent's newest current summary of a type.
    LatestSummary {
        agent_id: String,
        kind: SummaryType,
        reply: RpcReplyPort<Result<Option<ConversationSummary>, StoreError>>,
    },
    ListQueue(RpcReplyPort<Result<Vec<ReflectionJob>, StoreError>>),
    ListDeadLetters(RpcReplyPort<Result<Vec<DeadLetter>, StoreError>>),
    /// Store a daily or weekly rollup (once per id), marking the version
    /// it supersedes. Replies whether it was new.
    PutRollup {
        summary: Box<ConversationSummary>,
        supersedes: Option<Uuid>,
        vector: Option<StoredVector>,
        reply: RpcReplyPort<Result<bool, StoreError>>,
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
    /// key `after` if given.
    Inbox {
        after: Option<Vec<u8>>,
        limit: usize,
        reply: RpcReplyPort<Result<Vec<InboxEntry>, StoreError>>,
    },
    /// Items the Rollup actor has taken in.
    InboxDone {
        keys: Vec<Vec<u8>>,
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
    /// A background flush finished.
    FlushDone(Result<(), sled::Error>),
}

impl StoreMsg {
    /// The `AppendTurn` message for turn `seq` of a session.
    pub fn append_turn(
        session_id: Uuid,
        seq: u32,
        turn: &ConversationTurn,
    ) -> Result<StoreMsg, serde_json::Error> {
        Ok(StoreMsg::AppendTurn {
            key: keys::turn(session_id, seq),
            value: serde_json::to_vec(turn)?,
        })
    }
}

/// The parts of an agent's context sources a write may change, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts(u8);

impl Parts {
    /// The agent's blocks, users' blocks and the agent's record (its
    /// persistent context).
    pub const BLOCKS: Parts = Parts(1);
    /// Session records (a call ended).
    pub const SESSIONS: Parts = Parts(1 << 1);
    /// Summaries of every type.
    pub const SUMMARIES: Parts = Parts(1 << 2);
    /// Facts.
    pub const FACTS: Parts = Parts(1 << 3);
    /// Topics.
    pub const TOPICS: Parts = Parts(1 << 4);
    /// No part.
    pub const NONE: Parts = Parts(0);
    /// Every part.
    pub const ALL: Parts = Parts((1 << 5) - 1);
    const COUNT: usize = 5;

    pub fn contains(self, other: Parts) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many parts the set holds.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
}

impl std::ops::BitOr for Parts {
    type Output = Parts;
    fn bitor(self, other: Parts) -> Parts {
        Parts(self.0 | other.0)
    }
}

/// The change counters that bear on one user's context with an agent, one
/// per part: the agent's (writes that change what every user of it sees)
/// and the user's own (their calls, summaries, facts and topics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    agent: [u64; Parts::COUNT],
    user: [u64; Parts::COUNT],
}

impl Stamp {
    /// The parts whose counter differs from `earlier`'s.
    pub fn changed_since(&self, earlier: &Stamp) -> Parts {
        let mut out = Parts::NONE;
        for i in 0..Parts::COUNT {
            if self.agent[i] != earlier.agent[i] || self.user[i] != earlier.user[i] {
                out = out | Parts(1 << i);
            }
        }
        out
    }
}

/// An agent's counters, and each of its users'.
#[derive(Debug, Default)]
struct AgentCounts {
    all: [u64; Parts::COUNT],
    users: HashMap<String, [u64; Parts::COUNT]>,
}

fn add(counts: &mut [u64; Parts::COUNT], parts: Parts) {
    for (i, n) in counts.iter_mut().enumerate() {
        if parts.contains(Parts(1 << i)) {
            *n += 1;
        }
    }
}

/// Change counters, one per part of what contexts are assembled from
/// (blocks, ended sessions, summaries, facts, topics), kept per agent and,
/// for what is one user's alone, per user: a user's call ending leaves
/// the other users' cached contexts current. The Store bumps the parts a
/// write changed, after the write, so a reader that saw the old counts and
/// then read the data can only be stale in the safe direction: it sees
/// newer counts next time and re-reads those parts. Turn appends do not
/// bump: live turns are read from the session actors.
#[derive(Debug, Default)]
pub struct Generations(std::sync::Mutex<HashMap<String, AgentCounts>>);

impl Generations {
    /// The counters of a user's context with the agent (all 0 before the
    /// first change).
    pub fn get(&self, agent_id: &str, user_id: &str) -> Stamp {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(agent_id) {
            Some(c) => Stamp {
                agent: c.all,
                user: c.users.get(user_id).copied().unwrap_or_default(),
            },
            None => Stamp::default(),
        }
    }

    fn counts<'m>(
        map: &'m mut HashMap<String, AgentCounts>,
        agent_id: &str,
    ) -> &'m mut AgentCounts {
        map.entry(agent_id.to_string()).or_default()
    }

    /// Moves the counters of `parts` for every user of the agent.
    pub fn bump(&self, agent_id: &str, parts: Parts) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        add(&mut Self::counts(&mut map, agent_id).all, parts);
    }

    /// Moves the counters of `parts` for one user of the agent.
    pub fn bump_user(&self, agent_id: &str, user_id: &str, parts: Parts) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let counts = Self::counts(&mut map, agent_id);
        match counts.users.get_mut(user_id) {
            Some(c) => add(c, parts),
            None => {
                let mut c = [0; Parts::COUNT];
                add(&mut c, parts);
                counts.users.insert(user_id.to_string(), c);
            }
        }
    }
}

/// Indexes an ended call's turns for retrieval (a call's worth of turns,
/// read back from the tree just written: tens of microseconds).
fn index_ended(search: &SearchIndex, t: &Trees, rec: &SessionRecord) {
    let (trees, user, id) = (t.clone(), rec.user_id.clone(), rec.session_id);
    let inline = search.inline();
    search.update(&rec.agent_id, move |ix| match trees.numbered_turns(id) {
        Ok(turns) => ix.put_turns_with(&user, id, &turns, inline.as_deref()),
        Err(err) => warn!(session_id = %id, error = %err, "turns not indexed"),
    });
}

pub struct StoreArgs {
    pub trees: Trees,
    pub settings: StoreSettings,
    /// Bumped, per part and per agent or user, on every context-relevant
    /// write.
    pub generations: std::sync::Arc<Generations>,
    /// Kept current after every write for agents whose index is built.
    pub search: std::sync::Arc<SearchIndex>,
}

pub struct StoreState {
    trees: Trees,
    settings: StoreSettings,
    generations: std::sync::Arc<Generations>,
    search: std::sync::Arc<SearchIndex>,
    dirty: bool,
    /// Writes since the last flush began: the group-commit batch.
    batch: u64,
    /// Writes that failed since the last explicit `Flush`.
    failed_since_flush: u64,
    /// Ids forgotten since the start: a reflection, rollup or topic update
    /// that read them before the forget must not write them back.
    forgotten: std::collections::HashSet<Uuid>,
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

impl StoreState {
    fn wrote(&mut self, myself: &ActorRef<StoreMsg>) {
        self.stats.writes += 1;
        match self.settings.flush {
            FlushPolicy::EveryWrite => {
                self.stats.flushes += 1;
                metrics::histogram!("recall_store_batch_writes").record(1.0);
                if let Err(err) = timed_flush(&self.trees.db) {
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
        let db = self.trees.db.clone();
        let me = myself.clone();
        tokio::task::spawn_blocking(move || {
            let res = timed_flush(&db).map(|_| ());
            let _ = me.cast(StoreMsg::FlushDone(res));
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

    fn forgot_session(&self, id: &[u8]) -> bool {
        !self.forgotten.is_empty()
            && Uuid::from_slice(id).is_ok_and(|id| self.forgotten.contains(&id))
    }

    /// Whether `summary` was made from a summary that has since been
    /// forgotten (a rollup or topic update that was running meanwhile).
    fn built_from_forgotten(&self, summary: &ConversationSummary) -> bool {
        !self.forgotten.is_empty()
            && (self.forgotten.contains(&summary.summary_id)
                || summary
                    .source_summary_ids
                    .iter()
                    .any(|id| self.forgotten.contains(id)))
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
        Ok(StoreState {
            trees: args.trees,
            settings: args.settings,
            generations: args.generations,
            search: args.search,
            dirty: false,
            batch: 0,
            failed_since_flush: 0,
            forgotten: Default::default(),
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
        // A plain flush on the blocking pool, awaited: sled's `flush_async`
        // finishes on sled's own thread pool, which can still hold the
        // database (and the folder's lock) after this actor has stopped.
        let db = state.trees.db.clone();
        let res = match tokio::task::spawn_blocking(move || db.flush()).await {
            Ok(res) => res,
            Err(_) => state.trees.db.flush(),
        };
        if let Err(err) = res {
            error!(error = %err, "final flush failed");
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StoreMsg>,
        msg: StoreMsg,
        state: &mut StoreState,
    ) -> Result<(), ActorProcessingErr> {
        let t = state.trees.clone();
        match msg {
            StoreMsg::OpenSession(rec) => {
                let res = serde_json::to_vec(&rec)
                    .map_err(StoreError::from)
                    .and_then(|v| {
                        (&t.sessions, &t.open)
                            .transaction(|(sessions, open)| {
                                let key = keys::session(rec.session_id);
                                sessions.insert(&key, v.as_slice())?;
                                open.insert(&key, &[])?;
                                Ok::<_, ConflictableTransactionError<StoreError>>(())
                            })
                            .map_err(StoreError::from)
                    });
                t.note_sessions([keys::session(rec.session_id)]);
                match res {
                    Ok(()) => state.wrote(&myself),
                    Err(e) => state.failed("open_session", &e),
                }
            }
            // A forgotten call's last writes, sent before the forget and
            // arriving after it.
            StoreMsg::AppendTurn { key, .. } if state.forgot_session(&key[..16]) => {
                debug!("turn of a forgotten session dropped");
            }
            StoreMsg::EndSession(rec) if state.forgotten.contains(&rec.session_id) => {
                debug!(session_id = %rec.session_id, "end of a forgotten session dropped");
            }
            StoreMsg::AppendTurn { key, value } => match t.turns.insert(key, value) {
                Ok(_) => {
                    state.stats.turns_written += 1;
                    state.wrote(&myself);
                }
                Err(e) => state.failed("append_turn", &StoreError::from(e)),
            },
            StoreMsg::EndSession(rec) => {
                let at = rec.ended_at.unwrap_or(rec.started_at);
                let res = t.end_session(&rec, at);
                state
                    .generations
                    .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                match res {
                    Ok(()) => {
                        index_ended(&state.search, &t, &rec);
                        state.wrote(&myself)
                    }
                    Err(e) => state.failed("end_session", &e),
                }
            }
            StoreMsg::CloseOrphan {
                session_id,
                reason,
                at,
                reply,
            } => {
                let res = (|| {
                    let Some(mut rec) = t.session(session_id)? else {
                        return Err(StoreError::SessionNotFound(session_id));
                    };
                    if !rec.is_open() {
                        return Ok(None);
                    }
                    let turns = t.turns(session_id)?;
                    rec.turn_count = turns.len() as u32;
                    // A recovered session was last known alive at its last
                    // turn; a crashed one ends now.
                    rec.ended_at = Some(match reason {
                        EndReason::Recovered => {
                            turns.last().map(|l| l.timestamp).unwrap_or(rec.started_at)
                        }
                        _ => at,
                    });
                    rec.end_reason = Some(reason);
                    t.end_session(&rec, at)?;
                    Ok(Some(rec))
                })();
                if let Ok(Some(rec)) = &res {
                    state
                        .generations
                        .bump_user(&rec.agent_id, &rec.user_id, Parts::SESSIONS);
                    index_ended(&state.search, &t, rec);
                }
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::LoadSession { session_id, reply } => {
                let res = (|| {
                    let Some(rec) = t.session(session_id)? else {
                        return Ok(None);
                    };
                    Ok(Some((rec, t.turns(session_id)?)))
                })();
                let _ = reply.send(res);
            }
            StoreMsg::Forget {
                user_id,
                agent_id,
                reply,
            } => {
                let res = t.forget_user(&user_id, agent_id.as_deref());
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
                let _ = reply.send(res);
            }
            StoreMsg::ReviseSession { summary, reply, .. }
                if summary
                    .supersedes
                    .is_some_and(|id| state.forgotten.contains(&id)) =>
            {
                let _ = reply.send(Ok(Revision::default()));
            }
            StoreMsg::ReviseSession {
                summary,
                facts,
                reply,
            } => {
                let res = t.revise_session(&summary, &facts);
                if let Ok(r) = &res {
                    if r.stored {
                        state.generations.bump(&summary.agent_id, Parts::ALL);
                        let (old, added, moved) = (
                            r.old.as_ref().map(|o| o.summary_id),
                            r.facts_added.clone(),
                            r.facts_moved.clone(),
                        );
                        let (s, t2) = (summary.clone(), t.clone());
                        state.search.update(&summary.agent_id, move |ix| {
                            if let Some(old) = old {
                                ix.remove(old);
                            }
                            ix.put_summary(&s, None);
                            t2.index_facts(ix, added.iter().chain(&moved));
                        });
                        state.wrote(&myself);
                    }
                }
                let _ = reply.send(res);
            }
            StoreMsg::StampDerivation {
                summary_id,
                derivation,
                reply,
            } => {
                let res = t.stamp_derivation(summary_id, &derivation);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::CompleteReflection { summary, reply, .. }
                if state.forgotten.contains(&summary.summary_id) =>
            {
                // The session was forgotten while it was being reflected on.
                debug!(session_id = %summary.summary_id, "reflection of a forgotten session dropped");
                let _ = t.queue.remove(keys::session(summary.summary_id));
                let _ = reply.send(Ok(false));
            }
            StoreMsg::PutRollup { summary, reply, .. } if state.built_from_forgotten(&summary) => {
                debug!(summary_id = %summary.summary_id, "rollup of forgotten summaries dropped");
                let _ = reply.send(Ok(false));
            }
            StoreMsg::PutTopic { summary, reply, .. } if state.built_from_forgotten(&summary) => {
                debug!(summary_id = %summary.summary_id, "topic of forgotten summaries dropped");
                let _ = reply.send(Ok(()));
            }
            StoreMsg::CompleteReflection {
                summary,
                blocks,
                facts,
                reply,
            } => {
                let res = t.reflection_done(&summary, &blocks, &facts);
                // The user's summary and facts; every user's facts where a
                // fact is shared, and the agent's blocks where it wrote one
                // (the summary counter it moves in the agent's record is
                // the watchdog's, not part of a context). A reflection
                // that wrote neither leaves the other users' cached
                // contexts current.
                let (agent, user) = (&summary.agent_id, &summary.user_id);
                state
                    .generations
                    .bump_user(agent, user, Parts::SUMMARIES | Parts::FACTS);
                let shared = matches!(res, Ok((_, true)));
                let everyone = if blocks.is_empty() {
                    Parts::NONE
                } else {
                    Parts::BLOCKS
                } | if shared { Parts::FACTS } else { Parts::NONE };
                if !everyone.is_empty() {
                    state.generations.bump(agent, everyone);
                }
                let res = res.map(|(stored, _)| stored);
                if let Ok(true) = res {
                    // The facts that survived de-duplication, and those on
                    // their subjects, as they now stand.
                    let subjects: std::collections::BTreeSet<&String> =
                        facts.iter().filter_map(|f| f.subject.as_ref()).collect();
                    let touched: Vec<FactRecord> = match facts.first() {
                        Some(f) => t
                            .user_facts(&f.agent_id, &f.user_id)
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|s| {
                                facts.iter().any(|c| c.fact_id == s.fact_id)
                                    || s.subject.as_ref().is_some_and(|x| subjects.contains(x))
                            })
                            .collect(),
                        None => Vec::new(),
                    };
                    let (s, t2) = (summary.clone(), t.clone());
                    state.search.update(&summary.agent_id, move |ix| {
                        ix.put_summary(&s, None);
                        t2.index_facts(ix, &touched);
                    });
                }
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::ListFacts {
                agent_id,
                user_id,
                reply,
            } => {
                let _ = reply.send(t.visible_facts(&agent_id, &user_id));
            }
            StoreMsg::GetFact(id, reply) => {
                let _ = reply.send(t.fact(id));
            }
            StoreMsg::SetFactVisibility {
                fact_id,
                user_id,
                visibility,
                reply,
            } => {
                let res = t.set_fact_visibility(fact_id, &user_id, visibility);
                if let Ok(f) = &res {
                    state.generations.bump(&f.agent_id, Parts::FACTS);
                    let (f2, t2) = (f.clone(), t.clone());
                    state
                        .search
                        .update(&f.agent_id, move |ix| t2.index_facts(ix, [&f2]));
                }
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::DeleteFact {
                fact_id,
                user_id,
                reply,
            } => {
                let res = t.delete_fact(fact_id, &user_id);
                if let Ok((f, moved)) = &res {
                    state.generations.bump(&f.agent_id, Parts::FACTS);
                    let (id, moved, t2) = (f.fact_id, moved.clone(), t.clone());
                    state.search.update(&f.agent_id, move |ix| {
                        ix.remove(id);
                        t2.index_facts(ix, &moved);
                    });
                    if let Err(e) = t.embeddings.remove(keys::embedding(f.fact_id)) {
                        state.failed("delete_fact_vector", &e.into());
                    }
                }
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res.map(|(f, _)| f));
            }
            StoreMsg::DeadLetter { letter, reply }
                if state.forgotten.contains(&letter.session_id) =>
            {
                // A reflection of a forgotten session gave up (or found the
                // session gone): nothing of it is kept.
                let _ = t.queue.remove(keys::session(letter.session_id));
                let _ = reply.send(Ok(()));
            }
            StoreMsg::DeadLetter { letter, reply } => {
                let res = t.dead_letter(&letter);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::Requeue {
                session_id,
                at,
                reply,
            } => {
                let res = t.requeue(session_id, at);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutBlock { block, reply } => {
                let res = serde_json::to_vec(&block)
                    .map_err(StoreError::from)
                    .and_then(|v| {
                        t.blocks
                            .insert(keys::block(&block.agent_id, block.label), v)
                            .map_err(StoreError::from)
                    })
                    .map(|_| ());
                state.generations.bump(&block.agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::SetPersistentContext {
                agent_id,
                lines,
                reply,
            } => {
                let res = (|| {
                    let mut meta = t.agent(&agent_id)?;
                    meta.persistent_context = lines;
                    meta.summary_version += 1;
                    t.agents
                        .insert(keys::agent(&agent_id), serde_json::to_vec(&meta)?)?;
                    Ok(())
                })();
                state.generations.bump(&agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::MarkContextBuilt {
                agent_id,
                version,
                expires_at,
            } => {
                let res = (|| {
                    let mut meta = t.agent(&agent_id)?;
                    meta.context_version = version;
                    meta.context_expires_at = expires_at;
                    t.agents
                        .insert(keys::agent(&agent_id), serde_json::to_vec(&meta)?)?;
                    Ok::<_, StoreError>(())
                })();
                match res {
                    Ok(()) => state.wrote(&myself),
                    Err(e) => state.failed("mark_context_built", &e),
                }
            }
            StoreMsg::GetSession(id, reply) => {
                let _ = reply.send(t.session(id));
            }
            StoreMsg::ListSessions(agent, reply) => {
                let _ = reply.send(t.sessions(agent.as_deref()));
            }
            StoreMsg::ListOpenSessions(reply) => {
                let _ = reply.send(t.open_sessions());
            }
            StoreMsg::GetTurns(id, reply) => {
                let _ = reply.send(t.turns(id));
            }
            StoreMsg::GetNumberedTurns(id, reply) => {
                let _ = reply.send(t.numbered_turns(id));
            }
            StoreMsg::GetSummary(id, reply) => {
                let _ = reply.send(t.summary(id));
            }
            StoreMsg::ListSummaries {
                agent_id,
                kind,
                since,
                reply,
            } => {
                let _ = reply.send(t.summaries(&agent_id, kind, since));
            }
            StoreMsg::GetBlocks(agent, reply) => {
                let _ = reply.send(t.blocks(&agent));
            }
            StoreMsg::GetUserBlocks {
                agent_id,
                user_id,
                reply,
            } => {
                let _ = reply.send(t.user_blocks(&agent_id, &user_id));
            }
            StoreMsg::ListAgents(reply) => {
                let _ = reply.send(t.agents());
            }
            StoreMsg::GetAgent(agent_id, reply) => {
                let _ = reply.send(t.agent(&agent_id));
            }
            StoreMsg::LatestSummary {
                agent_id,
                kind,
                reply,
            } => {
                let _ = reply.send(t.latest_summary(&agent_id, kind));
            }
            StoreMsg::ListQueue(reply) => {
                let _ = reply.send(t.queued());
            }
            StoreMsg::ListDeadLetters(reply) => {
                let _ = reply.send(t.dead_letters());
            }
            StoreMsg::PutRollup {
                summary,
                supersedes,
                vector,
                reply,
            } => {
                let res = t.put_rollup(&summary, supersedes, vector.as_ref());
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
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::RollupCursor {
                agent_id,
                level,
                reply,
            } => {
                let _ = reply.send(t.rollup_cursor(&agent_id, level));
            }
            StoreMsg::SetRollupCursor {
                agent_id,
                level,
                period,
                reply,
            } => {
                let res = t.set_rollup_cursor(&agent_id, level, period);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::Inbox {
                after,
                limit,
                reply,
            } => {
                let _ = reply.send(t.inbox(after.as_deref(), limit));
            }
            StoreMsg::InboxDone { keys, reply } => {
                let res = t.inbox_done(&keys);
                if res.is_ok() {
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::Topics {
                agent_id,
                user_id,
                reply,
            } => {
                let _ = reply.send(t.topics(&agent_id, user_id.as_deref()));
            }
            StoreMsg::PutTopic {
                topic,
                summary,
                vector,
                reply,
            } => {
                let res = t.put_topic(&topic, &summary, vector.as_ref());
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
                    state.wrote(&myself);
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutVectors {
                agent_id,
                items,
                reply,
            } => {
                let res = t.put_vectors(&items);
                if let Ok(stored) = &res {
                    let stored = stored.clone();
                    state.search.update(&agent_id, move |ix| {
                        for (id, v) in items {
                            if stored.contains(&id) {
                                ix.set_vector(id, v);
                            }
                        }
                    });
                    state.wrote(&myself);
                }
                let _ = reply.send(res.map(|_| ()));
            }
            StoreMsg::PutTurnVectors {
                agent_id,
                session_id,
                items,
                reply,
            } => {
                let res = t.put_turn_vectors(session_id, &items);
                if let Ok(stored) = &res {
                    let stored: std::collections::HashSet<u32> = stored.iter().copied().collect();
                    state.search.update(&agent_id, move |ix| {
                        for (seq, v) in items {
                            if stored.contains(&seq) {
                                ix.set_vector(TurnRef { session_id, seq }.doc_id(), v);
                            }
                        }
                    });
                    state.wrote(&myself);
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
                    // The data stays in sled's cache; mark it dirty so the
                    // next tick tries again.
                    state.stats.write_errors += 1;
                    state.dirty = true;
                    error!(error = %err, "flush failed");
                }
                let failed = std::mem::take(&mut state.flush_waiters_failed);
                for reply in state.flush_waiters.drain(..) {
                    let _ = reply.send(match &res {
                        Err(err) => Err(StoreError::from(err.clone())),
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn summary(id: Uuid, text: &str) -> ConversationSummary {
        let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        ConversationSummary::session(id, "kairix", "mark", t, text)
    }

    #[test]
    fn generations_move_only_the_parts_written() {
        let g = Generations::default();
        let start = g.get("kairix", "mark");
        assert_eq!(start, Stamp::default());
        g.bump("kairix", Parts::FACTS);
        let facts = g.get("kairix", "mark");
        assert_eq!(facts.changed_since(&start), Parts::FACTS);
        g.bump("kairix", Parts::SUMMARIES | Parts::BLOCKS);
        let now = g.get("kairix", "mark");
        assert_eq!(now.changed_since(&facts), Parts::SUMMARIES | Parts::BLOCKS);
        assert_eq!(
            now.changed_since(&start),
            Parts::SUMMARIES | Parts::BLOCKS | Parts::FACTS
        );
        assert!(now.changed_since(&now).is_empty());
        // one user's write moves that user's counters alone
        let ada = g.get("kairix", "ada");
        g.bump_user("kairix", "mark", Parts::SESSIONS | Parts::SUMMARIES);
        assert_eq!(
            g.get("kairix", "mark").changed_since(&now),
            Parts::SESSIONS | Parts::SUMMARIES
        );
        assert!(g.get("kairix", "ada").changed_since(&ada).is_empty());
        g.bump("kairix", Parts::ALL);
        assert_eq!(g.get("kairix", "ada").changed_since(&ada), Parts::ALL);
        // another agent's counters are its own
        assert_eq!(g.get("juniper", "mark"), Stamp::default());
    }

    #[test]
    fn context_parts_reads_only_what_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        let (id, summary) = call("mark", 1);
        trees
            .complete_reflection(
                &summary,
                &[],
                &[fact("mark", "Has a dog called Biscuit", Some("dog"), id)],
            )
            .unwrap();
        let only = trees.context_parts("kairix", "mark", Parts::FACTS).unwrap();
        assert_eq!(only.facts.as_ref().map(CurrentFacts::len), Some(1));
        assert!(only.summaries.is_none() && only.blocks.is_none());
        assert!(only.ended.is_none() && only.topics.is_none());
        let all = trees.context_parts("kairix", "mark", Parts::ALL).unwrap();
        assert_eq!(all.summaries.map(|s| s.len()), Some(1));
        assert!(all.blocks.is_some() && all.ended.is_some() && all.topics.is_some());
        let summaries = trees
            .context_parts("kairix", "mark", Parts::SUMMARIES)
            .unwrap();
        assert!(summaries.summaries.is_some() && summaries.facts.is_none());
    }

    #[test]
    fn a_selection_of_several_groups_takes_each_record_once() {
        let mut held: Held<FactRecord> = Held {
            by_key: HashMap::new(),
            groups: HashMap::new(),
        };
        let call = Uuid::new_v4();
        for (n, (user, shared)) in [
            ("mark", false),
            ("mark", true),
            ("ada", true),
            ("ada", false),
        ]
        .into_iter()
        .enumerate()
        {
            let mut f = fact(user, &format!("fact {n}"), None, call);
            if shared {
                f.visibility = Visibility::Shared;
            }
            let rec = FactRecord {
                fact: f,
                history: Default::default(),
            };
            held.insert(
                sled::IVec::from(format!("k{n}").as_bytes()),
                std::sync::Arc::new(rec),
            );
        }
        let contents = |groups: &[(&str, &str)]| {
            let mut c: Vec<String> = held
                .select(groups, &|_| true)
                .iter()
                .map(|f| f.content.clone())
                .collect();
            c.sort();
            c
        };
        let want = ["fact 0", "fact 1", "fact 2"];
        assert_eq!(contents(&[("kairix", "mark"), ("kairix", "")]), want);
        assert_eq!(contents(&[("kairix", ""), ("kairix", "mark")]), want);
        assert_eq!(contents(&[("kairix", "")]), ["fact 1", "fact 2"]);
        assert_eq!(contents(&[("kairix", "mark")]), ["fact 0", "fact 1"]);
    }

    #[test]
    fn facts_planned_against_the_mirror_are_those_of_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        let scanned = |trees: &Trees| {
            let mut f: Vec<FactRecord> = trees
                .scan(
                    &trees.facts,
                    keys::TREE_FACTS,
                    trees
                        .facts
                        .scan_prefix(keys::facts_prefix("kairix", "mark")),
                )
                .unwrap();
            f.sort_by_key(|f| (f.extracted_at, f.fact_id));
            f
        };
        let (a, first) = call("mark", 1);
        trees
            .complete_reflection(
                &first,
                &[],
                &[fact("mark", "Lives in Austin", Some("home"), a)],
            )
            .unwrap();
        // not built yet: read from the tree
        assert!(Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]).is_none());
        // a context read builds it (and the other mirrors)
        trees.context_parts("kairix", "mark", Parts::ALL).unwrap();
        let held = Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]);
        assert_eq!(held.map(|h| h.len()), Some(1));
        // the same fact again adds nothing; a new home supersedes the old
        let (b, second) = call("mark", 2);
        trees
            .complete_reflection(
                &second,
                &[],
                &[
                    fact("mark", "Lives in Austin", Some("home"), b),
                    fact("mark", "Lives in Denver", Some("home"), b),
                ],
            )
            .unwrap();
        let facts = trees.user_facts("kairix", "mark").unwrap();
        assert_eq!(facts, scanned(&trees));
        let mut contents: Vec<(&str, bool)> = facts
            .iter()
            .map(|f| (f.content.as_str(), f.is_current()))
            .collect();
        contents.sort();
        assert_eq!(
            contents,
            [("Lives in Austin", false), ("Lives in Denver", true)]
        );
        let held = Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]);
        assert_eq!(held.map(|h| h.len()), Some(2), "planned from the mirror");
        assert!(trees.mirrors_match().unwrap());
    }

    #[test]
    fn a_folder_in_use_is_a_locked_error_and_opens_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let settings = StoreSettings::default();
        let first = Trees::open(dir.path(), &settings).unwrap();
        let err = Trees::open_waiting(dir.path(), &settings, Duration::ZERO)
            .err()
            .expect("the folder is locked");
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        Trees::open_waiting(dir.path(), &settings, Duration::ZERO).unwrap();
    }

    fn fact(user: &str, content: &str, subject: Option<&str>, call: Uuid) -> Fact {
        Fact {
            fact_id: Uuid::new_v4(),
            agent_id: "kairix".into(),
            user_id: user.into(),
            category: crate::model::FactCategory::Other,
            content: content.into(),
            subject: subject.map(str::to_string),
            visibility: Visibility::Private,
            source_session_id: Some(call),
            extracted_at: Utc.with_ymd_and_hms(2026, 3, 9, 9, 0, 0).unwrap(),
            conflicts_with: None,
        }
    }

    /// A call of `user` on day `day` of March 2026 and its summary.
    fn call(user: &str, day: u32) -> (Uuid, ConversationSummary) {
        let id = Uuid::new_v4();
        let at = Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap();
        (
            id,
            ConversationSummary::session(id, "kairix", user, at, "a call"),
        )
    }

    #[test]
    fn facts_are_deduplicated_superseded_conflicts_flagged_and_owned() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        let (c1, s1) = call("mark", 1);
        let (c2, s2) = call("ada", 1);
        let works = fact("mark", "Works at Initech", Some("employer"), c1);
        // one reflection per user, as the reflector stores them
        trees
            .complete_reflection(
                &s1,
                &[],
                &[works.clone(), fact("mark", "Prefers mornings", None, c1)],
            )
            .unwrap();
        trees
            .complete_reflection(&s2, &[], &[fact("ada", "Lives in Porto", Some("home"), c2)])
            .unwrap();
        let (c3, s3) = call("mark", 2);
        let globex = fact("mark", "Works at Globex", Some("employer"), c3);
        let second = [
            // the same fact, other case and spacing: dropped
            fact("mark", "works  at initech.", Some("employer"), c3),
            // a later call's value on the subject: the new current one
            globex.clone(),
            fact("mark", "Allergic to peanuts", None, c3),
        ];
        trees.complete_reflection(&s3, &[], &second).unwrap();
        // two values in one call: a conflict, both current
        let (c4, s4) = call("mark", 3);
        let austin = fact("mark", "Lives in Austin", Some("home"), c4);
        let denver = fact("mark", "Lives in Denver", Some("home"), c4);
        trees
            .complete_reflection(&s4, &[], &[austin.clone(), denver.clone()])
            .unwrap();

        let mark = trees.user_facts("kairix", "mark").unwrap();
        let mut contents: Vec<&str> = mark.iter().map(|f| f.content.as_str()).collect();
        contents.sort_unstable();
        assert_eq!(
            contents,
            [
                "Allergic to peanuts",
                "Lives in Austin",
                "Lives in Denver",
                "Prefers mornings",
                "Works at Globex",
                "Works at Initech"
            ]
        );
        let by = |c: &str| mark.iter().find(|f| f.content == c).unwrap().clone();
        let initech = by("Works at Initech");
        assert_eq!(initech.history.superseded_by, Some(globex.fact_id));
        assert_eq!(initech.history.superseded_at, Some(s3.period_start));
        assert_eq!(initech.history.stated_at, Some(s1.period_start));
        assert!(by("Works at Globex").is_current());
        assert_eq!(by("Works at Globex").conflicts_with, None);
        let homes = [by("Lives in Austin"), by("Lives in Denver")];
        assert!(homes.iter().all(FactRecord::is_current));
        assert_eq!(
            homes.iter().filter_map(|f| f.conflicts_with).count(),
            1,
            "one of the two names the other"
        );

        // the context holds current facts, and what each replaced
        let ctx = trees.context_sources("kairix", "mark").unwrap();
        let mut current: Vec<&str> = ctx.facts.iter().map(|f| f.content.as_str()).collect();
        current.sort_unstable();
        assert_eq!(
            current,
            [
                "Allergic to peanuts",
                "Lives in Austin",
                "Lives in Denver",
                "Prefers mornings",
                "Works at Globex"
            ]
        );
        let earlier = ctx.facts.earlier(globex.fact_id).unwrap();
        assert_eq!(
            (earlier.content.as_str(), earlier.until, earlier.fact_id),
            ("Works at Initech", s3.period_start, works.fact_id)
        );
        assert_eq!(ctx.facts.earlier.len(), 1);

        // deleting the current value makes the one it replaced current
        trees.delete_fact(globex.fact_id, "mark").unwrap();
        assert!(trees.fact(works.fact_id).unwrap().unwrap().is_current());
        assert!(trees
            .context_sources("kairix", "mark")
            .unwrap()
            .facts
            .earlier
            .is_empty());

        // visibility: ada sees only her own until mark shares one
        let ada_sees = |t: &Trees| -> Vec<String> {
            let mut v: Vec<String> = t
                .visible_facts("kairix", "ada")
                .unwrap()
                .into_iter()
                .map(|f| f.fact.content)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
        let id = by("Prefers mornings").fact_id;
        assert!(matches!(
            trees.set_fact_visibility(id, "ada", Visibility::Shared),
            Err(StoreError::NotFactOwner(_))
        ));
        assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
        trees
            .set_fact_visibility(id, "mark", Visibility::Shared)
            .unwrap();
        assert_eq!(ada_sees(&trees), ["Lives in Porto", "Prefers mornings"]);
        trees
            .set_fact_visibility(id, "mark", Visibility::Private)
            .unwrap();
        assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
        assert_eq!(
            trees
                .fact(works.fact_id)
                .unwrap()
                .unwrap()
                .history
                .stated_at,
            Some(s1.period_start),
            "a change of visibility keeps the history"
        );

        // deleting: only the owner; unknown ids are errors
        assert!(matches!(
            trees.delete_fact(id, "ada"),
            Err(StoreError::NotFactOwner(_))
        ));
        assert!(trees.fact(id).unwrap().is_some());
        trees.delete_fact(id, "mark").unwrap();
        assert!(trees.fact(id).unwrap().is_none());
        assert_eq!(trees.user_facts("kairix", "mark").unwrap().len(), 4);
        let unknown = Uuid::new_v4();
        assert!(matches!(
            trees.delete_fact(unknown, "mark"),
            Err(StoreError::FactNotFound(_))
        ));
        // another agent's facts are another namespace
        assert!(trees.visible_facts("other", "mark").unwrap().is_empty());
    }

    #[test]
    fn facts_stored_before_their_call_time_was_kept_get_it_from_their_session() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        // an old record: no stated_at, extracted long after its call
        let old_call = SessionRecord {
            session_id: Uuid::new_v4(),
            agent_id: "kairix".into(),
            user_id: "mark".into(),
            connection_id: "c1".into(),
            started_at: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
            ended_at: Some(Utc.with_ymd_and_hms(2026, 3, 1, 9, 5, 0).unwrap()),
            end_reason: Some(EndReason::Disconnect),
            turn_count: 1,
        };
        trees.end_session(&old_call, old_call.started_at).unwrap();
        let mut old = fact("mark", "Lives in Austin", Some("home"), old_call.session_id);
        old.extracted_at = Utc.with_ymd_and_hms(2026, 3, 20, 9, 0, 0).unwrap();
        let json = serde_json::to_vec(&old).unwrap();
        trees
            .facts
            .insert(keys::fact("kairix", "mark", old.fact_id), json)
            .unwrap();
        trees
            .fact_index
            .insert(
                old.fact_id.as_bytes(),
                keys::fact("kairix", "mark", old.fact_id),
            )
            .unwrap();
        // a call after the old one, reflected before the old fact's extraction time
        let (c2, s2) = call("mark", 5);
        let denver = fact("mark", "Moved to Denver", Some("home"), c2);
        trees
            .complete_reflection(&s2, &[], std::slice::from_ref(&denver))
            .unwrap();
        let austin = trees.fact(old.fact_id).unwrap().unwrap();
        assert_eq!(austin.history.stated_at, Some(old_call.started_at));
        assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
        assert!(trees.fact(denver.fact_id).unwrap().unwrap().is_current());
    }

    #[test]
    fn summaries_from_before_the_inbox_are_queued_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        trees.fill_inbox = false;
        let id = Uuid::new_v4();
        trees
            .complete_reflection(&summary(id, "An older summary"), &[], &[])
            .unwrap();
        assert!(trees.inbox(None, 10).unwrap().is_empty());
        assert_eq!(trees.backfill_inbox().unwrap(), 1);
        let queued = trees.inbox(None, 10).unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!((queued[0].id, queued[0].kind), (id, keys::INBOX_SUMMARY));
        assert_eq!(queued[0].agent_id, "kairix");
        // once per folder
        trees.inbox_done(&[queued[0].key.clone()]).unwrap();
        assert_eq!(trees.backfill_inbox().unwrap(), 0);
        assert!(trees.inbox(None, 10).unwrap().is_empty());
    }

    #[test]
    fn storing_a_session_summary_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        let id = Uuid::new_v4();
        assert!(trees
            .complete_reflection(&summary(id, "first"), &[], &[])
            .unwrap());
        assert!(!trees
            .complete_reflection(&summary(id, "second"), &[], &[])
            .unwrap());
        let all = trees
            .summaries("kairix", SummaryType::Session, None)
            .unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].summary_text, "first");
        assert_eq!(trees.agent("kairix").unwrap().summary_version, 1);
    }

    #[test]
    fn a_corrupt_record_is_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
        let id = Uuid::new_v4();
        trees
            .complete_reflection(&summary(id, "ok"), &[], &[])
            .unwrap();
        trees
            .summaries
            .insert(
                keys::summary("kairix", SummaryType::Session, Utc::now(), Uuid::new_v4()),
                &b"{broken"[..],
            )
            .unwrap();
        let all = trees
            .summaries("kairix", SummaryType::Session, None)
            .unwrap();
        assert_eq!(all.len(), 1);
    }
}
