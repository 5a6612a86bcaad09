//! RollupActor: rolls session summaries up into daily and weekly summaries
//! by time and into topics by meaning (seed §4.3, Phases 2–3).
//!
//! Receives `Wake` from its own timer, `Poke` when a reflection stored a
//! summary, and `RunNow`/`Stats` calls. It sends the Store everything it
//! makes (`PutRollup`, `PutTopic`, `PutVectors`, `SetRollupCursor`,
//! `InboxDone`) and calls the `Reflect` and `Embed` ports.
//!
//! - **Daily and weekly**: each agent is due at `rollup.daily_hour` local
//!   time in its time zone, plus a fixed offset within `spread_secs` drawn
//!   from its id, so many agents do not fire at once. When due, every
//!   complete local day after its daily cursor is rolled up per user (one
//!   summary of that user's session summaries), then every complete week
//!   (starting on `weekly_weekday`) after its weekly cursor from the daily
//!   ones. The cursor is written after the rollups: a crash in between
//!   makes the same rollups again, and since a rollup's id is a hash of its
//!   period and sources, storing them again is a no-op.
//! - **Late summaries**: a session summary whose day was already rolled up
//!   makes a new version of that day's rollup (and of its week's) that
//!   supersedes the old one, which is kept and linked.
//! - **Topics**: each new session summary joins its user's closest topic
//!   or starts one, and the topic summary is re-made (`topics`).
//! - **Vectors**: new session summaries and facts get their vectors (for
//!   search) from the `Embed` port.
//!
//! New summaries and facts reach it through the Store's durable inbox, so
//! nothing is missed across restarts. A failing step is logged and tried
//! again on the next wake; ticks never fail the actor.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration, NaiveDate, Utc};
use chrono_tz::Tz;
use futures::StreamExt;
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::clock::Clock;
use crate::embed::{self, Embed, EmbedError, StoredVector};
use crate::keys;
use crate::model::{isoformat, ConversationSummary, SessionRecord, SummaryType, Topic};
use crate::period::{self, Level};
use crate::prompt::RollupPrompts;
use crate::reflect::parse::parse_reflection;
use crate::reflect::{Reflect, ReflectError, ReflectRequest};
use crate::settings::RollupSettings;
use crate::store::{InboxEntry, StoreError, StoreMsg};
use crate::topics;

const STORE_TIMEOUT_MS: u64 = 60_000;
/// Inbox items taken in per batch (one embedding call each).
const INBOX_BATCH: usize = 64;
/// Namespace of rollup ids (UUID v5 of agent, user, level, period, sources).
const ROLLUP_NAMESPACE: Uuid = Uuid::from_u128(0x2f8e_61c4_93a7_4b5d_8e02_7c1b_5d9a_3e64);

pub enum RollupMsg {
    /// Timer: roll up the agents that are due, take in the inbox, look for
    /// new agents. Carries the timer's generation; a stale one is ignored.
    Wake(u64),
    /// A reflection stored a summary: take in the inbox.
    Poke,
    /// Roll every known agent up to the last complete period as of now
    /// (whatever the hour), take in the inbox; replies with what was done.
    RunNow(RpcReplyPort<Result<RollupReport, RollupError>>),
    /// Take in the inbox now; replies with what was done.
    DrainInbox(RpcReplyPort<Result<RollupReport, RollupError>>),
    Stats(RpcReplyPort<RollupStats>),
}

