//! Facts and their history in sled.

use super::*;

impl Trees {
    /// One user's facts, current and earlier, oldest first.
    pub fn user_facts(&self, agent_id: &str, user_id: &str) -> Result<Vec<FactRecord>, StoreError> {
        // From memory once context reads have built the mirror: a
        // reflection plans its facts against the user's (a decode of every
        // one of them from the tree, inside the Store actor, took
        // milliseconds at a thousand facts, with turn writes waiting).
        if let Some(held) = Self::mirror_if_built(&self.mirror_facts, &[(agent_id, user_id)]) {
            let mut facts: Vec<FactRecord> = held.iter().map(|f| (**f).clone()).collect();
            facts.sort_by_key(|f| (f.extracted_at, f.fact_id));
            return Ok(facts);
        }
        let mut facts: Vec<FactRecord> = self.scan(
            &self.facts,
            keys::TREE_FACTS,
            self.facts
                .scan_prefix(keys::facts_prefix(agent_id, user_id)),
        )?;
        facts.sort_by_key(|f| (f.extracted_at, f.fact_id));
        Ok(facts)
    }

    /// What `user_id` may see of an agent's facts: their own and every
    /// user's shared ones, current and earlier, oldest first.
    pub fn visible_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        let all: Vec<FactRecord> = self.scan(
            &self.facts,
            keys::TREE_FACTS,
            self.facts.scan_prefix(keys::agent_facts_prefix(agent_id)),
        )?;
        Ok(sorted_facts(
            all.into_iter()
                .filter(|f| f.user_id == user_id || f.visibility == Visibility::Shared)
                .collect(),
        ))
    }

    pub fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, StoreError> {
        let Some(key) = self.fact_index.get(fact_id.as_bytes())? else {
            return Ok(None);
        };
        self.get(&self.facts, keys::TREE_FACTS, &key)
    }

    /// Changes a fact's visibility; only its owner may.
    pub fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, StoreError> {
        let mut fact = self
            .fact(fact_id)?
            .ok_or(StoreError::FactNotFound(fact_id))?;
        if fact.user_id != user_id {
            return Err(StoreError::NotFactOwner(fact_id));
        }
        fact.fact.visibility = visibility;
        let key = keys::fact(&fact.agent_id, &fact.user_id, fact_id);
        self.facts.insert(key.as_slice(), encode(&fact)?)?;
        self.note_facts([key]);
        Ok(fact)
    }

    /// Deletes a fact; only its owner may. Its subject's history closes
    /// over the gap: the value it replaced is current again if it was the
    /// current one; its vector goes with it. Returns the deleted fact and
    /// the facts that moved.
    pub fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<(FactRecord, Vec<FactRecord>), StoreError> {
        let fact = self
            .fact(fact_id)?
            .ok_or(StoreError::FactNotFound(fact_id))?;
        if fact.user_id != user_id {
            return Err(StoreError::NotFactOwner(fact_id));
        }
        let moved = match &fact.subject {
            Some(subject) => {
                let rest: Vec<FactRecord> = self
                    .user_facts(&fact.agent_id, &fact.user_id)?
                    .into_iter()
                    .filter(|f| f.fact_id != fact_id)
                    .collect();
                reconcile_facts(&rest, &BTreeSet::from([subject.clone()]))
            }
            None => Vec::new(),
        };
        let moved_rows = Self::fact_rows(&moved)?;
        let key = keys::fact(&fact.agent_id, &fact.user_id, fact_id);
        let tombstone = keys::fact_tombstone(&fact.agent_id, &fact.user_id, &spoken_key(&fact));
        (
            &self.facts,
            &self.fact_index,
            &self.fact_tombstones,
            &self.embeddings,
        )
            .transaction(|(facts, index, tombstones, embeddings)| {
                facts.remove(key.as_slice())?;
                index.remove(fact_id.as_bytes())?;
                embeddings.remove(&keys::embedding(fact_id))?;
                tombstones.insert(tombstone.as_slice(), &[])?;
                for (k, v, _) in &moved_rows {
                    facts.insert(k.as_slice(), v.as_slice())?;
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })?;
        self.note_facts(std::iter::once(&key).chain(moved_rows.iter().map(|(k, _, _)| k)));
        Ok((fact, moved))
    }

    /// Stores facts a user states outside a call: see
    /// [`FactStore::put_stated_facts`].
    pub fn put_stated_facts(
        &self,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
    ) -> Result<FactChanges, StoreError> {
        // Planned before the transaction, as a reflection's are (the Store
        // actor is the only writer).
        let changes = self.plan_facts(facts, stated_at, false)?;
        let rows = Self::fact_rows(changes.added.iter().chain(&changes.updated))?;
        let inbox_rows: Vec<[u8; 25]> = if self.fill_inbox {
            changes
                .added
                .iter()
                .map(|f| keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id))
                .collect()
        } else {
            Vec::new()
        };
        let Some(agent) = facts.first().map(|f| f.agent_id.as_bytes()) else {
            return Ok(changes);
        };
        (&self.facts, &self.fact_index, &self.rollup_inbox).transaction(
            |(facts_tree, index, inbox)| {
                for (key, value, id) in &rows {
                    facts_tree.insert(key.as_slice(), value.as_slice())?;
                    index.insert(id.as_bytes(), key.as_slice())?;
                }
                for key in &inbox_rows {
                    inbox.insert(key.as_slice(), agent)?;
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            },
        )?;
        self.note_facts(rows.iter().map(|(k, _, _)| k));
        Ok(changes)
    }

    /// Every fact stored for an agent, every user, current and earlier.
    pub fn agent_facts(&self, agent_id: &str) -> Result<Vec<FactRecord>, StoreError> {
        self.scan(
            &self.facts,
            keys::TREE_FACTS,
            self.facts.scan_prefix(keys::agent_facts_prefix(agent_id)),
        )
    }
}

impl Trees {
    /// What storing `facts` (one reflection's, all about one user, stated
    /// in the call that started at `stated_at`) changes: the new ones worth
    /// storing (with `tombstoned`, none the user deleted) and the stored
    /// ones whose place in their subject's history moves. Stored facts on
    /// those subjects from before their call's time was kept get it from
    /// their session.
    pub fn plan_facts(
        &self,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
        tombstoned: bool,
    ) -> Result<FactChanges, StoreError> {
        let Some(first) = facts.first() else {
            return Ok(FactChanges::default());
        };
        let existing = self.user_facts(&first.agent_id, &first.user_id)?;
        plan_fact_changes(
            existing,
            facts,
            stated_at,
            |f| {
                let tomb = keys::fact_tombstone(&f.agent_id, &f.user_id, &spoken_key(f));
                Ok(tombstoned && self.fact_tombstones.contains_key(tomb)?)
            },
            |id| Ok(self.session(id)?.map(|s| s.started_at)),
        )
    }

    /// Key, encoded value and id of each fact, for a transaction.
    pub(super) fn fact_rows<'a>(
        facts: impl IntoIterator<Item = &'a FactRecord>,
    ) -> Result<Vec<FactRow>, StoreError> {
        facts
            .into_iter()
            .map(|f| {
                Ok((
                    keys::fact(&f.agent_id, &f.user_id, f.fact_id),
                    encode(f)?,
                    f.fact_id,
                ))
            })
            .collect()
    }
}
