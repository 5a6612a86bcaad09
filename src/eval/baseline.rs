//! What recall's context is compared with, built from the same raw turns
//! and under the same budget: a recency window of the user's latest turns,
//! and BM25 over the user's turns (a plain Okapi BM25, written here and
//! independent of recall's own search). Also the answer check all of them
//! share.

use std::collections::HashMap;

use recall_actors::context::TokenCounter;

use super::generate::Turn;

/// Lowercase words of letters and digits, everything else a space, so an
/// answer is found at word boundaries whatever the punctuation:
/// "Pretzel's" holds "pretzel", "St. Ives" matches "St Ives".
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(' ');
    let mut space = true;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
            space = false;
        } else if !space {
            out.push(' ');
            space = true;
        }
    }
    if !space {
        out.push(' ');
    }
    out
}

/// Whether normalized `text` holds any of `answers`, as whole words.
pub fn holds(normalized_text: &str, answers: &[String]) -> bool {
    answers.iter().any(|a| {
        let a = normalize(a);
        a.trim() != "" && normalized_text.contains(&a)
    })
}

/// A turn as a baseline's context shows it: its date and both sides.
pub fn render_turn(t: &Turn) -> String {
    format!(
        "[{}] user: {}\nassistant: {}",
        t.at.format("%Y-%m-%d %H:%M"),
        t.user,
        t.agent
    )
}

/// The user's latest turns, newest first, as many as fit in `budget`
/// tokens (a window: it stops at the first turn that does not fit).
pub fn recency(turns: &[&Turn], budget: usize, counter: &dyn TokenCounter) -> Vec<String> {
    let mut used = 0;
    let mut out = Vec::new();
    for t in turns.iter().rev() {
        let text = render_turn(t);
        let cost = counter.count(&text);
        if used + cost > budget {
            break;
        }
        used += cost;
        out.push(text);
    }
    out
}

/// English words too common to tell turns apart.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "don",
    "didn",
    "doesn",
    "isn",
    "wasn",
    "won",
    "let",
    "us",
    "also",
    "get",
    "got",
    "oh",
    "yeah",
    "ok",
    "okay",
];

/// Lowercase word tokens without stopwords (no stemming).
pub fn tokens(text: &str) -> Vec<String> {
    normalize(text)
        .split_whitespace()
        .filter(|w| !STOPWORDS.contains(w))
        .map(str::to_string)
        .collect()
}

/// Okapi BM25 over a fixed set of documents.
pub struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lens: Vec<f64>,
    avg_len: f64,
    df: HashMap<String, u32>,
}

const K1: f64 = 1.2;
const B: f64 = 0.75;

impl Bm25 {
    pub fn new<'a>(docs: impl IntoIterator<Item = &'a str>) -> Self {
        let mut out = Bm25 {
            docs: Vec::new(),
            lens: Vec::new(),
            avg_len: 0.0,
            df: HashMap::new(),
        };
        for d in docs {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let toks = tokens(d);
            out.lens.push(toks.len() as f64);
            for t in toks {
                *tf.entry(t).or_default() += 1;
            }
            for t in tf.keys() {
                *out.df.entry(t.clone()).or_default() += 1;
            }
            out.docs.push(tf);
        }
        out.avg_len = if out.lens.is_empty() {
            0.0
        } else {
            out.lens.iter().sum::<f64>() / out.lens.len() as f64
        };
        out
    }

    /// Each document's score for `query`, in document order.
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let n = self.docs.len() as f64;
        let mut q = tokens(query);
        q.sort();
        q.dedup();
        self.docs
            .iter()
            .zip(&self.lens)
            .map(|(tf, len)| {
                q.iter()
                    .filter_map(|w| {
                        let f = *tf.get(w)? as f64;
                        let df = *self.df.get(w)? as f64;
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        let norm = K1 * (1.0 - B + B * len / self.avg_len.max(1e-9));
                        Some(idf * f * (K1 + 1.0) / (f + norm))
                    })
                    .sum()
            })
            .collect()
    }

    /// Documents scoring above zero, best first (the later one first at
    /// equal scores).
    pub fn rank(&self, query: &str) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = self
            .scores(query)
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked
    }
}

/// BM25's best turns for `query`, packed greedily: each ranked turn that
/// still fits in `budget` tokens is taken, best first.
pub fn bm25(
    index: &Bm25,
    turns: &[&Turn],
    query: &str,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Vec<String> {
    let mut used = 0;
    let mut out = Vec::new();
    for (i, _) in index.rank(query) {
        let text = render_turn(turns[i]);
        let cost = counter.count(&text);
        if used + cost <= budget {
            used += cost;
            out.push(text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use recall_actors::context::CharEstimate;

    fn turn(i: i64, user: &str, agent: &str) -> Turn {
        Turn {
            at: Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap() + chrono::Duration::days(i),
            user: user.into(),
            agent: agent.into(),
            fact: None,
        }
    }

    #[test]
    fn answers_match_whole_words_whatever_the_punctuation() {
        let t = normalize("We went to St. Ives — Pretzel's first beach! (Aug 14th)");
        assert!(holds(&t, &["st ives".into()]));
        assert!(holds(&t, &["Pretzel".into()]));
        assert!(holds(&t, &["Aug 14th".into()]));
        assert!(!holds(&t, &["Aug 14".into()]));
        assert!(!holds(&t, &["Ive".into()]));
        assert!(!holds(&t, &["".into()]));
    }

    #[test]
    fn bm25_ranks_the_matching_turn_first() {
        let turns = [
            turn(0, "The weather has been grim all week.", "Hang in there."),
            turn(
                1,
                "We finally named the puppy Pretzel.",
                "Pretzel is a lovely name for a puppy.",
            ),
            turn(2, "Work was busy, lots of meetings.", "Sounds tiring."),
            turn(3, "I walked past a puppy shop today.", "Cute!"),
        ];
        let index = Bm25::new(turns.iter().map(|t| t.user.as_str()));
        let ranked = index.rank("What did we name the puppy?");
        assert_eq!(ranked[0].0, 1);
        assert_eq!(ranked.len(), 2, "only turns sharing a word score");
        let refs: Vec<&Turn> = turns.iter().collect();
        let one = CharEstimate.count(&render_turn(&turns[1]));
        let picked = bm25(&index, &refs, "puppy name", one, &CharEstimate);
        assert_eq!(picked, vec![render_turn(&turns[1])]);
        // the window takes the newest turns that fit, and stops there
        let last_two = CharEstimate.count(&render_turn(&turns[3]))
            + CharEstimate.count(&render_turn(&turns[2]));
        let window = recency(&refs, last_two, &CharEstimate);
        assert_eq!(window, vec![render_turn(&turns[3]), render_turn(&turns[2])]);
    }
}
