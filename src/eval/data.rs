//! The evaluation's hand-written material: personas (the facts each states,
//! the small talk that is theirs alone, the questions about them) and the
//! pools of everyday small talk the generator draws from, each persona
//! naming its pool. Each is a plain text file under `src/eval/data/`,
//! compiled in.
//!
//! A persona file:
//!
//! ```text
//! persona maya            # id
//! agent kairix            # the agent the persona talks to
//! user maya               # the user id
//! split dev               # dev or holdout
//! start 2026-01-05        # the day of the first call
//! calls 46                # how many calls
//! pool dev                # the small-talk pool
//! topics greeting goodbye weather food   # its topics this persona uses
//!                                        # (all without the line)
//!
//! talk                    # small talk of this persona's (used once)
//! > user message
//! < agent response
//!
//! fact dog @0.2 after partner   # a fact, where in the calls (0..1), and
//! > user message                # a fact it must come after (optional)
//! < agent response              # one or more turns, stated once
//!
//! q dog pets_possessions | What's my dog called? | Pretzel
//! q city updates_current | Where do I live now? | Denver | Austin
//! ```
//!
//! A question names the fact that answers it, its category, its text, the
//! accepted answers and, for an updated fact, the answers that were true
//! before (`;` between alternatives). `@date 9 March` stands for the usual
//! ways of writing that day ("9 March", "March 9th", "9th of March", …).
//!
//! A pool file: `pool NAME`, then `topic NAME` sections of `>` user
//! sentences, each followed by the agent's `<` answer; topics named
//! `greeting…` open calls and `goodbye…` close them.

use std::collections::BTreeSet;
use std::fmt;

use chrono::NaiveDate;
use serde::Serialize;

/// The persona files, compiled in.
const PERSONAS: &[(&str, &str)] = &[
    ("maya.txt", include_str!("data/maya.txt")),
    ("tom.txt", include_str!("data/tom.txt")),
    ("priya.txt", include_str!("data/priya.txt")),
    ("walter.txt", include_str!("data/walter.txt")),
    ("sam.txt", include_str!("data/sam.txt")),
    ("rosa.txt", include_str!("data/rosa.txt")),
    ("kiri.txt", include_str!("data/kiri.txt")),
    ("noreen.txt", include_str!("data/noreen.txt")),
    ("gus.txt", include_str!("data/gus.txt")),
    ("cornelia.txt", include_str!("data/cornelia.txt")),
    ("holdout_benji.txt", include_str!("data/holdout_benji.txt")),
    ("holdout_jinty.txt", include_str!("data/holdout_jinty.txt")),
    (
        "holdout_lorcan.txt",
        include_str!("data/holdout_lorcan.txt"),
    ),
    ("holdout_bogna.txt", include_str!("data/holdout_bogna.txt")),
    ("holdout_ngozi.txt", include_str!("data/holdout_ngozi.txt")),
    (
        "holdout_hollis.txt",
        include_str!("data/holdout_hollis.txt"),
    ),
    (
        "holdout_gerrit.txt",
        include_str!("data/holdout_gerrit.txt"),
    ),
    (
        "holdout_noemie.txt",
        include_str!("data/holdout_noemie.txt"),
    ),
    (
        "holdout_tevita.txt",
        include_str!("data/holdout_tevita.txt"),
    ),
    ("holdout_ines.txt", include_str!("data/holdout_ines.txt")),
    (
        "holdout_ouseph.txt",
        include_str!("data/holdout_ouseph.txt"),
    ),
    ("holdout_trini.txt", include_str!("data/holdout_trini.txt")),
    ("holdout_raili.txt", include_str!("data/holdout_raili.txt")),
    (
        "holdout_dilwyn.txt",
        include_str!("data/holdout_dilwyn.txt"),
    ),
    (
        "holdout_marlee.txt",
        include_str!("data/holdout_marlee.txt"),
    ),
    (
        "holdout_ambrose.txt",
        include_str!("data/holdout_ambrose.txt"),
    ),
    ("holdout_perla.txt", include_str!("data/holdout_perla.txt")),
    (
        "holdout_krista.txt",
        include_str!("data/holdout_krista.txt"),
    ),
    ("holdout_deise.txt", include_str!("data/holdout_deise.txt")),
    (
        "holdout_kelvin.txt",
        include_str!("data/holdout_kelvin.txt"),
    ),
    (
        "holdout_dottie.txt",
        include_str!("data/holdout_dottie.txt"),
    ),
    (
        "holdout_fergus.txt",
        include_str!("data/holdout_fergus.txt"),
    ),
];

