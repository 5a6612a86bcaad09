//! The lexicon: the English word tables the tokenizer reads, kept as
//! data. A table searched by halves is sorted by its first column (the
//! tests of the search index check it).

/// Whether a lowercased word is the past form of an irregular verb
/// ("bought", "grew"); see [`IRREGULAR`] for what is left out.
pub(crate) fn is_irregular_past(word: &str) -> bool {
    IRREGULAR
        .binary_search_by(|(form, _)| form.cmp(&word))
        .is_ok()
}

/// The short forms typed chat uses for relations and days, and their
/// word, sorted by form: the index and the fact rules (`text::facts`) read
/// them as their word.
pub(crate) const SHORT_FORMS: &[(&str, &str)] = &[
    ("bday", "birthday"),
    ("bf", "boyfriend"),
    ("gf", "girlfriend"),
    ("hubby", "husband"),
];

/// Past forms of common irregular English verbs and their verb, sorted by
/// form. Forms that are also everyday nouns or adjectives in their own
/// right ("left", "ground", "saw", "lay", "felt") or names and short forms
/// ("Rose", "Sat") are left out.
pub(crate) const IRREGULAR: &[(&str, &str)] = &[
    ("ate", "eat"),
    ("became", "become"),
    ("began", "begin"),
    ("begun", "begin"),
    ("bent", "bend"),
    ("bled", "bleed"),
    ("blew", "blow"),
    ("blown", "blow"),
    ("bought", "buy"),
    ("bred", "breed"),
    ("broke", "break"),
    ("broken", "break"),
    ("brought", "bring"),
    ("built", "build"),
    ("came", "come"),
    ("caught", "catch"),
    ("chose", "choose"),
    ("chosen", "choose"),
    ("dealt", "deal"),
    ("drank", "drink"),
    ("drawn", "draw"),
    ("drew", "draw"),
    ("driven", "drive"),
    ("drove", "drive"),
    ("dug", "dig"),
    ("eaten", "eat"),
    ("fallen", "fall"),
    ("fed", "feed"),
    ("fell", "fall"),
    ("fled", "flee"),
    ("flew", "fly"),
    ("flown", "fly"),
    ("forgot", "forget"),
    ("forgotten", "forget"),
    ("fought", "fight"),
    ("found", "find"),
    ("froze", "freeze"),
    ("frozen", "freeze"),
    ("gave", "give"),
    ("given", "give"),
    ("gone", "go"),
    ("got", "get"),
    ("gotten", "get"),
    ("grew", "grow"),
    ("grown", "grow"),
    ("heard", "hear"),
    ("held", "hold"),
    ("hid", "hide"),
    ("hidden", "hide"),
    ("hung", "hang"),
    ("kept", "keep"),
    ("knew", "know"),
    ("known", "know"),
    ("led", "lead"),
    ("lent", "lend"),
    ("lost", "lose"),
    ("made", "make"),
    ("meant", "mean"),
    ("met", "meet"),
    ("paid", "pay"),
    ("ran", "run"),
    ("rang", "ring"),
    ("ridden", "ride"),
    ("risen", "rise"),
    ("rode", "ride"),
    ("sang", "sing"),
    ("sank", "sink"),
    ("sent", "send"),
    ("shook", "shake"),
    ("shot", "shoot"),
    ("slept", "sleep"),
    ("sold", "sell"),
    ("sought", "seek"),
    ("spent", "spend"),
    ("spoke", "speak"),
    ("spoken", "speak"),
    ("stole", "steal"),
    ("stolen", "steal"),
    ("stood", "stand"),
    ("stuck", "stick"),
    ("sung", "sing"),
    ("swam", "swim"),
    ("swept", "sweep"),
    ("swore", "swear"),
    ("swum", "swim"),
    ("taken", "take"),
    ("taught", "teach"),
    ("thought", "think"),
    ("threw", "throw"),
    ("thrown", "throw"),
    ("told", "tell"),
    ("took", "take"),
    ("understood", "understand"),
    ("went", "go"),
    ("woke", "wake"),
    ("woken", "wake"),
    ("won", "win"),
    ("wore", "wear"),
    ("worn", "wear"),
    ("written", "write"),
    ("wrote", "write"),
];

/// Phrases that only frame a question about the past or present (see
/// [`without_question_framing`](super::without_question_framing)), matched
/// as whole words.
pub(crate) const FRAMING_PHRASES: [&str; 9] = [
    "these days",
    "used to",
    "remind me",
    "kind of",
    "sort of",
    "type of",
    "at the moment",
    "right now",
    "any more",
];

/// Single words that only frame a question, as [`FRAMING_PHRASES`] do.
pub(crate) const FRAMING_WORDS: [&str; 6] = [
    "nowadays",
    "currently",
    "anymore",
    "lately",
    "remind",
    "again",
];
