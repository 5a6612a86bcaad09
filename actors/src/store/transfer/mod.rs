//! Moving a store's records to another store: `recall export` writes every
//! record of one store as JSON lines, `recall import` stores them into an
//! empty one, of either backend (a sled folder into PostgreSQL when one
//! node is outgrown, and back).
//!
//! An export is a header line, one line per record (each kind in turn)
//! and an end line with the count of each kind. An import checks the
//! header, reads the records as it stores them (an export is never held
//! in memory whole) and refuses one whose end line is missing or whose
//! counts differ: a cut-short file changes nothing, since an import is all
//! or nothing (one transaction in PostgreSQL; a new sled folder is built
//! aside and put in place when complete).
//!
//! What is moved is what the records are: sessions, turns, summaries of
//! every layer, facts and their tombstones, blocks, agents' bookkeeping,
//! topics, vectors, queued reflections, dead letters, rollup cursors, the
//! Rollup actor's inbox and the marker that says it was filled from what
//! was stored before it ([`PORTABLE_META`]). What one process or instance
//! holds for itself is not (sled's indexes, which are rebuilt from the
//! records; PostgreSQL's instances, claims, leases and forget markers).
//!
//! The store's forget log travels too ([`Record::Forget`]), and an import
//! can honour forgets made after its export was taken ([`Honour`]): a
//! backup restored after a user was forgotten does not bring them back.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::Deserialize;

use crate::model::InputError;

use super::*;

/// The `format` of an export's header line.
pub const EXPORT_FORMAT: &str = "recall-export";
/// The newest export version this build writes and reads.
///
/// 2: a fact record holds `speaker` (whose words it came from). A version
/// 1 export is read as well: its facts are all the user's, which is what a
/// fact without a speaker reads as. A build that knows only 1 refuses a
/// version 2 export, rather than taking the agent side's facts for the
/// user's.
///
/// 3: the forget log ([`Record::Forget`]). A build that knows only 2
/// refuses it rather than drop the log.
pub const EXPORT_VERSION: u32 = 3;

/// Records per batch an import writes at once.
pub(crate) const IMPORT_BATCH: usize = 1000;

/// One stored record, as an export line holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// An agent's bookkeeping: versions, persistent context.
    Agent {
        agent_id: String,
        meta: AgentMeta,
    },
    /// A block under `user_id` ("" for the agent-wide one).
    Block {
        user_id: String,
        block: MemoryBlock,
    },
    Session(SessionRecord),
    Turn {
        session_id: Uuid,
        seq: u32,
        turn: ConversationTurn,
    },
    Summary(ConversationSummary),
    Fact(FactRecord),
    /// A deleted fact's hashed normalized content ([`keys::tombstone_hash`]).
    Tombstone {
        agent_id: String,
        user_id: String,
        content_hash: Uuid,
    },
    Topic(Topic),
    /// The vector of a summary, fact or turn.
    Vector {
        item_id: Uuid,
        embedder: String,
        values: Vec<f32>,
    },
    /// A queued reflection.
    Job(ReflectionJob),
    DeadLetter(DeadLetter),
    RollupCursor {
        agent_id: String,
        level: Level,
        period: NaiveDate,
    },
    /// An item the Rollup actor has not taken in yet.
    Inbox {
        at: DateTime<Utc>,
        item: InboxItem,
        item_id: Uuid,
        agent_id: String,
    },
    /// A marker of the store's own (one of [`PORTABLE_META`]).
    Meta {
        key: String,
    },
    /// A forget, as the forget log keeps it (no user id, a hash of it).
    Forget(ForgetEntry),
}

/// The store markers an export carries: [`keys::INBOX_BACKFILLED`] (a
/// store without it queues its earlier summaries and facts for the Rollup
/// actor when rollups first run, and so must the one it moves to).
pub const PORTABLE_META: [&str; 1] = [keys::INBOX_BACKFILLED];

/// What a [`Record::Inbox`] points at.
pub use super::InboxItem;

