//! Facts and their history in PostgreSQL.

use super::*;

impl PgBackend {
    /// Takes the lock on the facts of a fact's owner.
    async fn lock_owner(&self, tx: &mut Tx<'_>, fact_id: Uuid) -> Result<(), StoreError> {
        let owner: Option<(String, String)> =
            sqlx::query_as("SELECT agent_id, user_id FROM facts WHERE fact_id = $1")
                .bind(fact_id)
                .fetch_optional(&mut **tx)
                .await?;
        let (agent, owner) = owner.ok_or(StoreError::FactNotFound(fact_id))?;
        Self::lock_user(tx, &agent, &owner).await
    }

    /// A fact its owner is changing, locked until the transaction ends.
    async fn owned_fact(
        &self,
        tx: &mut Tx<'_>,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<FactRecord, StoreError> {
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM facts WHERE fact_id = $1 FOR UPDATE")
                .bind(fact_id)
                .fetch_optional(&mut **tx)
                .await?;
        let fact: FactRecord = row
            .and_then(|json| self.decode("facts", &fact_id, &json))
            .ok_or(StoreError::FactNotFound(fact_id))?;
        if fact.user_id != user_id {
            return Err(StoreError::NotFactOwner(fact_id));
        }
        Ok(fact)
    }
}

#[async_trait::async_trait]
impl FactStore for PgBackend {
    async fn user_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        let facts = self
            .records(
                "facts",
                sqlx::query_as::<_, (Uuid, String)>(
                    "SELECT fact_id, body::text FROM facts WHERE agent_id = $1 AND user_id = $2",
                )
                .bind(agent_id)
                .bind(user_id),
            )
            .await?;
        Ok(sorted_facts(facts))
    }

    async fn visible_facts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        let facts = self
            .records(
                "facts",
                sqlx::query_as::<_, (Uuid, String)>(
                    "SELECT fact_id, body::text FROM facts
                     WHERE agent_id = $1 AND (user_id = $2 OR shared)",
                )
                .bind(agent_id)
                .bind(user_id),
            )
            .await?;
        Ok(sorted_facts(facts))
    }

    async fn agent_facts(&self, agent_id: &str) -> Result<Vec<FactRecord>, StoreError> {
        self.records(
            "facts",
            sqlx::query_as::<_, (Uuid, String)>(
                "SELECT fact_id, body::text FROM facts WHERE agent_id = $1
                 ORDER BY user_id COLLATE \"C\", fact_id",
            )
            .bind(agent_id),
        )
        .await
    }

    async fn fact(&self, fact_id: Uuid) -> Result<Option<FactRecord>, StoreError> {
        let mut found = self
            .records(
                "facts",
                sqlx::query_as::<_, (Uuid, String)>(
                    "SELECT fact_id, body::text FROM facts WHERE fact_id = $1",
                )
                .bind(fact_id),
            )
            .await?;
        Ok(found.pop())
    }

    async fn set_fact_visibility(
        &self,
        fact_id: Uuid,
        user_id: &str,
        visibility: Visibility,
    ) -> Result<FactRecord, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        // Under the owner's lock, as a reflection rewriting the user's
        // facts takes it: neither writes back what the other changed.
        self.lock_owner(&mut tx, fact_id).await?;
        let mut fact = self.owned_fact(&mut tx, fact_id, user_id).await?;
        fact.fact.visibility = visibility;
        Self::put_facts(&mut tx, &[&fact]).await?;
        tx.commit().await?;
        Ok(fact)
    }

    async fn delete_fact(
        &self,
        fact_id: Uuid,
        user_id: &str,
    ) -> Result<(FactRecord, Vec<FactRecord>), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        // Its owner's lock first (as a reflection storing facts takes it),
        // then the row: the other order could deadlock with a reflection.
        self.lock_owner(&mut tx, fact_id).await?;
        let fact = self.owned_fact(&mut tx, fact_id, user_id).await?;
        let moved = match &fact.subject {
            Some(subject) => {
                let rest: Vec<FactRecord> = self
                    .user_facts_in(&mut tx, &fact.agent_id, &fact.user_id)
                    .await?
                    .into_iter()
                    .filter(|f| f.fact_id != fact_id)
                    .collect();
                reconcile_facts(&rest, &BTreeSet::from([subject.clone()]))
            }
            None => Vec::new(),
        };
        sqlx::query("DELETE FROM facts WHERE fact_id = $1")
            .bind(fact_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM embeddings WHERE item_id = $1")
            .bind(fact_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO fact_tombstones (agent_id, user_id, content_hash) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
        )
        .bind(&fact.agent_id)
        .bind(&fact.user_id)
        .bind(keys::tombstone_hash(&spoken_key(&fact)))
        .execute(&mut *tx)
        .await?;
        Self::put_facts(&mut tx, &moved.iter().collect::<Vec<_>>()).await?;
        tx.commit().await?;
        Ok((fact, moved))
    }

    async fn put_stated_facts(
        &self,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
    ) -> Result<FactChanges, StoreError> {
        let Some(first) = facts.first() else {
            return Ok(FactChanges::default());
        };
        let mut tx = self.pool.begin().await?;
        // The user's lock, as a reflection storing facts takes it.
        Self::lock_user(&mut tx, &first.agent_id, &first.user_id).await?;
        let changes = self.plan_facts_in(&mut tx, facts, stated_at, false).await?;
        let rows: Vec<&FactRecord> = changes.added.iter().chain(&changes.updated).collect();
        Self::put_facts(&mut tx, &rows).await?;
        self.put_fact_inbox(&mut tx, &first.agent_id, &changes.added)
            .await?;
        tx.commit().await?;
        Ok(changes)
    }
}
