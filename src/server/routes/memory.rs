//! Memory blocks, summaries, facts, topics, search and the assembled
//! context.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use recall_actors::model::{BlockLabel, FactRecord};
use recall_actors::search::{DocKind, SearchQuery};
use uuid::Uuid;

use super::parse_id;
use crate::api::*;
use crate::runtime::SummaryQuery;
use crate::server::auth::Access;
use crate::server::error::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::server::AppState;

fn parse_label(raw: &str) -> Result<BlockLabel, ApiError> {
    raw.parse::<BlockLabel>()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_label", e.to_string()))
}

/// The block, or an empty one within the configured limit.
fn block(
    app: &AppState,
    agent_id: &str,
    label: BlockLabel,
    b: Option<recall_actors::model::MemoryBlock>,
) -> Block {
    Block::new(
        agent_id,
        label,
        app.runtime.settings().blocks.limit(label),
        b,
    )
}

/// Every memory block of an agent
#[utoipa::path(get, path = "/v1/agents/{agent_id}/blocks", operation_id = "listBlocks", tag = "memory",
    params(("agent_id" = Id, Path)),
    responses((status = 200, description = "Every label, written or not", body = BlockList)))]
pub async fn list_blocks(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<BlockList>, ApiError> {
    access.allow(&agent_id)?;
    let stored = app.runtime.blocks(&agent_id).await?;
    let blocks = BlockLabel::ALL
        .into_iter()
        .map(|label| {
            let b = stored.iter().find(|b| b.label == label).cloned();
            block(&app, &agent_id, label, b)
        })
        .collect();
    Ok(Json(BlockList { blocks }))
}

/// A memory block: the agent's, or as one user's context shows it (empty until written)
///
/// Without `user_id`, the agent's stored block, as its operator set it
/// (`PUT`): a reflection never writes it, and its `background_context`
/// holds only the agent's persistent context (an agent's users all read
/// it, so it carries none of their conversations). With `user_id`, the
/// block as that user's context shows it: their own `background_context`,
/// and for `relationship`/`self_perception` the agent's value followed by
/// a line `In calls with this user: ` and what reflections on their calls
/// drew (either alone when there is one), never another user's.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/blocks/{label}", operation_id = "getBlock", tag = "memory",
    params(("agent_id" = Id, Path), ("label" = BlockLabel, Path), BlockParams),
    responses(
        (status = 200, description = "The block", body = Block),
        (status = 400, description = "`invalid_label`", body = ErrorBody),
    ))]
pub async fn get_block(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<BlockParams>,
) -> Result<Json<Block>, ApiError> {
    access.allow(&agent_id)?;
    let label = parse_label(&label)?;
    let Some(user_id) = q.user_id else {
        let b = app.runtime.block(&agent_id, label).await?;
        return Ok(Json(block(&app, &agent_id, label, b)));
    };
    let b = app.runtime.user_block(&agent_id, &user_id, label).await?;
    let mut b = block(&app, &agent_id, label, b);
    b.user_id = Some(user_id);
    Ok(Json(b))
}

/// Set a memory block within its limit
///
/// The agent's block, which every user's context shows; only this route
/// writes it (reflections keep what they draw from a user's call as that
/// user's). `background_context` is rebuilt by the watchdog and cannot be
/// set (409).
#[utoipa::path(put, path = "/v1/agents/{agent_id}/blocks/{label}", operation_id = "putBlock", tag = "memory",
    params(("agent_id" = Id, Path), ("label" = BlockLabel, Path)),
    request_body = BlockIn,
    responses(
        (status = 200, description = "The block as stored", body = Block),
        (status = 409, description = "`managed_block`", body = ErrorBody),
        (status = 422, description = "`block_too_long`", body = ErrorBody),
    ))]
