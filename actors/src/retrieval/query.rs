//! The search a context read asks with a message, and how its hits are
//! ranked.

use chrono::{DateTime, Utc};

use crate::model::Speaker;
use crate::search::{DocKind, KeywordTuning, Ranking, Recency, RelatedWords, SearchQuery};
use crate::settings::ContextSettings;
use crate::text::Participants;

/// The search for `message` over `user_id`'s memory: its words without
/// the question's framing, the live call's latest words
/// (`live_words`), and the names of the people and pets the message names
/// by what they are to the user (`names`: (stem of what they are, name);
/// "my brother" finds "Rob's transferring to Aberdeen" once a fact says
/// the brother is Rob). `limit` hits at most. With it, the side whose
/// words the message asks about, where it names one of the participants
/// (`participants`; the first named).
///
/// A participant's name stays a word to look for: the person's own words
/// say "I", but summaries and facts name them, and the other side says
/// it to them (measured in docs/evaluation.md).
pub fn query(
    message: &str,
    live_words: &[String],
    names: &[(String, String)],
    participants: &Participants,
    user_id: &str,
    limit: usize,
) -> (SearchQuery, Option<Speaker>) {
    let about = participants.named_in(message);
    let mut text = crate::lang::without_question_framing(message);
    for w in live_words {
        text.push('\n');
        text.push_str(w);
    }
    if !names.is_empty() {
        let asked: Vec<String> = crate::lang::tokens(message).collect();
        let mut added: Vec<&str> = Vec::new();
        for (what, name) in names.iter() {
            if asked.contains(what) && !added.contains(&name.as_str()) {
                added.push(name);
                text.push('\n');
                text.push_str(name);
            }
        }
    }
    let search = SearchQuery {
        text,
        kinds: vec![
            DocKind::Turn,
            DocKind::Fact,
            DocKind::Session,
            DocKind::Daily,
            DocKind::Weekly,
            DocKind::Topic,
        ],
        user_id: Some(user_id.to_string()),
        since: None,
        until: None,
        limit,
    };
    (search, about)
}

/// How the hits for `message` are ranked: by words and meaning when the
/// message has a vector (`with_vector`), else by words alone, tuned by
/// `settings.ranking` (what the related words may cost: at 100,000 turns
/// the default keeps it to a fraction of the read's).
pub fn ranking(
    settings: &ContextSettings,
    message: &str,
    with_vector: bool,
    now: DateTime<Utc>,
) -> Ranking {
    let limit = settings.retrieval_candidates;
    let tuning = &settings.ranking;
    let asked: Vec<String> = crate::lang::words(message).collect();
    Ranking {
        keyword_weight: if with_vector {
            settings.retrieval_keyword_weight
        } else {
            1.0
        },
        dense: if with_vector { limit } else { 0 },
        exhaustive: false,
        related: Some(RelatedWords {
            per_word: settings.retrieval_related_words,
            min_similarity: settings.retrieval_related_similarity,
            max_postings: tuning.related_postings,
        }),
        distinct: true,
        // "Where do I live now?": the turns that told a move.
        changes: crate::text::asked_in_words(&asked),
        expects: crate::text::expected_in_words(&asked),
        candidates: limit,
        max_term_share: tuning.max_term_share,
        recency: Some(Recency {
            now,
            weight: settings.retrieval_recency_weight,
            half_life_days: settings.retrieval_half_life_days,
        }),
        keyword: KeywordTuning {
            b: tuning.bm25_b,
            common_rerank: tuning.common_rerank,
            repeats_widen: tuning.repeats_widen,
            rare_related_df: tuning.rare_related_df,
        },
    }
}
