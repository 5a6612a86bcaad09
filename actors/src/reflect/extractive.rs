//! The embedded offline summarizer: no network, no model. A deterministic
//! extractive summary, keyword topics, entity spans, a lexicon tone and
//! rule-found facts, returned as the same JSON an LLM is asked for.
//!
//! What is kept is what the user disclosed. Each sentence is scored by
//! [`disclosure`]: a first-person statement with a name, a number or date,
//! a relation, a change, a plan or a feeling, or one a fact rule reads,
//! scores high; small talk and greetings score nothing.
//!
//! - A session summary keeps, in call order, the call's informative user
//!   sentences: all of the first [`ALL_KEPT`], half of more, at least
//!   [`MIN_KEPT`] sentences and at most [`MAX_KEPT`] within
//!   [`SESSION_MAX_CHARS`], plus the agent side's most informative
//!   sentence about the user when it says something (a promise or a
//!   recommendation to the user counts as the fact it is).
//! - The facts are the user's (the fact rules over the user's words) and
//!   the agent side's ([`text::agent_facts`]: what it said it would do,
//!   recommended, or told of its own life), each kept as its speaker's.
//! - A combine (a day, a week, a topic, a call's long narrative) takes
//!   each source's disclosures first, round-robin across sources so that a
//!   week keeps every day's, then the rest; never the same sentence twice
//!   (normalized), and never over its cap.

use std::collections::HashSet;

use serde_json::json;

use super::parse::{MAX_ENTITIES, MAX_TOPICS};
use super::{BoxFuture, Reflect, ReflectError, ReflectRequest};
use crate::model::{ConversationTurn, FactCandidate};
use crate::text;
use crate::text::{FIRST_PERSON, SECOND_PERSON};

/// The offline `Reflect` implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveReflect;

/// Bumped when the same turns summarize differently, so that a replay
/// re-derives what older rules made.
const VERSION: u32 = 6;

impl Reflect for ExtractiveReflect {
    fn name(&self) -> &'static str {
        "extractive"
    }

    fn identity(&self) -> String {
        format!("extractive:{VERSION}")
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        // CPU work over the whole conversation: off the async workers, so
        // that a burst of sessions ending does not stall live connections.
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || summarize_request(&request)).await {
                Ok(text) => Ok(text),
                Err(e) => Err(ReflectError::Config(format!("the summarizer failed: {e}"))),
            }
        })
    }

    fn reflect_in_background(
        &self,
        request: ReflectRequest,
    ) -> BoxFuture<'static, Result<String, ReflectError>> {
        // A live call's windows: at the lowest priority, so that they
        // never take a core from the turns (on 2 cores the blocking pool's
        // threads took one and cut the turns a loaded server acknowledges
        // by 40 %).
        Box::pin(async move {
            crate::background::run(move || summarize_request(&request))
                .await
                .ok_or_else(|| ReflectError::Config("the summarizer failed".into()))
        })
    }
}

/// A request's summary: of its turns, or the combination of its sources.
fn summarize_request(request: &ReflectRequest) -> String {
    let user_id = &request.session.user_id;
    if request.sources.is_empty() {
        summarize(user_id, &request.turns)
    } else {
        let cap = request.max_chars.unwrap_or(DEFAULT_COMBINE_MAX_CHARS);
        combine(user_id, &request.sources, cap)
    }
}

/// Fewest user sentences a session summary keeps (when the call has them).
pub const MIN_KEPT: usize = 2;
/// Informative user sentences a session summary keeps all of; of more, it
/// keeps half.
pub const ALL_KEPT: usize = 4;
/// Most user sentences a session summary keeps.
pub const MAX_KEPT: usize = 12;
/// Longest session summary, in characters.
pub const SESSION_MAX_CHARS: usize = 1_200;
/// A combine's cap when the request names none (`rollup.combine_max_chars`
/// names it for rollups and topics).
pub const DEFAULT_COMBINE_MAX_CHARS: usize = 1_500;
/// A sentence scoring this much discloses something.
const INFORMATIVE: f64 = 2.5;
/// Longest single sentence kept, in characters.
const SENTENCE_MAX_CHARS: usize = 300;

const CHANGE_WORDS: &[&str] = &[
    "moved",
    "moving",
    "switched",
    "started",
    "starting",
    "quit",
    "quitting",
    "lost",
    "became",
    "joined",
    "left",
    "leaving",
    "broke",
    "promoted",
    "promotion",
    "fired",
    "hired",
    "laid",
    "signed",
    "adopted",
    "bought",
    "sold",
    "graduated",
    "retired",
    "married",
    "engaged",
    "divorced",
    "pregnant",
    "born",
    "diagnosed",
    "changed",
    "accepted",
    "offer",
    "applied",
    "rejected",
    "finished",
    "passed",
    "won",
    "anymore",
    "longer",
    "birthday",
    "anniversary",
    "allergic",
    "allergy",
    "vegetarian",
    "vegan",
];

const PLAN_WORDS: &[&str] = &[
    "planning",
    "plan",
    "plans",
    "goal",
    "hope",
    "hoping",
    "trying",
    "training",
    "appointment",
    "interview",
    "deadline",
    "booked",
    "scheduled",
    "saving",
    "applying",
    "decided",
    "deciding",
    "want",
    "wants",
    "gonna",
    "upcoming",
];

const FEELING_WORDS: &[&str] = &[
    "love",
    "hate",
    "prefer",
    "miss",
    "afraid",
    "worry",
    "enjoy",
    "dislike",
    "favorite",
    "favourite",
];

