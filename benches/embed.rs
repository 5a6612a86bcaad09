//! The local embedding model (`embed.kind = "local"`, all-MiniLM-L6-v2 from
//! `scripts/fetch-model`, or the folder `RECALL_BENCH_MODEL_DIR` names)
//! against the hashing embedder, in the same process and run:
//!
//! - model load time (five loads) and the resident memory (VmRSS) the first
//!   load and first forward pass add;
//! - one 20-word sentence, embedded on the calling thread with the numeric
//!   kernels on one thread (`RAYON_NUM_THREADS=1`, set before anything
//!   runs): p50/p99 against the hashing embedder's `vector` on the same
//!   sentences;
//! - a batch of 64 sentences of 10–30 words: texts per second, against the
//!   hashing embedder on the same batch;
//! - the built-in static word vectors (`embed.kind = "static"`) on the same
//!   sentences and batch, and the time and memory their table's first
//!   parse takes;
//! - retrieval's vector scan: an agent index of 100,000 turns with the
//!   model's vectors (2,000 distinct sentences embedded, each vector used
//!   for 50 turns), searched with a message's words and vector (`dense` =
//!   40, as a context read does) against the same search by words alone,
//!   interleaved; and the message's own embedding, which a context read
//!   adds when the vector is not cached, reported beside it;
//! - `Runtime::context` on the local model (100 ended calls of ten turns,
//!   2,000 tokens): with a new message (its vector made within the read),
//!   the same message again (its vector kept), a new message prepared 50 ms
//!   before the read (`Runtime::prepare_message`) and one prepared just
//!   before it, and no message, interleaved; and the message's embedding
//!   alone.
//!
//! Run with `scripts/fetch-model && cargo bench --features local-embed --bench embed`.
//! It records rows 28–33 of BENCHMARKS.md in `benches/results/` (see
//! `common/results.rs`).

mod common;

use std::hint::black_box;
use std::time::Instant;

use chrono::{TimeZone, Utc};
use common::results::{On, Recorder, Row, Run};
use recall::engine::embed::{HashingEmbed, StoredVector};
use recall::engine::model::ConversationTurn;
use recall::engine::search::{AgentIndex, DocKind, Ranking, SearchQuery, TurnRef};
use recall::engine::settings::LocalEmbedSettings;
use recall::engine::static_embed::StaticEmbed;
use recall::local_embed::LocalEmbed;
use recall::{ContextOptions, EndOptions, Turn};
use uuid::Uuid;

const SUBJECTS: [&str; 8] = [
    "My sister",
    "Our neighbour",
    "The new manager",
    "My oldest friend",
    "Jonas",
    "The vet",
    "Grandma",
    "A colleague from the Denver office",
];
const VERBS: [&str; 8] = [
    "finally told me about",
    "keeps complaining about",
    "booked a weekend trip to see",
    "was surprisingly excited about",
    "spent the whole evening talking about",
    "asked me twice this week about",
    "sent a long message about",
    "laughed for ages at",
];
const OBJECTS: [&str; 8] = [
    "the half marathon in Fort Worth at the end of March",
    "the broken dishwasher and the plumber who never came back",
    "a rescue greyhound that sleeps most of the day on the sofa",
    "the quarterly planning meeting that ran two hours over",
    "learning Portuguese with an app before the summer holiday",
    "the oxygen sensor the garage replaced on the old Subaru",
    "moving the weekly football game to the new pitches",
    "a recipe for posole that takes the whole afternoon",
];

/// A sentence of about `words` words, varied by `i`.
fn sentence(i: usize, words: usize) -> String {
    let mut s = format!(
        "{} {} {}",
        SUBJECTS[i % 8],
        VERBS[(i / 8) % 8],
        OBJECTS[(i / 64) % 8]
    );
    let mut k = i;
    while s.split_whitespace().count() < words {
        s.push_str(", and then ");
        s.push_str(&OBJECTS[k % 8].to_lowercase());
        k = k / 3 + 5;
    }
    s.split_whitespace()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ")
        + "."
}

