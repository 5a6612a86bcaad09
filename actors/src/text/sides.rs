//! Facts from the agent side's lines of a call, as that side's own: what it
//! said it would do, what it recommended, and (when the other side is a
//! person) what it told of its own life.
//!
//! - A **commitment** is a promise to the user: a statement whose clause
//!   opens on "I'll", "I will", "I'm going to" or "let me" and a verb that
//!   does something, and is done for or to the user ("I'll text it to you
//!   tonight", "let me check the times for your trip"): "Will text it to
//!   hanna tonight". Not one that only keeps the talk going ("I'll be
//!   fine", "I'll let you go", "I'll think about it"), nor the agent side's
//!   own errands ("I'll put the kettle on"), which say nothing to keep.
//! - A **recommendation** tells the user what to do or try: "you should",
//!   "you ought to", "you could try", "I'd recommend", "I suggest", "have
//!   you tried": "Recommended: hanna should read The Remains of the Day".
//! - Any other first-person statement is read by the user's fact rules
//!   ([`super::facts_by_sentence`]), as the agent side's: "I got my potatoes
//!   in on Friday". A sentence that speaks of the user ("you", "your") is
//!   about the user, and is left to the user's own words.
//!
//! In what is kept, the user is named by their id where the agent side
//! said "you": the context is read by the agent's model, for whom "you" is
//! itself. Questions state nothing and are skipped.

use super::{facts_by_sentence, is_stopword, words};
use crate::model::{FactCandidate, FactCategory, Speaker};

/// Words that open a commitment, lower case, as [`words`] gives them.
const COMMITS: &[&[&str]] = &[
    &["i'll"],
    &["i", "will"],
    &["i'm", "going", "to"],
    &["i", "am", "going", "to"],
    &["i'm", "gonna"],
    &["let", "me"],
];

/// Words after "I'll" that keep a conversation going rather than promise
/// an act: being, leaving someone to go, weighing it up, guessing,
/// acknowledging ("I'll remember that", "I'll keep it in mind", "I'll do
/// my best"), and the hedges between "I'll" and a verb.
const NOT_ACTS: &[&str] = &[
    "be", "let", "leave", "stop", "think", "bet", "admit", "say", "have", "need", "miss", "see",
    "tell", "guess", "remember", "keep", "note", "do", "just", "probably", "maybe", "never",
    "always", "still",
];

/// Words that make what follows a recommendation to the user, and how the
/// recommendation is put (`{user}` names the user).
const ADVISES: &[(&[&str], &str)] = &[
    (&["you", "should"], "Recommended: {user} should"),
    (&["you", "ought", "to"], "Recommended: {user} ought to"),
    (&["you", "could", "try"], "Recommended: {user} could try"),
    (&["you", "might", "try"], "Recommended: {user} might try"),
    (&["you", "must", "try"], "Recommended: {user} must try"),
    (&["i'd", "recommend"], "Recommended"),
    (&["i", "recommend"], "Recommended"),
    (&["i", "would", "recommend"], "Recommended"),
    (&["i'd", "suggest"], "Suggested"),
    (&["i", "suggest"], "Suggested"),
    (&["have", "you", "tried"], "Recommended trying"),
    (&["why", "don't", "you"], "Suggested {user} should"),
];

/// Second-person words: a sentence holding one speaks of the user.
const SECOND: &[&str] = &[
    "you", "you're", "you've", "you'll", "you'd", "your", "yours", "yourself", "ya", "u",
];

/// First-person words: a sentence holding one speaks of the agent side.
const FIRST: &[&str] = &[
    "i", "i'm", "i've", "i'll", "i'd", "my", "me", "mine", "myself",
];

