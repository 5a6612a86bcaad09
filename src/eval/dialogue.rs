//! The dialogue split: long relationships between two people, both of
//! whom tell about their lives, read from files outside the library
//! (`eval/dialogues/{dev,holdout}/*.txt`; the format is in
//! `eval/dialogues/FORMAT.md`). Questions ask about either side, in the
//! third person by name or in the second person, about what the agent side
//! recommended or promised, about dates worked out from the calls' dates,
//! and across two calls.
//!
//! Each conversation is replayed into a runtime of its own on the given
//! settings in virtual time (its calls at their times, every silence
//! timer, reflection and rollup running), and a day after its last call
//! each question is asked as the user's next message. Beside recall's
//! context, under the same budget and token count: BM25 over the raw
//! turns (both sides, stemmed, the budget filled), BM25 whose hits come
//! with the turns either side of them, and whether the answer's words are
//! in the conversation at all. A control asks an unrelated message and
//! checks its context for the same answer: what is found without being
//! looked for.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDateTime, Utc};
use recall_actors::clock::Clock;
use recall_actors::context::{CharEstimate, TokenCounter};
use recall_actors::settings::Settings;
use serde::Serialize;

use super::baseline::{normalize, render_turn};
use super::data::Split;
use super::generate::Turn;
use super::{context_text, EvalError};
use crate::runtime::{ContextOptions, Runtime, RuntimeBuilder};

/// What a question asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Stated in one place.
    Single,
    /// What one side recommended, explained or promised.
    Advice,
    /// When something happened or will happen.
    Temporal,
    /// Needs two statements made in different calls.
    Multi,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Single, Kind::Advice, Kind::Temporal, Kind::Multi];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Single => "single",
            Kind::Advice => "advice",
            Kind::Temporal => "temporal",
            Kind::Multi => "multi",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Whose words hold the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    User,
    Agent,
    Both,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::User, Side::Agent, Side::Both];

    pub fn as_str(self) -> &'static str {
        match self {
            Side::User => "user",
            Side::Agent => "agent",
            Side::Both => "both",
        }
    }

    fn parse(s: &str) -> Option<Side> {
        Side::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An accepted answer: parts that must all be present, each written in
/// any of its forms.
pub type Answer = Vec<Vec<String>>;

/// One question of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DialogueQuestion {
    pub kind: Kind,
    pub side: Side,
    pub text: String,
    /// Accepted answers: any one counts.
    pub answers: Vec<Answer>,
    /// Values that were true earlier.
    pub earlier: Vec<Answer>,
    /// The question names a participant (third person).
    pub named: bool,
    /// An answer is a date (`@date`): worked out from a call's date, not
    /// always said.
    pub dated: bool,
    /// Where in its file.
    pub line: usize,
}

/// One call: when it started and its turns (the user's message, the
/// agent side's answer).
#[derive(Debug, Clone, PartialEq)]
pub struct DialogueCall {
    pub start: DateTime<Utc>,
    pub turns: Vec<(String, String)>,
}

impl DialogueCall {
    /// When its `i`th turn is replayed (the `turns.len()`th: when it
    /// ends).
    pub fn turn_at(&self, i: usize) -> DateTime<Utc> {
        self.start + chrono::Duration::seconds(TURN_SECS * (i as i64 + 1))
    }
}

/// One conversation file.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub id: String,
    pub user: String,
    pub agent: String,
    pub split: Split,
    pub calls: Vec<DialogueCall>,
    pub questions: Vec<DialogueQuestion>,
}

/// A dialogue file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum DialogueError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: {reason}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("no dialogue files under {}", .0.display())]
    Empty(PathBuf),
}

/// Seconds between the turns of a replayed call.
const TURN_SECS: i64 = 40;

