//! A fake OpenAI-compatible chat-completions server on a local port, for
//! the tests of the LLM adapter (`tests/openai.rs`) and the outage
//! benchmark (`benches/outage.rs`), which include this file by path.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::watch;

/// What the fake server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with a chat completion whose message content is this text.
    Content(String),
    /// The same, after a delay.
    Slow(Duration, String),
    /// This status with this plain-text body.
    Status(u16, String),
    /// 429 with this `Retry-After` header, if any.
    RateLimited(Option<&'static str>),
    /// 200 with this body as it is.
    Body(&'static str),
    /// Takes the request and never answers (a hung connection).
    Hang,
    /// A model whose context holds this many tokens, counted as
    /// characters / 4 of each message's content: a longer request gets 400
    /// `context_length_exceeded` as OpenAI and vLLM send it; a shorter one
    /// a chat completion whose content the function makes of the request
    /// body.
    Limited(usize, fn(&Value) -> String),
}

/// The tokens of a chat request's messages as [`Reply::Limited`] counts
/// them.
pub fn prompt_tokens(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    m["content"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .count()
                        .div_ceil(4)
                })
                .sum()
        })
        .unwrap_or(0)
}

/// A request the fake server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub body: Value,
}

/// A fake chat-completions server: plays its script, one reply per request,
/// then repeats `otherwise`; records every request.
#[derive(Clone)]
pub struct Fake {
    addr: SocketAddr,
    script: Arc<Mutex<VecDeque<Reply>>>,
    otherwise: Arc<Mutex<Reply>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// How many requests arrived so far, for waiting on a count.
    count: Arc<watch::Sender<usize>>,
}

impl Fake {
    pub async fn start(script: impl IntoIterator<Item = Reply>, otherwise: Reply) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let fake = Fake {
            addr: listener.local_addr().expect("local address"),
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            otherwise: Arc::new(Mutex::new(otherwise)),
            seen: Arc::new(Mutex::new(Vec::new())),
            count: Arc::new(watch::Sender::new(0)),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(fake.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake server runs");
        });
        fake
    }

    /// Always answers with this content.
    pub async fn answering(content: &str) -> Fake {
        Fake::start([], Reply::Content(content.to_string())).await
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Returns once `n` requests in all have arrived (at once if they
    /// already have).
    pub async fn wait_for_requests(&self, n: usize) {
        let mut rx = self.count.subscribe();
        // The sender lives in `self`, so the channel cannot close.
        rx.wait_for(|&c| c >= n)
            .await
            .expect("the fake server's counter is alive");
    }

    /// Changes what the server answers once its script has run out.
    pub fn set_otherwise(&self, reply: Reply) {
        *self.otherwise.lock().unwrap() = reply;
    }

    /// Replaces what is left of the script.
    pub fn set_script(&self, script: impl IntoIterator<Item = Reply>) {
        *self.script.lock().unwrap() = script.into_iter().collect();
    }
}

pub fn completion(content: &str) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fake",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }]
    })
}

async fn chat(State(fake): State<Fake>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let header_value = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let seen = {
        let mut seen = fake.seen.lock().unwrap();
        seen.push(Seen {
            path: uri.path().to_string(),
            authorization: header_value(header::AUTHORIZATION),
            content_type: header_value(header::CONTENT_TYPE),
            body: body.clone(),
        });
        seen.len()
    };
    fake.count.send_replace(seen);
    let next = fake.script.lock().unwrap().pop_front();
    let reply = next.unwrap_or_else(|| fake.otherwise.lock().unwrap().clone());
    match reply {
        Reply::Content(text) => Json(completion(&text)).into_response(),
        Reply::Slow(delay, text) => {
            tokio::time::sleep(delay).await;
            Json(completion(&text)).into_response()
        }
        Reply::Status(status, body) => {
            (StatusCode::from_u16(status).expect("valid status"), body).into_response()
        }
        Reply::RateLimited(Some(retry_after)) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_after)],
            "slow down",
        )
            .into_response(),
        Reply::RateLimited(None) => (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response(),
        Reply::Body(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Reply::Hang => std::future::pending().await,
        Reply::Limited(limit, answer) => {
            let tokens = prompt_tokens(&body);
            if tokens > limit {
                let error = json!({"error": {
                    "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }});
                return (StatusCode::BAD_REQUEST, Json(error)).into_response();
            }
            Json(completion(&answer(&body))).into_response()
        }
    }
}