/// (p50, p99, mean) in microseconds.
fn figures(mut ns: Vec<u64>) -> (f64, f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)] as f64 / 1e3;
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3;
    (at(0.5), at(0.99), mean)
}

fn line(what: &str, f: (f64, f64, f64)) {
    println!(
        "{what:<58} p50 {:>9.1} µs  p99 {:>9.1} µs  mean {:>9.1} µs",
        f.0, f.1, f.2
    );
}

const COMMAND: &str = "scripts/fetch-model && cargo bench --features local-embed --bench embed";
const HASHING: &str = "the hashing embedder on the same sentences";

/// (p50, p99, mean) in microseconds, as `figures` gives them.
type Fig = (f64, f64, f64);

fn main() {
    let results = Recorder::bench();
    // The numeric kernels on one thread: the figures are per core.
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = std::env::var("RECALL_BENCH_MODEL_DIR").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/models/all-MiniLM-L6-v2"
        )
        .to_string()
    });
    let settings = LocalEmbedSettings {
        model_dir: dir.clone(),
        batch: 64,
        ..LocalEmbedSettings::default()
    };
    println!(
        "model {dir}; load average before: {}",
        common::load_average()
    );

    let (model, loaded) = model_load(&settings);
    let (words, parse_ms, parse_mib) = static_table();
    let hashing = HashingEmbed::default();
    let one = one_sentence(&model, &hashing, &words);
    let rates = batch_of_64(&model, &hashing, &words);
    let scanned = index_of_100k_turns(&model);
    let found = searches(&model, &scanned.ix);
    context_reads(&dir, &model, &results);
    let load = common::load_average();
    println!("load average after: {load}");
    let load = format!("load average {load}");

    record_rows(
        &results,
        &load,
        loaded,
        one,
        rates,
        (parse_ms, parse_mib),
        found,
    );
}

/// The first model load and the memory it and its first forward pass add;
/// the p50 of five more loads.
struct Load {
    first_load: std::time::Duration,
    l: Fig,
    rss0: u64,
    rss_loaded: u64,
    rss_ran: u64,
}

fn model_load(settings: &LocalEmbedSettings) -> (LocalEmbed, Load) {
    // Load time and memory.
    let rss0 = common::rss_kib();
    let t = Instant::now();
    let model = LocalEmbed::load(settings).expect("the model loads (scripts/fetch-model)");
    let first_load = t.elapsed();
    let rss_loaded = common::rss_kib();
    model
        .embed_blocking(&[sentence(0, 20)])
        .expect("a forward pass");
    let rss_ran = common::rss_kib();
    let mut loads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        black_box(LocalEmbed::load(settings).expect("loads"));
        loads.push(t.elapsed().as_nanos() as u64);
    }
    let l = figures(loads);
    println!(
        "model load: first {:.1} ms, then p50 {:.1} ms (of 5); resident memory +{:.1} MiB loaded, +{:.1} MiB after the first forward pass",
        first_load.as_secs_f64() * 1e3,
        l.0 / 1e3,
        rss_loaded.saturating_sub(rss0) as f64 / 1024.0,
        rss_ran.saturating_sub(rss0) as f64 / 1024.0
    );
    (
        model,
        Load {
            first_load,
            l,
            rss0,
            rss_loaded,
            rss_ran,
        },
    )
}

/// The static table, the milliseconds its parse takes and the MiB it adds.
fn static_table() -> (StaticEmbed, f64, f64) {
    // The static table's parse (once per process) and its memory.
    let rss_before = common::rss_kib();
    let t = Instant::now();
    let words = StaticEmbed::builtin().expect("the built-in table parses");
    let (parse_ms, parse_mib) = (
        t.elapsed().as_secs_f64() * 1e3,
        common::rss_kib().saturating_sub(rss_before) as f64 / 1024.0,
    );
    println!(
        "static word vectors: table parsed in {parse_ms:.1} ms, resident memory +{parse_mib:.1} MiB"
    );
    (words, parse_ms, parse_mib)
}

/// One 20-word sentence on the local model, the hashing embedder and the
/// static word vectors.
struct Sentence {
    lf: Fig,
    hf: Fig,
    sf: Fig,
}

