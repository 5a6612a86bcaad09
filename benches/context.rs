//! Context assembly on the voice hot path: `Runtime::context` (served from
//! the prepared sources the runtime caches per (agent, user)) against the
//! same read with `ContextOptions::use_cache` off (every source read from
//! the store and prepared again: what a read costs without the cache), with
//! the same inputs, in the same run.
//!
//! The runtime (default settings, offline summarizer, a temporary data
//! folder) is filled through its own API: 23 callers of the agent with 30
//! short ended calls each (summarized, stating facts); then the heavy user,
//! with 1,000 calls each summarized and stating one fact, a 200-turn call
//! that ended a moment ago (inside the soft decay, so its turns are in the
//! context verbatim) and a live call with a few turns, whose session actor
//! a read asks for its window summary and gap. Measured, each call timed on
//! its own:
//!
//! - repeated reads: the heavy user's `context(agent, user, message,
//!   32000)` (room for every fact, the blocks, every turn and some of the
//!   summaries) read again and again with nothing written (every read a
//!   hit), in batches of 500 that alternate with batches of 20 of the same
//!   read uncached;
//! - the mix: 8 concurrent calls of the 24 callers taking turns round-robin,
//!   as their user turns arrive: each user turn is followed by a context
//!   read for that user with the user's words, then the exchange is
//!   recorded; a call ends after 12–36 turns (24 on average; its
//!   reflection stores a summary and facts in the background, and the slot
//!   starts the next caller's call); every 240 turns the agent's
//!   self-perception block is written and every 120 turns a caller shares
//!   one of their facts or makes it private again (both change what every
//!   caller's context holds). With 8 calls and one exchange every 6 s per
//!   call, that is a call ending every 18 s, a block write every 3 minutes
//!   and a fact change every 90 s; here time is compressed (steps at least
//!   2 ms apart; the background summaries keep up). At each step the
//!   same read is also made uncached, the two in alternating order; the
//!   mix reports the cache hit rate and the reads' percentiles, hits and
//!   misses together and apart;
//! - `assemble`: the pure assembler from unprepared data (for reference).
//!
//! The criterion groups (the repeated reads, cached and uncached) run
//! before the mix. Run with `cargo bench --bench context`. It records rows
//! 7–9 of BENCHMARKS.md in `benches/results/` (see `common/results.rs`).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::results::{On, Recorder, Row, Run};
use criterion::Criterion;
use recall::engine::assembly::{assemble, Sources};
use recall::engine::context::CharEstimate;
use recall::engine::model::{BlockLabel, SummaryType, Visibility};
use recall::{ContextOptions, EndOptions, Runtime, RuntimeBuilder, Turn};
use uuid::Uuid;

const AGENT: &str = "kairix";
const USER: &str = "mark";
const CALLS: usize = 1_000;
const PREVIOUS_TURNS: usize = 200;
const BUDGET: usize = 32_000;
const MESSAGE: &str = "What should I expect in the system design round?";

/// Repeated reads: rounds of a batch of cached reads and a batch of
/// uncached ones, the order alternating.
const ROUNDS: usize = 10;
const CACHED_PER_ROUND: usize = 500;
const UNCACHED_PER_ROUND: usize = 20;

/// The mix: callers besides the heavy user, and their history.
const CALLERS: usize = 23;
const CALLER_HISTORY: usize = 30;
const CONCURRENT_CALLS: usize = 8;
const MIX_STEPS: usize = 6_000;
const CALL_TURNS_MIN: usize = 12;
const CALL_TURNS_SPREAD: usize = 25;
const BLOCK_WRITE_EVERY: usize = 240;
const FACT_WRITE_EVERY: usize = 120;
const MIX_PACE: Duration = Duration::from_millis(2);

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
const NAMES: [&str; 6] = ["Rosa", "Tomas", "Priya", "Ewan", "Lena", "Kofi"];
const CITIES: [&str; 6] = ["Porto", "Leeds", "Lyon", "Dublin", "Bergen", "Turin"];
const DAYS: [&str; 5] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];

fn caller(i: usize) -> String {
    format!("caller-{i:02}")
}

