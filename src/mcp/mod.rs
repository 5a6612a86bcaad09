//! The Model Context Protocol server: recall's memory as MCP tools and
//! resources (the official SDK, `rmcp`), for agents built on frameworks
//! that speak MCP.
//!
//! One handler, [`RecallMcp`], over a [`Runtime`], served two ways:
//!
//! - over stdio by `recall mcp` (a client starts it as a child process;
//!   the process is the client's, so it may touch every agent);
//! - over streamable HTTP at `/mcp` (`http`), beside the API, in `recall
//!   serve` (which `recall mcp --transport http` runs): behind the API's
//!   tokens and its host and origin rules.
//!
//! Tools take what the API's routes take, checked the same way. A tool's
//! refusal is its result marked as an error (as MCP asks, so that a model
//! reads it and corrects its call), holding the API's error body with its
//! typed `code` and HTTP `status`; arguments that do not deserialize are
//! `invalid_arguments`. The memory blocks are resources; a refused read is
//! an MCP error whose `data` holds the same `code` and `status` (see
//! [`mcp_error`]).
//!
//! # Layout
//!
//! - this file: the handler, its tools and resources.
//! - `http`: the streamable-HTTP service and its place in the router.

pub(crate) mod http;

use std::sync::Arc;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use recall_actors::model::BlockLabel;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{IntoCallToolResult, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::{Block, Context, FactList, SearchParams, SearchResults, TurnList};
use crate::runtime::{Runtime, SessionQuery};
use crate::server::{Access, ApiError};

/// The budget a context is assembled within when a call names none.
pub const DEFAULT_BUDGET_TOKENS: usize = 2000;

/// recall's MCP server: one per MCP session, all over one runtime.
#[derive(Clone)]
pub struct RecallMcp {
    runtime: Runtime,
    /// What a client may touch when no token says (stdio: everything).
    access: Access,
    tool_router: ToolRouter<RecallMcp>,
}

/// A protocol error (a resource read) for what the API answers with `e`:
/// invalid parameters for a 400/413/422, `resource_not_found` for a 404,
/// `invalid_request` for a 403, an internal error otherwise; `data` holds
/// the API's `code` and `status`.
pub fn mcp_error(e: ApiError) -> ErrorData {
    let data = Some(json!({"code": e.code, "status": e.status.as_u16()}));
    match e.status.as_u16() {
        400 | 413 | 422 => ErrorData::invalid_params(e.message, data),
        404 => ErrorData::resource_not_found(e.message, data),
        403 => ErrorData::invalid_request(e.message, data),
        _ => ErrorData::internal_error(e.message, data),
    }
}

/// A tool's refusal is a tool result marked as an error (MCP asks this of
/// a tool call's failures, so that the model can read them and correct
/// its call), whose structured content is the API's error body with the
/// status: `{"error": {"code", "message", "status"}}`.
impl IntoCallToolResult for ApiError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured_error(refusal_body(&self)).into())
    }
}

fn refusal_body(e: &ApiError) -> serde_json::Value {
    json!({"error": {"code": e.code, "message": e.message, "status": e.status.as_u16()}})
}

/// The SDK's own refusal of arguments that do not deserialize (a missing
/// or unknown field, a wrong type), typed as recall's refusals are:
/// `invalid_arguments`.
fn typed_argument_refusal(result: CallToolResponse) -> CallToolResponse {
    let CallToolResponse::Complete(r) = &result else {
        return result;
    };
    if r.is_error != Some(true) || r.structured_content.is_some() {
        return result;
    }
    let message = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join(" ");
    let e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_arguments", message);
    CallToolResult::structured_error(refusal_body(&e)).into()
}

