//! Resident memory per idle live session.
//!
//! Starts a runtime (default settings) on a temporary data folder, reads the
//! process's resident set size (VmRSS in /proc/self/status) before and after
//! starting 10,000 live sessions with no turns, then again after recording
//! one turn on each, and prints the bytes per session of each state. The
//! figures include everything a session costs the process: its actor and
//! mailbox, its silence timer, its registry and supervisor entries, and the
//! Store's sled cache holding its records. Linux only (reads procfs).
//!
//! Run with `cargo run --release --example idle_memory`. It records row 13
//! of BENCHMARKS.md in `benches/results/` (see
//! `benches/common/results.rs`).

#[path = "../benches/common/results.rs"]
mod results;

use std::time::{Duration, Instant};

use recall::{RuntimeBuilder, Turn};
use results::{On, Recorder, Row, Run};

const SESSIONS: usize = 10_000;
const TARGET: u64 = 16 * 1024;
const SETTLE: Duration = Duration::from_secs(1);

/// The process's resident set size in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let results = Recorder::run();
    let dir = tempfile::tempdir()?;
    let runtime = RuntimeBuilder::new(dir.path()).start().await?;
    tokio::time::sleep(SETTLE).await;
    let before = rss_bytes();

    let conns: Vec<String> = (0..SESSIONS).map(|i| format!("idle-conn-{i}")).collect();
    let started = Instant::now();
    for (i, conn) in conns.iter().enumerate() {
        runtime
            .start_session("idle-agent", &format!("user-{}", i % 1000), conn)
            .await?;
    }
    let took = started.elapsed();
    runtime.flush().await?;
    tokio::time::sleep(SETTLE).await;
    let idle = rss_bytes();
    let stats = runtime.stats().await?;
    assert_eq!(stats.supervisor.live_sessions, SESSIONS);

    for conn in &conns {
        runtime.record_turn(
            conn,
            Turn::new(
                "Can you move my dentist appointment to Thursday afternoon?",
                "Sure. I moved your dentist appointment to Thursday at 3 pm and sent you a \
                 confirmation. Would you like a reminder the day before?",
            ),
        )?;
    }
    while runtime.stats().await?.store.turns_written < SESSIONS as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    runtime.flush().await?;
    tokio::time::sleep(SETTLE).await;
    let one_turn = rss_bytes();

    let per_idle = idle.saturating_sub(before) / SESSIONS as u64;
    let per_one_turn = one_turn.saturating_sub(before) / SESSIONS as u64;
    println!(
        "started {SESSIONS} sessions in {:.2} s ({:.0} sessions/s)",
        took.as_secs_f64(),
        SESSIONS as f64 / took.as_secs_f64()
    );
    println!(
        "RSS: {:.1} MiB with no sessions, {:.1} MiB with {SESSIONS} idle sessions, \
         {:.1} MiB after one turn each",
        mib(before),
        mib(idle),
        mib(one_turn)
    );
    println!(
        "idle session, no turns: {per_idle} bytes ({:.1} KiB) per session",
        per_idle as f64 / 1024.0
    );
    println!(
        "idle session, one turn: {per_one_turn} bytes ({:.1} KiB) per session",
        per_one_turn as f64 / 1024.0
    );
    println!(
        "target: <= {} KiB per idle session {}",
        TARGET / 1024,
        if per_idle <= TARGET && per_one_turn <= TARGET {
            "met"
        } else {
            "MISSED"
        }
    );

    let kib = |bytes: u64| bytes as f64 / 1024.0;
    results.record(
        &Row::new(
            13,
            "Resident memory per idle live session (embedded runtime, 10,000 sessions)",
            "cargo run --release --example idle_memory",
        )
        .target("≤ 16 KiB a session")
        .check(On::Figure, "idle", "<=", kib(TARGET), "KiB")
        .check(On::Figure, "after one turn", "<=", kib(TARGET), "KiB"),
        Run::new().figure("idle", kib(per_idle), "KiB").figure(
            "after one turn",
            kib(per_one_turn),
            "KiB",
        ),
    );

    let report = runtime
        .shutdown_with_grace(Duration::from_millis(500))
        .await?;
    println!(
        "shutdown: {} sessions ended, {} reflections left queued",
        report.sessions_ended, report.reflections_left
    );
    Ok(())
}