/// A caller's history: short calls, each summarized and stating facts.
async fn fill_callers(rt: &Runtime) {
    for u in 0..CALLERS {
        let user = caller(u);
        for c in 0..CALLER_HISTORY {
            let (hobby, name) = (HOBBIES[(u + c) % 10], NAMES[(u + 2 * c) % 6]);
            let (city, day) = (CITIES[(u * 5 + c) % 6], DAYS[(u + c) % 5]);
            let conn = format!("{user}-history-{c}");
            rt.start_session(AGENT, &user, &conn).await.expect("start");
            for (said, answer) in [
                (
                    format!("I prefer {hobby} on weekends. My sister {name} lives in {city}."),
                    "Noted. How is she settling in?".to_string(),
                ),
                (
                    format!("The project deadline at work moved to {day}, call number {c}."),
                    format!("Then let's plan the week backwards from {day}."),
                ),
                (
                    format!("Can you remind me to call {name} about the {hobby} trip?"),
                    format!("I'll remind you on {day} morning."),
                ),
                (
                    "Thanks, that's all for today.".to_string(),
                    "Talk soon.".to_string(),
                ),
            ] {
                rt.record_turn(&conn, Turn::new(said, answer))
                    .expect("turn");
            }
            rt.end_session(&conn, EndOptions::default()).expect("end");
        }
        rt.wait_idle().await.expect("idle");
    }
}

/// Fills the runtime through its API; returns the live call's connection.
async fn fill(rt: &Runtime) -> String {
    rt.set_block(
        AGENT,
        BlockLabel::Persona,
        &"Kairix is a patient career coach. ".repeat(20),
    )
    .await
    .expect("persona");
    fill_callers(rt).await;
    for i in 0..CALLS {
        let conn = format!("call-{i}");
        rt.start_session(AGENT, USER, &conn).await.expect("start");
        rt.record_turn(
            &conn,
            Turn::new(
                format!(
                    "I prefer {} on weekday number {i}. The Globex interview prep is going well, \
                     we covered the system design round and salary expectations.",
                    HOBBIES[i % HOBBIES.len()]
                ),
                "Good. Let's keep the momentum and plan the next mock interview.".to_string(),
            ),
        )
        .expect("turn");
        rt.end_session(&conn, EndOptions::default()).expect("end");
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
            Turn::new(
                format!("Question {i} about the Globex onsite and what to wear"),
                format!("Answer {i}: business casual, and bring your notes"),
            ),
        )
        .expect("turn");
    }
    rt.end_session("previous", EndOptions::default())
        .expect("end");
    rt.wait_idle().await.expect("idle");
    rt.start_session(AGENT, USER, "live").await.expect("start");
    for i in 0..3 {
        rt.record_turn(
            "live",
            Turn::new(format!("Live question {i}"), format!("Live answer {i}")),
        )
        .expect("turn");
    }
    rt.flush().await.expect("flush");
    "live".to_string()
}

