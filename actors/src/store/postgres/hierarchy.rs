//! The summary hierarchy's records in PostgreSQL: rollups, cursors, the
//! Rollup actor's inbox, topics and vectors.

use super::*;

#[async_trait::async_trait]
impl HierarchyStore for PgBackend {
    async fn put_rollup(
        &self,
        summary: &ConversationSummary,
        supersedes: Option<Uuid>,
        vector: Option<&StoredVector>,
    ) -> Result<bool, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let id = summary.summary_id;
        let mut from: Vec<Uuid> = summary.source_summary_ids.clone();
        from.push(id);
        Self::lock_user(&mut tx, &summary.agent_id, &summary.user_id).await?;
        if Self::forgotten(&mut tx, &from).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        // The older version first: one current rollup per (user, period).
        if let Some(old_id) = supersedes {
            if let Some(mut old) = self.summary_for_update(&mut tx, old_id).await? {
                old.superseded_by = Some(id);
                Self::put_summaries(&mut tx, &[&old]).await?;
            }
        }
        // A rollup's id is a hash of its period and sources: the same
        // rollup made twice, here or on another instance, is stored once;
        // another current one of its period (another instance's, made from
        // other sources) keeps its place.
        let inserted = sqlx::query(
            "INSERT INTO summaries
               (summary_id, agent_id, user_id, kind, period_start, period_end, current, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::json) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(&summary.agent_id)
        .bind(&summary.user_id)
        .bind(summary.summary_type.tag() as i16)
        .bind(summary.period_start)
        .bind(summary.period_end)
        .bind(summary.is_current())
        .bind(body(summary)?)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        if let Some(v) = vector {
            Self::put_vector(&mut tx, id, v).await?;
        }
        Self::bump_agent(&mut tx, &summary.agent_id).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
    ) -> Result<Option<NaiveDate>, StoreError> {
        self.write_turns().await?;
        Ok(sqlx::query_scalar(
            "SELECT period FROM rollup_cursors WHERE agent_id = $1 AND level = $2",
        )
        .bind(agent_id)
        .bind(level_code(level))
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn set_rollup_cursor(
        &self,
        agent_id: &str,
        level: Level,
        period: NaiveDate,
    ) -> Result<(), StoreError> {
        self.write_turns().await?;
        sqlx::query(
            "INSERT INTO rollup_cursors (agent_id, level, period) VALUES ($1, $2, $3)
             ON CONFLICT (agent_id, level)
             DO UPDATE SET period = GREATEST(rollup_cursors.period, EXCLUDED.period)",
        )
        .bind(agent_id)
        .bind(level_code(level))
        .bind(period)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn backfill_inbox(&self) -> Result<usize, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let marked = sqlx::query(
            "INSERT INTO meta (key, value) VALUES ($1, 'true') ON CONFLICT (key) DO NOTHING",
        )
        .bind(keys::INBOX_BACKFILLED)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked == 0 {
            tx.rollback().await?;
            return Ok(0);
        }
        let summaries: Vec<(Uuid, String)> =
            sqlx::query_as("SELECT summary_id, body::text FROM summaries WHERE kind = $1")
                .bind(SummaryType::Session.tag() as i16)
                .fetch_all(&mut *tx)
                .await?;
        let facts: Vec<(Uuid, String)> = sqlx::query_as("SELECT fact_id, body::text FROM facts")
            .fetch_all(&mut *tx)
            .await?;
        let mut rows: Vec<(Vec<u8>, Uuid, String)> = Vec::new();
        for s in self.decode_all::<ConversationSummary, _>("summaries", summaries) {
            rows.push((
                keys::inbox(s.period_start, keys::INBOX_SUMMARY, s.summary_id).to_vec(),
                s.summary_id,
                s.agent_id,
            ));
        }
        for f in self.decode_all::<Fact, _>("facts", facts) {
            rows.push((
                keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id).to_vec(),
                f.fact_id,
                f.agent_id,
            ));
        }
        let n = rows.len();
        let (mut ks, mut ids, mut agents) = (Vec::new(), Vec::new(), Vec::new());
        for (k, id, agent) in rows {
            ks.push(k);
            ids.push(id);
            agents.push(agent);
        }
        sqlx::query(
            "INSERT INTO rollup_inbox (key, item_id, agent_id)
             SELECT * FROM UNNEST($1::bytea[], $2::uuid[], $3::text[])
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(&ks)
        .bind(&ids)
        .bind(&agents)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn inbox(
        &self,
        after: Option<&InboxKey>,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.write_turns().await?;
        // The key is stored as the sled backend's (0001_records.sql), so
        // that both read the inbox in one order.
        let mut after = after.map(|k| k.key().to_vec());
        let mut out = Vec::with_capacity(limit);
        // Up to `limit` entries that read: a key skipped never ends a
        // batch early (the drain reads on from the last entry it got).
        while out.len() < limit {
            let rows: Vec<(Vec<u8>, String)> = sqlx::query_as(
                "SELECT key, agent_id FROM rollup_inbox WHERE $1::bytea IS NULL OR key > $1
                 ORDER BY key LIMIT $2",
            )
            .bind(&after)
            .bind((limit - out.len()).min(i64::MAX as usize) as i64)
            .fetch_all(&self.pool)
            .await?;
            let Some((last, _)) = rows.last() else {
                break;
            };
            after = Some(last.clone());
            for (key, agent_id) in rows {
                // Malformed, or of a kind a newer version writes: kept
                // for it.
                let Some(key) = InboxKey::of_key(&key) else {
                    warn!(key = ?key, "skipping malformed rollup inbox key");
                    continue;
                };
                out.push(InboxEntry::new(key, agent_id));
            }
        }
        Ok(out)
    }

    async fn inbox_done(&self, done: &[InboxKey]) -> Result<(), StoreError> {
        self.write_turns().await?;
        let done: Vec<Vec<u8>> = done.iter().map(|k| k.key().to_vec()).collect();
        sqlx::query("DELETE FROM rollup_inbox WHERE key = ANY($1)")
            .bind(&done)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn topics(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
    ) -> Result<Vec<Topic>, StoreError> {
        self.write_turns().await?;
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT topic_id, body::text FROM topics
             WHERE agent_id = $1 AND ($2::text IS NULL OR user_id = $2)
             ORDER BY created_at, topic_id",
        )
        .bind(agent_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(self.decode_all("topics", rows))
    }

    async fn put_topic(
        &self,
        topic: &Topic,
        summary: &ConversationSummary,
        vector: Option<&StoredVector>,
    ) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        Self::lock_user(&mut tx, &summary.agent_id, &summary.user_id).await?;
        if Self::forgotten(&mut tx, &summary.source_summary_ids).await? {
            tx.rollback().await?;
            return Ok(());
        }
        Self::put_summaries(&mut tx, &[summary]).await?;
        sqlx::query(
            "INSERT INTO topics (topic_id, agent_id, user_id, created_at, body)
             VALUES ($1, $2, $3, $4, $5::json)
             ON CONFLICT (topic_id) DO UPDATE SET created_at = $4, body = $5::json",
        )
        .bind(topic.topic_id)
        .bind(&topic.agent_id)
        .bind(&topic.user_id)
        .bind(topic.created_at)
        .bind(body(topic)?)
        .execute(&mut *tx)
        .await?;
        // No vector (the embedder failed): none, rather than the previous
        // summary's.
        match vector {
            Some(v) => Self::put_vector(&mut tx, summary.summary_id, v).await?,
            None => {
                sqlx::query("DELETE FROM embeddings WHERE item_id = $1")
                    .bind(summary.summary_id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        Self::bump_agent(&mut tx, &summary.agent_id).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn put_vectors(&self, items: &[(Uuid, StoredVector)]) -> Result<Vec<Uuid>, StoreError> {
        self.write_turns().await?;
        let ids: Vec<Uuid> = items.iter().map(|(id, _)| *id).collect();
        let vectors: Vec<Vec<u8>> = items.iter().map(|(_, v)| v.encode()).collect();
        // Only for summaries and facts that still exist (one deleted while
        // its vector was being made gets none).
        Ok(sqlx::query_scalar(
            "INSERT INTO embeddings (item_id, vector)
             SELECT i, v FROM UNNEST($1::uuid[], $2::bytea[]) AS x(i, v)
             WHERE EXISTS (SELECT 1 FROM summaries WHERE summary_id = i)
                OR EXISTS (SELECT 1 FROM facts WHERE fact_id = i)
             ON CONFLICT (item_id) DO UPDATE SET vector = EXCLUDED.vector
             RETURNING item_id",
        )
        .bind(&ids)
        .bind(&vectors)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn put_turn_vectors(
        &self,
        session_id: Uuid,
        items: &[(u32, StoredVector)],
    ) -> Result<Vec<u32>, StoreError> {
        self.write_turns().await?;
        let mut by_id = HashMap::new();
        let (mut ids, mut seqs, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
        for (seq, v) in items {
            let id = TurnRef {
                session_id,
                seq: *seq,
            }
            .doc_id();
            by_id.insert(id, *seq);
            ids.push(id);
            seqs.push(*seq as i64);
            vectors.push(v.encode());
        }
        let stored: Vec<Uuid> = sqlx::query_scalar(
            "INSERT INTO embeddings (item_id, vector)
             SELECT i, v FROM UNNEST($2::uuid[], $3::int8[], $4::bytea[]) AS x(i, s, v)
             WHERE EXISTS (SELECT 1 FROM turns WHERE session_id = $1 AND seq = s)
             ON CONFLICT (item_id) DO UPDATE SET vector = EXCLUDED.vector
             RETURNING item_id",
        )
        .bind(session_id)
        .bind(&ids)
        .bind(&seqs)
        .bind(&vectors)
        .fetch_all(&self.pool)
        .await?;
        let stored: HashSet<Uuid> = stored.into_iter().collect();
        Ok(ids
            .iter()
            .filter(|id| stored.contains(id))
            .filter_map(|id| by_id.get(id).copied())
            .collect())
    }

    async fn vector(&self, id: Uuid) -> Result<Option<StoredVector>, StoreError> {
        self.write_turns().await?;
        let row: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT vector FROM embeddings WHERE item_id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|v| StoredVector::decode(&v)))
    }
}

impl PgBackend {
    async fn put_vector(tx: &mut Tx<'_>, id: Uuid, v: &StoredVector) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO embeddings (item_id, vector) VALUES ($1, $2)
             ON CONFLICT (item_id) DO UPDATE SET vector = $2",
        )
        .bind(id)
        .bind(v.encode())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}
