//! Helpers shared by the integration tests (each test binary uses some).

#![allow(dead_code)]

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
