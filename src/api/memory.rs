//! Memory blocks, summaries, facts, topics, search and the assembled
//! context.

use chrono::{DateTime, Utc};
use recall_actors::context::{AssembledContext, ChatMessage, Role, Tier};
use recall_actors::model::{
    BlockLabel, ConversationSummary, FactRecord, MemoryBlock, SummaryType, Visibility,
};
use recall_actors::search::SearchHit;
use serde::{Deserialize, Serialize};

use super::Id;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::runtime::TopicView;

/// A memory block. One never written reads as empty, with the configured
/// limit and no `updated_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Block {
    pub agent_id: String,
    pub label: BlockLabel,
    pub value: String,
    /// The character limit.
    pub limit: usize,
    pub updated_at: Option<DateTime<Utc>>,
    /// The user whose conversation a reflection drew (part of) the value
    /// from (`relationship`, `self_perception`): set only in a read with
    /// `user_id`, as that user's context shows the block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_user_id: Option<String>,
    /// Set when the block is shown as this user's context shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

impl Block {
    /// The stored block, or an empty one with `limit` when never written.
    pub fn new(agent_id: &str, label: BlockLabel, limit: usize, b: Option<MemoryBlock>) -> Block {
        match b {
            Some(b) => Block::from(b),
            None => Block {
                agent_id: agent_id.to_string(),
                label,
                value: String::new(),
                limit,
                updated_at: None,
                source_user_id: None,
                user_id: None,
            },
        }
    }
}

impl From<MemoryBlock> for Block {
    fn from(b: MemoryBlock) -> Block {
        Block {
            agent_id: b.agent_id,
            label: b.label,
            value: b.value,
            limit: b.limit,
            updated_at: Some(b.updated_at),
            source_user_id: b.source_user_id,
            user_id: None,
        }
    }
}

/// Every block of an agent, in label order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BlockList {
    pub blocks: Vec<Block>,
}

/// `GET /v1/agents/{agent_id}/blocks/{label}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BlockParams {
    /// The block as this user's context shows it (their own
    /// `background_context`, never another user's words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub user_id: Option<String>,
}

/// `PUT /v1/agents/{agent_id}/blocks/{label}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockIn {
    pub value: String,
}

/// `GET /v1/agents/{agent_id}/summaries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryParams {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[param(rename = "type", inline)]
    pub kind: Option<SummaryType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub user_id: Option<String>,
    /// Summaries whose period ends at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Summaries whose period starts at or before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// The next page: the summaries after this one (the last of the page
    /// before); `404 unknown_summary` if it names no summary of the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Uuid>,
    /// At most this many, newest first: 1 to 1000, 100 when left out
    /// (`400 invalid` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<usize>,
}

/// Summaries, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SummaryList {
    pub summaries: Vec<ConversationSummary>,
}

/// One summary and its archival text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SummaryView {
    #[serde(flatten)]
    pub summary: ConversationSummary,
    /// The summary as archival memory holds it (`[SUMMARY:SESSION]…`).
    pub archival_text: String,
}

/// The acting user, for the facts endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FactUser {
    /// Lists: the user whose view it is. Changes: the fact's owner.
    #[param(value_type = Id)]
    pub user_id: String,
}

/// The facts a user may see: their own and the shared ones, current and
/// earlier (an earlier value has `superseded_by` set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FactList {
    pub agent_id: String,
    pub user_id: String,
    pub facts: Vec<FactRecord>,
}

/// `PATCH /v1/facts/{fact_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FactPatch {
    /// The acting user: only the fact's owner may change it.
    #[schema(value_type = Id)]
    pub user_id: String,
    pub visibility: Visibility,
}

/// A deleted fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FactDeleted {
    pub deleted: FactRecord,
}

/// `GET /v1/agents/{agent_id}/topics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TopicParams {
    /// One user's topics (every user's without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub user_id: Option<String>,
    /// At most this many, most recently active first: 1 to 1000, 100
    /// when left out (`400 invalid` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<usize>,
}

