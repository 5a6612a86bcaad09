//! The checks a rule makes of what it captured, each refusing a match
//! the rule's words alone would take: a vehicle that is no vehicle, a
//! plan that is talk about the conversation, a role that judges rather
//! than names an occupation.

use super::pattern::{capture, Captures};
use super::tokens::Tok;
use crate::lang::fact_words::{
    is_occupation, is_relation_word, CHATTY_VERBS, NOT_NAMES, ROLE_JUDGEMENTS, SAYING, SOMEONE,
    WORKPLACES,
};
use crate::lang::is_stopword;

fn first_word(caps: &Captures, key: &str) -> String {
    capture(caps, key)
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_default()
        .to_lowercase()
}

/// "a Corolla", "an old Subaru", "a 2015 Honda Civic", "Teslas".
pub(super) fn vehicle(caps: &Captures) -> bool {
    let v = capture(caps, "v").unwrap_or_default();
    let first = first_word(caps, "v");
    matches!(first.as_str(), "a" | "an")
        || v.chars().next().is_some_and(char::is_uppercase)
        || v.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// A plan that is not talk about the conversation ("I want to ask").
pub(super) fn plan(caps: &Captures) -> bool {
    let v = capture(caps, "v").unwrap_or_default();
    let first = first_word(caps, "v");
    v.split_whitespace().count() >= 2
        && !CHATTY_VERBS.contains(&first.as_str())
        && !matches!(first.as_str(), "the" | "a" | "an" | "my" | "their" | "to")
}

/// A plan, where "go"/"get"/"start" are allowed ("I'm trying to get fit").
pub(super) fn effort(caps: &Captures) -> bool {
    let first = first_word(caps, "v");
    capture(caps, "v").is_some_and(|v| v.split_whitespace().count() >= 2)
        && !matches!(
            first.as_str(),
            "remember"
                | "figure"
                | "understand"
                | "think"
                | "decide"
                | "explain"
                | "say"
                | "be"
                | "see"
                | "do"
                | "make"
                | "tell"
                | "ask"
                | "find"
                | "help"
                | "reach"
                | "call"
                | "focus"
        )
}

/// A span of time ("thirty-four years", "about a decade").
pub(super) fn duration(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| {
        v.split_whitespace().any(|w| {
            matches!(
                w.to_lowercase().trim_end_matches(['.', ',']),
                "year" | "years" | "decade" | "decades" | "month" | "months"
            )
        })
    })
}

/// A role that names no place it points at ("a backend engineer there").
pub(super) fn standalone_role(caps: &Captures) -> bool {
    capture(caps, "role").is_some_and(|r| {
        !r.split_whitespace()
            .any(|w| matches!(w.to_lowercase().as_str(), "there" | "here" | "then"))
    })
}

/// An employer, not a meeting ("I'm joining the Zoom") or people ("Mike
/// and Sarah", "Dad").
pub(super) fn employer(caps: &Captures) -> bool {
    !capture(caps, "org").is_some_and(|o| {
        o.split_whitespace().any(|w| {
            let w = w.to_lowercase();
            matches!(
                w.as_str(),
                "zoom" | "teams" | "meet" | "webex" | "slack" | "discord" | "call" | "and" | "&"
            ) || NOT_NAMES.contains(&w.as_str())
                || is_relation_word(&w)
        })
    })
}

/// A kind of thing, not someone ("my sister and I don't get along").
pub(super) fn not_a_person(caps: &Captures) -> bool {
    capture(caps, "thing").is_some_and(|t| {
        !t.split_whitespace().any(|w| {
            matches!(
                w,
                "my" | "our" | "his" | "her" | "their" | "he" | "she" | "we" | "they"
            ) || is_relation_word(w)
        })
    })
}

/// "a civil engineer" for "thirty-four years", not "a mess" for months.
pub(super) fn past_role(caps: &Captures) -> bool {
    duration(caps)
        && standalone_role(caps)
        && !capture(caps, "role").is_some_and(|r| {
            r.split_whitespace().any(|w| {
                matches!(
                    w.to_lowercase().as_str(),
                    "mess"
                        | "wreck"
                        | "disaster"
                        | "zombie"
                        | "kid"
                        | "child"
                        | "baby"
                        | "teenager"
                        | "nightmare"
                        | "fool"
                        | "idiot"
                        | "hermit"
                        | "ghost"
                )
            })
        })
}

/// Not an article or preposition first ("I took up pottery", not "the offer").
pub(super) fn bare(caps: &Captures) -> bool {
    !matches!(
        first_word(caps, "v").as_str(),
        "the" | "a" | "an" | "on" | "with" | "for" | "at" | "in" | "to" | "by" | "their" | "what"
    )
}

