//! What every backend must do, tested on each: every test here runs on
//! sled (in a fresh folder) and on PostgreSQL (in a fresh schema of the
//! database `RECALL_TEST_POSTGRES_URL` names, by default the `test`
//! database on 127.0.0.1:5432; the schema is dropped afterwards).

use std::sync::Arc;

use chrono::TimeZone;

use super::*;
use crate::model::Speaker;
use crate::settings::PostgresSettings;

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
    sessions_are_listed_by_agent_and_user_in_start_order,
    turns_are_read_back_in_order_before_and_after_a_flush,
    ending_a_session_queues_its_reflection_with_its_turns,
    facts_are_deduplicated_superseded_conflicts_flagged_and_owned,
    the_agent_sides_facts_stay_its_own,
    a_revision_replaces_the_current_version_and_never_brings_back_a_deleted_fact,
    storing_a_session_summary_twice_is_a_no_op,
    dead_letters_move_back_to_the_queue_and_not_for_a_summarized_session,
    rollups_are_stored_once_and_supersede_their_older_version,
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

fn ids(v: Vec<SessionRecord>) -> Vec<u128> {
    v.into_iter().map(|s| s.session_id.as_u128()).collect()
}

pub(crate) fn vector(x: f32) -> StoredVector {
    StoredVector {
        embedder: "test".into(),
        values: vec![x, 1.0 - x],
    }
}

async fn sessions_are_listed_by_agent_and_user_in_start_order(h: &Harness) {
    let b = h.open().await;
    // "ab" and "abc" share a prefix; they are different users.
    b.open_session(&opened(3, "kairix", "ab", 30))
        .await
        .unwrap();
    b.open_session(&opened(1, "kairix", "abc", 10))
        .await
        .unwrap();
    b.open_session(&opened(2, "kairix", "ab", 20))
        .await
        .unwrap();
    b.open_session(&opened(4, "kairi", "ab", 5)).await.unwrap();
    let e = ended(opened(2, "kairix", "ab", 20), 0);
    b.end_session(&e, e.ended_at.unwrap()).await.unwrap();

    assert_eq!(ids(b.user_sessions("kairix", "ab").await.unwrap()), [2, 3]);
    assert_eq!(ids(b.user_sessions("kairix", "abc").await.unwrap()), [1]);
    assert_eq!(ids(b.sessions(Some("kairix")).await.unwrap()), [1, 2, 3]);
    assert_eq!(ids(b.sessions(Some("kairi")).await.unwrap()), [4]);
    assert_eq!(ids(b.sessions(None).await.unwrap()), [4, 1, 2, 3]);
    assert!(b.user_sessions("kairix", "a").await.unwrap().is_empty());
    assert_eq!(ids(b.open_sessions().await.unwrap()), [4, 1, 3]);
    let two = b.session(Uuid::from_u128(2)).await.unwrap().unwrap();
    assert_eq!(two, e);
    assert!(b.session(Uuid::from_u128(9)).await.unwrap().is_none());
    // no turns: nothing to reflect on
    assert!(b.queued().await.unwrap().is_empty());
}

async fn turns_are_read_back_in_order_before_and_after_a_flush(h: &Harness) {
    let b = h.open().await;
    let rec = opened(1, "kairix", "mark", 0);
    let id = rec.session_id;
    b.open_session(&rec).await.unwrap();
    for seq in [0, 1, 2, 3, 10] {
        append(&*b, id, seq, &format!("turn {seq}")).await;
    }
    // Read before any flush: every turn written is seen.
    let texts = |v: Vec<(u32, ConversationTurn)>| -> Vec<(u32, String)> {
        v.into_iter().map(|(n, t)| (n, t.user_message)).collect()
    };
    assert_eq!(
        texts(b.numbered_turns(id).await.unwrap()),
        [0, 1, 2, 3, 10].map(|n| (n, format!("turn {n}")))
    );
    // Written again: the latest value stands, in one batch or across two.
    append(&*b, id, 3, "turn 3 again").await;
    append(&*b, id, 3, "turn 3 once more").await;
    b.flush().await.unwrap();
    append(&*b, id, 4, "turn 4").await;
    assert_eq!(
        b.turn(id, 3).await.unwrap().unwrap().user_message,
        "turn 3 once more"
    );
    assert!(b.turn(id, 5).await.unwrap().is_none());
    assert_eq!(b.turns(id).await.unwrap().len(), 6);
    assert!(b.turns(Uuid::from_u128(77)).await.unwrap().is_empty());
    // A session with its turns, for a reflection.
    let (rec2, turns) = b.load_session(id).await.unwrap().unwrap();
    assert_eq!((rec2, turns.len()), (rec, 6));
    assert!(b.load_session(Uuid::from_u128(77)).await.unwrap().is_none());
    // A NUL in a turn is kept like any other character.
    append(&*b, id, 11, "nul \u{0} inside").await;
    b.flush().await.unwrap();
    assert_eq!(
        b.turn(id, 11).await.unwrap().unwrap().user_message,
        "nul \u{0} inside"
    );
}

async fn ending_a_session_queues_its_reflection_with_its_turns(h: &Harness) {
    let b = h.open().await;
    let rec = opened(1, "kairix", "mark", 0);
    let id = rec.session_id;
    b.open_session(&rec).await.unwrap();
    append(&*b, id, 0, "hello").await;
    append(&*b, id, 1, "bye").await;
    // An orphan (its actor gone) ends with its stored turns counted, at
    // its last turn when recovered.
    let closed = b
        .close_orphan(id, EndReason::Recovered, at(6, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed.turn_count, 2);
    assert_eq!(closed.ended_at, Some(at(5, 0)));
    assert!(b
        .close_orphan(id, EndReason::Recovered, at(6, 0))
        .await
        .unwrap()
        .is_none());
    assert!(matches!(
        b.close_orphan(Uuid::from_u128(5), EndReason::Crashed, at(6, 0))
            .await,
        Err(StoreError::SessionNotFound(_))
    ));
    let queued = b.queued().await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        (queued[0].session_id, queued[0].enqueued_at),
        (id, at(6, 0))
    );
    assert!(b.open_sessions().await.unwrap().is_empty());
    b.drop_job(id).await.unwrap();
    assert!(b.queued().await.unwrap().is_empty());
}

