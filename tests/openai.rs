//! `OpenAiReflect` against a fake OpenAI-compatible server on a local port,
//! then end to end through the runtime. These run in real time: the HTTP
//! client's timeouts and the sockets do not follow tokio's paused clock.

use crate::common::fake_llm;

use std::time::Duration;
use uuid::Uuid;

use fake_llm::{prompt_tokens, Fake, Reply, Seen};
use recall::engine::settings::{OpenAiSettings, ReflectorKind};
use recall::llm::OpenAiReflect;
use recall::testkit::test_epoch;
use recall::{
    BlockLabel, ContextOptions, ConversationTurn, EndOptions, Reflect, ReflectError,
    ReflectRequest, RuntimeBuilder, SessionRecord, Settings, SummaryType, Turn,
};
use serde_json::json;

type Res = anyhow::Result<()>;

const API_KEY: &str = "sk-test-123";

fn openai_settings(base_url: &str) -> OpenAiSettings {
    OpenAiSettings {
        base_url: base_url.to_string(),
        model: "gpt-4o-mini".to_string(),
        timeout_secs: 10,
        ..OpenAiSettings::default()
    }
}

fn client(fake: &Fake) -> OpenAiReflect {
    OpenAiReflect::new(
        &openai_settings(&fake.base_url()),
        Some(API_KEY.to_string()),
    )
    .expect("client builds")
}

const SYSTEM: &str = "You reflect on conversations and answer with JSON.";
const PROMPT: &str = "User: I got the job at Globex!\nAgent: Congratulations, Mark!";

fn request() -> ReflectRequest {
    let at = test_epoch();
    ReflectRequest {
        system: SYSTEM.to_string(),
        prompt: PROMPT.to_string(),
        session: SessionRecord {
            session_id: uuid::Uuid::from_u128(7),
            agent_id: "kairix".to_string(),
            user_id: "mark".to_string(),
            connection_id: "c1".to_string(),
            started_at: at,
            ended_at: Some(at + chrono::Duration::seconds(60)),
            end_reason: None,
            turn_count: 1,
        },
        turns: vec![ConversationTurn {
            user_message: "I got the job at Globex!".to_string(),
            agent_response: "Congratulations, Mark!".to_string(),
            timestamp: at,
        }],
        sources: Vec::new(),
        max_chars: None,
    }
}

async fn reflect_once(fake: &Fake) -> Result<String, ReflectError> {
    client(fake).reflect(request()).await
}

// ---------------------------------------------------------------------------
// The adapter alone
// ---------------------------------------------------------------------------

#[tokio::test]
async fn returns_the_message_content_verbatim_and_sends_a_chat_completion_request() {
    let content = "  {\"summary\": \"Mark got the job at Globex.\", \"topics\": [\"job\"]}\n";
    let fake = Fake::answering(content).await;
    let out = reflect_once(&fake).await.expect("reflection text");
    assert_eq!(out, content);

    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.authorization.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    assert!(
        req.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        req.content_type
    );
    let body = &req.body;
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], false);
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let temperature = body["temperature"].as_f64().expect("temperature");
    assert!((temperature - 0.2).abs() < 1e-6, "{temperature}");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ])
    );
}

#[tokio::test]
async fn json_mode_off_omits_response_format_and_no_key_sends_no_authorization() {
    let fake = Fake::answering("Mark got the job.").await;
    // A trailing slash on the base URL is tolerated.
    let mut settings = openai_settings(&format!("{}/", fake.base_url()));
    settings.json_mode = false;
    settings.temperature = 0.0;
    let no_key = OpenAiReflect::new(&settings, None).expect("client builds");
    assert_eq!(no_key.name(), "openai");
    assert_eq!(
        no_key.reflect(request()).await.expect("answer"),
        "Mark got the job."
    );
    let empty_key = OpenAiReflect::new(&settings, Some(String::new())).expect("client builds");
    empty_key.reflect(request()).await.expect("answer");

    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    for req in &seen {
        assert_eq!(req.authorization, None);
        let body = req.body.as_object().expect("a JSON object");
        assert!(!body.contains_key("response_format"), "{body:?}");
        assert_eq!(body["temperature"], 0.0);
    }
}

