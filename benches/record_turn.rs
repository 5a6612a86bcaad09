//! The hot path: `Runtime::record_turn` against a raw tokio mpsc send.
//!
//! Starts a real runtime (default settings, group commit) on a temporary
//! data folder with 10,000 live sessions, then measures in the same run:
//!
//! - `raw_mpsc_send`: sending the same payload (the two strings, cloned,
//!   and a timestamp from the runtime's clock) on an unbounded tokio channel
//!   to a task that drains it;
//! - `record_turn`: `record_turn(conn, user.clone(), agent.clone())`
//!   round-robin over the 10,000 connections;
//! - for information only, "raw fan-out": the raw send round-robin over
//!   10,000 channels with one draining task each, so that every send, like
//!   every `record_turn`, touches a different receiver.
//!
//! Besides the criterion groups it prints the mean ns per call of each (one
//! timed loop of back-to-back calls, split into the calling thread's time on
//! a CPU and waiting for one, from procfs), their ratio, and percentiles of
//! individually timed calls, back-to-back and paced (one call every 20 µs,
//! so every cast wakes an idle receiver). Each session passes the in-session
//! window threshold within a batch, so window summaries run while
//! `record_turn` is timed (their count is printed). Between batches it
//! waits, untimed, until the Store has persisted every turn sent and every
//! window summary started has come back (`Runtime::wait_windows`), so no
//! backlog carries over from one batch to the next: the baseline's batches
//! run with nothing of recall's left running. Calls are made from a thread
//! that has entered the tokio runtime, as a voice server's handlers would.
//!
//! Run with `cargo bench --bench record_turn`. It records rows 1–5 and 27
//! of BENCHMARKS.md in `benches/results/` (see `common/results.rs`).

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::results::{On, Recorder, Row, Run};
use criterion::Criterion;
use recall::{Clock, Runtime, RuntimeBuilder, Turn};
use tokio::sync::mpsc;

const SESSIONS: usize = 10_000;
const TIMED_CALLS: usize = 200_000;
const WARMUP_CALLS: usize = 50_000;
const PACED_CALLS: usize = 20_000;
const PACE: Duration = Duration::from_micros(20);

const USER_MESSAGE: &str = "Can you move my dentist appointment to Thursday afternoon?";
const AGENT_RESPONSE: &str = "Sure. I moved your dentist appointment to Thursday at 3 pm \
     and sent you a confirmation. Would you like a reminder the day before?";

/// What the raw baseline sends: what a turn holds.
struct Payload {
    user_message: String,
    agent_response: String,
    timestamp: DateTime<Utc>,
}

/// The raw baseline: an unbounded channel and a task that drains it.
struct Raw {
    tx: mpsc::UnboundedSender<Payload>,
    received: Arc<AtomicU64>,
    sent: u64,
    clock: Clock,
    user: String,
    agent: String,
}

impl Raw {
    fn start(rt: &tokio::runtime::Runtime, clock: Clock) -> Raw {
        let (tx, mut rx) = mpsc::unbounded_channel::<Payload>();
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        rt.spawn(async move {
            while let Some(p) = rx.recv().await {
                black_box((&p.user_message, &p.agent_response, &p.timestamp));
                counter.fetch_add(1, Ordering::Release);
            }
        });
        Raw {
            tx,
            received,
            sent: 0,
            clock,
            user: USER_MESSAGE.to_string(),
            agent: AGENT_RESPONSE.to_string(),
        }
    }

    #[inline]
    fn send(&mut self) {
        self.tx
            .send(Payload {
                user_message: self.user.clone(),
                agent_response: self.agent.clone(),
                timestamp: self.clock.now(),
            })
            .expect("receiver alive");
        self.sent += 1;
    }