async fn facts_are_deduplicated_superseded_conflicts_flagged_and_owned(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let (c2, s2) = call("ada", 1);
    let works = fact("mark", "Works at Initech", Some("employer"), c1);
    // one reflection per user, as the reflector stores them
    b.complete_reflection(
        &s1,
        &[],
        &[works.clone(), fact("mark", "Prefers mornings", None, c1)],
    )
    .await
    .unwrap();
    b.complete_reflection(&s2, &[], &[fact("ada", "Lives in Porto", Some("home"), c2)])
        .await
        .unwrap();
    let (c3, s3) = call("mark", 2);
    let globex = fact("mark", "Works at Globex", Some("employer"), c3);
    let second = [
        // the same fact, other case and spacing: dropped
        fact("mark", "works  at initech.", Some("employer"), c3),
        // a later call's value on the subject: the new current one
        globex.clone(),
        fact("mark", "Allergic to peanuts", None, c3),
    ];
    b.complete_reflection(&s3, &[], &second).await.unwrap();
    // two values in one call: a conflict, both current
    let (c4, s4) = call("mark", 3);
    let austin = fact("mark", "Lives in Austin", Some("home"), c4);
    let denver = fact("mark", "Lives in Denver", Some("home"), c4);
    b.complete_reflection(&s4, &[], &[austin.clone(), denver.clone()])
        .await
        .unwrap();

    let mark = b.user_facts("kairix", "mark").await.unwrap();
    let mut contents: Vec<&str> = mark.iter().map(|f| f.content.as_str()).collect();
    contents.sort_unstable();
    assert_eq!(
        contents,
        [
            "Allergic to peanuts",
            "Lives in Austin",
            "Lives in Denver",
            "Prefers mornings",
            "Works at Globex",
            "Works at Initech"
        ]
    );
    let by = |c: &str| mark.iter().find(|f| f.content == c).unwrap().clone();
    let initech = by("Works at Initech");
    assert_eq!(initech.history.superseded_by, Some(globex.fact_id));
    assert_eq!(initech.history.superseded_at, Some(s3.period_start));
    assert_eq!(initech.history.stated_at, Some(s1.period_start));
    assert!(by("Works at Globex").is_current());
    assert_eq!(by("Works at Globex").conflicts_with, None);
    let homes = [by("Lives in Austin"), by("Lives in Denver")];
    assert!(homes.iter().all(FactRecord::is_current));
    assert_eq!(
        homes.iter().filter_map(|f| f.conflicts_with).count(),
        1,
        "one of the two names the other"
    );
    assert_eq!(b.agent_facts("kairix").await.unwrap().len(), 7);

    // the context holds current facts, and what each replaced
    let ctx = b.context_sources("kairix", "mark").await.unwrap();
    let mut current: Vec<&str> = ctx.facts.iter().map(|f| f.content.as_str()).collect();
    current.sort_unstable();
    assert_eq!(
        current,
        [
            "Allergic to peanuts",
            "Lives in Austin",
            "Lives in Denver",
            "Prefers mornings",
            "Works at Globex"
        ]
    );
    let earlier = ctx.facts.earlier(globex.fact_id).unwrap();
    assert_eq!(
        (earlier.content.as_str(), earlier.until, earlier.fact_id),
        ("Works at Initech", s3.period_start, works.fact_id)
    );
    assert_eq!(ctx.facts.earlier.len(), 1);

    // deleting the current value makes the one it replaced current
    let (gone, moved) = b.delete_fact(globex.fact_id, "mark").await.unwrap();
    assert_eq!(gone.fact_id, globex.fact_id);
    assert_eq!(moved.len(), 1);
    assert!(b.fact(works.fact_id).await.unwrap().unwrap().is_current());
    assert!(b
        .context_sources("kairix", "mark")
        .await
        .unwrap()
        .facts
        .earlier
        .is_empty());

    // visibility: ada sees only her own until mark shares one
    let ada_sees = |b: SharedBackend| async move {
        let mut v: Vec<String> = b
            .visible_facts("kairix", "ada")
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.fact.content)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    let id = by("Prefers mornings").fact_id;
    assert!(matches!(
        b.set_fact_visibility(id, "ada", Visibility::Shared).await,
        Err(StoreError::NotFactOwner(_))
    ));
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    b.set_fact_visibility(id, "mark", Visibility::Shared)
        .await
        .unwrap();
    assert_eq!(
        ada_sees(b.clone()).await,
        ["Lives in Porto", "Prefers mornings"]
    );
    let ada_ctx = b.context_sources("kairix", "ada").await.unwrap();
    assert_eq!(ada_ctx.facts.len(), 2, "a shared fact is in every context");
    b.set_fact_visibility(id, "mark", Visibility::Private)
        .await
        .unwrap();
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    assert_eq!(
        b.fact(works.fact_id)
            .await
            .unwrap()
            .unwrap()
            .history
            .stated_at,
        Some(s1.period_start),
        "a change of visibility keeps the history"
    );

    // deleting: only the owner; unknown ids are errors
    assert!(matches!(
        b.delete_fact(id, "ada").await,
        Err(StoreError::NotFactOwner(_))
    ));
    assert!(b.fact(id).await.unwrap().is_some());
    b.delete_fact(id, "mark").await.unwrap();
    assert!(b.fact(id).await.unwrap().is_none());
    assert_eq!(b.user_facts("kairix", "mark").await.unwrap().len(), 4);
    let unknown = Uuid::new_v4();
    assert!(matches!(
        b.delete_fact(unknown, "mark").await,
        Err(StoreError::FactNotFound(_))
    ));
    assert!(matches!(
        b.set_fact_visibility(unknown, "mark", Visibility::Shared)
            .await,
        Err(StoreError::FactNotFound(_))
    ));
    // another agent's facts are another namespace
    assert!(b.visible_facts("other", "mark").await.unwrap().is_empty());
}

/// A fact from the agent side's words, as the reflector makes it.
pub(crate) fn agent_fact(user: &str, content: &str, subject: Option<&str>, call: Uuid) -> Fact {
    let mut f = fact(user, content, None, call);
    f.speaker = Speaker::Agent;
    f.subject = Speaker::Agent.subject(subject.map(str::to_string));
    f
}

