//! Restart time with 100,000 stored sessions: how long `Runtime::start`
//! takes on a data folder holding them, and how long until the first turn
//! of a new call is on disk, against opening the same sled folder and its
//! trees raw (the floor for any store on sled), in the same run.
//!
//! The folder (100 agents × 10 users, 100,000 ended sessions of four turns
//! each, every one with its session summary and taken in by the rollups,
//! plus 100 sessions left open as a `kill -9` leaves them) is written
//! straight into the store before the runtime starts. The first start
//! recovers the 100 open sessions (ends and reflects them); the next five
//! are clean restarts. Prints each, the medians and the ratio. Run with `cargo bench --bench restart`.
//! It records rows 17–19 of BENCHMARKS.md in `benches/results/` (see
//! `common/results.rs`).

mod common;

use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::results::{Recorder, Row, Run};
use recall::engine::keys;
use recall::engine::model::{ConversationSummary, ConversationTurn, EndReason, SessionRecord};
use recall::engine::store::Trees;
use recall::{RuntimeBuilder, Turn};
use uuid::Uuid;

const SESSIONS: usize = 100_000;
const OPEN: usize = 100;
const AGENTS: usize = 100;
const USERS: usize = 10;
const TURNS: u32 = 4;
const RESTARTS: usize = 5;

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort_unstable();
    d[d.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Writes the folder: ended sessions with turns and summaries, and `OPEN`
/// sessions still open with turns.
fn populate(dir: &std::path::Path) {
    let mut trees = Trees::open(dir, &Default::default()).expect("open store");
    // A folder whose summaries the Rollup actor has taken in already.
    trees.fill_inbox = false;
    let epoch = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    for i in 0..SESSIONS + OPEN {
        let agent = format!("agent-{}", i % AGENTS);
        let user = format!("user-{}", (i / AGENTS) % USERS);
        let started_at = epoch + chrono::Duration::seconds(i as i64 * 30);
        let mut rec = SessionRecord {
            session_id: Uuid::from_u128(i as u128 + 1),
            agent_id: agent.clone(),
            user_id: user.clone(),
            connection_id: format!("conn-{i}"),
            started_at,
            ended_at: None,
            end_reason: None,
            turn_count: 0,
        };
        let key = keys::session(rec.session_id);
        trees
            .sessions
            .insert(key, serde_json::to_vec(&rec).expect("encode"))
            .expect("session");
        trees.open.insert(key, &[]).expect("open");
        for seq in 0..TURNS {
            let turn = ConversationTurn {
                user_message: format!("{user} asked about the garden plan, part {seq} of call {i}"),
                agent_response: "Start with the tomatoes along the south fence.".into(),
                timestamp: started_at + chrono::Duration::seconds(seq as i64 * 5),
            };
            trees
                .turns
                .insert(
                    keys::turn(rec.session_id, seq),
                    serde_json::to_vec(&turn).expect("encode"),
                )
                .expect("turn");
        }
        if i >= SESSIONS {
            continue;
        }
        let ended = started_at + chrono::Duration::seconds(20);
        rec.ended_at = Some(ended);
        rec.end_reason = Some(EndReason::Disconnect);
        rec.turn_count = TURNS;
        trees.end_session(&rec, ended).expect("end");
        let summary = ConversationSummary::session(
            rec.session_id,
            &agent,
            &user,
            started_at,
            &format!("{user} and {agent} planned the garden (call {i}): tomatoes by the south fence, herbs in pots."),
        );
        trees
            .complete_reflection(&summary, &[], &[])
            .expect("summary");
    }
    // Mark the folder as having had its summaries queued once already.
    trees.fill_inbox = true;
    let queued = trees.backfill_inbox().expect("backfill");
    loop {
        let batch = trees.inbox(None, 10_000).expect("inbox");
        if batch.is_empty() {
            break;
        }
        let done: Vec<_> = batch.into_iter().map(|e| e.key).collect();
        trees.inbox_done(&done).expect("done");
    }
    trees.db.flush().expect("flush");
    eprintln!("populated: {SESSIONS} ended + {OPEN} open sessions ({queued} inbox rows taken in)");
}

/// Opens the folder and every tree with sled alone.
fn raw_open(dir: &std::path::Path) -> Duration {
    let t0 = Instant::now();
    let db = sled::Config::new().path(dir).open().expect("raw open");
    for name in db.tree_names() {
        db.open_tree(name).expect("tree");
    }
    let d = t0.elapsed();
    drop(db);
    d
}

const COMMAND: &str = "cargo bench --bench restart";
const RAW_OPEN: &str = "raw `sled` open of the same folder and its trees";

fn main() {
    let results = Recorder::bench();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    populate(dir.path());
    eprintln!("written in {:.1} s", t0.elapsed().as_secs_f64());
    let size: u64 = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    eprintln!("folder: {:.0} MiB", size as f64 / (1 << 20) as f64);

    let (mut starts, mut first_turns, mut raws) = (Vec::new(), Vec::new(), Vec::new());
    let mut recovery = (Duration::ZERO, Duration::ZERO);
    for run in 0..=RESTARTS {
        // Which goes first alternates, so neither always finds the page
        // cache warmed by the other.
        let raw_first = run % 2 == 1;
        let mut raw = if raw_first {
            raw_open(dir.path())
        } else {
            Duration::ZERO
        };
        let (start, first_turn, recovered) = rt.block_on(async {
            let t0 = Instant::now();
            let runtime = RuntimeBuilder::new(dir.path())
                .start()
                .await
                .expect("start");
            let started = t0.elapsed();
            let conn = format!("restart-{run}");
            runtime
                .start_session("agent-0", "user-0", &conn)
                .await
                .expect("session");
            runtime
                .record_turn_durable(
                    &conn,
                    Turn::new("Are the tomatoes in yet?", "Not yet, Saturday."),
                )
                .await
                .expect("durable turn");
            let first_turn = t0.elapsed();
            let recovered = runtime.recovered().len();
            runtime.shutdown().await.expect("shutdown");
            (started, first_turn, recovered)
        });
        if !raw_first {
            raw = raw_open(dir.path());
        }
        eprintln!(
            "run {run}: start {:.1} ms, first durable turn {:.1} ms, raw sled open {:.1} ms{}",
            ms(start),
            ms(first_turn),
            ms(raw),
            if recovered > 0 {
                format!(" ({recovered} open sessions recovered)")
            } else {
                String::new()
            }
        );
        if run == 0 {
            assert_eq!(recovered, OPEN, "the open sessions are recovered");
            recovery = (start, raw);
        } else {
            starts.push(start);
            first_turns.push(first_turn);
            raws.push(raw);
        }
    }
    let (start, first, raw) = (median(starts), median(first_turns), median(raws));
    println!(
        "restart with {SESSIONS} stored sessions (median of {RESTARTS}): start {:.1} ms, \
         first durable turn {:.1} ms; raw sled open of the same folder {:.1} ms; \
         ratio {:.1} (start) / {:.1} (first turn)",
        ms(start),
        ms(first),
        ms(raw),
        ms(start) / ms(raw),
        ms(first) / ms(raw),
    );
    let note = format!(
        "folder {:.0} MiB; load average {}",
        size as f64 / (1 << 20) as f64,
        common::load_average()
    );
    results.record(
        &Row::new(
            17,
            "Restart on a folder of 100,000 stored sessions (four turns and a summary each): \
             `Runtime::start`, median of five clean restarts",
            COMMAND,
        )
        .baseline(RAW_OPEN),
        Run::new()
            .figure("", ms(start), "ms")
            .base("", ms(raw), "ms")
            .ratio("", ms(start) / ms(raw))
            .note(&note),
    );
    results.record(
        &Row::new(
            18,
            "The same, until the first turn of a new call is on disk (`record_turn_durable`)",
            COMMAND,
        )
        .baseline(RAW_OPEN),
        Run::new()
            .figure("", ms(first), "ms")
            .base("", ms(raw), "ms")
            .ratio("", ms(first) / ms(raw))
            .note(&note),
    );
    results.record(
        &Row::new(
            19,
            "The first start after a crash that left 100 sessions open (recovered: ended and \
             queued for reflection), on the folder just written",
            COMMAND,
        )
        .baseline("raw `sled` open of the same folder, right after"),
        Run::new()
            .figure("", ms(recovery.0), "ms")
            .base("", ms(recovery.1), "ms")
            .ratio("", ms(recovery.0) / ms(recovery.1))
            .note(&note),
    );
}
