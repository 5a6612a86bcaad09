//! Archival search over an agent's summaries and facts: BM25 over their
//! words, re-ranked by embedding similarity.
//!
//! The index is derived state: one in-memory index per agent, built from
//! the Store's trees on the agent's first search and kept current by the
//! Store actor after each write it makes (summaries, rollups, topics, fact
//! changes, vectors), so it can never disagree with sled for longer than a
//! message. Nothing of it is written to disk; a lost or never-built index
//! is rebuilt from the store.
//!
//! Why not tantivy: the store is the only durable state and sled its only
//! writer; a second on-disk index would need its own commit protocol kept
//! in step with sled transactions across crashes, and the hybrid ranking
//! needs every document's vector in memory anyway. The in-memory BM25 over
//! one agent's documents is small (see docs/performance.md) and a query
//! touches only the postings of its words.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::embed::StoredVector;
use crate::model::{
    isoformat, ConversationSummary, ConversationTurn, Fact, Speaker, SummaryType, Visibility,
};
use crate::text;
use crate::text::{Answers, Subjects};

/// The English Snowball stemmer, shared: it holds no state.
static STEMMER: LazyLock<rust_stemmers::Stemmer> =
    LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// The text every turn document shares: a turn's words are read from the
/// store when it is shown, not kept twice in memory.
static NO_TEXT: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

thread_local! {
    /// Per-thread score accumulator of [`AgentIndex::search`].
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// BM25 parameters (the usual ones).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// What a search may return.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocKind {
    Session,
    Daily,
    Weekly,
    Topic,
    Fact,
    /// A raw turn of an ended call (searched only when asked for by kind).
    Turn,
}

impl DocKind {
    pub fn of(t: SummaryType) -> DocKind {
        match t {
            SummaryType::Session => DocKind::Session,
            SummaryType::Daily => DocKind::Daily,
            SummaryType::Weekly => DocKind::Weekly,
            SummaryType::Topic => DocKind::Topic,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DocKind::Session => "session",
            DocKind::Daily => "daily",
            DocKind::Weekly => "weekly",
            DocKind::Topic => "topic",
            DocKind::Fact => "fact",
            DocKind::Turn => "turn",
        }
    }
}

impl std::str::FromStr for DocKind {
    type Err = crate::model::InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "session" => DocKind::Session,
            "daily" => DocKind::Daily,
            "weekly" => DocKind::Weekly,
            "topic" => DocKind::Topic,
            "fact" => DocKind::Fact,
            "turn" => DocKind::Turn,
            other => {
                return Err(crate::model::InputError::Invalid {
                    field: "type",
                    reason: format!(
                        "unknown type {other:?}; one of session, daily, weekly, topic, fact, turn"
                    ),
                })
            }
        })
    }
}

/// A search: the words, the filters, how many results.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    pub text: String,
    /// Only these kinds (all but turns when empty).
    pub kinds: Vec<DocKind>,
    /// Only what this user may see: their own items and facts other users
    /// shared. `None` searches every user of the agent (an operator's view).
    pub user_id: Option<String>,
    /// Items whose time reaches this instant or later.
    pub since: Option<DateTime<Utc>>,
    /// Items whose time starts at this instant or earlier.
    pub until: Option<DateTime<Utc>>,
    pub limit: usize,
}

/// One result.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub kind: DocKind,
    pub user_id: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// The blended score, 0 to 1.
    pub score: f32,
    /// BM25, unscaled.
    pub keyword_score: f32,
    /// Cosine similarity of the query's and the item's vectors.
    pub similarity: f32,
    /// The seed's archival text of a summary; a fact's as `[FACT:category]`;
    /// empty for a turn, whose words the caller reads from the store.
    pub text: String,
    /// The call and position of a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnRef>,
}

/// Where a turn is stored: its session and sequence number.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TurnRef {
    pub session_id: Uuid,
    pub seq: u32,
}

impl TurnRef {
    /// The id a turn is indexed under (stable: derived from where it is).
    pub fn doc_id(self) -> Uuid {
        Uuid::new_v5(&self.session_id, &self.seq.to_be_bytes())
    }
}

/// How many times the candidates the words too common to score by
/// re-rank (see [`Ranking::max_term_share`]).
const COMMON_RERANK: usize = 4;

/// How results are ranked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranking {
    /// Share of the keyword score (scaled to the best candidate's).
    pub keyword_weight: f32,
    /// Keyword hits re-ranked by similarity.
    pub candidates: usize,
    /// Query words held by more than this share of the agent's items are
    /// left out of the scoring (they say little and cost the most: their
    /// postings are the longest), unless every word is that common; they
    /// only re-rank the best items the other words found (read from those
    /// items' terms). 1.0 keeps every word.
    pub max_term_share: f32,
    /// A bonus for newer items among the candidates: of two items that
    /// match about as well, the newer wins (what someone said last about a
    /// thing is what holds now).
    pub recency: Option<Recency>,
    /// Items nearest the query's vector (of the same embedder) added to
    /// the keyword candidates: what shares no word with the query but
    /// means the same ("my dog" and "Rusty, our beagle"). Found by sign
    /// bits, then byte vectors, over every admitted item or, in an index
    /// with `IVF_MIN` items of the embedder, over the lists of a partition
    /// nearest the query (see `Ivf`). 0 adds none.
    pub dense: usize,
    /// Reads every admitted item's sign bits even where the index keeps a
    /// partition to probe (what the partition misses is measured so).
    pub exhaustive: bool,
    /// Each query word also matches the words nearest it in meaning that
    /// the index holds (by the built-in static word vectors): "What insect
    /// am I allergic to?" finds "a wasp got me", "which city" the city's
    /// name. `None` matches the query's own words only.
    pub related: Option<RelatedWords>,
    /// Items with the same words as a better-ranked one (a line said in
    /// many calls, "the neighbour's dog barked all night") take one place
    /// among the candidates, the newest copy's, instead of crowding out
    /// what was said once.
    pub distinct: bool,
    /// Subjects the query asks the current or an earlier value of
    /// ([`asked_about`](crate::text::asked_about)), the user's likes or
    /// dislikes, or what the user does for a living (all three:
    /// [`asked_in`](crate::text::asked_in)): the turns tagged with them
    /// ([`told_in`](crate::text::told_in)) are matched too, each as if it
    /// held one more of the query's words ("Where do I live now?" finds
    /// "we got the keys to the flat in Leith").
    pub changes: Subjects,
    /// The kinds of answer the query asks for
    /// ([`expected_in`](crate::text::expected_in)): among what its words
    /// found, the items that hold one ([`held_in`](crate::text::held_in))
    /// are raised, as by one more word too common to find by.
    pub expects: Answers,
}

/// How a query's words are widened to the words near them in meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelatedWords {
    /// At most this many per query word, the closest the index holds
    /// (each weighted by its similarity, so it counts for less than the
    /// word itself), and as many again of those in at most two items.
    pub per_word: usize,
    /// Only words at least this close (cosine of their static vectors).
    pub min_similarity: f32,
    /// The related words are taken rarest first while the items holding
    /// them number at most this many in all: a cap on what they cost.
    pub max_postings: usize,
}

/// The recency bonus: `weight` for an item from `now`, halving every
/// `half_life_days` before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recency {
    pub now: DateTime<Utc>,
    pub weight: f32,
    pub half_life_days: f32,
}

impl Recency {
    fn bonus(&self, at: DateTime<Utc>) -> f32 {
        let days = (self.now - at).num_seconds().max(0) as f32 / 86_400.0;
        self.weight * 0.5f32.powf(days / self.half_life_days.max(f32::MIN_POSITIVE))
    }
}

/// A query's filters, resolved once per search: kinds as a bit set, the
/// user as the index's number for it.
struct Filter {
    kinds: u8,
    /// The user's number in the index; `Some(0)` for a user the index
    /// holds nothing of.
    user: Option<u32>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
}

impl DocKind {
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl Filter {
    /// Kind and owner, from the packed slot alone.
    fn admits_slot(&self, m: &SlotMeta) -> bool {
        if !m.live() || self.kinds & m.kind_bit() == 0 {
            return false;
        }
        match self.user {
            Some(u) => m.user == u || (m.shared() && m.kind_bit() == DocKind::Fact.bit()),
            None => true,
        }
    }

    fn timed(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    fn admits_time(&self, d: &Doc) -> bool {
        !(self.since.is_some_and(|t| d.end < t) || self.until.is_some_and(|t| d.start > t))
    }

    fn admits(&self, m: &SlotMeta, d: &Doc) -> bool {
        self.admits_slot(m) && self.admits_time(d)
    }
}

#[derive(Debug, Clone)]
struct Doc {
    id: Uuid,
    kind: DocKind,
    user_id: Arc<str>,
    shared: bool,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    len: u32,
    /// Its distinct terms, so removing it keeps document frequencies exact.
    terms: Box<[u32]>,
    text: Arc<str>,
    vector: Option<Quantized>,
    /// A turn as a read shows it, made when it is indexed (`None` for the
    /// other kinds; where it is stored is its [`PreparedTurn::turn`](crate::retrieval::PreparedTurn::turn)).
    prepared: Option<Arc<crate::retrieval::PreparedTurn>>,
    /// A hash of its indexed words in order (stems, stopwords left out):
    /// the same for two items that say the same thing, whatever their
    /// case and punctuation.
    words: u64,
}

/// A vector kept in a quarter of the memory: one signed byte per number
/// and a scale, with the embedder's index in the agent's list (the cosine
/// it gives differs from the full vector's by well under 0.01).
#[derive(Debug, Clone)]
struct Quantized {
    embedder: u8,
    scale: f32,
    norm: f32,
    values: Box<[i8]>,
}

impl Quantized {
    fn new(embedder: u8, v: &[f32]) -> Quantized {
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let values: Box<[i8]> = v.iter().map(|x| (x / scale).round() as i8).collect();
        let norm = values
            .iter()
            .map(|x| (*x as f32 * scale).powi(2))
            .sum::<f32>()
            .sqrt();
        Quantized {
            embedder,
            scale,
            norm,
            values,
        }
    }

    /// Cosine similarity with another quantized vector (integer dot
    /// product: what a scan over every item runs).
    fn cosine_q(&self, q: &Quantized) -> f32 {
        if q.values.len() != self.values.len() || self.norm == 0.0 || q.norm == 0.0 {
            return 0.0;
        }
        dot_i8(&self.values, &q.values) as f32 * self.scale * q.scale / (self.norm * q.norm)
    }

    /// Cosine similarity with a full vector of norm `q_norm`.
    fn cosine(&self, q: &[f32], q_norm: f32) -> f32 {
        if q.len() != self.values.len() || self.norm == 0.0 || q_norm == 0.0 {
            return 0.0;
        }
        let dot: f32 = q
            .iter()
            .zip(self.values.iter())
            .map(|(a, b)| a * *b as f32)
            .sum();
        dot * self.scale / (self.norm * q_norm)
    }
}

/// The dot product of two byte vectors, in blocks the compiler turns into
/// SIMD multiply-adds (no sum overflows: 16 products of at most 2^14
/// each fit an i32 many times over).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] as i32 * y[i] as i32;
        }
    }
    let tail: i32 = ra.iter().zip(rb).map(|(x, y)| *x as i32 * *y as i32).sum();
    acc.iter().sum::<i32>() + tail
}

/// One agent's documents and postings. Removed documents leave a hole
/// (their postings are skipped, their terms' document frequencies drop at
/// once, so scores equal a fresh build's) until holes outnumber a quarter
/// of the documents and the postings are rebuilt.
#[derive(Debug, Default)]
pub struct AgentIndex {
    docs: Vec<Option<Doc>>,
    by_id: HashMap<Uuid, u32>,
    /// Hashed by foldhash, seeded at random per index: a query looks up
    /// each of its words and each of their related words (thousands), and
    /// SipHash made those the search's largest cost after the postings.
    term_ids: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    /// Row of the static word table -> the term of that row's stem, for
    /// the terms the table holds: a related word found by its number, not
    /// by hashing its stem again (it grows with the agent's words, not
    /// with the table).
    row_terms: HashMap<u32, u32, foldhash::fast::RandomState>,
    /// Per term: (document slot, term frequency).
    postings: Vec<Vec<(u32, u16)>>,
    /// Per term: live documents holding it.
    df: Vec<u32>,
    live: usize,
    total_len: u64,
    /// Names of the embedders of the vectors held (rarely more than one).
    embedders: Vec<String>,
    /// User ids, shared by their documents, and their numbers (from 1;
    /// a forgotten user's number is not given again).
    users: HashMap<Arc<str>, u32>,
    next_user: u32,
    /// Per slot, what the scoring loop reads, packed so that it never
    /// touches a document: its length and who may see it.
    slots: Vec<SlotMeta>,
    /// Per slot, the first `HEAD_WORDS` words of its vector's sign bits
    /// (zeros without one): all a scan reads of every item.
    heads: Vec<[u64; HEAD_WORDS]>,
    /// Per slot, the rest of the sign bits: read for the scan's shortlist.
    tails: Vec<[u64; TAIL_WORDS]>,
    /// Per embedder (by position in `embedders`), the live slots holding
    /// its vector.
    coded: Vec<usize>,
    /// The partition the vector scan probes once an embedder has
    /// `IVF_MIN` items, and per slot the list it is in (`NO_LIST`: none).
    ivf: Option<Ivf>,
    list_of: Vec<u16>,
    /// Per user, the names each side was called by in their calls (see
    /// [`AgentIndex::participants`]).
    addressed: HashMap<Arc<str>, crate::text::Addressed>,
    /// How its retrieved turns name the agent side, and the agent's time
    /// zone, their relative dates are resolved in.
    speakers: TurnSpeakers,
}

