//! `recall eval`: does the context recall hands the agent contain the
//! answer to a question about something the user said weeks ago?
//!
//! A generated set of long, multi-call conversations (several personas,
//! facts told once among small talk, some of them updated later; see
//! [`data`] and [`generate`]) is replayed into a runtime in virtual time on
//! the default settings. After the last call, and a day for everything to
//! settle, each question is asked as the user's next message and the
//! context assembled for it (without the message itself) is checked for an
//! accepted answer. In the same run, under the same budgets and token
//! counter, two baselines built from the same raw turns are checked the
//! same way ([`baseline`]): a recency window and BM25 over the turns; and
//! whether the answer is anywhere in the user's turns at all.
//!
//! # Layout
//!
//! - [`data`]: reading the hand-written personas and small-talk pools.
//! - [`generate`]: the seeded generator of calls and questions.
//! - [`baseline`]: the answer check, the recency window and BM25.
//! - this module: the replay, the questions and the report.

pub mod baseline;
pub mod data;
pub mod dialogue;
pub mod generate;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use recall_actors::clock::Clock;
use recall_actors::context::{AssembledContext, CharEstimate, Tier, TokenCounter};
use recall_actors::settings::{EmbedKind, ReflectorKind, Settings};
use serde::Serialize;

use crate::runtime::{
    ContextOptions, EndOptions, RecallError, Runtime, RuntimeBuilder, StartupError, Turn,
};
use crate::simulate::Action;
use baseline::{holds, normalize, Bm25};
pub use data::{Category, Split};
pub use generate::{Dataset, PersonaLog, Question};

/// The seed the figures in docs/evaluation.md were made with.
pub const DEFAULT_SEED: u64 = 20_260_105;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Data(#[from] data::DataError),
    #[error(transparent)]
    Generate(#[from] generate::GenerateError),
    #[error(transparent)]
    Dialogue(#[from] dialogue::DialogueError),
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error(transparent)]
    Runtime(#[from] RecallError),
    #[error("cannot create a temporary data folder")]
    TempDir(#[source] std::io::Error),
    #[error("cannot write {}", path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("split {0:?}: dev, holdout or all")]
    Selection(String),
    #[error(
        "the evaluation runs offline: reflector.kind must be extractive and embed.kind hashing, static or local"
    )]
    NotOffline,
    #[error("cannot start the tokio runtime")]
    Tokio(#[source] std::io::Error),
    #[error("budgets must be between 1 and {max} tokens, at least one; got {0:?}", max = recall_actors::context::MAX_BUDGET_TOKENS)]
    Budgets(Vec<usize>),
    #[error("no persona in split {0} (by the names given)")]
    NoPersonas(String),
    #[error("the store holds {stored} turns of {persona}'s, not the {sent} sent")]
    TurnsLost {
        persona: String,
        sent: usize,
        stored: usize,
    },
}

/// Which personas to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    Split(Split),
    All,
}

impl Serialize for Selection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::str::FromStr for Selection {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, EvalError> {
        match s {
            "dev" => Ok(Selection::Split(Split::Dev)),
            "holdout" => Ok(Selection::Split(Split::Holdout)),
            "all" => Ok(Selection::All),
            other => Err(EvalError::Selection(other.to_string())),
        }
    }
}

impl Selection {
    pub fn as_str(self) -> &'static str {
        match self {
            Selection::Split(s) => s.as_str(),
            Selection::All => "all",
        }
    }

    fn includes(self, s: Split) -> bool {
        match self {
            Selection::Split(x) => x == s,
            Selection::All => true,
        }
    }
}

/// Options of an evaluation run.
pub struct EvalOptions {
    pub selection: Selection,
    /// Context budgets in tokens, the first the headline one.
    pub budgets: Vec<usize>,
    pub seed: u64,
    /// The runtime's settings (the defaults, for the published figures).
    pub settings: Settings,
    /// Only these personas (all of the selection when empty).
    pub personas: Vec<String>,
    /// Replay every user message in lower case ([`Dataset::lowercase_users`]).
    pub lowercase_users: bool,
}

