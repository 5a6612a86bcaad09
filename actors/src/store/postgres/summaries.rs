//! Summaries (and a replay's new versions of them), memory blocks and the
//! per-agent bookkeeping in PostgreSQL.

use super::*;

impl PgBackend {
    /// A stored summary, locked until the transaction ends.
    pub(super) async fn summary_for_update(
        &self,
        tx: &mut Tx<'_>,
        id: Uuid,
    ) -> Result<Option<ConversationSummary>, StoreError> {
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM summaries WHERE summary_id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        Ok(row.and_then(|json| self.decode("summaries", &id, &json)))
    }
}

pub(super) type AgentRow = (String, i64, i64, String, Option<DateTime<Utc>>);

pub(super) const AGENT_COLUMNS: &str =
    "agent_id, summary_version, context_version, persistent_context::text, context_expires_at";

impl PgBackend {
    pub(super) fn agent_meta(&self, row: AgentRow) -> (String, AgentMeta) {
        let (id, summary_version, context_version, lines, expires) = row;
        let persistent_context = self.decode("agents", &id, &lines).unwrap_or_default();
        (
            id,
            AgentMeta {
                summary_version: summary_version as u64,
                context_version: context_version as u64,
                persistent_context,
                context_expires_at: expires,
            },
        )
    }
}

