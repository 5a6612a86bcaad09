use super::*;
use crate::store::contract::TestSchema;
use chrono::TimeZone;

fn summary(id: Uuid, text: &str) -> ConversationSummary {
    let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    ConversationSummary::session(id, "kairix", "mark", t, text)
}

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn a_record_that_does_not_decode_is_skipped_and_counted() {
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    pg.complete_reflection(&summary(Uuid::new_v4(), "ok"), &[], &[])
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO summaries (summary_id, agent_id, user_id, kind, period_end, current, body)
         VALUES ($1, 'kairix', 'mark', 0, now(), true, '{\"broken\": true}')",
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

#[tokio::test]
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
    pg.append_turn(keys::turn(id, 0), &turn(0)).await.unwrap();
    // The table is away: the batch fails, and its turns wait.
    sqlx::query("ALTER TABLE turns RENAME TO turns_away")
        .execute(pg.pool())
        .await
        .unwrap();
    assert!(matches!(pg.flush().await, Err(StoreError::Postgres(_))));
    pg.append_turn(keys::turn(id, 1), &turn(1)).await.unwrap();
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

#[tokio::test]
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
