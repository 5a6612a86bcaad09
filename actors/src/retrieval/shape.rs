//! Hits to items: a retrieved turn with the turns either side of it, an
//! agent's question with the user's answer to it, facts as the facts tier
//! shows them, summaries as the sentences holding the words asked; each
//! exchange and each summary sentence once.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::HashSet;

use uuid::Uuid;

use super::excerpt::{summary_excerpt, SummarySentences};
use super::select::Retrieved;
use crate::context::{ContextItem, PreparedFacts, Source, Tier, TokenCounter};
use crate::model::{ConversationSummary, Speaker};
use crate::search::{AnswerLimits, Around, DocKind, Found, Shown, TurnRef};
use crate::settings::RankingSettings;

/// A summary by id, with its sentences, as the caller holds them.
pub type SummaryLookup<'a> =
    dyn Fn(Uuid) -> Option<(Arc<ConversationSummary>, Arc<SummarySentences>)> + 'a;

/// What shaping works from.
pub struct Shaping<'a> {
    /// The search's hits, best first.
    pub hits: Vec<Found>,
    /// The stored turns either side of each turn hit ([`turns_to_read`]),
    /// prepared.
    pub around: HashMap<TurnRef, Around>,
    /// A call whose turns the context shows verbatim already, and the
    /// first of them shown: not retrieved again.
    pub skip_session: Option<(Uuid, u32)>,
    /// The stems of the query's words ([`stem_keys`](crate::lang::stem_keys) of its text): they
    /// pick a summary's sentences and a turn's.
    pub asked: Vec<u64>,
    /// Whose words the message asks about, where it names a participant
    /// ([`super::query`]).
    pub about: Option<Speaker>,
    /// The facts the user may see, prepared.
    pub facts: &'a PreparedFacts,
    pub summary: &'a SummaryLookup<'a>,
    /// How much of a retrieved turn or summary is shown.
    pub ranking: &'a RankingSettings,
}

/// The turn hits whose surrounding turns [`shape`] needs, each once, in
/// rank order (those of the call shown verbatim left out).
pub fn turns_to_read(hits: &[Found], skip_session: Option<(Uuid, u32)>) -> Vec<TurnRef> {
    let mut out: Vec<TurnRef> = Vec::new();
    let mut seen = HashSet::default();
    for h in hits {
        if let (DocKind::Turn, Some(r)) = (h.kind, h.turn) {
            let shown = skip_session.is_some_and(|(s, first)| s == r.session_id && r.seq >= first);
            if !shown && seen.insert(r) {
                out.push(r);
            }
        }
    }
    out
}

/// `hits` of a question about the user's words, with the turns where
/// the words asked are only in what the agent side tells of its own life
/// moved after the others, each group in rank order: "What does Ji-woo's
/// sister do?" is answered by Ji-woo's "my sister's a nurse", not by the
/// other side's "my sister's a dentist".
///
/// Only that way round: the agent side's answer follows the user's words
/// in the same turn, so a turn where the user tells of their own life
/// ("I'm out of audiobooks, what should I get?") holds the answer to a
/// question about the agent's words; and where the agent side asks or
/// speaks to the user ("How's the boat engine?") the user's reply is the
/// answer.
fn by_side(hits: Vec<Found>, around: &HashMap<TurnRef, Around>, asked: &[u64]) -> Vec<Found> {
    let (first, after): (Vec<Found>, Vec<Found>) = hits.into_iter().partition(|h| {
        let turn = h
            .turn
            .filter(|_| h.kind == DocKind::Turn)
            .and_then(|r| around.get(&r)?.iter().find(|t| t.seq == r.seq));
        !turn.is_some_and(|t| {
            t.holds(Speaker::Agent, asked) == (true, false)
                && t.holds(Speaker::User, asked) == (false, false)
        })
    });
    let mut hits = first;
    hits.extend(after);
    hits
}

