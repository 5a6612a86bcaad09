//! The `/v1` handlers.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use recall_actors::model::{BlockLabel, EndReason, MemoryBlock, SummaryType, Visibility};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::auth::Access;
use super::error::{ApiBytes, ApiError, ApiJson, ApiPath, ApiQuery};
use super::AppState;
use crate::runtime::{RecallError, ReplayRequest, SessionStatus, SummaryQuery};
use recall_actors::search::{DocKind, SearchQuery};

type ApiResult = Result<Response, ApiError>;

fn parse_id(what: &'static str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            format!("{what} {raw:?} is not a UUID"),
        )
    })
}

fn parse_label(raw: &str) -> Result<BlockLabel, ApiError> {
    raw.parse::<BlockLabel>()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_label", e.to_string()))
}

/// The agent a connection belongs to, checked against the token.
fn connection_agent(app: &AppState, access: &Access, connection_id: &str) -> Result<(), ApiError> {
    match app.runtime.connection_owner(connection_id) {
        Some((agent_id, _)) => access.allow(&agent_id),
        None => Err(ApiError::not_found(
            "unknown_connection",
            format!("connection {connection_id:?} has no session; start one first"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    agent_id: String,
    user_id: String,
    connection_id: Option<String>,
}

pub async fn start_session(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiJson(body): ApiJson<StartBody>,
) -> ApiResult {
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
        Json(json!({
            "session_id": rec.session_id,
            "connection_id": rec.connection_id,
            "agent_id": rec.agent_id,
            "user_id": rec.user_id,
            "started_at": rec.started_at,
        })),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSessions {
    agent_id: Option<String>,
    user_id: Option<String>,
    live: Option<bool>,
    limit: Option<usize>,
}

pub async fn list_sessions(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiQuery(q): ApiQuery<ListSessions>,
) -> ApiResult {
    if let Some(agent) = &q.agent_id {
        access.allow(agent)?;
    }
    let mut sessions = app.runtime.sessions(q.agent_id.as_deref()).await?;
    sessions.retain(|s| {
        access.covers(&s.agent_id)
            && q.user_id.as_deref().is_none_or(|u| s.user_id == u)
            && q.live.is_none_or(|live| live == s.ended_at.is_none())
    });
    // Newest first.
    sessions.sort_by_key(|s| std::cmp::Reverse((s.started_at, s.session_id)));
    if let Some(limit) = q.limit {
        sessions.truncate(limit);
    }
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
    Ok(Json(json!({ "sessions": out })).into_response())
}

pub async fn get_session(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let id = parse_id("session id", &id)?;
    let not_found = || ApiError::not_found("unknown_session", format!("no session {id}"));
    let rec = app.runtime.session(id).await?.ok_or_else(not_found)?;
    access.allow(&rec.agent_id)?;
    let status = app
        .runtime
        .session_status(id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(status).into_response())
}

pub async fn get_turns(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let id = parse_id("session id", &id)?;
    let rec = app
        .runtime
        .session(id)
        .await?
        .ok_or_else(|| ApiError::not_found("unknown_session", format!("no session {id}")))?;
    access.allow(&rec.agent_id)?;
    let turns = app.runtime.turns(id).await?;
    Ok(Json(json!({ "session_id": id, "turns": turns })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnBody {
    user_message: String,
    agent_response: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnQuery {
    #[serde(default)]
    durable: bool,
}

pub async fn record_turn(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TurnQuery>,
    ApiJson(body): ApiJson<TurnBody>,
) -> ApiResult {
    connection_agent(&app, &access, &connection_id)?;
    if q.durable {
        let id = app
            .runtime
            .record_turn_durable(&connection_id, body.user_message, body.agent_response)
            .await?;
        Ok((
            StatusCode::CREATED,
            Json(json!({"session_id": id, "durable": true})),
        )
            .into_response())
    } else {
        let id = app
            .runtime
            .record_turn(&connection_id, body.user_message, body.agent_response)?;
        Ok((StatusCode::ACCEPTED, Json(json!({"session_id": id}))).into_response())
    }
}

pub async fn touch(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
) -> ApiResult {
    connection_agent(&app, &access, &connection_id)?;
    app.runtime.touch(&connection_id)?;
    Ok((StatusCode::ACCEPTED, Json(json!({}))).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EndBody {
    reason: Option<EndReason>,
}

pub async fn end(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult {
    connection_agent(&app, &access, &connection_id)?;
    // The body is optional: `{}`, `{"reason":"disconnect"}` or nothing.
    let body: EndBody = if body.iter().all(u8::is_ascii_whitespace) {
        EndBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.to_string()))?
    };
    let reason = body.reason.unwrap_or(EndReason::Disconnect);
    let ended = app.runtime.end_session_because(&connection_id, reason)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": ended, "ended": ended.is_some()})),
    )
        .into_response())
}

fn block_json(
    app: &AppState,
    agent_id: &str,
    label: BlockLabel,
    b: Option<MemoryBlock>,
) -> serde_json::Value {
    match b {
        Some(b) => json!(b),
        // Never written: empty, within the configured limit.
        None => json!({
            "agent_id": agent_id,
            "label": label,
            "value": "",
            "limit": app.runtime.settings().blocks.limit(label),
            "updated_at": null,
        }),
    }
}

pub async fn list_blocks(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let stored = app.runtime.blocks(&agent_id).await?;
    let blocks: Vec<_> = BlockLabel::ALL
        .into_iter()
        .map(|label| {
            let b = stored.iter().find(|b| b.label == label).cloned();
            block_json(&app, &agent_id, label, b)
        })
        .collect();
    Ok(Json(json!({ "blocks": blocks })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockQuery {
    user_id: Option<String>,
}

/// A block: the agent's, or with `user_id` the one that user's context
/// shows (their own `background_context`, never another user's words).
pub async fn get_block(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<BlockQuery>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let label = parse_label(&label)?;
    let Some(user_id) = q.user_id else {
        let b = app.runtime.block(&agent_id, label).await?;
        return Ok(Json(block_json(&app, &agent_id, label, b)).into_response());
    };
    let b = app.runtime.user_block(&agent_id, &user_id, label).await?;
    let mut v = block_json(&app, &agent_id, label, b);
    v["user_id"] = json!(user_id);
    Ok(Json(v).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockBody {
    value: String,
}

pub async fn put_block(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<BlockBody>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let label = parse_label(&label)?;
    let b = app.runtime.set_block(&agent_id, label, &body.value).await?;
    Ok(Json(b).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummariesQuery {
    #[serde(rename = "type")]
    kind: Option<SummaryType>,
    user_id: Option<String>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    limit: Option<usize>,
}

pub async fn list_summaries(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SummariesQuery>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let query = SummaryQuery {
        kind: q.kind,
        user_id: q.user_id,
        since: q.since,
        until: q.until,
        limit: q.limit,
    };
    let summaries = app.runtime.find_summaries(&agent_id, &query).await?;
    Ok(Json(json!({ "summaries": summaries })).into_response())
}

pub async fn get_summary(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let id = parse_id("summary id", &id)?;
    let s = app
        .runtime
        .summary(id)
        .await?
        .ok_or_else(|| ApiError::not_found("unknown_summary", format!("no summary {id}")))?;
    access.allow(&s.agent_id)?;
    let mut v = json!(s);
    v["archival_text"] = json!(s.to_archival_text());
    Ok(Json(v).into_response())
}

pub async fn list_dead_letters(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let mut dead = app.runtime.dead_letters().await?;
    dead.retain(|d| d.agent_id == agent_id);
    Ok(Json(json!({ "dead_letters": dead })).into_response())
}

pub async fn retry_dead_letter(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let id = parse_id("dead letter id", &id)?;
    let letter = app.runtime.dead_letter(id).await?.ok_or_else(|| {
        ApiError::not_found(
            "unknown_dead_letter",
            format!("no dead letter for session {id}"),
        )
    })?;
    access.allow(&letter.agent_id)?;
    app.runtime.retry_dead_letter(id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": id, "requeued": true})),
    )
        .into_response())
}

pub async fn get_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, user_id)): ApiPath<(String, String)>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let sessions = app.runtime.live_contexts(&agent_id, &user_id).await?;
    // This user's, never the agent-wide block (which mixes every user's).
    let background = app
        .runtime
        .user_background_context(&agent_id, &user_id)
        .await?;
    Ok(Json(json!({
        "agent_id": agent_id,
        "user_id": user_id,
        "turn_count": sessions.iter().map(|s| s.turn_count).sum::<usize>(),
        "token_estimate": sessions.iter().map(|s| s.token_estimate).sum::<usize>(),
        "sessions": sessions,
        "background_context": background,
    }))
    .into_response())
}

pub async fn clear_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, user_id)): ApiPath<(String, String)>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let ended = app.runtime.clear_context(&agent_id, &user_id)?;
    Ok(Json(json!({ "agent_id": agent_id, "user_id": user_id, "ended": ended })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetQuery {
    agent_id: Option<String>,
}

/// Forgets a user: with `agent_id`, what they shared with that agent (the
/// token must cover it); without, with every agent (a token for all).
pub async fn forget_user(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ForgetQuery>,
) -> ApiResult {
    match &q.agent_id {
        Some(a) => access.allow(a)?,
        None => access.require_all()?,
    }
    let report = app
        .runtime
        .forget_user(&user_id, q.agent_id.as_deref())
        .await?;
    Ok(Json(report).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactsQuery {
    user_id: String,
}

pub async fn list_facts(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FactsQuery>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let facts = app.runtime.facts(&agent_id, &q.user_id).await?;
    Ok(Json(json!({ "agent_id": agent_id, "user_id": q.user_id, "facts": facts })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicsQuery {
    user_id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    user_id: Option<String>,
    since: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayQuery {
    #[serde(default)]
    stream: bool,
}

/// Replays an agent's sessions (one user's, those since a time). Plain: the
/// report when done. `?stream=true`: JSON lines as it goes, a `progress`
/// line per session and a `report` (or `error`) line at the end; closing
/// the connection stops the replay after the session in hand, and running
/// it again resumes.
pub async fn replay(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ReplayQuery>,
    ApiBytes(body): ApiBytes,
) -> ApiResult {
    access.allow(&agent_id)?;
    let body: ReplayBody = if body.iter().all(u8::is_ascii_whitespace) {
        ReplayBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.to_string()))?
    };
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
        let report = app.runtime.replay(&req, |_| true).await?;
        return Ok(Json(report).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let runtime = app.runtime.clone();
    tokio::spawn(async move {
        let line = |v: serde_json::Value| format!("{v}\n");
        let progress = tx.clone();
        let res = runtime
            .replay(&req, |p| {
                let mut v = json!(p);
                v["type"] = json!("progress");
                // A closed connection stops the replay.
                progress.send(line(v)).is_ok()
            })
            .await;
        let last = match res {
            Ok(report) => json!({"type": "report", "report": report}),
            Err(e) => {
                let e = ApiError::from(e);
                json!({"type": "error", "error": {"code": e.code, "message": e.message}})
            }
        };
        let _ = tx.send(line(last));
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

/// Runs every agent's due rollups now and takes in new summaries: what the
/// timers do, at once (an operator's catch-up after an outage).
pub async fn run_rollups(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
) -> ApiResult {
    access.require_all()?;
    let report = app.runtime.run_rollups().await?;
    Ok(Json(report).into_response())
}

pub async fn list_topics(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TopicsQuery>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let topics = app.runtime.topics(&agent_id, q.user_id.as_deref()).await?;
    Ok(Json(json!({ "agent_id": agent_id, "topics": topics })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    q: String,
    /// A summary type or `fact`; several separated by commas.
    #[serde(rename = "type")]
    kind: Option<String>,
    user_id: Option<String>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    limit: Option<usize>,
}

pub async fn search(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let kinds = match &p.kind {
        Some(k) => k
            .split(',')
            .map(|k| k.trim().parse::<DocKind>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(ApiError::from)?,
        None => Vec::new(),
    };
    if p.limit == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            "invalid limit: must be at least 1",
        ));
    }
    let query = SearchQuery {
        text: p.q.clone(),
        kinds,
        user_id: p.user_id.clone(),
        since: p.since,
        until: p.until,
        limit: p.limit.unwrap_or(0),
    };
    let results = app.runtime.search(&agent_id, query).await?;
    Ok(Json(json!({
        "agent_id": agent_id,
        "query": p.q,
        "user_id": p.user_id,
        "results": results,
    }))
    .into_response())
}

/// The fact, once the token is known to cover its agent.
async fn fact_for(app: &AppState, access: &Access, raw_id: &str) -> Result<Uuid, ApiError> {
    let id = parse_id("fact id", raw_id)?;
    let fact = app
        .runtime
        .fact(id)
        .await?
        .ok_or_else(|| ApiError::not_found("unknown_fact", format!("no fact {id}")))?;
    access.allow(&fact.agent_id)?;
    Ok(id)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactPatch {
    /// The acting user: only the fact's owner may change it.
    user_id: String,
    visibility: Visibility,
}

pub async fn patch_fact(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<FactPatch>,
) -> ApiResult {
    let id = fact_for(&app, &access, &id).await?;
    let fact = app
        .runtime
        .set_fact_visibility(id, &body.user_id, body.visibility)
        .await?;
    Ok(Json(fact).into_response())
}

pub async fn delete_fact(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FactsQuery>,
) -> ApiResult {
    let id = fact_for(&app, &access, &id).await?;
    let fact = app.runtime.delete_fact(id, &q.user_id).await?;
    Ok(Json(json!({ "deleted": fact })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssembleQuery {
    user_id: String,
    #[serde(default)]
    message: String,
    budget_tokens: usize,
    /// Show the live call; `false` for a caller that sends the call's own
    /// messages to its LLM.
    #[serde(default = "shown")]
    live: bool,
}

fn shown() -> bool {
    true
}

/// The context for the agent's next LLM call: tiers with their items and
/// token counts, what was trimmed, and the chat messages to send.
pub async fn assemble_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<AssembleQuery>,
) -> ApiResult {
    access.allow(&agent_id)?;
    let ctx = app
        .runtime
        .context_with(
            &agent_id,
            &q.user_id,
            &q.message,
            q.budget_tokens,
            crate::ContextOptions {
                include_live: q.live,
            },
        )
        .await?;
    let messages = ctx.to_messages();
    let mut v = json!(ctx);
    v["agent_id"] = json!(agent_id);
    v["user_id"] = json!(q.user_id);
    v["messages"] = json!(messages);
    Ok(Json(v).into_response())
}
