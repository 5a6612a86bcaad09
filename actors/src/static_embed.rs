//! An offline embedder: static word vectors distilled from a sentence
//! model (all-MiniLM-L6-v2, by `examples/distill_static.rs`, for the words
//! of an English frequency list and the model's own), built into the
//! binary. A text's vector is the sum of its words' vectors,
//! L2-normalized: each word's vector is what the model made of the word
//! alone, reduced to 256 principal components and weighted by the word's
//! rarity, so "job" lands near "career" and "work" without a model run
//! (the Model2Vec idea). A word the table lacks is looked up by its stem
//! ("bouldering" by "boulder"), else it adds nothing: the keyword ranking
//! beside the vectors still matches it.
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use crate::embed::{dot_i8, Closeness, Embed, EmbedError};
use crate::lang::{stem, SHORT_FORMS};
use crate::port::BoxFuture;

/// The table: `RCSW1\n`, little-endian `u32` dimensions and words, then
/// per word its length, bytes, scale (`f32`) and numbers (`i8`).
static TABLE_BYTES: &[u8] = include_bytes!("../data/static-words.bin");

static BUILTIN: LazyLock<Result<Arc<Table>, String>> =
    LazyLock::new(|| Table::parse(TABLE_BYTES).map(Arc::new));

#[derive(Debug)]
struct Table {
    /// `static-<dimensions>-<FNV-1a of the table's bytes>`: a new table is
    /// another embedder, and what is stored is embedded again.
    name: String,
    dims: usize,
    words: HashMap<Box<str>, u32>,
    /// A word's stem to the most frequent word of that stem.
    stems: HashMap<String, u32>,
    scales: Vec<f32>,
    values: Vec<i8>,
    /// Each word's stem, and the length of its numbers (for cosines
    /// between words).
    row_stems: Vec<Box<str>>,
    norms: Vec<f32>,
    /// The rows that stand for their stem (its most frequent word), in
    /// order: the only rows a word's related words are drawn from.
    heads: Vec<u32>,
    /// The signs of each head's numbers, [`Table::sign_words`] words a
    /// head, in the order of `heads`.
    head_signs: Vec<u64>,
}

