//! `recall serve`: the runtime behind an HTTP + WebSocket API (axum), for
//! voice servers not written in Rust.
//!
//! # Layout
//!
//! - [`error`]: the `{"error":{"code","message"}}` body and status mapping.
//! - [`auth`]: bearer tokens and the agents each covers.
//! - `routes`: the `/v1` handlers, by group; `ws`: the WebSocket stream.
//! - `openapi`: the OpenAPI document, generated from the handlers and the
//!   [`crate::api`] types and served at `/v1/openapi.json`.

pub mod auth;
pub mod error;
mod listen;
mod openapi;
pub mod origin;
mod routes;
mod ws;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::api::{ErrorBody, Health, Readiness};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{middleware, Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use recall_actors::settings::Settings;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::runtime::{RecallError, Runtime, ShutdownReport};
pub use auth::{Access, Auth};
pub use error::ApiError;
pub(crate) use routes::memory::search_query;
pub(crate) use routes::parse_id;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {addr} without a token: set server.token \
         (RECALL_SERVER__TOKEN) or server.tokens, or listen on a loopback address \
         such as 127.0.0.1"
    )]
    OpenNonLoopback { addr: SocketAddr },
    #[error("cannot listen on {addr}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the server stopped with an error")]
    Io(#[source] std::io::Error),
    #[error("shutting the runtime down failed")]
    Shutdown(#[source] RecallError),
}

/// What the server needs beyond the runtime.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub auth: Auth,
    /// The hosts and origins it answers.
    pub guard: origin::Guard,
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
    /// Longest a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// Longest a client may take to send a request's body.
    pub request_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// WebSocket streams: pinged this often, closed when silent this long.
    pub ws_ping: Duration,
    pub ws_idle: Duration,
}

impl ServerConfig {
    pub fn from_settings(s: &Settings) -> ServerConfig {
        let auth = Auth::from_settings(&s.server);
        ServerConfig {
            guard: origin::Guard::from_settings(&s.server, auth.is_open()),
            auth,
            max_body_bytes: s.server.max_body_bytes,
            shutdown_grace: Duration::from_secs(s.server.shutdown_grace_secs),
            header_timeout: Duration::from_secs(s.server.header_timeout_secs),
            request_timeout: Duration::from_secs(s.server.request_timeout_secs),
            max_connections: s.server.max_connections,
            ws_ping: Duration::from_secs(s.server.ws_ping_secs),
            ws_idle: Duration::from_secs(s.server.ws_idle_secs),
        }
    }
}

/// An open server (no token) may only listen on loopback.
pub fn check_exposure(addr: SocketAddr, auth: &Auth) -> Result<(), ServeError> {
    if auth.is_open() && !addr.ip().is_loopback() {
        return Err(ServeError::OpenNonLoopback { addr });
    }
    Ok(())
}

/// Binds `addr`, refusing an open server on a non-loopback address before
/// binding anything.
pub async fn bind(addr: &str, config: &ServerConfig) -> Result<TcpListener, ServeError> {
    let bind_err = |source| ServeError::Bind {
        addr: addr.to_string(),
        source,
    };
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(bind_err)?
        .collect();
    for a in &resolved {
        check_exposure(*a, &config.auth)?;
    }
    TcpListener::bind(resolved.as_slice())
        .await
        .map_err(|source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        })
}

#[derive(Clone)]
pub(crate) struct AppState {
    runtime: Runtime,
    metrics: Option<PrometheusHandle>,
    max_body_bytes: usize,
    ws_ping: Duration,
    ws_idle: Duration,
    /// Turns true when the server begins shutting down.
    shutdown: watch::Receiver<bool>,
    /// The OpenAPI document, as served.
    openapi: Arc<str>,
}