async fn the_agent_sides_facts_stay_its_own(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let home = fact("mark", "Lives in Austin", Some("home"), c1);
    b.complete_reflection(&s1, &[], std::slice::from_ref(&home))
        .await
        .unwrap();
    // a later call: the agent side tells of its own home, and says what
    // the user said before in the same words
    let (c2, s2) = call("mark", 2);
    let its_home = agent_fact("mark", "Lives in Cork", Some("home"), c2);
    let same_words = agent_fact("mark", "Lives in Austin", None, c2);
    b.complete_reflection(&s2, &[], &[its_home.clone(), same_words.clone()])
        .await
        .unwrap();
    let facts = b.user_facts("kairix", "mark").await.unwrap();
    assert_eq!(facts.len(), 3, "{facts:?}");
    let get = |id: Uuid| facts.iter().find(|f| f.fact_id == id).unwrap();
    // the user's home is not replaced by the agent side's
    assert!(get(home.fact_id).is_current());
    assert_eq!(get(home.fact_id).speaker, Speaker::User);
    assert_eq!(get(its_home.fact_id).speaker, Speaker::Agent);
    assert_eq!(get(its_home.fact_id).subject.as_deref(), Some("agent:home"));
    assert_eq!(get(same_words.fact_id).speaker, Speaker::Agent);
    // and both are read back as whose they are, in the context too
    let ctx = b.context_sources("kairix", "mark").await.unwrap();
    let agent: Vec<&str> = ctx
        .facts
        .iter()
        .filter(|f| f.speaker == Speaker::Agent)
        .map(|f| f.content.as_str())
        .collect();
    assert_eq!(agent.len(), 2, "{agent:?}");
    // deleting the agent side's fact leaves the user's in the same words
    b.delete_fact(same_words.fact_id, "mark").await.unwrap();
    let facts = b.user_facts("kairix", "mark").await.unwrap();
    assert_eq!(facts.len(), 2);
    assert!(b.fact(home.fact_id).await.unwrap().unwrap().is_current());
    // and is remembered apart from them: the user's are not tombstoned
    assert_ne!(
        spoken_key(&same_words),
        spoken_key(&home),
        "one tombstone key per speaker"
    );
}

async fn a_revision_replaces_the_current_version_and_never_brings_back_a_deleted_fact(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let tea = fact("mark", "Prefers tea", None, c1);
    b.complete_reflection(&s1, &[], std::slice::from_ref(&tea))
        .await
        .unwrap();
    b.delete_fact(tea.fact_id, "mark").await.unwrap();
    let mut v2 = ConversationSummary::session(Uuid::new_v4(), "kairix", "mark", at(1, 0), "v2");
    v2.supersedes = Some(s1.summary_id);
    let facts = [
        fact("mark", "prefers tea", None, c1),
        fact("mark", "Plays chess", None, c1),
    ];
    let r = b.revise_session(&v2, &facts).await.unwrap();
    assert!(r.stored);
    assert_eq!(r.old.as_ref().unwrap().superseded_by, Some(v2.summary_id));
    let added: Vec<&str> = r.facts_added.iter().map(|f| f.content.as_str()).collect();
    assert_eq!(added, ["Plays chess"], "the deleted fact stays deleted");
    // again: a no-op
    assert!(!b.revise_session(&v2, &facts).await.unwrap().stored);
    // the old version is replaced already: no fork
    let mut fork = ConversationSummary::session(Uuid::new_v4(), "kairix", "mark", at(1, 0), "x");
    fork.supersedes = Some(s1.summary_id);
    assert!(matches!(
        b.revise_session(&fork, &[]).await,
        Err(StoreError::InvalidRevision(..))
    ));
    let mut orphan = fork.clone();
    orphan.supersedes = Some(Uuid::new_v4());
    assert!(matches!(
        b.revise_session(&orphan, &[]).await,
        Err(StoreError::SummaryNotFound(_))
    ));
    orphan.supersedes = None;
    assert!(matches!(
        b.revise_session(&orphan, &[]).await,
        Err(StoreError::InvalidRevision(..))
    ));
    let latest = b
        .latest_summary("kairix", SummaryType::Session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.summary_id, v2.summary_id);
    assert!(!b
        .summary(s1.summary_id)
        .await
        .unwrap()
        .unwrap()
        .is_current());
    b.stamp_derivation(v2.summary_id, "offline-1")
        .await
        .unwrap();
    assert_eq!(
        b.summary(v2.summary_id)
            .await
            .unwrap()
            .unwrap()
            .derivation
            .as_deref(),
        Some("offline-1")
    );
    assert!(matches!(
        b.stamp_derivation(Uuid::new_v4(), "x").await,
        Err(StoreError::SummaryNotFound(_))
    ));
    let ctx = b.context_sources("kairix", "mark").await.unwrap();
    let texts: Vec<&str> = ctx
        .summaries
        .iter()
        .map(|s| s.summary_text.as_str())
        .collect();
    assert_eq!(texts, ["v2"], "only the current version");
}

async fn storing_a_session_summary_twice_is_a_no_op(h: &Harness) {
    let b = h.open().await;
    let id = Uuid::new_v4();
    let first = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "first");
    let second = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "second");
    assert!(b.complete_reflection(&first, &[], &[]).await.unwrap());
    assert!(!b.complete_reflection(&second, &[], &[]).await.unwrap());
    let all = b
        .summaries("kairix", SummaryType::Session, None)
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].summary_text, "first");
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, 1);
}

async fn dead_letters_move_back_to_the_queue_and_not_for_a_summarized_session(h: &Harness) {
    let b = h.open().await;
    let rec = ended(opened(1, "kairix", "mark", 0), 2);
    b.end_session(&rec, at(5, 10)).await.unwrap();
    let letter = DeadLetter {
        session_id: rec.session_id,
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        attempts: 3,
        error: "timed out".into(),
        error_kind: "timeout".into(),
        failed_at: at(5, 20),
    };
    b.dead_letter(&letter).await.unwrap();
    assert!(b.queued().await.unwrap().is_empty());
    assert_eq!(
        b.dead_letters().await.unwrap(),
        std::slice::from_ref(&letter)
    );
    let job = b.requeue(rec.session_id, at(5, 30)).await.unwrap();
    assert_eq!(
        (job.session_id, job.enqueued_at),
        (rec.session_id, at(5, 30))
    );
    assert!(b.dead_letters().await.unwrap().is_empty());
    assert_eq!(b.queued().await.unwrap(), [job]);
    assert!(matches!(
        b.requeue(rec.session_id, at(5, 40)).await,
        Err(StoreError::DeadLetterNotFound(_))
    ));
    // the session has its summary by now: no dead letter, and storing it
    // clears the job
    let s = ConversationSummary::session(rec.session_id, "kairix", "mark", at(5, 0), "done");
    assert!(b.complete_reflection(&s, &[], &[]).await.unwrap());
    assert!(b.queued().await.unwrap().is_empty());
    b.dead_letter(&letter).await.unwrap();
    assert!(b.dead_letters().await.unwrap().is_empty());
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

async fn rollups_are_stored_once_and_supersede_their_older_version(h: &Harness) {
    let b = h.open().await;
    let d1 = daily("kairix", "mark", 1, &[Uuid::from_u128(1)], "day one");
    assert!(b.put_rollup(&d1, None, Some(&vector(0.5))).await.unwrap());
    assert!(!b.put_rollup(&d1, None, None).await.unwrap(), "once");
    let mut d1b = daily(
        "kairix",
        "mark",
        1,
        &[Uuid::from_u128(1), Uuid::from_u128(2)],
        "day one, later",
    );
    d1b.supersedes = Some(d1.summary_id);
    assert!(b.put_rollup(&d1b, Some(d1.summary_id), None).await.unwrap());
    let d2 = daily("kairix", "mark", 2, &[Uuid::from_u128(3)], "day two");
    assert!(b.put_rollup(&d2, None, None).await.unwrap());
    let all = b
        .summaries("kairix", SummaryType::Daily, None)
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    let old = all.iter().find(|s| s.summary_id == d1.summary_id).unwrap();
    assert_eq!(old.superseded_by, Some(d1b.summary_id));
    let since = b
        .summaries("kairix", SummaryType::Daily, Some(at(3, 0)))
        .await
        .unwrap();
    assert_eq!(
        since.iter().map(|s| s.summary_id).collect::<Vec<_>>(),
        [d2.summary_id]
    );
    assert_eq!(
        b.latest_summary("kairix", SummaryType::Daily)
            .await
            .unwrap()
            .map(|s| s.summary_id),
        Some(d2.summary_id)
    );
    assert!(b
        .latest_summary("kairix", SummaryType::Weekly)
        .await
        .unwrap()
        .is_none());
    assert_eq!(b.vector(d1.summary_id).await.unwrap(), Some(vector(0.5)));
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, 3);
    // cursors
    let day = NaiveDate::from_ymd_opt(2026, 3, 2).unwrap();
    assert!(b
        .rollup_cursor("kairix", Level::Daily)
        .await
        .unwrap()
        .is_none());
    b.set_rollup_cursor("kairix", Level::Daily, day)
        .await
        .unwrap();
    b.set_rollup_cursor("kairix", Level::Daily, day.succ_opt().unwrap())
        .await
        .unwrap();
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        day.succ_opt()
    );
    // never back (a run whose lease lapsed, finishing late)
    b.set_rollup_cursor("kairix", Level::Daily, day)
        .await
        .unwrap();
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        day.succ_opt()
    );
    assert!(b
        .rollup_cursor("kairix", Level::Weekly)
        .await
        .unwrap()
        .is_none());
    assert!(b
        .rollup_cursor("nova", Level::Daily)
        .await
        .unwrap()
        .is_none());
}

