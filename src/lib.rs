//! recall: a memory runtime for voice AI agents.
//!
//! Embed it in a voice server: start a [`Runtime`] on a data folder, start a
//! session when a call connects, record each completed turn (a non-blocking
//! cast), end the session on disconnect. Sessions also end on silence.
//! Ended sessions are reflected on (summary, topics, entities, tone) by a
//! `Reflect` implementation — the offline extractive one by default, or an
//! OpenAI-compatible LLM — and a watchdog keeps each agent's
//! `background_context` block fresh.
//!
//! # Layout
//!
//! - [`runtime`]: [`RuntimeBuilder`] and the [`Runtime`] handle, with the
//!   options its calls take ([`Turn`], [`ContextOptions`], [`EndOptions`],
//!   [`TouchOptions`]).
//! - [`settings`]: loading settings from `config/default.toml`, a file and
//!   `RECALL_*` environment variables.
//! - [`api`]: the HTTP API's request and response types and a typed
//!   client for it, used by the server and the CLI.
//! - [`embeddings`]: the OpenAI-compatible `/embeddings` `Embed` adapter.
//! - `local_embed` (feature `local-embed`): the in-process
//!   sentence-transformers `Embed` adapter (candle).
//! - [`llm`]: the OpenAI-compatible chat-completions `Reflect` adapter.
//! - [`letta`]: the Letta server's mirror adapter (`[letta]`).
//! - [`server`]: `recall serve`, the HTTP + WebSocket API (axum).
//! - [`mcp`]: the Model Context Protocol server (`recall mcp`, `/mcp`).
//! - [`metrics`]: Prometheus metrics for `/metrics`.
//! - [`tokens`]: counting a context's tokens as the model does
//!   (`context.tokenizer`).
//! - [`simulate`]: `recall simulate`, replaying a JSONL script in virtual time.
//! - `eval` (feature `eval`): `recall eval`, the answer-recall evaluation
//!   on a generated set of long conversations, beside a recency window and
//!   BM25.
//! - `testkit` (feature `testkit`, on for this package's tests): a
//!   scripted `Reflect` and a paused-time test runtime.
//! - [`engine`]: the engine crate (`recall-actors`), re-exported.
//!
//! The `recall` binary is `main.rs` and its `cli` module, apart from the
//! library.

pub mod api;
pub mod embeddings;
#[cfg(feature = "eval")]
pub mod eval;
pub mod letta;
pub mod llm;
#[cfg(feature = "local-embed")]
pub mod local_embed;
pub mod mcp;
pub mod metrics;
pub mod runtime;
pub mod server;
pub mod settings;
pub mod simulate;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tokens;

pub use recall_actors as engine;
pub use recall_actors::clock::Clock;
pub use recall_actors::model::{
    BackgroundContext, BlockLabel, BlockWriter, ConversationSummary, ConversationTurn, DeadLetter,
    EndReason, InputError, MemoryBlock, SessionRecord, SummaryType,
};
pub use recall_actors::reflect::{Reflect, ReflectError, ReflectRequest};
pub use recall_actors::settings::Settings;
pub use runtime::{
    ContextOptions, EndOptions, LiveContext, RecallError, Remembered, Runtime, RuntimeBuilder,
    RuntimeStats, SessionQuery, SessionStatus, ShutdownReport, StartupError, SummaryQuery,
    TouchOptions, Turn, LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT,
};
