//! recall's archival search against tantivy, in one process: the search
//! benchmark's 100,000 summaries of one agent (50 users) and its 2,000
//! queries of 2–3 words, every other one filtered by user, run against
//! `Runtime::search` and against a tantivy index of the same summaries
//! (BM25, a `QueryParser` over the text, the user as a `TermQuery` in a
//! `BooleanQuery`, top 10).
//!
//! recall ranks by keywords only here (`search.keyword_weight = 1.0`: the
//! score is BM25 scaled to the best hit, the embedding similarity weighs
//! nothing), so the two rankings can be compared. Its store is written as
//! `benches/search.rs` writes it (summaries and their hashing vectors
//! straight into sled) and its index is built by the first search.
//!
//! The queries run in two rounds, recall first in the first and tantivy
//! first in the second. Printed: each side's build time and resident
//! memory added, p50/p99 per round and over both, the ratio, and the
//! agreement of the two top 10s by summary: the share of each top 10 the
//! other holds too (over the longer of the two lists), by id and counting
//! tied summaries as one (a summary recall returned that tantivy left out
//! for another to which tantivy gives the same BM25 counts as agreeing:
//! recall breaks ties newest first, tantivy earliest indexed first). A
//! third round runs recall's default ranking (BM25 blended with the
//! embedding similarity) on the same store, for reference.
//!
//! A crate of its own, outside recall's workspace, so recall's build and
//! tests never compile tantivy. Run with `cargo run --release` here. It
//! records rows 10 and 11 of BENCHMARKS.md in `benches/results/` (see
//! `benches/common/results.rs`).

/// The benchmarks' helpers (`/proc` figures).
#[path = "../../../benches/common/mod.rs"]
mod common;
#[path = "../../../benches/common/search_corpus.rs"]
mod corpus;
mod peer;

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Context};
use common::results::{On, Recorder, Row, Run};
use corpus::{AGENT, LIMIT, QUERIES, SUMMARIES, USERS};
use peer::{Hit, Peer};
use recall::engine::embed::{summary_text, HashingEmbed, StoredVector};
use recall::engine::keys;
use recall::engine::lang::tokens;
use recall::engine::search::SearchQuery;
use recall::engine::store::Trees;
use recall::{Runtime, RuntimeBuilder, Settings};
use tantivy::Score;

type Queries = [(String, Option<String>)];

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Writes the summaries and their vectors into a store folder, as the
/// search benchmark does.
fn write_store(dir: &std::path::Path, all: &[recall::ConversationSummary]) -> anyhow::Result<()> {
    let embed = HashingEmbed::default();
    let trees = Trees::open(dir, &Default::default())?;
    for s in all {
        let key = keys::summary(AGENT, s.summary_type, s.period_end, s.summary_id);
        trees
            .summaries
            .insert(key.as_slice(), serde_json::to_vec(s)?)?;
        trees
            .summary_index
            .insert(s.summary_id.as_bytes(), key.as_slice())?;
        let sv = StoredVector {
            embedder: "hashing".into(),
            values: embed.vector(&summary_text(s)),
        };
        trees
            .embeddings
            .insert(keys::embedding(s.summary_id), sv.encode())?;
    }
    trees.db.flush()?;
    Ok(())
}

fn query(q: &str, user: Option<&str>) -> SearchQuery {
    SearchQuery {
        text: q.to_string(),
        user_id: user.map(str::to_string),
        limit: LIMIT,
        ..Default::default()
    }
}

/// A summary's number in the corpus from its id (summary `i` has id `i + 1`).
fn number(id: uuid::Uuid) -> u64 {
    (id.as_u128() as u64).wrapping_sub(1)
}

fn run_recall(
    tokio: &tokio::runtime::Runtime,
    rt: &Runtime,
    queries: &Queries,
) -> anyhow::Result<(Vec<u64>, Vec<Vec<Hit>>)> {
    tokio.block_on(async {
        let mut times = Vec::with_capacity(queries.len());
        let mut hits = Vec::with_capacity(queries.len());
        for (q, user) in queries {
            let t = Instant::now();
            let found = rt.search(AGENT, query(q, user.as_deref())).await?;
            times.push(t.elapsed().as_nanos() as u64);
            hits.push(
                black_box(found)
                    .iter()
                    .map(|h| (number(h.id), h.keyword_score))
                    .collect(),
            );
        }
        Ok((times, hits))
    })
}

fn run_peer(peer: &Peer, queries: &Queries) -> anyhow::Result<(Vec<u64>, Vec<Vec<Hit>>)> {
    let mut times = Vec::with_capacity(queries.len());
    let mut hits = Vec::with_capacity(queries.len());
    for (q, user) in queries {
        let t = Instant::now();
        let found = peer.search(q, user.as_deref(), LIMIT)?;
        times.push(t.elapsed().as_nanos() as u64);
        hits.push(black_box(found));
    }
    Ok((times, hits))
}

