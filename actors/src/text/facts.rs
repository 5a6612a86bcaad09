//! Facts stated in the first person, found by rules: the offline
//! reflector's fact extraction.
//!
//! A sentence is cut into word tokens (contractions expanded, curly
//! apostrophes straightened, punctuation kept as tokens of its own) and
//! matched against [`RULES`], a table of patterns. Each rule names its
//! category, the one-valued subject it speaks of if any (`home`,
//! `employer`, `partner`, `sister:leela:role`) and how the fact reads, in
//! the third person about the user ("Has a dog named Biscuit").
//!
//! Precision comes first: a wrong fact is worse than a missed one. So a
//! pattern starts where a clause starts (not after "if" or "I think"),
//! questions yield nothing but explicit requests to remember, values are
//! cut at the end of their clause and refused when they are long, start
//! with a negation or a pronoun, or speak to the agent ("you").

use std::ops::Range;
use std::sync::LazyLock;

use super::{is_stopword, sentences, MONTHS, WEEKDAYS};
use crate::model::{normalize_fact, FactCandidate, FactCategory};

/// One word or punctuation mark of a sentence.
#[derive(Debug, Clone)]
struct Tok {
    /// As written (for an expanded contraction, its part: "I" + "'m").
    text: String,
    /// Lower case, contractions expanded ("am", "not", "'s").
    lower: String,
    punct: bool,
    /// Written against the previous token ("'m" after "I").
    attached: bool,
}

impl Tok {
    fn word(text: &str, lower: &str, attached: bool) -> Tok {
        Tok {
            text: text.to_string(),
            lower: lower.to_string(),
            punct: false,
            attached,
        }
    }

    fn capitalized(&self) -> bool {
        !self.punct && self.text.chars().next().is_some_and(char::is_uppercase)
    }
}

/// Contractions whose parts are not the word minus a suffix.
const SPECIAL: &[(&str, &str, &str)] = &[
    ("can't", "can", "not"),
    ("cannot", "can", "not"),
    ("won't", "will", "not"),
    ("ain't", "is", "not"),
    ("gonna", "going", "to"),
    ("wanna", "want", "to"),
];

/// Suffixes split off a word, with what they stand for.
const SUFFIXES: &[(&str, &str)] = &[
    ("n't", "not"),
    ("'m", "am"),
    ("'re", "are"),
    ("'ve", "have"),
    ("'ll", "will"),
    ("'d", "would"),
    ("'s", "'s"),
];