/// Mean, p50 and p99 in ns.
fn percentiles(mut v: Vec<u64>) -> (f64, u64, u64) {
    if v.is_empty() {
        return (0.0, 0, 0);
    }
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    (mean, v[v.len() / 2], v[v.len() * 99 / 100])
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn stats_line(name: &str, v: &[u64]) -> String {
    let (m, p50, p99) = percentiles(v.to_vec());
    format!(
        "{name}: {} reads, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        v.len(),
        m / 1e3,
        us(p50),
        us(p99)
    )
}

/// One read, timed: cached or not.
async fn read(rt: &Runtime, user: &str, message: &str, cached: bool) -> u64 {
    let t = Instant::now();
    let c = if cached {
        rt.context(AGENT, user, message, BUDGET, ContextOptions::default())
            .await
    } else {
        rt.context(AGENT, user, message, BUDGET, no_cache()).await
    };
    let ns = t.elapsed().as_nanos() as u64;
    black_box(c.expect("context"));
    ns
}

/// What a caller says at a turn of a call.
fn user_words(step: usize, turn: usize) -> String {
    let (hobby, name) = (HOBBIES[step % 10], NAMES[step % 6]);
    let (city, day) = (CITIES[(step / 6) % 6], DAYS[step % 5]);
    match turn % 6 {
        0 => format!("What did I say about {hobby} last time?"),
        1 => format!("Can you move my dentist appointment to {day} afternoon?"),
        2 => format!("My sister {name} is visiting {city} next week."),
        3 => format!("I started {hobby} again, twice a week now."),
        4 => "Remind me what we planned for the project deadline.".to_string(),
        _ => format!("Should I call {name} before {day}?"),
    }
}

/// One live call of the mix.
struct Call {
    conn: String,
    user: String,
    turn: usize,
    turns: usize,
}

/// What the mix measured.
#[derive(Default)]
struct Mix {
    cached: Vec<u64>,
    uncached: Vec<u64>,
    hits: Vec<u64>,
    misses: Vec<u64>,
    /// Misses at a call's first read (the caller's earlier call was
    /// reflected on since their last read).
    first_read_misses: usize,
    calls_ended: usize,
    block_writes: usize,
    fact_writes: usize,
}

async fn mix(rt: &Runtime) -> Mix {
    let mut users: Vec<String> = vec![USER.to_string()];
    users.extend((0..CALLERS).map(caller));
    // One of each caller's own facts, to share and make private again.
    let mut own_fact: Vec<Option<(Uuid, bool)>> = Vec::new();
    for u in &users {
        let f = rt
            .facts(AGENT, u)
            .await
            .expect("facts")
            .into_iter()
            .find(|f| f.is_current() && f.fact.user_id == *u)
            .map(|f| (f.fact.fact_id, f.fact.visibility == Visibility::Shared));
        own_fact.push(f);
    }
    let mut next_user = 0;
    let mut calls_started = 0;
    let mut start_call = |slot: usize| {
        let u = next_user % users.len();
        next_user += 1;
        calls_started += 1;
        Call {
            conn: format!("mix-{calls_started}-slot-{slot}"),
            user: users[u].clone(),
            turn: 0,
            turns: CALL_TURNS_MIN + (calls_started * 7) % CALL_TURNS_SPREAD,
        }
    };
    let mut calls: Vec<Call> = (0..CONCURRENT_CALLS).map(&mut start_call).collect();
    for c in &calls {
        rt.start_session(AGENT, &c.user, &c.conn)
            .await
            .expect("start");
    }
    // The heavy user's live call of the fill ends with the mix's start.
    rt.end_session("live", EndOptions::default()).expect("end");
    let mut out = Mix::default();
    let mut next = Instant::now();
    for step in 0..MIX_STEPS {
        next += MIX_PACE;
        let now = Instant::now();
        if now < next {
            tokio::time::sleep(next - now).await;
        } else {
            next = now;
        }
        let slot = step % CONCURRENT_CALLS;
        let words = user_words(step, calls[slot].turn);
        let user = calls[slot].user.clone();
        let hits = rt.source_cache_stats().hits;
        let (cached, uncached) = if step % 2 == 0 {
            let c = read(rt, &user, &words, true).await;
            (c, read(rt, &user, &words, false).await)
        } else {
            let u = read(rt, &user, &words, false).await;
            (read(rt, &user, &words, true).await, u)
        };
        if rt.source_cache_stats().hits > hits {
            out.hits.push(cached);
        } else {
            out.misses.push(cached);
            if calls[slot].turn == 0 {
                out.first_read_misses += 1;
            }
        }
        out.cached.push(cached);
        out.uncached.push(uncached);
        let call = &mut calls[slot];
        rt.record_turn(
            &call.conn,
            Turn::new(
                words,
                "Sure. I have that noted, and I'll bring it up when it matters.".to_string(),
            ),
        )
        .expect("turn");
        call.turn += 1;
        if call.turn == call.turns {
            rt.end_session(&call.conn, EndOptions::default())
                .expect("end");
            out.calls_ended += 1;
            *call = start_call(slot);
            rt.start_session(AGENT, &call.user, &call.conn)
                .await
                .expect("start");
        }
        if step % BLOCK_WRITE_EVERY == BLOCK_WRITE_EVERY - 1 {
            rt.set_block(
                AGENT,
                BlockLabel::SelfPerception,
                &format!("I coach calmly and keep notes short (revision {step})."),
            )
            .await
            .expect("block");
            out.block_writes += 1;
        }
        if step % FACT_WRITE_EVERY == FACT_WRITE_EVERY / 2 {
            let u = users
                .iter()
                .position(|u| *u == user)
                .expect("a caller of the mix");
            if let Some((fact_id, shared)) = own_fact[u].as_mut() {
                let to = if *shared {
                    Visibility::Private
                } else {
                    Visibility::Shared
                };
                rt.set_fact_visibility(*fact_id, &user, to)
                    .await
                    .expect("visibility");
                *shared = !*shared;
                out.fact_writes += 1;
            }
        }
    }
    for c in &calls {
        rt.end_session(&c.conn, EndOptions::default()).expect("end");
    }
    out
}

const COMMAND: &str = "cargo bench --bench context";

fn main() {
    let results = Recorder::bench();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio
        .block_on(RuntimeBuilder::new(dir.path()).start())
        .expect("runtime start");
    fill_and_describe(&tokio, &rt);
    let repeated = repeated_reads(&tokio, &rt);
    let pure = pure_assembler(&tokio, &rt);
    print_repeated_reads(&repeated, pure);

    criterion_group(&tokio, &rt);
    let mixed = the_mix(&tokio, &rt);
    record_rows(&results, &repeated, pure, &mixed);

    tokio.block_on(async {
        let _ = rt.shutdown().await;
    });
}

/// Fills the store and prints what the heavy user's context holds.
fn fill_and_describe(tokio: &tokio::runtime::Runtime, rt: &Runtime) {
    let started = Instant::now();
    tokio.block_on(fill(rt));
    let (facts, summaries) = tokio.block_on(async {
        let facts = rt.facts(AGENT, USER).await.expect("facts").len();
        let summaries = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries")
            .into_iter()
            .filter(|s| s.user_id == USER)
            .count();
        (facts, summaries)
    });
    let ctx = tokio
        .block_on(rt.context(AGENT, USER, MESSAGE, BUDGET, ContextOptions::default()))
        .expect("context");
    println!(
        "filled in {:.1} s: {CALLERS} callers with {CALLER_HISTORY} calls each; the heavy user \
         {facts} facts, {summaries} summaries, {PREVIOUS_TURNS}-turn previous call, live call; \
         budget {BUDGET}: {} tokens used, {} items trimmed",
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
}

/// The repeated reads' figures: cached (mean, p50, p99), uncached, and the
/// cache's hits and misses meanwhile.
struct Repeated {
    cm: f64,
    c50: u64,
    c99: u64,
    um: f64,
    u50: u64,
    u99: u64,
    hits: u64,
    misses: u64,
}

fn repeated_reads(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> Repeated {
    // ---- repeated reads: cached against uncached, alternating ----
    let batch = |n: usize, cached: bool| -> Vec<u64> {
        tokio.block_on(async {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(read(rt, USER, MESSAGE, cached).await);
            }
            out
        })
    };
    batch(CACHED_PER_ROUND, true);
    batch(UNCACHED_PER_ROUND / 4, false);
    let before = rt.source_cache_stats();
    let (mut cached, mut uncached) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            cached.extend(batch(CACHED_PER_ROUND, true));
            uncached.extend(batch(UNCACHED_PER_ROUND, false));
        } else {
            uncached.extend(batch(UNCACHED_PER_ROUND, false));
            cached.extend(batch(CACHED_PER_ROUND, true));
        }
    }
    let after = rt.source_cache_stats();
    let (cm, c50, c99) = percentiles(cached);
    let (um, u50, u99) = percentiles(uncached);
    Repeated {
        cm,
        c50,
        c99,
        um,
        u50,
        u99,
        hits: after.hits - before.hits,
        misses: after.misses - before.misses,
    }
}

