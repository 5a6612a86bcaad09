//! The `Embed` port: text to vectors, for topics and archival search.
//!
//! The embedded default, [`HashingEmbed`], needs no model and no network: a
//! signed feature-hashing embedding of a text's content words (weighted
//! `1 + ln tf`) and of their character 4-grams (at a lower weight, so
//! "interview" and "interviews" land close), L2-normalized. It captures
//! shared vocabulary, not meaning — "job" and "career" are unrelated to it —
//! which is what keeps it offline, deterministic and fast. The hash is
//! FNV-1a, fixed here, so vectors stay the same across builds and can be
//! stored.

use std::collections::BTreeMap;

use crate::port::BoxFuture;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The embedding service could not be reached or answered badly.
    #[error("embedding failed: {0}")]
    Failed(String),
    /// It answered with vectors of another size than configured.
    #[error("expected {expected} dimensions, got {got}")]
    Dimensions { expected: usize, got: usize },
}

/// Turns texts into vectors of `dimensions()` numbers, one per text, in
/// order. Vectors are compared by [`cosine`].
pub trait Embed: Send + Sync + 'static {
    /// Names the embedder and its model (`hashing-256`,
    /// `openai:nomic-embed-text`): vectors are only compared with vectors
    /// of the same name.
    fn name(&self) -> &str;
    fn dimensions(&self) -> usize;
    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>>;

    /// Whether close vectors mean close meaning beyond shared words (a
    /// trained model's do). When they do, the raw turns of ended calls get
    /// vectors too and retrieval searches by the message's vector beside
    /// its words; the hashing embedder's vectors only restate shared words,
    /// which BM25 already ranks, so it gets neither.
    fn captures_meaning(&self) -> bool {
        true
    }

    /// A text's vector made on the spot, for an embedder that is a table
    /// look-up (microseconds, no I/O): the search index then makes the
    /// vectors of raw turns itself as it indexes them, and they are never
    /// stored. `None` (the default): vectors come through [`Embed::embed`]
    /// and are stored.
    fn embed_now(&self, _text: &str) -> Option<Vec<f32>> {
        None
    }

    /// Whether it makes vectors on the spot ([`Embed::embed_now`]): then
    /// no turn's vector is embedded through the port or stored.
    fn embeds_inline(&self) -> bool {
        self.embed_now("").is_some()
    }

    /// How close its vectors of two calls on one subject sit: which of
    /// the rollup's topic thresholds applies.
    fn closeness(&self) -> Closeness {
        if self.captures_meaning() {
            Closeness::Sentences
        } else {
            Closeness::Words
        }
    }
}

/// The scale of an embedder's similarities, for topic thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closeness {
    /// Shared words only (hashing): `rollup.topic_threshold`.
    Words,
    /// Summed word vectors (static): `rollup.topic_threshold_static`.
    WordVectors,
    /// A sentence model's vectors: `rollup.topic_threshold_meaning`.
    Sentences,
}

/// The offline embedder.
#[derive(Debug, Clone, Copy)]
pub struct HashingEmbed {
    dimensions: usize,
}

/// Weight of a word's character 4-grams, relative to the word.
const GRAM_WEIGHT: f32 = 0.35;

impl HashingEmbed {
    /// At least 16 dimensions.
    pub fn new(dimensions: usize) -> Self {
        HashingEmbed {
            dimensions: dimensions.max(16),
        }
    }

    /// The vector of one text (all zeros when it has no content words).
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimensions];
        let tf: BTreeMap<String, usize> = crate::lang::term_frequencies(text);
        for (word, n) in &tf {
            let w = 1.0 + (*n as f32).ln();
            self.add(&mut v, word.as_bytes(), w);
            let padded: Vec<char> = format!("<{word}>").chars().collect();
            if padded.len() > 4 {
                for gram in padded.windows(4) {
                    let g: String = gram.iter().collect();
                    self.add(&mut v, g.as_bytes(), w * GRAM_WEIGHT);
                }
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }

    fn add(&self, v: &mut [f32], feature: &[u8], weight: f32) {
        let h = fnv1a(feature);
        let i = (h % self.dimensions as u64) as usize;
        let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
        v[i] += sign * weight;
    }
}