/// Words of pure small talk: a sentence made only of these (and stopwords)
/// says nothing.
const SMALL_TALK: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank",
    "bye",
    "goodbye",
    "ok",
    "okay",
    "sure",
    "yeah",
    "yes",
    "no",
    "cool",
    "great",
    "good",
    "nice",
    "morning",
    "evening",
    "night",
    "see",
    "later",
    "cheers",
    "welcome",
    "hmm",
    "um",
    "uh",
    "alright",
    "right",
    "fine",
    "awesome",
    "wow",
    "haha",
    "lol",
    "talk",
    "soon",
    "bit",
    "chat",
    "doing",
    "well",
    "much",
    "appreciate",
    "perfect",
];

/// Whose sentence [`disclosure`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Voice {
    /// The user's: about their life even without "I" ("It was thirty
    /// below here in Duluth"); "I" or "my" weighs a little more.
    User,
    /// The agent side's: about the user when it says "you" or "your". (A
    /// promise or a recommendation to the user says "you", and scores as
    /// the fact it is; the agent side's "I" sentences scored as the user's
    /// took the one place an agent's line has from what it said of the
    /// user: see docs/evaluation.md.)
    Agent,
    /// A summary's: every sentence is about the user.
    Summary,
}

impl Voice {
    /// The words that name the user in this voice (none needed in a
    /// summary's).
    fn person(self) -> Option<&'static [&'static str]> {
        match self {
            Voice::User => Some(FIRST_PERSON),
            Voice::Agent => Some(SECOND_PERSON),
            Voice::Summary => None,
        }
    }
}

/// How much a sentence discloses about the user, read in `voice`.
pub fn disclosure(sentence: &str, voice: Voice) -> f64 {
    disclosure_with(sentence, voice, None)
}

/// [`disclosure`], with whether the fact rules find a fact in the sentence
/// when the caller already knows (the rules are the costly part).
fn disclosure_with(sentence: &str, voice: Voice, has_fact: Option<bool>) -> f64 {
    // A media description alone is read for what it shows; beside words,
    // the words are what count.
    let media = text::is_media(sentence);
    let bare = if media {
        std::borrow::Cow::Borrowed(
            sentence
                .trim()
                .trim_start_matches('[')
                .trim_end_matches(']'),
        )
    } else {
        text::without_media(sentence)
    };
    let words: Vec<String> = crate::lang::words(&bare).collect();
    let content = words
        .iter()
        .filter(|w| {
            w.chars().count() >= 3
                && !crate::lang::is_stopword(w)
                && !SMALL_TALK.contains(&w.as_str())
        })
        .count();
    if content == 0 {
        return 0.0;
    }
    // Whether it names the person: a user's sentence without "I" is still
    // their life ("It was thirty below here in Duluth", "Rusty, our
    // beagle, got out again") and is read for its signals; one that says
    // "I" or "my" weighs a little more. An agent side's sentence counts
    // only when it is about the user ("your interview", "I'll send you
    // the list").
    let names_person = match voice.person() {
        None => true,
        Some(p) => media || words.iter().any(|w| p.contains(&w.as_str())),
    };
    // (Which voice is asked is told, never read from the address of the
    // word list: two uses of one `const` need not share an address, and
    // an optimized build read every user's sentence as the agent's.)
    let about = names_person || voice == Voice::User;
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    let mut signals = 0.0;
    let has_fact = match has_fact {
        // A media description is read without its brackets.
        Some(found) if !media => found,
        _ => !text::facts(&bare).is_empty(),
    };
    if has_fact {
        signals += 3.0;
    }
    // Names, places, dates and amounts, in the sentence minus its first
    // word (a capital there proves nothing): what makes a statement
    // something to remember rather than small talk.
    let entities = text::entities(&bare, 4).len();
    if entities > 0 {
        signals += 2.0 + 0.5 * (entities - 1) as f64;
    }
    if words
        .iter()
        .any(|w| w.chars().any(|c| c.is_ascii_digit()) || text::is_date_word(w))
    {
        signals += 1.0;
    }
    if words.iter().any(|w| text::is_relation_word(w)) {
        signals += 1.0;
    }
    if has(CHANGE_WORDS) {
        signals += 1.5;
    }
    if has(PLAN_WORDS) {
        signals += 1.0;
    }
    if has(FEELING_WORDS) || words.iter().any(|w| text::is_feeling_word(w)) {
        signals += 1.0;
    }
    if names_person {
        1.0 + signals
    } else if about {
        0.5 + signals
    } else {
        0.5 * signals
    }
}

/// A sentence ready to quote: at most [`SENTENCE_MAX_CHARS`], double
/// quotes made single (they delimit quotes), ending with a stop.
fn quotable(sentence: &str) -> String {
    let s = sentence.trim().replace(['"', '\u{201c}', '\u{201d}'], "'");
    let mut s = if s.chars().count() > SENTENCE_MAX_CHARS {
        let cut = crate::model::truncate_chars(&s, SENTENCE_MAX_CHARS);
        let cut = cut.rsplit_once(' ').map_or(cut, |(head, _)| head);
        // Three stops, not an ellipsis: a stop ends a sentence when the
        // summary is split again.
        format!("{}...", cut.trim_end())
    } else {
        s
    };
    if !s.ends_with(['.', '!', '?']) {
        s.push('.');
    }
    s
}

