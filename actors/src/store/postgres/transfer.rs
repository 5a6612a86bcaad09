//! A schema's records to an export, and an export into an empty schema
//! (see [`super::super::transfer`]).
//!
//! An export reads every table in one `REPEATABLE READ` transaction, so it
//! is one moment's records even while instances serve; an import is one
//! transaction, refused while an instance serves the schema.

use futures::TryStreamExt;

use super::super::transfer::{
    count, damaged, decode_for_export, Counts, Damaged, Record, Sink, Source, TransferError,
    IMPORT_BATCH, PORTABLE_META,
};
use super::summaries::{AgentRow, AGENT_COLUMNS};
use super::*;

/// The tables that hold records (not the instances' own: instances,
/// leases, forget markers).
const RECORD_TABLES: [&str; 14] = [
    "agents",
    "blocks",
    "sessions",
    "turns",
    "summaries",
    "facts",
    "fact_tombstones",
    "topics",
    "embeddings",
    "reflection_queue",
    "dead_letters",
    "rollup_cursors",
    "rollup_inbox",
    "forget_log",
];

/// Reads `sql`'s (key, JSON) rows as records of `table`, one at a time.
async fn export_bodies<K, T>(
    tx: &mut Tx<'_>,
    sql: &str,
    table: &str,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
    wrap: impl Fn(T) -> Record,
) -> Result<(), TransferError>
where
    K: Display + Send + Unpin + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    T: DeserializeOwned,
{
    let mut rows = sqlx::query_as::<_, (K, String)>(sql).fetch(&mut **tx);
    while let Some((key, json)) = rows.try_next().await? {
        if let Some(v) = decode_for_export(table, &key, json.as_bytes(), skip.as_deref_mut())? {
            sink(wrap(v))?;
        }
    }
    Ok(())
}

/// An import's records waiting to be written, a few kinds at once.
#[derive(Default)]
struct Batches {
    held: usize,
    agents: Vec<(String, AgentMeta)>,
    blocks: Vec<(String, MemoryBlock)>,
    sessions: Vec<SessionRecord>,
    turns: Vec<(Uuid, i64, String)>,
    summaries: Vec<ConversationSummary>,
    facts: Vec<FactRecord>,
    tombstones: Vec<(String, String, Uuid)>,
    topics: Vec<Topic>,
    vectors: Vec<(Uuid, Vec<u8>)>,
    jobs: Vec<ReflectionJob>,
    dead: Vec<DeadLetter>,
    cursors: Vec<(String, i16, NaiveDate)>,
    inbox: Vec<(Vec<u8>, Uuid, String)>,
    meta: Vec<String>,
    forgets: Vec<ForgetEntry>,
}

/// An import's failed write: a key taken twice is the export's doing.
fn duplicate(e: StoreError) -> TransferError {
    if let StoreError::Postgres(sqlx::Error::Database(d)) = &e {
        if d.code().as_deref() == Some("23505") {
            let detail = d
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|p| p.detail())
                .unwrap_or_default()
                .to_string();
            return TransferError::Duplicate {
                what: format!("a record of {} ({detail})", d.table().unwrap_or("a table")),
            };
        }
    }
    e.into()
}

/// Takes the rows out of `$rows` and gives their columns, one `Vec` each
/// (at most ten).
macro_rules! columns {
    ($rows:expr, |$r:pat_param| ($($col:expr),+ $(,)?)) => {{
        let rows = std::mem::take(&mut $rows);
        let n = rows.len();
        let mut cols = ($(columns!(@vec n, $col)),+ ,);
        for $r in rows {
            columns!(@push cols, [$($col),+], [0 1 2 3 4 5 6 7 8 9]);
        }
        cols
    }};
    (@vec $n:ident, $col:expr) => {
        Vec::with_capacity($n)
    };
    (@push $cols:ident, [], [$($rest:tt)*]) => {};
    (@push $cols:ident, [$col:expr $(, $more:expr)*], [$i:tt $($rest:tt)*]) => {
        $cols.$i.push($col);
        columns!(@push $cols, [$($more),*], [$($rest)*]);
    };
}