/// See [`AgentIndex::speakers`](AgentIndex).
#[derive(Debug)]
struct TurnSpeakers {
    agent_label: Arc<str>,
    zone: chrono_tz::Tz,
}

impl Default for TurnSpeakers {
    fn default() -> Self {
        TurnSpeakers {
            agent_label: crate::retrieval::agent_label("agent"),
            zone: chrono_tz::UTC,
        }
    }
}

/// An inverted file over sign codes: the coded slots of one embedder,
/// parted by their nearest of `IVF_LISTS` centroids (binary k-means:
/// each centroid is its members' majority bit). A search reads the
/// centroids, then the lists of the closest until it has probed
/// `IVF_PROBE` lists and holds enough admitted items: a few percent of a
/// large index instead of all of it, at the cost of missing a near item
/// filed under a centroid not probed (the bench reports the overlap with
/// the full scan).
#[derive(Debug)]
struct Ivf {
    embedder: u8,
    centroids: Vec<[u64; CODE_WORDS]>,
    /// Per centroid, its slots with their codes (a copy, so a probe reads
    /// one list in order instead of the codes of slots all over).
    lists: Vec<Vec<(u32, [u64; CODE_WORDS])>>,
    /// Coded slots when the centroids were trained: trained again when
    /// there are four times as many.
    trained_on: usize,
}

/// Coded slots of one embedder from which the scan probes a partition.
const IVF_MIN: usize = 20_000;
const IVF_LISTS: usize = 256;
const IVF_PROBE: usize = 16;
/// Codes the centroids are trained on (evenly spaced), and rounds.
const IVF_SAMPLE: usize = 8_192;
const IVF_ROUNDS: usize = 4;
const NO_LIST: u16 = u16::MAX;

fn hamming(a: &[u64; CODE_WORDS], b: &[u64; CODE_WORDS]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

fn nearest_centroid(centroids: &[[u64; CODE_WORDS]], code: &[u64; CODE_WORDS]) -> u16 {
    let mut best = (u32::MAX, 0u16);
    for (i, c) in centroids.iter().enumerate() {
        let d = hamming(c, code);
        if d < best.0 {
            best = (d, i as u16);
        }
    }
    best.1
}

/// Binary k-means over `codes`: `IVF_LISTS` centroids, seeded evenly
/// spaced through a sample, refined `IVF_ROUNDS` times. Deterministic.
fn train_centroids(codes: &[[u64; CODE_WORDS]]) -> Vec<[u64; CODE_WORDS]> {
    let step = codes.len().div_ceil(IVF_SAMPLE).max(1);
    let sample: Vec<&[u64; CODE_WORDS]> = codes.iter().step_by(step).collect();
    let k = IVF_LISTS.min(sample.len()).max(1);
    let mut centroids: Vec<[u64; CODE_WORDS]> =
        (0..k).map(|i| *sample[i * sample.len() / k]).collect();
    for _ in 0..IVF_ROUNDS {
        let mut counts = vec![[0u32; CODE_BITS]; k];
        let mut members = vec![0u32; k];
        for code in &sample {
            let c = nearest_centroid(&centroids, code) as usize;
            members[c] += 1;
            for (bit, n) in counts[c].iter_mut().enumerate() {
                *n += ((code[bit / 64] >> (bit % 64)) & 1) as u32;
            }
        }
        for (c, centroid) in centroids.iter_mut().enumerate() {
            if members[c] == 0 {
                continue;
            }
            let mut next = [0u64; CODE_WORDS];
            for (bit, &n) in counts[c].iter().enumerate() {
                if 2 * n > members[c] {
                    next[bit / 64] |= 1 << (bit % 64);
                }
            }
            *centroid = next;
        }
    }
    centroids
}

/// A slot's length, kind, owner (by number) and whether it is shared or
/// empty, in 8 bytes.
#[derive(Debug, Clone, Copy)]
struct SlotMeta {
    /// The owner's number in `AgentIndex::users`.
    user: u32,
    /// In words, at most `u16::MAX` (a longer item scores as that long).
    len: u16,
    /// The kind's bit, `SHARED` and `LIVE`.
    bits: u8,
    /// The embedder of the slot's vector ([`NO_CODE`]: none; its sign
    /// bits are in `AgentIndex::codes`).
    code_embedder: u8,
}

const SHARED: u8 = 0x40;
const LIVE: u8 = 0x80;
// The kinds' bits (Turn, the last kind, is 5) stay below SHARED, and a
// slot is 8 bytes (what the keyword loop reads per posting).
const _: () = assert!(DocKind::Turn as u8 <= 5 && std::mem::size_of::<SlotMeta>() == 8);

impl SlotMeta {
    fn live(&self) -> bool {
        self.bits & LIVE != 0
    }

    fn shared(&self) -> bool {
        self.bits & SHARED != 0
    }

    fn kind_bit(&self) -> u8 {
        self.bits & !(SHARED | LIVE)
    }
}

/// A vector scan compares sign bits first: the Hamming distance of two
/// vectors' signs tracks the angle between them (it is how binary
/// quantization searches). It runs in three steps, each on fewer items
/// with more of each: the first `HEAD_WORDS` words of every item's bits
/// (a scan bound by memory: 16 bytes an item, not 48), then all
/// `CODE_BITS` bits of the closest `COARSE_FACTOR` per item asked for,
/// then the full (byte) vectors of the closest `SHORTLIST_FACTOR` per
/// item asked for, so only the shortlists' order depends on the bits. A
/// vector longer than `CODE_BITS` numbers is shortlisted by its first
/// `CODE_BITS` signs.
const CODE_WORDS: usize = 6;
const HEAD_WORDS: usize = 2;
const TAIL_WORDS: usize = CODE_WORDS - HEAD_WORDS;
const CODE_BITS: usize = CODE_WORDS * 64;
const NO_CODE: u8 = u8::MAX;
/// Kept by the head bits per item asked for.
const COARSE_FACTOR: usize = 32;
/// Kept by all the bits per item asked for.
const SHORTLIST_FACTOR: usize = 4;
/// How far past the candidates wanted [`Ranking::distinct`] looks for
/// items that are not repeats.
const REPEATS_WIDEN: usize = 4;

fn split_code(code: [u64; CODE_WORDS]) -> ([u64; HEAD_WORDS], [u64; TAIL_WORDS]) {
    let mut head = [0; HEAD_WORDS];
    let mut tail = [0; TAIL_WORDS];
    head.copy_from_slice(&code[..HEAD_WORDS]);
    tail.copy_from_slice(&code[HEAD_WORDS..]);
    (head, tail)
}

fn sign_code<T: Copy + PartialOrd + Default>(v: &[T]) -> [u64; CODE_WORDS] {
    let mut code = [0u64; CODE_WORDS];
    for (i, x) in v.iter().take(CODE_BITS).enumerate() {
        if *x > T::default() {
            code[i / 64] |= 1 << (i % 64);
        }
    }
    code
}

/// The closest `keep` slots by Hamming distance of their codes to `q`
/// among those `admit` lets through (asked only of slots close enough to
/// be kept), as (distance, slot). One pass over the codes, pruned as the
/// list grows: past the first `2 * keep` admitted, a slot is looked at only
/// when it beats the farthest kept.
fn head_shortlist<const N: usize>(
    codes: &[[u64; N]],
    q: &[u64; N],
    keep: usize,
    admit: impl FnMut(usize) -> bool,
) -> Vec<(u32, u32)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has the instruction the function is compiled
        // with (checked just above).
        return unsafe { head_shortlist_popcnt(codes, q, keep, admit) };
    }
    head_shortlist_portable(codes, q, keep, admit)
}

#[inline(always)]
fn head_shortlist_portable<const N: usize>(
    codes: &[[u64; N]],
    q: &[u64; N],
    keep: usize,
    mut admit: impl FnMut(usize) -> bool,
) -> Vec<(u32, u32)> {
    let mut short = Shortlist::new(keep);
    for (slot, c) in codes.iter().enumerate() {
        let d: u32 = c.iter().zip(q).map(|(x, y)| (x ^ y).count_ones()).sum();
        short.offer(d, slot as u32, &mut admit);
    }
    short.finish()
}

/// The closest `keep` (distance, slot) pairs offered, pruned as they
/// come: past the first `2 * keep` admitted, a slot is looked at only when
/// it beats the farthest kept.
struct Shortlist {
    keep: usize,
    short: Vec<(u32, u32)>,
    cutoff: u32,
    /// Slots admitted so far (those under the cutoff).
    admitted: usize,
}

impl Shortlist {
    fn new(keep: usize) -> Self {
        let keep = keep.max(1);
        Shortlist {
            keep,
            short: Vec::with_capacity(2 * keep),
            cutoff: u32::MAX,
            admitted: 0,
        }
    }

    #[inline(always)]
    fn offer(&mut self, d: u32, slot: u32, admit: &mut impl FnMut(usize) -> bool) {
        if d >= self.cutoff || !admit(slot as usize) {
            return;
        }
        self.admitted += 1;
        self.short.push((d, slot));
        if self.short.len() >= 2 * self.keep {
            self.short.select_nth_unstable(self.keep - 1);
            self.short.truncate(self.keep);
            self.cutoff = self.short.iter().map(|s| s.0).max().unwrap_or(u32::MAX);
        }
    }

    fn finish(mut self) -> Vec<(u32, u32)> {
        if self.short.len() > self.keep {
            self.short.select_nth_unstable(self.keep - 1);
            self.short.truncate(self.keep);
        }
        self.short
    }
}

/// The same pass with the CPU's population count (without it, counting
/// bits is a dozen instructions a word: most of a 100,000-item scan).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn head_shortlist_popcnt<const N: usize>(
    codes: &[[u64; N]],
    q: &[u64; N],
    keep: usize,
    admit: impl FnMut(usize) -> bool,
) -> Vec<(u32, u32)> {
    head_shortlist_portable(codes, q, keep, admit)
}

/// A related word in at most this many of an agent's items counts as said
/// once or twice (see [`AgentIndex::search`]).
const RARE_RELATED_DF: u32 = 2;

/// The tokens an item is indexed under and a query is split into: content
/// words, lowercased, reduced to their English Snowball stem
/// ("interviewers" and "interview" meet).
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut after_grew = false;
    text::words(text).flat_map(move |w| {
        let keep = |w: &str| w.chars().count() >= 2 && !text::is_stopword(w);
        // "brought up" and "grew up" are said as "raised" too ("Born and
        // raised").
        let raised = after_grew && w == "up";
        after_grew = matches!(w.as_str(), "brought" | "grew" | "growing");
        // A hyphened word is also its parts: "brother-in-law" is asked
        // of as "my wife's brother", "gluten-free" as "no gluten". (The
        // rare extra tokens take the one allocation.)
        let extra = (raised || w.contains('-')).then(|| {
            let mut more: Vec<String> = if w.contains('-') {
                w.split('-').filter(|p| keep(p)).map(stem).collect()
            } else {
                Vec::new()
            };
            if raised {
                more.push(stem("raised"));
            }
            more
        });
        keep(&w)
            .then(|| stem(&w))
            .into_iter()
            .chain(extra.into_iter().flatten())
    })
}

/// A question's words without the ones that only frame it as a question
/// about the past or present ("these days", "used to", "remind me",
/// "what kind of"): they match small talk ("some days", "I used to") and
/// never the thing asked about.
pub fn without_question_framing(question: &str) -> String {
    const PHRASES: [&str; 9] = [
        "these days",
        "used to",
        "remind me",
        "kind of",
        "sort of",
        "type of",
        "at the moment",
        "right now",
        "any more",
    ];
    const WORDS: [&str; 6] = [
        "nowadays",
        "currently",
        "anymore",
        "lately",
        "remind",
        "again",
    ];
    let lower = question.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let bare = |w: &str| -> String { w.trim_matches(|c: char| !c.is_alphanumeric()).to_string() };
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        // A phrase matches whole words only ("kind of", never "mankind of").
        let phrase = PHRASES.iter().find_map(|p| {
            let n = p.split(' ').count();
            let here: Vec<String> = words.get(i..i + n)?.iter().map(|w| bare(w)).collect();
            (here.join(" ") == *p).then_some(n)
        });
        if let Some(n) = phrase {
            i += n;
            continue;
        }
        if !WORDS.contains(&bare(words[i]).as_str()) {
            out.push(words[i]);
        }
        i += 1;
    }
    out.join(" ")
}

/// A lowercased word's stem. Irregular verb forms, which a suffix
/// stemmer cannot join to their verb ("grew", "bought"), are taken to the
/// verb first, and the short forms typed chat uses for relations and
/// days ("gf", "bday", "hubby") to their word. (Other words for a
/// relation, "missus" for a wife, are the related-word vectors' to join.)
///
/// Kept per thread for the last few thousand words: a word stemmed again
/// (most are: an index of 100,000 turns says a few thousand words) is a
/// lookup, not two table searches and the Snowball steps.
pub fn stem(word: &str) -> String {
    STEMS.with(|cell| {
        let mut kept = cell.borrow_mut();
        if let Some(s) = kept.get(word) {
            return s.to_string();
        }
        let s = stem_anew(word);
        if kept.len() >= STEMS_KEPT {
            kept.clear();
        }
        kept.insert(word.into(), s.as_str().into());
        s
    })
}

/// How many words' stems a thread keeps (about half a megabyte); past it
/// the kept set starts again.
const STEMS_KEPT: usize = 8_192;

type KeptStems = HashMap<Box<str>, Box<str>, foldhash::fast::FixedState>;

thread_local! {
    /// The stems [`stem`] keeps, by word.
    static STEMS: std::cell::RefCell<KeptStems> = std::cell::RefCell::new(KeptStems::default());
}