/// Two scores of tantivy's for the same words count as the same within
/// this share (what the order of a float sum leaves; distinct BM25 levels
/// here are further apart).
const TIE: f32 = 1e-5;

fn tied(a: Score, b: Score) -> bool {
    (a - b).abs() <= TIE * a.abs().max(b.abs())
}

/// How many of two lists of scores pair off as equal (both sorted best
/// first).
fn matched(a: &[Score], b: &[Score]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        if tied(a[i], b[j]) {
            n += 1;
            i += 1;
            j += 1;
        } else if a[i] > b[j] {
            i += 1;
        } else {
            j += 1;
        }
    }
    n
}

/// How far recall's top 10s agree with tantivy's, by summary: printed,
/// with up to `show` queries where they disagree beyond ties; returns the
/// mean overlap counting tied summaries as one.
fn agreement(
    peer: &Peer,
    queries: &Queries,
    recall_hits: &[Vec<Hit>],
    peer_hits: &[Vec<Hit>],
    show: usize,
) -> anyhow::Result<f64> {
    let (mut strict, mut loose, mut counted) = (0.0f64, 0.0f64, 0usize);
    let (mut strict7, mut loose7, mut loose10) = (0usize, 0usize, 0usize);
    let (mut sizes_differ, mut cutoff_ties, mut none) = (0usize, 0usize, 0usize);
    let (mut rel_sum, mut rel_max, mut rel_n) = (0.0f64, 0.0f64, 0usize);
    let mut examples = Vec::new();
    for (i, ((q, user), (r, p))) in queries
        .iter()
        .zip(recall_hits.iter().zip(peer_hits))
        .enumerate()
    {
        let n = r.len().max(p.len());
        if n == 0 {
            none += 1;
            continue;
        }
        counted += 1;
        if r.len() != p.len() {
            sizes_differ += 1;
        }
        let ids: HashSet<u64> = p.iter().map(|h| h.0).collect();
        let same = r.iter().filter(|h| ids.contains(&h.0)).count();
        // tantivy's scores of recall's top 10, against its own top 10's.
        let numbers: Vec<u64> = r.iter().map(|h| h.0).collect();
        let mut rescored = peer
            .scores_of(q, user.as_deref(), &numbers)
            .context("rescoring recall's hits")?;
        rescored.sort_by(|a, b| b.1.total_cmp(&a.1));
        let theirs: Vec<Score> = p.iter().map(|h| h.1).collect();
        let ours: Vec<Score> = rescored.iter().map(|h| h.1).collect();
        let tie_same = matched(&ours, &theirs);
        // recall's BM25 of a summary against tantivy's of the same one.
        for (id, s) in &rescored {
            if let Some((_, k)) = r.iter().find(|h| h.0 == *id) {
                let rel = ((*k - *s).abs() / s.abs().max(f32::MIN_POSITIVE)) as f64;
                rel_sum += rel;
                rel_max = rel_max.max(rel);
                rel_n += 1;
            }
        }
        let eleventh = peer.search(q, user.as_deref(), LIMIT + 1)?;
        if eleventh.len() == LIMIT + 1 && tied(eleventh[LIMIT - 1].1, eleventh[LIMIT].1) {
            cutoff_ties += 1;
        }
        strict += same as f64 / n as f64;
        loose += tie_same as f64 / n as f64;
        strict7 += usize::from(same * 10 >= 7 * n);
        loose7 += usize::from(tie_same * 10 >= 7 * n);
        loose10 += usize::from(tie_same == n);
        if tie_same < n && examples.len() < show {
            examples.push((i, q.clone(), user.clone(), r.clone(), p.clone(), rescored));
        }
    }
    let share = |k: usize| 100.0 * k as f64 / counted.max(1) as f64;
    println!(
        "\ntop-{LIMIT} agreement over {counted} queries with hits ({none} with none on either side; \
         {sizes_differ} where the sides found different numbers of hits):"
    );
    println!(
        "  by id: mean overlap {:.4}, overlap >= 7/10 in {:.1} % of queries",
        strict / counted.max(1) as f64,
        share(strict7)
    );
    println!(
        "  ties counted as one: mean overlap {:.4}, >= 7/10 in {:.1} %, all in {:.1} %",
        loose / counted.max(1) as f64,
        share(loose7),
        share(loose10)
    );
    println!(
        "  queries whose 10th and 11th tantivy hits tie (any of the tied could be 10th): {cutoff_ties}"
    );
    println!(
        "  recall's BM25 against tantivy's for the same summary: mean difference {:.2} %, max {:.2} %",
        100.0 * rel_sum / rel_n.max(1) as f64,
        100.0 * rel_max
    );
    println!("  queries that disagree even so: {}", counted - loose10);
    for (i, q, user, r, p, rescored) in examples {
        println!("  disagreement, query {i} {q:?} user {user:?}:");
        println!("    recall  (number, BM25): {r:?}");
        println!("    tantivy (number, BM25): {p:?}");
        println!("    tantivy's BM25 of recall's: {rescored:?}");
    }
    Ok(loose / counted.max(1) as f64)
}

