//! Context assembly on the voice hot path: `Runtime::context` for an
//! (agent, user) with 1,000 facts, 1,000 summaries and 200 turns, against a
//! HashMap lookup of an already-assembled context, in the same run.
//!
//! The runtime (default settings, offline summarizer, a temporary data
//! folder) is filled through its own API: 1,000 calls of the user, each
//! summarized and stating one fact; then a 200-turn call that ended a
//! moment ago (inside the soft decay, so its turns are in the context
//! verbatim); then a live call with a few turns, whose session actor every
//! read asks for its window summary and gap. Measured, each call timed on
//! its own:
//!
//! - `context`: `Runtime::context(agent, user, message, 32000)` (room for
//!   every fact, the blocks, every turn and some of the summaries), served from
//!   the prepared sources the runtime caches per (agent, user);
//! - `context_uncached`: the same read with every source read from the
//!   store and prepared again — what a read costs after a write for the
//!   agent (a cache miss);
//! - `assemble`: the pure assembler from unprepared data (for reference);
//! - the baseline: a lookup, by (agent, user), of an already-assembled
//!   context in a HashMap of 1,000 entries.
//!
//! Prints mean, p50 and p99 of each and the p99 ratio, then runs the
//! criterion groups. Run with `cargo bench --bench context`.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use recall::engine::context::{assemble, AssembledContext, CharEstimate, ContextInput};
use recall::engine::model::{BlockLabel, SummaryType};
use recall::{Runtime, RuntimeBuilder};

const AGENT: &str = "kairix";
const USER: &str = "mark";
const CALLS: usize = 1_000;
const PREVIOUS_TURNS: usize = 200;
const BUDGET: usize = 32_000;
const MESSAGE: &str = "What should I expect in the system design round?";
const TIMED: usize = 5_000;

const HOBBIES: [&str; 10] = [
    "climbing",
    "chess",
    "sailing",
    "pottery",
    "running",
    "baking",
    "cycling",
    "painting",
    "jazz",
    "gardening",
];

/// Fills the runtime through its API; returns the live call's connection.
async fn fill(rt: &Runtime) -> String {
    rt.set_block(
        AGENT,
        BlockLabel::Persona,
        &"Kairix is a patient career coach. ".repeat(20),
    )
    .await
    .expect("persona");
    for i in 0..CALLS {
        let conn = format!("call-{i}");
        rt.start_session(AGENT, USER, &conn).await.expect("start");
        rt.record_turn(
            &conn,
            format!(
                "I prefer {} on weekday number {i}. The Globex interview prep is going well, \
                 we covered the system design round and salary expectations.",
                HOBBIES[i % HOBBIES.len()]
            ),
            "Good. Let's keep the momentum and plan the next mock interview.".to_string(),
        )
        .expect("turn");
        rt.end_session(&conn).expect("end");
        if i % 100 == 99 {
            rt.wait_idle().await.expect("idle");
        }
    }
    rt.start_session(AGENT, USER, "previous")
        .await
        .expect("start");
    for i in 0..PREVIOUS_TURNS {
        rt.record_turn(
            "previous",
            format!("Question {i} about the Globex onsite and what to wear"),
            format!("Answer {i}: business casual, and bring your notes"),
        )
        .expect("turn");
    }
    rt.end_session("previous").expect("end");
    rt.wait_idle().await.expect("idle");
    rt.start_session(AGENT, USER, "live").await.expect("start");
    for i in 0..3 {
        rt.record_turn(
            "live",
            format!("Live question {i}"),
            format!("Live answer {i}"),
        )
        .expect("turn");
    }
    rt.flush().await.expect("flush");
    "live".to_string()
}

