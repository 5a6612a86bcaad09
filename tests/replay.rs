//! Replay / re-derive, in paused tokio time: sessions summarized offline
//! and rolled up are replayed through a new summarizer. Each changed
//! session gets a new version linked to the old, its facts follow, its day
//! and week are revised and its topic moves to the new version; a second
//! run changes nothing and calls nothing; an interrupted run resumes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::runtime::ReplayRequest;
use recall::{
    Clock, ContextOptions, EndOptions, Reflect, ReflectError, ReflectRequest, Runtime,
    RuntimeBuilder, Settings, SummaryType, Turn,
};
use serde_json::json;

use crate::common;
use common::run_until;

type Res = anyhow::Result<()>;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().expect("a UTC time")
}

/// Today's better summarizer: a session summary naming the call's first
/// words, and one fact; a rollup or topic summary joining its sources.
/// Counts the session reflections it was asked for.
#[derive(Clone)]
struct Revised {
    name: &'static str,
    calls: Arc<AtomicUsize>,
}

impl Revised {
    fn named(name: &'static str) -> Self {
        Revised {
            name,
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Reflect for Revised {
    fn name(&self) -> &'static str {
        self.name
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        if request.turns.is_empty() {
            let out = json!({"summary": format!("Combined: {}", request.sources.join(" | "))});
            return Box::pin(async move { Ok(out.to_string()) });
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.name == "refuses" {
            let out = "I'm sorry, I can't help with that.".to_string();
            return Box::pin(async move { Ok(out) });
        }
        let first = request
            .turns
            .first()
            .map(|t| t.user_message.clone())
            .unwrap_or_default();
        let out = json!({
            "summary": format!("Revised ({}): {first}", self.name),
            "topics": ["travel"],
            "entities": [],
            "facts": [{"category": "preference", "content": "Prefers window seats"}],
        });
        Box::pin(async move { Ok(out.to_string()) })
    }
}

fn settings() -> Settings {
    let mut s = Settings::for_test();
    s.rollup.daily_hour = 3;
    s.rollup.spread_secs = 0;
    s
}

async fn start(
    dir: &std::path::Path,
    reflect: Arc<dyn Reflect>,
    at: &str,
) -> anyhow::Result<Runtime> {
    Ok(RuntimeBuilder::new(dir)
        .settings(settings())
        .reflect(reflect)
        .clock(Clock::starting_at(utc(at)))
        .start()
        .await?)
}

fn request(user: Option<&str>) -> ReplayRequest {
    ReplayRequest {
        agent_id: "kairix".into(),
        user_id: user.map(str::to_string),
        since: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_makes_linked_versions_revises_rollups_and_changes_nothing_twice() -> Res {
    let dir = tempfile::tempdir()?;
    let dailies_before =
        three_days_of_calls_a_replay_by_their_summarizer_leaves(dir.path()).await?;

    // Today's summarizer.
    let revised = Revised::named("revised");
    let rt = start(
        dir.path(),
        Arc::new(revised.clone()),
        "2026-03-09T05:00:00Z",
    )
    .await?;
    let report = a_replay_links_each_new_version_to_the_old(&rt, &revised).await?;
    let (new_ids, old_ids) =
        marks_rollups_and_topics_follow_the_new_versions(&rt, &report, dailies_before).await?;
    let facts =
        the_new_fact_is_kept_once_and_search_finds_the_new_text(&rt, &new_ids, &old_ids).await?;

    // The store's in-memory records kept up with every write since.
    assert!(rt.store_mirrors_match().await?);

    // Twice: nothing changes and nothing is asked.
    let again = rt.replay(&request(Some("mark")), |_| true).await?;
    assert_eq!((again.progress.unchanged, again.changed.len()), (3, 0));
    assert_eq!(revised.calls(), 3);

    // Mark deletes the new fact; a later replay that finds it again does
    // not bring it back.
    let window = facts
        .iter()
        .find(|f| f.content == "Prefers window seats")
        .expect("the fact");
    rt.delete_fact(window.fact_id, "mark").await?;
    rt.shutdown().await?;
    let third = a_later_replay_does_not_bring_a_deleted_fact_back(dir.path()).await?;
    a_summarizer_answering_in_prose_replaces_no_summary(dir.path(), &third).await
}

/// Three days of calls of mark and ada, summarized offline and rolled up;
/// a replay with the summarizer that made them changes nothing. The daily
/// rollups before any other replay.
async fn three_days_of_calls_a_replay_by_their_summarizer_leaves(
    dir: &std::path::Path,
) -> anyhow::Result<Vec<recall::ConversationSummary>> {
    // Monday 2 March 2026: three days of calls, summarized offline.
    let rt = start(dir, Arc::new(ExtractiveReflect), "2026-03-02T10:00:00Z").await?;
    // The store's in-memory records are built first, so every write after
    // (rollups, topics, the replay's versions) must keep them.
    rt.context(
        "kairix",
        "mark",
        "the trip?",
        2000,
        ContextOptions::default(),
    )
    .await?;
    for day in 2..5 {
        run_until(&rt, utc(&format!("2026-03-0{day}T11:00:00Z"))).await;
        for user in ["mark", "ada"] {
            let conn = format!("{user}-{day}");
            rt.start_session("kairix", user, &conn).await?;
            rt.record_turn(
                &conn,
                Turn::new(
                    format!("{user} plans the trip to Porto, day {day}"),
                    "Nice.",
                ),
            )?;
            rt.record_turn(&conn, Turn::new("I prefer the morning train", "Noted."))?;
            rt.end_session(&conn, EndOptions::default())?;
            rt.wait_idle().await?;
        }
    }
    run_until(&rt, utc("2026-03-09T04:00:00Z")).await;
    rt.wait_idle().await?;
    rt.process_new_summaries().await?;

    // Replaying with the summarizer that made them changes nothing, and
    // asks it nothing: every summary carries its derivation.
    let same = rt.replay(&request(None), |_| true).await?;
    assert_eq!((same.progress.total, same.progress.unchanged), (6, 6));
    assert!(same.changed.is_empty() && same.rollups.is_none());
    let dailies_before = rt.summaries("kairix", SummaryType::Daily).await?;
    rt.shutdown().await?;
    Ok(dailies_before)
}

/// Replays mark's three sessions with `revised`: each gets a new version
/// linked to the old, which is kept; the new fact is added once.
async fn a_replay_links_each_new_version_to_the_old(
    rt: &Runtime,
    revised: &Revised,
) -> anyhow::Result<recall::runtime::ReplayReport> {
    // The store's in-memory records, built before the replay writes.
    rt.context(
        "kairix",
        "mark",
        "the trip?",
        2000,
        ContextOptions::default(),
    )
    .await?;
    let mut seen = Vec::new();
    let report = rt
        .replay(&request(Some("mark")), |p| {
            seen.push(*p);
            true
        })
        .await?;
    assert_eq!(revised.calls(), 3);
    assert_eq!((report.progress.total, report.progress.changed), (3, 3));
    assert!(!report.interrupted && report.failed.is_empty());
    assert_eq!(seen.first().map(|p| p.done), Some(0));
    assert_eq!(seen.last().map(|p| p.done), Some(3));
    for c in &report.changed {
        assert!(
            c.new_text
                .starts_with("Revised (revised): mark plans the trip"),
            "{c:?}"
        );
        // The new version is linked to the old, which is kept.
        let new = rt.summary(c.new_summary_id).await?.expect("new version");
        let old_id = c.old_summary_id.expect("replaced a version");
        assert_eq!((new.supersedes, new.superseded_by), (Some(old_id), None));
        let old = rt.summary(old_id).await?.expect("old version kept");
        assert_eq!(old.superseded_by, Some(c.new_summary_id));
        assert_eq!(old.summary_id, c.session_id);
    }
    // The new fact is added once (the later sessions find it known).
    let added: Vec<_> = report
        .changed
        .iter()
        .flat_map(|c| c.facts_added.clone())
        .collect();
    assert_eq!(added, ["Prefers window seats"]);
    Ok(report)
}

/// Mark's day and week rollups are revised and his topics hold the new
/// versions; ada's rollups are as they were. The new versions' ids and the
/// old ones'.
async fn marks_rollups_and_topics_follow_the_new_versions(
    rt: &Runtime,
    report: &recall::runtime::ReplayReport,
    dailies_before: Vec<recall::ConversationSummary>,
) -> anyhow::Result<(Vec<uuid::Uuid>, Vec<uuid::Uuid>)> {
    // Mark's day and week rollups were revised from the new versions; Ada's
    // are as they were.
    let rollups = report.rollups.as_ref().expect("rollups ran");
    assert!(rollups.revised >= 4, "{rollups:?}");
    let current: Vec<_> = rt
        .summaries("kairix", SummaryType::Daily)
        .await?
        .into_iter()
        .filter(|s| s.is_current())
        .collect();
    for d in current.iter().filter(|d| d.user_id == "mark") {
        assert!(d.summary_text.contains("Revised (revised):"), "{d:?}");
    }
    let ada_now: Vec<_> = current
        .iter()
        .filter(|d| d.user_id == "ada")
        .cloned()
        .collect();
    let ada_then: Vec<_> = dailies_before
        .into_iter()
        .filter(|d| d.user_id == "ada")
        .collect();
    assert_eq!(ada_now, ada_then);
    // Mark's topics hold the new versions, not the old.
    let new_ids: Vec<_> = report.changed.iter().map(|c| c.new_summary_id).collect();
    let old_ids: Vec<_> = report
        .changed
        .iter()
        .filter_map(|c| c.old_summary_id)
        .collect();
    let members: Vec<_> = rt
        .topics("kairix", Some("mark"))
        .await?
        .into_iter()
        .flat_map(|t| t.source_summary_ids)
        .collect();
    assert!(new_ids.iter().all(|id| members.contains(id)), "{members:?}");
    assert!(
        old_ids.iter().all(|id| !members.contains(id)),
        "{members:?}"
    );
    Ok((new_ids, old_ids))
}

/// Mark's facts hold the new one once and keep those found before; search
/// finds the new versions' text, not the old. Mark's facts.
async fn the_new_fact_is_kept_once_and_search_finds_the_new_text(
    rt: &Runtime,
    new_ids: &[uuid::Uuid],
    old_ids: &[uuid::Uuid],
) -> anyhow::Result<Vec<recall::engine::model::FactRecord>> {
    // Facts: the new one, once; the ones found before stay (a replay
    // takes no fact away: it may rest on other sessions too).
    let facts = rt.facts("kairix", "mark").await?;
    let contents: Vec<_> = facts.iter().map(|f| f.content.as_str()).collect();
    assert_eq!(
        contents
            .iter()
            .filter(|c| **c == "Prefers window seats")
            .count(),
        1,
        "{contents:?}"
    );
    assert!(
        contents.iter().any(|c| c.contains("morning train")),
        "{contents:?}"
    );
    // Search finds the new text, not the old.
    let hits = rt
        .search(
            "kairix",
            recall::engine::search::SearchQuery {
                text: "Revised Porto".into(),
                kinds: vec![recall::engine::search::DocKind::Session],
                user_id: Some("mark".into()),
                since: None,
                until: None,
                limit: 20,
            },
        )
        .await?;
    assert!(hits.iter().all(|h| !old_ids.contains(&h.id)), "{hits:?}");
    assert!(hits.iter().any(|h| new_ids.contains(&h.id)), "{hits:?}");
    Ok(facts)
}

/// After mark deleted the new fact, a replay with another summarizer
/// changes his three sessions and adds no fact; the replay's report.
async fn a_later_replay_does_not_bring_a_deleted_fact_back(
    dir: &std::path::Path,
) -> anyhow::Result<recall::runtime::ReplayReport> {
    let later = Revised::named("revised-again");
    let rt = start(dir, Arc::new(later.clone()), "2026-03-09T06:00:00Z").await?;
    let third = rt.replay(&request(Some("mark")), |_| true).await?;
    assert_eq!(third.changed.len(), 3);
    assert!(
        third.changed.iter().all(|c| c.facts_added.is_empty()),
        "{third:?}"
    );
    let contents: Vec<String> = rt
        .facts("kairix", "mark")
        .await?
        .into_iter()
        .map(|f| f.fact.content)
        .collect();
    assert!(
        !contents.iter().any(|c| c == "Prefers window seats"),
        "{contents:?}"
    );
    rt.shutdown().await?;
    Ok(third)
}

/// A summarizer that answers in prose never replaces a real summary: the
/// sessions are reported as failed and tried again next time; the versions
/// of the `third` replay stay current.
async fn a_summarizer_answering_in_prose_replaces_no_summary(
    dir: &std::path::Path,
    third: &recall::runtime::ReplayReport,
) -> Res {
    // A summarizer that answers in prose never replaces a real summary:
    // the sessions are reported as failed and tried again next time.
    let refuses = Revised::named("refuses");
    let rt = start(dir, Arc::new(refuses.clone()), "2026-03-09T07:00:00Z").await?;
    let fourth = rt.replay(&request(Some("mark")), |_| true).await?;
    assert_eq!(
        (fourth.progress.failed, fourth.changed.len()),
        (3, 0),
        "{fourth:?}"
    );
    for c in &third.changed {
        let current = rt.summary(c.new_summary_id).await?.expect("kept");
        assert!(current.is_current() && !current.fallback, "{current:?}");
    }
    let fifth = rt.replay(&request(Some("mark")), |_| true).await?;
    assert_eq!(fifth.progress.failed, 3);
    assert_eq!(refuses.calls(), 6, "a failed session is tried again");
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_replay_resumes_where_it_stopped() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = start(
        dir.path(),
        Arc::new(ExtractiveReflect),
        "2026-03-02T10:00:00Z",
    )
    .await?;
    for i in 0..5 {
        let conn = format!("c{i}");
        rt.start_session("kairix", "mark", &conn).await?;
        rt.record_turn(
            &conn,
            Turn::new(format!("Call {i} about the Porto trip"), "Nice."),
        )?;
        rt.end_session(&conn, EndOptions::default())?;
        rt.wait_idle().await?;
    }
    rt.shutdown().await?;

    let revised = Revised::named("revised");
    let rt = start(
        dir.path(),
        Arc::new(revised.clone()),
        "2026-03-02T12:00:00Z",
    )
    .await?;
    // Stopped after two sessions (a Ctrl-C, a dropped connection).
    let first = rt.replay(&request(None), |p| p.done < 2).await?;
    assert!(first.interrupted);
    assert_eq!((first.progress.done, first.changed.len()), (2, 2));
    let second = rt.replay(&request(None), |_| true).await?;
    assert!(!second.interrupted);
    assert_eq!((second.progress.unchanged, second.changed.len()), (2, 3));
    assert_eq!(revised.calls(), 5, "each session asked once");
    let current = rt
        .summaries("kairix", SummaryType::Session)
        .await?
        .into_iter()
        .filter(|s| s.is_current())
        .count();
    assert_eq!(current, 5);

    // Bad input is a typed error.
    let bad = ReplayRequest {
        agent_id: String::new(),
        ..request(None)
    };
    let err = rt.replay(&bad, |_| true).await.expect_err("empty agent");
    assert!(matches!(err, recall::RecallError::Input(_)), "{err}");
    rt.shutdown().await?;
    Ok(())
}
