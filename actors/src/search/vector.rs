//! The vector side of an index: vectors kept as signed bytes, their sign
//! bits scanned first (in blocks the CPU counts with one instruction), and
//! the partition a large index probes instead of reading every item.

use super::index::{AgentIndex, Doc};
use super::query::{Filter, Ranking};
use crate::embed::{dot_i8, StoredVector};

/// A vector kept in a quarter of the memory: one signed byte per number
/// and a scale, with the embedder's index in the agent's list (the cosine
/// it gives differs from the full vector's by well under 0.01).
#[derive(Debug, Clone)]
pub(super) struct Quantized {
    pub(super) embedder: u8,
    scale: f32,
    norm: f32,
    pub(super) values: Box<[i8]>,
}

impl Quantized {
    pub(super) fn new(embedder: u8, v: &[f32]) -> Quantized {
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

/// An inverted file over sign codes: the coded slots of one embedder,
/// parted by their nearest of `IVF_LISTS` centroids (binary k-means:
/// each centroid is its members' majority bit). A search reads the
/// centroids, then the lists of the closest until it has probed
/// `IVF_PROBE` lists and holds enough admitted items: a few percent of a
/// large index instead of all of it, at the cost of missing a near item
/// filed under a centroid not probed (the bench reports the overlap with
/// the full scan).
#[derive(Debug)]
pub(super) struct Ivf {
    embedder: u8,
    centroids: Vec<[u64; CODE_WORDS]>,
    /// Per centroid, its slots with their codes (a copy, so a probe reads
    /// one list in order instead of the codes of slots all over).
    pub(super) lists: Vec<Vec<(u32, [u64; CODE_WORDS])>>,
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
pub(super) const NO_LIST: u16 = u16::MAX;

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
pub(super) const CODE_WORDS: usize = 6;
pub(super) const HEAD_WORDS: usize = 2;
pub(super) const TAIL_WORDS: usize = CODE_WORDS - HEAD_WORDS;
const CODE_BITS: usize = CODE_WORDS * 64;
pub(super) const NO_CODE: u8 = u8::MAX;
/// Kept by the head bits per item asked for.
const COARSE_FACTOR: usize = 32;
/// Kept by all the bits per item asked for.
const SHORTLIST_FACTOR: usize = 4;

pub(super) fn split_code(code: [u64; CODE_WORDS]) -> ([u64; HEAD_WORDS], [u64; TAIL_WORDS]) {
    let mut head = [0; HEAD_WORDS];
    let mut tail = [0; TAIL_WORDS];
    head.copy_from_slice(&code[..HEAD_WORDS]);
    tail.copy_from_slice(&code[HEAD_WORDS..]);
    (head, tail)
}

pub(super) fn sign_code<T: Copy + PartialOrd + Default>(v: &[T]) -> [u64; CODE_WORDS] {
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

/// The query's vector as items are compared with it: the embedder's place
/// in the index's list of them and the vector's length, worked out once
/// per search.
pub(super) struct QueryVector<'a> {
    pub(super) vector: Option<&'a StoredVector>,
    /// `None` for a query without a vector, or by an embedder no item's
    /// vector is by.
    pub(super) embedder: Option<usize>,
    norm: f32,
}

impl<'a> QueryVector<'a> {
    pub(super) fn new(vector: Option<&'a StoredVector>, embedders: &[String]) -> QueryVector<'a> {
        QueryVector {
            vector,
            embedder: vector.and_then(|qv| embedders.iter().position(|e| *e == qv.embedder)),
            norm: vector.map_or(0.0, |qv| {
                qv.values.iter().map(|x| x * x).sum::<f32>().sqrt()
            }),
        }
    }

    /// Cosine similarity of the query's vector and the item's (by the same
    /// embedder, else 0).
    pub(super) fn similarity(&self, d: &Doc) -> f32 {
        match (self.vector, &d.vector, self.embedder) {
            (Some(qv), Some(dv), Some(e)) if dv.embedder as usize == e => {
                dv.cosine(&qv.values, self.norm)
            }
            _ => 0.0,
        }
    }
}

impl AgentIndex {
    /// The `ranking.dense` admitted items nearest the query's vector (of
    /// the same embedder), closest first, as (similarity, slot); none
    /// without a vector or when `ranking.dense` is 0.
    pub(super) fn nearest(
        &self,
        query: &QueryVector,
        filter: &Filter,
        ranking: Ranking,
    ) -> Vec<(f32, u32)> {
        let mut nearest: Vec<(f32, u32)> = Vec::new();
        let query_code = query
            .embedder
            .and_then(|e| u8::try_from(e).ok())
            .filter(|&e| e != NO_CODE);
        let (Some(qv), Some(e), true) = (query.vector, query_code, ranking.dense > 0) else {
            return nearest;
        };
        let q = Quantized::new(e, &qv.values);
        let short = self.vector_shortlist(qv, &q, filter, ranking);
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
        nearest
    }

    /// The admitted items whose sign bits are closest to those of `qv`
    /// (quantized as `q`), `ranking.dense * SHORTLIST_FACTOR` of them as
    /// (distance, slot): by the partition's lists nearest the query where
    /// there is one, else by the head bits of every item in one pass, then
    /// all the bits of the closest.
    fn vector_shortlist(
        &self,
        qv: &StoredVector,
        q: &Quantized,
        filter: &Filter,
        ranking: Ranking,
    ) -> Vec<(u32, u32)> {
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
        match &self.ivf {
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
        }
    }

    pub(super) fn code(&self, slot: usize) -> [u64; CODE_WORDS] {
        let mut code = [0u64; CODE_WORDS];
        if let (Some(h), Some(t)) = (self.heads.get(slot), self.tails.get(slot)) {
            code[..HEAD_WORDS].copy_from_slice(h);
            code[HEAD_WORDS..].copy_from_slice(t);
        }
        code
    }

    /// A slot's code changed (or it died): its count and its list follow.
    pub(super) fn recode(&mut self, slot: usize, old: u8, new: u8) {
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

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    use super::*;
    use crate::embed::HashingEmbed;
    use crate::model::ConversationTurn;
    use crate::search::{DocKind, KeywordTuning, SearchQuery, TurnRef};
    use crate::text::{Answers, Subjects};

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
        keyword: KeywordTuning::DEFAULT,
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
