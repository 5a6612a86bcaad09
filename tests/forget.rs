//! Forgetting a user (seed `001`), in paused tokio time: with one agent,
//! then with every agent, while one of their calls is live and after their
//! days were rolled up and their summaries joined topics. Afterwards no
//! search, listing, context or block shows anything of theirs, another
//! user's memory is whole, and no sled tree holds a copy. A forget a crash
//! cut short is finished at the next start.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::engine::search::SearchQuery;
use recall::engine::store::Trees;
use recall::testkit::{ScriptedReflect, Step, TestRuntime};
use recall::{BlockLabel, ContextOptions, EndOptions, Settings, SummaryType, Turn};
use uuid::Uuid;

use crate::common;
use common::{run_until, settle};

type Res = anyhow::Result<()>;

const ZOE: &str = "zoe-q";
/// Words only Zoe ever says.
const HERS: [&str; 3] = ["Zanzibar", "Quokkatronics", "zoe-q"];

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().expect("a UTC time")
}

async fn call(rt: &TestRuntime, agent: &str, user: &str, conn: &str, turns: &[&str]) -> Res {
    rt.start_session(agent, user, conn).await?;
    for t in turns {
        rt.record_turn(conn, Turn::new(*t, "I'll remember that."))?;
    }
    rt.end_session(conn, EndOptions::default())?;
    settle(rt).await;
    Ok(())
}

fn query(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        kinds: Vec::new(),
        user_id: None,
        since: None,
        until: None,
        limit: 50,
    }
}

/// Everything an agent shows of `user`: search hits for Zoe's words,
/// summaries of every layer, topics, facts.
async fn shown(rt: &TestRuntime, agent: &str, user: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    // (A word no item holds falls back to similarity: other users' items
    // may come back, never one of hers or one quoting her.)
    for word in HERS {
        n += rt
            .search(agent, query(word))
            .await?
            .iter()
            .filter(|h| h.user_id == user || mentions_her(&h.text))
            .count();
    }
    for kind in SummaryType::ALL {
        n += rt
            .summaries(agent, kind)
            .await?
            .iter()
            .filter(|s| s.user_id == user)
            .count();
    }
    n += rt.topics(agent, Some(user)).await?.len();
    n += rt.facts(agent, user).await?.len();
    Ok(n)
}

