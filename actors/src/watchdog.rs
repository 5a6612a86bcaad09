//! WatchdogActor: keeps every agent's `background_context` block fresh.
//!
//! Receives `Tick` from its own interval timer, `LiveTurns` from live
//! session actors and `RefreshNow`/`Stats` calls. The agent-wide block holds
//! only the agent's persistent context: an agent may have several users,
//! and a block any of them can read must carry none of their conversations
//! (each user's context renders their own hierarchy with [`render_context`]).
//! On a tick it asks the Store which agents changed and rewrites their block
//! with `PutBlock`; its first run also rewrites any block still holding
//! something else (one written before blocks were kept this way). On a
//! topic shift in a live call it records the call's topic in [`LiveTopics`]
//! and rewrites the agent's block, which moves the agent's blocks counter
//! so cached user contexts render the new order. A failing tick is logged and
//! the timer lives on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::embed::Embed;
use crate::model::{
    truncate_chars, AgentMeta, BackgroundContext, BlockLabel, ConversationSummary, MemoryBlock,
    Topic,
};
use crate::settings::WatchdogSettings;
use crate::store::{StoreError, StoreMsg};
use uuid::Uuid;

const STORE_TIMEOUT_MS: u64 = 30_000;

pub enum WatchdogMsg {
    /// Timer: rewrite the blocks of agents that changed.
    Tick,
    /// A live call's latest user messages (sent by its session actor every
    /// few turns). If they match one of the user's topics other than the
    /// one their context leads with, that topic goes first in the user's
    /// rendering from now on: a topic shift.
    LiveTurns {
        agent_id: String,
        user_id: String,
        text: String,
    },
    /// Rewrite what changed now; replies with the number of blocks written.
    RefreshNow(RpcReplyPort<Result<usize, WatchdogError>>),
    Stats(RpcReplyPort<WatchdogStats>),
}

#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("store error")]
    Store(#[from] StoreError),
    #[error("store unreachable: {0}")]
    StoreUnreachable(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchdogStats {
    pub ticks: u64,
    pub rebuilt: u64,
    pub failed_ticks: u64,
    /// Early rebuilds because a live call moved to another topic.
    pub topic_shifts: u64,
}

pub struct WatchdogArgs {
    pub store: ActorRef<StoreMsg>,
    pub settings: WatchdogSettings,
    pub block_limit: usize,
    pub clock: Clock,
    /// Embeds live turns to match them against topics.
    pub embed: Arc<dyn Embed>,
    /// A live call is on a topic at or above this similarity.
    pub topic_threshold: f32,
    pub live_topics: Arc<LiveTopics>,
}

pub struct WatchdogState {
    args: WatchdogArgs,
    stats: WatchdogStats,
    /// Every stored block has been checked once since the start.
    swept: bool,
}

pub struct WatchdogActor;

/// What a `background_context` block is rendered from: the summary
/// hierarchy, newest first where there are several.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hierarchy<'a> {
    /// Session summaries within the look-back, newest first.
    pub recent: &'a [&'a ConversationSummary],
    /// The latest daily and weekly rollups (current versions).
    pub daily: Option<&'a ConversationSummary>,
    pub weekly: Option<&'a ConversationSummary>,
    /// Topic labels, the most relevant first (a live call's topic, then by
    /// last activity).
    pub topics: &'a [String],
    pub persistent: &'a [String],
}

/// The active topics: topic labels when there are topics, otherwise the
/// recent summaries' keywords by frequency.
fn active_topics(h: &Hierarchy<'_>, max_topics: usize) -> Vec<String> {
    if !h.topics.is_empty() {
        return h.topics.iter().take(max_topics).cloned().collect();
    }
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut order = 0;
    for s in h.recent {
        for t in &s.topics {
            let e = counts.entry(t.as_str()).or_insert((0, order));
            e.0 += 1;
            order += 1;
        }
    }
    let mut topics: Vec<(&str, (usize, usize))> = counts.into_iter().collect();
    topics.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    topics
        .into_iter()
        .take(max_topics)
        .map(|(t, _)| t.to_string())
        .collect()
}