/// Contractions written without their apostrophe, as typed chat and some
/// transcripts give them ("im", "shes", "dont"): the words they stand for.
/// Only forms that are not words of their own ("its", "were", "ill",
/// "id", "lets" and "hell" are left as they are). The short forms of
/// relations and days ("gf", "bday") are search's
/// [`SHORT_FORMS`](crate::search::SHORT_FORMS).
#[rustfmt::skip]
const UNMARKED: &[(&str, &[&str])] = &[
    ("arent", &["are", "not"]),
    ("cant", &["can", "not"]), ("couldnt", &["could", "not"]), ("didnt", &["did", "not"]),
    ("doesnt", &["does", "not"]), ("dont", &["do", "not"]),
    ("hadnt", &["had", "not"]), ("hasnt", &["has", "not"]), ("havent", &["have", "not"]),
    ("hes", &["he", "'s"]), ("im", &["i", "am"]),
    ("isnt", &["is", "not"]), ("ive", &["i", "have"]), ("shes", &["she", "'s"]),
    ("shouldnt", &["should", "not"]), ("thats", &["that", "'s"]), ("theres", &["there", "'s"]),
    ("theyre", &["they", "are"]), ("theyve", &["they", "have"]), ("wasnt", &["was", "not"]),
    ("werent", &["were", "not"]), ("weve", &["we", "have"]), ("whats", &["what", "'s"]),
    ("wouldnt", &["would", "not"]), ("youre", &["you", "are"]), ("youve", &["you", "have"]),
];

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
    if let Ok(i) = crate::search::SHORT_FORMS.binary_search_by(|(w, _)| w.cmp(&lower.as_str())) {
        let word = crate::search::SHORT_FORMS[i].1;
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
fn tokenize(sentence: &str) -> Vec<Tok> {
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

/// Words after which a new clause starts.
#[rustfmt::skip]
const OPENERS: &[&str] = &[
    "and", "but", "so", "because", "cause", "since", "also", "actually", "well", "oh", "yeah",
    "yes", "now", "plus", "anyway", "though", "ok", "okay", "um", "uh", "honestly", "basically",
    "btw", "then", "that", "hey", "hi", "hello", "guess", "see", "fyi", "ps", "sorry", "listen",
    "please", "alright", "right", "wow", "nope", "no", "fact", "bc", "tbh", "ngl", "lol",
];

/// Adverbs a pattern steps over between its words ("I just moved to").
#[rustfmt::skip]
const SKIPPABLE: &[&str] = &[
    "just", "really", "recently", "finally", "actually", "now", "also", "still", "currently",
    "already", "officially", "totally", "definitely", "usually", "often", "always", "sometimes",
    "normally", "basically", "literally", "absolutely", "seriously", "honestly", "mostly",
    "generally", "truly", "kinda", "newly", "originally", "fully", "completely", "strictly",
    "entirely",
];

/// Words that always end a value: another clause begins.
const CLAUSE_STOPS: &[&str] = &[
    "but", "because", "cause", "cuz", "so", "since", "although", "though", "while", "whereas",
    "which", "who", "whom", "where", "when", "if", "unless", "until", "like", "then", "plus",
    "anyway", "whenever", "cos",
];

/// After "and"/"or", these start a new statement ("… and I love it").
const SUBJECT_WORDS: &[&str] = &[
    "i", "my", "we", "our", "he", "she", "they", "it", "you", "his", "her", "their", "then",
    "also", "that", "this", "there", "now",
];

/// Trailing words that only say when ("right now", "these days").
const TRAILING: &[&[&str]] = &[
    &["right", "now"],
    &["these", "days"],
    &["at", "the", "moment"],
    &["for", "now"],
    &["as", "well"],
    &["at", "the", "minute"],
    &["now"],
    &["currently"],
    &["lately"],
    &["nowadays"],
    &["anymore"],
    &["again"],
    &["too"],
    &["though"],
    &["actually"],
    &["anyway"],
    &["honestly"],
    &["really"],
    &["today"],
    &["tonight"],
    &["recently"],
    &["haha"],
    &["lol"],
    &["btw"],
];

/// A value starting with one of these is not a fact ("I love it", "I'm
/// learning a lot", "I hate that").
#[rustfmt::skip]
const REJECT_START: &[&str] = &[
    "not", "no", "never", "it", "that", "this", "these", "those", "them", "him", "her", "so",
    "such", "much", "lot", "lots", "sure", "something", "anything", "nothing", "everything",
    "what", "how", "why", "when", "where", "whether", "if", "too", "very", "some", "more", "less",
    "enough", "any", "right", "okay", "ok", "there", "here", "one", "someone", "somebody",
    "anyone", "everyone", "stuff",
];

/// Two-word starts refused the same way.
const REJECT_START_PAIRS: &[[&str; 2]] = &[
    ["a", "lot"],
    ["a", "bit"],
    ["a", "little"],
    ["kind", "of"],
    ["sort", "of"],
    ["the", "same"],
    ["a", "few"],
];

/// Pronouns that make a value speak to the agent or about someone the
/// third-person reading cannot name.
const REJECT_ANYWHERE: &[&str] = &["you", "your", "yours", "yourself", "i"];

/// First-person words and what they become in the third person.
const THIRD_PERSON: &[(&str, &str)] = &[
    ("my", "their"),
    ("me", "them"),
    ("myself", "themselves"),
    ("mine", "theirs"),
    ("we", "they"),
    ("our", "their"),
    ("ours", "theirs"),
    ("us", "them"),
    ("ourselves", "themselves"),
];

/// Sentences opening like this are questions, even without a `?`.
const QUESTION_STARTS: &[&str] = &[
    "do", "does", "did", "is", "are", "was", "were", "can", "could", "would", "will", "should",
    "shall", "what", "where", "when", "why", "how", "who", "whom", "which", "have", "has", "am",
    "might", "whose",
];

/// Capitalized words that are not names.
#[rustfmt::skip]
const NOT_NAMES: &[&str] = &[
    "mom", "mum", "dad", "god", "lol", "idk", "dunno", "tbd", "undecided", "secret", "anyway", "sorry", "please", "listen", "look", "wow", "man",
    "dude", "guys", "sir", "madam", "buddy", "everyone", "everybody", "nobody", "somebody", "hmm",
    "um", "uh", "ah", "ha", "haha", "alright", "cool", "nice", "awesome", "amazing", "christmas",
    "easter", "thanksgiving", "english", "american", "british", "irish", "scottish", "welsh",
    "canadian", "mexican", "brazilian", "french", "german", "spanish", "italian", "portuguese",
    "dutch", "polish", "russian", "ukrainian", "greek", "turkish", "chinese", "japanese", "korean",
    "vietnamese", "thai", "indian", "pakistani", "filipino", "nigerian", "kenyan", "african",
    "asian", "european", "australian", "jewish", "catholic", "christian", "muslim", "hindu",
    "buddhist", "black", "white", "latino", "latina", "luckily", "unluckily", "unfortunately",
    "fortunately", "thankfully", "hopefully", "sadly", "honestly", "basically", "apparently",
    "obviously", "seriously", "clearly", "naturally", "personally", "frankly", "funnily",
    "weirdly", "oddly", "surprisingly", "ironically", "meanwhile", "actually", "nope", "yep",
    "yeah", "nah", "maybe", "sure", "thanks", "later", "tonight", "tomorrow", "today",
    "yesterday", "soon", "never", "always", "definitely", "absolutely", "exactly", "right",
];

/// Relations a person has one of at a time, and the subject a fact about
/// their name is filed under.
const SINGLE_RELATIONS: &[(&str, &str)] = &[
    ("wife", "partner"),
    ("husband", "partner"),
    ("spouse", "partner"),
    ("partner", "partner"),
    ("girlfriend", "partner"),
    ("boyfriend", "partner"),
    ("fiance", "partner"),
    ("fiancé", "partner"),
    ("fiancee", "partner"),
    ("fiancée", "partner"),
    ("manager", "manager"),
    ("boss", "manager"),
    ("supervisor", "manager"),
    ("mom", "mother"),
    ("mother", "mother"),
    ("mum", "mother"),
    ("mommy", "mother"),
    ("mam", "mother"),
    ("mammy", "mother"),
    ("mummy", "mother"),
    ("dad", "father"),
    ("father", "father"),
    ("daddy", "father"),
    ("stepmom", "stepmother"),
    ("stepmother", "stepmother"),
    ("stepdad", "stepfather"),
    ("stepfather", "stepfather"),
    ("therapist", "therapist"),
    ("landlord", "landlord"),
    ("landlady", "landlord"),
    ("mother-in-law", "mother-in-law"),
    ("father-in-law", "father-in-law"),
];

/// Relations a person may have several of.
#[rustfmt::skip]
const MANY_RELATIONS: &[&str] = &[
    "sister", "brother", "son", "daughter", "kid", "child", "baby", "friend", "cousin", "aunt",
    "uncle", "niece", "nephew", "grandma", "grandmother", "grandpa", "grandfather",
    "granddaughter", "grandson", "coworker", "co-worker", "colleague", "neighbor", "neighbour",
    "roommate", "flatmate", "housemate", "teammate", "coach", "teacher", "mentor", "ex", "ex-wife",
    "ex-husband", "ex-girlfriend", "ex-boyfriend", "twin", "stepson", "stepdaughter", "stepsister",
    "stepbrother", "sister-in-law", "brother-in-law", "godmother", "godfather", "doctor",
];

const PETS: &[&str] = &[
    "dog",
    "puppy",
    "pup",
    "cat",
    "kitten",
    "kitty",
    "rabbit",
    "bunny",
    "hamster",
    "parrot",
    "bird",
    "budgie",
    "goldfish",
    "turtle",
    "tortoise",
    "horse",
    "pony",
    "lizard",
    "gecko",
    "snake",
    "ferret",
    "hedgehog",
    "guinea-pig",
];

/// Dog breeds, which name a pet as well as "dog" does ("Rusty, our
/// beagle"): read as "beagle (dog)", so a question about the dog finds it.
#[rustfmt::skip]
const DOG_BREEDS: &[&str] = &[
    "beagle", "corgi", "labrador", "poodle", "labradoodle", "cockapoo", "terrier",
    "spaniel", "collie", "retriever", "dachshund", "husky", "pug", "greyhound", "whippet",
    "lurcher", "schnauzer", "chihuahua", "rottweiler", "dalmatian", "bulldog",
    "doberman", "shih-tzu", "pomeranian", "sheepdog", "staffie", "mutt",
];

/// Adjectives allowed between "my" and a relation or pet.
const ADJECTIVES: &[&str] = &[
    "older", "younger", "little", "big", "baby", "twin", "new", "old", "eldest", "oldest",
    "youngest", "middle", "elder", "late", "sweet", "lovely", "rescue", "first", "second", "third",
];

/// Words that mark a value as a book or the like.
#[rustfmt::skip]
const BOOKISH: &[&str] = &[
    "book", "books", "novel", "memoir", "biography", "series", "trilogy", "poetry", "comic",
    "comics", "manga", "autobiography",
];

/// Starts refused after "I want to" / "I'm going to" and the like: talk
/// about the conversation, not plans.
#[rustfmt::skip]
const CHATTY_VERBS: &[&str] = &[
    "be", "go", "have", "say", "tell", "ask", "try", "need", "do", "get", "make", "take", "see",
    "think", "let", "check", "look", "grab", "call", "talk", "head", "give", "keep", "put", "know",
    "thank", "hear", "understand", "share", "mention", "clarify", "confirm", "focus", "add",
    "explain", "remember", "figure", "decide", "find", "help", "hang", "sleep", "stop", "start",
    "continue", "wait", "leave", "show", "write", "read", "use", "send", "come", "pick", "cry",
    "scream", "die", "kill", "quickly", "just",
];

/// One place of a pattern.
#[derive(Debug, Clone)]
enum El {
    /// One of these words (optional when the flag is set).
    Words(Vec<&'static str>, bool),
    /// A captured value.
    Slot(Slot),
    /// The end of the clause: punctuation or the end (consumes nothing).
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
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
    fn key(self) -> &'static str {
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

type Captures = Vec<(&'static str, String)>;

fn capture<'a>(caps: &'a Captures, key: &str) -> Option<&'a str> {
    caps.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// A rule: where its pattern may start, what it finds and how it reads.
#[derive(Debug, Clone, Copy)]
struct Rule {
    pattern: &'static str,
    category: FactCategory,
    /// The one-valued subject, with `{slot}` placeholders (lower-cased).
    subject: Option<&'static str>,
    /// How the fact reads, with `{slot}` placeholders.
    reads: &'static str,
    /// Matches anywhere in a sentence, not only where a clause starts.
    anywhere: bool,
    /// Tried in questions too (requests to remember).
    in_questions: bool,
    /// Refuses a match on its captured value.
    check: Option<fn(&Captures) -> bool>,
    /// Refuses a sentence holding any of these words.
    unless: &'static [&'static str],
    /// The longest clause value, in tokens.
    max_value: usize,
}

/// The longest clause value most rules take: longer ones are rarely
/// crisp facts.
const MAX_VALUE: usize = 10;

const fn rule(pattern: &'static str, category: FactCategory, reads: &'static str) -> Rule {
    Rule {
        pattern,
        category,
        subject: None,
        reads,
        anywhere: false,
        in_questions: false,
        check: None,
        unless: &[],
        max_value: MAX_VALUE,
    }
}

impl Rule {
    const fn about(mut self, subject: &'static str) -> Rule {
        self.subject = Some(subject);
        self
    }
    const fn anywhere(mut self) -> Rule {
        self.anywhere = true;
        self
    }
    const fn in_questions(mut self) -> Rule {
        self.in_questions = true;
        self
    }
    const fn check(mut self, f: fn(&Captures) -> bool) -> Rule {
        self.check = Some(f);
        self
    }
    const fn unless(mut self, words: &'static [&'static str]) -> Rule {
        self.unless = words;
        self
    }
    /// Values up to `n` tokens: a noun phrase that naturally carries a
    /// place and a time ("a half marathon in Fort Worth at the end of March").
    const fn longer(mut self, n: usize) -> Rule {
        self.max_value = n;
        self
    }
}

fn first_word(caps: &Captures, key: &str) -> String {
    capture(caps, key)
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_default()
        .to_lowercase()
}

/// "a Corolla", "an old Subaru", "a 2015 Honda Civic", "Teslas".
fn vehicle(caps: &Captures) -> bool {
    let v = capture(caps, "v").unwrap_or_default();
    let first = first_word(caps, "v");
    matches!(first.as_str(), "a" | "an")
        || v.chars().next().is_some_and(char::is_uppercase)
        || v.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// A plan that is not talk about the conversation ("I want to ask").
fn plan(caps: &Captures) -> bool {
    let v = capture(caps, "v").unwrap_or_default();
    let first = first_word(caps, "v");
    v.split_whitespace().count() >= 2
        && !CHATTY_VERBS.contains(&first.as_str())
        && !matches!(first.as_str(), "the" | "a" | "an" | "my" | "their" | "to")
}

/// A plan, where "go"/"get"/"start" are allowed ("I'm trying to get fit").
fn effort(caps: &Captures) -> bool {
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
fn duration(caps: &Captures) -> bool {
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
fn standalone_role(caps: &Captures) -> bool {
    capture(caps, "role").is_some_and(|r| {
        !r.split_whitespace()
            .any(|w| matches!(w.to_lowercase().as_str(), "there" | "here" | "then"))
    })
}

/// An employer, not a meeting ("I'm joining the Zoom") or people ("Mike
/// and Sarah", "Dad").
fn employer(caps: &Captures) -> bool {
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
fn not_a_person(caps: &Captures) -> bool {
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
fn past_role(caps: &Captures) -> bool {
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

/// Words that put a "here in …" somewhere other than home.
#[rustfmt::skip]
const AWAY: &[&str] = &[
    "holiday", "vacation", "trip", "visiting", "visit", "staying", "hotel", "conference",
    "honeymoon", "travelling", "traveling", "layover", "stopover", "wedding", "funeral",
    "interview", "anymore", "not", "never", "passing",
];

/// Not an article or preposition first ("I took up pottery", not "the offer").
fn bare(caps: &Captures) -> bool {
    !matches!(
        first_word(caps, "v").as_str(),
        "the" | "a" | "an" | "on" | "with" | "for" | "at" | "in" | "to" | "by" | "their" | "what"
    )
}

/// A game or instrument, not "with my kids" or "it safe".
fn played(caps: &Captures) -> bool {
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

/// Verbs after "I like to" or "I hate to" that say something rather than
/// a taste ("I like to think she inspired him").
#[rustfmt::skip]
const SAYING: &[&str] = &[
    "think", "believe", "imagine", "say", "admit", "tell", "bother", "interrupt", "complain",
    "ask",
];

/// Someone, as what is loved or hated: no taste.
#[rustfmt::skip]
const SOMEONE: &[&str] = &[
    "myself", "yourself", "himself", "herself", "ourselves", "themselves", "you", "him", "her",
    "me", "us",
];

/// Something one likes, not a feeling about the conversation ("I like
/// hearing that", "I like the sound of that").
fn liked(caps: &Captures) -> bool {
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
fn capitalized_value(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| v.chars().next().is_some_and(char::is_uppercase))
}

/// A medicine's name: one word that is not among the most common English
/// words (by the built-in table's order of frequency).
fn medicine(caps: &Captures) -> bool {
    capture(caps, "thing").is_some_and(|v| {
        !v.contains(' ')
            && v.chars().count() > 3
            && !is_stopword(v)
            && crate::static_embed::stem_row(&crate::search::stem(v))
                .is_none_or(|row| row >= COMMON_WORDS)
    })
}

/// How many of the most frequent English words no medicine is named by.
const COMMON_WORDS: u32 = 5_000;

/// A place of work named by its kind ("the hospital", "the care home").
fn workplace(caps: &Captures) -> bool {
    capture(caps, "v").is_some_and(|v| {
        v.split_whitespace().take(3).any(|w| {
            WORKPLACES.contains(
                &w.to_lowercase()
                    .trim_matches(|c: char| !c.is_alphanumeric()),
            )
        })
    })
}

#[rustfmt::skip]
const WORKPLACES: &[&str] = &[
    "hospital", "clinic", "surgery", "home", "school", "factory", "plant", "mine", "mill",
    "store", "shop", "supermarket", "restaurant", "cafe", "café", "bakery", "hotel", "bank",
    "office", "warehouse", "lodge", "library", "garage", "farm", "airport", "university",
    "college", "daycare", "pharmacy", "salon", "site", "depot", "yard", "call", "centre",
    "center", "museum", "council", "ward", "kitchen", "refinery", "port", "dock",
];

/// A course, class or lessons ("an online course in bookkeeping").
fn course(caps: &Captures) -> bool {
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
fn edible(caps: &Captures) -> bool {
    !matches!(
        first_word(caps, "v").as_str(),
        "right" | "now" | "anymore" | "after" | "before" | "in" | "at" | "with" | "out" | "here"
    )
}

/// Words that name an occupation, as the last word of a role ("a practice
/// nurse", "kitchen supervisor"): what tells "I'm a nurse" from "I'm a
/// mess". Words as often said of oneself outside work ("driver", "cook",
/// "runner") are left out.
#[rustfmt::skip]
pub(crate) const OCCUPATIONS: &[&str] = &[
    "accountant", "actor", "actress", "administrator", "aide", "analyst", "apprentice",
    "arborist", "architect", "assistant", "attendant", "attorney", "auditor", "baker", "banker",
    "barber", "barista", "bartender", "beautician", "bookkeeper", "bricklayer", "builder",
    "butcher", "caregiver", "carer", "caretaker", "carpenter", "cashier", "caterer", "chef",
    "chemist", "chiropractor", "cleaner", "clerk", "coach", "consultant", "contractor",
    "coordinator", "counsellor", "counselor", "courier", "curator", "custodian", "deckhand",
    "dentist", "designer", "detective", "developer", "dietitian", "dispatcher", "doctor",
    "economist", "editor", "electrician", "engineer", "farmer", "firefighter", "fisherman",
    "florist", "foreman", "gardener", "geologist", "groomer", "hairdresser", "handyman",
    "housekeeper", "hygienist", "illustrator", "inspector", "instructor", "intern",
    "interpreter", "janitor", "journalist", "laborer", "labourer", "landscaper", "lawyer",
    "lecturer", "librarian", "lifeguard", "locksmith", "machinist", "manager", "mechanic",
    "midwife", "miner", "nanny", "nurse", "officer", "optician", "optometrist", "painter",
    "paralegal", "paramedic", "pharmacist", "photographer", "physician", "physiotherapist",
    "pilot", "plasterer", "plumber", "postman", "postwoman", "priest", "professor",
    "programmer", "psychologist", "receptionist", "reporter", "researcher", "roofer",
    "salesman", "saleswoman", "scientist", "secretary", "sergeant", "shopkeeper", "solicitor",
    "superintendent", "supervisor", "surgeon", "surveyor", "tailor", "teacher", "technician",
    "therapist", "trainee", "translator", "trucker", "tutor", "vet", "veterinarian", "waiter",
    "waitress", "welder", "zookeeper",
];

/// Whether a word names an occupation ([`OCCUPATIONS`], sorted).
pub(crate) fn is_occupation(word: &str) -> bool {
    OCCUPATIONS.binary_search(&word).is_ok()
}

/// A role said without "a" ("I will be kitchen supervisor", "my son is
/// nurse in Calgary"): up to two plain words and an occupation, then
/// nothing or a place or employer after "in", "at", "for", "with", "on".
fn bare_role(value: &[Tok]) -> bool {
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

/// Words that judge how one does a thing, not what one does for a living
/// ("I'm a terrible teacher").
const ROLE_JUDGEMENTS: &[&str] = &[
    "good", "bad", "terrible", "great", "awful", "better", "worse", "lousy", "horrible", "natural",
    "born", "hopeless", "useless", "decent", "proper", "real", "total",
];

/// A role that is an occupation ("a nurse", "a dental hygienist in
/// Truro"), judged by none ("a terrible teacher").
fn occupation(caps: &Captures) -> bool {
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

use FactCategory::*;

/// The rules, most specific first: a match takes its words, and a later
/// rule overlapping them is not tried there.
const RULES: &[Rule] = &[
    // --- names
    rule("my name is|'s {name}", Biographical, "Name: {name}").about("name"),
    rule("call me {name} $", Biographical, "Goes by {name}").about("nickname"),
    rule("you can call me {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("i go by {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("everyone|people|friends call me {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("my friends call me {name}", Biographical, "Goes by {name}").about("nickname"),
    // --- home and origins
    rule("i|we live in {place}", Biographical, "Lives in {place}").about("home"),
    rule("i am|are living in {place}", Biographical, "Lives in {place}").about("home"),
    rule("we are living in {place}", Biographical, "Lives in {place}").about("home"),
    rule("i|we moved|relocated to {place}", Biographical, "Moved to {place}").about("home"),
    rule("i|we have moved to {place}", Biographical, "Moved to {place}").about("home"),
    rule(
        "i|we bought a|an new? {word:house/home/condo/apartment/flat/place} in {place}",
        Biographical,
        "Bought a {word} in {place}",
    )
    .about("home"),
    rule("i no longer live in {place}", Biographical, "No longer lives in {place}").about("home"),
    rule("i do not live in {place} anymore", Biographical, "No longer lives in {place}")
        .about("home"),
    rule("i am moving to {place}", Goal, "Is moving to {place}"),
    rule("we are moving to {place}", Goal, "Is moving to {place}"),
    // "It's freezing here in Duluth": said in passing, where one is; a
    // trip or a visit in the sentence says it is not home.
    rule("here in {place}", Biographical, "Lives in {place}")
        .about("home")
        .anywhere()
        .unless(AWAY),
    rule("i am from {place}", Biographical, "Is from {place}").about("hometown"),
    rule("i grew up in {place}", Biographical, "Grew up in {place}"),
    rule("i was born in {year}", Biographical, "Was born in {year}").about("birth_year"),
    rule("i was born in {place}", Biographical, "Was born in {place}").about("birthplace"),
    rule("i was born on {date}", Biographical, "Was born on {date}").about("birthday"),
    rule("i speak {v}", Biographical, "Speaks {v}").check(capitalized_value),
    // --- dates and age
    rule("my birthday is|'s on? {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("my birthday is|'s in {date}", Biographical, "Birthday is in {date}").about("birthday"),
    // "I'm turning 25 on the 14th of August": the day is the birthday.
    rule("i am turning {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("i turn {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("i will|shall be {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("my birthday is|'s coming up on? {date}", Biographical, "Birthday is {date}")
        .about("birthday"),
    // (A relation one may have several of names no one subject: no
    // subject for any, a birthday does not change.)
    rule("my ~adj {rel} 's birthday is|'s on? {date}", Relationship, "{rel}'s birthday is {date}"),
    rule("my ~adj {rel} turns {num} on {date}", Relationship, "{rel}'s birthday is {date}"),
    rule("{name} 's birthday is|'s on? {date}", Relationship, "{name}'s birthday is {date}"),
    rule("{name} turns {num} on {date}", Relationship, "{name}'s birthday is {date}"),
    rule("my ~adj {rel} is turning {num} on {date}", Relationship, "{rel}'s birthday is {date}"),
    rule(
        "our|my wedding? anniversary is|'s on? {date}",
        Relationship,
        "Anniversary is {date}",
    )
    .about("anniversary"),
    rule("i am {num} years? old?", Biographical, "Is {num} years old").about("age"),
    rule("i just? turned {num} $", Biographical, "Is {num} years old").about("age"),
    // --- work
    rule("i work at|for {org}", Occupation, "Works at {org}").about("employer"),
    rule("i am working at|for {org}", Occupation, "Works at {org}").about("employer"),
    // "I'm working at the hospital now": a workplace no capital names
    rule("i work|am working at|in the {v}", Occupation, "Works at the {v}")
        .about("employer")
        .check(workplace),
    rule("i am employed at|by {org}", Occupation, "Works at {org}").about("employer"),
    rule("i work as {role}", Occupation, "Works as {role}").about("role"),
    rule("i have been {role} for {v}", Occupation, "Has been {role} for {v}").about("role"),
    rule("i am working as {role}", Occupation, "Works as {role}").about("role"),
    rule("i was {role} for {v}", Occupation, "Was {role} for {v}")
        .check(past_role),
    rule("i used to be {role} $", Occupation, "Used to be {role}").check(standalone_role),
    rule("i used to work at|for {org}", Occupation, "Used to work at {org}"),
    rule("i worked at|for {org} for {v}", Occupation, "Worked at {org} for {v}").check(duration),
    rule("i retired as {role}", Occupation, "Retired as {role}").check(standalone_role),
    rule(
        "a|an|my old|former {word:colleague/coworker/co-worker/boss/manager} from {org}",
        Occupation,
        "Has a former {word} from {org}",
    )
    .anywhere(),
    rule("i am {role} at|for {org}", Occupation, "Is {role} at {org}").about("role"),
    rule("i am going to be {role} at|for {org}", Occupation, "Will be {role} at {org}")
        .about("role")
        .check(occupation),
    rule("i will be {role} at|for {org}", Occupation, "Will be {role} at {org}")
        .about("role")
        .check(occupation),
    rule("i am going to be {role} $", Occupation, "Will be {role}")
        .about("role")
        .check(occupation),
    rule("i will be {role} $", Occupation, "Will be {role}")
        .about("role")
        .check(occupation),
    rule("i am {role} $", Occupation, "Is {role}")
        .about("role")
        .check(occupation),
    rule(
        "i got|landed|accepted a|the new? job|position|offer at|with|from {org}",
        Occupation,
        "Got a job at {org}",
    )
    .about("employer"),
    rule("i am joining {org} $", Occupation, "Is joining {org}")
        .about("employer")
        .check(employer),
    rule("i will be joining {org} $", Occupation, "Is joining {org}")
        .about("employer")
        .check(employer),
    rule("i got hired at|by {org}", Occupation, "Got a job at {org}").about("employer"),
    rule("i was hired at|by {org}", Occupation, "Got a job at {org}").about("employer"),
    rule("i started a|my new? job at|with {org}", Occupation, "Got a job at {org}")
        .about("employer"),
    rule("i am? start|starting at {org}", Occupation, "Is starting at {org}").about("employer"),
    rule("i got a new job $", Occupation, "Got a new job").about("employer"),
    rule("i lost my job at|with {v}", Occupation, "Lost their job at {v}").about("employer"),
    rule("i lost my job $", Occupation, "Lost their job").about("employer"),
    rule("i got|was fired|sacked from {org}", Occupation, "Was fired from {org}").about("employer"),
    rule("i got|was fired|sacked $", Occupation, "Was fired").about("employer"),
    rule("i got|was laid off from|by|at {org}", Occupation, "Was laid off from {org}")
        .about("employer"),
    rule("i got|was laid off $", Occupation, "Was laid off").about("employer"),
    rule("i quit my job at {org}", Occupation, "Quit their job at {org}").about("employer"),
    rule("i quit my job $", Occupation, "Quit their job").about("employer"),
    rule("i left my job at {v}", Occupation, "Left their job at {v}").about("employer"),
    rule("i no longer work at|for {org}", Occupation, "No longer works at {org}")
        .about("employer"),
    rule("i do not work at|for {org} anymore", Occupation, "No longer works at {org}")
        .about("employer"),
    rule("i retired from {org}", Occupation, "Retired from {org}").about("employer"),
    rule(
        "i am {word:retired/unemployed/self-employed/freelancing/jobless} $",
        Occupation,
        "Is {word}",
    )
    .about("employer"),
    rule("i am between jobs", Occupation, "Is between jobs").about("employer"),
    rule("i got|was promoted to {v}", Occupation, "Was promoted to {v}").about("role"),
    rule("i got a promotion $", Milestone, "Got a promotion"),
    rule("i work from home $", Habit, "Works from home"),
    rule("i work remotely $", Habit, "Works remotely"),
    rule("i work {word:nights/weekends} $", Habit, "Works {word}"),
    rule("i am a student at {org}", Occupation, "Is a student at {org}").about("school"),
    rule("i study at {org}", Occupation, "Studies at {org}").about("school"),
    rule("i am studying {v}", Occupation, "Is studying {v}"),
    rule("i graduated from {org}", Milestone, "Graduated from {org}"),
    rule("i just? graduated $", Milestone, "Graduated"),
    // --- people
    rule("my ~adj {rel} {name} is|'s {role}", Relationship, "{rel} {name} is {role}")
        .about("{rel}:{name}:role"),
    rule("my ~adj {rel} {name} works as {role}", Relationship, "{rel} {name} is {role}")
        .about("{rel}:{name}:role"),
    rule(
        "my ~adj {rel} {name} lives in {place}",
        Relationship,
        "{rel} {name} lives in {place}",
    )
    .about("{rel}:{name}:home"),
    rule(
        "my ~adj {rel} {name} works at|for {org}",
        Relationship,
        "{rel} {name} works at {org}",
    )
    .about("{rel}:{name}:employer"),
    rule("my ~adj {rel} {name} moved to {place}", Relationship, "{rel} {name} lives in {place}")
        .about("{rel}:{name}:home"),
    rule("my ~adj {rel1} is|'s {role}", Relationship, "{rel} is {role}").about("{rel}:role"),
    // "my daughter, she is a teacher": the pronoun again, as speech has it
    rule("my ~adj {rel1} ,? he|she is|'s {role}", Relationship, "{rel} is {role}")
        .about("{rel}:role"),
    rule("my ~adj {reln} ,? he|she is|'s {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {rel1} works as {role}", Relationship, "{rel} is {role}").about("{rel}:role"),
    // "my boyfriend's a lineman for the electric company": the role, without
    // a place that no capital names
    rule("my ~adj {rel1} is|'s {role} for|at|with|in the|a", Relationship, "{rel} is {role}")
        .about("{rel}:role"),
    // (a relation one may have several of: no subject, which a second
    // sister's job would take over)
    rule("my ~adj {reln} is|'s {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {reln} works as {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {rel1} works at|for {org}", Relationship, "{rel} works at {org}")
        .about("{rel}:employer"),
    rule(
        "my ~adj {rel1} is working|based in|at|for {place}",
        Relationship,
        "{rel} works in {place}",
    )
    .about("{rel}:employer"),
    rule("my ~adj {rel1} lives in {place}", Relationship, "{rel} lives in {place}")
        .about("{rel}:home"),
    rule("my ~adj {rel1} passed away|died", Milestone, "{rel} passed away").about("{rel}:alive"),
    rule("my ~adj {rel1} 's name is {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {rel1} is|'s called|named {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {rel1} is|'s {name} $", Relationship, "{rel} is named {name}").about("{rel}"),
    rule("my ~adj {reln} 's name is {name}", Relationship, "Has a {rel} named {name}"),
    rule("my ~adj {rel1} , his|her name is|'s {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {reln} , his|her name is|'s {name}", Relationship, "Has a {rel} named {name}"),
    rule("the name of my ~adj {rel1} is {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("the name of my ~adj {reln} is {name}", Relationship, "Has a {rel} named {name}"),
    rule("the name of my|our ~adj {pet} is {name}", Biographical, "Has a {pet} named {name}"),
    // "our youngest, Declan": a child by their place among the children
    rule(
        "my|our {word:youngest/eldest/oldest/middle} one? ,? {name} $",
        Relationship,
        "{word} child is named {name}",
    )
    .anywhere(),
    rule(
        "my|our {word:youngest/eldest/oldest} is|'s called|named? {name}",
        Relationship,
        "{word} child is named {name}",
    ),
    rule("my ~adj {reln} is|'s called|named {name}", Relationship, "Has a {rel} named {name}"),
    rule("my ~adj {reln} is|'s {name} $", Relationship, "Has a {rel} named {name}"),
    rule(
        "i have|'ve got? a|an ~adj {rel1} named|called {name}",
        Relationship,
        "{rel} is named {name}",
    )
    .about("{rel}"),
    rule(
        "i have|'ve got? a|an ~adj {reln} named|called {name}",
        Relationship,
        "Has a {rel} named {name}",
    ),
    rule("i am married to {name}", Relationship, "Is married to {name}").about("partner"),
    rule("i am engaged to {name}", Relationship, "Is engaged to {name}").about("partner"),
    rule("i got married|engaged to {name}", Relationship, "Is married to {name}").about("partner"),
    rule("i broke up with {name}", Relationship, "Broke up with {name}").about("partner"),
    rule("i split up with {name}", Relationship, "Broke up with {name}").about("partner"),
    // "so um colt and i are done like officially done"
    rule("{name} and i broke|split up", Relationship, "Broke up with {name}").about("partner"),
    rule("{name} and i are done|over|finished", Relationship, "Broke up with {name}")
        .about("partner"),
    rule(
        "i got {word:married/engaged/divorced/separated}",
        Milestone,
        "Got {word}",
    )
    .about("marital"),
    rule(
        "i am {word:married/single/divorced/engaged/widowed/separated} $",
        Relationship,
        "Is {word}",
    )
    .about("marital"),
    rule(
        "i have {num} {word:kids/children/sons/daughters/grandkids/grandchildren/siblings/brothers/sisters}",
        Relationship,
        "Has {num} {word}",
    )
    .about("{word}"),
    rule(
        "i have|'ve got? a|an ~adj {word:son/daughter/sister/brother/kid/child/baby/twin} $",
        Relationship,
        "Has a {word}",
    ),
    rule("i am pregnant", Milestone, "Is pregnant"),
    rule(
        "i|we am|are expecting a|our ~adj {word:baby/child/boy/girl/twins}",
        Milestone,
        "Is expecting a baby",
    ),
    rule("i|we am|are having a baby", Milestone, "Is expecting a baby"),
    rule("we|i had a baby", Milestone, "Had a baby"),
    // --- pets
    rule("my|our ~adj {pet} is|'s called|named {name}", Biographical, "Has a {pet} named {name}"),
    rule("my|our ~adj {pet} 's name is {name}", Biographical, "Has a {pet} named {name}"),
    rule(
        "i|we have|'ve got? a|an ~adj {pet} named|called {name}",
        Biographical,
        "Has a {pet} named {name}",
    ),
    rule(
        "i|we adopted|got|rescued a|an ~adj {pet} named|called {name}",
        Biographical,
        "Has a {pet} named {name}",
    ),
    rule("i|we have|'ve got? a|an ~adj {pet} , {name} $", Biographical, "Has a {pet} named {name}"),
    rule("i|we have|'ve got? a|an ~adj {pet} $", Biographical, "Has a {pet}"),
    rule("i|we adopted|rescued|got a|an ~adj {pet} $", Biographical, "Has a {pet}"),
    rule("i am a {word:dog/cat} person", Preference, "Is a {word} person"),
    rule("{name} , my|our ~adj {pet} $", Biographical, "Has a {pet} named {name}").anywhere(),
    rule("our ~adj {pet} {name}", Biographical, "Has a {pet} named {name}").anywhere(),
    // --- things
    rule("i drive {v}", Biographical, "Drives {v}").about("car").check(vehicle),
    rule(
        "i|we traded|swapped|part-exchanged in? my|our|the old? {word:car/van/truck} for {v}",
        Biographical,
        "Traded their old {word} for {v}",
    )
    .about("car")
    .check(vehicle),
    rule("my car is|'s {role}", Biographical, "Drives {role}").about("car"),
    rule(
        "i|we bought|got a|an new? {word:car/truck/motorcycle/motorbike/van/bike/e-bike/ebike/bicycle/scooter/moped/boat/piano/camper/caravan}",
        Milestone,
        "Bought a {word}",
    ),
    rule(
        "i|we bought a|an new? {word:house/home/condo/apartment/flat} $",
        Milestone,
        "Bought a {word}",
    ),
    // --- activities
    rule("i am reading {title}", Hobby, "Is reading {title}").about("reading"),
    rule("i am learning {v}", Hobby, "Is learning {v}"),
    rule("i have? started learning {v}", Hobby, "Is learning {v}"),
    rule("i am|have been? training for {v}", Goal, "Is training for {v}"),
    rule("i signed up for {v}", Goal, "Signed up for {v}").longer(14),
    rule("i registered for {v}", Goal, "Signed up for {v}").longer(14),
    rule("i have? started {ing}", Habit, "Started {ing}"),
    rule("i took up {v}", Hobby, "Took up {v}").check(bare),
    rule("i quit|stopped {ing}", Habit, "Quit {ing}"),
    rule("i gave up {v}", Habit, "Gave up {v}").check(bare),
    rule("i have? switched to {v}", Preference, "Switched to {v}"),
    rule("i play {v}", Hobby, "Plays {v}").check(played),
    rule("i go {ing}", Hobby, "Goes {ing}"),
    rule("i like to go {ing}", Hobby, "Goes {ing}"),
    rule("i volunteer at|with|for {v}", Hobby, "Volunteers at {v}"),
    rule(
        "i {word:run/swim/cycle/bike/climb/paint/knit/bake/surf/ski/dance/meditate/hike/jog/walk/cook/row/skate} every|each {v}",
        Habit,
        "{word}s every {v}",
    ),
    rule("i wake|get up at {v}", Habit, "Wakes up at {v}").about("wake_time"),
    rule("i go to bed at {v}", Habit, "Goes to bed at {v}").about("bed_time"),
    rule(
        "i|we go to {v} on|every {word:mondays/tuesdays/wednesdays/thursdays/fridays/saturdays/sundays/monday/tuesday/wednesday/thursday/friday/saturday/sunday/weekends}",
        Hobby,
        "Goes to {v} on {word}",
    ),
    rule("i am taking a|an {v}", Hobby, "Is taking a {v}").check(course),
    // --- preferences
    rule("my favorite|favourite {thing} is|'s {v}", Preference, "Favorite {thing} is {v}")
        .about("favorite:{thing}"),
    rule("i prefer {v}", Preference, "Prefers {v}"),
    rule("i love|adore {v}", Preference, "Loves {v}").check(liked),
    rule("i like {v}", Preference, "Likes {v}").check(liked),
    rule("i enjoy {v}", Preference, "Enjoys {v}").check(liked),
    rule("i do not like {v}", Preference, "Doesn't like {v}").check(liked),
    rule("i hate|dislike|detest {v}", Preference, "Dislikes {v}").check(liked),
    rule("i can not stand {v}", Preference, "Dislikes {v}").check(liked),
    rule("i am into {v}", Preference, "Is into {v}"),
    rule("i am afraid|scared|terrified of {v}", Personality, "Is afraid of {v}"),
    rule("i am a big|huge? fan of {v}", Preference, "Is a fan of {v}"),
    rule("i am a {word:morning/night} person", Preference, "Is a {word} person")
        .about("chronotype"),
    rule("i take my coffee {v}", Preference, "Takes their coffee {v}").about("coffee"),
    rule("i support {org}", Preference, "Supports {org}"),
    // --- health and diet
    rule("i am allergic to {v}", Constraint, "Allergic to {v}"),
    // Medicines, named by a word no everyday talk uses ("I'm on warfarin
    // for it", "the doctor has moved me onto apixaban"; not "I'm on nights
    // for a week"), taken for what was just said ("for it": not "I'm on
    // Facebook for work"). No subject: one may take several.
    rule("i am on {thing} for it|that|this|them", Constraint, "Takes {thing}").check(medicine),
    rule("i take {thing} for|every|each|twice|daily", Constraint, "Takes {thing}").check(medicine),
    rule("put|moved|switched|changed|started me on|onto|to {thing}", Constraint, "Takes {thing}")
        .check(medicine)
        .anywhere(),
    rule("i have a|an {v} allergy", Constraint, "Has a {v} allergy"),
    rule(
        "i am a|an? {word:vegetarian/vegan/pescatarian/pescetarian/carnivore}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule(
        "i have? went|became|turned|gone {word:vegetarian/vegan/pescatarian/pescetarian}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule(
        "i have been {word:vegetarian/vegan/pescatarian/pescetarian}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule("i am on a|an {v} diet", Constraint, "Is on a {v} diet").about("diet"),
    rule("{thing} and i do not|never get along|on $", Constraint, "Doesn't get along with {thing}")
        .check(not_a_person),
    rule("i eat {word:kosher/halal} $", Constraint, "Eats {word}").about("diet"),
    rule(
        "i am {word:diabetic/celiac/coeliac/asthmatic/epileptic/deaf/blind/colorblind/sober/autistic}",
        Constraint,
        "Is {word}",
    ),
    rule("i am {word:lactose/gluten} intolerant", Constraint, "Is {word} intolerant"),
    rule(
        "i have {word:diabetes/asthma/adhd/arthritis/epilepsy/migraines/insomnia/celiac/coeliac/eczema/tinnitus/lupus/endometriosis/dyslexia/autism/psoriasis} $",
        Constraint,
        "Has {word}",
    ),
    rule("i have type {num} diabetes", Constraint, "Has type {num} diabetes"),
    rule("i have {word:high/low} blood pressure", Constraint, "Has {word} blood pressure"),
    rule("i have high cholesterol", Constraint, "Has high cholesterol"),
    rule("i was diagnosed with {v}", Constraint, "Was diagnosed with {v}"),
    rule("i can not eat|have|drink {v}", Constraint, "Can't {word} {v}").check(edible),
    rule("i do not eat {v}", Constraint, "Doesn't eat {v}").check(edible),
    rule("i do not drink {word:alcohol/coffee/caffeine/milk/beer/wine}", Constraint, "Doesn't drink {word}"),
    rule("i do not drink $", Constraint, "Doesn't drink alcohol"),
    rule("i use a|an {word:wheelchair/cane/walker/inhaler/cpap}", Constraint, "Uses a {word}"),
    // --- plans and goals
    rule("i am planning to {v}", Goal, "Plans to {v}").check(effort),
    rule("i am planning on {ing}", Goal, "Plans on {ing}"),
    rule("i plan to {v}", Goal, "Plans to {v}").check(effort),
    rule("we are planning to {v}", Goal, "Plans to {v}").check(effort),
    rule("i am going to {v}", Goal, "Is going to {v}").check(plan),
    rule("i want to {v}", Goal, "Wants to {v}").check(plan),
    rule("my goal is to {v}", Goal, "Goal is to {v}"),
    rule("i hope to {v}", Goal, "Hopes to {v}").check(effort),
    rule("i am saving up? for {v}", Goal, "Is saving for {v}"),
    rule("i am trying to {v}", Goal, "Is trying to {v}").check(effort),
    rule("i am applying for|to {v}", Goal, "Is applying for {v}"),
    rule("i applied to|for {v}", Goal, "Applied to {v}"),
    rule("i|we am|are getting married {word:in/on} {date}", Milestone, "Is getting married {word} {date}"),
    rule("i|we am|are getting married $", Milestone, "Is getting married"),
    // --- asked to remember
    rule("please? remember that {raw}", Other, "{raw}").in_questions(),
    rule("please remember {raw}", Other, "{raw}").in_questions(),
    rule(
        "can|could|would|will you please? remember|note that? {raw}",
        Other,
        "{raw}",
    )
    .in_questions(),
    rule("do not forget that {raw}", Other, "{raw}"),
    rule("note that {raw}", Other, "{raw}"),
    // --- names anywhere, last: the sentences above say more
    rule("my ~adj {rel1} {name}", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("my ~adj {reln} {name}", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("{name} , my ~adj {rel1} $", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("{name} , my ~adj {reln} $", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("my ~adj {rel1} , {name} $", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("my ~adj {reln} , {name} $", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("my ~adj {pet} {name}", Biographical, "Has a {pet} named {name}").anywhere(),
];

struct Compiled {
    rule: Rule,
    els: Vec<El>,
    /// The words of the rule's first required word element: a sentence
    /// holding none of them cannot match, and is not tried.
    anchor: Option<Vec<&'static str>>,
}

fn compile(pattern: &'static str) -> Vec<El> {
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

static COMPILED: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|r| {
            let els = compile(r.pattern);
            let anchor = els.iter().find_map(|e| match e {
                El::Words(words, false) => Some(words.clone()),
                _ => None,
            });
            Compiled {
                rule: *r,
                els,
                anchor,
            }
        })
        .collect()
});

fn clause_start(toks: &[Tok], i: usize) -> bool {
    i == 0 || toks[i - 1].punct || OPENERS.contains(&toks[i - 1].lower.as_str())
}

fn boundary(toks: &[Tok], j: usize) -> bool {
    j >= toks.len() || toks[j].punct
}

/// Where the clause starting at `j` ends: punctuation, a conjunction
/// starting another statement, or `max` tokens on (then `None`: too long to
/// be a crisp fact).
fn clause_end(toks: &[Tok], j: usize, max: usize, strict: bool) -> Option<usize> {
    let mut k = j;
    while k < toks.len() {
        let t = &toks[k];
        if t.punct {
            break;
        }
        let w = t.lower.as_str();
        if k > j && strict && CLAUSE_STOPS.contains(&w) {
            break;
        }
        if k > j && !strict && matches!(w, "but" | "because" | "so") {
            break;
        }
        if k > j
            && matches!(w, "and" | "or" | "&")
            && toks
                .get(k + 1)
                .is_some_and(|n| SUBJECT_WORDS.contains(&n.lower.as_str()))
        {
            break;
        }
        k += 1;
        if k - j > max {
            return if strict { None } else { Some(k) };
        }
    }
    Some(k)
}

/// `toks[j..end]` without trailing time words ("right now", "lately").
fn trim_trailing(toks: &[Tok], j: usize, mut end: usize) -> usize {
    loop {
        let before = end;
        for tail in TRAILING {
            if end > j + tail.len()
                && toks[end - tail.len()..end]
                    .iter()
                    .zip(tail.iter())
                    .all(|(t, w)| t.lower == *w)
            {
                end -= tail.len();
                break;
            }
        }
        if end == before {
            return end;
        }
    }
}

fn acceptable_value(toks: &[Tok]) -> bool {
    let Some(first) = toks.first() else {
        return false;
    };
    if REJECT_START.contains(&first.lower.as_str()) {
        return false;
    }
    if let Some(second) = toks.get(1) {
        if REJECT_START_PAIRS
            .iter()
            .any(|[a, b]| first.lower == *a && second.lower == *b)
        {
            return false;
        }
    }
    !toks
        .iter()
        .any(|t| REJECT_ANYWHERE.contains(&t.lower.as_str()))
}

/// Renders tokens as written, contractions re-attached.
fn render(toks: &[Tok]) -> String {
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
fn render_third_person(toks: &[Tok]) -> Option<String> {
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

fn name_token(t: &Tok) -> bool {
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

/// A capitalized run (a place or an organization), with an optional
/// leading "the" and inner connectors ("Bank of America").
fn proper_run(toks: &[Tok], j: usize, connectors: &[&str]) -> Option<usize> {
    let proper = |t: &Tok| {
        t.capitalized()
            && t.lower != "i"
            && !WEEKDAYS.contains(&t.lower.as_str())
            && !MONTHS[..12].contains(&t.lower.as_str())
    };
    let mut k = j;
    if toks.get(k).is_some_and(|t| t.lower == "the") {
        k += 1;
    }
    let first = k;
    while k < toks.len() && k - first < 6 {
        if proper(&toks[k]) {
            k += 1;
        } else if k > first
            && connectors.contains(&toks[k].lower.as_str())
            && toks.get(k + 1).is_some_and(proper)
        {
            k += 2;
        } else {
            break;
        }
    }
    (k > first).then_some(k)
}

fn is_ordinal_day(w: &str) -> bool {
    if ORDINAL_WORDS.contains(&w)
        || w.strip_prefix("twenty-")
            .or_else(|| w.strip_prefix("thirty-"))
            .is_some_and(|rest| ORDINAL_WORDS[..9].contains(&rest))
    {
        return true;
    }
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    !digits.is_empty()
        && digits.len() <= 2
        && digits.chars().all(|c| c.is_ascii_digit())
        && matches!(suffix, "" | "st" | "nd" | "rd" | "th")
        && digits.parse::<u32>().is_ok_and(|d| (1..=31).contains(&d))
}

/// A day's ordinal spelled out, as speech is written down ("the twelfth of
/// June"; "twenty-first" is "twenty-" and one of the first nine).
#[rustfmt::skip]
const ORDINAL_WORDS: &[&str] = &[
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
    "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
    "seventeenth", "eighteenth", "nineteenth", "twentieth", "thirtieth",
];

/// A day of the month written as a number with its suffix ("3rd", "14th"),
/// or a date in digits ("3/8").
pub(super) fn is_day_number(w: &str) -> bool {
    is_numeric_date(w)
        || w.len() > 2
            && w.ends_with(|c: char| c.is_ascii_alphabetic())
            && is_ordinal_day(w)
            && w.starts_with(|c: char| c.is_ascii_digit())
}

fn is_numeric_date(w: &str) -> bool {
    let parts: Vec<&str> = w.split(['/', '-']).collect();
    parts.len() >= 2
        && parts.len() <= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
}

fn date_end(toks: &[Tok], j: usize) -> Option<usize> {
    let mut k = j;
    let mut month = false;
    while k < toks.len() && k - j < 6 {
        let t = &toks[k];
        if t.punct {
            break;
        }
        let w = t.lower.as_str();
        // "may" is the month written so, or beside a day's number ("may
        // 14th", "the 14th of may": a transcript writes no capitals).
        let is_month = MONTHS.contains(&w)
            && (w != "may"
                || t.capitalized()
                || toks.get(k + 1).is_some_and(|n| is_ordinal_day(&n.lower))
                || (k >= j + 2 && toks[k - 1].lower == "of" && is_ordinal_day(&toks[k - 2].lower)));
        if is_month || is_numeric_date(w) {
            month = true;
        } else if !(is_ordinal_day(w)
            || matches!(w, "the" | "of")
            || (matches!(w, "twenty" | "thirty")
                && toks
                    .get(k + 1)
                    .is_some_and(|n| ORDINAL_WORDS[..9].contains(&n.lower.as_str())))
            || (w.len() == 4 && w.chars().all(|c| c.is_ascii_digit())))
        {
            break;
        }
        k += 1;
    }
    while k > j && matches!(toks[k - 1].lower.as_str(), "the" | "of") {
        k -= 1;
    }
    (month && k > j).then_some(k)
}

#[rustfmt::skip]
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

fn relation(toks: &[Tok], j: usize, which: Slot) -> Option<(usize, String)> {
    let t = toks.get(j)?;
    let (end, word) = if t.lower == "best" && toks.get(j + 1).is_some_and(|n| n.lower == "friend") {
        (j + 2, "best friend".to_string())
    } else {
        (j + 1, t.lower.clone())
    };
    let single = word == "best friend" || SINGLE_RELATIONS.iter().any(|(w, _)| *w == word);
    let known = single || MANY_RELATIONS.contains(&word.as_str());
    let fits = match which {
        Slot::Rel1 => single,
        Slot::RelN => known && !single,
        _ => known,
    };
    fits.then_some((end, word))
}

/// The subject a one-valued relation's name is filed under.
fn relation_subject(rel: &str) -> &str {
    SINGLE_RELATIONS
        .iter()
        .find(|(w, _)| *w == rel)
        .map_or(rel, |(_, s)| s)
}

/// Matches `els` against `toks` from `j`; the end and the captures.
fn match_at(
    els: &[El],
    toks: &[Tok],
    j: usize,
    first: bool,
    max_value: usize,
) -> Option<(usize, Captures)> {
    let Some((el, rest)) = els.split_first() else {
        return Some((j, Vec::new()));
    };
    let with = |end: usize, key: &'static str, value: String| {
        match_at(rest, toks, end, false, max_value).map(|(e, mut caps)| {
            caps.push((key, value));
            (e, caps)
        })
    };
    match el {
        El::End => boundary(toks, j)
            .then(|| match_at(rest, toks, j, false, max_value))
            .flatten(),
        El::Words(words, optional) => {
            // Step over a couple of adverbs between the words of a pattern.
            let mut k = j;
            if !first {
                while k < toks.len()
                    && k - j < 2
                    && SKIPPABLE.contains(&toks[k].lower.as_str())
                    && !words.contains(&toks[k].lower.as_str())
                {
                    k += 1;
                }
            }
            if toks
                .get(k)
                .is_some_and(|t| words.contains(&t.lower.as_str()))
            {
                if let Some(m) = match_at(rest, toks, k + 1, false, max_value) {
                    return Some(m);
                }
            }
            if *optional {
                return match_at(rest, toks, j, first, max_value);
            }
            None
        }
        El::Slot(slot) => match_slot(*slot, rest, toks, j, max_value, &with),
    }
}

type Continue<'a> = dyn Fn(usize, &'static str, String) -> Option<(usize, Captures)> + 'a;

fn match_slot(
    slot: Slot,
    rest: &[El],
    toks: &[Tok],
    j: usize,
    max_value: usize,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    let key = slot.key();
    match slot {
        Slot::Clause | Slot::Ing | Slot::Role | Slot::Title | Slot::Raw => {
            let raw = slot == Slot::Raw;
            let (max, strict) = if raw { (24, false) } else { (max_value, true) };
            let end = clause_end(toks, j, max, strict)?;
            // With more pattern after it, the value is the shortest that
            // lets the rest match ("I have a {v} allergy").
            let ends: Vec<usize> = if rest.is_empty() {
                vec![if raw {
                    end
                } else {
                    trim_trailing(toks, j, end)
                }]
            } else {
                (j + 1..=end).collect()
            };
            for e in ends {
                let value = &toks[j..e];
                if value.is_empty() {
                    continue;
                }
                let rendered = if raw {
                    Some(upper_first(&render(value)))
                } else {
                    if !acceptable_value(value) || !slot_shape(slot, value) {
                        continue;
                    }
                    render_third_person(value)
                };
                let Some(rendered) = rendered else { continue };
                if let Some(m) = with(e, key, rendered) {
                    return Some(m);
                }
            }
            None
        }
        Slot::Name => {
            // A title before the name ("Dr. Patel", "Mrs Wilson") is kept.
            if toks.get(j).is_some_and(|t| {
                t.capitalized() && matches!(t.lower.as_str(), "dr" | "mr" | "mrs" | "ms" | "miss")
            }) {
                let after = if toks.get(j + 1).is_some_and(|t| t.lower == ".") {
                    j + 2
                } else {
                    j + 1
                };
                let mut k = after;
                while k < toks.len() && k - after < 2 && name_token(&toks[k]) {
                    k += 1;
                }
                if k > after {
                    let title = &toks[j].text;
                    return with(k, key, format!("{title} {}", render(&toks[after..k])));
                }
            }
            let mut k = j;
            while k < toks.len() && k - j < 3 && name_token(&toks[k]) {
                k += 1;
            }
            // The longest run first, then shorter ones.
            (j + 1..=k)
                .rev()
                .find_map(|e| with(e, key, render(&toks[j..e])))
        }
        Slot::Place => {
            let e = proper_run(toks, j, &["of", "de", "del", "la", "upon"])?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Org => {
            let e = proper_run(toks, j, &["of", "and", "&", "de", "for"])?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Date => {
            let e = date_end(toks, j)?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Num => {
            let t = toks.get(j)?;
            let ok = (t.lower.len() <= 3 && t.lower.chars().all(|c| c.is_ascii_digit()))
                || NUMBER_WORDS.contains(&t.lower.as_str());
            ok.then(|| with(j + 1, key, t.text.clone())).flatten()
        }
        Slot::Year => {
            let t = toks.get(j)?;
            let ok = t.lower.len() == 4
                && t.lower
                    .parse::<u32>()
                    .is_ok_and(|y| (1900..2100).contains(&y));
            ok.then(|| with(j + 1, key, t.text.clone())).flatten()
        }
        Slot::Rel | Slot::Rel1 | Slot::RelN => {
            let (e, word) = relation(toks, j, slot)?;
            with(e, key, word)
        }
        Slot::Pet => {
            let t = toks.get(j)?;
            let w = t.lower.as_str();
            if PETS.contains(&w) {
                with(j + 1, key, t.lower.clone())
            } else if DOG_BREEDS.contains(&w) {
                with(j + 1, key, format!("{w} (dog)"))
            } else {
                None
            }
        }
        Slot::Thing => (j + 1..=(j + 2).min(toks.len())).find_map(|e| {
            let words = &toks[j..e];
            let plain = words.iter().all(|t| {
                !t.punct
                    && !matches!(t.lower.as_str(), "is" | "'s" | "was")
                    && t.lower.chars().all(|c| c.is_alphabetic() || c == '-')
            });
            if plain {
                with(e, key, render(words).to_lowercase())
            } else {
                None
            }
        }),
        Slot::Word(list) => {
            // Adverbs of degree and time step aside here too ("I've gone
            // fully vegan"), not manner ("I'm literally blind without them").
            let mut j = j;
            while toks.get(j).is_some_and(|t| {
                matches!(
                    t.lower.as_str(),
                    "fully"
                        | "completely"
                        | "strictly"
                        | "entirely"
                        | "now"
                        | "officially"
                        | "finally"
                        | "recently"
                        | "just"
                        | "also"
                ) && !list.split('/').any(|w| w == t.lower)
            }) {
                j += 1;
            }
            let t = toks.get(j)?;
            (!list.is_empty() && list.split('/').any(|w| w == t.lower))
                .then(|| with(j + 1, key, t.lower.clone()))
                .flatten()
        }
    }
}

/// Shape checks of the clause-like slots.
fn slot_shape(slot: Slot, value: &[Tok]) -> bool {
    let first = value[0].lower.as_str();
    match slot {
        Slot::Ing => {
            first.len() > 4
                && first.ends_with("ing")
                && !matches!(
                    first,
                    "thing"
                        | "something"
                        | "anything"
                        | "nothing"
                        | "everything"
                        | "morning"
                        | "evening"
                        | "during"
                        | "spring"
                        | "string"
                        | "sibling"
                        | "bring"
                        | "wedding"
                        | "feeling"
                        | "being"
                        | "going"
                        | "raining"
                        | "snowing"
                        | "pouring"
                )
        }
        Slot::Role => {
            (matches!(first, "a" | "an") && (2..=5).contains(&value.len())) || bare_role(value)
        }
        Slot::Title => {
            value[0].capitalized() || value.iter().any(|t| BOOKISH.contains(&t.lower.as_str()))
        }
        _ => true,
    }
}

/// Fills `{slot}` placeholders; `subject` lower-cases the values and files
/// one-valued relations under their subject (`wife` → `partner`).
fn fill(template: &str, caps: &Captures, subject: bool) -> String {
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
fn fix_articles(s: &str) -> String {
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

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn is_question(toks: &[Tok], sentence: &str) -> bool {
    sentence.trim_end().ends_with('?')
        || toks
            .first()
            .is_some_and(|t| QUESTION_STARTS.contains(&t.lower.as_str()))
}

/// The facts of one sentence, in the order they were said. `nested` is
/// set for what a request to remember asked for.
fn sentence_facts(sentence: &str, nested: bool, may_elide: bool) -> Vec<FactCandidate> {
    let toks = tokenize(sentence);
    let question = !nested && is_question(&toks, sentence);
    let mut taken: Vec<Range<usize>> = Vec::new();
    let mut found: Vec<(usize, FactCandidate)> = Vec::new();
    let mut words: std::collections::HashSet<&str> =
        toks.iter().map(|t| t.lower.as_str()).collect();
    let elided = if may_elide && !nested {
        elided_subject(&toks)
    } else {
        None
    };
    if let Some(v) = &elided {
        words.extend(v.iter().take(2).map(|t| t.lower.as_str()));
    }
    let tries = toks.len() + usize::from(elided.is_some());
    // Where a clause starts, worked out once for every rule.
    let starts: Vec<bool> = (0..toks.len()).map(|i| clause_start(&toks, i)).collect();
    for compiled in COMPILED.iter() {
        let rule = &compiled.rule;
        if question && !rule.in_questions {
            continue;
        }
        if compiled
            .anchor
            .as_ref()
            .is_some_and(|a| !a.iter().any(|w| words.contains(w)))
        {
            continue;
        }
        if rule.unless.iter().any(|w| words.contains(w)) {
            continue;
        }
        for attempt in 0..tries {
            // The sentence's own words from each start, then, for one
            // opening without its subject, the same words after it.
            let (start, view, at, prefix) = match &elided {
                Some(v) if attempt == toks.len() => {
                    if rule.anywhere {
                        continue;
                    }
                    (0, v.as_slice(), 0, v.len() - toks.len())
                }
                _ => {
                    if !rule.anywhere && starts.get(attempt) != Some(&true) {
                        continue;
                    }
                    (attempt, toks.as_slice(), attempt, 0)
                }
            };
            if taken.iter().any(|r| r.contains(&start)) {
                continue;
            }
            let Some((end, caps)) = match_at(&compiled.els, view, at, true, rule.max_value) else {
                continue;
            };
            // A match of the supplied subject alone says nothing.
            if end <= at + prefix {
                continue;
            }
            let end = start + (end - at - prefix);
            if taken.iter().any(|r| r.start < end && start < r.end) {
                continue;
            }
            if rule.check.is_some_and(|check| !check(&caps)) {
                continue;
            }
            // "Can't {word} …" reads the verb the user said.
            let mut caps = caps;
            if rule.reads.contains("{word}") && capture(&caps, "word").is_none() {
                let verb = toks[start..end]
                    .iter()
                    .find(|t| matches!(t.lower.as_str(), "eat" | "have" | "drink"))
                    .map_or("eat".to_string(), |t| t.lower.clone());
                caps.push(("word", verb));
            }
            taken.push(start..end);
            // "Can you remember that my birthday is May 2nd?": the fact
            // itself, read like any other, when a rule knows it.
            if let Some(raw) = capture(&caps, "raw").filter(|_| !nested) {
                let inner = sentence_facts(raw, true, false);
                if !inner.is_empty() {
                    found.extend(inner.into_iter().map(|f| (start, f)));
                    continue;
                }
            }
            let content = upper_first(&fix_articles(&fill(rule.reads, &caps, false)));
            let subject = rule.subject.map(|s| fill(s, &caps, true));
            found.push((
                start,
                FactCandidate {
                    category: rule.category,
                    content,
                    subject,
                    speaker: Default::default(),
                },
            ));
        }
    }
    // Stable: what one request held stays in its order.
    found.sort_by_key(|(start, _)| *start);
    found.into_iter().map(|(_, f)| f).collect()
}

/// Verbs a sentence often opens with, its subject ("I") left out: "Quit
/// the café!", "Moved to Leeds last month".
#[rustfmt::skip]
const ELIDED_PAST: &[&str] = &[
    "moved", "relocated", "quit", "started", "signed", "registered", "bought", "got", "switched",
    "adopted", "rescued", "joined", "went", "took", "gave", "graduated", "retired", "traded",
    "lost", "left", "booked", "applied", "landed", "accepted", "finished",
];

/// Words in -ing that open a sentence without being what the speaker is
/// doing.
#[rustfmt::skip]
const NOT_DOING: &[&str] = &[
    "thing", "something", "anything", "nothing", "everything", "morning", "evening", "during",
    "spring", "string", "sibling", "bring", "wedding", "feeling", "being", "according",
    "raining", "snowing", "pouring", "amazing", "boring", "interesting", "building", "ceiling",
    "darling", "pudding", "king", "ring", "sing", "wing", "ping",
];

/// A sentence that opens with what the speaker did or is doing, its
/// subject left out as people do in speech ("Learning Korean from
/// videos", "Moved to Leeds in May"): its words after the subject
/// ("I", or "I am" before a verb in -ing). Only at the sentence's start:
/// after "and" the subject left out is the previous clause's ("My sister
/// moved to Leeds and started nursing").
fn elided_subject(toks: &[Tok]) -> Option<Vec<Tok>> {
    let first = toks
        .iter()
        .find(|t| !SKIPPABLE.contains(&t.lower.as_str()))?;
    let w = first.lower.as_str();
    // "Moving to Denver would be a nightmare": the -ing word opens the
    // subject when a verb of its own follows in the clause.
    let is_subject = toks
        .iter()
        .skip_while(|t| !std::ptr::eq(*t, first))
        .skip(1)
        .take_while(|t| !t.punct)
        .any(|t| {
            matches!(
                t.lower.as_str(),
                "is" | "was"
                    | "are"
                    | "were"
                    | "would"
                    | "will"
                    | "'s"
                    | "can"
                    | "could"
                    | "might"
                    | "should"
                    | "makes"
                    | "made"
                    | "sounds"
                    | "seems"
                    | "has"
                    | "had"
                    | "takes"
            )
        });
    let prefix: &[(&str, &str)] = if ELIDED_PAST.contains(&w) {
        &[("I", "i")]
    } else if w.len() > 4
        && w.ends_with("ing")
        && !NOT_DOING.contains(&w)
        && !first.punct
        && !is_subject
    {
        &[("I", "i"), ("am", "am")]
    } else {
        return None;
    };
    let mut v: Vec<Tok> = prefix
        .iter()
        .map(|(text, lower)| Tok::word(text, lower, false))
        .collect();
    v.extend(toks.iter().cloned());
    Some(v)
}

/// Facts stated in the first person, in the order they were said,
/// de-duplicated (normalized content).
pub fn facts(user_text: &str) -> Vec<FactCandidate> {
    let mut out: Vec<FactCandidate> = Vec::new();
    for line in user_text.lines() {
        for f in facts_by_sentence(&sentences(line)).into_iter().flatten() {
            let norm = normalize_fact(&f.content);
            if !out.iter().any(|o| normalize_fact(&o.content) == norm) {
                out.push(f);
            }
        }
    }
    out
}

/// The facts of each of a run of sentences said one after another. A
/// sentence without its subject is read as the speaker's only when the one
/// before it was theirs too, or short, or there was none ("My brother's
/// doing great. Moved to Denver in March." is the brother's move).
pub fn facts_by_sentence(sentences: &[String]) -> Vec<Vec<FactCandidate>> {
    facts_by_sentence_after(&[], sentences)
}

/// [`facts_by_sentence`], the user's sentences `before` (their message
/// before) told first: a sentence that opens on "he" or "she" is read as
/// said of the user's own relation or pet spoken of last before it (see
/// [`Referent`]).
pub fn facts_by_sentence_after(before: &[String], sentences: &[String]) -> Vec<Vec<FactCandidate>> {
    let mut referent = None;
    for s in before {
        referent = Referent::after(referent, &tokenize(s));
    }
    let mut may_elide = true;
    sentences
        .iter()
        .map(|s| {
            let toks = tokenize(s);
            let resolved = referent
                .as_ref()
                .and_then(|r| r.in_place_of_pronoun(s, &toks));
            referent = Referent::after(referent.take(), &toks);
            let found = match resolved
                .map(|r| sentence_facts(&r, false, false))
                .filter(|f| !f.is_empty())
            {
                Some(found) => found,
                None => sentence_facts(s, false, may_elide),
            };
            let toks = tokenize(s);
            let words: Vec<&Tok> = toks.iter().filter(|t| !t.punct).collect();
            may_elide = words.len() <= 3
                || words
                    .first()
                    .is_some_and(|t| matches!(t.lower.as_str(), "i" | "we"))
                || elided_subject(&toks).is_some();
            found
        })
        .collect()
}

/// The user's own relation or pet spoken of last ("my boyfriend", "our
/// son", "my own dog"), which a sentence that opens on "he" or "she" is
/// about: "my boyfriend got called out at 2 am" — "he's a lineman for the
/// electric company" reads as "my boyfriend's a lineman for the electric
/// company". Someone else spoken of after it (another's relation, "a
/// lady", "a client") ends it, and a pronoun of the other sex does not
/// take it.
#[derive(Debug, Clone)]
struct Referent {
    /// As the user said it, without "my" ("boyfriend", "best friend").
    what: String,
    /// Whether the relation is a man's (`Some(true)`), a woman's, or
    /// either (`None`: a friend, a pet).
    male: Option<bool>,
}

/// Relations that are a man's; [`FEMALE_RELATIONS`] a woman's.
#[rustfmt::skip]
const MALE_RELATIONS: &[&str] = &[
    "husband", "boyfriend", "fiance", "dad", "father", "daddy", "stepdad", "stepfather",
    "father-in-law", "brother", "son", "uncle", "nephew", "grandpa", "grandfather", "grandson",
    "landlord",
];
#[rustfmt::skip]
const FEMALE_RELATIONS: &[&str] = &[
    "wife", "girlfriend", "fiancee", "fiancée", "mom", "mother", "mum", "mommy", "mam", "mammy",
    "mummy", "stepmom", "stepmother", "mother-in-law", "sister", "daughter", "aunt", "niece",
    "grandma", "grandmother", "granddaughter", "landlady",
];

/// Someone spoken of who is not the user's relation.
#[rustfmt::skip]
const SOMEONE_ELSE: &[&str] = &[
    "lady", "guy", "man", "woman", "client", "customer", "girl", "boy", "someone", "somebody",
    "fellow", "bloke", "gentleman", "stranger",
];

impl Referent {
    /// Who a sentence leaves spoken of last, after `prev`.
    fn after(prev: Option<Referent>, toks: &[Tok]) -> Option<Referent> {
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
    fn in_place_of_pronoun(&self, sentence: &str, toks: &[Tok]) -> Option<String> {
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

/// Words that follow "'s" read as "is" ("my boyfriend's a lineman", "my
/// mum's not well"), where another word makes it a possessive ("my
/// neighbour's goat").
#[rustfmt::skip]
const AFTER_IS: &[&str] = &[
    "a", "an", "the", "been", "got", "gone", "going", "not", "so", "very", "really", "just",
    "always", "never", "still", "also", "now", "finally", "in", "at", "from", "on", "back",
    "home", "off", "out", "over", "up", "like", "um", "uh", "doing", "getting", "coming",
    "moving", "working", "living", "retired", "married", "engaged", "pregnant", "called",
    "named",
];

/// Words a spoken sentence may open on before its subject.
const FILLERS: &[&str] = &["so", "um", "uh", "oh", "and", "well", "yeah", "like", "but"];

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

/// Whether a word names a relation or a pet (for scoring what a sentence
/// discloses).
pub fn is_relation_word(word: &str) -> bool {
    SINGLE_RELATIONS.iter().any(|(w, _)| *w == word)
        || MANY_RELATIONS.contains(&word)
        || PETS.contains(&word)
        || DOG_BREEDS.contains(&word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(text: &str) -> Vec<(FactCategory, String, Option<String>)> {
        facts(text)
            .into_iter()
            .map(|f| (f.category, f.content, f.subject))
            .collect()
    }

    fn contents(text: &str) -> Vec<String> {
        facts(text).into_iter().map(|f| f.content).collect()
    }

    #[test]
    fn an_occupation_is_read_with_or_without_its_article() {
        for (text, want) in [
            ("I'm a nurse.", "Is a nurse"),
            (
                "I'm a dental hygienist in Truro.",
                "Is a dental hygienist in Truro",
            ),
            (
                "So I'm a driving instructor, I don't think I've said.",
                "Is a driving instructor",
            ),
            (
                "I will be kitchen supervisor.",
                "Will be kitchen supervisor",
            ),
            (
                "I'm going to be a practice nurse at Larkfield Surgery, five minutes away.",
                "Will be a practice nurse at Larkfield Surgery",
            ),
        ] {
            assert_eq!(
                one(text),
                (want.to_string(), Some("role".to_string())),
                "{text:?}"
            );
        }
        assert_eq!(
            one("My son is nurse in Calgary.").0,
            "Son is nurse in Calgary"
        );
        // what one is like, not what one does
        for text in [
            "I'm a terrible teacher.",
            "I'm a big mess today.",
            "I'm a mother of three.",
            "I'm a morning person.",
        ] {
            assert!(
                !got(text).iter().any(|f| f.0 == FactCategory::Occupation),
                "{text:?}: {:?}",
                got(text)
            );
        }
    }

    #[test]
    fn everyday_statements_of_a_family_and_a_working_life() {
        for (text, want) in [
            (
                "Our middle one, Harper, lost a tooth.",
                "Middle child is named Harper",
            ),
            (
                "My oldest one, Liam, is twelve.",
                "Oldest child is named Liam",
            ),
            (
                "My husband is working in Fort McMurray.",
                "Husband works in Fort McMurray",
            ),
            (
                "Harper's birthday is March 3rd.",
                "Harper's birthday is March 3rd",
            ),
            (
                "Harper turns seven on March 3rd.",
                "Harper's birthday is March 3rd",
            ),
            ("I go to Zumba on Tuesdays.", "Goes to Zumba on tuesdays"),
            (
                "I'm taking an online course in bookkeeping.",
                "Is taking an online course in bookkeeping",
            ),
            ("I have high blood pressure.", "Has high blood pressure"),
            ("My doctor is Dr. Patel.", "Has a doctor named Dr Patel"),
            ("I'm working at the hospital now.", "Works at the hospital"),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        // a place that is no workplace, a taking that is no course
        assert!(got("I work in the garden on Sundays.").is_empty());
        assert!(got("I'm taking a break from all that.").is_empty());
    }

    #[test]
    fn the_occupations_are_sorted() {
        assert!(OCCUPATIONS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_mine_is_a_pit_after_a_noun() {
        assert_eq!(
            contents("My son is engineer in the nickel mine."),
            ["Son is engineer in the nickel mine"]
        );
    }

    #[test]
    fn a_day_spelled_out_is_a_date() {
        for (text, want) in [
            (
                "My birthday is the twelfth of June.",
                "Birthday is the twelfth of June",
            ),
            (
                "My birthday is on June twelfth.",
                "Birthday is June twelfth",
            ),
            (
                "My birthday is the twenty-first of March.",
                "Birthday is the twenty-first of March",
            ),
            (
                "My birthday is the twenty first of March.",
                "Birthday is the twenty first of March",
            ),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        // an ordinal alone is no date
        assert!(got("My birthday is the first thing I forget.").is_empty());
    }

    #[test]
    fn names_given_after_a_comma_or_as_the_name_of() {
        for (text, want) in [
            (
                "My husband, his name is Ramon, he drives the tour bus.",
                "Husband is named Ramon",
            ),
            ("The name of my husband is Ramon.", "Husband is named Ramon"),
            (
                "The name of my cat is Mingming.",
                "Has a cat named Mingming",
            ),
            ("Our son Declan started school.", "Has a son named Declan"),
            ("Our daughter is called Ava.", "Has a daughter named Ava"),
            (
                "Our youngest, Declan, started grade primary.",
                "Youngest child is named Declan",
            ),
            ("My eldest is called Ava.", "Eldest child is named Ava"),
            ("We have a dog, Pickles.", "Has a dog named Pickles"),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        assert_eq!(
            contents("My sister, she is a teacher in Manila."),
            ["Sister is a teacher in Manila"]
        );
    }

    fn one(text: &str) -> (String, Option<String>) {
        let f = facts(text);
        assert_eq!(f.len(), 1, "{text:?} gave {f:?}");
        (f[0].content.clone(), f[0].subject.clone())
    }

    #[test]
    fn the_name_a_fact_gives_is_read_back() {
        for text in [
            "I went hiking with my little brother Tomas on Sunday.",
            "my manager is Beatriz",
            "my dog is called Biscuit",
        ] {
            let (content, _) = one(text);
            assert!(named(&content).is_some(), "{content}");
        }
        assert_eq!(
            named("Has a brother named Tomas"),
            Some(("brother".into(), "Tomas".into()))
        );
        assert_eq!(
            named("Manager is named Beatriz"),
            Some(("manager".into(), "Beatriz".into()))
        );
        assert_eq!(
            named("Has an older sister named Leela"),
            Some(("older sister".into(), "Leela".into()))
        );
        assert_eq!(named("Lives in Denver"), None);
        assert_eq!(named("Has a dog"), None);
    }

    #[test]
    fn every_pattern_compiles_to_known_slots() {
        for c in COMPILED.iter() {
            for el in &c.els {
                if let El::Slot(Slot::Word(list)) = el {
                    assert!(!list.is_empty(), "unknown slot in {:?}", c.rule.pattern);
                }
            }
            assert!(!c.els.is_empty());
        }
    }

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

    #[test]
    fn names_homes_and_work() {
        assert_eq!(
            got("Hi, my name is Mark and I work at Initech, in sales."),
            [
                (Biographical, "Name: Mark".into(), Some("name".into())),
                (
                    Occupation,
                    "Works at Initech".into(),
                    Some("employer".into())
                ),
            ]
        );
        assert_eq!(
            one("So we just moved to Denver last month."),
            ("Moved to Denver".into(), Some("home".into()))
        );
        assert_eq!(
            one("I live in the Bay Area, near Oakland."),
            ("Lives in the Bay Area".into(), Some("home".into()))
        );
        assert_eq!(
            one("I\u{2019}m a nurse at Mercy Hospital these days."),
            ("Is a nurse at Mercy Hospital".into(), Some("role".into()))
        );
        assert_eq!(
            one("Honestly I lost my job at the mechanical engineering company."),
            (
                "Lost their job at the mechanical engineering company".into(),
                Some("employer".into())
            )
        );
        assert_eq!(
            one("I got laid off from Initech on Friday and I'm a bit lost."),
            ("Was laid off from Initech".into(), Some("employer".into()))
        );
        assert_eq!(
            one("Call me Jo."),
            ("Goes by Jo".into(), Some("nickname".into()))
        );
        assert_eq!(
            one("I work for Bank of America."),
            ("Works at Bank of America".into(), Some("employer".into()))
        );
    }

    #[test]
    fn people_and_their_names() {
        assert_eq!(
            one("My sister Leela is a nurse."),
            (
                "Sister Leela is a nurse".into(),
                Some("sister:leela:role".into())
            )
        );
        assert_eq!(
            one("my manager is Beatriz"),
            ("Manager is named Beatriz".into(), Some("manager".into()))
        );
        assert_eq!(
            one("I told Beatriz, my manager, that I need Friday off."),
            ("Manager is named Beatriz".into(), Some("manager".into()))
        );
        assert_eq!(
            one("We had dinner with my wife Ana's parents."),
            ("Wife is named Ana".into(), Some("partner".into()))
        );
        assert_eq!(
            one("I went hiking with my little brother Tomas on Sunday."),
            ("Has a brother named Tomas".into(), None)
        );
        assert_eq!(
            one("My best friend Priya lives in Leeds."),
            (
                "Best friend Priya lives in Leeds".into(),
                Some("best friend:priya:home".into())
            )
        );
        assert_eq!(
            one("I have two kids."),
            ("Has two kids".into(), Some("kids".into()))
        );
    }

    #[test]
    fn pets_things_and_activities() {
        assert_eq!(
            contents("My dog is called Biscuit. I drive a Corolla."),
            ["Has a dog named Biscuit", "Drives a Corolla"]
        );
        assert_eq!(
            contents("My dog\u{2019}s name is Biscuit"),
            ["Has a dog named Biscuit"]
        );
        assert_eq!(
            contents("I\u{2019}m reading Piranesi right now and I love it."),
            ["Is reading Piranesi"]
        );
        assert_eq!(
            contents("I'm learning Japanese. I signed up for the Chicago marathon!"),
            ["Is learning Japanese", "Signed up for the Chicago marathon"]
        );
        assert_eq!(
            contents("I've been training for my first triathlon."),
            ["Is training for their first triathlon"]
        );
        assert_eq!(
            contents("I recently started running, and I switched to oat milk."),
            ["Started running", "Switched to oat milk"]
        );
        assert_eq!(contents("I swim every morning."), ["Swims every morning"]);
    }

    #[test]
    fn dates_preferences_health_and_plans() {
        assert_eq!(
            one("My birthday is the 14th of August."),
            (
                "Birthday is the 14th of August".into(),
                Some("birthday".into())
            )
        );
        assert_eq!(
            one("our anniversary's on June 3rd"),
            ("Anniversary is June 3rd".into(), Some("anniversary".into()))
        );
        assert_eq!(
            contents("I can't eat gluten. I'm allergic to peanuts and shellfish."),
            ["Can't eat gluten", "Allergic to peanuts and shellfish"]
        );
        assert_eq!(
            one("I'm vegetarian"),
            ("Is vegetarian".into(), Some("diet".into()))
        );
        assert_eq!(
            contents("I love hiking but I hate running in the rain."),
            ["Loves hiking", "Dislikes running in the rain"]
        );
        // a feeling about someone, and a way of saying something, are no
        // tastes
        for text in [
            "I hum it in the shower. I hate myself.",
            "He's a dentist now, and I like to think she inspired him.",
            "I hate to say it, but he was right.",
            // a verb with a particle or a place after it
            "My knee's bad, I can't stand up for more than an hour.",
            "Honestly I cannot stand still at gigs.",
            "I can't stand out there in the cold all day.",
            "I can't stand around waiting for the bus.",
        ] {
            assert!(
                !contents(text)
                    .iter()
                    .any(|c| c.starts_with("Likes") || c.starts_with("Dislikes")),
                "{text}"
            );
        }
        assert_eq!(contents("I like to swim."), ["Likes to swim"]);
        assert_eq!(
            one("My favourite band is Radiohead."),
            (
                "Favorite band is Radiohead".into(),
                Some("favorite:band".into())
            )
        );
        assert_eq!(
            contents("I'm planning to visit my grandmother in Lisbon."),
            ["Plans to visit their grandmother in Lisbon"]
        );
        assert_eq!(
            contents("I want to run a half marathon next spring."),
            ["Wants to run a half marathon next spring"]
        );
    }

    #[test]
    fn requests_to_remember_keep_the_users_words() {
        assert_eq!(
            got("Please remember that my interview is on Friday."),
            [(Other, "My interview is on Friday".into(), None)]
        );
        assert_eq!(
            contents("Can you remember that my birthday is May 2nd?"),
            ["Birthday is May 2nd"]
        );
    }

    #[test]
    fn negations_questions_and_small_talk_give_nothing() {
        for text in [
            "my dog is not happy",
            "Is my name on the list?",
            "is my name on the list",
            "Do you know where I live?",
            "I don't work at Initech",
            "I'm not allergic to anything.",
            "If my name is on the list, call me.",
            "I think I'm allergic to cats",
            "I love it when you say that.",
            "I want to ask you something.",
            "I'm going to be honest.",
            "I'm learning a lot from this.",
            "I watched a documentary about octopuses.",
            "Anyway, firemy name is not a thing",
            "my name is",
            "I play with my kids after school.",
            "I drive to work.",
            "I like that.",
            "Sorry, my friend.",
            "I'm going to the store.",
            "My mom is Korean.",
            "I don't remember that movie.",
            "I was a backend engineer there for six years.",
            "Thanks, see you tomorrow!",
            "If I lived in Paris I'd eat croissants every day.",
            "I wish I had a dog.",
            "My friend thinks I'm allergic to gluten but I'm not.",
            "I never said I work at Google.",
            "I'm going to grab lunch.",
            "My dog is sick today.",
            "I'm reading between the lines here.",
            "I drive myself crazy sometimes.",
            "My boss is Mad about the report.",
            "I'm from the support team.",
            "I prefer not to say.",
            "I moved to the other room.",
            "I'm into it.",
            "What's my name again?",
            "Do you remember where I work?",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

    #[test]
    fn relatives_pets_and_milestones_without_a_name() {
        assert_eq!(
            contents(
                "Our cat's name is Pickle. My mom lives in Florida. I got engaged last weekend! \
                 I've been a pharmacist for about ten years now. I'm terrified of spiders."
            ),
            [
                "Has a cat named Pickle",
                "Mom lives in Florida",
                "Got engaged",
                "Has been a pharmacist for about ten years",
                "Is afraid of spiders"
            ]
        );
        assert_eq!(
            one("I don't live in Austin anymore."),
            ("No longer lives in Austin".into(), Some("home".into()))
        );
    }

    #[test]
    fn facts_said_in_passing_in_a_sentence_about_something_else() {
        for (text, want) in [
            (
                "It was thirty-one below this morning here in Duluth.",
                ("Lives in Duluth", Some("home")),
            ),
            (
                "Rusty, our beagle, got out the back gate again.",
                ("Has a beagle (dog) named Rusty", None),
            ),
            (
                "Mochi, my rabbit, chewed through my charger.",
                ("Has a rabbit named Mochi", None),
            ),
            (
                "I was a civil engineer for thirty-four years, mostly bridges.",
                ("Was a civil engineer for thirty-four years", None),
            ),
            (
                "I've been vegetarian since I was fifteen, so pizza night is a negotiation.",
                ("Is vegetarian", Some("diet")),
            ),
            ("I've gone fully vegan now.", ("Is vegan", Some("diet"))),
            (
                "I signed up for a half marathon in Fort Worth at the end of March.",
                (
                    "Signed up for a half marathon in Fort Worth at the end of March",
                    None,
                ),
            ),
            ("I bought an e-bike!", ("Bought an e-bike", None)),
            (
                "Traded in the old car for a Kia Niro.",
                ("Traded their old car for a Kia Niro", Some("car")),
            ),
            (
                "Shellfish and I don't get along.",
                ("Doesn't get along with shellfish", None),
            ),
            (
                "Ran into an old colleague from MnDOT at the hardware store.",
                ("Has a former colleague from MnDOT", None),
            ),
            (
                "I'm joining Quokka, a small startup doing payments.",
                ("Is joining Quokka", Some("employer")),
            ),
            (
                "I used to work for Boeing.",
                ("Used to work at Boeing", None),
            ),
        ] {
            let (content, subject) = one(text);
            assert_eq!((content.as_str(), subject.as_deref()), want, "{text}");
        }
        // Away from home, "here in" is not where one lives; a role that
        // points elsewhere, or a time that is no span, is no past job.
        for text in [
            "It's so sunny here in Lisbon, the holiday is perfect.",
            "We're staying with friends here in Rome.",
            "I was a mess for weeks after that.",
            "I was a kid for most of it, honestly.",
            "Traded in my lunch for a nap.",
            "I'm joining the Zoom now.",
            "I'm joining Mike and Sarah for dinner.",
            "I'm joining Dad at the clinic.",
            "I was a mess for months after the divorce.",
            "My sister and I don't get on the same flight.",
            "My dad sold his bike and traded the old car for a Tesla.",
            "I'm literally blind without my glasses.",
            "I'm here in Chicago for a wedding.",
            "I don't live here in Ohio anymore.",
            "My brother's doing great. Moved to Denver in March.",
            "Moving to Denver would be a nightmare.",
            "Started raining on the way home.",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

    #[test]
    fn a_sentence_without_its_subject_is_the_speakers() {
        assert_eq!(
            contents("Learning Korean from YouTube videos, slowly."),
            ["Is learning Korean from YouTube videos"]
        );
        assert_eq!(
            one("Just moved to Denver last month!"),
            ("Moved to Denver".into(), Some("home".into()))
        );
        assert_eq!(
            contents("Quit my job at Initech!"),
            ["Quit their job at Initech"]
        );
        // The subject left out after "and" is the clause's before it.
        for text in [
            "My sister moved to Leeds and started nursing.",
            "Raining again, ugh.",
            "Going to grab lunch.",
            "Got it, thanks.",
            "Something came up at work.",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

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
    fn long_values_are_refused_not_cut() {
        assert!(facts(
            "I love the way the light falls on the river in the evening when the boats come back in"
        )
        .is_empty());
    }

    #[test]
    fn changes_name_the_subject_they_change() {
        for (text, subject) in [
            ("I no longer work at Initech.", "employer"),
            ("I got a new job!", "employer"),
            ("We moved to Denver.", "home"),
            ("I went vegan last year.", "diet"),
            ("I broke up with Sam.", "partner"),
            ("So Colt and I are done, like officially done.", "partner"),
            ("Sam and I split up in March.", "partner"),
        ] {
            assert_eq!(one(text).1.as_deref(), Some(subject), "{text}");
        }
    }

    #[test]
    fn contractions_without_apostrophes_and_short_forms_read_as_written_out() {
        for (marked, unmarked) in [
            ("I'm allergic to peanuts.", "im allergic to peanuts."),
            (
                "I've got a dog called Biscuit.",
                "ive got a dog called Biscuit.",
            ),
            ("I don't eat meat any more.", "i dont eat meat any more."),
            (
                "I'm lactose intolerant and I know it.",
                "im lactose intolerant and i KNOW it.",
            ),
            ("My boyfriend Sam is a chef.", "my bf Sam is a chef."),
            (
                "My birthday is on the 14th of August.",
                "my bday is on the 14th of august.",
            ),
            ("I'm reading Dune.", "Im reading Dune."),
        ] {
            let contents = |s: &str| -> Vec<String> {
                facts(s).iter().map(|f| f.content.to_lowercase()).collect()
            };
            let want = contents(marked);
            assert!(!want.is_empty(), "{marked:?} states a fact");
            assert_eq!(contents(unmarked), want, "{unmarked:?}");
        }
        // Words of their own stay as they are ("its", "were", "ill").
        let lower = |s: &str| -> Vec<String> { tokenize(s).into_iter().map(|t| t.lower).collect() };
        assert_eq!(
            lower("its cold, we were ill"),
            ["its", "cold", ",", "we", "were", "ill"]
        );
        assert_eq!(
            lower("Im sure shes fine"),
            ["i", "am", "sure", "she", "'s", "fine"]
        );
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

    #[test]
    fn he_or_she_opening_a_sentence_is_the_users_relation_spoken_of_before() {
        let found = |before: &[&str], said: &str| -> Vec<String> {
            let before: Vec<String> = before.iter().map(|s| s.to_string()).collect();
            facts_by_sentence_after(&before, &sentences(said))
                .into_iter()
                .flatten()
                .map(|f| f.content)
                .collect()
        };
        // from the message before, and from the sentence before
        assert!(found(
            &["sorry um my boyfriend got called out at 2 in the morning"],
            "he's a lineman for the electric company"
        )
        .iter()
        .any(|f| f.starts_with("Boyfriend is a lineman")));
        assert!(found(&[], "My sister rang. She works as a nurse.")
            .iter()
            .any(|f| f.starts_with("Sister is a nurse")));
        // a pronoun of the other sex, someone else spoken of since, or no
        // relation of the user's: no fact of the relation
        for (before, said) in [
            (
                &["my boyfriend got called out"][..],
                "she's a lineman for the electric company",
            ),
            (
                &["my sister rang, and a lady at work came by"][..],
                "she works as a nurse",
            ),
            (
                &["a client of mine called"][..],
                "he's a lineman for the electric company",
            ),
            (
                &["my neighbour's goat ate the gourds"][..],
                "she is a nurse, that goat",
            ),
        ] {
            let f = found(before, said);
            assert!(
                f.iter()
                    .all(|f| !f.contains("lineman") && !f.contains("nurse")),
                "{before:?} {said:?}: {f:?}"
            );
        }
    }

    #[test]
    fn medicines_taken_are_facts_and_everyday_words_are_not() {
        for (said, fact) in [
            (
                "atrial fibrillation, they call it, and I'm on warfarin for it",
                "Takes warfarin",
            ),
            (
                "The new doctor has moved me onto apixaban, twice a day.",
                "Takes apixaban",
            ),
            ("i take metformin every morning", "Takes metformin"),
        ] {
            let found: Vec<String> = facts(said).into_iter().map(|f| f.content).collect();
            assert!(found.iter().any(|f| f == fact), "{said:?}: {found:?}");
        }
        for said in [
            "I'm on nights for the next two weeks.",
            "I'm on holiday for a fortnight.",
            "They moved me to accounts last month.",
            "I take the bus every morning.",
            "I take lunch at noon every day.",
            "I'm on Facebook for work, mostly.",
        ] {
            let found = facts(said);
            assert!(
                found.iter().all(|f| !f.content.starts_with("Takes")),
                "{said:?}: {found:?}"
            );
        }
    }

    #[test]
    fn a_birthday_told_by_the_age_one_turns_on_the_day() {
        for (said, fact) in [
            (
                "fun fact im turning 25 on the 14th of august and i want a cake",
                "Birthday is the 14th of august",
            ),
            ("I turn 40 on March 3rd.", "Birthday is March 3rd"),
            (
                "I shall be eighty on the 30th of March, and the family are plotting.",
                "Birthday is the 30th of March",
            ),
            (
                "my birthday's coming up may 14th and um my mom wants a dinner",
                "Birthday is may 14th",
            ),
            (
                "my birthday is the 2nd of may",
                "Birthday is the 2nd of may",
            ),
            (
                "help. my gf turns 26 on december 3rd and i have zero ideas.",
                "Girlfriend's birthday is december 3rd",
            ),
            (
                "My little sister is turning 9 on the 2nd of May!",
                "Sister's birthday is the 2nd of May",
            ),
            (
                "My husband's birthday is on June 19th.",
                "Husband's birthday is June 19th",
            ),
        ] {
            let found: Vec<String> = facts(said).into_iter().map(|f| f.content).collect();
            assert!(found.iter().any(|f| f == fact), "{said:?}: {found:?}");
        }
        // a number of years, not a day; "may" the verb is no month
        for said in [
            "My son turns 12 next year.",
            "I will be 12 minutes late on the way.",
            "my birthday is may be in june",
        ] {
            let found = facts(said);
            assert!(
                found
                    .iter()
                    .all(|f| !f.content.starts_with("Birthday is may")
                        && f.content != "Birthday is 12"),
                "{said:?}: {found:?}"
            );
        }
    }
}
