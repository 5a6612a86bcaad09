//! Counting a context's tokens as the model does: the counter
//! `context.tokenizer` names ([`TokenizerKind`]). `chars4` is the engine's
//! estimate ([`CharEstimate`]); OpenAI's encodings come from `tiktoken-rs`
//! (feature `tiktoken`), a Hugging Face `tokenizer.json` from the
//! `tokenizers` crate (feature `hf-tokenizer`). Counts are of the text
//! alone, as `encode_ordinary` and `encode(text, add_special_tokens =
//! false)` give them: no special tokens, no truncation, no padding.

use std::sync::Arc;

use recall_actors::context::{CharEstimate, TokenCounter};
use recall_actors::settings::{ContextSettings, TokenizerKind};

/// Why the configured counter cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "context.tokenizer = \"{0}\" needs recall built with the {1} feature \
         (cargo build --release --features {1})"
    )]
    NotBuilt(&'static str, &'static str),
    #[error("cannot read the tokenizer {path} (context.tokenizer_file): {reason}")]
    File { path: String, reason: String },
    #[error("cannot load the {0} encoding: {1}")]
    Encoding(&'static str, String),
}

/// The counter `settings.tokenizer` names. A model's tokenizer is wrapped
/// in a [`CountCache`]: a read counts its retrieved excerpts anew, and most
/// of them were shown, in the same words, by a read before. An OpenAI
/// encoding's cache counts a new text by its words ([`word_segments`]),
/// most of which it has counted before.
pub fn token_counter(settings: &ContextSettings) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    let (exact, by_words) = match settings.tokenizer {
        TokenizerKind::Chars4 => return Ok(Arc::new(CharEstimate)),
        TokenizerKind::Cl100kBase => (openai("cl100k_base")?, true),
        TokenizerKind::O200kBase => (openai("o200k_base")?, true),
        TokenizerKind::Huggingface => (huggingface(&settings.tokenizer_file)?, false),
    };
    let cache = CountCache::new(exact, COUNTS_HELD);
    Ok(Arc::new(if by_words { cache.by_words() } else { cache }))
}

/// Where `text` can be cut so that an OpenAI encoding (`cl100k_base`,
/// `o200k_base`) counts it as the sum of its parts' counts: the byte
/// offsets that start a part, after the first.
///
/// The encodings cut a text into pieces with a regular expression that
/// looks behind nothing, then encode each piece alone; so a cut is exact
/// wherever a piece of the whole text ends. Two places always end one:
///
/// - before a space that follows a character other than white space: no
///   piece holding a letter, digit or sign goes on into white space other
///   than line breaks (`[\r\n/]*` may follow signs), and pieces of white
///   space hold nothing else;
/// - after a line break followed by something other than white space,
///   or by white space that runs into neither a line break nor the end,
///   and not by `/`: the piece holding the break ends with the run of
///   breaks (`\s*[\r\n]+`) or, after signs, with `[\r\n/]*`, and the
///   next piece may not begin with a break (`[^\r\n\p{L}\p{N}]?`).
///
/// So a text's parts are its words, each with the space before it.
pub fn word_segments(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut cuts = Vec::new();
    let mut prev: Option<char> = None;
    for (i, c) in text.char_indices() {
        if let Some(p) = prev {
            let after_space = c == ' ' && !p.is_whitespace();
            let after_break = p == '\n' && breaks_cleanly(&text[i..]);
            if after_space || after_break {
                cuts.push(i);
            }
        }
        prev = Some(c);
    }
    let mut start = 0;
    let mut cuts = cuts.into_iter().chain(std::iter::once(bytes.len()));
    std::iter::from_fn(move || {
        let end = cuts.next()?;
        let part = &text[start..end];
        start = end;
        Some(part)
    })
}

/// Whether a line break may end a piece before `rest`: `rest` begins with
/// neither `/` nor a line break, nor with white space that runs into one.
fn breaks_cleanly(rest: &str) -> bool {
    if rest.starts_with('/') {
        return false;
    }
    for c in rest.chars() {
        match c {
            '\r' | '\n' => return false,
            c if c.is_whitespace() => continue,
            _ => return true,
        }
    }
    // White space to the end: cl100k_base's `\s++$` takes it with the
    // break, as one piece.
    false
}

/// How many texts' counts a [`CountCache`] holds, about.
pub const COUNTS_HELD: usize = 1 << 16;

const SHARDS: usize = 16;

/// A tokenizer's counts of the texts it counted lately, by a 64-bit hash
/// of the text, keyed anew in each process so no caller can make two texts
/// share a hash (two of one hash by chance, one in 2^64 per pair, would
/// share a count). Each of its shards keeps two generations: when the
/// newer one is full, the older is dropped and the newer takes its place,
/// so a text counted in either is kept, and memory is bounded.
pub struct CountCache {
    inner: Arc<dyn TokenCounter>,
    shards: [std::sync::Mutex<Generations>; SHARDS],
    per_generation: usize,
    hasher: foldhash::quality::RandomState,
    /// A text it has not counted is counted by its [`word_segments`],
    /// each from the cache (an OpenAI encoding's only).
    by_words: bool,
}