/// Reads every `*.txt` under `dir/<split>/` (both splits for `None`),
/// sorted by file name; only the conversations `only` names when it is not
/// empty.
pub fn load(
    dir: &Path,
    split: Option<Split>,
    only: &[String],
) -> Result<Vec<Conversation>, DialogueError> {
    let mut files = Vec::new();
    for s in [Split::Dev, Split::Holdout] {
        if split.is_some_and(|x| x != s) {
            continue;
        }
        let sub = dir.join(s.as_str());
        let entries = std::fs::read_dir(&sub).map_err(|source| DialogueError::Read {
            path: sub.clone(),
            source,
        })?;
        for e in entries {
            let e = e.map_err(|source| DialogueError::Read {
                path: sub.clone(),
                source,
            })?;
            let p = e.path();
            if p.extension().is_some_and(|x| x == "txt") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| DialogueError::Read {
            path: path.clone(),
            source,
        })?;
        let c = parse(&text).map_err(|(line, reason)| DialogueError::Invalid {
            path: path.clone(),
            line,
            reason,
        })?;
        if only.is_empty() || only.contains(&c.id) {
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err(DialogueError::Empty(dir.to_path_buf()));
    }
    Ok(out)
}

/// Reads one dialogue file's text; an error names the line.
pub fn parse(text: &str) -> Result<Conversation, (usize, String)> {
    let mut header: BTreeMap<&str, String> = BTreeMap::new();
    let mut calls: Vec<DialogueCall> = Vec::new();
    let mut questions = Vec::new();
    let mut open_user: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = match raw.find("  #") {
            Some(at) => &raw[..at],
            None => raw,
        }
        .trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(said) = line.strip_prefix('>') {
            if calls.is_empty() {
                return Err((n, "a line before the first call".into()));
            }
            if open_user.is_some() {
                return Err((n, "two user lines in a row".into()));
            }
            open_user = Some((n, said.trim().to_string()));
            continue;
        }
        if let Some(said) = line.strip_prefix('<') {
            let Some((_, user)) = open_user.take() else {
                return Err((n, "an agent line without a user line before it".into()));
            };
            if let Some(call) = calls.last_mut() {
                call.turns.push((user, said.trim().to_string()));
            }
            continue;
        }
        if let Some((at, _)) = &open_user {
            return Err((*at, "a user line without the agent's answer".into()));
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        match word {
            "conversation" | "user" | "agent" | "split" => {
                header.insert(word, rest.to_string());
            }
            "call" => {
                let at = NaiveDateTime::parse_from_str(rest, "%Y-%m-%d %H:%M")
                    .map_err(|_| (n, format!("call wants YYYY-MM-DD HH:MM, got {rest:?}")))?
                    .and_utc();
                if calls.last().is_some_and(|c| c.start >= at) {
                    return Err((n, "a call not later than the one before".into()));
                }
                calls.push(DialogueCall {
                    start: at,
                    turns: Vec::new(),
                });
            }
            "q" => {
                let mut q = question(rest).map_err(|e| (n, e))?;
                q.line = n;
                questions.push(q);
            }
            other => return Err((n, format!("unknown line {other:?}"))),
        }
    }
    if let Some((at, _)) = open_user {
        return Err((at, "a user line without the agent's answer".into()));
    }
    let field = |k: &str| {
        header
            .get(k)
            .cloned()
            .ok_or_else(|| (0, format!("no `{k}` line")))
    };
    let split = match field("split")?.as_str() {
        "dev" => Split::Dev,
        "holdout" => Split::Holdout,
        other => return Err((0, format!("split {other:?}: dev or holdout"))),
    };
    // `user <id> [name]`: the name the questions call a side by when its
    // id is not one (`caller-7731`); the evaluation's alone, to tell a
    // question by name: the runtime is given the ids only.
    let side = |k: &str| -> Result<(String, Option<String>), (usize, String)> {
        let v = field(k)?;
        let (id, name) = match v.split_once(char::is_whitespace) {
            Some((id, name)) => (id.to_string(), Some(name.trim().to_string())),
            None => (v, None),
        };
        recall_actors::model::validate_id("id", &id).map_err(|e| (0, e.to_string()))?;
        Ok((id, name))
    };
    let (user, user_name) = side("user")?;
    let (agent, agent_name) = side("agent")?;
    if calls.iter().any(|c| c.turns.is_empty()) {
        return Err((0, "a call without turns".into()));
    }
    let names: Vec<String> = [
        Some(&user),
        Some(&agent),
        user_name.as_ref(),
        agent_name.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|n| n.to_lowercase())
    .collect();
    for q in &mut questions {
        let words = normalize(&q.text);
        q.named = names.iter().any(|n| words.contains(&format!(" {n} ")));
    }
    Ok(Conversation {
        id: field("conversation")?,
        user,
        agent,
        split,
        calls,
        questions,
    })
}

/// `kind side | question | answers [| earlier]`.
fn question(rest: &str) -> Result<DialogueQuestion, String> {
    let fields: Vec<&str> = rest.split('|').map(str::trim).collect();
    if !(3..=4).contains(&fields.len()) {
        return Err("q wants `category side | question | answers [| earlier]`".into());
    }
    let (kind, side) = fields[0]
        .split_once(' ')
        .ok_or("q wants a category and a side")?;
    let kind = Kind::parse(kind.trim()).ok_or(format!("unknown category {kind:?}"))?;
    let side = Side::parse(side.trim()).ok_or(format!("unknown side {side:?}"))?;
    let accepted = answers(fields[2]);
    if accepted.is_empty() || fields[1].is_empty() {
        return Err("a question wants its text and an answer".into());
    }
    Ok(DialogueQuestion {
        kind,
        side,
        text: fields[1].to_string(),
        answers: accepted,
        earlier: fields.get(3).map(|f| answers(f)).unwrap_or_default(),
        named: false,
        dated: fields[2].contains("@date"),
        line: 0,
    })
}

/// `a; b & c; @date 9 March` → the alternatives, each a list of parts,
/// each part in all its forms.
fn answers(field: &str) -> Vec<Answer> {
    field
        .split(';')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|alt| {
            alt.split('&')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(super::data::expand)
                .collect()
        })
        .collect()
}

