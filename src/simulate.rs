//! `recall simulate`: replays a JSONL conversation script in virtual time.
//!
//! One event per line, `{"at": RFC 3339, "type": "start"|"turn"|"touch"|"end", …}`.
//! The whole script is parsed and checked before anything runs, so a
//! malformed line is reported with its number and nothing is half-applied.
//! Events apply at their timestamps on tokio's paused clock, so silence
//! timers, reflections and watchdog ticks fire in between exactly as they
//! would in real time. After the last event, time runs on until every
//! session has ended, every reflection has finished and a watchdog tick has
//! run after the last one.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use recall_actors::clock::Clock;
use recall_actors::context::{TierUsage, Trimmed};
use recall_actors::model::{
    validate_id, BlockLabel, ConversationSummary, DeadLetter, FactRecord, MemoryBlock,
    SessionRecord, SummaryType, Visibility,
};
use recall_actors::reflect::{BoxFuture, Reflect, ReflectError, ReflectRequest};
use recall_actors::settings::Settings;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::{
    ContextOptions, EndOptions, RecallError, RuntimeBuilder, StartupError, TopicView, TouchOptions,
    Turn,
};
use recall_actors::search::{SearchHit, SearchQuery};

/// A script line that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ScriptError {
    pub line: usize,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Start {
        agent_id: String,
        user_id: String,
        connection_id: String,
    },
    Turn {
        connection_id: String,
        user_message: String,
        agent_response: String,
    },
    Touch {
        connection_id: String,
    },
    End {
        connection_id: String,
    },
    /// Record the context the agent's next LLM call would get now.
    Context {
        agent_id: String,
        user_id: String,
        message: String,
        budget_tokens: usize,
    },
    /// Record what an archival search finds now.
    Search {
        agent_id: String,
        user_id: Option<String>,
        query: String,
        limit: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub line: usize,
    pub at: DateTime<Utc>,
    pub action: Action,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartLine {
    agent_id: String,
    user_id: String,
    connection_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnLine {
    connection_id: String,
    user_message: String,
    agent_response: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnLine {
    connection_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextLine {
    agent_id: String,
    user_id: String,
    #[serde(default)]
    message: String,
    budget_tokens: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchLine {
    agent_id: String,
    #[serde(default)]
    user_id: Option<String>,
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

/// Results a `search` event records when it names no limit.
const SEARCH_LIMIT: usize = 5;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndLine {
    connection_id: String,
    #[serde(default)]
    reason: Option<String>,
}

fn parse_line(line: usize, text: &str) -> Result<Event, ScriptError> {
    let err = |reason: String| ScriptError { line, reason };
    let mut v: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| err(format!("not a JSON object: {e}")))?;
    let at = match v.remove("at") {
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(&s)
            .map_err(|e| err(format!("`at` is not an RFC 3339 time ({s:?}): {e}")))?
            .with_timezone(&Utc),
        Some(_) => return Err(err("`at` must be a string".into())),
        None => return Err(err("missing `at`".into())),
    };
    let kind = match v.remove("type") {
        Some(Value::String(s)) => s,
        _ => {
            return Err(err(
                "missing `type` (start, turn, touch, end, context or search)".into(),
            ))
        }
    };
    let rest = Value::Object(v);
    let fields = |e: serde_json::Error| err(format!("bad `{kind}` event: {e}"));
    let action = match kind.as_str() {
        "start" => {
            let l: StartLine = serde_json::from_value(rest).map_err(fields)?;
            for (f, v) in [
                ("agent_id", &l.agent_id),
                ("user_id", &l.user_id),
                ("connection_id", &l.connection_id),
            ] {
                validate_id(f, v).map_err(|e| err(e.to_string()))?;
            }
            Action::Start {
                agent_id: l.agent_id,
                user_id: l.user_id,
                connection_id: l.connection_id,
            }
        }
        "turn" => {
            let l: TurnLine = serde_json::from_value(rest).map_err(fields)?;
            if l.user_message.trim().is_empty() && l.agent_response.trim().is_empty() {
                return Err(err(
                    "a turn needs a user_message or an agent_response".into()
                ));
            }
            Action::Turn {
                connection_id: l.connection_id,
                user_message: l.user_message,
                agent_response: l.agent_response,
            }
        }
        "touch" => {
            let l: ConnLine = serde_json::from_value(rest).map_err(fields)?;
            Action::Touch {
                connection_id: l.connection_id,
            }
        }
        "end" => {
            let l: EndLine = serde_json::from_value(rest).map_err(fields)?;
            match l.reason.as_deref() {
                None | Some("disconnect") => {}
                Some(other) => {
                    return Err(err(format!(
                        "end reason {other:?}: a script can only disconnect; silence, shutdown, recovery and crashes are recorded by the runtime"
                    )))
                }
            }
            Action::End {
                connection_id: l.connection_id,
            }
        }
        "context" => {
            let l: ContextLine = serde_json::from_value(rest).map_err(fields)?;
            validate_id("agent_id", &l.agent_id).map_err(|e| err(e.to_string()))?;
            validate_id("user_id", &l.user_id).map_err(|e| err(e.to_string()))?;
            if l.budget_tokens == 0 || l.budget_tokens > recall_actors::context::MAX_BUDGET_TOKENS {
                return Err(err(format!(
                    "budget_tokens must be between 1 and {}; got {}",
                    recall_actors::context::MAX_BUDGET_TOKENS,
                    l.budget_tokens
                )));
            }
            Action::Context {
                agent_id: l.agent_id,
                user_id: l.user_id,
                message: l.message,
                budget_tokens: l.budget_tokens,
            }
        }
        "search" => {
            let l: SearchLine = serde_json::from_value(rest).map_err(fields)?;
            validate_id("agent_id", &l.agent_id).map_err(|e| err(e.to_string()))?;
            if let Some(u) = &l.user_id {
                validate_id("user_id", u).map_err(|e| err(e.to_string()))?;
            }
            if l.query.trim().is_empty() {
                return Err(err("a search needs a non-empty query".into()));
            }
            let limit = l.limit.unwrap_or(SEARCH_LIMIT);
            if limit == 0 || limit > 100 {
                return Err(err(format!("limit must be between 1 and 100; got {limit}")));
            }
            Action::Search {
                agent_id: l.agent_id,
                user_id: l.user_id,
                query: l.query,
                limit,
            }
        }
        other => {
            return Err(err(format!(
                "unknown event type {other:?} (start, turn, touch, end, context or search)"
            )))
        }
    };
    Ok(Event { line, at, action })
}

/// Parses and checks a whole script: every line well-formed, times never
/// going backwards, and no event for a connection that was not started on
/// an earlier line.
pub fn parse_script(text: &str) -> Result<Vec<Event>, ScriptError> {
    let mut events = Vec::new();
    let mut started: HashSet<String> = HashSet::new();
    let mut last: Option<DateTime<Utc>> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("//") {
            continue;
        }
        let ev = parse_line(line, trimmed)?;
        if let Some(prev) = last {
            if ev.at < prev {
                return Err(ScriptError {
                    line,
                    reason: format!("time goes backwards ({} is before {})", ev.at, prev),
                });
            }
        }
        last = Some(ev.at);
        match &ev.action {
            Action::Start { connection_id, .. } => {
                started.insert(connection_id.clone());
            }
            Action::Turn { connection_id, .. }
            | Action::Touch { connection_id }
            | Action::End { connection_id } => {
                if !started.contains(connection_id) {
                    return Err(ScriptError {
                        line,
                        reason: format!("connection {connection_id:?} was never started"),
                    });
                }
            }
            Action::Context { .. } | Action::Search { .. } => {}
        }
        events.push(ev);
    }
    if events.is_empty() {
        return Err(ScriptError {
            line: 0,
            reason: "the script has no events".into(),
        });
    }
    Ok(events)
}

/// The state after a simulation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sessions: Vec<SessionRecord>,
    pub summaries: Vec<ConversationSummary>,
    /// The agents' blocks, then each user's own `background_context`
    /// (`source_user_id` says whose).
    pub blocks: Vec<MemoryBlock>,
    pub dead_letters: Vec<DeadLetter>,
    /// Every user's facts, current and earlier (their own; visibility says
    /// who else sees them).
    pub facts: Vec<FactRecord>,
    /// The contexts assembled at the script's `context` events.
    pub contexts: Vec<ContextSnapshot>,
    /// Every agent's topics, with their summaries.
    pub topics: Vec<TopicView>,
    /// What the script's `search` events found.
    pub searches: Vec<SearchRecord>,
}

/// One `search` event and its results, best first.
#[derive(Debug, Clone, Serialize)]
pub struct SearchRecord {
    pub at: DateTime<Utc>,
    pub agent_id: String,
    pub user_id: Option<String>,
    pub query: String,
    pub results: Vec<SearchHit>,
}

/// The context assembled at one `context` event.
#[derive(Debug, Clone, Serialize)]
pub struct ContextSnapshot {
    pub agent_id: String,
    pub user_id: String,
    pub at: DateTime<Utc>,
    pub budget_tokens: usize,
    pub total_tokens: usize,
    pub tiers: Vec<TierUsage>,
    pub trimmed: Vec<Trimmed>,
}

impl Report {
    /// The readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== sessions ({}) ==", self.sessions.len());
        for s in &self.sessions {
            let _ = writeln!(
                out,
                "{}  {} → {}  {}/{} on {}  {} turn(s), ended by {}",
                s.session_id,
                s.started_at.format("%Y-%m-%d %H:%M:%S"),
                s.ended_at
                    .map(|t| t.format("%H:%M:%S").to_string())
                    .unwrap_or_else(|| "open".into()),
                s.agent_id,
                s.user_id,
                s.connection_id,
                s.turn_count,
                s.end_reason.map(|r| r.as_str()).unwrap_or("-"),
            );
        }
        let _ = writeln!(out, "\n== summaries ({}) ==", self.summaries.len());
        for s in &self.summaries {
            let _ = writeln!(out, "{}\n", s.to_archival_text());
        }
        let _ = writeln!(out, "== blocks ({}) ==", self.blocks.len());
        for b in &self.blocks {
            let _ = writeln!(
                out,
                "[{}/{}{}] updated {} ({} of {} chars)\n{}\n",
                b.agent_id,
                b.label,
                b.source_user_id
                    .as_deref()
                    .map(|u| format!(" of {u}"))
                    .unwrap_or_default(),
                b.updated_at.format("%Y-%m-%d %H:%M:%S"),
                b.value.chars().count(),
                b.limit,
                b.value
            );
        }
        let _ = writeln!(out, "== facts ({}) ==", self.facts.len());
        for f in &self.facts {
            let _ = writeln!(
                out,
                "{}/{}  [{}] {} ({}{})",
                f.agent_id,
                f.user_id,
                f.category.as_str(),
                f.content,
                match f.visibility {
                    Visibility::Private => "private",
                    Visibility::Shared => "shared",
                },
                if f.conflicts_with.is_some() {
                    ", conflicts with an earlier fact"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "== contexts ({}) ==", self.contexts.len());
        for c in &self.contexts {
            let tiers: Vec<String> = c
                .tiers
                .iter()
                .map(|t| format!("{:?} {}", t.tier, t.tokens).to_lowercase())
                .collect();
            let _ = writeln!(
                out,
                "{} {}/{}: {} of {} tokens ({}){}",
                c.at.format("%Y-%m-%d %H:%M:%S"),
                c.agent_id,
                c.user_id,
                c.total_tokens,
                c.budget_tokens,
                tiers.join(", "),
                if c.trimmed.is_empty() {
                    String::new()
                } else {
                    format!(", {} item(s) trimmed", c.trimmed.len())
                }
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "== topics ({}) ==", self.topics.len());
        for t in &self.topics {
            let _ = writeln!(
                out,
                "{}/{} \"{}\": {} conversation(s), last {}\n{}\n",
                t.agent_id,
                t.user_id,
                t.label,
                t.member_count,
                t.last_active.format("%Y-%m-%d"),
                t.summary.as_deref().unwrap_or("-")
            );
        }
        let _ = writeln!(out, "== searches ({}) ==", self.searches.len());
        for q in &self.searches {
            let _ = writeln!(
                out,
                "{} {}/{} {:?}: {} result(s)",
                q.at.format("%Y-%m-%d %H:%M:%S"),
                q.agent_id,
                q.user_id.as_deref().unwrap_or("*"),
                q.query,
                q.results.len()
            );
            for h in &q.results {
                let gist = h.text.lines().rev().nth(1).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {:.2} {} {} {}",
                    h.score,
                    h.kind.as_str(),
                    h.period_end.format("%Y-%m-%d"),
                    recall_actors::model::truncate_chars(gist, 100)
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "== dead letters ({}) ==", self.dead_letters.len());
        for d in &self.dead_letters {
            let _ = writeln!(
                out,
                "{} after {} attempt(s): {}",
                d.session_id, d.attempts, d.error
            );
        }
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error("line {line}: {source}")]
    Apply {
        line: usize,
        #[source]
        source: RecallError,
    },
    #[error(transparent)]
    Runtime(#[from] RecallError),
    #[error("cannot create a temporary data folder")]
    TempDir(#[source] std::io::Error),
}

/// Runs a `Reflect` on a separate, real-time runtime: an LLM call takes
/// real time, and the wait happens in a blocking task, which keeps tokio's
/// paused clock from jumping ahead (to the attempt timeout) meanwhile.
pub struct RealTimeReflect {
    inner: Arc<dyn Reflect>,
    runtime: Arc<RealTime>,
}

/// The real-time runtime, shut down without blocking when the last holder
/// goes: that may be inside the simulation's runtime, where a plain drop
/// (which waits for its threads) panics.
struct RealTime(Option<tokio::runtime::Runtime>);

impl Drop for RealTime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl RealTimeReflect {
    pub fn new(inner: Arc<dyn Reflect>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        Ok(RealTimeReflect {
            inner,
            runtime: Arc::new(RealTime(Some(runtime))),
        })
    }
}

impl Reflect for RealTimeReflect {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn identity(&self) -> String {
        self.inner.identity()
    }

    fn max_prompt_tokens(&self) -> Option<usize> {
        self.inner.max_prompt_tokens()
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        let inner = self.inner.clone();
        let rt = self.runtime.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || match &rt.0 {
                Some(rt) => rt.block_on(inner.reflect(request)),
                None => unreachable!("the runtime lives as long as its holders"),
            })
            .await
            .map_err(|e| ReflectError::Transport(Box::new(e)))?
        })
    }
}

/// Options of a simulation run.
pub struct SimOptions {
    pub settings: Settings,
    /// Keep the data here; a temporary folder otherwise.
    pub data_dir: Option<PathBuf>,
    /// The reflector; by default the one the settings name.
    pub reflect: Option<Arc<dyn Reflect>>,
    /// Session ids are drawn from it ([`DEFAULT_SEED`] by default).
    pub seed: u64,
}

/// The seed of a simulation that names none.
pub const DEFAULT_SEED: u64 = 0x5EED_CA11;

/// Replays `events`. Must run on a tokio runtime with paused time.
pub async fn run(events: &[Event], opts: SimOptions) -> Result<Report, SimError> {
    let Some(first) = events.first() else {
        return Err(ScriptError {
            line: 0,
            reason: "the script has no events".into(),
        }
        .into());
    };
    let temp;
    let dir = match &opts.data_dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::tempdir().map_err(SimError::TempDir)?;
            temp.path().to_path_buf()
        }
    };
    // Summaries are made one at a time, in the order their calls ended:
    // in virtual time they take no time, and which of two made at once
    // finished first would change what a same-user fact or topic sees.
    let mut settings = opts.settings;
    settings.reflector.max_concurrent = 1;
    settings.session.window_concurrency = 1;
    let opts = SimOptions { settings, ..opts };
    let clock = Clock::starting_at(first.at);
    let watchdog_interval = Duration::from_secs(opts.settings.watchdog.interval_secs);
    let rollups = opts.settings.rollup.enabled;
    let rollup_settle = Duration::from_secs(24 * 3600 + opts.settings.rollup.spread_secs + 60);
    let mut builder = RuntimeBuilder::new(&dir)
        .settings(opts.settings)
        .clock(clock)
        .seed(opts.seed);
    if let Some(r) = opts.reflect {
        builder = builder.reflect(r);
    }
    let rt = builder.start().await?;
    let mut contexts = Vec::new();
    let mut searches = Vec::new();
    for ev in events {
        if ev.at > clock.now() {
            // What this instant's events set off (summaries, window
            // summaries) is done before time moves on: their results land
            // at the same virtual moment every run. Work that waits on a
            // timer past this event (a retry's backoff) goes on after it.
            let at = clock.instant_at(ev.at);
            quiesce_until(&rt, at).await?;
            tokio::time::sleep_until(at).await;
        }
        apply(&rt, ev, rollups, &mut contexts, &mut searches).await?;
    }
    run_out(&rt, rollups, rollup_settle, watchdog_interval).await?;
    let report = report(&rt, rollups, contexts, searches).await?;
    rt.shutdown().await?;
    Ok(report)
}

/// Applies one event of the script: an action the runtime refuses is an
/// error naming the line.
async fn apply(
    rt: &crate::Runtime,
    ev: &Event,
    rollups: bool,
    contexts: &mut Vec<ContextSnapshot>,
    searches: &mut Vec<SearchRecord>,
) -> Result<(), SimError> {
    let res = match &ev.action {
        Action::Start {
            agent_id,
            user_id,
            connection_id,
        } => rt
            .start_session(agent_id, user_id, connection_id)
            .await
            .map(|_| ()),
        Action::Turn {
            connection_id,
            user_message,
            agent_response,
        } => rt
            .record_turn(
                connection_id,
                Turn::new(user_message.as_str(), agent_response.as_str()),
            )
            .map(|_| ()),
        Action::Touch { connection_id } => rt.touch(connection_id, TouchOptions::default()),
        Action::End { connection_id } => rt
            .end_session(connection_id, EndOptions::default())
            .map(|_| ()),
        Action::Context {
            agent_id,
            user_id,
            message,
            budget_tokens,
        } => {
            // What the agent would see now: what this instant's
            // events before it set off is done first.
            quiesce_until(rt, read_by()).await?;
            rt.context(
                agent_id,
                user_id,
                message,
                *budget_tokens,
                ContextOptions::default(),
            )
            .await
            .map(|c| {
                contexts.push(ContextSnapshot {
                    agent_id: agent_id.clone(),
                    user_id: user_id.clone(),
                    at: ev.at,
                    budget_tokens: c.budget_tokens,
                    total_tokens: c.total_tokens,
                    tiers: c.tiers,
                    trimmed: c.trimmed.to_vec(),
                })
            })
        }
        Action::Search {
            agent_id,
            user_id,
            query,
            limit,
        } => {
            // What the agent would find now, once the summaries stored
            // by this instant are taken in.
            quiesce_until(rt, read_by()).await?;
            if rollups {
                rt.process_new_summaries().await.map(|_| ())?;
            }
            rt.search(
                agent_id,
                SearchQuery {
                    text: query.clone(),
                    user_id: user_id.clone(),
                    limit: *limit,
                    ..Default::default()
                },
            )
            .await
            .map(|results| {
                searches.push(SearchRecord {
                    at: ev.at,
                    agent_id: agent_id.clone(),
                    user_id: user_id.clone(),
                    query: query.clone(),
                    results,
                })
            })
        }
    };
    res.map_err(|source| SimError::Apply {
        line: ev.line,
        source,
    })
}

/// Runs on after the last event until what the script set off is done,
/// then flushes.
async fn run_out(
    rt: &crate::Runtime,
    rollups: bool,
    rollup_settle: Duration,
    watchdog_interval: Duration,
) -> Result<(), SimError> {
    // Run on until every session has ended and every reflection finished.
    run_until_quiet(rt).await?;
    // Then through the next rollup hour, so the last day is rolled up too.
    if rollups {
        tokio::time::sleep(rollup_settle).await;
        rt.wait_idle().await?;
    }
    // Then until a watchdog tick has run after the last reflection.
    let ticks = rt.stats().await?.watchdog.ticks;
    tokio::time::sleep(watchdog_interval).await;
    while rt.stats().await?.watchdog.ticks <= ticks {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    rt.flush().await?;
    Ok(())
}

/// What the runtime holds once the run is over, with the contexts and
/// searches read along the way.
async fn report(
    rt: &crate::Runtime,
    rollups: bool,
    contexts: Vec<ContextSnapshot>,
    searches: Vec<SearchRecord>,
) -> Result<Report, SimError> {
    let sessions = rt.sessions(None).await?;
    let agents: BTreeSet<String> = sessions.iter().map(|s| s.agent_id.clone()).collect();
    let mut summaries = Vec::new();
    let mut blocks = Vec::new();
    let mut topics = Vec::new();
    for agent in &agents {
        for kind in SummaryType::ALL {
            summaries.extend(rt.summaries(agent, kind).await?);
        }
        blocks.extend(rt.blocks(agent).await?);
        if rollups {
            topics.extend(rt.topics(agent, None).await?);
        }
    }
    let dead_letters = rt.dead_letters().await?;
    let owners: BTreeSet<(String, String)> = sessions
        .iter()
        .map(|s| (s.agent_id.clone(), s.user_id.clone()))
        .collect();
    // The agent's `background_context` holds only its persistent context:
    // each user's is rendered from their own calls.
    for (agent, user) in &owners {
        blocks.extend(
            rt.user_block(agent, user, BlockLabel::BackgroundContext)
                .await?,
        );
    }
    let mut facts = Vec::new();
    for (agent, user) in &owners {
        facts.extend(
            rt.facts(agent, user)
                .await?
                .into_iter()
                .filter(|f| &f.user_id == user),
        );
    }
    Ok(Report {
        sessions,
        summaries,
        blocks,
        dead_letters,
        facts,
        contexts,
        topics,
        searches,
    })
}

/// Waits until the runtime is idle and no window summary is in flight, or
/// until virtual time reaches `until`, whichever comes first: work that
/// waits on a timer (a retry's backoff) lets time run on to it, never past
/// `until`. What ends the wait depends on virtual time alone, so it is the
/// same every run.
async fn quiesce_until(
    rt: &crate::Runtime,
    until: tokio::time::Instant,
) -> Result<(), RecallError> {
    let quiet = async {
        rt.wait_idle().await?;
        rt.wait_windows().await?;
        rt.wait_idle().await
    };
    tokio::time::timeout_at(until, quiet)
        .await
        .unwrap_or(Ok(()))
}

/// The latest a read waits for what its instant set off: the work that
/// needs no timer is done by then; work waiting on one (a retry's backoff)
/// is read as it stands, one millisecond of virtual time later.
fn read_by() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_millis(1)
}

/// Lets (paused) time run on until every session has ended and every
/// reflection has finished: what a replay in virtual time waits for after
/// its last event.
pub(crate) async fn run_until_quiet(rt: &crate::Runtime) -> Result<(), RecallError> {
    let mut rx = rt.watch_stats();
    loop {
        rx.borrow_and_update();
        rt.wait_idle().await?;
        let s = rt.stats().await?.supervisor;
        if s.live_sessions == 0 && s.idle() {
            return Ok(());
        }
        // Paused time runs on to the next silence timer meanwhile.
        let _ = rx.changed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        let ok = r#"{"at":"2026-01-05T09:00:00Z","type":"start","agent_id":"a","user_id":"u","connection_id":"c1"}"#;
        let cases = [
            ("not json", "not a JSON object"),
            (r#"{"type":"start"}"#, "missing `at`"),
            (
                r#"{"at":"yesterday","type":"touch","connection_id":"c1"}"#,
                "RFC 3339",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"dance","connection_id":"c1"}"#,
                "unknown event type",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"turn","connection_id":"c1"}"#,
                "missing field",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"touch","connection_id":"c1","extra":1}"#,
                "unknown field",
            ),
            (
                r#"{"at":"2026-01-05T08:00:00Z","type":"touch","connection_id":"c1"}"#,
                "backwards",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"touch","connection_id":"c9"}"#,
                "never started",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"context","agent_id":"a","user_id":"u","budget_tokens":0}"#,
                "budget_tokens must be between",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"context","agent_id":"a","user_id":"u"}"#,
                "missing field",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"end","connection_id":"c1","reason":"silence_timeout"}"#,
                "can only disconnect",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"search","agent_id":"a","query":" "}"#,
                "non-empty query",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"search","agent_id":"a","query":"x","limit":0}"#,
                "limit must be between",
            ),
            (
                r#"{"at":"2026-01-05T09:01:00Z","type":"search","agent_id":"a"}"#,
                "missing field",
            ),
        ];
        for (bad, want) in cases {
            let script = format!("{ok}\n\n{bad}\n");
            let e = parse_script(&script).unwrap_err();
            assert_eq!(e.line, 3, "{bad}");
            assert!(e.reason.contains(want), "{bad}: {}", e.reason);
        }
        assert_eq!(parse_script(ok).unwrap().len(), 1);
    }
}