fn percentiles(mut v: Vec<u64>) -> (f64, u64, u64) {
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    (mean, v[v.len() / 2], v[v.len() * 99 / 100])
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio
        .block_on(RuntimeBuilder::new(dir.path()).start())
        .expect("runtime start");
    let started = Instant::now();
    tokio.block_on(fill(&rt));
    let (facts, summaries) = tokio.block_on(async {
        let facts = rt.facts(AGENT, USER).await.expect("facts").len();
        let summaries = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries")
            .len();
        (facts, summaries)
    });
    let ctx = tokio
        .block_on(rt.context(AGENT, USER, MESSAGE, BUDGET))
        .expect("context");
    println!(
        "filled in {:.1} s: {facts} facts, {summaries} summaries, {PREVIOUS_TURNS}-turn previous call, \
         live call; budget {BUDGET}: {} tokens used, {} items trimmed",
        started.elapsed().as_secs_f64(),
        ctx.total_tokens,
        ctx.trimmed.len()
    );
    for t in &ctx.tiers {
        println!(
            "  {:?}: {} items, {} tokens",
            t.tier,
            t.items.len(),
            t.tokens
        );
    }

    // The baseline: an assembled context looked up among 1,000.
    let mut cache: HashMap<(String, String), Arc<AssembledContext>> = HashMap::new();
    for i in 0..1_000 {
        cache.insert((AGENT.into(), format!("user-{i}")), Arc::new(ctx.clone()));
    }
    cache.insert((AGENT.into(), USER.into()), Arc::new(ctx));
    let key = (AGENT.to_string(), USER.to_string());

    let timed_async = |n: usize, uncached: bool| -> Vec<u64> {
        tokio.block_on(async {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let c = if uncached {
                    rt.context_uncached(AGENT, USER, MESSAGE, BUDGET).await
                } else {
                    rt.context(AGENT, USER, MESSAGE, BUDGET).await
                };
                out.push(t.elapsed().as_nanos() as u64);
                black_box(c.expect("context"));
            }
            out
        })
    };
    timed_async(500, false);
    let before = rt.context_cache_stats();
    let (cm, c50, c99) = percentiles(timed_async(TIMED, false));
    let after = rt.context_cache_stats();
    let (um, u50, u99) = percentiles(timed_async(50, true));

    // The pure assembler over the same data, unprepared.
    let (blocks, facts, summaries, turns) = tokio.block_on(async {
        let blocks = rt.blocks(AGENT).await.expect("blocks");
        let facts: Vec<_> = rt
            .facts(AGENT, USER)
            .await
            .expect("facts")
            .into_iter()
            .filter(|f| f.is_current())
            .map(|f| f.fact)
            .collect();
        let mut summaries = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries");
        summaries.sort_by_key(|s| s.period_end);
        let previous = rt
            .sessions(Some(AGENT))
            .await
            .expect("sessions")
            .into_iter()
            .filter(|s| s.ended_at.is_some())
            .max_by_key(|s| s.ended_at)
            .expect("previous call");
        let turns = rt.turns(previous.session_id).await.expect("turns");
        (blocks, facts, summaries, turns)
    });
    let input = ContextInput {
        blocks: &blocks,
        facts: &facts,
        user_id: USER,
        summaries: &summaries,
        turns: &turns,
        current_message: MESSAGE,
        budget_tokens: BUDGET,
    };
    let timed = |n: usize, f: &mut dyn FnMut()| -> Vec<u64> {
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_nanos() as u64
            })
            .collect()
    };
    let (am, a50, a99) = percentiles(timed(200, &mut || {
        black_box(assemble(black_box(&input), &CharEstimate).expect("assembles"));
    }));
    timed(10_000, &mut || {
        black_box(cache.get(black_box(&key)).cloned());
    });
    let (hm, h50, h99) = percentiles(timed(TIMED, &mut || {
        black_box(cache.get(black_box(&key)).cloned());
    }));

    println!(
        "context (cached): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs ({} hits, {} misses)",
        cm / 1e3,
        us(c50),
        us(c99),
        after.hits - before.hits,
        after.misses - before.misses
    );
    println!(
        "context (uncached, a miss): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        um / 1e3,
        us(u50),
        us(u99)
    );
    println!(
        "assemble (pure, unprepared): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        am / 1e3,
        us(a50),
        us(a99)
    );
    println!("HashMap lookup of an assembled context: mean {hm:.0} ns, p50 {h50} ns, p99 {h99} ns");
    println!(
        "ratio context/lookup: p99 {:.0}x, p50 {:.0}x; target p99 < 100 µs: {}",
        c99 as f64 / h99.max(1) as f64,
        c50 as f64 / h50.max(1) as f64,
        if c99 < 100_000 { "met" } else { "MISSED" }
    );

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut g = c.benchmark_group("context");
    g.bench_function("runtime_context", |b| {
        // block_on per call: a microsecond or so of its own
        b.iter(|| tokio.block_on(rt.context(AGENT, USER, MESSAGE, BUDGET)))
    });
    g.bench_function("hashmap_lookup", |b| {
        b.iter(|| cache.get(black_box(&key)).cloned())
    });
    g.finish();
    c.final_summary();
    tokio.block_on(async {
        let _ = rt.shutdown().await;
    });
}