/// Renders the block from the hierarchy within `limit` characters.
///
/// Lines, in this order: `Recent:` (the newest session summary in the
/// look-back), `Today so far:`/`Day <date>:` (the latest daily rollup),
/// `Week of <date>:` (the latest weekly rollup), `Active topics:`, then the
/// persistent context lines. What goes first when it does not fit: the
/// weekly line, then the daily line, then topics from the least relevant,
/// then the recent summary is shortened to a 40-character stub, then
/// persistent lines from the last; the final cut is on a character
/// boundary. Persistent context, set by an operator, is kept longest.
pub fn render_context(
    now: DateTime<Utc>,
    h: &Hierarchy<'_>,
    max_topics: usize,
    limit: usize,
) -> String {
    let mut ctx = BackgroundContext {
        last_updated: now,
        recent_session_summary: h.recent.first().map(|s| s.summary_text.clone()),
        active_topics: active_topics(h, max_topics),
        persistent_context: h.persistent.to_vec(),
    };
    let mut daily = h.daily.map(|d| {
        format!(
            "Day {}: {}",
            d.period_start.format("%Y-%m-%d"),
            d.summary_text
        )
    });
    let mut weekly = h.weekly.map(|w| {
        format!(
            "Week of {}: {}",
            w.period_start.format("%Y-%m-%d"),
            w.summary_text
        )
    });
    let render = |c: &BackgroundContext, daily: &Option<String>, weekly: &Option<String>| {
        let mut lines = Vec::new();
        if let Some(r) = &c.recent_session_summary {
            lines.push(format!("Recent: {r}"));
        }
        lines.extend(daily.iter().cloned());
        lines.extend(weekly.iter().cloned());
        if !c.active_topics.is_empty() {
            lines.push(format!("Active topics: {}", c.active_topics.join(", ")));
        }
        for p in &c.persistent_context {
            lines.push(format!("- {p}"));
        }
        lines.join("\n")
    };
    let over = |c: &BackgroundContext, d: &Option<String>, w: &Option<String>| {
        render(c, d, w).chars().count().saturating_sub(limit)
    };
    if over(&ctx, &daily, &weekly) > 0 {
        weekly = None;
    }
    if over(&ctx, &daily, &weekly) > 0 {
        daily = None;
    }
    while over(&ctx, &daily, &weekly) > 0 && !ctx.active_topics.is_empty() {
        ctx.active_topics.pop();
    }
    let excess = over(&ctx, &daily, &weekly);
    if excess > 0 {
        if let Some(recent) = &ctx.recent_session_summary {
            // keep at least a readable stub of the recent summary
            let keep = recent.chars().count().saturating_sub(excess + 1).max(40);
            if keep < recent.chars().count() {
                ctx.recent_session_summary =
                    Some(format!("{}…", truncate_chars(recent, keep).trim_end()));
            }
        }
    }
    while over(&ctx, &daily, &weekly) > 0 && !ctx.persistent_context.is_empty() {
        ctx.persistent_context.pop();
    }
    truncate_chars(&render(&ctx, &daily, &weekly), limit).to_string()
}

/// Topic labels in the order a block lists them: the live call's topic
/// first, then by last activity.
pub fn topic_order(topics: &[Topic], live: Option<Uuid>) -> Vec<String> {
    let mut sorted: Vec<&Topic> = topics.iter().collect();
    sorted.sort_by_key(|t| {
        (
            std::cmp::Reverse(Some(t.topic_id) == live),
            std::cmp::Reverse(t.last_active),
            t.topic_id,
        )
    });
    let mut seen = std::collections::HashSet::new();
    sorted
        .into_iter()
        .filter(|t| seen.insert(t.label.clone()))
        .map(|t| t.label.clone())
        .collect()
}

/// The topic a live call is on, per (agent, user): set by the watchdog on
/// a topic shift, read when blocks are rendered.
#[derive(Debug, Default)]
pub struct LiveTopics(std::sync::Mutex<HashMap<AgentUser, (Uuid, DateTime<Utc>)>>);

/// An (agent, user) pair.
type AgentUser = (String, String);