impl Table {
    fn parse(bytes: &[u8]) -> Result<Table, String> {
        let bad = |what: &str| format!("the static word table is malformed: {what}");
        let rest = bytes
            .strip_prefix(b"RCSW1\n")
            .ok_or_else(|| bad("no header"))?;
        let u32_at =
            |b: &[u8]| -> Option<u32> { Some(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)) };
        let dims = u32_at(rest).ok_or_else(|| bad("no dimensions"))? as usize;
        let count = u32_at(&rest[4..]).ok_or_else(|| bad("no count"))? as usize;
        if dims == 0 {
            return Err(bad("zero dimensions"));
        }
        // A word takes at least its length byte, one letter, a scale and
        // its numbers: a count the bytes cannot hold is refused before
        // anything is allocated for it.
        if count > rest.len() / (dims + 6) {
            return Err(bad("more words than bytes"));
        }
        let mut at = 8;
        let mut table = Table {
            name: format!("static-{dims}-{:08x}", crate::embed::fnv1a(bytes) as u32),
            dims,
            words: HashMap::with_capacity(count),
            stems: HashMap::with_capacity(count),
            scales: Vec::with_capacity(count),
            values: Vec::with_capacity(count * dims),
            row_stems: Vec::with_capacity(count),
            norms: Vec::with_capacity(count),
            heads: Vec::new(),
            head_signs: Vec::new(),
        };
        for i in 0..count as u32 {
            let len = *rest.get(at).ok_or_else(|| bad("cut short"))? as usize;
            let word = rest
                .get(at + 1..at + 1 + len)
                .ok_or_else(|| bad("cut short"))?;
            let word = std::str::from_utf8(word).map_err(|_| bad("a word is not UTF-8"))?;
            at += 1 + len;
            let scale = rest
                .get(at..at + 4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| bad("cut short"))?;
            if !scale.is_finite() {
                return Err(bad("a scale is not a number"));
            }
            at += 4;
            let values = rest.get(at..at + dims).ok_or_else(|| bad("cut short"))?;
            at += dims;
            table.words.insert(word.into(), i);
            let stemmed = stem(word);
            // (a short form, "hubby", does not stand for its word's stem:
            // the word's own row does)
            if !SHORT_FORMS.iter().any(|(f, _)| *f == word) {
                table.stems.entry(stemmed.clone()).or_insert(i);
            }
            table.row_stems.push(stemmed.into());
            table.scales.push(scale);
            table.values.extend(values.iter().map(|b| *b as i8));
            let norm = values
                .iter()
                .map(|b| (*b as i8 as f32).powi(2))
                .sum::<f32>()
                .sqrt();
            table.norms.push(norm);
        }
        if at != rest.len() {
            return Err(bad("bytes after the last word"));
        }
        table.heads = (0..count as u32)
            .filter(|&j| table.stems.get(&*table.row_stems[j as usize]) == Some(&j))
            .collect();
        table.head_signs = table
            .heads
            .iter()
            .flat_map(|&j| table.signs(table.row_values(j as usize)))
            .collect();
        Ok(table)
    }

    /// How many 64-bit words hold a row's signs.
    fn sign_words(&self) -> usize {
        self.dims.div_ceil(64)
    }

    /// A bit per number, set where it is above zero.
    fn signs(&self, values: &[i8]) -> Vec<u64> {
        let mut bits = vec![0u64; self.sign_words()];
        for (k, v) in values.iter().enumerate() {
            if *v > 0 {
                bits[k / 64] |= 1 << (k % 64);
            }
        }
        bits
    }

    fn row(&self, word: &str) -> Option<usize> {
        self.words
            .get(word)
            .or_else(|| self.stems.get(&stem(word)))
            .map(|&i| i as usize)
    }

    fn row_values(&self, row: usize) -> &[i8] {
        &self.values[row * self.dims..(row + 1) * self.dims]
    }

    /// The stems of the words near a stem's word, closest first (see
    /// [`related_stems`]).
    fn related(&self, stem_: &str, min_similarity: f32, exhaustive: bool) -> Vec<(u32, f32)> {
        let Some(row) = self
            .stems
            .get(stem_)
            .or_else(|| self.words.get(stem_))
            .map(|&r| r as usize)
        else {
            return Vec::new();
        };
        let own = &self.row_stems[row];
        let q = self.row_values(row);
        let qn = self.norms[row];
        if qn == 0.0 {
            return Vec::new();
        }
        // Over each stem's own word (its most frequent: "city" for "citi",
        // not "cities"): first the signs of every one, the way the vector
        // index shortlists (the share of signs two words differ in tracks
        // the angle between them), then the numbers of the closest
        // [`RELATED_SHORTLIST`], in integers.
        let shortlist: Vec<u32> = if exhaustive || self.heads.len() <= RELATED_SHORTLIST {
            self.heads.clone()
        } else {
            // How far each head's signs are from the word's, then a count
            // of heads per distance: the cut-off distance falls out of the
            // counts, and one more pass takes the heads within it (at the
            // cut-off itself, the first in table order) — no sort.
            let w = self.sign_words();
            let q_signs = self.signs(q);
            let apart = sign_distances(&self.head_signs, &q_signs);
            let mut per_distance = vec![0usize; w * 64 + 1];
            for &d in &apart {
                per_distance[d as usize] += 1;
            }
            let (mut cut, mut below) = (0usize, 0usize);
            while below + per_distance[cut] < RELATED_SHORTLIST {
                below += per_distance[cut];
                cut += 1;
            }
            let mut at_cut = RELATED_SHORTLIST - below;
            let mut shortlist = Vec::with_capacity(RELATED_SHORTLIST);
            for (&j, &d) in self.heads.iter().zip(&apart) {
                let d = d as usize;
                if d < cut {
                    shortlist.push(j);
                } else if d == cut && at_cut > 0 {
                    at_cut -= 1;
                    shortlist.push(j);
                }
            }
            shortlist
        };
        // The shortlisted rows lie scattered over the table: each is asked
        // of memory a few rows ahead of its turn, so the reads overlap
        // (without it, waiting on them took three quarters of the pass).
        const AHEAD: usize = 6;
        let mut near: Vec<(f32, u32)> = shortlist
            .iter()
            .enumerate()
            .filter_map(|(i, &j)| {
                if let Some(&next) = shortlist.get(i + AHEAD) {
                    prefetch(self.row_values(next as usize));
                }
                let dot = dot_i8(q, self.row_values(j as usize));
                let sim = dot as f32 / (qn * self.norms[j as usize]).max(f32::MIN_POSITIVE);
                (sim >= min_similarity && self.row_stems[j as usize] != *own).then_some((sim, j))
            })
            .collect();
        near.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        near.into_iter()
            .take(RELATED_MAX)
            .map(|(sim, j)| (j, sim))
            .collect()
    }

    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dims];
        for w in crate::lang::words(text) {
            // A stopword whole ("didn't"), then its parts ("cross-check"):
            // "didn" would pull every negated sentence together.
            if !crate::lang::content_word(&w) {
                continue;
            }
            for part in w
                .split(|c: char| !c.is_alphabetic())
                .filter(|p| crate::lang::content_word(p))
            {
                let Some(row) = self.row(part) else {
                    continue;
                };
                let scale = self.scales[row];
                let values = &self.values[row * self.dims..(row + 1) * self.dims];
                for (x, b) in v.iter_mut().zip(values) {
                    *x += *b as f32 * scale;
                }
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

/// How many signs each row of `signs` (rows of `q.len()` words) differs
/// from `q` in. (Reading the signs, not counting their bits, is what this
/// costs: the CPU's population count made no difference.)
fn sign_distances(signs: &[u64], q: &[u64]) -> Vec<u16> {
    signs
        .chunks_exact(q.len())
        .map(|row| {
            row.iter()
                .zip(q)
                .map(|(a, b)| (a ^ b).count_ones() as u16)
                .sum()
        })
        .collect()
}

/// Asks for `bytes` to be brought into the cache, without waiting for
/// them.
#[inline(always)]
pub(crate) fn prefetch(bytes: &[i8]) {
    prefetch_lines(bytes.as_ptr().cast(), bytes.len());
}

/// Asks memory for the lines of one value (a hint, as [`prefetch`]).
#[inline(always)]
pub(crate) fn prefetch_value<T: ?Sized>(value: &T) {
    prefetch_lines((value as *const T).cast(), std::mem::size_of_val(value));
}

#[inline(always)]
fn prefetch_lines(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut offset = 0;
        while offset < len {
            // SAFETY: a prefetch is only a hint: it reads nothing into the
            // program and never faults, and the address is inside the `len`
            // bytes from `start` the caller holds.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    start.wrapping_add(offset).cast(),
                )
            };
            offset += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// At most this many related words are kept per word.
pub const RELATED_MAX: usize = 512;

/// How many of a table's words, closest by their signs, a word's related
/// words are drawn from (of about 47,000: a pass over their signs and
/// these numbers costs a fifth of one over every word's numbers).
const RELATED_SHORTLIST: usize = 4_096;

/// A word near another in meaning (see [`related_stems`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelatedStem {
    row: u32,
    /// The cosine of the two words' static vectors.
    pub similarity: f32,
}

impl RelatedStem {
    /// The word's row in the built-in table (see [`stem_row`]).
    pub fn row(&self) -> u32 {
        self.row
    }

    /// The word's stem (the form the search index keys its words by).
    pub fn stem(&self) -> &'static str {
        match &*BUILTIN {
            Ok(table) => table.row_stems.get(self.row as usize).map_or("", |s| &**s),
            Err(_) => "",
        }
    }
}

