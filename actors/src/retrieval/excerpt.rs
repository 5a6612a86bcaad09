//! A retrieved summary shown as the sentences of it that hold the words
//! asked: a week or a topic holds an answer in one of its many sentences,
//! and shown whole it would take the room of the turns that told it.

use crate::context::{item, summary_kind, ContextItem, Role, Source, Tier, TokenCounter};
use crate::lang::stem_keys;
use crate::model::ConversationSummary;

/// One sentence of a summary, as [`summary_excerpt`] reads it.
#[derive(Debug)]
struct SummarySentence {
    text: String,
    /// Its duplicate key ([`crate::window::dedup_key`]).
    key: u64,
    /// Of the user's words quoted, their
    /// [`said_key`](crate::reflect::extractive::said_key).
    said: Option<u64>,
    /// The stems of its words ([`stem_key`](crate::lang::stem_key)), sorted,
    /// once each.
    stems: Box<[u64]>,
}

/// A summary split into sentences, each with the stems of its words:
/// made once per summary and kept by the caller, so an excerpt costs a
/// look-up per word, not a split and a stemming. Without the offline
/// summarizer's headline ("mark talked about oldest, friend and near"):
/// its words are topics, and where it holds the words asked it tells no
/// more than the question did.
#[derive(Debug)]
pub struct SummarySentences(Vec<SummarySentence>);

impl SummarySentences {
    pub fn new(s: &ConversationSummary) -> Self {
        use crate::reflect::extractive::{parts, said_key, Kind};
        SummarySentences(
            parts(&s.user_id, &s.summary_text)
                .into_iter()
                .filter(|p| p.kind != Kind::Headline)
                .map(|p| {
                    let stems = stem_keys(&p.body);
                    SummarySentence {
                        key: crate::window::dedup_key(&p.written),
                        said: (p.kind == Kind::Quote).then(|| said_key(&p.body)),
                        text: p.written.trim().to_string(),
                        stems: stems.into(),
                    }
                })
                .collect(),
        )
    }
}

/// A retrieved summary as the sentences of it that hold the words asked
/// (`asked`: [`stem_keys`](crate::lang::stem_keys) of the question), at most
/// `most`, in their order, those holding the most words asked chosen
/// first: a week or a topic holds the answer in one of its many
/// sentences, and shown whole it takes the room of the turns that told
/// it. A sentence already shown (`shown`: duplicate keys, across the read)
/// is not shown again, nor the user's words that a retrieved turn shows
/// with its date and the turns around it (`restated`:
/// [`said_key`](crate::reflect::extractive::said_key)s of those turns'
/// sentences): such a quote ranks as its turn does. `None` when nothing
/// is left to show. A summary of `most` sentences or fewer is shown whole.
pub fn summary_excerpt<H: std::hash::BuildHasher>(
    s: &ConversationSummary,
    sentences: &SummarySentences,
    asked: &[u64],
    most: usize,
    shown: &mut std::collections::HashSet<u64, H>,
    restated: &std::collections::HashSet<u64, H>,
    counter: &dyn TokenCounter,
) -> Option<ContextItem> {
    let all = &sentences.0;
    let mut ranked: Vec<(usize, usize)> = all
        .iter()
        .enumerate()
        .filter(|(_, t)| !shown.contains(&t.key) && !t.said.is_some_and(|k| restated.contains(&k)))
        .map(|(i, t)| {
            let n = t
                .stems
                .iter()
                .filter(|k| asked.binary_search(k).is_ok())
                .count();
            (i, n)
        })
        .filter(|&(_, n)| n > 0 || all.len() <= most)
        .collect();
    if ranked.is_empty() {
        return None;
    }
    ranked.sort_by_key(|&(i, n)| (std::cmp::Reverse(n), i));
    ranked.truncate(most);
    ranked.sort_unstable();
    let whole = ranked.len() == all.len();
    let mut text = format!(
        "- [{} {}] ",
        summary_kind(s.summary_type),
        s.period_start.format("%Y-%m-%d")
    );
    for (k, &(i, _)) in ranked.iter().enumerate() {
        shown.insert(all[i].key);
        if k > 0 {
            text.push_str(if whole { " " } else { " … " });
        }
        text.push_str(&all[i].text);
    }
    Some(item(
        counter,
        Tier::Retrieved,
        Source::Summary(s.summary_id),
        Role::System,
        text,
    ))
}
