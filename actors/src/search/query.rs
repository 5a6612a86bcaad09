//! What a search asks and what it returns: the kinds of item, the query
//! and its filters, how results are ranked, and a hit.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::index::{Doc, SlotMeta};
use crate::model::SummaryType;
use crate::text::{Answers, Subjects};

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

/// A hit as a context read takes it: which item, of what kind and time,
/// how it ranked and, for a turn, where it is stored. The read shows
/// items from its own prepared sources, so a hit carries none of the
/// words [`SearchHit`] copies out of the index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub id: Uuid,
    pub kind: DocKind,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// As [`SearchHit::score`], [`SearchHit::keyword_score`] and
    /// [`SearchHit::similarity`].
    pub score: f32,
    pub keyword_score: f32,
    pub similarity: f32,
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
    /// The keyword side's tuning.
    pub keyword: KeywordTuning,
}

/// The keyword side's tuning: BM25's length normalization and how far it
/// looks past the candidates wanted (a context read takes these from
/// `context.ranking`; [`KeywordTuning::DEFAULT`] holds its defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeywordTuning {
    /// BM25's `b`: how much an item's length scales its words' scores.
    pub b: f32,
    /// With words too common to score by ([`Ranking::max_term_share`]),
    /// this many times the candidates wanted are kept for them to
    /// re-rank.
    pub common_rerank: usize,
    /// How many times past the candidates wanted [`Ranking::distinct`]
    /// looks for items that are not repeats.
    pub repeats_widen: usize,
    /// A related word in at most this many of an agent's items counts as
    /// said once or twice ([`RelatedWords::per_word`]).
    pub rare_related_df: u32,
}

impl KeywordTuning {
    /// The usual BM25 `b`, four times the candidates for the common words
    /// and for repeats, and "once or twice" as at most two items.
    pub const DEFAULT: KeywordTuning = KeywordTuning {
        b: 0.75,
        common_rerank: 4,
        repeats_widen: 4,
        rare_related_df: 2,
    };
}

impl Default for KeywordTuning {
    fn default() -> Self {
        KeywordTuning::DEFAULT
    }
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
    pub(super) fn bonus(&self, at: DateTime<Utc>) -> f32 {
        let days = (self.now - at).num_seconds().max(0) as f32 / 86_400.0;
        self.weight * 0.5f32.powf(days / self.half_life_days.max(f32::MIN_POSITIVE))
    }
}

/// A query's filters, resolved once per search: kinds as a bit set, the
/// user as the index's number for it.
pub(super) struct Filter {
    pub(super) kinds: u8,
    /// The user's number in the index; `Some(0)` for a user the index
    /// holds nothing of.
    pub(super) user: Option<u32>,
    pub(super) since: Option<DateTime<Utc>>,
    pub(super) until: Option<DateTime<Utc>>,
}

impl DocKind {
    pub(super) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl Filter {
    /// Kind and owner, from the packed slot alone.
    pub(super) fn admits_slot(&self, m: &SlotMeta) -> bool {
        if !m.live() || self.kinds & m.kind_bit() == 0 {
            return false;
        }
        match self.user {
            Some(u) => m.user == u || (m.shared() && m.kind_bit() == DocKind::Fact.bit()),
            None => true,
        }
    }

    pub(super) fn timed(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    pub(super) fn admits_time(&self, d: &Doc) -> bool {
        !(self.since.is_some_and(|t| d.end < t) || self.until.is_some_and(|t| d.start > t))
    }

    pub(super) fn admits(&self, m: &SlotMeta, d: &Doc) -> bool {
        self.admits_slot(m) && self.admits_time(d)
    }
}
