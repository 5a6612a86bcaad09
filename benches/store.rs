//! Persisted turns per second through the Store actor against a raw sled
//! insert loop, in the same run.
//!
//! - Store actor: a `StoreActor` with default settings (group commit) on a
//!   fresh data folder; 100,000 `AppendTurn` messages are cast, then a
//!   `Flush` call waits until all of them are on disk. The messages are
//!   built (and the turns JSON-encoded, as session actors do) before the
//!   clock starts; the encoding cost is printed on its own.
//! - Raw sled: the same keys and values inserted with `Tree::insert` in a
//!   loop into the `turns` tree of a fresh data folder opened by
//!   `Trees::open` (so the same sled configuration), then one `db.flush()`.
//!
//! Keys interleave 10,000 sessions (turn `seq` of every session, then
//! `seq + 1`), as live sessions produce them. Each run uses its own
//! temporary folder; the two are alternated over a few rounds and the
//! median is reported, followed by criterion groups (time per persisted
//! turn, one fresh folder per sample).
//!
//! Run with `cargo bench --bench store`. It records row 6 of BENCHMARKS.md
//! in `benches/results/` (see `common/results.rs`).

mod common;

use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::results::{On, Recorder, Row, Run};
use criterion::{Criterion, Throughput};
use ractor::{call_t, Actor};
use recall_actors::keys;
use recall_actors::model::ConversationTurn;
use recall_actors::settings::StoreSettings;
use recall_actors::store::{StoreActor, StoreArgs, StoreMsg, Trees};
use uuid::Uuid;

const TURNS: usize = 100_000;
const SESSIONS: usize = 10_000;
const ROUNDS: usize = 3;
const CALL_TIMEOUT_MS: u64 = 120_000;

const USER_MESSAGE: &str = "Can you move my dentist appointment to Thursday afternoon?";
const AGENT_RESPONSE: &str = "Sure. I moved your dentist appointment to Thursday at 3 pm \
     and sent you a confirmation. Would you like a reminder the day before?";

type Pair = ([u8; 20], Vec<u8>);

/// Builds the first `n` AppendTurn messages of the workload.
fn messages(sessions: &[Uuid], n: usize) -> Vec<StoreMsg> {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    (0..n)
        .map(|i| {
            let session = sessions[i % sessions.len()];
            let seq = (i / sessions.len()) as u32;
            let turn = ConversationTurn {
                user_message: USER_MESSAGE.to_string(),
                agent_response: AGENT_RESPONSE.to_string(),
                timestamp: t0 + chrono::Duration::milliseconds(i as i64),
            };
            StoreMsg::append_turn(session, seq, &turn).expect("encode turn")
        })
        .collect()
}

/// The keys and values of AppendTurn messages.
fn pairs(msgs: Vec<StoreMsg>) -> Vec<Pair> {
    msgs.into_iter()
        .map(|m| match m {
            StoreMsg::AppendTurn {
                session_id,
                seq,
                value,
            } => (keys::turn(session_id, seq), value),
            _ => unreachable!("only AppendTurn messages are built"),
        })
        .collect()
}

fn to_messages(pairs: &[Pair]) -> Vec<StoreMsg> {
    pairs
        .iter()
        .map(|(key, value)| StoreMsg::AppendTurn {
            session_id: Uuid::from_slice(&key[..16]).expect("a session id"),
            seq: u32::from_be_bytes([key[16], key[17], key[18], key[19]]),
            value: value.clone(),
        })
        .collect()
}

/// Casts every message to a fresh Store actor and waits for `Flush`.
fn store_actor_run(rt: &tokio::runtime::Runtime, msgs: Vec<StoreMsg>) -> Duration {
    let n = msgs.len() as u64;
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = StoreSettings::default();
    let trees = Trees::open(dir.path(), &settings).expect("open store");
    rt.block_on(async move {
        let args = StoreArgs {
            backend: std::sync::Arc::new(trees),
            settings,
            generations: Default::default(),
            search: Default::default(),
            backlog: Default::default(),
        };
        let (store, handle) = Actor::spawn(None, StoreActor, args)
            .await
            .expect("spawn store");
        let start = Instant::now();
        for m in msgs {
            store.cast(m).expect("cast");
        }
        call_t!(store, StoreMsg::Flush, CALL_TIMEOUT_MS)
            .expect("flush call")
            .expect("flush");
        let elapsed = start.elapsed();
        let stats = call_t!(store, StoreMsg::Stats, CALL_TIMEOUT_MS).expect("stats");
        assert_eq!(stats.turns_written, n, "every turn persisted");
        assert_eq!(stats.write_errors, 0);
        store.stop(None);
        handle.await.expect("store stopped");
        elapsed
    })
}