/// Whether normalized `text` holds any of `answers`, each of its parts as
/// whole words.
pub fn holds_any(normalized: &str, answers: &[Answer]) -> bool {
    answers.iter().any(|alt| {
        !alt.is_empty()
            && alt.iter().all(|forms| {
                forms.iter().any(|f| {
                    let f = normalize(f);
                    f.trim() != "" && normalized.contains(&f)
                })
            })
    })
}

impl Conversation {
    /// Every turn, in order, with its time, as the baselines see them.
    pub fn turns(&self) -> Vec<(usize, Turn)> {
        let mut out = Vec::new();
        for (c, call) in self.calls.iter().enumerate() {
            for (i, (user, agent)) in call.turns.iter().enumerate() {
                out.push((
                    c,
                    Turn {
                        at: call.turn_at(i),
                        user: user.clone(),
                        agent: agent.clone(),
                        fact: None,
                    },
                ));
            }
        }
        out
    }

    /// Its calls as `recall simulate` events.
    fn events(&self) -> Vec<crate::simulate::Event> {
        use crate::simulate::{Action, Event};
        let mut out = Vec::new();
        let mut push = |at: DateTime<Utc>, action: Action| {
            out.push(Event {
                line: out.len() + 1,
                at,
                action,
            })
        };
        for (c, call) in self.calls.iter().enumerate() {
            let connection_id = format!("{}-{}", self.id, c + 1);
            push(
                call.start,
                Action::Start {
                    agent_id: self.agent.clone(),
                    user_id: self.user.clone(),
                    connection_id: connection_id.clone(),
                },
            );
            for (i, (user, agent)) in call.turns.iter().enumerate() {
                push(
                    call.turn_at(i),
                    Action::Turn {
                        connection_id: connection_id.clone(),
                        user_message: user.clone(),
                        agent_response: agent.clone(),
                    },
                );
            }
            push(
                call.turn_at(call.turns.len()),
                Action::End { connection_id },
            );
        }
        out
    }
}

/// Options of a dialogue run.
pub struct DialogueOptions {
    /// The folder holding `dev/` and `holdout/`.
    pub dir: PathBuf,
    pub split: Split,
    /// Only these conversations (all of the split when empty).
    pub only: Vec<String>,
    pub budgets: Vec<usize>,
    pub settings: Settings,
}

/// The message the control asks: about nothing any conversation holds.
pub const CONTROL_MESSAGE: &str = "Sorry, I lost you for a second there. Can you hear me now?";

