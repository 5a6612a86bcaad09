//! `recall simulate`: the Kairix script through the library and the binary.

use crate::common;

use recall::simulate::{self, Action, SimOptions};
use recall::{EndReason, Settings, SummaryType};

const KAIRIX: &str = include_str!("../examples/kairix.jsonl");

#[tokio::test(start_paused = true)]
async fn the_kairix_story_replays_in_virtual_time() -> anyhow::Result<()> {
    let events = simulate::parse_script(KAIRIX)?;
    let turns = events
        .iter()
        .filter(|e| matches!(e.action, Action::Turn { .. }))
        .count() as u32;
    let report = simulate::run(
        &events,
        SimOptions {
            settings: Settings::default(),
            data_dir: None,
            reflect: None,
            seed: simulate::DEFAULT_SEED,
        },
    )
    .await?;
    assert_eq!(report.sessions.len(), 10);
    assert!(report.sessions.iter().all(|s| s.ended_at.is_some()));
    let reasons: Vec<EndReason> = report
        .sessions
        .iter()
        .filter_map(|s| s.end_reason)
        .collect();
    assert!(reasons.contains(&EndReason::SilenceTimeout));
    assert!(reasons.contains(&EndReason::Disconnect));
    // every turn of the script is in exactly one session
    assert_eq!(
        report.sessions.iter().map(|s| s.turn_count).sum::<u32>(),
        turns
    );
    // the late turn on c6 opened a second session on that connection
    assert_eq!(
        report
            .sessions
            .iter()
            .filter(|s| s.connection_id == "c6")
            .count(),
        2
    );
    let of = |t: SummaryType| {
        report
            .summaries
            .iter()
            .filter(|s| s.summary_type == t)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(SummaryType::Session).len(), 10);
    assert!(report
        .summaries
        .iter()
        .all(|s| s.user_id == "mark" && !s.fallback));
    // rollups ran on their timers across the script's nine weeks: a day
    // for each day with a call (the last one rolled up after the script),
    // a week for each week with one, a topic per cluster
    let days: std::collections::BTreeSet<_> = of(SummaryType::Session)
        .iter()
        .map(|s| s.period_start.date_naive())
        .collect();
    assert_eq!(of(SummaryType::Daily).len(), days.len());
    assert!(of(SummaryType::Daily)
        .iter()
        .all(|d| !d.source_summary_ids.is_empty() && d.is_current()));
    let weeks = of(SummaryType::Weekly);
    assert!(weeks.len() >= 5, "{}", weeks.len());
    let daily_ids: Vec<_> = of(SummaryType::Daily)
        .iter()
        .map(|d| d.summary_id)
        .collect();
    assert!(weeks
        .iter()
        .all(|w| w.source_summary_ids.iter().all(|id| daily_ids.contains(id))));
    assert_eq!(of(SummaryType::Topic).len(), report.topics.len());
    assert_eq!(
        report.topics.iter().map(|t| t.member_count).sum::<usize>(),
        10,
        "every session summary is in one topic"
    );
    // the script's searches, with their results
    assert_eq!(report.searches.len(), 2);
    let globex = &report.searches[0];
    assert_eq!(globex.query, "Globex interview");
    assert!(!globex.results.is_empty() && globex.results.len() <= 5);
    assert!(globex.results[0].text.contains("Globex"));
    assert!(report.searches[1].results.len() <= 3);
    assert!(report
        .summaries
        .iter()
        .any(|s| s.key_entities.contains(&"Priya Nair".to_string())));
    assert!(report.dead_letters.is_empty());
    // the agent's block holds none of Mark's calls; his own shows them
    let agents = report
        .blocks
        .iter()
        .find(|b| b.label == recall::BlockLabel::BackgroundContext && b.source_user_id.is_none())
        .expect("the agent's background_context");
    assert!(!agents.value.contains("Priya"), "{}", agents.value);
    let ctx = report
        .blocks
        .iter()
        .find(|b| {
            b.label == recall::BlockLabel::BackgroundContext
                && b.source_user_id.as_deref() == Some("mark")
        })
        .expect("Mark's background_context");
    assert!(ctx.value.chars().count() <= 2_000);
    // the simulation ran a day past the last call (5 March) to roll it up:
    // its day's rollup leads the block now, and the topics follow
    assert!(ctx.value.starts_with("Day 2026-03-05: "), "{}", ctx.value);
    assert!(ctx.value.contains("\nWeek of "), "{}", ctx.value);
    assert!(ctx.value.contains("\nActive topics: "), "{}", ctx.value);
    assert!(
        ctx.value.contains("Priya") || ctx.value.contains("pipeline"),
        "{}",
        ctx.value
    );
    Ok(())
}