    /// Waits until the receiver has drained everything sent.
    fn settle(&self) {
        while self.received.load(Ordering::Acquire) < self.sent {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A second, informational baseline: the same payload sent round-robin on
/// 10,000 unbounded channels, each drained by its own task, so every send
/// touches a different receiver as `record_turn` does.
struct RawFanout {
    txs: Vec<mpsc::UnboundedSender<Payload>>,
    next: usize,
    received: Arc<AtomicU64>,
    sent: u64,
    clock: Clock,
    user: String,
    agent: String,
}

impl RawFanout {
    fn start(rt: &tokio::runtime::Runtime, clock: Clock, receivers: usize) -> RawFanout {
        let received = Arc::new(AtomicU64::new(0));
        let txs = (0..receivers)
            .map(|_| {
                let (tx, mut rx) = mpsc::unbounded_channel::<Payload>();
                let counter = received.clone();
                rt.spawn(async move {
                    while let Some(p) = rx.recv().await {
                        black_box((&p.user_message, &p.agent_response, &p.timestamp));
                        counter.fetch_add(1, Ordering::Release);
                    }
                });
                tx
            })
            .collect();
        RawFanout {
            txs,
            next: 0,
            received,
            sent: 0,
            clock,
            user: USER_MESSAGE.to_string(),
            agent: AGENT_RESPONSE.to_string(),
        }
    }

    #[inline]
    fn send(&mut self) {
        let tx = &self.txs[self.next];
        self.next += 1;
        if self.next == self.txs.len() {
            self.next = 0;
        }
        tx.send(Payload {
            user_message: self.user.clone(),
            agent_response: self.agent.clone(),
            timestamp: self.clock.now(),
        })
        .expect("receiver alive");
        self.sent += 1;
    }

    fn settle(&self) {
        while self.received.load(Ordering::Acquire) < self.sent {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// The runtime under test and the connections it serves.
struct Recall<'a> {
    rt: &'a tokio::runtime::Runtime,
    runtime: Runtime,
    conns: Vec<String>,
    next: usize,
    /// Turns recorded so far (and so expected in the Store).
    sent: u64,
    user: String,
    agent: String,
}

impl Recall<'_> {
    #[inline]
    fn record(&mut self) {
        let conn = &self.conns[self.next];
        self.next += 1;
        if self.next == self.conns.len() {
            self.next = 0;
        }
        self.runtime
            .record_turn(conn, Turn::new(self.user.clone(), self.agent.clone()))
            .expect("record_turn");
        self.sent += 1;
    }

    fn persisted(&self) -> u64 {
        self.rt
            .block_on(self.runtime.stats())
            .expect("stats")
            .store
            .turns_written
    }

    /// Waits until the Store has persisted every turn recorded so far and
    /// every in-session window summary those turns started has come back
    /// and been taken in by its session, so neither spills into the next
    /// batch (the baseline's, when they alternate).
    fn settle(&self) {
        self.settle_turns();
        self.rt
            .block_on(self.runtime.wait_windows())
            .expect("wait_windows");
    }

    /// Waits until the Store has persisted every turn recorded so far.
    fn settle_turns(&self) {
        while self.persisted() < self.sent {
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// In-session window summaries started so far.
    fn windows_started(&self) -> u64 {
        self.rt
            .block_on(self.runtime.stats())
            .expect("stats")
            .supervisor
            .windows_started
    }
}

struct Summary {
    mean_ns: f64,
    p50: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

fn percentiles(mut samples: Vec<u64>, mean_ns: f64) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    Summary {
        mean_ns,
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        max: *samples.last().unwrap_or(&0),
    }
}

/// This thread's time on a CPU and waiting for one (ns), and its minor page
/// faults, from procfs (zeros where unavailable).
fn thread_counters() -> [u64; 3] {
    let sched = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut it = sched.split_whitespace().map(|v| v.parse().unwrap_or(0));
    let (on_cpu, waiting) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the command name, which ends with the last ')'.
    let minflt = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    [on_cpu, waiting, minflt]
}

/// A back-to-back loop of calls: wall, on-CPU and run-queue wait ns per
/// call, and minor page faults per 1,000 calls.
struct Mean {
    wall_ns: f64,
    cpu_ns: f64,
    wait_ns: f64,
    faults_per_k: f64,
}

fn mean_of(n: usize, mut call: impl FnMut()) -> Mean {
    let before = thread_counters();
    let start = Instant::now();
    for _ in 0..n {
        call();
    }
    let wall = start.elapsed().as_nanos() as f64;
    let after = thread_counters();
    let per = |i: usize| after[i].saturating_sub(before[i]) as f64 / n as f64;
    Mean {
        wall_ns: wall / n as f64,
        cpu_ns: per(0),
        wait_ns: per(1),
        faults_per_k: per(2) * 1000.0,
    }
}

fn mean_line(name: &str, m: &Mean) -> String {
    format!(
        "{name}: wall {:.0} ns/call = on-CPU {:.0} ns + waiting for a CPU {:.0} ns \
         (+ rest); {:.1} minor page faults per 1k calls",
        m.wall_ns, m.cpu_ns, m.wait_ns, m.faults_per_k
    )
}

/// Each of `n` calls timed on its own, optionally `pace` apart.
fn timed(n: usize, pace: Option<Duration>, mut call: impl FnMut()) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    let mut next = Instant::now();
    for _ in 0..n {
        if let Some(p) = pace {
            next += p;
            while Instant::now() < next {
                std::hint::spin_loop();
            }
        }
        let t = Instant::now();
        call();
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}

fn timer_overhead() -> u64 {
    let mut v = timed(100_000, None, || {});
    v.sort_unstable();
    v[v.len() / 2]
}

fn line(name: &str, s: &Summary) -> String {
    format!(
        "{name}: mean {:.0} ns, p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
        s.mean_ns, s.p50, s.p99, s.p999, s.max
    )
}

const COMMAND: &str = "cargo bench --bench record_turn";
const RAW: &str = "raw tokio mpsc send, one receiver";
const MEAN_TARGET: &str = "≤ 1.5× the raw send at the mean; p99 < 5 µs";

/// The rows of BENCHMARKS.md this bench measures.
fn row(n: u32) -> Row {
    let both = |r: Row| {
        r.baseline(RAW)
            .target(MEAN_TARGET)
            .check(On::Ratio, "mean", "<=", 1.5, "")
            .check(On::Figure, "p99", "<", 5.0, "µs")
    };
    match n {
        1 => Row::new(
            1,
            "`record_turn`, 10,000 live sessions, back-to-back, mean of 200,000 calls (window \
             summaries running; between batches the bench waits for them)",
            COMMAND,
        )
        .baseline(RAW)
        .target("≤ 1.5× the raw send at the mean")
        .check(On::Ratio, "mean", "<=", 1.5, ""),
        2 => Row::new(
            2,
            "`record_turn`, the runs of row 1, mean, against the raw send fanned out over 10,000 \
             receivers",
            COMMAND,
        )
        .baseline("raw send fanned out over 10,000 receivers, one draining task each"),
        3 => Row::new(
            3,
            "`record_turn`, the runs of row 1, p99 (p50) of 200,000 individually timed calls",
            COMMAND,
        )
        .baseline(RAW)
        .target("p99 < 5 µs")
        .check(On::Figure, "p99", "<", 5.0, "µs"),
        4 => both(Row::new(
            4,
            "`record_turn` while in-session window summaries run (10,000 started during each \
             timed loop), the runs of row 1, mean / p99",
            COMMAND,
        )),
        5 => both(Row::new(
            5,
            "`record_turn` with rollups, topics and topic-shift reports in the runtime (its \
             defaults), the runs of row 1, mean / p99",
            COMMAND,
        )),
        _ => both(Row::new(
            27,
            "`record_turn`, 10,000 live sessions, window summaries running, with the fuller \
             offline summarizer: mean (on a CPU); p50; p99 (max); criterion's estimate",
            COMMAND,
        )),
    }
}

fn main() {
    let results = Recorder::bench();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = rt
        .block_on(RuntimeBuilder::new(dir.path()).start())
        .expect("runtime start");

    let conns = start_sessions(&rt, &runtime);

    let mut raw = Raw::start(&rt, runtime.clock());
    let mut recall = Recall {
        rt: &rt,
        runtime: runtime.clone(),
        conns,
        next: 0,
        sent: 0,
        user: USER_MESSAGE.to_string(),
        agent: AGENT_RESPONSE.to_string(),
    };

    // ---- explicit figures ----
    let runs = {
        let _ctx = rt.enter();
        let m = measure(&rt, &runtime, &mut raw, &mut recall);
        print_figures(&rt, &runtime, &m);
        let runs = runs_of(&m);
        print_targets(&m);
        runs
    };

    criterion_groups(&rt, &mut raw, &mut recall);

    // Criterion's estimates of this run, beside row 27's own figures.
    let recorded = results.criterion_ns("record_turn", "record_turn");
    let raw_recorded = results.criterion_ns("record_turn", "raw_mpsc_send");
    for (n, mut run) in runs {
        if let (27, Some(rec), Some(raw)) = (n, recorded, raw_recorded) {
            run = run
                .figure("criterion", rec / 1e3, "µs")
                .base("criterion", raw / 1e3, "µs")
                .ratio("criterion", rec / raw);
        }
        results.record(
            &row(n),
            run.note(&format!("load average {}", common::load_average())),
        );
    }

    println!(
        "{} turns recorded and {} raw payloads sent in total; shutting down",
        recall.sent, raw.sent
    );
    drop(raw);
    let report = rt
        .block_on(runtime.shutdown_with_grace(Duration::from_millis(200)))
        .expect("shutdown");
    println!(
        "shutdown: {} sessions ended, {} reflections left queued",
        report.sessions_ended, report.reflections_left
    );
    drop(recall);
    rt.shutdown_timeout(Duration::from_secs(5));
}

/// Starts `SESSIONS` sessions; their connections.
fn start_sessions(rt: &tokio::runtime::Runtime, runtime: &Runtime) -> Vec<String> {
    let started = Instant::now();
    let conns: Vec<String> = (0..SESSIONS).map(|i| format!("bench-conn-{i}")).collect();
    rt.block_on(async {
        for (i, conn) in conns.iter().enumerate() {
            runtime
                .start_session("bench-agent", &format!("user-{}", i % 1000), conn)
                .await
                .expect("start_session");
        }
        runtime.flush().await.expect("flush");
    });
    println!(
        "started {SESSIONS} sessions in {:.2} s on {} tokio workers",
        started.elapsed().as_secs_f64(),
        rt.metrics().num_workers()
    );
    conns
}

/// The explicit figures: back to back (means and individually timed),
/// paced, and the raw fan-out beside them.
struct Measured {
    overhead: u64,
    raw_mean: Mean,
    rec_mean: Mean,
    windows_mean: u64,
    end_to_end: Duration,
    windows_wait: Duration,
    raw_p: Summary,
    rec_p: Summary,
    windows_timed: u64,
    raw_paced: Summary,
    rec_paced: Summary,
    fan_mean: Mean,
    fan_p: Summary,
}

/// Times raw sends and `record_turn` calls (with the runtime entered).
fn measure(
    rt: &tokio::runtime::Runtime,
    runtime: &Runtime,
    raw: &mut Raw,
    recall: &mut Recall,
) -> Measured {
    let overhead = timer_overhead();

    mean_of(WARMUP_CALLS, || raw.send());
    raw.settle();
    mean_of(WARMUP_CALLS, || recall.record());
    recall.settle();

    let raw_mean = mean_of(TIMED_CALLS, || raw.send());
    raw.settle();
    let windows_before = recall.windows_started();
    let burst = Instant::now();
    let rec_mean = mean_of(TIMED_CALLS, || recall.record());
    let windows_mean = recall.windows_started() - windows_before;
    recall.settle_turns();
    let end_to_end = burst.elapsed();
    let windows_wait = Instant::now();
    recall.settle();
    let windows_wait = windows_wait.elapsed();

    let raw_p = percentiles(timed(TIMED_CALLS, None, || raw.send()), raw_mean.wall_ns);
    raw.settle();
    let windows_before = recall.windows_started();
    let rec_p = percentiles(
        timed(TIMED_CALLS, None, || recall.record()),
        rec_mean.wall_ns,
    );
    let windows_timed = recall.windows_started() - windows_before;
    recall.settle();

    let raw_paced = timed(PACED_CALLS, Some(PACE), || raw.send());
    raw.settle();
    let rec_paced = timed(PACED_CALLS, Some(PACE), || recall.record());
    recall.settle();
    let paced_mean = |v: &Vec<u64>| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let raw_paced = percentiles(raw_paced.clone(), paced_mean(&raw_paced));
    let rec_paced = percentiles(rec_paced.clone(), paced_mean(&rec_paced));

    // Informational: the same sends fanned out to 10,000 receivers.
    let mut fanout = RawFanout::start(rt, runtime.clock(), SESSIONS);
    mean_of(WARMUP_CALLS, || fanout.send());
    fanout.settle();
    let fan_mean = mean_of(TIMED_CALLS, || fanout.send());
    fanout.settle();
    let fan_p = percentiles(timed(TIMED_CALLS, None, || fanout.send()), fan_mean.wall_ns);
    fanout.settle();
    drop(fanout);
    Measured {
        overhead,
        raw_mean,
        rec_mean,
        windows_mean,
        end_to_end,
        windows_wait,
        raw_p,
        rec_p,
        windows_timed,
        raw_paced,
        rec_paced,
        fan_mean,
        fan_p,
    }
}

/// Prints the figures measured and the window summaries started meanwhile.
fn print_figures(rt: &tokio::runtime::Runtime, runtime: &Runtime, m: &Measured) {
    let Measured {
        overhead,
        raw_mean,
        rec_mean,
        windows_mean,
        end_to_end,
        windows_wait,
        raw_p,
        rec_p,
        windows_timed,
        raw_paced,
        rec_paced,
        fan_mean,
        fan_p,
    } = m;
    println!();
    println!(
        "per-call timings include the Instant::now() pair overhead (~{overhead} ns); \
         means come from untimed back-to-back loops of {TIMED_CALLS} calls"
    );
    println!("back-to-back, {TIMED_CALLS} calls in one untimed-per-call loop (calling thread):");
    println!("  {}", mean_line("record_turn", rec_mean));
    println!("  {}", mean_line("raw mpsc   ", raw_mean));
    println!("  {}", mean_line("raw fan-out", fan_mean));
    println!("back-to-back, {TIMED_CALLS} individually timed calls:");
    println!("  {}", line("record_turn", rec_p));
    println!("  {}", line("raw mpsc   ", raw_p));
    println!("  {}", line("raw fan-out", fan_p));
    println!(
        "paced (one call every {} µs, {PACED_CALLS} calls):",
        PACE.as_micros()
    );
    println!("  {}", line("record_turn", rec_paced));
    println!("  {}", line("raw mpsc   ", raw_paced));
    println!(
        "end to end: {TIMED_CALLS} turns recorded and persisted by the Store in {:.1} ms \
         ({:.0} turns/s)",
        end_to_end.as_secs_f64() * 1e3,
        TIMED_CALLS as f64 / end_to_end.as_secs_f64()
    );
    println!(
        "then the window summaries still in flight came back in {:.1} ms (untimed)",
        windows_wait.as_secs_f64() * 1e3
    );
    let s = rt
        .block_on(async {
            runtime.wait_idle().await?;
            runtime.stats().await
        })
        .expect("stats")
        .supervisor;
    println!(
        "in-session window summaries started during the timed record_turn calls: \
         {windows_mean} in the back-to-back loop, {windows_timed} in the individually \
         timed one; in all so far {} started, {} completed, {} folds into long narratives",
        s.windows_started, s.windows_completed, s.folds_completed
    );
}

/// The runs of rows 1 to 5 and 27 from the figures measured.
fn runs_of(m: &Measured) -> Vec<(u32, Run)> {
    let Measured {
        raw_mean,
        rec_mean,
        raw_p,
        rec_p,
        fan_mean,
        ..
    } = m;
    let mut runs: Vec<(u32, Run)> = Vec::new();
    {
        let us = |ns: f64| ns / 1e3;
        let (mean, raw) = (us(rec_mean.wall_ns), us(raw_mean.wall_ns));
        let (p99, raw_p99) = (us(rec_p.p99 as f64), us(raw_p.p99 as f64));
        let fan = us(fan_mean.wall_ns);
        let mean_p99 = || {
            Run::new()
                .figure("mean", mean, "µs")
                .figure("p99", p99, "µs")
                .base("mean", raw, "µs")
                .base("p99", raw_p99, "µs")
                .ratio("mean", mean / raw)
                .ratio("p99", p99 / raw_p99)
        };
        runs.push((
            1,
            Run::new()
                .figure("mean", mean, "µs")
                .base("mean", raw, "µs")
                .ratio("mean", mean / raw),
        ));
        runs.push((
            2,
            Run::new()
                .figure("mean", mean, "µs")
                .base("mean", fan, "µs")
                .ratio("mean", mean / fan),
        ));
        runs.push((
            3,
            Run::new()
                .figure("p99", p99, "µs")
                .figure("p50", us(rec_p.p50 as f64), "µs")
                .base("p99", raw_p99, "µs")
                .base("p50", us(raw_p.p50 as f64), "µs")
                .ratio("p99", p99 / raw_p99),
        ));
        runs.push((4, mean_p99()));
        runs.push((5, mean_p99()));
        runs.push((
            27,
            Run::new()
                .figure("mean", mean, "µs")
                .figure("on a CPU", us(rec_mean.cpu_ns), "µs")
                .figure("p50", us(rec_p.p50 as f64), "µs")
                .figure("p99", p99, "µs")
                .figure("max", rec_p.max as f64 / 1e6, "ms")
                .base("mean", raw, "µs")
                .base("on a CPU", us(raw_mean.cpu_ns), "µs")
                .base("p99", raw_p99, "µs")
                .ratio("mean", mean / raw)
                .ratio("on a CPU", rec_mean.cpu_ns / raw_mean.cpu_ns.max(1.0)),
        ));
    }
    runs
}

/// Prints the ratios to the raw baselines and whether the targets are met.
fn print_targets(m: &Measured) {
    let Measured {
        raw_mean,
        rec_mean,
        raw_p,
        rec_p,
        fan_mean,
        ..
    } = m;
    let (rec_mean, raw_mean) = (rec_mean.wall_ns, raw_mean.wall_ns);
    let ratio = rec_mean / raw_mean;
    println!(
        "raw fan-out = the same payload sent round-robin on {SESSIONS} channels, one \
         draining task each (record_turn / raw fan-out = {:.2})",
        rec_mean / fan_mean.wall_ns
    );
    println!();
    println!(
        "record_turn: mean {rec_mean:.0} ns, p99 {} ns; raw mpsc: mean {raw_mean:.0} ns, \
         p99 {} ns; ratio {ratio:.2} at the mean, {:.2} at p99",
        rec_p.p99,
        raw_p.p99,
        rec_p.p99 as f64 / raw_p.p99.max(1) as f64
    );
    println!(
        "targets: ratio <= 1.5 {}; p99 < 5 µs {}",
        if ratio <= 1.5 { "met" } else { "MISSED" },
        if rec_p.p99 < 5_000 { "met" } else { "MISSED" }
    );
    println!();
}

/// The criterion groups: raw sends, then `record_turn`.
fn criterion_groups(rt: &tokio::runtime::Runtime, raw: &mut Raw, recall: &mut Recall) {
    // ---- criterion groups ----
    // Each sample settles only the turns: waiting for the window summaries
    // (a barrier over 10,000 sessions) after every sample would make
    // criterion's samples single calls. The raw group runs first with
    // nothing of recall's left running (the last settle above waited for
    // the windows); record_turn's samples then run beside the window
    // summaries its earlier samples started, as a long call does.
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(800));
    {
        let mut group = c.benchmark_group("record_turn");
        group.bench_function("raw_mpsc_send", |b| {
            b.iter_custom(|iters| {
                let _ctx = rt.enter();
                let start = Instant::now();
                for _ in 0..iters {
                    raw.send();
                }
                let elapsed = start.elapsed();
                raw.settle();
                elapsed
            })
        });
        group.bench_function("record_turn", |b| {
            b.iter_custom(|iters| {
                let _ctx = rt.enter();
                let start = Instant::now();
                for _ in 0..iters {
                    recall.record();
                }
                let elapsed = start.elapsed();
                recall.settle_turns();
                elapsed
            })
        });
        group.finish();
    }
    c.final_summary();
}