impl Record {
    /// Checks the ids the record holds as the API checks them (not empty,
    /// at most [`MAX_ID_LEN`](crate::model::MAX_ID_LEN) bytes, no control
    /// characters): an export written by hand or by a damaged build must
    /// not bring in ids no caller could have stored. An empty user stands
    /// for the agent-wide block, and for a dead letter whose session was
    /// never found.
    pub fn validate_ids(&self) -> Result<(), InputError> {
        use crate::model::validate_id;
        let user_or_none = |field, v: &str| {
            if v.is_empty() {
                Ok(())
            } else {
                validate_id(field, v)
            }
        };
        match self {
            Record::Agent { agent_id, .. }
            | Record::RollupCursor { agent_id, .. }
            | Record::Inbox { agent_id, .. } => validate_id("agent_id", agent_id),
            Record::Block { user_id, block } => {
                validate_id("agent_id", &block.agent_id)?;
                user_or_none("user_id", user_id)?;
                match &block.source_user_id {
                    Some(u) => validate_id("source_user_id", u),
                    None => Ok(()),
                }
            }
            Record::Session(s) => {
                validate_id("agent_id", &s.agent_id)?;
                validate_id("user_id", &s.user_id)?;
                validate_id("connection_id", &s.connection_id)
            }
            Record::Summary(s) => {
                validate_id("agent_id", &s.agent_id)?;
                validate_id("user_id", &s.user_id)
            }
            Record::Fact(f) => {
                validate_id("agent_id", &f.fact.agent_id)?;
                validate_id("user_id", &f.fact.user_id)
            }
            Record::Tombstone {
                agent_id, user_id, ..
            } => {
                validate_id("agent_id", agent_id)?;
                validate_id("user_id", user_id)
            }
            Record::Topic(t) => {
                validate_id("agent_id", &t.agent_id)?;
                validate_id("user_id", &t.user_id)
            }
            Record::Job(j) => validate_id("agent_id", &j.agent_id),
            Record::DeadLetter(d) => {
                validate_id("agent_id", &d.agent_id)?;
                user_or_none("user_id", &d.user_id)
            }
            Record::Forget(e) => match &e.agent_id {
                Some(a) => validate_id("agent_id", a),
                None => Ok(()),
            },
            Record::Turn { .. } | Record::Vector { .. } | Record::Meta { .. } => Ok(()),
        }
    }

    /// The record's kind, as the end line counts it.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Agent { .. } => "agent",
            Record::Block { .. } => "block",
            Record::Session(_) => "session",
            Record::Turn { .. } => "turn",
            Record::Summary(_) => "summary",
            Record::Fact(_) => "fact",
            Record::Tombstone { .. } => "tombstone",
            Record::Topic(_) => "topic",
            Record::Vector { .. } => "vector",
            Record::Job(_) => "job",
            Record::DeadLetter(_) => "dead_letter",
            Record::RollupCursor { .. } => "rollup_cursor",
            Record::Inbox { .. } => "inbox",
            Record::Meta { .. } => "meta",
            Record::Forget(_) => "forget",
        }
    }

    /// A stored vector as a record; `None` for one with a value that is
    /// not a finite number (JSON has no way to write it).
    pub(crate) fn vector(item_id: Uuid, v: StoredVector) -> Option<Record> {
        let finite = v.values.iter().all(|x| x.is_finite());
        finite.then_some(Record::Vector {
            item_id,
            embedder: v.embedder,
            values: v.values,
        })
    }

    /// A [`Record::Meta`], checked: `None` for a marker not carried.
    pub(crate) fn meta_key(&self) -> Option<&str> {
        match self {
            Record::Meta { key } => PORTABLE_META.iter().find(|k| *k == key).copied(),
            _ => None,
        }
    }

    /// An inbox entry as a record, from its key and agent (`None` for a
    /// key that is not an inbox key).
    pub(crate) fn inbox(key: &[u8], agent_id: String) -> Option<Record> {
        let key = InboxKey::of_key(key)?;
        Some(Record::Inbox {
            at: key.at,
            item: key.item,
            item_id: key.id,
            agent_id,
        })
    }
}