fn stem_anew(word: &str) -> String {
    let word = IRREGULAR
        .binary_search_by(|(form, _)| form.cmp(&word))
        .map_or(word, |i| IRREGULAR[i].1);
    let word = SHORT_FORMS
        .binary_search_by(|(form, _)| form.cmp(&word))
        .map_or(word, |i| SHORT_FORMS[i].1);
    STEMMER.stem(word).into_owned()
}

/// Whether a lowercased word is the past form of an irregular verb
/// ("bought", "grew"); see [`IRREGULAR`] for what is left out.
pub(crate) fn is_irregular_past(word: &str) -> bool {
    IRREGULAR
        .binary_search_by(|(form, _)| form.cmp(&word))
        .is_ok()
}

/// The short forms typed chat uses for relations and days, and their
/// word, sorted by form: the index and the fact rules (`text::facts`) read
/// them as their word.
pub(crate) const SHORT_FORMS: &[(&str, &str)] = &[
    ("bday", "birthday"),
    ("bf", "boyfriend"),
    ("gf", "girlfriend"),
    ("hubby", "husband"),
];

/// Past forms of common irregular English verbs and their verb, sorted by
/// form. Forms that are also everyday nouns or adjectives in their own
/// right ("left", "ground", "saw", "lay", "felt") or names and short forms
/// ("Rose", "Sat") are left out.
const IRREGULAR: &[(&str, &str)] = &[
    ("ate", "eat"),
    ("became", "become"),
    ("began", "begin"),
    ("begun", "begin"),
    ("bent", "bend"),
    ("bled", "bleed"),
    ("blew", "blow"),
    ("blown", "blow"),
    ("bought", "buy"),
    ("bred", "breed"),
    ("broke", "break"),
    ("broken", "break"),
    ("brought", "bring"),
    ("built", "build"),
    ("came", "come"),
    ("caught", "catch"),
    ("chose", "choose"),
    ("chosen", "choose"),
    ("dealt", "deal"),
    ("drank", "drink"),
    ("drawn", "draw"),
    ("drew", "draw"),
    ("driven", "drive"),
    ("drove", "drive"),
    ("dug", "dig"),
    ("eaten", "eat"),
    ("fallen", "fall"),
    ("fed", "feed"),
    ("fell", "fall"),
    ("fled", "flee"),
    ("flew", "fly"),
    ("flown", "fly"),
    ("forgot", "forget"),
    ("forgotten", "forget"),
    ("fought", "fight"),
    ("found", "find"),
    ("froze", "freeze"),
    ("frozen", "freeze"),
    ("gave", "give"),
    ("given", "give"),
    ("gone", "go"),
    ("got", "get"),
    ("gotten", "get"),
    ("grew", "grow"),
    ("grown", "grow"),
    ("heard", "hear"),
    ("held", "hold"),
    ("hid", "hide"),
    ("hidden", "hide"),
    ("hung", "hang"),
    ("kept", "keep"),
    ("knew", "know"),
    ("known", "know"),
    ("led", "lead"),
    ("lent", "lend"),
    ("lost", "lose"),
    ("made", "make"),
    ("meant", "mean"),
    ("met", "meet"),
    ("paid", "pay"),
    ("ran", "run"),
    ("rang", "ring"),
    ("ridden", "ride"),
    ("risen", "rise"),
    ("rode", "ride"),
    ("sang", "sing"),
    ("sank", "sink"),
    ("sent", "send"),
    ("shook", "shake"),
    ("shot", "shoot"),
    ("slept", "sleep"),
    ("sold", "sell"),
    ("sought", "seek"),
    ("spent", "spend"),
    ("spoke", "speak"),
    ("spoken", "speak"),
    ("stole", "steal"),
    ("stolen", "steal"),
    ("stood", "stand"),
    ("stuck", "stick"),
    ("sung", "sing"),
    ("swam", "swim"),
    ("swept", "sweep"),
    ("swore", "swear"),
    ("swum", "swim"),
    ("taken", "take"),
    ("taught", "teach"),
    ("thought", "think"),
    ("threw", "throw"),
    ("thrown", "throw"),
    ("told", "tell"),
    ("took", "take"),
    ("understood", "understand"),
    ("went", "go"),
    ("woke", "wake"),
    ("woken", "wake"),
    ("won", "win"),
    ("wore", "wear"),
    ("worn", "wear"),
    ("written", "write"),
    ("wrote", "write"),
];

/// A fact's archival text.
pub fn fact_text(f: &Fact) -> String {
    format!(
        "[FACT:{}]\nExtracted: {}\n\n{}\n[/FACT]",
        f.category.as_str(),
        isoformat(&f.extracted_at),
        f.content
    )
}

impl AgentIndex {
    /// An empty index of `agent_id`'s, whose turns' relative dates are
    /// resolved in `zone`.
    pub fn new(agent_id: &str, zone: chrono_tz::Tz) -> AgentIndex {
        AgentIndex {
            speakers: TurnSpeakers {
                agent_label: crate::retrieval::agent_label(agent_id),
                zone,
            },
            ..AgentIndex::default()
        }
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Adds or replaces a summary. A superseded one is removed instead.
    pub fn put_summary(&mut self, s: &ConversationSummary, vector: Option<StoredVector>) {
        if !s.is_current() {
            self.remove(s.summary_id);
            return;
        }
        let quantized = self.quantize(vector);
        let user_id = self.user(&s.user_id);
        let body = format!(
            "{}\n{}\n{}",
            s.summary_text,
            s.topics.join(" "),
            s.key_entities.join(" ")
        );
        self.put(
            Doc {
                id: s.summary_id,
                kind: DocKind::of(s.summary_type),
                user_id,
                shared: false,
                start: s.period_start,
                end: s.period_end,
                len: 0,
                terms: Box::default(),
                text: s.to_archival_text().into(),
                vector: quantized,
                prepared: None,
                words: 0,
            },
            &body,
            Subjects::NONE,
            Answers::NONE,
        );
    }

    pub fn put_fact(&mut self, f: &Fact, vector: Option<StoredVector>) {
        let quantized = self.quantize(vector);
        let user_id = self.user(&f.user_id);
        self.put(
            Doc {
                id: f.fact_id,
                kind: DocKind::Fact,
                user_id,
                shared: f.visibility == Visibility::Shared,
                start: f.extracted_at,
                end: f.extracted_at,
                len: 0,
                terms: Box::default(),
                text: fact_text(f).into(),
                vector: quantized,
                prepared: None,
                words: 0,
            },
            &f.content,
            Subjects::NONE,
            Answers::NONE,
        );
    }

    /// Adds (or replaces) the turns of an ended call, each under its own
    /// id: the user's words and the agent's answer are one document.
    pub fn put_turns(
        &mut self,
        user_id: &str,
        session_id: Uuid,
        turns: &[(u32, ConversationTurn)],
    ) {
        self.put_turns_with(user_id, session_id, turns, None);
    }

    /// [`put_turns`](Self::put_turns), each turn with the vector of its
    /// user's words made by `inline`, if given
    /// ([`Embed::embed_now`](crate::embed::Embed::embed_now)): what the
    /// Rollup actor embeds and stores for another embedder.
    pub fn put_turns_with(
        &mut self,
        user_id: &str,
        session_id: Uuid,
        turns: &[(u32, ConversationTurn)],
        inline: Option<&dyn crate::embed::Embed>,
    ) {
        let user = self.user(user_id);
        let names: Vec<_> = turns
            .iter()
            .flat_map(|(_, t)| {
                let said = crate::text::names_in(Speaker::User, &t.user_message);
                said.into_iter()
                    .chain(crate::text::names_in(Speaker::Agent, &t.agent_response))
            })
            .collect();
        let addressed = self.addressed.entry(user.clone()).or_default();
        addressed.put_call(session_id, names);
        if addressed.is_empty() {
            self.addressed.remove(&user);
        }
        for (seq, t) in turns {
            let vector = inline.zip(t.vector_text()).and_then(|(e, text)| {
                Some(StoredVector {
                    embedder: e.name().to_string(),
                    values: e.embed_now(&text)?,
                })
            });
            let vector = self.quantize(vector);
            let r = TurnRef {
                session_id,
                seq: *seq,
            };
            let body = format!("{}\n{}", t.user_message, t.agent_response);
            let who = crate::retrieval::Speakers {
                user_id: &user,
                agent_label: &self.speakers.agent_label,
                zone: self.speakers.zone,
            };
            let prepared = Arc::new(crate::retrieval::prepare(who, r, t));
            self.put(
                Doc {
                    id: r.doc_id(),
                    kind: DocKind::Turn,
                    user_id: user.clone(),
                    shared: false,
                    start: t.timestamp,
                    end: t.timestamp,
                    len: 0,
                    terms: Box::default(),
                    text: NO_TEXT.clone(),
                    vector,
                    prepared: Some(prepared),
                    words: 0,
                },
                &body,
                crate::text::told_in(&t.user_message),
                crate::text::held_in(&t.user_message),
            );
        }
    }

    /// The stored turn `r` and those either side of it in its call, as a
    /// read shows them (prepared when they were indexed); `None` when the
    /// index does not hold `r`.
    pub fn turns_around(&self, r: TurnRef) -> Option<crate::retrieval::Around> {
        let at = |slot: u32, seq: u32| {
            let d = self.docs.get(slot as usize)?.as_ref()?;
            d.prepared
                .as_ref()
                .filter(|p| p.turn() == TurnRef { seq, ..r })
                .cloned()
        };
        // A call's turns are indexed together, in order: the turns either
        // side are most often in the slots either side (else looked up by
        // their ids, a hash each).
        let by_id = |seq: u32| at(*self.by_id.get(&TurnRef { seq, ..r }.doc_id())?, seq);
        let slot = *self.by_id.get(&r.doc_id())?;
        let hit = at(slot, r.seq)?;
        let side = |seq: Option<u32>, slot: Option<u32>| {
            let seq = seq?;
            slot.and_then(|s| at(s, seq)).or_else(|| by_id(seq))
        };
        let before = side(r.seq.checked_sub(1), slot.checked_sub(1));
        let after = side(r.seq.checked_add(1), slot.checked_add(1));
        Some(before.into_iter().chain([hit]).chain(after).collect())
    }

    /// Removes everything of one user (a forget).
    pub fn remove_user(&mut self, user_id: &str) {
        let ids: Vec<Uuid> = self
            .docs
            .iter()
            .flatten()
            .filter(|d| &*d.user_id == user_id)
            .map(|d| d.id)
            .collect();
        for id in ids {
            self.remove(id);
        }
        self.users.remove(user_id);
        self.addressed.remove(user_id);
    }

    /// The names `user_id` and the agent (`agent_id`, this index's) go by
    /// in their calls: from the ids and from how each addressed the other
    /// in the calls indexed.
    pub fn participants(&self, user_id: &str, agent_id: &str) -> crate::text::Participants {
        crate::text::Participants::new(user_id, agent_id, self.addressed.get(user_id))
    }

    /// Every document's id and owner, for checks that nothing of a user is
    /// left.
    pub fn owners(&self) -> impl Iterator<Item = (Uuid, &str)> + '_ {
        self.docs.iter().flatten().map(|d| (d.id, &*d.user_id))
    }

    fn user(&mut self, user_id: &str) -> Arc<str> {
        if let Some((u, _)) = self.users.get_key_value(user_id) {
            return u.clone();
        }
        let u: Arc<str> = Arc::from(user_id);
        // 0 is "no user" and numbers are not reused. Cannot overflow: 2^32
        // users of one agent's index would hold more than any memory.
        self.next_user = self
            .next_user
            .checked_add(1)
            .expect("fewer than 2^32 users per index");
        self.users.insert(u.clone(), self.next_user);
        u
    }

    /// Attaches a vector to an indexed item (no-op for unknown ids).
    pub fn set_vector(&mut self, id: Uuid, vector: StoredVector) {
        let Some(&slot) = self.by_id.get(&id) else {
            return;
        };
        let q = self.quantize(Some(vector));
        if let (Some(m), Some(head), Some(tail)) = (
            self.slots.get_mut(slot as usize),
            self.heads.get_mut(slot as usize),
            self.tails.get_mut(slot as usize),
        ) {
            let code;
            let old = m.code_embedder;
            (m.code_embedder, code) = match &q {
                Some(q) if q.embedder != NO_CODE => (q.embedder, sign_code(&q.values)),
                _ => (NO_CODE, [0; CODE_WORDS]),
            };
            (*head, *tail) = split_code(code);
            let new = m.code_embedder;
            if m.live() {
                self.recode(slot as usize, old, new);
            }
        }
        if let Some(Some(d)) = self.docs.get_mut(slot as usize) {
            d.vector = q;
        }
    }

    fn quantize(&mut self, v: Option<StoredVector>) -> Option<Quantized> {
        let v = v?;
        let idx = match self.embedders.iter().position(|e| *e == v.embedder) {
            Some(i) => i,
            None => {
                self.embedders.push(v.embedder);
                self.embedders.len() - 1
            }
        };
        // Index `NO_CODE` and beyond would read as "no vector" or wrap:
        // vectors of a 255th embedder are kept without a code.
        let e = u8::try_from(idx).ok().filter(|&e| e != NO_CODE)?;
        Some(Quantized::new(e, &v.values))
    }

