//! The search benchmarks' documents and queries: `benches/search.rs` and
//! the tantivy comparison (`peers/tantivy-search`) both include this file,
//! so they search the same 100,000 summaries with the same 2,000 queries.

use chrono::{Duration, TimeZone, Utc};
use recall::engine::model::ConversationSummary;
use uuid::Uuid;

pub const AGENT: &str = "kairix";
pub const SUMMARIES: usize = 100_000;
pub const USERS: usize = 50;
const VOCAB: usize = 3_000;
pub const QUERIES: usize = 2_000;
pub const LIMIT: usize = 10;

/// xorshift64*: a fixed, fast sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Skewed towards low indices, like word frequencies.
    fn word(&mut self, vocab: &[String]) -> String {
        let a = (self.next() % vocab.len() as u64) as usize;
        let b = (self.next() % vocab.len() as u64) as usize;
        vocab[a.min(b)].clone()
    }
}

pub fn vocabulary() -> Vec<String> {
    let syllables = [
        "ka", "ri", "mo", "te", "lu", "sa", "ven", "dor", "pil", "gra", "nos", "ber", "tik", "fal",
        "un", "zer",
    ];
    let mut out = Vec::with_capacity(VOCAB);
    let mut i = 0usize;
    while out.len() < VOCAB {
        let w = format!(
            "{}{}{}",
            syllables[i % 16],
            syllables[(i / 16) % 16],
            syllables[(i / 256) % 16]
        );
        out.push(w);
        i += 1;
    }
    // a few real words among them
    for (slot, w) in [
        "interview",
        "globex",
        "salary",
        "sailing",
        "porto",
        "offer",
        "kubernetes",
        "recruiter",
    ]
    .iter()
    .enumerate()
    {
        out[slot * 7] = w.to_string();
    }
    out
}

/// Summary `i` has id `i + 1` (as a `u128`), user `i % USERS`, and ends
/// ten minutes after summary `i - 1`.
pub fn summaries(vocab: &[String]) -> Vec<ConversationSummary> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let t0 = Utc
        .with_ymd_and_hms(2024, 1, 1, 9, 0, 0)
        .single()
        .expect("a valid fixed time");
    (0..SUMMARIES)
        .map(|i| {
            let words: Vec<String> = (0..40).map(|_| rng.word(vocab)).collect();
            let start = t0 + Duration::minutes(10 * i as i64);
            let user = format!("user-{}", i % USERS);
            let id = Uuid::from_u128(i as u128 + 1);
            ConversationSummary {
                period_end: start + Duration::minutes(5),
                topics: words[..3].to_vec(),
                turn_count: 4,
                ..ConversationSummary::session(
                    id,
                    AGENT,
                    &user,
                    start,
                    &format!("{}.", words.join(" ")),
                )
            }
        })
        .collect()
}

/// The queries: 2–3 words each, every other one filtered by a user.
pub fn queries(vocab: &[String]) -> Vec<(String, Option<String>)> {
    let mut rng = Rng(42);
    (0..QUERIES)
        .map(|i| {
            let n = 2 + (rng.next() % 2) as usize;
            let q: Vec<String> = (0..n).map(|_| rng.word(vocab)).collect();
            let user = (i % 2 == 0).then(|| format!("user-{}", rng.next() % USERS as u64));
            (q.join(" "), user)
        })
        .collect()
}
