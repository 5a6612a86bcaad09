//! Several instances over one schema: heartbeats, the claims on
//! reflections and open sessions an instance that died leaves, leases on
//! work one instance at a time does, and the change feed (LISTEN/NOTIFY)
//! that keeps every instance's cached contexts and search indexes in step.

use super::*;
use crate::store::backend::{Change, RemoteChange};

/// The channel changes are announced on (one per database: the payload
/// names the schema).
const CHANNEL: &str = "recall_changes";

/// A change as it travels: schema, instance, agent, user, parts.
#[derive(Serialize, serde::Deserialize)]
struct Notice {
    s: String,
    i: Uuid,
    a: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<String>,
    p: u8,
    /// A forget of user `u` (with agent `a`, or every agent when `a` is
    /// empty), not a change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    f: bool,
}

/// Open sessions taken over at once (the rest at the next look).
const ORPHANS_AT_ONCE: i64 = 200;

/// A notification's payload must stay under 8000 bytes.
const MAX_PAYLOAD: usize = 7_900;

impl PgBackend {
    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }

    /// This instance's id (in `instances`, on its sessions and claims).
    pub fn instance_id(&self) -> Uuid {
        self.instance_id
    }

    pub(super) async fn forgotten(tx: &mut Tx<'_>, ids: &[Uuid]) -> Result<bool, StoreError> {
        if ids.is_empty() {
            return Ok(false);
        }
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM forgotten WHERE item_id = ANY($1))")
                .bind(ids)
                .fetch_one(&mut **tx)
                .await?,
        )
    }
}

