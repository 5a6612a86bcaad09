//! The summary hierarchy's records in sled.

use std::collections::BTreeMap;

use super::*;

impl Trees {
    /// Stores a rollup unless one with its id exists (a rollup's id is a
    /// hash of its period and sources, so the same rollup made twice is
    /// stored once). With `supersedes`, the older version is marked
    /// replaced in the same transaction. Returns whether it was new.
    pub fn put_rollup(
        &self,
        summary: &ConversationSummary,
        supersedes: Option<Uuid>,
        vector: Option<&StoredVector>,
    ) -> Result<bool, StoreError> {
        let id = summary.summary_id;
        if self.summary_index.get(id.as_bytes())?.is_some() {
            return Ok(false);
        }
        let old = match supersedes {
            Some(old_id) => self.summary(old_id)?.map(|mut old| {
                old.superseded_by = Some(id);
                old
            }),
            None => None,
        };
        let old_row = old
            .as_ref()
            .map(|o| Ok::<_, StoreError>((keys::summary_of(o), encode(o)?)))
            .transpose()?;
        let key = keys::summary_of(summary);
        let mut meta = self.agent(&summary.agent_id)?;
        meta.summary_version += 1;
        let vector = vector.map(StoredVector::encode);
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.embeddings,
        )
            .transaction(|(summaries, index, agents, embeddings)| {
                summaries.insert(key.as_slice(), tx_encode(summary)?)?;
                index.insert(id.as_bytes(), key.as_slice())?;
                if let Some((k, v)) = &old_row {
                    summaries.insert(k.as_slice(), v.as_slice())?;
                }
                if let Some(v) = &vector {
                    embeddings.insert(&keys::embedding(id), v.as_slice())?;
                }
                agents.insert(keys::agent(&summary.agent_id), tx_encode(&meta)?)?;
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        self.note_summaries(std::iter::once(key).chain(old_row.map(|(k, _)| k)));
        Ok(true)
    }

    /// Stores a batch's new rollups and moves its cursors forward, in one
    /// transaction (see [`HierarchyStore::put_rollups`]): a rollup pass
    /// over many agents costs one write, not two an agent.
    pub fn put_rollups(&self, batch: &RollupBatch) -> Result<Vec<bool>, StoreError> {
        let mut stored = Vec::with_capacity(batch.rollups.len());
        // The rows written, by key: a version the batch both adds and
        // supersedes is written once, marked.
        let mut rows: BTreeMap<Vec<u8>, ConversationSummary> = BTreeMap::new();
        let mut key_of: HashMap<Uuid, Vec<u8>> = HashMap::new();
        let mut vectors: Vec<(Uuid, Vec<u8>)> = Vec::new();
        let mut metas: BTreeMap<String, AgentMeta> = BTreeMap::new();
        for r in &batch.rollups {
            let s = &r.summary;
            let id = s.summary_id;
            if key_of.contains_key(&id) || self.summary_index.get(id.as_bytes())?.is_some() {
                stored.push(false);
                continue;
            }
            stored.push(true);
            if let Some(old_id) = r.supersedes {
                let old = match key_of.get(&old_id) {
                    Some(k) => rows.get(k).cloned(),
                    None => self.summary(old_id)?,
                };
                if let Some(mut old) = old {
                    old.superseded_by = Some(id);
                    let k = keys::summary_of(&old);
                    key_of.insert(old_id, k.clone());
                    rows.insert(k, old);
                }
            }
            let key = keys::summary_of(s);
            key_of.insert(id, key.clone());
            rows.insert(key, s.clone());
            if let Some(v) = &r.vector {
                vectors.push((id, v.encode()));
            }
            let meta = match metas.entry(s.agent_id.clone()) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(self.agent(&s.agent_id)?),
            };
            meta.summary_version += 1;
        }
        let index: Vec<(Uuid, Vec<u8>)> = batch
            .rollups
            .iter()
            .zip(&stored)
            .filter(|(_, new)| **new)
            .map(|(r, _)| (r.summary.summary_id, key_of[&r.summary.summary_id].clone()))
            .collect();
        let rows: Vec<(Vec<u8>, Vec<u8>)> = rows
            .into_iter()
            .map(|(k, s)| Ok::<_, StoreError>((k, encode(&s)?)))
            .collect::<Result<_, _>>()?;
        let metas: Vec<(Vec<u8>, Vec<u8>)> = metas
            .iter()
            .map(|(a, m)| Ok::<_, StoreError>((keys::agent(a).to_vec(), encode(m)?)))
            .collect::<Result<_, _>>()?;
        let cursors: Vec<(Vec<u8>, NaiveDate, Vec<u8>)> = batch
            .cursors
            .iter()
            .map(|c| {
                Ok::<_, StoreError>((
                    keys::rollup_cursor(&c.agent_id, c.level),
                    c.period,
                    encode(&c.period)?,
                ))
            })
            .collect::<Result<_, _>>()?;
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.embeddings,
            &self.rollup_cursors,
        )
            .transaction(|(summaries, index_tree, agents, embeddings, cursor_tree)| {
                for (k, v) in &rows {
                    summaries.insert(k.as_slice(), v.as_slice())?;
                }
                for (id, k) in &index {
                    index_tree.insert(id.as_bytes(), k.as_slice())?;
                }
                for (id, v) in &vectors {
                    embeddings.insert(&keys::embedding(*id), v.as_slice())?;
                }
                for (k, v) in &metas {
                    agents.insert(k.as_slice(), v.as_slice())?;
                }
                // Forward only (see `HierarchyStore::set_rollup_cursor`); a
                // stored value that does not decode is replaced.
                for (k, period, v) in &cursors {
                    let ahead = cursor_tree.get(k.as_slice())?.is_some_and(|old| {
                        serde_json::from_slice::<NaiveDate>(&old).is_ok_and(|at| at > *period)
                    });
                    if !ahead {
                        cursor_tree.insert(k.as_slice(), v.as_slice())?;
                    }
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        self.note_summaries(rows.into_iter().map(|(k, _)| k));
        Ok(stored)
    }

    /// The last period of `level` rolled up for the agent (its first day).
    pub fn rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
    ) -> Result<Option<NaiveDate>, StoreError> {
        self.get(
            &self.rollup_cursors,
            keys::TREE_ROLLUP_CURSORS,
            &keys::rollup_cursor(agent_id, level),
        )
    }

    pub fn set_rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
        period: NaiveDate,
    ) -> Result<(), StoreError> {
        let key = keys::rollup_cursor(agent_id, level);
        let value = encode(&period)?;
        // Forward only (see `HierarchyStore::set_rollup_cursor`); a stored
        // value that does not decode is replaced.
        self.rollup_cursors
            .fetch_and_update(&key, |old| match old {
                Some(v)
                    if serde_json::from_slice::<NaiveDate>(v)
                        .is_ok_and(|stored| stored > period) =>
                {
                    Some(v.to_vec())
                }
                _ => Some(value.clone()),
            })?;
        Ok(())
    }

