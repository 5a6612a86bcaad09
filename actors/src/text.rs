//! Text heuristics shared by the offline summarizer and the fallback path
//! (design note 003, `docs/design/README.md`): sentence splitting, keyword
//! topics, entity spans (names, companies, dates, amounts) and a
//! lexicon-based emotional tone.
//!
//! Everything here is deterministic: the same conversation always gives the
//! same summary, which keeps simulations and tests reproducible.

use std::borrow::Cow;
use std::collections::HashSet;

mod address;
mod answers;
mod changes;
mod facts;
mod feelings;
mod sides;
mod tags;
mod when;

pub use address::{
    name_key, names_in, of_itself, Addressed, Participants, FIRST_PERSON, SECOND_PERSON,
};
pub use answers::{expected_in, expected_in_words, held_in, Answers};
pub use changes::{asked_about, occupation_asked, Subjects};
pub use facts::{
    answered_name, facts, facts_by_sentence, facts_by_sentence_after, is_relation_word, named,
    pronoun_named,
};
pub use feelings::feeling_asked;
pub use sides::agent_facts;
pub use tags::{asked_in, asked_in_words, told_in};
pub use when::resolve_relative_dates;

// The word splitting and the stopwords are the lexicon's; the rules here
// read them under these names too.
pub use crate::lang::{is_stopword, term_frequencies, words};
pub(crate) use crate::lang::{MONTHS, WEEKDAYS};

const COMPANY_SUFFIXES: &[&str] = &[
    "inc",
    "inc.",
    "corp",
    "corp.",
    "corporation",
    "llc",
    "ltd",
    "ltd.",
    "gmbh",
    "labs",
    "ai",
    "technologies",
    "systems",
    "group",
    "co",
    "co.",
    "company",
    "bank",
    "university",
];

const POSITIVE: &[&str] = &[
    "excited",
    "happy",
    "glad",
    "great",
    "love",
    "proud",
    "relieved",
    "confident",
    "hopeful",
    "grateful",
    "thrilled",
    "optimistic",
    "good",
    "awesome",
    "amazing",
    "wonderful",
    "motivated",
    "calm",
    "enjoyed",
    "celebrate",
    "offer",
    "accepted",
    "passed",
];

const NEGATIVE: &[&str] = &[
    "nervous",
    "anxious",
    "worried",
    "stressed",
    "sad",
    "upset",
    "frustrated",
    "angry",
    "afraid",
    "scared",
    "tired",
    "exhausted",
    "rejected",
    "rejection",
    "disappointed",
    "overwhelmed",
    "lonely",
    "hurt",
    "fear",
    "panic",
    "struggling",
    "difficult",
    "hard",
    "lost",
    "fired",
    "laid",
];

/// Whether a word is in the tone lexicon (a feeling, either way).
pub fn is_feeling_word(w: &str) -> bool {
    POSITIVE.contains(&w) || NEGATIVE.contains(&w)
}

/// Whether a word names a month or a weekday.
pub fn is_date_word(w: &str) -> bool {
    MONTHS[..12].contains(&w) || WEEKDAYS.contains(&w)
}

/// Splits text into sentences on `.`, `!`, `?` and newlines, keeping the
/// punctuation. Abbreviation-proof enough for conversational text.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            push_sentence(&mut out, &mut cur);
            continue;
        }
        cur.push(c);
        if matches!(c, '.' | '!' | '?') {
            // A closing quote or bracket after the stop belongs to the
            // sentence it closes (`They said: "I moved."`).
            while let Some(&q) = chars.peek() {
                if matches!(q, '"' | '\u{201d}' | '\'' | '\u{2019}' | ')' | ']') {
                    cur.push(q);
                    chars.next();
                } else {
                    break;
                }
            }
            let boundary = chars.peek().is_none_or(|n| n.is_whitespace());
            if boundary && !(c == '.' && ends_in_title(&cur)) {
                push_sentence(&mut out, &mut cur);
            }
        }
    }
    push_sentence(&mut out, &mut cur);
    out
}

