//! One agent's index: its items, who may see each, and how a search
//! runs over the keyword side ([`super::keyword`]) and the vector side
//! ([`super::vector`]) and blends what they find.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::query::{DocKind, Filter, Found, Ranking, SearchHit, SearchQuery, TurnRef};
use super::vector::{
    sign_code, split_code, Ivf, Quantized, QueryVector, CODE_WORDS, HEAD_WORDS, NO_CODE, NO_LIST,
    TAIL_WORDS,
};
use crate::embed::StoredVector;
use crate::lang::tokens;
use crate::model::{isoformat, ConversationSummary, ConversationTurn, Fact, Speaker, Visibility};
use crate::text::{Answers, Subjects};

/// The text every turn document shares: a turn's words are read from the
/// store when it is shown, not kept twice in memory.
static NO_TEXT: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

/// One agent's documents and postings. Removed documents leave a hole
/// (their postings are skipped, their terms' document frequencies drop at
/// once, so scores equal a fresh build's) until holes outnumber a quarter
/// of the documents and the postings are rebuilt.
#[derive(Debug, Default)]
pub struct AgentIndex {
    pub(super) docs: Vec<Option<Doc>>,
    by_id: HashMap<Uuid, u32>,
    /// Hashed by foldhash, seeded at random per index: a query looks up
    /// each of its words and each of their related words (thousands), and
    /// SipHash made those the search's largest cost after the postings.
    pub(super) term_ids: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    /// Row of the static word table -> the term of that row's stem, for
    /// the terms the table holds: a related word found by its number, not
    /// by hashing its stem again (it grows with the agent's words, not
    /// with the table).
    pub(super) row_terms: HashMap<u32, u32, foldhash::fast::RandomState>,
    /// Per term: (document slot, term frequency).
    pub(super) postings: Vec<Vec<(u32, u16)>>,
    /// Per term: live documents holding it.
    pub(super) df: Vec<u32>,
    pub(super) live: usize,
    total_len: u64,
    /// Names of the embedders of the vectors held (rarely more than one).
    embedders: Vec<String>,
    /// User ids, shared by their documents, and their numbers (from 1;
    /// a forgotten user's number is not given again).
    users: HashMap<Arc<str>, u32>,
    next_user: u32,
    /// Per slot, what the scoring loop reads, packed so that it never
    /// touches a document: its length and who may see it.
    pub(super) slots: Vec<SlotMeta>,
    /// Per slot, the first `HEAD_WORDS` words of its vector's sign bits
    /// (zeros without one): all a scan reads of every item.
    pub(super) heads: Vec<[u64; HEAD_WORDS]>,
    /// Per slot, the rest of the sign bits: read for the scan's shortlist.
    pub(super) tails: Vec<[u64; TAIL_WORDS]>,
    /// Per embedder (by position in `embedders`), the live slots holding
    /// its vector.
    pub(super) coded: Vec<usize>,
    /// The partition the vector scan probes once an embedder has
    /// `IVF_MIN` items, and per slot the list it is in (`NO_LIST`: none).
    pub(super) ivf: Option<Ivf>,
    pub(super) list_of: Vec<u16>,
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
            agent_label: super::turns::agent_label("agent"),
            zone: chrono_tz::UTC,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Doc {
    id: Uuid,
    kind: DocKind,
    user_id: Arc<str>,
    shared: bool,
    pub(super) start: DateTime<Utc>,
    pub(super) end: DateTime<Utc>,
    len: u32,
    /// Its distinct terms, so removing it keeps document frequencies exact.
    pub(super) terms: Box<[u32]>,
    text: Arc<str>,
    pub(super) vector: Option<Quantized>,
    /// A turn as a read shows it, made when it is indexed (`None` for the
    /// other kinds; where it is stored is its [`PreparedTurn::turn`](super::turns::PreparedTurn::turn)).
    prepared: Option<Arc<super::turns::PreparedTurn>>,
    /// A hash of its indexed words in order (stems, stopwords left out):
    /// the same for two items that say the same thing, whatever their
    /// case and punctuation.
    pub(super) words: u64,
}

/// A slot's length, kind, owner (by number) and whether it is shared or
/// empty, in 8 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotMeta {
    /// The owner's number in `AgentIndex::users`.
    pub(super) user: u32,
    /// In words, at most `u16::MAX` (a longer item scores as that long).
    pub(super) len: u16,
    /// The kind's bit, `SHARED` and `LIVE`.
    bits: u8,
    /// The embedder of the slot's vector ([`NO_CODE`]: none; its sign
    /// bits are in `AgentIndex::codes`).
    pub(super) code_embedder: u8,
}

