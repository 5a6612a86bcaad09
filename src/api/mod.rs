//! The HTTP API's types: every request body, query and response of
//! `recall serve`, shared by the server's handlers, the [`client`] and the
//! CLI. The OpenAPI document is generated from them and from the
//! handlers' `#[utoipa::path]` attributes (`server::openapi`), so
//! the document cannot drift from what the server answers.
//!
//! Records the engine stores (sessions, summaries, facts, blocks) go over
//! the wire in their own serde form; the types here wrap them in the
//! envelopes the endpoints answer with, and give the views that are not a
//! stored record (an assembled context, a block never written).
//!
//! # Layout
//!
//! - [`sessions`]: sessions, turns and connections, the live working context.
//! - [`memory`]: blocks, summaries, facts, topics, search, the assembled context.
//! - [`admin`]: dead letters, replay, rollups, forgetting a user, health.
//! - [`client`]: a typed client for all of it.

pub mod admin;
pub mod client;
pub mod memory;
pub mod sessions;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use admin::*;
pub use client::{Client, ClientError};
pub use memory::*;
pub use sessions::*;

/// Every error answer: `{"error":{"code","message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable and machine-readable: `unknown_connection`, `empty_turn`,
    /// `invalid_json`…
    pub code: String,
    /// For people: the error and its causes.
    pub message: String,
}

/// The schema of an agent, user or connection id (the values are plain
/// strings): 1 to [`MAX_ID_LEN`](recall_actors::model::MAX_ID_LEN) bytes
/// of UTF-8, no control characters. Others are refused with 400
/// (`empty_field`, `control_character`) or 422 (`too_long`).
pub struct Id;

impl utoipa::PartialSchema for Id {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!(
                "An id: 1 to {} bytes of UTF-8, no control characters",
                recall_actors::model::MAX_ID_LEN
            )))
            .min_length(Some(1))
            .max_length(Some(recall_actors::model::MAX_ID_LEN))
            .pattern(Some(r"^[^\u0000-\u001F\u007F-\u009F]+$"))
            .into()
    }
}

impl ToSchema for Id {}

/// An answer with nothing to say beyond its status: `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Empty {}
