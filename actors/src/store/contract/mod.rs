//! What every backend must do, tested on each: every test here runs on
//! sled (in a fresh folder) and on PostgreSQL (in a fresh schema of the
//! database `RECALL_TEST_POSTGRES_URL` names, by default the `test`
//! database on 127.0.0.1:5432; the schema is dropped afterwards).
//!
//! This file holds the harness and the records the tests share; the
//! tests themselves are in a file per kind of record (`sessions`, `facts`,
//! `summaries`, `hierarchy`, `blocks`, `jobs`, `forget`).

use std::sync::Arc;

use chrono::TimeZone;

use super::*;
use crate::model::Speaker;
use crate::settings::PostgresSettings;

mod blocks;
mod facts;
mod forget;
mod hierarchy;
mod jobs;
mod sessions;
mod summaries;

use self::blocks::*;
use self::facts::*;
use self::forget::*;
use self::hierarchy::*;
use self::jobs::*;
use self::sessions::*;
use self::summaries::*;

/// The database the PostgreSQL tests use.
pub(crate) fn test_database_url() -> String {
    std::env::var("RECALL_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own for one test, dropped when it is.
pub(crate) struct TestSchema {
    pub settings: PostgresSettings,
}

impl TestSchema {
    pub fn new() -> TestSchema {
        TestSchema {
            settings: PostgresSettings {
                url: test_database_url(),
                schema: format!("recall_test_{}", Uuid::new_v4().simple()),
                pool_size: 4,
                ..PostgresSettings::default()
            },
        }
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        // On a thread of its own: a drop cannot await, and may run inside
        // a runtime.
        let settings = self.settings.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&settings.url)
                    .await?;
                sqlx::query("SET lock_timeout = '30s'")
                    .execute(&pool)
                    .await?;
                sqlx::query(&format!(
                    "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                    settings.schema
                ))
                .execute(&pool)
                .await?;
                pool.close().await;
                Ok::<_, sqlx::Error>(())
            })
        })
        .join();
    }
}

/// Where a test's backend lives.
pub(crate) enum Harness {
    Sled(tempfile::TempDir),
    Postgres(TestSchema),
}

impl Harness {
    /// Opens the backend (queuing reflections for the Rollup actor or
    /// not).
    async fn open_with(&self, fill_inbox: bool) -> SharedBackend {
        match self {
            Harness::Sled(dir) => {
                let mut trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
                trees.fill_inbox = fill_inbox;
                Arc::new(trees)
            }
            Harness::Postgres(schema) => {
                let mut pg = PgBackend::connect(&schema.settings).await.unwrap();
                pg.fill_inbox = fill_inbox;
                Arc::new(pg)
            }
        }
    }

    async fn open(&self) -> SharedBackend {
        self.open_with(true).await
    }

    /// Writes over a stored record (a session, summary or dead letter, by
    /// its table and id) with a body that does not decode. On sled the
    /// backend must be closed first: one process opens a folder.
    async fn damage(&self, table: &str, id: Uuid) {
        match self {
            Harness::Sled(dir) => {
                let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
                let (tree, key) = match table {
                    "sessions" => (&trees.sessions, id.as_bytes().to_vec()),
                    "dead_letters" => (&trees.dead, id.as_bytes().to_vec()),
                    "summaries" => {
                        let key = trees.summary_index.get(id.as_bytes()).unwrap().unwrap();
                        (&trees.summaries, key.to_vec())
                    }
                    other => panic!("no table {other}"),
                };
                assert!(tree.insert(key, &b"{damaged"[..]).unwrap().is_some());
                trees.db.flush().unwrap();
            }
            Harness::Postgres(schema) => {
                let pg = PgBackend::open(&schema.settings).await.unwrap();
                let column = if table == "summaries" {
                    "summary_id"
                } else {
                    "session_id"
                };
                let done = sqlx::query(&format!(
                    "UPDATE {table} SET body = '{{\"damaged\": true}}'::json WHERE {column} = $1"
                ))
                .bind(id)
                .execute(pg.pool())
                .await
                .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        }
    }
}

/// Each test on each backend.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod on_sled {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = super::Harness::Sled(tempfile::tempdir().unwrap());
                    super::$name(&h).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = super::Harness::Postgres(super::TestSchema::new());
                    super::$name(&h).await;
                }
            )*
        }
    };
}