/// The answer comes a minute after the request, the client's timeout is
/// one second: the call ends first, with `Timeout` (had the timeout not
/// worked, the answer would have come and the call succeeded). Order of
/// events, not a duration on the wall clock.
#[tokio::test]
async fn a_slow_answer_beyond_the_client_timeout_is_a_timeout() {
    let fake = Fake::start(
        [Reply::Slow(Duration::from_secs(60), "too late".to_string())],
        Reply::Content("unused".to_string()),
    )
    .await;
    let mut settings = openai_settings(&fake.base_url());
    settings.timeout_secs = 1;
    let client = OpenAiReflect::new(&settings, Some(API_KEY.to_string())).expect("client builds");
    let err = client.reflect(request()).await.expect_err("timed out");
    match &err {
        ReflectError::Timeout(limit) => assert_eq!(*limit, Duration::from_secs(1)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(fake.seen().len(), 1, "the request was sent");
    assert!(err.is_retryable());
    assert_eq!(err.kind(), "timeout");
}

#[tokio::test]
async fn a_server_error_is_retryable_and_keeps_the_body() {
    let fake = Fake::start(
        [Reply::Status(500, "upstream model overloaded".to_string())],
        Reply::Content("unused".to_string()),
    )
    .await;
    let err = reflect_once(&fake).await.expect_err("server error");
    match &err {
        ReflectError::Server { status, body } => {
            assert_eq!(*status, 500);
            assert_eq!(body, "upstream model overloaded");
        }
        other => panic!("expected Server, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(err.kind(), "server_error");
    assert_eq!(err.retry_after(), None);
}

#[tokio::test]
async fn a_long_error_body_is_cut_short() {
    let fake = Fake::start(
        [Reply::Status(503, "x".repeat(5_000))],
        Reply::Content("unused".to_string()),
    )
    .await;
    match reflect_once(&fake).await {
        Err(ReflectError::Server { status: 503, body }) => {
            assert!(!body.is_empty());
            assert!(
                body.chars().count() <= 512,
                "{} chars",
                body.chars().count()
            );
        }
        other => panic!("expected Server 503, got {other:?}"),
    }
}

#[tokio::test]
async fn rate_limited_with_retry_after_carries_the_delay() {
    let fake = Fake::start(
        [Reply::RateLimited(Some("7")), Reply::RateLimited(None)],
        Reply::Content("unused".to_string()),
    )
    .await;
    let err = reflect_once(&fake).await.expect_err("rate limited");
    match &err {
        ReflectError::RateLimited { retry_after } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(err.kind(), "rate_limited");

    let err = reflect_once(&fake).await.expect_err("rate limited");
    assert!(
        matches!(err, ReflectError::RateLimited { retry_after: None }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_bad_request_is_rejected_and_not_retried() {
    let fake = Fake::start(
        [Reply::Status(
            400,
            "{\"error\": {\"message\": \"response_format is not supported\"}}".to_string(),
        )],
        Reply::Content("unused".to_string()),
    )
    .await;
    let err = reflect_once(&fake).await.expect_err("rejected");
    match &err {
        ReflectError::Rejected { status, body } => {
            assert_eq!(*status, 400);
            assert!(body.contains("response_format is not supported"), "{body}");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(err.kind(), "rejected");
}

#[tokio::test]
async fn a_prompt_over_the_context_is_its_own_error_and_not_retried() {
    let fake = Fake::start([], Reply::Limited(10, |_| "unused".to_string())).await;
    let err = reflect_once(&fake).await.expect_err("over the context");
    match &err {
        ReflectError::ContextLengthExceeded { status, body } => {
            assert_eq!(*status, 400);
            assert!(body.contains("maximum context length is 10"), "{body}");
        }
        other => panic!("expected ContextLengthExceeded, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(err.kind(), "context_length_exceeded");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_an_invalid_response() {
    let fake = Fake::start(
        [Reply::Body("<html><body>Bad Gateway</body></html>")],
        Reply::Content("unused".to_string()),
    )
    .await;
    let err = reflect_once(&fake).await.expect_err("invalid response");
    assert!(
        matches!(err, ReflectError::InvalidResponse(_)),
        "expected InvalidResponse, got {err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(err.kind(), "invalid_response");
}

#[tokio::test]
async fn a_completion_without_content_is_an_invalid_response() {
    let fake = Fake::start(
        [
            Reply::Body("{\"choices\": []}"),
            Reply::Body(
                "{\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": null}}]}",
            ),
        ],
        Reply::Content("unused".to_string()),
    )
    .await;
    for _ in 0..2 {
        let err = reflect_once(&fake).await.expect_err("invalid response");
        assert!(
            matches!(err, ReflectError::InvalidResponse(_)),
            "expected InvalidResponse, got {err:?}"
        );
        assert!(
            err.chain().contains("choices[0].message.content"),
            "{}",
            err.chain()
        );
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let settings = openai_settings(&format!("http://{addr}/v1"));
    let client = OpenAiReflect::new(&settings, Some(API_KEY.to_string())).expect("client builds");
    let err = client.reflect(request()).await.expect_err("refused");
    assert!(
        matches!(err, ReflectError::Transport(_)),
        "expected Transport, got {err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(err.kind(), "transport");
}

// ---------------------------------------------------------------------------
// End to end through the runtime
// ---------------------------------------------------------------------------

const REFLECTION: &str = r#"{
  "summary": "Mark prepared for his Globex interview on Friday and worried about the salary talk.",
  "topics": ["Interview", "salary"],
  "entities": ["Globex", "Friday"],
  "emotional_tone": "anxious but hopeful",
  "relationship": "Mark trusts Kairix with his job search."
}"#;

fn runtime_settings(fake: &Fake) -> Settings {
    let mut s = Settings::for_test();
    s.reflector.kind = ReflectorKind::Openai;
    s.reflector.backoff_base_ms = 10;
    s.reflector.backoff_max_ms = 50;
    s.reflector.openai = openai_settings(&fake.base_url());
    // These tests count the calls reflections make; topic summaries would
    // add their own.
    s.rollup.enabled = false;
    s
}

/// A runtime on `dir` reflecting through the fake server.
async fn start_runtime(
    dir: &tempfile::TempDir,
    settings: Settings,
) -> anyhow::Result<recall::Runtime> {
    Ok(RuntimeBuilder::new(dir.path())
        .settings(settings)
        .api_key(API_KEY)
        .start()
        .await?)
}

/// One call with two turns, ended by a disconnect; returns its record.
async fn one_call(rt: &recall::Runtime) -> anyhow::Result<SessionRecord> {
    let rec = rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new(
            "I have an interview at Globex on Friday",
            "That's great news. Want to practise?",
        ),
    )?;
    rt.record_turn(
        "c1",
        Turn::new(
            "Yes, and I'm nervous about the salary question",
            "Let's start with that one.",
        ),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    rt.wait_idle().await?;
    Ok(rec)
}

fn assert_reflection_request(req: &Seen) {
    assert_eq!(
        req.authorization.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    assert_eq!(req.body["model"], "gpt-4o-mini");
    assert_eq!(req.body["response_format"], json!({"type": "json_object"}));
    let messages = req.body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert!(!messages[0]["content"].as_str().unwrap_or("").is_empty());
    assert_eq!(messages[1]["role"], "user");
    let prompt = messages[1]["content"].as_str().expect("user prompt");
    assert!(
        prompt.contains("I have an interview at Globex on Friday"),
        "{prompt}"
    );
    assert!(prompt.contains("Let's start with that one."), "{prompt}");
}

#[tokio::test]
async fn the_runtime_retries_a_server_error_and_stores_the_llm_summary() -> Res {
    let fake = Fake::start(
        [Reply::Status(500, "try again".to_string())],
        Reply::Content(REFLECTION.to_string()),
    )
    .await;
    let dir = tempfile::tempdir()?;
    let rt = start_runtime(&dir, runtime_settings(&fake)).await?;
    let rec = one_call(&rt).await?;

    assert_eq!(fake.requests(), 2, "one failed attempt, one success");
    for req in fake.seen() {
        assert_reflection_request(&req);
    }
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let s = &summaries[0];
    assert_eq!(s.summary_id, rec.session_id);
    assert_eq!(s.user_id, "mark");
    assert_eq!(
        s.summary_text,
        "Mark prepared for his Globex interview on Friday and worried about the salary talk."
    );
    assert_eq!(s.topics, ["interview", "salary"]);
    assert_eq!(s.key_entities, ["Globex", "Friday"]);
    assert_eq!(s.emotional_tone.as_deref(), Some("anxious but hopeful"));
    assert_eq!(s.turn_count, 2);
    assert!(!s.fallback);
    let relationship = rt
        .user_block("kairix", "mark", BlockLabel::Relationship)
        .await?
        .expect("relationship block written");
    assert_eq!(
        relationship.value,
        "Mark trusts Kairix with his job search."
    );
    assert!(rt.dead_letters().await?.is_empty());

    rt.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn the_runtime_stores_malformed_llm_output_as_a_fallback_summary() -> Res {
    let raw = "{\"summary\": \"Mark talked about Globex";
    let fake = Fake::answering(raw).await;
    let dir = tempfile::tempdir()?;
    let rt = start_runtime(&dir, runtime_settings(&fake)).await?;
    let rec = one_call(&rt).await?;

    assert_eq!(fake.requests(), 1, "malformed output is not retried");
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let s = &summaries[0];
    assert_eq!(s.summary_id, rec.session_id);
    assert!(s.fallback);
    assert_eq!(s.summary_text, raw);
    assert!(
        s.key_entities.contains(&"Globex".to_string()),
        "{:?}",
        s.key_entities
    );
    assert!(rt.dead_letters().await?.is_empty());

    rt.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn the_runtime_dead_letters_after_its_attempts_and_a_retry_succeeds() -> Res {
    let fake = Fake::start([], Reply::Status(500, "model crashed".to_string())).await;
    let dir = tempfile::tempdir()?;
    let mut settings = runtime_settings(&fake);
    settings.reflector.max_attempts = 2;
    let rt = start_runtime(&dir, settings).await?;
    let rec = one_call(&rt).await?;

    assert_eq!(fake.requests(), 2);
    let letters = rt.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.session_id, rec.session_id);
    assert_eq!(letter.agent_id, "kairix");
    assert_eq!(letter.user_id, "mark");
    assert_eq!(letter.attempts, 2);
    assert_eq!(letter.error_kind, "server_error");
    assert!(letter.error.contains("500"), "{}", letter.error);
    assert!(letter.error.contains("model crashed"), "{}", letter.error);
    assert!(rt
        .summaries("kairix", SummaryType::Session)
        .await?
        .is_empty());

    // The server recovers; the dead letter goes back into the queue.
    fake.set_otherwise(Reply::Content(REFLECTION.to_string()));
    rt.retry_dead_letter(rec.session_id).await?;
    rt.wait_idle().await?;

    assert_eq!(fake.requests(), 3);
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    assert_eq!(summaries[0].summary_id, rec.session_id);
    assert!(!summaries[0].fallback);
    assert!(summaries[0]
        .summary_text
        .starts_with("Mark prepared for his Globex interview"));
    assert!(rt.dead_letters().await?.is_empty());

    rt.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// An outage of every kind
// ---------------------------------------------------------------------------

/// Eight calls of three turns (the last one durable) over three users;
/// their session ids. Each `record_turn` returning `Ok` is a turn
/// acknowledged, each `record_turn_durable` one confirmed on disk.
async fn calls(rt: &recall::Runtime, phase: &str) -> anyhow::Result<Vec<Uuid>> {
    let mut ids = Vec::new();
    for i in 0..8 {
        let user = ["mark", "ada", "li"][i % 3];
        let conn = format!("{phase}-{i}");
        ids.push(rt.start_session("kairix", user, &conn).await?.session_id);
        for t in 0..2 {
            rt.record_turn(
                &conn,
                Turn::new(
                    format!("{phase} call {i}: {user} asks about the Globex offer, part {t}"),
                    "Let's go through it.",
                ),
            )?;
        }
        rt.record_turn_durable(
            &conn,
            Turn::new(
                format!("{phase} call {i}: {user} decides to negotiate the salary"),
                "Good plan.",
            ),
        )
        .await?;
        rt.end_session(&conn, EndOptions::default())?;
    }
    Ok(ids)
}

/// Only so that a hang fails the test instead of stalling it: the outage
/// plays out in seconds.
const SAFETY: Duration = Duration::from_secs(300);

/// How fast turns are recorded during an outage is a benchmark
/// (`benches/outage.rs`); this test asserts what happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_outage_of_every_kind_leaves_turns_and_contexts_alone_and_drains_once() -> Res {
    let fake = Fake::answering(REFLECTION).await;
    let dir = tempfile::tempdir()?;
    let mut settings = runtime_settings(&fake);
    settings.reflector.openai.timeout_secs = 1;
    settings.reflector.attempt_timeout_secs = 2;
    settings.reflector.max_attempts = 3;
    let rt = start_runtime(&dir, settings.clone()).await?;

    // Healthy first: one request per call.
    let healthy_ids = calls(&rt, "healthy").await?;
    rt.wait_idle().await?;
    assert_eq!(fake.requests(), healthy_ids.len());

    // The outage: every request gets the next of these faults, round and
    // round: a 500, a 429 with Retry-After, a hung connection, an answer
    // after the client's timeout, a body that is not JSON, and a
    // completion without content.
    let faults = [
        Reply::Status(500, "model crashed".to_string()),
        Reply::RateLimited(Some("1")),
        Reply::Hang,
        Reply::Slow(Duration::from_secs(3), REFLECTION.to_string()),
        Reply::Body("<html><body>Bad Gateway</body></html>"),
        Reply::Body("{\"choices\": []}"),
    ];
    fake.set_script(faults.iter().cycle().take(600).cloned());
    fake.set_otherwise(Reply::Status(503, "still down".to_string()));
    let before = fake.requests();
    // Every turn of these calls is acknowledged, and every durable one
    // confirmed on disk, while reflections fail and hang.
    let ids = calls(&rt, "outage").await?;

    // Meanwhile contexts assemble from what is stored: the calls' raw
    // turns stand in for their missing summaries.
    let ctx = rt
        .context(
            "kairix",
            "mark",
            "What did we decide?",
            4_000,
            ContextOptions::default(),
        )
        .await?;
    let text = serde_json::to_string(&ctx)?;
    assert!(
        text.contains("outage call 6: mark decides to negotiate the salary"),
        "{text}"
    );

    // Wait until every kind of fault was served twice and a reflection ran
    // out of attempts, then crash with the rest queued or in backoff.
    let mut stats = rt.watch_stats();
    tokio::time::timeout(SAFETY, async {
        fake.wait_for_requests(before + 2 * faults.len()).await;
        stats.wait_for(|s| s.dead_lettered > 0).await.map(|_| ())
    })
    .await
    .map_err(|_| anyhow::anyhow!("the outage never played out"))??;
    let outage_requests = fake.requests() - before;
    let dead_at_crash = rt.dead_letters().await?.len();
    assert!(
        dead_at_crash > 0,
        "a dead letter is stored before it counts"
    );
    rt.abort().await;

    // The LLM is back; a restart resumes the queue, and the dead letters
    // are retried.
    fake.set_script([]);
    fake.set_otherwise(Reply::Content(REFLECTION.to_string()));
    let rt = start_runtime(&dir, settings).await?;
    let queued_at_restart = rt.stats().await?.supervisor.reflections_queued
        + rt.stats().await?.supervisor.reflections_running;
    rt.wait_idle().await?;
    let letters = rt.dead_letters().await?;
    for l in &letters {
        rt.retry_dead_letter(l.session_id).await?;
    }
    rt.wait_idle().await?;

    // Exactly one summary per call, from the LLM, and nothing left over.
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    let mut got: Vec<Uuid> = summaries.iter().map(|s| s.summary_id).collect();
    got.sort();
    let mut want: Vec<Uuid> = healthy_ids.iter().chain(&ids).copied().collect();
    want.sort();
    assert_eq!(got, want, "one summary per session, no duplicate");
    assert!(summaries.iter().all(|s| !s.fallback), "{summaries:?}");
    assert!(rt.dead_letters().await?.is_empty());
    // …and every call kept its three turns through the outage and crash.
    for id in &want {
        assert_eq!(rt.turns(*id).await?.len(), 3, "session {id}");
    }
    let stats = rt.stats().await?;
    assert_eq!(stats.supervisor.duplicates, 0);
    rt.shutdown().await?;

    eprintln!(
        "outage: {outage_requests} failed LLM requests; {dead_at_crash} dead letters and \
         {queued_at_restart} reflections resumed from the queue after the crash, {} retried",
        letters.len(),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Long calls against a small model
// ---------------------------------------------------------------------------

/// What the fake model's context holds, in tokens.
const SMALL_CONTEXT: usize = 6_000;

/// A side's words as the prompts quote them, unquoted.
fn unquote(words: &str) -> String {
    serde_json::from_str(words).unwrap_or_else(|_| words.to_string())
}

/// The fake small model. A reflection of turns answers with the range of
/// turns it read and, as facts, what the user asked it to remember; a
/// combining request answers with the parts' summaries it read, in order.
fn small_model(body: &serde_json::Value) -> String {
    let prompt = body["messages"][1]["content"].as_str().unwrap_or("");
    if prompt.contains("PART SUMMARIES") {
        let parts: Vec<String> = prompt
            .lines()
            .filter_map(|l| l.strip_prefix("- turns "))
            .filter_map(|l| l.split_once(": ").map(|(_, s)| unquote(s)))
            .collect();
        return json!({"summary": parts.join(" "), "emotional_tone": "steady"}).to_string();
    }
    let said: Vec<String> = prompt
        .lines()
        .filter_map(|l| l.strip_prefix("User: "))
        .map(unquote)
        .collect();
    let remembered: Vec<&str> = said
        .iter()
        .filter_map(|w| w.strip_prefix("Please remember that "))
        .collect();
    let first = said.first().map(String::as_str).unwrap_or("");
    let last = said.last().map(String::as_str).unwrap_or("");
    let mut summary = format!("From [{first}] to [{last}].");
    for r in &remembered {
        summary.push_str(&format!(" The user said {r}."));
    }
    json!({
        "summary": summary,
        "topics": ["planning"],
        "facts": remembered
            .iter()
            .map(|r| json!({"category": "other", "content": r}))
            .collect::<Vec<_>>(),
    })
    .to_string()
}

const EARLY: &str = "my sister Leela is a nurse in Porto";
const LATE: &str = "I adopted a dog named Biscuit";

/// Settings for long calls through the fake small model: no in-session
/// window summaries (each would be a request of its own).
fn small_model_settings(fake: &Fake, max_prompt_tokens: usize) -> Settings {
    let mut s = runtime_settings(fake);
    s.reflector.openai.max_prompt_tokens = max_prompt_tokens;
    s.session.window_start_messages = 100_000;
    s.context.max_session_tokens = 10_000_000;
    s
}

/// A call of `turns` turns (the user asks the agent to remember something
/// early and late), ended; returns its record once its reflection is done.
async fn long_call(rt: &recall::Runtime, turns: usize) -> anyhow::Result<SessionRecord> {
    let rec = rt.start_session("kairix", "mark", "long").await?;
    for i in 0..turns {
        let user = match i {
            2 => format!("Please remember that {EARLY}"),
            i if i == turns - 3 => format!("Please remember that {LATE}"),
            i => format!("Turn {i}: we went over the schedule for the week and the budget"),
        };
        rt.record_turn(
            "long",
            Turn::new(&user, "Understood, let us keep going with the plan."),
        )?;
    }
    rt.end_session("long", EndOptions::default())?;
    rt.wait_idle().await?;
    Ok(rec)
}

/// The call's stored summary, which holds what it read from the early and
/// the late turns, as do its facts.
async fn assert_reflected_whole(
    rt: &recall::Runtime,
    rec: &SessionRecord,
    turns: usize,
) -> anyhow::Result<()> {
    assert!(rt.dead_letters().await?.is_empty(), "no dead letter");
    let summaries = rt.summaries("kairix", SummaryType::Session).await?;
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let s = &summaries[0];
    assert_eq!(s.summary_id, rec.session_id);
    assert_eq!(s.turn_count, turns as u32);
    assert!(!s.fallback);
    let text = &s.summary_text;
    assert!(text.starts_with("From [Turn 0: "), "{text}");
    assert!(text.contains(EARLY) && text.contains(LATE), "{text}");
    assert!(
        text.contains(&format!("Turn {}: ", turns - 1)),
        "the last turn: {text}"
    );
    assert_eq!(s.emotional_tone.as_deref(), Some("steady"), "the combined");
    let facts: Vec<String> = rt
        .facts("kairix", "mark")
        .await?
        .into_iter()
        .map(|f| f.fact.content.clone())
        .collect();
    assert!(facts.iter().any(|f| f == EARLY), "{facts:?}");
    assert!(facts.iter().any(|f| f == LATE), "{facts:?}");
    Ok(())
}

#[tokio::test]
async fn a_long_call_is_reflected_in_parts_within_max_prompt_tokens() -> Res {
    let fake = Fake::start([], Reply::Limited(SMALL_CONTEXT, small_model)).await;
    let dir = tempfile::tempdir()?;
    let rt = start_runtime(&dir, small_model_settings(&fake, 4_096)).await?;
    let rec = long_call(&rt, 400).await?;

    let seen = fake.seen();
    let sizes: Vec<usize> = seen.iter().map(|r| prompt_tokens(&r.body)).collect();
    // the whole call is more than three times what a request may hold
    assert!(sizes.len() >= 5, "parts and a combine: {sizes:?}");
    assert!(
        sizes.iter().all(|t| *t <= 4_096),
        "every request within max_prompt_tokens, none refused: {sizes:?}"
    );
    let combines = seen
        .iter()
        .filter(|r| {
            r.body["messages"][1]["content"]
                .as_str()
                .is_some_and(|p| p.contains("PART SUMMARIES"))
        })
        .count();
    assert_eq!(combines, 1, "{sizes:?}");
    assert_reflected_whole(&rt, &rec, 400).await?;
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn an_unbounded_prompt_the_server_refuses_is_halved_until_it_fits() -> Res {
    let fake = Fake::start([], Reply::Limited(SMALL_CONTEXT, small_model)).await;
    let dir = tempfile::tempdir()?;
    let rt = start_runtime(&dir, small_model_settings(&fake, 0)).await?;
    let rec = long_call(&rt, 400).await?;

    let sizes: Vec<usize> = fake.seen().iter().map(|r| prompt_tokens(&r.body)).collect();
    let refused: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|t| *t > SMALL_CONTEXT)
        .collect();
    // the whole call (about 13,500 tokens), then half of it, then parts of
    // a quarter that fit
    assert_eq!(refused.len(), 2, "{sizes:?}");
    assert!(refused[1] <= refused[0] / 2 + 1, "{sizes:?}");
    let accepted = &sizes[sizes.iter().position(|t| *t <= SMALL_CONTEXT).unwrap_or(0)..];
    assert!(accepted.len() >= 4, "{sizes:?}");
    assert!(
        accepted.iter().all(|t| *t <= refused[1] / 2 + 1),
        "{sizes:?}"
    );
    assert_reflected_whole(&rt, &rec, 400).await?;
    rt.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_call_the_model_can_never_take_is_dead_lettered_with_a_typed_error() -> Res {
    // Less than the system message alone: not even one turn fits.
    let fake = Fake::start([], Reply::Limited(40, small_model)).await;
    let dir = tempfile::tempdir()?;
    let rt = start_runtime(&dir, small_model_settings(&fake, 0)).await?;
    let rec = long_call(&rt, 400).await?;

    let letters = rt.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.session_id, rec.session_id);
    assert_eq!(letter.error_kind, "context_too_small");
    assert_eq!(letter.attempts, 1, "not retried: it would fail the same");
    assert!(
        letter.error.contains("a part of one turn"),
        "{}",
        letter.error
    );
    assert!(
        letter.error.contains("maximum context length is 40"),
        "the server's last refusal: {}",
        letter.error
    );
    // each refusal halved the prompt, about 13,500 tokens: a handful of
    // requests, not a loop
    let sizes: Vec<usize> = fake.seen().iter().map(|r| prompt_tokens(&r.body)).collect();
    assert!((2..=8).contains(&sizes.len()), "{sizes:?}");
    assert!(sizes.windows(2).all(|w| w[1] <= w[0] / 2 + 1), "{sizes:?}");
    assert!(rt
        .summaries("kairix", SummaryType::Session)
        .await?
        .is_empty());
    rt.shutdown().await?;
    Ok(())
}
