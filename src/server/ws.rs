//! `GET /v1/connections/{connection_id}/stream`: a voice connection as a
//! WebSocket. Opening it starts a session; each text frame records a turn
//! or a touch and is answered with an ack or an error frame; closing it
//! ends the session with reason `disconnect`.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, warn};
use uuid::Uuid;

use super::auth::Access;
use super::error::{ApiError, ApiPath, ApiQuery, ApiWebSocket};
use super::AppState;
use crate::api::{Id, StreamParams};
use crate::runtime::{EndOptions, RecallError, TouchOptions, Turn};

/// A frame from the client: `{"type":"turn",…}`, `{"type":"touch"}` or
/// `{"type":"heard","user_message":…}`.
/// Flat rather than an internally tagged enum, so that serde parses it in
/// one pass without buffering (this is the per-turn path).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame {
    #[serde(rename = "type")]
    kind: FrameKind,
    user_message: Option<String>,
    agent_response: Option<String>,
    /// Echoed in the answer, to match answers to frames.
    #[serde(default)]
    id: Option<serde_json::Value>,
    /// Ack only once the turn is on disk.
    #[serde(default)]
    durable: bool,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum FrameKind {
    Turn,
    Touch,
    /// The user's words so far, before their turn ends: a touch, and the
    /// vector of the context read's message made ahead of the read
    /// ([`Runtime::prepare_message`](crate::Runtime::prepare_message)).
    Heard,
}

/// A voice connection as a WebSocket
///
/// Opening starts a session (HTTP errors as for `POST /v1/sessions` before
/// the upgrade). The server first sends
/// `{"type":"session","session_id","connection_id"}`. Client text frames:
/// `{"type":"turn","user_message","agent_response","id"?,"durable"?}`,
/// `{"type":"touch","id"?}` or `{"type":"heard","user_message","id"?}`
/// (the user's words before their turn ends: a touch that also makes the
/// next context read's vector ahead); each is answered with
/// `{"type":"ack","session_id"?,"id"?}` or
/// `{"type":"error","error":{"code","message"},"id"?,"retry_after_ms"?}`
/// (`retry_after_ms` with `store_unavailable`: the turn was not recorded,
/// send it again after that long). Closing the socket
/// ends the session with reason `disconnect`; on server shutdown the
/// server closes with code 1001. The server pings every
/// `server.ws_ping_secs`; a stream that sends nothing (not even a pong)
/// for `server.ws_idle_secs` is closed with code 1000, and a message over
/// `server.max_body_bytes` with code 1009; either ends the session as a
/// disconnect, and every turn acknowledged before is kept.
#[utoipa::path(get, path = "/v1/connections/{connection_id}/stream", operation_id = "stream", tag = "sessions",
    params(("connection_id" = Id, Path, description = "The voice connection"), StreamParams),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 409, description = "`connection_busy`, `connection_owned`", body = crate::api::ErrorBody),
        (status = 429, description = "`too_many_sessions`: the agent has session.max_live_per_agent live sessions, or the server session.max_live", body = crate::api::ErrorBody),
        (status = 400, description = "`websocket_required`: not a WebSocket upgrade request (its headers missing or wrong)", body = crate::api::ErrorBody),
    ))]
pub async fn stream(
    State(app): State<AppState>,
    Extension(access): Extension<Access>,
    ApiPath(connection_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StreamParams>,
    ApiWebSocket(ws): ApiWebSocket,
) -> Result<Response, ApiError> {
    access.allow(&q.agent_id)?;
    // Started before the upgrade, so that a busy connection or bad ids are
    // an HTTP error the client sees.
    let rec = app
        .runtime
        .start_session(&q.agent_id, &q.user_id, &connection_id)
        .await?;
    let failed_app = app.clone();
    let failed_conn = connection_id.clone();
    Ok(ws
        .max_message_size(app.max_body_bytes)
        // A frame is refused from its header, before its payload is read:
        // no frame is larger than the largest message.
        .max_frame_size(app.max_body_bytes)
        .on_failed_upgrade(move |err| {
            warn!(connection_id = failed_conn, error = %err, "websocket upgrade failed; ending the session");
            let _ = failed_app
                .runtime
                .end_session(&failed_conn, EndOptions::default());
        })
        .on_upgrade(move |socket| run(socket, app, connection_id, q, rec.session_id)))
}

/// How long a closing frame may wait on a client that reads nothing.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn error_frame(e: &ApiError, id: Option<serde_json::Value>) -> Message {
    let mut v = json!({"type": "error", "error": {"code": e.code, "message": e.message}});
    if let Some(after) = e.retry_after {
        v["retry_after_ms"] = json!(after.as_millis() as u64);
    }
    if let Some(id) = id {
        v["id"] = id;
    }
    Message::Text(v.to_string().into())
}

