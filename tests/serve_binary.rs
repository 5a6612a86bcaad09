//! The `recall serve` binary as an operator runs it: it prints where it
//! listens, logs JSON when asked, refuses to listen openly beyond loopback,
//! and on SIGTERM ends live sessions and exits 0.

#![cfg(unix)]

use std::io::Read;
use std::process::{Command, Stdio};

mod common;
use common::{listening, recall};

type Res = anyhow::Result<()>;

#[test]
fn serve_prints_its_address_logs_json_and_stops_cleanly_on_sigterm() -> Res {
    let dir = tempfile::tempdir()?;
    let mut child = recall()
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .env("RECALL_LOG__FORMAT", "json")
        .env("RECALL_LOG__FILTER", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let base = listening(&mut child)?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = reqwest::Client::new();
    let sid = rt.block_on(async {
        let v: serde_json::Value = http
            .post(format!("{base}/v1/sessions"))
            .json(&serde_json::json!({"agent_id": "kairix", "user_id": "mark", "connection_id": "c1"}))
            .send()
            .await?
            .json()
            .await?;
        let resp = http
            .post(format!("{base}/v1/connections/c1/turns"))
            .json(&serde_json::json!({"user_message": "Flying to Berlin on Monday", "agent_response": "Safe travels"}))
            .send()
            .await?;
        assert_eq!(resp.status().as_u16(), 202);
        anyhow::Ok(v["session_id"].as_str().expect("id").to_string())
    })?;

    // SIGTERM: the live session ends with reason `shutdown`, exit 0.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(status.success());
    let exit = child.wait()?;
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)?;
    assert!(exit.success(), "exit {exit:?}; stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "some logs");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
    assert!(
        stderr.contains("\"reason\":\"shutdown\"") || stderr.contains("reason=shutdown"),
        "the session ended with reason shutdown:\n{stderr}"
    );

    // The data folder holds the ended session.
    let rt2 = recall::RuntimeBuilder::new(dir.path().join("data"));
    let session = rt.block_on(async {
        let runtime = rt2.start().await?;
        let s = runtime.session(sid.parse()?).await?;
        runtime.shutdown().await?;
        anyhow::Ok(s)
    })?;
    let session = session.expect("stored");
    assert_eq!(session.end_reason, Some(recall::EndReason::Shutdown));
    assert_eq!(session.turn_count, 1);
    Ok(())
}

#[test]
fn serve_refuses_an_open_non_loopback_address() -> Res {
    let dir = tempfile::tempdir()?;
    let out = recall()
        .args(["serve", "--addr", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("data"))
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr)?;
    assert!(stderr.contains("server.token"), "{stderr}");
    // Nothing was created: the check comes before the data folder opens.
    assert!(!dir.path().join("data").exists());
    Ok(())
}
