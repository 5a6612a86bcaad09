//! RollupActor: rolls session summaries up into daily and weekly summaries
//! by time and into topics by meaning (design note 000, `docs/design/README.md`).
//!
//! Receives `Wake` from its own timer, `Poke` when a reflection stored a
//! summary, and `RunNow`/`Stats` calls. It sends the Store everything it
//! makes (`PutRollups`, `PutRollup`, `PutTopic`, `PutVectors`,
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
use crate::model::{isoformat, ConversationSummary, SessionRecord, SummaryType, Topic};
use crate::period::{self, Level};
use crate::prompt::RollupPrompts;
use crate::reflect::parse::parse_reflection;
use crate::reflect::{Reflect, ReflectError, ReflectRequest};
use crate::settings::RollupSettings;
use crate::store::{InboxEntry, InboxItem, InboxKey, StoreError, StoreMsg};
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
    #[error("rollups run on another instance (it holds the rollup lease)")]
    Elsewhere,
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
    /// Where a rollup pass reads its agents' cursors and summaries, in one
    /// read a level off the Store actor (its writes go through the actor).
    pub reader: crate::store::Reader,
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
    /// Rollups run where this is held (one instance at a time over a
    /// shared store).
    pub lease: Arc<crate::lease::Lease>,
}

macro_rules! store_call {
    ($store:expr, $msg:expr) => {
        call_t!($store, $msg, STORE_TIMEOUT_MS)
            .map_err(|e| RollupError::StoreUnreachable(e.to_string()))?
    };
}

mod pass;
mod periods;
mod work;

use periods::*;
pub use periods::{rollup_id, spread_offset};
use work::Ctx;

pub struct RollupState {
    ctx: Ctx,
    clock: Clock,
    lease: Arc<crate::lease::Lease>,
    /// When each known agent is next due.
    due: HashMap<String, DateTime<Utc>>,
    timer: Option<JoinHandle<Result<(), ractor::MessagingErr<RollupMsg>>>>,
    timer_gen: u64,
    stats: RollupStats,
    stats_tx: tokio::sync::watch::Sender<RollupStats>,
}

pub struct RollupActor;

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

    /// Rolls up `agents` as of `now`, in passes of 64 agents, two passes at
    /// once, at most `max_concurrent` agents summarizing at once. An agent
    /// that failed is due again after the check interval (its cursor stayed
    /// on the last period done), the others at their next local hour.
    async fn roll(&mut self, agents: Vec<String>, now: DateTime<Utc>) -> RollupReport {
        let ctx = self.ctx.clone();
        let n = agents.len() as u64;
        // Two passes at once: one's reads and writes overlap the other's
        // summaries (the agents summarizing at once stay within
        // `max_concurrent`, across both).
        let passes: Vec<Vec<String>> = agents
            .chunks(pass::PASS_AGENTS)
            .map(<[String]>::to_vec)
            .collect();
        let reports: Vec<(String, RollupReport)> = futures::stream::iter(passes)
            .map(|agents| {
                let ctx = ctx.clone();
                async move { ctx.roll_pass(&agents, now).await }
            })
            .buffer_unordered(2)
            .flat_map(futures::stream::iter)
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
        // agent, periods then users go in order (`pass::make_level`).
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
                reader: args.reader,
                reflect: args.reflect,
                embed: args.embed,
                prompts: args.prompts,
                slots: Arc::new(tokio::sync::Semaphore::new(
                    args.settings.max_concurrent.max(1),
                )),
                settings: Arc::new(args.settings),
                attempt_timeout: args.attempt_timeout,
            },
            clock: args.clock,
            lease: args.lease,
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
                if state.lease.held() {
                    let r = state.wake().await;
                    state.count(r);
                }
                state.arm(&myself);
            }
            RollupMsg::Poke => {
                if !state.lease.held() {
                    return Ok(());
                }
                let now = state.clock.now();
                let r = state.drain(now).await;
                state.count(r);
            }
            RollupMsg::DrainInbox(reply) | RollupMsg::RunNow(reply) if !state.lease.held() => {
                let _ = reply.send(Err(RollupError::Elsewhere));
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
