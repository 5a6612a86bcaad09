//! The PostgreSQL backend: recall's records in the tables of one schema
//! of a PostgreSQL database, for several recall instances that share one
//! memory.
//!
//! [`PgBackend`] is a pool of connections to the database; each record
//! kind's half of the [`Backend`](super::Backend) traits is an impl in a
//! file of its own, as in the sled backend. The tables (migrations
//! `0001_records.sql` and `0002_instances.sql`, embedded in the binary and
//! applied at start under PostgreSQL's advisory lock) keep each record as
//! the JSON sled stores, beside the columns it is found and ordered by;
//! `cluster` is what several instances over one schema share (heartbeats,
//! claims, leases, the change feed).
//!
//! - **Turns are batched.** `append_turn` puts a turn in memory and
//!   returns; [`Backend::flush`] (the Store actor's group commit, every
//!   `store.flush_interval_ms`) writes the turns waiting in one multi-row
//!   insert. Every other method writes the waiting turns first, so a read
//!   sees every turn written before it and a session's end never reaches
//!   the database before its turns. A batch that fails goes back to the
//!   front of the waiting turns and is written by the next flush.
//! - **Writes that span kinds are one transaction.** Storing facts plans
//!   them against the user's stored facts under a transaction-scoped
//!   advisory lock on the (agent, user), so two instances storing facts of
//!   one user take turns.
//! - **A forget is one transaction**, so none is ever left half done and
//!   [`ForgetStore::pending_forgets`](super::ForgetStore::pending_forgets)
//!   has nothing to finish.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Display;
use std::str::FromStr;
use std::sync::Mutex;

use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::facts::sorted_facts;
use super::*;
use crate::settings::PostgresSettings;

mod cluster;
mod facts;
mod forget;
mod hierarchy;
mod jobs;
mod mirror;
mod sessions;
mod sources;
mod summaries;
mod transfer;

/// The migrations, in order: (version, description, SQL).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "records", include_str!("0001_records.sql")),
    (2, "instances", include_str!("0002_instances.sql")),
    (3, "fact speakers", include_str!("0003_fact_speakers.sql")),
    (4, "listings", include_str!("0004_listings.sql")),
    (5, "forget log", include_str!("0005_forget_log.sql")),
    (6, "mirror ledger", include_str!("0006_mirror_ledger.sql")),
];

/// The newest schema version this build knows.
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

fn migrator() -> Migrator {
    migrator_of(MIGRATIONS)
}

