//! A sled folder's records to an export, and an export into a new sled
//! folder (see [`super::super::transfer`]).

use super::super::transfer::{
    count, damaged, decode_for_export, Counts, Damaged, Record, Sink, Source, TransferError,
    PORTABLE_META,
};
use super::*;

/// A key as an export's error names it: a session or item id, a turn's
/// session and sequence number, or the text of an id-made key.
fn shown(key: &[u8]) -> String {
    match key.len() {
        16 => Uuid::from_slice(key)
            .map(|u| u.to_string())
            .unwrap_or_default(),
        20 => format!(
            "{}#{}",
            Uuid::from_slice(&key[..16]).unwrap_or_default(),
            u32::from_be_bytes([key[16], key[17], key[18], key[19]])
        ),
        _ => format!("{:?}", String::from_utf8_lossy(key)),
    }
}

/// The agent id a key made by `keys::agent_prefix` starts with, and the
/// rest.
fn split_agent(key: &[u8]) -> Option<(String, &[u8])> {
    let at = key.iter().position(|b| *b == 0)?;
    Some((String::from_utf8(key[..at].to_vec()).ok()?, &key[at + 1..]))
}

impl Trees {
    /// The trees that hold records (not the indexes built from them).
    fn record_trees(&self) -> [(&'static str, &::sled::Tree); 13] {
        [
            (keys::TREE_AGENTS, &self.agents),
            (keys::TREE_BLOCKS, &self.blocks),
            (keys::TREE_SESSIONS, &self.sessions),
            (keys::TREE_TURNS, &self.turns),
            (keys::TREE_SUMMARIES, &self.summaries),
            (keys::TREE_FACTS, &self.facts),
            (keys::TREE_FACT_TOMBSTONES, &self.fact_tombstones),
            (keys::TREE_TOPICS, &self.topics),
            (keys::TREE_EMBEDDINGS, &self.embeddings),
            (keys::TREE_QUEUE, &self.queue),
            (keys::TREE_DEAD, &self.dead),
            (keys::TREE_ROLLUP_CURSORS, &self.rollup_cursors),
            (keys::TREE_ROLLUP_INBOX, &self.rollup_inbox),
        ]
    }

    /// Whether the folder holds no records (its forget log counts).
    pub fn is_empty(&self) -> bool {
        self.record_trees().iter().all(|(_, t)| t.is_empty()) && self.forget_log.is_empty()
    }

    /// Every record to `sink`, each kind in turn. A record that does not
    /// decode stops the export, unless `skip` is given (it is noted
    /// there). A forget begun and not finished stops it too: the folder
    /// holds part of what the user asked to remove.
    pub fn export_records(
        &self,
        mut skip: Option<&mut Damaged>,
        sink: &mut Sink<'_>,
    ) -> Result<(), TransferError> {
        if let Some((user_id, _)) = self.pending_forgets()?.into_iter().next() {
            return Err(TransferError::PendingForget { user_id });
        }
        for key in PORTABLE_META {
            if self.meta.contains_key(key)? {
                sink(Record::Meta { key: key.into() })?;
            }
        }
        for item in self.forget_log.iter() {
            let (k, v) = item?;
            let key = shown(&k);
            let skip = skip.as_deref_mut();
            if let Some(e) = decode_for_export(keys::TREE_FORGET_LOG, &key, &v, skip)? {
                sink(Record::Forget(e))?;
            }
        }
        for (table, tree) in self.record_trees() {
            for item in tree.iter() {
                let (k, v) = item?;
                let key = shown(&k);
                let skip = skip.as_deref_mut();
                let record = match table {
                    keys::TREE_AGENTS => {
                        decode_for_export(table, &key, &v, skip)?.map(|meta| Record::Agent {
                            agent_id: String::from_utf8_lossy(&k).into_owned(),
                            meta,
                        })
                    }
                    keys::TREE_BLOCKS => decode_for_export::<MemoryBlock>(table, &key, &v, skip)?
                        .map(|block| {
                            let at = keys::block(&block.agent_id, block.label).len().min(k.len());
                            Record::Block {
                                user_id: String::from_utf8_lossy(&k[at..]).into_owned(),
                                block,
                            }
                        }),
                    keys::TREE_SESSIONS => {
                        decode_for_export(table, &key, &v, skip)?.map(Record::Session)
                    }
                    keys::TREE_TURNS => match k.len() {
                        20 => decode_for_export(table, &key, &v, skip)?.map(|turn| Record::Turn {
                            session_id: Uuid::from_slice(&k[..16]).unwrap_or_default(),
                            seq: u32::from_be_bytes([k[16], k[17], k[18], k[19]]),
                            turn,
                        }),
                        _ => damaged(table, &key, "not a turn key", skip).map(|()| None)?,
                    },
                    keys::TREE_SUMMARIES => {
                        decode_for_export(table, &key, &v, skip)?.map(Record::Summary)
                    }
                    keys::TREE_FACTS => decode_for_export(table, &key, &v, skip)?.map(Record::Fact),
                    keys::TREE_FACT_TOMBSTONES => match keys::fact_owner(&k) {
                        Some((agent_id, user_id)) => Some(Record::Tombstone {
                            agent_id,
                            user_id,
                            content_hash: Uuid::from_slice(&k[k.len() - 16..]).unwrap_or_default(),
                        }),
                        None => damaged(table, &key, "not a tombstone key", skip).map(|()| None)?,
                    },
                    keys::TREE_TOPICS => {
                        decode_for_export(table, &key, &v, skip)?.map(Record::Topic)
                    }
                    keys::TREE_EMBEDDINGS => {
                        match (Uuid::from_slice(&k), StoredVector::decode(&v)) {
                            (Ok(id), Some(vector)) => match Record::vector(id, vector) {
                                Some(r) => Some(r),
                                None => damaged(table, &key, "a value is not a number", skip)
                                    .map(|()| None)?,
                            },
                            _ => damaged(table, &key, "not an encoded vector", skip)
                                .map(|()| None)?,
                        }
                    }
                    keys::TREE_QUEUE => decode_for_export(table, &key, &v, skip)?.map(Record::Job),
                    keys::TREE_DEAD => {
                        decode_for_export(table, &key, &v, skip)?.map(Record::DeadLetter)
                    }
                    keys::TREE_ROLLUP_CURSORS => {
                        let level = match split_agent(&k) {
                            Some((agent_id, [0])) => Some((agent_id, Level::Daily)),
                            Some((agent_id, [1])) => Some((agent_id, Level::Weekly)),
                            _ => None,
                        };
                        match level {
                            Some((agent_id, level)) => decode_for_export(table, &key, &v, skip)?
                                .map(|period| Record::RollupCursor {
                                    agent_id,
                                    level,
                                    period,
                                }),
                            None => {
                                damaged(table, &key, "not a cursor key", skip).map(|()| None)?
                            }
                        }
                    }
                    keys::TREE_ROLLUP_INBOX => {
                        match Record::inbox(&k, String::from_utf8_lossy(&v).into_owned()) {
                            Some(r) => Some(r),
                            None => {
                                damaged(table, &key, "not an inbox key", skip).map(|()| None)?
                            }
                        }
                    }
                    other => unreachable!("{other} is not a record tree"),
                };
                if let Some(record) = record {
                    sink(record)?;
                }
            }
        }
        Ok(())
    }

    /// Stores an export's records into this folder, which must hold none.
    /// Not all or nothing by itself: [`import_folder`] builds a new folder
    /// aside with it and puts it in place when complete.
    pub fn import_records(&self, source: &mut Source<'_>) -> Result<Counts, TransferError> {
        if !self.is_empty() {
            return Err(TransferError::NotEmpty {
                target: "the data folder".into(),
            });
        }
        let mut counts = Counts::new();
        for record in source {
            let record = record?;
            count(&mut counts, &record);
            self.import_record(record)?;
        }
        // Every session and dead letter is in its indexes (built as they
        // came).
        for built in [
            keys::USER_SESSIONS_BUILT,
            keys::SESSION_STARTS_BUILT,
            keys::AGENT_DEAD_LETTERS_BUILT,
        ] {
            self.meta.insert(built, &[1u8])?;
        }
        Ok(counts)
    }

    /// Stores one record with the index entries it needs; a record whose
    /// key is taken already (the export holds it twice) is refused.
    fn import_record(&self, record: Record) -> Result<(), TransferError> {
        let kind = record.kind();
        let once =
            |tree: &::sled::Tree, key: &[u8], value: Vec<u8>| match tree.insert(key, value)? {
                None => Ok(()),
                Some(_) => Err(TransferError::Duplicate {
                    what: format!("{kind} record {}", shown(key)),
                }),
            };
        match record {
            Record::Meta { key } => {
                self.meta.insert(key.as_bytes(), &[1u8])?;
            }
            Record::Agent { agent_id, meta } => {
                once(&self.agents, keys::agent(&agent_id), encode(&meta)?)?;
            }
            Record::Block { user_id, block } => {
                let key = if user_id.is_empty() {
                    keys::block(&block.agent_id, block.label)
                } else {
                    keys::user_block(&block.agent_id, block.label, &user_id)
                };
                once(&self.blocks, &key, encode(&block)?)?;
            }
            Record::Session(rec) => {
                let key = keys::session(rec.session_id);
                once(&self.sessions, &key, encode(&rec)?)?;
                self.user_sessions.insert(keys::user_session(&rec), &[])?;
                for (k, v) in super::sessions::start_rows(&rec) {
                    self.session_starts.insert(k, v)?;
                }
                if rec.is_open() {
                    self.open.insert(key, &[])?;
                }
            }
            Record::Turn {
                session_id,
                seq,
                turn,
            } => once(&self.turns, &keys::turn(session_id, seq), encode(&turn)?)?,
            Record::Summary(s) => {
                let key = keys::summary_of(&s);
                once(&self.summary_index, s.summary_id.as_bytes(), key.clone())?;
                once(&self.summaries, &key, encode(&s)?)?;
            }
            Record::Fact(f) => {
                let key = keys::fact(&f.agent_id, &f.user_id, f.fact_id);
                once(&self.fact_index, f.fact_id.as_bytes(), key.clone())?;
                once(&self.facts, &key, encode(&f)?)?;
            }
            Record::Tombstone {
                agent_id,
                user_id,
                content_hash,
            } => {
                let key = keys::fact(&agent_id, &user_id, content_hash);
                once(&self.fact_tombstones, &key, Vec::new())?;
            }
            Record::Topic(t) => {
                let key = keys::topic(&t.agent_id, &t.user_id, t.topic_id);
                once(&self.topics, &key, encode(&t)?)?;
            }
            Record::Vector {
                item_id,
                embedder,
                values,
            } => {
                let v = StoredVector { embedder, values };
                once(&self.embeddings, &keys::embedding(item_id), v.encode())?;
            }
            Record::Job(job) => {
                once(&self.queue, &keys::session(job.session_id), encode(&job)?)?;
            }
            Record::DeadLetter(d) => {
                once(&self.dead, &keys::session(d.session_id), encode(&d)?)?;
                self.agent_dead_letters
                    .insert(keys::agent_dead_letter(&d), &[])?;
                self.dead_letters_moved(1, 0);
            }
            Record::RollupCursor {
                agent_id,
                level,
                period,
            } => {
                let key = keys::rollup_cursor(&agent_id, level);
                once(&self.rollup_cursors, &key, encode(&period)?)?;
            }
            Record::Inbox {
                at,
                item,
                item_id,
                agent_id,
            } => {
                let key = keys::inbox(at, item.code(), item_id);
                once(&self.rollup_inbox, &key, agent_id.into_bytes())?;
            }
            Record::Forget(e) => {
                once(
                    &self.forget_log,
                    &keys::forget_log(e.at, e.user_hash, e.agent_id.as_deref()),
                    encode(&e)?,
                )?;
            }
        }
        Ok(())
    }
}

/// Imports an export into a new sled folder `dir`, all or nothing: the
/// folder is built beside it under a temporary name and renamed to `dir`
/// once every record is stored and flushed. `dir` must not exist or be
/// an empty folder.
pub fn import_folder(
    dir: &Path,
    settings: &StoreSettings,
    source: &mut Source<'_>,
) -> Result<Counts, TransferError> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(StoreError::NotADirectory {
                path: dir.to_path_buf(),
            }
            .into());
        }
        if std::fs::read_dir(dir)?.next().is_some() {
            return Err(TransferError::NotEmpty {
                target: format!("data folder {}", dir.display()),
            });
        }
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "recall-data".into());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)?;
    let aside = parent.join(format!(".{name}.import-{}", Uuid::new_v4().simple()));
    let built = (|| {
        let trees = Trees::open(&aside, settings)?;
        let counts = trees.import_records(source)?;
        trees.db.flush()?;
        drop(trees);
        // Onto an empty folder a rename replaces it where the system
        // allows; elsewhere the empty folder goes first.
        if std::fs::rename(&aside, dir).is_err() {
            if dir.exists() {
                std::fs::remove_dir(dir)?;
            }
            std::fs::rename(&aside, dir)?;
        }
        // The rename itself made durable.
        std::fs::File::open(&parent)?.sync_all()?;
        Ok(counts)
    })();
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&aside);
    }
    built
}
