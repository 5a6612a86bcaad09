//! Forgetting a user in PostgreSQL: one transaction, so a forget is done
//! whole or not at all, and no marker is needed to finish one after a
//! crash.

use super::*;

/// The agent filter every delete of a forget shares: `$2` is the one agent,
/// or NULL for every agent.
const AGENT: &str = "($2::text IS NULL OR agent_id = $2)";

#[async_trait::async_trait]
impl ForgetStore for PgBackend {
    async fn forget_sessions(&self, ids: &[Uuid]) -> Result<usize, StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        let mut left = std::collections::HashSet::new();
        // Turns first, for the ids of their vectors.
        let turns: Vec<(Uuid, i64)> = sqlx::query_as(
            "DELETE FROM turns WHERE session_id = ANY($1) RETURNING session_id, seq",
        )
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?;
        let mut vectors: Vec<Uuid> = ids.to_vec();
        for (session_id, seq) in turns {
            left.insert(session_id);
            vectors.push(
                TurnRef {
                    session_id,
                    seq: seq as u32,
                }
                .doc_id(),
            );
        }
        for table in ["sessions", "reflection_queue", "dead_letters"] {
            let gone: Vec<Uuid> = sqlx::query_scalar(&format!(
                "DELETE FROM {table} WHERE session_id = ANY($1) RETURNING session_id"
            ))
            .bind(ids)
            .fetch_all(&mut *tx)
            .await?;
            left.extend(gone);
        }
        // A session's own vector (its summary's id is the session's) and
        // its turns'.
        sqlx::query("DELETE FROM embeddings WHERE item_id = ANY($1)")
            .bind(&vectors)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(left.len())
    }

    async fn forgotten_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
        Ok(
            sqlx::query_as("SELECT item_id, forgotten_at FROM forgotten WHERE forgotten_at >= $1")
                .bind(since)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn keep_forgotten(&self, ids: &[Uuid]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        Self::keep_forgotten_in(&mut tx, ids).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn forget_log(&self) -> Result<Vec<ForgetEntry>, StoreError> {
        Ok(self.forgets_after(0).await?.1)
    }

    /// Always none: a forget commits whole or not at all.
    async fn pending_forgets(&self) -> Result<Vec<PendingForget>, StoreError> {
        Ok(Vec::new())
    }

    async fn forget_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        self.remove_user(user_id, agent_id, true).await
    }

    async fn forget_user_again(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        self.remove_user(user_id, agent_id, false).await
    }
}

