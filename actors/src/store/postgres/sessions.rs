//! Sessions and their turns in PostgreSQL.

use super::*;

impl PgBackend {
    /// Inserts or replaces a session record; `owner` is the instance that
    /// has its call (given when it opens; kept when it ends). Returns false
    /// for a session a forget removed (nothing is written).
    async fn put_session(
        tx: &mut Tx<'_>,
        record: &SessionRecord,
        owner: Option<Uuid>,
    ) -> Result<bool, StoreError> {
        // Under the user's lock, which a forget holds to its commit: a
        // forget either came before (and is seen) or waits for this.
        Self::lock_user(tx, &record.agent_id, &record.user_id).await?;
        if Self::forgotten(tx, &[record.session_id]).await? {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO sessions
               (session_id, agent_id, user_id, started_at, ended_at, open, body, instance_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7::json, $8)
             ON CONFLICT (session_id) DO UPDATE SET agent_id = $2, user_id = $3, started_at = $4,
               ended_at = $5, open = $6, body = $7::json,
               instance_id = COALESCE($8, sessions.instance_id)",
        )
        .bind(record.session_id)
        .bind(&record.agent_id)
        .bind(&record.user_id)
        .bind(record.started_at)
        .bind(record.ended_at)
        .bind(record.is_open())
        .bind(body(record)?)
        .bind(owner)
        .execute(&mut **tx)
        .await?;
        Ok(true)
    }
}

#[async_trait::async_trait]
impl SessionStore for PgBackend {
    async fn open_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        Self::put_session(&mut tx, record, Some(self.instance_id)).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Waits in memory for the next batch ([`Backend::flush`]).
    async fn append_turn(&self, id: Uuid, seq: u32, value: &[u8]) -> Result<(), StoreError> {
        // The session actor encodes turns with serde_json: always UTF-8.
        let json = String::from_utf8(value.to_vec()).map_err(|e| {
            StoreError::Codec(serde::de::Error::custom(format!(
                "a turn is not UTF-8: {e}"
            )))
        })?;
        self.lock_pending().push((id, seq as i64, json));
        Ok(())
    }

    async fn end_session(
        &self,
        record: &SessionRecord,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        // The turns first: whoever takes the job reads them all.
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let kept = Self::put_session(&mut tx, record, None).await?;
        // Its reflection is this instance's, until its claim lapses.
        if kept && record.turn_count > 0 {
            let job = ReflectionJob {
                session_id: record.session_id,
                agent_id: record.agent_id.clone(),
                enqueued_at: at,
            };
            self.queue_job(&mut tx, &job).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn session(&self, id: Uuid) -> Result<Option<SessionRecord>, StoreError> {
        self.write_turns().await?;
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM sessions WHERE session_id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|json| self.decode("sessions", &id, &json)))
    }

    async fn turns(&self, id: Uuid) -> Result<Vec<ConversationTurn>, StoreError> {
        Ok(self
            .numbered_turns(id)
            .await?
            .into_iter()
            .map(|(_, t)| t)
            .collect())
    }

    async fn numbered_turns(&self, id: Uuid) -> Result<Vec<(u32, ConversationTurn)>, StoreError> {
        self.write_turns().await?;
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT seq, body::text FROM turns WHERE session_id = $1 ORDER BY seq")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        Ok(self.numbered(id, rows))
    }

    async fn turn(&self, id: Uuid, seq: u32) -> Result<Option<ConversationTurn>, StoreError> {
        self.write_turns().await?;
        let row: Option<String> =
            sqlx::query_scalar("SELECT body::text FROM turns WHERE session_id = $1 AND seq = $2")
                .bind(id)
                .bind(seq as i64)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|json| self.decode("turns", &format_args!("{id}/{seq}"), &json)))
    }

    async fn sessions(&self, agent_id: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        self.records(
            "sessions",
            sqlx::query_as::<_, (Uuid, String)>(
                "SELECT session_id, body::text FROM sessions
                 WHERE $1::text IS NULL OR agent_id = $1 ORDER BY started_at, session_id",
            )
            .bind(agent_id),
        )
        .await
    }

    async fn user_sessions(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.records(
            "sessions",
            sqlx::query_as::<_, (Uuid, String)>(
                "SELECT session_id, body::text FROM sessions WHERE agent_id = $1 AND user_id = $2
                 ORDER BY started_at, session_id",
            )
            .bind(agent_id)
            .bind(user_id),
        )
        .await
    }

    async fn open_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.records("sessions", sqlx::query_as::<_, (Uuid, String)>(
            "SELECT session_id, body::text FROM sessions WHERE open ORDER BY started_at, session_id",
        ))
        .await
    }

    /// The filters in SQL, so the planner walks an index in start order
    /// (`sessions_by_agent`, `sessions_by_user`, `sessions_by_start` or
    /// `sessions_open`) and stops at the limit.
    async fn list_sessions(&self, q: &SessionListing) -> Result<Vec<SessionRecord>, StoreError> {
        if q.limit == 0 || q.agents.as_ref().is_some_and(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let mut sql = sqlx::QueryBuilder::<Postgres>::new(
            "SELECT session_id, body::text FROM sessions WHERE true",
        );
        match q.agents.as_deref() {
            None => {}
            Some([one]) => {
                sql.push(" AND agent_id = ").push_bind(one);
            }
            Some(many) => {
                sql.push(" AND agent_id = ANY(").push_bind(many).push(")");
            }
        }
        if let Some(user) = &q.user_id {
            sql.push(" AND user_id = ").push_bind(user);
        }
        // Written out, not bound: the partial index on open sessions
        // applies.
        match q.live {
            Some(true) => {
                sql.push(" AND open");
            }
            Some(false) => {
                sql.push(" AND NOT open");
            }
            None => {}
        }
        if let Some((t, id)) = q.before {
            sql.push(" AND (started_at, session_id) < (")
                .push_bind(t)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        sql.push(" ORDER BY started_at DESC, session_id DESC LIMIT ")
            .push_bind(i64::try_from(q.limit).unwrap_or(i64::MAX));
        self.records("sessions", sql.build_query_as::<(Uuid, String)>())
            .await
    }
}

impl PgBackend {
    fn numbered(&self, id: Uuid, rows: Vec<(i64, String)>) -> Vec<(u32, ConversationTurn)> {
        rows.into_iter()
            .filter_map(|(seq, json)| {
                let t = self.decode("turns", &format_args!("{id}/{seq}"), &json)?;
                Some((seq as u32, t))
            })
            .collect()
    }
}