    /// Queues for the Rollup actor every session summary and fact stored
    /// before there was an inbox (a data folder from an earlier version),
    /// once per folder. Returns how many were queued.
    pub fn backfill_inbox(&self) -> Result<usize, StoreError> {
        const MARKER: &[u8] = keys::INBOX_BACKFILLED.as_bytes();
        if self.meta.contains_key(MARKER)? {
            return Ok(0);
        }
        let mut batch = ::sled::Batch::default();
        let mut n = 0;
        for item in self.summaries.iter() {
            let (k, v) = item?;
            let Some(s) = self.decode::<ConversationSummary>(keys::TREE_SUMMARIES, &k, &v) else {
                continue;
            };
            if s.summary_type == SummaryType::Session {
                batch.insert(
                    &keys::inbox(s.period_start, keys::INBOX_SUMMARY, s.summary_id)[..],
                    s.agent_id.as_bytes(),
                );
                n += 1;
            }
        }
        for item in self.facts.iter() {
            let (k, v) = item?;
            if let Some(f) = self.decode::<Fact>(keys::TREE_FACTS, &k, &v) {
                batch.insert(
                    &keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id)[..],
                    f.agent_id.as_bytes(),
                );
                n += 1;
            }
        }
        self.rollup_inbox.apply_batch(batch)?;
        self.meta.insert(MARKER, &[1u8])?;
        self.db.flush()?;
        Ok(n)
    }

    /// Up to `limit` inbox entries after the one at `after` (from the
    /// start without one), oldest item first.
    pub fn inbox(
        &self,
        after: Option<&InboxKey>,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let mut out = Vec::new();
        let after = after.map(InboxKey::key);
        let iter = match &after {
            Some(k) => self.rollup_inbox.range::<&[u8], _>((
                std::ops::Bound::Excluded(&k[..]),
                std::ops::Bound::Unbounded,
            )),
            None => self.rollup_inbox.iter(),
        };
        // Up to `limit` entries that read: a key skipped never ends a
        // batch early (the drain reads on from the last entry it got).
        for item in iter {
            if out.len() == limit {
                break;
            }
            let (k, v) = item?;
            // Malformed, or of a kind a newer version writes: kept for it.
            let Some(key) = InboxKey::of_key(&k) else {
                tracing::warn!(key = ?k, "skipping malformed rollup inbox key");
                continue;
            };
            out.push(InboxEntry::new(
                key,
                String::from_utf8_lossy(&v).into_owned(),
            ));
        }
        Ok(out)
    }

    pub fn inbox_done(&self, done: &[InboxKey]) -> Result<(), StoreError> {
        let mut batch = ::sled::Batch::default();
        for k in done {
            batch.remove(&k.key()[..]);
        }
        self.rollup_inbox.apply_batch(batch)?;
        Ok(())
    }

    /// An agent's topics (one user's, or all), oldest first.
    pub fn topics(&self, agent_id: &str, user_id: Option<&str>) -> Result<Vec<Topic>, StoreError> {
        let prefix = match user_id {
            Some(u) => keys::topics_prefix(agent_id, u),
            None => keys::agent_facts_prefix(agent_id),
        };
        let mut out: Vec<Topic> = self.scan(
            &self.topics,
            keys::TREE_TOPICS,
            self.topics.scan_prefix(prefix),
        )?;
        out.sort_by_key(|t| (t.created_at, t.topic_id));
        Ok(out)
    }

    /// Writes a topic and its topic summary (replacing the previous
    /// summary, whose key moves with its period end).
    pub fn put_topic(
        &self,
        topic: &Topic,
        summary: &ConversationSummary,
        vector: Option<&StoredVector>,
    ) -> Result<(), StoreError> {
        let id = summary.summary_id;
        let old_key = self.summary_index.get(id.as_bytes())?;
        let key = keys::summary_of(summary);
        let mut meta = self.agent(&summary.agent_id)?;
        meta.summary_version += 1;
        let topic_key = keys::topic(&topic.agent_id, &topic.user_id, topic.topic_id);
        let topic_value = encode(topic)?;
        let vector = vector.map(StoredVector::encode);
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.topics,
            &self.embeddings,
        )
            .transaction(|(summaries, index, agents, topics, embeddings)| {
                if let Some(old) = &old_key {
                    summaries.remove(old.as_ref())?;
                }
                summaries.insert(key.as_slice(), tx_encode(summary)?)?;
                index.insert(id.as_bytes(), key.as_slice())?;
                topics.insert(topic_key.as_slice(), topic_value.as_slice())?;
                // No vector (the embedder failed): none, rather than the
                // previous summary's.
                match &vector {
                    Some(v) => embeddings.insert(&keys::embedding(id), v.as_slice())?,
                    None => embeddings.remove(&keys::embedding(id))?,
                };
                agents.insert(keys::agent(&summary.agent_id), tx_encode(&meta)?)?;
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        self.note_summaries(old_key.iter().map(|k| k.to_vec()).chain([key]));
        self.note_topics([topic_key]);
        Ok(())
    }

    /// Stores vectors of summaries and facts that still exist (one deleted
    /// while its vector was being made gets none). Returns the ids stored.
    pub fn put_vectors(&self, items: &[(Uuid, StoredVector)]) -> Result<Vec<Uuid>, StoreError> {
        let mut batch = ::sled::Batch::default();
        let mut stored = Vec::new();
        for (id, v) in items {
            if self.summary_index.contains_key(id.as_bytes())?
                || self.fact_index.contains_key(id.as_bytes())?
            {
                batch.insert(&keys::embedding(*id), v.encode());
                stored.push(*id);
            }
        }
        self.embeddings.apply_batch(batch)?;
        Ok(stored)
    }

    /// Stores the vectors of a session's turns (by sequence number), each
    /// under its turn's id; a turn not stored (forgotten meanwhile) gets
    /// none. Returns the turns stored.
    pub fn put_turn_vectors(
        &self,
        session_id: Uuid,
        items: &[(u32, StoredVector)],
    ) -> Result<Vec<u32>, StoreError> {
        let mut batch = ::sled::Batch::default();
        let mut stored = Vec::new();
        for (seq, v) in items {
            if self.turns.contains_key(keys::turn(session_id, *seq))? {
                let id = crate::search::TurnRef {
                    session_id,
                    seq: *seq,
                }
                .doc_id();
                batch.insert(&keys::embedding(id), v.encode());
                stored.push(*seq);
            }
        }
        self.embeddings.apply_batch(batch)?;
        Ok(stored)
    }

    pub fn vector(&self, id: Uuid) -> Result<Option<StoredVector>, StoreError> {
        Ok(self
            .embeddings
            .get(keys::embedding(id))?
            .and_then(|v| StoredVector::decode(&v)))
    }
}
