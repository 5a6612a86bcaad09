//! `OpenAiEmbed` against a fake OpenAI-compatible `/v1/embeddings` server
//! on a local port, then topics and search through a runtime that embeds
//! with it. Real time: sockets do not follow tokio's paused clock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use recall::embeddings::OpenAiEmbed;
use recall::engine::embed::{Embed, EmbedError, HashingEmbed};
use recall::engine::search::SearchQuery;
use recall::engine::settings::{EmbedKind, OpenAiEmbedSettings};
use recall::{ContextOptions, EndOptions, RuntimeBuilder, Settings, Turn};
use serde_json::{json, Value};

type Res = anyhow::Result<()>;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Vectors of the hashing embedder (64 dimensions), listed in reverse
    /// order with their `index`.
    Good,
    Status500,
    /// One vector too few.
    Short,
    /// The second vector one number shorter.
    Ragged,
    NotJson,
    /// Good, after 300 ms.
    Slow,
}

#[derive(Clone)]
struct Fake {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Vec<Request>>>,
}

/// The authorization header and body of a request.
type Request = (Option<String>, Value);

async fn embeddings(
    State(f): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    f.seen.lock().expect("lock").push((auth, body.clone()));
    let mode = *f.mode.lock().expect("lock");
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let e = HashingEmbed::new(64);
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": e.vector(t)}))
        .collect();
    match mode {
        Mode::Good => {}
        Mode::Slow => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
        Mode::Status500 => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "model not loaded").into_response()
        }
        Mode::Short => {
            data.pop();
        }
        Mode::Ragged => {
            if let Some(v) = data.get_mut(1).and_then(|d| d["embedding"].as_array_mut()) {
                v.pop();
            }
        }
        Mode::NotJson => return (StatusCode::OK, "<html>").into_response(),
    }
    data.reverse();
    Json(json!({"object": "list", "model": body["model"], "data": data})).into_response()
}

impl Fake {
    async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let fake = Fake {
            addr: listener.local_addr().expect("address"),
            mode: Arc::new(Mutex::new(Mode::Good)),
            seen: Arc::new(Mutex::new(Vec::new())),
        };
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(fake.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake server runs");
        });
        fake
    }

    fn settings(&self, batch: usize) -> OpenAiEmbedSettings {
        OpenAiEmbedSettings {
            base_url: format!("http://{}/v1", self.addr),
            model: "test-embed".into(),
            batch,
            ..Default::default()
        }
    }

    fn set(&self, m: Mode) {
        *self.mode.lock().expect("lock") = m;
    }

    fn seen(&self) -> Vec<Request> {
        self.seen.lock().expect("lock").clone()
    }
}

#[tokio::test]
async fn vectors_come_back_in_order_in_batches_with_the_key() -> Res {
    let fake = Fake::start().await;
    let client = OpenAiEmbed::new(&fake.settings(2), Some("sk-embed".into()))?;
    let texts: Vec<String> = ["job search", "sailing in Porto", "Globex offer", "salary"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = client.embed(texts.clone()).await?;
    let local = HashingEmbed::new(64);
    assert_eq!(out.len(), 4);
    for (v, t) in out.iter().zip(&texts) {
        assert_eq!(v, &local.vector(t), "{t}: put back by index");
    }
    assert_eq!(client.dimensions(), 64);
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "two batches of two");
    assert_eq!(seen[0].0.as_deref(), Some("Bearer sk-embed"));
    assert_eq!(seen[0].1["model"], "test-embed");
    assert_eq!(seen[1].1["input"], json!(["Globex offer", "salary"]));
    Ok(())
}