async fn the_inbox_is_read_in_order_after_a_key_and_emptied(h: &Harness) {
    let b = h.open().await;
    // stored out of order: read in the order they happened
    let (c2, s2) = call("mark", 2);
    let (_, s1) = call("ada", 1);
    let f = fact("mark", "Plays chess", None, c2);
    b.complete_reflection(&s2, &[], std::slice::from_ref(&f))
        .await
        .unwrap();
    b.complete_reflection(&s1, &[], &[]).await.unwrap();
    let all = b.inbox(None, 10).await.unwrap();
    let items: Vec<(Uuid, u8)> = all.iter().map(|e| (e.id, e.kind)).collect();
    assert_eq!(
        items,
        [
            (s1.summary_id, keys::INBOX_SUMMARY),
            (s2.summary_id, keys::INBOX_SUMMARY),
            (f.fact_id, keys::INBOX_FACT)
        ]
    );
    assert!(all.iter().all(|e| e.agent_id == "kairix"));
    let rest = b.inbox(Some(&all[0].key), 1).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, s2.summary_id);
    b.inbox_done(&[all[0].key.clone(), all[2].key.clone()])
        .await
        .unwrap();
    let left = b.inbox(None, 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, s2.summary_id);
    // rollups off: nothing is queued
    drop(b);
}

async fn summaries_from_before_the_inbox_are_queued_once(h: &Harness) {
    let b = h.open_with(false).await;
    let id = Uuid::new_v4();
    let s = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "An older summary");
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    assert!(b.inbox(None, 10).await.unwrap().is_empty());
    assert_eq!(b.backfill_inbox().await.unwrap(), 1);
    let queued = b.inbox(None, 10).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!((queued[0].id, queued[0].kind), (id, keys::INBOX_SUMMARY));
    assert_eq!(queued[0].agent_id, "kairix");
    // once
    b.inbox_done(&[queued[0].key.clone()]).await.unwrap();
    assert_eq!(b.backfill_inbox().await.unwrap(), 0);
    assert!(b.inbox(None, 10).await.unwrap().is_empty());
}

async fn topics_replace_their_summary_and_vectors_need_their_item(h: &Harness) {
    let b = h.open().await;
    let topic = |user: &str, n: u128| Topic {
        topic_id: Uuid::from_u128(n),
        agent_id: "kairix".into(),
        user_id: user.into(),
        label: "sailing".into(),
        keywords: vec![("sailing".into(), 2)],
        centroid: vec![0.1, 0.2],
        embedder: "test".into(),
        member_ids: vec![Uuid::from_u128(100 + n)],
        created_at: at(1, n as u32),
        updated_at: at(1, n as u32),
        last_active: at(1, n as u32),
    };
    let mut ts =
        ConversationSummary::session(Uuid::from_u128(50), "kairix", "mark", at(1, 0), "t1");
    ts.summary_type = SummaryType::Topic;
    let t1 = topic("mark", 1);
    b.put_topic(&t1, &ts, Some(&vector(0.1))).await.unwrap();
    b.put_topic(
        &topic("ada", 2),
        &{
            let mut s = ts.clone();
            s.summary_id = Uuid::from_u128(51);
            s.user_id = "ada".into();
            s
        },
        None,
    )
    .await
    .unwrap();
    // the topic's summary, again: replaced, its period end moved, and no
    // vector this time
    let mut ts2 = ts.clone();
    ts2.summary_text = "t1, later".into();
    ts2.period_end = at(4, 0);
    b.put_topic(&t1, &ts2, None).await.unwrap();
    let topics = b
        .summaries("kairix", SummaryType::Topic, None)
        .await
        .unwrap();
    assert_eq!(topics.len(), 2);
    assert_eq!(
        b.summary(ts.summary_id)
            .await
            .unwrap()
            .unwrap()
            .summary_text,
        "t1, later"
    );
    assert!(b.vector(ts.summary_id).await.unwrap().is_none());
    assert_eq!(
        b.topics("kairix", Some("mark")).await.unwrap(),
        std::slice::from_ref(&t1)
    );
    assert_eq!(b.topics("kairix", None).await.unwrap().len(), 2);
    assert!(b.topics("nova", None).await.unwrap().is_empty());
    // vectors only for items that exist
    let gone = Uuid::new_v4();
    let stored = b
        .put_vectors(&[(ts.summary_id, vector(0.3)), (gone, vector(0.4))])
        .await
        .unwrap();
    assert_eq!(stored, [ts.summary_id]);
    assert_eq!(b.vector(ts.summary_id).await.unwrap(), Some(vector(0.3)));
    assert!(b.vector(gone).await.unwrap().is_none());
    // turn vectors only for stored turns (one still waiting for its batch
    // counts)
    let rec = opened(7, "kairix", "mark", 0);
    b.open_session(&rec).await.unwrap();
    append(&*b, rec.session_id, 0, "a").await;
    append(&*b, rec.session_id, 2, "c").await;
    let stored = b
        .put_turn_vectors(
            rec.session_id,
            &[(2, vector(0.2)), (1, vector(0.1)), (0, vector(0.0))],
        )
        .await
        .unwrap();
    assert_eq!(stored, [2, 0]);
    let doc = TurnRef {
        session_id: rec.session_id,
        seq: 2,
    }
    .doc_id();
    assert_eq!(b.vector(doc).await.unwrap(), Some(vector(0.2)));
}

