//! Sessions, turns and connections, and the live working context.

use chrono::{DateTime, Utc};
use recall_actors::model::{ConversationTurn, EndReason};
use serde::{Deserialize, Serialize};

use super::Id;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::runtime::{LiveContext, SessionStatus};

/// `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartSession {
    #[schema(value_type = Id)]
    pub agent_id: String,
    #[schema(value_type = Id)]
    pub user_id: String,
    /// The voice connection; a new UUID when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub connection_id: Option<String>,
}

/// A session started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionStarted {
    pub session_id: Uuid,
    pub connection_id: String,
    pub agent_id: String,
    pub user_id: String,
    pub started_at: DateTime<Utc>,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListSessions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub user_id: Option<String>,
    /// Only live sessions (`true`) or only ended ones (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
    /// The next page: the sessions after this one (the last of the page
    /// before); `404 unknown_session` if it names no session the token covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Uuid>,
    /// At most this many, newest first: 1 to 1000, 100 when left out
    /// (`400 invalid` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<usize>,
}

/// Sessions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionStatus>,
}

/// A session's stored turns, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TurnList {
    pub session_id: Uuid,
    pub turns: Vec<ConversationTurn>,
}

/// `POST /v1/connections/{connection_id}/turns`: one completed exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnIn {
    pub user_message: String,
    pub agent_response: String,
}

/// Whose connection a turn is for, and how it is acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TurnOptions {
    /// The connection's agent, as its session was started with.
    #[param(value_type = Id)]
    pub agent_id: String,
    /// The connection's user: a connection passed to another user (or
    /// agent) is `403 connection_reassigned`, and nothing is recorded.
    #[param(value_type = Id)]
    pub user_id: String,
    /// Answer once the turn is flushed to disk (201) instead of once it is
    /// queued (202).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
}

/// A turn taken: queued (202), or on disk with `durable` (201).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TurnAck {
    /// The session the turn went to.
    pub session_id: Uuid,
    /// Set when the turn is on disk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
}

/// `POST /v1/connections/{connection_id}/end`; the body may be left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndSession {
    /// `disconnect` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<CallerEndReason>)]
    pub reason: Option<EndReason>,
}

/// The reasons a caller ends a session with (the others are the runtime's
/// own: a silence timeout, a shutdown, a crash, a recovery).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // the document's type; requests read an EndReason
enum CallerEndReason {
    Disconnect,
    Cleared,
}

/// A live session ended, or none was live (the call is idempotent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionEnded {
    pub session_id: Option<Uuid>,
    pub ended: bool,
}

/// An agent's working context with a user: the live sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkingContext {
    pub agent_id: String,
    pub user_id: String,
    /// Turns over the live sessions.
    pub turn_count: usize,
    /// About four characters per token.
    pub token_estimate: usize,
    pub sessions: Vec<LiveContext>,
    /// The `background_context` block as this user's context shows it
    /// (empty until there is something to say).
    pub background_context: String,
}

/// The live sessions a clear ended (reason `cleared`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextCleared {
    pub agent_id: String,
    pub user_id: String,
    pub ended: Vec<Uuid>,
}

/// Whose connection it is: the query of `touch` and `end`, checked
/// against the connection's session (`403 connection_reassigned`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConnectionOwner {
    #[param(value_type = Id)]
    pub agent_id: String,
    #[param(value_type = Id)]
    pub user_id: String,
}

/// The query of `GET /v1/connections/{connection_id}/stream`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    #[param(value_type = Id)]
    pub agent_id: String,
    #[param(value_type = Id)]
    pub user_id: String,
}
