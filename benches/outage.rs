//! The hot path during an LLM outage: `record_turn` and
//! `record_turn_durable` while the LLM fails in every way, against the same
//! calls with the LLM healthy, in the same run.
//!
//! A fake chat-completions server (the one `tests/openai.rs` uses) listens
//! on 127.0.0.1, on a tokio runtime of its own. The runtime under test
//! reflects through it with the default settings (group commit) except:
//! the OpenAI reflector, a client timeout of 1 s and an attempt timeout of
//! 2 s, so that hung requests and answers after the timeout fail while the
//! phase is being timed; three attempts with 10–50 ms backoff; rollups off,
//! since topic summaries would ask the LLM only in the healthy phases,
//! where session summaries are stored. In-session window summaries ask the
//! LLM too, from the live calls, and fail with it.
//!
//! Four phases: healthy, outage, outage, healthy, so that a drift over the
//! run (a warming cache, a growing store, the machine's other load) weighs
//! on both alike. In an outage phase every request gets the next of six
//! faults, round and round: a 500, a 429 with `Retry-After: 1`, a hung
//! connection, an answer after the client's timeout, a body that is not
//! JSON, and a completion without content. Each phase:
//!
//! - sets the server, ends a few short calls and waits until the server
//!   has received a request for each, so reflections are under way (and,
//!   in an outage, failing) before the first timed turn;
//! - keeps 16 calls live at a time, their starts staggered, and records one
//!   turn on each in turn, then sleeps 25 ms; every sixth turn of a call is
//!   `record_turn_durable`, the others `record_turn`, each timed on its
//!   own; a call ends after 24 turns (its reflection starts) and a new one
//!   takes its place, until 150 calls have ended;
//! - then, untimed, ends the live calls, brings the server back and waits
//!   until the runtime is idle, so that no phase inherits another's queue.
//!
//! Prints p50 and p99 of each phase and of the healthy and outage phases
//! together, the outage/healthy ratios, and the LLM requests the server
//! received during each timed phase (in an outage every one of them
//! answered with a fault or left hanging). Run with
//! `cargo bench --bench outage`. It records row 21 of BENCHMARKS.md in
//! `benches/results/` (see `common/results.rs`).

#[path = "../tests/common/fake_llm.rs"]
mod fake_llm;

mod common;

use std::time::{Duration, Instant};

use common::results::{On, Recorder, Row, Run};
use fake_llm::{Fake, Reply};
use recall::engine::settings::ReflectorKind;
use recall::{EndOptions, Runtime, RuntimeBuilder, Settings, Turn};

const API_KEY: &str = "sk-bench";
const AGENT: &str = "kairix";
/// Calls live at once.
const LIVE: usize = 16;
/// Turns per call: past the first in-session window (20 messages).
const TURNS: usize = 24;
/// Every sixth turn of a call waits until it is on disk.
const DURABLE_EVERY: usize = 6;
/// Calls ended during each timed phase.
const CALLS: usize = 150;
/// Short calls ended before each timed phase.
const PRIME: usize = 6;
/// Between rounds of turns (about 600 turns a second over the 16 calls): a
/// phase lasts about 6 s, long enough for hung requests to time out in it.
const PACE: Duration = Duration::from_millis(25);
/// Only so that a stall fails the run instead of hanging it.
const SAFETY: Duration = Duration::from_secs(120);

const REFLECTION: &str = r#"{
  "summary": "Mark prepared for his Globex interview and decided to negotiate the salary.",
  "topics": ["interview", "salary"],
  "entities": ["Globex"],
  "emotional_tone": "anxious but hopeful",
  "relationship": "Mark trusts Kairix with his job search."
}"#;

const SUBJECTS: [&str; 6] = [
    "the Globex offer",
    "the salary question",
    "the system design round",
    "the move to Leeds",
    "the notice period",
    "the reference letters",
];

