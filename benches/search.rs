//! Archival search over 100,000 summaries of one agent: `Runtime::search`
//! (BM25 candidates re-ranked by the offline embedder's similarity, a
//! user filter on half the queries) against a brute-force scan of the same
//! summaries in memory (every summary's term overlap and cosine similarity
//! computed, then sorted), in the same run.
//!
//! The summaries (50 users, 40-odd words each over a 3,000-word vocabulary
//! with a Zipf-like skew) and their vectors are written straight into a
//! store folder before the runtime starts on it; the first search builds
//! the agent's index from the store, which is timed on its own. Prints
//! mean, p50 and p99 of each and the p99 ratio, then runs the criterion
//! group. Run with `cargo bench --bench search`. It records no row of
//! BENCHMARKS.md: rows 10 and 11 come from `peers/tantivy-search`, which
//! runs the same search against tantivy instead of a scan.

mod common;
#[path = "common/search_corpus.rs"]
mod corpus;

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use recall::engine::embed::{cosine, HashingEmbed, StoredVector};
use recall::engine::keys;
use recall::engine::lang::tokens;
use recall::engine::search::SearchQuery;
use recall::engine::store::Trees;
use recall::{RuntimeBuilder, Settings};

use corpus::{queries, summaries, vocabulary, AGENT, LIMIT, QUERIES, SUMMARIES};

fn percentiles(mut ns: Vec<u64>) -> (f64, u64, u64) {
    ns.sort_unstable();
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    (mean, at(0.5), at(0.99))
}

/// The brute-force scan: every summary's share of the query's terms and
/// its cosine similarity, blended like the index's ranking, then sorted.
struct Scan {
    docs: Vec<(String, HashSet<String>, Vec<f32>)>,
}

impl Scan {
    fn search(&self, q: &str, user: Option<&str>, qv: &[f32]) -> Vec<usize> {
        let terms: Vec<String> = tokens(q).collect();
        let mut scored: Vec<(f32, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter(|(_, (u, _, _))| user.is_none_or(|x| x == u))
            .map(|(i, (_, set, v))| {
                let hit = terms.iter().filter(|t| set.contains(*t)).count() as f32
                    / terms.len().max(1) as f32;
                (0.6 * hit + 0.4 * cosine(qv, v).max(0.0), i)
            })
            .filter(|(s, _)| *s > 0.0)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.truncate(LIMIT);
        scored.into_iter().map(|(_, i)| i).collect()
    }
}

fn main() {
    let vocab = vocabulary();
    let all = summaries(&vocab);
    let embed = HashingEmbed::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let vectors: Vec<Vec<f32>> = all
        .iter()
        .map(|s| embed.vector(&recall::engine::embed::summary_text(s)))
        .collect();
    {
        let trees = Trees::open(dir.path(), &Default::default()).expect("open store");
        for (s, v) in all.iter().zip(&vectors) {
            let key = keys::summary(AGENT, s.summary_type, s.period_end, s.summary_id);
            trees
                .summaries
                .insert(key.as_slice(), serde_json::to_vec(s).expect("encode"))
                .expect("insert");
            trees
                .summary_index
                .insert(s.summary_id.as_bytes(), key.as_slice())
                .expect("index");
            let sv = StoredVector {
                embedder: "hashing".into(),
                values: v.clone(),
            };
            trees
                .embeddings
                .insert(keys::embedding(s.summary_id), sv.encode())
                .expect("vector");
        }
        trees.db.flush().expect("flush");
    }
    println!(
        "wrote {SUMMARIES} summaries and vectors in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let mut settings = Settings::default();
    settings.rollup.enabled = false;
    let rt = tokio
        .block_on(RuntimeBuilder::new(dir.path()).settings(settings).start())
        .expect("runtime");
    let queries = queries(&vocab);
    let query = |(q, user): &(String, Option<String>)| SearchQuery {
        text: q.clone(),
        user_id: user.clone(),
        limit: LIMIT,
        ..Default::default()
    };
    let rss_before = common::status_kib("VmRSS:");
    let t = Instant::now();
    let first = tokio
        .block_on(rt.search(AGENT, query(&queries[0])))
        .expect("search");
    let build = t.elapsed();
    let rss_after = common::status_kib("VmRSS:");
    println!(
        "first search (builds the index from the store): {:.2} s, resident memory +{} MiB, {} results",
        build.as_secs_f64(),
        rss_after.saturating_sub(rss_before) / 1024,
        first.len()
    );

    let timed: Vec<u64> = tokio.block_on(async {
        let mut out = Vec::with_capacity(QUERIES);
        for q in &queries {
            let t = Instant::now();
            let hits = rt.search(AGENT, query(q)).await.expect("search");
            out.push(t.elapsed().as_nanos() as u64);
            black_box(hits);
        }
        out
    });
    let (sm, s50, s99) = percentiles(timed);

    let scan = Scan {
        docs: all
            .iter()
            .zip(vectors)
            .map(|(s, v)| {
                let body = format!("{} {}", s.summary_text, s.topics.join(" "));
                (s.user_id.clone(), tokens(&body).collect(), v)
            })
            .collect(),
    };
    let baseline: Vec<u64> = queries
        .iter()
        .take(200)
        .map(|(q, user)| {
            let t = Instant::now();
            let qv = embed.vector(q);
            black_box(scan.search(q, user.as_deref(), &qv));
            t.elapsed().as_nanos() as u64
        })
        .collect();
    let (bm, b50, b99) = percentiles(baseline);
    println!(
        "Runtime::search over {SUMMARIES} summaries ({QUERIES} queries, half filtered by user): \
         mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs",
        sm / 1e3,
        s50 as f64 / 1e3,
        s99 as f64 / 1e3
    );
    println!(
        "brute-force scan of the same summaries: mean {:.1} ms, p50 {:.1} ms, p99 {:.1} ms",
        bm / 1e6,
        b50 as f64 / 1e6,
        b99 as f64 / 1e6
    );
    println!(
        "ratio scan/search: p99 {:.0}x, p50 {:.0}x; target p99 < 2 ms: {}",
        b99 as f64 / s99.max(1) as f64,
        b50 as f64 / s50.max(1) as f64,
        if s99 < 2_000_000 { "met" } else { "MISSED" }
    );

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("search");
    g.sample_size(20);
    let mut i = 0;
    g.bench_function("runtime_search_100k", |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            black_box(
                tokio
                    .block_on(rt.search(AGENT, query(&queries[i])))
                    .expect("search"),
            )
        })
    });
    g.finish();
    c.final_summary();
    let _ = tokio.block_on(rt.shutdown());
}
