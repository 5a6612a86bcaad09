//! The `recall` command line: `serve`, `mcp`, `migrate`, `export`, `import`,
//! `simulate` and `eval` run here;
//! the other commands are clients of a running server.
//!
//! # Layout
//!
//! - `serve`: `recall serve`.
//! - `mcp`: `recall mcp`.
//! - `offline`: `recall simulate` and `recall eval`.
//! - `sessions`: `recall sessions` and `recall context`.
//! - `memory`: `recall summaries`, `blocks`, `facts`, `topics`, `search`.
//! - `admin`: `recall dead-letters`, `replay`, `forget`.
//! - `transfer`: `recall export` and `recall import`.
//! - `render`: JSON or a table.

mod admin;
mod mcp;
mod memory;
mod offline;
mod render;
mod serve;
mod sessions;
mod transfer;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use recall::api::Client;
use recall_actors::settings::LogFormat;
use tracing_subscriber::EnvFilter;

use render::Output;

#[derive(Parser)]
#[command(name = "recall", version, about = "Memory runtime for voice AI agents")]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Args)]
struct Global {
    /// The server's base URL (for the client commands).
    #[arg(
        long,
        env = "RECALL_URL",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    url: String,
    /// Name of the environment variable holding the bearer token.
    #[arg(long, default_value = "RECALL_TOKEN", global = true)]
    token_env: String,
    /// Print JSON instead of a table or a report.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the runtime behind the HTTP + WebSocket API.
    Serve(serve::ServeArgs),
    /// Serve the memory as a Model Context Protocol server: over stdio
    /// (an MCP client starts `recall mcp`), or over streamable HTTP at
    /// /mcp beside the API (`--transport http`, as `recall serve`).
    Mcp(mcp::McpArgs),
    /// Apply the PostgreSQL migrations this build has (store.kind =
    /// "postgres") without serving; `serve` applies them too.
    Migrate(serve::MigrateArgs),
    /// Write every record of a store (the sled data folder, or the
    /// PostgreSQL schema of store.kind = "postgres") to a file of JSON
    /// lines, to import into another store.
    Export(transfer::ExportArgs),
    /// Store an export's records into an empty store (a new data folder,
    /// or a PostgreSQL schema that holds none), all or nothing.
    Import(transfer::ImportArgs),
    /// Replay a JSONL conversation script in virtual time and print the
    /// resulting sessions, summaries, blocks and dead letters.
    Simulate(offline::SimulateArgs),
    /// Answer recall: replays a generated set of long conversations in
    /// virtual time (offline defaults), asks questions about them, and
    /// prints per category how often the context holds the answer, beside
    /// a recency window and BM25 over the raw turns with the same budget.
    Eval(offline::EvalArgs),
    /// An agent's working context with a user (live sessions).
    Context {
        #[command(subcommand)]
        action: sessions::ContextCmd,
    },
    /// Stored sessions, newest first.
    Sessions(sessions::SessionsArgs),
    /// An agent's summaries, newest first.
    Summaries(memory::SummariesArgs),
    /// Read or write an agent's memory blocks.
    Blocks {
        #[command(subcommand)]
        action: memory::BlocksCmd,
    },
    /// Reflections that failed for good, and their retry.
    DeadLetters {
        #[command(subcommand)]
        action: admin::DeadLettersCmd,
    },
    /// Facts about a user: list, share, make private, delete.
    Facts {
        #[command(subcommand)]
        action: memory::FactsCmd,
    },
    /// An agent's topics: clusters of a user's conversations, each with a
    /// label and a topic summary.
    Topics(memory::TopicsArgs),
    /// Re-derive an agent's session summaries, facts, rollups and topics
    /// from the stored turns with the current prompts and summarizer (new
    /// versions linked to the old). Shows progress; Ctrl-C stops it after
    /// the session in hand and running it again resumes.
    Replay(admin::ReplayArgs),
    /// Forget a user: their turns, sessions, summaries of every layer,
    /// facts, topics, blocks and search entries, with one agent or all.
    Forget(admin::ForgetArgs),
    /// Search an agent's summaries and facts (keywords and meaning).
    Search(memory::SearchArgs),
}

/// An RFC 3339 time argument.
fn parse_time(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    s.parse()
        .map_err(|e| format!("not an RFC 3339 time (like 2026-03-02T10:00:00Z): {e}"))
}

pub fn init_logging(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_env("RECALL_LOG").unwrap_or_else(|_| EnvFilter::new(filter));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let out = Output {
        json: cli.global.json,
    };
    let command = match cli.command {
        Command::Serve(a) => return serve::serve(a),
        Command::Mcp(a) => return mcp::mcp(a),
        Command::Migrate(a) => return serve::migrate(a, &mut std::io::stdout()),
        Command::Export(a) => return transfer::export(a),
        Command::Import(a) => return transfer::import(a, &mut std::io::stdout()),
        Command::Simulate(a) => return offline::simulate(a, out),
        Command::Eval(a) => return offline::eval(a, out),
        client_command => client_command,
    };
    init_logging("warn", LogFormat::Human);
    // The one place the token's variable is read: the binary.
    let token = std::env::var(&cli.global.token_env).ok();
    let c = Client::new(&cli.global.url, token)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async move {
        match command {
            Command::Context { action } => sessions::context(action, &c, out).await,
            Command::Sessions(a) => sessions::sessions(a, &c, out).await,
            Command::Summaries(a) => memory::summaries(a, &c, out).await,
            Command::Blocks { action } => memory::blocks(action, &c, out).await,
            Command::Facts { action } => memory::facts(action, &c, out).await,
            Command::Topics(a) => memory::topics(a, &c, out).await,
            Command::Search(a) => memory::search(a, &c, out).await,
            Command::DeadLetters { action } => admin::dead_letters(action, &c, out).await,
            Command::Replay(a) => admin::replay(a, &c, out).await,
            Command::Forget(a) => admin::forget(a, &c, out).await,
            Command::Serve(_)
            | Command::Mcp(_)
            | Command::Migrate(_)
            | Command::Export(_)
            | Command::Import(_)
            | Command::Simulate(_)
            | Command::Eval(_) => unreachable!("run above"),
        }
    })
}
