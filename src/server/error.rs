//! The API's error body, `{"error":{"code","message"}}`, and how runtime
//! errors and request rejections map onto statuses.

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use recall_actors::context::ContextError;
use recall_actors::mirror::MirrorRunError;
use recall_actors::model::InputError;
use recall_actors::rollup::RollupError;
use recall_actors::store::StoreError;
use recall_actors::supervisor::StartError;
use recall_actors::watchdog::WatchdogError;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::runtime::RecallError;

/// An error answered to an API caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable (`unknown_connection`, `empty_turn`…).
    pub code: &'static str,
    pub message: String,
    /// When to try again (`Retry-After`; `retry_after_ms` on a stream).
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// The body, as sent.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message}})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, Json(self.body())).into_response();
        if let Some(after) = self.retry_after {
            // Whole seconds, rounded up: never earlier than asked.
            let secs = (after.as_millis().div_ceil(1000).max(1)) as u64;
            res.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}

/// The error and its causes, for messages.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    recall_actors::port::error_chain(err)
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        let code = match &e {
            InputError::EmptyTurn => "empty_turn",
            InputError::Empty { .. } => "empty_field",
            InputError::TooLong { .. } => "too_long",
            InputError::ControlCharacter { .. } => "control_character",
            InputError::Invalid { .. } => "invalid",
        };
        let status = match code {
            "empty_turn" | "too_long" => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<RecallError> for ApiError {
    fn from(e: RecallError) -> Self {
        let message = chain(&e);
        match e {
            RecallError::Input(e) | RecallError::Start(StartError::Input(e)) => e.into(),
            RecallError::UnknownConnection(_) => ApiError::not_found("unknown_connection", message),
            RecallError::Start(StartError::ConnectionBusy(_)) => {
                ApiError::new(StatusCode::CONFLICT, "connection_busy", message)
            }
            RecallError::Start(
                StartError::TooManySessions { .. } | StartError::TooManyLive { .. },
            ) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions", message),
            RecallError::Start(StartError::ConnectionOwned(_)) => {
                ApiError::new(StatusCode::CONFLICT, "connection_owned", message)
            }
            RecallError::Context(ContextError::InvalidBudget(_)) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_budget", message)
            }
            RecallError::Context(ContextError::MessageOverBudget { .. }) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "message_over_budget",
                message,
            ),
            RecallError::NotOwner(_) => {
                ApiError::new(StatusCode::FORBIDDEN, "connection_reassigned", message)
            }
            RecallError::NotDurable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_durable", message)
            }
            RecallError::Start(StartError::ShuttingDown) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
            }
            RecallError::Store(StoreError::SummaryNotFound(_)) => {
                ApiError::not_found("unknown_summary", message)
            }
            RecallError::Store(StoreError::InvalidRevision(..)) => {
                ApiError::new(StatusCode::CONFLICT, "invalid_revision", message)
            }
            RecallError::Store(StoreError::SessionNotFound(_)) => {
                ApiError::not_found("unknown_session", message)
            }
            RecallError::Store(StoreError::FactNotFound(_)) => {
                ApiError::not_found("unknown_fact", message)
            }
            RecallError::Store(StoreError::NotFactOwner(_)) => {
                ApiError::new(StatusCode::FORBIDDEN, "not_fact_owner", message)
            }
            RecallError::Store(StoreError::DeadLetterNotFound(_)) => {
                ApiError::not_found("unknown_dead_letter", message)
            }
            RecallError::BlockTooLong { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "block_too_long", message)
            }
            RecallError::ManagedBlock(_) => {
                ApiError::new(StatusCode::CONFLICT, "managed_block", message)
            }
            RecallError::Backlog(full) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                message,
            )
            .retry_after(full.retry_after),
            RecallError::Unavailable(..) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            }
            RecallError::RollupsOff => ApiError::new(StatusCode::CONFLICT, "rollups_off", message),
            RecallError::MirrorOff => ApiError::new(StatusCode::CONFLICT, "mirror_off", message),
            RecallError::Mirror(MirrorRunError::Elsewhere) => {
                ApiError::new(StatusCode::CONFLICT, "elsewhere", message)
            }
            RecallError::Mirror(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "mirror_failed", message)
            }
            RecallError::Rollup(RollupError::Elsewhere)
            | RecallError::Watchdog(WatchdogError::Elsewhere) => {
                ApiError::new(StatusCode::CONFLICT, "elsewhere", message)
            }
            RecallError::Summarizer(_) | RecallError::NotReflection => {
                ApiError::new(StatusCode::BAD_GATEWAY, "summarizer_failed", message)
            }
            RecallError::Embed(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "embedding_failed", message)
            }
            RecallError::Start(_)
            | RecallError::Store(_)
            | RecallError::Watchdog(_)
            | RecallError::Rollup(_)
            | RecallError::Index(_) => {
                tracing::error!(error = %message, "request failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        // The rejection's text already carries its cause.
        let message = r.body_text();
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", message)
            }
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a body with Content-Type: application/json",
            ),
            // Malformed JSON and JSON of the wrong shape alike.
            _ => ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", message),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", r.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                r.body_text(),
            ),
            status => ApiError::new(status, "invalid_body", r.body_text()),
        }
    }
}

impl From<WebSocketUpgradeRejection> for ApiError {
    fn from(r: WebSocketUpgradeRejection) -> Self {
        // The upgrade's headers are required parameters of the route: one
        // missing or wrong is a bad request (axum says 426 for some).
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "websocket_required",
            format!("{}; this endpoint is a WebSocket", r.body_text()),
        )
    }
}

/// `Path` whose rejections are [`ApiError`]s.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(v) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(v))
    }
}

/// A body whose rejections are [`ApiError`]s.
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(ApiBytes(axum::body::Bytes::from_request(req, state).await?))
    }
}

/// `WebSocketUpgrade` whose rejections are [`ApiError`]s.
pub struct ApiWebSocket(pub axum::extract::ws::WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for ApiWebSocket {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Ok(ApiWebSocket(
            axum::extract::ws::WebSocketUpgrade::from_request_parts(parts, state).await?,
        ))
    }
}

/// `Json` whose rejections are [`ApiError`]s.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a body with Content-Type: application/json",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state).await?;
        json_object(&bytes)?;
        let Json(v) = Json::<T>::from_bytes(&bytes)?;
        Ok(ApiJson(v))
    }
}

/// Whether the request says its body is JSON (`application/json`, or an
/// `application/…+json` type), as axum's `Json` asks.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or_default().trim();
    let essence = essence.to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Every body the API takes is a JSON object: serde would also read a
/// struct from an array of its fields (`["hi","hello"]`), which no
/// client means and the document does not allow.
pub(crate) fn json_object(body: &[u8]) -> Result<(), ApiError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "expected a JSON object",
        )),
    }
}

/// `Query` whose rejections are [`ApiError`]s.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Query(v) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(v))
    }
}