    /// Indexes `doc` under the words of `body`, the terms of the subjects
    /// it tells a change of and those of the kinds of answer it holds (not
    /// counted in its length, nor in what it says for
    /// [`Ranking::distinct`]).
    fn put(&mut self, mut doc: Doc, body: &str, changes: Subjects, holds: Answers) {
        self.remove(doc.id);
        let mut tf: HashMap<String, u16> = HashMap::new();
        let mut len = 0u32;
        let mut words = std::hash::DefaultHasher::new();
        for t in tokens(body) {
            len += 1;
            t.hash(&mut words);
            let n = tf.entry(t).or_insert(0);
            *n = n.saturating_add(1);
        }
        for t in changes.terms().chain(holds.terms()) {
            tf.insert(t.to_string(), 1);
        }
        doc.len = len;
        doc.words = words.finish();
        let slot = self.docs.len() as u32;
        let mut terms = Vec::with_capacity(tf.len());
        for (t, n) in tf {
            let id = match self.term_ids.get(t.as_str()) {
                Some(&id) => id,
                None => {
                    let id = self.postings.len() as u32;
                    if let Some(row) = crate::static_embed::stem_row(&t) {
                        self.row_terms.insert(row, id);
                    }
                    self.term_ids.insert(t.into_boxed_str(), id);
                    self.postings.push(Vec::new());
                    self.df.push(0);
                    id
                }
            };
            self.postings[id as usize].push((slot, n));
            self.df[id as usize] += 1;
            terms.push(id);
        }
        terms.sort_unstable();
        doc.terms = terms.into_boxed_slice();
        self.by_id.insert(doc.id, slot);
        let (code_embedder, code) = match &doc.vector {
            Some(q) if q.embedder != NO_CODE => (q.embedder, sign_code(&q.values)),
            _ => (NO_CODE, [0; CODE_WORDS]),
        };
        self.slots.push(SlotMeta {
            user: self.users.get(&*doc.user_id).copied().unwrap_or(0),
            len: u16::try_from(len).unwrap_or(u16::MAX),
            bits: doc.kind.bit() | LIVE | if doc.shared { SHARED } else { 0 },
            code_embedder,
        });
        let (head, tail) = split_code(code);
        self.heads.push(head);
        self.tails.push(tail);
        self.recode(slot as usize, NO_CODE, code_embedder);
        self.docs.push(Some(doc));
        self.live += 1;
        self.total_len += len as u64;
    }

    /// The `keep` best of `cands` (score, slot) with different words: of
    /// items that say the same, the best scored, the newest on a tie
    /// (the later slot). Looked for among the `keep * REPEATS_WIDEN` best.
    fn distinct_best(&self, cands: &mut Vec<(f32, u32)>, keep: usize) {
        let wide = keep.saturating_mul(REPEATS_WIDEN);
        // Keyword scores are positive, and a positive float's bits order as
        // it does: (score, slot) orders as one integer, which selects and
        // sorts in a fraction of the time of a float comparison.
        debug_assert!(cands.iter().all(|c| c.0 > 0.0));
        let key =
            |c: &(f32, u32)| std::cmp::Reverse((u64::from(c.0.to_bits()) << 32) | u64::from(c.1));
        if cands.len() > wide {
            cands.select_nth_unstable_by_key(wide - 1, key);
            cands.truncate(wide);
        }
        cands.sort_unstable_by_key(key);
        let mut seen = HashSet::with_capacity(keep);
        let mut kept = 0;
        cands.retain(|&(_, slot)| {
            let fresh = kept < keep && self.doc(slot).is_some_and(|d| seen.insert(d.words));
            kept += usize::from(fresh);
            fresh
        });
    }

    pub fn remove(&mut self, id: Uuid) {
        let Some(slot) = self.by_id.remove(&id) else {
            return;
        };
        if let Some(doc) = self.docs.get_mut(slot as usize).and_then(Option::take) {
            if let Some(m) = self.slots.get_mut(slot as usize) {
                m.bits &= !LIVE;
                let old = std::mem::replace(&mut m.code_embedder, NO_CODE);
                self.recode(slot as usize, old, NO_CODE);
            }
            self.live -= 1;
            self.total_len -= doc.len as u64;
            for t in doc.terms.iter() {
                if let Some(n) = self.df.get_mut(*t as usize) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if self.docs.len() - self.live > self.live.max(64) / 4 {
            self.compact();
        }
    }

    /// Drops the holes: renumbers documents and rebuilds the postings.
    fn compact(&mut self) {
        let mut remap = vec![u32::MAX; self.docs.len()];
        let mut docs = Vec::with_capacity(self.live);
        for (old, d) in std::mem::take(&mut self.docs).into_iter().enumerate() {
            if let Some(d) = d {
                remap[old] = docs.len() as u32;
                docs.push(Some(d));
            }
        }
        self.docs = docs;
        let slots = std::mem::take(&mut self.slots);
        let heads = std::mem::take(&mut self.heads);
        let tails = std::mem::take(&mut self.tails);
        let mut list_of = std::mem::take(&mut self.list_of);
        list_of.resize(slots.len(), NO_LIST);
        let mut kept = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (((m, h), t), l) in slots.into_iter().zip(heads).zip(tails).zip(list_of) {
            if m.live() {
                kept.0.push(m);
                kept.1.push(h);
                kept.2.push(t);
                kept.3.push(l);
            }
        }
        (self.slots, self.heads, self.tails, self.list_of) = kept;
        // The partition's lists, renumbered.
        if let Some(mut ivf) = self.ivf.take() {
            ivf.lists.iter_mut().for_each(Vec::clear);
            for (slot, &l) in self.list_of.iter().enumerate() {
                if l != NO_LIST {
                    ivf.lists[l as usize].push((slot as u32, self.code(slot)));
                }
            }
            self.ivf = Some(ivf);
        }
        for list in self.postings.iter_mut() {
            list.retain_mut(|(slot, _)| {
                let new = remap[*slot as usize];
                *slot = new;
                new != u32::MAX
            });
        }
        for slot in self.by_id.values_mut() {
            *slot = remap[*slot as usize];
        }
    }

    fn filter(&self, q: &SearchQuery) -> Filter {
        let kinds = if q.kinds.is_empty() {
            !DocKind::Turn.bit()
        } else {
            q.kinds.iter().fold(0, |m, k| m | k.bit())
        };
        Filter {
            kinds,
            user: q
                .user_id
                .as_ref()
                .map(|u| self.users.get(u.as_str()).copied().unwrap_or(0)),
            since: q.since,
            until: q.until,
        }
    }

    /// The `q.limit` best items for the query, best first. `vector` is the
    /// query's (by the same embedder as the items', else similarity is 0).
    pub fn search(
        &self,
        q: &SearchQuery,
        vector: Option<&StoredVector>,
        ranking: Ranking,
    ) -> Vec<SearchHit> {
        if q.limit == 0 || self.live == 0 {
            return Vec::new();
        }
        let n = self.live as f32;
        let avg = (self.total_len as f32 / n).max(1.0);
        let filter = self.filter(q);
        let mut terms: Vec<String> = tokens(&q.text).collect();
        terms.sort();
        terms.dedup();
        // The words asked, before the common ones are left out: a word no
        // item holds, or one too common to rank by, may still have rare
        // relatives ("insect" never said, "wasp" once).
        let asked = terms.clone();
        let most = if ranking.max_term_share < 1.0 {
            (n * ranking.max_term_share).max(1.0)
        } else {
            n
        };
        let df = |t: &str| {
            self.term_ids
                .get(t)
                .map_or(0.0, |&id| self.df[id as usize] as f32)
        };
        // The words left out for being common, with their weight.
        let mut common: Vec<(u32, f32)> = Vec::new();
        if ranking.max_term_share < 1.0 {
            // A word no item holds says nothing about which words are rare.
            terms.retain(|t| df(t) > 0.0);
            if terms.iter().any(|t| df(t) <= most) {
                for t in terms.iter().filter(|t| df(t) > most) {
                    if let Some(&id) = self.term_ids.get(t.as_str()) {
                        let df = self.df[id as usize] as f32;
                        common.push((id, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()));
                    }
                }
                terms.retain(|t| df(t) <= most);
            }
        }
        // The kinds of answer asked for re-rank as a common word does.
        for t in ranking.expects.terms() {
            if let Some(&id) = self.term_ids.get(t) {
                let df = self.df[id as usize] as f32;
                common.push((id, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()));
            }
        }
        // Each word counted at its weight: the query's own at 1, a related
        // word at its similarity to the query's words, summed when it is
        // near several ("hometown" to "city" and "live"), never above 1.
        let mut weighted: Vec<(u32, f32)> = terms
            .iter()
            .filter_map(|t| Some((*self.term_ids.get(t.as_str())?, 1.0)))
            .collect();
        if let Some(rel) = ranking.related.filter(|r| r.per_word > 0) {
            let own = weighted.len();
            // The asked words the index holds, by number (a related word
            // that is one of them counts as itself, once).
            let asked_ids: Vec<u32> = asked
                .iter()
                .filter_map(|t| self.term_ids.get(t.as_str()).copied())
                .collect();
            for t in &asked {
                let near = crate::static_embed::related_stems(t, rel.min_similarity);
                // A relative said only once or twice (a place, a car's
                // model, a drink by its brand: "Chapel Allerton" for
                // "neighbourhood", "Micra" for "drive") is what a question
                // about a part of a life is often after, and the cheapest
                // to score: such words have `per_word` places of their own,
                // beside the commoner relatives'.
                let (mut common_left, mut rare_left) = (rel.per_word, rel.per_word);
                let mut held = Vec::with_capacity(2 * rel.per_word);
                for r in near.iter() {
                    if common_left == 0 && rare_left == 0 {
                        break;
                    }
                    let Some(&id) = self.row_terms.get(&r.row()) else {
                        continue;
                    };
                    let df = self.df[id as usize];
                    if asked_ids.contains(&id) || df == 0 || df as f32 > most {
                        continue;
                    }
                    let left = if df <= RARE_RELATED_DF {
                        &mut rare_left
                    } else {
                        &mut common_left
                    };
                    if *left > 0 {
                        *left -= 1;
                        held.push((id, r.similarity));
                    }
                }
                for (id, sim) in held {
                    match weighted[own..].iter_mut().find(|w| w.0 == id) {
                        Some(w) => w.1 = (w.1 + sim).min(1.0),
                        None => weighted.push((id, sim)),
                    }
                }
            }
            // Rarest first, while their postings stay within the budget:
            // a related word as common as "day" says little and costs the
            // most (each of its items is scored).
            let related = &mut weighted[own..];
            related.sort_by_key(|&(id, _)| (self.df[id as usize], id));
            let mut postings = 0usize;
            let mut admitted = 0;
            for &(id, _) in related.iter() {
                postings += self.df[id as usize] as usize;
                if postings > rel.max_postings {
                    break;
                }
                admitted += 1;
            }
            weighted.truncate(own + admitted);
        }
        for t in ranking.changes.terms() {
            if let Some(&id) = self.term_ids.get(t) {
                weighted.push((id, 1.0));
            }
        }
        // Scores accumulate in a per-thread buffer indexed by slot (every
        // term adds a positive amount, so zero means untouched), cleared
        // again before it is handed back.
        let mut scores: Vec<(f32, u32)> = Vec::new();
        SCRATCH.with(|cell| {
            let mut acc = cell.borrow_mut();
            if acc.len() < self.docs.len() {
                acc.resize(self.docs.len(), 0.0);
            }
            let mut touched: Vec<u32> = Vec::new();
            // BM25's length norm, K1 * (1 - B + B * len / avg), as a + b * len.
            let (norm_base, norm_per_word) = (K1 * (1.0 - B), K1 * B / avg);
            let timed = filter.timed();
            for &(id, weight) in &weighted {
                let df = self.df[id as usize] as f32;
                let idf = weight * (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let scale = idf * (K1 + 1.0);
                for &(slot, tf) in &self.postings[id as usize] {
                    let Some(m) = self.slots.get(slot as usize) else {
                        continue;
                    };
                    if !filter.admits_slot(m) {
                        continue;
                    }
                    if timed
                        && !self
                            .docs
                            .get(slot as usize)
                            .and_then(Option::as_ref)
                            .is_some_and(|d| filter.admits_time(d))
                    {
                        continue;
                    }
                    let tf = tf as f32;
                    let norm = norm_base + norm_per_word * m.len as f32;
                    let a = &mut acc[slot as usize];
                    if *a == 0.0 {
                        touched.push(slot);
                    }
                    *a += scale * tf / (tf + norm);
                }
            }
            scores = touched
                .into_iter()
                .map(|slot| (std::mem::take(&mut acc[slot as usize]), slot))
                .collect();
        });
        let query_embedder =
            vector.and_then(|qv| self.embedders.iter().position(|e| *e == qv.embedder));
        let q_norm = vector.map_or(0.0, |qv| {
            qv.values.iter().map(|x| x * x).sum::<f32>().sqrt()
        });
        // The items nearest the query's vector, beside the keyword hits.
        let mut nearest: Vec<(f32, u32)> = Vec::new();
        let query_code = query_embedder
            .and_then(|e| u8::try_from(e).ok())
            .filter(|&e| e != NO_CODE);
        if let (Some(qv), Some(e), true) = (vector, query_code, ranking.dense > 0) {
            let q = Quantized::new(e, &qv.values);
            let (q_head, q_tail) = split_code(sign_code(&qv.values));
            let timed = filter.timed();
            // The head bits of every item in one pass, then the admitted
            // closest, pruned as the list grows.
            let admit = |slot: usize| {
                let Some(m) = self.slots.get(slot) else {
                    return false;
                };
                m.code_embedder == q.embedder
                    && filter.admits_slot(m)
                    && (!timed
                        || self
                            .doc(slot as u32)
                            .is_some_and(|doc| filter.admits_time(doc)))
            };
            let keep = ranking.dense * SHORTLIST_FACTOR;
            let short = match &self.ivf {
                Some(ivf) if ivf.embedder == q.embedder && !ranking.exhaustive => {
                    let mut q_code = [0u64; CODE_WORDS];
                    q_code[..HEAD_WORDS].copy_from_slice(&q_head);
                    q_code[HEAD_WORDS..].copy_from_slice(&q_tail);
                    self.ivf_shortlist(ivf, &q_code, keep, admit)
                }
                _ => {
                    let coarse = ranking.dense * COARSE_FACTOR;
                    let mut short = head_shortlist(&self.heads, &q_head, coarse, admit);
                    // All the bits of those.
                    for (d, slot) in short.iter_mut() {
                        if let Some(t) = self.tails.get(*slot as usize) {
                            *d += t
                                .iter()
                                .zip(&q_tail)
                                .map(|(x, y)| (x ^ y).count_ones())
                                .sum::<u32>();
                        }
                    }
                    if short.len() > keep {
                        short.select_nth_unstable(keep - 1);
                        short.truncate(keep);
                    }
                    short
                }
            };
            // Scored again with the byte vectors. They lie scattered over
            // the heap, each behind its item: an item is asked of memory
            // two steps ahead of its turn and its vector one step ahead, so
            // the reads overlap instead of waiting on one another.
            const AHEAD: usize = 4;
            let vector_of = |slot: u32| self.doc(slot).and_then(|d| d.vector.as_ref());
            for (i, &(_, slot)) in short.iter().enumerate() {
                if let Some(d) = short
                    .get(i + 2 * AHEAD)
                    .and_then(|&(_, s)| self.docs.get(s as usize))
                {
                    crate::static_embed::prefetch_value(d);
                }
                if let Some(v) = short.get(i + AHEAD).and_then(|&(_, s)| vector_of(s)) {
                    crate::static_embed::prefetch(&v.values);
                }
                let Some(dv) = vector_of(slot) else {
                    continue;
                };
                let sim = dv.cosine_q(&q);
                if sim > 0.0 {
                    nearest.push((sim, slot));
                }
            }
            if nearest.len() > ranking.dense {
                nearest.select_nth_unstable_by(ranking.dense - 1, |a, b| {
                    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
                });
                nearest.truncate(ranking.dense);
            }
        }
        let similarity = |d: &Doc| match (vector, &d.vector, query_embedder) {
            (Some(qv), Some(dv), Some(e)) if dv.embedder as usize == e => {
                dv.cosine(&qv.values, q_norm)
            }
            _ => 0.0,
        };
        let w = ranking.keyword_weight;
        let mut ranked: Vec<(f32, f32, f32, u32)> = if scores.is_empty() && nearest.is_empty() {
            // No word of the query is indexed: similarity alone, over every
            // admitted item.
            let Some(qv) = vector else {
                return Vec::new();
            };
            if qv.values.iter().all(|x| *x == 0.0) {
                return Vec::new();
            }
            self.docs
                .iter()
                .enumerate()
                .filter_map(|(slot, d)| {
                    let d = d.as_ref()?;
                    if !filter.admits(self.slots.get(slot)?, d) {
                        return None;
                    }
                    let sim = similarity(d);
                    (sim > 0.0).then_some((sim, 0.0, sim, slot as u32))
                })
                .collect()
        } else {
            let mut cands = scores;
            let keep = ranking.candidates.max(q.limit);
            // With words too common to score by, more are kept, for those
            // words to re-rank.
            let wide = if common.is_empty() {
                keep
            } else {
                keep * COMMON_RERANK
            };
            if ranking.distinct {
                self.distinct_best(&mut cands, wide);
            } else if cands.len() > wide {
                cands.select_nth_unstable_by(wide - 1, |a, b| {
                    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
                });
                cands.truncate(wide);
            }
            // The common words re-rank the best of what the others found
            // ("Tuesday night is curling" over "Shrove Tuesday"), read
            // from those items' own terms, never from their long postings;
            // they find nothing alone.
            if !common.is_empty() {
                // Each item and its terms asked of memory ahead of their
                // turn, as for the vectors below.
                const AHEAD: usize = 4;
                for i in 0..cands.len() {
                    if let Some(d) = cands
                        .get(i + 2 * AHEAD)
                        .and_then(|&(_, s)| self.docs.get(s as usize))
                    {
                        crate::static_embed::prefetch_value(d);
                    }
                    if let Some(d) = cands.get(i + AHEAD).and_then(|&(_, s)| self.doc(s)) {
                        crate::static_embed::prefetch_value(&d.terms[..]);
                    }
                    let (score, slot) = &mut cands[i];
                    let (Some(Some(doc)), Some(m)) = (
                        self.docs.get(*slot as usize),
                        self.slots.get(*slot as usize),
                    ) else {
                        continue;
                    };
                    let norm = K1 * (1.0 - B + B * m.len as f32 / avg);
                    for &(id, idf) in &common {
                        // (counted once: an item keeps its distinct terms)
                        if doc.terms.binary_search(&id).is_ok() {
                            *score += idf * (K1 + 1.0) / (1.0 + norm);
                        }
                    }
                }
                if cands.len() > keep {
                    cands.select_nth_unstable_by(keep - 1, |a, b| {
                        b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
                    });
                    cands.truncate(keep);
                }
            }
            if !nearest.is_empty() {
                let held: HashSet<u32> = cands.iter().map(|c| c.1).collect();
                cands.extend(
                    nearest
                        .iter()
                        .filter(|(_, slot)| !held.contains(slot))
                        .map(|&(_, slot)| (0.0, slot)),
                );
            }
            let best = cands
                .iter()
                .map(|c| c.0)
                .fold(0.0f32, f32::max)
                .max(f32::MIN_POSITIVE);
            let scored: Vec<(f32, f32, f32, u32)> = cands
                .into_iter()
                .filter_map(|(bm25, slot)| {
                    let d = self.docs.get(slot as usize)?.as_ref()?;
                    let recent = ranking.recency.map_or(0.0, |r| r.bonus(d.end));
                    Some((bm25, similarity(d), recent, slot))
                })
                .collect();
            // With the nearest by vector among the candidates, similarity
            // is scaled over them as BM25 is (a model's cosines sit in a
            // narrow band: unscaled, any word match would outrank the
            // closest meaning).
            let (lo, span) = if nearest.is_empty() {
                (0.0, 1.0)
            } else {
                let (lo, hi) = scored.iter().fold((f32::MAX, f32::MIN), |(lo, hi), c| {
                    (lo.min(c.1), hi.max(c.1))
                });
                (lo, (hi - lo).max(f32::MIN_POSITIVE))
            };
            scored
                .into_iter()
                .map(|(bm25, sim, recent, slot)| {
                    let closeness = ((sim - lo) / span).max(0.0);
                    (
                        w * bm25 / best + (1.0 - w) * closeness + recent,
                        bm25,
                        sim,
                        slot,
                    )
                })
                .collect()
        };
        // Ties by time, newest first, then id: the order is total.
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0).then_with(|| {
                let (da, db) = (self.doc(a.3), self.doc(b.3));
                db.map(|d| (d.end, d.id)).cmp(&da.map(|d| (d.end, d.id)))
            })
        });
        ranked
            .into_iter()
            .take(q.limit)
            .filter_map(|(score, bm25, sim, slot)| {
                let d = self.doc(slot)?;
                Some(SearchHit {
                    id: d.id,
                    kind: d.kind,
                    user_id: d.user_id.to_string(),
                    period_start: d.start,
                    period_end: d.end,
                    score,
                    keyword_score: bm25,
                    similarity: sim,
                    text: d.text.to_string(),
                    turn: d.prepared.as_ref().map(|p| p.turn()),
                })
            })
            .collect()
    }

