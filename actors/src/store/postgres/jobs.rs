//! Reflection jobs and dead letters in PostgreSQL, and what a finished
//! reflection stores.

use super::*;

impl PgBackend {
    /// Queues a reflection, claimed by this instance until its claim
    /// lapses (it renews it with its heartbeat while it runs).
    pub(super) async fn queue_job(
        &self,
        tx: &mut Tx<'_>,
        job: &ReflectionJob,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO reflection_queue
               (session_id, agent_id, enqueued_at, body, claimed_by, claimed_until)
             VALUES ($1, $2, $3, $4::json, $5, now() + make_interval(secs => $6))
             ON CONFLICT (session_id) DO UPDATE SET enqueued_at = $3, body = $4::json,
               claimed_by = $5, claimed_until = now() + make_interval(secs => $6)",
        )
        .bind(job.session_id)
        .bind(&job.agent_id)
        .bind(job.enqueued_at)
        .bind(body(job)?)
        .bind(self.instance_id)
        .bind(self.lease.as_secs_f64())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl JobStore for PgBackend {
    async fn queued(&self) -> Result<Vec<ReflectionJob>, StoreError> {
        self.write_turns().await?;
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT session_id, body::text FROM reflection_queue ORDER BY enqueued_at, session_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(self.decode_all("reflection_queue", rows))
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        self.write_turns().await?;
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT session_id, body::text FROM dead_letters ORDER BY failed_at, session_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(self.decode_all("dead_letters", rows))
    }

    async fn agent_dead_letters(
        &self,
        agent_id: &str,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.records(
            "dead_letters",
            sqlx::query_as::<_, (Uuid, String)>(
                "SELECT session_id, body::text FROM dead_letters WHERE agent_id = $1
                   AND ($3::timestamptz IS NULL OR (failed_at, session_id) > ($3, $4))
                 ORDER BY failed_at, session_id LIMIT $2",
            )
            .bind(agent_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(after.map(|a| a.0))
            .bind(after.map(|a| a.1)),
        )
        .await
    }

    async fn find_dead_letter(&self, session_id: Uuid) -> Result<Option<DeadLetter>, StoreError> {
        self.write_turns().await?;
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM dead_letters WHERE session_id = $1")
                .bind(session_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|json| self.decode("dead_letters", &session_id, &json)))
    }

    /// Counted in the database, which transfers no row and sees every
    /// instance's letters. No turns are written first: the count reads
    /// none (a scrape while the database is away fails alone).
    async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or_default())
    }

    async fn store_reflection(
        &self,
        summary: &ConversationSummary,
        blocks: &[MemoryBlock],
        facts: &[Fact],
    ) -> Result<Reflected, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        Self::lock_user(&mut tx, &summary.agent_id, &summary.user_id).await?;
        let id = summary.summary_id;
        for table in ["reflection_queue", "dead_letters"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE session_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        // Stored already, or its session was forgotten meanwhile.
        if Self::has_summary(&mut tx, id).await? || Self::forgotten(&mut tx, &[id]).await? {
            tx.commit().await?;
            return Ok(Reflected {
                stored: false,
                shared: false,
            });
        }
        let changes = self
            .plan_facts_in(&mut tx, facts, summary.period_start, false)
            .await?;
        let shared = changes
            .added
            .iter()
            .chain(&changes.updated)
            .any(|f| f.visibility == Visibility::Shared);
        Self::put_summaries(&mut tx, &[summary]).await?;
        Self::bump_agent(&mut tx, &summary.agent_id).await?;
        // Drawn from this user's conversation: theirs, never the agent's
        // (which only its operator writes).
        for b in blocks {
            Self::put_block_as(&mut tx, b, &summary.user_id).await?;
        }
        let rows: Vec<&FactRecord> = changes.added.iter().chain(&changes.updated).collect();
        Self::put_facts(&mut tx, &rows).await?;
        self.put_inbox(&mut tx, summary, &changes.added).await?;
        tx.commit().await?;
        Ok(Reflected {
            stored: true,
            shared,
        })
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM reflection_queue WHERE session_id = $1")
            .bind(letter.session_id)
            .execute(&mut *tx)
            .await?;
        // Not if the session has its summary by now (a replay made it
        // while the reflection was backing off), or was forgotten.
        let id = letter.session_id;
        if !Self::has_summary(&mut tx, id).await? && !Self::forgotten(&mut tx, &[id]).await? {
            sqlx::query(
                "INSERT INTO dead_letters (session_id, agent_id, user_id, failed_at, body)
                 VALUES ($1, $2, $3, $4, $5::json)
                 ON CONFLICT (session_id) DO UPDATE SET failed_at = $4, body = $5::json",
            )
            .bind(letter.session_id)
            .bind(&letter.agent_id)
            .bind(&letter.user_id)
            .bind(letter.failed_at)
            .bind(body(letter)?)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn requeue(
        &self,
        session_id: Uuid,
        at: DateTime<Utc>,
    ) -> Result<ReflectionJob, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let row: Option<String> = sqlx::query_scalar(
            "DELETE FROM dead_letters WHERE session_id = $1 RETURNING body::text",
        )
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await?;
        let letter: DeadLetter = row
            .and_then(|json| self.decode("dead_letters", &session_id, &json))
            .ok_or(StoreError::DeadLetterNotFound(session_id))?;
        let job = ReflectionJob {
            session_id,
            agent_id: letter.agent_id,
            enqueued_at: at,
        };
        self.queue_job(&mut tx, &job).await?;
        tx.commit().await?;
        Ok(job)
    }

    async fn drop_job(&self, session_id: Uuid) -> Result<(), StoreError> {
        self.write_turns().await?;
        sqlx::query("DELETE FROM reflection_queue WHERE session_id = $1")
            .bind(session_id)
            .execute(&mut *self.pool.acquire().await?)
            .await?;
        Ok(())
    }
}