/// An older version kept the latest reflection's `relationship` and
/// `self_perception` as the agent's too: the repair at start moves each to
/// the user it was drawn from (named in the record, or, for a record from
/// before that, by the summary made at the same instant) and leaves the
/// operator's, marking an unmarked one as theirs.
async fn agent_wide_blocks_a_reflection_wrote_are_moved_to_their_user(h: &Harness) {
    let b = h.open().await;
    let block = |agent: &str, label, value: &str, minute, user: Option<&str>| MemoryBlock {
        agent_id: agent.into(),
        label,
        value: value.into(),
        limit: 2000,
        updated_at: at(2, minute),
        source_user_id: user.map(str::to_string),
        written_by: None,
    };
    // kairix: mark's reflection wrote his block and the agent's copy
    let (_, mut s) = call("mark", 1);
    s.created_at = at(2, 1);
    let mark_self = MemoryBlock {
        written_by: Some(BlockWriter::Reflection),
        ..block(
            "kairix",
            BlockLabel::SelfPerception,
            "Mark made me bolder.",
            1,
            Some("mark"),
        )
    };
    b.complete_reflection(&s, std::slice::from_ref(&mark_self), &[])
        .await
        .unwrap();
    b.put_block(&block(
        "kairix",
        BlockLabel::SelfPerception,
        "Mark made me bolder.",
        1,
        Some("mark"),
    ))
    .await
    .unwrap();
    // …and, before blocks named their user, ada's wrote an unmarked one at
    // the instant of her summary
    let (_, mut s) = call("ada", 1);
    s.created_at = at(2, 5);
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    let ada_rel = block(
        "kairix",
        BlockLabel::Relationship,
        "Ada and I talk about Porto.",
        5,
        None,
    );
    b.put_block(&ada_rel).await.unwrap();
    // nova: the operator's, from before blocks said who wrote them
    let (_, mut s) = call("li", 1);
    s.agent_id = "nova".into();
    s.created_at = at(2, 7);
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    let nova_self = block(
        "nova",
        BlockLabel::SelfPerception,
        "I am Nova, calm.",
        9,
        None,
    );
    b.put_block(&nova_self).await.unwrap();
    let nova_rel = MemoryBlock {
        written_by: Some(BlockWriter::Operator),
        ..block(
            "nova",
            BlockLabel::Relationship,
            "I keep it professional.",
            7,
            None,
        )
    };
    b.put_block(&nova_rel).await.unwrap();

    let mut repaired = repair_agent_blocks(&*b).await.unwrap();
    repaired.sort_by(|x, y| x.user_id.cmp(&y.user_id));
    assert_eq!(
        repaired,
        [
            RepairedBlock {
                agent_id: "kairix".into(),
                label: BlockLabel::Relationship,
                user_id: "ada".into(),
                moved: true,
            },
            // his own was there already, as new as the copy
            RepairedBlock {
                agent_id: "kairix".into(),
                label: BlockLabel::SelfPerception,
                user_id: "mark".into(),
                moved: false,
            },
        ]
    );
    assert!(b.blocks("kairix").await.unwrap().is_empty());
    assert_eq!(b.user_blocks("kairix", "mark").await.unwrap(), [mark_self]);
    assert_eq!(
        b.user_blocks("kairix", "ada").await.unwrap(),
        [MemoryBlock {
            source_user_id: Some("ada".into()),
            written_by: Some(BlockWriter::Reflection),
            ..ada_rel
        }]
    );
    let nova = b.blocks("nova").await.unwrap();
    assert_eq!(
        nova,
        [
            MemoryBlock {
                written_by: Some(BlockWriter::Operator),
                ..nova_self
            },
            nova_rel
        ]
    );
    assert!(b.user_blocks("nova", "li").await.unwrap().is_empty());
    // done once: a second start finds nothing and changes nothing
    assert!(repair_agent_blocks(&*b).await.unwrap().is_empty());
    assert_eq!(b.blocks("nova").await.unwrap(), nova);
}

async fn blocks_and_agent_bookkeeping(h: &Harness) {
    let b = h.open().await;
    let block = |label: BlockLabel, value: &str, user: Option<&str>| MemoryBlock {
        agent_id: "kairix".into(),
        label,
        value: value.into(),
        limit: 2000,
        updated_at: at(1, 0),
        source_user_id: user.map(str::to_string),
        written_by: Some(match user {
            Some(_) => BlockWriter::Reflection,
            None => BlockWriter::Operator,
        }),
    };
    b.put_block(&block(BlockLabel::Persona, "I am Kairix.", None))
        .await
        .unwrap();
    b.put_block(&block(BlockLabel::Persona, "I am Kairix, still.", None))
        .await
        .unwrap();
    let operators = block(BlockLabel::Relationship, "I keep my distance.", None);
    b.put_block(&operators).await.unwrap();
    let (_, s) = call("mark", 1);
    let rel = block(
        BlockLabel::Relationship,
        "Mark and I go back.",
        Some("mark"),
    );
    b.complete_reflection(&s, std::slice::from_ref(&rel), &[])
        .await
        .unwrap();
    // a reflection's block is its user's; the agent's stay the operator's
    let agent_blocks = b.blocks("kairix").await.unwrap();
    let values: Vec<&str> = agent_blocks.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(values, ["I am Kairix, still.", "I keep my distance."]);
    assert_eq!(
        b.user_blocks("kairix", "mark").await.unwrap(),
        std::slice::from_ref(&rel)
    );
    assert!(b.user_blocks("kairix", "ada").await.unwrap().is_empty());
    assert_eq!(
        b.block("kairix", BlockLabel::Relationship).await.unwrap(),
        Some(operators)
    );
    assert!(b
        .block("kairix", BlockLabel::Human)
        .await
        .unwrap()
        .is_none());

    assert_eq!(b.agent("nova").await.unwrap(), AgentMeta::default());
    b.set_persistent_context("kairix", vec!["Be brief.".into()])
        .await
        .unwrap();
    b.mark_context_built("kairix", 2, Some(at(9, 0)))
        .await
        .unwrap();
    b.mark_context_built("nova", 1, None).await.unwrap();
    let meta = b.agent("kairix").await.unwrap();
    assert_eq!(
        meta,
        AgentMeta {
            summary_version: 2,
            context_version: 2,
            persistent_context: vec!["Be brief.".into()],
            context_expires_at: Some(at(9, 0)),
        }
    );
    let agents: Vec<String> = b
        .agents()
        .await
        .unwrap()
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(agents, ["kairix", "nova"]);
}