    fn doc(&self, slot: u32) -> Option<&Doc> {
        self.docs.get(slot as usize)?.as_ref()
    }

    fn code(&self, slot: usize) -> [u64; CODE_WORDS] {
        let mut code = [0u64; CODE_WORDS];
        if let (Some(h), Some(t)) = (self.heads.get(slot), self.tails.get(slot)) {
            code[..HEAD_WORDS].copy_from_slice(h);
            code[HEAD_WORDS..].copy_from_slice(t);
        }
        code
    }

    /// A slot's code changed (or it died): its count and its list follow.
    fn recode(&mut self, slot: usize, old: u8, new: u8) {
        if old != NO_CODE {
            if let Some(n) = self.coded.get_mut(old as usize) {
                *n = n.saturating_sub(1);
            }
        }
        if new != NO_CODE {
            let e = new as usize;
            if self.coded.len() <= e {
                self.coded.resize(e + 1, 0);
            }
            self.coded[e] += 1;
        }
        if self.list_of.len() <= slot {
            self.list_of.resize(slot + 1, NO_LIST);
        }
        let code = self.code(slot);
        if let Some(ivf) = self.ivf.as_mut() {
            let was = self.list_of[slot];
            if was != NO_LIST {
                if let Some(list) = ivf.lists.get_mut(was as usize) {
                    if let Some(i) = list.iter().position(|e| e.0 as usize == slot) {
                        list.swap_remove(i);
                    }
                }
                self.list_of[slot] = NO_LIST;
            }
            if new == ivf.embedder {
                let c = nearest_centroid(&ivf.centroids, &code);
                ivf.lists[c as usize].push((slot as u32, code));
                self.list_of[slot] = c;
            }
        }
        self.train_if_due();
    }

    /// Trains the partition when an embedder reaches `IVF_MIN` coded
    /// slots (the one with the most, if several), or has four times as
    /// many as the partition was trained on; drops it below half the
    /// threshold.
    fn train_if_due(&mut self) {
        let Some((e, &n)) = self
            .coded
            .iter()
            .enumerate()
            .max_by_key(|(i, n)| (**n, usize::MAX - i))
        else {
            return;
        };
        let due = match &self.ivf {
            None => n >= IVF_MIN,
            Some(ivf) if ivf.embedder as usize != e => {
                n >= IVF_MIN && n > self.coded.get(ivf.embedder as usize).copied().unwrap_or(0)
            }
            Some(ivf) => n >= 4 * ivf.trained_on,
        };
        if self.ivf.as_ref().is_some_and(|ivf| {
            self.coded.get(ivf.embedder as usize).copied().unwrap_or(0) < IVF_MIN / 2
        }) {
            self.ivf = None;
            self.list_of.iter_mut().for_each(|l| *l = NO_LIST);
        }
        if !due {
            return;
        }
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].live() && self.slots[s].code_embedder as usize == e)
            .collect();
        let codes: Vec<[u64; CODE_WORDS]> = slots.iter().map(|&s| self.code(s)).collect();
        let centroids = train_centroids(&codes);
        let mut lists = vec![Vec::new(); centroids.len()];
        self.list_of.clear();
        self.list_of.resize(self.slots.len(), NO_LIST);
        for (&slot, code) in slots.iter().zip(&codes) {
            let c = nearest_centroid(&centroids, code);
            lists[c as usize].push((slot as u32, *code));
            self.list_of[slot] = c;
        }
        self.ivf = Some(Ivf {
            embedder: e as u8,
            centroids,
            lists,
            trained_on: slots.len(),
        });
    }

    /// The closest `keep` admitted slots by all their sign bits, probing
    /// the partition's lists nearest the query first.
    fn ivf_shortlist(
        &self,
        ivf: &Ivf,
        q: &[u64; CODE_WORDS],
        keep: usize,
        mut admit: impl FnMut(usize) -> bool,
    ) -> Vec<(u32, u32)> {
        let mut order: Vec<(u32, usize)> = ivf
            .centroids
            .iter()
            .enumerate()
            .map(|(i, c)| (hamming(c, q), i))
            .collect();
        order.sort_unstable();
        let mut short = Shortlist::new(keep);
        for (probed, &(_, list)) in order.iter().enumerate() {
            if probed >= IVF_PROBE && short.admitted >= keep {
                break;
            }
            for (slot, code) in &ivf.lists[list] {
                short.offer(hamming(code, q), *slot, &mut admit);
            }
        }
        short.finish()
    }
}

/// A change to an agent's index, held while the index is being built.
type Op = Box<dyn FnOnce(&mut AgentIndex) + Send>;

enum Slot {
    /// Built off the Store actor; the changes made meanwhile wait here and
    /// are applied, in order, before the index is handed out (a change is
    /// a replace or a removal by id, so applying one the build already saw
    /// changes nothing). `id` tells this build from a later one for the
    /// same agent (after a `clear`).
    Building {
        id: u64,
        pending: Vec<Op>,
        done: tokio::sync::watch::Receiver<()>,
    },
    Ready(Arc<RwLock<AgentIndex>>),
}

/// The agents' indexes. Shared between the Store actor (the only one that
/// changes them, after each of its writes), the builds (on the blocking
/// pool, never on the Store actor: a build of any size delays no write)
/// and searching callers.
#[derive(Default)]
pub struct SearchIndex {
    /// An embedder that makes vectors on the spot
    /// ([`Embed::embed_now`](crate::embed::Embed::embed_now)): turns get
    /// theirs as they are indexed.
    inline: Option<Arc<dyn crate::embed::Embed>>,
    agents: Mutex<HashMap<String, Slot>>,
    next_build: std::sync::atomic::AtomicU64,
    /// Builds under way, so a shutdown can wait until none holds the store.
    running: Arc<tokio::sync::watch::Sender<usize>>,
    /// Set by [`SearchIndex::close`]: no build starts after it.
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("built", &self.built())
            .finish()
    }
}

/// A failed index build, shared by everyone who waited for it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("building the search index of agent {agent_id} failed: {source}")]
pub struct BuildError {
    pub agent_id: String,
    #[source]
    pub source: Arc<crate::store::StoreError>,
}

/// Counts a build as running until dropped (even if its task panics).
struct Running(Arc<tokio::sync::watch::Sender<usize>>);