/// The row of a stem's own word in the built-in table: the row a
/// [`RelatedStem`] of that stem has. `None` for a stem the table lacks.
pub fn stem_row(stem_: &str) -> Option<u32> {
    BUILTIN.as_ref().ok()?.stems.get(stem_).copied()
}

/// Related words kept, by threshold and stem.
type RelatedCache = HashMap<(u32, Box<str>), Arc<[RelatedStem]>>;

static RELATED: LazyLock<std::sync::Mutex<RelatedCache>> =
    LazyLock::new(|| std::sync::Mutex::new(HashMap::new()));

/// How many words' related words are kept (at most [`RELATED_MAX`] of 8
/// bytes each: 16 MiB at the very most); past it the kept set starts
/// again.
const RELATED_KEPT: usize = 4096;

/// The words near a word in meaning, by the built-in table: those whose
/// vectors lie within `min_similarity` (cosine) of the word's, closest
/// first, one per stem, at most [`RELATED_MAX`], the word's own stem left
/// out. "insect" gives "insects", "pest", "mosquito", … "wasp"; "city"
/// gives "urban", "town", … and city names. `stem_` is a stem or a whole
/// word; one the table lacks has none. Worked out once per word and
/// threshold (a pass over the signs of the table's words that stand for a
/// stem, then the numbers of the closest 4,096) and kept.
pub fn related_stems(stem_: &str, min_similarity: f32) -> Arc<[RelatedStem]> {
    let Ok(table) = BUILTIN.as_ref() else {
        return Arc::from(Vec::new());
    };
    let key = (min_similarity.to_bits(), Box::<str>::from(stem_));
    {
        let kept = RELATED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = kept.get(&key) {
            return found.clone();
        }
    }
    let found: Arc<[RelatedStem]> = table
        .related(stem_, min_similarity, false)
        .into_iter()
        .map(|(row, similarity)| RelatedStem { row, similarity })
        .collect();
    let mut kept = RELATED.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= RELATED_KEPT {
        kept.clear();
    }
    kept.insert(key, found.clone());
    found
}

