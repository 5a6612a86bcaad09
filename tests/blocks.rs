//! The agent's blocks stay the agent's: through `recall serve` on
//! 127.0.0.1 with an LLM reflector (a fake OpenAI-compatible server on
//! another local port), on sled and on PostgreSQL. An operator's block is
//! changed by the operator's `PUT` alone; what a reflection draws from a
//! user's call is that user's, shown in their context after the agent's
//! and in no one else's. A store an older version left with a user's
//! reflection in an agent-wide block is repaired at start.

use crate::common;
use crate::common::fake_llm;

use std::sync::Arc;

use common::TestSchema;
use fake_llm::Fake;
use recall::engine::model::BlockWriter;
use recall::engine::settings::{ReflectorKind, StoreKind};
use recall::engine::store::{Backend, PgBackend, SummaryStore, Trees};
use recall::server::{self, ServerConfig};
use recall::{BlockLabel, MemoryBlock, Runtime, RuntimeBuilder, Settings};
use serde_json::{json, Value};

type Res = anyhow::Result<()>;

const OPERATOR: &str = "I am Kairix, a calm career coach.";
/// What the fake LLM's reflection on Ada's call says.
const ADA_SELF: &str = "Ada made me curious about Porto.";
const ADA_REL: &str = "Ada trusts me with her travel plans.";

fn reflection() -> String {
    json!({
        "summary": "Ada talked about moving to Porto.",
        "topics": ["travel"],
        "self_perception": ADA_SELF,
        "relationship": ADA_REL,
    })
    .to_string()
}

/// Where a test's store lives.
enum Store {
    Sled,
    Postgres(TestSchema),
}

/// Settings reflecting through the fake LLM into `store` (no rollups and
/// no in-session summaries: each would be a request of its own).
fn settings(fake: &Fake, store: &Store) -> Settings {
    let mut s = Settings::for_test();
    s.reflector.kind = ReflectorKind::Openai;
    s.reflector.openai.base_url = fake.base_url();
    s.reflector.openai.timeout_secs = 10;
    s.rollup.enabled = false;
    s.session.window_start_messages = 100_000;
    if let Store::Postgres(schema) = store {
        s.store.kind = StoreKind::Postgres;
        s.store.postgres.url = schema.url.clone();
        s.store.postgres.schema = schema.name.clone();
    }
    s
}

/// The runtime and `recall serve` over it on a local port.
struct Served {
    base: String,
    http: reqwest::Client,
    runtime: Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<recall::ShutdownReport, server::ServeError>>,
}

