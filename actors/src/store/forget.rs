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
//!
//! Each forget also leaves two traces, neither of which names the user:
//!
//! - an entry in the **forget log** ([`ForgetEntry`]: a hash of the user
//!   id, the agent it was limited to, the time), kept for good, one small
//!   row per forget. It travels with exports, and an import honours
//!   entries its own log lacks, so a backup taken before a forget does not
//!   bring the user back. On PostgreSQL, instances read it again after
//!   their change feed was cut and every refresh, so none misses a forget;
//! - the **forgotten ids**, for [`FORGOTTEN_FOR`]: a write about one of
//!   them that was under way when the forget ran (a call's last turns, a
//!   reflection, a rollup) is dropped, after a restart too. The Store
//!   guards by session and summary ids; sled keeps every removed id,
//!   PostgreSQL those two kinds.

use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// How long a forgotten id is remembered: far longer than any write that
/// read it before the forget can take to arrive (a reflection's attempts
/// with their backoff, a rollup or a topic update run). The store keeps
/// them this long (across restarts) and no longer, so the set is bounded
/// by the forgets of that window.
pub const FORGOTTEN_FOR: std::time::Duration = std::time::Duration::from_secs(6 * 3600);

/// The hash a forget log keeps of a user id (a version-5 UUID of it): it
/// matches the user's records without naming the user.
pub fn user_hash(user_id: &str) -> Uuid {
    const NS: Uuid = Uuid::from_u128(0x666f_7267_6f74_2d75_7365_7200_0000_0001);
    Uuid::new_v5(&NS, user_id.as_bytes())
}

/// One forget, as the forget log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ForgetEntry {
    /// [`user_hash`] of the forgotten user.
    pub user_hash: Uuid,
    /// The one agent it was limited to; `None`: every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    pub at: DateTime<Utc>,
}

impl ForgetEntry {
    /// (`at` to the microsecond, as PostgreSQL keeps it.)
    pub fn new(user_id: &str, agent_id: Option<&str>, at: DateTime<Utc>) -> Self {
        use chrono::SubsecRound;
        ForgetEntry {
            user_hash: user_hash(user_id),
            agent_id: agent_id.map(str::to_string),
            at: at.trunc_subsecs(6),
        }
    }

    /// Whether this forget covers `user_id`'s records with `agent_id`.
    pub fn covers(&self, agent_id: &str, user_id: &str) -> bool {
        self.agent_id.as_deref().is_none_or(|a| a == agent_id)
            && self.user_hash == user_hash(user_id)
    }
}

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
