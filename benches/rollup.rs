//! The daily rollup of 10,000 agents with the offline summarizer: the
//! total time of `Runtime::run_rollups` and the peak resident memory of the
//! rollup itself, against a baseline in the same run that does the least
//! such a rollup needs — for each agent, read its day's two session
//! summaries from sled, combine them with the same extractive summarizer
//! and insert the result with a raw sled insert.
//!
//! Each agent has one user with two session summaries on Monday 2 March
//! 2026, written straight into a store folder; the runtime starts on it at
//! 04:00 the next day (rollup timers spread over the default 15 minutes are
//! not waited for: `run_rollups` rolls every agent at once, 4 at a time).
//!
//! The rollup is timed on a server as it is at its rollup hour, with what
//! a start and a session's end do already done: the start's background
//! work (every agent's search index built, re-embedding what has no
//! vector) is waited for, and the 20,000 session summaries, which the
//! start found outside the Rollup actor's inbox and queued as an earlier
//! version's, are taken in (topics, vectors) first, timed on their own.
//! Until 2026-12-02 all three ran inside the timed stretch, beside the
//! rollup.
//!
//! Two rounds, the baseline first in the first and the rollup first in the
//! second. Each side runs in a process of its own (this bench started
//! again with `ROLLUP_BENCH_SIDE` set), on a folder of its own filled the
//! same way, so that neither inherits the other's heap: memory is the peak
//! during the timed stretch minus what was resident just before it (the
//! high-water mark reset then, see `common::PeakRss`), so the fill and the
//! runtime's start do not count. Run with `cargo bench --bench rollup`. It
//! records row 12 of BENCHMARKS.md in `benches/results/` (see
//! `common/results.rs`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use chrono::{Duration, TimeZone, Utc};
use common::results::{On, Recorder, Row, Run};
use recall::engine::keys;
use recall::engine::model::{AgentMeta, ConversationSummary, SummaryType};
use recall::engine::reflect::extractive::{combine, DEFAULT_COMBINE_MAX_CHARS};
use recall::engine::store::Trees;
use recall::{Clock, RuntimeBuilder, Settings};
use tempfile::TempDir;
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

/// A fresh store folder holding the day's summaries.
fn filled() -> TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let trees = Trees::open(dir.path(), &Default::default()).expect("open");
    fill(&trees);
    dir
}

/// One side's timed stretch: its wall time and memory (KiB).
struct Side {
    secs: f64,
    before_kib: u64,
    peak_kib: u64,
    /// CPU time of the stretch (every thread).
    cpu: f64,
    /// recall only: taking in the session summaries before the rollup.
    take_secs: f64,
}

impl Side {
    fn added_mib(&self) -> f64 {
        self.peak_kib.saturating_sub(self.before_kib) as f64 / 1024.0
    }
}

/// The baseline: read each agent's two summaries, combine, raw insert.
fn baseline(src: &Path) -> Side {
    let trees = Trees::open(src, &Default::default()).expect("open");
    let base_dir = tempfile::tempdir().expect("temp dir");
    let out = sled::open(base_dir.path()).expect("baseline db");
    let mem = common::PeakRss::start();
    let cpu = common::cpu_secs();
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
    let secs = t.elapsed().as_secs_f64();
    let cpu = common::cpu_secs() - cpu;
    let (before_kib, peak_kib) = mem.finish();
    Side {
        secs,
        before_kib,
        peak_kib,
        cpu,
        take_secs: 0.0,
    }
}