/// The retrieved items for `shaping`'s hits, best first, the turns beside
/// them after.
pub fn shape(shaping: Shaping<'_>, counter: &dyn TokenCounter) -> Vec<Retrieved> {
    let Shaping {
        hits,
        around: read_around,
        skip_session,
        asked,
        about,
        facts,
        summary,
        ranking,
    } = shaping;
    let out = Vec::with_capacity(hits.len());
    // A day, week or topic of one call reads like its session summary:
    // show the words once.
    let mut seen_sentences = HashSet::default();
    let hits = match about {
        Some(Speaker::User) => by_side(hits, &read_around, &asked),
        _ => hits,
    };
    let restated = restated(&read_around);
    let mut shaper = Shaper {
        counter,
        limits: AnswerLimits {
            short_tokens: ranking.short_answer_tokens,
            hit_tokens: ranking.hit_answer_tokens,
            sentences: ranking.answer_sentences,
        },
        asked,
        skip_session,
        turns_hit: read_around,
        shown_turns: HashSet::default(),
        said: HashSet::default(),
        around: Vec::new(),
        out,
    };
    for h in hits {
        let item = match (h.kind, h.turn) {
            (DocKind::Turn, Some(r)) => {
                shaper.turn_hit(r, h.period_start);
                continue;
            }
            (DocKind::Fact, _) => match facts.get(h.id) {
                Some(i) => ContextItem {
                    tier: Tier::Retrieved,
                    ..i.clone()
                },
                None => continue,
            },
            // The user's current summaries are those the sources hold.
            (_, _) => match summary(h.id) {
                Some((s, sentences)) => match summary_excerpt(
                    &s,
                    &sentences,
                    &shaper.asked,
                    ranking.summary_sentences,
                    &mut seen_sentences,
                    &restated,
                    counter,
                ) {
                    Some(item) => item,
                    None => continue,
                },
                None => continue,
            },
        };
        shaper.out.push(Retrieved {
            item,
            at: h.period_start,
        });
    }
    shaper.with_turns_beside()
}

/// What the users of the retrieved turns said ([`said_key`]s): a
/// summary's quote of a turn retrieved too is left to the turn, which
/// shows it with its date and the turns around it, where the turn ranks
/// (a summary's quotes rank higher than the turn they quote: the summary
/// says their words again in its headline, and it is newer than the
/// call).
///
/// [`said_key`]: crate::reflect::extractive::said_key
fn restated(turns_hit: &HashMap<TurnRef, Around>) -> HashSet<u64> {
    let mut restated = HashSet::default();
    for (r, around) in turns_hit {
        if let Some(t) = around.iter().find(|t| t.seq == r.seq) {
            restated.extend(t.said.iter().copied());
        }
    }
    restated
}

/// What [`shape`] has shown so far, and what it shows the turns with.
struct Shaper<'c> {
    /// What the items' tokens are counted with.
    counter: &'c dyn TokenCounter,
    /// The stems asked ([`stem_keys`](crate::lang::stem_keys) of the query).
    asked: Vec<u64>,
    limits: AnswerLimits,
    /// A call whose turns the context shows verbatim already, and the
    /// first of them shown.
    skip_session: Option<(Uuid, u32)>,
    /// The turns either side of each turn hit not shown yet.
    turns_hit: HashMap<TurnRef, Around>,
    /// Turns shown, as hits or as the turn either side of one.
    shown_turns: HashSet<(Uuid, u32)>,
    /// What was said, once: the same exchange again in another call ("Hi,
    /// I'm on my break") would only take the room of something else. The
    /// best-ranked copy is the one shown.
    said: HashSet<u64>,
    /// The turns either side of each hit: the one before often holds what
    /// a reply is about ("little sister. she's fine" follows "mere rang.
    /// the wind took her trampoline"), the one after the rest of what was
    /// said (the name after "I had brunch with my oldest friend"). Where
    /// the agent asked and the user answered, the two turns are one
    /// statement and come together, right after the hit; the others
    /// after every hit, in the hits' order, if room is left. Each
    /// exchange once, like the hits.
    around: Vec<(Retrieved, Option<u64>)>,
    out: Vec<Retrieved>,
}

