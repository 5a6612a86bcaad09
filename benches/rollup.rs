//! The daily rollup of 10,000 agents with the offline summarizer: the
//! total time of `Runtime::run_rollups` and the process's peak resident
//! memory, against a baseline in the same run that does the least such a
//! rollup needs — for each agent, read its day's two session summaries
//! from sled, combine them with the same extractive summarizer and insert
//! the result with a raw sled insert.
//!
//! Each agent has one user with two session summaries on Monday 2 March
//! 2026, written straight into a store folder; the runtime starts on it at
//! 04:00 the next day (rollup timers spread over the default 15 minutes are
//! not waited for: `run_rollups` rolls every agent at once, 4 at a time).
//! Run with `cargo bench --bench rollup`.

mod common;

use std::time::Instant;

use chrono::{Duration, TimeZone, Utc};
use recall::engine::keys;
use recall::engine::model::{AgentMeta, ConversationSummary, SummaryType};
use recall::engine::reflect::extractive::{combine, DEFAULT_COMBINE_MAX_CHARS};
use recall::engine::store::Trees;
use recall::{Clock, RuntimeBuilder, Settings};
use uuid::Uuid;

const AGENTS: usize = 10_000;

const TEXTS: [&str; 4] = [
    "Mark prepared for the Globex onsite: system design, Kubernetes at scale and the salary range. He felt nervous but ready.",
    "Mark and Kairix rehearsed the behavioral round; he wants to ask about the platform team and remote days.",
    "Ada planned a sailing weekend in Porto with her sister and booked the small boat for Saturday.",
    "Ada compared flats in Porto near the river and asked about the commute to her new office.",
];

fn fill(trees: &Trees) {
    let day = Utc
        .with_ymd_and_hms(2026, 3, 2, 9, 0, 0)
        .single()
        .expect("time");
    for a in 0..AGENTS {
        let agent = format!("agent-{a:05}");
        for k in 0..2 {
            let start = day + Duration::hours(3 * k as i64) + Duration::seconds(a as i64 % 3600);
            let id = Uuid::from_u128(((a as u128) << 8) | k as u128 | 1 << 100);
            let s = ConversationSummary {
                period_end: start + Duration::minutes(5),
                topics: vec!["globex".into(), "interview".into()],
                key_entities: vec!["Globex".into()],
                turn_count: 6,
                ..ConversationSummary::session(
                    id,
                    &agent,
                    "user",
                    start,
                    TEXTS[(a + k) % TEXTS.len()],
                )
            };
            let key = keys::summary(&agent, SummaryType::Session, s.period_end, s.summary_id);
            trees
                .summaries
                .insert(key.as_slice(), serde_json::to_vec(&s).expect("encode"))
                .expect("insert");
            trees
                .summary_index
                .insert(s.summary_id.as_bytes(), key.as_slice())
                .expect("index");
        }
        trees
            .agents
            .insert(
                agent.as_bytes(),
                serde_json::to_vec(&AgentMeta::default()).expect("meta"),
            )
            .expect("agent");
    }
    trees.db.flush().expect("flush");
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t = Instant::now();
    {
        let trees = Trees::open(dir.path(), &Default::default()).expect("open");
        fill(&trees);
    }
    println!(
        "wrote {} session summaries of {AGENTS} agents in {:.1} s",
        2 * AGENTS,
        t.elapsed().as_secs_f64()
    );

    // Baseline: read each agent's two summaries, combine, raw insert.
    let base_dir = tempfile::tempdir().expect("temp dir");
    let baseline = {
        let trees = Trees::open(dir.path(), &Default::default()).expect("open");
        let out = sled::open(base_dir.path()).expect("baseline db");
        let t = Instant::now();
        for a in 0..AGENTS {
            let agent = format!("agent-{a:05}");
            let texts: Vec<String> = trees
                .summaries(&agent, SummaryType::Session, None)
                .expect("read")
                .into_iter()
                .map(|s| s.summary_text)
                .collect();
            out.insert(
                agent.as_bytes(),
                combine("user", &texts, DEFAULT_COMBINE_MAX_CHARS).into_bytes(),
            )
            .expect("insert");
        }
        out.flush().expect("flush");
        t.elapsed()
    };

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let rss_before = common::status_kib("VmRSS:");
    let start_at = Utc
        .with_ymd_and_hms(2026, 3, 3, 4, 0, 0)
        .single()
        .expect("time");
    let rt = tokio
        .block_on(
            RuntimeBuilder::new(dir.path())
                .settings(Settings::default())
                .clock(Clock::starting_at(start_at))
                .start(),
        )
        .expect("runtime");
    let t = Instant::now();
    let report = tokio.block_on(rt.run_rollups()).expect("rollups");
    let total = t.elapsed();
    let peak = common::status_kib("VmHWM:");
    let dailies = tokio.block_on(async {
        let mut n = 0;
        for a in [0, AGENTS / 2, AGENTS - 1] {
            n += rt
                .summaries(&format!("agent-{a:05}"), SummaryType::Daily)
                .await
                .expect("read")
                .len();
        }
        n
    });
    assert_eq!(report.daily as usize, AGENTS, "{report:?}");
    assert_eq!(dailies, 3);
    println!(
        "daily rollup of {AGENTS} agents: {:.2} s ({:.0} µs per agent), {} daily rollups, {} failures",
        total.as_secs_f64(),
        total.as_secs_f64() * 1e6 / AGENTS as f64,
        report.daily,
        report.failures
    );
    println!(
        "peak resident memory {} MiB (resident before the runtime started: {} MiB)",
        peak / 1024,
        rss_before / 1024
    );
    println!(
        "baseline (read, combine, raw sled insert per agent): {:.2} s; ratio rollup/baseline {:.1}x",
        baseline.as_secs_f64(),
        total.as_secs_f64() / baseline.as_secs_f64()
    );
    let _ = tokio.block_on(rt.shutdown());
}
