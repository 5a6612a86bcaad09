//! The HTTP API's request bodies and query strings, through the real axum
//! router in process (no socket), against one runtime on a temporary data
//! folder with the offline summarizer.
//!
//! Input: the first byte picks the endpoint (see [`ENDPOINTS`]; a byte that
//! is no endpoint's letter picks one by its value), the rest is the body or
//! the query string (or, for `r`, a request line and a body, so paths and
//! methods are fuzzed too). Every answer must be a success or a 4xx, or one of the
//! 5xx the API means to send ([`INTENDED_5XX`]), and every error must carry
//! the API's `{"error":{"code","message"}}` body.
//!
//! Shared by the fuzz target of the same name and by `tests/fuzz_corpus.rs`,
//! which runs it over the committed corpus on every test run.

use std::sync::OnceLock;

use axum::body::{to_bytes, Body};
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use recall::server::{self, ServerConfig};
use recall::{EndOptions, Runtime, RuntimeBuilder, Settings, Turn};
use recall_actors::settings::FlushPolicy;
use serde_json::Value;
use tower::ServiceExt;

/// The connection the body endpoints use; a session is kept live on it.
const CONN: &str = "fuzz-conn";
const AGENT: &str = "kairix";
const USER: &str = "mark";

/// 5xx statuses the API sends on purpose, by error code: the turn was
/// recorded but the flush was not confirmed in time, or the server is
/// stopping. The others mean a bug here: `unavailable` an actor that died
/// or hung, and the 502s (`summarizer_failed`, `embedding_failed`) an
/// upstream failure, which the offline summarizer and embedder never have.
const INTENDED_5XX: [(StatusCode, &str); 2] = [
    (StatusCode::SERVICE_UNAVAILABLE, "not_durable"),
    (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
];

#[derive(Clone, Copy)]
enum Payload {
    /// The bytes are the JSON body.
    Body,
    /// The bytes are the query string.
    Query,
    /// The first line names a block label, the rest is the body.
    Label,
    /// The first line is `METHOD /path?query`, the rest is the body.
    Request,
}

/// (letter, method, path, what the bytes are). `{fact}` is a fact stored
/// at set-up.
const ENDPOINTS: [(u8, &str, &str, Payload); 14] = [
    (b's', "POST", "/v1/sessions", Payload::Body),
    (
        b't',
        "POST",
        "/v1/connections/fuzz-conn/turns?agent_id=kairix&user_id=mark",
        Payload::Body,
    ),
    (
        b'd',
        "POST",
        "/v1/connections/fuzz-conn/turns?agent_id=kairix&user_id=mark&durable=true",
        Payload::Body,
    ),
    (
        b'e',
        "POST",
        "/v1/connections/fuzz-conn/end?agent_id=kairix&user_id=mark",
        Payload::Body,
    ),
    (b'b', "PUT", "/v1/agents/kairix/blocks/", Payload::Label),
    (b'f', "PATCH", "/v1/facts/{fact}", Payload::Body),
    (b'q', "GET", "/v1/agents/kairix/search", Payload::Query),
    (b'c', "GET", "/v1/agents/kairix/context", Payload::Query),
    (b'm', "GET", "/v1/agents/kairix/summaries", Payload::Query),
    (b'l', "GET", "/v1/sessions", Payload::Query),
    (b'k', "GET", "/v1/agents/kairix/facts", Payload::Query),
    (b'o', "GET", "/v1/agents/kairix/topics", Payload::Query),
    (b'p', "POST", "/v1/agents/kairix/replay", Payload::Body),
    (b'r', "", "", Payload::Request),
];

struct Harness {
    tokio: tokio::runtime::Runtime,
    runtime: Runtime,
    app: Router,
    fact_id: String,
    // Kept for the life of the process: the data folder, and the sender
    // whose drop would read as a shutdown.
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = tempfile::tempdir().expect("a temporary data folder");
        let mut settings = Settings::for_test();
        // Flushing every write costs an fsync per request; group commit is
        // the default a server runs with.
        settings.store.flush = FlushPolicy::GroupCommit;
        let (runtime, fact_id) = tokio.block_on(async {
            let rt = RuntimeBuilder::new(dir.path())
                .settings(settings.clone())
                .start()
                .await
                .expect("the runtime starts");
            // One stored fact, for the fact endpoints.
            rt.start_session(AGENT, USER, "fuzz-setup").await.unwrap();
            rt.record_turn(
                "fuzz-setup",
                Turn::new(
                    "My name is Mark and I work at Initech.",
                    "Nice to meet you, Mark.",
                ),
            )
            .unwrap();
            rt.end_session("fuzz-setup", EndOptions::default()).unwrap();
            rt.wait_idle().await.unwrap();
            let facts = rt.facts(AGENT, USER).await.unwrap();
            let fact = facts.first().expect("the set-up session left a fact");
            (rt, fact.fact_id.to_string())
        });
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let app = server::router(
            runtime.clone(),
            &ServerConfig::from_settings(&settings),
            shutdown,
        );
        Harness {
            tokio,
            runtime,
            app,
            fact_id,
            _dir: dir,
            _stop: stop,
        }
    })
}

