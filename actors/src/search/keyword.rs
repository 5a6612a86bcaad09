//! The keyword side of an index: BM25 over the stems of an item's words,
//! a query's words widened to the words near them in meaning, the words
//! too common to score by left to re-rank, and repeats kept to one place.

use std::collections::HashSet;

use super::index::AgentIndex;
use super::query::{Filter, KeywordTuning, Ranking, RelatedWords};

thread_local! {
    /// Per-thread score accumulator of `AgentIndex::keyword_scores`.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// BM25's `k1` (the usual one); its `b` is [`KeywordTuning::b`].
const K1: f32 = 1.2;

/// A query's terms as the scoring takes them.
pub(super) struct QueryTerms {
    /// The terms scored over their postings, each with its weight.
    pub(super) weighted: Vec<(u32, f32)>,
    /// The terms left out for being common, and those of the kinds of
    /// answer asked for, with their weight (their idf): they only re-rank
    /// what the others found.
    pub(super) common: Vec<(u32, f32)>,
}

impl AgentIndex {
    /// The terms of the query's words (`tokens`: the [`tokens`] of its
    /// text), of the words near them in meaning ([`Ranking::related`]) and
    /// of the subjects and kinds of answer it asks about, as the index
    /// holds them.
    ///
    /// [`tokens`]: crate::lang::tokens
    pub(super) fn query_terms(&self, tokens: &[String], ranking: Ranking) -> QueryTerms {
        let n = self.live as f32;
        let mut terms: Vec<&str> = tokens.iter().map(String::as_str).collect();
        terms.sort_unstable();
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
        let mut common = self.leave_out_common(&mut terms, ranking, most);
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
            .filter_map(|t| Some((*self.term_ids.get(*t)?, 1.0)))
            .collect();
        if let Some(rel) = ranking.related.filter(|r| r.per_word > 0) {
            self.add_related(
                &mut weighted,
                &asked,
                rel,
                ranking.keyword.rare_related_df,
                most,
            );
        }
        for t in ranking.changes.terms() {
            if let Some(&id) = self.term_ids.get(t) {
                weighted.push((id, 1.0));
            }
        }
        QueryTerms { weighted, common }
    }

    /// Takes out of `terms` the words held by more than `most` items
    /// (unless every word is that common) and those no item holds, when
    /// [`Ranking::max_term_share`] leaves any out: the common ones, with
    /// their weight.
    fn leave_out_common(
        &self,
        terms: &mut Vec<&str>,
        ranking: Ranking,
        most: f32,
    ) -> Vec<(u32, f32)> {
        let n = self.live as f32;
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
                    if let Some(&id) = self.term_ids.get(*t) {
                        let df = self.df[id as usize] as f32;
                        common.push((id, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()));
                    }
                }
                terms.retain(|t| df(t) <= most);
            }
        }
        common
    }

    /// Adds to `weighted` (the query's own terms) the words the index holds
    /// nearest each `asked` word in meaning, weighted by their similarity,
    /// within `rel`'s limits; a related word in at most `rare_df` items
    /// counts as said once or twice.
    fn add_related(
        &self,
        weighted: &mut Vec<(u32, f32)>,
        asked: &[&str],
        rel: RelatedWords,
        rare_df: u32,
        most: f32,
    ) {
        let own = weighted.len();
        // The asked words the index holds, by number (a related word
        // that is one of them counts as itself, once).
        let asked_ids: Vec<u32> = asked
            .iter()
            .filter_map(|t| self.term_ids.get(*t).copied())
            .collect();
        for t in asked {
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
                let left = if df <= rare_df {
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

    /// BM25 over the postings of the `weighted` terms, of the items
    /// `filter` admits, as (score, slot), in no order; `avg` is the mean
    /// item length.
    pub(super) fn keyword_scores(
        &self,
        weighted: &[(u32, f32)],
        filter: &Filter,
        avg: f32,
        b: f32,
    ) -> Vec<(f32, u32)> {
        let n = self.live as f32;
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
            // BM25's length norm, K1 * (1 - b + b * len / avg), as a + b' * len.
            let (norm_base, norm_per_word) = (K1 * (1.0 - b), K1 * b / avg);
            let timed = filter.timed();
            for &(id, weight) in weighted {
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
        scores
    }

    /// The keyword hits kept as candidates, `keep` of them at most: the
    /// best by `scores`, widened for the `common` words to re-rank and, if
    /// `distinct`, with one place per thing said.
    pub(super) fn keyword_candidates(
        &self,
        scores: Vec<(f32, u32)>,
        common: &[(u32, f32)],
        keep: usize,
        distinct: bool,
        avg: f32,
        tuning: KeywordTuning,
    ) -> Vec<(f32, u32)> {
        let mut cands = scores;
        // With words too common to score by, more are kept, for those
        // words to re-rank.
        let wide = if common.is_empty() {
            keep
        } else {
            keep * tuning.common_rerank
        };
        if distinct {
            self.distinct_best(&mut cands, wide, tuning.repeats_widen);
        } else if cands.len() > wide {
            cands.select_nth_unstable_by(wide - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            cands.truncate(wide);
        }
        if !common.is_empty() {
            self.rerank_by_common(&mut cands, common, keep, avg, tuning.b);
        }
        cands
    }

    /// The common words re-rank the best of what the others found
    /// ("Tuesday night is curling" over "Shrove Tuesday"), read from those
    /// items' own terms, never from their long postings; they find nothing
    /// alone. The best `keep` are kept.
    fn rerank_by_common(
        &self,
        cands: &mut Vec<(f32, u32)>,
        common: &[(u32, f32)],
        keep: usize,
        avg: f32,
        b: f32,
    ) {
        // Each item and its terms asked of memory ahead of their
        // turn, as for the vectors (see `AgentIndex::nearest`).
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
            let norm = K1 * (1.0 - b + b * m.len as f32 / avg);
            for &(id, idf) in common {
                // (counted once: an item keeps its distinct terms)
                if doc.terms.binary_search(&id).is_ok() {
                    *score += idf * (K1 + 1.0) / (1.0 + norm);
                }
            }
        }
        if cands.len() > keep {
            cands.select_nth_unstable_by(keep - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            cands.truncate(keep);
        }
    }

    /// The `keep` best of `cands` (score, slot) with different words: of
    /// items that say the same, the best scored, the newest on a tie
    /// (the later slot). Looked for among the `keep * widen` best, best
    /// first, a few more than still wanted at a time (more each round):
    /// most candidates say something of their own, so the rest of the
    /// widened set is seldom sorted.
    fn distinct_best(&self, cands: &mut Vec<(f32, u32)>, keep: usize, widen: usize) {
        let wide = keep.saturating_mul(widen).min(cands.len());
        // Keyword scores are positive, and a positive float's bits order as
        // it does: (score, slot) orders as one integer, which selects and
        // sorts in a fraction of the time of a float comparison.
        debug_assert!(cands.iter().all(|c| c.0 > 0.0));
        let key =
            |c: &(f32, u32)| std::cmp::Reverse((u64::from(c.0.to_bits()) << 32) | u64::from(c.1));
        if cands.len() > wide && wide > 0 {
            cands.select_nth_unstable_by_key(wide - 1, key);
        }
        cands.truncate(wide);
        // (`words` is a hash already: the quickest hash of it will do)
        let mut seen: HashSet<u64, foldhash::fast::FixedState> =
            HashSet::with_capacity_and_hasher(keep, Default::default());
        let mut kept = Vec::with_capacity(keep.min(wide));
        let mut looked = 0;
        while kept.len() < keep && looked < wide {
            let rest = &mut cands[looked..];
            let wanted = keep - kept.len();
            // (at least as many as looked at already: many repeats take a
            // few rounds, never one a candidate)
            let chunk = (wanted + wanted / 2 + 8).max(looked).min(rest.len());
            if chunk < rest.len() {
                rest.select_nth_unstable_by_key(chunk - 1, key);
            }
            let best = &mut rest[..chunk];
            best.sort_unstable_by_key(key);
            for &(score, slot) in best.iter() {
                if kept.len() < keep && self.doc(slot).is_some_and(|d| seen.insert(d.words)) {
                    kept.push((score, slot));
                }
            }
            looked += chunk;
        }
        *cands = kept;
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::lang::{stem, tokens, IRREGULAR, SHORT_FORMS};
    use crate::model::{ConversationSummary, ConversationTurn};
    use crate::search::testing::*;
    use crate::search::{DocKind, SearchQuery};
    use crate::text::{Answers, Subjects};

    /// `distinct_best` looks at the widened set a few at a time; it keeps
    /// exactly what sorting the whole widened set and keeping the first of
    /// each wording keeps, whatever the share of repeats and ties.
    #[test]
    fn distinct_best_keeps_what_sorting_the_widened_set_keeps() {
        let mut ix = AgentIndex::default();
        // 60 turns over 12 wordings: repeats in every stretch of the order
        for i in 0..60u128 {
            let line = format!("the dog barked at visitor {}", i % 12);
            ix.put_turns("mark", Uuid::from_u128(i), &[(0, said(&line, "Oh no."))]);
        }
        let slots: Vec<u32> = (0..ix.docs.len() as u32)
            .filter(|&s| ix.doc(s).is_some())
            .collect();
        assert_eq!(slots.len(), 60);
        let plain = |cands: &[(f32, u32)], keep: usize, widen: usize| {
            let mut all = cands.to_vec();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
            all.truncate(keep * widen);
            let mut seen = HashSet::new();
            all.retain(|&(_, s)| seen.insert(ix.doc(s).unwrap().words));
            all.truncate(keep);
            all
        };
        // scores from a fixed sequence, with ties (few distinct values)
        let mut x = 7u64;
        for round in 0..200 {
            let distinct_scores = 1 + round % 9;
            let cands: Vec<(f32, u32)> = slots
                .iter()
                .map(|&s| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (1.0 + ((x >> 33) % distinct_scores) as f32, s)
                })
                .collect();
            for (keep, widen) in [(1, 1), (2, 4), (5, 2), (12, 4), (20, 4), (40, 4), (3, 100)] {
                let mut got = cands.clone();
                ix.distinct_best(&mut got, keep, widen);
                assert_eq!(
                    got,
                    plain(&cands, keep, widen),
                    "keep {keep}, widen {widen}"
                );
            }
        }
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
}