impl Batches {
    fn push(&mut self, record: Record) -> Result<(), StoreError> {
        self.held += 1;
        match record {
            Record::Meta { key } => self.meta.push(key),
            Record::Forget(e) => self.forgets.push(e),
            Record::Agent { agent_id, meta } => self.agents.push((agent_id, meta)),
            Record::Block { user_id, block } => self.blocks.push((user_id, block)),
            Record::Session(s) => self.sessions.push(s),
            Record::Turn {
                session_id,
                seq,
                turn,
            } => self.turns.push((session_id, seq as i64, body(&turn)?)),
            Record::Summary(s) => self.summaries.push(s),
            Record::Fact(f) => self.facts.push(f),
            Record::Tombstone {
                agent_id,
                user_id,
                content_hash,
            } => self.tombstones.push((agent_id, user_id, content_hash)),
            Record::Topic(t) => self.topics.push(t),
            Record::Vector {
                item_id,
                embedder,
                values,
            } => self
                .vectors
                .push((item_id, StoredVector { embedder, values }.encode())),
            Record::Job(j) => self.jobs.push(j),
            Record::DeadLetter(d) => self.dead.push(d),
            Record::RollupCursor {
                agent_id,
                level,
                period,
            } => self.cursors.push((agent_id, level_code(level), period)),
            Record::Inbox {
                at,
                item,
                item_id,
                agent_id,
            } => self.inbox.push((
                keys::inbox(at, item.code(), item_id).to_vec(),
                item_id,
                agent_id,
            )),
        }
        Ok(())
    }

    /// Writes what is held, one statement per kind.
    async fn write(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.held == 0 {
            return Ok(());
        }
        self.held = 0;
        self.insert_agents(tx).await?;
        self.insert_blocks(tx).await?;
        self.insert_sessions(tx).await?;
        self.insert_turns(tx).await?;
        self.insert_summaries(tx).await?;
        self.insert_facts(tx).await?;
        self.insert_tombstones(tx).await?;
        self.insert_topics(tx).await?;
        self.insert_vectors(tx).await?;
        self.insert_jobs(tx).await?;
        self.insert_dead_letters(tx).await?;
        self.insert_cursors(tx).await?;
        self.insert_forgets(tx).await?;
        self.insert_meta(tx).await?;
        self.insert_inbox(tx).await?;
        Ok(())
    }

