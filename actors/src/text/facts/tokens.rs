//! Sentences cut into word and punctuation tokens: contractions
//! expanded (with or without their apostrophe), short forms written out,
//! and tokens rendered back as they were written or in the third person.

use crate::lang::fact_words::{NOT_NAMES, SPECIAL, SUFFIXES, THIRD_PERSON, UNMARKED};
use crate::lang::{is_stopword, MONTHS, WEEKDAYS};

/// One word or punctuation mark of a sentence.
#[derive(Debug, Clone)]
pub(super) struct Tok {
    /// As written (for an expanded contraction, its part: "I" + "'m").
    pub(super) text: String,
    /// Lower case, contractions expanded ("am", "not", "'s").
    pub(super) lower: String,
    pub(super) punct: bool,
    /// Written against the previous token ("'m" after "I").
    pub(super) attached: bool,
}

impl Tok {
    pub(super) fn word(text: &str, lower: &str, attached: bool) -> Tok {
        Tok {
            text: text.to_string(),
            lower: lower.to_string(),
            punct: false,
            attached,
        }
    }

    pub(super) fn capitalized(&self) -> bool {
        !self.punct && self.text.chars().next().is_some_and(char::is_uppercase)
    }
}

fn push_word(word: &str, out: &mut Vec<Tok>) {
    let word = word.trim_matches('\'');
    if word.is_empty() {
        return;
    }
    let lower = word.to_lowercase();
    if let Ok(i) = UNMARKED.binary_search_by(|(w, _)| w.cmp(&lower.as_str())) {
        // "im" is "i" + "am"; the first part keeps the case it was written
        // in ("Im" opens a sentence as "I'm" would).
        for (n, part) in UNMARKED[i].1.iter().enumerate() {
            let text = match (n, part) {
                (0, &"i") => "I",
                _ => part,
            };
            out.push(Tok::word(text, part, n > 0));
        }
        return;
    }
    if let Ok(i) = crate::lang::SHORT_FORMS.binary_search_by(|(w, _)| w.cmp(&lower.as_str())) {
        let word = crate::lang::SHORT_FORMS[i].1;
        out.push(Tok::word(word, word, false));
        return;
    }
    if let Some((_, a, b)) = SPECIAL.iter().find(|(w, _, _)| *w == lower) {
        // "can't" is written "ca" + "n't"; "cannot" "can" + "not".
        let split = if lower == "cannot" {
            3
        } else {
            word.len() - if lower.ends_with("n't") { 3 } else { 2 }
        };
        if word.is_char_boundary(split) {
            out.push(Tok::word(&word[..split], a, false));
            out.push(Tok::word(&word[split..], b, true));
            return;
        }
    }
    for (suffix, stands_for) in SUFFIXES {
        let Some(cut) = word.len().checked_sub(suffix.len()) else {
            continue;
        };
        if cut > 0 && word.is_char_boundary(cut) && word[cut..].eq_ignore_ascii_case(suffix) {
            let stem = &word[..cut];
            out.push(Tok::word(stem, &stem.to_lowercase(), false));
            out.push(Tok::word(&word[cut..], stands_for, true));
            return;
        }
    }
    out.push(Tok::word(word, &lower, false));
}

/// Word and punctuation tokens of a sentence. Apostrophes and hyphens
/// inside words, and `.`/`,`/`:`/`/` between digits, stay in the word;
/// quotation marks are dropped.
pub(super) fn tokenize(sentence: &str) -> Vec<Tok> {
    let chars: Vec<char> = sentence
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '`' | '\u{b4}' => '\'',
            c => c,
        })
        .collect();
    let mut out = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let prev = if i > 0 { chars[i - 1] } else { ' ' };
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        let inner = match c {
            '\'' | '-' | '&' => prev.is_alphanumeric() && next.is_alphanumeric(),
            '.' | ',' | ':' | '/' => prev.is_ascii_digit() && next.is_ascii_digit(),
            '$' | '\u{20ac}' | '\u{a3}' => next.is_ascii_digit(),
            '%' => prev.is_ascii_digit(),
            _ => false,
        };
        if c.is_alphanumeric() || inner {
            word.push(c);
            continue;
        }
        push_word(&word, &mut out);
        word.clear();
        let quote = matches!(c, '\'' | '"' | '\u{201c}' | '\u{201d}');
        if !c.is_whitespace() && !quote {
            out.push(Tok {
                text: c.to_string(),
                lower: c.to_string(),
                punct: true,
                attached: true,
            });
        }
    }
    push_word(&word, &mut out);
    out
}

/// Renders tokens as written, contractions re-attached.
pub(super) fn render(toks: &[Tok]) -> String {
    let mut out = String::new();
    for t in toks {
        if !out.is_empty() && !t.attached {
            out.push(' ');
        }
        out.push_str(&t.text);
    }
    out
}

/// Renders a value in the third person ("my" → "their"); `None` if a
/// contracted first-person word would read wrong.
pub(super) fn render_third_person(toks: &[Tok]) -> Option<String> {
    let mut mapped: Vec<Tok> = Vec::with_capacity(toks.len());
    for (i, t) in toks.iter().enumerate() {
        // "mine" after a word other than "of" or a form of "be" is the
        // pit ("the nickel mine"), not the pronoun ("a friend of mine",
        // "it's mine").
        let pit = t.lower == "mine"
            && i > 0
            && !matches!(
                toks[i - 1].lower.as_str(),
                "of" | "is" | "'s" | "was" | "are" | "were"
            );
        match THIRD_PERSON.iter().find(|(w, _)| *w == t.lower && !pit) {
            Some((_, third)) => {
                if t.text.to_lowercase() != t.lower {
                    return None;
                }
                let mut m = t.clone();
                m.text = (*third).to_string();
                mapped.push(m);
            }
            None => mapped.push(t.clone()),
        }
    }
    Some(render(&mapped))
}

pub(super) fn name_token(t: &Tok) -> bool {
    t.capitalized()
        && t.lower != "i"
        && t.text
            .chars()
            .all(|c| c.is_alphabetic() || c == '-' || c == '\'')
        && !is_stopword(&t.lower)
        && !MONTHS.contains(&t.lower.as_str())
        && !WEEKDAYS.contains(&t.lower.as_str())
        && !NOT_NAMES.contains(&t.lower.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expand_contractions_and_keep_how_they_were_written() {
        let toks = tokenize("I\u{2019}m sure we can't, it's Leela's dog.");
        let lower: Vec<&str> = toks.iter().map(|t| t.lower.as_str()).collect();
        assert_eq!(
            lower,
            ["i", "am", "sure", "we", "can", "not", ",", "it", "'s", "leela", "'s", "dog", "."]
        );
        assert_eq!(render(&toks[..6]), "I'm sure we can't");
        assert_eq!(render(&toks[9..12]), "Leela's dog");
    }
}
