//! The `recall` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use recall::settings;
use recall::simulate::{self, RealTimeReflect, SimOptions};
use recall_actors::settings::ReflectorKind;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "recall", version, about = "Memory runtime for voice AI agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a JSONL conversation script in virtual time and print the
    /// resulting sessions, summaries, blocks and dead letters.
    Simulate {
        /// The script: one JSON event per line.
        script: PathBuf,
        /// Print one JSON object instead of the readable report.
        #[arg(long)]
        json: bool,
        /// A settings file layered over config/default.toml.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Keep the data in this folder (default: a temporary one).
        #[arg(long)]
        data: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("RECALL_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Simulate {
            script,
            json,
            config,
            data,
        } => {
            let settings = settings::load(config.as_deref())?;
            let text = std::fs::read_to_string(&script)
                .with_context(|| format!("cannot read script {}", script.display()))?;
            let events = simulate::parse_script(&text)
                .with_context(|| format!("invalid script {}", script.display()))?;
            // Virtual time: one thread, tokio's clock paused and advanced
            // from event to event and timer to timer.
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
                        let client =
                            recall::llm::OpenAiReflect::new(&settings.reflector.openai, key)?;
                        Some(Arc::new(RealTimeReflect::new(Arc::new(client))?)
                            as Arc<dyn recall::Reflect>)
                    }
                };
                let opts = SimOptions {
                    settings,
                    data_dir: data,
                    reflect,
                };
                anyhow::Ok(simulate::run(&events, opts).await?)
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_text());
            }
            Ok(())
        }
    }
}