/// The six faults an outage cycles through, and their names.
fn faults() -> [(Reply, &'static str); 6] {
    [
        (Reply::Status(500, "model crashed".to_string()), "500"),
        (Reply::RateLimited(Some("1")), "429 + Retry-After"),
        (Reply::Hang, "hung"),
        (
            Reply::Slow(Duration::from_secs(3), REFLECTION.to_string()),
            "after the timeout",
        ),
        (
            Reply::Body("<html><body>Bad Gateway</body></html>"),
            "not JSON",
        ),
        (Reply::Body("{\"choices\": []}"), "no content"),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Healthy,
    Outage,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Healthy => "healthy",
            Phase::Outage => "outage",
        }
    }
}

fn heal(fake: &Fake) {
    fake.set_script([]);
    fake.set_otherwise(Reply::Content(REFLECTION.to_string()));
}

fn break_down(fake: &Fake) {
    let faults = faults();
    fake.set_script(faults.iter().map(|(r, _)| r).cycle().take(100_000).cloned());
    fake.set_otherwise(Reply::Status(503, "still down".to_string()));
}

fn settings(fake: &Fake) -> Settings {
    let mut s = Settings::default();
    s.reflector.kind = ReflectorKind::Openai;
    s.reflector.openai.base_url = fake.base_url();
    s.reflector.openai.model = "gpt-4o-mini".to_string();
    s.reflector.openai.timeout_secs = 1;
    s.reflector.attempt_timeout_secs = 2;
    s.reflector.max_attempts = 3;
    s.reflector.backoff_base_ms = 10;
    s.reflector.backoff_max_ms = 50;
    s.rollup.enabled = false;
    s
}

/// A live call and the turns it has had.
struct Call {
    conn: String,
    turns: usize,
}

/// Numbers calls across the run, so every connection id is new.
struct Calls<'a> {
    rt: &'a Runtime,
    next: usize,
}

impl Calls<'_> {
    async fn start(&mut self) -> Call {
        let n = self.next;
        self.next += 1;
        let conn = format!("call-{n}");
        self.rt
            .start_session(AGENT, &format!("user-{}", n % 50), &conn)
            .await
            .expect("start_session");
        Call { conn, turns: 0 }
    }
}

fn message(call: &Call) -> (String, String) {
    let subject = SUBJECTS[call.turns % SUBJECTS.len()];
    (
        format!(
            "On {} ({}, turn {}): I keep going back and forth on it, what do you think?",
            subject, call.conn, call.turns
        ),
        format!("Let's look at {subject} together: what matters most to you there?"),
    )
}

/// What one timed phase measured.
struct Measured {
    phase: Phase,
    plain: Vec<u64>,
    durable: Vec<u64>,
    /// Requests the server received while the phase was timed, and the
    /// index (since the faults were switched on) of the first of them.
    requests: usize,
    first_request: usize,
    dead_lettered: u64,
    summaries_stored: u64,
    windows_failed: u64,
    windows_completed: u64,
    /// Reflections queued or running when the timed part ended.
    backlog: usize,
    seconds: f64,
}

