//! The Letta mirror at message level, in paused tokio time, through the
//! mirror port with an in-memory Letta (its archival passages, split in
//! chunks as Letta splits long texts, and its core blocks; it can be made
//! to fail). What the real Letta server does with the same calls is
//! `tests/letta` (`.ci/letta`).
//!
//! Each new summary reaches the Letta agent of its recall agent (every
//! user's) and of its user (one user's) without being asked; the block is
//! the user's rendered `background_context`; an outage delays the mirror
//! while recall's own reads go on, and it catches up with backoff; a
//! replay's old versions and a forgotten user's summaries leave Letta; a
//! restart writes nothing twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use recall::engine::mirror::{BlockValue, Listed, MirrorError, MirrorPort};
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::engine::settings::{LettaAgent, LettaSettings};
use recall::runtime::ReplayRequest;
use recall::{
    Clock, ContextOptions, EndOptions, Reflect, ReflectError, ReflectRequest, Runtime,
    RuntimeBuilder, Settings, Turn,
};
use serde_json::json;

use crate::common::settle;

type Res = anyhow::Result<()>;

/// What alice says in her second call (her topic grows with it).
const FLIGHTS: &str = "Ana booked the flights to Lisbon for the 12th.";

/// Texts longer than this are stored as two passages, as Letta stores a
/// text longer than its chunk size as several.
const CHUNK: usize = 400;

#[derive(Default)]
struct Letta {
    passages: BTreeMap<String, Vec<(String, String)>>,
    blocks: HashMap<(String, String), String>,
    next: u64,
    down: bool,
    /// Deletions fail (the rest answers).
    deletes_fail: bool,
    /// Texts holding this are refused (422), for good.
    refused_word: Option<String>,
    /// Passages are stored, but the answer is lost (a timeout).
    answers_lost: bool,
    calls: u64,
}

/// The in-memory Letta server.
#[derive(Clone, Default)]
struct FakeLetta(Arc<Mutex<Letta>>);

impl FakeLetta {
    fn texts(&self, remote: &str) -> Vec<String> {
        let l = self.0.lock().unwrap();
        l.passages
            .get(remote)
            .map(|p| p.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default()
    }

    /// The agent's summaries, each whole again (a split one's chunks
    /// joined).
    fn summaries(&self, remote: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.texts(remote) {
            match out.last_mut() {
                Some(last) if !last.contains("[/SUMMARY:") => last.push_str(&t),
                _ => out.push(t),
            }
        }
        out
    }

    /// The agent's summaries of one layer (`SESSION`, `TOPIC`…).
    fn layer(&self, remote: &str, tag: &str) -> Vec<String> {
        let marker = format!("[SUMMARY:{tag}]");
        self.summaries(remote)
            .into_iter()
            .filter(|t| t.starts_with(&marker))
            .collect()
    }

    fn block(&self, remote: &str) -> Option<String> {
        let l = self.0.lock().unwrap();
        l.blocks
            .get(&(remote.to_string(), "background_context".to_string()))
            .cloned()
    }

    fn set_down(&self, down: bool) {
        self.0.lock().unwrap().down = down;
    }

    fn refuse(&self, word: Option<&str>) {
        self.0.lock().unwrap().refused_word = word.map(str::to_string);
    }

    fn lose_answers(&self, lost: bool) {
        self.0.lock().unwrap().answers_lost = lost;
    }

    fn set_deletes_fail(&self, fail: bool) {
        self.0.lock().unwrap().deletes_fail = fail;
    }

    fn calls(&self) -> u64 {
        self.0.lock().unwrap().calls
    }

    fn answer(&self) -> Result<std::sync::MutexGuard<'_, Letta>, MirrorError> {
        let mut l = self.0.lock().unwrap();
        l.calls += 1;
        if l.down {
            return Err(MirrorError::Unreachable("connection refused".into()));
        }
        Ok(l)
    }
}