impl Shaper<'_> {
    /// Whether the turns tier shows the turn already.
    fn shown(&self, r: TurnRef) -> bool {
        self.skip_session
            .is_some_and(|(s, first)| s == r.session_id && r.seq >= first)
    }

    /// The turn hit `r` (found as of `at`), with the turn that asked what
    /// it answers or the answer to what it asks; the other turns beside
    /// it are kept for after every hit.
    fn turn_hit(&mut self, r: TurnRef, at: chrono::DateTime<chrono::Utc>) {
        if self.shown(r) || !self.shown_turns.insert((r.session_id, r.seq)) {
            return;
        }
        let mut hit = None;
        let mut sides = Vec::with_capacity(2);
        let Some(around_hit) = self.turns_hit.remove(&r) else {
            return;
        };
        // The agent's question and the user's answer to it are one
        // statement ("Is Oskar your roommate?" "ya since 2023"): a hit
        // whose answer asks takes the user's next turn along, a hit that
        // answers takes the turn that asked.
        let hit_asks = around_hit.iter().any(|t| t.seq == r.seq && t.asks);
        let mut attached = Vec::new();
        for t in around_hit.iter() {
            let beside = TurnRef {
                session_id: r.session_id,
                seq: t.seq,
            };
            if t.seq == r.seq {
                hit = Some(t);
            } else if !self.shown(beside) {
                // (those in the turns tier already are not shown again)
                let joined = if t.seq < r.seq { t.asks } else { hit_asks };
                let shown_as = if t.seq > r.seq && hit_asks {
                    Shown::Answer
                } else {
                    Shown::Beside
                };
                (if joined { &mut attached } else { &mut sides }).push((
                    Retrieved {
                        item: t.item(&self.asked, shown_as, self.limits, self.counter),
                        at: t.at,
                    },
                    t.key,
                ));
            }
        }
        let Some(t) = hit else {
            return;
        };
        // The agent's answer too: "Derek." said to two questions is two
        // things.
        if t.key.is_some_and(|k| !self.said.insert(k)) {
            return;
        }
        self.around.extend(sides);
        self.out.push(Retrieved {
            item: t.item(&self.asked, Shown::Hit, self.limits, self.counter),
            at,
        });
        for (a, key) in attached {
            self.push_once(a, key);
        }
    }

    /// `a` unless its turn or what it says (`key`) is shown already.
    fn push_once(&mut self, a: Retrieved, key: Option<u64>) {
        if let Source::StoredTurn { session, seq } = a.item.source {
            if self.shown_turns.insert((session, seq)) && key.is_none_or(|k| self.said.insert(k)) {
                self.out.push(a);
            }
        }
    }

    /// What was shown, then the turns beside the hits. A greeting said in
    /// every call comes beside many hits: once is enough.
    fn with_turns_beside(mut self) -> Vec<Retrieved> {
        for (a, key) in std::mem::take(&mut self.around) {
            self.push_once(a, key);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::stem_keys;
    use crate::model::ConversationTurn;
    use crate::search::{agent_label, prepare_around, Speakers};
    use chrono::{TimeZone, Utc};

    /// One-turn calls, each with its prepared turn, and a hit on each in
    /// the order given.
    fn calls(said: &[(&str, &str)]) -> (Vec<Found>, HashMap<TurnRef, Around>) {
        let label = agent_label("rafael");
        let who = Speakers {
            user_id: "ji-woo",
            agent_label: &label,
            zone: chrono_tz::UTC,
        };
        let mut hits = Vec::new();
        let mut around = HashMap::new();
        for (i, (user, agent)) in said.iter().enumerate() {
            let r = TurnRef {
                session_id: Uuid::from_u128(i as u128 + 1),
                seq: 0,
            };
            let at = Utc
                .with_ymd_and_hms(2024, 3, 1 + i as u32, 9, 0, 0)
                .unwrap();
            let turn = ConversationTurn {
                user_message: user.to_string(),
                agent_response: agent.to_string(),
                timestamp: at,
            };
            around.insert(r, prepare_around(who, r.session_id, vec![(0, turn)]));
            hits.push(Found {
                id: r.doc_id(),
                kind: DocKind::Turn,
                period_start: at,
                period_end: at,
                score: 1.0 - i as f32 / 10.0,
                keyword_score: 1.0,
                similarity: 0.0,
                turn: Some(r),
            });
        }
        (hits, around)
    }

    fn order(hits: &[Found]) -> Vec<u128> {
        hits.iter()
            .map(|h| h.turn.unwrap().session_id.as_u128())
            .collect()
    }

    #[test]
    fn asked_about_the_user_the_agent_sides_own_life_goes_after() {
        let (hits, around) = calls(&[
            // the agent side's own sister
            (
                "How was your weekend?",
                "Lovely. My sister's a dentist now.",
            ),
            // the agent speaks to the user of theirs: the reply answers
            ("Long day.", "Is your sister still nursing?"),
            // the user's own
            ("My sister started as a nurse.", "Wonderful news."),
            // a word asked on both sides
            ("My sister visited.", "Oh, my sister too!"),
        ]);
        let asked = stem_keys("What does Ji-woo's sister do?");
        assert_eq!(order(&by_side(hits, &around, &asked)), [2, 3, 4, 1]);
    }

    #[test]
    fn a_hit_without_the_words_asked_or_not_a_turn_keeps_its_rank() {
        let (mut hits, around) = calls(&[
            ("Lovely weekend.", "My garden is blooming."),
            ("My sister started as a nurse.", "Wonderful news."),
        ]);
        hits[0].kind = DocKind::Session;
        let asked = stem_keys("What does Ji-woo's sister do?");
        assert_eq!(order(&by_side(hits, &around, &asked)), [1, 2]);
    }
}
