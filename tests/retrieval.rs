//! Retrieval by the current message, in paused tokio time: a context read
//! searches the user's whole memory (the turns of every ended call,
//! summaries, the facts they may see) with the message and shows the best
//! hits in the `retrieved` tier. Another user's private words never come
//! back; a forget takes the user's turns out of the index and out of
//! what reads keep prepared; a restart rebuilds it from the store.

use std::sync::Arc;

use recall::engine::context::{AssembledContext, Tier};
use recall::engine::model::Visibility;
use recall::engine::reflect::extractive::ExtractiveReflect;
use recall::engine::search::{DocKind, SearchQuery};
use recall::testkit::TestRuntime;
use recall::{ContextOptions, EndOptions, Runtime, Settings, Turn};

use crate::common;
use common::{settle, tier_text, CHATTER};

type Res = anyhow::Result<()>;

async fn call(rt: &TestRuntime, user: &str, conn: &str, lines: &[&str]) -> Res {
    rt.start_session("kairix", user, conn).await?;
    for l in lines {
        rt.record_turn(conn, Turn::new(*l, "That sounds like quite a day."))?;
    }
    rt.end_session(conn, EndOptions::default())?;
    settle(rt).await;
    Ok(())
}

/// A day later, a call of two lines of small talk (`c{i}`).
async fn small_talk_day(rt: &TestRuntime, user: &str, i: usize) -> Res {
    days(1).await;
    let a = CHATTER[i % CHATTER.len()];
    let b = CHATTER[(i * 3 + 1) % CHATTER.len()];
    call(rt, user, &format!("c{i}"), &[a, b]).await
}

async fn days(n: u64) {
    tokio::time::advance(std::time::Duration::from_secs(n * 86_400)).await;
}