/// `bytes` as URI characters: what `http` accepts in a path or query stays
/// (so `%`, `&`, `=` and `+` reach the decoders as sent), the rest is
/// percent-encoded; `/` and `?` too unless `keep_delims`.
fn encode(bytes: &[u8], keep_delims: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        let plain = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&b);
        if plain || (keep_delims && (b == b'/' || b == b'?')) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    }
}

/// The request an input stands for, or `None` when it names no request.
fn request(h: &Harness, data: &[u8]) -> Option<Request<Body>> {
    let (&first, rest) = data.split_first()?;
    let (_, method, path, payload) = ENDPOINTS
        .iter()
        .find(|e| e.0 == first)
        .unwrap_or(&ENDPOINTS[first as usize % ENDPOINTS.len()]);
    let path = path.replace("{fact}", &h.fact_id);
    let (method, uri, body) = match payload {
        Payload::Body => (method.to_string(), path, rest.to_vec()),
        Payload::Query => (
            method.to_string(),
            format!("{path}?{}", encode(rest, false)),
            Vec::new(),
        ),
        Payload::Label => {
            let (label, body) = split_line(rest);
            (
                method.to_string(),
                format!("{path}{}", encode(label, false)),
                body.to_vec(),
            )
        }
        Payload::Request => {
            let (line, body) = split_line(rest);
            let (m, target) = split_at_space(line);
            let m = String::from_utf8(m.to_vec()).ok()?;
            (
                m,
                format!(
                    "/{}",
                    encode(target.strip_prefix(b"/").unwrap_or(target), true)
                ),
                body.to_vec(),
            )
        }
    };
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .ok()
}

fn split_at_space(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[][..]),
    }
}

/// One input: what it must keep to, asserted.
pub fn check(data: &[u8]) {
    let h = harness();
    let Some(req) = request(h, data) else {
        return;
    };
    let method = req.method().clone();
    let uri = req.uri().clone();
    h.tokio.block_on(async {
        // Keep a session live on the connection the body endpoints use
        // (an earlier input may have ended it).
        if h.runtime.connection_owner(CONN).is_none() {
            let _ = h.runtime.start_session(AGENT, USER, CONN).await;
        }
        let resp = h.app.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let json = content_type
            .as_ref()
            .is_some_and(|v| v == "application/json");
        let lines = content_type.is_some_and(|v| v == "application/x-ndjson");
        let bytes = to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("a body in memory");
        // Built only for a failure: list bodies grow over a run.
        let what = || {
            let text = String::from_utf8_lossy(&bytes);
            format!("{method} {uri} -> {status}: {text}")
        };
        if method == Method::HEAD {
            assert!(!status.is_server_error(), "{}", what());
            return;
        }
        if status.is_client_error() || status.is_server_error() {
            assert!(json, "an error without a JSON content type: {}", what());
            let code = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|body| error_code(&body).map(str::to_string))
                .unwrap_or_else(|| panic!("not an API error: {}", what()));
            if status.is_server_error() {
                assert!(
                    INTENDED_5XX.contains(&(status, code.as_str())),
                    "an unintended server error: {}",
                    what()
                );
            }
        } else if json {
            assert!(
                serde_json::from_slice::<Value>(&bytes).is_ok(),
                "{}",
                what()
            );
        } else if lines {
            // A streamed replay: JSON lines, the last a report or an error.
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let v: Value =
                    serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {}", what()));
                if v["type"] == "error" {
                    let code = code_of(&v["error"]).unwrap_or_else(|| panic!("{}", what()));
                    assert!(!["internal", "unavailable"].contains(&code), "{}", what());
                }
            }
        }
    });
}

/// The code of an `{"error":{"code","message"}}` body with nothing else.
fn error_code(body: &Value) -> Option<&str> {
    let outer = body.as_object()?;
    if outer.len() != 1 {
        return None;
    }
    code_of(outer.get("error")?)
}

/// The code of an `{"code","message"}` object: snake_case, with a message.
fn code_of(err: &Value) -> Option<&str> {
    let err = err.as_object()?;
    if err.len() != 2 {
        return None;
    }
    err.get("message")?.as_str()?;
    let code = err.get("code")?.as_str()?;
    let snake = !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    snake.then_some(code)
}