async fn run_phase(rt: &Runtime, fake: &Fake, calls: &mut Calls<'_>, phase: Phase) -> Measured {
    let switched_at = fake.requests();
    match phase {
        Phase::Healthy => heal(fake),
        Phase::Outage => break_down(fake),
    }

    // Reflections under way before the first timed turn.
    for _ in 0..PRIME {
        let mut call = calls.start().await;
        for _ in 0..2 {
            let (u, a) = message(&call);
            rt.record_turn(&call.conn, Turn::new(u, a))
                .expect("record_turn");
            call.turns += 1;
        }
        rt.end_session(&call.conn, EndOptions::default())
            .expect("end_session");
    }
    tokio::time::timeout(SAFETY, fake.wait_for_requests(switched_at + PRIME))
        .await
        .expect("the primed reflections reach the server");

    // Live calls with their starts staggered, so that they end one by one.
    let mut live = Vec::with_capacity(LIVE);
    for k in 0..LIVE {
        let mut call = calls.start().await;
        for _ in 0..k * TURNS / LIVE {
            let (u, a) = message(&call);
            rt.record_turn(&call.conn, Turn::new(u, a))
                .expect("record_turn");
            call.turns += 1;
        }
        live.push(call);
    }

    let before = rt.stats().await.expect("stats").supervisor;
    let first_request = fake.requests();
    let (mut plain, mut durable) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut ended = 0;
    while ended < CALLS {
        for call in live.iter_mut() {
            let (u, a) = message(call);
            if call.turns % DURABLE_EVERY == DURABLE_EVERY - 1 {
                let t = Instant::now();
                rt.record_turn_durable(&call.conn, Turn::new(u, a))
                    .await
                    .expect("record_turn_durable");
                durable.push(t.elapsed().as_nanos() as u64);
            } else {
                let t = Instant::now();
                rt.record_turn(&call.conn, Turn::new(u, a))
                    .expect("record_turn");
                plain.push(t.elapsed().as_nanos() as u64);
            }
            call.turns += 1;
            if call.turns == TURNS {
                rt.end_session(&call.conn, EndOptions::default())
                    .expect("end_session");
                ended += 1;
                *call = calls.start().await;
            }
        }
        tokio::time::sleep(PACE).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let requests = fake.requests() - first_request;
    let after = rt.stats().await.expect("stats").supervisor;

    for call in &live {
        rt.end_session(&call.conn, EndOptions::default())
            .expect("end_session");
    }
    heal(fake);
    rt.wait_idle().await.expect("idle");

    Measured {
        phase,
        plain,
        durable,
        requests,
        first_request: first_request - switched_at,
        dead_lettered: after.dead_lettered - before.dead_lettered,
        summaries_stored: after.summaries_stored - before.summaries_stored,
        windows_failed: after.windows_failed - before.windows_failed,
        windows_completed: after.windows_completed - before.windows_completed,
        backlog: after.reflections_queued + after.reflections_running,
        seconds,
    }
}

/// p50 and p99 in ns.
fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The faults served to requests `first..first + n` of an outage.
fn kinds(first: usize, n: usize) -> String {
    let faults = faults();
    let mut counts = [0usize; 6];
    for i in first..first + n {
        counts[i % faults.len()] += 1;
    }
    faults
        .iter()
        .zip(counts)
        .map(|((_, name), c)| format!("{name} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each phase's figures, and the LLM requests it served.
fn print_phases(measured: &[Measured]) {
    println!();
    for (i, m) in measured.iter().enumerate() {
        let (p50, p99) = common::p50_p99(&m.plain);
        let (d50, d99) = common::p50_p99(&m.durable);
        println!(
            "phase {} {} ({:.1} s): record_turn ×{} p50 {:.1} µs, p99 {:.1} µs; \
             record_turn_durable ×{} p50 {:.2} ms, p99 {:.2} ms",
            i + 1,
            m.phase.name(),
            m.seconds,
            m.plain.len(),
            us(p50),
            us(p99),
            m.durable.len(),
            ms(d50),
            ms(d99),
        );
        let served = match m.phase {
            Phase::Healthy => "all answered".to_string(),
            Phase::Outage => format!(
                "every one failed; faults served: {}",
                kinds(m.first_request, m.requests)
            ),
        };
        println!(
            "  LLM requests while timed: {} ({served}); summaries stored {}, dead-lettered {}, \
             window summaries completed {}, failed {}; reflections queued or running at the end {}",
            m.requests,
            m.summaries_stored,
            m.dead_lettered,
            m.windows_completed,
            m.windows_failed,
            m.backlog,
        );
    }
}

fn main() {
    let results = Recorder::bench();
    // The LLM server runs apart from the runtime under test, as it would.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let fake = server.block_on(Fake::answering(REFLECTION));

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio
        .block_on(
            RuntimeBuilder::new(dir.path())
                .settings(settings(&fake))
                .api_key(API_KEY)
                .start(),
        )
        .expect("runtime start");
    println!(
        "{} tokio workers; load average at start {}",
        tokio.metrics().num_workers(),
        common::load_average()
    );

    let order = [Phase::Healthy, Phase::Outage, Phase::Outage, Phase::Healthy];
    let measured: Vec<Measured> = tokio.block_on(async {
        let mut calls = Calls { rt: &rt, next: 0 };
        // Warm-up, untimed: the same work once with the server healthy.
        run_phase(&rt, &fake, &mut calls, Phase::Healthy).await;
        let mut out = Vec::new();
        for phase in order {
            out.push(run_phase(&rt, &fake, &mut calls, phase).await);
        }
        out
    });

    print_phases(&measured);

    let pooled = |phase: Phase, durable: bool| -> Vec<u64> {
        measured
            .iter()
            .filter(|m| m.phase == phase)
            .flat_map(|m| if durable { &m.durable } else { &m.plain })
            .copied()
            .collect()
    };
    let (hp, op) = (pooled(Phase::Healthy, false), pooled(Phase::Outage, false));
    let (hd, od) = (pooled(Phase::Healthy, true), pooled(Phase::Outage, true));
    let (hp50, hp99) = common::p50_p99(&hp);
    let (op50, op99) = common::p50_p99(&op);
    let (hd50, hd99) = common::p50_p99(&hd);
    let (od50, od99) = common::p50_p99(&od);
    let failed: usize = measured
        .iter()
        .filter(|m| m.phase == Phase::Outage)
        .map(|m| m.requests)
        .sum();
    let ratio = |a: u64, b: u64| a as f64 / b as f64;
    let (plain_ratio, durable_ratio) = (ratio(op99, hp99), ratio(od99, hd99));

    println!();
    println!(
        "record_turn (×{} each): healthy p50 {:.1} µs, p99 {:.1} µs; outage p50 {:.1} µs, \
         p99 {:.1} µs; outage/healthy p50 {:.2}, p99 {:.2}",
        hp.len().min(op.len()),
        us(hp50),
        us(hp99),
        us(op50),
        us(op99),
        ratio(op50, hp50),
        plain_ratio,
    );
    println!(
        "record_turn_durable (×{} each): healthy p50 {:.2} ms, p99 {:.2} ms; outage p50 {:.2} ms, \
         p99 {:.2} ms; outage/healthy p50 {:.2}, p99 {:.2}",
        hd.len().min(od.len()),
        ms(hd50),
        ms(hd99),
        ms(od50),
        ms(od99),
        ratio(od50, hd50),
        durable_ratio,
    );
    println!("LLM requests failed during the timed outage phases: {failed}");
    let verdict = |r: f64| if r <= 1.5 { "met" } else { "MISSED" };
    println!(
        "target: unaffected, outage/healthy p99 <= 1.5 — record_turn {} ({plain_ratio:.2}), \
         record_turn_durable {} ({durable_ratio:.2})",
        verdict(plain_ratio),
        verdict(durable_ratio),
    );
    let load = common::load_average();
    println!("load average at the end {load}");
    results.record(
        &Row::new(
            21,
            "`record_turn` and `record_turn_durable` while the LLM fails in every way (a 500, a \
             429, a hung connection, an answer after the timeout, a body not JSON, no content, in \
             turn), p50 / p99: 16 live calls, turns paced, 150 calls ended per phase",
            "cargo bench --bench outage",
        )
        .baseline("the same calls with the LLM healthy, same run")
        .target("unaffected: outage / healthy ≤ 1.5 at p99, for both")
        .check(On::Ratio, "record_turn p99", "<=", 1.5, "")
        .check(On::Ratio, "durable p99", "<=", 1.5, ""),
        Run::new()
            .figure("record_turn p50", us(op50), "µs")
            .figure("record_turn p99", us(op99), "µs")
            .figure("durable p50", ms(od50), "ms")
            .figure("durable p99", ms(od99), "ms")
            .base("record_turn p50", us(hp50), "µs")
            .base("record_turn p99", us(hp99), "µs")
            .base("durable p50", ms(hd50), "ms")
            .base("durable p99", ms(hd99), "ms")
            .ratio("record_turn p50", ratio(op50, hp50))
            .ratio("record_turn p99", plain_ratio)
            .ratio("durable p50", ratio(od50, hd50))
            .ratio("durable p99", durable_ratio)
            .note(&format!(
                "{failed} LLM requests failed while timed; load average {load}"
            )),
    );

    tokio
        .block_on(rt.shutdown_with_grace(Duration::from_millis(200)))
        .expect("shutdown");
    tokio.shutdown_timeout(Duration::from_secs(5));
    server.shutdown_timeout(Duration::from_secs(1));
}
