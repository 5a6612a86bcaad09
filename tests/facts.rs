//! Facts over calls, offline, in paused tokio time: a value a later call
//! states on a one-valued subject replaces the earlier one, which is kept
//! as history with its date; two values in one call are a conflict; the
//! context holds current facts only; deleting the current value brings the
//! earlier one back; a replay with the offline rules finds the facts of
//! calls made before them, in the order of the calls.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use recall::engine::model::FactRecord;
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::runtime::ReplayRequest;
use recall::{
    Clock, ContextOptions, EndOptions, Reflect, ReflectError, ReflectRequest, Runtime,
    RuntimeBuilder, Settings, Turn,
};
use serde_json::json;

use crate::common;
use common::run_until;

type Res = anyhow::Result<()>;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().expect("a UTC time")
}

async fn start(
    dir: &std::path::Path,
    reflect: Arc<dyn Reflect>,
    at: &str,
) -> anyhow::Result<Runtime> {
    Ok(RuntimeBuilder::new(dir)
        .settings(Settings::for_test())
        .reflect(reflect)
        .clock(Clock::starting_at(utc(at)))
        .start()
        .await?)
}

/// One call of mark's at `at`, saying `said`.
async fn call(rt: &Runtime, at: &str, conn: &str, said: &[&str]) -> Res {
    run_until(rt, utc(at)).await;
    rt.start_session("kairix", "mark", conn).await?;
    for s in said {
        rt.record_turn(conn, Turn::new(*s, "I see."))?;
    }
    rt.end_session(conn, EndOptions::default())?;
    rt.wait_idle().await?;
    Ok(())
}

fn by<'a>(facts: &'a [FactRecord], content: &str) -> &'a FactRecord {
    facts
        .iter()
        .find(|f| f.content == content)
        .unwrap_or_else(|| panic!("no fact {content:?} in {facts:?}"))
}

/// The facts the context for "where do I live?" shows, in the facts tier or retrieved.
async fn facts_text(rt: &Runtime) -> anyhow::Result<String> {
    let c = rt
        .context(
            "kairix",
            "mark",
            "where do I live?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    use recall::engine::context::Tier;
    // A fact the message asks about is shown in the retrieved tier, the
    // rest in the facts tier: each once.
    Ok(c.tiers
        .iter()
        .filter(|t| matches!(t.tier, Tier::Facts | Tier::Retrieved))
        .flat_map(|t| &t.items)
        .map(|i| i.text.to_string())
        .collect::<Vec<_>>()
        .join("\n"))
}

async fn context_text(rt: &Runtime) -> anyhow::Result<String> {
    let c = rt
        .context(
            "kairix",
            "mark",
            "where do I live?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    Ok(c.to_messages()
        .into_iter()
        .map(|m| m.content)
        .collect::<Vec<_>>()
        .join("\n"))
}

#[tokio::test(start_paused = true)]
async fn a_later_calls_value_replaces_the_earlier_one_and_one_calls_two_values_conflict() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = start(
        dir.path(),
        Arc::new(ExtractiveReflect),
        "2026-03-01T08:00:00Z",
    )
    .await?;
    call(
        &rt,
        "2026-03-01T09:00:00Z",
        "c1",
        &["Hi! I live in Austin, near the river."],
    )
    .await?;
    call(
        &rt,
        "2026-03-02T09:00:00Z",
        "c2",
        &["Big news: we moved to Denver last week."],
    )
    .await?;

    let facts = rt.facts("kairix", "mark").await?;
    let (austin, denver) = (by(&facts, "Lives in Austin"), by(&facts, "Moved to Denver"));
    assert_eq!(austin.subject.as_deref(), Some("home"));
    assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
    assert_eq!(
        austin.history.superseded_at,
        Some(utc("2026-03-02T09:00:00Z"))
    );
    assert_eq!(austin.history.stated_at, Some(utc("2026-03-01T09:00:00Z")));
    assert!(denver.is_current() && !austin.is_current());
    assert_eq!(denver.conflicts_with, None);
    // The facts show the current value, and the earlier one as earlier.
    let facts_tier = facts_text(&rt).await?;
    assert!(
        facts_tier.contains("Moved to Denver (earlier: Lives in Austin, until 2026-03-02)"),
        "{facts_tier}"
    );
    assert!(!facts_tier.contains("] Lives in Austin"), "{facts_tier}");

    // Two employers in one call: flagged, neither replaces the other.
    call(
        &rt,
        "2026-03-03T09:00:00Z",
        "c3",
        &["I work at Initech.", "Sorry, no: I work at Globex."],
    )
    .await?;
    let facts = rt.facts("kairix", "mark").await?;
    let (initech, globex) = (
        by(&facts, "Works at Initech"),
        by(&facts, "Works at Globex"),
    );
    assert!(initech.is_current() && globex.is_current());
    let flagged = [initech, globex]
        .iter()
        .filter_map(|f| f.conflicts_with)
        .collect::<Vec<_>>();
    assert_eq!(flagged.len(), 1, "{facts:?}");

    // Deleting the current home brings the earlier one back.
    rt.delete_fact(denver.fact_id, "mark").await?;
    let facts = rt.facts("kairix", "mark").await?;
    assert!(by(&facts, "Lives in Austin").is_current());
    // (as a fact, in the facts tier or retrieved for the question)
    let ctx = context_text(&rt).await?;
    assert!(ctx.contains("] Lives in Austin"), "{ctx}");
    assert!(!ctx.contains("] Moved to Denver"), "{ctx}");
    rt.shutdown().await?;
    Ok(())
}