fn join_words(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Indices of the best `n` of `scores` (highest first, earlier on ties).
fn best(scores: &[f64], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(n);
    order
}

/// The summary text: the headline, the quoted user sentences and the
/// agent's answer.
fn session_text(headline: &str, quotes: &[&str], agent: Option<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !headline.is_empty() {
        parts.push(headline.to_string());
    }
    if !quotes.is_empty() {
        let quoted: Vec<String> = quotes.iter().map(|q| format!("\"{q}\"")).collect();
        parts.push(format!("They said: {}", quoted.join(" ")));
    }
    if let Some(a) = agent {
        parts.push(format!("The agent answered: \"{a}\""));
    }
    parts.join(" ")
}

/// The words a call writes with a capital inside a sentence, lower-cased:
/// the agent's "Poor Nugget." and "And Mere is...?", the user's own "my
/// sister Mere" in a message written with capitals. Not a sentence's
/// first word, nor one after a colon (any word is capitalized there), not
/// a stopword, an acronym ("ED", "OK") or a word of one or two letters
/// ("I"). Each part of a hyphenated name on its own, as
/// [`truecased`] reads words.
fn names_written<'a>(texts: impl Iterator<Item = &'a str>) -> HashSet<String> {
    let mut out = HashSet::new();
    for t in texts {
        for sentence in t.split(':').flat_map(text::sentences) {
            for w in sentence
                .split(|c: char| !(c.is_alphanumeric() || c == '\''))
                .filter(|w| !w.is_empty())
                .skip(1)
            {
                let w = w.split('\'').next().unwrap_or(w);
                let mut chars = w.chars();
                let capital = chars.next().is_some_and(char::is_uppercase)
                    && chars.clone().any(char::is_lowercase)
                    && chars.all(char::is_lowercase);
                let lower = w.to_lowercase();
                if capital && w.chars().count() > 2 && !crate::lang::is_stopword(&lower) {
                    out.insert(lower);
                }
            }
        }
    }
    out
}

/// A message written without a single capital (a lowercase writer, or a
/// speech recognizer that gives no case) with the case the rest of the
/// call gives its words: "I" for "i", and "Nugget" for "nugget" when the
/// call writes it so elsewhere. The fact rules read names, places and
/// employers by their capitals; without this, "my dog is called
/// nugget" says nothing. `None` when the message has capitals of its own
/// (it is read as written). Addresses and paths (a run of characters with
/// `@` or `/`) are left as they are. A name that is also a word ("Mark"
/// and "a bad mark") is capitalized as a word too: the rules still need a
/// name's place in a sentence ("my dog is called …") to read it.
fn truecased(message: &str, names: &HashSet<String>) -> Option<String> {
    if has_capitals(message) {
        return None;
    }
    let mut out = String::with_capacity(message.len());
    for (i, chunk) in message.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if chunk.contains(['@', '/']) {
            out.push_str(chunk);
        } else {
            truecase_words(chunk, names, &mut out);
        }
    }
    Some(out)
}

/// Whether a message has a capital letter anywhere.
fn has_capitals(message: &str) -> bool {
    message.chars().any(char::is_uppercase)
}

/// How many of the most frequent English words are read as words, not
/// names, where no capital tells (the built-in word table lists them by
/// frequency first): "guess", "whatever", "forgot" and "surprise" are
/// among them, and so are a few names ("max", "rob"), which a caseless
/// answer then does not give.
const COMMON_WORDS: u32 = 5_000;

/// `message` with each word that is not among the [`COMMON_WORDS`]
/// capitalized, as a name would be ("pancracio. like the saint" as
/// "Pancracio. like the saint"); "i" as "I".
fn capitalized_rare_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let lower = word.to_lowercase();
        let common = crate::static_embed::stem_row(&crate::lang::stem(&lower))
            .is_some_and(|row| row < COMMON_WORDS);
        let mut chars = word.chars();
        match chars.next() {
            Some(first) if lower == "i" || (!common && first.is_alphabetic()) => {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
            _ => out.push_str(word),
        }
        word.clear();
    };
    for c in message.chars() {
        if c.is_alphanumeric() || (c == '\'' && !word.is_empty()) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// [`truecased`] of a run of text without spaces, into `out`.
fn truecase_words(message: &str, names: &HashSet<String>, out: &mut String) {
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word == "i" || names.contains(word.as_str()) {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in message.chars() {
        if c.is_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, out);
            out.push(c);
        }
    }
    flush(&mut word, out);
}