async fn the_context_parts_are_those_the_records_give(h: &Harness) {
    let b = h.open().await;
    let rec = ended(opened(1, "kairix", "mark", 0), 1);
    b.end_session(&rec, at(5, 5)).await.unwrap();
    b.open_session(&opened(2, "kairix", "mark", 30))
        .await
        .unwrap();
    let s = ConversationSummary::session(rec.session_id, "kairix", "mark", at(5, 0), "We met.");
    b.complete_reflection(
        &s,
        &[],
        &[fact("mark", "Plays chess", None, rec.session_id)],
    )
    .await
    .unwrap();
    let d = daily("kairix", "mark", 5, &[s.summary_id], "A day.");
    b.put_rollup(&d, None, None).await.unwrap();
    b.put_rollup(&daily("kairix", "ada", 5, &[], "Ada's day."), None, None)
        .await
        .unwrap();
    b.set_persistent_context("kairix", vec!["Be kind.".into()])
        .await
        .unwrap();

    let only = b
        .context_parts("kairix", "mark", Parts::FACTS)
        .await
        .unwrap();
    assert!(only.summaries.is_none() && only.ended.is_none() && only.blocks.is_none());
    assert_eq!(only.facts.unwrap().len(), 1);
    let ctx = b.context_sources("kairix", "mark").await.unwrap();
    let texts: Vec<&str> = ctx
        .summaries
        .iter()
        .map(|s| s.summary_text.as_str())
        .collect();
    assert_eq!(texts, ["We met.", "A day."], "by period end");
    assert_eq!(ctx.ended.len(), 1, "the open session is not in it");
    assert_eq!(ctx.ended[0].session_id, rec.session_id);
    assert_eq!(ctx.persistent_context, ["Be kind."]);
    assert!(ctx.topics.is_empty());
    let none = b.context_sources("kairix", "zoe").await.unwrap();
    assert!(none.summaries.is_empty() && none.facts.is_empty() && none.ended.is_empty());
}

async fn a_forget_is_scoped_complete_and_idempotent(h: &Harness) {
    let b = h.open().await;
    let mut sessions = Vec::new();
    for (n, agent, user) in [
        (1, "kairix", "zoe"),
        (2, "nova", "zoe"),
        (3, "kairix", "ada"),
    ] {
        let rec = opened(n, agent, user, n as u32);
        b.open_session(&rec).await.unwrap();
        append(&*b, rec.session_id, 0, "I sail to Zanzibar.").await;
        append(&*b, rec.session_id, 1, "In May.").await;
        let rec = ended(rec, 2);
        b.end_session(&rec, at(5, 50)).await.unwrap();
        let mut s = ConversationSummary::session(rec.session_id, agent, user, at(5, 0), "Sailing.");
        s.agent_id = agent.into();
        let mut f = fact(user, "Sails", None, rec.session_id);
        f.agent_id = agent.into();
        b.complete_reflection(&s, &[], std::slice::from_ref(&f))
            .await
            .unwrap();
        b.put_vectors(&[(f.fact_id, vector(0.5))]).await.unwrap();
        b.put_turn_vectors(rec.session_id, &[(0, vector(0.1))])
            .await
            .unwrap();
        sessions.push(rec.session_id);
    }
    let kept = b.agent("kairix").await.unwrap().summary_version;

    let r = b.forget_user("zoe", Some("nova")).await.unwrap();
    assert_eq!(
        (r.sessions, r.turns, r.session_summaries, r.facts, r.vectors),
        (1, 2, 1, 1, 2)
    );
    assert_eq!(r.inbox_rows, 2, "its summary's and its fact's");
    assert_eq!(r.agents, ["nova".to_string()].into());
    assert!(r.removed_ids.contains(&sessions[1]));
    assert!(b.session(sessions[0]).await.unwrap().is_some());
    assert!(b.session(sessions[1]).await.unwrap().is_none());
    assert!(b.turns(sessions[1]).await.unwrap().is_empty());
    assert!(b.user_sessions("nova", "zoe").await.unwrap().is_empty());
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, kept);

    let r = b.forget_user("zoe", None).await.unwrap();
    assert_eq!((r.sessions, r.session_summaries, r.facts), (1, 1, 1));
    assert!(b.forget_user("zoe", None).await.unwrap().is_empty());
    assert!(b.user_sessions("kairix", "zoe").await.unwrap().is_empty());
    assert!(b.user_facts("kairix", "zoe").await.unwrap().is_empty());
    // ada's are all there
    assert!(b.session(sessions[2]).await.unwrap().is_some());
    assert!(b.summary(sessions[2]).await.unwrap().is_some());
    assert_eq!(b.turns(sessions[2]).await.unwrap().len(), 2);
    assert_eq!(b.user_facts("kairix", "ada").await.unwrap().len(), 1);
    assert!(b.pending_forgets().await.unwrap().is_empty());
    let inbox = b.inbox(None, 100).await.unwrap();
    assert_eq!(inbox.len(), 2, "only ada's summary and fact are left");
    assert!(b.agent("kairix").await.unwrap().summary_version > kept);
}

/// The Store actor answers reads that scan from the blocking pool; a read
/// sent after writes still sees every one of them (turns a backend has not
/// written yet among them).
async fn a_read_off_the_writer_sees_the_writes_sent_before_it(h: &Harness) {
    let b = h.open().await;
    let embed: Arc<dyn crate::embed::Embed> = Arc::new(crate::embed::HashingEmbed::default());
    let (store, handle) = Actor::spawn(
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
    .unwrap();
    let rec = opened(7, "kairix", "mark", 0);
    let id = rec.session_id;
    store.cast(StoreMsg::OpenSession(rec.clone())).unwrap();
    for seq in 0..200u32 {
        let turn = turn(&format!("turn {seq}"), rec.started_at);
        store
            .cast(StoreMsg::append_turn(id, seq, &turn).unwrap())
            .unwrap();
        if seq % 50 == 49 {
            let turns = ractor::call!(store, StoreMsg::GetTurns, id)
                .unwrap()
                .unwrap();
            assert_eq!(turns.len() as u32, seq + 1);
            assert_eq!(turns.last().unwrap().user_message, format!("turn {seq}"));
        }
    }
    let e = ended(rec, 200);
    store.cast(StoreMsg::EndSession(e)).unwrap();
    let listed = ractor::call!(store, StoreMsg::ListSessions, Some("kairix".into()))
        .unwrap()
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].ended_at.is_some(), "the end sent before the read");
    let queued = ractor::call!(store, StoreMsg::ListQueue).unwrap().unwrap();
    assert_eq!(queued.len(), 1);
    let (rec, turns) = ractor::call!(store, |reply| StoreMsg::LoadSession {
        session_id: id,
        reply
    })
    .unwrap()
    .unwrap()
    .unwrap();
    assert_eq!((rec.turn_count, turns.len()), (200, 200));
    store.stop(None);
    handle.await.unwrap();
}