/// Reads notifications until the listener's connection cannot be had
/// again; a connection lost (and made again) may have lost notifications:
/// [`RemoteChange::Lost`].
async fn listen(
    mut listener: sqlx::postgres::PgListener,
    schema: String,
    me: Uuid,
    out: tokio::sync::mpsc::UnboundedSender<RemoteChange>,
) {
    loop {
        let next = listener.try_recv().await;
        let change = match next {
            Ok(Some(n)) => match serde_json::from_str::<Notice>(n.payload()) {
                Ok(notice) if notice.s == schema && notice.i != me && notice.f => {
                    let Some(user_id) = notice.u else {
                        warn!("a forget notification without its user");
                        continue;
                    };
                    RemoteChange::Forgotten {
                        user_id,
                        agent_id: Some(notice.a).filter(|a| !a.is_empty()),
                    }
                }
                Ok(notice) if notice.s == schema && notice.i != me => {
                    RemoteChange::Changed(Change {
                        agent_id: notice.a,
                        user_id: notice.u,
                        parts: Parts::from_bits(notice.p),
                    })
                }
                Ok(_) => continue,
                Err(err) => {
                    warn!(error = %err, "unreadable change notification");
                    RemoteChange::Lost
                }
            },
            // The connection was lost and is made again at the next call.
            Ok(None) => RemoteChange::Lost,
            Err(err) => {
                warn!(error = %err, "the change feed's connection failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                RemoteChange::Lost
            }
        };
        if out.send(change).is_err() {
            return;
        }
    }
}

#[async_trait::async_trait]
impl super::super::backend::ClusterStore for PgBackend {
    fn shared(&self) -> bool {
        true
    }

    fn lease_time(&self) -> Option<Duration> {
        Some(self.lease)
    }

    async fn heartbeat(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO instances (instance_id, lease_secs) VALUES ($1, $2)
             ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now(), lease_secs = $2",
        )
        .bind(self.instance_id)
        .bind(self.lease.as_secs() as i32)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE reflection_queue SET claimed_until = now() + make_interval(secs => $2)
             WHERE claimed_by = $1",
        )
        .bind(self.instance_id)
        .bind(self.lease_secs())
        .execute(&mut *tx)
        .await?;
        // Instances gone for ten leases are forgotten.
        sqlx::query(
            "DELETE FROM instances
             WHERE heartbeat_at < now() - make_interval(secs => lease_secs * 10)",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn orphaned_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.write_turns().await?;
        // Taken over in one statement: of two instances looking at once,
        // the second finds them the first's.
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "UPDATE sessions s SET instance_id = $1
             WHERE s.session_id IN (
                 SELECT o.session_id FROM sessions o
                 WHERE o.open AND o.instance_id IS DISTINCT FROM $1 AND NOT EXISTS (
                     SELECT 1 FROM instances i WHERE i.instance_id = o.instance_id
                     AND i.heartbeat_at > now() - make_interval(secs => i.lease_secs))
                 ORDER BY o.started_at LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING s.session_id, s.body::text",
        )
        .bind(self.instance_id)
        .bind(ORPHANS_AT_ONCE)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<SessionRecord> = self.decode_all("sessions", rows);
        out.sort_by_key(|s| (s.started_at, s.session_id));
        Ok(out)
    }

    async fn release_sessions(&self, ids: &[Uuid]) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET instance_id = NULL WHERE session_id = ANY($1) AND open")
            .bind(ids)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn claim_jobs(&self, limit: usize) -> Result<Vec<ReflectionJob>, StoreError> {
        self.write_turns().await?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "UPDATE reflection_queue q
             SET claimed_by = $1, claimed_until = now() + make_interval(secs => $2)
             WHERE q.session_id IN (
                 SELECT session_id FROM reflection_queue
                 WHERE claimed_by IS NULL OR claimed_until < now()
                 ORDER BY enqueued_at, session_id
                 LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING q.session_id, q.body::text",
        )
        .bind(self.instance_id)
        .bind(self.lease_secs())
        .bind(limit.min(i64::MAX as usize) as i64)
        .fetch_all(&self.pool)
        .await?;
        let mut jobs: Vec<ReflectionJob> = self.decode_all("reflection_queue", rows);
        jobs.sort_by_key(|j| (j.enqueued_at, j.session_id));
        Ok(jobs)
    }

    async fn take_lease(&self, name: &str) -> Result<bool, StoreError> {
        let held: Option<Uuid> = sqlx::query_scalar(
            "INSERT INTO leases (name, holder, expires_at)
             VALUES ($1, $2, now() + make_interval(secs => $3))
             ON CONFLICT (name) DO UPDATE
             SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
             WHERE leases.holder = EXCLUDED.holder OR leases.expires_at < now()
             RETURNING holder",
        )
        .bind(name)
        .bind(self.instance_id)
        .bind(self.lease_secs())
        .fetch_optional(&self.pool)
        .await?;
        Ok(held.is_some())
    }

    async fn retire(&self) -> Result<(), StoreError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM leases WHERE holder = $1")
            .bind(self.instance_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "UPDATE reflection_queue SET claimed_by = NULL, claimed_until = NULL
             WHERE claimed_by = $1",
        )
        .bind(self.instance_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM instances WHERE instance_id = $1")
            .bind(self.instance_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn publish(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut payloads = Vec::with_capacity(changes.len());
        for c in changes {
            let mut notice = Notice {
                s: self.schema.clone(),
                i: self.instance_id,
                a: c.agent_id.clone(),
                u: c.user_id.clone(),
                p: c.parts.bits(),
                f: false,
            };
            let mut text = serde_json::to_string(&notice)?;
            if text.len() > MAX_PAYLOAD {
                // Too long to name the user: every user of the agent.
                notice.u = None;
                text = serde_json::to_string(&notice)?;
            }
            if text.len() <= MAX_PAYLOAD {
                payloads.push(text);
            } else {
                warn!(agent_id = %c.agent_id, "an agent id too long to announce a change of");
            }
        }
        if payloads.is_empty() {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, p) FROM UNNEST($2::text[]) AS x(p)")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn forgets_after(&self, after: i64) -> Result<(i64, Vec<ForgetEntry>), StoreError> {
        self.forget_log_after(after).await
    }

    async fn forget_log_head(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM forget_log")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn publish_forget(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let notice = Notice {
            s: self.schema.clone(),
            i: self.instance_id,
            a: agent_id.unwrap_or_default().to_string(),
            u: Some(user_id.to_string()),
            p: 0,
            f: true,
        };
        // (ids are at most 256 bytes each: always under the payload limit)
        let text = serde_json::to_string(&notice)?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(text)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn follow(
        &self,
    ) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<RemoteChange>>, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(listen(listener, self.schema.clone(), self.instance_id, tx));
        Ok(Some(rx))
    }
}
