//! Sessions, turns and connections, and the live working context.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use uuid::Uuid;

use super::{optional_body, parse_id};
use crate::api::*;
use crate::runtime::{EndOptions, SessionQuery, SessionStatus, TouchOptions, Turn};
use crate::server::auth::Access;
use crate::server::error::{ApiBytes, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::server::AppState;
use recall_actors::model::EndReason;

/// The agent a connection belongs to, checked against the token.
fn unknown_session(id: Uuid) -> ApiError {
    ApiError::not_found("unknown_session", format!("no session {id}"))
}

/// The stored session, once the token is known to cover its agent.
async fn session_for(app: &AppState, access: &Access, raw_id: &str) -> Result<Uuid, ApiError> {
    let id = parse_id("session id", raw_id)?;
    let rec = app
        .runtime
        .session(id)
        .await?
        .ok_or_else(|| unknown_session(id))?;
    access.allow(&rec.agent_id)?;
    Ok(id)
}

/// Start a session on a connection
#[utoipa::path(post, path = "/v1/sessions", operation_id = "startSession", tag = "sessions",
    request_body = StartSession,
    responses(
        (status = 201, description = "Started", body = SessionStarted),
        (status = 409, description = "`connection_busy`: a live session of another agent or user holds the connection; `connection_owned`", body = ErrorBody),
        (status = 429, description = "`too_many_sessions`: the agent has session.max_live_per_agent live sessions, or the server session.max_live", body = ErrorBody),
    ))]
pub async fn start_session(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiJson(body): ApiJson<StartSession>,
) -> Result<(StatusCode, Json<SessionStarted>), ApiError> {
    access.allow(&body.agent_id)?;
    let connection_id = body
        .connection_id
        .unwrap_or_else(|| Uuid::new_v4().to_string());
    let rec = app
        .runtime
        .start_session(&body.agent_id, &body.user_id, &connection_id)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(SessionStarted {
            session_id: rec.session_id,
            connection_id: rec.connection_id,
            agent_id: rec.agent_id,
            user_id: rec.user_id,
            started_at: rec.started_at,
        }),
    ))
}

/// Stored sessions, newest first
///
/// At most `limit` (1 to 1000, 100 when left out), read from the store in
/// start order and no further; `before` asks for the next page.
#[utoipa::path(get, path = "/v1/sessions", operation_id = "listSessions", tag = "sessions",
    params(ListSessions),
    responses(
        (status = 200, description = "Sessions the token covers", body = SessionList),
        (status = 400, description = "`invalid`: `limit` is 0 or over 1000; `invalid_query`: a malformed query", body = ErrorBody),
        (status = 404, description = "`unknown_session`: `before` names no session the token covers", body = ErrorBody),
    ))]
pub async fn list_sessions(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiQuery(q): ApiQuery<ListSessions>,
) -> Result<Json<SessionList>, ApiError> {
    // The token's agents are the listing's filter, so the limit counts
    // only sessions it may see.
    let agents = match (&q.agent_id, &access) {
        (Some(agent), _) => {
            access.allow(agent)?;
            Some(vec![agent.clone()])
        }
        (None, Access::All) => None,
        (None, Access::Agents(set)) => Some(set.iter().cloned().collect()),
    };
    let query = SessionQuery {
        agents,
        user_id: q.user_id,
        live: q.live,
        before: q.before,
        limit: q.limit,
    };
    let sessions = app.runtime.list_sessions(&query).await?;
    // Stored records of live sessions say 0 turns until they end: ask the
    // live ones.
    let mut out = Vec::with_capacity(sessions.len());
    for s in sessions {
        if s.ended_at.is_none() {
            if let Some(status) = app.runtime.session_status(s.session_id).await? {
                out.push(status);
                continue;
            }
        }
        out.push(SessionStatus {
            live: s.ended_at.is_none(),
            record: s,
        });
    }
    Ok(Json(SessionList { sessions: out }))
}

/// A session: live or ended, turn count, end reason, times
#[utoipa::path(get, path = "/v1/sessions/{session_id}", operation_id = "getSession", tag = "sessions",
    params(("session_id" = Uuid, Path, description = "A session id (UUID)")),
    responses(
        (status = 200, description = "The session", body = SessionStatus),
        (status = 404, description = "`unknown_session`", body = ErrorBody),
    ))]
pub async fn get_session(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionStatus>, ApiError> {
    let id = session_for(&app, &access, &id).await?;
    let status = app
        .runtime
        .session_status(id)
        .await?
        .ok_or_else(|| unknown_session(id))?;
    Ok(Json(status))
}

/// A session's stored turns, in order
#[utoipa::path(get, path = "/v1/sessions/{session_id}/turns", operation_id = "getTurns", tag = "sessions",
    params(("session_id" = Uuid, Path, description = "A session id (UUID)")),
    responses(
        (status = 200, description = "The turns", body = TurnList),
        (status = 404, description = "`unknown_session`", body = ErrorBody),
    ))]
