use super::*;
use crate::store::contract::TestSchema;
use chrono::TimeZone;

fn summary(id: Uuid, text: &str) -> ConversationSummary {
    let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    ConversationSummary::session(id, "kairix", "mark", t, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_once_and_a_newer_database_is_refused() {
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    assert_eq!(pg.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    assert_eq!(pg.migrate().await.unwrap(), 0, "nothing left to apply");
    // Instances starting together: the lock makes them take turns.
    let (a, b) = tokio::join!(
        PgBackend::connect(&schema.settings),
        PgBackend::connect(&schema.settings)
    );
    a.unwrap();
    b.unwrap();
    // A newer recall migrated this schema further.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (999, 'from the future', true, '\\x00', 1)",
    )
    .execute(pg.pool())
    .await
    .unwrap();
    let err = PgBackend::connect(&schema.settings)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, StoreError::NewerDatabase { found: 999, .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "PostgreSQL schema `{}` is at migration 999; this build of recall knows migrations up to {PG_SCHEMA_VERSION}: run a newer recall",
            schema.settings.schema
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_speakers_were_kept_is_migrated_and_its_facts_are_the_users() {
    let schema = TestSchema::new();
    let pg = PgBackend::open(&schema.settings).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA \"{}\"", schema.settings.schema))
        .execute(pg.pool())
        .await
        .unwrap();
    migrator_of(&MIGRATIONS[..2]).run(pg.pool()).await.unwrap();
    // a fact as version 2 stored it: no speaker in its body or its row
    let id = Uuid::new_v4();
    let body = format!(
        r#"{{"fact_id":"{id}","agent_id":"kairix","user_id":"mark","category":"hobby","content":"Keeps bees","extracted_at":"2026-03-01T09:00:00Z"}}"#
    );
    sqlx::query(
        "INSERT INTO facts (fact_id, agent_id, user_id, shared, extracted_at, body)
         VALUES ($1, 'kairix', 'mark', false, now(), $2::json)",
    )
    .bind(id)
    .bind(&body)
    .execute(pg.pool())
    .await
    .unwrap();
    assert_eq!(pg.migrate().await.unwrap(), MIGRATIONS.len() - 2);
    assert_eq!(pg.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    let fact = pg.fact(id).await.unwrap().unwrap();
    assert_eq!(fact.speaker, crate::model::Speaker::User);
    let column: String = sqlx::query_scalar("SELECT speaker FROM facts WHERE fact_id = $1")
        .bind(id)
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert_eq!(column, "user");
    // the agent side's facts are stored as its own, in the column too
    let (call, s) = (Uuid::new_v4(), summary(Uuid::new_v4(), "a call"));
    let mut agent = fact.fact.clone();
    agent.fact_id = Uuid::new_v4();
    agent.source_session_id = Some(call);
    agent.content = "Will send the list on Friday".into();
    agent.speaker = crate::model::Speaker::Agent;
    pg.complete_reflection(&s, &[], std::slice::from_ref(&agent))
        .await
        .unwrap();
    let column: String = sqlx::query_scalar("SELECT speaker FROM facts WHERE fact_id = $1")
        .bind(agent.fact_id)
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert_eq!(column, "agent");
    assert_eq!(
        pg.fact(agent.fact_id).await.unwrap().unwrap().speaker,
        crate::model::Speaker::Agent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_answer_is_a_connect_error_without_the_password() {
    let mut settings = TestSchema::new().settings.clone();
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    settings.url = format!("postgres://recall:s3cret@127.0.0.1:{port}/recall");
    settings.connect_timeout_secs = 1;
    let err = PgBackend::connect(&settings)
        .await
        .err()
        .expect("no server");
    assert!(matches!(err, StoreError::Connect { .. }));
    let shown = err.to_string();
    assert_eq!(
        shown,
        format!("cannot connect to PostgreSQL at postgres://recall@127.0.0.1:{port}/recall")
    );
    assert!(!shown.contains("s3cret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_does_not_decode_is_skipped_and_counted() {
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    pg.complete_reflection(&summary(Uuid::new_v4(), "ok"), &[], &[])
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO summaries
           (summary_id, agent_id, user_id, kind, period_start, period_end, current, body)
         VALUES ($1, 'kairix', 'mark', 0, now(), now(), true, '{\"broken\": true}')",
    )
    .bind(Uuid::new_v4())
    .execute(pg.pool())
    .await
    .unwrap();
    for _ in 0..2 {
        let all = pg
            .summaries("kairix", SummaryType::Session, None)
            .await
            .unwrap();
        assert_eq!(all.len(), 1);
    }
    assert_eq!(pg.skipped_records(), 1, "counted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_whose_batch_failed_wait_for_the_next_flush() {
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    let id = Uuid::new_v4();
    let turn = |n: u32| {
        serde_json::to_vec(&ConversationTurn {
            user_message: format!("turn {n}"),
            agent_response: "ok".into(),
            timestamp: Utc::now(),
        })
        .unwrap()
    };
    pg.append_turn(id, 0, &turn(0)).await.unwrap();
    // The table is away: the batch fails, and its turns wait.
    sqlx::query("ALTER TABLE turns RENAME TO turns_away")
        .execute(pg.pool())
        .await
        .unwrap();
    assert!(matches!(pg.flush().await, Err(StoreError::Postgres(_))));
    pg.append_turn(id, 1, &turn(1)).await.unwrap();
    assert_eq!(pg.pending_turns(), 2);
    sqlx::query("ALTER TABLE turns_away RENAME TO turns")
        .execute(pg.pool())
        .await
        .unwrap();
    pg.flush().await.unwrap();
    assert_eq!(pg.pending_turns(), 0);
    let texts: Vec<String> = pg
        .turns(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.user_message)
        .collect();
    assert_eq!(texts, ["turn 0", "turn 1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_stored_before_their_call_time_was_kept_get_it_from_their_session() {
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    let old_call = SessionRecord {
        session_id: Uuid::new_v4(),
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        connection_id: "c1".into(),
        started_at: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
        ended_at: Some(Utc.with_ymd_and_hms(2026, 3, 1, 9, 5, 0).unwrap()),
        end_reason: Some(EndReason::Disconnect),
        turn_count: 1,
    };
    pg.end_session(&old_call, old_call.started_at)
        .await
        .unwrap();
    // an old record: no stated_at, extracted long after its call
    let old = Fact {
        fact_id: Uuid::new_v4(),
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        category: crate::model::FactCategory::Other,
        content: "Lives in Austin".into(),
        subject: Some("home".into()),
        visibility: Visibility::Private,
        source_session_id: Some(old_call.session_id),
        extracted_at: Utc.with_ymd_and_hms(2026, 3, 20, 9, 0, 0).unwrap(),
        conflicts_with: None,
        speaker: Default::default(),
    };
    sqlx::query(
        "INSERT INTO facts (fact_id, agent_id, user_id, shared, extracted_at, body)
         VALUES ($1, 'kairix', 'mark', false, $2, $3::json)",
    )
    .bind(old.fact_id)
    .bind(old.extracted_at)
    .bind(serde_json::to_string(&old).unwrap())
    .execute(pg.pool())
    .await
    .unwrap();
    let call = Uuid::new_v4();
    let s = ConversationSummary::session(
        call,
        "kairix",
        "mark",
        Utc.with_ymd_and_hms(2026, 3, 5, 9, 0, 0).unwrap(),
        "a call",
    );
    let denver = Fact {
        fact_id: Uuid::new_v4(),
        content: "Moved to Denver".into(),
        source_session_id: Some(call),
        ..old.clone()
    };
    pg.complete_reflection(&s, &[], std::slice::from_ref(&denver))
        .await
        .unwrap();
    let austin = pg.fact(old.fact_id).await.unwrap().unwrap();
    assert_eq!(austin.history.stated_at, Some(old_call.started_at));
    assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
    assert!(pg.fact(denver.fact_id).await.unwrap().unwrap().is_current());
}

/// Two instances over one schema.
async fn two(schema: &TestSchema) -> (PgBackend, PgBackend) {
    let a = PgBackend::connect(&schema.settings).await.unwrap();
    let b = PgBackend::connect(&schema.settings).await.unwrap();
    a.heartbeat().await.unwrap();
    b.heartbeat().await.unwrap();
    (a, b)
}

/// `instance`'s heartbeat as if it had stopped a lease and more ago.
async fn dies(on: &PgBackend, instance: &PgBackend) {
    sqlx::query(
        "UPDATE instances SET heartbeat_at = now() - interval '1 hour' WHERE instance_id = $1",
    )
    .bind(instance.instance_id())
    .execute(on.pool())
    .await
    .unwrap();
}

fn record(n: u128, user: &str) -> SessionRecord {
    SessionRecord {
        session_id: Uuid::from_u128(n),
        agent_id: "kairix".into(),
        user_id: user.into(),
        connection_id: format!("c{n}"),
        started_at: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
        ended_at: None,
        end_reason: None,
        turn_count: 0,
    }
}

async fn turn(b: &PgBackend, id: Uuid, seq: u32) {
    let t = ConversationTurn {
        user_message: format!("turn {seq}"),
        agent_response: "ok".into(),
        timestamp: Utc.with_ymd_and_hms(2026, 3, 1, 9, 1, 0).unwrap(),
    };
    b.append_turn(id, seq, &serde_json::to_vec(&t).unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_died_leaves_its_open_sessions_and_claims_to_another() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    let live = record(1, "mark");
    a.open_session(&live).await.unwrap();
    turn(&a, live.session_id, 0).await;
    // A is alive: its session and its reflection are its own.
    assert!(b.orphaned_sessions().await.unwrap().is_empty());
    let mut done = record(2, "ada");
    a.open_session(&done).await.unwrap();
    turn(&a, done.session_id, 0).await;
    done.ended_at = Some(done.started_at);
    done.end_reason = Some(EndReason::Disconnect);
    done.turn_count = 1;
    a.end_session(&done, done.started_at).await.unwrap();
    assert!(b.claim_jobs(10).await.unwrap().is_empty());
    assert!(
        a.claim_jobs(10).await.unwrap().is_empty(),
        "claimed already"
    );

    // A dies: B takes its open session, once, and its reflection when the
    // claim lapses.
    dies(&b, &a).await;
    let taken = b.orphaned_sessions().await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].session_id, live.session_id);
    assert!(b.orphaned_sessions().await.unwrap().is_empty(), "B's now");
    assert!(
        a.orphaned_sessions().await.unwrap().is_empty(),
        "B is alive"
    );
    sqlx::query("UPDATE reflection_queue SET claimed_until = now() - interval '1 second'")
        .execute(b.pool())
        .await
        .unwrap();
    let jobs = b.claim_jobs(10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].session_id, done.session_id);
    assert!(a.claim_jobs(10).await.unwrap().is_empty());
    // A heartbeat keeps B's claim.
    b.heartbeat().await.unwrap();
    assert!(a.claim_jobs(10).await.unwrap().is_empty());
    // A clean stop lets go of it.
    b.retire().await.unwrap();
    assert_eq!(a.claim_jobs(10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_until_it_lapses() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    assert!(a.take_lease("rollup").await.unwrap());
    assert!(!b.take_lease("rollup").await.unwrap());
    assert!(a.take_lease("rollup").await.unwrap(), "renewed");
    assert!(b.take_lease("watchdog").await.unwrap(), "another lease");
    sqlx::query("UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = 'rollup'")
        .execute(a.pool())
        .await
        .unwrap();
    assert!(b.take_lease("rollup").await.unwrap(), "taken over");
    assert!(!a.take_lease("rollup").await.unwrap());
    b.retire().await.unwrap();
    assert!(a.take_lease("rollup").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_forget_removed_is_not_written_back_by_another_instance() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    // A call of zoe's goes on on B while A forgets her.
    let mut call = record(1, "zoe");
    b.open_session(&call).await.unwrap();
    turn(&b, call.session_id, 0).await;
    b.flush().await.unwrap();
    let r = a.forget_user("zoe", None).await.unwrap();
    assert_eq!((r.sessions, r.turns), (1, 1));
    turn(&b, call.session_id, 1).await;
    call.ended_at = Some(call.started_at);
    call.end_reason = Some(EndReason::Disconnect);
    call.turn_count = 2;
    b.end_session(&call, call.started_at).await.unwrap();
    assert!(b.session(call.session_id).await.unwrap().is_none());
    assert!(b.turns(call.session_id).await.unwrap().is_empty());
    assert!(b.queued().await.unwrap().is_empty());
    // A reflection of it that was running: not stored.
    let s = ConversationSummary::session(call.session_id, "kairix", "zoe", call.started_at, "x");
    assert!(!b.complete_reflection(&s, &[], &[]).await.unwrap());
    assert!(b.summary(call.session_id).await.unwrap().is_none());
    // A new call of hers is kept.
    let again = record(2, "zoe");
    b.open_session(&again).await.unwrap();
    assert!(a.session(again.session_id).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_left_of_calls_a_forget_ended_goes_with_their_turns_vectors() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    // A call written after another instance removed its records: its
    // turns, a re-written record and its turns' vectors are left.
    let call = record(1, "zoe");
    b.open_session(&call).await.unwrap();
    for seq in 0..2 {
        turn(&b, call.session_id, seq).await;
    }
    b.flush().await.unwrap();
    let v = StoredVector {
        embedder: "static".into(),
        values: vec![0.5; 4],
    };
    let kept = b
        .put_turn_vectors(call.session_id, &[(0, v.clone()), (1, v)])
        .await
        .unwrap();
    assert_eq!(kept, vec![0, 1]);
    let other = record(2, "mark");
    b.open_session(&other).await.unwrap();
    turn(&b, other.session_id, 0).await;
    b.flush().await.unwrap();

    assert_eq!(a.forget_sessions(&[call.session_id]).await.unwrap(), 1);
    assert!(b.session(call.session_id).await.unwrap().is_none());
    assert!(b.turns(call.session_id).await.unwrap().is_empty());
    for seq in 0..2 {
        let id = TurnRef {
            session_id: call.session_id,
            seq,
        }
        .doc_id();
        assert!(b.vector(id).await.unwrap().is_none(), "turn {seq}'s vector");
    }
    // Another user's call is whole; nothing left is nothing done.
    assert_eq!(b.turns(other.session_id).await.unwrap().len(), 1);
    assert_eq!(a.forget_sessions(&[call.session_id]).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_current_rollup_per_user_and_period_whoever_made_it() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    let day = |id: u128, sources: &[u128]| {
        let mut s = summary(Uuid::from_u128(id), "a day");
        s.summary_type = SummaryType::Daily;
        s.source_summary_ids = sources.iter().map(|n| Uuid::from_u128(*n)).collect();
        s
    };
    // Two instances roll the same day up from different sources.
    assert!(a.put_rollup(&day(10, &[1]), None, None).await.unwrap());
    assert!(!b.put_rollup(&day(11, &[1, 2]), None, None).await.unwrap());
    // A later version replaces the current one; a second replacement of
    // the same version is refused.
    let mut v2 = day(12, &[1, 2]);
    v2.supersedes = Some(Uuid::from_u128(10));
    assert!(b
        .put_rollup(&v2, Some(Uuid::from_u128(10)), None)
        .await
        .unwrap());
    let mut fork = day(13, &[1, 2, 3]);
    fork.supersedes = Some(Uuid::from_u128(10));
    assert!(!a
        .put_rollup(&fork, Some(Uuid::from_u128(10)), None)
        .await
        .unwrap());
    let current: Vec<Uuid> = a
        .summaries("kairix", SummaryType::Daily, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.is_current())
        .map(|s| s.summary_id)
        .collect();
    assert_eq!(current, [Uuid::from_u128(12)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_announced_to_the_other_instances_only() {
    let schema = TestSchema::new();
    let (a, b) = two(&schema).await;
    let mut feed_b = b.follow().await.unwrap().expect("a feed");
    let mut feed_a = a.follow().await.unwrap().expect("a feed");
    let change = Change {
        agent_id: "kairix".into(),
        user_id: Some("mark".into()),
        parts: Parts::FACTS | Parts::SUMMARIES,
    };
    a.publish(std::slice::from_ref(&change)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), feed_b.recv())
        .await
        .expect("announced")
        .unwrap();
    assert_eq!(got, RemoteChange::Changed(change));
    // A does not hear itself.
    let own = tokio::time::timeout(Duration::from_millis(300), feed_a.recv()).await;
    assert!(own.is_err(), "{own:?}");
    // Another schema's changes are not this one's.
    let other = TestSchema::new();
    let c = PgBackend::connect(&other.settings).await.unwrap();
    c.publish(&[Change {
        agent_id: "kairix".into(),
        user_id: None,
        parts: Parts::ALL,
    }])
    .await
    .unwrap();
    let stray = tokio::time::timeout(Duration::from_millis(300), feed_b.recv()).await;
    assert!(stray.is_err(), "{stray:?}");
}