/// The reflection JSON for a session's turns.
pub fn summarize(user_id: &str, turns: &[ConversationTurn]) -> String {
    let written = turns;
    let cased = cased_turns(turns);
    let turns = cased.as_deref().unwrap_or(turns);
    let user_text: String = turns
        .iter()
        .map(|t| t.user_message.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let agent_text: String = turns
        .iter()
        .map(|t| t.agent_response.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let all = format!("{user_text}\n{agent_text}");
    let entities = call_entities(&user_text, &agent_text);
    let user_sentences = text::sentences(&user_text);
    let sentence_facts = user_facts_by_sentence(turns, &user_sentences);
    let answered = names_answered(turns, written);
    // The agent side's: what it said it would do, recommended, or told of
    // its own life (kept as its own, never as the user's).
    let agent_sentences = text::sentences(&agent_text);
    let agent_facts: Vec<Vec<FactCandidate>> = agent_sentences
        .iter()
        .map(|s| text::agent_facts(std::slice::from_ref(s), user_id))
        .collect();
    let facts = call_facts(&sentence_facts, &answered, &agent_facts);
    let user_scores: Vec<f64> = user_sentences
        .iter()
        .zip(&sentence_facts)
        .map(|(s, f)| disclosure_with(s, Voice::User, Some(!f.is_empty())))
        .collect();
    let informative = user_scores.iter().filter(|&&s| s >= INFORMATIVE).count();
    // All of the first few disclosures, half of a longer call's.
    let share = informative
        .div_ceil(2)
        .max(informative.min(ALL_KEPT))
        .clamp(MIN_KEPT, MAX_KEPT);
    // The best first: informative ones, then (for a call of small talk)
    // the best of the rest up to the minimum.
    let kept = best(&user_scores, share.min(informative.max(MIN_KEPT)));
    let agent_scores: Vec<f64> = agent_sentences
        .iter()
        .zip(&agent_facts)
        .map(|(s, f)| disclosure_with(s, Voice::Agent, Some(!f.is_empty())))
        .collect();
    let agent = best(&agent_scores, 1)
        .first()
        .filter(|&&i| agent_scores[i] >= INFORMATIVE)
        .map(|&i| quotable(&agent_sentences[i]));
    // What the user disclosed weighs twice in what the call was about.
    let disclosed: Vec<&str> = kept.iter().map(|&i| user_sentences[i].as_str()).collect();
    let disclosed = disclosed.join("\n");
    let topics = text::keyword_topics(&format!("{disclosed}\n{disclosed}\n{all}"), MAX_TOPICS);
    let summary = session_summary(user_id, turns.len(), &topics, &user_sentences, kept, agent);
    json!({
        "summary": summary,
        "topics": topics,
        "entities": entities,
        "emotional_tone": text::emotional_tone(&user_text),
        "facts": facts,
    })
    .to_string()
}

/// The turns with each message written without a single capital given
/// the case the rest of the call gives its words ([`truecased`]); `None`
/// when every message has capitals of its own.
fn cased_turns(turns: &[ConversationTurn]) -> Option<Vec<ConversationTurn>> {
    if !turns.iter().any(|t| !has_capitals(&t.user_message)) {
        return None;
    }
    // What a caseless message would have capitalized, from how the
    // rest of the call writes its words (looked for only when a
    // message needs it).
    let names = names_written(turns.iter().flat_map(|t| {
        let user = has_capitals(&t.user_message).then_some(t.user_message.as_str());
        user.into_iter().chain([t.agent_response.as_str()])
    }));
    Some(
        turns
            .iter()
            .map(|t| match truecased(&t.user_message, &names) {
                Some(m) => ConversationTurn {
                    user_message: m,
                    ..t.clone()
                },
                None => t.clone(),
            })
            .collect(),
    )
}

/// The entities of a call, from what the user said first: they are about
/// the user's life.
fn call_entities(user_text: &str, agent_text: &str) -> Vec<String> {
    let mut entities = text::entities(user_text, MAX_ENTITIES);
    for e in text::entities(agent_text, MAX_ENTITIES) {
        if entities.len() < MAX_ENTITIES && !entities.iter().any(|x| x.eq_ignore_ascii_case(&e)) {
            entities.push(e);
        }
    }
    entities
}

/// The facts of each of the user's sentences. The fact rules run once a
/// sentence: their findings score the sentence and, together (each fact
/// once, in order), are the call's facts — what `text::facts` of the
/// whole text gives.
fn user_facts_by_sentence(
    turns: &[ConversationTurn],
    user_sentences: &[String],
) -> Vec<Vec<FactCandidate>> {
    // Turn by turn: a turn starts afresh, so one that opens
    // without its subject is the speaker's.
    // (with the user's message before it, for whom "he" or "she"
    // at a sentence's start may be)
    let by_turn: Vec<Vec<FactCandidate>> = turns
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            let before = i
                .checked_sub(1)
                .map(|b| text::sentences(&turns[b].user_message))
                .unwrap_or_default();
            text::facts_by_sentence_after(&before, &text::sentences(&t.user_message))
        })
        .collect();
    if by_turn.len() == user_sentences.len() {
        by_turn
    } else {
        text::facts_by_sentence(user_sentences)
    }
}

/// The names the user gave that no sentence of theirs says alone: in
/// answer to the agent, or with a pronoun. `written` are the turns as
/// written, `turns` as truecased.
fn names_answered(turns: &[ConversationTurn], written: &[ConversationTurn]) -> Vec<FactCandidate> {
    // A name given in answer to the agent ("What's his name?" —
    // "Pretzel."), which no sentence of the user's says alone.
    // An answer written without a single capital has no case to tell a
    // name by: its words other than the most common are read as
    // capitalized there, where its place (a word or three alone, right
    // after the agent asked for a name) says it is one ("What's his
    // name?" — "pancracio. like the saint"; not "guess" or "whatever").
    let answered = turns
        .windows(2)
        .zip(written.windows(2))
        .filter_map(|(w, raw)| {
            let answer = if has_capitals(&raw[1].user_message) {
                std::borrow::Cow::Borrowed(w[1].user_message.as_str())
            } else {
                std::borrow::Cow::Owned(capitalized_rare_words(&raw[1].user_message))
            };
            text::answered_name(&w[0].user_message, &w[0].agent_response, &answer)
        });
    let mut answered: Vec<FactCandidate> = answered.collect();
    // A name given with a pronoun ("her name's biscuit"), of the relation
    // or pet spoken of just before it, or in the user's message before.
    for (i, (t, raw)) in turns.iter().zip(written).enumerate() {
        let before = i
            .checked_sub(1)
            .map_or("", |b| turns[b].user_message.as_str());
        answered.extend(text::pronoun_named(
            before,
            &t.user_message,
            !has_capitals(&raw.user_message),
        ));
    }
    answered
}

/// The call's facts: the user's sentences', the names answered and the
/// agent side's, each once for its speaker (normalized), in that order.
fn call_facts(
    sentence_facts: &[Vec<FactCandidate>],
    answered: &[FactCandidate],
    agent_facts: &[Vec<FactCandidate>],
) -> Vec<FactCandidate> {
    let mut facts: Vec<FactCandidate> = Vec::new();
    for f in sentence_facts
        .iter()
        .flatten()
        .chain(answered)
        .chain(agent_facts.iter().flatten())
    {
        let norm = crate::model::normalize_fact(&f.content);
        if !facts
            .iter()
            .any(|o| o.speaker == f.speaker && crate::model::normalize_fact(&o.content) == norm)
        {
            facts.push(f.clone());
        }
    }
    facts
}