fn listing(limit: usize) -> SessionListing {
    SessionListing {
        limit,
        ..SessionListing::default()
    }
}

fn agents(names: &[&str]) -> Option<Vec<String>> {
    Some(names.iter().map(|a| a.to_string()).collect())
}

async fn sessions_are_listed_newest_first_and_read_no_further_than_the_limit(h: &Harness) {
    let b = h.open().await;
    // 1 (oldest) to 5 (newest); 2 and 4 live.
    let calls = [
        (1, "kairix", "mark", 10, true),
        (2, "kairix", "ada", 20, false),
        (3, "nova", "mark", 30, true),
        (4, "kairix", "mark", 40, false),
        (5, "kairix", "mark", 50, true),
    ];
    for (id, agent, user, minute, end) in calls {
        let rec = opened(id, agent, user, minute);
        b.open_session(&rec).await.unwrap();
        if end {
            let e = ended(rec, 0);
            b.end_session(&e, e.ended_at.unwrap()).await.unwrap();
        }
    }
    let list = |q: SessionListing| {
        let b = b.clone();
        async move { ids(b.list_sessions(&q).await.unwrap()) }
    };
    let before = |id: u128| {
        let (_, _, _, minute, _) = calls[id as usize - 1];
        Some((at(5, minute), Uuid::from_u128(id)))
    };
    assert_eq!(list(listing(10)).await, [5, 4, 3, 2, 1]);
    assert_eq!(list(listing(2)).await, [5, 4]);
    assert!(list(listing(0)).await.is_empty());
    // the next page starts after the last session of the one before
    let next = SessionListing {
        before: before(4),
        ..listing(2)
    };
    assert_eq!(list(next).await, [3, 2]);
    // agents: one, several (a token's), none
    let of = |names: &[&str], limit| SessionListing {
        agents: agents(names),
        ..listing(limit)
    };
    assert_eq!(list(of(&["kairix"], 10)).await, [5, 4, 2, 1]);
    assert_eq!(list(of(&["kairix", "nova"], 10)).await, [5, 4, 3, 2, 1]);
    assert_eq!(list(of(&["nova", "kairix"], 3)).await, [5, 4, 3]);
    assert_eq!(list(of(&["nova"], 10)).await, [3]);
    assert!(list(of(&[], 10)).await.is_empty());
    assert!(list(of(&["kairi"], 10)).await.is_empty());
    // a user, with every agent, one or several
    let mark = |names: Option<&[&str]>, limit| SessionListing {
        agents: names.and_then(agents),
        user_id: Some("mark".into()),
        ..listing(limit)
    };
    assert_eq!(list(mark(None, 10)).await, [5, 4, 3, 1]);
    assert_eq!(list(mark(Some(&["kairix"]), 10)).await, [5, 4, 1]);
    assert_eq!(list(mark(Some(&["kairix", "nova"]), 3)).await, [5, 4, 3]);
    let next = SessionListing {
        before: before(4),
        ..mark(None, 10)
    };
    assert_eq!(list(next).await, [3, 1]);
    // live or ended
    let live = |live, limit| SessionListing {
        live: Some(live),
        ..listing(limit)
    };
    assert_eq!(list(live(true, 10)).await, [4, 2]);
    assert_eq!(list(live(false, 10)).await, [5, 3, 1]);
    assert_eq!(list(live(false, 1)).await, [5]);
    let next = SessionListing {
        before: before(4),
        ..live(true, 10)
    };
    assert_eq!(list(next).await, [2]);
    let next = SessionListing {
        before: before(5),
        agents: agents(&["kairix"]),
        ..live(false, 10)
    };
    assert_eq!(list(next).await, [1]);
    let theirs = SessionListing {
        agents: agents(&["kairix"]),
        user_id: Some("mark".into()),
        ..live(true, 10)
    };
    assert_eq!(list(theirs).await, [4]);

    // A page reads the sessions it returns and no older one: the oldest,
    // damaged, is met only by a listing that reaches it.
    drop(b);
    h.damage("sessions", Uuid::from_u128(1)).await;
    let b = h.open().await;
    for q in [
        listing(4),
        of(&["kairix"], 3),
        of(&["kairix", "nova"], 4),
        mark(None, 3),
        mark(Some(&["kairix"]), 2),
        live(false, 2),
    ] {
        assert_eq!(b.list_sessions(&q).await.unwrap().len(), q.limit);
        assert_eq!(b.skipped_records(), 0, "{q:?} read past its page");
    }
    assert_eq!(
        ids(b.list_sessions(&listing(10)).await.unwrap()),
        [5, 4, 3, 2]
    );
    assert_eq!(b.skipped_records(), 1);
}

fn summaries_of(v: Vec<ConversationSummary>) -> Vec<Uuid> {
    v.into_iter().map(|s| s.summary_id).collect()
}

