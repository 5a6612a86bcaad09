//! Load test of `recall serve`'s WebSocket stream against a bare axum
//! WebSocket echo server, each its own process, and the server's resident
//! memory per idle session.
//!
//! Three processes on one machine: `recall serve` (default settings: group
//! commit, offline summarizer, any `RECALL_<SECTION>__<KEY>` variables
//! applied) on a temporary folder, the `ws_echo` example (a bare axum echo,
//! the same release build and tokio defaults), and this load generator. All
//! on 127.0.0.1; the generator's clients cost the same for both servers.
//!
//! 1. Starts 10,000 sessions through `POST /v1/sessions` and reports the
//!    growth of the server process's resident memory per idle session (they
//!    stay live, idle, during what follows).
//! 2. Saturation: 1,000 WebSocket connections, each sending turn frames and
//!    waiting for each answer (an ack from recall, the echo from the bare
//!    server), the next as soon as the last is answered: turns per second.
//!    recall twice: with the default ack (the turn is on its way to the
//!    Store) and with `durable: true` frames (acked once on disk).
//! 3. Steady offered load: one turn every 200 ms per connection: ack
//!    latency percentiles, both acks again.
//!
//! Each of 2 and 3 runs twice, the second time in the opposite order
//! (echo, recall, recall with its limits lifted, recall durable; then the
//! reverse), so neither side always goes first. The second `recall serve`
//! has every limit lifted as far as its setting goes (connections,
//! timeouts, pings, live sessions, turns in memory, unwritten turns, query
//! jobs): beside the first, what the bounds cost. Before each run the recall server is idle (no
//! reflection running or queued, no window summary in flight, from its
//! `/metrics`), and around each recall run its window
//! summaries' counters are read before and after: how many were made, and
//! how far behind the calls they were.
//!
//! Run with `cargo run --release --example ws_load` (add `-- --quick` for a
//! smaller run). Under `cargo run` it first builds the `recall` binary and
//! the `ws_echo` example with the same profile; otherwise it looks for them
//! beside itself. A full run (not `--quick`) records rows 14–16 of
//! BENCHMARKS.md in `benches/results/` (see `benches/common/results.rs`).

#[path = "../benches/common/results.rs"]
mod results;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use results::{On, Recorder, Row};
use tokio::sync::Barrier;
use tokio_tungstenite::tungstenite::Message;

const USER: &str = "Can you move my dentist appointment to Thursday afternoon?";
const AGENT: &str = "Sure. I moved it to Thursday at 3 pm and sent you a confirmation.";

struct Run {
    turns: usize,
    elapsed: Duration,
    latencies: Vec<u64>,
}

impl Run {
    fn per_sec(&self) -> f64 {
        self.turns as f64 / self.elapsed.as_secs_f64()
    }

    fn pct(&self, q: f64) -> f64 {
        let i = ((self.latencies.len() as f64 * q) as usize).min(self.latencies.len() - 1);
        self.latencies[i] as f64 / 1000.0
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name}: {} turns in {:.2} s = {:.0} turns/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.turns,
            self.elapsed.as_secs_f64(),
            self.per_sec(),
            self.pct(0.50),
            self.pct(0.99),
            self.latencies.last().copied().unwrap_or(0) as f64 / 1000.0
        )
    }
}

