//! WatchdogActor: keeps every agent's `background_context` block fresh.
//!
//! Receives `Tick` from its own interval timer and `RefreshNow`/`Stats`
//! calls. On a tick it asks the Store which agents changed (new summaries or
//! persistent context) or whose block holds a summary that has aged out of
//! the lookback window, rebuilds their block from recent session summaries,
//! their topics and the persistent context, and writes it with `PutBlock`.
//! A failing tick is logged and the timer lives on.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::model::{
    truncate_chars, AgentMeta, BackgroundContext, BlockLabel, ConversationSummary, MemoryBlock,
    SummaryType,
};
use crate::settings::WatchdogSettings;
use crate::store::{StoreError, StoreMsg};

const STORE_TIMEOUT_MS: u64 = 30_000;

pub enum WatchdogMsg {
    /// Timer: rebuild what changed.
    Tick,
    /// Rebuild what changed now; replies with the number of blocks written.
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
}

pub struct WatchdogArgs {
    pub store: ActorRef<StoreMsg>,
    pub settings: WatchdogSettings,
    pub block_limit: usize,
    pub clock: Clock,
}

pub struct WatchdogState {
    args: WatchdogArgs,
    stats: WatchdogStats,
}

pub struct WatchdogActor;

/// Builds the context from summaries newest first, then fits it into
/// `limit` characters: the recent summary is shortened first, then
/// persistent lines are dropped from the end, then topics; the final cut
/// is on a character boundary.
pub fn render_context(
    now: DateTime<Utc>,
    newest_first: &[ConversationSummary],
    persistent: &[String],
    max_topics: usize,
    limit: usize,
) -> String {
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut order = 0;
    for s in newest_first {
        for t in &s.topics {
            let e = counts.entry(t.as_str()).or_insert((0, order));
            e.0 += 1;
            order += 1;
        }
    }
    let mut topics: Vec<(&str, (usize, usize))> = counts.into_iter().collect();
    topics.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    let mut ctx = BackgroundContext {
        last_updated: now,
        recent_session_summary: newest_first.first().map(|s| s.summary_text.clone()),
        active_topics: topics
            .into_iter()
            .take(max_topics)
            .map(|(t, _)| t.to_string())
            .collect(),
        persistent_context: persistent.to_vec(),
    };
    let len = |c: &BackgroundContext| c.to_block_value(usize::MAX).chars().count();
    let mut over = len(&ctx).saturating_sub(limit);
    if over > 0 {
        if let Some(recent) = &ctx.recent_session_summary {
            // keep at least a readable stub of the recent summary
            let keep = recent.chars().count().saturating_sub(over + 1).max(40);
            if keep < recent.chars().count() {
                ctx.recent_session_summary =
                    Some(format!("{}…", truncate_chars(recent, keep).trim_end()));
            }
        }
        over = len(&ctx).saturating_sub(limit);
    }
    while over > 0 && !ctx.persistent_context.is_empty() {
        ctx.persistent_context.pop();
        over = len(&ctx).saturating_sub(limit);
    }
    while over > 0 && !ctx.active_topics.is_empty() {
        ctx.active_topics.pop();
        over = len(&ctx).saturating_sub(limit);
    }
    ctx.to_block_value(limit)
}

impl WatchdogState {
    async fn rebuild_changed(&mut self) -> Result<usize, WatchdogError> {
        let store = &self.args.store;
        let agents = call_t!(store, StoreMsg::ListAgents, STORE_TIMEOUT_MS)
            .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        let now = self.args.clock.now();
        let mut rebuilt = 0;
        for (agent_id, meta) in agents {
            let expired = meta.context_expires_at.is_some_and(|t| t <= now);
            if meta.summary_version == meta.context_version && !expired {
                continue;
            }
            self.rebuild(&agent_id, &meta, now).await?;
            rebuilt += 1;
        }
        self.stats.rebuilt += rebuilt as u64;
        Ok(rebuilt)
    }

    async fn rebuild(
        &self,
        agent_id: &str,
        meta: &AgentMeta,
        now: DateTime<Utc>,
    ) -> Result<(), WatchdogError> {
        let store = &self.args.store;
        let lookback = chrono::Duration::hours(self.args.settings.lookback_hours as i64);
        let since = now - lookback;
        let mut recent = call_t!(
            store,
            |reply| StoreMsg::ListSummaries {
                agent_id: agent_id.to_string(),
                kind: SummaryType::Session,
                since: Some(since),
                reply
            },
            STORE_TIMEOUT_MS
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        recent.reverse();
        let limit = self.args.block_limit;
        let value = render_context(
            now,
            &recent,
            &meta.persistent_context,
            self.args.settings.max_topics,
            limit,
        );
        let block = MemoryBlock {
            agent_id: agent_id.to_string(),
            label: BlockLabel::BackgroundContext,
            value,
            limit,
            updated_at: now,
            source_user_id: None,
        };
        call_t!(
            store,
            |reply| StoreMsg::PutBlock { block, reply },
            STORE_TIMEOUT_MS
        )
        .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))??;
        let expires_at = recent.iter().map(|s| s.period_end + lookback).min();
        store
            .cast(StoreMsg::MarkContextBuilt {
                agent_id: agent_id.to_string(),
                version: meta.summary_version,
                expires_at,
            })
            .map_err(|e| WatchdogError::StoreUnreachable(e.to_string()))?;
        debug!(
            agent_id,
            summaries = recent.len(),
            "background context rebuilt"
        );
        Ok(())
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
    use uuid::Uuid;

    fn summary(text: &str, topics: &[&str]) -> ConversationSummary {
        let now = Utc::now();
        ConversationSummary {
            summary_id: Uuid::new_v4(),
            summary_type: SummaryType::Session,
            agent_id: "a".into(),
            user_id: "u".into(),
            period_start: now,
            period_end: now,
            summary_text: text.into(),
            topics: topics.iter().map(|s| s.to_string()).collect(),
            key_entities: vec![],
            emotional_tone: None,
            source_summary_ids: vec![],
            source_range: None,
            turn_count: 1,
            created_at: now,
            fallback: false,
            supersedes: None,
            superseded_by: None,
        }
    }

    #[test]
    fn context_fits_limit_and_keeps_priorities() {
        let s = [
            summary(&"Zoë räumte in Köln auf 🎉 ".repeat(40), &["köln", "umzug"]),
            summary("older", &["umzug", "arbeit"]),
        ];
        let persistent = vec!["Prefers mornings".to_string(), "Has a dog".to_string()];
        for limit in [1, 10, 60, 200, 2_000] {
            let v = render_context(Utc::now(), &s, &persistent, 12, limit);
            assert!(v.chars().count() <= limit, "{limit}: {}", v.chars().count());
        }
        let v = render_context(Utc::now(), &s, &persistent, 12, 2_000);
        assert!(v.starts_with("Recent: Zoë"));
        assert!(v.contains("Active topics: umzug, köln, arbeit"));
        assert!(v.ends_with("- Has a dog"));
        // a tight limit shortens the summary before dropping anything else
        let v = render_context(Utc::now(), &s, &persistent, 12, 200);
        assert!(v.contains("…"));
        assert!(v.contains("- Has a dog"), "{v}");
    }
}
