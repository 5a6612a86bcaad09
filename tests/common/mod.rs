//! Helpers shared by the integration tests (each file uses some).

#![allow(dead_code)]

pub mod fake_llm;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::time::Duration;

use chrono::{DateTime, Utc};
use recall::Runtime;

/// Small talk, varied so that no two calls say the same.
pub const CHATTER: [&str; 8] = [
    "The weather was grey all morning, then it cleared up by lunch.",
    "I watched a documentary about octopuses last night, weird animals.",
    "Traffic on the ring road was terrible again today.",
    "Made pancakes this morning, they came out a bit flat.",
    "My neighbour is repainting his fence, bright blue this time.",
    "I tried a new podcast about the history of maps.",
    "The coffee machine at the office broke, chaos all day.",
    "Spent the evening sorting old photos into albums.",
];

/// Waits until the actors have handled what the last advance of paused
/// time triggered and the runtime is idle (`wait_idle` starts with the
/// barrier `sync`).
pub async fn settle(rt: &Runtime) {
    rt.wait_idle().await.expect("runtime idle");
}

/// Lets tokio's paused clock run (firing every timer in order) until the
/// runtime's clock reads `t`.
pub async fn run_until(rt: &Runtime, t: DateTime<Utc>) {
    let d = (t - rt.clock().now()).to_std().unwrap_or(Duration::ZERO);
    tokio::time::sleep(d).await;
}

/// The `recall` binary, with only the `RECALL_*` variables the test sets.
pub fn recall() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_recall"));
    for (k, _) in std::env::vars() {
        if k.starts_with("RECALL_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Reads a `recall serve` child's stdout (piped) until the "listening"
/// line; the base URL. An error if it exits first.
pub fn listening(child: &mut Child) -> anyhow::Result<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = match lines.next() {
        Some(line) => line?,
        None => {
            let status = child.wait()?;
            anyhow::bail!("recall serve exited before listening: {status}");
        }
    };
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    // Keep draining stdout in the background so the child never blocks.
    std::thread::spawn(move || for _ in lines {});
    Ok(url)
}

/// The database the PostgreSQL tests use (`RECALL_TEST_POSTGRES_URL`, by
/// default the `test` database on 127.0.0.1:5432).
pub fn test_database_url() -> String {
    std::env::var("RECALL_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A PostgreSQL schema of one test's own, dropped (with everything in it)
/// when the value is.
pub struct TestSchema {
    pub url: String,
    pub name: String,
}

impl TestSchema {
    pub fn new() -> TestSchema {
        TestSchema {
            url: test_database_url(),
            name: format!("recall_test_{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// The `RECALL_*` variables that point `recall` at this schema.
    pub fn env(&self) -> [(&'static str, String); 3] {
        [
            ("RECALL_STORE__KIND", "postgres".into()),
            ("RECALL_STORE__POSTGRES__URL", self.url.clone()),
            ("RECALL_STORE__POSTGRES__SCHEMA", self.name.clone()),
        ]
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // A thread of its own: a drop cannot await, and may run in a runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await?;
                sqlx::query("SET lock_timeout = '30s'")
                    .execute(&pool)
                    .await?;
                sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .execute(&pool)
                    .await?;
                pool.close().await;
                Ok::<_, sqlx::Error>(())
            })
        })
        .join();
    }
}

/// The text of a context's items in `tier`, one per line.
pub fn tier_text(
    c: &recall::engine::context::AssembledContext,
    tier: recall::engine::context::Tier,
) -> String {
    c.tiers
        .iter()
        .filter(|t| t.tier == tier)
        .flat_map(|t| &t.items)
        .map(|i| i.text.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