/// The summary text of the `kept` user sentences and the agent's line,
/// within [`SESSION_MAX_CHARS`]: the agent's line goes first, then the
/// least informative of the user's.
fn session_summary(
    user_id: &str,
    turn_count: usize,
    topics: &[String],
    user_sentences: &[String],
    mut kept: Vec<usize>,
    agent: Option<String>,
) -> String {
    let headline = if topics.is_empty() {
        String::new()
    } else {
        let head: Vec<String> = topics.iter().take(3).cloned().collect();
        format!("{user_id} talked about {}.", join_words(&head))
    };
    let render = |kept: &[usize], agent: Option<&str>| {
        let mut in_order = kept.to_vec();
        in_order.sort_unstable();
        let quotes: Vec<String> = in_order
            .iter()
            .map(|&i| quotable(&user_sentences[i]))
            .collect();
        let refs: Vec<&str> = quotes.iter().map(String::as_str).collect();
        session_text(&headline, &refs, agent)
    };
    let mut agent = agent;
    let mut summary = render(&kept, agent.as_deref());
    while summary.chars().count() > SESSION_MAX_CHARS && (agent.is_some() || kept.len() > 1) {
        if agent.take().is_none() {
            kept.pop();
        }
        summary = render(&kept, agent.as_deref());
    }
    if summary.is_empty() {
        summary = format!("{user_id} had a short exchange of {turn_count} turn(s).");
    }
    summary
}

/// What a sentence of a summary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The user's own words, quoted.
    Quote,
    /// The agent's answer, quoted.
    Agent,
    /// "mark talked about …".
    Headline,
    /// Any other sentence (a model's summary, an older format).
    Plain,
}

#[derive(Debug, Clone)]
struct Unit {
    kind: Kind,
    /// The sentence without its quotes and lead-in.
    text: String,
    score: f64,
}

/// A key that is the same for the same sentence however it was quoted,
/// cased or punctuated.
fn sentence_key(text: &str) -> String {
    crate::lang::words(text).collect::<Vec<_>>().join(" ")
}

/// [`sentence_key`] as a number: a user's sentence and its quote in a
/// summary have the same (two sentences share one with odds of one in
/// 2^64).
pub fn said_key(text: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::quality::FixedState::with_seed(0x7361_6964).build_hasher();
    for w in crate::lang::words(text) {
        h.write(w.as_bytes());
        h.write_u8(b' ');
    }
    h.finish()
}

/// A sentence of a summary, as this summarizer writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub kind: Kind,
    /// As written (`They said: "…"`).
    pub written: String,
    /// Without its quotes and lead-in.
    pub body: String,
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('"')?.strip_suffix('"')
}

/// A summary's sentences, sorted into kinds (those without a word left
/// out).
pub fn parts(user_id: &str, summary: &str) -> Vec<Part> {
    let headline = format!("{user_id} talked about ");
    let short = format!("{user_id} had a short exchange");
    let mut out: Vec<Part> = Vec::new();
    for s in text::sentences(summary) {
        let after_quote = out.last().is_some_and(|u| u.kind == Kind::Quote);
        let (kind, body) = if let Some(q) = s.strip_prefix("They said: ").and_then(unquote) {
            (Kind::Quote, q.to_string())
        } else if let Some(q) = s.strip_prefix("The agent answered: ").and_then(unquote) {
            (Kind::Agent, q.to_string())
        } else if let Some(q) = unquote(&s).filter(|_| after_quote) {
            (Kind::Quote, q.to_string())
        } else if s.starts_with(&headline) || s.starts_with(&short) {
            (Kind::Headline, s.clone())
        } else {
            (Kind::Plain, s.clone())
        };
        if sentence_key(&body).is_empty() {
            continue;
        }
        out.push(Part {
            kind,
            body,
            written: s,
        });
    }
    out
}

/// A summary's sentences, sorted into kinds and scored.
fn units(user_id: &str, summary: &str) -> Vec<Unit> {
    parts(user_id, summary)
        .into_iter()
        .map(|p| Unit {
            score: match p.kind {
                Kind::Quote => disclosure(&p.body, Voice::User),
                Kind::Plain => disclosure(&p.body, Voice::Summary),
                Kind::Agent => disclosure(&p.body, Voice::Agent),
                Kind::Headline => 0.0,
            },
            kind: p.kind,
            text: p.body,
        })
        .collect()
}

/// Renders the chosen units of each source, in source order and in their
/// order within it: runs of the user's words as one `They said: "…" "…"`.
fn render_combined(sources: &[Vec<Unit>], chosen: &[Vec<bool>]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (units, chosen) in sources.iter().zip(chosen) {
        let mut quotes: Vec<String> = Vec::new();
        let flush = |quotes: &mut Vec<String>, parts: &mut Vec<String>| {
            if !quotes.is_empty() {
                parts.push(format!("They said: {}", quotes.join(" ")));
                quotes.clear();
            }
        };
        for (u, _) in units.iter().zip(chosen).filter(|(_, c)| **c) {
            match u.kind {
                Kind::Quote => quotes.push(format!("\"{}\"", quotable(&u.text))),
                Kind::Agent => {
                    flush(&mut quotes, &mut parts);
                    parts.push(format!("The agent answered: \"{}\"", quotable(&u.text)));
                }
                Kind::Headline | Kind::Plain => {
                    flush(&mut quotes, &mut parts);
                    parts.push(u.text.clone());
                }
            }
        }
        flush(&mut quotes, &mut parts);
    }
    parts.join(" ")
}

