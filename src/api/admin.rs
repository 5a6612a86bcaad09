//! Dead letters, replay, rollups, forgetting a user, and health.

use chrono::{DateTime, Utc};
use recall_actors::model::DeadLetter;
use serde::{Deserialize, Serialize};

use super::Id;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ErrorDetail;
use crate::runtime::{ReembedProgress, ReplayProgress, ReplayReport};

/// Reflections that failed for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterList {
    pub dead_letters: Vec<DeadLetter>,
}

/// `GET /v1/agents/{agent_id}/dead-letters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterParams {
    /// At most this many, oldest first: 1 to 1000, 100 when left out
    /// (`400 invalid` otherwise). A retried letter leaves the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<usize>,
    /// The next page: the letters after this one (the session id of the
    /// last letter of the page before; `404 unknown_dead_letter` if it
    /// names no dead letter of the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Uuid>,
}

/// A dead letter's reflection queued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Requeued {
    pub session_id: Uuid,
    pub requeued: bool,
}

/// `POST /v1/agents/{agent_id}/replay`; the body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayIn {
    /// Only this user's sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub user_id: Option<String>,
    /// Only sessions started at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
}

/// How a replay answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReplayOptions {
    /// JSON lines as it goes ([`ReplayLine`]) instead of the report when
    /// done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// One line of a streamed replay: a `progress` line per session, then a
/// `report` or an `error` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReplayLine {
    Progress(ReplayProgress),
    Report { report: ReplayReport },
    Error { error: ErrorDetail },
}

/// `DELETE /v1/users/{user_id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ForgetParams {
    /// Only what the user shared with this agent (every agent without: a
    /// token for all agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub agent_id: Option<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// `GET /readyz`: `ready`, `shutting_down` (503) or `unavailable` (503).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    pub status: String,
    /// The storage backend (`sled` or `postgres`), when it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// Damaged records skipped at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_records: Option<u64>,
    /// How far re-embedding stored items with a new embedder has come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reembedding: Option<ReembedProgress>,
    /// Why it is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