/// The pure assembler over the same data, unprepared: (mean, p50, p99).
fn pure_assembler(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> (f64, u64, u64) {
    // ---- the pure assembler over the same data, unprepared ----
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
        let mut summaries: Vec<_> = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries")
            .into_iter()
            .filter(|s| s.user_id == USER)
            .collect();
        summaries.sort_by_key(|s| s.period_end);
        let previous = rt
            .sessions(Some(AGENT))
            .await
            .expect("sessions")
            .into_iter()
            .filter(|s| s.ended_at.is_some() && s.user_id == USER)
            .max_by_key(|s| s.ended_at)
            .expect("previous call");
        let turns = rt.turns(previous.session_id).await.expect("turns");
        (blocks, facts, summaries, turns)
    });
    let input = Sources {
        blocks: &blocks,
        facts: &facts,
        user_id: USER,
        summaries: &summaries,
        turns: &turns,
        current_message: MESSAGE,
        budget_tokens: BUDGET,
    };
    let assembled: Vec<u64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            black_box(assemble(black_box(&input), &CharEstimate).expect("assembles"));
            t.elapsed().as_nanos() as u64
        })
        .collect();
    let (am, a50, a99) = percentiles(assembled);
    (am, a50, a99)
}

fn print_repeated_reads(r: &Repeated, (am, a50, a99): (f64, u64, u64)) {
    let Repeated {
        cm,
        c50,
        c99,
        um,
        u50,
        u99,
        hits,
        misses,
    } = *r;
    println!();
    println!(
        "repeated reads of the heavy user ({ROUNDS} rounds, cached and uncached batches \
         alternating):"
    );
    println!(
        "  context (cached): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs ({} hits, {} misses)",
        cm / 1e3,
        us(c50),
        us(c99),
        hits,
        misses
    );
    println!(
        "  context_uncached (same inputs): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        um / 1e3,
        us(u50),
        us(u99)
    );
    println!(
        "  ratio cached/uncached: p99 {:.3}, p50 {:.3}; target p99 < 100 µs: {}",
        c99 as f64 / u99.max(1) as f64,
        c50 as f64 / u50.max(1) as f64,
        if c99 < 100_000 { "met" } else { "MISSED" }
    );
    println!(
        "  assemble (pure, unprepared): mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
        am / 1e3,
        us(a50),
        us(a99)
    );
}

