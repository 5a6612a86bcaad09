//! The PostgreSQL backend against baselines run in the same process, on
//! the database `RECALL_TEST_POSTGRES_URL` names (by default the `test`
//! database on 127.0.0.1:5432), each run in a fresh schema dropped after it.
//!
//! - **Turns persisted per second** through a Store actor over
//!   `PgBackend` (group commit: the turns waiting are written in one
//!   multi-row insert every `store.flush_interval_ms`), 50,000
//!   `AppendTurn` messages cast and a `Flush` awaited, against a raw
//!   batched insert loop of the same rows (1,000 rows per `INSERT ...
//!   SELECT FROM UNNEST`, the statement the backend uses) into the same
//!   table of a fresh schema.
//! - **Three instances against one**: the same 50,000 turns through three
//!   Store actors, each over a backend of its own (its own pool), on one
//!   schema, a third of the sessions each, against one.
//! - **A context read on a miss**: `stored_sources` of one user with 40
//!   session summaries, 10 rollups and 60 facts, on PostgreSQL and on
//!   sled, alternated; p50 and p99 of 300 reads each. (A cache hit never
//!   reaches the backend: it costs the same on both.)
//!
//! Run with `cargo bench --bench postgres`. It records rows 34–36 of
//! BENCHMARKS.md in `benches/results/` (see `common/results.rs`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::results::{On, Recorder, Row, Run};
use ractor::{call_t, Actor};
use recall_actors::model::{ConversationSummary, ConversationTurn, Fact, SummaryType, Visibility};
use recall_actors::settings::{PostgresSettings, StoreSettings};
use recall_actors::store::{
    Backend, PgBackend, SharedBackend, StoreActor, StoreArgs, StoreMsg, Trees,
};
use uuid::Uuid;

const TURNS: usize = 50_000;
const SESSIONS: usize = 5_000;
const ROUNDS: usize = 3;
const BATCH: usize = 1_000;
const READS: usize = 300;