/// How many records of each kind.
pub type Counts = BTreeMap<String, u64>;

/// An export's first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The backend the records came from (`sled`, `postgres`).
    pub source: String,
    pub exported_at: DateTime<Utc>,
    /// The recall version that wrote it.
    pub recall: String,
}

/// An export's last line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub records: u64,
    pub counts: Counts,
}

/// A line of an export.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Marker {
    Header(Header),
    End(End),
}

/// Why an export or an import stopped. Either changes nothing: an export
/// writes to a file put in place when complete, an import stores all or
/// nothing.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write or read the export, or the folder imported into")]
    Io(#[from] std::io::Error),
    #[error("line {line} of the export: {message}")]
    Format { line: u64, message: String },
    #[error("the export is version {found}; this build of recall reads versions up to {known}: import it with a newer recall")]
    NewerExport { found: u32, known: u32 },
    #[error("the export ends after line {line} without its end line: it was cut short, and nothing was imported")]
    Truncated { line: u64 },
    #[error("the export's end line counts {expected} {kind} record(s), and {found} were read: nothing was imported")]
    Miscounted {
        kind: String,
        expected: u64,
        found: u64,
    },
    #[error("{target} already holds records: import into an empty store (a new data folder, or a schema nothing was stored in)")]
    NotEmpty { target: String },
    #[error("the export holds {what} twice: nothing was imported")]
    Duplicate { what: String },
    #[error("the export holds a store marker this build does not know (`{key}`): import it with a newer recall")]
    UnknownMeta { key: String },
    #[error("no data folder at {path}")]
    NoFolder { path: PathBuf },
    #[error("{instances} recall instance(s) serve schema `{schema}`: stop them before importing into it")]
    InUse { schema: String, instances: i64 },
    #[error("a forget of user {user_id} was begun in this data folder and not finished: start recall on the folder once (it finishes the forget), then export")]
    PendingForget { user_id: String },
    #[error("record {key} of {table} does not decode ({error}); export with --skip-damaged to leave such records out")]
    Damaged {
        table: String,
        key: String,
        error: String,
    },
}

impl From<::sled::Error> for TransferError {
    fn from(e: ::sled::Error) -> Self {
        TransferError::Store(e.into())
    }
}

impl From<sqlx::Error> for TransferError {
    fn from(e: sqlx::Error) -> Self {
        TransferError::Store(e.into())
    }
}

/// What an export left out with `skip_damaged`: each table and key, with
/// why it did not decode.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Damaged(pub Vec<(String, String, String)>);

/// Decodes a stored record for an export: a record that does not decode
/// stops the export, or with `skip` is noted in `damaged` and left out.
pub(crate) fn decode_for_export<T: DeserializeOwned>(
    table: &str,
    key: &dyn std::fmt::Display,
    bytes: &[u8],
    skip: Option<&mut Damaged>,
) -> Result<Option<T>, TransferError> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) => damaged(table, key, &e.to_string(), skip).map(|()| None),
    }
}

/// A record of `table` under `key` cannot be exported: stops the export,
/// or with `skip` notes it.
pub(crate) fn damaged(
    table: &str,
    key: &dyn std::fmt::Display,
    error: &str,
    skip: Option<&mut Damaged>,
) -> Result<(), TransferError> {
    match skip {
        Some(d) => {
            warn!(table, %key, error, "leaving an undecodable record out of the export");
            d.0.push((table.to_string(), key.to_string(), error.to_string()));
            Ok(())
        }
        None => Err(TransferError::Damaged {
            table: table.to_string(),
            key: key.to_string(),
            error: error.to_string(),
        }),
    }
}

/// Where an export's records go.
pub type Sink<'a> = dyn FnMut(Record) -> Result<(), TransferError> + 'a;

/// Where an import's records come from.
pub type Source<'a> = dyn Iterator<Item = Result<Record, TransferError>> + 'a;

/// Writes an export: the header, the records, the end line.
pub struct ExportWriter<W: Write> {
    out: W,
    counts: Counts,
    records: u64,
}

