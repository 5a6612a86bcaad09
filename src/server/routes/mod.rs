//! The `/v1` handlers, by group as in [`crate::api`]. Each carries its
//! `#[utoipa::path]`: the OpenAPI document is made from these.

pub mod admin;
pub mod memory;
pub mod sessions;

use axum::http::StatusCode;
use uuid::Uuid;

use super::error::ApiError;

pub(crate) fn parse_id(what: &'static str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            format!("{what} {raw:?} is not a UUID"),
        )
    })
}

/// A body that may be left out: empty (or blank) reads as `T::default()`.
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    // Left out, or sent as JSON `null`: none.
    let text = body.trim_ascii();
    if text.is_empty() || text == b"null" {
        return Ok(T::default());
    }
    super::error::json_object(text)?;
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.to_string()))
}