    /// The agents' bookkeeping.
    async fn insert_agents(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.agents.is_empty() {
            return Ok(());
        }
        let mut lines = Vec::with_capacity(self.agents.len());
        for (_, meta) in &self.agents {
            lines.push(body(&meta.persistent_context)?);
        }
        let (ids, summary, context, expires) = columns!(self.agents, |(id, m)| (
            id,
            m.summary_version as i64,
            m.context_version as i64,
            m.context_expires_at
        ));
        sqlx::query(
            "INSERT INTO agents
               (agent_id, summary_version, context_version, persistent_context, context_expires_at)
             SELECT a, s, c, p::json, e
             FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::text[], $5::timestamptz[])
               AS x(a, s, c, p, e)",
        )
        .bind(&ids)
        .bind(&summary)
        .bind(&context)
        .bind(&lines)
        .bind(&expires)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Blocks, agent-wide and users' own.
    async fn insert_blocks(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.blocks.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.blocks.len());
        for (_, b) in &self.blocks {
            bodies.push(body(b)?);
        }
        let (agents, users, labels, sources) = columns!(self.blocks, |(user, b)| (
            b.agent_id,
            user,
            label_code(b.label),
            b.source_user_id
        ));
        sqlx::query(
            "INSERT INTO blocks (agent_id, user_id, label, source_user_id, body)
             SELECT a, u, l, s, b::json
             FROM UNNEST($1::text[], $2::text[], $3::int2[], $4::text[], $5::text[])
               AS x(a, u, l, s, b)",
        )
        .bind(&agents)
        .bind(&users)
        .bind(&labels)
        .bind(&sources)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Session records.
    async fn insert_sessions(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.sessions.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.sessions.len());
        for s in &self.sessions {
            bodies.push(body(s)?);
        }
        let (ids, agents, users, started, ended, open) = columns!(self.sessions, |s| (
            s.session_id,
            s.agent_id.clone(),
            s.user_id.clone(),
            s.started_at,
            s.ended_at,
            s.is_open()
        ));
        sqlx::query(
            "INSERT INTO sessions
               (session_id, agent_id, user_id, started_at, ended_at, open, body)
             SELECT i, a, u, s, e, o, b::json
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::timestamptz[],
                         $5::timestamptz[], $6::bool[], $7::text[])
               AS x(i, a, u, s, e, o, b)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&users)
        .bind(&started)
        .bind(&ended)
        .bind(&open)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Turns.
    async fn insert_turns(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.turns.is_empty() {
            return Ok(());
        }
        let (ids, seqs, bodies) = columns!(self.turns, |(i, s, b)| (i, s, b));
        sqlx::query(
            "INSERT INTO turns (session_id, seq, body)
             SELECT i, s, b::json FROM UNNEST($1::uuid[], $2::int8[], $3::text[]) AS x(i, s, b)",
        )
        .bind(&ids)
        .bind(&seqs)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Summaries of every type.
    async fn insert_summaries(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.summaries.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.summaries.len());
        for s in &self.summaries {
            bodies.push(body(s)?);
        }
        let (ids, agents, users, kinds, starts, ends, current) = columns!(self.summaries, |s| (
            s.summary_id,
            s.agent_id.clone(),
            s.user_id.clone(),
            s.summary_type.tag() as i16,
            s.period_start,
            s.period_end,
            s.is_current()
        ));
        sqlx::query(
            "INSERT INTO summaries
               (summary_id, agent_id, user_id, kind, period_start, period_end, current, body)
             SELECT i, a, u, k, s, e, c, b::json
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int2[], $5::timestamptz[],
                         $6::timestamptz[], $7::bool[], $8::text[])
               AS x(i, a, u, k, s, e, c, b)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&users)
        .bind(&kinds)
        .bind(&starts)
        .bind(&ends)
        .bind(&current)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Facts.
    async fn insert_facts(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.facts.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.facts.len());
        for f in &self.facts {
            bodies.push(body(f)?);
        }
        let (ids, agents, users, shared, extracted, speakers) = columns!(self.facts, |f| (
            f.fact_id,
            f.agent_id.clone(),
            f.user_id.clone(),
            f.visibility == Visibility::Shared,
            f.extracted_at,
            f.speaker.as_str()
        ));
        sqlx::query(
            "INSERT INTO facts (fact_id, agent_id, user_id, shared, extracted_at, body, speaker)
             SELECT i, a, u, s, e, b::json, w
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bool[], $5::timestamptz[],
                         $6::text[], $7::text[])
               AS x(i, a, u, s, e, b, w)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&users)
        .bind(&shared)
        .bind(&extracted)
        .bind(&bodies)
        .bind(&speakers)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Deleted facts' tombstones.
    async fn insert_tombstones(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.tombstones.is_empty() {
            return Ok(());
        }
        let (agents, users, hashes) = columns!(self.tombstones, |(a, u, h)| (a, u, h));
        sqlx::query(
            "INSERT INTO fact_tombstones (agent_id, user_id, content_hash)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::uuid[])",
        )
        .bind(&agents)
        .bind(&users)
        .bind(&hashes)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Topics.
    async fn insert_topics(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.topics.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.topics.len());
        for t in &self.topics {
            bodies.push(body(t)?);
        }
        let (ids, agents, users, created) = columns!(self.topics, |t| (
            t.topic_id,
            t.agent_id.clone(),
            t.user_id.clone(),
            t.created_at
        ));
        sqlx::query(
            "INSERT INTO topics (topic_id, agent_id, user_id, created_at, body)
             SELECT i, a, u, c, b::json
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[])
               AS x(i, a, u, c, b)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&users)
        .bind(&created)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Vectors.
    async fn insert_vectors(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.vectors.is_empty() {
            return Ok(());
        }
        let (ids, vectors) = columns!(self.vectors, |(i, v)| (i, v));
        sqlx::query(
            "INSERT INTO embeddings (item_id, vector)
             SELECT * FROM UNNEST($1::uuid[], $2::bytea[])",
        )
        .bind(&ids)
        .bind(&vectors)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Queued reflections.
    async fn insert_jobs(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.jobs.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.jobs.len());
        for j in &self.jobs {
            bodies.push(body(j)?);
        }
        let (ids, agents, enqueued) =
            columns!(self.jobs, |j| (j.session_id, j.agent_id, j.enqueued_at));
        sqlx::query(
            "INSERT INTO reflection_queue (session_id, agent_id, enqueued_at, body)
             SELECT i, a, e, b::json
             FROM UNNEST($1::uuid[], $2::text[], $3::timestamptz[], $4::text[])
               AS x(i, a, e, b)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&enqueued)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Dead letters.
    async fn insert_dead_letters(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.dead.is_empty() {
            return Ok(());
        }
        let mut bodies = Vec::with_capacity(self.dead.len());
        for d in &self.dead {
            bodies.push(body(d)?);
        }
        let (ids, agents, users, failed) = columns!(self.dead, |d| (
            d.session_id,
            d.agent_id,
            d.user_id,
            d.failed_at
        ));
        sqlx::query(
            "INSERT INTO dead_letters (session_id, agent_id, user_id, failed_at, body)
             SELECT i, a, u, f, b::json
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[])
               AS x(i, a, u, f, b)",
        )
        .bind(&ids)
        .bind(&agents)
        .bind(&users)
        .bind(&failed)
        .bind(&bodies)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Rollup cursors.
    async fn insert_cursors(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.cursors.is_empty() {
            return Ok(());
        }
        let (agents, levels, periods) = columns!(self.cursors, |(a, l, p)| (a, l, p));
        sqlx::query(
            "INSERT INTO rollup_cursors (agent_id, level, period)
             SELECT * FROM UNNEST($1::text[], $2::int2[], $3::date[])",
        )
        .bind(&agents)
        .bind(&levels)
        .bind(&periods)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Forget log entries, in their order.
    async fn insert_forgets(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.forgets.is_empty() {
            return Ok(());
        }
        let (hashes, agents, ats) = columns!(self.forgets, |e| (
            e.user_hash,
            e.agent_id.unwrap_or_default(),
            e.at
        ));
        sqlx::query(
            "INSERT INTO forget_log (user_hash, agent_id, forgotten_at)
             SELECT h, a, t FROM UNNEST($1::uuid[], $2::text[], $3::timestamptz[])
               WITH ORDINALITY AS x(h, a, t, n) ORDER BY n",
        )
        .bind(&hashes)
        .bind(&agents)
        .bind(&ats)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Store markers.
    async fn insert_meta(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.meta.is_empty() {
            return Ok(());
        }
        let keys = std::mem::take(&mut self.meta);
        sqlx::query(
            "INSERT INTO meta (key, value) SELECT k, 'true' FROM UNNEST($1::text[]) AS x(k)
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(&keys)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// The Rollup actor's inbox.
    async fn insert_inbox(&mut self, tx: &mut Tx<'_>) -> Result<(), StoreError> {
        if self.inbox.is_empty() {
            return Ok(());
        }
        let (keys, ids, agents) = columns!(self.inbox, |(k, i, a)| (k, i, a));
        sqlx::query(
            "INSERT INTO rollup_inbox (key, item_id, agent_id)
             SELECT * FROM UNNEST($1::bytea[], $2::uuid[], $3::text[])",
        )
        .bind(&keys)
        .bind(&ids)
        .bind(&agents)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// The forget log, in its order.
async fn export_forget_log(tx: &mut Tx<'_>, sink: &mut Sink<'_>) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (Uuid, String, DateTime<Utc>)>(
        "SELECT user_hash, agent_id, forgotten_at FROM forget_log ORDER BY seq",
    )
    .fetch(&mut **tx);
    while let Some((user_hash, agent, at)) = rows.try_next().await? {
        sink(Record::Forget(ForgetEntry {
            user_hash,
            agent_id: Some(agent).filter(|a| !a.is_empty()),
            at,
        }))?;
    }
    Ok(())
}

/// The agents' bookkeeping.
async fn export_agents(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let sql = format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY agent_id COLLATE \"C\"");
    let mut rows = sqlx::query_as::<_, AgentRow>(&sql).fetch(&mut **tx);
    while let Some((agent_id, summary, context, lines, expires)) = rows.try_next().await? {
        let Some(persistent_context) =
            decode_for_export("agents", &agent_id, lines.as_bytes(), skip.as_deref_mut())?
        else {
            continue;
        };
        sink(Record::Agent {
            agent_id,
            meta: AgentMeta {
                summary_version: summary as u64,
                context_version: context as u64,
                persistent_context,
                context_expires_at: expires,
            },
        })?;
    }
    Ok(())
}

/// Blocks, agent-wide and users' own.
async fn export_blocks(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (String, String, String)>(
        "SELECT agent_id, user_id, body::text FROM blocks
         ORDER BY agent_id COLLATE \"C\", user_id COLLATE \"C\", label",
    )
    .fetch(&mut **tx);
    while let Some((agent, user_id, json)) = rows.try_next().await? {
        let key = format!("{agent}/{user_id}");
        if let Some(block) =
            decode_for_export("blocks", &key, json.as_bytes(), skip.as_deref_mut())?
        {
            sink(Record::Block { user_id, block })?;
        }
    }
    Ok(())
}

/// Turns, by session and sequence number.
async fn export_turns(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (Uuid, i64, String)>(
        "SELECT session_id, seq, body::text FROM turns ORDER BY session_id, seq",
    )
    .fetch(&mut **tx);
    while let Some((session_id, seq, json)) = rows.try_next().await? {
        let key = format!("{session_id}#{seq}");
        let Ok(seq) = u32::try_from(seq) else {
            damaged(
                "turns",
                &key,
                "the sequence number is out of range",
                skip.as_deref_mut(),
            )?;
            continue;
        };
        if let Some(turn) = decode_for_export("turns", &key, json.as_bytes(), skip.as_deref_mut())?
        {
            sink(Record::Turn {
                session_id,
                seq,
                turn,
            })?;
        }
    }
    Ok(())
}

/// Deleted facts' tombstones.
async fn export_tombstones(tx: &mut Tx<'_>, sink: &mut Sink<'_>) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (String, String, Uuid)>(
        "SELECT agent_id, user_id, content_hash FROM fact_tombstones
         ORDER BY agent_id COLLATE \"C\", user_id COLLATE \"C\", content_hash",
    )
    .fetch(&mut **tx);
    while let Some((agent_id, user_id, content_hash)) = rows.try_next().await? {
        sink(Record::Tombstone {
            agent_id,
            user_id,
            content_hash,
        })?;
    }
    Ok(())
}

/// Vectors of summaries, facts and turns.
async fn export_vectors(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (Uuid, Vec<u8>)>(
        "SELECT item_id, vector FROM embeddings ORDER BY item_id",
    )
    .fetch(&mut **tx);
    while let Some((id, bytes)) = rows.try_next().await? {
        match StoredVector::decode(&bytes) {
            Some(v) => match Record::vector(id, v) {
                Some(r) => sink(r)?,
                None => damaged(
                    "embeddings",
                    &id,
                    "a value is not a number",
                    skip.as_deref_mut(),
                )?,
            },
            None => damaged(
                "embeddings",
                &id,
                "not an encoded vector",
                skip.as_deref_mut(),
            )?,
        }
    }
    Ok(())
}

/// Rollup cursors.
async fn export_cursors(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (String, i16, NaiveDate)>(
        "SELECT agent_id, level, period FROM rollup_cursors
         ORDER BY agent_id COLLATE \"C\", level",
    )
    .fetch(&mut **tx);
    while let Some((agent_id, level, period)) = rows.try_next().await? {
        let level = match level {
            0 => Level::Daily,
            1 => Level::Weekly,
            other => {
                let key = format!("{agent_id}/{other}");
                damaged(
                    "rollup_cursors",
                    &key,
                    "an unknown level",
                    skip.as_deref_mut(),
                )?;
                continue;
            }
        };
        sink(Record::RollupCursor {
            agent_id,
            level,
            period,
        })?;
    }
    Ok(())
}

/// The Rollup actor's inbox.
async fn export_inbox(
    tx: &mut Tx<'_>,
    mut skip: Option<&mut Damaged>,
    sink: &mut Sink<'_>,
) -> Result<(), TransferError> {
    let mut rows = sqlx::query_as::<_, (Vec<u8>, String)>(
        "SELECT key, agent_id FROM rollup_inbox ORDER BY key",
    )
    .fetch(&mut **tx);
    while let Some((key, agent_id)) = rows.try_next().await? {
        match Record::inbox(&key, agent_id) {
            Some(r) => sink(r)?,
            None => damaged(
                "rollup_inbox",
                &format!("{key:02x?}"),
                "not an inbox key",
                skip.as_deref_mut(),
            )?,
        }
    }
    Ok(())
}

impl PgBackend {
    /// Whether the schema holds no records.
    pub async fn is_empty(&self) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let empty = Self::empty_in(&mut tx).await?;
        tx.rollback().await?;
        Ok(empty)
    }

    async fn empty_in(tx: &mut Tx<'_>) -> Result<bool, StoreError> {
        let any = RECORD_TABLES
            .iter()
            .map(|t| format!("EXISTS (SELECT 1 FROM {t})"))
            .collect::<Vec<_>>()
            .join(" OR ");
        let held: bool = sqlx::query_scalar(&format!("SELECT {any}"))
            .fetch_one(&mut **tx)
            .await?;
        Ok(!held)
    }

    /// Every record to `sink`, each kind in turn, as of one moment (one
    /// `REPEATABLE READ` transaction). A record that does not decode stops
    /// the export, unless `skip` is given (it is noted there).
    pub async fn export_records(
        &self,
        mut skip: Option<&mut Damaged>,
        sink: &mut Sink<'_>,
    ) -> Result<(), TransferError> {
        self.write_turns().await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let marked: Vec<String> =
            sqlx::query_scalar("SELECT key FROM meta WHERE key = ANY($1) ORDER BY key")
                .bind(PORTABLE_META.as_slice())
                .fetch_all(&mut *tx)
                .await?;
        for key in marked {
            sink(Record::Meta { key })?;
        }
        export_forget_log(&mut tx, sink).await?;
        export_agents(&mut tx, skip.as_deref_mut(), sink).await?;
        export_blocks(&mut tx, skip.as_deref_mut(), sink).await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT session_id, body::text FROM sessions ORDER BY session_id",
            "sessions",
            skip.as_deref_mut(),
            sink,
            Record::Session,
        )
        .await?;
        export_turns(&mut tx, skip.as_deref_mut(), sink).await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT summary_id, body::text FROM summaries ORDER BY summary_id",
            "summaries",
            skip.as_deref_mut(),
            sink,
            Record::Summary,
        )
        .await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT fact_id, body::text FROM facts ORDER BY fact_id",
            "facts",
            skip.as_deref_mut(),
            sink,
            Record::Fact,
        )
        .await?;
        export_tombstones(&mut tx, sink).await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT topic_id, body::text FROM topics ORDER BY topic_id",
            "topics",
            skip.as_deref_mut(),
            sink,
            Record::Topic,
        )
        .await?;
        export_vectors(&mut tx, skip.as_deref_mut(), sink).await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT session_id, body::text FROM reflection_queue ORDER BY session_id",
            "reflection_queue",
            skip.as_deref_mut(),
            sink,
            Record::Job,
        )
        .await?;
        export_bodies::<Uuid, _>(
            &mut tx,
            "SELECT session_id, body::text FROM dead_letters ORDER BY session_id",
            "dead_letters",
            skip.as_deref_mut(),
            sink,
            Record::DeadLetter,
        )
        .await?;
        export_cursors(&mut tx, skip.as_deref_mut(), sink).await?;
        export_inbox(&mut tx, skip, sink).await?;
        tx.rollback().await?;
        Ok(())
    }

    /// Refuses an import (changing nothing) while an instance serves the
    /// schema or when it holds records; then applies the migrations. An
    /// import calls it first: a schema at an older migration that is
    /// refused is not migrated.
    pub async fn prepare_import(&self) -> Result<(), TransferError> {
        let version = self.schema_version().await?;
        if version > 0 {
            let mut tx = self.pool.begin().await?;
            let checked = self.importable(&mut tx, version >= 2).await;
            tx.rollback().await?;
            checked?;
        }
        self.migrate().await?;
        Ok(())
    }

    /// Whether an import may go on: no instance serving (`instances`
    /// exists from migration 2), no record stored. Holds `instances`
    /// until the transaction ends, so an instance starting meanwhile
    /// waits for the import to be committed or not.
    async fn importable(&self, tx: &mut Tx<'_>, instances: bool) -> Result<(), TransferError> {
        if instances {
            sqlx::query("LOCK TABLE instances IN EXCLUSIVE MODE")
                .execute(&mut **tx)
                .await?;
            let serving: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM instances
                 WHERE heartbeat_at > now() - make_interval(secs => lease_secs)",
            )
            .fetch_one(&mut **tx)
            .await?;
            if serving > 0 {
                return Err(TransferError::InUse {
                    schema: self.schema.clone(),
                    instances: serving,
                });
            }
        }
        if !Self::empty_in(tx).await? {
            return Err(TransferError::NotEmpty {
                target: format!("PostgreSQL schema `{}`", self.schema),
            });
        }
        Ok(())
    }

    /// Stores an export's records into the schema (migrated: see
    /// [`PgBackend::prepare_import`]), which must hold none, in one
    /// transaction: all of them or, on any error (a cut-short export, a
    /// record stored twice), none. Refused while an instance serves the
    /// schema; an instance starting meanwhile waits for it.
    pub async fn import_records(&self, source: &mut Source<'_>) -> Result<Counts, TransferError> {
        let mut tx = self.pool.begin().await?;
        self.importable(&mut tx, true).await?;
        let mut counts = Counts::new();
        let mut batches = Batches::default();
        for record in source {
            let record = record?;
            count(&mut counts, &record);
            batches.push(record)?;
            if batches.held >= IMPORT_BATCH {
                batches.write(&mut tx).await.map_err(duplicate)?;
            }
        }
        batches.write(&mut tx).await.map_err(duplicate)?;
        tx.commit().await?;
        Ok(counts)
    }
}