impl Running {
    fn start(counter: &Arc<tokio::sync::watch::Sender<usize>>) -> Running {
        counter.send_modify(|n| *n += 1);
        Running(counter.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl SearchIndex {
    /// An index whose turns get `embed`'s vectors as they are indexed, if
    /// it makes them on the spot.
    pub fn new(embed: &Arc<dyn crate::embed::Embed>) -> SearchIndex {
        SearchIndex {
            inline: embed.embeds_inline().then(|| embed.clone()),
            ..SearchIndex::default()
        }
    }

    /// The embedder turns get their vectors from as they are indexed.
    pub fn inline(&self) -> Option<Arc<dyn crate::embed::Embed>> {
        self.inline.clone()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the agent's index is built or being built (an update would
    /// be applied to it).
    pub fn tracks(&self, agent_id: &str) -> bool {
        self.slots().contains_key(agent_id)
    }

    /// The agent's index, if it is built.
    pub fn agent(&self, agent_id: &str) -> Option<Arc<RwLock<AgentIndex>>> {
        match self.slots().get(agent_id) {
            Some(Slot::Ready(ix)) => Some(ix.clone()),
            _ => None,
        }
    }

    /// The agent's index, built by `build` on the blocking pool first if
    /// it is not (callers asking meanwhile wait for the same build). The
    /// build finishes even if the caller stops waiting.
    pub async fn ensure(
        self: &Arc<Self>,
        agent_id: &str,
        build: impl FnOnce() -> Result<AgentIndex, crate::store::StoreError> + Clone + Send + 'static,
    ) -> Result<Arc<RwLock<AgentIndex>>, BuildError> {
        loop {
            let started = {
                let mut slots = self.slots();
                match slots.get(agent_id) {
                    Some(Slot::Ready(ix)) => return Ok(ix.clone()),
                    Some(Slot::Building { id, done, .. }) => Err((*id, done.clone())),
                    None => {
                        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
                            return Err(BuildError {
                                agent_id: agent_id.to_string(),
                                source: Arc::new(crate::store::StoreError::Unavailable),
                            });
                        }
                        let build = build.clone();
                        let id = self
                            .next_build
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let (tx, rx) = tokio::sync::watch::channel(());
                        slots.insert(
                            agent_id.to_string(),
                            Slot::Building {
                                id,
                                pending: Vec::new(),
                                done: rx,
                            },
                        );
                        let this = self.clone();
                        let agent = agent_id.to_string();
                        let running = Running::start(&self.running);
                        Ok(tokio::spawn(async move {
                            let res = match tokio::task::spawn_blocking(build).await {
                                Ok(res) => res,
                                Err(e) => Err(crate::store::StoreError::ReadAborted(e)),
                            };
                            let out = this.finish(&agent, id, res);
                            drop(running);
                            let _ = tx.send(());
                            out
                        }))
                    }
                }
            };
            match started {
                Ok(task) => match task.await {
                    Ok(Ok(Some(ix))) => return Ok(ix),
                    // Cleared meanwhile: look again.
                    Ok(Ok(None)) => continue,
                    Ok(Err(e)) => return Err(e),
                    Err(e) => {
                        return Err(BuildError {
                            agent_id: agent_id.to_string(),
                            source: Arc::new(crate::store::StoreError::ReadAborted(e)),
                        })
                    }
                },
                // Someone else's build: its end (or failure) wakes us.
                Err((id, mut done)) => {
                    if done.changed().await.is_err() {
                        // Its task is gone without a word (its runtime
                        // stopped): forget it so the next look builds anew.
                        let mut slots = self.slots();
                        if matches!(slots.get(agent_id), Some(Slot::Building { id: b, .. }) if *b == id)
                        {
                            slots.remove(agent_id);
                        }
                    }
                }
            }
        }
    }

    /// Installs build `id`'s index after the changes made during it, if the
    /// agent's slot is still that build's; `None` if it was cleared (or
    /// replaced) meanwhile.
    fn finish(
        &self,
        agent_id: &str,
        id: u64,
        res: Result<AgentIndex, crate::store::StoreError>,
    ) -> Result<Option<Arc<RwLock<AgentIndex>>>, BuildError> {
        let mut ix = match res {
            Ok(ix) => ix,
            Err(e) => {
                let mut slots = self.slots();
                if matches!(slots.get(agent_id), Some(Slot::Building { id: b, .. }) if *b == id) {
                    slots.remove(agent_id);
                }
                return Err(BuildError {
                    agent_id: agent_id.to_string(),
                    source: Arc::new(e),
                });
            }
        };
        // The changes made meanwhile are applied outside the lock (they may
        // read the store), in rounds, until none is left; the index is
        // installed under the lock once there are none.
        loop {
            let batch = {
                let mut slots = self.slots();
                match slots.get_mut(agent_id) {
                    Some(Slot::Building { id: b, pending, .. }) if *b == id => {
                        if pending.is_empty() {
                            let ix = Arc::new(RwLock::new(ix));
                            slots.insert(agent_id.to_string(), Slot::Ready(ix.clone()));
                            return Ok(Some(ix));
                        }
                        std::mem::take(pending)
                    }
                    _ => return Ok(None),
                }
            };
            for op in batch {
                op(&mut ix);
            }
        }
    }

    /// Applies `f` to the agent's index if it is built, or after the build
    /// under way; an agent with neither is built from the store when it is
    /// first searched.
    pub fn update(&self, agent_id: &str, f: impl FnOnce(&mut AgentIndex) + Send + 'static) {
        let ix = {
            let mut slots = self.slots();
            match slots.get_mut(agent_id) {
                Some(Slot::Ready(ix)) => ix.clone(),
                Some(Slot::Building { pending, .. }) => {
                    pending.push(Box::new(f));
                    return;
                }
                None => return,
            }
        };
        f(&mut ix.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Forgets every index (they are rebuilt on the next search); a build
    /// under way is dropped when it ends.
    pub fn clear(&self) {
        self.slots().clear();
    }

    /// Forgets one agent's index (rebuilt on its next search; a build under
    /// way is dropped when it ends): another instance changed what it is
    /// built from.
    pub fn clear_agent(&self, agent_id: &str) {
        self.slots().remove(agent_id);
    }

    /// Forgets every index and waits until no build holds the store (a
    /// shutdown, before the store's folder is let go).
    pub async fn close(&self) {
        {
            // Under the lock a build starts under: none starts after this.
            let mut slots = self.slots();
            self.closed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            slots.clear();
        }
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// Agents with a built index.
    pub fn built(&self) -> usize {
        self.slots()
            .values()
            .filter(|s| matches!(s, Slot::Ready(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashingEmbed;
    use crate::model::FactCategory;

    fn summary(user: &str, text: &str, topics: &[&str], day: i64) -> ConversationSummary {
        let t = DateTime::<Utc>::from_timestamp(1_790_000_000 + day * 86_400, 0).unwrap();
        ConversationSummary {
            period_end: t + chrono::Duration::minutes(5),
            topics: topics.iter().map(|s| s.to_string()).collect(),
            turn_count: 2,
            ..ConversationSummary::session(Uuid::new_v4(), "kairix", user, t, text)
        }
    }

    fn vector(text: &str) -> Option<StoredVector> {
        Some(StoredVector {
            embedder: "hashing".into(),
            values: HashingEmbed::default().vector(text),
        })
    }

    fn query(text: &str, user: Option<&str>) -> SearchQuery {
        SearchQuery {
            text: text.into(),
            user_id: user.map(str::to_string),
            limit: 10,
            ..Default::default()
        }
    }

    const RANK: Ranking = Ranking {
        dense: 0,
        exhaustive: false,
        related: None,
        distinct: false,
        changes: Subjects::NONE,
        expects: Answers::NONE,
        keyword_weight: 0.6,
        candidates: 200,
        max_term_share: 1.0,
        recency: None,
    };

    fn fact(user: &str, content: &str, shared: bool) -> Fact {
        Fact {
            fact_id: Uuid::new_v4(),
            agent_id: "kairix".into(),
            user_id: user.into(),
            category: FactCategory::Occupation,
            content: content.into(),
            subject: None,
            visibility: if shared {
                Visibility::Shared
            } else {
                Visibility::Private
            },
            source_session_id: None,
            extracted_at: DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap(),
            conflicts_with: None,
            speaker: Default::default(),
        }
    }

    #[test]
    fn keyword_hits_rank_first_and_filters_hold() {
        let mut ix = AgentIndex::default();
        let a = summary(
            "mark",
            "Mark talked about his Google interview.",
            &["interview", "google"],
            0,
        );
        let b = summary("mark", "Mark planned a sailing trip.", &["sailing"], 1);
        let c = summary(
            "ada",
            "Ada mentioned Google Maps for her trip.",
            &["google", "maps"],
            2,
        );
        for s in [&a, &b, &c] {
            ix.put_summary(s, vector(&s.summary_text));
        }
        let hits = ix.search(
            &query("you mentioned Google", Some("mark")),
            vector("you mentioned Google").as_ref(),
            RANK,
        );
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0].id, a.summary_id);
        assert!(hits[0].text.starts_with("[SUMMARY:SESSION]"));
        // every user: both Google items, and not the sailing one
        let hits = ix.search(&query("google", None), None, RANK);
        let mut ids: Vec<_> = hits.iter().map(|h| h.id).collect();
        ids.sort();
        let mut google = vec![a.summary_id, c.summary_id];
        google.sort();
        assert_eq!(ids, google, "{hits:?}");
        // a time filter
        let mut q = query("google", None);
        q.since = Some(c.period_start);
        let hits = ix.search(&q, None, RANK);
        assert_eq!(
            hits.iter().map(|h| h.id).collect::<Vec<_>>(),
            [c.summary_id]
        );
        q.since = None;
        q.until = Some(a.period_end);
        assert_eq!(ix.search(&q, None, RANK)[0].id, a.summary_id);
        // a kind filter
        q.until = None;
        q.kinds = vec![DocKind::Daily];
        assert!(ix.search(&q, None, RANK).is_empty());
        // plural and singular meet
        assert_eq!(
            ix.search(&query("interviews", Some("mark")), None, RANK)
                .len(),
            1
        );
    }

    #[test]
    fn a_query_word_finds_the_words_near_it_in_meaning() {
        let mut ix = AgentIndex::default();
        let wasp = summary(
            "mark",
            "Mark said a wasp stung him on the job.",
            &["wasp"],
            0,
        );
        let pasta = summary("mark", "Mark cooked pasta for dinner.", &["pasta"], 1);
        let common = summary("mark", "Mark went for a walk.", &["walk"], 2);
        for s in [&wasp, &pasta, &common] {
            ix.put_summary(s, None);
        }
        let related = Ranking {
            related: Some(RelatedWords {
                per_word: 10,
                min_similarity: 0.3,
                max_postings: 10_000,
            }),
            ..RANK
        };
        // "insect" is never said: alone it finds nothing
        let q = query("Which insect am I allergic to?", Some("mark"));
        assert!(ix.search(&q, None, RANK).is_empty());
        let hits = ix.search(&q, None, related);
        assert_eq!(
            hits.first().map(|h| h.id),
            Some(wasp.summary_id),
            "{hits:?}"
        );
        assert!(hits.iter().all(|h| h.id != pasta.summary_id));
        // a related word counts for less than the word itself
        let own = ix.search(&query("wasp", Some("mark")), None, related);
        assert!(hits[0].keyword_score < own[0].keyword_score);
        // none wanted, none taken
        let off = Ranking {
            related: Some(RelatedWords {
                per_word: 0,
                min_similarity: 0.3,
                max_postings: 10_000,
            }),
            ..RANK
        };
        assert!(ix.search(&q, None, off).is_empty());
        // another user's items stay theirs
        assert!(ix
            .search(&query("insect", Some("ada")), None, related)
            .is_empty());
        // related words are taken rarest first, within the postings cap:
        // "mosquito" in four items does not fit a cap of three, "wasp" does
        let mosquitoes: Vec<ConversationSummary> = (0..4)
            .map(|i| {
                summary(
                    "mark",
                    "Mark swatted a mosquito in the kitchen.",
                    &["mosquito"],
                    10 + i,
                )
            })
            .collect();
        for b in &mosquitoes {
            ix.put_summary(b, None);
        }
        let uncapped = ix.search(&q, None, related);
        assert!(
            uncapped.iter().any(|h| h.id == mosquitoes[0].summary_id),
            "{uncapped:?}"
        );
        let capped = Ranking {
            related: related.related.map(|r| RelatedWords {
                max_postings: 3,
                ..r
            }),
            ..RANK
        };
        let hits = ix.search(&q, None, capped);
        assert_eq!(
            hits.iter().map(|h| h.id).collect::<Vec<_>>(),
            [wasp.summary_id],
            "{hits:?}"
        );
    }

    #[test]
    fn private_facts_stay_with_their_owner_shared_ones_do_not() {
        let mut ix = AgentIndex::default();
        let private = fact("ada", "Works at Google as a nurse", false);
        let mut shared = fact("ada", "Works at Google on weekends", true);
        ix.put_fact(&private, None);
        ix.put_fact(&shared, None);
        let ids = |hits: Vec<SearchHit>| hits.into_iter().map(|h| h.id).collect::<Vec<_>>();
        assert_eq!(
            ids(ix.search(&query("google", Some("mark")), None, RANK)),
            [shared.fact_id]
        );
        assert_eq!(
            ix.search(&query("google", Some("ada")), None, RANK).len(),
            2
        );
        // unshared: gone for mark at once
        shared.visibility = Visibility::Private;
        ix.put_fact(&shared, None);
        assert!(ix
            .search(&query("google", Some("mark")), None, RANK)
            .is_empty());
        ix.remove(private.fact_id);
        assert_eq!(
            ids(ix.search(&query("google", Some("ada")), None, RANK)),
            [shared.fact_id]
        );
        assert!(ix.search(&query("nurse", None), None, RANK).is_empty());
    }

    #[test]
    fn superseded_summaries_leave_and_holes_compact() {
        let mut ix = AgentIndex::default();
        let mut all = Vec::new();
        for i in 0..200 {
            let s = summary(
                "mark",
                &format!("Session {i} about gardening and tomatoes"),
                &["gardening"],
                i,
            );
            ix.put_summary(&s, None);
            all.push(s);
        }
        for s in all.iter_mut().take(150) {
            s.superseded_by = Some(Uuid::new_v4());
            ix.put_summary(s, None);
        }
        assert_eq!(ix.len(), 50);
        assert!(ix.docs.len() < 200, "compacted: {}", ix.docs.len());
        let mut q = query("tomatoes", None);
        q.limit = 100;
        let hits = ix.search(&q, None, RANK);
        assert_eq!(hits.len(), 50);
        let kept: std::collections::HashSet<Uuid> =
            all[150..].iter().map(|s| s.summary_id).collect();
        assert!(hits.iter().all(|h| kept.contains(&h.id)));
    }

    #[test]
    fn scores_after_removals_equal_a_fresh_builds() {
        let items: Vec<ConversationSummary> = (0..40)
            .map(|i| {
                summary(
                    "mark",
                    &format!(
                        "Talk {i} about google and {}",
                        ["maps", "jobs", "mail"][i % 3]
                    ),
                    &["google"],
                    i as i64,
                )
            })
            .collect();
        let mut grown = AgentIndex::default();
        for s in &items {
            grown.put_summary(s, None);
        }
        // rewrite some, remove others
        for s in items.iter().step_by(4) {
            grown.put_summary(s, None);
        }
        for s in items.iter().skip(1).step_by(5) {
            grown.remove(s.summary_id);
        }
        let mut fresh = AgentIndex::default();
        let removed: std::collections::HashSet<Uuid> = items
            .iter()
            .skip(1)
            .step_by(5)
            .map(|s| s.summary_id)
            .collect();
        for s in items.iter().filter(|s| !removed.contains(&s.summary_id)) {
            fresh.put_summary(s, None);
        }
        let mut q = query("google maps", None);
        q.limit = 100;
        let a: Vec<(Uuid, f32)> = grown
            .search(&q, None, RANK)
            .iter()
            .map(|h| (h.id, h.keyword_score))
            .collect();
        let b: Vec<(Uuid, f32)> = fresh
            .search(&q, None, RANK)
            .iter()
            .map(|h| (h.id, h.keyword_score))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn quantized_similarity_stays_close_to_the_full_one() {
        let e = HashingEmbed::default();
        let texts = [
            "Mark prepared for the Globex interview and the salary talk",
            "Globex interview, second round, salary negotiation",
            "Sailing weekend in Porto with his sister",
            "interview",
        ];
        for a in &texts {
            for b in &texts {
                let (va, vb) = (e.vector(a), e.vector(b));
                let full = crate::embed::cosine(&va, &vb);
                let q = Quantized::new(0, &vb);
                let norm = va.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((q.cosine(&va, norm) - full).abs() < 0.01, "{a} / {b}");
            }
        }
        assert_eq!(Quantized::new(0, &[0.0; 8]).cosine(&[1.0; 8], 1.0), 0.0);
    }

    #[test]
    fn question_framing_is_left_out() {
        assert_eq!(
            without_question_framing("What kind of coffee am I allowed these days?"),
            "what coffee am i allowed"
        );
        assert_eq!(
            without_question_framing("Remind me, how did I USED TO get to work?"),
            "how did i get to work?"
        );
        // whole words only
        assert_eq!(
            without_question_framing("I refused today, many more times"),
            "i refused today, many more times"
        );
        // the words themselves stay when they are the content
        assert_eq!(without_question_framing("my birthday"), "my birthday");
    }

    #[test]
    fn inflections_meet_at_their_stem() {
        let mut ix = AgentIndex::default();
        let a = summary(
            "mark",
            "Google invited me to an onsite. Google interviewers will probe that.",
            &[],
            0,
        );
        let b = summary("mark", "We talked about the weather in Lisbon.", &[], 1);
        ix.put_summary(&a, None);
        ix.put_summary(&b, None);
        for q in [
            "Google interview preparation",
            "interviewing",
            "invitations",
        ] {
            let hits = ix.search(&query(q, Some("mark")), None, RANK);
            assert_eq!(hits.first().map(|h| h.id), Some(a.summary_id), "{q}");
            assert!(hits[0].keyword_score > 0.0);
        }
        assert_eq!(stem("interviewers"), stem("interview"));
        // short forms meet their word
        assert_eq!(stem("gf"), stem("girlfriend"));
        assert_eq!(stem("bday"), stem("birthdays"));
        assert_eq!(stem("hubby"), stem("husbands"));
        assert!(SHORT_FORMS.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
        // irregular past forms meet their verb
        assert_eq!(stem("grew"), stem("growing"));
        assert_eq!(stem("bought"), stem("buy"));
        assert!(IRREGULAR.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    }

    #[test]
    fn a_kept_stem_is_the_stem_made_anew_and_the_kept_set_stays_bounded() {
        let words = ["grew", "hubby", "interviewers", "running", "bought", "flat"];
        for w in words.iter().chain(&words) {
            assert_eq!(stem(w), stem_anew(w), "{w}");
        }
        for i in 0..STEMS_KEPT + 10 {
            let w = format!("word{i}s");
            assert_eq!(stem(&w), stem_anew(&w));
            assert!(STEMS.with(|k| k.borrow().len()) <= STEMS_KEPT);
        }
        assert_eq!(stem("grew"), stem_anew("grew"));
    }

    #[test]
    fn a_hyphened_word_is_also_its_parts() {
        let toks: Vec<String> = tokens("my brother-in-law's three-wheeler").collect();
        // ("in" and "three" are too common to index)
        assert_eq!(
            toks,
            ["brother-in-law", "brother", "law", "three-wheel", "wheeler"]
        );
        let mut ix = AgentIndex::default();
        let a = summary("mark", "The wife's brother came for Sunday dinner.", &[], 0);
        let b = summary("mark", "We talked about the weather in Lisbon.", &[], 1);
        ix.put_summary(&a, None);
        ix.put_summary(&b, None);
        let hits = ix.search(&query("my brother-in-law", Some("mark")), None, RANK);
        assert_eq!(hits.first().map(|h| h.id), Some(a.summary_id));
    }

    #[test]
    fn a_relative_said_once_has_a_place_beside_the_commoner_ones() {
        // One relative a word: "truck" (closer to "car", in three items)
        // would take the place of "pontiac" (said once).
        let mut ix = AgentIndex::default();
        let once = summary("mark", "The old Pontiac finally died.", &[], 0);
        ix.put_summary(&once, None);
        for i in 1..=3 {
            ix.put_summary(
                &summary("mark", "A truck blocked the lane again.", &[], i),
                None,
            );
        }
        let ranking = Ranking {
            related: Some(RelatedWords {
                per_word: 1,
                min_similarity: 0.3,
                max_postings: 10_000,
            }),
            ..RANK
        };
        let hits = ix.search(&query("my car", Some("mark")), None, ranking);
        assert!(hits.iter().any(|h| h.id == once.summary_id), "{hits:?}");
        assert_eq!(hits.len(), 4, "{hits:?}");
    }

    #[test]
    fn brought_up_and_grew_up_are_raised() {
        for text in [
            "Where was I brought up?",
            "where I grew up",
            "Born and raised.",
        ] {
            assert!(tokens(text).any(|t| t == stem("raised")), "{text:?}");
        }
        assert!(!tokens("I brought it up with him").any(|t| t == stem("raised")));
    }

    /// A turn of the user's words and the agent's answer, at a fixed time.
    fn said(user: &str, agent: &str) -> ConversationTurn {
        ConversationTurn {
            user_message: user.into(),
            agent_response: agent.into(),
            timestamp: DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap(),
        }
    }

    /// The turns a query ranks, by their place in the call, with `changes`
    /// asked about.
    fn turn_seqs(ix: &AgentIndex, q: &SearchQuery, changes: Subjects) -> Vec<u32> {
        turn_seqs_by(ix, q, Ranking { changes, ..RANK })
    }

    /// The turns a query ranks, by their place in the call, on `ranking`.
    fn turn_seqs_by(ix: &AgentIndex, q: &SearchQuery, ranking: Ranking) -> Vec<u32> {
        ix.search(q, None, ranking)
            .iter()
            .filter_map(|h| h.turn.map(|t| t.seq))
            .collect()
    }

    #[test]
    fn the_names_each_side_is_called_by_are_learned_per_user_and_forgotten_with_them() {
        let mut ix = AgentIndex::default();
        let call = |ix: &mut AgentIndex, user: &str, id: u128, line: &str| {
            ix.put_turns(
                user,
                Uuid::from_u128(id),
                &[
                    (0, said(line, "Hello love, good to hear you.")),
                    (1, said("Bye!", "Bye, Kwame.")),
                ],
            );
        };
        call(&mut ix, "caller-1", 1, "Hi Nan, it's me.");
        assert_eq!(ix.participants("caller-1", "line-2").side_of("nan"), None);
        call(&mut ix, "caller-1", 2, "Morning, Nan!");
        let p = ix.participants("caller-1", "line-2");
        assert_eq!(p.side_of("nan"), Some(Speaker::Agent));
        assert_eq!(p.side_of("kwame"), Some(Speaker::User));
        assert_eq!(p.side_of("caller"), Some(Speaker::User));
        // another user's calls are theirs
        call(&mut ix, "caller-9", 3, "Hello there.");
        assert_eq!(ix.participants("caller-9", "line-2").side_of("nan"), None);
        // the same call indexed again counts once
        call(&mut ix, "caller-1", 2, "Morning, Nan!");
        call(&mut ix, "caller-1", 1, "Hi there, it's me.");
        assert_eq!(ix.participants("caller-1", "line-2").side_of("nan"), None);
        ix.remove_user("caller-1");
        assert_eq!(ix.participants("caller-1", "line-2").side_of("kwame"), None);
        assert!(!ix.addressed.contains_key("caller-1"));
    }

    #[test]
    fn a_question_of_a_dislike_finds_the_turn_that_told_one() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Oh no.");
        ix.put_turns(
            "mark",
            Uuid::from_u128(1),
            &[
                (
                    0,
                    turn("Got a burger. No beetroot, I said. Beetroot everywhere. Hate it."),
                ),
                (1, turn("The vegetable patch is doing well this year.")),
                (2, turn("The bins were late again.")),
            ],
        );
        let question = "Which vegetable can't I stand?";
        let mut q = query(question, Some("mark"));
        q.kinds = vec![DocKind::Turn];
        let ranked = |changes: Subjects| turn_seqs(&ix, &q, changes);
        // by its words alone, only the patch
        assert_eq!(ranked(Subjects::NONE), vec![1]);
        // asking about a dislike, the turn that told one too
        assert!(ranked(crate::text::feeling_asked(question)).contains(&0));
    }

    #[test]
    fn the_turn_that_names_what_is_asked_ranks_first_among_those_about_it() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Oh, lovely.");
        ix.put_turns(
            "dee",
            Uuid::from_u128(1),
            &[
                (
                    0,
                    turn("My mother rang at six this morning, the whole street heard it."),
                ),
                (
                    1,
                    turn(
                        "My mother rang at two her time, asking if I eat. Dona Cida, always awake.",
                    ),
                ),
                (2, turn("The bins were late again.")),
            ],
        );
        let question = "What's my mother called?";
        let mut q = query(question, Some("dee"));
        q.kinds = vec![DocKind::Turn];
        let ranked = |expects: Answers| turn_seqs_by(&ix, &q, Ranking { expects, ..RANK });
        // by its words alone, the shorter turn first
        assert_eq!(ranked(Answers::NONE), vec![0, 1]);
        // asking for a name, the turn that gives one; the tag finds
        // nothing by itself
        assert_eq!(ranked(crate::text::expected_in(question)), vec![1, 0]);
    }

    #[test]
    fn a_question_of_now_finds_the_turn_that_told_the_change() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Oh nice.");
        ix.put_turns(
            "mark",
            Uuid::from_u128(1),
            &[
                (0, turn("We've lived in Leith for nine years now.")),
                (1, turn("Got the keys to a cottage in Dunbar on Friday!")),
                (2, turn("The bins were late again.")),
            ],
        );
        ix.put_turns(
            "ada",
            Uuid::from_u128(2),
            &[(0, turn("We signed the lease on a flat in Govan."))],
        );
        let mut q = query("Where do I live now?", Some("mark"));
        q.kinds = vec![DocKind::Turn];
        let ranked = |changes: Subjects| turn_seqs(&ix, &q, changes);
        // by its words alone, only where he lived before
        assert_eq!(ranked(Subjects::NONE), vec![0]);
        // asking about home now, the move too; another user's stays hers,
        // and a change of another subject does not come
        let found = ranked(crate::text::asked_about("Where do I live now?"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.contains(&1));
        assert!(ranked(Subjects::VEHICLE).iter().all(|&s| s == 0));
    }

    #[test]
    fn a_turn_comes_prepared_with_the_turns_either_side_from_the_index() {
        let mut ix = AgentIndex::new("pilar", chrono_tz::Europe::Madrid);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let call = |n: u32| -> Vec<(u32, ConversationTurn)> {
            (0..n)
                .map(|i| {
                    (
                        i,
                        said(&format!("line {i}, we sailed yesterday"), "Oh nice."),
                    )
                })
                .collect()
        };
        ix.put_turns("mark", a, &call(3));
        ix.put_turns("dana", b, &call(2));
        let seqs = |ix: &AgentIndex, r: TurnRef| -> Option<Vec<u32>> {
            Some(ix.turns_around(r)?.iter().map(|t| t.seq).collect())
        };
        let r = |session_id: Uuid, seq: u32| TurnRef { session_id, seq };
        assert_eq!(seqs(&ix, r(a, 0)), Some(vec![0, 1]));
        assert_eq!(seqs(&ix, r(a, 1)), Some(vec![0, 1, 2]));
        assert_eq!(
            seqs(&ix, r(a, 2)),
            Some(vec![1, 2]),
            "not dana's first turn"
        );
        assert_eq!(seqs(&ix, r(b, 0)), Some(vec![0, 1]));
        assert_eq!(seqs(&ix, r(a, 3)), None);
        // as the index's agent names it, its dates in the agent's zone
        let text = ix.turns_around(r(a, 1)).unwrap()[1]
            .item(&[], crate::retrieval::Shown::Beside)
            .text;
        assert!(
            text.contains("mark: line 1, we sailed yesterday (Sunday 20 September 2026)"),
            "{text}"
        );
        assert!(text.ends_with("\n  pilar: Oh nice."), "{text}");
        // a call indexed again in another order: found by id
        let mut again = call(3);
        again.reverse();
        ix.put_turns("mark", a, &again);
        assert_eq!(seqs(&ix, r(a, 1)), Some(vec![0, 1, 2]));
        // a forget takes them
        ix.remove_user("mark");
        assert_eq!(seqs(&ix, r(a, 1)), None);
        assert_eq!(seqs(&ix, r(b, 1)), Some(vec![0, 1]));
    }

    #[test]
    fn a_word_too_common_to_score_by_still_ranks_what_the_others_found() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Oh nice.");
        // "night" in half the items, "tuesday" in two
        let mut turns: Vec<(u32, ConversationTurn)> = (0..40)
            .map(|i| (i, turn(&format!("The quiz night number {i} was loud."))))
            .collect();
        turns.extend((40..80).map(|i| (i, turn(&format!("The bins came at {i} past.")))));
        turns.push((80, turn("Shrove Tuesday buns all week.")));
        turns.push((
            81,
            turn("Tuesday night is curling at the club, I am the skip."),
        ));
        ix.put_turns("mark", Uuid::from_u128(1), &turns);
        let mut q = query("what do I do on a tuesday night", Some("mark"));
        q.kinds = vec![DocKind::Turn];
        let first = |max_term_share: f32| {
            ix.search(
                &q,
                None,
                Ranking {
                    max_term_share,
                    ..RANK
                },
            )
            .first()
            .and_then(|h| h.turn)
            .map(|t| t.seq)
        };
        // every word scored: the item with both words first
        assert_eq!(first(1.0), Some(81));
        // "night" too common to score by: it still puts the item that
        // holds it first among those "tuesday" found
        assert_eq!(first(0.1), Some(81));
        let hits = ix.search(
            &q,
            None,
            Ranking {
                max_term_share: 0.1,
                ..RANK
            },
        );
        assert!(
            hits.iter().all(|h| h.turn.is_some_and(|t| t.seq >= 80)),
            "the common word finds nothing alone: {hits:?}"
        );
    }

    #[test]
    fn turns_are_searched_when_asked_for_and_leave_with_their_user() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Noted.");
        let s1 = Uuid::from_u128(1);
        let s2 = Uuid::from_u128(2);
        ix.put_turns(
            "mark",
            s1,
            &[
                (0, turn("We named the puppy Biscuit")),
                (1, turn("Rainy day")),
            ],
        );
        ix.put_turns("ada", s2, &[(0, turn("My puppy is called Pixel"))]);
        // not among the default kinds
        assert!(ix.search(&query("puppy", None), None, RANK).is_empty());
        let mut q = query("puppies", Some("mark"));
        q.kinds = vec![DocKind::Turn];
        let hits = ix.search(&q, None, RANK);
        assert_eq!(hits.len(), 1, "mark sees only his own turns");
        let r = TurnRef {
            session_id: s1,
            seq: 0,
        };
        assert_eq!(hits[0].turn, Some(r));
        assert_eq!(hits[0].id, r.doc_id());
        ix.remove_user("mark");
        assert!(ix.owners().all(|(_, u)| u == "ada"));
        assert!(ix.search(&q, None, RANK).is_empty());
        q.user_id = None;
        assert_eq!(ix.search(&q, None, RANK).len(), 1);
    }

    #[test]
    fn a_line_said_in_many_calls_takes_one_candidate_place() {
        let mut ix = AgentIndex::default();
        let turn = |u: &str| said(u, "Oh no.");
        // the same small talk in six calls (case and punctuation aside),
        // then the detail, said once, in longer words
        for i in 0..6u128 {
            let line = if i % 2 == 0 {
                "The neighbours' dog barked all night."
            } else {
                "the neighbours dog barked all night"
            };
            ix.put_turns("mark", Uuid::from_u128(i), &[(0, turn(line))]);
        }
        let once = Uuid::from_u128(100);
        ix.put_turns(
            "mark",
            once,
            &[(
                0,
                turn("Our dog is a beagle called Rusty, he is five this spring"),
            )],
        );
        let mut q = query("my dog", Some("mark"));
        q.kinds = vec![DocKind::Turn];
        q.limit = 2;
        let few = Ranking {
            candidates: 2,
            ..RANK
        };
        // without: the repeats fill every place
        let hits = ix.search(&q, None, few);
        assert!(hits.iter().all(|h| h.turn.unwrap().session_id != once));
        // with: one place for the line, the newest copy, and one for the detail
        let hits = ix.search(
            &q,
            None,
            Ranking {
                distinct: true,
                changes: Subjects::NONE,
                expects: Answers::NONE,
                ..few
            },
        );
        let sessions: Vec<Uuid> = hits.iter().map(|h| h.turn.unwrap().session_id).collect();
        assert_eq!(sessions, vec![Uuid::from_u128(5), once], "{hits:?}");
    }

    #[test]
    fn no_keyword_match_falls_back_to_similarity() {
        let mut ix = AgentIndex::default();
        let a = summary(
            "mark",
            "Interviewing at Globex next week",
            &["interviewing"],
            0,
        );
        ix.put_summary(&a, vector(&a.summary_text));
        // "interviewee" shares 4-grams with "interviewing", not a stem
        let hits = ix.search(
            &query("interviewee", None),
            vector("interviewee").as_ref(),
            RANK,
        );
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].keyword_score, 0.0);
        assert!(hits[0].similarity > 0.0);
    }

    /// A deterministic unit vector of `n` numbers.
    fn unit(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / norm).collect()
    }

    fn turn_id(session: u128, seq: u32) -> Uuid {
        TurnRef {
            session_id: Uuid::from_u128(session),
            seq,
        }
        .doc_id()
    }

    /// An index of `n` turns of mark's (call 1), each with a unit vector
    /// of its own ("model"), and the turns.
    fn mark_with_vectors(n: u32) -> (AgentIndex, Vec<(u32, ConversationTurn)>) {
        let mut ix = AgentIndex::default();
        let turns: Vec<(u32, ConversationTurn)> = (0..n)
            .map(|i| {
                (
                    i,
                    ConversationTurn {
                        user_message: format!("chatter number {i}"),
                        agent_response: "ok".into(),
                        timestamp: DateTime::<Utc>::from_timestamp(1_790_000_000 + i as i64, 0)
                            .unwrap(),
                    },
                )
            })
            .collect();
        ix.put_turns("mark", Uuid::from_u128(1), &turns);
        for i in 0..n {
            let values = unit(i as u64, 384);
            ix.set_vector(
                turn_id(1, i),
                StoredVector {
                    embedder: "model".into(),
                    values,
                },
            );
        }
        (ix, turns)
    }

    /// A question with no word of the turns': found by vector alone.
    fn vague_question() -> SearchQuery {
        SearchQuery {
            text: "what was that?".into(),
            kinds: vec![DocKind::Turn],
            user_id: Some("mark".into()),
            limit: 5,
            ..Default::default()
        }
    }

    const NEAREST: Ranking = Ranking {
        keyword_weight: 0.5,
        candidates: 40,
        max_term_share: 0.1,
        recency: None,
        dense: 5,
        exhaustive: false,
        related: None,
        distinct: false,
        changes: Subjects::NONE,
        expects: Answers::NONE,
    };

    /// Item `seed`'s vector, a little changed.
    fn near(seed: u64) -> Vec<f32> {
        let mut v = unit(seed, 384);
        for (k, x) in v.iter_mut().enumerate() {
            *x += if k % 7 == 0 { 0.01 } else { 0.0 };
        }
        v
    }

    /// Every live slot holding the partition's embedder's vector is in
    /// the list its `list_of` names, with its code, and nothing else is.
    fn partition_is_exact(ix: &AgentIndex) {
        let Some(ivf) = &ix.ivf else { return };
        let mut listed = 0;
        for (slot, m) in ix.slots.iter().enumerate() {
            let l = ix.list_of[slot];
            if m.live() && m.code_embedder == ivf.embedder {
                assert_ne!(l, NO_LIST, "slot {slot} is in no list");
                assert!(ivf.lists[l as usize].contains(&(slot as u32, ix.code(slot))));
                listed += 1;
            } else {
                assert_eq!(l, NO_LIST, "slot {slot} is listed");
            }
        }
        assert_eq!(ivf.lists.iter().map(Vec::len).sum::<usize>(), listed);
        assert_eq!(ix.coded[ivf.embedder as usize], listed);
    }

    #[test]
    fn a_large_index_probes_a_partition_that_follows_every_change() {
        let sv = |values: Vec<f32>| StoredVector {
            embedder: "model".into(),
            values,
        };
        let n = IVF_MIN as u32 + 4_000;
        let (mut ix, _) = mark_with_vectors(n);
        let id = |seq: u32| turn_id(1, seq);
        assert!(ix.ivf.is_some(), "no partition at {n} items");
        partition_is_exact(&ix);
        let (q, rank) = (vague_question(), NEAREST);
        let near = |seed: u64| sv(near(seed));
        let top = |ix: &AgentIndex, seed: u64, exhaustive: bool| {
            ix.search(&q, Some(&near(seed)), Ranking { exhaustive, ..rank })
                .first()
                .and_then(|h| h.turn)
                .map(|t| t.seq)
        };
        for seq in [3, 777, 12_345, n - 1] {
            assert_eq!(top(&ix, seq as u64, false), Some(seq));
            assert_eq!(top(&ix, seq as u64, true), Some(seq));
        }
        // A changed vector moves to its new list; a removed item leaves.
        ix.set_vector(id(5), sv(unit(999_999, 384)));
        partition_is_exact(&ix);
        assert_eq!(top(&ix, 999_999, false), Some(5));
        ix.remove(id(777));
        partition_is_exact(&ix);
        assert_ne!(top(&ix, 777, false), Some(777));
        // Removals past a quarter renumber the slots: the lists follow.
        for i in 6..8_000 {
            ix.remove(id(i));
        }
        partition_is_exact(&ix);
        assert!(ix.ivf.is_some());
        assert_eq!(top(&ix, 12_345, false), Some(12_345));
        // Below half the threshold the partition goes: a full scan again.
        for i in 8_000..(n - IVF_MIN as u32 / 2 + 10) {
            ix.remove(id(i));
        }
        assert!(ix.ivf.is_none());
        assert!(ix.list_of.iter().all(|&l| l == NO_LIST));
        assert_eq!(top(&ix, (n - 1) as u64, false), Some(n - 1));
    }

    #[test]
    fn the_vector_scan_finds_the_nearest_admitted_item_through_its_shortlist() {
        let sv = |embedder: &str, values: Vec<f32>| StoredVector {
            embedder: embedder.into(),
            values,
        };
        let (mut ix, turns) = mark_with_vectors(2_000);
        let session = Uuid::from_u128(1);
        // The same vector as the target, but another user's or another
        // embedder's: never found.
        let other = Uuid::from_u128(2);
        ix.put_turns("dana", other, &turns[..1]);
        ix.set_vector(
            TurnRef {
                session_id: other,
                seq: 0,
            }
            .doc_id(),
            sv("model", unit(777, 384)),
        );
        let (q, rank) = (vague_question(), NEAREST);
        // The query: item 777's vector, a little changed.
        let near = near(777);
        let hits = ix.search(&q, Some(&sv("model", near.clone())), rank);
        assert_eq!(
            hits.first().and_then(|h| h.turn),
            Some(TurnRef {
                session_id: session,
                seq: 777
            })
        );
        assert!(hits.iter().all(|h| h.user_id == "mark"));
        // Another embedder's query meets no vector; without `dense`, a
        // query with no indexed word falls back to similarity over every
        // admitted item (the full vectors), which agrees.
        assert!(ix
            .search(&q, Some(&sv("other", near.clone())), rank)
            .is_empty());
        let full = ix.search(
            &q,
            Some(&sv("model", near.clone())),
            Ranking { dense: 0, ..rank },
        );
        assert_eq!(full.first().map(|h| h.id), hits.first().map(|h| h.id));
        // After removals renumber the slots (a compaction), the codes move
        // with their items.
        for i in 0..1_500u32 {
            if i != 777 {
                ix.remove(turn_id(1, i));
            }
        }
        let hits = ix.search(&q, Some(&sv("model", near)), rank);
        assert_eq!(
            hits.first().and_then(|h| h.turn),
            Some(TurnRef {
                session_id: session,
                seq: 777
            })
        );
        // Every nearest item found is an item the full vectors rank near.
        assert!(hits[0].similarity > 0.99, "{}", hits[0].similarity);
    }
}