/// The agent side's facts in its `sentences` (said one after another), to
/// `user_id`, in the order said.
pub fn agent_facts(sentences: &[String], user_id: &str) -> Vec<FactCandidate> {
    let mut out = Vec::new();
    for s in sentences {
        if is_question(s) && !opens_advice(s) {
            continue;
        }
        if let Some(f) = commitment(s, user_id).or_else(|| recommendation(s, user_id)) {
            out.push(f);
            continue;
        }
        // The user's fact rules, over the agent side's own statements:
        // each sentence alone (one of the user's, between them, is not
        // here to say whose a subjectless sentence is).
        let w: Vec<String> = words(s).collect();
        if w.iter().any(|w| FIRST.contains(&w.as_str()))
            && !w.iter().any(|w| SECOND.contains(&w.as_str()))
        {
            out.extend(
                facts_by_sentence(std::slice::from_ref(s))
                    .into_iter()
                    .flatten(),
            );
        }
    }
    for f in &mut out {
        f.speaker = Speaker::Agent;
    }
    out
}

fn is_question(s: &str) -> bool {
    s.trim_end().ends_with('?')
}

/// Whether the sentence asks "have you tried …?" or "why don't you …?":
/// advice put as a question.
fn opens_advice(s: &str) -> bool {
    let w: Vec<String> = words(s).collect();
    [["have", "you", "tried"], ["why", "don't", "you"]]
        .iter()
        .any(|p| find(&w, p).is_some())
}

/// Where `pattern` starts in `words`.
fn find(words: &[String], pattern: &[&str]) -> Option<usize> {
    words
        .windows(pattern.len())
        .position(|w| w.iter().zip(pattern).all(|(a, b)| a == b))
}

/// A clause of `sentence` from its `at`-th word to the clause's end (a
/// comma, a semicolon, a dash or the sentence's stop), as the words were
/// written.
fn clause_from(sentence: &str, at: usize) -> String {
    // the byte offset of the at-th word, counted as [`words`] counts them
    let mut seen = 0;
    let mut start = None;
    let mut in_word = false;
    for (i, c) in sentence.char_indices() {
        let part = c.is_alphanumeric() || c == '\'' || c == '-' || c == '’';
        if part && !in_word {
            if seen == at {
                start = Some(i);
                break;
            }
            seen += 1;
        }
        in_word = part;
    }
    let Some(start) = start else {
        return String::new();
    };
    let rest = &sentence[start..];
    let end = rest
        .find([',', ';', '.', '!', '?', '—', '–', ':'])
        .unwrap_or(rest.len());
    rest[..end].trim().to_string()
}

/// Whether a clause names what is done and what to (two words that are
/// not stopwords): "read The Overstory", not "read it too".
fn says_something(clause: &str) -> bool {
    words(clause)
        .filter(|w| !is_stopword(w) && !SECOND.contains(&w.as_str()))
        .count()
        >= 2
}

/// `text` with the user named where it says "you".
fn to_user(text: &str, user_id: &str) -> String {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let lower = word.to_lowercase().replace('’', "'");
        let named = match lower.as_str() {
            "you" | "ya" | "yourself" => Some(user_id.to_string()),
            "your" | "yours" => Some(format!("{user_id}'s")),
            "you're" => Some(format!("{user_id} is")),
            "you've" => Some(format!("{user_id} has")),
            "you'll" => Some(format!("{user_id} will")),
            "you'd" => Some(format!("{user_id} would")),
            _ => None,
        };
        out.push(named.unwrap_or_else(|| word.to_string()));
    }
    out.join(" ")
}

/// "I'll text it to you tonight" → "Will text it to hanna tonight".
fn commitment(sentence: &str, user_id: &str) -> Option<FactCandidate> {
    let w: Vec<String> = words(sentence).collect();
    let (at, len) = COMMITS
        .iter()
        .filter_map(|p| find(&w, p).map(|at| (at, p.len())))
        .min()?;
    let verb = w.get(at + len)?;
    if NOT_ACTS.contains(&verb.as_str()) || verb == "you" {
        return None;
    }
    let clause = clause_from(sentence, at + len);
    // a verb and what it is done to, at least, and for the user
    if !says_something(&clause) || !words(&clause).any(|w| SECOND.contains(&w.as_str())) {
        return None;
    }
    Some(FactCandidate {
        category: FactCategory::Goal,
        content: format!("Will {}", to_user(&clause, user_id)),
        subject: None,
        speaker: Speaker::Agent,
    })
}