/// The set for a selection and seed, without running anything.
pub fn dataset(selection: Selection, seed: u64, only: &[String]) -> Result<Dataset, EvalError> {
    let (specs, pools) = data::load()?;
    let chosen: Vec<&data::PersonaSpec> = specs
        .iter()
        .filter(|p| selection.includes(p.split))
        .filter(|p| only.is_empty() || only.contains(&p.id))
        .collect();
    if chosen.is_empty() {
        return Err(EvalError::NoPersonas(selection.as_str().to_string()));
    }
    Ok(generate::generate(&chosen, &pools, seed)?)
}

/// Writes each persona's calls as a `recall simulate` script,
/// `DIR/<persona>.jsonl`; the paths written.
pub fn write_scripts(set: &Dataset, dir: &Path) -> Result<Vec<std::path::PathBuf>, EvalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EvalError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut out = Vec::new();
    for p in &set.personas {
        let path = dir.join(format!("{}.jsonl", p.id));
        std::fs::write(&path, p.to_script()).map_err(io(&path))?;
        out.push(path);
    }
    Ok(out)
}

/// One question, and whether each way of choosing a context held its
/// answer, per budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub persona: String,
    pub category: Category,
    pub question: String,
    pub answers: Vec<String>,
    pub stale: Vec<String>,
    /// Where the answer was told: the turns of its fact (time, user's words).
    pub told: Vec<(DateTime<Utc>, String)>,
    /// recall's context, per budget.
    pub recall: Vec<bool>,
    /// recall's context held an earlier value and not the current one.
    pub recall_stale_only: Vec<bool>,
    pub recency: Vec<bool>,
    pub bm25: Vec<bool>,
    /// The answer is somewhere in the user's turns.
    pub whole: bool,
    /// Tokens each context used (without the question), per budget.
    pub tokens: Tokens,
    /// What recall's context held at the first budget, tier by tier
    /// (without the question), for looking at misses.
    #[serde(skip)]
    pub tiers: Vec<(Tier, String)>,
}

/// Tokens a context used, per budget, for each way of choosing it.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Tokens {
    pub recall: Vec<f64>,
    pub recency: Vec<f64>,
    pub bm25: Vec<f64>,
}

/// Shares of questions answered, one row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub category: String,
    pub n: usize,
    /// Per budget, in the order of `Report::budgets`.
    pub recall: Vec<f64>,
    pub recall_stale_only: Vec<usize>,
    pub recency: Vec<f64>,
    pub bm25: Vec<f64>,
    pub whole: f64,
}

/// Sizes of the set that was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub personas: usize,
    pub calls: usize,
    pub turns: usize,
    pub questions: usize,
}

/// The result of an evaluation run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub selection: Selection,
    /// The user messages were replayed in lower case.
    pub lowercase_users: bool,
    pub seed: u64,
    pub budgets: Vec<usize>,
    pub counts: Counts,
    /// One row per category (every category, even without questions).
    pub categories: Vec<Row>,
    pub overall: Row,
    /// Mean tokens each way of choosing used, per budget.
    pub mean_tokens: Tokens,
    pub outcomes: Vec<Outcome>,
}

/// [`run`] on a runtime of its own: one thread, tokio's clock paused and
/// advanced from event to event and timer to timer.
pub fn run_blocking(opts: EvalOptions) -> Result<Report, EvalError> {
    on_paused_runtime(run(opts))
}

/// Runs `fut` on a runtime of its own: one thread, tokio's clock paused.
fn on_paused_runtime<T>(
    fut: impl std::future::Future<Output = Result<T, EvalError>>,
) -> Result<T, EvalError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(EvalError::Tokio)?
        .block_on(fut)
}

/// The budgets and settings an evaluation runs with, checked: budgets in
/// range, and offline (the extractive summarizer, an embedder that is not
/// a service).
fn check_run(budgets: &[usize], settings: &Settings) -> Result<(), EvalError> {
    if budgets.is_empty()
        || budgets
            .iter()
            .any(|&b| b == 0 || b > recall_actors::context::MAX_BUDGET_TOKENS)
    {
        return Err(EvalError::Budgets(budgets.to_vec()));
    }
    if settings.reflector.kind != ReflectorKind::Extractive
        || settings.embed.kind == EmbedKind::Openai
    {
        return Err(EvalError::NotOffline);
    }
    Ok(())
}

