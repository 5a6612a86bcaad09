//! Regression tests of the search index's builds (a build cleared while
//! it runs, a stale build, a build whose runtime stopped), of query pruning
//! and of selection and cutting at their edges.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use recall_actors::context::{CharEstimate, ContextItem, PreparedFacts, Role, Source, Tier};
use recall_actors::model::ConversationSummary;
use recall_actors::retrieval::{cut_text, select, Retrieved, Selection};
use recall_actors::settings::RankingSettings;

/// The default least room worth cutting an item down to.
const MIN_CUT: usize = RankingSettings::DEFAULT.min_cut_tokens;
use recall_actors::search::{AgentIndex, DocKind, Ranking, SearchIndex, SearchQuery};
use uuid::Uuid;

fn summary(user: &str, text: &str) -> ConversationSummary {
    let t = DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap();
    ConversationSummary::session(Uuid::new_v4(), "kairix", user, t, text)
}

/// A store with one user in it, whom a forget removes: what a build reads.
#[derive(Clone)]
struct FakeStore {
    forgotten: Arc<std::sync::atomic::AtomicBool>,
    summary: ConversationSummary,
}

impl FakeStore {
    fn new() -> FakeStore {
        FakeStore {
            forgotten: Arc::default(),
            summary: summary("mark", "Mark's secret codeword is pelican"),
        }
    }

    fn read(&self) -> AgentIndex {
        let mut ix = AgentIndex::default();
        if !self.forgotten.load(std::sync::atomic::Ordering::SeqCst) {
            ix.put_summary(&self.summary, None);
        }
        ix
    }

    /// The forget: the store first, then the index op the Store sends.
    fn forget(&self, search: &SearchIndex) {
        self.forgotten
            .store(true, std::sync::atomic::Ordering::SeqCst);
        search.update("kairix", |ix| ix.remove_user("mark"));
    }
}

/// A build that read the store before a forget, cleared (and so missing
/// the forget's op) while it ran, is not installed: the caller gets a
/// build made after the forget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_cleared_while_it_runs_is_not_installed() {
    let search = Arc::new(SearchIndex::default());
    let store = FakeStore::new();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(std::sync::Mutex::new(go_rx));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let build = {
        let store = store.clone();
        move || {
            let _ = started_tx.send(());
            let ix = store.read();
            // the first build waits here; a later one finds the sender gone
            let _ = go_rx.lock().unwrap().recv();
            Ok(ix)
        }
    };
    let s2 = search.clone();
    let waiter = tokio::spawn(async move { s2.ensure("kairix", build).await.map(|_| ()) });
    started.recv().await; // the build has read the store
    search.clear(); // drop_search_indexes
    store.forget(&search); // its op finds no slot
    go_tx.send(()).unwrap();
    drop(go_tx);
    waiter.await.unwrap().unwrap();
    let ix = search.agent("kairix").expect("an index is installed");
    let ix = ix.read().unwrap();
    assert!(
        ix.owners().all(|(_, u)| u != "mark"),
        "a forgotten user's summary is still indexed (and its text returned by search)"
    );
}

/// clear() during build A, then build B starts and a forget's op queues on
/// B: A's end leaves B's slot and changes to B, and both callers get B's
/// index, with the forget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_build_leaves_the_next_builds_changes_to_it() {
    let search = Arc::new(SearchIndex::default());
    let store = FakeStore::new();
    let (a_tx, a_rx) = std::sync::mpsc::channel::<()>();
    let a_rx = Arc::new(std::sync::Mutex::new(a_rx));
    let (b_tx, b_rx) = std::sync::mpsc::channel::<()>();
    let b_rx = Arc::new(std::sync::Mutex::new(b_rx));
    let (sa, sb) = (store.clone(), store.clone());
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let started_b = started_tx.clone();
    let s1 = search.clone();
    let a = tokio::spawn(async move {
        s1.ensure("kairix", move || {
            let _ = started_tx.send(());
            let ix = sa.read();
            let _ = a_rx.lock().unwrap().recv();
            Ok(ix)
        })
        .await
    });
    started.recv().await;
    search.clear();
    let s2 = search.clone();
    let b = tokio::spawn(async move {
        s2.ensure("kairix", move || {
            let _ = started_b.send(());
            let ix = sb.read();
            let _ = b_rx.lock().unwrap().recv();
            Ok(ix)
        })
        .await
    });
    started.recv().await; // B's slot is in place
    store.forget(&search); // queued on B
    a_tx.send(()).unwrap();
    drop(a_tx);
    b_tx.send(()).unwrap();
    drop(b_tx);
    let (a_ix, b_ix) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert!(
        Arc::ptr_eq(&a_ix, &b_ix),
        "both callers get the build that counts"
    );
    assert!(
        b_ix.read().unwrap().owners().all(|(_, u)| u != "mark"),
        "B's caller searched an index that missed the forget queued on B"
    );
}