impl MirrorPort for FakeLetta {
    fn name(&self) -> &'static str {
        "fake-letta"
    }

    fn put_passage<'a>(
        &'a self,
        remote: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, MirrorError>> {
        Box::pin(async move {
            let mut l = self.answer()?;
            if l.refused_word
                .as_ref()
                .is_some_and(|w| text.contains(w.as_str()))
            {
                return Err(MirrorError::Status {
                    status: 422,
                    body: "unprocessable".into(),
                    retry_after: None,
                });
            }
            let cut = text
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| i >= CHUNK)
                .unwrap_or(text.len());
            let chunks = [&text[..cut], &text[cut..]];
            let mut ids = Vec::new();
            for c in chunks.into_iter().filter(|c| !c.is_empty()) {
                l.next += 1;
                let id = format!("passage-{}", l.next);
                l.passages
                    .entry(remote.to_string())
                    .or_default()
                    .push((id.clone(), c.to_string()));
                ids.push(id);
            }
            if l.answers_lost {
                return Err(MirrorError::Unreachable("operation timed out".into()));
            }
            Ok(ids)
        })
    }

    fn list_passages<'a>(
        &'a self,
        remote: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Listed>, MirrorError>> {
        Box::pin(async move {
            let l = self.answer()?;
            Ok(l.passages
                .get(remote)
                .map(|p| {
                    p.iter()
                        .map(|(id, text)| Listed {
                            id: id.clone(),
                            text: text.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default())
        })
    }

    fn delete_passage<'a>(
        &'a self,
        remote: &'a str,
        passage_id: &'a str,
    ) -> BoxFuture<'a, Result<(), MirrorError>> {
        Box::pin(async move {
            let mut l = self.answer()?;
            if l.deletes_fail {
                return Err(MirrorError::Status {
                    status: 500,
                    body: "internal error".into(),
                    retry_after: None,
                });
            }
            if let Some(p) = l.passages.get_mut(remote) {
                p.retain(|(id, _)| id != passage_id);
            }
            Ok(())
        })
    }

    fn set_block<'a>(
        &'a self,
        remote: &'a str,
        block: BlockValue<'a>,
    ) -> BoxFuture<'a, Result<(), MirrorError>> {
        Box::pin(async move {
            let mut l = self.answer()?;
            l.blocks.insert(
                (remote.to_string(), block.label.to_string()),
                block.value.to_string(),
            );
            Ok(())
        })
    }
}

/// A summarizer whose session summaries differ from the offline one's:
/// what a replay through it makes is a new version.
struct Revised;

impl Reflect for Revised {
    fn name(&self) -> &'static str {
        "revised"
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        let first = request
            .turns
            .first()
            .map(|t| t.user_message.clone())
            .unwrap_or_else(|| request.sources.join(" | "));
        let out = json!({"summary": format!("Revised: {first}"), "topics": ["travel"]});
        Box::pin(async move { Ok(out.to_string()) })
    }
}

fn settings() -> Settings {
    let mut s = Settings::for_test();
    s.letta = LettaSettings {
        // (Never dialled: the port given to the builder answers.)
        base_url: "http://127.0.0.1:9".into(),
        agents: vec![
            LettaAgent {
                recall_agent: "kairix".into(),
                user: None,
                letta_agent: "agent-all".into(),
            },
            LettaAgent {
                recall_agent: "kairix".into(),
                user: Some("alice".into()),
                letta_agent: "agent-alice".into(),
            },
        ],
        ..LettaSettings::default()
    };
    s
}

async fn start(
    dir: &std::path::Path,
    letta: &FakeLetta,
    reflect: Arc<dyn Reflect>,
    clock: Clock,
) -> anyhow::Result<Runtime> {
    Ok(RuntimeBuilder::new(dir)
        .settings(settings())
        .reflect(reflect)
        .clock(clock)
        .mirror(Arc::new(letta.clone()))
        .start()
        .await?)
}

