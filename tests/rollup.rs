//! Rollups, topics and archival search through the runtime, in paused
//! tokio time: the rollup timers fire at local hours across daylight-saving
//! changes, restarts repeat nothing, late summaries supersede, topics are
//! stable, search never leaks and rebuilds from the store.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::engine::search::{DocKind, SearchQuery};
use recall::testkit::{ScriptedReflect, Step, TestRuntime};
use recall::{
    ContextOptions, ConversationSummary, EndOptions, RecallError, Settings, SummaryType, Turn,
};

use crate::common;
use common::{run_until, settle};

type Res = anyhow::Result<()>;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().expect("a UTC time")
}

fn settings(zone: &str) -> Settings {
    let mut s = Settings::for_test();
    s.rollup
        .agent_time_zones
        .insert("kairix".into(), zone.parse().expect("a time zone"));
    s.rollup.daily_hour = 3;
    s.rollup.spread_secs = 0;
    s
}

async fn call(rt: &TestRuntime, user: &str, conn: &str, turns: &[(&str, &str)]) -> Res {
    rt.start_session("kairix", user, conn).await?;
    for (u, a) in turns {
        rt.record_turn(conn, Turn::new(*u, *a))?;
    }
    rt.end_session(conn, EndOptions::default())?;
    settle(rt).await;
    Ok(())
}

async fn of_type(rt: &TestRuntime, t: SummaryType) -> anyhow::Result<Vec<ConversationSummary>> {
    Ok(rt.summaries("kairix", t).await?)
}

fn near(a: DateTime<Utc>, b: DateTime<Utc>) -> bool {
    (a - b).num_milliseconds().abs() < 1_000
}