/// A query word that is in no item counts as "rare", so every common word
/// that does match is pruned and nothing is found.
#[test]
fn a_word_no_item_holds_does_not_prune_the_others() {
    let mut ix = AgentIndex::default();
    for i in 0..10 {
        ix.put_summary(
            &summary("mark", &format!("Walked Biscuit in the park, day {i}")),
            None,
        );
    }
    let q = |text: &str| SearchQuery {
        text: text.into(),
        kinds: vec![DocKind::Session],
        user_id: Some("mark".into()),
        limit: 5,
        ..Default::default()
    };
    let r = Ranking {
        dense: 0,
        exhaustive: false,
        related: None,
        distinct: false,
        changes: recall_actors::text::Subjects::NONE,
        expects: recall_actors::text::Answers::NONE,
        keyword_weight: 1.0,
        candidates: 40,
        max_term_share: 0.2,
        recency: None,
        keyword: recall_actors::search::KeywordTuning::DEFAULT,
    };
    assert!(
        !ix.search(&q("Biscuit"), None, r).is_empty(),
        "all-common query keeps its words"
    );
    assert!(
        !ix.search(&q("What breed is Biscuit?"), None, r).is_empty(),
        "adding a word nobody said ('breed') loses every hit"
    );
}

fn it(tier: Tier, source: Source, text: &str) -> ContextItem {
    ContextItem {
        tier,
        source,
        role: Role::System,
        tokens: text.chars().count().div_ceil(4),
        text: text.into(),
    }
}

/// A retrieved item cut to the retrieval share stays cut although the rest
/// of the budget is left empty; a retrieved fact is cut too ("facts are
/// never cut").
#[test]
fn a_retrieved_item_too_long_for_its_share_still_fills_the_budget_whole() {
    let long = "The user said something long. ".repeat(40); // 300 tokens
    let r = [Retrieved {
        item: it(Tier::Retrieved, Source::Summary(Uuid::from_u128(1)), &long),
        at: DateTime::<Utc>::from_timestamp(0, 0).unwrap(),
    }];
    let facts = PreparedFacts::default();
    let ctx = select(
        &Selection {
            blocks: &[],
            facts: &facts,
            summaries: &[],
            turns: &[],
            retrieved: &r,
            retrieval_share: 0.5,
            current_message: "hi",
            budget_tokens: 400,
            min_cut_tokens: MIN_CUT,
        },
        &CharEstimate,
    )
    .unwrap();
    assert!(
        ctx.trimmed.is_empty(),
        "300 tokens, 399 free, cut to the 199 of the share: {:?} total {}",
        ctx.trimmed,
        ctx.total_tokens
    );
}

/// A block whose first sentence does not fit is cut to its header alone.
#[test]
fn a_cut_block_keeps_more_than_its_label() {
    let text = format!("[persona]\n{}", "word ".repeat(60));
    let cut = cut_text(&text, 20, MIN_CUT, &CharEstimate).unwrap();
    assert_ne!(
        cut, "[persona] …",
        "20 tokens of room, the label alone kept"
    );
}

/// The runtime that ran a build goes away (shutdown, or a Runtime used
/// from another tokio runtime): the next `ensure` builds again instead of
/// waiting on a build nobody will finish. (The timeout only bounds a hang;
/// it measures nothing.)
#[test]
fn a_build_whose_runtime_stopped_is_started_again() {
    let search = Arc::new(SearchIndex::default());
    let rt1 = tokio::runtime::Runtime::new().unwrap();
    let (_hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let hold_rx = Arc::new(std::sync::Mutex::new(hold_rx));
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let s1 = search.clone();
    rt1.spawn(async move {
        let _ = s1
            .ensure("kairix", move || {
                let _ = started_tx.send(());
                let _ = hold_rx.lock().unwrap().recv();
                Ok(AgentIndex::default())
            })
            .await;
    });
    started.recv().unwrap(); // the build runs
    rt1.shutdown_background();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt2 = tokio::runtime::Runtime::new().unwrap();
        let r = rt2.block_on(search.ensure("kairix", || Ok(AgentIndex::default())));
        let _ = tx.send(r.is_ok());
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(3)).is_ok(),
        "ensure never returned"
    );
}

#[test]
fn cut_text_fits_its_room_on_any_text() {
    let parts = [
        "é", "日本", "🙂", ". ", "\n", " ", "a", "?", "…", "\u{200b}", "!!", "x.",
    ];
    let mut seed = 7u64;
    for _ in 0..20000 {
        let mut s = String::new();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let n = (seed >> 33) % 80;
        for _ in 0..n {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            s.push_str(parts[((seed >> 33) % parts.len() as u64) as usize]);
        }
        let room = ((seed >> 20) % 40) as usize;
        if let Some(c) = cut_text(&s, room, MIN_CUT, &CharEstimate) {
            use recall_actors::context::TokenCounter;
            assert!(CharEstimate.count(&c) <= room, "{s:?} {room} {c:?}");
        }
    }
    let _ = cut_text("abc", usize::MAX, MIN_CUT, &CharEstimate);
    let _ = cut_text("", 100, MIN_CUT, &CharEstimate);
}

#[test]
fn framing_phrases_match_whole_words_only() {
    use recall_actors::lang::without_question_framing as w;
    assert_eq!(
        w("Was the loan refused today?"),
        "was the loan refused today?"
    );
}