/// Replays the set in virtual time and asks every question. Must run on a
/// tokio runtime with paused time. Runs offline only: the extractive
/// summarizer and the hashing, static or local embedder.
pub async fn run(opts: EvalOptions) -> Result<Report, EvalError> {
    check_run(&opts.budgets, &opts.settings)?;
    let mut set = dataset(opts.selection, opts.seed, &opts.personas)?;
    if opts.lowercase_users {
        set.lowercase_users();
    }
    let dir = tempfile::tempdir().map_err(EvalError::TempDir)?;
    let rt = replay(&set, dir.path(), opts.settings).await?;
    let outcomes = ask(&rt, &set, &opts.budgets).await;
    rt.shutdown().await?;
    let outcomes = outcomes?;
    let counts = Counts {
        personas: set.personas.len(),
        calls: set.personas.iter().map(|p| p.calls.len()).sum(),
        turns: set.personas.iter().map(|p| p.turns().count()).sum(),
        questions: outcomes.len(),
    };
    let categories = Category::ALL
        .into_iter()
        .map(|c| {
            let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.category == c).collect();
            row(c.as_str(), &of, opts.budgets.len())
        })
        .collect();
    let all: Vec<&Outcome> = outcomes.iter().collect();
    let mean = |f: fn(&Outcome) -> &Vec<f64>| -> Vec<f64> {
        (0..opts.budgets.len())
            .map(|b| all.iter().map(|o| f(o)[b]).sum::<f64>() / all.len().max(1) as f64)
            .collect()
    };
    let mean_tokens = Tokens {
        recall: mean(|o| &o.tokens.recall),
        recency: mean(|o| &o.tokens.recency),
        bm25: mean(|o| &o.tokens.bm25),
    };
    Ok(Report {
        mean_tokens,
        lowercase_users: opts.lowercase_users,
        selection: opts.selection,
        seed: opts.seed,
        overall: row("overall", &all, opts.budgets.len()),
        budgets: opts.budgets,
        counts,
        categories,
        outcomes,
    })
}

fn row(name: &str, of: &[&Outcome], budgets: usize) -> Row {
    let share = |f: &dyn Fn(&Outcome) -> bool| {
        if of.is_empty() {
            0.0
        } else {
            of.iter().filter(|o| f(o)).count() as f64 / of.len() as f64
        }
    };
    let per = |f: fn(&Outcome) -> &Vec<bool>| -> Vec<f64> {
        (0..budgets).map(|b| share(&|o| f(o)[b])).collect()
    };
    Row {
        category: name.to_string(),
        n: of.len(),
        recall: per(|o| &o.recall),
        recall_stale_only: (0..budgets)
            .map(|b| of.iter().filter(|o| o.recall_stale_only[b]).count())
            .collect(),
        recency: per(|o| &o.recency),
        bm25: per(|o| &o.bm25),
        whole: share(&|o| o.whole),
    }
}

/// Replays every call at its time on tokio's paused clock, then lets time
/// run on until every call has ended and been reflected on, and a day
/// more, so the last day's rollups have run too.
async fn replay(set: &Dataset, dir: &Path, settings: Settings) -> Result<Runtime, EvalError> {
    let events = set.events();
    let Some(first) = events.first() else {
        return Err(EvalError::NoPersonas("(empty)".into()));
    };
    let clock = Clock::starting_at(first.at);
    let settle_for = settle_time(&settings);
    let rt = RuntimeBuilder::new(dir)
        .settings(settings)
        .clock(clock)
        .start()
        .await?;
    play(&rt, clock, &events).await?;
    settle(&rt, settle_for).await?;
    // Every turn sent is stored, or the figures would mean nothing.
    let sessions = rt.sessions(None).await?;
    for p in &set.personas {
        let stored: u32 = sessions
            .iter()
            .filter(|s| s.agent_id == p.agent && s.user_id == p.user)
            .map(|s| s.turn_count)
            .sum();
        let sent = p.turns().count();
        if stored as usize != sent {
            return Err(EvalError::TurnsLost {
                persona: p.id.clone(),
                sent,
                stored: stored as usize,
            });
        }
    }
    Ok(rt)
}

/// How long a replay lets time run on after its last event: a day, so
/// the last day's rollups run too.
fn settle_time(settings: &Settings) -> Duration {
    Duration::from_secs(24 * 3600 + settings.rollup.spread_secs + 60)
}

/// Lets calls left open end on silence and their reflections run, time
/// run on `wait`, and everything be written.
async fn settle(rt: &Runtime, wait: Duration) -> Result<(), EvalError> {
    crate::simulate::run_until_quiet(rt).await?;
    tokio::time::sleep(wait).await;
    rt.wait_idle().await?;
    rt.flush().await?;
    Ok(())
}

