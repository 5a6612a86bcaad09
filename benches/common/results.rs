//! Machine-readable results: a run of a bench (or of an example or test
//! that measures a row of BENCHMARKS.md) records what it measured in
//! `benches/results/<row>.json`, one file per row, and
//! `scripts/bench-table` regenerates BENCHMARKS.md's table from them.
//!
//! A file holds the row's number, title, command, what its baseline is and
//! its target (the text, and where it is numeric the checks that decide
//! whether it holds), then the runs of the latest day, each with its date,
//! figures, baseline figures, ratios and whether the target held. A figure
//! named twice in a run is measured twice in it (rounds); the table shows
//! the range of each figure over the runs. A run on a later day starts
//! the list again: earlier runs live in git's history.
//!
//! `RECALL_BENCH_RESULTS=off` records nothing; `RECALL_BENCH_RESULTS=new`
//! starts the list again on the same day (after a change to the code).
//! Used by the benches (`mod common`), and by the examples, the crash test
//! and the tantivy peer through a `#[path]` module.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// The most runs a file keeps (the oldest are dropped).
const KEEP: usize = 12;

/// One measured figure: a name ("p99", "mean"; empty where the row has
/// one), a value and its unit ("µs", "turns/s", "%"; empty for a ratio).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub what: String,
    pub value: f64,
    pub unit: String,
}

/// Which list of a run a check reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum On {
    Figure,
    Baseline,
    Ratio,
}

impl On {
    fn as_str(self) -> &'static str {
        match self {
            On::Figure => "figure",
            On::Baseline => "baseline",
            On::Ratio => "ratio",
        }
    }
}

/// A numeric part of a target: `<on>.<what> <op> <value> <unit>`; every
/// value of that figure in a run must pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub on: On,
    pub what: String,
    /// "<", "<=", ">" or ">=".
    pub op: &'static str,
    pub value: f64,
    pub unit: String,
}

impl Check {
    fn passes(&self, run: &Run) -> Option<bool> {
        let list = match self.on {
            On::Figure => &run.figures,
            On::Baseline => &run.baseline,
            On::Ratio => &run.ratios,
        };
        let values: Vec<f64> = list
            .iter()
            .filter(|f| f.what == self.what)
            .map(|f| convert(f.value, &f.unit, &self.unit))
            .collect::<Option<_>>()?;
        if values.is_empty() {
            return None;
        }
        Some(values.iter().all(|&v| match self.op {
            "<" => v < self.value,
            "<=" => v <= self.value,
            ">" => v > self.value,
            ">=" => v >= self.value,
            other => panic!("unknown comparison {other:?}"),
        }))
    }
}

/// A value in `from` units expressed in `to` units (time and memory);
/// `None` where the two cannot be compared.
fn convert(v: f64, from: &str, to: &str) -> Option<f64> {
    if from == to {
        return Some(v);
    }
    let scale = |u: &str| -> Option<(u8, f64)> {
        Some(match u {
            "ns" => (0, 1e-9),
            "µs" => (0, 1e-6),
            "ms" => (0, 1e-3),
            "s" => (0, 1.0),
            "B" | "bytes" => (1, 1.0),
            "KiB" => (1, 1024.0),
            "MiB" => (1, 1024.0 * 1024.0),
            "GiB" => (1, 1024.0 * 1024.0 * 1024.0),
            _ => return None,
        })
    };
    let ((a, fa), (b, fb)) = (scale(from)?, scale(to)?);
    (a == b).then(|| v * fa / fb)
}

/// What a row is: everything in its file but the runs.
#[derive(Debug, Clone)]
pub struct Row {
    pub row: u32,
    pub title: String,
    pub command: String,
    pub baseline: String,
    pub target: String,
    pub checks: Vec<Check>,
}

impl Row {
    pub fn new(row: u32, title: &str, command: &str) -> Row {
        Row {
            row,
            title: title.into(),
            command: command.into(),
            baseline: String::new(),
            target: String::new(),
            checks: Vec::new(),
        }
    }

    /// What the baseline is (its figures go in each run).
    pub fn baseline(mut self, what: &str) -> Row {
        self.baseline = what.into();
        self
    }

    /// The target, in words.
    pub fn target(mut self, text: &str) -> Row {
        self.target = text.into();
        self
    }

    /// A numeric part of the target, on a figure (`unit` that of the
    /// check's value).
    pub fn check(mut self, on: On, what: &str, op: &'static str, value: f64, unit: &str) -> Row {
        assert!(matches!(op, "<" | "<=" | ">" | ">="), "comparison {op:?}");
        self.checks.push(Check {
            on,
            what: what.into(),
            op,
            value,
            unit: unit.into(),
        });
        self
    }
}

/// One run's figures.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub date: String,
    pub figures: Vec<Figure>,
    pub baseline: Vec<Figure>,
    pub ratios: Vec<Figure>,
    /// Whether the target held; where the row has checks, computed from
    /// them (and false if the producer said it did not).
    pub holds: Option<bool>,
    /// How many runs the entry stands for (ranges transcribed from
    /// before the files existed); 1 for a run recorded here.
    pub runs: u32,
    pub note: String,
}