impl Default for HashingEmbed {
    fn default() -> Self {
        HashingEmbed::new(256)
    }
}

impl Embed for HashingEmbed {
    fn name(&self) -> &str {
        "hashing"
    }

    fn captures_meaning(&self) -> bool {
        false
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
        let me = *self;
        Box::pin(async move { Ok(texts.iter().map(|t| me.vector(t)).collect()) })
    }
}

/// 64-bit FNV-1a's offset basis: where a hash starts.
pub const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a: fixed across builds and runs, unlike the std hasher.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV1A_START, bytes)
}

/// 64-bit FNV-1a of `bytes` continued from the hash `h` (of what came
/// before them; [`FNV1A_START`] for nothing).
pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Cosine similarity; 0 when either vector is all zeros or their sizes
/// differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// The dot product of two vectors of small integers (quantized vectors'
/// numbers), over the shorter one's length. With AVX2, 16 products a step;
/// without it, in blocks the compiler turns into SIMD multiply-adds. The
/// sum fits while the vectors are shorter than 2^17 numbers (a product is
/// at most 2^14); the vectors here have hundreds.
#[inline]
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    debug_assert!(a.len().min(b.len()) < 1 << 17, "the sum could overflow");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the instructions the function is compiled
        // with (checked just above).
        return unsafe { dot_i8_avx2(a, b) };
    }
    dot_i8_portable(a, b)
}

fn dot_i8_portable(a: &[i8], b: &[i8]) -> i32 {
    const LANES: usize = 16;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0i32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| *x as i32 * *y as i32)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..LANES {
            acc[k] += x[k] as i32 * y[k] as i32;
        }
    }
    acc.iter().sum::<i32>() + tail
}

/// Sixteen bytes at a time widened to 16-bit lanes, multiplied and summed
/// in pairs into eight 32-bit lanes (`vpmaddwd`): twice the width the
/// portable loop gets on a baseline x86-64 build, and a few calls a block
/// instead of a turn of a loop per number in an unoptimized (test) build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_add_epi32, _mm256_cvtepi8_epi16, _mm256_madd_epi16,
        _mm256_setzero_si256, _mm256_storeu_si256, _mm_loadu_si128,
    };
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n`: both 16-byte reads lie inside the slices
        // (an unaligned load needs no alignment).
        let (x, y) = unsafe {
            (
                _mm_loadu_si128(a.as_ptr().add(i).cast::<__m128i>()),
                _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()),
            )
        };
        let products = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
        acc = _mm256_add_epi32(acc, products);
        i += 16;
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` is 32 bytes, the store's width (unaligned).
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), acc) };
    lanes.iter().sum::<i32>() + dot_i8_portable(&a[i..n], &b[i..n])
}

/// A vector as the Store keeps it, with the embedder that made it: vectors
/// of different embedders are never compared.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    pub embedder: String,
    pub values: Vec<f32>,
}

impl StoredVector {
    /// One byte of name length, the name, then little-endian `f32`s.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.embedder.as_bytes()[..self.embedder.len().min(255)];
        let mut out = Vec::with_capacity(1 + name.len() + 4 * self.values.len());
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        for v in &self.values {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// `None` for bytes that are not an encoded vector.
    pub fn decode(bytes: &[u8]) -> Option<StoredVector> {
        let n = *bytes.first()? as usize;
        let name = std::str::from_utf8(bytes.get(1..1 + n)?).ok()?;
        let rest = bytes.get(1 + n..)?;
        if rest.len() % 4 != 0 {
            return None;
        }
        Some(StoredVector {
            embedder: name.to_string(),
            values: rest
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        })
    }
}

/// The text a summary is embedded from: its text, topics and entities.
pub fn summary_text(s: &crate::model::ConversationSummary) -> String {
    format!(
        "{}\n{}\n{}",
        s.summary_text,
        s.topics.join(", "),
        s.key_entities.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_integer_dot_product_is_the_plain_sum_at_every_length() {
        // Lengths around the 16-byte step, extreme values included: each
        // path (the CPU's and the portable one) gives the plain sum.
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8 as i8
        };
        for n in [0, 1, 15, 16, 17, 31, 32, 33, 256, 384, 385] {
            let mut a: Vec<i8> = (0..n).map(|_| next()).collect();
            let b: Vec<i8> = (0..n).map(|_| next()).collect();
            if n > 2 {
                a[0] = i8::MIN;
                a[1] = i8::MAX;
            }
            let plain = |len: usize| -> i32 {
                a[..len]
                    .iter()
                    .zip(&b[..len])
                    .map(|(x, y)| *x as i32 * *y as i32)
                    .sum()
            };
            assert_eq!(dot_i8(&a, &b), plain(n), "length {n}");
            assert_eq!(dot_i8_portable(&a, &b), plain(n), "length {n}");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                assert_eq!(unsafe { dot_i8_avx2(&a, &b) }, plain(n), "length {n}");
            }
            // the shorter vector's length counts, on either side
            for (x, y) in [(&a[..], &b[..n / 2]), (&a[..n / 2], &b[..])] {
                assert_eq!(dot_i8(x, y), plain(n / 2), "length {n}");
                assert_eq!(dot_i8_portable(x, y), plain(n / 2), "length {n}");
            }
        }
        let full = vec![i8::MIN; 4096];
        assert_eq!(dot_i8(&full, &full), 4096 * 128 * 128);
    }

