//! Message-level tests of the runtime under tokio's paused time.

use std::sync::Arc;
use std::time::Duration;

use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::engine::store::{StoreError, Trees};
use recall::testkit::{test_epoch, ScriptedReflect, Step, TestRuntime};
use recall::{
    BlockLabel, ContextOptions, EndOptions, EndReason, InputError, RecallError, RuntimeBuilder,
    Settings, StartupError, SummaryType, TouchOptions, Turn,
};
use tokio::time::advance;

use crate::common;
use common::settle;

type Res = anyhow::Result<()>;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn chrono_secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

#[tokio::test(start_paused = true)]
async fn silence_ends_a_session_exactly_at_the_timeout_after_the_last_turn() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    advance(secs(100)).await;
    rt.record_turn(
        "c1",
        Turn::new("I have an interview at Globex", "Let's prepare"),
    )?;
    settle(&rt).await;
    advance(secs(299)).await;
    settle(&rt).await;
    assert!(rt.live_session("c1").await?.is_some(), "ended early");
    advance(secs(1)).await;
    settle(&rt).await;
    assert!(rt.live_session("c1").await?.is_none(), "still live");
    let s = rt.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::SilenceTimeout));
    assert_eq!(s.ended_at, Some(test_epoch() + chrono_secs(400)));
    assert_eq!(s.turn_count, 1);
    let summary = rt.summary(rec.session_id).await?.expect("reflected");
    assert_eq!(summary.turn_count, 1);
    assert_eq!(summary.user_id, "mark");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_silence_window_counts_from_the_start_and_an_empty_session_gets_no_summary() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    advance(secs(299)).await;
    settle(&rt).await;
    assert!(rt.live_session("c1").await?.is_some());
    advance(secs(1)).await;
    settle(&rt).await;
    let s = rt.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::SilenceTimeout));
    assert_eq!(s.turn_count, 0);
    assert!(rt
        .summaries("kairix", SummaryType::Session)
        .await?
        .is_empty());
    assert_eq!(rt.stats().await?.supervisor.reflections_running, 0);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn touch_defers_the_silence_end() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("hello", "hi"))?;
    advance(secs(200)).await;
    rt.touch("c1", TouchOptions::default())?;
    settle(&rt).await;
    advance(secs(200)).await;
    settle(&rt).await;
    assert!(
        rt.live_session("c1").await?.is_some(),
        "touch did not defer"
    );
    advance(secs(100)).await;
    settle(&rt).await;
    let s = rt.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::SilenceTimeout));
    assert_eq!(s.ended_at, Some(test_epoch() + chrono_secs(500)));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn disconnect_ends_once_and_gives_one_summary() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "My name is Mark and I work at Initech",
            "Nice to meet you, Mark",
        ),
    )?;
    rt.record_turn(
        "c1",
        Turn::new("I'm looking for a new job", "Let's plan your search"),
    )?;
    advance(secs(30)).await;
    assert_eq!(
        rt.end_session("c1", EndOptions::default())?,
        Some(rec.session_id)
    );
    assert_eq!(
        rt.end_session("c1", EndOptions::default())?,
        None,
        "second end is a no-op"
    );
    settle(&rt).await;
    let s = rt.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::Disconnect));
    assert_eq!(s.turn_count, 2);
    let all = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].summary_id, rec.session_id);
    assert!(all[0].key_entities.contains(&"Initech".to_string()));
    assert_eq!(rt.turns(rec.session_id).await?.len(), 2);
    // a new session on the same connection after a disconnect is allowed
    rt.start_session("kairix", "mark", "c1").await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_turn_after_a_silence_end_opens_a_new_session_and_is_not_lost() -> Res {
    let rt = TestRuntime::start().await?;
    let first = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("first", "one"))?;
    advance(secs(301)).await;
    settle(&rt).await;
    rt.record_turn("c1", Turn::new("second", "two"))?;
    rt.record_turn("c1", Turn::new("third", "three"))?;
    settle(&rt).await;
    let live = rt.live_session("c1").await?.expect("a new session");
    assert_ne!(live.record.session_id, first.session_id);
    assert_eq!(live.record.user_id, "mark");
    let msgs: Vec<_> = live.turns.iter().map(|t| t.user_message.as_str()).collect();
    assert_eq!(msgs, ["second", "third"]);
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    let sessions = rt.sessions(Some("kairix")).await?;
    assert_eq!(sessions.len(), 2);
    let total: u32 = sessions.iter().map(|s| s.turn_count).sum();
    assert_eq!(total, 3);
    assert_eq!(rt.summaries("kairix", SummaryType::Session).await?.len(), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn ending_a_connection_while_a_late_turn_reopens_it_keeps_the_turn() -> Res {
    let rt = TestRuntime::start().await?;
    rt.start_session("kairix", "mark", "c1").await?;
    advance(secs(301)).await;
    settle(&rt).await;
    // the late turn and the hang-up arrive back to back
    let reopened = rt.record_turn("c1", Turn::new("one last thing", "sure"))?;
    // the session being opened is the one ended (and the turn's caller
    // was told its id)
    assert_eq!(rt.end_session("c1", EndOptions::default())?, Some(reopened));
    settle(&rt).await;
    assert!(
        rt.live_session("c1").await?.is_none(),
        "reopened session must end"
    );
    let sessions = rt.sessions(Some("kairix")).await?;
    assert_eq!(sessions.len(), 2);
    let last = &sessions[1];
    assert_eq!(last.session_id, reopened);
    assert_eq!(last.end_reason, Some(EndReason::Disconnect));
    assert_eq!(last.turn_count, 1);
    assert_eq!(rt.summaries("kairix", SummaryType::Session).await?.len(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn clearing_the_context_ends_live_and_reopening_sessions() -> Res {
    let rt = TestRuntime::start().await?;
    let live = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("I'm moving to Lisbon", "Exciting"))?;
    rt.start_session("kairix", "mark", "c2").await?;
    rt.start_session("kairix", "ada", "c3").await?;
    advance(secs(200)).await;
    rt.record_turn("c1", Turn::new("in June", "Noted"))?;
    rt.touch("c3", TouchOptions::default())?;
    advance(secs(150)).await;
    settle(&rt).await;
    // c2 ended by silence; a late turn is reopening it
    let reopening = rt.record_turn("c2", Turn::new("are you there?", "yes"))?;
    let ctx = rt.live_contexts("kairix", "mark").await?;
    assert_eq!(ctx.len(), 1, "only c1 is live: {ctx:?}");
    assert_eq!(ctx[0].turn_count, 2);
    assert_eq!(
        ctx[0].token_estimate,
        "I'm moving to LisbonExcitingin JuneNoted".len().div_ceil(4)
    );
    assert_eq!(ctx[0].idle_secs, 150.0);
    let mut ended = rt.clear_context("kairix", "mark")?;
    ended.sort();
    let mut expected = vec![live.session_id, reopening];
    expected.sort();
    assert_eq!(ended, expected);
    settle(&rt).await;
    assert!(rt.live_contexts("kairix", "mark").await?.is_empty());
    for id in [live.session_id, reopening] {
        let s = rt.session(id).await?.expect("stored");
        assert_eq!(s.end_reason, Some(EndReason::Cleared));
    }
    // another user of the same agent is untouched
    assert!(rt.live_session("c3").await?.is_some());
    // the cleared connection starts fresh on its next turn
    let next = rt.record_turn("c1", Turn::new("hello again", "hi"))?;
    assert_ne!(next, live.session_id);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_a_typed_error_and_changes_nothing() -> Res {
    let mut settings = Settings::for_test();
    settings.session.max_message_chars = 10;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    assert!(matches!(
        rt.record_turn("never-started", Turn::new("hi", "hello")),
        Err(RecallError::UnknownConnection(_))
    ));
    assert!(matches!(
        rt.touch("never-started", TouchOptions::default()),
        Err(RecallError::UnknownConnection(_))
    ));
    assert!(matches!(
        rt.end_session("never-started", EndOptions::default()),
        Err(RecallError::UnknownConnection(_))
    ));
    for (a, u, c) in [
        ("", "mark", "c1"),
        ("kairix", "", "c1"),
        ("kairix", "mark", ""),
    ] {
        let err = rt.start_session(a, u, c).await.unwrap_err();
        assert!(
            matches!(
                err,
                RecallError::Start(recall::engine::supervisor::StartError::Input(
                    InputError::Empty { .. }
                ))
            ),
            "{err}"
        );
    }
    rt.start_session("kairix", "mark", "c1").await?;
    assert!(matches!(
        rt.start_session("kairix", "mark", "c1").await,
        Err(RecallError::Start(
            recall::engine::supervisor::StartError::ConnectionBusy(_)
        ))
    ));
    assert!(matches!(
        rt.record_turn("c1", Turn::new("ééééééééééé", "ok")),
        Err(RecallError::Input(InputError::TooLong {
            len: 11,
            max: 10,
            ..
        }))
    ));
    // ten two-byte characters are within a ten-character limit
    rt.record_turn("c1", Turn::new("éééééééééé", "ok"))?;
    assert!(matches!(
        rt.record_turn("c1", Turn::new(" ", "")),
        Err(RecallError::Input(InputError::EmptyTurn))
    ));
    assert!(matches!(
        rt.set_block("kairix", BlockLabel::Persona, &"x".repeat(2_001))
            .await,
        Err(RecallError::BlockTooLong { limit: 2_000, .. })
    ));
    assert!(rt.block("kairix", BlockLabel::Persona).await?.is_none());
    assert!(matches!(
        rt.set_block("kairix", BlockLabel::BackgroundContext, "x")
            .await,
        Err(RecallError::ManagedBlock(_))
    ));
    settle(&rt).await;
    let live = rt.live_session("c1").await?.expect("live");
    assert_eq!(live.turns.len(), 1, "only the valid turn was recorded");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_reflector_retries_with_backoff_honouring_retry_after() -> Res {
    let reflect = ScriptedReflect::new([Step::ServerError(503), Step::RateLimited(Some(secs(7)))]);
    let rt = TestRuntime::start_with(reflect.clone()).await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("Globex invited me to an onsite", "Great news"),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    let before = tokio::time::Instant::now();
    settle(&rt).await;
    assert_eq!(reflect.calls(), 3);
    assert!(before.elapsed() >= secs(7), "Retry-After not honoured");
    let s = rt
        .summary(rec.session_id)
        .await?
        .expect("stored after retries");
    assert!(!s.fallback);
    assert!(rt.dead_letters().await?.is_empty());
    // the prompt came from the template, with the conversation in it
    let req = &reflect.requests()[0];
    assert!(req
        .prompt
        .contains("User: \"Globex invited me to an onsite\"\nAgent: \"Great news\""));
    assert!(req
        .prompt
        .contains("SESSION START: 2026-01-05T09:00:00+00:00"));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_retry_budget_dead_letters_and_can_be_retried() -> Res {
    let mut settings = Settings::for_test();
    settings.reflector.max_attempts = 3;
    settings.reflector.attempt_timeout_secs = 5;
    let reflect = ScriptedReflect::new([Step::Timeout, Step::Hang, Step::ServerError(502)]);
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("I accepted the Globex offer", "Congratulations"),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    assert_eq!(reflect.calls(), 3);
    assert!(rt.summary(rec.session_id).await?.is_none());
    let dead = rt.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].session_id, rec.session_id);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].error_kind, "server_error");
    assert_eq!(dead[0].user_id, "mark");
    // the session and its turns are intact
    assert_eq!(rt.turns(rec.session_id).await?.len(), 1);
    rt.retry_dead_letter(rec.session_id).await?;
    settle(&rt).await;
    assert!(rt.summary(rec.session_id).await?.is_some());
    assert!(rt.dead_letters().await?.is_empty());
    assert!(matches!(
        rt.retry_dead_letter(rec.session_id).await,
        Err(RecallError::Store(StoreError::DeadLetterNotFound(_)))
    ));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_rejected_request_is_not_retried() -> Res {
    let reflect = ScriptedReflect::new([Step::Rejected(400)]);
    let rt = TestRuntime::start_with(reflect.clone()).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("hi", "hello"))?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    assert_eq!(reflect.calls(), 1);
    assert_eq!(rt.dead_letters().await?[0].error_kind, "rejected");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn malformed_llm_json_falls_back_to_the_raw_text() -> Res {
    let raw = "{\"summary\": \"Mark talked about the Globex onsite with David Park";
    let reflect = ScriptedReflect::new([Step::Reply(raw.into())]);
    let rt = TestRuntime::start_with(reflect).await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("The onsite is on Tuesday", "Good luck"))?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    let s = rt.summary(rec.session_id).await?.expect("stored");
    assert!(s.fallback);
    assert_eq!(s.summary_text, raw);
    assert!(
        s.key_entities.contains(&"David Park".to_string()),
        "{:?}",
        s.key_entities
    );
    assert!(s.topics.contains(&"onsite".to_string()), "{:?}", s.topics);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn reflection_updates_self_perception_and_relationship_blocks() -> Res {
    let reply = r#"{"summary":"Mark got the job.","topics":["offer"],"entities":["Globex"],"emotional_tone":"joyful","relationship":"Mark trusts me with big news.","self_perception":"I am a steady coach."}"#;
    let rt = TestRuntime::start_with(ScriptedReflect::new([Step::Reply(reply.into())])).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("I got the job!", "Wonderful"))?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    // Mark's own, not the agent's (which only its operator writes)
    let rel = rt
        .user_block("kairix", "mark", BlockLabel::Relationship)
        .await?
        .expect("relationship");
    assert_eq!(rel.value, "Mark trusts me with big news.");
    let me = rt
        .user_block("kairix", "mark", BlockLabel::SelfPerception)
        .await?
        .expect("self");
    assert_eq!(me.value, "I am a steady coach.");
    assert!(rt
        .block("kairix", BlockLabel::Relationship)
        .await?
        .is_none());
    assert!(rt
        .block("kairix", BlockLabel::SelfPerception)
        .await?
        .is_none());
    let s = &rt.summaries("kairix", SummaryType::Session).await?[0];
    assert_eq!(s.emotional_tone.as_deref(), Some("joyful"));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn reflections_run_within_the_concurrency_bound_and_the_rest_wait() -> Res {
    let mut settings = Settings::for_test();
    settings.reflector.max_concurrent = 1;
    settings.reflector.attempt_timeout_secs = 10;
    let reflect = ScriptedReflect::new([Step::Hang]);
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    for c in ["c1", "c2", "c3"] {
        rt.start_session("kairix", "mark", c).await?;
        rt.record_turn(c, Turn::new("hello there", "hi"))?;
        rt.end_session(c, EndOptions::default())?;
    }
    // Once the supervisor has taken in the three ends:
    rt.watch_stats()
        .wait_for(|s| s.reflections_running + s.reflections_queued == 3)
        .await?;
    let s = rt.stats().await?.supervisor;
    assert_eq!(s.reflections_running, 1);
    assert_eq!(s.reflections_queued, 2);
    settle(&rt).await;
    assert_eq!(rt.summaries("kairix", SummaryType::Session).await?.len(), 3);
    assert_eq!(reflect.calls(), 4, "one hang, retried, then two more");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn crash_recovery_ends_open_sessions_and_reflects_them_with_every_turn() -> Res {
    let rt = TestRuntime::start().await?;
    let open = rt.start_session("kairix", "mark", "c1").await?;
    for i in 0..5 {
        rt.record_turn(
            "c1",
            Turn::new(format!("message {i} about Globex"), format!("answer {i}")),
        )?;
    }
    settle(&rt).await;
    advance(secs(60)).await;
    let rt = rt.crash_and_restart().await?;
    assert_eq!(rt.recovered().len(), 1);
    let rec = &rt.recovered()[0];
    assert_eq!(rec.session_id, open.session_id);
    assert_eq!(rec.end_reason, Some(EndReason::Recovered));
    assert_eq!(rec.turn_count, 5);
    // last known alive at its last turn, not at the restart
    assert_eq!(rec.ended_at, Some(test_epoch()));
    settle(&rt).await;
    let turns = rt.turns(open.session_id).await?;
    let msgs: Vec<_> = turns.iter().map(|t| t.user_message.clone()).collect();
    assert_eq!(
        msgs,
        (0..5)
            .map(|i| format!("message {i} about Globex"))
            .collect::<Vec<_>>()
    );
    let s = rt
        .summary(open.session_id)
        .await?
        .expect("reflected after recovery");
    assert_eq!(s.turn_count, 5);
    // the connection is usable again
    rt.start_session("kairix", "mark", "c1").await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn queued_reflections_resume_after_a_crash() -> Res {
    let mut settings = Settings::for_test();
    settings.reflector.max_concurrent = 1;
    let reflect = ScriptedReflect::new([Step::Hang, Step::Hang]);
    let rt = TestRuntime::start_full(settings, Arc::new(reflect)).await?;
    for c in ["c1", "c2"] {
        rt.start_session("kairix", "mark", c).await?;
        rt.record_turn(c, Turn::new("hello", "hi"))?;
        rt.end_session(c, EndOptions::default())?;
    }
    rt.watch_stats()
        .wait_for(|s| s.reflections_running + s.reflections_queued == 2)
        .await?;
    assert_eq!(rt.stats().await?.supervisor.reflections_queued, 1);
    let rt = rt.crash_and_restart().await?;
    settle(&rt).await;
    assert_eq!(rt.summaries("kairix", SummaryType::Session).await?.len(), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_panicking_session_actor_is_ended_as_crashed_and_reflected() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("I start at Globex on March 2", "Exciting"))?;
    rt.record_turn("c1", Turn::new("Priya Nair is my lead", "Good to know"))?;
    settle(&rt).await;
    assert!(rt.inject_session_panic("c1"));
    settle(&rt).await;
    let s = rt.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::Crashed));
    assert_eq!(s.turn_count, 2);
    let summary = rt.summary(rec.session_id).await?.expect("reflected");
    assert_eq!(summary.turn_count, 2);
    assert_eq!(rt.stats().await?.supervisor.sessions_crashed, 1);
    // the next turn on the connection opens a new session
    rt.record_turn("c1", Turn::new("still there?", "yes"))?;
    settle(&rt).await;
    let live = rt.live_session("c1").await?.expect("new session");
    assert_ne!(live.record.session_id, rec.session_id);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_keeps_background_context_within_its_limit_with_multibyte_text() -> Res {
    let mut settings = Settings::for_test();
    settings.blocks.background_context_limit = 120;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.set_persistent_context("kairix", vec!["Zoë prefers mornings ☀️".into()])
        .await?;
    rt.start_session("kairix", "zoe", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "Ich habe morgen ein Vorstellungsgespräch bei Müller & Söhne in Köln 🎉 und bin nervös.",
            "Das schaffst du! Lass uns über Müller & Söhne sprechen. 日本語も話せますか？",
        ),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    assert!(rt
        .block("kairix", BlockLabel::BackgroundContext)
        .await?
        .is_none());
    advance(secs(300)).await;
    settle(&rt).await;
    // the agent's block: its persistent context, none of the call
    let block = rt
        .block("kairix", BlockLabel::BackgroundContext)
        .await?
        .expect("rebuilt on the tick");
    assert_eq!(block.value, "- Zoë prefers mornings ☀️");
    assert_eq!(block.limit, 120);
    // the user's own: the call, shortened to fit, the persistent line kept
    let theirs = rt
        .user_block("kairix", "zoe", BlockLabel::BackgroundContext)
        .await?
        .expect("her background");
    assert!(
        theirs.value.chars().count() <= 120,
        "{}",
        theirs.value.chars().count()
    );
    assert!(theirs.value.starts_with("Recent: "), "{}", theirs.value);
    assert!(
        theirs.value.ends_with("\n- Zoë prefers mornings ☀️"),
        "{}",
        theirs.value
    );
    assert_eq!(theirs.limit, 120);
    assert_eq!(theirs.source_user_id.as_deref(), Some("zoe"));
    let stats = rt.stats().await?.watchdog;
    assert!(stats.ticks >= 1 && stats.rebuilt == 1 && stats.failed_ticks == 0);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn background_context_ages_out_of_the_lookback_window() -> Res {
    let rt = TestRuntime::start().await?;
    rt.set_persistent_context("kairix", vec!["Mark is job hunting".into()])
        .await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("The Globex onsite went well", "Great"))?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    assert_eq!(rt.refresh_background_context().await?, 1);
    let agents = rt
        .block("kairix", BlockLabel::BackgroundContext)
        .await?
        .expect("block")
        .value;
    assert_eq!(agents, "- Mark is job hunting", "none of his calls");
    let v = rt.user_background_context("kairix", "mark").await?;
    assert!(
        v.starts_with("Recent: ") && v.ends_with("- Mark is job hunting"),
        "{v}"
    );
    assert_eq!(rt.refresh_background_context().await?, 0, "nothing changed");
    advance(secs(25 * 3600)).await;
    settle(&rt).await;
    let v = rt.user_background_context("kairix", "mark").await?;
    // the session left the look-back: its day's rollup and its topic carry
    // it now, the persistent context stays last
    assert!(!v.contains("Recent: "), "{v}");
    assert!(v.starts_with("Day 2026-01-05: "), "{v}");
    assert!(v.contains("Active topics: globex"), "{v}");
    assert!(v.ends_with("\n- Mark is job hunting"), "{v}");
    Ok(())
}

/// A data folder from a version whose agent-wide block held its users'
/// calls: the watchdog's first run rewrites it, though nothing changed.
#[tokio::test(start_paused = true)]
async fn a_background_block_holding_a_users_words_is_rewritten_at_the_first_run() -> Res {
    use recall::engine::keys;
    let dir = tempfile::tempdir()?;
    let start = || {
        RuntimeBuilder::new(dir.path())
            .settings(Settings::for_test())
            .start()
    };
    let rt = start().await?;
    rt.set_persistent_context("kairix", vec!["Kairix coaches job seekers".into()])
        .await?;
    rt.start_session("kairix", "dana", "d1").await?;
    rt.record_turn("d1", Turn::new("My codeword is periwinkle", "Noted"))?;
    rt.end_session("d1", EndOptions::default())?;
    rt.wait_idle().await?;
    rt.refresh_background_context().await?;
    rt.shutdown().await?;
    {
        let trees = Trees::open(dir.path(), &Settings::default().store)?;
        let mut block = trees
            .block("kairix", BlockLabel::BackgroundContext)?
            .expect("block");
        block.value = "Recent: Dana's codeword is periwinkle".into();
        trees.blocks.insert(
            keys::block("kairix", BlockLabel::BackgroundContext),
            serde_json::to_vec(&block)?,
        )?;
        trees.db.flush()?;
    }
    let rt = start().await?;
    rt.refresh_background_context().await?;
    let value = |rt: recall::Runtime| async move {
        rt.block("kairix", BlockLabel::BackgroundContext)
            .await
            .expect("read")
            .expect("block")
            .value
    };
    assert_eq!(value(rt.clone()).await, "- Kairix coaches job seekers");
    assert_eq!(rt.refresh_background_context().await?, 0, "once only");
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_live_sessions_and_drains_reflections() -> Res {
    let rt = TestRuntime::start().await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("See you tomorrow", "Bye"))?;
    let dir = rt.data_dir().to_path_buf();
    let runtime = rt.runtime().clone();
    let report = runtime.shutdown().await?;
    assert_eq!(report.sessions_ended, 1);
    assert_eq!(report.reflections_left, 0);
    let rt2 = RuntimeBuilder::new(&dir)
        .settings(Settings::for_test())
        .start()
        .await?;
    assert!(rt2.recovered().is_empty());
    let s = rt2.session(rec.session_id).await?.expect("stored");
    assert_eq!(s.end_reason, Some(EndReason::Shutdown));
    assert!(rt2.summary(rec.session_id).await?.is_some());
    rt2.shutdown().await?;
    drop(rt);
    Ok(())
}

#[tokio::test]
async fn a_bad_data_folder_is_a_clear_error() -> Res {
    let dir = tempfile::tempdir()?;
    // a file where the folder should be
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"hello")?;
    let err = RuntimeBuilder::new(&file)
        .start()
        .await
        .err()
        .expect("error");
    assert!(
        matches!(err, StartupError::Store(StoreError::NotADirectory { .. })),
        "{err}"
    );
    // a folder written by a future schema
    let future = dir.path().join("future");
    {
        let trees = Trees::open(&future, &Settings::default().store)?;
        trees
            .meta
            .insert(recall::engine::keys::SCHEMA_KEY, &99u32.to_be_bytes())?;
        trees.db.flush()?;
    }
    let err = RuntimeBuilder::new(&future)
        .start()
        .await
        .err()
        .expect("error");
    match err {
        StartupError::Store(StoreError::IncompatibleSchema {
            found, expected, ..
        }) => {
            assert_eq!((found, expected), (99, 2));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err_text(&future).await.contains("schema version 99"));
    // garbage where sled's files should be
    let junk = dir.path().join("junk");
    std::fs::create_dir(&junk)?;
    std::fs::write(junk.join("conf"), b"\xff\xfe garbage")?;
    std::fs::write(junk.join("db"), vec![0xAB; 4096])?;
    let err = RuntimeBuilder::new(&junk)
        .start()
        .await
        .err()
        .expect("error");
    assert!(matches!(err, StartupError::Store(_)), "{err}");
    Ok(())
}

async fn err_text(dir: &std::path::Path) -> String {
    match RuntimeBuilder::new(dir).start().await {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(start_paused = true)]
async fn one_users_conversations_never_reach_another_users_context() -> Res {
    let reply = |summary: &str, relationship: &str| {
        Step::Reply(
            serde_json::json!({
                "summary": summary,
                "topics": ["life"],
                "relationship": relationship,
                "facts": [{"category": "biographical", "content": format!("{summary} (fact)")}],
            })
            .to_string(),
        )
    };
    let reflect = ScriptedReflect::new([
        reply(
            "Mark prepared for Globex",
            "Mark trusts me with his job search",
        ),
        reply("Ada talked about Porto", "Ada and I talk about her city"),
    ]);
    let rt = TestRuntime::start_full(Settings::for_test(), Arc::new(reflect)).await?;
    rt.start_session("kairix", "mark", "m1").await?;
    rt.record_turn("m1", Turn::new("Globex onsite Monday", "Let's prepare"))?;
    rt.end_session("m1", EndOptions::default())?;
    settle(&rt).await;
    rt.start_session("kairix", "ada", "a1").await?;
    rt.record_turn("a1", Turn::new("Porto is lovely in May", "It is"))?;
    rt.end_session("a1", EndOptions::default())?;
    settle(&rt).await;
    // the agent-wide block holds neither user's calls; each user's own
    // shows theirs only
    rt.refresh_background_context().await?;
    let agent_block = rt
        .block("kairix", BlockLabel::BackgroundContext)
        .await?
        .expect("agent block");
    assert_eq!(agent_block.value, "", "no persistent context here");
    let background = |user: &'static str| {
        let rt = rt.runtime().clone();
        async move {
            rt.user_block("kairix", user, BlockLabel::BackgroundContext)
                .await
                .expect("read")
                .expect("block")
                .value
        }
    };
    let of_mark = background("mark").await;
    assert!(of_mark.contains("Mark prepared for Globex"), "{of_mark}");
    assert!(!of_mark.contains("Porto"), "{of_mark}");
    let of_ada = background("ada").await;
    assert!(of_ada.contains("Ada talked about Porto"), "{of_ada}");
    assert!(!of_ada.contains("Globex"), "{of_ada}");
    // each user's read shows their own relationship; the agent has none
    // (a reflection never writes the agent's)
    let relationship = |user: &'static str| {
        let rt = rt.runtime().clone();
        async move {
            rt.user_block("kairix", user, BlockLabel::Relationship)
                .await
                .expect("read")
                .expect("block")
                .value
        }
    };
    assert_eq!(
        relationship("mark").await,
        "Mark trusts me with his job search"
    );
    assert_eq!(relationship("ada").await, "Ada and I talk about her city");
    assert!(rt
        .user_block("kairix", "zoe", BlockLabel::Relationship)
        .await?
        .is_none());

    let text = |c: &recall::engine::context::AssembledContext| {
        c.to_messages()
            .iter()
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mark = rt
        .context("kairix", "mark", "hello", 4000, ContextOptions::default())
        .await?;
    let mark = text(&mark);
    assert!(mark.contains("Mark prepared for Globex"), "{mark}");
    assert!(mark.contains("Mark trusts me"), "{mark}");
    assert!(mark.contains("(fact)"), "{mark}");
    assert!(!mark.contains("Porto") && !mark.contains("Ada"), "{mark}");
    let ada = text(
        &rt.context("kairix", "ada", "hello", 4000, ContextOptions::default())
            .await?,
    );
    assert!(ada.contains("Ada talked about Porto"), "{ada}");
    assert!(!ada.contains("Globex") && !ada.contains("Mark"), "{ada}");
    Ok(())
}

/// A `Reflect` whose answers wait for the test to release them, one per
/// call, so that a window summary can be caught "processing".
#[derive(Clone)]
struct GatedReflect {
    gate: Arc<tokio::sync::Semaphore>,
    /// Calls so far, watched.
    calls: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for GatedReflect {
    fn default() -> Self {
        GatedReflect {
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            calls: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl GatedReflect {
    fn calls(&self) -> usize {
        *self.calls.borrow()
    }

    /// Waits until `n` calls have come in.
    async fn reached(&self, n: usize) {
        self.calls
            .subscribe()
            .wait_for(|c| *c >= n)
            .await
            .expect("the reflect lives");
    }
}

impl recall::Reflect for GatedReflect {
    fn name(&self) -> &'static str {
        "gated"
    }

    fn reflect(
        &self,
        _request: recall::ReflectRequest,
    ) -> recall::engine::reflect::BoxFuture<'static, Result<String, recall::ReflectError>> {
        let mut n = 0;
        self.calls.send_modify(|c| {
            *c += 1;
            n = *c;
        });
        let gate = self.gate.clone();
        Box::pin(async move {
            let permit = gate.acquire().await.expect("gate open");
            permit.forget();
            Ok(serde_json::json!({ "summary": format!("summary-{n}") }).to_string())
        })
    }
}

/// In-session summaries of every call wait for one of
/// `session.window_concurrency` places: four calls past the threshold,
/// two summaries made at once.
#[tokio::test(start_paused = true)]
async fn in_session_summaries_run_within_their_concurrency_bound() -> Res {
    let mut settings = Settings::for_test();
    settings.session.window_start_messages = 4;
    settings.session.window_messages = 4;
    settings.session.window_concurrency = 2;
    let reflect = GatedReflect::default();
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    for c in ["c1", "c2", "c3", "c4"] {
        rt.start_session("kairix", &format!("user-{c}"), c).await?;
        for round in 0..3 {
            rt.record_turn(c, Turn::new(format!("question {round}"), "answer"))?;
        }
    }
    settle(&rt).await;
    let stats = rt.stats().await?.supervisor;
    assert_eq!(
        stats.windows_started, 4,
        "one per call, at its second round"
    );
    reflect.reached(2).await;
    rt.sync().await?;
    assert_eq!(reflect.calls(), 2, "two made at once, two wait");
    reflect.gate.add_permits(2);
    reflect.reached(4).await;
    rt.sync().await?;
    assert_eq!(reflect.calls(), 4, "the two waiting go next");
    reflect.gate.add_permits(2);
    rt.wait_windows().await?;
    let stats = rt.stats().await?.supervisor;
    assert_eq!((stats.windows_completed, stats.windows_failed), (4, 0));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_context_reads_the_latest_window_summary_or_falls_back_without_waiting() -> Res {
    let mut settings = Settings::for_test();
    settings.session.window_start_messages = 6;
    settings.session.window_messages = 14;
    // seed 003's window, moved at every round
    settings.session.window_every_messages = 2;
    let reflect = GatedReflect::default();
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    let text = |c: &recall::engine::context::AssembledContext| {
        c.to_messages()
            .iter()
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for round in 1..=3 {
        rt.record_turn(
            "c1",
            Turn::new(format!("question {round}"), format!("answer {round}")),
        )?;
    }
    rt.sync().await?;
    // round 3 ended at seq 5: a window summary is processing; the read does
    // not wait for it and uses the raw turns
    let view = rt.live_session("c1").await?.expect("live");
    assert!(view.memory.is_none() && !view.caught_up);
    let c = text(
        &rt.context(
            "kairix",
            "mark",
            "question 4",
            4000,
            ContextOptions::default(),
        )
        .await?,
    );
    assert!(c.contains("question 1") && c.contains("answer 3"), "{c}");
    assert!(!c.contains("summary-"), "{c}");

    // it completes: caught up, the memory replaces rounds 1-3
    reflect.gate.add_permits(1);
    rt.wait_windows().await?;
    let c = text(
        &rt.context(
            "kairix",
            "mark",
            "question 4",
            4000,
            ContextOptions::default(),
        )
        .await?,
    );
    assert!(c.contains("[this call, messages 0-5] summary-1"), "{c}");
    assert!(!c.contains("question 1") && !c.contains("answer 3"), "{c}");

    // round 4 starts window 2 (seq 0-7, base 1); before it completes the
    // read falls back to window 1 plus the gap (round 4)
    rt.record_turn("c1", Turn::new("question 4", "answer 4"))?;
    rt.sync().await?;
    let view = rt.live_session("c1").await?.expect("live");
    assert_eq!(view.memory.as_ref().map(|m| m.id), Some(1));
    assert_eq!(view.gap_start, 6);
    assert!(!view.caught_up);
    let c = text(
        &rt.context(
            "kairix",
            "mark",
            "question 5",
            4000,
            ContextOptions::default(),
        )
        .await?,
    );
    assert!(c.contains("summary-1") && c.contains("question 4"), "{c}");
    assert!(!c.contains("question 2"), "{c}");

    reflect.gate.add_permits(1);
    rt.wait_windows().await?;
    let view = rt.live_session("c1").await?.expect("live");
    let m = view.memory.expect("window 2");
    assert_eq!(
        (m.id, m.start_seq, m.end_seq, m.base_id),
        (2, 0, 7, Some(1))
    );
    assert!(view.caught_up);
    let c = text(
        &rt.context(
            "kairix",
            "mark",
            "question 5",
            4000,
            ContextOptions::default(),
        )
        .await?,
    );
    assert!(c.contains("summary-2") && !c.contains("question 4"), "{c}");
    // the session's own reflection still happens at its end
    reflect.gate.add_permits(10);
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    assert_eq!(rt.summaries("kairix", SummaryType::Session).await?.len(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_previous_call_decays_at_the_soft_and_hard_boundaries() -> Res {
    let mut settings = Settings::for_test();
    settings.context.soft_decay_minutes = 10;
    settings.context.hard_decay_minutes = 30;
    settings.context.turns_after_soft_decay = 1;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("first thing about Lisbon", "ok one"))?;
    advance(secs(60)).await;
    rt.record_turn("c1", Turn::new("second thing about Porto", "ok two"))?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    let raw = |c: &recall::engine::context::AssembledContext| -> Vec<String> {
        c.tiers[4]
            .items
            .iter()
            .map(|i| i.text.to_string())
            .collect()
    };
    let summaries = |c: &recall::engine::context::AssembledContext| c.tiers[2].items.len();
    // at exactly the soft decay: verbatim, without the duplicate summary
    advance(secs(600)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert_eq!(raw(&c).len(), 4, "{:?}", raw(&c));
    assert_eq!(summaries(&c), 0);
    // just past it: the summary and only the last turn
    advance(secs(1)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert_eq!(raw(&c), ["second thing about Porto", "ok two"]);
    assert_eq!(summaries(&c), 1);
    // at exactly the hard decay: still the last turn
    advance(secs(20 * 60 - 1)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert_eq!(raw(&c).len(), 2);
    // past it: nothing of the call but its long-term memory
    advance(secs(1)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert!(raw(&c).is_empty());
    assert_eq!(summaries(&c), 1);
    // a new call started within the soft decay of the previous one's last
    // turn continues it verbatim
    rt.start_session("kairix", "mark", "c2").await?;
    rt.record_turn("c2", Turn::new("third thing", "ok three"))?;
    rt.end_session("c2", EndOptions::default())?;
    settle(&rt).await;
    advance(secs(300)).await;
    rt.start_session("kairix", "mark", "c3").await?;
    rt.record_turn("c3", Turn::new("fourth thing", "ok four"))?;
    rt.sync().await?;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert_eq!(
        raw(&c),
        ["third thing", "ok three", "fourth thing", "ok four"],
        "previous call verbatim, then the live one"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_call_over_the_token_ceiling_is_summarized_early() -> Res {
    let mut settings = Settings::for_test();
    settings.context.max_session_tokens = 50;
    let reflect = GatedReflect::default();
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn("c1", Turn::new("short", "short"))?;
    rt.sync().await?;
    assert_eq!(rt.stats().await?.supervisor.windows_started, 0);
    // well before window_start_messages, but over 50 tokens of raw turns
    rt.record_turn("c1", Turn::new("x".repeat(300), "fine"))?;
    rt.sync().await?;
    assert_eq!(rt.stats().await?.supervisor.windows_started, 1);
    reflect.reached(1).await;
    reflect.gate.add_permits(1);
    rt.wait_windows().await?;
    assert_eq!(reflect.calls(), 1);
    let view = rt.live_session("c1").await?.expect("live");
    assert_eq!(view.memory.as_ref().map(|m| m.end_seq), Some(3));
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert!(c.tiers[4].items.is_empty(), "the raw turns are summarized");
    reflect.gate.add_permits(10);
    Ok(())
}

/// xorshift64*: a seeded generator, so a failing sequence reproduces.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

#[tokio::test(start_paused = true)]
async fn the_cached_context_always_equals_a_fresh_read_from_the_store() -> Res {
    cached_equals_fresh(1024).await
}

#[tokio::test(start_paused = true)]
async fn the_cached_context_equals_a_fresh_read_with_room_for_one_user() -> Res {
    cached_equals_fresh(1).await
}

/// With room for three of four users, the one read longest ago goes: not
/// the first put in, not the latest.
#[tokio::test(start_paused = true)]
async fn a_full_context_cache_evicts_the_least_recently_used() -> Res {
    let mut settings = Settings::for_test();
    settings.context.cache_entries = 3;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    let users = ["u1", "u2", "u3", "u4"];
    for (i, user) in users.iter().enumerate() {
        let conn = format!("c{i}");
        rt.start_session("kairix", user, &conn).await?;
        rt.record_turn(&conn, Turn::new("I live in Porto", "Lovely"))?;
        rt.end_session(&conn, EndOptions::default())?;
    }
    settle(&rt).await;
    // Whether a read of `user` was served from the cache.
    let hit = |user: &'static str| {
        let rt = &rt;
        async move {
            let before = rt.source_cache_stats().hits;
            rt.context("kairix", user, "", 2000, ContextOptions::default())
                .await?;
            anyhow::Ok(rt.source_cache_stats().hits == before + 1)
        }
    };
    for user in ["u1", "u2", "u3"] {
        assert!(!hit(user).await?, "{user} read first");
    }
    assert!(hit("u1").await?, "u1 held");
    // u2 was read longest ago: u4 takes its place.
    assert!(!hit("u4").await?);
    assert_eq!(rt.source_cache_stats().entries, 3);
    assert!(hit("u1").await?, "u1, put in first, read since: held");
    assert!(hit("u3").await?, "u3 held");
    assert!(hit("u4").await?, "u4 held");
    assert!(!hit("u2").await?, "u2 was evicted");
    // and u2 took the place of u1, now the one read longest ago
    assert!(!hit("u1").await?);
    Ok(())
}

async fn cached_equals_fresh(cache_entries: usize) -> Res {
    let mut settings = Settings::for_test();
    settings.context.cache_entries = cache_entries;
    // No window summaries: they finish on the blocking pool at moments the
    // test does not control, and would change the state between two reads.
    settings.session.window_start_messages = 10_000;
    settings.context.turns_after_soft_decay = 1;
    settings.watchdog.lookback_hours = 1;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.set_block(
        "kairix",
        BlockLabel::Persona,
        "I am Kairix, a career coach.",
    )
    .await?;
    let users = ["mark", "ada"];
    let says = [
        "My name is Mark and I work at Globex",
        "I prefer morning calls",
        "I live in Porto",
        "Remember that my interview is on Friday",
        "I'm allergic to peanuts",
        "The onsite went fine",
    ];
    let mut rng = Rng(0xC0FF_EE00_1234_5678);
    let mut live: Vec<(String, &str)> = Vec::new();
    let mut conns = 0;
    for step in 0..120 {
        match rng.below(9) {
            0 | 1 => {
                let user = users[rng.below(2) as usize];
                if !live.iter().any(|(_, u)| *u == user) {
                    conns += 1;
                    let conn = format!("c{conns}");
                    rt.start_session("kairix", user, &conn).await?;
                    live.push((conn, user));
                }
            }
            2 | 3 => {
                if let Some((conn, _)) = live.get(rng.below(live.len() as u64) as usize) {
                    let text = says[rng.below(says.len() as u64) as usize];
                    rt.record_turn(conn, Turn::new(text, "Noted."))?;
                }
            }
            4 => {
                if !live.is_empty() {
                    let (conn, _) = live.remove(rng.below(live.len() as u64) as usize);
                    rt.end_session(&conn, EndOptions::default())?;
                    settle(&rt).await;
                }
            }
            5 => advance(secs(60 * rng.below(45))).await,
            6 => {
                let user = users[rng.below(2) as usize];
                let facts = rt.facts("kairix", user).await?;
                let own: Vec<_> = facts.iter().filter(|f| f.user_id == user).collect();
                if let Some(f) = own.get(rng.below(own.len() as u64) as usize) {
                    if rng.below(4) == 0 {
                        rt.delete_fact(f.fact_id, user).await?;
                    } else {
                        let v = if f.visibility == recall::engine::model::Visibility::Shared {
                            recall::engine::model::Visibility::Private
                        } else {
                            recall::engine::model::Visibility::Shared
                        };
                        rt.set_fact_visibility(f.fact_id, user, v).await?;
                    }
                }
            }
            7 => {
                let n = rng.below(3);
                rt.set_persistent_context("kairix", (0..n).map(|i| format!("note {i}")).collect())
                    .await?;
            }
            _ => {
                rt.set_block("kairix", BlockLabel::Human, &format!("Step {step}"))
                    .await?;
            }
        }
        // Sessions the silence timeout ended while time moved are reflected
        // on the blocking pool: let that land before reading twice.
        settle(&rt).await;
        // Messages that retrieve from what the users said, and one that
        // retrieves nothing.
        let asks = [
            "what next?",
            "Do I still live in Porto?",
            "anything about my peanut allergy",
            "when was the interview",
        ];
        let ask = asks[rng.below(asks.len() as u64) as usize];
        for user in users {
            for budget in [4000, 60] {
                // Once: the settle above is the barrier after which every
                // write of this step is visible.
                let cached = rt
                    .context("kairix", user, ask, budget, ContextOptions::default())
                    .await?;
                let fresh = rt.context("kairix", user, ask, budget, no_cache()).await?;
                assert_eq!(cached, fresh, "step {step}, {user}, budget {budget}");
            }
        }
        // The store's in-memory records (built by the reads) are its
        // trees'.
        assert!(rt.store_mirrors_match().await?, "step {step}");
    }
    let stats = rt.source_cache_stats();
    assert_eq!(stats.entries, cache_entries.min(2));
    assert!(stats.hits + stats.misses >= 120 * 4);
    assert!(
        stats.hits > 100 && stats.misses > 50,
        "both paths exercised: {stats:?}"
    );
    // With room for both users, a write re-reads only what it changed.
    assert!(
        cache_entries == 1 || stats.partial_misses > 20,
        "partial misses exercised: {stats:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_write_rereads_only_the_parts_it_changed() -> Res {
    let rt = TestRuntime::start_full(Settings::for_test(), Arc::new(ExtractiveReflect)).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("I live in Porto and my dog is called Biscuit", "Lovely"),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    let ask = "what's my dog called?";
    let first = rt
        .context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    let stats = rt.source_cache_stats();
    assert_eq!(stats.partial_misses, 0, "a first read reads every part");
    // A block write: the next read keeps the facts, summaries and calls
    // and reads the blocks again.
    rt.set_block("kairix", BlockLabel::Human, "Mark, a runner")
        .await?;
    let after = rt
        .context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    let stats2 = rt.source_cache_stats();
    assert_eq!(stats2.misses, stats.misses + 1);
    assert_eq!(stats2.partial_misses, 1);
    assert_eq!(stats2.parts_read - stats.parts_read, 1, "the blocks alone");
    assert_ne!(first, after, "the new block is shown");
    assert!(after
        .tiers
        .iter()
        .flat_map(|t| &t.items)
        .any(|i| i.text.contains("Mark, a runner")));
    assert_eq!(
        after,
        rt.context("kairix", "mark", ask, 4000, no_cache()).await?
    );
    // A fact's visibility: the facts are read again, the rest kept.
    let fact = rt.facts("kairix", "mark").await?.remove(0);
    rt.set_fact_visibility(
        fact.fact_id,
        "mark",
        recall::engine::model::Visibility::Shared,
    )
    .await?;
    let c = rt
        .context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    let stats3 = rt.source_cache_stats();
    assert_eq!(stats3.partial_misses, 2);
    assert_eq!(stats3.parts_read - stats2.parts_read, 1, "the facts alone");
    assert_eq!(
        c,
        rt.context("kairix", "mark", ask, 4000, no_cache()).await?
    );
    Ok(())
}

/// A reflection that writes blocks (an LLM's `self_perception`) stores
/// them as the user's own, which their context shows and no other user's
/// does: every cached context stays equal to a fresh read.
#[tokio::test(start_paused = true)]
async fn a_reflection_that_writes_blocks_keeps_every_cached_context_current() -> Res {
    let answer = |text: &str| {
        Step::Reply(
            serde_json::json!({"summary": "A short call.", "self_perception": text}).to_string(),
        )
    };
    let reflect = ScriptedReflect::new([answer("I am patient."), answer("I am curious.")]);
    let rt = TestRuntime::start_full(Settings::for_test(), Arc::new(reflect)).await?;
    let call = |user: &'static str, conn: &'static str| {
        let rt = &rt;
        async move {
            rt.start_session("kairix", user, conn).await?;
            rt.record_turn(conn, Turn::new("Hello there", "Hi"))?;
            rt.end_session(conn, EndOptions::default())?;
            settle(rt).await;
            anyhow::Ok(())
        }
    };
    call("mark", "m1").await?;
    let read =
        |user: &'static str| rt.context("kairix", user, "hello", 4000, ContextOptions::default());
    let (mark, li) = (read("mark").await?, read("li").await?);
    assert!(format!("{mark:?}").contains("I am patient."), "{mark:?}");
    assert!(!format!("{li:?}").contains("I am patient."), "{li:?}");
    call("ada", "a1").await?;
    for user in ["mark", "ada", "li"] {
        let c = read(user).await?;
        let text = format!("{c:?}");
        assert_eq!(
            text.contains("I am curious."),
            user == "ada",
            "{user}: {text}"
        );
        assert_eq!(
            c,
            rt.context("kairix", user, "hello", 4000, no_cache())
                .await?
        );
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn another_users_call_leaves_a_cached_context_current() -> Res {
    let mut settings = Settings::for_test();
    // no watchdog rewrite of the agent's block within the test
    settings.watchdog.interval_secs = 86_400;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    for (user, conn, says) in [
        ("mark", "m1", "My dog is called Biscuit"),
        ("ada", "a1", "I live in Porto"),
    ] {
        rt.start_session("kairix", user, conn).await?;
        rt.record_turn(conn, Turn::new(says, "Lovely"))?;
        rt.end_session(conn, EndOptions::default())?;
        settle(&rt).await;
    }
    let ask = "what's my dog called?";
    rt.context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    let before = rt.source_cache_stats();
    // Ada's next call ends and is reflected on: her summary, fact and
    // call are hers alone, and the offline summarizer writes no agent
    // block: Mark's cached context stays current.
    rt.start_session("kairix", "ada", "a2").await?;
    rt.record_turn("a2", Turn::new("I'm allergic to peanuts", "Noted"))?;
    rt.end_session("a2", EndOptions::default())?;
    settle(&rt).await;
    let c = rt
        .context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    let after = rt.source_cache_stats();
    assert_eq!(after.misses, before.misses, "{before:?} {after:?}");
    assert_eq!(after.hits - before.hits, 1, "{before:?} {after:?}");
    assert_eq!(after.parts_read, before.parts_read, "{before:?} {after:?}");
    assert!(!format!("{c:?}").contains("peanuts"));
    assert_eq!(
        c,
        rt.context("kairix", "mark", ask, 4000, no_cache()).await?
    );
    // A fact Ada shares is every user's: Mark's next read shows it.
    let fact = rt
        .facts("kairix", "ada")
        .await?
        .into_iter()
        .find(|f| f.content.contains("peanuts"))
        .expect("the allergy is a fact");
    rt.set_fact_visibility(
        fact.fact_id,
        "ada",
        recall::engine::model::Visibility::Shared,
    )
    .await?;
    let c = rt
        .context("kairix", "mark", ask, 4000, ContextOptions::default())
        .await?;
    assert!(format!("{c:?}").contains("peanuts"), "{c:?}");
    assert_eq!(
        c,
        rt.context("kairix", "mark", ask, 4000, no_cache()).await?
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_cached_context_lets_a_summary_age_out_of_the_background_context() -> Res {
    let mut settings = Settings::for_test();
    settings.watchdog.lookback_hours = 1;
    // no watchdog rebuild (a write) within the test
    settings.watchdog.interval_secs = 86_400;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("I live in Porto and love the river", "Lovely"),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    settle(&rt).await;
    // the background context's `Recent:` line (its topic stays after)
    let background = |c: &recall::engine::context::AssembledContext| {
        c.tiers[0]
            .items
            .iter()
            .any(|i| i.source.to_string() == "background_context" && i.text.contains("Recent: "))
    };
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert!(background(&c), "the recent summary is shown");
    // nothing is written meanwhile: only time moves the summary out
    advance(secs(3600)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert!(background(&c), "still within the look-back");
    let misses = rt.source_cache_stats().misses;
    advance(secs(1)).await;
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    assert!(!background(&c), "aged out");
    assert_eq!(rt.source_cache_stats().misses, misses + 1);
    assert_eq!(
        c,
        rt.context("kairix", "mark", "hi", 4000, no_cache()).await?
    );
    Ok(())
}

/// A `Reflect` that answers at once and shows what it was given: a window
/// summary lists the user messages, a fold joins its sources.
#[derive(Clone, Default)]
struct EchoReflect {
    folds: Arc<std::sync::Mutex<Vec<recall::ReflectRequest>>>,
}

impl recall::Reflect for EchoReflect {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn reflect(
        &self,
        request: recall::ReflectRequest,
    ) -> recall::engine::reflect::BoxFuture<'static, Result<String, recall::ReflectError>> {
        let summary = if request.sources.is_empty() {
            let said: Vec<&str> = request
                .turns
                .iter()
                .map(|t| t.user_message.as_str())
                .collect();
            format!("w[{}]", said.join(","))
        } else {
            let s = format!("long[{}]", request.sources.join("|"));
            self.folds.lock().unwrap().push(request);
            s
        };
        Box::pin(async move { Ok(serde_json::json!({ "summary": summary }).to_string()) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_call_folds_older_windows_into_a_narrative_and_loses_nothing() -> Res {
    let mut settings = Settings::for_test();
    settings.session.window_start_messages = 4;
    settings.session.window_messages = 4;
    settings.session.long_fold_windows = 2;
    let reflect = EchoReflect::default();
    let rt = TestRuntime::start_full(settings, Arc::new(reflect.clone())).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    for i in 0..30 {
        rt.record_turn("c1", Turn::new(format!("q{i}"), format!("a{i}")))?;
        rt.wait_windows().await?;
    }
    let c = rt
        .context("kairix", "mark", "next", 100_000, ContextOptions::default())
        .await?;
    let summaries: Vec<String> = c.tiers[2]
        .items
        .iter()
        .map(|i| i.text.to_string())
        .collect();
    assert!(
        summaries[0].starts_with("- [this call, messages 0-") && summaries[0].contains("long["),
        "the narrative comes first: {summaries:?}"
    );
    assert!(
        summaries.len() <= 3,
        "at most the fold threshold plus the latest: {summaries:?}"
    );
    // the layers' ranges leave no message out, and the raw turns are the gap
    let mut next = 0u32;
    for item in &c.tiers[2].items {
        let recall::engine::context::Source::Window {
            start_seq, end_seq, ..
        } = item.source
        else {
            panic!("a live summary: {:?}", item.source)
        };
        assert!(start_seq <= next && end_seq >= next, "{summaries:?}");
        next = end_seq + 1;
    }
    let turns = &c.tiers[4].items;
    assert_eq!(
        turns.len() as u32,
        60 - next,
        "the gap after the last window"
    );
    assert!(turns.len() < 8);
    // every question is in the context, in a summary or verbatim
    let all = c
        .to_messages()
        .iter()
        .map(|m| m.content.clone())
        .collect::<Vec<_>>()
        .join("\n");
    for i in 0..30 {
        let q = format!("q{i}");
        assert!(
            all.split(|ch: char| !ch.is_alphanumeric()).any(|w| w == q),
            "{q} is lost: {all}"
        );
    }
    // folds went through the long-narrative prompt, each extending the last
    let folds = reflect.folds.lock().unwrap();
    assert!(folds.len() >= 3, "{}", folds.len());
    assert!(folds[0].prompt.contains("LATER PARTS"));
    assert!(
        folds[1].sources[0].starts_with("long["),
        "the previous narrative first"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn summaries_starting_alike_appear_once_in_the_context() -> Res {
    let rt = TestRuntime::start_full(Settings::for_test(), Arc::new(ExtractiveReflect)).await?;
    for conn in ["c1", "c2"] {
        rt.start_session("kairix", "mark", conn).await?;
        rt.record_turn(
            conn,
            Turn::new("Let's practise the Globex interview questions", "Sure"),
        )?;
        rt.end_session(conn, EndOptions::default())?;
        settle(&rt).await;
        advance(secs(3600)).await;
    }
    let stored = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(stored.len(), 2, "each session keeps its summary");
    assert_eq!(
        recall::engine::context::dedup_key(&stored[0].summary_text),
        recall::engine::context::dedup_key(&stored[1].summary_text)
    );
    for s in &stored {
        let range = s
            .source_range
            .expect("a session summary names its messages");
        assert_eq!(
            (range.session_id, range.start_seq, range.end_seq),
            (s.summary_id, 0, 1)
        );
    }
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    let shown: Vec<String> = c.tiers[2]
        .items
        .iter()
        .map(|i| i.source.to_string())
        .collect();
    assert_eq!(shown, [stored[1].summary_id.to_string()], "the newer one");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn damaged_records_are_skipped_counted_and_never_fatal() -> Res {
    use recall::engine::keys;
    let dir = tempfile::tempdir()?;
    let rt = RuntimeBuilder::new(dir.path())
        .settings(Settings::for_test())
        .clock(recall::Clock::starting_at(test_epoch()))
        .start()
        .await?;
    let done = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("I booked the flight to Lisbon", "Lovely, when?"),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    rt.wait_idle().await?;
    let open = rt.start_session("kairix", "mark", "c2").await?;
    for t in 0..3 {
        rt.record_turn("c2", Turn::new(format!("Packing list item {t}"), "Noted."))?;
    }
    rt.flush().await?;
    // A crash leaves c2 open.
    rt.abort().await;

    // Damage: an undecodable record in several trees, a turn of the open
    // session among them, and an open-session key that is no session id.
    {
        let trees = Trees::open(dir.path(), &Settings::default().store)?;
        trees
            .turns
            .insert(keys::turn(open.session_id, 1), &b"{\"user_mes"[..])?;
        trees.summaries.insert(
            keys::summary(
                "kairix",
                SummaryType::Session,
                test_epoch(),
                uuid::Uuid::new_v4(),
            ),
            &b"not json"[..],
        )?;
        trees
            .sessions
            .insert(keys::session(uuid::Uuid::new_v4()), &b"\xff\xfe"[..])?;
        trees.open.insert(&b"short"[..], &[])?;
        trees
            .queue
            .insert(keys::session(uuid::Uuid::new_v4()), &b"[1,2"[..])?;
        trees.db.flush()?;
    }

    let rt = RuntimeBuilder::new(dir.path())
        .settings(Settings::for_test())
        .clock(recall::Clock::starting_at(test_epoch() + chrono_secs(600)))
        .start()
        .await?;
    // The open session was recovered and reflected with the turns left.
    assert_eq!(rt.recovered().len(), 1);
    rt.wait_idle().await?;
    let turns = rt.turns(open.session_id).await?;
    let texts: Vec<&str> = turns.iter().map(|t| t.user_message.as_str()).collect();
    assert_eq!(texts, ["Packing list item 0", "Packing list item 2"]);
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    let ids: Vec<_> = summaries.iter().map(|s| s.summary_id).collect();
    assert_eq!(ids.len(), 2, "{summaries:?}");
    assert!(ids.contains(&done.session_id) && ids.contains(&open.session_id));
    assert_eq!(rt.sessions(None).await?.len(), 2);
    let ctx = rt
        .context(
            "kairix",
            "mark",
            "Where am I flying?",
            4_000,
            ContextOptions::default(),
        )
        .await?;
    assert!(serde_json::to_string(&ctx)?.contains("Lisbon"));
    // …and every skip is counted, once however often it is read.
    let skipped = rt.stats().await?.store.skipped_records;
    assert!(skipped >= 5, "{skipped} skipped");
    rt.summaries("kairix", SummaryType::Session).await?;
    rt.turns(open.session_id).await?;
    assert_eq!(rt.stats().await?.store.skipped_records, skipped);
    rt.shutdown().await?;
    Ok(())
}

/// Durable turns from many calls at once share flushes: a flush answers
/// every caller that asked before it began, and the Store goes on with
/// writes while it runs. (Group commit's window is far longer than the
/// test: only the durable turns flush.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_durable_turns_share_flushes() -> Res {
    let mut settings = Settings::for_test();
    settings.store.flush = recall::engine::settings::FlushPolicy::GroupCommit;
    settings.store.flush_interval_ms = 3_600_000;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    const CALLS: usize = 200;
    for i in 0..CALLS {
        rt.start_session("kairix", &format!("user-{i}"), &format!("c{i}"))
            .await?;
    }
    let before = rt.stats().await?.store;
    let turns = (0..CALLS).map(|i| {
        let rt = rt.clone();
        tokio::spawn(async move {
            rt.record_turn_durable(
                &format!("c{i}"),
                Turn::new(format!("durable {i}"), "on disk"),
            )
            .await
        })
    });
    for t in futures::future::join_all(turns).await {
        t??;
    }
    let after = rt.stats().await?.store;
    assert_eq!(after.turns_written - before.turns_written, CALLS as u64);
    let flushes = after.flushes - before.flushes;
    assert!(
        (1..CALLS as u64 / 4).contains(&flushes),
        "{flushes} flushes for {CALLS} durable turns"
    );
    Ok(())
}

/// Long messages: the session holds at most `max_bytes_in_memory` of
/// their text (bar two windows' turns), every turn still reaches the disk
/// and the reflection.
#[tokio::test(start_paused = true)]
async fn a_call_of_long_messages_keeps_its_bytes_in_memory_bounded_and_loses_none() -> Res {
    let mut settings = Settings::for_test();
    settings.session.max_bytes_in_memory = 64 * 1024;
    settings.session.silence_timeout_secs = 3600;
    let window_turns = settings.session.window_messages.div_ceil(2) as usize * 2;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("My sister Fiona lives in Inverness", "Lovely"),
    )?;
    // 10,000 bytes a turn: the bound is six or seven turns' worth.
    let long = "word ".repeat(2_000);
    for n in 1..100 {
        rt.record_turn("c1", Turn::new(format!("Turn {n}: {long}"), "Mm-hm"))?;
    }
    let view = rt.live_session("c1").await?.expect("the session is live");
    assert_eq!(view.record.turn_count, 100, "every turn counted");
    let held: usize = view
        .turns
        .iter()
        .map(|t| t.user_message.len() + t.agent_response.len())
        .sum();
    assert!(
        held <= 64 * 1024 || view.turns.len() <= window_turns,
        "{held} bytes in {} turns held",
        view.turns.len()
    );
    assert!(
        view.turns.len() < 100 / 4,
        "{} turns held",
        view.turns.len()
    );
    assert!(view
        .turns
        .last()
        .unwrap()
        .user_message
        .starts_with("Turn 99:"));
    // and a call of huge turns keeps its window's worth whatever their size
    rt.start_session("kairix", "ada", "c2").await?;
    let huge = "x".repeat(30_000);
    for _ in 0..30 {
        rt.record_turn("c2", Turn::new(huge.as_str(), "ok"))?;
    }
    let view = rt.live_session("c2").await?.expect("live");
    assert_eq!(view.turns.len(), window_turns, "two windows' turns stay");
    assert_eq!(
        rt.end_session("c1", EndOptions::default())?,
        Some(rec.session_id)
    );
    settle(&rt).await;
    assert_eq!(
        rt.turns(rec.session_id).await?.len(),
        100,
        "every turn on disk"
    );
    let facts = rt.facts("kairix", "mark").await?;
    assert!(
        facts.iter().any(|f| f.fact.content.contains("Inverness")),
        "{facts:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_long_call_keeps_only_its_newest_turns_in_memory_and_loses_none() -> Res {
    let mut settings = Settings::for_test();
    settings.session.max_turns_in_memory = 20;
    settings.session.silence_timeout_secs = 3600;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "My sister Fiona lives in Inverness",
            "That's a lovely part of Scotland",
        ),
    )?;
    for n in 1..200 {
        rt.record_turn("c1", Turn::new(format!("Turn {n} of a long call"), "Mm-hm"))?;
    }
    let view = rt.live_session("c1").await?.expect("the session is live");
    assert_eq!(view.record.turn_count, 200, "every turn counted");
    assert!(
        (20..=22).contains(&view.turns.len()),
        "{} turns held in memory",
        view.turns.len()
    );
    assert_eq!(
        view.turns.last().map(|t| t.user_message.as_str()),
        Some("Turn 199 of a long call")
    );
    // the in-session summaries went on over the turns that left memory
    rt.wait_windows().await?;
    let view = rt.live_session("c1").await?.expect("live");
    assert!(view.memory.is_some(), "window summaries made");
    assert_eq!(
        rt.end_session("c1", EndOptions::default())?,
        Some(rec.session_id)
    );
    settle(&rt).await;
    let stored = rt.turns(rec.session_id).await?;
    assert_eq!(stored.len(), 200, "every turn on disk");
    assert_eq!(
        rt.session(rec.session_id)
            .await?
            .expect("stored")
            .turn_count,
        200
    );
    // the reflection read the first turn from disk
    let facts = rt.facts("kairix", "mark").await?;
    assert!(
        facts.iter().any(|f| f.fact.content.contains("Inverness")),
        "{facts:?}"
    );
    Ok(())
}

/// The read `Runtime::context` makes past its cache: every source read
/// from the store (what the cached read must always equal).
fn no_cache() -> ContextOptions {
    ContextOptions {
        use_cache: false,
        ..ContextOptions::default()
    }
}

/// The Store's part of what a turn acknowledged without `durable` may lose
/// in a crash: it flushes what it took one group-commit interval after
/// taking it, not before, and without being asked. (The rest of the
/// window, the time a write waits in the mailboxes, depends on the load;
/// `tests/crash.rs` measures the whole window across processes.)
#[tokio::test(start_paused = true)]
async fn a_turn_the_store_took_is_flushed_one_group_commit_interval_later() -> Res {
    const INTERVAL_MS: u64 = 50;
    let mut settings = Settings::for_test();
    settings.store.flush = recall::engine::settings::FlushPolicy::GroupCommit;
    settings.store.flush_interval_ms = INTERVAL_MS;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.start_session("kairix", "mark", "c1").await?;
    // What the start and the session's start wrote is flushed, and no
    // flush is under way.
    advance(secs(1)).await;
    rt.flush().await?;
    let before = rt.stats().await?.store;
    rt.record_turn("c1", Turn::new("I moved to Porto", "Lovely"))?;
    // The session actor has handed it on; the Store takes its mailbox in
    // order, so the stats asked after it count it.
    rt.sync().await?;
    let taken = rt.stats().await?.store;
    assert_eq!(taken.turns_written, before.turns_written + 1);
    advance(Duration::from_millis(INTERVAL_MS - 1)).await;
    assert_eq!(
        rt.stats().await?.store.flushes,
        before.flushes,
        "flushed before its window"
    );
    advance(Duration::from_millis(1)).await;
    // The flush runs off the actor: its answer comes back as a message.
    // (Real time: the paused clock does not move while the blocking pool
    // works, and a loaded disk's fsync may take a while.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut flushed = before.flushes;
    while std::time::Instant::now() < deadline {
        flushed = rt.stats().await?.store.flushes;
        if flushed > before.flushes {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(flushed, before.flushes + 1, "one flush at the window's end");
    Ok(())
}