/// recall: `Runtime::run_rollups` on a runtime started on the folder.
fn rollup(dir: &Path) -> Side {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let start_at = Utc
        .with_ymd_and_hms(2026, 3, 3, 4, 0, 0)
        .single()
        .expect("time");
    let t = Instant::now();
    let rt = tokio
        .block_on(
            RuntimeBuilder::new(dir)
                .settings(Settings::default())
                .clock(Clock::starting_at(start_at))
                .start(),
        )
        .expect("runtime");
    let started = t.elapsed().as_secs_f64();
    // A server up for a while: the start-up's background work done.
    let t = Instant::now();
    tokio.block_on(async {
        while rt.reembed_progress().running || rt.search_indexes_built() < AGENTS {
            assert!(
                t.elapsed().as_secs() < 600,
                "the start's background work never ended"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    let warmed = t.elapsed().as_secs_f64();
    let rss_warm = common::rss_kib();
    // The summaries were written straight into the folder: the start
    // queued them as an earlier version's; a server takes each in as it is
    // stored.
    let mem = common::PeakRss::start();
    let t = Instant::now();
    let taken = tokio.block_on(rt.process_new_summaries()).expect("take in");
    let take_secs = t.elapsed().as_secs_f64();
    let (tb, tp) = mem.finish();
    eprintln!(
        "start {started:.2} s; its background work (index warm-up, re-embedding) {warmed:.2} s, \
         resident then {:.1} MiB; taking in the session summaries {take_secs:.2} s, peak +{:.1} \
         MiB ({taken:?})",
        rss_warm as f64 / 1024.0,
        tp.saturating_sub(tb) as f64 / 1024.0
    );
    let mem = common::PeakRss::start();
    let cpu = common::cpu_secs();
    let t = Instant::now();
    let report = tokio.block_on(rt.run_rollups()).expect("rollups");
    let secs = t.elapsed().as_secs_f64();
    let cpu = common::cpu_secs() - cpu;
    let (before_kib, peak_kib) = mem.finish();
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
    assert_eq!(report.failures, 0, "{report:?}");
    assert_eq!(dailies, 3);
    let _ = tokio.block_on(rt.shutdown());
    Side {
        secs,
        before_kib,
        peak_kib,
        cpu,
        take_secs,
    }
}

const SIDE_VAR: &str = "ROLLUP_BENCH_SIDE";

/// In a child process: fills a folder, runs one side, prints its figures.
fn run_side(side: &str) {
    let dir = filled();
    let s = match side {
        "baseline" => baseline(dir.path()),
        _ => rollup(dir.path()),
    };
    println!(
        "side {} {} {} {} {}",
        s.secs, s.before_kib, s.peak_kib, s.cpu, s.take_secs
    );
}

/// Runs one side in a process of its own.
fn side(name: &str) -> Side {
    let out = Command::new(std::env::current_exe().expect("this bench"))
        .env(SIDE_VAR, name)
        .output()
        .expect("run a side");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("side "))
        .expect("the side's figures");
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    Side {
        secs: v[0],
        before_kib: v[1] as u64,
        peak_kib: v[2] as u64,
        cpu: v[3],
        take_secs: v[4],
    }
}

/// Shows that the high-water mark resets here: 64 MiB touched and freed
/// raise it, the write to `clear_refs` brings it back to the resident size.
fn check_reset() {
    let block = vec![1u8; 64 << 20];
    std::hint::black_box(&block);
    drop(block);
    let (hwm, rss) = (common::status_kib("VmHWM:"), common::rss_kib());
    let reset = common::PeakRss::reset_hwm();
    println!(
        "64 MiB touched and freed: VmHWM {:.1} MiB, VmRSS {:.1} MiB; after writing \"5\" to \
         /proc/self/clear_refs VmHWM {:.1} MiB: {}",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0,
        common::status_kib("VmHWM:") as f64 / 1024.0,
        if reset {
            "the mark resets, peaks below are VmHWM"
        } else {
            "no reset here, peaks below are VmRSS sampled every 1 ms"
        }
    );
}

fn main() {
    if let Ok(name) = std::env::var(SIDE_VAR) {
        run_side(&name);
        return;
    }
    let results = Recorder::bench();
    println!("load average at the start {}", common::load_average());
    check_reset();
    let mut rounds = Vec::new();
    for round in 0..2 {
        let (rec, base) = if round == 0 {
            let base = side("baseline");
            (side("recall"), base)
        } else {
            let rec = side("recall");
            (rec, side("baseline"))
        };
        println!(
            "round {} ({} first): rollup {:.2} s ({:.0} µs per agent, CPU {:.2} s), peak +{:.1} MiB \
             over {:.1} MiB resident before; baseline (read, combine, raw sled insert per agent) \
             {:.2} s (CPU {:.2} s), peak +{:.1} MiB over {:.1} MiB; ratio rollup/baseline {:.2} \
             (time), {:.2} (CPU); before the rollup, taking in the 20,000 session summaries \
             {:.2} s",
            round + 1,
            if round == 0 { "baseline" } else { "rollup" },
            rec.secs,
            rec.secs * 1e6 / AGENTS as f64,
            rec.cpu,
            rec.added_mib(),
            rec.before_kib as f64 / 1024.0,
            base.secs,
            base.cpu,
            base.added_mib(),
            base.before_kib as f64 / 1024.0,
            rec.secs / base.secs,
            rec.cpu / base.cpu.max(0.01),
            rec.take_secs
        );
        rounds.push((rec, base));
    }
    let join =
        |f: &dyn Fn(&(Side, Side)) -> String| rounds.iter().map(f).collect::<Vec<_>>().join(" / ");
    println!();
    println!(
        "daily rollup of {AGENTS} agents, rounds 1 / 2: {} s; peak resident above before {} MiB",
        join(&|(r, _)| format!("{:.2}", r.secs)),
        join(&|(r, _)| format!("{:.1}", r.added_mib()))
    );
    println!(
        "baseline, same rounds: {} s; peak resident above before {} MiB",
        join(&|(_, b)| format!("{:.2}", b.secs)),
        join(&|(_, b)| format!("{:.1}", b.added_mib()))
    );
    println!(
        "ratio rollup/baseline: time {}; memory {}",
        join(&|(r, b)| format!("{:.2}", r.secs / b.secs)),
        join(&|(r, b)| format!("{:.1}", r.added_mib() / b.added_mib().max(0.1)))
    );
    let load = common::load_average();
    println!("load average at the end {load}");
    let mut run = Run::new();
    for (r, _) in &rounds {
        run = run.figure("total", r.secs, "s");
    }
    for (r, _) in &rounds {
        run = run.figure("peak added", r.added_mib(), "MiB");
    }
    for (_, b) in &rounds {
        run = run.base("total", b.secs, "s");
    }
    for (_, b) in &rounds {
        run = run.base("peak added", b.added_mib(), "MiB");
    }
    for (_, b) in &rounds {
        run = run.base("CPU", b.cpu, "s");
    }
    for (r, _) in &rounds {
        run = run.figure("CPU", r.cpu, "s");
    }
    for (r, _) in &rounds {
        run = run.figure("taking in the summaries first", r.take_secs, "s");
    }
    for (r, b) in &rounds {
        run = run.ratio("time", r.secs / b.secs);
    }
    results.record(
        &Row::new(
            12,
            "Daily rollup of 10,000 agents (one user, two session summaries each), offline \
             summarizer, on a server whose start-up work is done and whose session summaries are \
             taken in (timed beside it): total time and the rollup's own peak resident memory; \
             two rounds a run, the order alternating, each side in a process of its own",
            "cargo bench --bench rollup",
        )
        .baseline("per agent: read its summaries, combine them, raw sled insert")
        .target("within 3× the baseline's time; peak ≤ 150 MiB above what was resident before")
        .check(On::Ratio, "time", "<=", 3.0, "")
        .check(On::Figure, "peak added", "<=", 150.0, "MiB"),
        run.note(&format!("load average {load}")),
    );
}