/// "Now you should read The Remains of the Day, it's …" →
/// "Recommended: hanna should read The Remains of the Day".
fn recommendation(sentence: &str, user_id: &str) -> Option<FactCandidate> {
    let w: Vec<String> = words(sentence).collect();
    let (at, pattern, lead) = ADVISES
        .iter()
        .filter_map(|(p, lead)| find(&w, p).map(|at| (at, p, lead)))
        .min_by_key(|(at, p, _)| (*at, std::cmp::Reverse(p.len())))?;
    let rest = clause_from(sentence, at + pattern.len());
    if !says_something(&rest) {
        return None;
    }
    Some(FactCandidate {
        category: FactCategory::Other,
        content: format!(
            "{} {}",
            lead.replace("{user}", user_id),
            to_user(&rest, user_id)
        ),
        subject: None,
        speaker: Speaker::Agent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(said: &str) -> Vec<String> {
        agent_facts(&super::super::sentences(said), "maya")
            .into_iter()
            .map(|f| {
                assert_eq!(f.speaker, Speaker::Agent);
                f.content
            })
            .collect()
    }

    #[test]
    fn commitments_are_kept_with_the_user_named() {
        assert_eq!(
            facts("Sure thing. I'll email you the floor plan by Thursday, promise."),
            ["Will email maya the floor plan by Thursday"]
        );
        assert_eq!(
            facts("Let me check the ferry times for your trip."),
            ["Will check the ferry times for maya's trip"]
        );
        assert_eq!(
            facts("OK so I'm going to book you the vet for Monday morning."),
            ["Will book maya the vet for Monday morning"]
        );
        assert_eq!(
            facts("i will ring the garage about your brakes"),
            ["Will ring the garage about maya's brakes"]
        );
    }

    #[test]
    fn what_only_keeps_the_talk_going_is_no_commitment() {
        for said in [
            "I'll be fine, don't worry.",
            "I'll let you get back to work.",
            "I'll think about it.",
            "I'll bet it was cold up there.",
            "Will you call me after?",
            "I'll go.",
            "I'll remember that.",
            "I'll keep that in mind for next time.",
            "I'll do my best.",
            "Right, I'll leave you to it then.",
            // the agent side's own errands
            "Hang on, I'll put the kettle on.",
            "I'm going to ring the council in the morning.",
        ] {
            let got = facts(said);
            // (an errand may be a plan of the agent side's own life, as the
            // fact rules read it; it is no promise)
            assert!(
                got.iter().all(|f| !f.starts_with("Will ")),
                "{said}: {got:?}"
            );
        }
    }

    #[test]
    fn recommendations_are_kept_with_the_user_named() {
        assert_eq!(
            facts("Honestly, you should try the sourdough place on Elm, it's cheap."),
            ["Recommended: maya should try the sourdough place on Elm"]
        );
        assert_eq!(
            facts("I'd recommend a foam roller for your calves."),
            ["Recommended a foam roller for maya's calves"]
        );
        assert_eq!(
            facts("Have you tried magnesium before bed?"),
            ["Recommended trying magnesium before bed"]
        );
        assert_eq!(
            facts("Why don't you ask Priya to swap shifts?"),
            ["Suggested maya should ask Priya to swap shifts"]
        );
        // a question that asks, rather than advises, states nothing, nor
        // advice that names nothing
        assert!(facts("Should you call the landlord first?").is_empty());
        assert!(facts("Oh you should read it too, honestly.").is_empty());
    }

    #[test]
    fn the_agent_sides_own_life_is_read_by_the_fact_rules_as_its_own() {
        let got = facts("My daughter Ines just started at the conservatory. Anyway.");
        assert!(
            got.iter().any(|f| f.contains("Ines")),
            "the agent side's daughter: {got:?}"
        );
        // a sentence about the user is the user's to tell, not the agent's
        assert!(facts("So your sister moved to Leeds, and you hate it.").is_empty());
    }
}