/// A migrator of `migrations` (the first of [`MIGRATIONS`], in a test of
/// an upgrade).
fn migrator_of(migrations: &[(i64, &'static str, &'static str)]) -> Migrator {
    Migrator {
        migrations: std::borrow::Cow::Owned(
            migrations
                .iter()
                .map(|(v, d, sql)| {
                    Migration::new(*v, (*d).into(), MigrationType::Simple, (*sql).into(), false)
                })
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// A turn waiting for the next batch: session, sequence number, JSON.
type PendingTurn = (Uuid, i64, String);

type Tx<'a> = Transaction<'a, Postgres>;

fn body<T: Serialize>(v: &T) -> Result<String, StoreError> {
    Ok(serde_json::to_string(v)?)
}

/// `BlockLabel`'s position, as the `label` column holds it.
fn label_code(label: BlockLabel) -> i16 {
    label as u8 as i16
}

/// `rollup_cursors.level`.
fn level_code(level: Level) -> i16 {
    level as u8 as i16
}

/// A connection URL with its password left out, for messages.
fn redacted(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(o) => format!(
            "postgres://{}@{}:{}/{}",
            o.get_username(),
            o.get_host(),
            o.get_port(),
            o.get_database().unwrap_or_default()
        ),
        Err(_) => "(an unreadable URL)".into(),
    }
}

/// The open database: a pool of connections whose `search_path` is the
/// configured schema.
pub struct PgBackend {
    pool: PgPool,
    schema: String,
    /// Whether reflections queue their summary and facts for the Rollup
    /// actor (off when rollups are).
    pub fill_inbox: bool,
    /// Turns appended and not yet written, oldest first.
    pending: Mutex<Vec<PendingTurn>>,
    /// Turns taken out of `pending` by the batch being written (they go
    /// back if it fails).
    in_flight: std::sync::atomic::AtomicU64,
    /// Held while a batch of turns is being written: a read that must see
    /// them waits for it.
    writing: tokio::sync::Mutex<()>,
    /// Table and key of each record skipped because it did not decode.
    skipped: Skipped,
    /// This instance, in `instances`, on its sessions and its claims.
    instance_id: Uuid,
    /// How long a heartbeat, a claim or a lease holds without renewal.
    lease: Duration,
}

impl PgBackend {
    /// Connects, creates the schema if it is missing and applies the
    /// migrations this build has that the database has not (under
    /// PostgreSQL's advisory lock, so instances starting together take
    /// turns). A database at a newer schema version than this build knows
    /// is refused.
    pub async fn connect(settings: &PostgresSettings) -> Result<PgBackend, StoreError> {
        let backend = Self::open(settings).await?;
        backend.migrate().await?;
        Ok(backend)
    }

    /// Connects without migrating (the schema version is checked by
    /// [`PgBackend::migrate`]).
    pub async fn open(settings: &PostgresSettings) -> Result<PgBackend, StoreError> {
        let target = redacted(&settings.url);
        let options = PgConnectOptions::from_str(&settings.url)
            .map_err(|e| StoreError::Connect {
                target: target.clone(),
                source: e,
            })?
            .options([
                ("search_path", settings.schema.as_str()),
                // Notices ("schema ... already exists, skipping") are not news.
                ("client_min_messages", "warning"),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(settings.pool_size)
            .acquire_timeout(Duration::from_secs(settings.connect_timeout_secs))
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Connect { target, source: e })?;
        Ok(PgBackend {
            pool,
            schema: settings.schema.clone(),
            fill_inbox: true,
            pending: Mutex::new(Vec::new()),
            in_flight: Default::default(),
            writing: tokio::sync::Mutex::new(()),
            skipped: Default::default(),
            instance_id: Uuid::new_v4(),
            lease: Duration::from_secs(settings.lease_secs),
        })
    }

    /// Creates the schema if it is missing and applies the pending
    /// migrations. Returns how many were applied.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        // The name is checked by the settings (letters, digits, `_`).
        let create = format!("CREATE SCHEMA IF NOT EXISTS \"{}\"", self.schema);
        if let Err(e) = sqlx::query(&create).execute(&self.pool).await {
            // Two instances creating it at once: one of them wins.
            let raced = e
                .as_database_error()
                .and_then(|d| d.code())
                .is_some_and(|c| c == "23505" || c == "42P06");
            if !raced {
                return Err(e.into());
            }
        }
        let before = self.applied().await?;
        migrator().run(&self.pool).await.map_err(|e| match e {
            MigrateError::VersionMissing(found) => StoreError::NewerDatabase {
                schema: self.schema.clone(),
                found,
                known: PG_SCHEMA_VERSION,
            },
            other => StoreError::Migrate(other),
        })?;
        Ok(self.applied().await?.saturating_sub(before))
    }

    /// How many migrations the schema has (0 before the first).
    async fn applied(&self) -> Result<usize, StoreError> {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
              WHERE table_schema = $1 AND table_name = '_sqlx_migrations')",
        )
        .bind(&self.schema)
        .fetch_one(&self.pool)
        .await?;
        if !exists {
            return Ok(0);
        }
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(&self.pool)
            .await?;
        Ok(n as usize)
    }

    /// The schema's newest applied migration (0 before the first).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        if self.applied().await? == 0 {
            return Ok(0);
        }
        let v: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.pool)
                .await?;
        Ok(v.unwrap_or(0))
    }

    /// The connection pool (tests and tools).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema the records are in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Turns appended and not yet written.
    pub fn pending_turns(&self) -> usize {
        self.lock_pending().len()
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Vec<PendingTurn>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the turns waiting, in one statement. Called first by every
    /// method but `append_turn`: a read sees the turns written before it,
    /// a session's end follows its turns.
    pub(super) async fn write_turns(&self) -> Result<(), StoreError> {
        if self.lock_pending().is_empty() {
            // None waiting, and none being written (or a batch taken out
            // of `pending` is still on its way, and this must wait for it).
            if self.writing.try_lock().is_ok() {
                return Ok(());
            }
        }
        let _writing = self.writing.lock().await;
        let batch = {
            let mut pending = self.lock_pending();
            // (Set under the lock: a count never misses the batch.)
            self.in_flight
                .store(pending.len() as u64, std::sync::atomic::Ordering::Release);
            std::mem::take(&mut *pending)
        };
        if batch.is_empty() {
            return Ok(());
        }
        // Out of the count once written or back in `pending` (or dropped
        // with a cancelled write).
        struct InFlight<'a>(&'a std::sync::atomic::AtomicU64);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.store(0, std::sync::atomic::Ordering::Release);
            }
        }
        let in_flight = InFlight(&self.in_flight);
        let started = std::time::Instant::now();
        match insert_turns(&self.pool, &batch).await {
            Ok(()) => {
                drop(in_flight);
                metrics::histogram!("recall_store_flush_seconds")
                    .record(started.elapsed().as_secs_f64());
                Ok(())
            }
            Err(e) => {
                // Back in front of what came meanwhile: the next flush
                // tries them again, in order.
                let mut pending = self.lock_pending();
                let newer = std::mem::replace(&mut *pending, batch);
                pending.extend(newer);
                drop(in_flight);
                Err(e)
            }
        }
    }

    /// A stored record, decoded. One that does not decode is skipped with a
    /// warning and counted, as in sled.
    fn decode<T: DeserializeOwned>(&self, table: &str, key: &dyn Display, json: &str) -> Option<T> {
        match serde_json::from_str(json) {
            Ok(v) => Some(v),
            Err(err) => {
                self.skip(table, key, &err.to_string());
                None
            }
        }
    }

    /// The records of `table` a query of (key, JSON) rows selects, after
    /// the turns waiting are written.
    async fn records<T, K>(
        &self,
        table: &str,
        query: sqlx::query::QueryAs<'_, Postgres, (K, String), sqlx::postgres::PgArguments>,
    ) -> Result<Vec<T>, StoreError>
    where
        T: DeserializeOwned,
        K: Display + Send + Unpin + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        self.write_turns().await?;
        let rows = query.fetch_all(&self.pool).await?;
        Ok(self.decode_all(table, rows))
    }

    fn decode_all<T: DeserializeOwned, K: Display>(
        &self,
        table: &str,
        rows: Vec<(K, String)>,
    ) -> Vec<T> {
        rows.into_iter()
            .filter_map(|(k, json)| self.decode(table, &k, &json))
            .collect()
    }

    fn skip(&self, table: &str, key: &dyn Display, error: &str) {
        let key = key.to_string();
        self.skipped.note(table, key.as_bytes(), &key, error);
    }

    /// Locks an (agent, user)'s facts until the transaction ends.
    async fn lock_user(tx: &mut Tx<'_>, agent_id: &str, user_id: &str) -> Result<(), StoreError> {
        // Keyed by schema, agent and user (deployments sharing a database
        // lock apart); a collision of the hash only makes two wait.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || chr(1) || $1, 0))",
        )
        .bind(format!("{agent_id}\u{1}{user_id}"))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Moves an agent's summary version (its context is assembled afresh).
    async fn bump_agent(tx: &mut Tx<'_>, agent_id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO agents (agent_id, summary_version) VALUES ($1, 1)
             ON CONFLICT (agent_id) DO UPDATE SET summary_version = agents.summary_version + 1",
        )
        .bind(agent_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Whether a summary with this id is stored.
    async fn has_summary(tx: &mut Tx<'_>, id: Uuid) -> Result<bool, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM summaries WHERE summary_id = $1)")
                .bind(id)
                .fetch_one(&mut **tx)
                .await?,
        )
    }

    /// Inserts or replaces summaries.
    async fn put_summaries(
        tx: &mut Tx<'_>,
        summaries: &[&ConversationSummary],
    ) -> Result<(), StoreError> {
        for s in summaries {
            sqlx::query(
                "INSERT INTO summaries
                   (summary_id, agent_id, user_id, kind, period_start, period_end, current, body)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8::json)
                 ON CONFLICT (summary_id) DO UPDATE SET agent_id = $2, user_id = $3, kind = $4,
                   period_start = $5, period_end = $6, current = $7, body = $8::json",
            )
            .bind(s.summary_id)
            .bind(&s.agent_id)
            .bind(&s.user_id)
            .bind(s.summary_type.tag() as i16)
            .bind(s.period_start)
            .bind(s.period_end)
            .bind(s.is_current())
            .bind(body(*s)?)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Inserts or replaces facts.
    async fn put_facts(tx: &mut Tx<'_>, facts: &[&FactRecord]) -> Result<(), StoreError> {
        for f in facts {
            sqlx::query(
                "INSERT INTO facts (fact_id, agent_id, user_id, shared, extracted_at, body, speaker)
                 VALUES ($1, $2, $3, $4, $5, $6::json, $7)
                 ON CONFLICT (fact_id) DO UPDATE
                     SET shared = $4, extracted_at = $5, body = $6::json, speaker = $7",
            )
            .bind(f.fact_id)
            .bind(&f.agent_id)
            .bind(&f.user_id)
            .bind(f.visibility == Visibility::Shared)
            .bind(f.extracted_at)
            .bind(body(f)?)
            .bind(f.speaker.as_str())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Inserts or replaces a block under `user_id` ('' for the agent's).
    async fn put_block_as(
        tx: &mut Tx<'_>,
        block: &MemoryBlock,
        user_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO blocks (agent_id, user_id, label, source_user_id, body)
             VALUES ($1, $2, $3, $4, $5::json)
             ON CONFLICT (agent_id, user_id, label)
             DO UPDATE SET source_user_id = $4, body = $5::json",
        )
        .bind(&block.agent_id)
        .bind(user_id)
        .bind(label_code(block.label))
        .bind(block.source_user_id.as_deref())
        .bind(body(block)?)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Queues inbox rows for the Rollup actor (none with rollups off).
    async fn put_inbox(
        &self,
        tx: &mut Tx<'_>,
        summary: &ConversationSummary,
        facts: &[FactRecord],
    ) -> Result<(), StoreError> {
        if !self.fill_inbox {
            return Ok(());
        }
        let rows = std::iter::once((
            keys::inbox(
                summary.period_start,
                keys::INBOX_SUMMARY,
                summary.summary_id,
            ),
            summary.summary_id,
        ))
        .chain(facts.iter().map(|f| {
            (
                keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id),
                f.fact_id,
            )
        }));
        Self::put_inbox_rows(tx, &summary.agent_id, rows).await
    }

    /// Queues new facts stated outside a call for the Rollup actor (none
    /// with rollups off).
    async fn put_fact_inbox(
        &self,
        tx: &mut Tx<'_>,
        agent_id: &str,
        facts: &[FactRecord],
    ) -> Result<(), StoreError> {
        if !self.fill_inbox || facts.is_empty() {
            return Ok(());
        }
        let rows = facts.iter().map(|f| {
            (
                keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id),
                f.fact_id,
            )
        });
        Self::put_inbox_rows(tx, agent_id, rows).await
    }

    /// Inserts inbox rows (key, item) of an agent.
    async fn put_inbox_rows(
        tx: &mut Tx<'_>,
        agent_id: &str,
        rows: impl Iterator<Item = ([u8; 25], Uuid)>,
    ) -> Result<(), StoreError> {
        let (keys, ids): (Vec<Vec<u8>>, Vec<Uuid>) = rows.map(|(k, id)| (k.to_vec(), id)).unzip();
        sqlx::query(
            "INSERT INTO rollup_inbox (key, item_id, agent_id)
             SELECT k, i, $3 FROM UNNEST($1::bytea[], $2::uuid[]) AS x(k, i)
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(&keys)
        .bind(&ids)
        .bind(agent_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// One user's facts, current and earlier, oldest first, read in a
    /// transaction.
    async fn user_facts_in(
        &self,
        tx: &mut Tx<'_>,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<FactRecord>, StoreError> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT fact_id, body::text FROM facts WHERE agent_id = $1 AND user_id = $2",
        )
        .bind(agent_id)
        .bind(user_id)
        .fetch_all(&mut **tx)
        .await?;
        Ok(sorted_facts(self.decode_all("facts", rows)))
    }

    /// What storing `facts` changes ([`plan_fact_changes`]), planned in a
    /// transaction that holds the user's lock.
    async fn plan_facts_in(
        &self,
        tx: &mut Tx<'_>,
        facts: &[Fact],
        stated_at: DateTime<Utc>,
        tombstoned: bool,
    ) -> Result<FactChanges, StoreError> {
        let Some(first) = facts.first() else {
            return Ok(FactChanges::default());
        };
        let (agent, user) = (first.agent_id.as_str(), first.user_id.as_str());
        let existing = self.user_facts_in(tx, agent, user).await?;
        let tombs: HashSet<Uuid> = if tombstoned {
            sqlx::query_scalar(
                "SELECT content_hash FROM fact_tombstones WHERE agent_id = $1 AND user_id = $2",
            )
            .bind(agent)
            .bind(user)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect()
        } else {
            HashSet::new()
        };
        let calls: Vec<Uuid> = existing
            .iter()
            .filter(|f| f.history.stated_at.is_none())
            .filter_map(|f| f.source_session_id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let started: HashMap<Uuid, DateTime<Utc>> = if calls.is_empty() {
            HashMap::new()
        } else {
            sqlx::query_as("SELECT session_id, started_at FROM sessions WHERE session_id = ANY($1)")
                .bind(&calls)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .collect()
        };
        plan_fact_changes(
            existing,
            facts,
            stated_at,
            |f| Ok(tombs.contains(&keys::tombstone_hash(&spoken_key(f)))),
            |id| Ok(started.get(&id).copied()),
        )
    }
}

/// Writes a batch of turns in one statement (a turn written again keeps
/// the latest value, as in sled).
pub(super) async fn insert_turns(pool: &PgPool, batch: &[PendingTurn]) -> Result<(), StoreError> {
    // Later copies of a key win: one statement cannot update a row twice.
    let mut last: HashMap<(Uuid, i64), usize> = HashMap::with_capacity(batch.len());
    for (i, (id, seq, _)) in batch.iter().enumerate() {
        last.insert((*id, *seq), i);
    }
    let mut ids = Vec::with_capacity(last.len());
    let mut seqs = Vec::with_capacity(last.len());
    let mut bodies = Vec::with_capacity(last.len());
    for (i, (id, seq, json)) in batch.iter().enumerate() {
        if last.get(&(*id, *seq)) == Some(&i) {
            ids.push(*id);
            seqs.push(*seq);
            bodies.push(json.as_str());
        }
    }
    // Not for a session a forget removed (its call went on elsewhere): the
    // sessions are held (a forget deleting one waits for this to commit,
    // then deletes these turns too), and a turn whose session is gone is
    // written unless a forget removed it.
    let mut tx = pool.begin().await?;
    let sessions: Vec<Uuid> = last
        .keys()
        .map(|(id, _)| *id)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let held: Vec<Uuid> = sqlx::query_scalar(
        "SELECT session_id FROM sessions WHERE session_id = ANY($1) FOR KEY SHARE",
    )
    .bind(&sessions)
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO turns (session_id, seq, body)
         SELECT i, s, b::json FROM UNNEST($1::uuid[], $2::int8[], $3::text[]) AS x(i, s, b)
         WHERE i = ANY($4) OR NOT EXISTS (SELECT 1 FROM forgotten WHERE item_id = i)
         ON CONFLICT (session_id, seq) DO UPDATE SET body = EXCLUDED.body",
    )
    .bind(&ids)
    .bind(&seqs)
    .bind(&bodies)
    .bind(&held)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

#[async_trait::async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    /// Writes the turns waiting (every other write is committed when it
    /// returns).
    async fn flush(&self) -> Result<(), StoreError> {
        self.write_turns().await
    }

    fn skipped_records(&self) -> u64 {
        self.skipped.count()
    }

    fn buffered_turns(&self) -> u64 {
        let pending = self.lock_pending();
        pending.len() as u64 + self.in_flight.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