impl LiveTopics {
    /// The live topic of a user, if set within `max_age`.
    pub fn get(
        &self,
        agent_id: &str,
        user_id: &str,
        now: DateTime<Utc>,
        max_age: chrono::Duration,
    ) -> Option<Uuid> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(agent_id.to_string(), user_id.to_string()))
            .filter(|(_, at)| now - *at <= max_age)
            .map(|(id, _)| *id)
    }

    /// Forgets a user's live topic (with one agent, or with all).
    pub fn remove_user(&self, user_id: &str, agent_id: Option<&str>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|(a, u), _| !(u == user_id && agent_id.is_none_or(|x| x == a)));
    }

    /// Sets (or refreshes) the live topic.
    fn set(&self, agent_id: &str, user_id: &str, topic: Uuid, now: DateTime<Utc>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert((agent_id.to_string(), user_id.to_string()), (topic, now));
    }
}

impl WatchdogState {
    /// Rewrites the block of every agent whose summaries or persistent
    /// context changed; the first run also of every agent whose stored
    /// block is not what it would write now.
    async fn rebuild_changed(&mut self) -> Result<usize, WatchdogError> {
        let store = &self.args.store;
        let agents = call_t!(store, StoreMsg::ListAgents, STORE_TIMEOUT_MS)
            .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        let now = self.args.clock.now();
        let mut rebuilt = 0;
        for (agent_id, meta) in agents {
            let expired = meta.context_expires_at.is_some_and(|t| t <= now);
            let changed = meta.summary_version != meta.context_version || expired;
            if !changed && (self.swept || self.holds_its_value(&agent_id, &meta).await?) {
                continue;
            }
            self.rebuild(&agent_id, &meta, now).await?;
            rebuilt += 1;
        }
        self.swept = true;
        self.stats.rebuilt += rebuilt as u64;
        Ok(rebuilt)
    }

    /// What the agent's block should hold: its persistent context, within
    /// the limit.
    fn value(&self, meta: &AgentMeta, now: DateTime<Utc>) -> String {
        let hierarchy = Hierarchy {
            persistent: &meta.persistent_context,
            ..Hierarchy::default()
        };
        render_context(
            now,
            &hierarchy,
            self.args.settings.max_topics,
            self.args.block_limit,
        )
    }

