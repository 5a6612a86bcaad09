//! The pattern language of the rules: a pattern is words (alternatives
//! split by `|`, optional with a trailing `?`), `~adj` for a few
//! adjectives, `$` for the end of a clause and `{slot}` placeholders for
//! the values it captures ("my ~adj {pet} is called {name}").

use crate::lang::fact_words::ADJECTIVES;

/// One place of a pattern.
#[derive(Debug, Clone)]
pub(super) enum El {
    /// One of these words (optional when the flag is set).
    Words(Vec<&'static str>, bool),
    /// A captured value.
    Slot(Slot),
    /// The end of the clause: punctuation or the end (consumes nothing).
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// The rest of the clause, in the third person (`{v}`).
    Clause,
    /// The rest of the clause as written, longer (`{raw}`).
    Raw,
    /// A value starting with a verb in -ing (`{ing}`).
    Ing,
    /// A clause starting with "a"/"an" (`{role}`).
    Role,
    /// A person's or pet's name: capitalized words (`{name}`).
    Name,
    /// A capitalized place (`{place}`).
    Place,
    /// A capitalized organization (`{org}`).
    Org,
    /// A date with a month (`{date}`).
    Date,
    /// A small number (`{num}`).
    Num,
    /// A four-digit year (`{year}`).
    Year,
    /// A relation (`{rel}`); `{rel1}` only those one has one of,
    /// `{reln}` only those one may have several of.
    Rel,
    Rel1,
    RelN,
    /// A pet word (`{pet}`).
    Pet,
    /// A book title or a book (`{title}`).
    Title,
    /// One or two words naming a kind of thing (`{thing}`).
    Thing,
    /// One of a fixed list (`{word:a/b/c}`).
    Word(&'static str),
}

impl Slot {
    pub(super) fn key(self) -> &'static str {
        match self {
            Slot::Clause => "v",
            Slot::Raw => "raw",
            Slot::Ing => "ing",
            Slot::Role => "role",
            Slot::Name => "name",
            Slot::Place => "place",
            Slot::Org => "org",
            Slot::Date => "date",
            Slot::Num => "num",
            Slot::Year => "year",
            Slot::Rel | Slot::Rel1 | Slot::RelN => "rel",
            Slot::Pet => "pet",
            Slot::Title => "title",
            Slot::Thing => "thing",
            Slot::Word(_) => "word",
        }
    }
}

pub(super) type Captures = Vec<(&'static str, String)>;

pub(super) fn capture<'a>(caps: &'a Captures, key: &str) -> Option<&'a str> {
    caps.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

pub(super) fn compile(pattern: &'static str) -> Vec<El> {
    let parts: Vec<&'static str> = pattern.split_whitespace().collect();
    parts
        .iter()
        .enumerate()
        .map(|(i, &part)| {
            // "my" before a relation is "our" too: parents speak of "our
            // son", "our eldest".
            if part == "my" {
                let next = parts[i + 1..].iter().find(|p| **p != "~adj");
                if next.is_some_and(|p| matches!(*p, "{rel}" | "{rel1}" | "{reln}")) {
                    return El::Words(vec!["my", "our"], false);
                }
            }
            if part == "$" {
                return El::End;
            }
            if part == "~adj" {
                return El::Words(ADJECTIVES.to_vec(), true);
            }
            if let Some(inner) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                let slot = match inner {
                    "v" => Slot::Clause,
                    "raw" => Slot::Raw,
                    "ing" => Slot::Ing,
                    "role" => Slot::Role,
                    "name" => Slot::Name,
                    "place" => Slot::Place,
                    "org" => Slot::Org,
                    "date" => Slot::Date,
                    "num" => Slot::Num,
                    "year" => Slot::Year,
                    "rel" => Slot::Rel,
                    "rel1" => Slot::Rel1,
                    "reln" => Slot::RelN,
                    "pet" => Slot::Pet,
                    "title" => Slot::Title,
                    "thing" => Slot::Thing,
                    other => match other.strip_prefix("word:") {
                        Some(list) => Slot::Word(list),
                        // The table is fixed; a test checks every pattern
                        // compiles to known slots.
                        None => Slot::Word(""),
                    },
                };
                return El::Slot(slot);
            }
            let (words, optional) = match part.strip_suffix('?') {
                Some(w) => (w, true),
                None => (part, false),
            };
            El::Words(words.split('|').collect(), optional)
        })
        .collect()
}