/// Whether `text` (ending in a full stop) ends in a title or a short form
/// that a name or a word follows ("Dr. Okafor", "Mt. Hood", "St. Mary's"):
/// no sentence ends there.
fn ends_in_title(text: &str) -> bool {
    const TITLES: [&str; 10] = [
        "dr", "mr", "mrs", "ms", "mt", "st", "prof", "rev", "fr", "vs",
    ];
    text.strip_suffix('.')
        .and_then(|t| t.rsplit(|c: char| !c.is_alphabetic()).next())
        .is_some_and(|word| TITLES.iter().any(|t| t.eq_ignore_ascii_case(word)))
}

fn push_sentence(out: &mut Vec<String>, cur: &mut String) {
    let s = cur.trim();
    if !s.is_empty() {
        out.push(s.to_string());
    }
    cur.clear();
}

/// The span of a bracketed media description (`[shares a photo of …]`)
/// starting at byte `at`, if one does: a `[` with words and spaces inside
/// (not a tag such as `[SUMMARY:SESSION]`) closed on the same line.
fn media_span(text: &str, at: usize) -> Option<usize> {
    let rest = text.get(at..)?;
    if !rest.starts_with('[') {
        return None;
    }
    let close = rest[1..].find([']', '[', '\n'])? + 1;
    let inner = &rest[1..close];
    (rest[close..].starts_with(']')
        && inner.contains(' ')
        && inner.chars().any(char::is_alphabetic)
        && inner.len() <= 400)
        .then_some(at + close + 1)
}

/// Whether a sentence is a bracketed media description.
pub fn is_media(sentence: &str) -> bool {
    let s = sentence.trim();
    media_span(s, 0).is_some_and(|end| s[end..].trim().is_empty())
}

/// The text without bracketed media descriptions (each becomes a space):
/// what was shared is content, but its words ("shares", "photo") are not
/// what a conversation was about.
pub fn without_media(text: &str) -> Cow<'_, str> {
    if !text.contains('[') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if let Some(end) = media_span(text, i) {
            out.push(' ');
            i = end;
            continue;
        }
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        out.push(c);
        i += c.len_utf8();
    }
    Cow::Owned(out)
}

/// Up to `max` keyword topics: the most frequent content words, ties broken
/// by first appearance. Media descriptions do not count.
pub fn keyword_topics(text: &str, max: usize) -> Vec<String> {
    let text = without_media(text);
    let text = text.as_ref();
    let tf = term_frequencies(text);
    let mut first_seen: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for w in words(text) {
        if tf.contains_key(&w) && seen.insert(w.clone()) {
            first_seen.push(w);
        }
    }
    let mut ranked: Vec<(usize, usize, String)> = first_seen
        .into_iter()
        .enumerate()
        .map(|(pos, w)| (tf[&w], pos, w))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().take(max).map(|(_, _, w)| w).collect()
}

fn trim_token(t: &str) -> &str {
    t.trim_matches(|c: char| !(c.is_alphanumeric() || c == '$' || c == '€' || c == '£' || c == '%'))
}

fn capitalized(t: &str) -> bool {
    t.chars().next().is_some_and(char::is_uppercase) && t.chars().any(char::is_lowercase)
        || (t.chars().count() >= 2
            && t.chars().all(|c| c.is_uppercase() || c.is_ascii_digit())
            && t.chars().any(char::is_alphabetic))
}

fn is_amount(t: &str) -> bool {
    let starts_currency = t.starts_with(['$', '€', '£']);
    let digits = t.chars().filter(char::is_ascii_digit).count();
    digits > 0
        && (starts_currency
            || t.ends_with('%')
            || ((t.ends_with('k') || t.ends_with('K')) && digits + 1 == t.chars().count()))
}

