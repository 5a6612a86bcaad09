//! Forgetting a user (seed `001`): every record of theirs, and every record
//! built from theirs, leaves the store.
//!
//! A user's records are their sessions and turns, their session summaries,
//! the daily, weekly and topic summaries made from those (rollups and topics
//! are per user, so all of their sources are the user's: they go too, with
//! no re-derivation left to do), their facts, topics, the blocks drawn from
//! their conversations, reflection jobs and dead letters of their sessions,
//! vectors and rollup-inbox rows of any of those items. Each agent's
//! `background_context` block, which mixes its users, is removed for the
//! watchdog to rebuild from what is left.
//!
//! A marker in `meta` is written before the first deletion and removed after
//! the last, so a forget cut short by a crash is finished at the next start
//! ([`ForgetStore::pending_forgets`](super::ForgetStore::pending_forgets)). Running it again finds nothing more.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a forget removed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetReport {
    pub user_id: String,
    /// The one agent it was limited to, if any.
    pub agent_id: Option<String>,
    pub sessions: usize,
    pub turns: usize,
    pub session_summaries: usize,
    pub daily_summaries: usize,
    pub weekly_summaries: usize,
    pub topic_summaries: usize,
    pub facts: usize,
    pub topics: usize,
    pub blocks: usize,
    pub reflection_jobs: usize,
    pub dead_letters: usize,
    pub vectors: usize,
    pub inbox_rows: usize,
    /// Agents whose memory changed (their `background_context` is rebuilt).
    pub agents: BTreeSet<String>,
    /// Ids of the removed sessions, summaries, facts and topics (not
    /// serialized: for the Store's search index and its guards).
    #[serde(skip)]
    pub removed_ids: HashSet<Uuid>,
}

impl ForgetReport {
    /// Whether anything was removed.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

/// A forget begun and not finished: the user, and the agent it was
/// limited to.
pub type PendingForget = (String, Option<String>);