pub async fn put_block(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<BlockIn>,
) -> Result<Json<Block>, ApiError> {
    access.allow(&agent_id)?;
    let label = parse_label(&label)?;
    let b = app.runtime.set_block(&agent_id, label, &body.value).await?;
    Ok(Json(Block::from(b)))
}

/// Summaries, newest first
///
/// At most `limit` (1 to 1000, 100 when left out), read from the store by
/// period end and no further; `before` asks for the next page.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/summaries", operation_id = "listSummaries", tag = "memory",
    params(("agent_id" = Id, Path), SummaryParams),
    responses(
        (status = 200, description = "The summaries", body = SummaryList),
        (status = 400, description = "`invalid`: `limit` is 0 or over 1000; `invalid_query`, `invalid_path`: a malformed query or path", body = ErrorBody),
        (status = 404, description = "`unknown_summary`: `before` names no summary of the agent", body = ErrorBody),
    ))]
pub async fn list_summaries(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SummaryParams>,
) -> Result<Json<SummaryList>, ApiError> {
    access.allow(&agent_id)?;
    if let Some(user) = &q.user_id {
        recall_actors::model::validate_id("user_id", user)?;
    }
    let query = SummaryQuery {
        kind: q.kind,
        user_id: q.user_id,
        since: q.since,
        until: q.until,
        before: q.before,
        limit: q.limit,
    };
    let summaries = app.runtime.find_summaries(&agent_id, &query).await?;
    Ok(Json(SummaryList { summaries }))
}

/// One summary, with its archival text
#[utoipa::path(get, path = "/v1/summaries/{summary_id}", operation_id = "getSummary", tag = "memory",
    params(("summary_id" = Uuid, Path, description = "A summary id (UUID)")),
    responses(
        (status = 200, description = "The summary", body = SummaryView),
        (status = 404, description = "`unknown_summary`", body = ErrorBody),
    ))]
pub async fn get_summary(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SummaryView>, ApiError> {
    let id = parse_id("summary id", &id)?;
    let summary = app
        .runtime
        .summary(id)
        .await?
        .ok_or_else(|| ApiError::not_found("unknown_summary", format!("no summary {id}")))?;
    access.allow(&summary.agent_id)?;
    Ok(Json(SummaryView {
        archival_text: summary.to_archival_text(),
        summary,
    }))
}

/// The facts a user may see: their own and every user's shared ones, current and earlier (an earlier value has `superseded_by` set)
#[utoipa::path(get, path = "/v1/agents/{agent_id}/facts", operation_id = "listFacts", tag = "memory",
    params(("agent_id" = Id, Path), FactUser),
    responses((status = 200, description = "The facts", body = FactList)))]
pub async fn list_facts(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FactUser>,
) -> Result<Json<FactList>, ApiError> {
    access.allow(&agent_id)?;
    let facts = app.runtime.facts(&agent_id, &q.user_id).await?;
    Ok(Json(FactList {
        agent_id,
        user_id: q.user_id,
        facts,
    }))
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

/// Share a fact or make it private again (its owner only)
#[utoipa::path(patch, path = "/v1/facts/{fact_id}", operation_id = "patchFact", tag = "memory",
    params(("fact_id" = Uuid, Path, description = "A fact id (UUID)")),
    request_body = FactPatch,
    responses(
        (status = 200, description = "The fact as stored", body = FactRecord),
        (status = 403, description = "`not_fact_owner`, or the token does not cover the agent", body = ErrorBody),
        (status = 404, description = "`unknown_fact`", body = ErrorBody),
    ))]
pub async fn patch_fact(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<FactPatch>,
) -> Result<Json<FactRecord>, ApiError> {
    let id = fact_for(&app, &access, &id).await?;
    let fact = app
        .runtime
        .set_fact_visibility(id, &body.user_id, body.visibility)
        .await?;
    Ok(Json(fact))
}