on_both!(
    the_mirror_ledger_keeps_each_remote_agents_entries_apart,
    sessions_are_listed_by_agent_and_user_in_start_order,
    turns_are_read_back_in_order_before_and_after_a_flush,
    ending_a_session_queues_its_reflection_with_its_turns,
    facts_are_deduplicated_superseded_conflicts_flagged_and_owned,
    the_agent_sides_facts_stay_its_own,
    facts_stated_outside_a_call_are_stored_as_a_calls_are,
    a_revision_replaces_the_current_version_and_never_brings_back_a_deleted_fact,
    storing_a_session_summary_twice_is_a_no_op,
    dead_letters_move_back_to_the_queue_and_not_for_a_summarized_session,
    rollups_are_stored_once_and_supersede_their_older_version,
    a_batch_of_rollups_is_stored_once_each_then_its_cursors_move_forward,
    a_batch_keeps_no_rollup_of_a_user_forgotten_meanwhile,
    the_inbox_is_read_in_order_after_a_key_and_emptied,
    summaries_from_before_the_inbox_are_queued_once,
    topics_replace_their_summary_and_vectors_need_their_item,
    blocks_and_agent_bookkeeping,
    agent_wide_blocks_a_reflection_wrote_are_moved_to_their_user,
    the_context_parts_are_those_the_records_give,
    a_forget_is_scoped_complete_and_idempotent,
    a_read_off_the_writer_sees_the_writes_sent_before_it,
    sessions_are_listed_newest_first_and_read_no_further_than_the_limit,
    summaries_are_listed_newest_first_across_types_and_read_no_further_than_the_limit,
    dead_letters_are_counted_on_every_change_and_listed_by_agent_a_page_at_a_time,
);

pub(crate) fn at(day: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, day, 9, minute, 0).unwrap()
}

pub(crate) fn opened(id: u128, agent: &str, user: &str, minute: u32) -> SessionRecord {
    SessionRecord {
        session_id: Uuid::from_u128(id),
        agent_id: agent.into(),
        user_id: user.into(),
        connection_id: format!("c{id}"),
        started_at: at(5, minute),
        ended_at: None,
        end_reason: None,
        turn_count: 0,
    }
}

pub(crate) fn ended(mut rec: SessionRecord, turns: u32) -> SessionRecord {
    rec.ended_at = Some(rec.started_at + chrono::Duration::minutes(5));
    rec.end_reason = Some(EndReason::Disconnect);
    rec.turn_count = turns;
    rec
}

fn turn(text: &str, t: DateTime<Utc>) -> ConversationTurn {
    ConversationTurn {
        user_message: text.into(),
        agent_response: "ok".into(),
        timestamp: t,
    }
}

pub(crate) async fn append(b: &dyn Backend, id: Uuid, seq: u32, text: &str) {
    let value = serde_json::to_vec(&turn(text, at(5, 0))).unwrap();
    b.append_turn(id, seq, &value).await.unwrap();
}

pub(crate) fn fact(user: &str, content: &str, subject: Option<&str>, call: Uuid) -> Fact {
    Fact {
        fact_id: Uuid::new_v4(),
        agent_id: "kairix".into(),
        user_id: user.into(),
        category: crate::model::FactCategory::Other,
        content: content.into(),
        subject: subject.map(str::to_string),
        visibility: Visibility::Private,
        source_session_id: Some(call),
        extracted_at: Utc.with_ymd_and_hms(2026, 3, 9, 9, 0, 0).unwrap(),
        conflicts_with: None,
        speaker: Default::default(),
    }
}

/// A call of `user` on day `day` of March 2026 and its summary.
pub(crate) fn call(user: &str, day: u32) -> (Uuid, ConversationSummary) {
    let id = Uuid::new_v4();
    (
        id,
        ConversationSummary::session(id, "kairix", user, at(day, 0), "a call"),
    )
}

pub(crate) fn vector(x: f32) -> StoredVector {
    StoredVector {
        embedder: "test".into(),
        values: vec![x, 1.0 - x],
    }
}

/// A fact from the agent side's words, as the reflector makes it.
pub(crate) fn agent_fact(user: &str, content: &str, subject: Option<&str>, call: Uuid) -> Fact {
    let mut f = fact(user, content, None, call);
    f.speaker = Speaker::Agent;
    f.subject = Speaker::Agent.subject(subject.map(str::to_string));
    f
}

pub(crate) fn daily(
    agent: &str,
    user: &str,
    day: u32,
    sources: &[Uuid],
    text: &str,
) -> ConversationSummary {
    let mut s = ConversationSummary::session(Uuid::new_v4(), agent, user, at(day, 0), text);
    s.summary_type = SummaryType::Daily;
    s.period_end = at(day, 0) + chrono::Duration::days(1);
    s.source_summary_ids = sources.to_vec();
    s
}

/// A Store actor over `b`, with default settings.
pub(crate) async fn spawn_store(
    b: SharedBackend,
) -> (ActorRef<StoreMsg>, tokio::task::JoinHandle<()>) {
    let embed: Arc<dyn crate::embed::Embed> = Arc::new(crate::embed::HashingEmbed::default());
    Actor::spawn(
        None,
        StoreActor,
        StoreArgs {
            backend: b,
            settings: Default::default(),
            generations: Default::default(),
            search: Arc::new(SearchIndex::new(&embed)),
            backlog: Default::default(),
        },
    )
    .await
    .unwrap()
}