/// The `/v1` endpoints behind the token, with their documentation.
fn v1_routes() -> OpenApiRouter<AppState> {
    use routes::{admin, memory, sessions};
    OpenApiRouter::new()
        .routes(routes!(sessions::start_session, sessions::list_sessions))
        .routes(routes!(sessions::get_session))
        .routes(routes!(sessions::get_turns))
        .routes(routes!(sessions::record_turn))
        .routes(routes!(sessions::touch))
        .routes(routes!(sessions::end))
        .routes(routes!(ws::stream))
        .routes(routes!(sessions::get_context, sessions::clear_context))
        .routes(routes!(memory::list_blocks))
        .routes(routes!(memory::get_block, memory::put_block))
        .routes(routes!(memory::list_summaries))
        .routes(routes!(memory::get_summary))
        .routes(routes!(memory::list_facts))
        .routes(routes!(memory::patch_fact, memory::delete_fact))
        .routes(routes!(memory::list_topics))
        .routes(routes!(memory::search))
        .routes(routes!(memory::assemble_context))
        .routes(routes!(admin::list_dead_letters))
        .routes(routes!(admin::retry_dead_letter))
        .routes(routes!(admin::forget_user))
        .routes(routes!(admin::replay))
        .routes(routes!(admin::run_rollups))
}

/// The endpoints open to all: health, readiness, metrics, the document.
fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(openapi))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The routers and the OpenAPI document they make.
fn parts() -> (Router<AppState>, Router<AppState>, utoipa::openapi::OpenApi) {
    let (v1, mut doc) = OpenApiRouter::with_openapi(openapi::base())
        .merge(v1_routes())
        .split_for_parts();
    let (public, public_doc) = public_routes().split_for_parts();
    doc.merge(public_doc);
    openapi::finish(&mut doc);
    (v1, public, doc)
}

/// The API's OpenAPI document, as served at `/v1/openapi.json`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    parts().2
}