/// Inserts the same keys and values into a fresh `turns` tree, then flushes.
fn raw_sled_run(pairs: Vec<Pair>) -> Duration {
    let n = pairs.len();
    let dir = tempfile::tempdir().expect("temp dir");
    let trees = Trees::open(dir.path(), &StoreSettings::default()).expect("open store");
    let start = Instant::now();
    for (key, value) in pairs {
        trees.turns.insert(key, value).expect("insert");
    }
    trees.db.flush().expect("flush");
    let elapsed = start.elapsed();
    assert_eq!(trees.turns.len(), n, "every turn inserted");
    elapsed
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let results = Recorder::bench();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let sessions: Vec<Uuid> = (0..SESSIONS).map(|_| Uuid::new_v4()).collect();

    let start = Instant::now();
    let workload = pairs(messages(&sessions, TURNS));
    let encode_ns = start.elapsed().as_nanos() as f64 / TURNS as f64;
    let bytes: usize = workload.iter().map(|(_, v)| v.len()).sum();
    println!(
        "{TURNS} turns over {SESSIONS} sessions, {} bytes of JSON per turn; building and \
         encoding the AppendTurn messages (not timed below) took {encode_ns:.0} ns per turn",
        bytes / TURNS
    );

    let mut actor = Vec::new();
    let mut raw = Vec::new();
    for round in 0..ROUNDS {
        // Alternate which goes first, so neither always runs on a warmer disk.
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_actor in order {
            if is_actor {
                let d = store_actor_run(&rt, to_messages(&workload));
                actor.push(per_sec(TURNS, d));
                println!(
                    "round {}: store actor {:>9.0} turns/s ({:.1} ms)",
                    round + 1,
                    per_sec(TURNS, d),
                    d.as_secs_f64() * 1e3
                );
            } else {
                let d = raw_sled_run(workload.clone());
                raw.push(per_sec(TURNS, d));
                println!(
                    "round {}: raw sled    {:>9.0} turns/s ({:.1} ms)",
                    round + 1,
                    per_sec(TURNS, d),
                    d.as_secs_f64() * 1e3
                );
            }
        }
    }
    let rounds = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.0}–{hi:.0}")
    };
    let note = format!(
        "rounds {} turns/s, raw {} inserts/s; load average {}",
        rounds(&actor),
        rounds(&raw),
        common::load_average()
    );
    let (actor, raw) = (median(actor), median(raw));
    let ratio = actor / raw;
    println!();
    println!(
        "store actor: {actor:.0} turns/s; raw sled: {raw:.0} turns/s; ratio {ratio:.2} \
         (median of {ROUNDS} rounds, {TURNS} turns each, including the final flush)"
    );
    println!(
        "target: ratio >= 0.8 {}",
        if ratio >= 0.8 { "met" } else { "MISSED" }
    );
    results.record(
        &Row::new(
            6,
            "Turns persisted through the Store actor (100,000 turns over 10,000 sessions, group \
             commit, through the async storage interface), median of three alternating rounds",
            "cargo bench --bench store",
        )
        .baseline("raw sled insert loop, same keys and values, same rounds")
        .target("≥ 0.8× the raw insert loop")
        .check(On::Ratio, "", ">=", 0.8, ""),
        Run::new()
            .figure("", actor, "turns/s")
            .base("", raw, "inserts/s")
            .ratio("", ratio)
            .note(&note),
    );
    println!();

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    {
        let mut group = c.benchmark_group("store");
        group.throughput(Throughput::Elements(1));
        group.bench_function("store_actor_append_turn", |b| {
            b.iter_custom(|iters| {
                let msgs = to_messages(&workload_of(&sessions, &workload, iters as usize));
                store_actor_run(&rt, msgs)
            })
        });
        group.bench_function("raw_sled_insert", |b| {
            b.iter_custom(|iters| raw_sled_run(workload_of(&sessions, &workload, iters as usize)))
        });
        group.finish();
    }
    c.final_summary();
}

/// `n` pairs: the prepared workload when it is long enough, else built.
fn workload_of(sessions: &[Uuid], workload: &[Pair], n: usize) -> Vec<Pair> {
    if n <= workload.len() {
        workload[..n].to_vec()
    } else {
        pairs(messages(sessions, n))
    }
}