/// A side's times in a round, printed: (p50, p99) in ns.
fn round_line(name: &str, round: &str, ns: &[u64]) -> (u64, u64) {
    let (p50, p99) = common::p50_p99(ns);
    println!(
        "  {name:<8} {round:<26} p50 {:.3} ms, p99 {:.3} ms",
        ms(p50),
        ms(p99)
    );
    (p50, p99)
}

/// The two rounds of each side printed, and both rounds together against
/// the target: recall's and tantivy's (p50, p99) in ns.
fn print_rounds(recall: [&[u64]; 2], peer: [&[u64]; 2]) -> (u64, u64, u64, u64) {
    println!(
        "\n{QUERIES} queries of 2–3 words over {SUMMARIES} summaries ({USERS} users), half filtered by user, top {LIMIT}:"
    );
    round_line("recall", "round 1 (ran first)", recall[0]);
    round_line("tantivy", "round 1 (ran second)", peer[0]);
    round_line("tantivy", "round 2 (ran first)", peer[1]);
    round_line("recall", "round 2 (ran second)", recall[1]);
    let both = |a: &[u64], b: &[u64]| [a, b].concat();
    let (rs50, rs99) = round_line("recall", "both rounds", &both(recall[0], recall[1]));
    let (ps50, ps99) = round_line("tantivy", "both rounds", &both(peer[0], peer[1]));
    println!(
        "  ratio recall/tantivy: p50 {:.2}, p99 {:.2}; recall's target p99 < 2 ms and within 1.5x tantivy's: {}",
        rs50 as f64 / ps50.max(1) as f64,
        rs99 as f64 / ps99.max(1) as f64,
        if rs99 < 2_000_000 && rs99 as f64 <= 1.5 * ps99 as f64 {
            "met"
        } else {
            "MISSED"
        }
    );
    (rs50, rs99, ps50, ps99)
}

/// Recall's default ranking (BM25 blended with the hashing embedder's
/// similarity) over the same store, a third round against tantivy's:
/// the runtime, still running, and recall's p99 in ns.
fn blended_round(
    tokio: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    peer: &Peer,
    queries: &Queries,
    peer_hits: &[Vec<Hit>],
) -> anyhow::Result<(recall::Runtime, u64)> {
    let mut settings = Settings::default();
    settings.rollup.enabled = false;
    let rt = tokio.block_on(RuntimeBuilder::new(dir).settings(settings).start())?;
    let (q0, u0) = &queries[0];
    tokio.block_on(rt.search(AGENT, query(q0, u0.as_deref())))?;
    let (r3, blended_hits) = run_recall(tokio, &rt, queries)?;
    let (p3, _) = run_peer(peer, queries)?;
    println!(
        "\nrecall's default ranking (search.keyword_weight = {}, the rest the hashing embedder's similarity), round 3:",
        Settings::default().search.keyword_weight
    );
    let (b50, b99) = round_line("recall", "round 3 (ran first)", &r3);
    let (t50, t99) = round_line("tantivy", "round 3 (ran second)", &p3);
    println!(
        "  ratio recall/tantivy: p50 {:.2}, p99 {:.2}",
        b50 as f64 / t50.max(1) as f64,
        b99 as f64 / t99.max(1) as f64
    );
    agreement(peer, queries, &blended_hits, peer_hits, 0)?;
    Ok((rt, b99))
}

const COMMAND: &str = "cd peers/tantivy-search && cargo run --release";