/// The small-talk pools, compiled in.
const POOLS: &[(&str, &str)] = &[
    ("talk_dev.txt", include_str!("data/talk_dev.txt")),
    ("talk_holdout.txt", include_str!("data/talk_holdout.txt")),
    ("talk_holdout2.txt", include_str!("data/talk_holdout2.txt")),
    ("talk_holdout3.txt", include_str!("data/talk_holdout3.txt")),
    ("talk_holdout4.txt", include_str!("data/talk_holdout4.txt")),
    ("talk_holdout5.txt", include_str!("data/talk_holdout5.txt")),
    ("talk_holdout6.txt", include_str!("data/talk_holdout6.txt")),
    ("talk_holdout7.txt", include_str!("data/talk_holdout7.txt")),
    ("talk_holdout8.txt", include_str!("data/talk_holdout8.txt")),
    ("talk_holdout9.txt", include_str!("data/talk_holdout9.txt")),
    (
        "talk_holdout10.txt",
        include_str!("data/talk_holdout10.txt"),
    ),
    (
        "talk_holdout11.txt",
        include_str!("data/talk_holdout11.txt"),
    ),
    (
        "talk_holdout12.txt",
        include_str!("data/talk_holdout12.txt"),
    ),
    (
        "talk_holdout13.txt",
        include_str!("data/talk_holdout13.txt"),
    ),
    (
        "talk_holdout14.txt",
        include_str!("data/talk_holdout14.txt"),
    ),
];

/// A data file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct DataError {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

/// Which part of the set a persona belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Looked at while working on recall.
    Dev,
    /// Kept aside: checked once, at the end.
    Holdout,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Dev => "dev",
            Split::Holdout => "holdout",
        }
    }
}

/// What a question asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Relations, friends, colleagues: names and what they do.
    People,
    /// Pets and things the user owns.
    PetsPossessions,
    /// Where the user lives, grew up, goes.
    Places,
    /// Employer, role, manager.
    Work,
    /// Books, languages, sports, classes, races.
    Activities,
    /// Birthdays, anniversaries, appointments.
    Dates,
    /// Likes, dislikes, allergies, health.
    PreferencesHealth,
    /// Something that happened, told in a call.
    Events,
    /// A fact that changed: its current value.
    UpdatesCurrent,
    /// A fact that changed: its earlier value.
    UpdatesEarlier,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::People,
        Category::PetsPossessions,
        Category::Places,
        Category::Work,
        Category::Activities,
        Category::Dates,
        Category::PreferencesHealth,
        Category::Events,
        Category::UpdatesCurrent,
        Category::UpdatesEarlier,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::People => "people",
            Category::PetsPossessions => "pets_possessions",
            Category::Places => "places",
            Category::Work => "work",
            Category::Activities => "activities",
            Category::Dates => "dates",
            Category::PreferencesHealth => "preferences_health",
            Category::Events => "events",
            Category::UpdatesCurrent => "updates_current",
            Category::UpdatesEarlier => "updates_earlier",
        }
    }

    fn parse(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One exchange: what the user said and what the agent answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exchange {
    pub user: String,
    pub agent: String,
}

/// A fact, told in one or more consecutive turns of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct FactSpec {
    pub id: String,
    /// Where among the persona's calls it is told, 0 (first) to 1 (last).
    pub at: f64,
    /// A fact that must be told in an earlier call.
    pub after: Option<String>,
    pub turns: Vec<Exchange>,
}