impl<W: Write> ExportWriter<W> {
    /// Starts an export of records from `source` (a backend's name).
    pub fn new(mut out: W, source: &str) -> Result<Self, TransferError> {
        let header = Header {
            format: EXPORT_FORMAT.into(),
            version: EXPORT_VERSION,
            source: source.into(),
            exported_at: Utc::now(),
            recall: env!("CARGO_PKG_VERSION").into(),
        };
        serde_json::to_writer(&mut out, &Marker::Header(header)).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
        Ok(ExportWriter {
            out,
            counts: Counts::new(),
            records: 0,
        })
    }

    pub fn write(&mut self, record: &Record) -> Result<(), TransferError> {
        serde_json::to_writer(&mut self.out, record).map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        *self.counts.entry(record.kind().to_string()).or_default() += 1;
        self.records += 1;
        Ok(())
    }

    /// Writes the end line and flushes; returns the counts and the writer.
    pub fn finish(mut self) -> Result<(End, W), TransferError> {
        let end = End {
            records: self.records,
            counts: self.counts,
        };
        serde_json::to_writer(&mut self.out, &Marker::End(end.clone()))
            .map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok((end, self.out))
    }
}

/// Reads an export: the header at once ([`ExportReader::new`]), then the
/// records as an iterator, which ends with an error if the end line is
/// missing, is followed by more, or counts other than what was read.
pub struct ExportReader<R: BufRead> {
    input: R,
    header: Header,
    line: u64,
    counts: Counts,
    done: bool,
    buf: String,
}