/// A game or instrument, not "with my kids" or "it safe".
pub(super) fn played(caps: &Captures) -> bool {
    !matches!(
        first_word(caps, "v").as_str(),
        "with"
            | "around"
            | "along"
            | "a"
            | "an"
            | "dumb"
            | "hard"
            | "nice"
            | "fair"
            | "safe"
            | "by"
            | "on"
            | "down"
            | "back"
            | "games"
            | "out"
    )
}

/// Something one likes, not a feeling about the conversation ("I like
/// hearing that", "I like the sound of that").
pub(super) fn liked(caps: &Captures) -> bool {
    let v = capture(caps, "v").unwrap_or_default().to_lowercase();
    let last = v.split_whitespace().last().unwrap_or_default();
    let first = first_word(caps, "v");
    // "I hate myself", "I love you": a feeling about someone, not a taste;
    // "I like to think …", "I hate to say …": a way of saying something.
    let hedge = first == "to" && SAYING.contains(&v.split_whitespace().nth(1).unwrap_or_default());
    let person = SOMEONE.contains(&first.as_str());
    // "I can't stand up for that long", "I can't stand still": a verb
    // with a particle or a place after it is no feeling about a thing
    // (what is liked or hated is named).
    let particle = matches!(
        first.as_str(),
        "up" | "down"
            | "still"
            | "on"
            | "in"
            | "out"
            | "around"
            | "there"
            | "here"
            | "by"
            | "for"
            | "at"
            | "with"
            | "about"
            | "back"
    );
    !hedge
        && !person
        && !particle
        && !matches!(
            first.as_str(),
            "hearing" | "talking" | "chatting" | "being" | "speaking" | "working"
        )
        && !matches!(
            last,
            "that" | "this" | "it" | "them" | "those" | "these" | "idea" | "plan" | "suggestion"
        )
}

/// A language (capitalized).
pub(super) fn capitalized_value(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| v.chars().next().is_some_and(char::is_uppercase))
}

/// A medicine's name: one word that is not among the most common English
/// words (by the built-in table's order of frequency).
pub(super) fn medicine(caps: &Captures) -> bool {
    capture(caps, "thing").is_some_and(|v| {
        !v.contains(' ')
            && v.chars().count() > 3
            && !is_stopword(v)
            && crate::static_embed::stem_row(&crate::lang::stem(v))
                .is_none_or(|row| row >= COMMON_WORDS)
    })
}

/// How many of the most frequent English words no medicine is named by.
const COMMON_WORDS: u32 = 5_000;

/// A place of work named by its kind ("the hospital", "the care home").
pub(super) fn workplace(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| {
        v.split_whitespace().take(3).any(|w| {
            WORKPLACES.contains(
                &w.to_lowercase()
                    .trim_matches(|c: char| !c.is_alphanumeric()),
            )
        })
    })
}

/// A course, class or lessons ("an online course in bookkeeping").
pub(super) fn course(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| {
        v.split_whitespace().any(|w| {
            matches!(
                w.to_lowercase()
                    .trim_matches(|c: char| !c.is_alphanumeric()),
                "course" | "class" | "classes" | "lessons" | "workshop" | "certificate"
            )
        })
    })
}

/// Things one eats or drinks, not "right now".
pub(super) fn edible(caps: &Captures) -> bool {
    !matches!(
        first_word(caps, "v").as_str(),
        "right" | "now" | "anymore" | "after" | "before" | "in" | "at" | "with" | "out" | "here"
    )
}

/// A role said without "a" ("I will be kitchen supervisor", "my son is
/// nurse in Calgary"): up to two plain words and an occupation, then
/// nothing or a place or employer after "in", "at", "for", "with", "on".
pub(super) fn bare_role(value: &[Tok]) -> bool {
    let Some(i) = value.iter().take(3).position(|t| is_occupation(&t.lower)) else {
        return false;
    };
    value[..i].iter().all(|t| {
        !t.punct
            && t.lower.chars().all(char::is_alphabetic)
            && !is_stopword(&t.lower)
            && !ROLE_JUDGEMENTS.contains(&t.lower.as_str())
    }) && value
        .get(i + 1)
        .is_none_or(|t| matches!(t.lower.as_str(), "in" | "at" | "for" | "with" | "on"))
}

/// A role that is an occupation ("a nurse", "a dental hygienist in
/// Truro"), judged by none ("a terrible teacher").
pub(super) fn occupation(caps: &Captures) -> bool {
    standalone_role(caps)
        && capture(caps, "role").is_some_and(|r| {
            let words: Vec<String> = r
                .split_whitespace()
                .map(|w| {
                    w.to_lowercase()
                        .trim_matches(|c: char| !c.is_alphanumeric())
                        .to_string()
                })
                .collect();
            words.iter().take(4).any(|w| is_occupation(w))
                && !words.iter().any(|w| ROLE_JUDGEMENTS.contains(&w.as_str()))
        })
}
