//! The `recall serve` binary as an operator runs it: it prints where it
//! listens, logs JSON when asked, refuses to listen openly beyond loopback,
//! and on SIGTERM ends live sessions and exits 0; `recall migrate` and
//! `recall serve` over PostgreSQL.

#![cfg(unix)]

use std::io::Read;
use std::process::{Command, Stdio};

mod common;
use common::{listening, recall, TestSchema};

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

#[test]
fn serve_over_postgres_migrates_reports_the_database_and_keeps_memory_across_restarts() -> Res {
    let schema = TestSchema::new();
    let dir = tempfile::tempdir()?;
    // `recall migrate` applies the migrations without serving, once.
    for expect in ["1 migration(s) applied", "0 migration(s) applied"] {
        let out = recall().arg("migrate").envs(schema.env()).output()?;
        let stdout = String::from_utf8(out.stdout)?;
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(expect), "{stdout}");
    }
    let serve = |data: &str| {
        recall()
            .args(["serve", "--addr", "127.0.0.1:0", "--data"])
            .arg(dir.path().join(data))
            .envs(schema.env())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    let mut child = serve("a")?;
    let base = listening(&mut child)?;
    // One instance per schema.
    let second = serve("b")?.wait_with_output()?;
    assert!(!second.status.success());
    let stderr = String::from_utf8(second.stderr)?;
    assert!(
        stderr.contains("is in use by another recall instance"),
        "{stderr}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = reqwest::Client::new();
    rt.block_on(async {
        let ready: serde_json::Value = http.get(format!("{base}/readyz")).send().await?.json().await?;
        assert_eq!(ready["status"], "ready");
        assert_eq!(ready["store"], "postgres");
        http.post(format!("{base}/v1/sessions"))
            .json(&serde_json::json!({"agent_id": "kairix", "user_id": "mark", "connection_id": "c1"}))
            .send()
            .await?
            .error_for_status()?;
        for (said, answer) in [
            ("My sister Leela moved to Lisbon", "Lisbon is lovely"),
            ("I start at Globex on Monday", "Congratulations"),
        ] {
            http.post(format!("{base}/v1/connections/c1/turns?durable=true"))
                .json(&serde_json::json!({"user_message": said, "agent_response": answer}))
                .send()
                .await?
                .error_for_status()?;
        }
        http.post(format!("{base}/v1/connections/c1/end"))
            .send()
            .await?
            .error_for_status()?;
        // The reflection runs in the background: wait for its summary.
        let started = std::time::Instant::now();
        loop {
            let v: serde_json::Value = http
                .get(format!("{base}/v1/agents/kairix/summaries?user_id=mark"))
                .send()
                .await?
                .json()
                .await?;
            if v.to_string().contains("Globex") {
                break;
            }
            assert!(started.elapsed().as_secs() < 30, "no summary: {v}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        anyhow::Ok(())
    })?;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(status.success());
    assert!(child.wait()?.success());

    // Another instance, with another data folder, on the same schema: the
    // call and its summary are there.
    let mut child = serve("c")?;
    let base = listening(&mut child)?;
    rt.block_on(async {
        let context: serde_json::Value = http
            .get(format!("{base}/v1/agents/kairix/users/mark/context"))
            .send()
            .await?
            .json()
            .await?;
        let text = context.to_string();
        assert!(text.contains("Globex") && text.contains("Lisbon"), "{text}");
        anyhow::Ok(())
    })?;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(child.wait()?.success());
    Ok(())
}
