//! Context assembly: `recall_actors::context::assemble` for an (agent,
//! user) with 1,000 facts, 1,000 summaries and 200 turns, against a
//! HashMap lookup of an already-assembled context, in the same run.
//!
//! Prints mean, p50 and p99 of individually timed calls for both, then runs
//! the criterion groups. Run with `cargo bench --bench context`.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use criterion::Criterion;
use recall::engine::context::{assemble, AssembledContext, CharEstimate, ContextInput};
use recall::engine::model::{
    BlockLabel, ConversationSummary, ConversationTurn, Fact, FactCategory, MemoryBlock,
    SummaryType, Visibility,
};
use uuid::Uuid;

const FACTS: usize = 1_000;
const SUMMARIES: usize = 1_000;
const TURNS: usize = 200;
const BUDGET: usize = 8_000;
const TIMED: usize = 2_000;

struct Data {
    blocks: Vec<MemoryBlock>,
    facts: Vec<Fact>,
    summaries: Vec<ConversationSummary>,
    turns: Vec<ConversationTurn>,
}

fn data() -> Data {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    let categories = [
        FactCategory::Occupation,
        FactCategory::Preference,
        FactCategory::Goal,
        FactCategory::Biographical,
    ];
    Data {
        blocks: BlockLabel::ALL
            .into_iter()
            .map(|label| MemoryBlock {
                agent_id: "kairix".into(),
                label,
                value: "Kairix is a patient career coach. ".repeat(20),
                limit: 2000,
                updated_at: t0,
                source_user_id: None,
            })
            .collect(),
        facts: (0..FACTS)
            .map(|i| Fact {
                fact_id: Uuid::from_u128(i as u128 + 1),
                agent_id: "kairix".into(),
                user_id: "mark".into(),
                category: categories[i % categories.len()],
                content: format!("Fact number {i}: prefers morning calls about job search"),
                subject: None,
                visibility: Visibility::Private,
                source_session_id: None,
                extracted_at: t0 + chrono::Duration::minutes(i as i64),
                conflicts_with: None,
            })
            .collect(),
        summaries: (0..SUMMARIES)
            .map(|i| ConversationSummary {
                summary_id: Uuid::from_u128(10_000 + i as u128),
                summary_type: SummaryType::Session,
                agent_id: "kairix".into(),
                user_id: "mark".into(),
                period_start: t0 + chrono::Duration::hours(i as i64),
                period_end: t0 + chrono::Duration::hours(i as i64),
                summary_text: format!(
                    "Session {i}: Mark talked about interviews at Globex, salary around $150k, \
                     and preparing the system design round with the agent. "
                )
                .repeat(3),
                topics: vec!["interview".into()],
                key_entities: vec!["Globex".into()],
                emotional_tone: None,
                source_summary_ids: vec![],
                turn_count: 4,
                created_at: t0,
                fallback: false,
            })
            .collect(),
        turns: (0..TURNS)
            .map(|i| ConversationTurn {
                user_message: format!("Question {i} about the Globex onsite and what to wear"),
                agent_response: format!("Answer {i}: business casual, and bring your notes"),
                timestamp: t0,
            })
            .collect(),
    }
}

fn input(d: &Data) -> ContextInput<'_> {
    ContextInput {
        blocks: &d.blocks,
        facts: &d.facts,
        user_id: "mark",
        summaries: &d.summaries,
        turns: &d.turns,
        current_message: "What should I expect in the system design round?",
        budget_tokens: BUDGET,
    }
}

fn percentiles(mut v: Vec<u64>) -> (f64, u64, u64) {
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    (mean, v[v.len() / 2], v[v.len() * 99 / 100])
}

fn main() {
    let d = data();
    let ctx = assemble(&input(&d), &CharEstimate).expect("assembles");
    println!(
        "{FACTS} facts, {SUMMARIES} summaries, {TURNS} turns, budget {BUDGET}: {} tokens used, {} items trimmed",
        ctx.total_tokens,
        ctx.trimmed.len()
    );
    let mut cache: HashMap<(String, String), AssembledContext> = HashMap::new();
    for i in 0..1_000 {
        cache.insert(("kairix".into(), format!("user-{i}")), ctx.clone());
    }
    cache.insert(("kairix".into(), "mark".into()), ctx);
    let key = ("kairix".to_string(), "mark".to_string());

    for _ in 0..200 {
        black_box(assemble(&input(&d), &CharEstimate).expect("assembles"));
    }
    let timed = |f: &mut dyn FnMut()| {
        (0..TIMED)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_nanos() as u64
            })
            .collect::<Vec<_>>()
    };
    let (am, a50, a99) = percentiles(timed(&mut || {
        black_box(assemble(black_box(&input(&d)), &CharEstimate).expect("assembles"));
    }));
    let (hm, h50, h99) = percentiles(timed(&mut || {
        black_box(cache.get(black_box(&key)));
    }));
    println!(
        "assemble: mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        am / 1e3,
        a50 as f64 / 1e3,
        a99 as f64 / 1e3
    );
    println!("HashMap lookup of an assembled context: mean {hm:.0} ns, p50 {h50} ns, p99 {h99} ns");
    println!(
        "ratio (p99) {:.0}x; target p99 < 100 µs: {}",
        a99 as f64 / h99.max(1) as f64,
        if a99 < 100_000 { "met" } else { "MISSED" }
    );

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let mut g = c.benchmark_group("context");
    g.bench_function("assemble", |b| {
        b.iter(|| assemble(black_box(&input(&d)), &CharEstimate))
    });
    g.bench_function("hashmap_lookup", |b| {
        b.iter(|| cache.get(black_box(&key)).map(|c| c.total_tokens))
    });
    g.finish();
    c.final_summary();
}