#[tokio::test]
async fn bad_answers_are_typed_errors() -> Res {
    let fake = Fake::start().await;
    let client = OpenAiEmbed::new(&fake.settings(8), None)?;
    let two = || vec!["a text".to_string(), "another text".to_string()];
    fake.set(Mode::Status500);
    let e = client.embed(two()).await.expect_err("500");
    assert!(
        e.to_string().contains("status 500") && e.to_string().contains("model not loaded"),
        "{e}"
    );
    fake.set(Mode::Short);
    let e = client.embed(two()).await.expect_err("short");
    assert!(e.to_string().contains("asked for 2 vectors, got 1"), "{e}");
    fake.set(Mode::NotJson);
    let e = client.embed(two()).await.expect_err("html");
    assert!(e.to_string().contains("not an embeddings answer"), "{e}");
    fake.set(Mode::Ragged);
    let e = client.embed(two()).await.expect_err("ragged");
    assert!(
        matches!(
            e,
            EmbedError::Dimensions {
                expected: 64,
                got: 63
            }
        ),
        "{e:?}"
    );
    assert!(
        fake.seen().iter().all(|(auth, _)| auth.is_none()),
        "no key, no header"
    );
    // nothing listening
    let gone = OpenAiEmbed::new(
        &OpenAiEmbedSettings {
            base_url: "http://127.0.0.1:9/v1".into(),
            ..Default::default()
        },
        None,
    )?;
    assert!(matches!(
        gone.embed(two()).await,
        Err(EmbedError::Failed(_))
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_embeds_topics_and_searches_through_the_server() -> Res {
    let fake = Fake::start().await;
    let dir = tempfile::tempdir()?;
    let mut s = Settings::for_test();
    s.embed.kind = EmbedKind::Openai;
    s.embed.openai = fake.settings(16);
    let rt = RuntimeBuilder::new(dir.path()).settings(s).start().await?;
    for (conn, said) in [
        ("c1", "I have a Globex interview and the salary talk"),
        ("c2", "The second Globex interview asked about salary"),
        ("c3", "We are planning a sailing weekend in Porto"),
    ] {
        rt.start_session("kairix", "mark", conn).await?;
        rt.record_turn(conn, Turn::new(said, "Tell me more"))?;
        rt.end_session(conn, EndOptions::default())?;
        rt.wait_idle().await?;
    }
    let topics = rt.topics("kairix", Some("mark")).await?;
    assert_eq!(topics.len(), 2, "{topics:?}");
    let hits = rt
        .search(
            "kairix",
            SearchQuery {
                text: "Porto sailing".into(),
                user_id: Some("mark".into()),
                limit: 3,
                ..Default::default()
            },
        )
        .await?;
    assert!(hits[0].text.contains("Porto"), "{hits:?}");
    assert!(
        hits[0].similarity > 0.0,
        "vectors from the server were used"
    );
    let models: Vec<Value> = fake
        .seen()
        .iter()
        .map(|(_, b)| b["model"].clone())
        .collect();
    assert!(models.len() >= 4 && models.iter().all(|m| m == "test-embed"));
    // the embedding service going down fails the search with a typed
    // error; the inbox keeps what was not embedded for later
    fake.set(Mode::Status500);
    let err = rt
        .search(
            "kairix",
            SearchQuery {
                text: "Globex".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("no query vector");
    assert!(matches!(err, recall::RecallError::Embed(_)), "{err:?}");
    rt.shutdown().await?;
    Ok(())
}

/// A message prepared ahead of the context read (as a voice server does
/// with the user's words before their turn ends) is embedded once: the
/// read that follows awaits that request, and later reads find its
/// vector kept. A message too long is refused and asks for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_prepared_ahead_is_embedded_once_for_the_read() -> Res {
    let fake = Fake::start().await;
    let dir = tempfile::tempdir()?;
    let mut s = Settings::for_test();
    s.embed.kind = EmbedKind::Openai;
    s.embed.openai = fake.settings(16);
    s.context.query_embed_timeout_ms = 5_000;
    s.session.max_message_chars = 200;
    let rt = RuntimeBuilder::new(dir.path()).settings(s).start().await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "We are planning a sailing weekend in Porto",
            "Sounds lovely",
        ),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    rt.wait_idle().await?;
    let asked = |message: &str| {
        fake.seen()
            .iter()
            .filter(|(_, b)| b["input"] == json!([message]))
            .count()
    };

    fake.set(Mode::Slow);
    let message = "Where is the sailing weekend?";
    rt.prepare_message(message)?;
    rt.prepare_message(&format!("  {message}\n"))?;
    let ctx = rt
        .context("kairix", "mark", message, 2_000, ContextOptions::default())
        .await?;
    assert!(
        ctx.to_messages()
            .iter()
            .any(|m| m.content.contains("Porto")),
        "{ctx:?}"
    );
    assert_eq!(asked(message), 1, "one request for the prepared message");
    fake.set(Mode::Good);
    rt.context("kairix", "mark", message, 2_000, ContextOptions::default())
        .await?;
    assert_eq!(asked(message), 1, "the vector was kept");

    // refused whole: nothing is asked of the server
    let long = "sail ".repeat(50);
    let err = rt.prepare_message(&long).expect_err("too long");
    assert!(
        matches!(
            err,
            recall::RecallError::Input(recall::InputError::TooLong { .. })
        ),
        "{err:?}"
    );
    assert_eq!(asked(long.trim()), 0);
    rt.shutdown().await?;
    Ok(())
}