/// `conns` connections to `url(i)`, each sending `per_conn` frames and
/// waiting for each answer. Timing starts once every connection is open.
/// Without `pace` each connection sends its next frame as soon as the last
/// is answered (saturation); with it, one frame every `pace`, connections
/// spread evenly over the interval (a steady offered load).
async fn drive(
    conns: usize,
    per_conn: usize,
    pace: Option<Duration>,
    durable: bool,
    url: impl Fn(usize) -> String,
) -> Run {
    let barrier = Arc::new(Barrier::new(conns + 1));
    // Connections close only once every one has sent its turns: the
    // disconnect burst (1,000 sessions ending and being reflected at once)
    // is not part of the measured window.
    let done = Arc::new(Barrier::new(conns + 1));
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let (mut ws, _) = tokio_tungstenite::connect_async(url(i))
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e} (is `ulimit -n` high enough?)"));
        let barrier = barrier.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            // recall's first frame names the session; the echo sends none.
            let frame = serde_json::json!({
                "type": "turn",
                "user_message": USER,
                "agent_response": AGENT,
                "durable": durable,
            })
            .to_string();
            barrier.wait().await;
            let mut lat = Vec::with_capacity(per_conn);
            let mut ticker = pace.map(|p| {
                let offset = p.mul_f64(i as f64 / conns as f64);
                let mut iv = tokio::time::interval_at(tokio::time::Instant::now() + offset, p);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                iv
            });
            for _ in 0..per_conn {
                if let Some(iv) = ticker.as_mut() {
                    iv.tick().await;
                }
                let t = Instant::now();
                ws.send(Message::Text(frame.clone().into()))
                    .await
                    .expect("send");
                loop {
                    match ws.next().await.expect("open").expect("frame") {
                        Message::Text(t) if t.contains("\"type\":\"session\"") => continue,
                        Message::Text(t) => {
                            assert!(!t.contains("\"error\""), "error frame: {t}");
                            break;
                        }
                        _ => continue,
                    }
                }
                lat.push(t.elapsed().as_micros() as u64);
            }
            done.wait().await;
            let _ = ws.close(None).await;
            lat
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    done.wait().await;
    let elapsed = start.elapsed();
    let mut latencies = Vec::with_capacity(conns * per_conn);
    for t in tasks {
        latencies.extend(t.await.expect("client task"));
    }
    latencies.sort_unstable();
    Run {
        turns: conns * per_conn,
        elapsed,
        latencies,
    }
}

/// The `recall` binary and the `ws_echo` example: built first under
/// `cargo run` (same profile), then taken from beside this program.
fn binaries() -> anyhow::Result<(PathBuf, PathBuf)> {
    let me = std::env::current_exe()?;
    // target/<profile>/examples/ws_load
    let examples = me.parent().expect("examples folder").to_path_buf();
    let profile_dir = examples.parent().expect("profile folder").to_path_buf();
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--bin", "recall", "--example", "ws_echo"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status()?;
        anyhow::ensure!(status.success(), "building recall and ws_echo failed");
    }
    let recall = profile_dir.join("recall");
    let echo = examples.join("ws_echo");
    for p in [&recall, &echo] {
        anyhow::ensure!(
            p.exists(),
            "{} not found: run with `cargo run --release --example ws_load`",
            p.display()
        );
    }
    Ok((recall, echo))
}

/// A server process and the address it printed.
struct Server {
    child: Child,
    addr: String,
    /// Echoes the rest of its stdout.
    output: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `cmd` (stdout piped) and reads lines until one says
    /// "listening on http://ADDR"; the rest of its stdout is echoed.
    fn start(mut cmd: Command, name: &'static str) -> anyhow::Result<Server> {
        let mut child = cmd.stdout(Stdio::piped()).spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let Some(line) = lines.next() else {
                anyhow::bail!("{name} exited before listening: {:?}", child.wait()?);
            };
            let line = line?;
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
        };
        let output = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                println!("  [{name}] {line}");
            }
        });
        Ok(Server {
            child,
            addr,
            output: Some(output),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait for the exit.
    fn stop(mut self) -> anyhow::Result<std::process::ExitStatus> {
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        let status = self.child.wait()?;
        if let Some(output) = self.output.take() {
            let _ = output.join();
        }
        Ok(status)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A field of `/proc/<pid>/status` in bytes (`VmRSS:`).
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// CPU time (user + system) a process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line: 11 and 12 here.
    let hz = 100; // USER_HZ on Linux
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / hz)
}

/// The server's counters from its `/metrics`.
#[derive(Clone, Copy, Default)]
struct Counters {
    /// Reflections running or queued, and window summaries in flight.
    busy: f64,
    windows_started: f64,
    windows_completed: f64,
    lag_rounds: f64,
    lag_sum: f64,
    lag_max: f64,
}

async fn counters(http: &reqwest::Client, base: &str) -> anyhow::Result<Counters> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let get = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == name).then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0.0)
    };
    Ok(Counters {
        busy: get("recall_reflections_queued")
            + get("recall_reflections_running")
            + get("recall_window_summaries_in_flight"),
        windows_started: get("recall_window_summaries_started_total"),
        windows_completed: get("recall_window_summaries_completed_total"),
        lag_rounds: get("recall_window_lag_rounds_total"),
        lag_sum: get("recall_window_lag_messages_total"),
        lag_max: get("recall_window_lag_messages_max"),
    })
}