async fn run(
    mut socket: WebSocket,
    app: AppState,
    connection_id: String,
    owner: StreamParams,
    session_id: Uuid,
) {
    let mut shutdown = app.shutdown.clone();
    let mut ping = tokio::time::interval_at(Instant::now() + app.ws_ping, app.ws_ping);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    let _ = socket
        .send(Message::Text(
            json!({"type": "session", "session_id": session_id, "connection_id": connection_id})
                .to_string()
                .into(),
        ))
        .await;
    loop {
        let msg = tokio::select! {
            m = socket.recv() => m,
            _ = ping.tick() => {
                let ping = socket.send(Message::Ping(Default::default()));
                if !matches!(tokio::time::timeout(app.ws_idle, ping).await, Ok(Ok(()))) {
                    break;
                }
                continue;
            }
            () = tokio::time::sleep_until(heard + app.ws_idle) => {
                debug!(connection_id, "websocket idle; closing");
                let close = socket.send(Message::Close(Some(CloseFrame {
                    code: axum::extract::ws::close_code::NORMAL,
                    reason: format!("idle: nothing received for {} s", app.ws_idle.as_secs()).into(),
                })));
                // (a client that reads nothing gets no longer to take it)
                let _ = tokio::time::timeout(CLOSE_WAIT, close).await;
                break;
            }
            _ = async {
                // A dropped sender means no shutdown is coming.
                if shutdown.wait_for(|s| *s).await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => {
                // The runtime ends the session with reason `shutdown`.
                let _ = socket
                    .send(Message::Close(Some(CloseFrame {
                        code: axum::extract::ws::close_code::AWAY,
                        reason: "server shutting down".into(),
                    })))
                    .await;
                return;
            }
        };
        heard = Instant::now();
        let reply = match msg {
            Some(Ok(Message::Text(text))) => {
                match handle_text(&app, &connection_id, &owner, text.as_str()).await {
                    Ok(reply) => reply,
                    // The connection id passed to someone else since the
                    // stream opened (its session ended and the id was
                    // reused): this stream must not write into their
                    // session, and stops.
                    Err(reassigned) => {
                        let _ = socket.send(reassigned).await;
                        let _ = socket.send(Message::Close(None)).await;
                        return;
                    }
                }
            }
            Some(Ok(Message::Binary(_))) => error_frame(
                &ApiError::bad_request("binary frames are not supported; send JSON text frames"),
                None,
            ),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | None => break,
            Some(Err(err)) => {
                if too_big(err) {
                    debug!(connection_id, "websocket message over the limit; closing");
                    let close = socket.send(Message::Close(Some(CloseFrame {
                        code: axum::extract::ws::close_code::SIZE,
                        reason: format!(
                            "a message is over {} bytes (server.max_body_bytes)",
                            app.max_body_bytes
                        )
                        .into(),
                    })));
                    let _ = tokio::time::timeout(CLOSE_WAIT, close).await;
                } else {
                    debug!(connection_id, "websocket error");
                }
                break;
            }
        };
        // A client that sends and never reads fills its window: its send
        // waits no longer than the idle limit, then the stream closes.
        if !matches!(
            tokio::time::timeout(app.ws_idle, socket.send(reply)).await,
            Ok(Ok(()))
        ) {
            break;
        }
    }
    // End the connection's session only if it is still this stream's
    // (checked with the end, atomically: another user may hold it by now).
    let options = EndOptions::default().owned_by(&owner.agent_id, &owner.user_id);
    if let Err(err) = app.runtime.end_session(&connection_id, options) {
        debug!(connection_id, error = %err, "ending the session on close");
    }
}

/// Whether a read failed on a message or frame over the size limit (the
/// cause is logged otherwise).
fn too_big(err: axum::Error) -> bool {
    match err.into_inner().downcast::<tungstenite::Error>() {
        Ok(e) => {
            let over = matches!(*e, tungstenite::Error::Capacity(_));
            if !over {
                debug!(error = %e, "websocket error");
            }
            over
        }
        Err(other) => {
            debug!(error = %other, "websocket error");
            false
        }
    }
}

/// The answer to a text frame; `Err` with the error frame when the
/// connection is no longer this stream's.
async fn handle_text(
    app: &AppState,
    connection_id: &str,
    owner: &StreamParams,
    text: &str,
) -> Result<Message, Message> {
    let frame: Frame = match serde_json::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            // Keep the frame's id in the answer when the JSON has one.
            let id = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v.get("id").cloned());
            return Ok(error_frame(
                &ApiError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("{e}; expected {{\"type\":\"turn\",\"user_message\":…,\"agent_response\":…}}, {{\"type\":\"touch\"}} or {{\"type\":\"heard\",\"user_message\":…}}"),
                ),
                id,
            ));
        }
    };
    let id = frame.id;
    let (agent_id, user_id) = (owner.agent_id.as_str(), owner.user_id.as_str());
    let res = match frame.kind {
        FrameKind::Turn => {
            let (Some(user_message), Some(agent_response)) =
                (frame.user_message, frame.agent_response)
            else {
                return Ok(error_frame(
                    &ApiError::new(
                        axum::http::StatusCode::BAD_REQUEST,
                        "invalid_json",
                        "a turn frame needs user_message and agent_response",
                    ),
                    id,
                ));
            };
            let turn = Turn::new(user_message, agent_response).owned_by(agent_id, user_id);
            if frame.durable {
                app.runtime
                    .record_turn_durable(connection_id, turn)
                    .await
                    .map(Some)
            } else {
                app.runtime.record_turn(connection_id, turn).map(Some)
            }
        }
        FrameKind::Touch if frame.user_message.is_some() || frame.agent_response.is_some() => {
            return Ok(error_frame(
                &ApiError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    "invalid_json",
                    "a touch frame carries no messages; send a turn frame",
                ),
                id,
            ));
        }
        FrameKind::Touch => app
            .runtime
            .touch(
                connection_id,
                TouchOptions::default().owned_by(agent_id, user_id),
            )
            .map(|()| None),
        FrameKind::Heard => {
            let (Some(heard), None) = (frame.user_message, frame.agent_response) else {
                return Ok(error_frame(
                    &ApiError::new(
                        axum::http::StatusCode::BAD_REQUEST,
                        "invalid_json",
                        "a heard frame carries user_message only",
                    ),
                    id,
                ));
            };
            if app
                .runtime
                .connection_owned_by(connection_id, agent_id, user_id)
            {
                // Checked before the touch: a message too long changes
                // nothing.
                app.runtime
                    .prepare_message(&heard)
                    .and_then(|()| {
                        let options = TouchOptions::default().owned_by(agent_id, user_id);
                        app.runtime.touch(connection_id, options)
                    })
                    .map(|()| None)
            } else {
                Err(RecallError::NotOwner(connection_id.to_string()))
            }
        }
    };
    match res {
        Ok(session_id) => Ok(ack(session_id, id)),
        Err(e @ RecallError::NotOwner(_)) => Err(error_frame(&e.into(), id)),
        Err(e) => Ok(error_frame(&e.into(), id)),
    }
}

/// `{"type":"ack","session_id":…,"id":…}`, written directly: one per turn.
fn ack(session_id: Option<Uuid>, id: Option<serde_json::Value>) -> Message {
    let mut out = String::with_capacity(80);
    out.push_str(r#"{"type":"ack""#);
    if let Some(sid) = session_id {
        out.push_str(r#","session_id":""#);
        out.push_str(sid.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
        out.push('"');
    }
    if let Some(id) = id {
        out.push_str(r#","id":"#);
        out.push_str(&id.to_string());
    }
    out.push('}');
    Message::Text(out.into())
}