    #[test]
    fn shared_vocabulary_is_closer_than_none() {
        let e = HashingEmbed::default();
        let a = e.vector("Mark prepared for the Globex interview and the salary talk.");
        let b = e.vector("Interviews at Globex: Mark asked about salary negotiation.");
        let c = e.vector("Ada planned a sailing weekend in Porto with her sister.");
        assert!(cosine(&a, &b) > 0.3, "{}", cosine(&a, &b));
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.2);
        // plural and singular share their 4-grams
        let s = e.vector("interview");
        let p = e.vector("interviews");
        assert!(cosine(&s, &p) > 0.35, "{}", cosine(&s, &p));
        // unrelated words meet only by hash collisions: small on average
        let others = [
            "sailing", "pottery", "weather", "lisbon", "dentist", "guitar", "recipe", "football",
            "holiday", "garden",
        ];
        let mean = others
            .iter()
            .map(|w| cosine(&s, &e.vector(w)).abs())
            .sum::<f32>()
            / others.len() as f32;
        assert!(mean < 0.1, "{mean}");
    }

    #[test]
    fn vectors_are_unit_length_deterministic_and_zero_for_no_content() {
        let e = HashingEmbed::new(64);
        let v = e.vector("Salary negotiation for the Globex offer");
        assert_eq!(v.len(), 64);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert_eq!(v, e.vector("Salary negotiation for the Globex offer"));
        let empty = e.vector("a an the ...");
        assert!(empty.iter().all(|x| *x == 0.0));
        assert_eq!(cosine(&empty, &v), 0.0);
        assert_eq!(cosine(&v, &v[..10]), 0.0, "sizes differ");
        // FNV-1a's published test vector: the hash is fixed, vectors can be stored
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn stored_vectors_round_trip() {
        let v = StoredVector {
            embedder: "hashing".into(),
            values: vec![0.5, -1.25, 3.0],
        };
        assert_eq!(StoredVector::decode(&v.encode()), Some(v.clone()));
        assert_eq!(StoredVector::decode(&v.encode()[..5]), None);
        assert_eq!(StoredVector::decode(&[]), None);
    }

    #[tokio::test]
    async fn the_port_embeds_each_text_in_order() {
        let e = HashingEmbed::default();
        let out = e
            .embed(vec!["job search".into(), "sailing trip".into()])
            .await
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].len(), e.dimensions());
        assert_ne!(out[0], out[1]);
        // each text's vector is its own, whatever comes beside it: the
        // batch reversed gives the vectors reversed, one text alone the
        // same vector
        let back = e
            .embed(vec!["sailing trip".into(), "job search".into()])
            .await
            .unwrap();
        assert_eq!((&back[0], &back[1]), (&out[1], &out[0]));
        let alone = e.embed(vec!["job search".into()]).await.unwrap();
        assert_eq!(alone, vec![out[0].clone()]);
        assert!(e.embed(Vec::new()).await.unwrap().is_empty());
    }
}
