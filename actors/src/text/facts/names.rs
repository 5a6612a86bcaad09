//! The user's relations and pets spoken of, and the names given of them:
//! the one a sentence opening on "he" or "she" is about, a name given in
//! answer to the agent's question or with a pronoun ("her name's
//! Biscuit"), and the name a fact of this module gives read back.

use super::matching::relation;
use super::pattern::Slot;
use super::phrasing::{fix_articles, upper_first};
use super::tokens::{name_token, render, tokenize, Tok};
use crate::lang::fact_words::{
    relation_subject, AFTER_IS, DOG_BREEDS, FEMALE_RELATIONS, FILLERS, MALE_RELATIONS, NOT_NAMES,
    PETS, SOMEONE_ELSE,
};
use crate::lang::{is_stopword, MONTHS, WEEKDAYS};
use crate::model::{FactCandidate, FactCategory};
use crate::text::sentences;

/// The user's own relation or pet spoken of last ("my boyfriend", "our
/// son", "my own dog"), which a sentence that opens on "he" or "she" is
/// about: "my boyfriend got called out at 2 am" — "he's a lineman for the
/// electric company" reads as "my boyfriend's a lineman for the electric
/// company". Someone else spoken of after it (another's relation, "a
/// lady", "a client") ends it, and a pronoun of the other sex does not
/// take it.
#[derive(Debug, Clone)]
pub(super) struct Referent {
    /// As the user said it, without "my" ("boyfriend", "best friend").
    what: String,
    /// Whether the relation is a man's (`Some(true)`), a woman's, or
    /// either (`None`: a friend, a pet).
    male: Option<bool>,
}

impl Referent {
    /// Who a sentence leaves spoken of last, after `prev`.
    pub(super) fn after(prev: Option<Referent>, toks: &[Tok]) -> Option<Referent> {
        let mut current = prev;
        for j in 0..toks.len() {
            let own =
                (j.saturating_sub(2)..j).any(|k| matches!(toks[k].lower.as_str(), "my" | "our"));
            let w = toks[j].lower.as_str();
            let pet = PETS.contains(&w) || DOG_BREEDS.contains(&w);
            let rel = relation(toks, j, Slot::Rel);
            let related = rel.is_some();
            let (end, what) = rel.unwrap_or_else(|| (j + 1, w.to_string()));
            // "my neighbour's goat": the neighbour's, not the neighbour
            let possessive = toks.get(end).is_some_and(|t| t.lower == "'s")
                && toks
                    .get(end + 1)
                    .is_some_and(|t| !t.punct && !AFTER_IS.contains(&t.lower.as_str()));
            if (related || pet) && own && !possessive {
                let male = if MALE_RELATIONS.contains(&what.as_str()) {
                    Some(true)
                } else if FEMALE_RELATIONS.contains(&what.as_str()) {
                    Some(false)
                } else {
                    None
                };
                current = Some(Referent { what, male });
            } else if related || pet || SOMEONE_ELSE.contains(&w) {
                current = None;
            }
        }
        current
    }

    /// `sentence` with "my <relation>" in place of the "he" or "she" it
    /// opens on (after "so", "um", "oh", "and", "well" or "yeah"), when
    /// the pronoun may be this referent's.
    pub(super) fn in_place_of_pronoun(&self, sentence: &str, toks: &[Tok]) -> Option<String> {
        let first = toks
            .iter()
            .position(|t| !t.punct && !FILLERS.contains(&t.lower.as_str()))?;
        let male = match toks[first].lower.as_str() {
            "he" => true,
            "she" => false,
            _ => return None,
        };
        if self.male.is_some_and(|m| m != male) {
            return None;
        }
        // The pronoun as written ("he", "He's", "hes"): the first word
        // that is no filler.
        let pronoun = if male { "he" } else { "she" };
        let word_char = |c: char| c.is_alphanumeric() || c == '\'';
        let mut start = 0;
        for word in sentence.split_inclusive(|c: char| !word_char(c)) {
            let bare = word.trim_end_matches(|c: char| !word_char(c));
            let lower = bare.to_lowercase();
            if bare.is_empty() || FILLERS.contains(&lower.as_str()) {
                start += word.len();
                continue;
            }
            let after = &sentence[start + pronoun.len()..];
            let tail = if lower == pronoun || lower.starts_with(&format!("{pronoun}'")) {
                after.to_string()
            } else if lower == format!("{pronoun}s") {
                // "hes": "he's" without its apostrophe
                format!("'{after}")
            } else {
                return None;
            };
            return Some(format!("{}my {}{tail}", &sentence[..start], self.what));
        }
        None
    }
}