/// A question about a persona's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuestionSpec {
    /// The fact that answers it.
    pub fact: String,
    pub category: Category,
    pub text: String,
    /// Any of these in the context counts as the answer.
    pub answers: Vec<String>,
    /// What was true before an update.
    pub stale: Vec<String>,
}

/// A persona: who they are, what they say, what they are asked.
#[derive(Debug, Clone, PartialEq)]
pub struct PersonaSpec {
    pub id: String,
    pub agent: String,
    pub user: String,
    pub split: Split,
    pub start: NaiveDate,
    pub calls: usize,
    pub pool: String,
    /// The pool's topics this persona talks about (all when empty).
    pub topics: Vec<String>,
    /// Small talk of the persona's own, each used once.
    pub talk: Vec<Vec<Exchange>>,
    pub facts: Vec<FactSpec>,
    pub questions: Vec<QuestionSpec>,
}

/// A topic of small talk: things a user might say, each with an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub exchanges: Vec<Exchange>,
}

/// The small talk of one split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub topics: Vec<Topic>,
}

impl Topic {
    pub fn is_greeting(&self) -> bool {
        self.name.starts_with("greeting")
    }

    pub fn is_goodbye(&self) -> bool {
        self.name.starts_with("goodbye")
    }
}

impl Pool {
    /// The topics a persona uses: greetings, goodbyes, and small talk.
    pub fn topics_of(&self, p: &PersonaSpec) -> [Vec<&Topic>; 3] {
        let mine: Vec<&Topic> = self
            .topics
            .iter()
            .filter(|t| p.topics.is_empty() || p.topics.contains(&t.name))
            .collect();
        [
            mine.iter().copied().filter(|t| t.is_greeting()).collect(),
            mine.iter().copied().filter(|t| t.is_goodbye()).collect(),
            mine.iter()
                .copied()
                .filter(|t| !t.is_greeting() && !t.is_goodbye())
                .collect(),
        ]
    }
}

/// Every persona and pool in the repository.
pub fn load() -> Result<(Vec<PersonaSpec>, Vec<Pool>), DataError> {
    let pools = POOLS
        .iter()
        .map(|(f, t)| parse_pool(f, t))
        .collect::<Result<Vec<_>, _>>()?;
    let personas = PERSONAS
        .iter()
        .map(|(f, t)| parse_persona(f, t))
        .collect::<Result<Vec<_>, _>>()?;
    for p in &personas {
        let err = |reason: String| DataError {
            file: p.id.clone(),
            line: 0,
            reason,
        };
        let Some(pool) = pools.iter().find(|pool| pool.name == p.pool) else {
            return Err(err(format!("no pool named {:?}", p.pool)));
        };
        if let Some(t) = p
            .topics
            .iter()
            .find(|t| pool.topics.iter().all(|x| &x.name != *t))
        {
            return Err(err(format!("no topic {t:?} in pool {:?}", p.pool)));
        }
        let [hello, bye, talk] = pool.topics_of(p);
        if hello.is_empty() || bye.is_empty() || talk.len() < 2 {
            return Err(err(
                "a persona needs a greeting, a goodbye and two topics of small talk".into(),
            ));
        }
    }
    Ok((personas, pools))
}

