//! What kind of answer a question asks for, and whether a turn holds one.
//!
//! "What's my mum's name?" shares one word at most with the turn that
//! answers it ("my mother called at six in the morning… Dona Cida, always
//! awake"), and that word is in every turn about the mother. What sets the
//! answer apart is that it names someone: factoid question answering has
//! long matched a question's expected answer type (a person, a place, a
//! date) against the passages that hold one. So the index tags each user
//! turn that names something (a capitalized word inside a sentence, or a
//! sentence-initial one the text shows to be a name) or gives a day of the
//! year, and a question that asks for a name or a date lets the tag
//! re-rank what its words found, as one more word too common to find by
//! would: among the turns about the mother, the one with her name comes
//! first. The tag never finds a turn alone. A transcript without capitals
//! tags no names, and ranks as it would without the tags.

use super::{capitalized, is_date_word, is_stopword, looks_like_name, trim_token};

/// Kinds of answer, as a set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Answers(u8);

impl Answers {
    pub const NONE: Answers = Answers(0);
    /// A name: of a person, a pet, a place, a brand.
    pub const NAME: Answers = Answers(1);
    /// A day of the year.
    pub const DATE: Answers = Answers(1 << 1);

    const ALL: [(Answers, &'static str); 2] =
        [(Answers::NAME, "\u{2}name"), (Answers::DATE, "\u{2}date")];

    pub fn contains(self, other: Answers) -> bool {
        self.0 & other.0 == other.0
    }

    /// The index terms of the kinds in the set: words no text yields
    /// (they start with a control character, which no token holds).
    pub fn terms(self) -> impl Iterator<Item = &'static str> {
        Answers::ALL
            .into_iter()
            .filter(move |(a, _)| self.contains(*a))
            .map(|(_, t)| t)
    }
}

/// The kinds of answer a user's words hold: a name when a word inside a
/// sentence is capitalized (not "I", a month or a weekday), or a
/// sentence-initial one is capitalized elsewhere in the text too or looks
/// like a name by its inner capitals ("McKenzie", "IBM"); a date when a
/// month is named or a day written as a number with its suffix ("the
/// 3rd") or in digits ("3/8").
pub fn held_in(user_text: &str) -> Answers {
    // One pass over the words, line by line (a line break ends a
    // sentence), lowercasing only the capitalized ones: every turn indexed
    // passes through here.
    let text = super::without_media(user_text);
    let mut inside: Vec<String> = Vec::new();
    let mut initial: Vec<(String, &str)> = Vec::new();
    let mut dated = false;
    for line in text.lines() {
        let mut at_start = true;
        for raw in line.split_whitespace() {
            let first = at_start;
            let closed = raw.trim_end_matches(['"', '\u{201d}', '\'', '\u{2019}', ')', ']']);
            at_start = closed.ends_with(['.', '!', '?'])
                && !(closed.ends_with('.') && super::ends_in_title(closed));
            let tok = trim_token(raw);
            dated = dated || is_date(tok);
            if !capitalized(tok) {
                continue;
            }
            let lower = tok.to_lowercase();
            if is_stopword(&lower) || is_date_word(&lower) || is_pronoun_i(&lower) {
                continue;
            }
            if first {
                initial.push((lower, tok));
            } else {
                inside.push(lower);
            }
        }
    }
    let named = !inside.is_empty()
        || initial
            .iter()
            .any(|(lower, tok)| inside.contains(lower) || looks_like_name(tok));
    kinds(named, dated)
}

/// Whether a word names a month ("may" only written "May") or is a day
/// written as a number with its suffix or in digits.
fn is_date(tok: &str) -> bool {
    match tok.as_bytes().first() {
        Some(b) if b.is_ascii_digit() => super::facts::is_day_number(&tok.to_ascii_lowercase()),
        Some(b) if b.is_ascii_alphabetic() && (3..=9).contains(&tok.len()) => {
            super::MONTHS[..12]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(tok))
                && (!tok.eq_ignore_ascii_case("may") || capitalized(tok))
        }
        _ => false,
    }
}

/// The set of a name, a date, both or neither.
fn kinds(name: bool, date: bool) -> Answers {
    let bit = |on: bool, a: Answers| if on { a.0 } else { 0 };
    Answers(bit(name, Answers::NAME) | bit(date, Answers::DATE))
}

/// "I", "I'm", "I'd", "I'll", "I've": capitalized, never a name.
fn is_pronoun_i(lower: &str) -> bool {
    lower == "i" || lower.starts_with("i'") || lower.starts_with("i’")
}

/// The kinds of answer a question asks for: a name for "who", "whose",
/// "name" or "called" ("What's my cat called?"), "which" and "where" (a
/// town, a team, a book: most often a name); a date for "when" and "what
/// date" or "which day".
pub fn expected_in(question: &str) -> Answers {
    expected_in_words(&super::words(question).collect::<Vec<_>>())
}

/// [`expected_in`] of a question's [`words`](super::words).
pub fn expected_in_words(ws: &[String]) -> Answers {
    let asks_name = ws.iter().any(|w| {
        matches!(
            w.as_str(),
            "who" | "who's" | "whom" | "whose" | "name" | "named" | "called" | "which" | "where"
        )
    });
    let asks_date = ws.iter().any(|w| w == "when")
        || ws.windows(2).any(|p| {
            matches!(p[0].as_str(), "what" | "which") && matches!(p[1].as_str(), "date" | "day")
        });
    kinds(asks_name, asks_date)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_inside_a_sentence_is_held() {
        assert_eq!(
            held_in("My mother called at six. What is she doing awake? Dona Cida, always."),
            Answers::NAME
        );
        assert_eq!(
            held_in("We had lunch with Priya on the terrace."),
            Answers::NAME
        );
        // Sentence-initial: a name when the text shows it capitalized
        // inside a sentence too.
        assert_eq!(
            held_in("Thaís sent a voice note. I told Thaís to sleep."),
            Answers::NAME
        );
    }

    #[test]
    fn capitals_that_name_nothing_are_not_held() {
        assert_eq!(
            held_in("I think I'm tired. The soup was good."),
            Answers::NONE
        );
        assert!(!held_in("See you on Monday, in March maybe.").contains(Answers::NAME));
        assert_eq!(
            held_in("[shares a photo of Lisbon] It was lovely."),
            Answers::NONE
        );
    }

    #[test]
    fn a_day_of_the_year_is_a_date() {
        for text in [
            "She flies in on the 3rd, can you believe it.",
            "Report on 8 June, somewhere up north.",
            "Booked for 14/9.",
        ] {
            assert!(held_in(text).contains(Answers::DATE), "{text}");
        }
        for text in ["I may go. Two weeks of it.", "On Monday, at 3."] {
            assert!(!held_in(text).contains(Answers::DATE), "{text}");
        }
    }

    #[test]
    fn questions_for_a_name_expect_one() {
        for q in [
            "What's my mum's name?",
            "Who am I seeing now?",
            "What is my cat called?",
            "Which town do I live in?",
        ] {
            assert_eq!(expected_in(q), Answers::NAME, "{q}");
        }
        for q in ["When is my birthday?", "What day is she flying in?"] {
            assert_eq!(expected_in(q), Answers::DATE, "{q}");
        }
        for q in ["What do I do for work?", "How many cats do I have?"] {
            assert_eq!(expected_in(q), Answers::NONE, "{q}");
        }
    }
}