/// Sends each event to `rt` at its time on `clock` (tokio's paused
/// clock runs there).
async fn play(
    rt: &Runtime,
    clock: Clock,
    events: &[crate::simulate::Event],
) -> Result<(), EvalError> {
    for ev in events {
        tokio::time::sleep_until(clock.instant_at(ev.at)).await;
        match &ev.action {
            Action::Start {
                agent_id,
                user_id,
                connection_id,
            } => {
                rt.start_session(agent_id, user_id, connection_id).await?;
            }
            Action::Turn {
                connection_id,
                user_message,
                agent_response,
            } => {
                rt.record_turn(
                    connection_id,
                    Turn::new(user_message.as_str(), agent_response.as_str()),
                )?;
            }
            Action::End { connection_id } => {
                rt.end_session(connection_id, EndOptions::default())?;
            }
            Action::Touch { .. } | Action::Context { .. } | Action::Search { .. } => {}
        }
    }
    Ok(())
}

/// The text of a context without the current message: what the agent
/// knows before reading the question.
pub fn context_text(ctx: &AssembledContext) -> Vec<(Tier, String)> {
    ctx.tiers
        .iter()
        .filter(|t| t.tier != Tier::Message)
        .map(|t| {
            let text: Vec<&str> = t.items.iter().map(|i| &*i.text).collect();
            (t.tier, text.join("\n"))
        })
        .collect()
}

