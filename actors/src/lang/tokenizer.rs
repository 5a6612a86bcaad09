//! The tokenizer: the tokens an item is indexed under and a query is
//! split into, and the stems they are made of.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use super::lexicon::{
    is_stopword, FRAMING_PHRASES, FRAMING_WORDS, IRREGULAR, MONTHS, SHORT_FORMS, WEEKDAYS,
};

/// The English Snowball stemmer, shared: it holds no state.
static STEMMER: LazyLock<rust_stemmers::Stemmer> =
    LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// The tokens an item is indexed under and a query is split into: content
/// words, lowercased, reduced to their English Snowball stem
/// ("interviewers" and "interview" meet).
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut after_grew = false;
    words(text).flat_map(move |w| {
        let keep = |w: &str| w.chars().count() >= 2 && !is_stopword(w);
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
    let lower = question.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    // Each word without the punctuation around it, once (a read asks
    // every phrase at every word).
    let bare: Vec<&str> = words
        .iter()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        // A phrase matches whole words only ("kind of", never "mankind of").
        let phrase = FRAMING_PHRASE_WORDS
            .iter()
            .find_map(|p| (bare.get(i..i + p.len())? == &p[..]).then_some(p.len()));
        if let Some(n) = phrase {
            i += n;
            continue;
        }
        if !FRAMING_WORDS.contains(&bare[i]) {
            out.push(words[i]);
        }
        i += 1;
    }
    out.join(" ")
}

/// [`FRAMING_PHRASES`] as their words, split once.
static FRAMING_PHRASE_WORDS: LazyLock<Vec<Vec<&'static str>>> = LazyLock::new(|| {
    FRAMING_PHRASES
        .iter()
        .map(|p| p.split(' ').collect())
        .collect()
});

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

/// Lowercased word tokens (letters, digits, apostrophes and inner hyphens).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-' || c == '’'))
        .map(|w| {
            let w_trimmed = w.trim_matches(|c: char| c == '\'' || c == '-' || c == '’');
            // (An ASCII word holds no ’: one copy, lower-cased as it is
            // made.)
            let trimmed = if w_trimmed.is_ascii() {
                w_trimmed.to_ascii_lowercase()
            } else {
                w_trimmed.replace('’', "'").to_lowercase()
            };
            // A dropped g, as speech is written down ("fishin'",
            // "volunteerin'"): the word it stands for.
            if dropped_g(w) {
                trimmed + "g"
            } else {
                trimmed
            }
        })
        .filter(|w| !w.is_empty())
}

/// Whether a word is written with its final g dropped: "-in'" after at
/// least three letters ("goin'", "somethin'"; not "in'" itself).
fn dropped_g(w: &str) -> bool {
    let Some(stem) = w.strip_suffix("in'").or_else(|| w.strip_suffix("in’")) else {
        return false;
    };
    stem.chars().count() >= 2
        && stem.chars().all(|c| c.is_alphabetic())
        && stem.chars().skip(1).all(|c| c.is_lowercase())
}

/// Whether a lowercased word is a content word: three letters or more,
/// no stopword, number, month or weekday.
pub(crate) fn content_word(w: &str) -> bool {
    w.chars().count() >= 3
        && !is_stopword(w)
        && !w.starts_with(|c: char| c.is_ascii_digit())
        && !MONTHS.contains(&w)
        && !WEEKDAYS.contains(&w)
}

/// Term frequencies of content words.
pub fn term_frequencies(text: &str) -> BTreeMap<String, usize> {
    let mut tf = BTreeMap::new();
    for w in words(text) {
        if content_word(&w) {
            *tf.entry(w).or_insert(0) += 1;
        }
    }
    tf
}

/// A stem as a number, for a retrieved summary's sentences and the words asked
/// (`retrieval::summary_excerpt`) (two stems share
/// one with odds of one in 2^64).
pub fn stem_key(stem: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::quality::FixedState::with_seed(0x7374_656d).build_hasher();
    h.write(stem.as_bytes());
    h.finish()
}

/// The [`stem_key`]s of a text's [`tokens`], sorted, once
/// each: a summary sentence's words, or the words asked.
pub fn stem_keys(text: &str) -> Vec<u64> {
    let mut keys: Vec<u64> = tokens(text).map(|w| stem_key(&w)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// [`stem_keys`] of a text already split into its [`tokens`].
pub fn stem_keys_of(tokens: &[String]) -> Vec<u64> {
    let mut keys: Vec<u64> = tokens.iter().map(|w| stem_key(w)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
