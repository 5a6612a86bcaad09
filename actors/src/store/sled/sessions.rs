//! Sessions and their turns, with the (agent, user) and start-time
//! indexes of sessions.

use super::*;

/// A session's rows in `session_starts`: (key, value) of every agent's
/// family and of its agent's.
pub(super) fn start_rows(rec: &SessionRecord) -> [(Vec<u8>, Vec<u8>); 2] {
    [
        (keys::session_start(rec), keys::session_owner(rec)),
        (keys::agent_session_start(rec), Vec::new()),
    ]
}

impl Trees {
    pub fn open_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let value = encode(record)?;
        let key = keys::session(record.session_id);
        let by_user = keys::user_session(record);
        let by_start = start_rows(record);
        (
            &self.sessions,
            &self.open,
            &self.user_sessions,
            &self.session_starts,
        )
            .transaction(|(sessions, open, user_sessions, starts)| {
                sessions.insert(&key, value.as_slice())?;
                open.insert(&key, &[])?;
                user_sessions.insert(by_user.as_slice(), &[])?;
                for (k, v) in &by_start {
                    starts.insert(k.as_slice(), v.as_slice())?;
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        self.note_sessions([key]);
        Ok(())
    }

    pub fn append_turn(&self, session_id: Uuid, seq: u32, value: &[u8]) -> Result<(), StoreError> {
        self.turns.insert(keys::turn(session_id, seq), value)?;
        Ok(())
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

    pub fn sessions(&self, agent_id: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        let mut all: Vec<SessionRecord> = match agent_id {
            None => self.scan(&self.sessions, keys::TREE_SESSIONS, self.sessions.iter())?,
            Some(agent) => self.indexed_sessions(&keys::agent_sessions_prefix(agent))?,
        };
        all.sort_by_key(|s| (s.started_at, s.session_id));
        Ok(all)
    }

    pub fn user_sessions(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        // In start order already (the key holds the start time).
        self.indexed_sessions(&keys::user_sessions_prefix(agent_id, user_id))
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

    /// Ends a session and, if it has turns, queues its reflection: one
    /// transaction.
    pub fn end_session(&self, record: &SessionRecord, at: DateTime<Utc>) -> Result<(), StoreError> {
        let job = ReflectionJob {
            session_id: record.session_id,
            agent_id: record.agent_id.clone(),
            enqueued_at: at,
        };
        let by_user = keys::user_session(record);
        let by_start = start_rows(record);
        (
            &self.sessions,
            &self.open,
            &self.queue,
            &self.user_sessions,
            &self.session_starts,
        )
            .transaction(|(sessions, open, queue, user_sessions, starts)| {
                let key = keys::session(record.session_id);
                sessions.insert(&key, tx_encode(record)?)?;
                // Again: so an ended session is indexed whatever wrote it.
                user_sessions.insert(by_user.as_slice(), &[])?;
                for (k, v) in &by_start {
                    starts.insert(k.as_slice(), v.as_slice())?;
                }
                open.remove(&key)?;
                if record.turn_count > 0 {
                    queue.insert(&key, tx_encode(&job)?)?;
                }
                Ok(())
            })?;
        self.note_sessions([keys::session(record.session_id)]);
        Ok(())
    }
}

impl Trees {
    /// The sessions whose `user_sessions` keys start with `prefix`, in key
    /// order. An index row whose session is gone (it cannot be: both are
    /// written and removed together) is skipped.
    fn indexed_sessions(&self, prefix: &[u8]) -> Result<Vec<SessionRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.user_sessions.scan_prefix(prefix) {
            let (k, _) = item?;
            let Some(id) = keys::user_session_id(&k) else {
                self.skip(keys::TREE_USER_SESSIONS, &k, "the key is not an index key");
                continue;
            };
            if let Some(rec) = self.session(id)? {
                out.push(rec);
            }
        }
        Ok(out)
    }

    /// Builds the (agent, user) index of sessions for a data folder from
    /// before it, once: every session record gets its row.
    pub(super) fn index_user_sessions(&self) -> Result<usize, StoreError> {
        if self.meta.contains_key(keys::USER_SESSIONS_BUILT)? {
            return Ok(0);
        }
        let mut batch = ::sled::Batch::default();
        let mut n = 0;
        for rec in
            self.scan::<SessionRecord>(&self.sessions, keys::TREE_SESSIONS, self.sessions.iter())?
        {
            batch.insert(keys::user_session(&rec), &[]);
            n += 1;
        }
        self.user_sessions.apply_batch(batch)?;
        self.meta.insert(keys::USER_SESSIONS_BUILT, &[1u8])?;
        Ok(n)
    }

    /// Builds the start-time index of sessions for a data folder from
    /// before it, once: every session record gets its rows.
    pub(super) fn index_session_starts(&self) -> Result<usize, StoreError> {
        if self.meta.contains_key(keys::SESSION_STARTS_BUILT)? {
            return Ok(0);
        }
        let mut batch = ::sled::Batch::default();
        let mut n = 0;
        for rec in
            self.scan::<SessionRecord>(&self.sessions, keys::TREE_SESSIONS, self.sessions.iter())?
        {
            for (k, v) in start_rows(&rec) {
                batch.insert(k, v);
            }
            n += 1;
        }
        self.session_starts.apply_batch(batch)?;
        self.meta.insert(keys::SESSION_STARTS_BUILT, &[1u8])?;
        Ok(n)
    }
}