fn all_text(c: &AssembledContext) -> String {
    c.to_messages()
        .iter()
        .map(|m| m.content.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn start() -> anyhow::Result<TestRuntime> {
    Ok(TestRuntime::start_full(Settings::for_test(), Arc::new(ExtractiveReflect)).await?)
}

#[tokio::test(start_paused = true)]
async fn a_detail_said_once_forty_calls_ago_comes_back_when_asked_in_other_words() -> Res {
    let rt = start().await?;
    call(
        &rt,
        "mark",
        "c0",
        &[
            "Busy weekend.",
            "We adopted a rescue greyhound on Saturday and named her Juniper.",
            "She sleeps most of the day.",
        ],
    )
    .await?;
    for i in 1..=40 {
        small_talk_day(&rt, "mark", i).await?;
    }
    days(1).await;
    let c = rt
        .context(
            "kairix",
            "mark",
            "Remind me, what did we name the rescue?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    assert!(c.total_tokens <= 2000);
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(retrieved.contains("Juniper"), "{retrieved}");
    // shown with its date and who said it
    assert!(
        retrieved.contains("mark: We adopted a rescue greyhound"),
        "{retrieved}"
    );
    // an empty message retrieves nothing
    let c = rt
        .context("kairix", "mark", "", 2000, ContextOptions::default())
        .await?;
    assert!(tier_text(&c, Tier::Retrieved).is_empty());
    // a restart rebuilds the index from the store
    let rt = rt.crash_and_restart().await?;
    let c = rt
        .context(
            "kairix",
            "mark",
            "what was the greyhound called?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    assert!(tier_text(&c, Tier::Retrieved).contains("Juniper"));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retrieval_never_crosses_users_but_shared_facts_do() -> Res {
    let rt = start().await?;
    call(
        &rt,
        "dana",
        "d1",
        &[
            "The codeword for the surprise party is flamingo.",
            "I work at Quokka Labs.",
        ],
    )
    .await?;
    call(
        &rt,
        "mark",
        "m1",
        &["My locker code at the gym is 4417.", "I work at Initech."],
    )
    .await?;
    days(1).await;
    for (user, other, ask) in [
        (
            "mark",
            "flamingo",
            "what is the codeword for the surprise party?",
        ),
        ("dana", "4417", "what is my locker code at the gym?"),
    ] {
        let c = rt
            .context("kairix", user, ask, 4000, ContextOptions::default())
            .await?;
        let text = all_text(&c);
        assert!(!text.contains(other), "{user} sees {other}: {text}");
    }
    // each still gets their own
    let c = rt
        .context(
            "kairix",
            "dana",
            "what is the codeword for the surprise party?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    assert!(tier_text(&c, Tier::Retrieved).contains("flamingo"));
    // dana shares where she works: mark's context shows it, once
    let fact = rt
        .facts("kairix", "dana")
        .await?
        .into_iter()
        .find(|f| f.content.contains("Quokka"))
        .expect("the offline reflector found where dana works");
    rt.set_fact_visibility(fact.fact_id, "dana", Visibility::Shared)
        .await?;
    let c = rt
        .context(
            "kairix",
            "mark",
            "who works at Quokka Labs?",
            4000,
            ContextOptions::default(),
        )
        .await?;
    let text = all_text(&c);
    // once in the memory, once in the question itself
    assert_eq!(text.matches("Quokka Labs").count(), 2, "{text}");
    assert!(text.contains("shared by dana"), "{text}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_users_turns_leave_the_index() -> Res {
    let rt = start().await?;
    call(&rt, "zoe", "z1", &["My cat Zanzibar hates the vacuum."]).await?;
    call(&rt, "mark", "m1", &["My cat Pixel loves the vacuum."]).await?;
    // later calls of small talk, so that her turn is retrieved, not recent
    for i in 0..12 {
        days(1).await;
        let talk: Vec<&str> = (0..6).map(|k| CHATTER[(i + k) % CHATTER.len()]).collect();
        call(&rt, "zoe", &format!("z{}", i + 2), &talk).await?;
    }
    let before = rt.indexed_items("kairix").await?;
    assert!(before.iter().any(|(_, u)| u == "zoe"));
    // A read retrieves her turn (as the index prepared it).
    let c = rt
        .context(
            "kairix",
            "zoe",
            "the vacuum?",
            2_000,
            ContextOptions::default(),
        )
        .await?;
    assert!(tier_text(&c, Tier::Retrieved).contains("Zanzibar"));
    rt.forget_user("zoe", None).await?;
    settle(&rt).await;
    // Nothing of hers is held in the index, nor retrieved.
    let c = rt
        .context(
            "kairix",
            "zoe",
            "the vacuum?",
            2_000,
            ContextOptions::default(),
        )
        .await?;
    assert!(!all_text(&c).contains("Zanzibar"), "{}", all_text(&c));
    let after = rt.indexed_items("kairix").await?;
    assert!(after.iter().all(|(_, u)| u != "zoe"), "{after:?}");
    assert!(after.iter().any(|(_, u)| u == "mark"));
    let turns = rt
        .search(
            "kairix",
            SearchQuery {
                text: "cat vacuum".into(),
                kinds: vec![DocKind::Turn],
                limit: 10,
                ..Default::default()
            },
        )
        .await?;
    assert_eq!(turns.len(), 1);
    assert!(turns[0].text.contains("Pixel"), "{}", turns[0].text);
    Ok(())
}

/// Thirty calls of small talk after one that says, once, a detail that
/// shares no word with the question asked about it later.
async fn memory_of(settings: Settings, detail: &str) -> anyhow::Result<TestRuntime> {
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    call(
        &rt,
        "mark",
        "c0",
        &[
            "Busy morning before work.",
            detail,
            "Anyway, I should get going.",
        ],
    )
    .await?;
    for i in 1..=30 {
        days(1).await;
        let lines = [
            CHATTER[i % CHATTER.len()],
            CHATTER[(i * 3 + 1) % CHATTER.len()],
        ];
        call(&rt, "mark", &format!("c{i}"), &lines).await?;
    }
    Ok(rt)
}

#[tokio::test(start_paused = true)]
async fn the_built_in_word_vectors_find_what_shares_no_word_with_the_question() -> Res {
    // Said so that no fact rule reads it, and no word of it is in the
    // question: only the vectors link "bicycle" to "bike".
    let detail = "The old bicycle finally gave up, the chain snapped on the hill.";
    let question = "What happened to my bike?";
    let mut settings = Settings::for_test();
    settings.embed.kind = recall::engine::settings::EmbedKind::Static;
    let rt = memory_of(settings.clone(), detail).await?;
    let c = rt
        .context("kairix", "mark", question, 2000, ContextOptions::default())
        .await?;
    assert!(
        tier_text(&c, Tier::Retrieved).contains("chain snapped"),
        "{}",
        all_text(&c)
    );
    // The index made the turns' vectors itself; a restart builds it again
    // from the stored turns alone, and finds the same.
    let rt = rt.restart_with(settings).await?;
    let c = rt
        .context("kairix", "mark", question, 2000, ContextOptions::default())
        .await?;
    assert!(
        tier_text(&c, Tier::Retrieved).contains("chain snapped"),
        "{}",
        all_text(&c)
    );
    // No turn's vector was stored: a forget finds vectors of summaries
    // and facts only.
    let report = rt.forget_user("mark", None).await?;
    assert!(report.turns > 60, "{report:?}");
    let summaries = report.session_summaries
        + report.daily_summaries
        + report.weekly_summaries
        + report.topic_summaries;
    assert!(report.vectors <= summaries + report.facts, "{report:?}");
    Runtime::clone(&rt).shutdown().await?;
    // On the hashing embedder the question's own words do not find it ...
    let mut settings = Settings::for_test();
    settings.embed.kind = recall::engine::settings::EmbedKind::Hashing;
    settings.context.retrieval_related_words = 0;
    let hashing = memory_of(settings.clone(), detail).await?;
    let c = hashing
        .context("kairix", "mark", question, 2000, ContextOptions::default())
        .await?;
    assert!(!all_text(&c).contains("chain snapped"), "{}", all_text(&c));
    Runtime::clone(&hashing).shutdown().await?;
    // ... the words nearest them in meaning do ("bike" to "bicycle"),
    // with no vector per item.
    settings.context.retrieval_related_words = 10;
    let related = memory_of(settings, detail).await?;
    let c = related
        .context("kairix", "mark", question, 2000, ContextOptions::default())
        .await?;
    assert!(
        tier_text(&c, Tier::Retrieved).contains("chain snapped"),
        "{}",
        all_text(&c)
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_retrieved_reply_comes_with_the_turn_before_it() -> Res {
    // The reply names the relation, the turn before it the name: a
    // question about the one finds the other only beside it. On words
    // alone, so that nothing but the neighbour brings the name.
    let mut settings = Settings::for_test();
    settings.embed.kind = recall::engine::settings::EmbedKind::Hashing;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    call(
        &rt,
        "mark",
        "c0",
        &[
            "her dog got out at dawn, my sister says",
            "Busy morning before work.",
            "oona rang. the gale took her trampoline into the next street",
            "younger sister. she's fine. the trampoline isn't",
            "Anyway, I should get going.",
        ],
    )
    .await?;
    for i in 1..=20 {
        days(1).await;
        call(&rt, "mark", &format!("c{i}"), &[CHATTER[i % CHATTER.len()]]).await?;
    }
    let c = rt
        .context(
            "kairix",
            "mark",
            "What's my younger sister's name?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    // The hit, the turn before it (the name) and the one after.
    for said in [
        "younger sister. she's fine",
        "oona rang",
        "Anyway, I should get going",
        // the call's first turn, a hit on "sister" too, with no turn
        // before it
        "mark: her dog got out",
    ] {
        assert!(retrieved.contains(said), "{said:?} in\n{}", all_text(&c));
    }
    // Each turn once, however many hits it stands beside.
    for said in ["mark: oona rang", "mark: her dog got out"] {
        assert_eq!(retrieved.matches(said).count(), 1, "{retrieved}");
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_answer_to_the_agents_question_comes_with_the_hit_that_asked_it() -> Res {
    // "Which one?" is asked by the agent, the name is the user's next turn:
    // the two are one statement and come together, ahead of weaker hits,
    // when the budget holds only a few (the whole budget to retrieval, and
    // an answer too long to fit in what the hits leave). On words alone,
    // so that nothing but the question brings the name.
    let mut settings = Settings::for_test();
    settings.embed.kind = recall::engine::settings::EmbedKind::Hashing;
    settings.context.retrieval_share = 1.0;
    let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
    rt.start_session("kairix", "mark", "c0").await?;
    rt.record_turn(
        "c0",
        Turn::new(
            "I had brunch with my oldest friend today",
            "Oh lovely! Which one?",
        ),
    )?;
    rt.record_turn(
        "c0",
        Turn::new(
            "Priyanka. Since we were four. She still steals my chips at every single dinner and still denies it with a straight face, every time",
            "Ha, a classic. Friends since 1994, then!",
        ),
    )?;
    rt.end_session("c0", EndOptions::default())?;
    settle(&rt).await;
    // Other calls about an old friend, each in other words and at length,
    // among small talk: more hits than the budget holds.
    let places = ["harbour", "market", "station", "park", "museum", "hotel"];
    let waits = ["twenty", "thirty", "forty", "fifty", "ninety"];
    for i in 0..40 {
        days(1).await;
        let conn = format!("c{}", i + 1);
        let line = if i % 3 == 0 {
            format!(
                "My oldest friend near the {} said the queue went round the corner and the eggs took {} minutes, call {i}",
                places[i % places.len()],
                waits[i % waits.len()],
            )
        } else {
            CHATTER[i % CHATTER.len()].to_string()
        };
        call(&rt, "mark", &conn, &[line.as_str()]).await?;
    }
    let c = rt
        .context(
            "kairix",
            "mark",
            "Who's my oldest friend?",
            260,
            ContextOptions::default(),
        )
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(
        retrieved.contains("brunch with my oldest friend"),
        "{}",
        all_text(&c)
    );
    assert!(retrieved.contains("Priyanka"), "{}", all_text(&c));
    // the agent's question is shown with the turn that asked it
    assert!(retrieved.contains("Which one?"), "{retrieved}");
    // a short answer is one statement: shown whole, under the agent's name
    assert!(
        retrieved.contains("kairix: Ha, a classic. Friends since 1994, then!"),
        "{retrieved}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_person_asked_about_by_relation_is_found_by_the_name_the_facts_give() -> Res {
    let rt = start().await?;
    call(
        &rt,
        "mark",
        "c0",
        &["My brother Rob is a firefighter up in Leeds."],
    )
    .await?;
    // Another user's Rob is nobody's brother of Mark's.
    call(
        &rt,
        "ada",
        "a0",
        &["My cousin Rob moved to Cardiff in May."],
    )
    .await?;
    // Enough calls that the name is a rare word of the agent's memory (a
    // word in more than a twentieth of its items ranks little).
    for i in 1..=90 {
        days(1).await;
        let a = CHATTER[i % CHATTER.len()];
        let b = CHATTER[(i * 5 + 2) % CHATTER.len()];
        let c = CHATTER[(i * 7 + 3) % CHATTER.len()];
        call(&rt, "mark", &format!("c{i}"), &[a, b, c]).await?;
        if i == 60 {
            // Said without the word "brother".
            call(
                &rt,
                "mark",
                "news",
                &["Big family news: Rob's transferring to the fire service in Aberdeen."],
            )
            .await?;
        }
    }
    days(1).await;
    let ask = "Where does my brother live now?";
    let c = rt
        .context("kairix", "mark", ask, 2000, ContextOptions::default())
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(retrieved.contains("Aberdeen"), "{retrieved}");
    // Mark's facts name nobody for Ada: her cousin's Rob stays hers, and
    // Mark's brother never comes into her context.
    let c = rt
        .context(
            "kairix",
            "ada",
            "Where does my cousin live now?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(
        retrieved.contains("Cardiff") && !retrieved.contains("Aberdeen"),
        "{retrieved}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_move_told_without_the_questions_words_answers_where_one_lives_now() -> Res {
    let rt = start().await?;
    call(
        &rt,
        "mark",
        "c0",
        &["We've lived in Caversham for twelve years, right by the park."],
    )
    .await?;
    for i in 1..=40 {
        small_talk_day(&rt, "mark", i).await?;
        if i == 20 {
            // Not a word of "where do I live".
            call(
                &rt,
                "mark",
                "keys",
                &["Got the keys on Saturday! A little villa up in Port Chalmers, over the harbour."],
            )
            .await?;
        }
    }
    days(1).await;
    let c = rt
        .context(
            "kairix",
            "mark",
            "Where do I live now?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(retrieved.contains("Port Chalmers"), "{retrieved}");
    // and where he lived before, asked so
    let c = rt
        .context(
            "kairix",
            "mark",
            "Where did I live before?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    let retrieved = tier_text(&c, Tier::Retrieved);
    assert!(retrieved.contains("Caversham"), "{retrieved}");
    Ok(())
}