fn figure(what: &str, value: f64, unit: &str) -> Figure {
    Figure {
        what: what.into(),
        value: round(value),
        unit: unit.into(),
    }
}

/// Three significant digits, whole numbers from 1,000 up.
pub fn round(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return if v.is_finite() { 0.0 } else { v };
    }
    if v.abs() >= 1000.0 {
        return v.round();
    }
    let digits = 2 - v.abs().log10().floor() as i32;
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

impl Run {
    pub fn new() -> Run {
        Run {
            runs: 1,
            ..Run::default()
        }
    }

    /// A figure of recall's.
    pub fn figure(mut self, what: &str, value: f64, unit: &str) -> Run {
        self.figures.push(figure(what, value, unit));
        self
    }

    /// A figure of the baseline's.
    pub fn base(mut self, what: &str, value: f64, unit: &str) -> Run {
        self.baseline.push(figure(what, value, unit));
        self
    }

    /// A ratio (recall's figure over the baseline's unless `what` says
    /// otherwise).
    pub fn ratio(mut self, what: &str, value: f64) -> Run {
        self.ratios.push(figure(what, value, ""));
        self
    }

    /// The producer's verdict on a target the checks cannot decide alone.
    pub fn holds(mut self, holds: bool) -> Run {
        self.holds = Some(holds);
        self
    }

    pub fn note(mut self, note: &str) -> Run {
        self.note = note.into();
        self
    }

    /// Whether `row`'s target held in this run: its checks, and the
    /// producer's verdict where it gave one; `None` where nothing decides.
    pub fn verdict(&self, row: &Row) -> Option<bool> {
        let mut out = self.holds;
        for c in &row.checks {
            let pass = c.passes(self)?;
            out = Some(out.unwrap_or(true) && pass);
        }
        out
    }
}

/// Records runs, or does nothing (and says why, once).
pub struct Recorder {
    dir: Option<PathBuf>,
    why_not: String,
    started: SystemTime,
    fresh: bool,
}

impl Recorder {
    /// For a bench target: records only when `cargo bench` runs it (it
    /// passes `--bench`), not when `cargo test` runs it as a test nor in
    /// criterion's `--test` and `--list` modes.
    pub fn bench() -> Recorder {
        let args: Vec<String> = std::env::args().collect();
        if args.iter().any(|a| a == "--test" || a == "--list") {
            Recorder::off("a --test or --list run")
        } else if args.iter().any(|a| a == "--bench") {
            Recorder::run()
        } else {
            Recorder::off("not run by `cargo bench`")
        }
    }

    /// For an example, a measuring test or the peer: records.
    pub fn run() -> Recorder {
        let setting = std::env::var("RECALL_BENCH_RESULTS").unwrap_or_default();
        if setting == "off" {
            return Recorder::off("RECALL_BENCH_RESULTS=off");
        }
        match results_dir() {
            Some(dir) => Recorder {
                dir: Some(dir),
                why_not: String::new(),
                started: SystemTime::now(),
                fresh: setting == "new",
            },
            None => Recorder::off("no benches/results folder above this crate"),
        }
    }

    /// Records nothing.
    pub fn off(why: &str) -> Recorder {
        Recorder {
            dir: None,
            why_not: why.into(),
            started: SystemTime::now(),
            fresh: false,
        }
    }

    pub fn is_on(&self) -> bool {
        self.dir.is_some()
    }

    /// Adds `run` (dated today, UTC) to `row`'s file, with the row's
    /// title, command, baseline and target as given here, and prints where.
    pub fn record(&self, row: &Row, mut run: Run) {
        let Some(dir) = &self.dir else {
            println!("results: row {} not recorded ({})", row.row, self.why_not);
            return;
        };
        run.date = chrono::Utc::now().format("%Y-%m-%d").to_string();
        run.holds = run.verdict(row);
        let path = dir.join(format!("{:02}.json", row.row));
        let mut runs: Vec<Run> = if self.fresh {
            Vec::new()
        } else {
            read_runs(&path)
                .into_iter()
                .filter(|r| r.date == run.date)
                .collect()
        };
        runs.push(run);
        if runs.len() > KEEP {
            runs.drain(..runs.len() - KEEP);
        }
        let n: u32 = runs.iter().map(|r| r.runs.max(1)).sum();
        match std::fs::write(&path, encode(row, &runs)) {
            Ok(()) => println!(
                "results: row {} recorded in benches/results/{:02}.json ({n} run{} of {})",
                row.row,
                row.row,
                if n == 1 { "" } else { "s" },
                runs[0].date
            ),
            Err(e) => println!("results: row {} not recorded: {e}", row.row),
        }
    }