/// One question's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DialogueOutcome {
    pub conversation: String,
    pub kind: Kind,
    pub side: Side,
    pub named: bool,
    pub question: String,
    /// recall's context, per budget.
    pub recall: Vec<bool>,
    /// recall's context held an earlier value and not the answer.
    pub recall_earlier_only: Vec<bool>,
    /// BM25 over both sides' turns, stemmed, filling the budget.
    pub bm25: Vec<bool>,
    /// BM25 whose hits bring the turns either side of them.
    pub bm25_neighbours: Vec<bool>,
    /// recall's context for [`CONTROL_MESSAGE`] held the answer.
    pub control: Vec<bool>,
    /// The answer's words are in the conversation.
    pub whole: bool,
    /// Tokens recall's context used (without the question), per budget.
    pub tokens: Vec<usize>,
    #[serde(skip)]
    pub context: String,
}

/// Shares answered, one row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DialogueRow {
    pub name: String,
    pub n: usize,
    pub recall: Vec<f64>,
    pub bm25: Vec<f64>,
    pub bm25_neighbours: Vec<f64>,
    pub control: Vec<f64>,
    pub whole: f64,
}

/// The result of a dialogue run.
#[derive(Debug, Clone, Serialize)]
pub struct DialogueReport {
    pub split: Split,
    pub budgets: Vec<usize>,
    pub conversations: usize,
    pub calls: usize,
    pub turns: usize,
    pub overall: DialogueRow,
    pub by_side: Vec<DialogueRow>,
    pub by_kind: Vec<DialogueRow>,
    /// Third person by name, or not.
    pub by_form: Vec<DialogueRow>,
    pub outcomes: Vec<DialogueOutcome>,
}

/// [`run`] on a runtime of its own with tokio's clock paused.
pub fn run_blocking(opts: DialogueOptions) -> Result<DialogueReport, EvalError> {
    super::on_paused_runtime(run(opts))
}

/// Replays each conversation and asks its questions. Must run on a tokio
/// runtime with paused time; offline only.
pub async fn run(opts: DialogueOptions) -> Result<DialogueReport, EvalError> {
    super::check_run(&opts.budgets, &opts.settings)?;
    let convs = load(&opts.dir, Some(opts.split), &opts.only)?;
    let mut outcomes = Vec::new();
    for c in &convs {
        let dir = tempfile::tempdir().map_err(EvalError::TempDir)?;
        let rt = replay(c, dir.path(), opts.settings.clone()).await?;
        let asked = ask(&rt, c, &opts.budgets).await;
        rt.shutdown().await?;
        outcomes.extend(asked?);
    }
    let b = opts.budgets.len();
    let all: Vec<&DialogueOutcome> = outcomes.iter().collect();
    let rows = |name: &str, f: &dyn Fn(&DialogueOutcome) -> bool| {
        let of: Vec<&DialogueOutcome> = outcomes.iter().filter(|o| f(o)).collect();
        row(name, &of, b)
    };
    Ok(DialogueReport {
        split: opts.split,
        conversations: convs.len(),
        calls: convs.iter().map(|c| c.calls.len()).sum(),
        turns: convs
            .iter()
            .map(|c| c.calls.iter().map(|x| x.turns.len()).sum::<usize>())
            .sum(),
        overall: row("overall", &all, b),
        by_side: Side::ALL
            .into_iter()
            .map(|s| rows(s.as_str(), &|o| o.side == s))
            .collect(),
        by_kind: Kind::ALL
            .into_iter()
            .map(|k| rows(k.as_str(), &|o| o.kind == k))
            .collect(),
        by_form: vec![
            rows("by name", &|o| o.named),
            rows("you / I", &|o| !o.named),
        ],
        budgets: opts.budgets,
        outcomes,
    })
}