async fn summaries_are_listed_newest_first_across_types_and_read_no_further_than_the_limit(
    h: &Harness,
) {
    let b = h.open().await;
    let session = |user: &str, agent: &str, day, minute| {
        ConversationSummary::session(Uuid::new_v4(), agent, user, at(day, minute), "a call")
    };
    // By period end: m1 (day 1), d1 (day 1 to 2), a2 (day 2, later), m3.
    let m1 = session("mark", "kairix", 1, 0);
    let a2 = session("ada", "kairix", 2, 30);
    let m3 = session("mark", "kairix", 3, 0);
    let n3 = session("mark", "nova", 3, 10);
    for s in [&m1, &a2, &m3, &n3] {
        assert!(b.complete_reflection(s, &[], &[]).await.unwrap());
    }
    let d1 = daily("kairix", "mark", 1, &[m1.summary_id], "day one");
    assert!(b.put_rollup(&d1, None, None).await.unwrap());
    let (m1, d1, a2, m3) = (m1.summary_id, d1.summary_id, a2.summary_id, m3.summary_id);

    let page = |limit| SummaryListing {
        limit,
        ..SummaryListing::default()
    };
    let list = |agent: &'static str, q: SummaryListing| {
        let b = b.clone();
        async move { summaries_of(b.list_summaries(agent, &q).await.unwrap()) }
    };
    assert_eq!(list("kairix", page(10)).await, [m3, a2, d1, m1]);
    assert_eq!(list("kairix", page(2)).await, [m3, a2]);
    assert!(list("kairix", page(0)).await.is_empty());
    assert_eq!(list("nova", page(10)).await, [n3.summary_id]);
    let of_kind = |kind| SummaryListing {
        kind: Some(kind),
        ..page(10)
    };
    assert_eq!(
        list("kairix", of_kind(SummaryType::Session)).await,
        [m3, a2, m1]
    );
    assert_eq!(list("kairix", of_kind(SummaryType::Daily)).await, [d1]);
    assert!(list("kairix", of_kind(SummaryType::Weekly))
        .await
        .is_empty());
    let marks = |limit| SummaryListing {
        user_id: Some("mark".into()),
        ..page(limit)
    };
    assert_eq!(list("kairix", marks(10)).await, [m3, d1, m1]);
    let since = SummaryListing {
        since: Some(at(2, 0)),
        ..page(10)
    };
    assert_eq!(list("kairix", since).await, [m3, a2, d1]);
    let until = SummaryListing {
        until: Some(at(1, 30)),
        ..page(10)
    };
    assert_eq!(list("kairix", until).await, [d1, m1]);
    // the next page starts after the last summary of the one before
    let next = SummaryListing {
        before: Some((at(2, 30), a2)),
        ..page(2)
    };
    assert_eq!(list("kairix", next).await, [d1, m1]);
    let next = SummaryListing {
        before: Some((at(3, 0), m3)),
        ..marks(1)
    };
    assert_eq!(list("kairix", next).await, [d1]);

    // A page reads the summaries it passes and no older one.
    drop(b);
    h.damage("summaries", m1).await;
    let b = h.open().await;
    for q in [page(3), marks(2), of_kind(SummaryType::Daily)] {
        assert!(!b.list_summaries("kairix", &q).await.unwrap().is_empty());
        assert_eq!(b.skipped_records(), 0, "{q:?} read past its page");
    }
    assert_eq!(
        summaries_of(b.list_summaries("kairix", &page(10)).await.unwrap()),
        [m3, a2, d1]
    );
    assert_eq!(b.skipped_records(), 1);
}

fn letter(id: u128, agent: &str, user: &str, minute: u32) -> DeadLetter {
    DeadLetter {
        session_id: Uuid::from_u128(id),
        agent_id: agent.into(),
        user_id: user.into(),
        attempts: 3,
        error: "timed out".into(),
        error_kind: "timeout".into(),
        failed_at: at(5, minute),
    }
}

/// The count of dead letters, checked against the listing of them all.
async fn counted(b: &dyn Backend) -> u64 {
    let n = b.dead_letter_count().await.unwrap();
    assert_eq!(n as usize, b.dead_letters().await.unwrap().len());
    n
}

async fn dead_letters_are_counted_on_every_change_and_listed_by_agent_a_page_at_a_time(
    h: &Harness,
) {
    let b = h.open().await;
    let of = |agent: &'static str, limit| {
        let b = b.clone();
        async move {
            let v = b.agent_dead_letters(agent, None, limit).await.unwrap();
            v.into_iter()
                .map(|d| (d.session_id.as_u128(), d.failed_at))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(counted(&*b).await, 0);
    b.dead_letter(&letter(1, "kairix", "mark", 30))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    // the same session's letter again (its failure time moved): one letter,
    // listed once, at its new time
    b.dead_letter(&letter(1, "kairix", "mark", 35))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    assert_eq!(of("kairix", 10).await, [(1, at(5, 35))]);
    b.dead_letter(&letter(2, "kairix", "ada", 20))
        .await
        .unwrap();
    b.dead_letter(&letter(3, "nova", "mark", 10)).await.unwrap();
    assert_eq!(counted(&*b).await, 3);
    // an agent's, oldest first, up to the limit
    assert_eq!(of("kairix", 10).await, [(2, at(5, 20)), (1, at(5, 35))]);
    assert_eq!(of("kairix", 1).await, [(2, at(5, 20))]);
    // the next page: after the last one listed
    let next = b
        .agent_dead_letters("kairix", Some((at(5, 20), Uuid::from_u128(2))), 10)
        .await
        .unwrap();
    assert_eq!(next, [letter(1, "kairix", "mark", 35)]);
    let past = b
        .agent_dead_letters("kairix", Some((at(5, 35), Uuid::from_u128(1))), 10)
        .await
        .unwrap();
    assert!(past.is_empty(), "{past:?}");
    assert_eq!(of("nova", 10).await, [(3, at(5, 10))]);
    assert!(of("kairi", 10).await.is_empty());
    assert!(of("kairix", 0).await.is_empty());
    assert_eq!(
        b.find_dead_letter(Uuid::from_u128(2)).await.unwrap(),
        Some(letter(2, "kairix", "ada", 20))
    );
    assert!(b
        .find_dead_letter(Uuid::from_u128(9))
        .await
        .unwrap()
        .is_none());
    // a retry takes it off
    b.requeue(Uuid::from_u128(2), at(5, 40)).await.unwrap();
    assert_eq!(counted(&*b).await, 2);
    assert_eq!(of("kairix", 10).await, [(1, at(5, 35))]);
    // so does its summary, stored; and a summarized session gets none
    let s = ConversationSummary::session(Uuid::from_u128(1), "kairix", "mark", at(5, 0), "done");
    assert!(b.complete_reflection(&s, &[], &[]).await.unwrap());
    assert_eq!(counted(&*b).await, 1);
    assert!(of("kairix", 10).await.is_empty());
    b.dead_letter(&letter(1, "kairix", "mark", 50))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    b.dead_letter(&letter(4, "kairix", "mark", 40))
        .await
        .unwrap();
    b.dead_letter(&letter(5, "kairix", "ada", 50))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 3);

    // Counted again at open, damaged letters too (they are stored); a page
    // reads no letter past it.
    drop(b);
    h.damage("dead_letters", Uuid::from_u128(5)).await;
    let b = h.open().await;
    assert_eq!(b.dead_letter_count().await.unwrap(), 3);
    let page = b.agent_dead_letters("kairix", None, 1).await.unwrap();
    assert_eq!(page, [letter(4, "kairix", "mark", 40)]);
    assert_eq!(b.skipped_records(), 0, "read past its page");
    assert_eq!(
        b.agent_dead_letters("kairix", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(b.skipped_records(), 1);
    // a forget takes the user's letters, every agent's
    let r = b.forget_user("mark", None).await.unwrap();
    assert_eq!(r.dead_letters, 2);
    assert_eq!(b.dead_letter_count().await.unwrap(), 1);
    assert!(b
        .agent_dead_letters("nova", None, 10)
        .await
        .unwrap()
        .is_empty());
}