impl PgBackend {
    /// Removes every record of `user_id` in one transaction, and logs the
    /// forget when `log`.
    async fn remove_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
        log: bool,
    ) -> Result<ForgetReport, StoreError> {
        self.write_turns().await?;
        let mut r = ForgetReport {
            user_id: user_id.to_string(),
            agent_id: agent_id.map(str::to_string),
            ..ForgetReport::default()
        };
        let mut tx = self.pool.begin().await?;
        Self::lock_for_forget(&mut tx, user_id, agent_id).await?;
        let (session_ids, turn_vectors) =
            Self::delete_sessions(&mut tx, user_id, agent_id, &mut r).await?;
        let summary_ids = Self::delete_summaries(&mut tx, user_id, agent_id, &mut r).await?;
        Self::delete_facts_and_topics(&mut tx, user_id, agent_id, &mut r).await?;
        Self::delete_blocks(&mut tx, user_id, agent_id, &mut r).await?;
        let agents: Vec<&str> = r.agents.iter().map(String::as_str).collect();
        // The agents' mixed blocks, rebuilt by the watchdog from what is
        // left.
        sqlx::query("DELETE FROM blocks WHERE agent_id = ANY($1) AND user_id = '' AND label = $2")
            .bind(&agents)
            .bind(label_code(BlockLabel::BackgroundContext))
            .execute(&mut *tx)
            .await?;

        // Vectors and inbox rows of everything removed.
        let removed: Vec<Uuid> = r.removed_ids.iter().copied().collect();
        let with_turns: Vec<Uuid> = removed.iter().chain(&turn_vectors).copied().collect();
        r.vectors = sqlx::query("DELETE FROM embeddings WHERE item_id = ANY($1)")
            .bind(&with_turns)
            .execute(&mut *tx)
            .await?
            .rows_affected() as usize;
        r.inbox_rows = sqlx::query("DELETE FROM rollup_inbox WHERE item_id = ANY($1)")
            .bind(&removed)
            .execute(&mut *tx)
            .await?
            .rows_affected() as usize;
        // What was removed stays removed: a write about it from elsewhere
        // (a call's last turns, a reflection running meanwhile) is dropped.
        let sessions_and_summaries: Vec<Uuid> = r
            .removed_ids
            .iter()
            .copied()
            .filter(|id| session_ids.contains(id) || summary_ids.contains(id))
            .collect();
        Self::keep_forgotten_in(&mut tx, &sessions_and_summaries).await?;
        // The forget itself, by the user's hash.
        if log {
            Self::log_forget(&mut tx, user_id, agent_id).await?;
        }
        // Contexts of these agents are assembled afresh.
        for agent in &agents {
            Self::bump_agent(&mut tx, agent).await?;
        }
        tx.commit().await?;
        Ok(r)
    }

    /// Takes the locks a forget holds: reflections of this user storing
    /// facts meanwhile wait, or come after and find their sessions gone;
    /// then the agents' records, before any block (a reflection of another
    /// user takes them in that order too).
    async fn lock_for_forget(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let agents: Vec<String> = match agent_id {
            Some(a) => vec![a.to_string()],
            None => {
                sqlx::query_scalar(
                    "SELECT agent_id FROM sessions WHERE user_id = $1
                     UNION SELECT agent_id FROM facts WHERE user_id = $1
                     UNION SELECT agent_id FROM summaries WHERE user_id = $1
                     UNION SELECT agent_id FROM topics WHERE user_id = $1
                     UNION SELECT agent_id FROM blocks WHERE source_user_id = $1
                     UNION SELECT agent_id FROM dead_letters WHERE user_id = $1
                     ORDER BY 1",
                )
                .bind(user_id)
                .fetch_all(&mut **tx)
                .await?
            }
        };
        for a in &agents {
            Self::lock_user(tx, a, user_id).await?;
        }
        sqlx::query(
            "SELECT agent_id FROM agents WHERE agent_id = ANY($1)
             ORDER BY agent_id COLLATE \"C\" FOR UPDATE",
        )
        .bind(&agents)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Deletes the user's sessions with their turns, queued reflections
    /// and dead letters; returns the sessions' ids and the ids of their
    /// turns' vectors.
    async fn delete_sessions(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
        r: &mut ForgetReport,
    ) -> Result<(Vec<Uuid>, Vec<Uuid>), StoreError> {
        let sessions: Vec<(Uuid, String)> = sqlx::query_as(&format!(
            "DELETE FROM sessions WHERE user_id = $1 AND {AGENT} RETURNING session_id, agent_id"
        ))
        .bind(user_id)
        .bind(agent_id)
        .fetch_all(&mut **tx)
        .await?;
        let session_ids: Vec<Uuid> = sessions.iter().map(|(id, _)| *id).collect();
        for (id, agent) in sessions {
            r.sessions += 1;
            r.removed_ids.insert(id);
            r.agents.insert(agent);
        }
        let turns: Vec<(Uuid, i64)> = sqlx::query_as(
            "DELETE FROM turns WHERE session_id = ANY($1) RETURNING session_id, seq",
        )
        .bind(&session_ids)
        .fetch_all(&mut **tx)
        .await?;
        r.turns = turns.len();
        let turn_vectors: Vec<Uuid> = turns
            .into_iter()
            .map(|(session_id, seq)| {
                TurnRef {
                    session_id,
                    seq: seq as u32,
                }
                .doc_id()
            })
            .collect();
        r.reflection_jobs = sqlx::query("DELETE FROM reflection_queue WHERE session_id = ANY($1)")
            .bind(&session_ids)
            .execute(&mut **tx)
            .await?
            .rows_affected() as usize;
        // With the dead letters whose session record is gone or damaged.
        r.dead_letters = sqlx::query(&format!(
            "DELETE FROM dead_letters WHERE session_id = ANY($3) OR (user_id = $1 AND {AGENT})"
        ))
        .bind(user_id)
        .bind(agent_id)
        .bind(&session_ids)
        .execute(&mut **tx)
        .await?
        .rows_affected() as usize;
        Ok((session_ids, turn_vectors))
    }

    /// Deletes the user's summaries of every type; returns their ids.
    async fn delete_summaries(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
        r: &mut ForgetReport,
    ) -> Result<HashSet<Uuid>, StoreError> {
        let summaries: Vec<(Uuid, i16, String)> = sqlx::query_as(&format!(
            "DELETE FROM summaries WHERE user_id = $1 AND {AGENT}
             RETURNING summary_id, kind, agent_id"
        ))
        .bind(user_id)
        .bind(agent_id)
        .fetch_all(&mut **tx)
        .await?;
        let summary_ids: HashSet<Uuid> = summaries.iter().map(|(id, _, _)| *id).collect();
        for (id, kind, agent) in summaries {
            match kind {
                0 => r.session_summaries += 1,
                1 => r.daily_summaries += 1,
                2 => r.weekly_summaries += 1,
                _ => r.topic_summaries += 1,
            }
            r.removed_ids.insert(id);
            r.agents.insert(agent);
        }
        Ok(summary_ids)
    }

    /// Deletes the user's facts (with their tombstones) and topics.
    async fn delete_facts_and_topics(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
        r: &mut ForgetReport,
    ) -> Result<(), StoreError> {
        let facts: Vec<(Uuid, String)> = sqlx::query_as(&format!(
            "DELETE FROM facts WHERE user_id = $1 AND {AGENT} RETURNING fact_id, agent_id"
        ))
        .bind(user_id)
        .bind(agent_id)
        .fetch_all(&mut **tx)
        .await?;
        for (id, agent) in facts {
            r.facts += 1;
            r.removed_ids.insert(id);
            r.agents.insert(agent);
        }
        sqlx::query(&format!(
            "DELETE FROM fact_tombstones WHERE user_id = $1 AND {AGENT}"
        ))
        .bind(user_id)
        .bind(agent_id)
        .execute(&mut **tx)
        .await?;
        let topics: Vec<(Uuid, String)> = sqlx::query_as(&format!(
            "DELETE FROM topics WHERE user_id = $1 AND {AGENT} RETURNING topic_id, agent_id"
        ))
        .bind(user_id)
        .bind(agent_id)
        .fetch_all(&mut **tx)
        .await?;
        for (id, agent) in topics {
            r.topics += 1;
            r.removed_ids.insert(id);
            r.agents.insert(agent);
        }
        Ok(())
    }

    /// Deletes the blocks drawn from the user's calls (the agent's copy
    /// too, when the latest was theirs).
    async fn delete_blocks(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
        r: &mut ForgetReport,
    ) -> Result<(), StoreError> {
        let blocks: Vec<String> = sqlx::query_scalar(&format!(
            "DELETE FROM blocks WHERE source_user_id = $1 AND {AGENT} RETURNING agent_id"
        ))
        .bind(user_id)
        .bind(agent_id)
        .fetch_all(&mut **tx)
        .await?;
        for agent in blocks {
            r.blocks += 1;
            r.agents.insert(agent);
        }
        Ok(())
    }

    /// Logs a forget by the user's hash.
    async fn log_forget(
        tx: &mut Tx<'_>,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<(), StoreError> {
        // One forget logs at a time, to its commit: entries commit in
        // the order of their sequence numbers, so a reader that has
        // seen one has seen every entry before it.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || chr(1) || 'forget_log', 0))",
        )
        .execute(&mut **tx)
        .await?;
        sqlx::query("INSERT INTO forget_log (user_hash, agent_id) VALUES ($1, $2)")
            .bind(user_hash(user_id))
            .bind(agent_id.unwrap_or_default())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

impl PgBackend {
    /// Keeps `ids` as forgotten now, and lets go of those forgotten more
    /// than [`FORGOTTEN_FOR`] ago.
    async fn keep_forgotten_in(tx: &mut Tx<'_>, ids: &[Uuid]) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM forgotten WHERE forgotten_at < now() - $1 * interval '1 second'")
            .bind(FORGOTTEN_FOR.as_secs() as f64)
            .execute(&mut **tx)
            .await?;
        sqlx::query(
            "INSERT INTO forgotten (item_id) SELECT * FROM UNNEST($1::uuid[])
             ON CONFLICT (item_id) DO UPDATE SET forgotten_at = now()",
        )
        .bind(ids)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Forget log entries after position `after`, with the last position.
    pub(super) async fn forget_log_after(
        &self,
        after: i64,
    ) -> Result<(i64, Vec<ForgetEntry>), StoreError> {
        let rows: Vec<(i64, Uuid, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT seq, user_hash, agent_id, forgotten_at FROM forget_log WHERE seq > $1 ORDER BY seq",
        )
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        let head = rows.last().map_or(after, |r| r.0);
        let entries = rows
            .into_iter()
            .map(|(_, user_hash, agent, at)| ForgetEntry {
                user_hash,
                agent_id: Some(agent).filter(|a| !a.is_empty()),
                at,
            })
            .collect();
        Ok((head, entries))
    }
}