fn main() -> anyhow::Result<()> {
    let results = Recorder::run();
    println!("load average at start: {}", common::load_average());
    let vocab = corpus::vocabulary();
    let all = corpus::summaries(&vocab);
    let queries = corpus::queries(&vocab);
    let distinct: HashSet<Vec<String>> = vocab.iter().map(|w| tokens(w).collect()).collect();
    println!(
        "{SUMMARIES} summaries, {} words, {} distinct tokens (recall's tokenizer, used by both sides)",
        vocab.len(),
        distinct.len()
    );

    // recall: the store written as the search benchmark writes it, the
    // index built by the first search.
    let dir = tempfile::tempdir()?;
    let t = Instant::now();
    write_store(dir.path(), &all)?;
    println!(
        "recall: wrote {SUMMARIES} summaries and vectors in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut settings = Settings::default();
    settings.rollup.enabled = false;
    // Keywords only: BM25 scaled to the best hit, similarity weighs 0.
    settings.search.keyword_weight = 1.0;
    let rt = tokio.block_on(RuntimeBuilder::new(dir.path()).settings(settings).start())?;
    let rss = common::rss_kib();
    let t = Instant::now();
    let (q0, u0) = &queries[0];
    tokio.block_on(rt.search(AGENT, query(q0, u0.as_deref())))?;
    let recall_build = t.elapsed();
    let recall_mib = common::rss_kib().saturating_sub(rss) / 1024;
    println!(
        "recall: first search (builds the index from the store) {:.2} s, resident memory +{recall_mib} MiB",
        recall_build.as_secs_f64()
    );

    // tantivy: the same summaries, one segment in RAM.
    let rss = common::rss_kib();
    let t = Instant::now();
    let peer = Peer::build(&all)?;
    let peer_build = t.elapsed();
    let peer_mib = common::rss_kib().saturating_sub(rss) / 1024;
    ensure!(
        peer.docs() == SUMMARIES as u64,
        "tantivy holds {} docs",
        peer.docs()
    );
    println!(
        "tantivy: index built (one thread, {} segment(s)) in {:.2} s, resident memory +{peer_mib} MiB, index {:.1} MiB",
        peer.segments(),
        peer_build.as_secs_f64(),
        peer.bytes() as f64 / (1024.0 * 1024.0)
    );
    drop(all);

    // Two rounds, the order swapped.
    let (r1, recall_hits) = run_recall(&tokio, &rt, &queries)?;
    let (p1, peer_hits) = run_peer(&peer, &queries)?;
    let (p2, peer_again) = run_peer(&peer, &queries)?;
    let (r2, recall_again) = run_recall(&tokio, &rt, &queries)?;
    ensure!(
        recall_hits == recall_again,
        "recall's results changed between rounds"
    );
    ensure!(
        peer_hits == peer_again,
        "tantivy's results changed between rounds"
    );

    let (rs50, rs99, ps50, ps99) = print_rounds([&r1, &r2], [&p1, &p2]);

    let agreed = agreement(&peer, &queries, &recall_hits, &peer_hits, 3)?;

    // For reference: the default ranking (BM25 blended with the hashing
    // embedder's similarity) on the same index, against the same tantivy
    // results.
    tokio.block_on(rt.shutdown())?;
    let (rt, b99) = blended_round(&tokio, dir.path(), &peer, &queries, &peer_hits)?;
    let load = common::load_average();
    println!("\nload average at end: {load}");
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    results.record(
        &Row::new(
            10,
            "`Runtime::search` over 100,000 summaries of one agent, 2,000 queries of 2–3 words, \
             half filtered by user, top 10, ranked by keywords only (BM25), p99 (p50); the \
             default blended ranking beside it",
            COMMAND,
        )
        .baseline("tantivy's BM25 over the same summaries, queries and user filters, same process")
        .target("p99 < 2 ms, and within 1.5x tantivy's p99")
        .check(On::Figure, "p99", "<", 2.0, "ms")
        .check(On::Ratio, "p99", "<=", 1.5, ""),
        Run::new()
            .figure("p99", ms(rs99), "ms")
            .figure("p50", ms(rs50), "ms")
            .figure("default ranking p99", ms(b99), "ms")
            .figure("top-10 agreement, ties as one", 100.0 * agreed, "%")
            .base("p99", ms(ps99), "ms")
            .base("p50", ms(ps50), "ms")
            .ratio("p99", ratio(rs99, ps99))
            .ratio("p50", ratio(rs50, ps50))
            .note(&format!("load average {load}")),
    );
    let secs = |d: std::time::Duration| d.as_secs_f64();
    results.record(
        &Row::new(
            11,
            "First search of that agent: its index built from the store; resident memory added",
            COMMAND,
        )
        .baseline(
            "tantivy indexing the same summaries from memory (one thread, no vectors or stored \
             text)",
        ),
        Run::new()
            .figure("build", secs(recall_build), "s")
            .figure("memory added", recall_mib as f64, "MiB")
            .base("build", secs(peer_build), "s")
            .base("memory added", peer_mib as f64, "MiB")
            .ratio("build", secs(recall_build) / secs(peer_build))
            .ratio("memory added", recall_mib as f64 / peer_mib.max(1) as f64)
            .note(&format!("load average {load}")),
    );
    tokio.block_on(rt.shutdown())?;
    Ok(())
}
