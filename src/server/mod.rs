//! `recall serve`: the runtime behind an HTTP + WebSocket API (axum), for
//! voice servers not written in Rust.
//!
//! # Layout
//!
//! - [`error`]: the `{"error":{"code","message"}}` body and status mapping.
//! - [`auth`]: bearer tokens and the agents each covers.
//! - `routes`: the `/v1` handlers; `ws`: the WebSocket stream.
//! - `openapi.json`: the API's OpenAPI document, served at
//!   `/v1/openapi.json`.

pub mod auth;
pub mod error;
mod routes;
mod ws;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use recall_actors::settings::Settings;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

use crate::runtime::{RecallError, Runtime, ShutdownReport};
pub use auth::{Access, Auth};
pub use error::ApiError;

/// The OpenAPI document of the API.
pub const OPENAPI: &str = include_str!("openapi.json");

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
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
}

impl ServerConfig {
    pub fn from_settings(s: &Settings) -> ServerConfig {
        ServerConfig {
            auth: Auth::from_settings(&s.server),
            max_body_bytes: s.server.max_body_bytes,
            shutdown_grace: Duration::from_secs(s.server.shutdown_grace_secs),
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
    /// Turns true when the server begins shutting down.
    shutdown: watch::Receiver<bool>,
}

/// The API's router, for a runtime.
pub fn router(runtime: Runtime, config: &ServerConfig, shutdown: watch::Receiver<bool>) -> Router {
    let state = AppState {
        runtime,
        metrics: crate::metrics::prometheus(),
        max_body_bytes: config.max_body_bytes,
        shutdown,
    };
    let v1 = Router::new()
        .route(
            "/v1/sessions",
            post(routes::start_session).get(routes::list_sessions),
        )
        .route("/v1/sessions/{session_id}", get(routes::get_session))
        .route("/v1/sessions/{session_id}/turns", get(routes::get_turns))
        .route(
            "/v1/connections/{connection_id}/turns",
            post(routes::record_turn),
        )
        .route("/v1/connections/{connection_id}/touch", post(routes::touch))
        .route("/v1/connections/{connection_id}/end", post(routes::end))
        .route("/v1/connections/{connection_id}/stream", get(ws::stream))
        .route("/v1/agents/{agent_id}/blocks", get(routes::list_blocks))
        .route(
            "/v1/agents/{agent_id}/blocks/{label}",
            get(routes::get_block).put(routes::put_block),
        )
        .route(
            "/v1/agents/{agent_id}/summaries",
            get(routes::list_summaries),
        )
        .route("/v1/summaries/{summary_id}", get(routes::get_summary))
        .route(
            "/v1/agents/{agent_id}/dead-letters",
            get(routes::list_dead_letters),
        )
        .route(
            "/v1/dead-letters/{session_id}/retry",
            post(routes::retry_dead_letter),
        )
        .route("/v1/agents/{agent_id}/facts", get(routes::list_facts))
        .route("/v1/rollups/run", post(routes::run_rollups))
        .route("/v1/agents/{agent_id}/replay", post(routes::replay))
        .route(
            "/v1/users/{user_id}",
            axum::routing::delete(routes::forget_user),
        )
        .route("/v1/agents/{agent_id}/topics", get(routes::list_topics))
        .route("/v1/agents/{agent_id}/search", get(routes::search))
        .route(
            "/v1/agents/{agent_id}/context",
            get(routes::assemble_context),
        )
        .route(
            "/v1/facts/{fact_id}",
            axum::routing::patch(routes::patch_fact).delete(routes::delete_fact),
        )
        .route(
            "/v1/agents/{agent_id}/users/{user_id}/context",
            get(routes::get_context).delete(routes::clear_context),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            config.auth.clone(),
            auth::require_token,
        ));
    Router::new()
        .merge(v1)
        .route("/v1/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
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
    let mut stopping = rx;
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stopping.wait_for(|s| *s).await;
        })
        .into_future();
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
        res = &mut server => res.map_err(ServeError::Io)?,
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

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when the Store answers and the actors are up.
async fn readyz(State(app): State<AppState>) -> Response {
    if *app.shutdown.borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "shutting_down"})),
        )
            .into_response();
    }
    match app.runtime.stats().await {
        // Ready, and saying so, even with damaged records: they are skipped.
        // Ready while stored items are re-embedded (searches find those
        // by their words meanwhile); the progress says how far it is.
        Ok(stats) => Json(json!({
            "status": "ready",
            "skipped_records": stats.store.skipped_records,
            "reembedding": app.runtime.reembed_progress(),
        }))
        .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "error": e.to_string()})),
        )
            .into_response(),
    }
}

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
