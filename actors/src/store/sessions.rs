//! Sessions and their turns.

use super::*;

impl Trees {
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
}