/// Waits until the server has no reflection running or queued and no
/// window summary in flight: what one run set off does not spill into the
/// next.
async fn idle(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while counters(http, base).await?.busy > 0.0 {
        anyhow::ensure!(Instant::now() < deadline, "the server did not go idle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The window summaries of a run, from the counters before and after it.
fn windows(before: Counters, after: Counters) -> String {
    let rounds = after.lag_rounds - before.lag_rounds;
    format!(
        "window summaries: {} started, {} completed during the run; lag {:.1} messages at the mean over {rounds} rounds, {} at the most (so far)",
        after.windows_started - before.windows_started,
        after.windows_completed - before.windows_completed,
        (after.lag_sum - before.lag_sum) / rounds.max(1.0),
        after.lag_max
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Echo,
    Recall,
    RecallDurable,
    /// A second `recall serve` with every limit lifted (the most each
    /// setting takes): what the bounds cost, in the same run.
    RecallUnbounded,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Echo => "bare axum echo       ",
            Side::Recall => "recall serve         ",
            Side::RecallDurable => "recall serve, durable",
            Side::RecallUnbounded => "recall, limits lifted",
        }
    }
}

/// Every side once per round, the second round in the opposite order.
const ORDERS: [[Side; 4]; 2] = [
    [
        Side::Echo,
        Side::Recall,
        Side::RecallUnbounded,
        Side::RecallDurable,
    ],
    [
        Side::RecallDurable,
        Side::RecallUnbounded,
        Side::Recall,
        Side::Echo,
    ],
];

/// Every limit of `recall serve` lifted as far as its setting goes.
const LIFTED: [(&str, &str); 10] = [
    ("RECALL_SESSION__MAX_LIVE", "1000000000"),
    ("RECALL_SERVER__HEADER_TIMEOUT_SECS", "86400"),
    ("RECALL_SERVER__REQUEST_TIMEOUT_SECS", "86400"),
    ("RECALL_SERVER__MAX_CONNECTIONS", "1000000"),
    ("RECALL_SERVER__WS_PING_SECS", "86400"),
    ("RECALL_SERVER__WS_IDLE_SECS", "172800"),
    ("RECALL_SESSION__MAX_LIVE_PER_AGENT", "1000000000"),
    ("RECALL_SESSION__MAX_TURNS_IN_MEMORY", "1000000000"),
    ("RECALL_STORE__MAX_UNWRITTEN_TURNS", "1000000000000"),
    ("RECALL_EMBED__MAX_QUERY_JOBS", "1000000"),
];

struct Bench {
    http: reqwest::Client,
    recall: String,
    echo: String,
    recall_pid: u32,
    /// The server with its limits lifted.
    unbounded: String,
    unbounded_pid: u32,
}

impl Bench {
    /// One side's run, with the recall server idle first; for recall, its
    /// window counters and CPU time around it.
    async fn run(
        &self,
        side: Side,
        tag: &str,
        conns: usize,
        per_conn: usize,
        pace: Option<Duration>,
    ) -> anyhow::Result<Run> {
        let echo = &self.echo;
        let (recall, pid) = match side {
            Side::RecallUnbounded => (&self.unbounded, self.unbounded_pid),
            _ => (&self.recall, self.recall_pid),
        };
        let base = format!("http://{recall}");
        // Whichever side runs, nothing the last recall run set off is
        // still running on the machine.
        idle(&self.http, &format!("http://{}", self.recall)).await?;
        idle(&self.http, &format!("http://{}", self.unbounded)).await?;
        if side == Side::Echo {
            let r = drive(conns, per_conn, pace, false, |_| {
                format!("ws://{echo}/echo")
            })
            .await;
            println!("  {}", r.line(side.name()));
            return Ok(r);
        }
        let before = counters(&self.http, &base).await?;
        let cpu = cpu_time(pid);
        let durable = side == Side::RecallDurable;
        let r = drive(conns, per_conn, pace, durable, |i| {
            format!(
                "ws://{recall}/v1/connections/{tag}-{i}/stream?agent_id=load&user_id=user-{}",
                i % 100
            )
        })
        .await;
        let cpu = cpu_time(pid) - cpu;
        let after = counters(&self.http, &base).await?;
        println!(
            "  {}; server CPU {:.2} s",
            r.line(side.name()),
            cpu.as_secs_f64()
        );
        println!("    {}", windows(before, after));
        Ok(r)
    }
}

/// Starts `n` sessions of the `idle` agent over HTTP, 64 at a time; they
/// stay live, idle, through the runs.
async fn start_idle(http: &reqwest::Client, base: &str, n: usize) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for i in 0..n {
        let (http, url) = (http.clone(), format!("{base}/v1/sessions"));
        batch.push(tokio::spawn(async move {
            let resp = http
                .post(url)
                .json(&serde_json::json!({
                    "agent_id": "idle",
                    "user_id": format!("user-{}", i % 1000),
                    "connection_id": format!("idle-{i}"),
                }))
                .send()
                .await
                .expect("request");
            assert_eq!(resp.status().as_u16(), 201);
        }));
        if batch.len() == 64 {
            for t in batch.drain(..) {
                t.await?;
            }
        }
    }
    for t in batch {
        t.await?;
    }
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let results = if quick {
        Recorder::off("a --quick run")
    } else {
        Recorder::run()
    };
    // (connections, turns each at saturation, turns each at steady load,
    // idle sessions)
    let (conns, sat_turns, per_conn, idle_sessions) = if quick {
        (200, 10, 10, 2_000)
    } else {
        (1_000, 50, 20, 10_000)
    };
    let (recall_bin, echo_bin) = binaries()?;
    let dir = tempfile::tempdir()?;

    let mut cmd = Command::new(&recall_bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"));
    if std::env::var_os("RECALL_LOG__FILTER").is_none() {
        cmd.env("RECALL_LOG__FILTER", "warn");
    }
    let recall = Server::start(cmd, "recall")?;
    let mut cmd = Command::new(&recall_bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("unbounded"))
        .envs(LIFTED);
    if std::env::var_os("RECALL_LOG__FILTER").is_none() {
        cmd.env("RECALL_LOG__FILTER", "warn");
    }
    let unbounded = Server::start(cmd, "recall (limits lifted)")?;
    let echo = Server::start(Command::new(&echo_bin), "ws_echo")?;
    println!(
        "recall serve (pid {}) on {}, ws_echo (pid {}) on {}; this load generator is pid {}",
        recall.pid(),
        recall.addr,
        echo.pid(),
        echo.addr,
        std::process::id()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (idle_kib, saturation, steady) = rt.block_on(async {
        let bench = Bench {
            http: reqwest::Client::new(),
            recall: recall.addr.clone(),
            echo: echo.addr.clone(),
            recall_pid: recall.pid(),
            unbounded: unbounded.addr.clone(),
            unbounded_pid: unbounded.pid(),
        };
        let base = format!("http://{}", bench.recall);

        // Memory per idle session first, on a fresh server: sessions
        // started over HTTP and left idle (they stay live during the load
        // runs below, as they would on a real server).
        let before = rss_bytes(recall.pid());
        let started = Instant::now();
        start_idle(&bench.http, &base, idle_sessions).await?;
        let after = rss_bytes(recall.pid());
        let idle_kib = after.saturating_sub(before) as f64 / idle_sessions as f64 / 1024.0;
        println!(
            "{idle_sessions} idle sessions started over HTTP in {:.2} s; server RSS {:.1} MiB -> {:.1} MiB: {idle_kib:.1} KiB per idle session",
            started.elapsed().as_secs_f64(),
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
        );

        // The same idle sessions on the server with its limits lifted, so
        // both carry the same state.
        let lifted = format!("http://{}", bench.unbounded);
        start_idle(&bench.http, &lifted, idle_sessions).await?;

        // A short warm-up of each.
        for side in ORDERS[0] {
            let _ = bench.run(side, "warm", 50, 5, None).await?;
        }

        println!("saturation: {conns} WebSocket connections x {sat_turns} turns each, the next sent when the last is answered");
        let mut sat = Vec::new();
        let mut saturation = Vec::new();
        for (round, order) in ORDERS.iter().enumerate() {
            println!(" round {}:", round + 1);
            let mut got = [0.0; 4];
            for &side in order {
                let tag = format!("sat{round}-{}", side as u8);
                got[side as usize] = bench.run(side, &tag, conns, sat_turns, None).await?.per_sec();
            }
            let (plain, durable, lifted) = (got[1] / got[0], got[2] / got[0], got[3] / got[0]);
            println!(
                "  throughput ratio recall/echo {plain:.2} (target >= 0.7: {}); durable acks {durable:.2}; limits lifted {lifted:.2} (with limits / lifted {:.3}: the limits cost at most 5 %: {})",
                verdict(plain >= 0.7),
                plain / lifted,
                verdict(plain / lifted >= 0.95)
            );
            sat.push((plain, durable, lifted));
            saturation.push(got);
        }

        let pace = Duration::from_millis(200);
        println!(
            "steady load: {conns} connections, one turn every {} ms each ({:.0} turns/s offered), {per_conn} turns each",
            pace.as_millis(),
            conns as f64 / pace.as_secs_f64()
        );
        let mut steady = Vec::new();
        for (round, order) in ORDERS.iter().enumerate() {
            println!(" round {}:", round + 1);
            let mut p99 = [0.0; 4];
            for &side in order {
                let tag = format!("paced{round}-{}", side as u8);
                p99[side as usize] = bench.run(side, &tag, conns, per_conn, Some(pace)).await?.pct(0.99);
            }
            println!(
                "  recall p99 {:.2} ms (target < 5 ms: {}); limits lifted {:.2} ms; durable acks p99 {:.2} ms; echo p99 {:.2} ms",
                p99[1],
                verdict(p99[1] < 5.0),
                p99[3],
                p99[2],
                p99[0]
            );
            steady.push(p99);
        }
        idle(&bench.http, &base).await?;
        println!(
            "summary: saturation ratio recall/echo {} (limits lifted {}, durable {}); steady p99 recall {} ms, limits lifted {} ms, durable {} ms, echo {} ms",
            sat.iter().map(|s| format!("{:.2}", s.0)).collect::<Vec<_>>().join(" / "),
            sat.iter().map(|s| format!("{:.2}", s.2)).collect::<Vec<_>>().join(" / "),
            sat.iter().map(|s| format!("{:.2}", s.1)).collect::<Vec<_>>().join(" / "),
            steady.iter().map(|s| format!("{:.2}", s[1])).collect::<Vec<_>>().join(" / "),
            steady.iter().map(|s| format!("{:.2}", s[3])).collect::<Vec<_>>().join(" / "),
            steady.iter().map(|s| format!("{:.2}", s[2])).collect::<Vec<_>>().join(" / "),
            steady.iter().map(|s| format!("{:.2}", s[0])).collect::<Vec<_>>().join(" / "),
        );
        anyhow::Ok((idle_kib, saturation, steady))
    })?;
    record(&results, idle_kib, &saturation, &steady);
    let status = recall.stop()?;
    println!("recall serve exited: {status}");
    let status = unbounded.stop()?;
    println!("recall serve (limits lifted) exited: {status}");
    Ok(())
}

/// Rows 14–16: each round's turns/s at saturation and p99 at the steady
/// load, per side (indexed as `Side`), and the memory per idle session.
fn record(results: &Recorder, idle_kib: f64, saturation: &[[f64; 4]], steady: &[[f64; 4]]) {
    const COMMAND: &str = "cargo run --release --example ws_load";
    let (echo, on, durable, lifted) = (
        Side::Echo as usize,
        Side::Recall as usize,
        Side::RecallDurable as usize,
        Side::RecallUnbounded as usize,
    );
    let mut run = results::Run::new();
    for (what, side) in [
        ("limits on", on),
        ("limits lifted", lifted),
        ("durable acks", durable),
    ] {
        for got in saturation {
            run = run.figure(what, got[side], "turns/s");
        }
    }
    for got in saturation {
        run = run.base("", got[echo], "turns/s");
    }
    for (what, a, b) in [
        ("limits on / echo", on, echo),
        ("limits lifted / echo", lifted, echo),
        ("limits on / lifted", on, lifted),
        ("durable / echo", durable, echo),
    ] {
        for got in saturation {
            run = run.ratio(what, got[a] / got[b]);
        }
    }
    results.record(
        &Row::new(
            14,
            "`recall serve`, 1,000 WebSockets, turns/s at saturation (50 turns each); the server, \
             a second with every limit lifted, a bare echo server and the load generator each a \
             process of its own; two rounds a run, the order reversed; default and durable acks",
            COMMAND,
        )
        .baseline("`ws_echo`, a bare axum WebSocket echo server")
        .target(
            "≥ 0.7× the echo; the limits cost at most 5 % (≥ 0.95× the server with them lifted)",
        )
        .check(On::Ratio, "limits on / echo", ">=", 0.7, "")
        .check(On::Ratio, "limits on / lifted", ">=", 0.95, ""),
        run,
    );
    let mut run = results::Run::new();
    for (what, side) in [
        ("limits on p99", on),
        ("limits lifted p99", lifted),
        ("durable acks p99", durable),
    ] {
        for p99 in steady {
            run = run.figure(what, p99[side], "ms");
        }
    }
    for p99 in steady {
        run = run.base("p99", p99[echo], "ms");
    }
    for (what, side) in [("limits on / echo", on), ("limits lifted / echo", lifted)] {
        for p99 in steady {
            run = run.ratio(what, p99[side] / p99[echo]);
        }
    }
    results.record(
        &Row::new(
            15,
            "`recall serve`, ack latency p99 at a steady 5,000 turns/s (a turn every 200 ms per \
             connection), the runs of row 14: default acks with the limits on and lifted, durable \
             acks",
            COMMAND,
        )
        .baseline("`ws_echo`, same runs")
        .target("p99 < 5 ms with default acks (durable acks: none)")
        .check(On::Figure, "limits on p99", "<", 5.0, "ms")
        .check(On::Figure, "limits lifted p99", "<", 5.0, "ms"),
        run,
    );
    results.record(
        &Row::new(
            16,
            "`recall serve`, resident memory per idle session, 10,000 started over HTTP (the \
             server process's `VmRSS`)",
            COMMAND,
        ),
        results::Run::new().figure("", idle_kib, "KiB"),
    );
}
