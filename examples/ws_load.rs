//! Load test of `recall serve`'s WebSocket stream, against a bare axum
//! WebSocket echo handler measured in the same run, and the server's
//! resident memory per idle session.
//!
//! 1. Starts, in this process, the recall server (default settings: group
//!    commit, offline summarizer) on a temporary folder and a bare axum
//!    echo server, both on 127.0.0.1.
//! 2. Starts 10,000 sessions through `POST /v1/sessions` and reports the
//!    growth of the process's resident memory per idle session (they stay
//!    live, idle, during what follows).
//! 3. Opens 1,000 WebSocket connections to each server in turn; every
//!    connection sends turn frames, each waiting for its answer (an ack
//!    from recall, the echo from the bare handler): first at saturation
//!    (the next frame as soon as the last is answered: turns per second and
//!    their ratio), then at a steady offered load (one turn every 200 ms
//!    per connection: ack latency percentiles). At saturation every frame
//!    queues behind the 999 others, so latency there measures the queue,
//!    not the server.
//!
//! Run with `cargo run --release --example ws_load` (add `-- --quick` for a
//! smaller run; `RECALL_<SECTION>__<KEY>` variables change settings). Clients and servers share the machine's cores, the same
//! way for both servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message as AxMessage, WebSocket, WebSocketUpgrade};
use axum::routing::get;
use axum::Router;
use futures::{SinkExt, StreamExt};
use recall::server::{self, ServerConfig};
use recall::RuntimeBuilder;
use tokio::sync::{oneshot, Barrier};
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
            "{name}: {} turns in {:.2} s = {:.0} turns/s; ack latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
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

async fn echo(ws: WebSocketUpgrade) -> axum::response::Response {
    ws.on_upgrade(|mut socket: WebSocket| async move {
        while let Some(Ok(msg)) = socket.recv().await {
            let echoed = match msg {
                AxMessage::Text(_) | AxMessage::Binary(_) => socket.send(msg).await.is_ok(),
                AxMessage::Close(_) => false,
                _ => true,
            };
            if !echoed {
                break;
            }
        }
    })
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The in-session window summaries of a run, from the supervisor's stats
/// before and after it: how many, and how far behind the calls they were
/// (messages not yet in a completed window, at each round past the
/// threshold).
fn windows(
    before: &recall::engine::supervisor::SupervisorStats,
    after: &recall::engine::supervisor::SupervisorStats,
) -> String {
    let rounds = after.window_lag_rounds - before.window_lag_rounds;
    let sum = after.window_lag_sum - before.window_lag_sum;
    format!(
        "window summaries: {} started, {} completed during the run; lag {:.1} messages at the mean over {rounds} rounds, {} at the most (so far)",
        after.windows_started - before.windows_started,
        after.windows_completed - before.windows_completed,
        sum as f64 / rounds.max(1) as f64,
        after.window_lag_max
    )
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    // (connections, turns each at saturation, turns each at steady load,
    // idle sessions)
    let (conns, sat_turns, per_conn, idle) = if quick {
        (200, 10, 10, 2_000)
    } else {
        (1_000, 50, 20, 10_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        // The defaults, with any `RECALL_<SECTION>__<KEY>` variables set
        // (e.g. `RECALL_SESSION__WINDOW_EVERY_MESSAGES=2`).
        let settings = recall::settings::load(None)?;
        let runtime = RuntimeBuilder::new(dir.path())
            .settings(settings.clone())
            .start()
            .await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let recall_addr: SocketAddr = listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server_task = tokio::spawn(server::serve(
            listener,
            runtime.clone(),
            ServerConfig::from_settings(&settings),
            async {
                let _ = stop_rx.await;
            },
        ));

        let echo_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let echo_addr = echo_listener.local_addr()?;
        tokio::spawn(async move {
            let app = Router::new().route("/echo", get(echo));
            let _ = axum::serve(echo_listener, app).await;
        });

        // Memory per idle session first, on a fresh process: sessions
        // started over HTTP and left idle (they stay live during the load
        // runs below, as they would on a real server).
        let http = reqwest::Client::new();
        let before = rss_bytes();
        let base = format!("http://{recall_addr}");
        let started = Instant::now();
        let mut batch = Vec::new();
        for i in 0..idle {
            let http = http.clone();
            let url = format!("{base}/v1/sessions");
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
        let after = rss_bytes();
        let live = runtime.stats().await?.supervisor.live_sessions;
        println!(
            "{idle} idle sessions started over HTTP in {:.2} s; {live} live; process RSS {:.1} MiB -> {:.1} MiB: {:.1} KiB per idle session",
            started.elapsed().as_secs_f64(),
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            after.saturating_sub(before) as f64 / idle as f64 / 1024.0
        );

        let echo_url = |_: usize| format!("ws://{echo_addr}/echo");
        let recall_url = |run: &'static str| {
            move |i: usize| {
                format!(
                    "ws://{recall_addr}/v1/connections/{run}-{i}/stream?agent_id=load&user_id=user-{}",
                    i % 100
                )
            }
        };
        // A short warm-up of each.
        let _ = drive(50, 5, None, echo_url).await;
        let _ = drive(50, 5, None, recall_url("warm")).await;

        println!("saturation: {conns} WebSocket connections x {sat_turns} turns each, the next sent when the last is answered");
        runtime.wait_idle().await?;
        let bare = drive(conns, sat_turns, None, echo_url).await;
        let before = runtime.stats().await?.supervisor;
        let rec = drive(conns, sat_turns, None, recall_url("sat")).await;
        let after = runtime.stats().await?.supervisor;
        println!("  {}", bare.line("bare axum echo"));
        println!("  {}", rec.line("recall serve  "));
        println!("  {}", windows(&before, &after));
        let ratio = rec.per_sec() / bare.per_sec();
        println!(
            "  throughput ratio recall/echo {ratio:.2} (target >= 0.7: {})",
            if ratio >= 0.7 { "met" } else { "MISSED" },
        );

        let pace = Duration::from_millis(200);
        println!(
            "steady load: {conns} connections, one turn every {} ms each ({:.0} turns/s offered), {per_conn} turns each",
            pace.as_millis(),
            conns as f64 / pace.as_secs_f64()
        );
        // The saturation run's sessions are reflected before this one starts.
        runtime.wait_idle().await?;
        let bare_p = drive(conns, per_conn, Some(pace), echo_url).await;
        let before = runtime.stats().await?.supervisor;
        let rec_p = drive(conns, per_conn, Some(pace), recall_url("paced")).await;
        let after = runtime.stats().await?.supervisor;
        println!("  {}", bare_p.line("bare axum echo"));
        println!("  {}", rec_p.line("recall serve  "));
        println!("  {}", windows(&before, &after));
        println!(
            "  recall p99 {:.2} ms (target < 5 ms: {}); echo p99 {:.2} ms",
            rec_p.pct(0.99),
            if rec_p.pct(0.99) < 5.0 { "met" } else { "MISSED" },
            bare_p.pct(0.99)
        );
        runtime.wait_idle().await?;
        let stats = runtime.stats().await?;
        println!(
            "store: {} turns written; {} sessions reflected",
            stats.store.turns_written, stats.supervisor.summaries_stored
        );

        let _ = stop_tx.send(());
        let report = server_task.await??;
        println!(
            "shutdown: {} sessions ended, {} reflections left queued",
            report.sessions_ended, report.reflections_left
        );
        anyhow::Ok(())
    })
}