/// Static word vectors from the table built into the binary.
#[derive(Debug, Clone)]
pub struct StaticEmbed {
    table: Arc<Table>,
}

impl StaticEmbed {
    /// The built-in table (parsed once per process).
    pub fn builtin() -> Result<StaticEmbed, EmbedError> {
        match &*BUILTIN {
            Ok(table) => Ok(StaticEmbed {
                table: table.clone(),
            }),
            Err(e) => Err(EmbedError::Failed(e.clone())),
        }
    }

    /// The vector of one text (all zeros when none of its words is known).
    pub fn vector(&self, text: &str) -> Vec<f32> {
        self.table.vector(text)
    }
}

impl Embed for StaticEmbed {
    fn name(&self) -> &str {
        &self.table.name
    }

    fn dimensions(&self) -> usize {
        self.table.dims
    }

    fn closeness(&self) -> Closeness {
        Closeness::WordVectors
    }

    fn embed_now(&self, text: &str) -> Option<Vec<f32>> {
        Some(self.table.vector(text))
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, EmbedError>> {
        let table = self.table.clone();
        Box::pin(async move { Ok(texts.iter().map(|t| table.vector(t)).collect()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::cosine;

    #[test]
    fn everyday_words_the_model_splits_have_vectors() {
        let e = StaticEmbed::builtin().unwrap();
        let sim = |a: &str, b: &str| cosine(&e.vector(a), &e.vector(b));
        // The model's own vocabulary holds none of these whole; the
        // frequency list brings them in.
        for (word, near, far) in [
            ("decaf", "coffee", "tractor"),
            ("terrier", "dog", "invoice"),
            ("cilantro", "parsley", "guitar"),
        ] {
            assert!(
                e.vector(word).iter().any(|x| *x != 0.0),
                "{word} has a vector"
            );
            assert!(
                sim(word, near) > sim(word, far) + 0.1,
                "{word}: {near} {} vs {far} {}",
                sim(word, near),
                sim(word, far)
            );
        }
    }

    #[test]
    fn every_stem_has_one_word_in_the_table() {
        // A second form of a stem would be a row that only weighs (by its
        // place in the table) and is never a related word.
        // (A short form, "hubby", reads as its word: its own row is
        // never a related word.)
        let table = BUILTIN.as_ref().unwrap();
        let short: Vec<u32> = SHORT_FORMS
            .iter()
            .filter_map(|(form, _)| table.words.get(*form).copied())
            .collect();
        for (row, s) in table.row_stems.iter().enumerate() {
            if short.contains(&(row as u32)) {
                continue;
            }
            assert_eq!(table.stems.get(&**s), Some(&(row as u32)), "{s}");
        }
    }

    #[test]
    fn related_words_land_closer_than_unrelated_ones() {
        let e = StaticEmbed::builtin().unwrap();
        let sim = |a: &str, b: &str| cosine(&e.vector(a), &e.vector(b));
        // (query, a text near it in meaning, one that is not)
        let pairs = [
            (
                "What bike did I buy?",
                "I got a new bicycle yesterday",
                "We had pasta for dinner",
            ),
            (
                "Where do you live now?",
                "We moved to Denver last spring",
                "My sister plays violin",
            ),
            (
                "Any pets?",
                "Our dog is called Biscuit",
                "The meeting ran late",
            ),
            ("job", "career", "banana"),
            ("dog", "puppy", "meeting"),
            (
                "Where does your sister work?",
                "My sister Leela is a nurse",
                "I bought a new laptop",
            ),
        ];
        for (q, near, far) in pairs {
            let (a, b) = (sim(q, near), sim(q, far));
            assert!(a > b + 0.05, "{q}: {a} (near) vs {b} (far)");
        }
        // What a sentence model gets from context, word vectors miss: a
        // nurse is a job only in a sentence.
        assert!(sim("work", "nurse") < 0.2);
        // a stopword adds nothing, whole or in parts
        assert!(e.vector("didn't wasn't").iter().all(|x| *x == 0.0));
        assert!(e.name().starts_with("static-256-"), "{}", e.name());
        // inflections meet through the stem; unknown words add nothing
        assert!(sim("bouldering", "boulder") > 0.99);
        assert!(e.vector("zzqx").iter().all(|x| *x == 0.0));
    }

    #[test]
    fn the_sign_shortlist_keeps_a_words_nearest() {
        // Every 500th word that stands for its stem: the ten nearest the
        // shortlist finds are the exhaustive scan's ten nearest, almost
        // always (over every 40th, 11,749 of 11,790; a miss swaps one of a
        // word's weakest ten for the next).
        let table = BUILTIN.as_ref().unwrap();
        let (mut asked, mut kept) = (0usize, 0usize);
        for &row in table.heads.iter().step_by(500) {
            let stem_ = &*table.row_stems[row as usize];
            let exact = table.related(stem_, 0.3, true);
            let short = table.related(stem_, 0.3, false);
            let top: Vec<u32> = exact.iter().take(10).map(|r| r.0).collect();
            asked += top.len();
            kept += top
                .iter()
                .filter(|j| short.iter().take(10).any(|r| r.0 == **j))
                .count();
            // what is found is scored exactly, closest first
            for (r, e) in short.iter().zip(&exact) {
                assert!(r.1 <= e.1 + 1e-6);
            }
        }
        assert!(kept as f64 >= 0.98 * asked as f64, "{kept} of {asked}");
    }

    #[test]
    fn related_words_are_the_nearest_in_meaning_as_stems() {
        let near = related_stems("insect", 0.3);
        let stems: Vec<&str> = near.iter().map(RelatedStem::stem).collect();
        // a kind of insect, as the index keys it (a stem)
        assert!(stems.contains(&"wasp"), "{stems:?}");
        // the word itself, in any form, is not its own relative
        assert!(!stems.contains(&"insect"), "{stems:?}");
        // closest first, each stem once, every one at the threshold
        assert!(near.windows(2).all(|w| w[0].similarity >= w[1].similarity));
        let mut unique = stems.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), stems.len());
        assert!(near
            .iter()
            .all(|r| r.similarity >= 0.3 && r.similarity <= 1.0 + 1e-6));
        assert!(near.len() <= RELATED_MAX);
        // a stem finds the word ("citi" is how "city" is indexed)
        let city: Vec<&str> = related_stems(&stem("city"), 0.3)
            .iter()
            .map(RelatedStem::stem)
            .collect();
        assert!(city.contains(&"urban"), "{city:?}");
        // an unknown word has none; a higher threshold keeps fewer
        assert!(related_stems("zzqx", 0.3).is_empty());
        assert!(related_stems("insect", 0.6).len() < near.len());
        // kept: the same answer the second time
        assert!(Arc::ptr_eq(
            &related_stems("insect", 0.3),
            &related_stems("insect", 0.3)
        ));
    }

    #[test]
    fn a_malformed_table_is_refused_with_what_is_wrong() {
        assert!(Table::parse(b"nope").unwrap_err().contains("no header"));
        let header = |dims: u32, count: u32| {
            let mut b = b"RCSW1\n".to_vec();
            b.extend_from_slice(&dims.to_le_bytes());
            b.extend_from_slice(&count.to_le_bytes());
            b
        };
        assert!(Table::parse(&header(0, 1))
            .unwrap_err()
            .contains("zero dimensions"));
        assert!(Table::parse(&header(256, u32::MAX))
            .unwrap_err()
            .contains("more words"));
        let mut nan = header(1, 1);
        nan.extend_from_slice(&[2, b'o', b'k']);
        nan.extend_from_slice(&f32::NAN.to_le_bytes());
        nan.push(1);
        assert!(Table::parse(&nan).unwrap_err().contains("not a number"));
        let mut cut = TABLE_BYTES[..TABLE_BYTES.len() - 3].to_vec();
        assert!(Table::parse(&cut).unwrap_err().contains("cut short"));
        cut.extend_from_slice(&TABLE_BYTES[TABLE_BYTES.len() - 3..]);
        cut.push(0);
        assert!(Table::parse(&cut)
            .unwrap_err()
            .contains("after the last word"));
    }
}