/// A tool's answer: the value as structured content (and as its JSON
/// text, for clients that read only text).
fn answer<T: Serialize>(value: &T) -> Result<CallToolResult, ApiError> {
    let v = serde_json::to_value(value)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(CallToolResult::structured(v))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextIn {
    /// The agent whose memory it is.
    pub agent_id: String,
    /// The user the agent is talking with.
    pub user_id: String,
    /// The user's message the context is for (what their memory holds
    /// about it is brought in); empty: the context as it stands.
    #[serde(default)]
    pub message: String,
    /// The token budget (1 to 10,000,000; 2,000 when left out).
    #[serde(default)]
    pub budget_tokens: Option<usize>,
    /// Show the live call's turns (false when the caller sends the call's
    /// own messages to its model). Default true.
    #[serde(default)]
    pub live: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchIn {
    pub agent_id: String,
    /// What to look for: some words, at most 4,096 bytes.
    pub query: String,
    /// Only what this user may see (every user's without).
    #[serde(default)]
    pub user_id: Option<String>,
    /// Kinds of item: `session`, `daily`, `weekly`, `topic`, `fact`,
    /// `turn` (all but `turn` when left out).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Items reaching this time (RFC 3339) or later.
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    /// Items starting at this time (RFC 3339) or earlier.
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    /// How many results, at least 1 (the server's default when left out).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserIn {
    pub agent_id: String,
    pub user_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberIn {
    pub agent_id: String,
    pub user_id: String,
    /// What the user states, in their words ("I moved to Porto in May"),
    /// at most 4,096 bytes.
    pub statement: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetIn {
    pub user_id: String,
    /// Only what the user shared with this agent; every agent's when left
    /// out (a token for every agent).
    #[serde(default)]
    pub agent_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsIn {
    pub agent_id: String,
    #[serde(default)]
    pub user_id: Option<String>,
    /// 1 to 1,000 (100 when left out), newest first.
    #[serde(default)]
    pub limit: Option<usize>,
    /// The next page: the sessions after this one (the last of the page
    /// before, a session id).
    #[serde(default)]
    pub before: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TranscriptIn {
    /// A session id (UUID), as `list_sessions` gives it.
    pub session_id: String,
}

/// The answer of `remember`.
#[derive(Serialize)]
struct RememberOut<'a> {
    agent_id: &'a str,
    user_id: &'a str,
    #[serde(flatten)]
    remembered: crate::runtime::Remembered,
}

#[derive(Serialize)]
struct SessionsOut {
    agent_id: String,
    sessions: Vec<recall_actors::model::SessionRecord>,
}

#[tool_router]
impl RecallMcp {
    /// A handler over `runtime` whose calls may touch what `access`
    /// covers.
    pub fn new(runtime: Runtime, access: Access) -> RecallMcp {
        RecallMcp {
            runtime,
            access,
            tool_router: Self::tool_router(),
        }
    }

    /// What this call may touch: the token's agents over HTTP (set by the
    /// API's token check on the request), else this handler's.
    fn access(&self, ctx: &RequestContext<RoleServer>) -> Access {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Access>().cloned())
            .unwrap_or_else(|| self.access.clone())
    }

    #[tool(
        description = "The context for the agent's next LLM call with a user, within a token budget: core-memory blocks, the facts the user may see, their layered summaries, what their memory holds about the message, the live call's turns. Never waits on an LLM.",
        annotations(read_only_hint = true)
    )]
    async fn get_context(
        &self,
        Parameters(p): Parameters<ContextIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        self.access(&ctx).allow(&p.agent_id)?;
        let options = crate::ContextOptions {
            include_live: p.live.unwrap_or(true),
            ..Default::default()
        };
        let budget = p.budget_tokens.unwrap_or(DEFAULT_BUDGET_TOKENS);
        let assembled = self
            .runtime
            .context(&p.agent_id, &p.user_id, &p.message, budget, options)
            .await?;
        answer(&Context::new(p.agent_id, p.user_id, &assembled))
    }

    #[tool(
        description = "Archival search over an agent's summaries (every layer), facts and, asked for by kind, raw turns: keywords blended with meaning, best first.",
        annotations(read_only_hint = true)
    )]
    async fn search_memory(
        &self,
        Parameters(p): Parameters<SearchIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        self.access(&ctx).allow(&p.agent_id)?;
        let params = SearchParams {
            q: p.query,
            kind: (!p.kinds.is_empty()).then(|| p.kinds.join(",")),
            user_id: p.user_id,
            since: p.since,
            until: p.until,
            limit: p.limit,
        };
        let query = crate::server::search_query(&params)?;
        let results = self.runtime.search(&p.agent_id, query).await?;
        answer(&SearchResults {
            agent_id: p.agent_id,
            query: params.q,
            user_id: params.user_id,
            results,
        })
    }

    #[tool(
        description = "The facts a user may see: their own and those other users shared, current and earlier (an earlier value has superseded_by set).",
        annotations(read_only_hint = true)
    )]
    async fn list_facts(
        &self,
        Parameters(p): Parameters<UserIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        self.access(&ctx).allow(&p.agent_id)?;
        let facts = self.runtime.facts(&p.agent_id, &p.user_id).await?;
        answer(&FactList {
            agent_id: p.agent_id,
            user_id: p.user_id,
            facts,
        })
    }

    #[tool(
        description = "Remember what a user states about themselves, in their words (\"I moved to Porto in May\"): stored as facts, private to them, at once in their context and searchable. A fact they have is not stored twice; a new value (a new employer, a new home) replaces the earlier one.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn remember(
        &self,
        Parameters(p): Parameters<RememberIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        self.access(&ctx).allow(&p.agent_id)?;
        let remembered = self
            .runtime
            .remember(&p.agent_id, &p.user_id, &p.statement)
            .await?;
        answer(&RememberOut {
            agent_id: &p.agent_id,
            user_id: &p.user_id,
            remembered,
        })
    }

    #[tool(
        description = "Forget a user: their turns, sessions, summaries of every layer, facts, topics, blocks and search entries, with one agent or (a token for every agent) all. Cannot be undone.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true
        )
    )]
    async fn forget_user(
        &self,
        Parameters(p): Parameters<ForgetIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        let access = self.access(&ctx);
        match &p.agent_id {
            Some(a) => access.allow(a),
            None => access.require_all(),
        }?;
        recall_actors::model::validate_id("user_id", &p.user_id)?;
        let report = self
            .runtime
            .forget_user(&p.user_id, p.agent_id.as_deref())
            .await?;
        answer(&report)
    }

    #[tool(
        description = "An agent's stored sessions (calls), newest first, optionally one user's: their ids, times and turn counts, for get_transcript; `before` (the last session id of a page) asks for the next page.",
        annotations(read_only_hint = true)
    )]
    async fn list_sessions(
        &self,
        Parameters(p): Parameters<SessionsIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        self.access(&ctx).allow(&p.agent_id)?;
        let before = p
            .before
            .as_deref()
            .map(|b| crate::server::parse_id("session id", b))
            .transpose()?;
        let query = SessionQuery {
            agents: Some(vec![p.agent_id.clone()]),
            user_id: p.user_id,
            limit: p.limit,
            before,
            ..Default::default()
        };
        let sessions = self.runtime.list_sessions(&query).await?;
        answer(&SessionsOut {
            agent_id: p.agent_id,
            sessions,
        })
    }

    #[tool(
        description = "A session's transcript: every turn, what the user said and what the agent answered, in order.",
        annotations(read_only_hint = true)
    )]
    async fn get_transcript(
        &self,
        Parameters(p): Parameters<TranscriptIn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ApiError> {
        let id = crate::server::parse_id("session id", &p.session_id)?;
        let session = self.runtime.session(id).await?;
        let session = session
            .ok_or_else(|| ApiError::not_found("unknown_session", format!("no session {id}")))?;
        self.access(&ctx).allow(&session.agent_id)?;
        let turns = self.runtime.turns(id).await?;
        answer(&TurnList {
            session_id: id,
            turns,
        })
    }
}

