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

use super::{words, Subjects};

/// Words that say a dislike by themselves.
#[rustfmt::skip]
pub(super) const DISLIKE_WORDS: &[&str] = &[
    "hate", "hated", "hates", "detest", "loathe", "loathed", "disgusting", "gross", "vile",
    "revolting", "dislike", "abide", "yuck", "ugh", "allergic",
];

/// Word pairs that say one: "can't stand", "not a fan", "tastes like".
const DISLIKE_PAIRS: &[[&str; 2]] = &[
    ["can't", "stand"],
    ["cannot", "stand"],
    ["can't", "bear"],
    ["a", "fan"],
    ["tastes", "like"],
    ["taste", "of"],
    ["don't", "like"],
    ["didn't", "like"],
    ["pet", "peeve"],
    ["drives", "me"],
];

/// Words that say a strong liking.
#[rustfmt::skip]
pub(super) const LIKE_WORDS: &[&str] = &[
    "favourite", "favorite", "fave", "obsessed", "adore", "addicted", "addiction", "weakness",
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

/// Whether a pair is said, with at most one word between ("tastes
/// exactly like").
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
    felt_in_words(&ws, super::changes::lists_of(&ws))
}

/// The likes and dislikes a user's words tell ("I hate mushrooms", "my
/// favourite is fried okra", "it tastes like soap to me"), given with
/// the bits of the lists they are in.
pub(super) fn felt_in_words(ws: &[String], lists: u16) -> Subjects {
    let mut out = Subjects::NONE;
    if lists & super::changes::IN_DISLIKE != 0 || said(ws, DISLIKE_PAIRS) {
        out |= Subjects::DISLIKES;
    }
    if lists & super::changes::IN_LIKE != 0 || said(ws, LIKE_PAIRS) {
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

/// Question words that ask it after a "not" ("can't I stand", "never
/// abide"), and only so ("a teddy bear").
const ASKED_DISLIKE_NEGATED: &[&str] = &["stand", "bear", "abide", "tolerate", "like"];

/// Question words that ask what the user loves.
#[rustfmt::skip]
const ASKED_LIKE: &[&str] = &[
    "love", "favourite", "favorite", "fave", "resist", "obsessed", "adore", "addicted",
    "all-time",
];

/// The likes or dislikes a question asks about ("Which herb can't I
/// stand?", "What's my all-time favourite thing to eat?").
pub fn feeling_asked(question: &str) -> Subjects {
    let ws: Vec<String> = words(question).collect();
    let negated = ws.iter().any(|w| {
        matches!(
            w.as_str(),
            "not" | "never" | "cannot" | "can't" | "couldn't" | "don't" | "won't"
        )
    });
    let mut out = Subjects::NONE;
    if ws.iter().any(|w| {
        ASKED_DISLIKE.contains(&w.as_str())
            || (negated && ASKED_DISLIKE_NEGATED.contains(&w.as_str()))
    }) {
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
                "No beetroot. Opened it. Beetroot. Hate it. Tastes like dirt.",
                Subjects::DISLIKES,
            ),
            (
                "I have never been able to abide the stuff.",
                Subjects::DISLIKES,
            ),
            ("it tastes exactly like dish soap to me", Subjects::DISLIKES),
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
            feeling_asked("Which flavouring can I never abide?"),
            Subjects::DISLIKES
        );
    }
}