#[test]
fn the_binary_prints_json_and_rejects_a_malformed_script() -> anyhow::Result<()> {
    let out = common::recall()
        .args([
            "simulate",
            "--json",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kairix.jsonl"),
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    for key in [
        "sessions",
        "summaries",
        "blocks",
        "dead_letters",
        "facts",
        "contexts",
        "topics",
        "searches",
    ] {
        assert!(v[key].is_array(), "{key} missing");
    }
    let kinds: std::collections::BTreeSet<&str> = v["summaries"]
        .as_array()
        .expect("summaries")
        .iter()
        .filter_map(|s| s["summary_type"].as_str())
        .collect();
    assert_eq!(kinds, ["daily", "session", "topic", "weekly"].into());
    let search = &v["searches"][0];
    assert_eq!(search["query"], "Globex interview");
    // Archival text: a summary's, or a fact's (the offline rules find
    // "Works at Globex").
    assert!(search["results"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("[SUMMARY:") || t.starts_with("[FACT:")));
    let s = &v["sessions"][0];
    for key in [
        "session_id",
        "agent_id",
        "user_id",
        "connection_id",
        "started_at",
        "ended_at",
        "end_reason",
        "turn_count",
    ] {
        assert!(!s[key].is_null(), "session field {key} missing");
    }
    assert_eq!(v["summaries"][0]["user_id"], "mark");
    assert_eq!(v["blocks"][0]["agent_id"], "kairix");
    // the contexts recorded at the script's context events
    let contexts = v["contexts"].as_array().expect("contexts");
    assert_eq!(contexts.len(), 2);
    for c in contexts {
        assert_eq!(
            (c["agent_id"].as_str(), c["user_id"].as_str()),
            (Some("kairix"), Some("mark"))
        );
        assert_eq!(c["at"], "2026-01-22T19:02:00Z");
        let total = c["total_tokens"].as_u64().expect("total");
        assert!(total <= c["budget_tokens"].as_u64().expect("budget"));
        let tiers: Vec<&str> = c["tiers"]
            .as_array()
            .expect("tiers")
            .iter()
            .filter_map(|t| t["tier"].as_str())
            .collect();
        assert_eq!(
            tiers,
            [
                "blocks",
                "facts",
                "summaries",
                "retrieved",
                "turns",
                "message"
            ]
        );
        let sum: u64 = c["tiers"]
            .as_array()
            .expect("tiers")
            .iter()
            .filter_map(|t| t["tokens"].as_u64())
            .sum();
        assert_eq!(sum, total);
    }
    // the live call's turn is in the context; the tight budget trimmed
    // the oldest summaries
    let turns = &contexts[0]["tiers"][4]["items"];
    assert!(turns.to_string().contains("Globex onsite"), "{turns}");
    assert!(!contexts[1]["trimmed"]
        .as_array()
        .expect("trimmed")
        .is_empty());
    // facts the offline reflector found in Mark's own words
    let facts: Vec<(&str, &str, &str, &str)> = v["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .map(|f| {
            (
                f["user_id"].as_str().unwrap_or(""),
                f["category"].as_str().unwrap_or(""),
                f["content"].as_str().unwrap_or(""),
                f["visibility"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        facts.contains(&("mark", "biographical", "Lives in Denver", "private")),
        "{facts:?}"
    );
    assert!(
        facts.contains(&("mark", "preference", "Prefers remote roles", "private")),
        "{facts:?}"
    );

    let dir = tempfile::tempdir()?;
    let script = dir.path().join("bad.jsonl");
    let first = KAIRIX.lines().next().unwrap_or_default();
    std::fs::write(
        &script,
        format!("{first}\n{{\"at\": \"2026-01-05T09:01:00Z\", \"type\": \"turn\"\n"),
    )?;
    let data = dir.path().join("data");
    let out = common::recall()
        .args(["simulate"])
        .arg(&script)
        .arg("--data")
        .arg(&data)
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    // nothing was applied: the data folder was never created
    assert!(!data.exists());
    Ok(())
}

/// `cmd` (the binary, with its variables) simulating the two-user script
/// with `--json` and `options`: its output, or an error with its stderr.
fn simulate_two_users(mut cmd: std::process::Command, options: &[&str]) -> anyhow::Result<Vec<u8>> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/two_users.jsonl"
    );
    let out = cmd
        .args(["simulate", "--json", script])
        .args(options)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// Two users of one agent over five days: calls that start, speak, go
/// silent and end at the same instants, reads at those instants, a long
/// call with window summaries, rollups and topics. The same script and
/// seed give the same `--json` output, byte for byte, ids included.
#[test]
fn a_multi_user_script_gives_the_same_output_every_run() -> anyhow::Result<()> {
    let run = |seed: Option<&str>| match seed {
        Some(seed) => simulate_two_users(common::recall(), &["--seed", seed]),
        None => simulate_two_users(common::recall(), &[]),
    };
    let first = run(None)?;
    for i in 1..5 {
        let again = run(None)?;
        if again != first {
            let (a, b) = (
                String::from_utf8_lossy(&first),
                String::from_utf8_lossy(&again),
            );
            let at = a
                .lines()
                .zip(b.lines())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            panic!(
                "run {i} differs from the first at line {at}:\n{}\n{}",
                a.lines().nth(at).unwrap_or(""),
                b.lines().nth(at).unwrap_or("")
            );
        }
    }
    // What the script exercises is in the output.
    let v: serde_json::Value = serde_json::from_slice(&first)?;
    let sessions = v["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 10);
    let kinds = |kind: &str| {
        v["summaries"]
            .as_array()
            .expect("summaries")
            .iter()
            .filter(|s| s["summary_type"] == kind)
            .count()
    };
    assert_eq!(kinds("session"), 10);
    assert!(
        kinds("daily") >= 8 && kinds("weekly") >= 2,
        "{}",
        v["summaries"]
    );
    // each user's own background_context, with their own days
    for user in ["mark", "ada"] {
        let block = v["blocks"]
            .as_array()
            .expect("blocks")
            .iter()
            .find(|b| b["label"] == "background_context" && b["source_user_id"] == user)
            .unwrap_or_else(|| panic!("{user}'s background_context"));
        let text = block["value"].as_str().expect("text");
        assert!(text.contains(&format!("{user} talked about")), "{text}");
    }
    // the long call's reads saw a window summary
    assert!(v["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .any(|c| c["tiers"].to_string().contains("[this call, messages")));
    // Another seed names the sessions differently; the rest is the same
    // story.
    let other: serde_json::Value = serde_json::from_slice(&run(Some("7"))?)?;
    assert_ne!(
        other["sessions"][0]["session_id"],
        v["sessions"][0]["session_id"]
    );
    assert_eq!(other["sessions"].as_array().map(Vec::len), Some(10));
    Ok(())
}

/// With an LLM that refuses every connection, reflections back off and
/// end as dead letters: virtual time runs on to their retries between the
/// script's events, never past one, so every event keeps its time; and the
/// output is still the same every run.
#[test]
fn a_failing_llm_keeps_the_scripts_times_and_the_output_repeats() -> anyhow::Result<()> {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let run = || {
        let mut cmd = common::recall();
        cmd.env("RECALL_REFLECTOR__KIND", "openai")
            .env(
                "RECALL_REFLECTOR__OPENAI__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            )
            // Backoffs of minutes: longer than the gaps between some events.
            .env("RECALL_REFLECTOR__BACKOFF_BASE_MS", "120000")
            .env("RECALL_REFLECTOR__BACKOFF_MAX_MS", "600000")
            .env("RECALL_LOG__FILTER", "error");
        simulate_two_users(cmd, &[])
    };
    let first = run()?;
    assert!(first == run()?, "a second run differs");
    let v: serde_json::Value = serde_json::from_slice(&first)?;
    assert_eq!(v["dead_letters"].as_array().map(Vec::len), Some(10));
    // Calls end at their scripted disconnect, or 300 s after their last
    // turn (09:04): not later, as if the retries had held time up.
    for s in v["sessions"].as_array().expect("sessions") {
        let end = s["ended_at"].as_str().expect("ended");
        let day = &s["started_at"].as_str().expect("started")[..10];
        let want = match (day, s["end_reason"].as_str()) {
            ("2026-03-10", _) => "T20:19:00Z",
            (_, Some("disconnect")) => "T09:06:00Z",
            _ => "T09:09:00Z",
        };
        assert_eq!(end, format!("{day}{want}"), "{s}");
    }
    // The reads happened at their times, from the raw turns.
    let at: Vec<&str> = v["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .filter_map(|c| c["at"].as_str())
        .collect();
    assert_eq!(at.first(), Some(&"2026-03-02T09:04:00Z"));
    assert_eq!(at.last(), Some(&"2026-03-10T23:00:00Z"));
    Ok(())
}
