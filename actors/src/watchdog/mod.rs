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
    truncate_chars, AgentMeta, BackgroundContext, BlockLabel, BlockWriter, ConversationSummary,
    MemoryBlock, Topic,
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
    #[error("the watchdog runs on another instance (it holds the watchdog lease)")]
    Elsewhere,
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
    /// Blocks are rebuilt where this is held (one instance at a time over
    /// a shared store).
    pub lease: Arc<crate::lease::Lease>,
}

pub struct WatchdogState {
    args: WatchdogArgs,
    stats: WatchdogStats,
    /// Every stored block has been checked once since the start.
    swept: bool,
}

pub struct WatchdogActor;

mod render;

pub use render::{render_context, topic_order, Hierarchy, LiveTopics};

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
            written_by: Some(BlockWriter::Watchdog),
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
            WatchdogMsg::Tick if !state.args.lease.held() => {}
            WatchdogMsg::RefreshNow(reply) if !state.args.lease.held() => {
                let _ = reply.send(Err(WatchdogError::Elsewhere));
            }
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