/// A block's resource: `recall://agents/{agent}/blocks/{label}` (the
/// agent's), or `recall://agents/{agent}/users/{user}/blocks/{label}` (as
/// that user's context shows it). Ids are percent-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockUri {
    pub agent_id: String,
    pub user_id: Option<String>,
    pub label: BlockLabel,
}

const SCHEME: &str = "recall://agents/";

impl BlockUri {
    pub fn parse(uri: &str) -> Result<BlockUri, ApiError> {
        let bad = || {
            ApiError::not_found(
                "unknown_resource",
                format!(
                    "no resource {uri:?}: blocks are recall://agents/{{agent_id}}/blocks/{{label}} \
                     and recall://agents/{{agent_id}}/users/{{user_id}}/blocks/{{label}}"
                ),
            )
        };
        let rest = uri.strip_prefix(SCHEME).ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (agent, user, label) = match parts.as_slice() {
            [a, "blocks", l] => (*a, None, *l),
            [a, "users", u, "blocks", l] => (*a, Some(*u), *l),
            _ => return Err(bad()),
        };
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| {
                ApiError::bad_request(format!("{uri:?} is not percent-encoded UTF-8"))
            })
        };
        let agent_id = decode(agent)?;
        recall_actors::model::validate_id("agent_id", &agent_id)?;
        let user_id = user.map(decode).transpose()?;
        if let Some(u) = &user_id {
            recall_actors::model::validate_id("user_id", u)?;
        }
        let label = label.parse::<BlockLabel>().map_err(|_| bad())?;
        Ok(BlockUri {
            agent_id,
            user_id,
            label,
        })
    }

    pub fn to_uri(&self) -> String {
        match &self.user_id {
            None => format!(
                "{SCHEME}{}/blocks/{}",
                percent_encode(&self.agent_id),
                self.label
            ),
            Some(u) => format!(
                "{SCHEME}{}/users/{}/blocks/{}",
                percent_encode(&self.agent_id),
                percent_encode(u),
                self.label
            ),
        }
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn resource_error<E: Into<ApiError>>(e: E) -> ErrorData {
    mcp_error(e.into())
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RecallMcp {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCallContext::new(self, request, context);
        self.tool_router
            .call(call)
            .await
            .map(typed_argument_refusal)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("recall", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "recall is a voice agent's long-term memory. Before answering a user, call \
             get_context with their message: it gives what the agent remembers of them within \
             a token budget. Use search_memory to look further back, list_facts for what they \
             told, remember when they state something about themselves outside a call. The \
             memory blocks are resources.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let access = self.access(&ctx);
        let agents = self.runtime.agent_ids().await.map_err(resource_error)?;
        let resources = agents
            .into_iter()
            .filter(|a| access.covers(a))
            .flat_map(|agent_id| {
                BlockLabel::ALL.into_iter().map(move |label| {
                    let uri = BlockUri {
                        agent_id: agent_id.clone(),
                        user_id: None,
                        label,
                    };
                    Resource::new(uri.to_uri(), format!("{agent_id}: {label}"))
                        .with_description(format!("Agent {agent_id:?}'s {label} block"))
                        .with_mime_type("text/plain")
                })
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let labels = BlockLabel::ALL.map(|l| l.to_string()).join(", ");
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(
                "recall://agents/{agent_id}/blocks/{label}",
                "An agent's memory block",
            )
            .with_description(format!("The block as the agent's operator set it; label: {labels}"))
            .with_mime_type("text/plain"),
            ResourceTemplate::new(
                "recall://agents/{agent_id}/users/{user_id}/blocks/{label}",
                "A memory block as a user's context shows it",
            )
            .with_description(format!(
                "The user's own background_context; relationship and self_perception with what their calls drew; label: {labels}"
            ))
            .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = BlockUri::parse(&request.uri).map_err(mcp_error)?;
        self.access(&ctx)
            .allow(&uri.agent_id)
            .map_err(resource_error)?;
        let label = uri.label;
        let stored = match &uri.user_id {
            None => self.runtime.block(&uri.agent_id, label).await,
            Some(u) => self.runtime.user_block(&uri.agent_id, u, label).await,
        }
        .map_err(resource_error)?;
        let limit = self.runtime.settings().blocks.limit(label);
        let block = Block::new(&uri.agent_id, label, limit, stored);
        let contents = ResourceContents::TextResourceContents {
            uri: request.uri,
            mime_type: Some("text/plain".into()),
            text: block.value,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// A handler for each MCP session over HTTP (the token decides each
/// call's access; none for a request without one).
pub(crate) fn factory(runtime: Runtime) -> impl Fn() -> Result<RecallMcp, std::io::Error> {
    // (a Runtime is a handle: cloning it is cheap)
    move || {
        Ok(RecallMcp::new(
            runtime.clone(),
            Access::Agents(Arc::default()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_uris_round_trip_and_others_are_refused() {
        for (agent, user) in [("kairix", None), ("a b/c", Some("ü%ser"))] {
            let uri = BlockUri {
                agent_id: agent.into(),
                user_id: user.map(str::to_string),
                label: BlockLabel::Relationship,
            };
            assert_eq!(BlockUri::parse(&uri.to_uri()).unwrap(), uri);
        }
        for bad in [
            "recall://agents/kairix/blocks/nope",
            "recall://agents/kairix/blocks",
            "recall://agents//blocks/persona",
            "recall://users/x/blocks/persona",
            "file:///etc/passwd",
            "recall://agents/%ZZ/blocks/persona",
            "recall://agents/kairix/users/a/b/blocks/persona",
        ] {
            assert!(BlockUri::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_keep_the_apis_code_and_status() {
        let e = mcp_error(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_budget",
            "budget_tokens must be at least 1",
        ));
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(
            e.data,
            Some(json!({"code": "invalid_budget", "status": 400}))
        );
        let e = mcp_error(ApiError::not_found("unknown_session", "no session"));
        assert_eq!(e.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        let e = mcp_error(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            "no",
        ));
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_REQUEST);
        let e = mcp_error(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "bye",
        ));
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
    }
}