/// Her words in any case (topic labels and keywords are lowercased).
fn mentions_her(text: &str) -> bool {
    let text = text.to_lowercase();
    HERS.iter().any(|w| text.contains(&w.to_lowercase()))
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_user_leaves_no_copy_and_the_others_keep_theirs() -> Res {
    let mut settings = Settings::for_test();
    settings.rollup.daily_hour = 3;
    settings.rollup.spread_secs = 0;
    // Monday 2 March 2026.
    let rt = TestRuntime::start_at(
        settings,
        Arc::new(ExtractiveReflect),
        utc("2026-03-02T10:00:00Z"),
    )
    .await?;
    three_days_of_calls_rolled_up_into_topics(&rt).await?;
    let (zoe_ids, ada_before) = zoe_is_known_and_ada_remembered_before_the_forget(&rt).await?;
    // One of her calls is live when she asks to be forgotten.
    rt.start_session("kairix", ZOE, "live").await?;
    rt.record_turn("live", Turn::new("Zanzibar visa questions", "Let's check."))?;
    one_agent_forgets_her_and_the_other_still_knows_her(&rt).await?;
    every_agent_forgets_her_live_call_and_all(&rt).await?;
    nothing_of_hers_shows_and_adas_memory_is_whole(&rt, ada_before).await?;

    // No copy in any tree: no key or value holds her id, her words or one
    // of her sessions' ids.
    let dir = rt.data_dir().to_path_buf();
    rt.runtime().clone().shutdown().await?;
    no_tree_holds_a_copy_of_her(&dir, &zoe_ids)
}

/// Three days of calls of Zoe and Ada with Kairix, and of Zoe with Nova,
/// rolled up past the next Monday's rollup hour and joined into topics.
async fn three_days_of_calls_rolled_up_into_topics(rt: &TestRuntime) -> Res {
    // The search index is built before the writes, so the forget has to
    // change a live index.
    rt.search("kairix", query("garden")).await?;
    for day in 2..5 {
        run_until(rt, utc(&format!("2026-03-0{day}T11:00:00Z"))).await;
        call(
            rt,
            "kairix",
            ZOE,
            &format!("zk{day}"),
            &[
                "My name is Zoe and I work at Quokkatronics",
                "We sail to Zanzibar in June on the Quokkatronics boat",
            ],
        )
        .await?;
        call(
            rt,
            "kairix",
            "ada",
            &format!("ak{day}"),
            &[
                "I live in Lisbon and the garden needs compost",
                "The tomatoes by the fence are doing well",
            ],
        )
        .await?;
        call(
            rt,
            "nova",
            ZOE,
            &format!("zn{day}"),
            &["The Zanzibar packing list again: sunscreen and charts"],
        )
        .await?;
    }
    // Past the next Monday's rollup hour: three dailies each and a weekly.
    run_until(rt, utc("2026-03-09T04:00:00Z")).await;
    settle(rt).await;
    rt.process_new_summaries().await?;
    rt.refresh_background_context().await?;
    Ok(())
}

/// Zoe's rollups, topic and background context are there before the
/// forget; her six sessions' ids and Ada's summaries of every layer.
async fn zoe_is_known_and_ada_remembered_before_the_forget(
    rt: &TestRuntime,
) -> anyhow::Result<(HashSet<Uuid>, Vec<recall::ConversationSummary>)> {
    for kind in [SummaryType::Daily, SummaryType::Weekly, SummaryType::Topic] {
        let of_zoe = rt
            .summaries("kairix", kind)
            .await?
            .into_iter()
            .filter(|s| s.user_id == ZOE)
            .count();
        assert!(of_zoe > 0, "Zoe has {kind:?} summaries before the forget");
    }
    let zoe_ids: HashSet<Uuid> = rt
        .sessions(None)
        .await?
        .into_iter()
        .filter(|s| s.user_id == ZOE)
        .map(|s| s.session_id)
        .collect();
    assert_eq!(zoe_ids.len(), 6);
    let ada_before: Vec<_> = {
        let mut all = Vec::new();
        for kind in SummaryType::ALL {
            all.extend(
                rt.summaries("kairix", kind)
                    .await?
                    .into_iter()
                    .filter(|s| s.user_id == "ada"),
            );
        }
        all
    };
    assert!(ada_before.len() >= 5, "{ada_before:?}");
    let block = rt
        .user_block("kairix", ZOE, BlockLabel::BackgroundContext)
        .await?;
    assert!(
        block.is_some_and(|b| mentions_her(&b.value)),
        "her topic is in her background context"
    );
    Ok((zoe_ids, ada_before))
}

/// With one agent first: Nova forgets her, Kairix still knows her and her
/// live Kairix call goes on; the store's in-memory records are its trees'.
async fn one_agent_forgets_her_and_the_other_still_knows_her(rt: &TestRuntime) -> Res {
    // With one agent first: Nova forgets her, Kairix still knows her.
    let nova = rt.forget_user(ZOE, Some("nova")).await?;
    assert_eq!(nova.sessions, 3);
    assert_eq!(nova.agents, ["nova".to_string()].into());
    assert_eq!(shown(rt, "nova", ZOE).await?, 0);
    assert!(shown(rt, "kairix", ZOE).await? > 0);
    assert!(
        rt.live_session("live").await?.is_some(),
        "her Kairix call goes on"
    );
    // The store's in-memory records, dropped by the forget and built
    // again by a context read, are its trees'.
    rt.context(
        "kairix",
        "ada",
        "the garden?",
        2000,
        ContextOptions::default(),
    )
    .await?;
    assert!(rt.store_mirrors_match().await?);
    Ok(())
}

/// Then with every agent: her sessions (the live one too), summaries of
/// every layer, topics and facts are removed; the live call is ended.
async fn every_agent_forgets_her_live_call_and_all(rt: &TestRuntime) -> Res {
    // Then with every agent.
    let all = rt.forget_user(ZOE, None).await?;
    settle(rt).await;
    assert_eq!(all.sessions, 4, "three ended calls and the live one");
    // The live call ended by the forget was not summarized: three
    // summaries, of the calls that had ended before.
    assert_eq!(all.session_summaries, 3, "{all:?}");
    assert!(
        all.daily_summaries >= 3 && all.weekly_summaries >= 1,
        "{all:?}"
    );
    assert!(
        all.topic_summaries >= 1 && all.topics >= 1 && all.facts >= 1,
        "{all:?}"
    );
    assert_eq!(all.agents, ["kairix".to_string()].into());
    assert!(rt.live_session("live").await?.is_none());
    Ok(())
}

/// Nothing of hers through any door, nor after a second forget and the
/// next rollups; Ada's memory (`ada_before`) is whole and still found.
async fn nothing_of_hers_shows_and_adas_memory_is_whole(
    rt: &TestRuntime,
    ada_before: Vec<recall::ConversationSummary>,
) -> Res {
    // Nothing of hers through any door.
    for agent in ["kairix", "nova"] {
        assert_eq!(shown(rt, agent, ZOE).await?, 0, "{agent} still shows her");
        for s in rt.sessions(Some(agent)).await? {
            assert_ne!(s.user_id, ZOE);
        }
        for b in rt.blocks(agent).await? {
            assert!(!mentions_her(&b.value), "{b:?}");
        }
        for label in BlockLabel::ALL {
            for user in [ZOE, "ada"] {
                if let Some(b) = rt.user_block(agent, user, label).await? {
                    assert!(!mentions_her(&b.value), "{user}: {b:?}");
                }
            }
        }
        let ctx = rt
            .context(
                agent,
                ZOE,
                "Where are we sailing?",
                8_000,
                ContextOptions::default(),
            )
            .await?;
        assert!(!mentions_her(&serde_json::to_string(&ctx)?), "{ctx:?}");
    }
    assert!(rt.dead_letters().await?.is_empty());
    // Ada's memory is whole, and still found.
    let mut ada_after = Vec::new();
    for kind in SummaryType::ALL {
        ada_after.extend(
            rt.summaries("kairix", kind)
                .await?
                .into_iter()
                .filter(|s| s.user_id == "ada"),
        );
    }
    assert_eq!(ada_after, ada_before);
    assert!(!rt
        .search("kairix", query("Lisbon compost"))
        .await?
        .is_empty());
    // A second forget finds nothing more.
    assert!(rt.forget_user(ZOE, None).await?.is_empty());
    // The rollups and the watchdog run on without bringing her back.
    run_until(rt, utc("2026-03-10T04:00:00Z")).await;
    settle(rt).await;
    assert_eq!(shown(rt, "kairix", ZOE).await?, 0);
    Ok(())
}

/// No key or value of any tree in the data folder `dir` holds her id, her
/// words or one of her sessions' ids (`zoe_ids`).
fn no_tree_holds_a_copy_of_her(dir: &std::path::Path, zoe_ids: &HashSet<Uuid>) -> Res {
    let trees = Trees::open(dir, &Settings::default().store)?;
    let needles: Vec<Vec<u8>> = HERS
        .iter()
        .flat_map(|w| [w.as_bytes().to_vec(), w.to_lowercase().into_bytes()])
        .chain(zoe_ids.iter().map(|id| id.as_bytes().to_vec()))
        .chain(zoe_ids.iter().map(|id| id.to_string().into_bytes()))
        .collect();
    let mut scanned = 0;
    for name in trees.db.tree_names() {
        let tree = trees.db.open_tree(&name)?;
        for item in tree.iter() {
            let (k, v) = item?;
            scanned += 1;
            // Bar the removed ids themselves, kept (with when) for the
            // hours a late write about one of them may take to arrive.
            if &*name == b"forgotten" {
                assert_eq!(
                    (k.len(), v.len()),
                    (16, 8),
                    "an id and a time, nothing else"
                );
                continue;
            }
            for n in &needles {
                let hit = |hay: &[u8]| hay.windows(n.len()).any(|w| w == n.as_slice());
                assert!(
                    !hit(&k) && !hit(&v),
                    "tree {:?} holds {:?} in {:?} => {:?}",
                    String::from_utf8_lossy(&name),
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                );
            }
        }
    }
    assert!(scanned > 20, "{scanned} records scanned");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_forget_cut_short_by_a_crash_is_finished_at_the_next_start() -> Res {
    let rt = TestRuntime::start().await?;
    call(&rt, "kairix", ZOE, "c1", &["We sail to Zanzibar in June"]).await?;
    call(&rt, "kairix", "ada", "c2", &["The garden needs compost"]).await?;
    // The crash comes right after the forget began.
    let rt = rt
        .crash_and_restart_with(|dir| {
            let trees = Trees::open(dir, &Settings::default().store)
                .map_err(|e| recall::StartupError::Recovery(e.to_string()))?;
            trees
                .begin_forget(ZOE, None)
                .map_err(|e| recall::StartupError::Recovery(e.to_string()))?;
            trees
                .db
                .flush()
                .map_err(|e| recall::StartupError::Recovery(e.to_string()))?;
            Ok(())
        })
        .await?;
    settle(&rt).await;
    assert_eq!(shown(&rt, "kairix", ZOE).await?, 0);
    let users: Vec<String> = rt
        .sessions(None)
        .await?
        .into_iter()
        .map(|s| s.user_id)
        .collect();
    assert_eq!(users, ["ada"]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn forgetting_checks_its_input_and_changes_nothing_on_bad_input() -> Res {
    let rt = TestRuntime::start().await?;
    call(&rt, "kairix", ZOE, "c1", &["We sail to Zanzibar in June"]).await?;
    for (user, agent) in [("", None), ("bad\nid", None), (ZOE, Some(""))] {
        let err = rt.forget_user(user, agent).await.expect_err("bad input");
        assert!(matches!(err, recall::RecallError::Input(_)), "{err}");
    }
    assert_eq!(rt.sessions(None).await?.len(), 1);
    // A user with nothing stored: nothing to remove, no error.
    assert!(rt.forget_user("nobody", None).await?.is_empty());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_reflection_backing_off_when_its_user_is_forgotten_stops_and_leaves_nothing() -> Res {
    let llm = ScriptedReflect::new([Step::ServerError(500), Step::ServerError(500)]);
    let mut settings = Settings::for_test();
    settings.reflector.max_attempts = 3;
    let rt = TestRuntime::start_full(settings, Arc::new(llm.clone())).await?;
    rt.start_session("kairix", ZOE, "c1").await?;
    rt.record_turn("c1", Turn::new("We sail to Zanzibar in June", "Lovely."))?;
    rt.end_session("c1", EndOptions::default())?;
    // The first attempt fails; the reflection waits to try again.
    while llm.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let report = rt.forget_user(ZOE, None).await?;
    assert_eq!(report.sessions, 1);
    settle(&rt).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle(&rt).await;
    assert_eq!(llm.calls(), 1, "her conversation was not sent again");
    assert!(rt.dead_letters().await?.is_empty());
    assert_eq!(shown(&rt, "kairix", ZOE).await?, 0);
    assert!(rt.sessions(None).await?.is_empty());
    Ok(())
}

/// A call live when its user asks to be forgotten ends without being
/// summarized: nothing of hers goes to the summarizer (window summaries
/// are off: the threshold is never reached). A call of another user,
/// ended meanwhile, still is.
#[tokio::test(start_paused = true)]
async fn a_call_live_at_the_forget_is_not_sent_to_the_summarizer() -> Res {
    let llm = ScriptedReflect::new([]);
    let rt = TestRuntime::start_full(Settings::for_test(), Arc::new(llm.clone())).await?;
    rt.start_session("kairix", ZOE, "live").await?;
    rt.record_turn("live", Turn::new("We sail to Zanzibar in June", "Lovely."))?;
    rt.start_session("kairix", "ada", "other").await?;
    rt.record_turn("other", Turn::new("The tomatoes are doing well", "Good."))?;
    let report = rt.forget_user(ZOE, None).await?;
    assert_eq!((report.sessions, report.session_summaries), (1, 0));
    rt.end_session("other", EndOptions::default())?;
    settle(&rt).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle(&rt).await;
    assert_eq!(llm.calls(), 1, "Ada's call alone was summarized");
    assert_eq!(shown(&rt, "kairix", ZOE).await?, 0);
    assert!(rt.dead_letters().await?.is_empty());
    let sessions = rt.sessions(None).await?;
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].user_id, "ada");
    Ok(())
}

/// Test settings over a PostgreSQL test schema, rollups off.
fn on_postgres(schema: &common::TestSchema) -> Settings {
    let mut settings = Settings::for_test();
    settings.store.kind = recall::engine::settings::StoreKind::Postgres;
    settings.store.postgres.url = schema.url.clone();
    settings.store.postgres.schema = schema.name.clone();
    settings.rollup.enabled = false;
    settings
}

/// Starts a call of Zoe's (one turn, stored) and one of Mark's on `b`:
/// their session ids.
async fn zoe_and_mark_live_on(b: &recall::Runtime) -> anyhow::Result<(Uuid, Uuid)> {
    let live = b.start_session("kairix", ZOE, "zoe-call").await?;
    b.record_turn(
        "zoe-call",
        Turn::new("I fly to Zanzibar on Friday", "Safe travels"),
    )?;
    b.sync().await?;
    let other = b.start_session("kairix", "mark", "mark-call").await?;
    b.record_turn("mark-call", Turn::new("My sister lives in Leeds", "Lovely"))?;
    Ok((live.session_id, other.session_id))
}

/// Waits (5 s in all at most) until `b` no longer holds the call on
/// `conn`, then until it no longer stores `session`.
async fn until_ended_and_gone(b: &recall::Runtime, conn: &str, session: Uuid) -> Res {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while b.live_session(conn).await?.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "B still holds the call"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while b.session(session).await?.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call B ended is still stored"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Two instances over one PostgreSQL schema: a user's call is live on B
/// when A forgets them. B hears of it through the change feed, ends the
/// call without reflecting on it, and forgets what it wrote meanwhile:
/// nothing of theirs is left, on either, once B's call has ended.
#[tokio::test]
async fn a_forget_on_one_instance_ends_the_users_live_call_on_another() -> Res {
    let schema = common::TestSchema::new();
    let settings = on_postgres(&schema);
    let schema_settings = settings.store.postgres.clone();
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let a = recall::RuntimeBuilder::new(dir_a.path())
        .settings(settings.clone())
        .start()
        .await?;
    let b = recall::RuntimeBuilder::new(dir_b.path())
        .settings(settings)
        .start()
        .await?;
    // Zoe's call, and another user's that goes on untouched.
    let (live, other) = zoe_and_mark_live_on(&b).await?;

    a.forget_user(ZOE, None).await?;
    // B ends Zoe's call within the change feed's delay; its own forget of
    // what the call wrote follows the call's end.
    until_ended_and_gone(&b, "zoe-call", live).await?;
    b.wait_idle().await?;
    a.wait_idle().await?;
    // Nothing of hers on either instance: no session, summary or fact.
    for rt in [&a, &b] {
        assert!(rt.session(live).await?.is_none());
        assert!(rt.turns(live).await?.is_empty(), "her turns");
        let sessions = rt.sessions(Some("kairix")).await?;
        assert!(sessions.iter().all(|s| s.user_id != ZOE), "{sessions:?}");
        for kind in [SummaryType::Session, SummaryType::Daily] {
            let all = rt.summaries("kairix", kind).await?;
            assert!(all.iter().all(|s| s.user_id != ZOE), "{all:?}");
        }
        assert!(rt.facts("kairix", ZOE).await?.is_empty());
    }
    // Mark's call is still live on B.
    assert!(b.live_session("mark-call").await?.is_some());
    assert_eq!(
        b.end_session("mark-call", EndOptions::default())?,
        Some(other)
    );
    b.shutdown().await?;
    a.shutdown().await?;
    // One forget, logged once (B's repeat of it is not logged again).
    use recall::engine::store::ForgetStore;
    let pg = recall::engine::store::PgBackend::connect(&schema_settings).await?;
    let log = pg.forget_log().await?;
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].covers("kairix", ZOE) && log[0].agent_id.is_none());
    Ok(())
}

/// A forget whose announcement never reached B (made by a process that
/// announces nothing, as when B's change feed is cut at that moment) is
/// found in the forget log within `refresh_secs`: B ends the user's live
/// call without reflecting on it, and nothing of theirs is left.
#[tokio::test]
async fn a_forget_whose_announcement_was_missed_is_found_in_the_forget_log() -> Res {
    use recall::engine::store::ForgetStore;
    let schema = common::TestSchema::new();
    let mut settings = on_postgres(&schema);
    settings.store.postgres.refresh_secs = 1;
    let dir = tempfile::tempdir()?;
    let b = recall::RuntimeBuilder::new(dir.path())
        .settings(settings.clone())
        .start()
        .await?;
    let (live, other) = zoe_and_mark_live_on(&b).await?;

    // The forget, by the store alone: logged, never announced.
    let pg = recall::engine::store::PgBackend::connect(&settings.store.postgres).await?;
    pg.forget_user(ZOE, None).await?;
    // She calls again right after the forget, before B reads the log: the
    // new call, and what it stores, are hers to keep.
    let back = b.start_session("kairix", ZOE, "zoe-back").await?;
    b.record_turn(
        "zoe-back",
        Turn::new("I'm back, and I live in Oslo now", "Welcome back"),
    )?;
    until_ended_and_gone(&b, "zoe-call", live).await?;
    b.wait_idle().await?;
    assert!(b.turns(live).await?.is_empty(), "her turns");
    // Of hers, only the call started after the forget.
    let sessions = b.sessions(Some("kairix")).await?;
    let hers: Vec<&str> = sessions
        .iter()
        .filter(|s| s.user_id == ZOE)
        .map(|s| s.connection_id.as_str())
        .collect();
    assert_eq!(hers, ["zoe-back"], "{sessions:?}");
    assert!(b
        .summaries("kairix", SummaryType::Session)
        .await?
        .is_empty());
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        b.live_session("zoe-back").await?.is_some(),
        "her new call was ended"
    );
    assert_eq!(
        b.end_session("zoe-back", EndOptions::default())?,
        Some(back.session_id)
    );
    b.wait_idle().await?;
    assert_eq!(b.turns(back.session_id).await?.len(), 1, "her new turn");
    // Mark's call goes on.
    assert!(b.live_session("mark-call").await?.is_some());
    assert_eq!(
        b.end_session("mark-call", EndOptions::default())?,
        Some(other)
    );
    b.shutdown().await?;
    assert_eq!(pg.forget_log().await?.len(), 1, "B's repeat is not logged");
    Ok(())
}
