//! Dead letters, replay, rollups and forgetting a user.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use recall_actors::rollup::RollupReport;
use recall_actors::store::ForgetReport;

use super::{optional_body, parse_id};
use crate::api::*;
use crate::runtime::{RecallError, ReplayReport, ReplayRequest};
use crate::server::auth::Access;
use crate::server::error::{ApiBytes, ApiError, ApiPath, ApiQuery};
use crate::server::AppState;

/// Reflections that failed for good, oldest first
///
/// At most `limit` (1 to 1000, 100 when left out), read from the store in
/// that order and no further; `after` (the last letter's session id) gives
/// the next page. A retried letter leaves the list, so the next ones come
/// up.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/dead-letters", operation_id = "listDeadLetters", tag = "admin",
    params(("agent_id" = Id, Path), DeadLetterParams),
    responses(
        (status = 200, description = "The dead letters", body = DeadLetterList),
        (status = 400, description = "`invalid`: `limit` is 0 or over 1000; `invalid_query`, `invalid_path`: a malformed query or path", body = ErrorBody),
        (status = 404, description = "`unknown_dead_letter`: `after` names no dead letter of this agent", body = ErrorBody),
    ))]
pub async fn list_dead_letters(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<DeadLetterParams>,
) -> Result<Json<DeadLetterList>, ApiError> {
    access.allow(&agent_id)?;
    let dead_letters = app
        .runtime
        .agent_dead_letters(&agent_id, q.after, q.limit)
        .await?;
    Ok(Json(DeadLetterList { dead_letters }))
}

/// Queue a dead letter's reflection again
#[utoipa::path(post, path = "/v1/dead-letters/{session_id}/retry", operation_id = "retryDeadLetter", tag = "admin",
    params(("session_id" = Uuid, Path, description = "The dead letter's session id (UUID)")),
    responses(
        (status = 202, description = "Queued again", body = Requeued),
        (status = 404, description = "`unknown_dead_letter`", body = ErrorBody),
    ))]
pub async fn retry_dead_letter(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<Requeued>), ApiError> {
    let id = parse_id("dead letter id", &id)?;
    let letter = app.runtime.dead_letter(id).await?.ok_or_else(|| {
        ApiError::not_found(
            "unknown_dead_letter",
            format!("no dead letter for session {id}"),
        )
    })?;
    access.allow(&letter.agent_id)?;
    app.runtime.retry_dead_letter(id).await?;
    let requeued = Requeued {
        session_id: id,
        requeued: true,
    };
    Ok((StatusCode::ACCEPTED, Json(requeued)))
}

/// Forget a user: their turns, sessions, summaries of every layer, facts, topics, blocks drawn from their calls, reflection jobs, dead letters, vectors and search entries; their live calls end first
///
/// With `agent_id`, what they shared with that agent (the token must cover
/// it); without, with every agent (a token for all agents).
#[utoipa::path(delete, path = "/v1/users/{user_id}", operation_id = "forgetUser", tag = "admin",
    params(("user_id" = Id, Path), ForgetParams),
    responses((status = 200, description = "What was removed", body = ForgetReport)))]
pub async fn forget_user(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ForgetParams>,
) -> Result<Json<ForgetReport>, ApiError> {
    match &q.agent_id {
        Some(a) => access.allow(a)?,
        None => access.require_all()?,
    }
    let report = app
        .runtime
        .forget_user(&user_id, q.agent_id.as_deref())
        .await?;
    Ok(Json(report))
}

/// Re-derive an agent's session summaries, facts, rollups and topics from the stored turns with the current prompts and summarizer, as new versions linked to the old
///
/// Sessions whose derivation would not change are skipped, so a second run
/// changes nothing. Plain: the report when done. With `stream=true`: JSON
/// lines as it goes, a `progress` line per session and a `report` (or
/// `error`) line at the end; closing the connection stops the replay after
/// the session in hand, and running it again resumes. The body may be left
/// out.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/replay", operation_id = "replay", tag = "admin",
    params(("agent_id" = Id, Path), ReplayOptions),
    request_body(content = Option<ReplayIn>, description = "Optional"),
    responses((status = 200, description = "The report, or with `stream=true` JSON lines", content(
        (ReplayReport = "application/json"),
        (ReplayLine = "application/x-ndjson"),
    ))))]
pub async fn replay(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ReplayOptions>,
    ApiBytes(body): ApiBytes,
) -> Result<Response, ApiError> {
    access.allow(&agent_id)?;
    let body: ReplayIn = optional_body(&body)?;
    // Bad ids are a 400 before anything streams.
    recall_actors::model::validate_id("agent_id", &agent_id).map_err(RecallError::from)?;
    if let Some(u) = &body.user_id {
        recall_actors::model::validate_id("user_id", u).map_err(RecallError::from)?;
    }
    let req = ReplayRequest {
        agent_id,
        user_id: body.user_id,
        since: body.since,
    };
    if !q.stream {
        let report: ReplayReport = app.runtime.replay(&req, |_| true).await?;
        return Ok(Json(report).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let runtime = app.runtime.clone();
    tokio::spawn(async move {
        let line = |l: &ReplayLine| {
            let mut s = serde_json::to_string(l).expect("a replay line serializes");
            s.push('\n');
            s
        };
        let progress = tx.clone();
        let res = runtime
            // A closed connection stops the replay.
            .replay(&req, |p| {
                progress.send(line(&ReplayLine::Progress(*p))).is_ok()
            })
            .await;
        let last = match res {
            Ok(report) => ReplayLine::Report { report },
            Err(e) => {
                let e = ApiError::from(e);
                ReplayLine::Error {
                    error: ErrorDetail {
                        code: e.code.to_string(),
                        message: e.message,
                    },
                }
            }
        };
        let _ = tx.send(line(&last));
    });
    let lines = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|l| (Ok::<_, std::convert::Infallible>(l), rx))
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response())
}

/// Run every agent's rollups now and take in new summaries (what the timers do, at once)
///
/// An operator's catch-up after an outage; a token for all agents.
#[utoipa::path(post, path = "/v1/rollups/run", operation_id = "runRollups", tag = "admin",
    responses(
        (status = 200, description = "What the run did", body = RollupReport),
        (status = 409, description = "`rollups_off`, or `elsewhere`: another instance holds the rollup lease", body = ErrorBody),
    ))]
pub async fn run_rollups(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
) -> Result<Json<RollupReport>, ApiError> {
    access.require_all()?;
    Ok(Json(app.runtime.run_rollups().await?))
}