#[derive(Default)]
struct Generations {
    newer: std::collections::HashMap<u64, u32>,
    older: std::collections::HashMap<u64, u32>,
}

impl CountCache {
    pub fn new(inner: Arc<dyn TokenCounter>, held: usize) -> CountCache {
        CountCache {
            inner,
            shards: std::array::from_fn(|_| Default::default()),
            per_generation: (held / SHARDS / 2).max(1),
            hasher: foldhash::quality::RandomState::default(),
            by_words: false,
        }
    }

    /// Counts a new text by its words ([`word_segments`]): exact for an
    /// OpenAI encoding, not for another tokenizer.
    pub fn by_words(mut self) -> CountCache {
        self.by_words = true;
        self
    }

    /// The count of `text` held, if it is.
    fn held(&self, key: u64) -> Option<usize> {
        let shard = &self.shards[(key % SHARDS as u64) as usize];
        let mut g = shard.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&n) = g.newer.get(&key) {
            return Some(n as usize);
        }
        let n = g.older.remove(&key)?;
        self.insert(&mut g, key, n);
        Some(n as usize)
    }

    fn hold(&self, key: u64, n: usize) {
        let shard = &self.shards[(key % SHARDS as u64) as usize];
        let mut g = shard.lock().unwrap_or_else(|p| p.into_inner());
        self.insert(&mut g, key, u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Puts a count in the newer generation, which, full, becomes the
    /// older first (the older is let go): a shard holds at most two
    /// generations' worth, whether the count is new or read again.
    fn insert(&self, g: &mut Generations, key: u64, n: u32) {
        if g.newer.len() >= self.per_generation {
            g.older = std::mem::take(&mut g.newer);
        }
        g.newer.insert(key, n);
    }

    /// The count of `text`, from the cache or counted (outside the lock:
    /// another read's text need not wait) and then held.
    fn count_one(&self, text: &str) -> usize {
        use std::hash::BuildHasher;
        let key = self.hasher.hash_one(text);
        if let Some(n) = self.held(key) {
            return n;
        }
        let n = self.inner.count(text);
        self.hold(key, n);
        n
    }
}

impl TokenCounter for CountCache {
    fn count(&self, text: &str) -> usize {
        if !self.by_words {
            return self.count_one(text);
        }
        use std::hash::BuildHasher;
        let key = self.hasher.hash_one(text);
        if let Some(n) = self.held(key) {
            return n;
        }
        let n = word_segments(text).map(|w| self.count_one(w)).sum();
        self.hold(key, n);
        n
    }
}

#[cfg(feature = "tiktoken")]
fn openai(name: &'static str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    let bpe = match name {
        "cl100k_base" => tiktoken_rs::cl100k_base(),
        _ => tiktoken_rs::o200k_base(),
    }
    .map_err(|e| TokenizerError::Encoding(name, e.to_string()))?;
    Ok(Arc::new(Tiktoken(bpe)))
}

#[cfg(not(feature = "tiktoken"))]
fn openai(name: &'static str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    Err(TokenizerError::NotBuilt(name, "tiktoken"))
}

/// An OpenAI encoding.
#[cfg(feature = "tiktoken")]
pub struct Tiktoken(tiktoken_rs::CoreBPE);

#[cfg(feature = "tiktoken")]
impl TokenCounter for Tiktoken {
    fn count(&self, text: &str) -> usize {
        self.0.encode_ordinary(text).len()
    }
}

#[cfg(feature = "hf-tokenizer")]
fn huggingface(path: &str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    let file = |reason: String| TokenizerError::File {
        path: path.to_string(),
        reason,
    };
    let mut t = tokenizers::Tokenizer::from_file(path).map_err(|e| file(e.to_string()))?;
    // The text's own tokens, however long: a model's tokenizer.json often
    // truncates to its window and pads to a length.
    t.with_truncation(None).map_err(|e| file(e.to_string()))?;
    t.with_padding(None);
    Ok(Arc::new(HfTokenizer(t)))
}

#[cfg(not(feature = "hf-tokenizer"))]
fn huggingface(_: &str) -> Result<Arc<dyn TokenCounter>, TokenizerError> {
    Err(TokenizerError::NotBuilt("huggingface", "hf-tokenizer"))
}

/// A Hugging Face tokenizer.
#[cfg(feature = "hf-tokenizer")]
pub struct HfTokenizer(tokenizers::Tokenizer);