    /// Criterion's estimate of a benchmark of this run, in ns: the slope
    /// (else the mean) from `<criterion dir>/<group>/<function>/new/estimates.json`,
    /// if criterion wrote it during this run.
    pub fn criterion_ns(&self, group: &str, function: &str) -> Option<f64> {
        let path = criterion_dir()?
            .join(group)
            .join(function)
            .join("new/estimates.json");
        let written = std::fs::metadata(&path).ok()?.modified().ok()?;
        if written < self.started {
            return None;
        }
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        let typical = v.get("slope").filter(|s| !s.is_null()).or(v.get("mean"))?;
        typical.get("point_estimate")?.as_f64()
    }
}

/// `benches/results` of the repository this crate is in (or above it).
fn results_dir() -> Option<PathBuf> {
    let mut at: &Path = Path::new(env!("CARGO_MANIFEST_DIR"));
    loop {
        let dir = at.join("benches/results");
        if dir.is_dir() && at.join("BENCHMARKS.md").is_file() {
            return Some(dir);
        }
        at = at.parent()?;
    }
}

/// Where criterion writes, as it decides: `CRITERION_HOME`, else the
/// cargo target folder's `criterion`.
fn criterion_dir() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(home.into());
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(PathBuf::from(target).join("criterion"));
    }
    Some(results_dir()?.parent()?.parent()?.join("target/criterion"))
}

fn read_runs(path: &Path) -> Vec<Run> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    let figures = |v: &Value| -> Vec<Figure> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|f| Figure {
                what: f["what"].as_str().unwrap_or_default().into(),
                value: f["value"].as_f64().unwrap_or(f64::NAN),
                unit: f["unit"].as_str().unwrap_or_default().into(),
            })
            .collect()
    };
    v["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Run {
            date: r["date"].as_str().unwrap_or_default().into(),
            figures: figures(&r["figures"]),
            baseline: figures(&r["baseline"]),
            ratios: figures(&r["ratios"]),
            holds: r["holds"].as_bool(),
            runs: r["runs"].as_u64().unwrap_or(1) as u32,
            note: r["note"].as_str().unwrap_or_default().into(),
        })
        .collect()
}

/// A JSON value laid out as `scripts/bench-table` and Python's
/// `json.dumps(indent=2, ensure_ascii=False)` lay it out, keys in order.
enum J {
    Obj(Vec<(&'static str, J)>),
    Arr(Vec<J>),
    Str(String),
    Num(f64),
    Bool(bool),
    Null,
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn write_json(out: &mut String, j: &J, depth: usize) {
    let pad = |out: &mut String, d: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(d));
    };
    match j {
        J::Obj(fields) if fields.is_empty() => out.push_str("{}"),
        J::Arr(items) if items.is_empty() => out.push_str("[]"),
        J::Obj(fields) => {
            out.push('{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                let _ = write!(out, "{}: ", Value::from(*k));
                write_json(out, v, depth + 1);
            }
            pad(out, depth);
            out.push('}');
        }
        J::Arr(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                write_json(out, v, depth + 1);
            }
            pad(out, depth);
            out.push(']');
        }
        J::Str(s) => out.push_str(&Value::from(s.as_str()).to_string()),
        J::Num(v) => out.push_str(&number(*v)),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Null => out.push_str("null"),
    }
}

fn encode(row: &Row, runs: &[Run]) -> String {
    let figures = |fs: &[Figure]| {
        J::Arr(
            fs.iter()
                .map(|f| {
                    let mut o = vec![("what", J::Str(f.what.clone())), ("value", J::Num(f.value))];
                    if !f.unit.is_empty() {
                        o.push(("unit", J::Str(f.unit.clone())));
                    }
                    J::Obj(o)
                })
                .collect(),
        )
    };
    let checks = row
        .checks
        .iter()
        .map(|c| {
            let mut o = vec![
                ("on", J::Str(c.on.as_str().into())),
                ("what", J::Str(c.what.clone())),
                ("op", J::Str(c.op.into())),
                ("value", J::Num(c.value)),
            ];
            if !c.unit.is_empty() {
                o.push(("unit", J::Str(c.unit.clone())));
            }
            J::Obj(o)
        })
        .collect();
    let runs = runs
        .iter()
        .map(|r| {
            let mut o = vec![("date", J::Str(r.date.clone()))];
            if r.runs > 1 {
                o.push(("runs", J::Num(r.runs as f64)));
            }
            o.extend([
                ("figures", figures(&r.figures)),
                ("baseline", figures(&r.baseline)),
                ("ratios", figures(&r.ratios)),
                ("holds", r.holds.map_or(J::Null, J::Bool)),
            ]);
            if !r.note.is_empty() {
                o.push(("note", J::Str(r.note.clone())));
            }
            J::Obj(o)
        })
        .collect();
    let file = J::Obj(vec![
        ("row", J::Num(row.row as f64)),
        ("title", J::Str(row.title.clone())),
        ("command", J::Str(row.command.clone())),
        ("baseline", J::Str(row.baseline.clone())),
        (
            "target",
            J::Obj(vec![
                ("text", J::Str(row.target.clone())),
                ("checks", J::Arr(checks)),
            ]),
        ),
        ("runs", J::Arr(runs)),
    ]);
    let mut out = String::new();
    write_json(&mut out, &file, 0);
    out.push('\n');
    out
}