fn row(name: &str, of: &[&DialogueOutcome], budgets: usize) -> DialogueRow {
    let share = |f: &dyn Fn(&DialogueOutcome) -> bool| {
        if of.is_empty() {
            0.0
        } else {
            of.iter().filter(|o| f(o)).count() as f64 / of.len() as f64
        }
    };
    let per = |f: fn(&DialogueOutcome) -> &Vec<bool>| -> Vec<f64> {
        (0..budgets).map(|b| share(&|o| f(o)[b])).collect()
    };
    DialogueRow {
        name: name.to_string(),
        n: of.len(),
        recall: per(|o| &o.recall),
        bm25: per(|o| &o.bm25),
        bm25_neighbours: per(|o| &o.bm25_neighbours),
        control: per(|o| &o.control),
        whole: share(&|o| o.whole),
    }
}

/// Replays one conversation's calls at their times, then lets time run on
/// a day, so every reflection and the last day's rollups have run.
async fn replay(c: &Conversation, dir: &Path, settings: Settings) -> Result<Runtime, EvalError> {
    let events = c.events();
    let Some(first) = events.first() else {
        return Err(EvalError::NoPersonas(c.id.clone()));
    };
    let clock = Clock::starting_at(first.at);
    let wait = super::settle_time(&settings);
    let rt = RuntimeBuilder::new(dir)
        .settings(settings)
        .clock(clock)
        .start()
        .await?;
    super::play(&rt, clock, &events).await?;
    super::settle(&rt, wait).await?;
    let stored: u32 = rt
        .sessions(None)
        .await?
        .iter()
        .filter(|s| s.agent_id == c.agent && s.user_id == c.user)
        .map(|s| s.turn_count)
        .sum();
    let sent: usize = c.calls.iter().map(|x| x.turns.len()).sum();
    if stored as usize != sent {
        return Err(EvalError::TurnsLost {
            persona: c.id.clone(),
            sent,
            stored: stored as usize,
        });
    }
    Ok(rt)
}

async fn ask(
    rt: &Runtime,
    c: &Conversation,
    budgets: &[usize],
) -> Result<Vec<DialogueOutcome>, EvalError> {
    let counter = CharEstimate;
    let turns = c.turns();
    let rendered: Vec<String> = turns.iter().map(|(_, t)| render_turn(t)).collect();
    let index = StemmedBm25::new(
        turns
            .iter()
            .map(|(_, t)| format!("{}\n{}", t.user, t.agent)),
    );
    let whole = normalize(&rendered.join("\n"));
    let mut controls = Vec::new();
    for &budget in budgets {
        let ctx = rt
            .context(
                &c.agent,
                &c.user,
                CONTROL_MESSAGE,
                budget,
                ContextOptions::default(),
            )
            .await?;
        controls.push(normalize(&joined(&context_text(&ctx))));
    }
    let mut out = Vec::new();
    for q in &c.questions {
        let mut o = DialogueOutcome {
            conversation: c.id.clone(),
            kind: q.kind,
            side: q.side,
            named: q.named,
            question: q.text.clone(),
            recall: Vec::new(),
            recall_earlier_only: Vec::new(),
            bm25: Vec::new(),
            bm25_neighbours: Vec::new(),
            control: Vec::new(),
            whole: holds_any(&whole, &q.answers),
            tokens: Vec::new(),
            context: String::new(),
        };
        let reserved = counter.count(&q.text);
        let ranked = index.rank(&q.text);
        for (b, &budget) in budgets.iter().enumerate() {
            let ctx = rt
                .context(
                    &c.agent,
                    &c.user,
                    &q.text,
                    budget,
                    ContextOptions::default(),
                )
                .await?;
            let tiers = context_text(&ctx);
            let text = joined(&tiers);
            let norm = normalize(&text);
            let hit = holds_any(&norm, &q.answers);
            o.recall.push(hit);
            o.recall_earlier_only
                .push(!hit && !q.earlier.is_empty() && holds_any(&norm, &q.earlier));
            o.tokens.push(counter.count(&text));
            if b == 0 {
                o.context = text;
            }
            o.control.push(holds_any(&controls[b], &q.answers));
            let room = budget.saturating_sub(reserved);
            let plain = fill(&ranked, &turns, &rendered, room, 0, &counter);
            o.bm25.push(holds_any(&normalize(&plain), &q.answers));
            let near = fill(&ranked, &turns, &rendered, room, 1, &counter);
            o.bm25_neighbours
                .push(holds_any(&normalize(&near), &q.answers));
        }
        out.push(o);
    }
    Ok(out)
}