/// The reflection JSON combining summaries (oldest first) within
/// `max_chars`: each source's disclosures first, round-robin, then the
/// rest; no sentence twice.
pub fn combine(user_id: &str, sources: &[String], max_chars: usize) -> String {
    let parsed: Vec<Vec<Unit>> = sources.iter().map(|s| units(user_id, s)).collect();
    // Topics and entities from what the sources say, a headline counting
    // for the topics it names ("mark talked about sailing" → "sailing").
    let all: String = parsed
        .iter()
        .flatten()
        .map(|u| match u.kind {
            Kind::Headline => u
                .text
                .split_once(" talked about ")
                .map_or("", |(_, topics)| topics),
            _ => u.text.as_str(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut chosen: Vec<Vec<bool>> = parsed.iter().map(|u| vec![false; u.len()]).collect();
    // Each source's picks in the order they are offered, per phase:
    // disclosures (best first), the rest of what was said (best first),
    // the agent's answers, then headlines.
    let phases: [&dyn Fn(&Unit) -> bool; 4] = [
        &|u| matches!(u.kind, Kind::Quote | Kind::Plain) && u.score >= INFORMATIVE,
        &|u| matches!(u.kind, Kind::Quote | Kind::Plain) && u.score < INFORMATIVE,
        &|u| u.kind == Kind::Agent,
        &|u| u.kind == Kind::Headline,
    ];
    let mut seen: HashSet<String> = HashSet::new();
    let mut length = 0usize;
    for phase in phases {
        let queues: Vec<Vec<usize>> = parsed
            .iter()
            .map(|units| {
                let mut q: Vec<usize> = (0..units.len()).filter(|&i| phase(&units[i])).collect();
                q.sort_by(|&a, &b| units[b].score.total_cmp(&units[a].score).then(a.cmp(&b)));
                q
            })
            .collect();
        let rounds = queues.iter().map(Vec::len).max().unwrap_or(0);
        for round in 0..rounds {
            for (src, queue) in queues.iter().enumerate() {
                let Some(&i) = queue.get(round) else {
                    continue;
                };
                let unit = &parsed[src][i];
                let key = sentence_key(&unit.text);
                if seen.contains(&key) {
                    continue;
                }
                // A sentence adds at least its own length: skip rendering
                // what cannot fit.
                if length + unit.text.chars().count().min(SENTENCE_MAX_CHARS) > max_chars {
                    continue;
                }
                chosen[src][i] = true;
                let with = render_combined(&parsed, &chosen).chars().count();
                if with > max_chars {
                    chosen[src][i] = false;
                    continue;
                }
                seen.insert(key);
                length = with;
            }
        }
    }
    let mut summary = render_combined(&parsed, &chosen);
    if summary.is_empty() {
        let last = sources.last().map(String::as_str).unwrap_or_default();
        summary = crate::model::truncate_chars(last.trim(), max_chars).to_string();
    }
    json!({
        "summary": summary,
        "topics": text::keyword_topics(&all, MAX_TOPICS),
        "entities": text::entities(&all, MAX_ENTITIES),
        "emotional_tone": text::emotional_tone(&all),
        "facts": [],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_reflection;
    use super::*;
    use chrono::Utc;

    fn turn(u: &str, a: &str) -> ConversationTurn {
        ConversationTurn {
            user_message: u.into(),
            agent_response: a.into(),
            timestamp: Utc::now(),
        }
    }

    fn summary_of(raw: &str) -> String {
        parse_reflection(raw, "").summary
    }

    /// Every sentence of `text`, normalized; panics on a repeat.
    fn assert_no_repeats(text: &str) {
        let mut seen = HashSet::new();
        for s in text::sentences(text) {
            let key = sentence_key(s.trim_start_matches("They said: "));
            assert!(seen.insert(key.clone()), "{key:?} repeated in {text}");
        }
    }

    #[test]
    fn the_agent_sides_promises_and_life_are_its_own_facts_and_summarized() {
        let turns = vec![
            turn(
                "My landlord finally fixed the boiler.",
                "About time! I'll send you the number of my plumber anyway, he's in Harlow.",
            ),
            turn(
                "Thanks. How's the allotment?",
                "I finally got the onions in on Sunday. My knee is killing me though.",
            ),
        ];
        let r = parse_reflection(&summarize("ola", &turns), "");
        let of = |speaker| -> Vec<&str> {
            r.facts
                .iter()
                .filter(|f| f.speaker == speaker)
                .map(|f| f.content.as_str())
                .collect()
        };
        let agent = of(crate::model::Speaker::Agent);
        assert!(
            agent.contains(&"Will send ola the number of my plumber anyway"),
            "{agent:?}"
        );
        // none of the agent side's words became the user's
        let user = of(crate::model::Speaker::User);
        assert!(
            user.iter()
                .all(|f| !f.contains("plumber") && !f.contains("onions") && !f.contains("knee")),
            "{user:?}"
        );
        assert!(r.summary.contains("The agent answered:"), "{}", r.summary);
    }

    #[test]
    fn summary_is_deterministic_and_parses() {
        let turns = vec![
            turn(
                "I have an interview with Globex on Friday and I'm nervous.",
                "Let's practice the interview questions together.",
            ),
            turn(
                "They want someone who knows Kubernetes. The salary is $140k.",
                "Your Kubernetes work at Initech is a strong story.",
            ),
        ];
        let a = summarize("mark", &turns);
        assert_eq!(a, summarize("mark", &turns));
        let r = parse_reflection(&a, "");
        assert!(!r.fallback);
        assert!(r.summary.starts_with("mark talked about"));
        assert!(r.topics.contains(&"interview".to_string()));
        assert!(r.topics.contains(&"kubernetes".to_string()));
        for e in ["Globex", "Friday", "$140k", "Initech"] {
            assert!(
                r.entities.contains(&e.to_string()),
                "{e} missing from {:?}",
                r.entities
            );
        }
        assert_eq!(r.emotional_tone.as_deref(), Some("anxious"));
    }

    /// A call of twenty lines: small talk, a documentary, and four things
    /// the user disclosed.
    fn long_call() -> Vec<ConversationTurn> {
        [
            ("Hey there!", "Hi! How are you today?"),
            ("Good, good. Thanks for asking.", "Glad to hear it."),
            (
                "I watched a documentary about octopuses last night.",
                "Octopuses are fascinating animals.",
            ),
            ("It was pretty fun.", "Sounds like a nice evening."),
            (
                "My birthday is the 14th of August, by the way.",
                "Noted, the 14th of August.",
            ),
            ("Anyway.", "What else is on your mind?"),
            (
                "I lost my job at the mechanical engineering company.",
                "I'm sorry to hear that. That is a hard thing.",
            ),
            ("Yeah.", "Take your time."),
            (
                "My sister Leela is a nurse and she offered to help me with my resume.",
                "That's kind of her.",
            ),
            ("The weather is nice.", "It is lovely out."),
            (
                "We moved to Denver in March, so I'm looking at jobs there.",
                "Denver has a strong engineering market.",
            ),
            ("Okay.", "Anything else?"),
            ("Thanks, bye!", "Bye, talk soon."),
        ]
        .iter()
        .map(|(u, a)| turn(u, a))
        .collect()
    }

    #[test]
    fn a_users_sentence_is_about_them_without_saying_i() {
        // The user's own words are their life ("younger sister.", the
        // answer to "which one?"); the agent's only when they say "you".
        for said in ["younger sister.", "It was thirty below here in Duluth."] {
            let user = disclosure(said, Voice::User);
            let agent = disclosure(said, Voice::Agent);
            assert!(user > agent, "{said:?}: {user} against {agent}");
        }
        assert_eq!(disclosure("younger sister.", Voice::User), 1.5);
        assert_eq!(disclosure("younger sister.", Voice::Agent), 0.5);
        // Saying "my" weighs a little more; a summary's is always about them.
        assert!(disclosure("my younger sister.", Voice::User) > 1.5);
        assert_eq!(
            disclosure("younger sister.", Voice::Summary),
            disclosure("my younger sister.", Voice::User)
        );
        // On a fixed call, the same summary whatever the build.
        let call: Vec<ConversationTurn> = [
            "her dog got out at dawn, my sister says",
            "Busy morning before work.",
            "oona rang. the gale took her trampoline into the next street",
            "younger sister. she's fine. the trampoline isn't",
            "Anyway, I should get going.",
        ]
        .iter()
        .map(|u| turn(u, "That sounds like quite a day."))
        .collect();
        let s = summary_of(&summarize("mark", &call));
        assert!(s.contains("\"younger sister.\""), "{s}");
        assert!(!s.contains("get going"), "{s}");
    }

    #[test]
    fn a_summary_keeps_what_was_disclosed_over_small_talk() {
        let s = summary_of(&summarize("mark", &long_call()));
        for said in [
            "My birthday is the 14th of August",
            "I lost my job at the mechanical engineering company",
            "My sister Leela is a nurse",
            "We moved to Denver in March",
        ] {
            assert!(s.contains(said), "{said:?} missing from {s}");
        }
        for small in ["octopuses", "Hey there", "weather", "Thanks, bye"] {
            assert!(!s.contains(small), "{small:?} kept in {s}");
        }
        // in call order
        let at = |x: &str| s.find(x).unwrap_or(usize::MAX);
        assert!(at("birthday") < at("lost my job") && at("lost my job") < at("Denver"));
        assert!(s.chars().count() <= SESSION_MAX_CHARS);
        assert_no_repeats(&s);
    }

    #[test]
    fn a_summary_grows_with_the_call_within_its_caps() {
        let short = summary_of(&summarize("mark", &long_call()[4..7]));
        let mut turns = Vec::new();
        for i in 0..60 {
            turns.push(turn(
                &format!("I moved my savings of ${i}00 to the credit union in Boise on day {i}."),
                "Okay.",
            ));
        }
        let long = summary_of(&summarize("mark", &turns));
        let quoted = |s: &str| s.matches("\" \"").count() + 1;
        assert!(quoted(&long) > quoted(&short), "{short}\n{long}");
        assert!(quoted(&long) <= MAX_KEPT);
        assert!(long.chars().count() <= SESSION_MAX_CHARS, "{long}");
    }

    #[test]
    fn long_sentences_are_cut_and_split_again_as_one() {
        let long = format!("I moved to Denver with {} boxes", "many ".repeat(100));
        let turns = vec![
            turn(&long, "Ok."),
            turn("My sister Leela is a nurse.", "Ok."),
        ];
        let s = summary_of(&summarize("mark", &turns));
        let units = units("mark", &s);
        let quotes: Vec<&Unit> = units.iter().filter(|u| u.kind == Kind::Quote).collect();
        assert_eq!(quotes.len(), 2, "{s}");
        assert!(quotes[0].text.ends_with("...") && quotes[0].text.len() <= SENTENCE_MAX_CHARS + 3);
        assert_eq!(quotes[1].text, "My sister Leela is a nurse.");
    }

    #[test]
    fn a_call_of_small_talk_still_has_a_summary() {
        let turns = vec![turn("Hi!", "Hello!"), turn("Thanks, bye.", "Bye!")];
        let s = summary_of(&summarize("mark", &turns));
        assert!(!s.is_empty());
    }

    #[test]
    fn names_are_what_a_call_writes_with_a_capital_inside_a_sentence() {
        let names = names_written(
            ["Poor Nugget. And Mere is...? OK, an ED visit with Lachie-Rose. Tip: Try it."]
                .into_iter(),
        );
        for n in ["nugget", "mere", "lachie", "rose"] {
            assert!(names.contains(n), "{n} in {names:?}");
        }
        // a sentence's first word, a stopword, an acronym, a two-letter
        // word, the first word after a colon
        for n in ["poor", "and", "ok", "ed", "an", "try"] {
            assert!(!names.contains(n), "{n} in {names:?}");
        }
    }

    #[test]
    fn a_caseless_message_takes_the_case_the_call_gives_its_words() {
        let names: HashSet<String> = ["nugget".to_string()].into();
        assert_eq!(
            truecased("nugget ate soap, i'm told. nuggets everywhere", &names).as_deref(),
            Some("Nugget ate soap, I'm told. nuggets everywhere")
        );
        // a message with a capital of its own is read as written
        assert_eq!(truecased("Nugget ate soap, i'm told", &names), None);
        // addresses and paths are left as they are
        assert_eq!(
            truecased("mail nugget@example.org or see /i/nugget", &names).as_deref(),
            Some("mail nugget@example.org or see /i/nugget")
        );
        assert_eq!(truecased("", &names).as_deref(), Some(""));
    }

    #[test]
    fn a_lowercase_writers_facts_are_read_when_the_agent_writes_the_name() {
        let turns = vec![
            turn(
                "we picked up the puppy saturday",
                "Lovely! What's she called?",
            ),
            turn("biscuit. chews everything", "What a good name, Biscuit!"),
            turn("my sister mere is a nurse", "That's a demanding job."),
        ];
        let r = parse_reflection(&summarize("ada", &turns), "");
        let facts: Vec<&str> = r.facts.iter().map(|f| f.content.as_str()).collect();
        assert!(facts.iter().any(|f| f.contains("Biscuit")), "{facts:?}");
        // "mere" is not written with a capital anywhere in the call: no
        // name is made up for it.
        assert!(!facts.iter().any(|f| f.contains("Mere")), "{facts:?}");
    }

    #[test]
    fn a_lowercase_writers_name_given_in_answer_to_the_agent_is_read() {
        let turns = vec![
            turn(
                "sorry im lying on the floor bc the cat is on my chest",
                "Ha, you're his property now. What's his name?",
            ),
            turn("pancracio. like the saint. he is not a saint", "Ha."),
            turn(
                "my grandma just learned to send voice notes",
                "That's adorable. What's her name?",
            ),
            turn("gladys!! shes 88", "Lovely."),
            turn("we got a puppy", "What's she called?"),
            // not a name: a reply word, and nothing at all
            turn("idk yet. still deciding", "Take your time."),
            turn("and a kitten", "What's the kitten called?"),
            turn("whatever. we cant agree", "Ha, take your time."),
            turn("the hamster too", "Oh! What's his name?"),
            turn("mr whiskers", "Ha!"),
        ];
        let r = parse_reflection(&summarize("trini", &turns), "");
        let facts: Vec<&str> = r.facts.iter().map(|f| f.content.as_str()).collect();
        assert!(facts.contains(&"Has a cat named Pancracio"), "{facts:?}");
        assert!(facts.iter().any(|f| f.contains("Gladys")), "{facts:?}");
        assert!(facts.iter().any(|f| f.contains("Mr Whiskers")), "{facts:?}");
        for not_a_name in ["Idk", "Whatever"] {
            assert!(!facts.iter().any(|f| f.contains(not_a_name)), "{facts:?}");
        }
        assert_eq!(
            capitalized_rare_words("i'm fine, pancracio. guess"),
            "I'm fine, Pancracio. guess"
        );
    }

    #[test]
    fn media_descriptions_are_content_not_topics() {
        let turns = vec![
            turn(
                "[shares a photo of their new puppy Biscuit at the lake]",
                "What a cute puppy!",
            ),
            turn(
                "[shares a photo of a sunset over the lake] We adopted Biscuit on Saturday.",
                "Congratulations on the adoption.",
            ),
        ];
        let r = parse_reflection(&summarize("ada", &turns), "");
        for t in ["shares", "photo", "sunset"] {
            assert!(!r.topics.contains(&t.to_string()), "{t} in {:?}", r.topics);
        }
        assert!(
            r.summary
                .contains("[shares a photo of their new puppy Biscuit"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn combines_never_repeat_a_sentence_and_stay_under_their_cap() {
        // A topic re-made as each of 45 sessions joins: the previous topic
        // summary and the newest members, again and again.
        let sessions: Vec<String> = (0..45)
            .map(|i| {
                let s = summarize(
                    "mark",
                    &[
                        turn("I'm still job hunting.", "Keep going."),
                        turn(
                            &format!("I applied to company number {} today.", i % 7),
                            "Good.",
                        ),
                        turn(
                            "I lost my job at the mechanical engineering company.",
                            "Sorry.",
                        ),
                    ],
                );
                summary_of(&s)
            })
            .collect();
        let mut topic = String::new();
        for i in 0..sessions.len() {
            let mut sources = Vec::new();
            if !topic.is_empty() {
                sources.push(topic.clone());
            }
            sources.extend(sessions[i.saturating_sub(5)..=i].iter().cloned());
            topic = summary_of(&combine("mark", &sources, 1_500));
            assert!(topic.chars().count() <= 1_500, "{} chars", topic.len());
            assert_no_repeats(&topic);
        }
        assert!(topic.contains("I lost my job at the mechanical engineering company"));
        for cap in [200, 600] {
            let s = summary_of(&combine("mark", &sessions, cap));
            assert!(
                s.chars().count() <= cap,
                "{} > {cap}: {s}",
                s.chars().count()
            );
        }
    }

    #[test]
    fn a_week_keeps_each_days_disclosures() {
        let days: Vec<String> = [
            "I lost my job at the mechanical engineering company.",
            "My birthday is the 14th of August.",
            "We moved to Denver in March.",
            "My sister Leela is a nurse.",
            "I signed up for the Chicago marathon.",
            "I'm allergic to peanuts.",
            "I started learning Japanese.",
        ]
        .iter()
        .map(|said| {
            let mut turns = vec![turn(said, "Noted.")];
            for i in 0..15 {
                turns.push(turn(
                    &format!("I spent ${i}0 on groceries at Trader Joe's on day {i}."),
                    "Okay.",
                ));
            }
            summary_of(&summarize("mark", &turns))
        })
        .collect();
        let week = summary_of(&combine("mark", &days, 1_500));
        for said in [
            "lost my job",
            "14th of August",
            "Denver",
            "Leela",
            "Chicago marathon",
            "peanuts",
            "Japanese",
        ] {
            assert!(
                week.contains(said),
                "{said:?} missing from the week: {week}"
            );
        }
        assert!(week.chars().count() <= 1_500);
        assert_no_repeats(&week);
    }
}