/// A name given in answer to the agent's question ("Have you settled on a
/// name yet?" — "Pretzel."): what it names is the relation or pet the
/// question speaks of ("What's your sister called?"), else the last one
/// the user spoke of just before ("We picked up the puppy on Saturday!").
/// `None` unless the question asks for a name and the answer opens with
/// a name alone.
pub fn answered_name(before: &str, asked: &str, answer: &str) -> Option<FactCandidate> {
    let question = sentences(asked)
        .into_iter()
        .rev()
        .find(|s| s.trim_end().ends_with('?'))?;
    let q = tokenize(&question);
    let has = |w: &str| q.iter().any(|t| t.lower == w);
    let asks_name = has("name")
        || has("named")
        || has("called")
        || ((has("call") || has("calling")) && has("what"));
    // "What's your name?" asks for the user's own.
    let own = q
        .windows(2)
        .any(|p| p[0].lower == "your" && p[1].lower == "name");
    if !asks_name || own {
        return None;
    }
    let first = sentences(answer).into_iter().next()?;
    let a = tokenize(&first);
    let words: Vec<&Tok> = a.iter().filter(|t| !t.punct).collect();
    let name_only = (1..=3).contains(&words.len()) && words.iter().all(|t| name_token(t));
    if !name_only || a.iter().any(|t| t.lower == "?") {
        return None;
    }
    let name = render(&words.iter().map(|t| (*t).clone()).collect::<Vec<_>>());
    // The relation or pet spoken of: the question's, else the user's last.
    let (what, kind) = spoken_of(&q).or_else(|| last_spoken_of(before))?;
    Some(name_fact(&what, kind, &name))
}

/// The relation or pet `toks` speak of last, and which kind of slot it
/// fills.
fn spoken_of(toks: &[Tok]) -> Option<(String, Slot)> {
    spoken_of_by(toks, false)
}

/// [`spoken_of`]; with `own`, only one the speaker calls theirs ("my own
/// dog", "our lad", "my boyfriend"; not "a client's chihuahua").
fn spoken_of_by(toks: &[Tok], own: bool) -> Option<(String, Slot)> {
    let theirs =
        |j: usize| (j.saturating_sub(2)..j).any(|k| matches!(toks[k].lower.as_str(), "my" | "our"));
    (0..toks.len()).rev().find_map(|j| {
        if own && !theirs(j) {
            return None;
        }
        if let Some((_, w)) = relation(toks, j, Slot::Rel1) {
            return Some((w, Slot::Rel1));
        }
        if let Some((_, w)) = relation(toks, j, Slot::RelN) {
            return Some((w, Slot::RelN));
        }
        let w = toks[j].lower.as_str();
        if PETS.contains(&w) {
            Some((w.to_string(), Slot::Pet))
        } else if DOG_BREEDS.contains(&w) {
            Some((format!("{w} (dog)"), Slot::Pet))
        } else {
            None
        }
    })
}

/// The relation or pet the last sentence of `text` that speaks of one
/// speaks of.
fn last_spoken_of(text: &str) -> Option<(String, Slot)> {
    sentences(text)
        .iter()
        .rev()
        .find_map(|s| spoken_of(&tokenize(s)))
}

/// "Sister is named Leela", "Has a dog named Biscuit".
fn name_fact(what: &str, kind: Slot, name: &str) -> FactCandidate {
    let (content, subject, category) = match kind {
        Slot::Rel1 => (
            format!("{} is named {name}", upper_first(what)),
            Some(relation_subject(what).to_string()),
            FactCategory::Relationship,
        ),
        Slot::RelN => (
            format!("Has a {what} named {name}"),
            None,
            FactCategory::Relationship,
        ),
        _ => (
            fix_articles(&format!("Has a {what} named {name}")),
            None,
            FactCategory::Biographical,
        ),
    };
    FactCandidate {
        category,
        content,
        subject,
        speaker: Default::default(),
    }
}