/// Topics, most recently active first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TopicList {
    pub agent_id: String,
    pub topics: Vec<TopicView>,
}

/// `GET /v1/agents/{agent_id}/search`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// What to look for: some words, at most 4,096 bytes.
    #[param(min_length = 1, max_length = 4096, pattern = r"\S")]
    pub q: String,
    /// `session`, `daily`, `weekly`, `topic`, `fact` or `turn`; several
    /// separated by commas (all but `turn` when left out).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[param(
        rename = "type",
        pattern = r"^ *(session|daily|weekly|topic|fact|turn) *(, *(session|daily|weekly|topic|fact|turn) *)*$"
    )]
    pub kind: Option<String>,
    /// Only what this user may see: their items and the facts others
    /// shared (every user's without: an operator's view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<Id>)]
    pub user_id: Option<String>,
    /// Items reaching this time or later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Items starting at this time or earlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// At least 1 and at most `search.max_limit` (the configured
    /// `search.default_limit` when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1)]
    pub limit: Option<usize>,
}

/// Search results, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResults {
    pub agent_id: String,
    pub query: String,
    pub user_id: Option<String>,
    pub results: Vec<SearchHit>,
}

fn shown() -> bool {
    true
}

fn is_shown(live: &bool) -> bool {
    *live
}

/// `GET /v1/agents/{agent_id}/context`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ContextParams {
    #[param(value_type = Id)]
    pub user_id: String,
    /// The message the context is assembled for (none: the context as it
    /// stands).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The token budget.
    #[param(minimum = 1, maximum = 10_000_000)]
    pub budget_tokens: usize,
    /// Show the live call; `false` for a caller that sends the call's own
    /// messages to its LLM.
    #[serde(default = "shown", skip_serializing_if = "is_shown")]
    #[param(default = true)]
    pub live: bool,
}

/// One piece of an assembled context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextItem {
    pub tier: Tier,
    /// What it comes from: a block label, a fact or summary id,
    /// `turn {i} user|assistant`, `{session}#{seq}` for a stored turn,
    /// `{session}:{start}-{end}` for a window summary, or `current`.
    pub source: String,
    pub role: Role,
    pub text: String,
    pub tokens: usize,
}

/// One tier's items and tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextTier {
    pub tier: Tier,
    pub tokens: usize,
    pub items: Vec<ContextItem>,
}

/// Something left out to stay within the budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextTrimmed {
    pub tier: Tier,
    pub source: String,
    /// The tokens left out.
    pub tokens: usize,
    /// Only the end was left out (cut at a sentence boundary).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The context for the agent's next LLM call: tiers with their items and
/// token counts, what was trimmed, and the chat messages to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Context {
    pub agent_id: String,
    pub user_id: String,
    pub budget_tokens: usize,
    pub total_tokens: usize,
    /// Every tier, in order, even when empty.
    pub tiers: Vec<ContextTier>,
    /// What was left out, in the order it was removed.
    pub trimmed: Vec<ContextTrimmed>,
    /// The context as OpenAI-style chat messages.
    pub messages: Vec<ChatMessage>,
}

impl Context {
    pub fn new(agent_id: String, user_id: String, ctx: &AssembledContext) -> Context {
        Context {
            agent_id,
            user_id,
            budget_tokens: ctx.budget_tokens,
            total_tokens: ctx.total_tokens,
            tiers: ctx
                .tiers
                .iter()
                .map(|t| ContextTier {
                    tier: t.tier,
                    tokens: t.tokens,
                    items: t
                        .items
                        .iter()
                        .map(|i| ContextItem {
                            tier: i.tier,
                            source: i.source.to_string(),
                            role: i.role,
                            text: i.text.to_string(),
                            tokens: i.tokens,
                        })
                        .collect(),
                })
                .collect(),
            trimmed: ctx
                .trimmed
                .iter()
                .map(|t| ContextTrimmed {
                    tier: t.tier,
                    source: t.source.to_string(),
                    tokens: t.tokens,
                    cut: t.cut,
                })
                .collect(),
            messages: ctx.to_messages(),
        }
    }
}
