//! [`StoreError`]: what reading or writing recall's records can fail
//! with. It stands below the Store and the search index the Store keeps
//! current, which both speak of it (a failed index build is a failed read
//! of the store), so neither depends on the other for it.

use std::path::PathBuf;

use ::sled::transaction::TransactionError;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data folder {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot open data folder {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: ::sled::Error,
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
    Sled(#[from] ::sled::Error),
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
    #[error("flush failed")]
    FlushFailed(#[source] std::sync::Arc<StoreError>),
    #[error("{0} write(s) failed since the last flush; see the logs")]
    WritesFailed(u64),
    #[error("a read off the Store actor did not finish")]
    ReadAborted(#[source] tokio::task::JoinError),
    #[error("cannot connect to PostgreSQL at {target}")]
    Connect {
        /// The URL without its password.
        target: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("database error")]
    Postgres(#[from] sqlx::Error),
    #[error("cannot apply the database migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error(
        "PostgreSQL schema `{schema}` is at migration {found}; this build of recall knows migrations up to {known}: run a newer recall"
    )]
    NewerDatabase {
        schema: String,
        found: i64,
        known: i64,
    },
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => StoreError::Sled(e),
        }
    }
}