fn url() -> String {
    std::env::var("RECALL_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh schema's settings; dropped by [`drop_schema`].
fn schema() -> PostgresSettings {
    PostgresSettings {
        url: url(),
        schema: format!("recall_bench_{}", Uuid::new_v4().simple()),
        pool_size: 4,
        ..PostgresSettings::default()
    }
}

async fn drop_schema(s: &PostgresSettings) {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&s.url)
        .await
        .expect("connect");
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", s.schema))
        .execute(&pool)
        .await
        .expect("drop schema");
    pool.close().await;
}

fn turn_json(i: usize) -> Vec<u8> {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    serde_json::to_vec(&ConversationTurn {
        user_message: "Can you move my dentist appointment to Thursday afternoon?".into(),
        agent_response: "Sure. I moved it to Thursday at 3 pm and sent you a confirmation.".into(),
        timestamp: t0 + chrono::Duration::milliseconds(i as i64),
    })
    .expect("encode")
}

/// (session, seq, JSON) of the workload: sessions interleaved.
fn rows(sessions: &[Uuid]) -> Vec<(Uuid, u32, Vec<u8>)> {
    (0..TURNS)
        .map(|i| {
            (
                sessions[i % sessions.len()],
                (i / sessions.len()) as u32,
                turn_json(i),
            )
        })
        .collect()
}

/// Casts every turn to Store actors over `backends` (session `s`'s turns
/// to actor `s % n`) and waits for a `Flush` of each.
async fn through_actors(backends: Vec<SharedBackend>, rows: &[(Uuid, u32, Vec<u8>)]) -> Duration {
    let mut actors = Vec::new();
    for backend in backends {
        let (store, handle) = Actor::spawn(
            None,
            StoreActor,
            StoreArgs {
                backend,
                settings: StoreSettings::default(),
                generations: Default::default(),
                search: Default::default(),
                backlog: Default::default(),
            },
        )
        .await
        .expect("spawn store");
        actors.push((store, handle));
    }
    let n = actors.len();
    let msgs: Vec<(usize, StoreMsg)> = rows
        .iter()
        .map(|(id, seq, json)| {
            let to = (id.as_u128() % n as u128) as usize;
            (
                to,
                StoreMsg::AppendTurn {
                    session_id: *id,
                    seq: *seq,
                    value: json.clone(),
                },
            )
        })
        .collect();
    let start = Instant::now();
    for (to, m) in msgs {
        actors[to].0.cast(m).expect("cast");
    }
    for (store, _) in &actors {
        call_t!(store, StoreMsg::Flush, 300_000)
            .expect("flush call")
            .expect("flush");
    }
    let elapsed = start.elapsed();
    let mut written = 0;
    for (store, handle) in actors {
        let stats = call_t!(store, StoreMsg::Stats, 60_000).expect("stats");
        assert_eq!(stats.write_errors, 0);
        written += stats.turns_written;
        store.stop(None);
        handle.await.expect("stopped");
    }
    assert_eq!(written as usize, rows.len());
    elapsed
}

/// The same rows in batches of [`BATCH`], straight through sqlx.
async fn raw_batches(pg: &PgBackend, rows: &[(Uuid, u32, Vec<u8>)]) -> Duration {
    let start = Instant::now();
    for chunk in rows.chunks(BATCH) {
        let ids: Vec<Uuid> = chunk.iter().map(|r| r.0).collect();
        let seqs: Vec<i64> = chunk.iter().map(|r| r.1 as i64).collect();
        let bodies: Vec<&str> = chunk
            .iter()
            .map(|r| std::str::from_utf8(&r.2).expect("utf-8"))
            .collect();
        sqlx::query(
            "INSERT INTO turns (session_id, seq, body)
             SELECT i, s, b::json FROM UNNEST($1::uuid[], $2::int8[], $3::text[]) AS x(i, s, b)
             ON CONFLICT (session_id, seq) DO UPDATE SET body = EXCLUDED.body",
        )
        .bind(&ids)
        .bind(&seqs)
        .bind(&bodies)
        .execute(pg.pool())
        .await
        .expect("insert");
    }
    start.elapsed()
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// One user's memory: 40 session summaries with facts, 10 daily rollups.
async fn fill(b: &dyn Backend) {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    for i in 0..40u32 {
        let id = Uuid::new_v4();
        let at = t0 + chrono::Duration::hours(i as i64 * 20);
        let s = ConversationSummary::session(
            id,
            "kairix",
            "mark",
            at,
            &format!("Call {i}: Mark talked about his job search, his sister Leela in Lisbon and the marathon in May."),
        );
        let facts: Vec<Fact> = (0..3)
            .map(|k| Fact {
                fact_id: Uuid::new_v4(),
                agent_id: "kairix".into(),
                user_id: "mark".into(),
                category: recall_actors::model::FactCategory::Other,
                content: format!("Fact {k} of call {i}: likes trail running number {i}{k}"),
                subject: None,
                visibility: Visibility::Private,
                source_session_id: Some(id),
                extracted_at: at,
                conflicts_with: None,
                speaker: Default::default(),
            })
            .collect();
        b.complete_reflection(&s, &[], &facts).await.expect("store");
    }
    for d in 0..10 {
        let mut s = ConversationSummary::session(
            Uuid::new_v4(),
            "kairix",
            "mark",
            t0 + chrono::Duration::days(d),
            "A day of job interviews and training runs.",
        );
        s.summary_type = SummaryType::Daily;
        s.period_end = s.period_start + chrono::Duration::days(1);
        b.put_rollup(&s, None, None).await.expect("rollup");
    }
}

const COMMAND: &str = "cargo bench --bench postgres";

fn main() {
    let results = Recorder::bench();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let sessions: Vec<Uuid> = (0..SESSIONS).map(|_| Uuid::new_v4()).collect();
    let rows = rows(&sessions);

    // Turns: the Store actor over PostgreSQL, a raw batched insert loop,
    // three instances.
    let (mut actor, mut raw, mut three) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        rt.block_on(async {
            let s = schema();
            let pg: SharedBackend = Arc::new(PgBackend::connect(&s).await.expect("connect"));
            actor.push(per_sec(TURNS, through_actors(vec![pg], &rows).await));
            drop_schema(&s).await;

            let s = schema();
            let pg = PgBackend::connect(&s).await.expect("connect");
            raw.push(per_sec(TURNS, raw_batches(&pg, &rows).await));
            drop_schema(&s).await;

            let s = schema();
            let mut backends: Vec<SharedBackend> = Vec::new();
            for _ in 0..3 {
                backends.push(Arc::new(PgBackend::connect(&s).await.expect("connect")));
            }
            three.push(per_sec(TURNS, through_actors(backends, &rows).await));
            drop_schema(&s).await;
        });
    }
    let (a, r, t) = (median(actor), median(raw), median(three));
    println!(
        "turns persisted/s, median of {ROUNDS} rounds of {TURNS} turns over {SESSIONS} sessions:"
    );
    println!("  Store actor over PostgreSQL:  {a:>10.0}");
    println!("  raw batched insert ({BATCH}/stmt): {r:>10.0}");
    println!("  ratio actor/raw:              {:>10.2}", a / r);
    println!("  three instances on one schema: {t:>9.0}");
    println!("  ratio three/one:              {:>10.2}", t / a);

    // A context read on a miss, PostgreSQL against sled.
    let (mut on_pg, mut on_sled) = (Vec::new(), Vec::new());
    let dir = tempfile::tempdir().expect("temp dir");
    let sled: SharedBackend =
        Arc::new(Trees::open(dir.path(), &StoreSettings::default()).expect("open"));
    rt.block_on(async {
        let s = schema();
        let pg: SharedBackend = Arc::new(PgBackend::connect(&s).await.expect("connect"));
        fill(&*pg).await;
        fill(&*sled).await;
        for _ in 0..READS {
            for (b, out) in [(&pg, &mut on_pg), (&sled, &mut on_sled)] {
                let b = b.clone();
                let start = Instant::now();
                // As the runtime reads it: off the async threads.
                let ctx = recall_actors::store::read_blocking(b, |b| {
                    Box::pin(b.stored_sources("kairix", "mark"))
                })
                .await
                .expect("read");
                out.push(start.elapsed());
                assert_eq!(ctx.summaries.len(), 50);
                assert_eq!(ctx.facts.len(), 120);
            }
        }
        drop_schema(&s).await;
    });
    let (p50, p99) = (pct(&mut on_pg, 0.5), pct(&mut on_pg, 0.99));
    let (s50, s99) = (pct(&mut on_sled, 0.5), pct(&mut on_sled, 0.99));
    println!("context read on a miss, {READS} reads each (50 summaries, 120 facts):");
    println!("  PostgreSQL p50 {p50:>9.2?}  p99 {p99:>9.2?}");
    println!("  sled       p50 {s50:>9.2?}  p99 {s99:>9.2?}");
    println!(
        "  ratio PostgreSQL/sled p99: {:.2}",
        p99.as_secs_f64() / s99.as_secs_f64()
    );

    let load = format!("load average {}", common::load_average());
    results.record(
        &Row::new(
            34,
            "Turns persisted through the Store actor over PostgreSQL (group commit; 50,000 turns \
             over 5,000 sessions), median of three rounds",
            COMMAND,
        )
        .baseline("raw batched insert loop of the same rows, 1,000 per statement")
        .target("≥ 0.8× the raw insert loop")
        .check(On::Ratio, "", ">=", 0.8, ""),
        Run::new()
            .figure("", a, "turns/s")
            .base("", r, "rows/s")
            .ratio("", a / r)
            .note(&load),
    );
    results.record(
        &Row::new(
            35,
            "Three instances on one schema: the same turns through three Store actors, each over \
             a PostgreSQL backend of its own",
            COMMAND,
        )
        .baseline("one instance (row 34)"),
        Run::new()
            .figure("", t, "turns/s")
            .base("", a, "turns/s")
            .ratio("", t / a)
            .note(&load),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    results.record(
        &Row::new(
            36,
            "A context read on a miss (`context_sources`: one user, 50 summaries, 120 facts) on \
             PostgreSQL, p50 / p99 of 300 reads",
            COMMAND,
        )
        .baseline("sled, the same records, reads alternated"),
        Run::new()
            .figure("p50", ms(p50), "ms")
            .figure("p99", ms(p99), "ms")
            .base("p50", ms(s50), "ms")
            .base("p99", ms(s99), "ms")
            .ratio("p50", ms(p50) / ms(s50))
            .ratio("p99", ms(p99) / ms(s99))
            .note(&load),
    );
}