async fn call(rt: &Runtime, user: &str, conn: &str, said: &str) -> Res {
    rt.start_session("kairix", user, conn).await?;
    rt.record_turn(conn, Turn::new(said, "Noted, I will keep that in mind."))?;
    rt.end_session(conn, EndOptions::default())?;
    settle(rt).await;
    Ok(())
}

/// A runtime on a fresh folder mirroring to a fresh in-memory Letta, after
/// a call of alice's mirrored.
async fn alice_mirrored() -> anyhow::Result<(tempfile::TempDir, FakeLetta, Runtime)> {
    let dir = tempfile::tempdir()?;
    let clock = Clock::starting_at("2026-03-02T09:00:00Z".parse()?);
    let letta = FakeLetta::default();
    let rt = start(dir.path(), &letta, Arc::new(ExtractiveReflect), clock).await?;
    call(
        &rt,
        "alice",
        "c1",
        "I am planning a trip to Lisbon in May with my sister Ana.",
    )
    .await?;
    rt.sync_mirror().await?;
    Ok((dir, letta, rt))
}

/// Lets the mirror's delay (and a backoff up to `d`) pass.
async fn wait(rt: &Runtime, d: Duration) {
    tokio::time::sleep(d).await;
    settle(rt).await;
    // The mirror's writes are its own; let them finish.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn summaries_and_blocks_reach_letta_an_outage_only_delays_them_and_restarts_write_nothing_twice(
) -> Res {
    let dir = tempfile::tempdir()?;
    let clock = Clock::starting_at("2026-03-02T09:00:00Z".parse()?);
    let letta = FakeLetta::default();
    let rt = start(dir.path(), &letta, Arc::new(ExtractiveReflect), clock).await?;

    // Two users' calls: each summary reaches the agent-wide Letta agent,
    // alice's alone hers, without anything asked.
    let long = "I am planning a trip to Lisbon in May with my sister Ana. ".repeat(8);
    call(&rt, "alice", "c1", &long).await?;
    call(
        &rt,
        "bob",
        "c2",
        "My bike needs a new chain before the Ghent race.",
    )
    .await?;
    wait(&rt, Duration::from_secs(2)).await;
    // Every layer: each call's session summary and the topic it began.
    let all = letta.layer("agent-all", "SESSION");
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(all
        .iter()
        .all(|t| t.starts_with("[SUMMARY:SESSION]\nPeriod: ")));
    assert!(all.iter().all(|t| t.ends_with("[/SUMMARY:SESSION]")));
    assert_eq!(letta.layer("agent-all", "TOPIC").len(), 2);
    let hers = letta.summaries("agent-alice");
    assert_eq!(hers.len(), 2, "{hers:#?}");
    assert!(hers
        .iter()
        .all(|t| t.contains("Lisbon") && !t.contains("Ghent")));
    assert!(
        letta.texts("agent-alice").len() > 1,
        "her long summary was split in chunks"
    );
    // Her block is her background_context as her context shows it; the
    // agent-wide agent's holds no user's conversations.
    let block = letta.block("agent-alice").expect("her block");
    assert_eq!(block, rt.user_background_context("kairix", "alice").await?);
    assert!(block.contains("Lisbon"), "{block}");
    let shared = letta.block("agent-all").unwrap_or_default();
    assert!(
        !shared.contains("Lisbon") && !shared.contains("Ghent"),
        "{shared}"
    );

    // Letta goes down: a call ends, recall's own reads answer at once, and
    // nothing reaches Letta.
    letta.set_down(true);
    call(&rt, "alice", "c3", FLIGHTS).await?;
    wait(&rt, Duration::from_secs(2)).await;
    let ctx = rt
        .context(
            "kairix",
            "alice",
            "when do we fly?",
            2_000,
            ContextOptions::default(),
        )
        .await?;
    let shown: String = ctx
        .to_messages()
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(shown.contains("flights"), "recall's own path is whole");
    assert_eq!(letta.layer("agent-alice", "SESSION").len(), 1);
    let stats = rt.mirror_stats().expect("the mirror runs");
    assert!(
        stats.pending >= 1 && stats.last_error.is_some(),
        "{stats:?}"
    );
    // Tried again with backoff (1 s, 2 s, 4 s… after each failure), not
    // in a loop: each of the two Letta agents her call touched a few
    // times in 10 s.
    let tried = letta.calls();
    wait(&rt, Duration::from_secs(10)).await;
    let retries = letta.calls() - tried;
    assert!((2..=10).contains(&retries), "{retries} tries in 10 s");

    // Back up: the mirror catches up within its backoff.
    letta.set_down(false);
    wait(&rt, Duration::from_secs(20)).await;
    assert_eq!(letta.layer("agent-alice", "SESSION").len(), 2);
    assert_eq!(letta.layer("agent-all", "SESSION").len(), 3);
    // Her topic grew with the call (its summary rewritten under its id):
    // the new text replaced the passage.
    let topics = letta.layer("agent-alice", "TOPIC");
    assert_eq!(topics.len(), 1, "{topics:#?}");
    assert!(topics[0].contains("flights"), "{topics:#?}");
    let stats = rt.mirror_stats().expect("the mirror runs");
    assert_eq!((stats.pending, stats.last_error), (0, None));
    assert!(letta.block("agent-alice").unwrap().contains("flights"));

    // A restart writes no passage again (the ledger says what Letta has).
    rt.shutdown().await?;
    let before = letta.texts("agent-all");
    let rt = start(dir.path(), &letta, Arc::new(Revised), clock).await?;
    let report = rt.sync_mirror().await?;
    assert_eq!((report.passages_written, report.passages_deleted), (0, 0));
    assert_eq!(letta.texts("agent-all"), before);

    // A replay through another summarizer: the new versions replace the
    // old in Letta.
    let req = ReplayRequest {
        agent_id: "kairix".into(),
        user_id: Some("alice".into()),
        since: None,
    };
    let replayed = rt.replay(&req, |_| true).await?;
    assert_eq!(replayed.changed.len(), 2);
    wait(&rt, Duration::from_secs(2)).await;
    rt.sync_mirror().await?;
    let hers = letta.layer("agent-alice", "SESSION");
    assert_eq!(hers.len(), 2, "{hers:#?}");
    assert!(hers.iter().all(|t| t.contains("Revised: ")), "{hers:#?}");
    assert_eq!(letta.layer("agent-all", "SESSION").len(), 3);

    // Alice is forgotten: nothing of hers stays in either Letta agent.
    rt.forget_user("alice", None).await?;
    wait(&rt, Duration::from_secs(2)).await;
    rt.sync_mirror().await?;
    assert!(letta.texts("agent-alice").is_empty());
    let left = letta.summaries("agent-all");
    assert!(!left.is_empty());
    assert!(left.iter().all(|t| t.contains("Ghent")), "{left:#?}");
    assert!(!letta
        .block("agent-alice")
        .unwrap_or_default()
        .contains("Lisbon"));
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_replaced_passage_that_could_not_be_deleted_goes_on_a_later_run() -> Res {
    let (_dir, letta, rt) = alice_mirrored().await?;
    assert_eq!(letta.layer("agent-alice", "TOPIC").len(), 1);

    // Her topic grows while Letta refuses deletions: the new text is
    // there, the old one still too.
    letta.set_deletes_fail(true);
    call(&rt, "alice", "c2", FLIGHTS).await?;
    assert!(rt.sync_mirror().await.is_err());
    let topics = letta.layer("agent-alice", "TOPIC");
    assert_eq!(topics.len(), 2, "{topics:#?}");

    // Once Letta deletes again, the old text goes and the new one is not
    // written a second time.
    letta.set_deletes_fail(false);
    rt.sync_mirror().await?;
    let topics = letta.layer("agent-alice", "TOPIC");
    assert_eq!(topics.len(), 1, "{topics:#?}");
    assert!(topics[0].contains("flights"), "{topics:#?}");
    assert_eq!(letta.layer("agent-alice", "SESSION").len(), 2);
    let texts = letta.texts("agent-alice");
    let unique: std::collections::HashSet<&String> = texts.iter().collect();
    assert_eq!(unique.len(), texts.len(), "no passage twice: {texts:#?}");
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_refused_summary_holds_back_neither_the_others_nor_a_forget() -> Res {
    let (_dir, letta, rt) = alice_mirrored().await?;
    assert!(!letta.layer("agent-all", "SESSION").is_empty());

    // Letta refuses bob's summaries for good; alice is then forgotten.
    letta.refuse(Some("Ghent"));
    call(
        &rt,
        "bob",
        "c2",
        "My bike needs a new chain before the Ghent race.",
    )
    .await?;
    rt.forget_user("alice", None).await?;
    let report = rt.sync_mirror().await?;
    assert!(report.passages_refused >= 1, "{report:?}");
    assert!(letta
        .texts("agent-all")
        .iter()
        .all(|t| !t.contains("Lisbon")));
    assert!(letta.texts("agent-alice").is_empty());

    // Once Letta takes them, bob's come at the next run.
    letta.refuse(None);
    rt.sync_mirror().await?;
    assert!(letta.layer("agent-all", "SESSION")[0].contains("Ghent"));
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_answer_was_lost_is_found_not_written_again() -> Res {
    let dir = tempfile::tempdir()?;
    let clock = Clock::starting_at("2026-03-02T09:00:00Z".parse()?);
    let letta = FakeLetta::default();
    let rt = start(dir.path(), &letta, Arc::new(ExtractiveReflect), clock).await?;
    letta.lose_answers(true);
    call(
        &rt,
        "alice",
        "c1",
        "I am planning a trip to Lisbon in May with my sister Ana.",
    )
    .await?;
    assert!(rt.sync_mirror().await.is_err());
    let stored = letta.texts("agent-alice");
    assert!(!stored.is_empty(), "stored, though the answer was lost");

    // A restart, as after a crash, then the next run: the passage is
    // found and recorded, not written again.
    letta.lose_answers(false);
    rt.shutdown().await?;
    let rt = start(dir.path(), &letta, Arc::new(ExtractiveReflect), clock).await?;
    rt.sync_mirror().await?;
    let after = letta.texts("agent-alice");
    assert_eq!(after.len(), 2, "one passage each: {after:#?}");
    assert_eq!(letta.layer("agent-alice", "SESSION").len(), 1);
    assert_eq!(letta.layer("agent-alice", "TOPIC").len(), 1);
    // A second call's writes are lost too, and she is forgotten before
    // they are tried again: found by their first line, and deleted.
    letta.lose_answers(true);
    call(&rt, "alice", "c2", FLIGHTS).await?;
    assert!(rt.sync_mirror().await.is_err());
    letta.lose_answers(false);
    assert!(letta
        .texts("agent-alice")
        .iter()
        .any(|t| t.contains("flights")));
    // And what is the ledger's: a forget deletes it all.
    rt.forget_user("alice", None).await?;
    rt.sync_mirror().await?;
    let left = letta.texts("agent-alice");
    assert!(left.is_empty(), "{left:#?}");
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn without_letta_the_mirror_is_off_and_says_so() -> Res {
    let dir = tempfile::tempdir()?;
    let rt = RuntimeBuilder::new(dir.path())
        .settings(Settings::for_test())
        .mirror(Arc::new(FakeLetta::default()))
        .start()
        .await?;
    assert!(rt.mirror_stats().is_none());
    assert!(matches!(
        rt.sync_mirror().await,
        Err(recall::RecallError::MirrorOff)
    ));
    rt.shutdown().await?;
    Ok(())
}
