//! The sled backend: recall's records in the trees of one sled database
//! in the data folder (layout in [`crate::keys`]).
//!
//! [`Trees`] is the open database; each record kind's half of the
//! [`Backend`](super::Backend) traits is an impl of its own file:
//! `sessions` (sessions and turns), `summaries` (summaries, blocks and
//! per-agent bookkeeping), `facts`, `jobs` (the reflection queue, dead
//! letters and what a finished reflection stores), `hierarchy` (rollups,
//! cursors, the Rollup actor's inbox, topics and vectors), `forget`,
//! `replay` and `sources` (the reads a context is assembled from, through
//! the in-memory mirrors of `mirror`); `listing` reads the pages of
//! sessions, summaries and dead letters, stopping at their limit. Writes that span trees run in one
//! sled transaction.

use std::collections::BTreeSet;

use super::facts::sorted_facts;
use super::*;

mod facts;
mod forget;
mod hierarchy;
mod interface;
mod jobs;
mod listing;
pub(crate) mod mirror;
mod sessions;
mod sources;
mod summaries;
mod transfer;

pub use transfer::import_folder;

/// How long opening waits for the data folder's lock, and how often it looks.
const LOCK_WAIT: Duration = Duration::from_secs(2);
const LOCK_POLL: Duration = Duration::from_millis(20);

/// sled reports a held folder lock as an I/O error carrying the
/// `WouldBlock` it got, wrapped in a message.
fn is_lock_error(e: &::sled::Error) -> bool {
    match e {
        ::sled::Error::Io(io) => {
            io.kind() == std::io::ErrorKind::WouldBlock
                || io.to_string().contains("could not acquire lock")
        }
        _ => false,
    }
}

/// Flushes sled, recording how long it took.
fn timed_flush(db: &::sled::Db) -> ::sled::Result<usize> {
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
    pub db: ::sled::Db,
    pub meta: ::sled::Tree,
    pub sessions: ::sled::Tree,
    pub open: ::sled::Tree,
    pub turns: ::sled::Tree,
    pub summaries: ::sled::Tree,
    pub summary_index: ::sled::Tree,
    pub blocks: ::sled::Tree,
    pub queue: ::sled::Tree,
    pub dead: ::sled::Tree,
    pub agents: ::sled::Tree,
    pub facts: ::sled::Tree,
    /// fact id → its `facts` key.
    pub fact_index: ::sled::Tree,
    /// (agent, level) → the last period rolled up.
    pub rollup_cursors: ::sled::Tree,
    /// Session summaries and facts the Rollup actor has not taken in yet
    /// (topics, late rollups, vectors).
    pub rollup_inbox: ::sled::Tree,
    pub topics: ::sled::Tree,
    /// Item id → its vector.
    pub embeddings: ::sled::Tree,
    /// Hashes of the facts a user deleted (see [`keys::fact_tombstone`]).
    pub fact_tombstones: ::sled::Tree,
    /// Sessions by (agent, user, start time): see [`keys::user_session`].
    pub user_sessions: ::sled::Tree,
    /// Sessions by start time, every agent's and each agent's: see
    /// [`keys::session_start`].
    pub session_starts: ::sled::Tree,
    /// Dead letters by (agent, failure time): see
    /// [`keys::agent_dead_letter`].
    pub agent_dead_letters: ::sled::Tree,
    /// Every forget, kept for good: see [`keys::forget_log`].
    pub forget_log: ::sled::Tree,
    /// Ids forgotten within [`FORGOTTEN_FOR`](crate::store::FORGOTTEN_FOR)
    /// → when (see [`keys::time_key`]).
    pub forgotten: ::sled::Tree,
    /// The mirror's ledger: see [`keys::mirror_ledger`].
    pub mirror_ledger: ::sled::Tree,
    /// How many records `dead_letters` holds: counted once at open, then
    /// moved by every write that adds or removes one (`/metrics` reads it
    /// at each scrape; `Tree::len` would iterate the tree).
    dead_count: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Whether reflections queue their summary and facts for the Rollup
    /// actor (off when rollups are: nothing would take them out).
    pub fill_inbox: bool,
    /// Tree and key of each record skipped because it did not decode.
    skipped: std::sync::Arc<Skipped>,
    /// Every session record, summary, fact and topic, in memory once a
    /// context read first asks (see [`Mirror`]).
    mirror_sessions: std::sync::Arc<Mirror<SessionRecord>>,
    mirror_summaries: std::sync::Arc<Mirror<ConversationSummary>>,
    mirror_facts: std::sync::Arc<Mirror<FactRecord>>,
    mirror_topics: std::sync::Arc<Mirror<Topic>>,
}