#[cfg(feature = "hf-tokenizer")]
impl TokenCounter for HfTokenizer {
    fn count(&self, text: &str) -> usize {
        // (An encoding fails only on a tokenizer that cannot be run at
        // all, which loading it would have shown: counted as the estimate
        // then, never as nothing.)
        match self.0.encode_fast(text, false) {
            Ok(e) => e.len(),
            Err(_) => CharEstimate.count(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars4_is_the_estimate_and_a_tokenizer_file_must_be_named() {
        let c = token_counter(&ContextSettings::default()).unwrap();
        assert_eq!(c.count("abcde"), 2);
        let hf = ContextSettings {
            tokenizer: TokenizerKind::Huggingface,
            ..ContextSettings::default()
        };
        assert!(hf.validate().is_err());
    }

    impl CountCache {
        /// How many counts it holds, in every shard and generation.
        fn held_count(&self) -> usize {
            self.shards
                .iter()
                .map(|s| {
                    let g = s.lock().unwrap();
                    g.newer.len() + g.older.len()
                })
                .sum()
        }
    }

    /// Counts each text's characters, and how many texts it was asked.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl TokenCounter for Counting {
        fn count(&self, text: &str) -> usize {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            text.chars().count()
        }
    }

    #[test]
    fn a_count_cache_counts_a_text_once_while_it_is_held_and_stays_bounded() {
        let inner = Arc::new(Counting(Default::default()));
        let cache = CountCache::new(inner.clone(), 64);
        let asked = || inner.0.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(cache.count("héllo"), 5);
        assert_eq!(cache.count("héllo"), 5);
        assert_eq!(asked(), 1);
        assert_eq!(cache.count("héllo!"), 6);
        assert_eq!(asked(), 2);
        // many other texts: the first is let go, and counted again, right
        for i in 0..1000 {
            cache.count(&format!("text {i}"));
        }
        assert!(cache.held_count() <= 64 + SHARDS, "{}", cache.held_count());
        // texts read again and again from the older generation stay
        // within the bound too
        for round in 0..4 {
            for i in 0..1000 {
                cache.count(&format!("text {}", (i * 7 + round) % 1000));
            }
        }
        assert!(cache.held_count() <= 64 + SHARDS, "{}", cache.held_count());
        let before = asked();
        assert_eq!(cache.count("héllo"), 5);
        assert_eq!(asked(), before + 1);
        // a text counted lately is still held (the last of the last round)
        assert_eq!(cache.count("text 996"), 8);
        assert_eq!(asked(), before + 1);
    }

    #[test]
    fn a_text_is_cut_into_its_words_with_the_space_before_each() {
        let parts: Vec<&str> =
            word_segments("- [2024] user: Hi there!\n  kairix: Yes… no  way\n/x\n\nz").collect();
        assert_eq!(
            parts,
            [
                "-",
                " [2024]",
                " user:",
                " Hi",
                " there!\n",
                "  kairix:",
                " Yes…",
                " no",
                // (no cut before a `/` after a break, nor between breaks)
                "  way\n/x\n\n",
                "z"
            ]
        );
        for text in ["", " ", "\n", "a", " a b ", "a\n", "a\n \n b", "é  ü\r\nx"] {
            assert_eq!(word_segments(text).collect::<String>(), text, "{text:?}");
        }
    }

    /// Counting by words is exact for the OpenAI encodings: on every
    /// reference text (accents, emoji, CJK, right-to-left scripts, numbers,
    /// code, runs of white space and line breaks), and on texts joined as
    /// retrieved items join them.
    #[cfg(feature = "tiktoken")]
    #[test]
    fn counting_by_words_is_counting_the_whole_for_openai_encodings() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/token_counts.json"
        );
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let texts: Vec<&str> = r["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let mut joined = Vec::new();
        for (i, pair) in texts.windows(2).enumerate() {
            let sep = [
                "\n",
                "\n  kairix: ",
                " … ",
                " ",
                "\n\n",
                "\n/",
                "  \n ",
                "\r\n",
            ][i % 8];
            joined.push(format!("{}{sep}{}", pair[0], pair[1]));
        }
        for name in ["cl100k_base", "o200k_base"] {
            let exact = openai(name).unwrap();
            let by_words = CountCache::new(exact.clone(), 1 << 12).by_words();
            let all = texts
                .iter()
                .copied()
                .chain(joined.iter().map(String::as_str));
            let mut n = 0;
            for text in all {
                assert_eq!(by_words.count(text), exact.count(text), "{name}: {text:?}");
                n += 1;
            }
            assert!(n > 1_000, "{n}");
        }
    }

    #[test]
    fn a_missing_tokenizer_file_is_an_error_naming_it() {
        let s = ContextSettings {
            tokenizer: TokenizerKind::Huggingface,
            tokenizer_file: "no/such/tokenizer.json".into(),
            ..ContextSettings::default()
        };
        let e = token_counter(&s).err().expect("refused").to_string();
        assert!(
            e.contains("no/such/tokenizer.json") || e.contains("hf-tokenizer"),
            "{e}"
        );
    }
}