/// The API's router, for a runtime.
pub fn router(runtime: Runtime, config: &ServerConfig, shutdown: watch::Receiver<bool>) -> Router {
    let (v1, public, mut doc) = parts();
    openapi::with_settings(&mut doc, runtime.settings());
    // MCP over streamable HTTP, behind the same token (each call's access
    // is the token's) and guard.
    let mcp = crate::mcp::http::service(runtime.clone(), config.max_body_bytes, shutdown.clone());
    let state = AppState {
        runtime,
        metrics: crate::metrics::prometheus(),
        max_body_bytes: config.max_body_bytes,
        ws_ping: config.ws_ping,
        ws_idle: config.ws_idle,
        shutdown,
        openapi: doc
            .to_json()
            .expect("the OpenAPI document serializes")
            .into(),
    };
    // The body is read after the token is checked: a client without one
    // makes the server hold nothing of its body.
    let v1 = v1
        .nest_service(crate::mcp::http::PATH, mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            BodyDeadline {
                within: config.request_timeout,
                max_bytes: config.max_body_bytes,
            },
            body_deadline,
        ))
        .layer(middleware::from_fn_with_state(
            config.auth.clone(),
            auth::require_token,
        ));
    Router::new()
        .merge(v1)
        .merge(public)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            config.guard.clone(),
            origin::guard,
        ))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` completes, then stops
/// accepting, ends live sessions with reason `shutdown`, drains reflections
/// for the grace period and flushes.
pub async fn serve(
    listener: TcpListener,
    runtime: Runtime,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, ServeError> {
    let addr = listener.local_addr().map_err(ServeError::Io)?;
    check_exposure(addr, &config.auth)?;
    let (tx, rx) = watch::channel(false);
    let app = router(runtime.clone(), &config, rx.clone());
    let mut stopped = rx.clone();
    let limits = listen::Limits {
        header_timeout: config.header_timeout,
        max_connections: config.max_connections,
    };
    let server = listen::run(listener, app, limits, rx);
    // WebSocket streams are not connections axum waits for: they watch the
    // same flag and close themselves.
    tokio::spawn(async move {
        shutdown.await;
        info!("shutting down: no new requests; ending live sessions");
        let _ = tx.send(true);
        // Keep the sender alive until the process is done with it.
        tx.closed().await;
    });
    // Requests in flight get the grace period to finish, not more.
    let grace = config.shutdown_grace + Duration::from_secs(1);
    tokio::pin!(server);
    tokio::select! {
        () = &mut server => {}
        _ = async {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_secs = grace.as_secs(), "requests still running after the grace period; stopping anyway");
        }
    }
    let report = runtime
        .shutdown_with_grace(config.shutdown_grace)
        .await
        .map_err(ServeError::Shutdown)?;
    info!(
        sessions_ended = report.sessions_ended,
        reflections_left = report.reflections_left,
        "runtime stopped"
    );
    Ok(report)
}

#[derive(Clone, Copy)]
struct BodyDeadline {
    within: Duration,
    max_bytes: usize,
}

/// Reads a request's body within `server.request_timeout_secs` before the
/// handler runs: a client trickling its body holds the connection no
/// longer than that (the handler itself is not cut off half-way, so a
/// request it took is answered). Over `max_bytes`, 413 here already.
async fn body_deadline(
    State(deadline): State<BodyDeadline>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    use http_body::Body as _;
    let (parts, body) = req.into_parts();
    if body.is_end_stream() {
        return next
            .run(axum::extract::Request::from_parts(parts, body))
            .await;
    }
    let read = axum::body::to_bytes(body, deadline.max_bytes);
    match tokio::time::timeout(deadline.within, read).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(parts, bytes.into()))
                .await
        }
        Ok(Err(e)) => {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if over {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!(
                        "the body is over {} bytes (server.max_body_bytes)",
                        deadline.max_bytes
                    ),
                )
                .into_response()
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string())
                    .into_response()
            }
        }
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request's body did not arrive within {} s (server.request_timeout_secs)",
                deadline.within.as_secs()
            ),
        )
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such endpoint; see /v1/openapi.json")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see /v1/openapi.json",
    )
}

/// This document (no token needed)
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)))]
async fn openapi(State(app): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        app.openapi.to_string(),
    )
        .into_response()
}

/// Liveness
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations",
    responses((status = 200, description = "The process answers", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store (for PostgreSQL, the database) answers and the
/// actors are up
///
/// Ready, and saying so, even with damaged records (they are skipped), and
/// while stored items are re-embedded (searches find those by their words
/// meanwhile).
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations",
    responses(
        (status = 200, description = "`ready`", body = Readiness),
        (status = 503, description = "`shutting_down` or `unavailable`", body = Readiness),
    ))]
async fn readyz(State(app): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let not_ready = |status: &str, error: Option<String>| Readiness {
        status: status.into(),
        store: None,
        skipped_records: None,
        reembedding: None,
        error,
    };
    if *app.shutdown.borrow() {
        let r = not_ready("shutting_down", None);
        return (StatusCode::SERVICE_UNAVAILABLE, Json(r));
    }
    let ready = async {
        let store = app.runtime.store_ready().await?;
        let stats = app.runtime.stats().await?;
        Ok::<_, RecallError>((store, stats))
    };
    match ready.await {
        Ok((store, stats)) => (
            StatusCode::OK,
            Json(Readiness {
                status: "ready".into(),
                store: Some(store.into()),
                skipped_records: Some(stats.store.skipped_records),
                reembedding: Some(app.runtime.reembed_progress()),
                error: None,
            }),
        ),
        Err(e) => {
            // The cause goes to the log, not to whoever asks: it may name
            // the database's address, user or folders.
            tracing::warn!(error = %error::chain(&e), "not ready");
            let what = match e {
                RecallError::Store(_) => "the store does not answer",
                _ => "the runtime does not answer",
            };
            let r = not_ready(
                "unavailable",
                Some(format!("{what}; the server's log has the cause")),
            );
            (StatusCode::SERVICE_UNAVAILABLE, Json(r))
        }
    }
}

/// Prometheus metrics
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations",
    responses(
        (status = 200, description = "The text exposition format", body = String, content_type = "text/plain"),
        (status = 404, description = "`metrics_unavailable`: another metrics recorder is installed in this process", body = ErrorBody),
    ))]
async fn metrics(State(app): State<AppState>) -> Response {
    match &app.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            crate::metrics::render(handle, &app.runtime).await,
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics_unavailable",
            "another metrics recorder is installed in this process",
        )
        .into_response(),
    }
}