#[async_trait::async_trait]
impl Backend for Trees {
    fn name(&self) -> &'static str {
        "sled"
    }

    /// Blocks on the disk: the Store actor calls it on the blocking pool
    /// (or inline with `flush = "every_write"`).
    async fn flush(&self) -> Result<(), StoreError> {
        timed_flush(&self.db)?;
        Ok(())
    }

    fn skipped_records(&self) -> u64 {
        self.skipped.count()
    }

    async fn caches_match(&self) -> Result<bool, StoreError> {
        self.mirrors_match()
    }
}

impl Trees {
    /// Opens (or creates) the data folder and checks its schema version.
    /// sled panics on some kinds of damage; that becomes `Corrupt`.
    pub fn open(path: &Path, settings: &StoreSettings) -> Result<Trees, StoreError> {
        Self::open_waiting(path, settings, LOCK_WAIT)
    }

    pub(super) fn open_waiting(
        path: &Path,
        settings: &StoreSettings,
        lock_wait: Duration,
    ) -> Result<Trees, StoreError> {
        if path.exists() && !path.is_dir() {
            return Err(StoreError::NotADirectory {
                path: path.to_path_buf(),
            });
        }
        let config = ::sled::Config::new()
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
            Ok(Err(::sled::Error::Corruption { .. })) | Ok(Err(::sled::Error::Unsupported(_))) => {
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
            user_sessions: tree(keys::TREE_USER_SESSIONS)?,
            session_starts: tree(keys::TREE_SESSION_STARTS)?,
            agent_dead_letters: tree(keys::TREE_AGENT_DEAD_LETTERS)?,
            forget_log: tree(keys::TREE_FORGET_LOG)?,
            forgotten: tree(keys::TREE_FORGOTTEN)?,
            mirror_ledger: tree(keys::TREE_MIRROR_LEDGER)?,
            dead_count: Default::default(),
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
                if found == 1 && keys::SCHEMA_VERSION == 2 {
                    // Version 1 records are version 2 records whose facts
                    // are all the user's: only the mark moves.
                    trees
                        .meta
                        .insert(keys::SCHEMA_KEY, &keys::SCHEMA_VERSION.to_be_bytes())?;
                    trees.db.flush()?;
                    tracing::info!(
                        from = found,
                        to = keys::SCHEMA_VERSION,
                        "upgraded the data folder's schema"
                    );
                } else if found != keys::SCHEMA_VERSION {
                    return Err(StoreError::IncompatibleSchema {
                        path: path.to_path_buf(),
                        found,
                        expected: keys::SCHEMA_VERSION,
                    });
                }
            }
        }
        let indexed = trees.index_user_sessions()?;
        if indexed > 0 {
            tracing::info!(sessions = indexed, "indexed sessions by agent and user");
        }
        let indexed = trees.index_session_starts()?;
        if indexed > 0 {
            tracing::info!(sessions = indexed, "indexed sessions by start time");
        }
        let indexed = trees.index_dead_letters()?;
        if indexed > 0 {
            tracing::info!(dead_letters = indexed, "indexed dead letters by agent");
        }
        trees.count_dead_letters()?;
        Ok(trees)
    }

    /// A stored record, decoded. One that does not decode is skipped with a
    /// warning and counted (`skipped_records`, in the stats, `/readyz` and
    /// `/metrics`): one damaged record must not hide the rest of the data
    /// folder.
    pub(super) fn decode<T: DeserializeOwned>(
        &self,
        tree: &str,
        key: &[u8],
        bytes: &[u8],
    ) -> Option<T> {
        match serde_json::from_slice(bytes) {
            Ok(v) => Some(v),
            Err(err) => {
                self.skip(tree, key, &err.to_string());
                None
            }
        }
    }

    /// Counts and reports a damaged record once, however often it is read.
    pub(super) fn skip(&self, tree: &str, key: &[u8], error: &str) {
        self.skipped.note(tree, key, &key, error);
    }

    /// The record under `key`, decoded (a record that does not decode is
    /// skipped, like a missing one).
    pub(super) fn get<T: DeserializeOwned>(
        &self,
        tree: &::sled::Tree,
        name: &str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        Ok(tree.get(key)?.and_then(|v| self.decode(name, key, &v)))
    }

    pub(super) fn scan<T: DeserializeOwned>(
        &self,
        tree: &::sled::Tree,
        name: &str,
        iter: impl Iterator<Item = ::sled::Result<(::sled::IVec, ::sled::IVec)>>,
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
}

#[cfg(test)]
mod tests;