const SHARED: u8 = 0x40;
const LIVE: u8 = 0x80;
// The kinds' bits (Turn, the last kind, is 5) stay below SHARED, and a
// slot is 8 bytes (what the keyword loop reads per posting).
const _: () = assert!(DocKind::Turn as u8 <= 5 && std::mem::size_of::<SlotMeta>() == 8);

impl SlotMeta {
    pub(super) fn live(&self) -> bool {
        self.bits & LIVE != 0
    }

    pub(super) fn shared(&self) -> bool {
        self.bits & SHARED != 0
    }

    pub(super) fn kind_bit(&self) -> u8 {
        self.bits & !(SHARED | LIVE)
    }
}

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
                agent_label: super::turns::agent_label(agent_id),
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
            let who = super::turns::Speakers {
                user_id: &user,
                agent_label: &self.speakers.agent_label,
                zone: self.speakers.zone,
            };
            let prepared = Arc::new(super::turns::prepare(who, r, t));
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
    pub fn turns_around(&self, r: TurnRef) -> Option<super::turns::Around> {
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
        let asked: Vec<String> = tokens(&q.text).collect();
        self.ranked(q, &asked, vector, ranking)
            .into_iter()
            .filter_map(|(slot, f)| {
                let d = self.doc(slot)?;
                Some(SearchHit {
                    id: f.id,
                    kind: f.kind,
                    user_id: d.user_id.to_string(),
                    period_start: f.period_start,
                    period_end: f.period_end,
                    score: f.score,
                    keyword_score: f.keyword_score,
                    similarity: f.similarity,
                    text: d.text.to_string(),
                    turn: f.turn,
                })
            })
            .collect()
    }

    /// [`AgentIndex::search`]'s hits without their words, for a context
    /// read (which shows items from its own sources); `asked` is the
    /// [`tokens`](crate::lang::tokens) of `q.text`, which the read splits
    /// once for its other uses too.
    pub fn find(
        &self,
        q: &SearchQuery,
        asked: &[String],
        vector: Option<&StoredVector>,
        ranking: Ranking,
    ) -> Vec<Found> {
        self.ranked(q, asked, vector, ranking)
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    }

    /// The `q.limit` best items as (slot, hit), best first.
    fn ranked(
        &self,
        q: &SearchQuery,
        asked: &[String],
        vector: Option<&StoredVector>,
        ranking: Ranking,
    ) -> Vec<(u32, Found)> {
        if q.limit == 0 || self.live == 0 {
            return Vec::new();
        }
        let n = self.live as f32;
        let avg = (self.total_len as f32 / n).max(1.0);
        let filter = self.filter(q);
        let terms = self.query_terms(asked, ranking);
        let scores = self.keyword_scores(&terms.weighted, &filter, avg, ranking.keyword.b);
        let query = QueryVector::new(vector, &self.embedders);
        // The items nearest the query's vector, beside the keyword hits.
        let nearest = self.nearest(&query, &filter, ranking);
        let ranked = if scores.is_empty() && nearest.is_empty() {
            self.by_similarity(&query, &filter)
        } else {
            let keep = ranking.candidates.max(q.limit);
            let cands = self.keyword_candidates(
                scores,
                &terms.common,
                keep,
                ranking.distinct,
                avg,
                ranking.keyword,
            );
            self.blend(cands, &nearest, ranking, &query)
        };
        self.hits(ranked, q.limit, &query)
    }

    /// No word of the query is indexed: similarity alone, over every
    /// admitted item, as (score, keyword score, similarity, slot).
    fn by_similarity(&self, query: &QueryVector, filter: &Filter) -> Vec<(f32, f32, f32, u32)> {
        let Some(qv) = query.vector else {
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
                let sim = query.similarity(d);
                (sim > 0.0).then_some((sim, 0.0, sim, slot as u32))
            })
            .collect()
    }

    /// The keyword candidates and the `nearest` by vector, each scored by
    /// its keyword score (scaled to the best candidate's), its similarity
    /// and its recency, as (score, keyword score, similarity, slot).
    fn blend(
        &self,
        mut cands: Vec<(f32, u32)>,
        nearest: &[(f32, u32)],
        ranking: Ranking,
        query: &QueryVector,
    ) -> Vec<(f32, f32, f32, u32)> {
        let w = ranking.keyword_weight;
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
        // A similarity that weighs nothing in the score (keywords alone)
        // is worked out for the hits shown only, in `hits` (NaN here: it
        // adds nothing below, `f32::max` leaving it out).
        let weighed = w != 1.0 || !nearest.is_empty();
        let scored: Vec<(f32, f32, f32, u32)> = cands
            .into_iter()
            .filter_map(|(bm25, slot)| {
                let d = self.docs.get(slot as usize)?.as_ref()?;
                let recent = ranking.recency.map_or(0.0, |r| r.bonus(d.end));
                let sim = if weighed {
                    query.similarity(d)
                } else {
                    f32::NAN
                };
                Some((bm25, sim, recent, slot))
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
    }

    /// The best `limit` of `ranked` as hits, best first; a similarity
    /// left out of the ranking (NaN) is worked out for them.
    fn hits(
        &self,
        mut ranked: Vec<(f32, f32, f32, u32)>,
        limit: usize,
        query: &QueryVector,
    ) -> Vec<(u32, Found)> {
        // Ties by time, newest first, then id: the order is total, so the
        // best `limit` are the same picked first and sorted after.
        let order = |a: &(f32, f32, f32, u32), b: &(f32, f32, f32, u32)| {
            b.0.total_cmp(&a.0).then_with(|| {
                let (da, db) = (self.doc(a.3), self.doc(b.3));
                db.map(|d| (d.end, d.id)).cmp(&da.map(|d| (d.end, d.id)))
            })
        };
        if limit > 0 && ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, order);
            ranked.truncate(limit);
        }
        ranked.sort_by(order);
        ranked
            .into_iter()
            .take(limit)
            .filter_map(|(score, bm25, sim, slot)| {
                let d = self.doc(slot)?;
                let sim = if sim.is_nan() {
                    query.similarity(d)
                } else {
                    sim
                };
                Some((
                    slot,
                    Found {
                        id: d.id,
                        kind: d.kind,
                        period_start: d.start,
                        period_end: d.end,
                        score,
                        keyword_score: bm25,
                        similarity: sim,
                        turn: d.prepared.as_ref().map(|p| p.turn()),
                    },
                ))
            })
            .collect()
    }

    pub(super) fn doc(&self, slot: u32) -> Option<&Doc> {
        self.docs.get(slot as usize)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashingEmbed;
    use crate::model::FactCategory;
    use crate::search::testing::*;

    fn vector(text: &str) -> Option<StoredVector> {
        Some(StoredVector {
            embedder: "hashing".into(),
            values: HashingEmbed::default().vector(text),
        })
    }

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
    fn ranked_by_keywords_alone_the_hits_still_carry_their_similarity() {
        let mut ix = AgentIndex::default();
        // Ties on the words, and more items than are shown.
        for day in 0..30 {
            let s = summary(
                "mark",
                &format!("Mark planned a sailing trip to Porto number {day}."),
                &["sailing"],
                day,
            );
            ix.put_summary(&s, vector(&s.summary_text));
        }
        let q = query("sailing trip to Porto", Some("mark"));
        let qv = vector(&q.text);
        let words_only = Ranking {
            keyword_weight: 1.0,
            ..RANK
        };
        let hits = ix.search(&q, qv.as_ref(), words_only);
        assert_eq!(hits.len(), 10);
        // The same items as a blend gives them their similarity.
        let blended: HashMap<Uuid, f32> = ix
            .search(
                &SearchQuery {
                    limit: 30,
                    ..q.clone()
                },
                qv.as_ref(),
                RANK,
            )
            .into_iter()
            .map(|h| (h.id, h.similarity))
            .collect();
        for h in &hits {
            assert!(h.similarity > 0.0, "{h:?}");
            assert_eq!(Some(&h.similarity), blended.get(&h.id));
        }
        // Ties break newest first, as they always have.
        let ends: Vec<_> = hits.iter().map(|h| h.period_end).collect();
        let mut newest_first = ends.clone();
        newest_first.sort_by(|a, b| b.cmp(a));
        assert_eq!(ends, newest_first);
        assert_eq!(
            hits[0].period_end,
            ix.search(&q, qv.as_ref(), RANK)[0].period_end
        );
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
            .item(
                &[],
                crate::search::Shown::Beside,
                crate::search::AnswerLimits::DEFAULT,
                &crate::context::CharEstimate,
            )
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
}