fn is_iso_date(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// Entity spans in order of first appearance, deduplicated: runs of
/// capitalized words that are not a sentence-initial common word (names,
/// companies), month/weekday dates with an optional day number, ISO dates,
/// and amounts (`$120k`, `15%`, `€3,000`). Media descriptions do not count.
pub fn entities(text: &str, max: usize) -> Vec<String> {
    let text = without_media(text);
    let text = text.as_ref();
    // Words seen capitalized inside a sentence are proper nouns; a
    // sentence-initial capital alone proves nothing ("Quantify it").
    let mut proper: HashSet<String> = HashSet::new();
    for sentence in sentences(text) {
        for t in sentence.split_whitespace().skip(1) {
            let t = trim_token(t);
            if capitalized(t) {
                proper.insert(t.to_lowercase());
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut push = |s: String, out: &mut Vec<String>| {
        let key = s.to_lowercase();
        if !s.is_empty() && seen.insert(key) {
            out.push(s);
        }
    };
    for sentence in sentences(text) {
        let tokens: Vec<&str> = sentence.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            let raw = tokens[i];
            let tok = trim_token(raw);
            let lower = tok.to_lowercase();
            if tok.is_empty() {
                i += 1;
                continue;
            }
            if is_amount(tok) {
                push(tok.to_string(), &mut out);
                i += 1;
                continue;
            }
            if is_iso_date(tok) {
                push(tok.to_string(), &mut out);
                i += 1;
                continue;
            }
            if MONTHS[..12].contains(&lower.as_str()) || WEEKDAYS.contains(&lower.as_str()) {
                if lower == "may" && !capitalized(tok) {
                    i += 1;
                    continue;
                }
                let mut span = tok.to_string();
                if let Some(next) = tokens.get(i + 1).map(|t| trim_token(t)) {
                    let day = next.trim_end_matches(|c: char| c.is_alphabetic());
                    if !day.is_empty() && day.len() <= 2 && day.chars().all(|c| c.is_ascii_digit())
                    {
                        span.push(' ');
                        span.push_str(next);
                        i += 1;
                    }
                }
                push(span, &mut out);
                i += 1;
                continue;
            }
            if capitalized(tok) {
                // Collect a run of capitalized tokens (a name or a company).
                let mut run = vec![tok];
                let mut j = i + 1;
                while j < tokens.len() {
                    let prev_raw = tokens[j - 1];
                    if prev_raw.ends_with([',', ';', ':', '.', '!', '?']) {
                        break;
                    }
                    let t = trim_token(tokens[j]);
                    let tl = t.to_lowercase();
                    if capitalized(t)
                        && !WEEKDAYS.contains(&tl.as_str())
                        && !MONTHS[..12].contains(&tl.as_str())
                        || (COMPANY_SUFFIXES.contains(&tl.as_str()) && !t.is_empty())
                    {
                        run.push(t);
                        j += 1;
                    } else {
                        break;
                    }
                }
                // A lone sentence-initial word that is a common word ("The",
                // "Thanks") is not an entity; a lone pronoun "I" never is.
                let lone_common = run.len() == 1
                    && (is_stopword(&lower)
                        || lower == "i"
                        || (i == 0 && !proper.contains(&lower) && !looks_like_name(tok)));
                if !lone_common {
                    // Drop leading common words from a run ("The Acme Labs").
                    while run.len() > 1 && is_stopword(&run[0].to_lowercase()) {
                        run.remove(0);
                    }
                    push(run.join(" "), &mut out);
                }
                i = j;
                continue;
            }
            i += 1;
        }
    }
    out.truncate(max);
    out
}

/// Whether a sentence-initial capitalized word is likely a proper noun: not
/// a common word and not a plain English word form we know to be generic.
fn looks_like_name(tok: &str) -> bool {
    let lower = tok.to_lowercase();
    if is_stopword(&lower)
        || POSITIVE.contains(&lower.as_str())
        || NEGATIVE.contains(&lower.as_str())
    {
        return false;
    }
    // all-caps acronyms (IBM) and words with inner capitals (OpenAI) are names
    tok.chars().skip(1).any(char::is_uppercase)
}

/// A one-word emotional tone from lexicon counts, or `None` when the text
/// carries no signal either way.
pub fn emotional_tone(text: &str) -> Option<String> {
    let (mut pos, mut neg) = (0usize, 0usize);
    for w in words(text) {
        if POSITIVE.contains(&w.as_str()) {
            pos += 1;
        }
        if NEGATIVE.contains(&w.as_str()) {
            neg += 1;
        }
    }
    let tone = match (pos, neg) {
        (0, 0) => return None,
        (p, n) if p > 0 && n > 0 && p.abs_diff(n) <= 1 => "mixed",
        (p, n) if p > n => "positive",
        _ => "anxious",
    };
    Some(tone.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_g_is_read_as_the_word() {
        let ws: Vec<String> = words("Volunteerin' at the Nimitz, goin’ fishin' in' out").collect();
        assert_eq!(
            ws,
            [
                "volunteering",
                "at",
                "the",
                "nimitz",
                "going",
                "fishing",
                "in",
                "out"
            ]
        );
        // a name ending in "in", quoted: only lower-case words drop a g
        let ws: Vec<String> = words("the word 'RIN'").collect();
        assert_eq!(ws, ["the", "word", "rin"]);
    }

    #[test]
    fn sentences_split_on_terminators() {
        assert_eq!(
            sentences("Hi there. I have $3.50! Really?\nYes"),
            vec!["Hi there.", "I have $3.50!", "Really?", "Yes"]
        );
    }

    #[test]
    fn a_title_does_not_end_a_sentence() {
        assert_eq!(
            sentences("So I have the appointment with Dr. Okafor. Mrs. Bevan came too. I did."),
            vec![
                "So I have the appointment with Dr. Okafor.",
                "Mrs. Bevan came too.",
                "I did."
            ]
        );
        // (a word that only ends like one still ends its sentence)
        assert_eq!(
            sentences("I went to the ER. Then home."),
            vec!["I went to the ER.", "Then home."]
        );
    }

    #[test]
    fn a_closing_quote_stays_with_its_sentence() {
        assert_eq!(
            sentences("They said: \"I moved.\" \"We love it!\" Then (they left.) Ok"),
            [
                "They said: \"I moved.\"",
                "\"We love it!\"",
                "Then (they left.)",
                "Ok"
            ]
        );
    }

    #[test]
    fn media_descriptions_are_not_topics_or_entities() {
        let text = "[shares a photo of Biscuit at the beach] Biscuit loves the beach. \
                    [shares a photo of the sunset] [SUMMARY:SESSION] photo";
        let topics = keyword_topics(text, 8);
        assert_eq!(
            topics,
            ["biscuit", "loves", "beach", "summary", "session", "photo"]
        );
        assert!(is_media("[shares a photo of the sunset]"));
        assert!(!is_media("[SUMMARY:SESSION]"));
        assert!(!is_media("[shares a photo] and more"));
        let e = entities("[shares a photo of Lisbon] I met Ana in Porto.", 8);
        assert_eq!(e, ["Ana", "Porto"]);
    }

    #[test]
    fn topics_rank_by_frequency() {
        let t = keyword_topics(
            "The interview at Acme went well. Another interview next week, and salary talks about salary.",
            3,
        );
        assert_eq!(t, vec!["interview", "salary", "acme"]);
    }

    #[test]
    fn entities_find_names_companies_dates_amounts() {
        let e = entities(
            "I met Sarah Chen from Acme Labs on Tuesday. They offered $120k and a 15% bonus starting March 3rd.",
            20,
        );
        for want in [
            "Sarah Chen",
            "Acme Labs",
            "Tuesday",
            "$120k",
            "15%",
            "March 3rd",
        ] {
            assert!(e.contains(&want.to_string()), "{want} missing from {e:?}");
        }
        assert!(!e.contains(&"I".to_string()));
        assert!(!e.contains(&"They".to_string()));
    }

    #[test]
    fn tone_reads_the_lexicon() {
        assert_eq!(
            emotional_tone("I'm so nervous and worried"),
            Some("anxious".into())
        );
        assert_eq!(
            emotional_tone("I'm excited and proud"),
            Some("positive".into())
        );
        assert_eq!(emotional_tone("The meeting is at noon"), None);
    }
}