    /// Whether the agent's stored block (if any) already holds its value.
    async fn holds_its_value(
        &self,
        agent_id: &str,
        meta: &AgentMeta,
    ) -> Result<bool, WatchdogError> {
        let blocks = call_t!(
            self.args.store,
            StoreMsg::GetBlocks,
            STORE_TIMEOUT_MS,
            agent_id.to_string()
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        let value = self.value(meta, self.args.clock.now());
        Ok(blocks
            .iter()
            .filter(|b| b.label == BlockLabel::BackgroundContext)
            .all(|b| b.value == value))
    }

    async fn topics(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
    ) -> Result<Vec<Topic>, WatchdogError> {
        Ok(call_t!(
            self.args.store,
            |reply| StoreMsg::Topics {
                agent_id: agent_id.to_string(),
                user_id: user_id.map(str::to_string),
                reply
            },
            STORE_TIMEOUT_MS
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??)
    }

    /// Writes the agent's block: its persistent context, never a user's
    /// conversation (the agent's users all read it).
    async fn rebuild(
        &self,
        agent_id: &str,
        meta: &AgentMeta,
        now: DateTime<Utc>,
    ) -> Result<(), WatchdogError> {
        let store = &self.args.store;
        let block = MemoryBlock {
            agent_id: agent_id.to_string(),
            label: BlockLabel::BackgroundContext,
            value: self.value(meta, now),
            limit: self.args.block_limit,
            updated_at: now,
            source_user_id: None,
        };
        call_t!(
            store,
            |reply| StoreMsg::PutBlock { block, reply },
            STORE_TIMEOUT_MS
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        // Nothing in it ages out of the look-back.
        store
            .cast(StoreMsg::MarkContextBuilt {
                agent_id: agent_id.to_string(),
                version: meta.summary_version,
                expires_at: None,
            })
            .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))?;
        debug!(
            agent_id,
            persistent = meta.persistent_context.len(),
            "background context rebuilt"
        );
        Ok(())
    }

    /// A live call's latest words: on another of the user's topics than
    /// their context leads with, that topic becomes the call's and the
    /// agent's block is rewritten now, so cached contexts are rendered
    /// again.
    async fn live_turns(
        &mut self,
        agent_id: &str,
        user_id: &str,
        text: String,
    ) -> Result<bool, WatchdogError> {
        let topics = self.topics(agent_id, Some(user_id)).await?;
        if topics.is_empty() {
            return Ok(false);
        }
        let vector = match self.args.embed.embed(vec![text]).await {
            Ok(mut v) => v.pop().unwrap_or_default(),
            Err(err) => {
                debug!(agent_id, error = %err, "live turns not embedded");
                return Ok(false);
            }
        };
        let Some(i) = crate::topics::closest(
            &topics,
            self.args.embed.name(),
            &vector,
            self.args.topic_threshold,
        ) else {
            return Ok(false);
        };
        let now = self.args.clock.now();
        let lookback = chrono::Duration::hours(self.args.settings.lookback_hours as i64);
        let before = self.args.live_topics.get(agent_id, user_id, now, lookback);
        let leading = topic_order(&topics, before).into_iter().next();
        self.args
            .live_topics
            .set(agent_id, user_id, topics[i].topic_id, now);
        // The block already leads with it: nothing to refresh.
        if before == Some(topics[i].topic_id)
            || (before.is_none() && leading.as_deref() == Some(topics[i].label.as_str()))
        {
            return Ok(false);
        }
        let meta = call_t!(
            self.args.store,
            StoreMsg::GetAgent,
            STORE_TIMEOUT_MS,
            agent_id.to_string()
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        self.rebuild(agent_id, &meta, now).await?;
        self.stats.topic_shifts += 1;
        debug!(agent_id, user_id, topic = %topics[i].label, "topic shift: background context rebuilt early");
        Ok(true)
    }
}

impl Actor for WatchdogActor {
    type Msg = WatchdogMsg;
    type State = WatchdogState;
    type Arguments = WatchdogArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<WatchdogMsg>,
        args: WatchdogArgs,
    ) -> Result<WatchdogState, ActorProcessingErr> {
        myself.send_interval(Duration::from_secs(args.settings.interval_secs), || {
            WatchdogMsg::Tick
        });
        Ok(WatchdogState {
            args,
            stats: WatchdogStats::default(),
            swept: false,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<WatchdogMsg>,
        msg: WatchdogMsg,
        state: &mut WatchdogState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WatchdogMsg::Tick => {
                state.stats.ticks += 1;
                if let Err(err) = state.rebuild_changed().await {
                    state.stats.failed_ticks += 1;
                    warn!(error = %err, source = ?std::error::Error::source(&err), "watchdog tick failed");
                }
            }
            WatchdogMsg::LiveTurns {
                agent_id,
                user_id,
                text,
            } => {
                if let Err(err) = state.live_turns(&agent_id, &user_id, text).await {
                    warn!(agent_id, error = %err, "topic shift check failed");
                }
            }
            WatchdogMsg::RefreshNow(reply) => {
                let res = state.rebuild_changed().await;
                let _ = reply.send(res);
            }
            WatchdogMsg::Stats(reply) => {
                let _ = reply.send(state.stats);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SummaryType;
    use uuid::Uuid;

    fn summary(text: &str, topics: &[&str]) -> ConversationSummary {
        ConversationSummary {
            topics: topics.iter().map(|s| s.to_string()).collect(),
            ..ConversationSummary::session(Uuid::new_v4(), "a", "u", Utc::now(), text)
        }
    }

    fn hierarchy<'a>(
        recent: &'a [&'a ConversationSummary],
        topics: &'a [String],
        persistent: &'a [String],
    ) -> Hierarchy<'a> {
        Hierarchy {
            recent,
            topics,
            persistent,
            ..Default::default()
        }
    }

    #[test]
    fn context_fits_limit_and_keeps_priorities() {
        let s = [
            summary(&"Zoë räumte in Köln auf 🎉 ".repeat(40), &["köln", "umzug"]),
            summary("older", &["umzug", "arbeit"]),
        ];
        let persistent = vec!["Prefers mornings".to_string(), "Has a dog".to_string()];
        let refs: Vec<&ConversationSummary> = s.iter().collect();
        let h = hierarchy(&refs, &[], &persistent);
        for limit in [1, 10, 60, 200, 2_000] {
            let v = render_context(Utc::now(), &h, 12, limit);
            assert!(v.chars().count() <= limit, "{limit}: {}", v.chars().count());
        }
        let v = render_context(Utc::now(), &h, 12, 2_000);
        assert!(v.starts_with("Recent: Zoë"));
        // without topic records: the recent summaries' keywords
        assert!(v.contains("Active topics: umzug, köln, arbeit"));
        assert!(v.ends_with("- Has a dog"));
        // a tight limit drops topics, then shortens the summary, before
        // touching the persistent context
        let v = render_context(Utc::now(), &h, 12, 200);
        assert!(v.contains("…"));
        assert!(!v.contains("Active topics"), "{v}");
        assert!(v.contains("- Prefers mornings\n- Has a dog"), "{v}");
    }

    #[test]
    fn rollups_and_topics_go_in_the_documented_order_and_leave_first() {
        let offer = summary("Mark got the Globex offer.", &["offer"]);
        let recent = [&offer];
        let mut day = summary("Mark negotiated salary and accepted.", &[]);
        day.summary_type = SummaryType::Daily;
        let mut week = summary(&"A week of interviews and one offer. ".repeat(3), &[]);
        week.summary_type = SummaryType::Weekly;
        let topics = vec![
            "globex & interview".to_string(),
            "sailing & porto".to_string(),
        ];
        let persistent = vec!["Mark is job hunting".to_string()];
        let h = Hierarchy {
            recent: &recent,
            daily: Some(&day),
            weekly: Some(&week),
            topics: &topics,
            persistent: &persistent,
        };
        let full = render_context(Utc::now(), &h, 12, 2_000);
        let lines: Vec<&str> = full.lines().collect();
        assert!(lines[0].starts_with("Recent: Mark got the Globex offer."));
        assert!(lines[1].starts_with("Day ") && lines[1].contains("negotiated"));
        assert!(lines[2].starts_with("Week of ") && lines[2].contains("interviews"));
        assert_eq!(
            lines[3],
            "Active topics: globex & interview, sailing & porto"
        );
        assert_eq!(lines[4], "- Mark is job hunting");
        // the weekly line goes first, then the daily, then topics
        let n = full.chars().count();
        let no_week = render_context(Utc::now(), &h, 12, n - 1);
        assert!(
            !no_week.contains("Week of") && no_week.contains("Day "),
            "{no_week}"
        );
        let no_day = render_context(Utc::now(), &h, 12, no_week.chars().count() - 1);
        assert!(
            !no_day.contains("Day ") && no_day.contains("sailing"),
            "{no_day}"
        );
        let one_topic = render_context(Utc::now(), &h, 12, no_day.chars().count() - 1);
        assert!(
            one_topic.contains("Active topics: globex & interview\n"),
            "{one_topic}"
        );
        assert!(one_topic.starts_with("Recent: Mark got the Globex offer.\n"));
        assert!(one_topic.ends_with("- Mark is job hunting"));
    }

    #[test]
    fn a_live_topic_leads_then_recency() {
        let t = |label: &str, minute: i64, id: u128| Topic {
            topic_id: Uuid::from_u128(id),
            agent_id: "a".into(),
            user_id: "u".into(),
            label: label.into(),
            keywords: vec![],
            centroid: vec![],
            embedder: "hashing".into(),
            member_ids: vec![],
            created_at: Utc::now(),
            updated_at: Utc::now(),
            last_active: DateTime::<Utc>::from_timestamp(1_790_000_000 + minute * 60, 0).unwrap(),
        };
        let topics = [t("old", 0, 1), t("newest", 20, 2), t("middle", 10, 3)];
        assert_eq!(topic_order(&topics, None), ["newest", "middle", "old"]);
        assert_eq!(
            topic_order(&topics, Some(Uuid::from_u128(1))),
            ["old", "newest", "middle"]
        );
    }
}