fn joined(tiers: &[(recall_actors::context::Tier, String)]) -> String {
    tiers
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ranked turns (with `around` turns of the same call either side of
/// each), each turn once, packed greedily into `room` tokens; when the
/// ranked ones run out, the latest turns fill what is left. Shown in
/// conversation order.
fn fill(
    ranked: &[(usize, f64)],
    turns: &[(usize, Turn)],
    rendered: &[String],
    room: usize,
    around: usize,
    counter: &dyn TokenCounter,
) -> String {
    let mut used = 0;
    let mut taken = vec![false; turns.len()];
    let mut take = |i: usize, used: &mut usize| {
        if taken[i] {
            return;
        }
        let cost = counter.count(&rendered[i]);
        if *used + cost <= room {
            *used += cost;
            taken[i] = true;
        }
    };
    for &(i, _) in ranked {
        take(i, &mut used);
        for d in 1..=around {
            if i >= d && turns[i - d].0 == turns[i].0 {
                take(i - d, &mut used);
            }
            if i + d < turns.len() && turns[i + d].0 == turns[i].0 {
                take(i + d, &mut used);
            }
        }
    }
    for i in (0..turns.len()).rev() {
        take(i, &mut used);
    }
    rendered
        .iter()
        .zip(&taken)
        .filter(|(_, &t)| t)
        .map(|(r, _)| r.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Okapi BM25 over Snowball-stemmed English words without stopwords: the
/// strong plain retriever recall is compared with.
pub struct StemmedBm25 {
    inner: super::baseline::Bm25,
}

/// A text's words, stemmed, stopwords left out, joined by spaces.
pub fn stemmed(text: &str) -> String {
    use rust_stemmers::{Algorithm, Stemmer};
    thread_local! {
        static STEMMER: Stemmer = Stemmer::create(Algorithm::English);
    }
    STEMMER.with(|s| {
        super::baseline::tokens(text)
            .iter()
            .map(|w| s.stem(w).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    })
}

impl StemmedBm25 {
    pub fn new(docs: impl IntoIterator<Item = String>) -> Self {
        let docs: Vec<String> = docs.into_iter().map(|d| stemmed(&d)).collect();
        StemmedBm25 {
            inner: super::baseline::Bm25::new(docs.iter().map(String::as_str)),
        }
    }

    /// Documents scoring above zero, best first.
    pub fn rank(&self, query: &str) -> Vec<(usize, f64)> {
        self.inner.rank(&stemmed(query))
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

impl DialogueReport {
    /// The readable report: overall, by side, by category and by form,
    /// each beside the baselines.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "answer recall on the dialogue split {}: {} conversations, {} calls, {} turns, {} questions\n",
            self.split.as_str(),
            self.conversations,
            self.calls,
            self.turns,
            self.overall.n
        );
        for (title, rows) in [
            ("by side", &self.by_side),
            ("by category", &self.by_kind),
            ("by form", &self.by_form),
        ] {
            let _ = writeln!(out, "{title}:");
            self.table(&mut out, rows.iter().chain(std::iter::once(&self.overall)));
            out.push('\n');
        }
        out
    }

    fn table<'a>(&self, out: &mut String, rows: impl Iterator<Item = &'a DialogueRow>) {
        let mut head = format!("{:<10} {:>5}", "", "n");
        for b in &self.budgets {
            let _ = write!(
                head,
                " | {:>8} {:>8} {:>8} {:>8}",
                format!("recall@{b}"),
                "bm25",
                "bm25+nb",
                "control"
            );
        }
        let _ = writeln!(out, "{head} | {:>6}", "whole");
        for r in rows {
            let mut line = format!("{:<10} {:>5}", r.name, r.n);
            for b in 0..self.budgets.len() {
                let _ = write!(
                    line,
                    " | {:>8} {:>8} {:>8} {:>8}",
                    pct(r.recall[b]),
                    pct(r.bm25[b]),
                    pct(r.bm25_neighbours[b]),
                    pct(r.control[b])
                );
            }
            let _ = writeln!(out, "{line} | {:>6}", pct(r.whole));
        }
    }

    /// Each question recall's context missed at the first budget, with
    /// what the context held.
    pub fn misses_text(&self) -> String {
        let mut out = String::new();
        for o in self.outcomes.iter().filter(|o| !o.recall[0]) {
            let _ = writeln!(
                out,
                "MISS [{} {} {}] {}  (bm25 {}, whole {})\n{}\n",
                o.conversation,
                o.kind.as_str(),
                o.side.as_str(),
                o.question,
                o.bm25[0],
                o.whole,
                o.context
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "conversation hanna-ruth\nuser hanna\nagent ruth\nsplit dev\n\
        call 2024-03-12 19:05\n> Hi Ruth.  # a comment\n< Hanna! I fixed the greenhouse door yesterday.\n\
        > Nice.\n< And the cat is called Bramble.\n\
        q single agent | What did Ruth fix? | greenhouse door\n\
        q temporal agent | When did she fix it? | @date 11 March\n\
        q multi both | What? | Bramble & door; nothing\n";

    #[test]
    fn a_dialogue_file_is_read() {
        let c = parse(FILE).unwrap();
        assert_eq!((c.user.as_str(), c.agent.as_str()), ("hanna", "ruth"));
        assert_eq!(c.calls.len(), 1);
        assert_eq!(c.calls[0].turns.len(), 2);
        assert_eq!(c.calls[0].turns[0].0, "Hi Ruth.");
        assert_eq!(c.questions.len(), 3);
        assert!(c.questions[0].named);
        assert!(!c.questions[1].named);
        assert_eq!(c.questions[1].kind, Kind::Temporal);
        let norm = normalize("on March 11th she");
        assert!(holds_any(&norm, &c.questions[1].answers));
        let multi = &c.questions[2].answers;
        assert!(!holds_any(&normalize("Bramble"), multi));
        assert!(holds_any(&normalize("Bramble by the door"), multi));
        // an opaque id with the name the questions use: the id is what
        // recall is given, the name counts a question as asked by name
        let opaque = FILE
            .replace(
                "user hanna\nagent ruth",
                "user caller-1 Hanna\nagent line-2 Ruth",
            )
            .replace("What did Ruth fix?", "What did Ruth fix for Hanna?");
        let c = parse(&opaque).unwrap();
        assert_eq!((c.user.as_str(), c.agent.as_str()), ("caller-1", "line-2"));
        assert!(c.questions[0].named);
        assert!(!c.questions[1].named);
    }

    #[test]
    fn a_bad_dialogue_file_names_its_line() {
        let two_users = FILE.replace("< Hanna! I fixed", "> Hanna! I fixed");
        assert_eq!(parse(&two_users).unwrap_err().0, 7);
        let late = FILE.replace("call 2024-03-12 19:05", "call 2024-03-12");
        assert_eq!(parse(&late).unwrap_err().0, 5);
        let side = FILE.replace("single agent", "single them");
        assert!(parse(&side).unwrap_err().1.contains("side"));
    }

    #[test]
    fn stemmed_bm25_finds_other_forms_of_a_word() {
        let ix = StemmedBm25::new(["She was running late".to_string(), "a cat".to_string()]);
        assert_eq!(ix.rank("Who runs?")[0].0, 0);
    }

    #[test]
    fn fill_takes_neighbours_and_then_the_latest_turns() {
        let t = |s: &str| Turn {
            at: DateTime::<Utc>::from_timestamp(0, 0).unwrap(),
            user: s.into(),
            agent: String::new(),
            fact: None,
        };
        let turns = vec![(0, t("a")), (0, t("b")), (1, t("c")), (1, t("d"))];
        let rendered: Vec<String> = ["aaaa", "bbbb", "cccc", "dddd"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ranked = vec![(1, 1.0)];
        // 1 token each: the hit, its neighbour in the same call (not the
        // next call's), then the latest.
        assert_eq!(
            fill(&ranked, &turns, &rendered, 2, 1, &CharEstimate),
            "aaaa\nbbbb"
        );
        assert_eq!(
            fill(&ranked, &turns, &rendered, 3, 0, &CharEstimate),
            "bbbb\ncccc\ndddd"
        );
    }
}