impl<R: BufRead> ExportReader<R> {
    pub fn new(mut input: R) -> Result<Self, TransferError> {
        let mut buf = String::new();
        let read = input.read_line(&mut buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => TransferError::Format {
                line: 1,
                message: "not UTF-8 text: not a recall export".into(),
            },
            _ => e.into(),
        })?;
        if read == 0 {
            return Err(TransferError::Format {
                line: 1,
                message: "the file is empty; an export starts with its header line".into(),
            });
        }
        // The format and version are looked at before the rest, so a
        // newer export is named as such.
        #[derive(Deserialize)]
        struct Version {
            format: String,
            version: u32,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum First {
            Header(Version),
        }
        let not_export = |e: serde_json::Error| TransferError::Format {
            line: 1,
            message: format!("not a recall export ({e})"),
        };
        let First::Header(v) = serde_json::from_str(&buf).map_err(not_export)?;
        if v.format != EXPORT_FORMAT {
            return Err(TransferError::Format {
                line: 1,
                message: format!("the format is `{}`, not `{EXPORT_FORMAT}`", v.format),
            });
        }
        if v.version > EXPORT_VERSION {
            return Err(TransferError::NewerExport {
                found: v.version,
                known: EXPORT_VERSION,
            });
        }
        let header = match serde_json::from_str(&buf).map_err(not_export)? {
            Marker::Header(h) => h,
            Marker::End(_) => unreachable!("the first line was read as a header"),
        };
        Ok(ExportReader {
            input,
            header,
            line: 1,
            counts: Counts::new(),
            done: false,
            buf,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Checks the end line against what was read.
    fn check_end(&self, end: &End) -> Result<(), TransferError> {
        let kinds: std::collections::BTreeSet<&String> =
            end.counts.keys().chain(self.counts.keys()).collect();
        for kind in kinds {
            let expected = end.counts.get(kind).copied().unwrap_or(0);
            let found = self.counts.get(kind).copied().unwrap_or(0);
            if expected != found {
                return Err(TransferError::Miscounted {
                    kind: kind.clone(),
                    expected,
                    found,
                });
            }
        }
        if end.records != end.counts.values().sum::<u64>() {
            return Err(TransferError::Format {
                line: self.line,
                message: "the end line's total is not the sum of its counts".into(),
            });
        }
        Ok(())
    }

    /// The next line into `buf`; false at the end of the input. A line
    /// that is not UTF-8 is a format error, named by its number.
    fn read_line(&mut self) -> Result<bool, TransferError> {
        self.buf.clear();
        match self.input.read_line(&mut self.buf) {
            Ok(0) => Ok(false),
            Ok(_) => {
                self.line += 1;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(TransferError::Format {
                line: self.line + 1,
                message: "not UTF-8 text".into(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn next_record(&mut self) -> Result<Option<Record>, TransferError> {
        loop {
            if !self.read_line()? {
                return Err(TransferError::Truncated { line: self.line });
            }
            let text = self.buf.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            if text.starts_with("{\"end\"") {
                let end = match serde_json::from_str(text) {
                    Ok(Marker::End(end)) => end,
                    Ok(Marker::Header(_)) | Err(_) => {
                        return Err(TransferError::Format {
                            line: self.line,
                            message: "an unreadable end line".into(),
                        })
                    }
                };
                self.check_end(&end)?;
                // Nothing may follow it.
                while self.read_line()? {
                    if !self.buf.trim().is_empty() {
                        return Err(TransferError::Format {
                            line: self.line,
                            message: "a line after the end line".into(),
                        });
                    }
                }
                return Ok(None);
            }
            let record: Record = serde_json::from_str(text).map_err(|e| TransferError::Format {
                line: self.line,
                message: e.to_string(),
            })?;
            record.validate_ids().map_err(|e| TransferError::Format {
                line: self.line,
                message: format!("a {} record: {e}", record.kind()),
            })?;
            if let Record::Meta { key } = &record {
                if record.meta_key().is_none() {
                    return Err(TransferError::UnknownMeta { key: key.clone() });
                }
            }
            *self.counts.entry(record.kind().to_string()).or_default() += 1;
            return Ok(Some(record));
        }
    }
}

impl<R: BufRead> Iterator for ExportReader<R> {
    type Item = Result<Record, TransferError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_record();
        if !matches!(next, Ok(Some(_))) {
            self.done = true;
        }
        next.transpose()
    }
}

/// Leaves out of an import what forgets made after its export was taken
/// would have removed, and adds those forgets to the log imported.
///
/// Which forgets came after: those of the later log that the export's own
/// log lacks (a version 3 export's log holds every forget committed before
/// its snapshot, whatever the clocks say); for an older export, which has
/// no log, those logged after its header's time.
///
/// The export was taken before each of these forgets, so every record it
/// holds of a forgotten user predates their forget and goes: their
/// sessions with their turns, jobs and dead letters, their summaries,
/// facts, fact tombstones, topics and blocks, the vectors and inbox rows
/// of all of these, and the mixed `background_context` of the agents the
/// forgets cover (rebuilt by the watchdog from what is left). It reads the
/// records in the order an export writes them (the log and the markers
/// first, sessions before their turns, items before their vectors). The
/// export's own log never leaves anything out: what it logs had already
/// gone when it was taken.
pub struct Honour<I> {
    inner: I,
    /// The later log, until the export's own log is read.
    later: Vec<ForgetEntry>,
    /// The export's own log, as it is read.
    own: std::collections::HashSet<ForgetEntry>,
    /// `None` for an export with a log of its own; else its header's time.
    before_logs: Option<DateTime<Utc>>,
    decided: bool,
    /// The forgets newer than the export, still to be logged (the next
    /// last).
    pending: Vec<ForgetEntry>,
    forgets: Vec<ForgetEntry>,
    logged: std::collections::HashSet<ForgetEntry>,
    sessions: std::collections::HashSet<Uuid>,
    items: std::collections::HashSet<Uuid>,
    left_out: Counts,
}

impl<I> Honour<I> {
    /// Honours those of `later` made after the export of `header` on the
    /// records of `inner` (its records).
    pub fn new(inner: I, header: &Header, later: Vec<ForgetEntry>) -> Self {
        Honour {
            inner,
            later,
            own: Default::default(),
            before_logs: (header.version < 3).then_some(header.exported_at),
            decided: false,
            pending: Vec::new(),
            forgets: Vec::new(),
            logged: Default::default(),
            sessions: Default::default(),
            items: Default::default(),
            left_out: Counts::new(),
        }
    }

    /// The forgets honoured (those newer than the export), once the
    /// records are read.
    pub fn forgets(&self) -> &[ForgetEntry] {
        &self.forgets
    }

    /// What was left out, by kind.
    pub fn left_out(&self) -> &Counts {
        &self.left_out
    }

    /// Settles which of the later forgets are newer than the export (once
    /// its own log, which comes first, is read).
    fn decide(&mut self) {
        if self.decided {
            return;
        }
        self.decided = true;
        let later = std::mem::take(&mut self.later);
        let mut newer: Vec<ForgetEntry> = match self.before_logs {
            Some(exported_at) => later.into_iter().filter(|f| f.at > exported_at).collect(),
            None => later
                .into_iter()
                .filter(|f| !self.own.contains(f))
                .collect(),
        };
        newer.sort_by_key(|f| f.at);
        newer.dedup();
        self.pending = newer.iter().rev().cloned().collect();
        self.forgets = newer;
    }

    fn covered(&self, agent_id: &str, user_id: &str) -> bool {
        !user_id.is_empty() && self.forgets.iter().any(|f| f.covers(agent_id, user_id))
    }

    /// Whether `record` goes (noting the ids the records that follow
    /// refer to).
    fn leaves_out(&mut self, record: &Record) -> bool {
        match record {
            Record::Forget(f) => {
                if !self.decided {
                    self.own.insert(f.clone());
                }
                return !self.logged.insert(f.clone());
            }
            Record::Meta { .. } => return false,
            _ => self.decide(),
        }
        if self.forgets.is_empty() {
            return false;
        }
        match record {
            Record::Block { user_id, block } => {
                let mixed = block.label == BlockLabel::BackgroundContext
                    && user_id.is_empty()
                    && self
                        .forgets
                        .iter()
                        .any(|f| f.agent_id.as_deref().is_none_or(|a| a == block.agent_id));
                mixed
                    || self.covered(&block.agent_id, user_id)
                    || block
                        .source_user_id
                        .as_deref()
                        .is_some_and(|u| self.covered(&block.agent_id, u))
            }
            Record::Session(s) => {
                let gone = self.covered(&s.agent_id, &s.user_id);
                if gone {
                    self.sessions.insert(s.session_id);
                }
                gone
            }
            Record::Turn {
                session_id, seq, ..
            } => {
                let gone = self.sessions.contains(session_id);
                if gone {
                    let turn = crate::search::TurnRef {
                        session_id: *session_id,
                        seq: *seq,
                    };
                    self.items.insert(turn.doc_id());
                }
                gone
            }
            Record::Summary(s) => {
                let gone = self.covered(&s.agent_id, &s.user_id);
                if gone {
                    self.items.insert(s.summary_id);
                }
                gone
            }
            Record::Fact(f) => {
                let gone = self.covered(&f.fact.agent_id, &f.fact.user_id);
                if gone {
                    self.items.insert(f.fact.fact_id);
                }
                gone
            }
            Record::Tombstone {
                agent_id, user_id, ..
            } => self.covered(agent_id, user_id),
            Record::Topic(t) => {
                let gone = self.covered(&t.agent_id, &t.user_id);
                if gone {
                    self.items.insert(t.topic_id);
                }
                gone
            }
            Record::Vector { item_id, .. } | Record::Inbox { item_id, .. } => {
                self.items.contains(item_id)
            }
            Record::Job(j) => self.sessions.contains(&j.session_id),
            Record::DeadLetter(d) => {
                self.sessions.contains(&d.session_id) || self.covered(&d.agent_id, &d.user_id)
            }
            Record::Forget(_)
            | Record::Agent { .. }
            | Record::RollupCursor { .. }
            | Record::Meta { .. } => false,
        }
    }
}

impl<I: Iterator<Item = Result<Record, TransferError>>> Iterator for Honour<I> {
    type Item = Result<Record, TransferError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let record = match self.inner.next() {
                Some(Ok(r)) => r,
                Some(Err(e)) => return Some(Err(e)),
                // The newer forgets are logged last, after the export's
                // own (older) ones: the log stays in time order.
                None => {
                    self.decide();
                    while let Some(f) = self.pending.pop() {
                        if self.logged.insert(f.clone()) {
                            return Some(Ok(Record::Forget(f)));
                        }
                    }
                    return None;
                }
            };
            if self.leaves_out(&record) {
                count(&mut self.left_out, &record);
                continue;
            }
            return Some(Ok(record));
        }
    }
}

/// Counts records as an import takes them.
pub(crate) fn count(counts: &mut Counts, record: &Record) {
    *counts.entry(record.kind().to_string()).or_default() += 1;
}

#[cfg(test)]
mod roundtrip;

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record::RollupCursor {
            agent_id: "a".into(),
            level: Level::Weekly,
            period: NaiveDate::from_ymd_opt(2026, 11, 23).unwrap(),
        }
    }

    fn export(records: &[Record]) -> Vec<u8> {
        let mut w = ExportWriter::new(Vec::new(), "test").unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        w.finish().unwrap().1
    }

    fn read(bytes: &[u8]) -> Result<Vec<Record>, TransferError> {
        ExportReader::new(bytes)?.collect()
    }

    #[test]
    fn an_export_reads_back_as_written() {
        let records = vec![
            record(),
            Record::Inbox {
                at: DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
                item: InboxItem::Fact,
                item_id: Uuid::new_v4(),
                agent_id: "a".into(),
            },
            Record::Vector {
                item_id: Uuid::new_v4(),
                embedder: "e".into(),
                values: vec![0.1, -3.5e-8, f32::MAX],
            },
        ];
        let bytes = export(&records);
        let reader = ExportReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.header().source, "test");
        assert_eq!(reader.collect::<Result<Vec<_>, _>>().unwrap(), records);
    }

    #[test]
    fn ids_the_api_would_refuse_are_refused_by_an_import_too() {
        let cursor = |agent: &str| Record::RollupCursor {
            agent_id: agent.into(),
            level: Level::Weekly,
            period: NaiveDate::from_ymd_opt(2026, 11, 23).unwrap(),
        };
        let tombstone = |user: &str| Record::Tombstone {
            agent_id: "a".into(),
            user_id: user.into(),
            content_hash: Uuid::nil(),
        };
        let too_long = "x".repeat(crate::model::MAX_ID_LEN + 1);
        for (bad, says) in [
            (cursor(""), "agent_id"),
            (cursor(&too_long), "agent_id"),
            (tombstone("mark\u{7}"), "user_id"),
            (tombstone("ma\nrk"), "user_id"),
            (tombstone(""), "user_id"),
        ] {
            let bytes = export(&[record(), bad]);
            match read(&bytes) {
                Err(TransferError::Format { line: 3, message }) => {
                    assert!(message.contains(says), "{message}")
                }
                other => panic!("expected a format error on line 3, got {other:?}"),
            }
        }
        // the empty user of an agent-wide block is no user at all
        let block = Record::Block {
            user_id: String::new(),
            block: MemoryBlock {
                agent_id: "a".into(),
                label: BlockLabel::SelfPerception,
                value: "I listen first".into(),
                limit: 100,
                updated_at: DateTime::from_timestamp_millis(0).unwrap(),
                source_user_id: None,
                written_by: None,
            },
        };
        assert_eq!(
            read(&export(std::slice::from_ref(&block))).unwrap(),
            vec![block]
        );
    }

    #[test]
    fn a_cut_short_export_is_refused() {
        let bytes = export(&[record(), record()]);
        let text = String::from_utf8(bytes).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // the end line missing
        let cut = lines[..3].join("\n") + "\n";
        assert!(matches!(
            read(cut.as_bytes()),
            Err(TransferError::Truncated { line: 3 })
        ));
        // a record missing: the end line counts two
        let cut = [lines[0], lines[1], lines[3]].join("\n");
        assert!(matches!(
            read(cut.as_bytes()),
            Err(TransferError::Miscounted {
                expected: 2,
                found: 1,
                ..
            })
        ));
        // a record cut in the middle
        let cut = format!("{}\n{}", lines[0], &lines[1][..10]);
        assert!(matches!(
            read(cut.as_bytes()),
            Err(TransferError::Format { line: 2, .. })
        ));
    }

    #[test]
    fn a_version_1_exports_facts_are_the_users() {
        let fact = r#"{"fact":{"fact_id":"00000000-0000-0000-0000-000000000001","agent_id":"a","user_id":"u","category":"hobby","content":"Keeps bees","extracted_at":"2026-11-01T10:00:00Z"}}"#;
        let v1 = format!(
            "{{\"header\":{{\"format\":\"{EXPORT_FORMAT}\",\"version\":1,\"source\":\"sled\",\"exported_at\":\"2026-11-02T10:00:00Z\",\"recall\":\"0.1.0\"}}}}\n{fact}\n{{\"end\":{{\"records\":1,\"counts\":{{\"fact\":1}}}}}}\n"
        );
        let records = read(v1.as_bytes()).unwrap();
        let [Record::Fact(f)] = &records[..] else {
            panic!("{records:?}")
        };
        assert_eq!(f.speaker, crate::model::Speaker::User);
        // and a version 2 export keeps the agent side's
        let mut agent = f.clone();
        agent.fact.speaker = crate::model::Speaker::Agent;
        let back = read(&export(&[Record::Fact(agent.clone())])).unwrap();
        assert_eq!(back, vec![Record::Fact(agent)]);
        // (written as the newest version)
        assert!(String::from_utf8(export(&[]))
            .unwrap()
            .contains(&format!("\"version\":{EXPORT_VERSION}")));
    }

    #[test]
    fn a_version_2_export_is_read_and_a_forget_record_is_checked() {
        let v2 = format!(
            "{{\"header\":{{\"format\":\"{EXPORT_FORMAT}\",\"version\":2,\"source\":\"sled\",\"exported_at\":\"2026-11-02T10:00:00Z\",\"recall\":\"0.1.0\"}}}}\n{{\"end\":{{\"records\":0,\"counts\":{{}}}}}}\n"
        );
        assert!(read(v2.as_bytes()).unwrap().is_empty());
        let entry = ForgetEntry::new("zoe", Some("kairix"), Utc::now());
        let back = read(&export(&[Record::Forget(entry.clone())])).unwrap();
        assert_eq!(back, vec![Record::Forget(entry.clone())]);
        // an agent id no caller could have stored is refused
        let mut bad = entry;
        bad.agent_id = Some("a\nb".into());
        assert!(matches!(
            read(&export(&[Record::Forget(bad)])),
            Err(TransferError::Format { line: 2, .. })
        ));
    }

    #[test]
    fn what_is_not_an_export_is_named() {
        assert!(matches!(
            read(b""),
            Err(TransferError::Format { line: 1, .. })
        ));
        assert!(matches!(
            read(b"{\"session_id\": 1}\n"),
            Err(TransferError::Format { line: 1, .. })
        ));
        let newer = format!(
            "{{\"header\":{{\"format\":\"{EXPORT_FORMAT}\",\"version\":{},\"whatever\":1}}}}\n",
            EXPORT_VERSION + 1
        );
        assert!(matches!(
            read(newer.as_bytes()),
            Err(TransferError::NewerExport { .. })
        ));
        let mut not_text = export(&[record()]);
        let at = not_text.len() - 5;
        not_text.splice(at..at, [0xff, 0xfe]);
        assert!(matches!(
            read(&not_text),
            Err(TransferError::Format { line: 3, .. })
        ));
        let header = String::from_utf8(export(&[])).unwrap();
        let unknown = format!(
            "{}\n{{\"meta\":{{\"key\":\"later\"}}}}\n",
            header.lines().next().unwrap()
        );
        assert!(matches!(
            read(unknown.as_bytes()),
            Err(TransferError::UnknownMeta { key }) if key == "later"
        ));
        let bytes = export(&[record()]);
        let mut more = bytes.clone();
        more.extend_from_slice(b"{\"job\":{}}\n");
        assert!(matches!(
            read(&more),
            Err(TransferError::Format { line: 4, .. })
        ));
    }
}