fn one_sentence(model: &LocalEmbed, hashing: &HashingEmbed, words: &StaticEmbed) -> Sentence {
    // One 20-word sentence, one thread.
    let texts: Vec<String> = (0..400).map(|i| sentence(i * 7, 20)).collect();
    let (mut local_ns, mut hash_ns, mut static_ns) = (Vec::new(), Vec::new(), Vec::new());
    for (i, text) in texts.iter().enumerate() {
        let one = std::slice::from_ref(text);
        let t = Instant::now();
        black_box(model.embed_blocking(one).expect("embeds"));
        let local = t.elapsed().as_nanos() as u64;
        let t = Instant::now();
        black_box(hashing.vector(text));
        let hash = t.elapsed().as_nanos() as u64;
        let t = Instant::now();
        black_box(words.vector(text));
        let word = t.elapsed().as_nanos() as u64;
        if i >= 20 {
            local_ns.push(local);
            hash_ns.push(hash);
            static_ns.push(word);
        }
    }
    let (lf, hf, sf) = (figures(local_ns), figures(hash_ns), figures(static_ns));
    line("one 20-word sentence, local model (one thread)", lf);
    line("one 20-word sentence, hashing embedder", hf);
    line("one 20-word sentence, static word vectors", sf);
    println!(
        "ratio static / hashing: p50 {:.1}x, p99 {:.1}x",
        sf.0 / hf.0,
        sf.1 / hf.1
    );
    println!(
        "ratio local / hashing: p50 {:.0}x, p99 {:.0}x",
        lf.0 / hf.0,
        lf.1 / hf.1
    );
    Sentence { lf, hf, sf }
}

/// Texts per second in a batch of 64, on each embedder.
struct Rates {
    local_rate: f64,
    hash_rate: f64,
    static_rate: f64,
}

fn batch_of_64(model: &LocalEmbed, hashing: &HashingEmbed, words: &StaticEmbed) -> Rates {
    // A batch of 64.
    let batch: Vec<String> = (0..64).map(|i| sentence(i * 13 + 3, 10 + i % 21)).collect();
    let rounds = 10;
    let t = Instant::now();
    for _ in 0..rounds {
        black_box(model.embed_blocking(&batch).expect("embeds"));
    }
    let local_rate = (rounds * batch.len()) as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..rounds * 100 {
        for s in &batch {
            black_box(hashing.vector(s));
        }
    }
    let hash_rate = (rounds * 100 * batch.len()) as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..rounds * 100 {
        for s in &batch {
            black_box(words.vector(s));
        }
    }
    let static_rate = (rounds * 100 * batch.len()) as f64 / t.elapsed().as_secs_f64();
    println!("batch of 64 (10–30 words): static word vectors {static_rate:.0} texts/s");
    println!(
        "batch of 64 (10–30 words): local {local_rate:.0} texts/s, hashing {hash_rate:.0} texts/s (ratio {:.0}x)",
        hash_rate / local_rate
    );
    Rates {
        local_rate,
        hash_rate,
        static_rate,
    }
}

/// An agent index of 100,000 turns with the model's vectors, and what it
/// was built from (kept as long as the index).
struct Scanned {
    ix: AgentIndex,
    _distinct: Vec<String>,
    _vectors: Vec<Vec<f32>>,
    _turns: Vec<(u32, ConversationTurn)>,
}

