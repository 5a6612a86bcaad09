//! How a fact reads: a rule's template filled with what it captured,
//! "a" made "an" before a vowel, the first letter a capital.

use super::pattern::Captures;
use crate::lang::fact_words::relation_subject;

/// Fills `{slot}` placeholders; `subject` lower-cases the values and files
/// one-valued relations under their subject (`wife` → `partner`).
pub(super) fn fill(template: &str, caps: &Captures, subject: bool) -> String {
    let mut out = template.to_string();
    for (key, value) in caps {
        let value = if subject {
            let v = value.to_lowercase();
            if *key == "rel" {
                relation_subject(&v).to_string()
            } else {
                v
            }
        } else {
            value.clone()
        };
        out = out.replace(&format!("{{{key}}}"), &value);
    }
    out
}

/// "a" before a vowel the template could not know of reads "an" ("Bought
/// an e-bike").
pub(super) fn fix_articles(s: &str) -> String {
    let words: Vec<&str> = s.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let next = words
            .get(i + 1)
            .map(|n| n.to_lowercase())
            .unwrap_or_default();
        // "a one-day race", "a European trip": a vowel letter, not sound.
        let next_vowel = next
            .chars()
            .next()
            .is_some_and(|c| matches!(c, 'a' | 'e' | 'i' | 'o'))
            && !next.starts_with("one")
            && !next.starts_with("eu");
        out.push(match *w {
            "a" if next_vowel => "an",
            "A" if next_vowel => "An",
            w => w,
        });
    }
    out.join(" ")
}

pub(super) fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}