/// The lines that mean something, with their numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Parses a pool file.
pub fn parse_pool(file: &str, text: &str) -> Result<Pool, DataError> {
    let err = |line: usize, reason: String| DataError {
        file: file.to_string(),
        line,
        reason,
    };
    let mut name = None;
    let mut topics: Vec<Topic> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in lines(text) {
        if let Some(rest) = line.strip_prefix('>') {
            if topics.is_empty() {
                return Err(err(n, "a sentence before any topic".into()));
            }
            if pending.is_some() {
                return Err(err(n, "two sentences without an answer".into()));
            }
            pending = Some((n, rest.trim().to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix('<') {
            let (Some((_, user)), Some(t)) = (pending.take(), topics.last_mut()) else {
                return Err(err(n, "an answer without a sentence".into()));
            };
            t.exchanges.push(Exchange {
                user,
                agent: rest.trim().to_string(),
            });
            continue;
        }
        if let Some((m, _)) = pending {
            return Err(err(m, "a sentence without an answer".into()));
        }
        if let Some(rest) = line.strip_prefix("pool ") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("topic ") {
            let t = rest.trim().to_string();
            if topics.iter().any(|x| x.name == t) {
                return Err(err(n, format!("topic {t:?} twice")));
            }
            topics.push(Topic {
                name: t,
                exchanges: Vec::new(),
            });
        } else {
            return Err(err(n, format!("cannot read {line:?}")));
        }
    }
    if let Some((m, _)) = pending {
        return Err(err(m, "a sentence without an answer".into()));
    }
    let name = name.ok_or_else(|| err(0, "no `pool` line".into()))?;
    if let Some(t) = topics.iter().find(|t| t.exchanges.len() < 2) {
        return Err(err(0, format!("topic {:?} needs two sentences", t.name)));
    }
    Ok(Pool { name, topics })
}

/// Where the `>`/`<` lines being read go.
enum Block {
    None,
    Talk,
    Fact,
}

/// Parses a persona file.
pub fn parse_persona(file: &str, text: &str) -> Result<PersonaSpec, DataError> {
    let err = |line: usize, reason: String| DataError {
        file: file.to_string(),
        line,
        reason,
    };
    let mut id = None;
    let mut agent = None;
    let mut user = None;
    let mut split = None;
    let mut start = None;
    let mut calls = None;
    let mut pool = None;
    let mut topics = Vec::new();
    let mut talk: Vec<Vec<Exchange>> = Vec::new();
    let mut facts: Vec<FactSpec> = Vec::new();
    let mut questions = Vec::new();
    let mut block = Block::None;
    // A user message waiting for its response.
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in lines(text) {
        if let Some(rest) = line.strip_prefix('>') {
            if matches!(block, Block::None) {
                return Err(err(n, "a message outside a `talk` or `fact`".into()));
            }
            if pending.is_some() {
                return Err(err(n, "two user messages without a response".into()));
            }
            pending = Some((n, rest.trim().to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix('<') {
            let Some((_, u)) = pending.take() else {
                return Err(err(n, "a response without a user message".into()));
            };
            let ex = Exchange {
                user: u,
                agent: rest.trim().to_string(),
            };
            match block {
                Block::Talk => talk.last_mut().map(|t| t.push(ex)),
                Block::Fact => facts.last_mut().map(|f| f.turns.push(ex)),
                Block::None => None,
            };
            continue;
        }
        if let Some((m, _)) = pending {
            return Err(err(m, "a user message without a response".into()));
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        match word {
            "persona" => id = Some(rest.to_string()),
            "agent" => agent = Some(rest.to_string()),
            "user" => user = Some(rest.to_string()),
            "pool" => pool = Some(rest.to_string()),
            "topics" => topics = rest.split_whitespace().map(str::to_string).collect(),
            "split" => {
                split = Some(match rest {
                    "dev" => Split::Dev,
                    "holdout" => Split::Holdout,
                    other => return Err(err(n, format!("split {other:?}: dev or holdout"))),
                })
            }
            "start" => {
                start = Some(
                    NaiveDate::parse_from_str(rest, "%Y-%m-%d")
                        .map_err(|e| err(n, format!("start {rest:?}: {e}")))?,
                )
            }
            "calls" => {
                calls = Some(
                    rest.parse::<usize>()
                        .map_err(|e| err(n, format!("calls {rest:?}: {e}")))?,
                )
            }
            "talk" => {
                talk.push(Vec::new());
                block = Block::Talk;
            }
            "fact" => {
                facts.push(parse_fact(rest, &facts).map_err(|r| err(n, r))?);
                block = Block::Fact;
            }
            "q" => {
                questions.push(parse_question(rest).map_err(|r| err(n, r))?);
                block = Block::None;
            }
            other => return Err(err(n, format!("unknown line {other:?}"))),
        }
    }
    if let Some((m, _)) = pending {
        return Err(err(m, "a user message without a response".into()));
    }
    let missing = |what: &str| err(0, format!("no `{what}` line"));
    let spec = PersonaSpec {
        id: id.ok_or_else(|| missing("persona"))?,
        agent: agent.ok_or_else(|| missing("agent"))?,
        user: user.ok_or_else(|| missing("user"))?,
        split: split.ok_or_else(|| missing("split"))?,
        start: start.ok_or_else(|| missing("start"))?,
        calls: calls.ok_or_else(|| missing("calls"))?,
        pool: pool.ok_or_else(|| missing("pool"))?,
        topics,
        talk,
        facts,
        questions,
    };
    if let Some(t) = spec.talk.iter().position(Vec::is_empty) {
        return Err(err(0, format!("talk block {} is empty", t + 1)));
    }
    if let Some(f) = spec.facts.iter().find(|f| f.turns.is_empty()) {
        return Err(err(0, format!("fact {:?} has no turns", f.id)));
    }
    for f in &spec.facts {
        let Some(after) = &f.after else { continue };
        let Some(o) = spec.facts.iter().find(|o| &o.id == after) else {
            return Err(err(
                0,
                format!("fact {:?} after {after:?}: no such fact", f.id),
            ));
        };
        if o.at >= f.at {
            return Err(err(
                0,
                format!(
                    "fact {:?} at {} is placed before {after:?} at {}",
                    f.id, f.at, o.at
                ),
            ));
        }
    }
    let ids: BTreeSet<&str> = spec.facts.iter().map(|f| f.id.as_str()).collect();
    if let Some(q) = spec
        .questions
        .iter()
        .find(|q| !ids.contains(q.fact.as_str()))
    {
        return Err(err(
            0,
            format!("question {:?} names no fact {:?}", q.text, q.fact),
        ));
    }
    Ok(spec)
}

fn parse_fact(rest: &str, earlier: &[FactSpec]) -> Result<FactSpec, String> {
    let mut words = rest.split_whitespace();
    let id = words.next().ok_or("a fact needs an id")?.to_string();
    if earlier.iter().any(|f| f.id == id) {
        return Err(format!("fact {id:?} twice"));
    }
    let at = words
        .next()
        .and_then(|w| w.strip_prefix('@'))
        .and_then(|w| w.parse::<f64>().ok())
        .filter(|a| (0.0..=1.0).contains(a))
        .ok_or("a fact needs a place @0..1 after its id")?;
    let after = match (words.next(), words.next()) {
        (None, _) => None,
        (Some("after"), Some(other)) => Some(other.to_string()),
        _ => return Err("after the place, only `after ID`".into()),
    };
    Ok(FactSpec {
        id,
        at,
        after,
        turns: Vec::new(),
    })
}

fn parse_question(rest: &str) -> Result<QuestionSpec, String> {
    let fields: Vec<&str> = rest.split('|').map(str::trim).collect();
    if !(3..=4).contains(&fields.len()) {
        return Err("q FACT CATEGORY | text | answers | stale answers (optional)".into());
    }
    let (fact, category) = fields[0].split_once(' ').ok_or("q FACT CATEGORY | …")?;
    let category = Category::parse(category.trim())
        .ok_or_else(|| format!("unknown category {:?}", category.trim()))?;
    let answers = expand(fields[2]);
    let stale = fields.get(3).map(|s| expand(s)).unwrap_or_default();
    if fields[1].is_empty() || answers.is_empty() {
        return Err("a question needs a text and an answer".into());
    }
    if !stale.is_empty() && category != Category::UpdatesCurrent {
        return Err("only updates_current questions have stale answers".into());
    }
    if category == Category::UpdatesCurrent && stale.is_empty() {
        return Err("an updates_current question needs the earlier answers".into());
    }
    Ok(QuestionSpec {
        fact: fact.trim().to_string(),
        category,
        text: fields[1].to_string(),
        answers,
        stale,
    })
}

/// `a; b; @date 9 March` → the answers, dates written every usual way.
pub(crate) fn expand(field: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in field.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        match a.strip_prefix("@date ") {
            Some(d) => out.extend(date_forms(d.trim())),
            None => out.push(a.to_string()),
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|a| seen.insert(a.to_lowercase()));
    out
}

/// "9 March" → "9 March", "9th March", "9th of March", "March 9",
/// "March 9th", "Mar 9", "9 Mar", and the day spelled out, as speech is
/// written down: "ninth of March", "March the ninth", "March ninth".
fn date_forms(d: &str) -> Vec<String> {
    let Some((day, month)) = d.split_once(' ') else {
        return vec![d.to_string()];
    };
    let Ok(n) = day.parse::<u32>() else {
        return vec![d.to_string()];
    };
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    let short: String = month.chars().take(3).collect();
    let mut forms = vec![
        format!("{n} {month}"),
        format!("{n}{suffix} {month}"),
        format!("{n}{suffix} of {month}"),
        format!("{month} {n}"),
        format!("{month} {n}{suffix}"),
        format!("{month} the {n}{suffix}"),
        format!("{short} {n}"),
        format!("{n} {short}"),
    ];
    if let Some(spelled) = spelled_ordinal(n) {
        forms.extend([
            format!("{spelled} of {month}"),
            format!("{month} the {spelled}"),
            format!("{month} {spelled}"),
        ]);
    }
    forms
}

/// A day of the month as an ordinal word: 3 → "third", 21 →
/// "twenty-first".
fn spelled_ordinal(n: u32) -> Option<String> {
    const ORDINALS: [&str; 20] = [
        "first",
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "ninth",
        "tenth",
        "eleventh",
        "twelfth",
        "thirteenth",
        "fourteenth",
        "fifteenth",
        "sixteenth",
        "seventeenth",
        "eighteenth",
        "nineteenth",
        "twentieth",
    ];
    match n {
        1..=20 => Some(ORDINALS[n as usize - 1].to_string()),
        21..=29 => Some(format!("twenty-{}", ORDINALS[n as usize - 21])),
        30 => Some("thirtieth".to_string()),
        31 => Some("thirty-first".to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_every_usual_way() {
        let forms = expand("@date 22 August; Aug 22nd");
        for f in [
            "22 August",
            "22nd of August",
            "August 22nd",
            "Aug 22",
            "Aug 22nd",
        ] {
            assert!(forms.iter().any(|x| x == f), "{f} in {forms:?}");
        }
        assert!(expand("@date 11 May").contains(&"11th May".to_string()));
        assert!(expand("@date 3 May").contains(&"May 3rd".to_string()));
        // spelled out, as a transcript writes what was said
        let forms = expand("@date 31 December");
        for f in ["thirty-first of December", "December the thirty-first"] {
            assert!(forms.iter().any(|x| x == f), "{f} in {forms:?}");
        }
        assert!(expand("@date 12 May").contains(&"twelfth of May".to_string()));
    }

    #[test]
    fn a_persona_file_is_read_and_checked() {
        let text = "persona p\nagent a\nuser u\nsplit dev\nstart 2026-01-05\ncalls 3\npool dev\n\
                    fact dog @0.1\n> We named the puppy Pretzel.\n< Cute!\n\
                    q dog pets_possessions | What's my dog called? | Pretzel\n";
        let p = parse_persona("p.txt", text).unwrap();
        assert_eq!(p.facts[0].turns[0].user, "We named the puppy Pretzel.");
        assert_eq!(p.questions[0].answers, vec!["Pretzel".to_string()]);
        let bad = text.replace("q dog", "q cat");
        assert!(parse_persona("p.txt", &bad)
            .unwrap_err()
            .reason
            .contains("names no fact"));
        let bad = text.replace("< Cute!\n", "");
        assert_eq!(parse_persona("p.txt", &bad).unwrap_err().line, 9);
    }
}