async fn ask(rt: &Runtime, set: &Dataset, budgets: &[usize]) -> Result<Vec<Outcome>, EvalError> {
    let counter = CharEstimate;
    let mut out = Vec::new();
    for p in &set.personas {
        let turns: Vec<&generate::Turn> = p.turns().collect();
        let index = Bm25::new(
            turns
                .iter()
                .map(|t| format!("{}\n{}", t.user, t.agent))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
        );
        let whole = normalize(
            &turns
                .iter()
                .map(|t| format!("{}\n{}", t.user, t.agent))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        for q in &p.questions {
            let mut o = Outcome {
                persona: p.id.clone(),
                category: q.category,
                question: q.text.clone(),
                answers: q.answers.clone(),
                stale: q.stale.clone(),
                told: turns
                    .iter()
                    .filter(|t| t.fact.as_deref() == Some(q.fact.as_str()))
                    .map(|t| (t.at, t.user.clone()))
                    .collect(),
                recall: Vec::new(),
                recall_stale_only: Vec::new(),
                recency: Vec::new(),
                bm25: Vec::new(),
                whole: holds(&whole, &q.answers),
                tokens: Tokens::default(),
                tiers: Vec::new(),
            };
            // The baselines leave room for the question, as recall's
            // context does.
            let reserved = counter.count(&q.text);
            for (b, &budget) in budgets.iter().enumerate() {
                let ctx = rt
                    .context(
                        &p.agent,
                        &p.user,
                        &q.text,
                        budget,
                        ContextOptions::default(),
                    )
                    .await?;
                let tiers = context_text(&ctx);
                let text = normalize(
                    &tiers
                        .iter()
                        .map(|(_, t)| t.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
                let hit = holds(&text, &q.answers);
                o.recall.push(hit);
                o.recall_stale_only
                    .push(!hit && !q.stale.is_empty() && holds(&text, &q.stale));
                o.tokens.recall.push(
                    ctx.tiers
                        .iter()
                        .filter(|t| t.tier != Tier::Message)
                        .map(|t| t.tokens)
                        .sum::<usize>() as f64,
                );
                if b == 0 {
                    o.tiers = tiers;
                }
                let room = budget.saturating_sub(reserved);
                let cost = |texts: &[String]| texts.iter().map(|t| counter.count(t)).sum::<usize>();
                let recent = baseline::recency(&turns, room, &counter);
                o.tokens.recency.push(cost(&recent) as f64);
                o.recency
                    .push(holds(&normalize(&recent.join("\n")), &q.answers));
                let best = baseline::bm25(&index, &turns, &q.text, room, &counter);
                o.tokens.bm25.push(cost(&best) as f64);
                o.bm25.push(holds(&normalize(&best.join("\n")), &q.answers));
            }
            out.push(o);
        }
    }
    Ok(out)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

impl Report {
    /// The readable report: a table per category, then the overall row.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let c = &self.counts;
        let _ = writeln!(
            out,
            "answer recall, split {}, seed {}{}: {} personas, {} calls, {} turns, {} questions\n",
            self.selection.as_str(),
            self.seed,
            if self.lowercase_users {
                ", user messages in lower case"
            } else {
                ""
            },
            c.personas,
            c.calls,
            c.turns,
            c.questions
        );
        let mut headers = vec!["category".to_string(), "n".to_string()];
        for b in &self.budgets {
            headers.push(format!("recall@{b}"));
        }
        for b in &self.budgets {
            headers.push(format!("recency@{b}"));
        }
        for b in &self.budgets {
            headers.push(format!("bm25@{b}"));
        }
        headers.push("whole".into());
        let cells = |r: &Row| {
            let mut v = vec![r.category.clone(), r.n.to_string()];
            v.extend(r.recall.iter().map(|x| pct(*x)));
            v.extend(r.recency.iter().map(|x| pct(*x)));
            v.extend(r.bm25.iter().map(|x| pct(*x)));
            v.push(pct(r.whole));
            v
        };
        let mut rows: Vec<Vec<String>> = self.categories.iter().map(cells).collect();
        rows.push(cells(&self.overall));
        let widths: Vec<usize> = (0..headers.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain([headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |out: &mut String, cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", padded.join("  "));
        };
        line(&mut out, &headers);
        let last = rows.len() - 1;
        for (i, r) in rows.iter().enumerate() {
            if i == last {
                let _ = writeln!(
                    out,
                    "{}",
                    "-".repeat(widths.iter().sum::<usize>() + 2 * last)
                );
            }
            line(&mut out, r);
        }
        let stale: Vec<String> = self
            .budgets
            .iter()
            .zip(&self.overall.recall_stale_only)
            .map(|(b, n)| format!("{n} at {b}"))
            .collect();
        let per = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let _ = writeln!(
            out,
            "\nmean tokens used (at {}), without the question: recall {}, recency {}, bm25 {}",
            self.budgets
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(" / "),
            per(&self.mean_tokens.recall),
            per(&self.mean_tokens.recency),
            per(&self.mean_tokens.bm25)
        );
        let _ = writeln!(
            out,
            "recall's context held only an earlier value: {} (of {} updates_current questions)",
            stale.join(", "),
            self.categories
                .iter()
                .find(|r| r.category == Category::UpdatesCurrent.as_str())
                .map_or(0, |r| r.n)
        );
        out
    }

    /// Every question recall's context missed at the first budget, with
    /// the answers expected and what each tier held.
    pub fn misses_text(&self) -> String {
        let mut out = String::new();
        let mut by_persona: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
        for o in self.outcomes.iter().filter(|o| !o.recall[0]) {
            by_persona.entry(&o.persona).or_default().push(o);
        }
        let budget = self.budgets.first().copied().unwrap_or(0);
        for (persona, misses) in by_persona {
            let _ = writeln!(out, "== {persona}: {} missed at {budget} ==", misses.len());
            for o in misses {
                let _ = writeln!(
                    out,
                    "\n[{}] {}\n  expected: {}{}\n  recency: {}, bm25: {}, whole: {}",
                    o.category,
                    o.question,
                    o.answers.join(" / "),
                    if o.stale.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "  (earlier: {}{})",
                            o.stale.join(" / "),
                            if o.recall_stale_only[0] {
                                ", which the context held"
                            } else {
                                ""
                            }
                        )
                    },
                    yes(o.recency[0]),
                    yes(o.bm25[0]),
                    yes(o.whole)
                );
                for (at, said) in &o.told {
                    let _ = writeln!(
                        out,
                        "  told {}: {}",
                        at.format("%Y-%m-%d"),
                        recall_actors::model::truncate_chars(said, 160)
                    );
                }
                for (tier, text) in &o.tiers {
                    let tokens = CharEstimate.count(text);
                    let _ = writeln!(
                        out,
                        "  {:<9} {:>5} tokens  {}",
                        format!("{tier:?}").to_lowercase(),
                        tokens,
                        recall_actors::model::truncate_chars(&text.replace('\n', " | "), 300)
                    );
                }
            }
            let _ = writeln!(out);
        }
        out
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