#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    #[error("store error")]
    Store(#[from] StoreError),
    #[error("store unreachable: {0}")]
    StoreUnreachable(String),
    #[error("summarizing failed")]
    Reflect(#[from] ReflectError),
    #[error("embedding failed")]
    Embed(#[from] EmbedError),
}

/// What one run did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RollupReport {
    pub daily: u64,
    pub weekly: u64,
    /// New versions of rollups whose period got a late summary.
    pub revised: u64,
    /// Topic summaries written (a new topic or a new member).
    pub topics_updated: u64,
    pub vectors: u64,
    /// Raw turns given vectors (by an embedder that captures meaning).
    pub turn_vectors: u64,
    pub failures: u64,
}

impl RollupReport {
    fn add(&mut self, o: RollupReport) {
        self.daily += o.daily;
        self.weekly += o.weekly;
        self.revised += o.revised;
        self.topics_updated += o.topics_updated;
        self.turn_vectors += o.turn_vectors;
        self.vectors += o.vectors;
        self.failures += o.failures;
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollupStats {
    pub wakes: u64,
    /// Agents rolled up on their schedule (or by `RunNow`).
    pub agent_runs: u64,
    pub agents_scheduled: usize,
    pub totals: RollupReport,
}

pub struct RollupArgs {
    pub store: ActorRef<StoreMsg>,
    pub reflect: Arc<dyn Reflect>,
    pub embed: Arc<dyn Embed>,
    pub prompts: Arc<RollupPrompts>,
    pub settings: RollupSettings,
    /// How long one summarizing call may take.
    pub attempt_timeout: Duration,
    pub clock: Clock,
    /// Where the counters are published (read without a call, so a long
    /// rollup run never blocks a stats reader).
    pub stats: tokio::sync::watch::Sender<RollupStats>,
}

/// What a rollup run needs, shared by agents rolled up at once.
#[derive(Clone)]
struct Ctx {
    store: ActorRef<StoreMsg>,
    reflect: Arc<dyn Reflect>,
    embed: Arc<dyn Embed>,
    prompts: Arc<RollupPrompts>,
    settings: Arc<RollupSettings>,
    attempt_timeout: Duration,
}

pub struct RollupState {
    ctx: Ctx,
    clock: Clock,
    /// When each known agent is next due.
    due: HashMap<String, DateTime<Utc>>,
    timer: Option<JoinHandle<Result<(), ractor::MessagingErr<RollupMsg>>>>,
    timer_gen: u64,
    stats: RollupStats,
    stats_tx: tokio::sync::watch::Sender<RollupStats>,
}

pub struct RollupActor;

macro_rules! store_call {
    ($store:expr, $msg:expr) => {
        call_t!($store, $msg, STORE_TIMEOUT_MS)
            .map_err(|e| RollupError::StoreUnreachable(e.to_string()))?
    };
}

/// An agent's place in the spread: a fixed offset from its id.
pub fn spread_offset(agent_id: &str, spread_secs: u64) -> ChronoDuration {
    if spread_secs == 0 {
        return ChronoDuration::zero();
    }
    let h = crate::embed::fnv1a(agent_id.as_bytes());
    ChronoDuration::seconds((h % spread_secs) as i64)
}

/// The id of a rollup: the same period and sources give the same id.
pub fn rollup_id(
    agent_id: &str,
    user_id: &str,
    level: Level,
    period: NaiveDate,
    sources: &[Uuid],
) -> Uuid {
    let mut ids = sources.to_vec();
    ids.sort();
    let mut name = format!("{agent_id}\0{user_id}\0{}\0{period}", level.as_str());
    for id in ids {
        name.push('\0');
        name.push_str(&id.to_string());
    }
    Uuid::new_v5(&ROLLUP_NAMESPACE, name.as_bytes())
}

/// Characters of source summaries one rollup prompt carries at most: a
/// user with very many sessions in a day gets each shortened rather than a
/// prompt no model accepts.
const MAX_SOURCE_CHARS: usize = 24_000;

/// A member's text within its share of [`MAX_SOURCE_CHARS`].
fn capped(text: &str, members: usize) -> String {
    let share = (MAX_SOURCE_CHARS / members.max(1)).max(160);
    if text.chars().count() <= share {
        text.to_string()
    } else {
        format!("{}…", crate::model::truncate_chars(text, share).trim_end())
    }
}

/// A rollup's text within `max_chars`: whole sentences while they fit
/// (a model may answer longer than asked), else a hard cut.
fn within(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out = String::new();
    for s in crate::text::sentences(text) {
        let extra = s.chars().count() + usize::from(!out.is_empty());
        if out.chars().count() + extra > max_chars {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s);
    }
    if out.is_empty() {
        out = format!(
            "{}…",
            crate::model::truncate_chars(text, max_chars.saturating_sub(1)).trim_end()
        );
    }
    out
}

/// Members as the prompt lists them, oldest first, each within its share.
fn listing(members: &[&ConversationSummary]) -> String {
    members
        .iter()
        .map(|m| {
            format!(
                "- [{}] {}",
                isoformat(&m.period_start),
                capped(&m.summary_text, members.len())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The record a `Reflect` request carries for a summary of summaries:
/// the period it covers, as if it were one long session.
fn period_record(
    id: Uuid,
    agent_id: &str,
    user_id: &str,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    turn_count: u32,
) -> SessionRecord {
    SessionRecord {
        session_id: id,
        agent_id: agent_id.to_string(),
        user_id: user_id.to_string(),
        connection_id: String::new(),
        started_at: start,
        ended_at: Some(end),
        end_reason: None,
        turn_count,
    }
}

fn summary_type(level: Level) -> SummaryType {
    match level {
        Level::Daily => SummaryType::Daily,
        Level::Weekly => SummaryType::Weekly,
    }
}

/// The level whose rollups are made of summaries of `t`.
fn source_type(level: Level) -> SummaryType {
    match level {
        Level::Daily => SummaryType::Session,
        Level::Weekly => SummaryType::Daily,
    }
}

impl Ctx {
    fn tz(&self, agent_id: &str) -> Tz {
        self.settings.time_zone_of(agent_id)
    }

    async fn summarize(&self, request: ReflectRequest) -> Result<String, RollupError> {
        match tokio::time::timeout(self.attempt_timeout, self.reflect.reflect(request)).await {
            Ok(res) => Ok(res?),
            Err(_) => Err(ReflectError::Timeout(self.attempt_timeout).into()),
        }
    }

    async fn vectors(&self, texts: Vec<String>) -> Result<Vec<StoredVector>, RollupError> {
        let n = texts.len();
        let out = self.embed.embed(texts).await?;
        if out.len() != n {
            return Err(
                EmbedError::Failed(format!("asked for {n} vectors, got {}", out.len())).into(),
            );
        }
        Ok(out
            .into_iter()
            .map(|values| StoredVector {
                embedder: self.embed.name().to_string(),
                values,
            })
            .collect())
    }

    /// Gives the turns of a summary's call vectors of their user's words,
    /// for retrieval by meaning. An embedding failure leaves them to
    /// keyword search (logged); a store failure is an error.
    async fn embed_turns(&self, s: &ConversationSummary) -> Result<u64, RollupError> {
        if self.embed.embeds_inline() {
            // The search index makes them as it indexes the turns.
            return Ok(0);
        }
        // A session summary's id is its session's, unless a replay made a
        // new version: its source range names the session then.
        let session_id = s.source_range.map_or(s.summary_id, |r| r.session_id);
        let turns = store_call!(self.store, |reply| StoreMsg::GetNumberedTurns(
            session_id, reply
        ))?;
        let turns: Vec<(u32, String)> = turns
            .into_iter()
            .filter(|(_, t)| !t.user_message.trim().is_empty())
            .map(|(seq, t)| (seq, t.user_message))
            .collect();
        if turns.is_empty() {
            return Ok(0);
        }
        let texts = turns.iter().map(|(_, t)| t.clone()).collect();
        let vectors = match self.vectors(texts).await {
            Ok(v) => v,
            Err(err) => {
                warn!(%session_id, error = %err, "no vectors for the call's turns; they are found by their words only");
                return Ok(0);
            }
        };
        let items: Vec<(u32, StoredVector)> =
            turns.into_iter().map(|(seq, _)| seq).zip(vectors).collect();
        let n = items.len() as u64;
        store_call!(self.store, |reply| StoreMsg::PutTurnVectors {
            agent_id: s.agent_id.clone(),
            session_id,
            items,
            reply
        })?;
        Ok(n)
    }

    async fn vector(&self, text: String) -> Option<StoredVector> {
        match self.vectors(vec![text]).await {
            Ok(mut v) => v.pop(),
            Err(err) => {
                warn!(error = %err, "no vector for a rollup; it is found by its words only");
                None
            }
        }
    }

    /// Current summaries of `kind` of an agent whose period starts on or
    /// after `from`.
    async fn summaries_from(
        &self,
        agent_id: &str,
        kind: SummaryType,
        from: DateTime<Utc>,
    ) -> Result<Vec<ConversationSummary>, RollupError> {
        let all = store_call!(self.store, |reply| StoreMsg::ListSummaries {
            agent_id: agent_id.to_string(),
            kind,
            since: Some(from),
            reply
        })?;
        Ok(all
            .into_iter()
            .filter(|s| s.is_current() && s.period_start >= from)
            .collect())
    }

    /// Makes (and stores) the rollup of `level` for `user` over the period
    /// starting on `period` from `members`, superseding `existing` if its
    /// sources differ. Returns whether something new was stored.
    async fn make_rollup(
        &self,
        target: Target<'_>,
        members: &[&ConversationSummary],
        existing: Option<&ConversationSummary>,
        now: DateTime<Utc>,
    ) -> Result<bool, RollupError> {
        let Target {
            agent_id,
            user_id,
            level,
            period,
        } = target;
        let ids: Vec<Uuid> = members.iter().map(|m| m.summary_id).collect();
        let id = rollup_id(agent_id, user_id, level, period, &ids);
        if existing.is_some_and(|e| e.summary_id == id) || members.is_empty() {
            return Ok(false);
        }
        let tz = self.tz(agent_id);
        let (start, end) = period::bounds(&tz, level, period);
        let label = match level {
            Level::Daily => period.format("%A %Y-%m-%d").to_string(),
            Level::Weekly => format!("the week of {period}"),
        };
        let listed = listing(members);
        let vars = [
            agent_id.to_string(),
            user_id.to_string(),
            label,
            isoformat(&start),
            isoformat(&end),
            members.len().to_string(),
            listed.clone(),
            self.settings.combine_max_chars.to_string(),
        ];
        let values: Vec<&str> = vars.iter().map(String::as_str).collect();
        let template = match level {
            Level::Daily => &self.prompts.daily,
            Level::Weekly => &self.prompts.weekly,
        };
        let turn_count: u32 = members.iter().map(|m| m.turn_count).sum();
        let request = ReflectRequest {
            system: self.prompts.system.clone(),
            prompt: template.render(&values),
            session: period_record(id, agent_id, user_id, (start, end), turn_count),
            turns: Vec::new(),
            sources: members
                .iter()
                .map(|m| capped(&m.summary_text, members.len()))
                .collect(),
            max_chars: Some(self.settings.combine_max_chars),
        };
        let raw = self.summarize(request).await?;
        let mut r = parse_reflection(&raw, &listed);
        r.summary = within(&r.summary, self.settings.combine_max_chars);
        let summary = ConversationSummary {
            summary_id: id,
            summary_type: summary_type(level),
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            period_start: start,
            period_end: end,
            summary_text: r.summary,
            topics: r.topics,
            key_entities: r.entities,
            emotional_tone: r.emotional_tone,
            source_summary_ids: ids,
            source_range: None,
            turn_count,
            created_at: now,
            fallback: r.fallback,
            supersedes: existing.map(|e| e.summary_id),
            superseded_by: None,
            derivation: None,
        };
        let vector = self.vector(embed::summary_text(&summary)).await;
        let supersedes = summary.supersedes;
        let stored = store_call!(self.store, |reply| StoreMsg::PutRollup {
            summary: Box::new(summary),
            supersedes,
            vector,
            reply
        })?;
        Ok(stored)
    }

    /// Rolls every complete period of `level` after the cursor, up to
    /// `today` (exclusive), and moves the cursor. Stops at the first
    /// failure, with the cursor on the last period done.
    async fn roll_level(
        &self,
        agent_id: &str,
        level: Level,
        today: NaiveDate,
        now: DateTime<Utc>,
        report: &mut RollupReport,
    ) -> Result<(), RollupError> {
        let tz = self.tz(agent_id);
        let week_start = self.settings.week_start();
        let cursor = store_call!(self.store, |reply| StoreMsg::RollupCursor {
            agent_id: agent_id.to_string(),
            level,
            reply
        })?;
        let step = ChronoDuration::days(level.days());
        // The last period that is complete today.
        let last = period::period_of(level, today, week_start) - step;
        let first = match cursor {
            Some(c) => c + step,
            None => {
                // Never rolled: from the period of the oldest source.
                let sources = store_call!(self.store, |reply| StoreMsg::ListSummaries {
                    agent_id: agent_id.to_string(),
                    kind: source_type(level),
                    since: None,
                    reply
                })?;
                match sources
                    .iter()
                    .filter(|s| s.is_current())
                    .map(|s| s.period_start)
                    .min()
                {
                    Some(t) => period::period_of(level, period::local_date(&tz, t), week_start),
                    None => return Ok(()),
                }
            }
        };
        if first > last {
            return Ok(());
        }
        let (from, _) = period::bounds(&tz, level, first);
        let (_, until) = period::bounds(&tz, level, last);
        let sources: Vec<ConversationSummary> = self
            .summaries_from(agent_id, source_type(level), from)
            .await?
            .into_iter()
            .filter(|s| s.period_start < until)
            .collect();
        let existing = self
            .summaries_from(agent_id, summary_type(level), from)
            .await?;
        // period → user → members, in time order
        let mut groups: BTreeMap<NaiveDate, BTreeMap<&str, Vec<&ConversationSummary>>> =
            BTreeMap::new();
        for s in &sources {
            let p = period::period_of(level, period::local_date(&tz, s.period_start), week_start);
            groups
                .entry(p)
                .or_default()
                .entry(s.user_id.as_str())
                .or_default()
                .push(s);
        }
        let mut done = cursor;
        for (p, users) in groups {
            for (user, mut members) in users {
                members.sort_by_key(|m| (m.period_start, m.summary_id));
                let (start, _) = period::bounds(&tz, level, p);
                let old = existing
                    .iter()
                    .find(|e| e.user_id == user && e.period_start == start);
                match self
                    .make_rollup(
                        Target {
                            agent_id,
                            user_id: user,
                            level,
                            period: p,
                        },
                        &members,
                        old,
                        now,
                    )
                    .await
                {
                    Ok(true) => match level {
                        Level::Daily => report.daily += 1,
                        Level::Weekly => report.weekly += 1,
                    },
                    Ok(false) => {}
                    Err(err) => {
                        report.failures += 1;
                        if let Some(d) = done {
                            self.set_cursor(agent_id, level, d).await?;
                        }
                        return Err(err);
                    }
                }
            }
            done = Some(p);
        }
        if cursor.is_none_or(|c| c < last) {
            self.set_cursor(agent_id, level, last).await?;
        }
        Ok(())
    }

    async fn set_cursor(
        &self,
        agent_id: &str,
        level: Level,
        period: NaiveDate,
    ) -> Result<(), RollupError> {
        store_call!(self.store, |reply| StoreMsg::SetRollupCursor {
            agent_id: agent_id.to_string(),
            level,
            period,
            reply
        })?;
        Ok(())
    }

    /// Daily, then weekly (a week's rollup reads its days').
    async fn roll_agent(&self, agent_id: &str, now: DateTime<Utc>) -> RollupReport {
        let mut report = RollupReport::default();
        let today = period::local_date(&self.tz(agent_id), now);
        for level in [Level::Daily, Level::Weekly] {
            if let Err(err) = self
                .roll_level(agent_id, level, today, now, &mut report)
                .await
            {
                warn!(agent_id, level = level.as_str(), error = %err, source = ?std::error::Error::source(&err), "rollup failed; it is tried again at the next wake");
                break;
            }
        }
        report
    }

    /// A late session summary: re-make its day's rollup (and its week's)
    /// if that period was already rolled up.
    async fn revise_for(
        &self,
        s: &ConversationSummary,
        now: DateTime<Utc>,
        report: &mut RollupReport,
    ) -> Result<(), RollupError> {
        let tz = self.tz(&s.agent_id);
        let week_start = self.settings.week_start();
        let day = period::local_date(&tz, s.period_start);
        for level in [Level::Daily, Level::Weekly] {
            let p = period::period_of(level, day, week_start);
            let cursor = store_call!(self.store, |reply| StoreMsg::RollupCursor {
                agent_id: s.agent_id.clone(),
                level,
                reply
            })?;
            if cursor.is_none_or(|c| c < p) {
                return Ok(());
            }
            let (start, end) = period::bounds(&tz, level, p);
            let mut members: Vec<ConversationSummary> = self
                .summaries_from(&s.agent_id, source_type(level), start)
                .await?
                .into_iter()
                .filter(|m| m.user_id == s.user_id && m.period_start < end)
                .collect();
            members.sort_by_key(|m| (m.period_start, m.summary_id));
            let existing = self
                .summaries_from(&s.agent_id, summary_type(level), start)
                .await?
                .into_iter()
                .find(|e| e.user_id == s.user_id && e.period_start == start);
            let refs: Vec<&ConversationSummary> = members.iter().collect();
            if self
                .make_rollup(
                    Target {
                        agent_id: &s.agent_id,
                        user_id: &s.user_id,
                        level,
                        period: p,
                    },
                    &refs,
                    existing.as_ref(),
                    now,
                )
                .await?
            {
                report.revised += 1;
                info!(agent_id = %s.agent_id, user_id = %s.user_id, level = level.as_str(), %p, "rollup revised for a late summary");
            }
        }
        Ok(())
    }

    /// Adds a session summary to its user's topics and re-makes the topic
    /// summary it joined.
    async fn assign_topic(
        &self,
        s: &ConversationSummary,
        vector: &StoredVector,
        topics: &mut Vec<Topic>,
        now: DateTime<Utc>,
    ) -> Result<bool, RollupError> {
        if topics.iter().any(|t| t.member_ids.contains(&s.summary_id)) {
            return Ok(false);
        }
        let threshold = self.settings.topic_threshold_for(self.embed.closeness());
        // A replayed session's new version takes its old version's place in
        // the old version's topic: the old one's keywords and turns leave it
        // (its centroid keeps the old vector: the two are close, and the sum
        // is only compared by direction).
        let mut replaced: Option<(usize, ConversationSummary)> = None;
        if let Some(old_id) = s.supersedes {
            if let Some(i) = topics.iter().position(|t| t.member_ids.contains(&old_id)) {
                if let Some(old) =
                    store_call!(self.store, |reply| StoreMsg::GetSummary(old_id, reply))?
                {
                    replaced = Some((i, old));
                }
            }
        }
        let (mut topic, previous) = match replaced
            .as_ref()
            .map(|(i, _)| *i)
            .or_else(|| topics::closest(topics, &vector.embedder, &vector.values, threshold))
        {
            Some(i) => {
                let mut t = topics[i].clone();
                if let Some((_, old)) = &replaced {
                    topics::leave(&mut t, old);
                }
                topics::join(&mut t, s, &vector.values, now);
                let prev =
                    store_call!(self.store, |reply| StoreMsg::GetSummary(t.topic_id, reply))?;
                (t, prev)
            }
            None => (
                topics::start(s, &vector.embedder, &vector.values, now),
                None,
            ),
        };
        // The newest members (this one among them) re-make the summary.
        let keep = self.settings.topic_sources;
        let mut members: Vec<ConversationSummary> = Vec::new();
        for id in topic.member_ids.iter().rev().take(keep) {
            if *id == s.summary_id {
                members.push(s.clone());
            } else if let Some(m) =
                store_call!(self.store, |reply| StoreMsg::GetSummary(*id, reply))?
            {
                members.push(m);
            }
        }
        members.reverse();
        // After a swap the old text speaks of the old version: the summary
        // is re-made from the members alone.
        let prev_text = match (&previous, &replaced) {
            (Some(p), None) => p.summary_text.clone(),
            _ => String::new(),
        };
        let refs: Vec<&ConversationSummary> = members.iter().collect();
        let listed = listing(&refs);
        let vars = [
            topic.agent_id.clone(),
            topic.user_id.clone(),
            topic.label.clone(),
            prev_text.clone(),
            listed.clone(),
            self.settings.combine_max_chars.to_string(),
        ];
        let values: Vec<&str> = vars.iter().map(String::as_str).collect();
        let mut sources: Vec<String> = Vec::new();
        if !prev_text.is_empty() {
            sources.push(prev_text);
        }
        sources.extend(members.iter().map(|m| m.summary_text.clone()));
        let start = previous
            .as_ref()
            .map_or(s.period_start, |p| p.period_start.min(s.period_start));
        let end = previous
            .as_ref()
            .map_or(s.period_end, |p| p.period_end.max(s.period_end));
        let turn_count = (previous.as_ref().map_or(0, |p| p.turn_count) + s.turn_count)
            .saturating_sub(replaced.as_ref().map_or(0, |(_, old)| old.turn_count));
        let request = ReflectRequest {
            system: self.prompts.system.clone(),
            prompt: self.prompts.topic.render(&values),
            session: period_record(
                topic.topic_id,
                &topic.agent_id,
                &topic.user_id,
                (start, end),
                turn_count,
            ),
            turns: Vec::new(),
            sources,
            max_chars: Some(self.settings.combine_max_chars),
        };
        let raw = self.summarize(request).await?;
        let mut r = parse_reflection(&raw, &listed);
        r.summary = within(&r.summary, self.settings.combine_max_chars);
        let mut keywords: Vec<String> = topic
            .keywords
            .iter()
            .map(|(w, _)| w.clone())
            .take(8)
            .collect();
        if keywords.is_empty() {
            keywords = r.topics.clone();
        }
        let summary = ConversationSummary {
            summary_id: topic.topic_id,
            summary_type: SummaryType::Topic,
            agent_id: topic.agent_id.clone(),
            user_id: topic.user_id.clone(),
            period_start: start,
            period_end: end,
            summary_text: r.summary,
            topics: keywords,
            key_entities: r.entities,
            emotional_tone: r.emotional_tone,
            source_summary_ids: topic.member_ids.clone(),
            source_range: None,
            turn_count,
            created_at: previous.as_ref().map_or(now, |p| p.created_at),
            fallback: r.fallback,
            supersedes: None,
            superseded_by: None,
            derivation: None,
        };
        topic.updated_at = now;
        let vector = self.vector(embed::summary_text(&summary)).await;
        let t = topic.clone();
        store_call!(self.store, |reply| StoreMsg::PutTopic {
            topic: Box::new(t),
            summary: Box::new(summary),
            vector,
            reply
        })?;
        match topics.iter_mut().find(|x| x.topic_id == topic.topic_id) {
            Some(slot) => *slot = topic,
            None => topics.push(topic),
        }
        Ok(true)
    }

    /// Takes in the inbox: vectors, topics and late rollups for each new
    /// session summary, vectors for each new fact. An item leaves the
    /// inbox only once all of that is done.
    async fn drain_inbox(
        &self,
        now: DateTime<Utc>,
        agents: &mut BTreeSet<String>,
    ) -> Result<RollupReport, RollupError> {
        let mut report = RollupReport::default();
        // Past what was read, so an item that keeps failing stays for the
        // next drain without holding up the ones after it.
        let mut after: Option<Vec<u8>> = None;
        loop {
            let entries: Vec<InboxEntry> = store_call!(self.store, |reply| StoreMsg::Inbox {
                after: after.clone(),
                limit: INBOX_BATCH,
                reply
            })?;
            let Some(last) = entries.last() else {
                return Ok(report);
            };
            after = Some(last.key.clone());
            // Load the items; what is gone (deleted) just leaves the inbox.
            let mut items: Vec<(InboxEntry, Option<Item>)> = Vec::new();
            for e in entries {
                agents.insert(e.agent_id.clone());
                let item = match e.kind {
                    keys::INBOX_SUMMARY => {
                        // A version replaced meanwhile (a replay) is not
                        // taken in: its successor is.
                        store_call!(self.store, |reply| StoreMsg::GetSummary(e.id, reply))?
                            .filter(ConversationSummary::is_current)
                            .map(|s| Item::Summary(Box::new(s)))
                    }
                    keys::INBOX_FACT => {
                        store_call!(self.store, |reply| StoreMsg::GetFact(e.id, reply))?
                            .map(|f| Item::Fact(f.fact.agent_id, f.fact.content))
                    }
                    _ => None,
                };
                items.push((e, item));
            }
            let texts: Vec<String> = items
                .iter()
                .filter_map(|(_, i)| i.as_ref().map(Item::text))
                .collect();
            let mut vectors = self.vectors(texts).await?.into_iter();
            let mut topic_cache: HashMap<(String, String), Vec<Topic>> = HashMap::new();
            let mut done = Vec::new();
            let mut by_agent: HashMap<String, Vec<(Uuid, StoredVector)>> = HashMap::new();
            for (entry, item) in items {
                let Some(item) = item else {
                    done.push(entry.key);
                    continue;
                };
                let Some(vector) = vectors.next() else {
                    break;
                };
                by_agent
                    .entry(item.agent().to_string())
                    .or_default()
                    .push((entry.id, vector.clone()));
                if let Item::Summary(s) = &item {
                    if s.summary_type == SummaryType::Session {
                        let key = (s.agent_id.clone(), s.user_id.clone());
                        if !topic_cache.contains_key(&key) {
                            let loaded = store_call!(self.store, |reply| StoreMsg::Topics {
                                agent_id: s.agent_id.clone(),
                                user_id: Some(s.user_id.clone()),
                                reply
                            })?;
                            topic_cache.insert(key.clone(), loaded);
                        }
                        let topics = topic_cache
                            .get_mut(&key)
                            .map(std::mem::take)
                            .unwrap_or_default();
                        let mut topics = topics;
                        let res = self.assign_topic(s, &vector, &mut topics, now).await;
                        topic_cache.insert(key, topics);
                        let res = match res {
                            Ok(updated) => {
                                report.topics_updated += updated as u64;
                                self.revise_for(s, now, &mut report).await
                            }
                            Err(e) => Err(e),
                        };
                        if let Err(err) = res {
                            report.failures += 1;
                            warn!(summary_id = %s.summary_id, error = %err, "taking in a summary failed; it stays in the inbox");
                            continue;
                        }
                        if self.embed.captures_meaning() {
                            report.turn_vectors += self.embed_turns(s).await?;
                        }
                    }
                }
                done.push(entry.key);
            }
            for (agent_id, items) in by_agent {
                report.vectors += items.len() as u64;
                store_call!(self.store, |reply| StoreMsg::PutVectors {
                    agent_id,
                    items,
                    reply
                })?;
            }
            store_call!(self.store, |reply| StoreMsg::InboxDone {
                keys: done,
                reply
            })?;
        }
    }
}

/// The rollup one call makes: a user's period of a level.
#[derive(Clone, Copy)]
struct Target<'a> {
    agent_id: &'a str,
    user_id: &'a str,
    level: Level,
    period: NaiveDate,
}

enum Item {
    Summary(Box<ConversationSummary>),
    /// A fact's agent and content.
    Fact(String, String),
}

impl Item {
    fn text(&self) -> String {
        match self {
            Item::Summary(s) => embed::summary_text(s),
            Item::Fact(_, content) => content.clone(),
        }
    }

    fn agent(&self) -> &str {
        match self {
            Item::Summary(s) => &s.agent_id,
            Item::Fact(agent, _) => agent,
        }
    }
}

impl RollupState {
    async fn drain_and_schedule(
        &mut self,
        now: DateTime<Utc>,
    ) -> Result<RollupReport, RollupError> {
        let mut agents = BTreeSet::new();
        let res = self.ctx.drain_inbox(now, &mut agents).await;
        self.schedule_new(agents);
        res
    }

    fn next_due(&self, agent_id: &str, after: DateTime<Utc>) -> DateTime<Utc> {
        let s = &self.ctx.settings;
        period::next_due(
            &s.time_zone_of(agent_id),
            after,
            s.daily_hour,
            spread_offset(agent_id, s.spread_secs),
        )
    }

    async fn discover(&mut self, now: DateTime<Utc>) -> Result<(), RollupError> {
        let agents = store_call!(self.ctx.store, StoreMsg::ListAgents)?;
        for (agent_id, _) in agents {
            if !self.due.contains_key(&agent_id) {
                let due = self.next_due(&agent_id, now);
                self.due.insert(agent_id, due);
            }
        }
        self.stats.agents_scheduled = self.due.len();
        Ok(())
    }

    /// Rolls up `agents` as of `now`, `max_concurrent` at a time. An agent
    /// that failed is due again after the check interval (its cursor stayed
    /// on the last period done), the others at their next local hour.
    async fn roll(&mut self, agents: Vec<String>, now: DateTime<Utc>) -> RollupReport {
        let ctx = self.ctx.clone();
        let n = agents.len() as u64;
        let reports: Vec<(String, RollupReport)> = futures::stream::iter(agents)
            .map(|a| {
                let ctx = ctx.clone();
                async move {
                    let r = ctx.roll_agent(&a, now).await;
                    (a, r)
                }
            })
            .buffer_unordered(ctx.settings.max_concurrent.max(1))
            .collect()
            .await;
        let retry = now + ChronoDuration::seconds(ctx.settings.check_interval_secs as i64);
        let mut total = RollupReport::default();
        for (agent, r) in reports {
            let next = if r.failures > 0 {
                retry
            } else {
                self.next_due(&agent, now)
            };
            self.due.insert(agent, next);
            total.add(r);
        }
        self.stats.agent_runs += n;
        total
    }

    /// Schedules agents first seen in the inbox (a new agent's first
    /// summary), without listing every agent.
    fn schedule_new(&mut self, agents: BTreeSet<String>) {
        for a in agents {
            if !self.due.contains_key(&a) {
                let due = self.next_due(&a, self.clock.now());
                self.due.insert(a, due);
            }
        }
        self.stats.agents_scheduled = self.due.len();
    }

    async fn drain(&mut self, now: DateTime<Utc>) -> RollupReport {
        match self.drain_and_schedule(now).await {
            Ok(r) => r,
            Err(err) => {
                warn!(error = %err, source = ?std::error::Error::source(&err), "rollup inbox not taken in; tried again at the next wake");
                RollupReport {
                    failures: 1,
                    ..Default::default()
                }
            }
        }
    }

    async fn wake(&mut self) -> RollupReport {
        let now = self.clock.now();
        if let Err(err) = self.discover(now).await {
            warn!(error = %err, "rollup could not list agents");
        }
        let mut report = self.drain(now).await;
        let mut due: Vec<String> = self
            .due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(a, _)| a.clone())
            .collect();
        // Agents due at the same instant start in name order; within an
        // agent, periods then users go in order (`roll_level`).
        due.sort_unstable();
        if !due.is_empty() {
            debug!(agents = due.len(), "rollups due");
            report.add(self.roll(due, now).await);
        }
        report
    }

    fn arm(&mut self, myself: &ActorRef<RollupMsg>) {
        if let Some(t) = self.timer.take() {
            t.abort();
        }
        let now = self.clock.now();
        let check = now + ChronoDuration::seconds(self.ctx.settings.check_interval_secs as i64);
        let next = self
            .due
            .values()
            .copied()
            .min()
            .map_or(check, |d| d.min(check));
        let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
        self.timer_gen += 1;
        let gen = self.timer_gen;
        self.timer = Some(myself.send_after(wait, move || RollupMsg::Wake(gen)));
    }

    fn count(&mut self, r: RollupReport) {
        self.stats.totals.add(r);
        self.stats_tx.send_replace(self.stats);
        metrics::counter!("recall_rollups_total", "level" => "daily").increment(r.daily);
        metrics::counter!("recall_rollups_total", "level" => "weekly").increment(r.weekly);
        metrics::counter!("recall_rollups_revised_total").increment(r.revised);
        metrics::counter!("recall_topic_updates_total").increment(r.topics_updated);
    }
}

impl Actor for RollupActor {
    type Msg = RollupMsg;
    type State = RollupState;
    type Arguments = RollupArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RollupMsg>,
        args: RollupArgs,
    ) -> Result<RollupState, ActorProcessingErr> {
        let mut state = RollupState {
            ctx: Ctx {
                store: args.store,
                reflect: args.reflect,
                embed: args.embed,
                prompts: args.prompts,
                settings: Arc::new(args.settings),
                attempt_timeout: args.attempt_timeout,
            },
            clock: args.clock,
            due: HashMap::new(),
            timer: None,
            timer_gen: 0,
            stats: RollupStats::default(),
            stats_tx: args.stats,
        };
        let now = state.clock.now();
        if let Err(err) = state.discover(now).await {
            warn!(error = %err, "rollup could not list agents at start");
        }
        state.arm(&myself);
        // Whatever waited in the inbox across a restart.
        let _ = myself.cast(RollupMsg::Poke);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<RollupMsg>,
        state: &mut RollupState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RollupMsg>,
        msg: RollupMsg,
        state: &mut RollupState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RollupMsg::Wake(gen) => {
                if gen != state.timer_gen {
                    return Ok(());
                }
                state.stats.wakes += 1;
                state.stats_tx.send_replace(state.stats);
                let r = state.wake().await;
                state.count(r);
                state.arm(&myself);
            }
            RollupMsg::Poke => {
                let now = state.clock.now();
                let r = state.drain(now).await;
                state.count(r);
            }
            RollupMsg::DrainInbox(reply) => {
                let now = state.clock.now();
                let res = state.drain_and_schedule(now).await;
                if let Ok(r) = &res {
                    state.count(*r);
                }
                let _ = reply.send(res);
            }
            RollupMsg::RunNow(reply) => {
                let now = state.clock.now();
                let res = async {
                    state.discover(now).await?;
                    // Rollups need no vectors: an embedding outage is
                    // counted, not fatal.
                    let mut report = state.drain(now).await;
                    let agents: Vec<String> = state.due.keys().cloned().collect();
                    report.add(state.roll(agents, now).await);
                    Ok(report)
                }
                .await;
                if let Ok(r) = &res {
                    state.count(*r);
                }
                let _ = reply.send(res);
            }
            RollupMsg::Stats(reply) => {
                let _ = reply.send(state.stats);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_at_a_sentence_within_the_cap() {
        let text = "One two three. Four five six! Seven eight nine?";
        assert_eq!(within(text, 100), text);
        assert_eq!(within(text, 30), "One two three. Four five six!");
        assert_eq!(within(text, 14), "One two three.");
        let cut = within(text, 8);
        assert_eq!(cut, "One two…");
        assert!(cut.chars().count() <= 8);
    }

    #[test]
    fn rollup_ids_depend_on_period_and_sources_only() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let d: NaiveDate = "2026-03-29".parse().unwrap();
        let id = rollup_id("kairix", "mark", Level::Daily, d, &[a, b]);
        assert_eq!(id, rollup_id("kairix", "mark", Level::Daily, d, &[b, a]));
        assert_ne!(id, rollup_id("kairix", "mark", Level::Daily, d, &[a]));
        assert_ne!(id, rollup_id("kairix", "mark", Level::Weekly, d, &[a, b]));
        assert_ne!(id, rollup_id("kairix", "ada", Level::Daily, d, &[a, b]));
    }

    #[test]
    fn agents_spread_over_the_window() {
        let offsets: Vec<i64> = (0..10_000)
            .map(|i| spread_offset(&format!("agent-{i}"), 900).num_seconds())
            .collect();
        assert!(offsets.iter().all(|o| (0..900).contains(o)));
        // no second holds more than a few agents' starts
        let mut per_sec = vec![0u32; 900];
        for o in &offsets {
            per_sec[*o as usize] += 1;
        }
        let busiest = per_sec.iter().max().copied().unwrap_or(0);
        assert!(busiest < 30, "{busiest} agents in one second");
        assert_eq!(spread_offset("kairix", 0), ChronoDuration::zero());
    }
}
