//! `recall simulate` and `recall eval`: runs in virtual time, without a
//! server.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use recall::settings;
use recall::simulate::{self, RealTimeReflect, SimOptions};
use recall_actors::settings::ReflectorKind;

use super::render::Output;

/// `recall simulate`.
#[derive(Args)]
pub struct SimulateArgs {
    /// The script: one JSON event per line.
    script: PathBuf,
    /// A settings file layered over config/default.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Keep the data in this folder (default: a temporary one).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Session ids are drawn from this seed: the same script and seed
    /// give the same output, byte for byte.
    #[arg(long, default_value_t = simulate::DEFAULT_SEED)]
    seed: u64,
}

/// With `--json`, one JSON object instead of the readable report.
pub fn simulate(a: SimulateArgs, out: Output) -> anyhow::Result<()> {
    let settings = settings::load(a.config.as_deref())?;
    super::init_logging("warn", settings.log.format);
    let text = std::fs::read_to_string(&a.script)
        .with_context(|| format!("cannot read script {}", a.script.display()))?;
    let events = simulate::parse_script(&text)
        .with_context(|| format!("invalid script {}", a.script.display()))?;
    // Virtual time: one thread, tokio's clock paused and advanced from
    // event to event and timer to timer.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("cannot start the tokio runtime")?;
    let report = rt.block_on(async {
        let reflect = match settings.reflector.kind {
            ReflectorKind::Extractive => None,
            ReflectorKind::Openai => {
                let key = std::env::var(&settings.reflector.openai.api_key_env).ok();
                let client = recall::llm::OpenAiReflect::new(&settings.reflector.openai, key)?;
                Some(Arc::new(RealTimeReflect::new(Arc::new(client))?) as Arc<dyn recall::Reflect>)
            }
        };
        let opts = SimOptions {
            settings,
            data_dir: a.data,
            reflect,
            seed: a.seed,
        };
        anyhow::Ok(simulate::run(&events, opts).await?)
    })?;
    out.show(&report, |r| print!("{}", r.to_text()))
}

/// `recall eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// dev, holdout (check it once, at the end) or all.
    #[arg(long, default_value = "dev")]
    split: String,
    /// Context budgets in tokens, comma-separated; the first is the
    /// headline one.
    #[arg(long, default_value = "2000,4000", value_delimiter = ',')]
    budgets: Vec<usize>,
    /// The generator's seed.
    #[arg(long, default_value_t = EVAL_SEED)]
    seed: u64,
    /// Only these personas (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    persona: Vec<String>,
    /// Also print each question missed at the first budget, with the
    /// answers expected and what the context held, tier by tier.
    #[arg(long)]
    misses: bool,
    /// Replay every user message in lower case, as a speech recognizer
    /// that gives no case writes it.
    #[arg(long)]
    lowercase_users: bool,
    /// Write each persona's calls as a `recall simulate` script into
    /// this folder, and stop.
    #[arg(long)]
    write_script: Option<PathBuf>,
    /// A settings file layered over config/default.toml (environment
    /// variables are not read: the figures are on the defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Run the dialogue split read from this folder (its `dev/` or
    /// `holdout/` part, by `--split`; e.g. `eval/dialogues`) instead of
    /// the generated personas.
    #[arg(
        long,
        conflicts_with_all = ["persona", "seed", "lowercase_users", "write_script"]
    )]
    dialogues: Option<PathBuf>,
    /// With `--dialogues`: only these conversations (comma-separated ids).
    #[arg(long, value_delimiter = ',', requires = "dialogues")]
    conversation: Vec<String>,
}

/// The generator's seed `recall eval` uses by default (the library's
/// `recall::eval::DEFAULT_SEED`, which a build without the evaluation has
/// not).
const EVAL_SEED: u64 = 20_260_105;

/// `recall eval` in a build without the evaluation: says how to get one.
#[cfg(not(feature = "eval"))]
pub fn eval(_: EvalArgs, _: Output) -> anyhow::Result<()> {
    anyhow::bail!(
        "this recall was built without the evaluation (the `eval` feature): run it as `cargo run --release --features eval -- eval …`"
    )
}

/// `recall eval`: see [`recall::eval`]. With `--json`, one JSON object
/// with every question's outcome.
#[cfg(feature = "eval")]
pub fn eval(a: EvalArgs, out: Output) -> anyhow::Result<()> {
    use recall::eval;
    let selection: eval::Selection = a.split.parse()?;
    if let Some(dir) = &a.write_script {
        let set = eval::dataset(selection, a.seed, &a.persona)?;
        for p in eval::write_scripts(&set, dir)? {
            println!("wrote {}", p.display());
        }
        return Ok(());
    }
    // The defaults (and a file), never the environment: figures on the defaults.
    let settings = settings::load_from(a.config.as_deref(), Default::default())?;
    super::init_logging("warn", settings.log.format);
    let started = std::time::Instant::now();
    if let Some(dir) = a.dialogues {
        let split = match selection {
            eval::Selection::Split(s) => s,
            eval::Selection::All => anyhow::bail!("--dialogues runs one split: dev or holdout"),
        };
        let report = eval::dialogue::run_blocking(eval::dialogue::DialogueOptions {
            dir,
            split,
            only: a.conversation,
            budgets: a.budgets,
            settings,
        })?;
        return show(
            &report,
            out,
            a.misses,
            started,
            eval::dialogue::DialogueReport::to_text,
            eval::dialogue::DialogueReport::misses_text,
        );
    }
    let report = eval::run_blocking(eval::EvalOptions {
        selection,
        budgets: a.budgets,
        seed: a.seed,
        settings,
        personas: a.persona,
        lowercase_users: a.lowercase_users,
    })?;
    show(
        &report,
        out,
        a.misses,
        started,
        eval::Report::to_text,
        eval::Report::misses_text,
    )
}

/// An evaluation's report: as text (with the misses when asked), or as
/// JSON; and how long it took, on stderr.
#[cfg(feature = "eval")]
fn show<R: serde::Serialize>(
    report: &R,
    out: Output,
    misses: bool,
    started: std::time::Instant,
    text: fn(&R) -> String,
    missed: fn(&R) -> String,
) -> anyhow::Result<()> {
    out.show(report, |r| {
        print!("{}", text(r));
        if misses {
            print!("\n{}", missed(r));
        }
    })?;
    eprintln!("evaluated in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