fn index_of_100k_turns(model: &LocalEmbed) -> Scanned {
    // Retrieval's vector scan over 100,000 turns.
    let distinct: Vec<String> = (0..2000).map(|i| sentence(i, 8 + i % 17)).collect();
    let t = Instant::now();
    let vectors = model.embed_blocking(&distinct).expect("embeds");
    println!(
        "embedded 2,000 distinct turns in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut ix = AgentIndex::default();
    let session = Uuid::from_u128(7);
    let start = Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap();
    let turns: Vec<(u32, ConversationTurn)> = (0..100_000u32)
        .map(|i| {
            let t = ConversationTurn {
                user_message: distinct[i as usize % 2000].clone(),
                agent_response: "I see.".into(),
                timestamp: start + chrono::Duration::minutes(i as i64),
            };
            (i, t)
        })
        .collect();
    ix.put_turns("mark", session, &turns);
    for i in 0..100_000u32 {
        let id = TurnRef {
            session_id: session,
            seq: i,
        }
        .doc_id();
        ix.set_vector(
            id,
            StoredVector {
                embedder: model_name(model),
                values: vectors[i as usize % 2000].clone(),
            },
        );
    }
    let rss_ix = common::rss_kib();
    println!(
        "index of 100,000 turns with vectors: resident memory {:.1} MiB in all",
        rss_ix as f64 / 1024.0
    );
    Scanned {
        ix,
        _distinct: distinct,
        _vectors: vectors,
        _turns: turns,
    }
}

/// The rankings searched: by words alone, by words and vector (dense 40),
/// and the latter reading every item's bits.
fn rankings() -> [Ranking; 3] {
    let words = Ranking {
        keyword_weight: 1.0,
        candidates: 40,
        max_term_share: 0.1,
        recency: None,
        dense: 0,
        exhaustive: false,
        related: None,
        distinct: false,
        changes: recall_actors::text::Subjects::NONE,
        expects: recall_actors::text::Answers::NONE,
        keyword: recall_actors::search::KeywordTuning::DEFAULT,
    };
    let hybrid = Ranking {
        keyword_weight: 0.5,
        dense: 40,
        ..words
    };
    // The same search reading every item's bits (no partition): what the
    // partition's probe misses of it, and what it saves.
    let full_scan = Ranking {
        exhaustive: true,
        related: None,
        distinct: false,
        changes: recall_actors::text::Subjects::NONE,
        expects: recall_actors::text::Answers::NONE,
        ..hybrid
    };
    [words, hybrid, full_scan]
}

/// The searches' figures (row 31) before their baselines are added, the
/// baselines, the message's embedding and how many of the partition's
/// results the full scan shares.
struct Searches {
    search: Run,
    words_alone: Vec<(&'static str, Fig)>,
    embedding: Fig,
    same: usize,
    compared: usize,
}

fn searches(model: &LocalEmbed, ix: &AgentIndex) -> Searches {
    let questions = [
        "What did the mechanic say was wrong with my car?",
        "Which race did I sign up for?",
        "What language am I learning?",
        "Where do we play football now?",
        "What's my dog like?",
        "What recipe takes all afternoon?",
        "Who keeps complaining about the dishwasher?",
        "What happened at the planning meeting?",
    ];
    let qv: Vec<StoredVector> = model
        .embed_blocking(&questions.map(String::from))
        .expect("embeds")
        .into_iter()
        .map(|values| StoredVector {
            embedder: model_name(model),
            values,
        })
        .collect();
    let q = |text: &str| SearchQuery {
        text: text.to_string(),
        kinds: vec![DocKind::Turn],
        user_id: Some("mark".into()),
        limit: 40,
        ..Default::default()
    };
    let [words, hybrid, full_scan] = rankings();
    // Two regimes, 300 rounds each: right after the message's embedding
    // (a context read whose vector was not cached: the model's forward
    // pass has just run on the same core, so the index is out of cache),
    // and back to back (the vector cached). In each round the three
    // searches take turns at going first.
    let mut query_embed = Vec::new();
    let mut times = [
        [Vec::new(), Vec::new(), Vec::new()],
        [Vec::new(), Vec::new(), Vec::new()],
    ];
    let (mut same, mut compared) = (0usize, 0usize);
    for round in 0..600 {
        let i = round % questions.len();
        let query = q(questions[i]);
        let after_embedding = round < 300;
        if after_embedding {
            let t = Instant::now();
            black_box(
                model
                    .embed_blocking(std::slice::from_ref(&questions[i].to_string()))
                    .expect("embeds"),
            );
            query_embed.push(t.elapsed().as_nanos() as u64);
        }
        let (mut probed, mut full) = (Vec::new(), Vec::new());
        for k in 0..3 {
            let which = (round + k) % 3;
            let t = Instant::now();
            match which {
                0 => probed = black_box(ix.search(&query, Some(&qv[i]), hybrid)),
                1 => {
                    black_box(ix.search(&query, None, words));
                }
                _ => full = black_box(ix.search(&query, Some(&qv[i]), full_scan)),
            }
            let ns = t.elapsed().as_nanos() as u64;
            if round % 300 >= 12 {
                times[usize::from(!after_embedding)][which].push(ns);
            }
        }
        if round < questions.len() {
            compared += full.len();
            same += probed
                .iter()
                .filter(|h| full.iter().any(|f| f.id == h.id))
                .count();
        }
    }
    let [cold, warm] = times;
    let mut search = Run::new();
    let mut words_alone = Vec::new();
    for (regime, [w, wo, scanned]) in [("after its embedding", cold), ("back to back", warm)] {
        let (w, wo) = (figures(w), figures(wo));
        let name = if regime == "back to back" {
            "back to back"
        } else {
            "cold"
        };
        search = search
            .figure(&format!("{name} p50"), w.0 / 1e3, "ms")
            .figure(&format!("{name} p99"), w.1 / 1e3, "ms")
            .ratio(&format!("{name} p50"), w.0 / wo.0)
            .ratio(&format!("{name} p99"), w.1 / wo.1);
        words_alone.push((name, wo));
        line(
            &format!("search, 100k turns, {regime}: words and vector (dense 40)"),
            w,
        );
        line(
            &format!("search, 100k turns, {regime}: words alone (baseline)"),
            wo,
        );
        line(
            &format!("search, 100k turns, {regime}: words and vector, every item's bits read"),
            figures(scanned),
        );
        println!(
            "ratio words+vector / words, {regime}: p50 {:.1}x, p99 {:.1}x",
            w.0 / wo.0,
            w.1 / wo.1
        );
    }
    println!(
        "the partition's results against the full scan's: {same} of {compared} the same ({:.1} %)",
        100.0 * same as f64 / compared.max(1) as f64
    );
    let embedding = figures(query_embed);
    line("the message's embedding (a cache miss adds it)", embedding);
    Searches {
        search,
        words_alone,
        embedding,
        same,
        compared,
    }
}

/// Rows 28 to 32.
fn record_rows(
    results: &Recorder,
    load: &str,
    loaded: Load,
    one: Sentence,
    rates: Rates,
    (parse_ms, parse_mib): (f64, f64),
    found: Searches,
) {
    let Load {
        first_load,
        l,
        rss0,
        rss_loaded,
        rss_ran,
    } = loaded;
    let Sentence { lf, hf, sf } = one;
    let Rates {
        local_rate,
        hash_rate,
        static_rate,
    } = rates;
    let Searches {
        mut search,
        words_alone,
        embedding,
        same,
        compared,
    } = found;
    results.record(
        &Row::new(
            28,
            "Local model (all-MiniLM-L6-v2, candle, one thread): one 20-word sentence, p50 / p99",
            COMMAND,
        )
        .baseline(HASHING),
        Run::new()
            .figure("p50", lf.0 / 1e3, "ms")
            .figure("p99", lf.1 / 1e3, "ms")
            .base("p50", hf.0, "µs")
            .base("p99", hf.1, "µs")
            .ratio("p50", lf.0 / hf.0)
            .ratio("p99", lf.1 / hf.1)
            .note(load),
    );
    results.record(
        &Row::new(
            29,
            "Local model: a batch of 64 sentences of 10–30 words, one thread",
            COMMAND,
        )
        .baseline(HASHING),
        Run::new()
            .figure("", local_rate, "texts/s")
            .base("", hash_rate, "texts/s")
            .ratio("hashing / local", hash_rate / local_rate)
            .note(load),
    );
    results.record(
        &Row::new(
            30,
            "Local model: load time (the first; p50 of five more); resident memory added \
             (loaded; after the first forward pass)",
            COMMAND,
        ),
        Run::new()
            .figure("first load", first_load.as_secs_f64() * 1e3, "ms")
            .figure("load p50", l.0 / 1e3, "ms")
            .figure(
                "memory, loaded",
                rss_loaded.saturating_sub(rss0) as f64 / 1024.0,
                "MiB",
            )
            .figure(
                "memory, after a forward pass",
                rss_ran.saturating_sub(rss0) as f64 / 1024.0,
                "MiB",
            )
            .note(load),
    );
    for (name, wo) in words_alone {
        let (p50, p99) = (format!("{name} p50"), format!("{name} p99"));
        search = search
            .base(&p50, wo.0 / 1e3, "ms")
            .base(&p99, wo.1 / 1e3, "ms");
    }
    results.record(
        &Row::new(
            31,
            "Retrieval's search over 100,000 turns with the model's vectors (words and vector, \
             40 nearest), p50 / p99, right after the message's embedding (cold caches) and back \
             to back; the message's embedding itself",
            COMMAND,
        )
        .baseline("the same search by words alone")
        .target("search p99 < 1 ms on cold caches, without the embedding")
        .check(On::Figure, "cold p99", "<", 1.0, "ms"),
        search
            .figure("embedding p50", embedding.0 / 1e3, "ms")
            .figure("embedding p99", embedding.1 / 1e3, "ms")
            .figure(
                "same as the full scan",
                100.0 * same as f64 / compared.max(1) as f64,
                "%",
            )
            .note(load),
    );
    results.record(
        &Row::new(
            32,
            "Static word vectors (built in): one 20-word sentence, p50 / p99; a batch of 64 \
             (10–30 words); the table's parse, once per process, and the memory it adds",
            COMMAND,
        )
        .baseline(HASHING),
        Run::new()
            .figure("p50", sf.0, "µs")
            .figure("p99", sf.1, "µs")
            .figure("batch", static_rate, "texts/s")
            .figure("parse", parse_ms, "ms")
            .figure("memory added", parse_mib, "MiB")
            .base("p50", hf.0, "µs")
            .base("p99", hf.1, "µs")
            .base("batch", hash_rate, "texts/s")
            .ratio("p50", sf.0 / hf.0)
            .ratio("p99", sf.1 / hf.1)
            .ratio("batch time", hash_rate / static_rate)
            .note(load),
    );
}

/// `Runtime::context` on the local model: a user with 100 ended calls of
/// ten turns (every turn, summary and fact with the model's vector), read
/// at 2,000 tokens with a message never asked before (its vector made
/// within the read), the same message again (its vector kept), and no
/// message, interleaved; the message's embedding alone beside them.
fn context_reads(dir: &str, model: &LocalEmbed, results: &Recorder) {
    const QUESTIONS: [&str; 8] = [
        "What did my sister say about the half marathon",
        "When is the plumber coming back about the dishwasher",
        "How is the rescue greyhound settling in",
        "What happened at the quarterly planning meeting",
        "How is the Portuguese going",
        "What did the garage replace on the Subaru",
        "Where is the weekly football game now",
        "Which recipe takes the whole afternoon",
    ];
    let (tokio, _data, rt) = stored_calls(dir);
    let (mut made, mut kept, mut none, mut embed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut prepared, mut at_once) = (Vec::new(), Vec::new());
    for i in 0..220 {
        let message = format!("{}, the {i}th time I ask?", QUESTIONS[i % 8]);
        let time = |m: &str| {
            let t = Instant::now();
            black_box(
                tokio
                    .block_on(rt.context("kairix", "mark", m, 2000, ContextOptions::default()))
                    .expect("context"),
            );
            t.elapsed().as_nanos() as u64
        };
        let a = time(&message);
        let b = time(&message);
        let c = time("");
        // Prepared as a voice server does when its speech-to-text has the
        // user's words, before the end of their turn is settled (pipecat's
        // VAD waits 0.8 s of silence by default; 50 ms here).
        let early = format!("{}, the {i}th time, prepared?", QUESTIONS[i % 8]);
        rt.prepare_message(&early).expect("prepare");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let p = time(&early);
        // Prepared and read at once: the read awaits the one forward pass.
        let now = format!("{}, the {i}th time, prepared just now?", QUESTIONS[i % 8]);
        rt.prepare_message(&now).expect("prepare");
        let q = time(&now);
        let t = Instant::now();
        black_box(
            model
                .embed_blocking(std::slice::from_ref(&message))
                .expect("embeds"),
        );
        let e = t.elapsed().as_nanos() as u64;
        if i >= 20 {
            made.push(a);
            kept.push(b);
            prepared.push(p);
            at_once.push(q);
            none.push(c);
            embed.push(e);
        }
    }
    let (made, kept, none) = (figures(made), figures(kept), figures(none));
    line("context, a new message (its vector made in the read)", made);
    line("context, the same message again (its vector kept)", kept);
    let prepared = figures(prepared);
    line(
        "context, a new message prepared 50 ms before (prepare_message)",
        prepared,
    );
    let at_once = figures(at_once);
    line(
        "context, a new message prepared just before (its vector awaited)",
        at_once,
    );
    line("context without a message (baseline)", none);
    let embed = figures(embed);
    line("  the message's embedding alone", embed);
    println!(
        "ratio new message / no message: p50 {:.1}x, p99 {:.1}x; kept vector / no message: p50 {:.1}x, p99 {:.1}x",
        made.0 / none.0,
        made.1 / none.1,
        kept.0 / none.0,
        kept.1 / none.1
    );
    println!(
        "ratio prepared / no message: p50 {:.1}x, p99 {:.1}x",
        prepared.0 / none.0,
        prepared.1 / none.1
    );
    let ms = |us: f64| us / 1e3;
    results.record(
        &Row::new(
            33,
            "`Runtime::context` on the local model (100 ended calls of ten turns, 2,000 tokens), \
             p50 / p99: a new message handed to `Runtime::prepare_message` 50 ms before the read, \
             one handed just before, one made within the read, the same message again; the \
             embedding alone",
            COMMAND,
        )
        .baseline("the same read without a message")
        .target("row 23's p99 < 1 ms for a message prepared ahead")
        .check(On::Figure, "prepared p99", "<", 1.0, "ms"),
        Run::new()
            .figure("prepared p50", ms(prepared.0), "ms")
            .figure("prepared p99", ms(prepared.1), "ms")
            .figure("just before p99", ms(at_once.1), "ms")
            .figure("new message p99", ms(made.1), "ms")
            .figure("kept p99", ms(kept.1), "ms")
            .figure("embedding p50", ms(embed.0), "ms")
            .base("p50", ms(none.0), "ms")
            .base("p99", ms(none.1), "ms")
            .ratio("prepared p99", prepared.1 / none.1)
            .ratio("new message p99", made.1 / none.1)
            .ratio("kept p99", kept.1 / none.1)
            .note(&format!("load average {}", common::load_average())),
    );
    let _ = tokio.block_on(rt.shutdown());
}

/// A runtime on the local model holding 100 ended calls of ten turns, its
/// tokio runtime and its data folder.
fn stored_calls(dir: &str) -> (tokio::runtime::Runtime, tempfile::TempDir, recall::Runtime) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let data = tempfile::tempdir().expect("temp dir");
    let mut settings = recall::Settings::default();
    settings.embed.kind = recall::engine::settings::EmbedKind::Local;
    settings.embed.local.model_dir = dir.to_string();
    let started = Instant::now();
    let rt = tokio
        .block_on(
            recall::RuntimeBuilder::new(data.path())
                .settings(settings)
                .start(),
        )
        .expect("runtime start");
    tokio.block_on(async {
        for c in 0..100 {
            let conn = format!("call-{c}");
            rt.start_session("kairix", "mark", &conn)
                .await
                .expect("start");
            for t in 0..10 {
                rt.record_turn(&conn, Turn::new(sentence(c * 10 + t, 12 + t), "I see."))
                    .expect("turn");
            }
            rt.end_session(&conn, EndOptions::default()).expect("end");
        }
        rt.wait_idle().await.expect("idle");
        black_box(
            rt.context("kairix", "mark", "hello", 2000, ContextOptions::default())
                .await
                .expect("context"),
        );
    });
    println!(
        "context on the local model: 100 calls of 10 turns stored and embedded in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    (tokio, data, rt)
}

fn model_name(m: &LocalEmbed) -> String {
    use recall::engine::embed::Embed;
    m.name().to_string()
}