/// Delete a fact (its owner only)
#[utoipa::path(delete, path = "/v1/facts/{fact_id}", operation_id = "deleteFact", tag = "memory",
    params(("fact_id" = Uuid, Path, description = "A fact id (UUID)"), FactUser),
    responses(
        (status = 200, description = "The deleted fact", body = FactDeleted),
        (status = 403, description = "`not_fact_owner`, or the token does not cover the agent", body = ErrorBody),
        (status = 404, description = "`unknown_fact`", body = ErrorBody),
    ))]
pub async fn delete_fact(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FactUser>,
) -> Result<Json<FactDeleted>, ApiError> {
    let id = fact_for(&app, &access, &id).await?;
    let deleted = app.runtime.delete_fact(id, &q.user_id).await?;
    Ok(Json(FactDeleted { deleted }))
}

/// An agent's topics (clusters of a user's session summaries), most recently active first
///
/// At most `limit` (1 to 1000, 100 when left out).
#[utoipa::path(get, path = "/v1/agents/{agent_id}/topics", operation_id = "listTopics", tag = "memory",
    params(("agent_id" = Id, Path), TopicParams),
    responses(
        (status = 200, description = "The topics", body = TopicList),
        (status = 400, description = "`invalid`: `limit` is 0 or over 1000; `invalid_query`, `invalid_path`: a malformed query or path", body = ErrorBody),
    ))]
pub async fn list_topics(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TopicParams>,
) -> Result<Json<TopicList>, ApiError> {
    access.allow(&agent_id)?;
    let topics = app
        .runtime
        .list_topics(&agent_id, q.user_id.as_deref(), q.limit)
        .await?;
    Ok(Json(TopicList { agent_id, topics }))
}

/// The search a request asks for: its kinds read, a limit of 0 refused.
pub(crate) fn search_query(p: &SearchParams) -> Result<SearchQuery, ApiError> {
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
    Ok(SearchQuery {
        text: p.q.clone(),
        kinds,
        user_id: p.user_id.clone(),
        since: p.since,
        until: p.until,
        limit: p.limit.unwrap_or(0),
    })
}

/// Archival search over an agent's summaries (every type, current versions), facts and (asked for by type) raw turns: BM25 blended with embedding similarity
#[utoipa::path(get, path = "/v1/agents/{agent_id}/search", operation_id = "search", tag = "memory",
    params(("agent_id" = Id, Path), SearchParams),
    responses(
        (status = 200, description = "Results, best first", body = SearchResults),
        (status = 502, description = "`embedding_failed`: the embedding endpoint failed", body = ErrorBody),
    ))]
pub async fn search(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<Json<SearchResults>, ApiError> {
    access.allow(&agent_id)?;
    let query = search_query(&p)?;
    let results = app.runtime.search(&agent_id, query).await?;
    Ok(Json(SearchResults {
        agent_id,
        query: p.q,
        user_id: p.user_id,
        results,
    }))
}

/// The context for the agent's next LLM call, within a token budget
///
/// Core-memory blocks, the facts the user may see, the user's summaries,
/// what their memory holds about the message, the live session's turns,
/// then the current message. Over budget, the oldest summaries go first,
/// then the oldest turns, then blocks, and facts last. Never waits on an
/// LLM.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/context", operation_id = "assembleContext", tag = "memory",
    params(("agent_id" = Id, Path), ContextParams),
    responses(
        (status = 200, description = "The context", body = Context),
        (status = 400, description = "`invalid_budget`", body = ErrorBody),
        (status = 422, description = "`message_over_budget`", body = ErrorBody),
    ))]
pub async fn assemble_context(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ContextParams>,
) -> Result<Json<Context>, ApiError> {
    access.allow(&agent_id)?;
    let options = crate::ContextOptions {
        include_live: q.live,
        ..Default::default()
    };
    let ctx = app
        .runtime
        .context(&agent_id, &q.user_id, &q.message, q.budget_tokens, options)
        .await?;
    Ok(Json(Context::new(agent_id, q.user_id, &ctx)))
}