#[tokio::test(start_paused = true)]
async fn rollups_fire_at_local_hours_across_the_spring_change() -> Res {
    // Berlin moves from CET to CEST on Sunday 29 March 2026 at 02:00.
    let rt = TestRuntime::start_at(
        settings("Europe/Berlin"),
        Arc::new(ExtractiveReflect),
        utc("2026-03-26T10:00:00Z"),
    )
    .await?;
    for (i, day) in ["26", "27", "28", "29", "30"].iter().enumerate() {
        run_until(&rt, utc(&format!("2026-03-{day}T11:00:00Z"))).await;
        call(
            &rt,
            "mark",
            &format!("c{i}"),
            &[
                ("I practiced interview answers for Globex", "Good progress"),
                ("The salary question still worries me", "We can rehearse it"),
            ],
        )
        .await?;
    }
    run_until(&rt, utc("2026-03-31T11:00:00Z")).await;
    settle(&rt).await;

    let daily = of_type(&rt, SummaryType::Daily).await?;
    let days: Vec<(DateTime<Utc>, DateTime<Utc>)> = daily
        .iter()
        .map(|d| (d.period_start, d.period_end))
        .collect();
    assert_eq!(
        days,
        [
            (utc("2026-03-25T23:00:00Z"), utc("2026-03-26T23:00:00Z")),
            (utc("2026-03-26T23:00:00Z"), utc("2026-03-27T23:00:00Z")),
            (utc("2026-03-27T23:00:00Z"), utc("2026-03-28T23:00:00Z")),
            // the 23-hour day
            (utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z")),
            (utc("2026-03-29T22:00:00Z"), utc("2026-03-30T22:00:00Z")),
        ]
    );
    // made at 03:00 local the next morning: 02:00 UTC in winter, 01:00 in summer
    let made: Vec<DateTime<Utc>> = daily.iter().map(|d| d.created_at).collect();
    for (got, want) in made.iter().zip([
        "2026-03-27T02:00:00Z",
        "2026-03-28T02:00:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-30T01:00:00Z",
        "2026-03-31T01:00:00Z",
    ]) {
        assert!(near(*got, utc(want)), "made at {got}, expected {want}");
    }
    let sessions = of_type(&rt, SummaryType::Session).await?;
    for (d, s) in daily.iter().zip(&sessions) {
        assert_eq!(d.source_summary_ids, [s.summary_id]);
        assert_eq!(d.turn_count, 2);
        assert!(!d.summary_text.is_empty());
        assert_eq!(d.user_id, "mark");
    }
    // the week Monday 23 – Sunday 29 March, rolled up on Monday at 03:00
    let weekly = of_type(&rt, SummaryType::Weekly).await?;
    assert_eq!(weekly.len(), 1);
    let w = &weekly[0];
    assert_eq!(w.period_start, utc("2026-03-22T23:00:00Z"));
    assert_eq!(w.period_end, utc("2026-03-29T22:00:00Z"));
    assert!(near(w.created_at, utc("2026-03-30T01:00:00Z")));
    assert!(made[3] <= w.created_at, "the day's rollup comes first");
    let first_four: Vec<_> = daily[..4].iter().map(|d| d.summary_id).collect();
    assert_eq!(w.source_summary_ids, first_four);
    assert_eq!(w.turn_count, 8);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn rollups_fire_at_local_hours_across_the_fall_change() -> Res {
    // New York moves from EDT to EST on Sunday 1 November 2026 at 02:00.
    let mut s = settings("America/New_York");
    s.rollup.weekly_weekday = "sunday".parse().expect("a weekday");
    let rt =
        TestRuntime::start_at(s, Arc::new(ExtractiveReflect), utc("2026-10-30T15:00:00Z")).await?;
    for (i, day) in ["10-30", "10-31", "11-01", "11-02"].iter().enumerate() {
        run_until(&rt, utc(&format!("2026-{day}T18:00:00Z"))).await;
        call(
            &rt,
            "mark",
            &format!("c{i}"),
            &[("Sailing plans for Porto", "Sounds fun")],
        )
        .await?;
    }
    run_until(&rt, utc("2026-11-03T12:00:00Z")).await;
    settle(&rt).await;
    let daily = of_type(&rt, SummaryType::Daily).await?;
    let nov1 = daily
        .iter()
        .find(|d| d.period_start == utc("2026-11-01T04:00:00Z"))
        .expect("the rollup of 1 November");
    assert_eq!(
        nov1.period_end,
        utc("2026-11-02T05:00:00Z"),
        "a 25-hour day"
    );
    // 03:00 local: 07:00 UTC before the change, 08:00 after
    let made: Vec<DateTime<Utc>> = daily.iter().map(|d| d.created_at).collect();
    for (got, want) in made.iter().zip([
        "2026-10-31T07:00:00Z",
        "2026-11-01T08:00:00Z",
        "2026-11-02T08:00:00Z",
        "2026-11-03T08:00:00Z",
    ]) {
        assert!(near(*got, utc(want)), "made at {got}, expected {want}");
    }
    // weeks start on Sunday: 25–31 October, rolled up on Sunday 1 November
    let weekly = of_type(&rt, SummaryType::Weekly).await?;
    assert_eq!(weekly.len(), 1);
    assert_eq!(weekly[0].period_start, utc("2026-10-25T04:00:00Z"));
    assert_eq!(weekly[0].period_end, utc("2026-11-01T04:00:00Z"));
    assert!(near(weekly[0].created_at, utc("2026-11-01T08:00:00Z")));
    assert_eq!(weekly[0].source_summary_ids.len(), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_rollup_and_cursor_repeats_nothing() -> Res {
    let rt = TestRuntime::start_at(
        settings("UTC"),
        Arc::new(ExtractiveReflect),
        utc("2026-03-02T10:00:00Z"),
    )
    .await?;
    call(&rt, "mark", "c1", &[("Globex interview prep", "ok")]).await?;
    call(&rt, "ada", "a1", &[("Porto trip planning", "ok")]).await?;
    run_until(&rt, utc("2026-03-03T10:00:00Z")).await;
    settle(&rt).await;
    let before = of_type(&rt, SummaryType::Daily).await?;
    assert_eq!(before.len(), 2, "one per user");
    // The process dies after the rollups were stored but before the cursor
    // was: the folder holds the rollups without the cursor.
    let rt = rt
        .crash_and_restart_with(|dir| {
            let trees = recall::engine::store::Trees::open(dir, &Default::default())
                .map_err(recall::StartupError::Store)?;
            trees
                .rollup_cursors
                .clear()
                .map_err(|e| recall::StartupError::Store(e.into()))?;
            trees
                .db
                .flush()
                .map_err(|e| recall::StartupError::Store(e.into()))?;
            Ok(())
        })
        .await?;
    let report = rt.run_rollups().await?;
    assert_eq!((report.daily, report.weekly), (0, 0), "{report:?}");
    let after = of_type(&rt, SummaryType::Daily).await?;
    assert_eq!(
        after.iter().map(|s| s.summary_id).collect::<Vec<_>>(),
        before.iter().map(|s| s.summary_id).collect::<Vec<_>>()
    );
    // and running the same period yet again changes nothing either
    assert_eq!(rt.run_rollups().await?.daily, 0);
    // an ordinary restart keeps the cursor: nothing skipped, nothing repeated
    let rt = rt.crash_and_restart().await?;
    call(&rt, "mark", "c2", &[("Second Globex round", "ok")]).await?;
    run_until(&rt, utc("2026-03-04T10:00:00Z")).await;
    settle(&rt).await;
    assert_eq!(of_type(&rt, SummaryType::Daily).await?.len(), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_late_session_summary_supersedes_its_days_rollup() -> Res {
    // The first session's reflection is rejected (dead letter) and retried
    // only after its day was rolled up.
    let reflect = ScriptedReflect::new([Step::Rejected(400)]);
    let rt = TestRuntime::start_at(
        settings("UTC"),
        Arc::new(reflect),
        utc("2026-03-02T09:00:00Z"),
    )
    .await?;
    call(
        &rt,
        "mark",
        "late",
        &[("Lisbon flat viewing went well", "Great")],
    )
    .await?;
    call(
        &rt,
        "mark",
        "c2",
        &[("Globex interview on Friday", "Let's prepare")],
    )
    .await?;
    assert_eq!(rt.dead_letters().await?.len(), 1);
    // The store's in-memory records, built now, keep up with the rollups.
    rt.context("kairix", "mark", "Lisbon?", 2000, ContextOptions::default())
        .await?;
    run_until(&rt, utc("2026-03-03T10:00:00Z")).await;
    settle(&rt).await;
    let first = of_type(&rt, SummaryType::Daily).await?;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].source_summary_ids.len(), 1);

    // the index is live before the late summary arrives: the revision
    // must reach it, not only a fresh build
    let daily_hits = |rt: &TestRuntime| {
        let rt = rt.runtime().clone();
        async move {
            rt.search(
                "kairix",
                SearchQuery {
                    text: "Globex Lisbon".into(),
                    kinds: vec![DocKind::Daily],
                    ..Default::default()
                },
            )
            .await
            .expect("search")
            .into_iter()
            .map(|h| h.id)
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(daily_hits(&rt).await, [first[0].summary_id]);
    let late = rt.dead_letters().await?[0].session_id;
    rt.retry_dead_letter(late).await?;
    settle(&rt).await;
    let all = of_type(&rt, SummaryType::Daily).await?;
    assert_eq!(all.len(), 2, "the old version is kept");
    let old = all
        .iter()
        .find(|s| s.summary_id == first[0].summary_id)
        .expect("old");
    let new = all
        .iter()
        .find(|s| s.summary_id != first[0].summary_id)
        .expect("new");
    assert_eq!(old.superseded_by, Some(new.summary_id));
    assert_eq!(new.supersedes, Some(old.summary_id));
    assert!(new.source_summary_ids.contains(&late));
    assert_eq!(new.source_summary_ids.len(), 2);
    assert_eq!(
        (new.period_start, new.period_end),
        (old.period_start, old.period_end)
    );
    // reads see the current version only, in the live index and a rebuilt one
    assert_eq!(daily_hits(&rt).await, [new.summary_id]);
    rt.drop_search_indexes();
    assert_eq!(daily_hits(&rt).await, [new.summary_id]);
    // a context shows the new day, not the old
    let c = rt
        .context("kairix", "mark", "hi", 8000, ContextOptions::default())
        .await?;
    let shown: Vec<String> = c.tiers[2]
        .items
        .iter()
        .map(|i| i.source.to_string())
        .collect();
    assert!(
        shown
            .iter()
            .any(|s| s.contains(&new.summary_id.to_string())),
        "{shown:?}"
    );
    assert!(
        !shown
            .iter()
            .any(|s| s.contains(&old.summary_id.to_string())),
        "{shown:?}"
    );
    // running the rollups again changes nothing
    let again = rt.run_rollups().await?;
    assert_eq!((again.daily, again.revised), (0, 0));
    assert_eq!(of_type(&rt, SummaryType::Daily).await?.len(), 2);
    assert!(rt.store_mirrors_match().await?);
    Ok(())
}

async fn topic_run() -> anyhow::Result<Vec<(String, usize)>> {
    let rt = TestRuntime::start().await?;
    let calls: [(&str, &str); 5] = [
        (
            "I have a Globex interview and the salary talk",
            "Let's prepare",
        ),
        ("We are planning a sailing weekend in Porto", "Nice"),
        (
            "The second Globex interview asked about salary again",
            "Good sign",
        ),
        ("I booked the boat for the Porto sailing trip", "Great"),
        (
            "Globex made an offer, the salary is fine",
            "Congratulations",
        ),
    ];
    // The store's in-memory records, built first, keep up with the topics.
    rt.context(
        "kairix",
        "mark",
        "the interview?",
        2000,
        ContextOptions::default(),
    )
    .await?;
    for (i, (u, a)) in calls.iter().enumerate() {
        call(&rt, "mark", &format!("c{i}"), &[(u, a)]).await?;
    }
    assert!(rt.store_mirrors_match().await?);
    let topics = rt.topics("kairix", Some("mark")).await?;
    for t in &topics {
        assert_eq!(t.member_count, t.source_summary_ids.len());
        let summary = rt.summary(t.topic_id).await?.expect("topic summary");
        assert_eq!(summary.summary_type, SummaryType::Topic);
        assert_eq!(summary.source_summary_ids, t.source_summary_ids);
        assert!(t.summary.as_deref().is_some_and(|s| !s.is_empty()));
    }
    let mut out: Vec<(String, usize)> = topics
        .into_iter()
        .map(|t| (t.label, t.member_count))
        .collect();
    out.sort();
    Ok(out)
}

#[tokio::test(start_paused = true)]
async fn topics_gather_alike_summaries_and_are_stable() -> Res {
    let a = topic_run().await?;
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a.iter().map(|t| t.1).sum::<usize>(), 5);
    assert!(
        a.iter()
            .any(|(l, n)| (l.contains("globex") || l.contains("salary")) && *n == 3),
        "{a:?}"
    );
    assert!(
        a.iter()
            .any(|(l, n)| (l.contains("sailing") || l.contains("porto")) && *n == 2),
        "{a:?}"
    );
    assert_eq!(
        a,
        topic_run().await?,
        "the same input gives the same topics"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn search_never_leaks_a_private_item_and_rebuilds_from_the_store() -> Res {
    let reply = |summary: &str, fact: &str| {
        Step::Reply(
            serde_json::json!({
                "summary": summary,
                "topics": ["google"],
                "facts": [{"category": "occupation", "content": fact}],
            })
            .to_string(),
        )
    };
    let reflect = ScriptedReflect::new([
        reply(
            "Mark talked about his Google interview",
            "Mark interviews at Google",
        ),
        reply(
            "Ada mentioned Google Maps for Porto",
            "Ada works at Google Maps",
        ),
    ]);
    let rt = TestRuntime::start_with(reflect).await?;
    // build the (empty) index first, so every write below goes through its
    // live updates
    assert!(rt
        .search(
            "kairix",
            SearchQuery {
                text: "google".into(),
                ..Default::default()
            }
        )
        .await?
        .is_empty());
    assert_eq!(rt.search_indexes_built(), 1);
    call(
        &rt,
        "mark",
        "m1",
        &[("Google interview tomorrow", "Good luck")],
    )
    .await?;
    call(&rt, "ada", "a1", &[("Google Maps in Porto", "Handy")]).await?;
    let q = |user: Option<&str>| SearchQuery {
        text: "you mentioned Google last week".into(),
        user_id: user.map(str::to_string),
        limit: 50,
        ..Default::default()
    };
    let users = |hits: &[recall::engine::search::SearchHit]| {
        hits.iter()
            .map(|h| h.user_id.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let mark = rt.search("kairix", q(Some("mark"))).await?;
    assert!(!mark.is_empty());
    assert_eq!(users(&mark), ["mark".to_string()].into());
    assert!(mark[0].text.starts_with("[SUMMARY:") || mark[0].text.starts_with("[FACT:"));
    // ada shares her fact: mark sees it, never her summary
    let ada_fact = rt.facts("kairix", "ada").await?[0].clone();
    rt.set_fact_visibility(
        ada_fact.fact_id,
        "ada",
        recall::engine::model::Visibility::Shared,
    )
    .await?;
    let mark = rt.search("kairix", q(Some("mark"))).await?;
    let from_ada: Vec<_> = mark.iter().filter(|h| h.user_id == "ada").collect();
    assert_eq!(from_ada.len(), 1);
    assert_eq!(from_ada[0].kind, DocKind::Fact);
    // unshared again: gone at once
    rt.set_fact_visibility(
        ada_fact.fact_id,
        "ada",
        recall::engine::model::Visibility::Private,
    )
    .await?;
    assert_eq!(
        users(&rt.search("kairix", q(Some("mark"))).await?),
        ["mark".to_string()].into()
    );
    // every user (an operator's view), with filters
    let all = rt.search("kairix", q(None)).await?;
    assert_eq!(users(&all).len(), 2);
    let mut facts_only = q(None);
    facts_only.kinds = vec![DocKind::Fact];
    assert!(rt
        .search("kairix", facts_only)
        .await?
        .iter()
        .all(|h| h.kind == DocKind::Fact));
    let mut future = q(None);
    future.since = Some(rt.clock().now() + chrono::Duration::days(1));
    assert!(rt.search("kairix", future).await?.is_empty());

    // lost index: rebuilt from the store, same answers
    rt.drop_search_indexes();
    assert_eq!(rt.search_indexes_built(), 0);
    let again = rt.search("kairix", q(None)).await?;
    assert_eq!(
        again.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>(),
        all.iter().map(|h| (h.id, h.kind)).collect::<Vec<_>>()
    );
    let rt = rt.crash_and_restart().await?;
    let after_restart = rt.search("kairix", q(None)).await?;
    assert_eq!(after_restart.len(), all.len());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn bad_searches_are_refused_with_the_field_named() -> Res {
    let rt = TestRuntime::start().await?;
    let err = |q: SearchQuery| {
        let rt = &rt;
        async move {
            rt.search("kairix", q)
                .await
                .expect_err("refused")
                .to_string()
        }
    };
    assert!(err(SearchQuery::default())
        .await
        .contains("q must not be empty"));
    let big = SearchQuery {
        text: "x".into(),
        limit: 1_000,
        ..Default::default()
    };
    assert!(err(big).await.contains("limit"));
    let backwards = SearchQuery {
        text: "x".into(),
        since: Some(utc("2026-02-01T00:00:00Z")),
        until: Some(utc("2026-01-01T00:00:00Z")),
        ..Default::default()
    };
    // a window that ends before it starts holds nothing: no error
    assert!(rt.search("kairix", backwards).await?.is_empty());
    let mut off = Settings::for_test();
    off.rollup.enabled = false;
    let rt = TestRuntime::start_full(off, Arc::new(ExtractiveReflect)).await?;
    assert!(matches!(
        rt.run_rollups().await,
        Err(RecallError::RollupsOff)
    ));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_topic_shift_in_a_live_call_refreshes_the_block_early() -> Res {
    let mut s = Settings::for_test();
    // no timed rebuild within the test: only the shift rebuilds
    s.watchdog.interval_secs = 86_400;
    let rt = TestRuntime::start_full(s, Arc::new(ExtractiveReflect)).await?;
    // ten minutes apart, so the topics' last activity orders them
    for (i, said) in [
        "We are planning a sailing weekend in Porto",
        "I booked the boat for the Porto sailing trip",
        "I have a Globex interview about the salary",
        "The Globex interview salary talk went well",
    ]
    .iter()
    .enumerate()
    {
        call(&rt, "mark", &format!("c{i}"), &[(said, "I see")]).await?;
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
    let labels: Vec<String> = rt
        .topics("kairix", Some("mark"))
        .await?
        .into_iter()
        .map(|t| t.label)
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    let first_topic = |v: &str| {
        v.lines()
            .find_map(|l| l.strip_prefix("Active topics: "))
            .and_then(|t| t.split(", ").next())
            .map(str::to_string)
            .unwrap_or_default()
    };
    rt.refresh_background_context().await?;
    // Mark's background context (the agent's block holds none of his calls)
    let block = |rt: &TestRuntime| {
        let rt = rt.runtime().clone();
        async move {
            rt.user_block("kairix", "mark", recall::BlockLabel::BackgroundContext)
                .await
                .expect("read")
                .expect("block")
                .value
        }
    };
    // most recently active first: the Globex topic leads
    assert!(
        first_topic(&block(&rt).await).contains("globex"),
        "{}",
        block(&rt).await
    );
    assert_eq!(rt.stats().await?.watchdog.topic_shifts, 0);

    // a live call drifts to sailing: after three turns the block leads with it
    rt.start_session("kairix", "mark", "live").await?;
    rt.record_turn("live", Turn::new("Back to the sailing trip", "Sure"))?;
    rt.record_turn(
        "live",
        Turn::new("Which boat did I book in Porto?", "The small one"),
    )?;
    settle(&rt).await;
    assert_eq!(
        rt.stats().await?.watchdog.topic_shifts,
        0,
        "not before the third turn"
    );
    rt.record_turn(
        "live",
        Turn::new("Porto sailing weather looks good", "Great"),
    )?;
    // (the barrier covers the watchdog's handling of the live words)
    settle(&rt).await;
    assert_eq!(rt.stats().await?.watchdog.topic_shifts, 1);
    let v = block(&rt).await;
    assert!(
        first_topic(&v).contains("sailing") || first_topic(&v).contains("porto"),
        "{v}"
    );
    // the user's own context renders the same order
    let c = rt
        .context("kairix", "mark", "hi", 4000, ContextOptions::default())
        .await?;
    let bg = c.tiers[0]
        .items
        .iter()
        .find(|i| i.source.to_string() == "background_context")
        .expect("background")
        .text
        .to_string();
    assert!(
        first_topic(&bg).contains("sailing") || first_topic(&bg).contains("porto"),
        "{bg}"
    );
    // staying on it changes nothing more (a report goes out again after
    // the 30-second interval, and finds the same topic)
    tokio::time::sleep(Duration::from_secs(60)).await;
    rt.record_turn("live", Turn::new("Sailing again", "ok"))?;
    rt.record_turn("live", Turn::new("More Porto sailing", "ok"))?;
    rt.record_turn("live", Turn::new("The boat in Porto", "ok"))?;
    settle(&rt).await;
    assert_eq!(rt.stats().await?.watchdog.topic_shifts, 1);
    Ok(())
}

/// The offline summarizer, except that summaries of summaries (rollups,
/// topic summaries) fail with a 503 while `down` is set, or always for
/// the agents in `agents`.
#[derive(Clone, Default)]
struct RollupsDown {
    down: Arc<std::sync::atomic::AtomicBool>,
    agents: Arc<std::sync::Mutex<Vec<String>>>,
}

impl recall::Reflect for RollupsDown {
    fn name(&self) -> &'static str {
        "rollups-down"
    }

    fn reflect(
        &self,
        request: recall::ReflectRequest,
    ) -> recall::engine::reflect::BoxFuture<'static, Result<String, recall::ReflectError>> {
        let failing = self.down.load(std::sync::atomic::Ordering::SeqCst)
            || self
                .agents
                .lock()
                .unwrap()
                .contains(&request.session.agent_id);
        if !request.sources.is_empty() && failing {
            return Box::pin(async {
                Err(recall::ReflectError::Server {
                    status: 503,
                    body: "overloaded".into(),
                })
            });
        }
        ExtractiveReflect.reflect(request)
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_rollup_is_tried_again_at_the_next_check_not_the_next_day() -> Res {
    let reflect = RollupsDown::default();
    let rt = TestRuntime::start_at(
        settings("UTC"),
        Arc::new(reflect.clone()),
        utc("2026-03-02T10:00:00Z"),
    )
    .await?;
    reflect
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    call(&rt, "mark", "c1", &[("Globex interview prep", "ok")]).await?;
    // due at 03:00: the summarizer is down, nothing is rolled up
    run_until(&rt, utc("2026-03-03T03:01:00Z")).await;
    settle(&rt).await;
    assert!(of_type(&rt, SummaryType::Daily).await?.is_empty());
    assert!(rt.stats().await?.rollup.totals.failures >= 1);
    reflect
        .down
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // the check interval (10 minutes) later, it is
    run_until(&rt, utc("2026-03-03T03:11:00Z")).await;
    settle(&rt).await;
    let daily = of_type(&rt, SummaryType::Daily).await?;
    assert_eq!(daily.len(), 1);
    assert!(
        near(daily[0].created_at, utc("2026-03-03T03:10:00Z")),
        "{}",
        daily[0].created_at
    );
    // the topic the failed take-in left in the inbox is made too
    assert_eq!(rt.topics("kairix", Some("mark")).await?.len(), 1);
    Ok(())
}

/// How many daily rollups each agent has.
async fn dailies(rt: &TestRuntime, agents: &[String]) -> anyhow::Result<Vec<usize>> {
    let mut n = Vec::new();
    for a in agents {
        n.push(rt.summaries(a, SummaryType::Daily).await?.len());
    }
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn agents_rolled_up_together_fail_alone_and_each_is_rolled_up_once() -> Res {
    // More agents than one pass takes, with one failing in the first pass
    // and one in the second.
    let agents: Vec<String> = (0..70).map(|i| format!("agent-{i:02}")).collect();
    let reflect = RollupsDown::default();
    *reflect.agents.lock().unwrap() = vec!["agent-03".to_string(), "agent-66".to_string()];
    let rt = TestRuntime::start_at(
        settings("UTC"),
        Arc::new(reflect.clone()),
        utc("2026-03-02T10:00:00Z"),
    )
    .await?;
    for (i, agent) in agents.iter().enumerate() {
        let conn = format!("c{i}");
        rt.start_session(agent, "mark", &conn).await?;
        rt.record_turn(&conn, Turn::new(format!("Plans with {agent}"), "ok"))?;
        rt.end_session(&conn, EndOptions::default())?;
    }
    settle(&rt).await;
    // due at 03:00 (no spread): two fail, the others are rolled up
    run_until(&rt, utc("2026-03-03T03:01:00Z")).await;
    settle(&rt).await;
    let n = dailies(&rt, &agents).await?;
    for (a, n) in agents.iter().zip(&n) {
        let want = usize::from(a != "agent-03" && a != "agent-66");
        assert_eq!(*n, want, "{a}");
    }
    let totals = rt.stats().await?.rollup.totals;
    assert_eq!(totals.daily, 68);
    // (their topic summaries fail too, at each wake)
    assert!(totals.failures >= 2, "{totals:?}");
    // the next check rolls the two up, and nothing twice
    reflect.agents.lock().unwrap().clear();
    run_until(&rt, utc("2026-03-03T03:11:00Z")).await;
    settle(&rt).await;
    assert!(dailies(&rt, &agents).await?.iter().all(|n| *n == 1));
    let totals = rt.stats().await?.rollup.totals;
    assert_eq!(totals.daily, 70);
    // the next day, only that day is rolled up: one agent had a call
    rt.start_session("agent-00", "mark", "next-day").await?;
    rt.record_turn("next-day", Turn::new("More plans", "ok"))?;
    rt.end_session("next-day", EndOptions::default())?;
    settle(&rt).await;
    run_until(&rt, utc("2026-03-04T03:01:00Z")).await;
    settle(&rt).await;
    let n = dailies(&rt, &agents).await?;
    assert_eq!(n[0], 2, "agent-00");
    assert!(n[1..].iter().all(|n| *n == 1));
    assert_eq!(rt.stats().await?.rollup.totals.daily, 71);
    Ok(())
}

/// The offline summarizer, taking a second per summary of summaries and
/// counting those being made at once.
#[derive(Clone, Default)]
struct CountsAtOnce {
    now: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

impl recall::Reflect for CountsAtOnce {
    fn name(&self) -> &'static str {
        "counts-at-once"
    }

    fn reflect(
        &self,
        request: recall::ReflectRequest,
    ) -> recall::engine::reflect::BoxFuture<'static, Result<String, recall::ReflectError>> {
        use std::sync::atomic::Ordering::SeqCst;
        // (Topic summaries have sources too; the Rollup actor makes them
        // one at a time, before the rollups.)
        let rollup = !request.sources.is_empty();
        let (now, most) = (self.now.clone(), self.most.clone());
        Box::pin(async move {
            if rollup {
                let n = now.fetch_add(1, SeqCst) + 1;
                most.fetch_max(n, SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                now.fetch_sub(1, SeqCst);
            }
            ExtractiveReflect.reflect(request).await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn rollups_made_at_once_stay_within_max_concurrent_across_passes() -> Res {
    let reflect = CountsAtOnce::default();
    let mut s = settings("UTC");
    s.rollup.max_concurrent = 3;
    let rt =
        TestRuntime::start_at(s, Arc::new(reflect.clone()), utc("2026-03-02T10:00:00Z")).await?;
    // Enough agents for several passes.
    let agents: Vec<String> = (0..150).map(|i| format!("agent-{i:03}")).collect();
    for (i, agent) in agents.iter().enumerate() {
        let conn = format!("c{i}");
        rt.start_session(agent, "mark", &conn).await?;
        rt.record_turn(&conn, Turn::new(format!("Plans with {agent}"), "ok"))?;
        rt.end_session(&conn, EndOptions::default())?;
    }
    settle(&rt).await;
    run_until(&rt, utc("2026-03-03T03:30:00Z")).await;
    settle(&rt).await;
    assert!(dailies(&rt, &agents).await?.iter().all(|n| *n == 1));
    let most = reflect.most.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(most, 3, "rollups made at once");
    Ok(())
}