pub async fn get_turns(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TurnList>, ApiError> {
    let id = session_for(&app, &access, &id).await?;
    let turns = app.runtime.turns(id).await?;
    Ok(Json(TurnList {
        session_id: id,
        turns,
    }))
}

/// Record a turn
///
/// A turn for a connection whose session ended opens a new session there.
/// With `durable=true` the answer comes once the turn is flushed to disk.
/// `agent_id` and `user_id` name the connection's owner, as its session
/// was started: a connection that belongs to someone else is refused.
#[utoipa::path(post, path = "/v1/connections/{connection_id}/turns", operation_id = "recordTurn", tag = "sessions",
    params(("connection_id" = Id, Path, description = "The voice connection"), TurnOptions),
    request_body = TurnIn,
    responses(
        (status = 202, description = "Queued", body = TurnAck),
        (status = 201, description = "On disk (`durable=true`)", body = TurnAck),
        (status = 403, description = "`connection_reassigned`: the connection belongs to another agent or user; or the token does not cover the agent", body = ErrorBody),
        (status = 404, description = "`unknown_connection`: start a session first", body = ErrorBody),
        (status = 422, description = "`empty_turn`, `too_long`", body = ErrorBody),
    ))]
pub async fn record_turn(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TurnOptions>,
    ApiJson(body): ApiJson<TurnIn>,
) -> Result<(StatusCode, Json<TurnAck>), ApiError> {
    access.allow(&q.agent_id)?;
    let turn = Turn::new(body.user_message, body.agent_response).owned_by(&q.agent_id, &q.user_id);
    if q.durable {
        let session_id = app
            .runtime
            .record_turn_durable(&connection_id, turn)
            .await?;
        let ack = TurnAck {
            session_id,
            durable: true,
        };
        Ok((StatusCode::CREATED, Json(ack)))
    } else {
        let session_id = app.runtime.record_turn(&connection_id, turn)?;
        let ack = TurnAck {
            session_id,
            durable: false,
        };
        Ok((StatusCode::ACCEPTED, Json(ack)))
    }
}

/// The user is speaking: defer the silence timeout
#[utoipa::path(post, path = "/v1/connections/{connection_id}/touch", operation_id = "touch", tag = "sessions",
    params(("connection_id" = Id, Path, description = "The voice connection"), ConnectionOwner),
    responses(
        (status = 202, description = "Deferred", body = Empty),
        (status = 403, description = "`connection_reassigned`: the connection belongs to another agent or user; or the token does not cover the agent", body = ErrorBody),
        (status = 404, description = "`unknown_connection`", body = ErrorBody),
    ))]
pub async fn touch(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ConnectionOwner>,
) -> Result<(StatusCode, Json<Empty>), ApiError> {
    access.allow(&q.agent_id)?;
    let options = TouchOptions::default().owned_by(&q.agent_id, &q.user_id);
    app.runtime.touch(&connection_id, options)?;
    Ok((StatusCode::ACCEPTED, Json(Empty {})))
}

/// End the live session (idempotent)
///
/// The body may be left out (reason `disconnect`).
#[utoipa::path(post, path = "/v1/connections/{connection_id}/end", operation_id = "endSession", tag = "sessions",
    params(("connection_id" = Id, Path, description = "The voice connection"), ConnectionOwner),
    request_body(content = Option<EndSession>, description = "Optional"),
    responses(
        (status = 202, description = "Ended, or none was live", body = SessionEnded),
        (status = 403, description = "`connection_reassigned`: the connection belongs to another agent or user (nothing ends); or the token does not cover the agent", body = ErrorBody),
        (status = 404, description = "`unknown_connection`", body = ErrorBody),
    ))]
pub async fn end(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ConnectionOwner>,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<SessionEnded>), ApiError> {
    access.allow(&q.agent_id)?;
    let body: EndSession = optional_body(&body)?;
    let reason = body.reason.unwrap_or(EndReason::Disconnect);
    let options = EndOptions::because(reason).owned_by(&q.agent_id, &q.user_id);
    let ended = app.runtime.end_session(&connection_id, options)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(SessionEnded {
            session_id: ended,
            ended: ended.is_some(),
        }),
    ))
}

/// The working context: live sessions, turn count, token estimate, time since the last turn
#[utoipa::path(get, path = "/v1/agents/{agent_id}/users/{user_id}/context", operation_id = "getContext", tag = "sessions",
    params(("agent_id" = Id, Path), ("user_id" = Id, Path)),
    responses((status = 200, description = "The live sessions", body = WorkingContext)))]
pub async fn get_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, user_id)): ApiPath<(String, String)>,
) -> Result<Json<WorkingContext>, ApiError> {
    access.allow(&agent_id)?;
    let sessions = app.runtime.live_contexts(&agent_id, &user_id).await?;
    // This user's, never the agent-wide block (which mixes every user's).
    let background_context = app
        .runtime
        .user_background_context(&agent_id, &user_id)
        .await?;
    Ok(Json(WorkingContext {
        turn_count: sessions.iter().map(|s| s.turn_count).sum(),
        token_estimate: sessions.iter().map(|s| s.token_estimate).sum(),
        agent_id,
        user_id,
        sessions,
        background_context,
    }))
}

/// Clear the working context: end live sessions with reason `cleared`
#[utoipa::path(delete, path = "/v1/agents/{agent_id}/users/{user_id}/context", operation_id = "clearContext", tag = "sessions",
    params(("agent_id" = Id, Path), ("user_id" = Id, Path)),
    responses((status = 200, description = "The sessions ended", body = ContextCleared)))]
pub async fn clear_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, user_id)): ApiPath<(String, String)>,
) -> Result<Json<ContextCleared>, ApiError> {
    access.allow(&agent_id)?;
    let ended = app.runtime.clear_context(&agent_id, &user_id)?;
    Ok(Json(ContextCleared {
        agent_id,
        user_id,
        ended,
    }))
}