#[async_trait::async_trait]
impl SummaryStore for PgBackend {
    async fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError> {
        self.write_turns().await?;
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM summaries WHERE summary_id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|json| self.decode("summaries", &id, &json)))
    }

    async fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        self.records(
            "summaries",
            sqlx::query_as::<_, (Uuid, String)>(
                "SELECT summary_id, body::text FROM summaries
                 WHERE agent_id = $1 AND kind = $2 AND ($3::timestamptz IS NULL OR period_end >= $3)
                 ORDER BY period_end, summary_id",
            )
            .bind(agent_id)
            .bind(kind.tag() as i16)
            .bind(since),
        )
        .await
    }

    /// The filters in SQL, so the planner walks an index in period-end
    /// order (`summaries_by_kind`, `summaries_by_end` or
    /// `summaries_by_user_end`) and stops at the limit.
    async fn list_summaries(
        &self,
        agent_id: &str,
        q: &SummaryListing,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let mut sql = sqlx::QueryBuilder::<Postgres>::new(
            "SELECT summary_id, body::text FROM summaries WHERE agent_id = ",
        );
        sql.push_bind(agent_id);
        if let Some(kind) = q.kind {
            sql.push(" AND kind = ").push_bind(kind.tag() as i16);
        }
        if let Some(user) = &q.user_id {
            sql.push(" AND user_id = ").push_bind(user);
        }
        if let Some(t) = q.since {
            sql.push(" AND period_end >= ").push_bind(t);
        }
        if let Some(t) = q.until {
            sql.push(" AND period_start <= ").push_bind(t);
        }
        if let Some((t, id)) = q.before {
            sql.push(" AND (period_end, summary_id) < (")
                .push_bind(t)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        sql.push(" ORDER BY period_end DESC, summary_id DESC LIMIT ")
            .push_bind(i64::try_from(q.limit).unwrap_or(i64::MAX));
        self.records("summaries", sql.build_query_as::<(Uuid, String)>())
            .await
    }

    async fn latest_summary(
        &self,
        agent_id: &str,
        kind: SummaryType,
    ) -> Result<Option<ConversationSummary>, StoreError> {
        // The newest that decodes, as sled's backwards scan gives it.
        use futures::TryStreamExt;
        self.write_turns().await?;
        let mut rows = sqlx::query_as::<_, (Uuid, String)>(
            "SELECT summary_id, body::text FROM summaries
             WHERE agent_id = $1 AND kind = $2 AND current
             ORDER BY period_end DESC, summary_id DESC",
        )
        .bind(agent_id)
        .bind(kind.tag() as i16)
        .fetch(&self.pool);
        while let Some((id, json)) = rows.try_next().await? {
            if let Some(s) = self.decode("summaries", &id, &json) {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    async fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        Self::lock_user(&mut tx, &new.agent_id, &new.user_id).await?;
        let gone = [new.summary_id, new.supersedes.unwrap_or(new.summary_id)];
        if Self::has_summary(&mut tx, new.summary_id).await?
            || Self::forgotten(&mut tx, &gone).await?
        {
            tx.rollback().await?;
            return Ok(Revision::default());
        }
        let Some(old_id) = new.supersedes else {
            return Err(StoreError::InvalidRevision(
                new.summary_id,
                "it names no version it replaces",
            ));
        };
        let Some(mut old) = self.summary_for_update(&mut tx, old_id).await? else {
            return Err(StoreError::SummaryNotFound(old_id));
        };
        let why = revision_refused(&old, new);
        if let Some(why) = why {
            return Err(StoreError::InvalidRevision(old_id, why));
        }
        let changes = self
            .plan_facts_in(&mut tx, facts, new.period_start, true)
            .await?;
        old.superseded_by = Some(new.summary_id);
        Self::put_summaries(&mut tx, &[&old, new]).await?;
        Self::bump_agent(&mut tx, &new.agent_id).await?;
        let rows: Vec<&FactRecord> = changes.added.iter().chain(&changes.updated).collect();
        Self::put_facts(&mut tx, &rows).await?;
        self.put_inbox(&mut tx, new, &changes.added).await?;
        tx.commit().await?;
        Ok(Revision {
            stored: true,
            old: Some(old),
            facts_added: changes.added,
            facts_moved: changes.updated,
        })
    }

    async fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let Some(mut s) = self.summary_for_update(&mut tx, summary_id).await? else {
            return Err(StoreError::SummaryNotFound(summary_id));
        };
        s.derivation = Some(derivation.to_string());
        Self::put_summaries(&mut tx, &[&s]).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError> {
        self.records(
            "blocks",
            sqlx::query_as::<_, (String, String)>(
                "SELECT agent_id, body::text FROM blocks WHERE agent_id = $1 AND user_id = ''
                 ORDER BY label",
            )
            .bind(agent_id),
        )
        .await
    }

    async fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError> {
        if user_id.is_empty() {
            return Ok(Vec::new());
        }
        self.records(
            "blocks",
            sqlx::query_as::<_, (String, String)>(
                "SELECT agent_id, body::text FROM blocks WHERE agent_id = $1 AND user_id = $2
                 ORDER BY label",
            )
            .bind(agent_id)
            .bind(user_id),
        )
        .await
    }

    async fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError> {
        let mut found = self
            .records(
                "blocks",
                sqlx::query_as::<_, (String, String)>(
                    "SELECT agent_id, body::text FROM blocks
                     WHERE agent_id = $1 AND user_id = '' AND label = $2",
                )
                .bind(agent_id)
                .bind(label_code(label)),
            )
            .await?;
        Ok(found.pop())
    }

    async fn put_block(&self, block: &MemoryBlock) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        Self::put_block_as(&mut tx, block, "").await?;
        tx.commit().await?;
        Ok(())
    }

    async fn reclaim_agent_block(
        &self,
        agent_id: &str,
        label: BlockLabel,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        // A reflection of this user's on another instance writes their
        // block under the same lock.
        Self::lock_user(&mut tx, agent_id, user_id).await?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT user_id, body::text FROM blocks
             WHERE agent_id = $1 AND label = $2 AND user_id IN ('', $3)
             FOR UPDATE",
        )
        .bind(agent_id)
        .bind(label_code(label))
        .bind(user_id)
        .fetch_all(&mut *tx)
        .await?;
        let mut agent_wide: Option<MemoryBlock> = None;
        let mut theirs: Option<MemoryBlock> = None;
        for (user, json) in rows {
            let key = format!("{agent_id}/{user}/{label}");
            let decoded = self.decode::<MemoryBlock>("blocks", &key, &json);
            if user.is_empty() {
                agent_wide = decoded;
            } else {
                theirs = decoded;
            }
        }
        let Some(agent_wide) = agent_wide else {
            tx.rollback().await?;
            return Ok(false);
        };
        let record = super::super::blocks::reclaimed(&agent_wide, theirs.as_ref(), user_id);
        if let Some(r) = &record {
            Self::put_block_as(&mut tx, r, user_id).await?;
        }
        sqlx::query("DELETE FROM blocks WHERE agent_id = $1 AND user_id = '' AND label = $2")
            .bind(agent_id)
            .bind(label_code(label))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(record.is_some())
    }

    async fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError> {
        self.write_turns().await?;
        let row: Option<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = $1"
        ))
        .bind(agent_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| self.agent_meta(r).1).unwrap_or_default())
    }

    async fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError> {
        self.write_turns().await?;
        let rows: Vec<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents ORDER BY agent_id COLLATE \"C\""
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| self.agent_meta(r)).collect())
    }

    async fn set_persistent_context(
        &self,
        agent_id: &str,
        lines: Vec<String>,
    ) -> Result<(), StoreError> {
        self.write_turns().await?;
        sqlx::query(
            "INSERT INTO agents (agent_id, summary_version, persistent_context)
             VALUES ($1, 1, $2::json)
             ON CONFLICT (agent_id) DO UPDATE
             SET summary_version = agents.summary_version + 1, persistent_context = $2::json",
        )
        .bind(agent_id)
        .bind(body(&lines)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn mark_context_built(
        &self,
        agent_id: &str,
        version: u64,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        self.write_turns().await?;
        sqlx::query(
            "INSERT INTO agents (agent_id, context_version, context_expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (agent_id) DO UPDATE SET context_version = $2, context_expires_at = $3",
        )
        .bind(agent_id)
        .bind(version as i64)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