/// The summarizer before the fact rules: a summary and no facts.
struct NoFacts;

impl Reflect for NoFacts {
    fn name(&self) -> &'static str {
        "no-facts"
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        let said = request
            .turns
            .first()
            .map(|t| t.user_message.clone())
            .unwrap_or_else(|| request.sources.join(" "));
        let out = json!({"summary": format!("mark said: {said}")}).to_string();
        Box::pin(async move { Ok(out) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_finds_facts_with_the_new_rules_in_the_order_of_the_calls() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = start(dir.path(), Arc::new(NoFacts), "2026-03-01T08:00:00Z").await?;
    call(&rt, "2026-03-01T09:00:00Z", "c1", &["I live in Austin."]).await?;
    call(&rt, "2026-03-04T09:00:00Z", "c2", &["We moved to Denver!"]).await?;
    call(
        &rt,
        "2026-03-05T09:00:00Z",
        "c3",
        &["My dog is called Biscuit."],
    )
    .await?;
    assert!(rt.facts("kairix", "mark").await?.is_empty());
    rt.shutdown().await?;

    let rt = start(
        dir.path(),
        Arc::new(ExtractiveReflect),
        "2026-03-06T08:00:00Z",
    )
    .await?;
    let request = ReplayRequest {
        agent_id: "kairix".into(),
        user_id: Some("mark".into()),
        since: None,
    };
    // The store's in-memory facts are built before the replay writes.
    rt.context(
        "kairix",
        "mark",
        "where do I live?",
        2000,
        ContextOptions::default(),
    )
    .await?;
    let report = rt.replay(&request, |_| true).await?;
    assert_eq!(report.progress.changed, 3, "{report:?}");
    assert!(rt.store_mirrors_match().await?);
    let c = rt
        .context(
            "kairix",
            "mark",
            "where do I live?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    assert!(
        c.tiers
            .iter()
            .flat_map(|t| &t.items)
            .any(|i| i.text.contains("Moved to Denver")),
        "{c:?}"
    );
    let facts = rt.facts("kairix", "mark").await?;
    let (austin, denver) = (by(&facts, "Lives in Austin"), by(&facts, "Moved to Denver"));
    assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
    assert_eq!(
        austin.history.superseded_at,
        Some(utc("2026-03-04T09:00:00Z"))
    );
    assert!(denver.is_current());
    assert!(by(&facts, "Has a dog named Biscuit").is_current());

    // A second replay finds everything known: nothing changes.
    let again = rt.replay(&request, |_| true).await?;
    assert_eq!(again.progress.changed, 0, "{again:?}");
    assert_eq!(rt.facts("kairix", "mark").await?, facts);
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_agent_sides_promises_and_life_are_its_own_facts_in_the_context() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = start(
        dir.path(),
        Arc::new(ExtractiveReflect),
        "2026-03-01T08:00:00Z",
    )
    .await?;
    run_until(&rt, utc("2026-03-01T09:00:00Z")).await;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "I live in Austin, near the river.",
            "Lovely. I live in Cork myself. I'll send you the ferry timetable tonight.",
        ),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    rt.wait_idle().await?;
    let facts = rt.facts("kairix", "mark").await?;
    let agent: Vec<&str> = facts
        .iter()
        .filter(|f| f.speaker == recall::engine::model::Speaker::Agent)
        .map(|f| f.content.as_str())
        .collect();
    assert!(
        agent.contains(&"Will send mark the ferry timetable tonight"),
        "{facts:?}"
    );
    // the agent side's home is its own: the user's is current, and the
    // context shows the agent's under its id
    let home = by(&facts, "Lives in Austin");
    assert!(home.is_current());
    assert_eq!(home.speaker, recall::engine::model::Speaker::User);
    let shown = context_text(&rt).await?;
    assert!(
        shown.contains("kairix: Will send mark the ferry timetable tonight"),
        "{shown}"
    );
    assert!(shown.contains("] Lives in Austin"), "{shown}");
    // Its promise is in the facts tier of every read; its own life only
    // where a message finds it.
    use recall::engine::context::Tier;
    let tier = common::tier_text;
    let c = rt
        .context(
            "kairix",
            "mark",
            "what's for dinner?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    let facts_tier = tier(&c, Tier::Facts);
    assert!(
        facts_tier.contains("kairix: Will send mark"),
        "{facts_tier}"
    );
    assert!(!facts_tier.contains("Cork"), "{facts_tier}");
    let c = rt
        .context(
            "kairix",
            "mark",
            "Is Cork where you live?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    let found = tier(&c, Tier::Retrieved);
    assert!(found.contains("Cork"), "{found}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_stated_fact_is_in_the_next_context_at_once_and_replaces_a_calls_value() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = start(
        dir.path(),
        Arc::new(ExtractiveReflect),
        "2026-03-01T08:00:00Z",
    )
    .await?;
    call(&rt, "2026-03-01T09:00:00Z", "c1", &["I live in Austin."]).await?;
    let before = context_text(&rt).await?;
    assert!(before.contains("Austin"), "{before}");
    run_until(&rt, utc("2026-03-03T09:00:00Z")).await;

    // outside any call: read before the next context, no reflection
    let said = rt
        .remember("kairix", "mark", "We moved to Denver in June.")
        .await?;
    let stored: Vec<&str> = said.stored.iter().map(|f| f.content.as_str()).collect();
    assert!(stored.contains(&"Moved to Denver"), "{stored:?}");
    assert!(
        stored.contains(&"We moved to Denver in June."),
        "the month is kept as said: {stored:?}"
    );
    let facts = rt.facts("kairix", "mark").await?;
    let (austin, denver) = (by(&facts, "Lives in Austin"), by(&facts, "Moved to Denver"));
    assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
    assert_eq!(denver.source_session_id, None);
    let shown = facts_text(&rt).await?;
    assert!(shown.contains("Denver"), "{shown}");
    let hits = rt
        .search(
            "kairix",
            recall::engine::search::SearchQuery {
                text: "Denver".into(),
                kinds: vec![recall::engine::search::DocKind::Fact],
                user_id: Some("mark".into()),
                since: None,
                until: None,
                limit: 0,
            },
        )
        .await?;
    assert!(hits.iter().any(|h| h.id == denver.fact_id), "{hits:?}");

    // said again: known, not stored twice
    let again = rt.remember("kairix", "mark", "We moved to Denver.").await?;
    assert!(again.stored.is_empty(), "{:?}", again.stored);
    assert_eq!(again.known.len(), 1);
    assert_eq!(rt.facts("kairix", "mark").await?.len(), facts.len());

    // refused whole: nothing stored
    for bad in ["", "   ", "I live\u{0} here"] {
        assert!(rt.remember("kairix", "mark", bad).await.is_err(), "{bad:?}");
    }
    assert!(rt.remember("", "mark", "I live here").await.is_err());
    assert!(rt.remember("kairix", "mark", "?! …").await.is_err());
    // more facts than a call's reflection keeps: refused whole
    let many: String = (0..40).map(|i| format!("Thing{i} matters. ")).collect();
    let refused = rt.remember("kairix", "mark", &many).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(rt.facts("kairix", "mark").await?.len(), facts.len());

    // two values of one subject in one statement: the later said replaces
    // the earlier, whatever their random ids
    for _ in 0..8 {
        rt.forget_user("ada", Some("kairix")).await?;
        let two = rt
            .remember("kairix", "ada", "I work at Initech. I work at Globex.")
            .await?;
        let [first, second] = [&two.stored[0], &two.stored[1]];
        assert_eq!(first.content, "Works at Initech");
        assert_eq!(second.content, "Works at Globex");
        assert_eq!(first.history.superseded_by, Some(second.fact_id));
        assert!(second.is_current());
    }
    rt.shutdown().await?;
    Ok(())
}