/// A name given with a pronoun ("her name's Biscuit", "his name is
/// Colt"): what it names is the user's own relation or pet spoken of last
/// before it ("my …", "our …"), in the same message or, failing that, in
/// the user's message before
/// (`before`: "my boyfriend got called out at 2 am" — "he's a lineman
/// … his name's colt"). In a message without capitals (`caseless`: a
/// transcript) the word after "name is" is read as the name its place
/// says it is.
pub fn pronoun_named(before: &str, said: &str, caseless: bool) -> Vec<FactCandidate> {
    let mut out = Vec::new();
    let said_sentences = sentences(said);
    let before_sentences = sentences(before);
    for (i, sentence) in said_sentences.iter().enumerate() {
        let toks = tokenize(sentence);
        for j in 0..toks.len().saturating_sub(3) {
            let names = matches!(toks[j].lower.as_str(), "his" | "her" | "its")
                && toks[j + 1].lower == "name"
                && matches!(toks[j + 2].lower.as_str(), "is" | "'s" | "was");
            let t = &toks[j + 3];
            let name_like = name_token(t)
                || (caseless
                    && !t.punct
                    && t.lower.chars().all(char::is_alphabetic)
                    && t.lower.chars().count() > 1
                    && !is_stopword(&t.lower)
                    && !MONTHS.contains(&t.lower.as_str())
                    && !WEEKDAYS.contains(&t.lower.as_str())
                    && !NOT_NAMES.contains(&t.lower.as_str()));
            if !names || !name_like {
                continue;
            }
            let referent = spoken_of_by(&toks[..j], true).or_else(|| {
                // the sentences before it, latest first
                let earlier: Vec<&String> = before_sentences
                    .iter()
                    .chain(&said_sentences[..i])
                    .collect();
                earlier
                    .into_iter()
                    .rev()
                    .find_map(|s| spoken_of_by(&tokenize(s), true))
            });
            if let Some((what, kind)) = referent {
                out.push(name_fact(&what, kind, &upper_first(&t.text)));
            }
        }
    }
    out
}

/// The person or pet a fact this module wrote names, and the name: ("dog",
/// "Biscuit") for "Has a dog named Biscuit", ("manager", "Beatriz") for
/// "Manager is named Beatriz". `None` for any other fact (an LLM's wording
/// among them).
pub fn named(content: &str) -> Option<(String, String)> {
    let content = content.trim().trim_end_matches('.');
    let (what, name) = match content.strip_prefix("Has a ") {
        Some(rest) => rest.split_once(" named ")?,
        None => content
            .strip_prefix("Has an ")
            .and_then(|rest| rest.split_once(" named "))
            .or_else(|| content.split_once(" is named "))?,
    };
    let (what, name) = (what.trim(), name.trim());
    let word = |w: &str| !w.is_empty() && w.split_whitespace().count() <= 3;
    (word(what) && word(name)).then(|| (what.to_lowercase(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_given_in_answer_names_what_was_asked_about() {
        let got = |before: &str, asked: &str, answer: &str| {
            answered_name(before, asked, answer).map(|f| (f.content, f.subject))
        };
        assert_eq!(
            got(
                "We picked up the puppy on Saturday! He's a corgi mix.",
                "Congratulations! Have you settled on a name yet?",
                "Pretzel. Jonas lobbied hard for Waffles but I won."
            ),
            Some(("Has a corgi (dog) named Pretzel".into(), None))
        );
        assert_eq!(
            got(
                "My sister is coming to visit.",
                "How lovely. What's your sister called?",
                "Leela!"
            ),
            Some(("Has a sister named Leela".into(), None))
        );
        assert_eq!(
            got("I had a chat with my boss.", "What's his name?", "Derek."),
            Some(("Boss is named Derek".into(), Some("manager".into())))
        );
        // No name asked for, no name alone in the answer, nothing named.
        assert_eq!(got("We got a puppy.", "How old is he?", "Ten weeks."), None);
        assert_eq!(
            got(
                "We got a puppy.",
                "What's his name?",
                "We haven't decided yet."
            ),
            None
        );
        assert_eq!(
            got("Busy day.", "What's the name of the cafe?", "Luigi's."),
            None
        );
        // The user's own name, and "call" that asks for none.
        assert_eq!(
            got("My dog keeps barking.", "What's your name?", "Priya."),
            None
        );
        assert_eq!(got("", "Did you call your mom back?", "Nope."), None);
    }

    #[test]
    fn a_name_given_with_a_pronoun_names_what_was_spoken_of_before() {
        let contents = |before: &str, said: &str, caseless: bool| -> Vec<String> {
            pronoun_named(before, said, caseless)
                .into_iter()
                .map(|f| f.content)
                .collect()
        };
        // in the same message, and in the user's message before
        assert_eq!(
            contents(
                "",
                "My own dog is riding shotgun today. Her name's Biscuit, after the colour.",
                false
            ),
            ["Has a dog named Biscuit"]
        );
        assert_eq!(
            contents(
                "my boyfriend got called out at 2 in the morning",
                "he's a lineman for the electric company and his name's colt",
                true
            ),
            ["Boyfriend is named Colt"]
        );
        // a word in that place that no name can be, or with case to tell
        // it is none; and nothing spoken of to name
        assert!(contents("my sister rang", "her name is the least of it", true).is_empty());
        assert!(contents(
            "My sister rang.",
            "Her name is long, I never spell it.",
            false
        )
        .is_empty());
        assert!(contents("The weather is awful.", "Her name is Pam.", false).is_empty());
        // another's pet is not the user's
        assert!(contents(
            "",
            "one of my regulars has a chihuahua and her name is tiny",
            true
        )
        .is_empty());
    }
}