/// The criterion group: the read cached and uncached.
fn criterion_group(tokio: &tokio::runtime::Runtime, rt: &Runtime) {
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    let mut g = c.benchmark_group("context");
    g.bench_function("runtime_context", |b| {
        // block_on per call: a microsecond or so of its own
        b.iter(|| {
            tokio.block_on(rt.context(AGENT, USER, MESSAGE, BUDGET, ContextOptions::default()))
        })
    });
    g.bench_function("runtime_context_uncached", |b| {
        b.iter(|| tokio.block_on(rt.context(AGENT, USER, MESSAGE, BUDGET, no_cache())))
    });
    g.finish();
    c.final_summary();
}

/// The mix and its figures: the cached reads' p50 and p99, the uncached.
struct Mixed {
    m: Mix,
    m50: u64,
    m99: u64,
    n50: u64,
    n99: u64,
}

fn the_mix(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> Mixed {
    // ---- the mix ----
    let before = rt.source_cache_stats();
    let t = Instant::now();
    let m = tokio.block_on(mix(rt));
    let took = t.elapsed();
    let after = rt.source_cache_stats();
    let (_, m50, m99) = percentiles(m.cached.clone());
    let (_, n50, n99) = percentiles(m.uncached.clone());
    println!();
    println!(
        "the mix: {MIX_STEPS} turns of {CONCURRENT_CALLS} concurrent calls over {} callers in \
         {:.1} s; {} calls ended, {} block writes, {} fact visibility changes",
        CALLERS + 1,
        took.as_secs_f64(),
        m.calls_ended,
        m.block_writes,
        m.fact_writes
    );
    println!(
        "  cache hit rate {:.1} % ({} hits, {} misses, {} of them partial; {} misses at a \
         call's first read, {} later in a call)",
        100.0 * m.hits.len() as f64 / m.cached.len() as f64,
        after.hits - before.hits,
        after.misses - before.misses,
        after.partial_misses - before.partial_misses,
        m.first_read_misses,
        m.misses.len() - m.first_read_misses
    );
    println!(
        "  {}",
        stats_line("context (cached), every read", &m.cached)
    );
    println!("  {}", stats_line("context (cached), hits", &m.hits));
    println!("  {}", stats_line("context (cached), misses", &m.misses));
    println!(
        "  {}",
        stats_line("context_uncached, same steps", &m.uncached)
    );
    // (No target for the mix: the repeated read's is for a hit alone.)
    println!(
        "  ratio cached/uncached: p99 {:.3}, p50 {:.3}",
        m99 as f64 / n99.max(1) as f64,
        m50 as f64 / n50.max(1) as f64,
    );
    println!();
    Mixed {
        m,
        m50,
        m99,
        n50,
        n99,
    }
}

/// Rows 7 to 9.
fn record_rows(results: &Recorder, r: &Repeated, (_, a50, a99): (f64, u64, u64), mixed: &Mixed) {
    let (c50, c99, u50, u99) = (r.c50, r.c99, r.u50, r.u99);
    let Mixed {
        m,
        m50,
        m99,
        n50,
        n99,
    } = mixed;
    let (m50, m99, n50, n99) = (*m50, *m99, *n50, *n99);
    let ms = |ns: u64| ns as f64 / 1e6;
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let load = format!("load average {}", common::load_average());
    let criterion = results
        .criterion_ns("context", "runtime_context")
        .zip(results.criterion_ns("context", "runtime_context_uncached"));
    let mut repeated = Run::new()
        .figure("p99", us(c99), "µs")
        .figure("p50", us(c50), "µs");
    if let Some((cached, _)) = criterion {
        repeated = repeated.figure("criterion", cached / 1e3, "µs");
    }
    repeated = repeated
        .base("p99", ms(u99), "ms")
        .base("p50", ms(u50), "ms");
    if let Some((_, uncached)) = criterion {
        repeated = repeated.base("criterion", uncached / 1e6, "ms");
    }
    results.record(
        &Row::new(
            7,
            "`Runtime::context`, 1,000 facts + 1,000 summaries + a 200-turn previous call + a \
             live call, budget 32,000, the same read repeated with nothing written (every read \
             a cache hit), p99 (p50)",
            COMMAND,
        )
        .baseline(
            "the same read uncached (`Runtime::context` with `use_cache: false`), batches \
             alternating",
        )
        .target("p99 < 100 µs")
        .check(On::Figure, "p99", "<", 100.0, "µs"),
        repeated
            .ratio("p99", ratio(c99, u99))
            .ratio("p50", ratio(c50, u50))
            .note(&load),
    );
    results.record(
        &Row::new(
            8,
            "A voice mix of 6,000 reads: 8 concurrent calls of 24 callers, a context read per \
             user turn, a call ending every 24 turns on average, a block write every 240 turns \
             and a fact change every 120: cache hit rate; p50 / p99 of every read",
            COMMAND,
        )
        .baseline("the same reads uncached, same steps, alternating"),
        Run::new()
            .figure(
                "hit rate",
                100.0 * m.hits.len() as f64 / m.cached.len().max(1) as f64,
                "%",
            )
            .figure("p50", ms(m50), "ms")
            .figure("p99", ms(m99), "ms")
            .base("p50", ms(n50), "ms")
            .base("p99", ms(n99), "ms")
            .ratio("p50", ratio(m50, n50))
            .ratio("p99", ratio(m99, n99))
            .note(&load),
    );
    results.record(
        &Row::new(
            9,
            "The pure assembler from unprepared data (row 7's user), p50 (p99)",
            COMMAND,
        ),
        Run::new()
            .figure("p50", ms(a50), "ms")
            .figure("p99", ms(a99), "ms")
            .note(&load),
    );
}

/// The read `Runtime::context` makes past its cache: every source read
/// from the store (what the cached read must always equal).
fn no_cache() -> ContextOptions {
    ContextOptions {
        use_cache: false,
        ..ContextOptions::default()
    }
}
