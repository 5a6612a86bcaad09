//! Likes and dislikes, told in a turn and asked about in a question.
//!
//! "Which vegetable can't I stand?" rarely shares a word with the turn
//! that answers it ("No beetroot. Opened it. Beetroot. Hate it."): the
//! question names a kind, the turn a thing of that kind. A user tells few
//! such things, so the search index tags each user turn that says one
//! strongly, and a question about what the user loves or cannot stand
//! also looks for the tag: those few turns become candidates, and the
//! question's other words rank them. Like [`super::changes`], both sides
//! are small word lists, and a wrong tag costs one candidate's place.
//! The words that say one by themselves ("hate", "favourite") are among
//! the lists [`super::changes`] looks a turn's words up in, read here by
//! their bits.

#[cfg(test)]
use super::changes::lists_of;
use super::changes::{Subjects, IN_DISLIKE, IN_LIKE};
use super::words;

/// Word pairs that say a dislike: "not a fan", "don't like", "pet peeve".
const DISLIKE_PAIRS: &[[&str; 2]] = &[
    ["a", "fan"],
    ["don't", "like"],
    ["didn't", "like"],
    ["pet", "peeve"],
    ["drives", "me"],
];

const LIKE_PAIRS: &[[&str; 2]] = &[
    ["i", "love"],
    ["i", "loved"],
    ["really", "love"],
    ["absolutely", "love"],
    ["can't", "resist"],
    ["enough", "of"],
    ["my", "life"],
    ["could", "eat"],
    ["i'd", "eat"],
];

/// Words that deny, before a verb of enduring.
const NEGATIONS: &[&str] = &[
    "not", "never", "cannot", "can't", "couldn't", "don't", "won't", "wouldn't",
];

/// Verbs of enduring something: denied ("can't stand", "never could
/// abide", "won't tolerate", "couldn't stomach"), each says a dislike; said
/// plainly ("stand in line", "bear in mind"), nothing.
const ENDURE: &[&str] = &["stand", "bear", "abide", "tolerate", "stomach", "endure"];

/// Whether a verb of enduring is denied: a negation at most four words
/// before it ("I can't stand", "I could never abide", "I've never been
/// able to bear").
fn denied_enduring(ws: &[String]) -> bool {
    ws.iter().enumerate().any(|(i, w)| {
        ENDURE.contains(&w.as_str())
            && ws[i.saturating_sub(4)..i]
                .iter()
                .any(|n| NEGATIONS.contains(&n.as_str()))
    })
}

/// Whether a pair is said, with at most one word between ("don't really
/// like").
fn said(ws: &[String], pairs: &[[&str; 2]]) -> bool {
    (0..ws.len()).any(|i| {
        pairs
            .iter()
            .any(|[a, b]| ws[i] == *a && ws[i + 1..].iter().take(2).any(|w| w == b))
    })
}

#[cfg(test)]
fn felt_in(user_text: &str) -> Subjects {
    let ws: Vec<String> = words(user_text).collect();
    felt_in_words(&ws, lists_of(&ws))
}

/// The likes and dislikes a user's words tell ("I hate mushrooms", "my
/// favourite is fried okra", "I could never abide gin"), given with the
/// bits of the lists they are in.
pub(super) fn felt_in_words(ws: &[String], lists: u16) -> Subjects {
    let mut out = Subjects::NONE;
    if lists & IN_DISLIKE != 0 || said(ws, DISLIKE_PAIRS) || denied_enduring(ws) {
        out |= Subjects::DISLIKES;
    }
    if lists & IN_LIKE != 0 || said(ws, LIKE_PAIRS) {
        out |= Subjects::LIKES;
    }
    out
}

/// Question words that ask what the user cannot stand.
#[rustfmt::skip]
const ASKED_DISLIKE: &[&str] = &[
    "hate", "dislike", "detest", "loathe", "avoid", "annoys", "annoy", "irritates", "peeve",
    "gross",
];

/// Question words that ask it after a "not" (the verbs of enduring,
/// "can't I stand", "never abide"; and "like"), and only so ("a teddy
/// bear").
fn asked_dislike_negated(w: &str) -> bool {
    ENDURE.contains(&w) || w == "like"
}

/// Question words that ask what the user loves.
#[rustfmt::skip]
const ASKED_LIKE: &[&str] = &[
    "love", "favourite", "favorite", "fave", "resist", "obsessed", "adore", "addicted",
    "all-time",
];

/// The likes or dislikes a question asks about ("Which herb can't I
/// stand?", "What's my all-time favourite thing to eat?").
pub fn feeling_asked(question: &str) -> Subjects {
    feeling_asked_words(&words(question).collect::<Vec<_>>())
}

/// [`feeling_asked`] of a question's [`words`].
pub(super) fn feeling_asked_words(ws: &[String]) -> Subjects {
    let negated = ws.iter().any(|w| {
        matches!(
            w.as_str(),
            "not" | "never" | "cannot" | "can't" | "couldn't" | "don't" | "won't"
        )
    });
    let mut out = Subjects::NONE;
    if ws
        .iter()
        .any(|w| ASKED_DISLIKE.contains(&w.as_str()) || (negated && asked_dislike_negated(w)))
    {
        out |= Subjects::DISLIKES;
    }
    if ws.iter().any(|w| ASKED_LIKE.contains(&w.as_str())) {
        out |= Subjects::LIKES;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strong_liking_or_dislike_is_tagged() {
        for (text, want) in [
            (
                "No beetroot. Opened it. Beetroot. Hate it.",
                Subjects::DISLIKES,
            ),
            // a verb of enduring, denied
            ("Honestly I could never abide gin.", Subjects::DISLIKES),
            ("i can't stand the smell of fresh paint", Subjects::DISLIKES),
            (
                "He won't tolerate lateness and neither will I.",
                Subjects::DISLIKES,
            ),
            ("I couldn't stomach the oysters.", Subjects::DISLIKES),
            ("I've never been able to bear jazz.", Subjects::DISLIKES),
            (
                "My favourite thing in the world is fried okra.",
                Subjects::LIKES,
            ),
            (
                "if i could only eat one thing for the rest of my life it'd be okra",
                Subjects::LIKES,
            ),
        ] {
            assert!(felt_in(text).contains(want), "{text:?}");
        }
        assert!(felt_in("It rained all day and the bus was late.").is_empty());
        // said plainly, a verb of enduring is no dislike; nor is a taste
        for plain in [
            "We had to stand in line for an hour.",
            "Bear in mind the shop shuts at five.",
            "The soup tastes like my gran's.",
        ] {
            assert!(felt_in(plain).is_empty(), "{plain:?}");
        }
    }

    #[test]
    fn a_question_of_likes_or_dislikes_asks_for_the_tag() {
        assert_eq!(
            feeling_asked("Which vegetable can't I stand?"),
            Subjects::DISLIKES
        );
        assert_eq!(feeling_asked("What food do I hate?"), Subjects::DISLIKES);
        assert_eq!(
            feeling_asked("What's my all-time favourite thing to eat?"),
            Subjects::LIKES
        );
        assert!(feeling_asked("Where do I live?").is_empty());
        assert!(feeling_asked("What's my teddy bear called?").is_empty());
        assert_eq!(
            feeling_asked("Which drink could she never stomach?"),
            Subjects::DISLIKES
        );
        assert!(feeling_asked("How long did I stand in the queue?").is_empty());
    }
}