impl Served {
    async fn start(dir: &tempfile::TempDir, settings: Settings) -> anyhow::Result<Served> {
        let runtime = RuntimeBuilder::new(dir.path())
            .settings(settings.clone())
            .start()
            .await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let config = ServerConfig::from_settings(&settings);
        let task = tokio::spawn(server::serve(listener, runtime.clone(), config, async {
            let _ = rx.await;
        }));
        Ok(Served {
            base,
            http: reqwest::Client::new(),
            runtime,
            stop: tx,
            task,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        anyhow::ensure!(status.is_success(), "{path}: {status} {text}");
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn block(&self, label: &str, user: Option<&str>) -> anyhow::Result<String> {
        let query = user.map(|u| format!("?user_id={u}")).unwrap_or_default();
        let v = self
            .get(&format!("/v1/agents/kairix/blocks/{label}{query}"))
            .await?;
        Ok(v["value"].as_str().unwrap_or_default().to_string())
    }

    /// The text of the context assembled for `user`'s next call.
    async fn context(&self, user: &str) -> anyhow::Result<String> {
        let v = self
            .get(&format!(
                "/v1/agents/kairix/context?user_id={user}&message=hello&budget_tokens=4000"
            ))
            .await?;
        // The messages' texts as the LLM gets them (the remembered blocks
        // are quoted items inside the memory block: a newline in one is
        // written `\n`).
        Ok(v["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// One call of `user`'s, ended; returns once it is reflected.
    async fn call_of(&self, user: &str, said: &str) -> Res {
        let conn = format!("{user}-1");
        self.call(
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({"agent_id": "kairix", "user_id": user, "connection_id": conn})),
        )
        .await?;
        self.call(
            reqwest::Method::POST,
            &format!("/v1/connections/{conn}/turns?agent_id=kairix&user_id={user}"),
            Some(json!({"user_message": said, "agent_response": "Tell me more."})),
        )
        .await?;
        self.call(
            reqwest::Method::POST,
            &format!("/v1/connections/{conn}/end?agent_id=kairix&user_id={user}"),
            Some(json!({})),
        )
        .await?;
        self.runtime.wait_idle().await?;
        Ok(())
    }

    /// Stops the server, which shuts the runtime down.
    async fn stop(self) -> Res {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

async fn a_reflection_never_overwrites_the_operators_block(store: Store) -> Res {
    let fake = Fake::answering(&reflection()).await;
    let dir = tempfile::tempdir()?;
    let srv = Served::start(&dir, settings(&fake, &store)).await?;
    srv.call(
        reqwest::Method::PUT,
        "/v1/agents/kairix/blocks/self_perception",
        Some(json!({"value": OPERATOR})),
    )
    .await?;
    srv.call_of("ada", "I am moving to Porto next spring")
        .await?;
    assert_eq!(fake.requests(), 1, "Ada's call was reflected");

    // the agent's block is still the operator's, and a reflection wrote
    // no agent-wide relationship
    assert_eq!(srv.block("self_perception", None).await?, OPERATOR);
    assert_eq!(srv.block("relationship", None).await?, "");
    let listed = srv.get("/v1/agents/kairix/blocks").await?.to_string();
    assert!(!listed.contains("Porto"), "{listed}");

    // Ada's context holds the operator's block, then her own
    let ada = srv.context("ada").await?;
    assert!(ada.contains(OPERATOR), "{ada}");
    assert!(
        ada.contains(&format!("{OPERATOR}\\nIn calls with this user: {ADA_SELF}")),
        "the agent's first, then hers: {ada}"
    );
    assert!(ada.contains(ADA_REL), "{ada}");
    assert_eq!(
        srv.block("self_perception", Some("ada")).await?,
        format!("{OPERATOR}\nIn calls with this user: {ADA_SELF}")
    );
    assert_eq!(srv.block("relationship", Some("ada")).await?, ADA_REL);

    // Bob's holds the operator's and nothing of Ada's
    let bob = srv.context("bob").await?;
    assert!(bob.contains(OPERATOR), "{bob}");
    assert!(
        !bob.contains("Porto") && !bob.contains("Ada"),
        "nothing of Ada's: {bob}"
    );
    assert_eq!(srv.block("self_perception", Some("bob")).await?, OPERATOR);
    assert_eq!(srv.block("relationship", Some("bob")).await?, "");

    // a restart (and its repair) leaves every block where it is
    srv.stop().await?;
    let srv = Served::start(&dir, settings(&fake, &store)).await?;
    assert_eq!(srv.block("self_perception", None).await?, OPERATOR);
    assert_eq!(srv.block("relationship", Some("ada")).await?, ADA_REL);
    srv.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflection_never_overwrites_the_operators_block_on_sled() -> Res {
    a_reflection_never_overwrites_the_operators_block(Store::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflection_never_overwrites_the_operators_block_on_postgres() -> Res {
    a_reflection_never_overwrites_the_operators_block(Store::Postgres(TestSchema::new())).await
}

/// A store as an older version left it: Ada's call reflected, her
/// `self_perception` kept as hers and, over the operator's, as the
/// agent's (the record names her); the operator's `relationship`, from
/// before records said who wrote them.
async fn an_older_stores_agent_wide_reflection_is_moved_to_its_user_at_start(store: Store) -> Res {
    let fake = Fake::answering(&reflection()).await;
    let dir = tempfile::tempdir()?;
    let settings = settings(&fake, &store);
    let srv = Served::start(&dir, settings.clone()).await?;
    srv.call_of("ada", "I am moving to Porto next spring")
        .await?;
    srv.stop().await?;
    let now = chrono::Utc::now();
    let old = |label, value: &str, user: Option<&str>| MemoryBlock {
        agent_id: "kairix".into(),
        label,
        value: value.into(),
        limit: 2000,
        updated_at: now,
        source_user_id: user.map(str::to_string),
        written_by: None,
    };
    let older: [MemoryBlock; 2] = [
        old(BlockLabel::SelfPerception, ADA_SELF, Some("ada")),
        old(
            BlockLabel::Relationship,
            "I treat every user as a client.",
            None,
        ),
    ];
    match &store {
        Store::Sled => {
            let trees = Arc::new(Trees::open(dir.path(), &settings.store)?);
            for b in &older {
                SummaryStore::put_block(&*trees, b).await?;
            }
            Backend::flush(&*trees).await?;
        }
        Store::Postgres(_) => {
            let pg = PgBackend::connect(&settings.store.postgres).await?;
            for b in &older {
                pg.put_block(b).await?;
            }
        }
    }

    let srv = Served::start(&dir, settings).await?;
    // Ada's words left the agent's block; the operator's relationship
    // stayed, now marked as theirs
    assert_eq!(srv.block("self_perception", None).await?, "");
    let rel = srv
        .runtime
        .block("kairix", BlockLabel::Relationship)
        .await?;
    assert_eq!(
        rel.map(|b| (b.value, b.written_by)),
        Some((
            "I treat every user as a client.".to_string(),
            Some(BlockWriter::Operator)
        ))
    );
    assert_eq!(srv.block("self_perception", Some("ada")).await?, ADA_SELF);
    let bob = srv.context("bob").await?;
    assert!(!bob.contains("Porto"), "{bob}");
    assert!(bob.contains("I treat every user as a client."), "{bob}");
    srv.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_stores_agent_wide_reflection_is_moved_at_start_on_sled() -> Res {
    an_older_stores_agent_wide_reflection_is_moved_to_its_user_at_start(Store::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_stores_agent_wide_reflection_is_moved_at_start_on_postgres() -> Res {
    an_older_stores_agent_wide_reflection_is_moved_to_its_user_at_start(Store::Postgres(
        TestSchema::new(),
    ))
    .await
}
