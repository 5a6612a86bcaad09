//! The `recall` command line: `serve`, `simulate`, and client commands
//! that talk to a running server.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use recall::client::{encode, Client};
use recall::server::{self, ServerConfig};
use recall::settings;
use recall::simulate::{self, RealTimeReflect, SimOptions};
use recall::RuntimeBuilder;
use recall_actors::settings::{LogFormat, ReflectorKind, Settings};
use serde_json::{json, Value};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "recall", version, about = "Memory runtime for voice AI agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the runtime behind the HTTP + WebSocket API.
    Serve {
        /// Address to listen on (default: server.addr, 127.0.0.1:7878).
        #[arg(long)]
        addr: Option<String>,
        /// Data folder.
        #[arg(long, default_value = "recall-data")]
        data: PathBuf,
        /// A settings file layered over config/default.toml.
        #[arg(long)]
        config: Option<PathBuf>,
    },
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
        /// Session ids are drawn from this seed: the same script and seed
        /// give the same output, byte for byte.
        #[arg(long, default_value_t = simulate::DEFAULT_SEED)]
        seed: u64,
    },
    /// Answer recall: replays a generated set of long conversations in
    /// virtual time (offline defaults), asks questions about them, and
    /// prints per category how often the context holds the answer, beside
    /// a recency window and BM25 over the raw turns with the same budget.
    Eval(EvalArgs),
    /// An agent's working context with a user (live sessions).
    Context {
        #[command(subcommand)]
        action: ContextCmd,
    },
    /// Stored sessions, newest first.
    Sessions {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        user: Option<String>,
        /// Only live sessions.
        #[arg(long)]
        live: bool,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        remote: Remote,
    },
    /// An agent's summaries, newest first.
    Summaries {
        #[arg(long)]
        agent: String,
        /// session, daily, weekly or topic.
        #[arg(long = "type")]
        kind: Option<String>,
        #[arg(long)]
        user: Option<String>,
        /// RFC 3339 time: summaries ending at or after it.
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339 time: summaries starting at or before it.
        #[arg(long)]
        until: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        remote: Remote,
    },
    /// Read or write an agent's memory blocks.
    Blocks {
        #[command(subcommand)]
        action: BlocksCmd,
    },
    /// Reflections that failed for good, and their retry.
    DeadLetters {
        #[command(subcommand)]
        action: DeadLettersCmd,
    },
    /// Facts about a user: list, share, make private, delete.
    Facts {
        #[command(subcommand)]
        action: FactsCmd,
    },
    /// An agent's topics: clusters of a user's conversations, each with a
    /// label and a topic summary.
    Topics {
        #[arg(long)]
        agent: String,
        /// One user's topics (all users' without it).
        #[arg(long)]
        user: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Re-derive an agent's session summaries, facts, rollups and topics
    /// from the stored turns with the current prompts and summarizer (new
    /// versions linked to the old). Shows progress; Ctrl-C stops it after
    /// the session in hand and running it again resumes.
    Replay {
        #[arg(long)]
        agent: String,
        /// Only this user's sessions.
        #[arg(long)]
        user: Option<String>,
        /// RFC 3339 time: only sessions started at or after it.
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Forget a user: their turns, sessions, summaries of every layer,
    /// facts, topics, blocks and search entries, with one agent or all.
    Forget {
        #[arg(long)]
        user: String,
        /// Only what the user shared with this agent (every agent without).
        #[arg(long)]
        agent: Option<String>,
        /// Confirms the deletion; it cannot be undone.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Search an agent's summaries and facts (keywords and meaning).
    Search {
        /// What to look for, e.g. "Google interview".
        query: String,
        #[arg(long)]
        agent: String,
        /// Only what this user may see: their items and facts others shared.
        #[arg(long)]
        user: Option<String>,
        /// session, daily, weekly, topic or fact (comma-separated for several).
        #[arg(long = "type")]
        kind: Option<String>,
        /// RFC 3339 time: items reaching it or later.
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339 time: items starting at or before it.
        #[arg(long)]
        until: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
enum FactsCmd {
    /// The facts a user may see: their own and the shared ones.
    List {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Share a fact with the agent's other users (as its owner).
    Share {
        fact_id: String,
        /// The acting user: the fact's owner.
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Make a shared fact private again (as its owner).
    Unshare {
        fact_id: String,
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Delete a fact (as its owner).
    Delete {
        fact_id: String,
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
}

/// Where the server is.
#[derive(Args, Clone)]
struct Remote {
    /// The server's base URL.
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
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum ContextCmd {
    /// Live sessions (turns, token estimate, time since the last turn) and
    /// the context the agent's LLM would get now, tier by tier.
    Show {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
        /// The message the context is assembled for.
        #[arg(long, default_value = "")]
        message: String,
        /// Token budget of the assembled context.
        #[arg(long, default_value_t = 8000)]
        budget: usize,
        #[command(flatten)]
        remote: Remote,
    },
    /// End the live sessions (reason `cleared`): the next turn starts fresh.
    Clear {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
enum BlocksCmd {
    /// One block, or all of the agent's.
    Get {
        #[arg(long)]
        agent: String,
        label: Option<String>,
        /// The blocks as this user's context shows them (their own
        /// `background_context`) instead of the agent's.
        #[arg(long)]
        user: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Set a block (`-` reads the value from standard input).
    Set {
        #[arg(long)]
        agent: String,
        label: String,
        value: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Subcommand)]
enum DeadLettersCmd {
    List {
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Queue a dead letter's reflection again.
    Retry {
        /// The session id of the dead letter.
        session_id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

fn init_logging(filter: &str, format: LogFormat) {
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

fn main() -> ExitCode {
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
        Command::Serve { addr, data, config } => {
            let settings = settings::load(config.as_deref())?;
            init_logging(&settings.log.filter, settings.log.format);
            serve(settings, addr, data)
        }
        Command::Simulate {
            script,
            json,
            config,
            data,
            seed,
        } => {
            let settings = settings::load(config.as_deref())?;
            init_logging("warn", settings.log.format);
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
                    seed,
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
        Command::Eval(args) => eval(args),
        command => {
            init_logging("warn", LogFormat::Human);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the tokio runtime")?;
            rt.block_on(client_command(command))
        }
    }
}

#[derive(clap::Args)]
struct EvalArgs {
    /// dev, holdout (check it once, at the end) or all.
    #[arg(long, default_value = "dev")]
    split: String,
    /// Context budgets in tokens, comma-separated; the first is the
    /// headline one.
    #[arg(long, default_value = "2000,4000", value_delimiter = ',')]
    budgets: Vec<usize>,
    /// The generator's seed.
    #[arg(long, default_value_t = recall::eval::DEFAULT_SEED)]
    seed: u64,
    /// Only these personas (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    persona: Vec<String>,
    /// Print one JSON object (with every question's outcome).
    #[arg(long)]
    json: bool,
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
}

/// `recall eval`: see [`recall::eval`].
fn eval(a: EvalArgs) -> anyhow::Result<()> {
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
    init_logging("warn", settings.log.format);
    let started = std::time::Instant::now();
    let report = eval::run_blocking(eval::EvalOptions {
        selection,
        budgets: a.budgets,
        seed: a.seed,
        settings,
        personas: a.persona,
        lowercase_users: a.lowercase_users,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
        if a.misses {
            print!("\n{}", report.misses_text());
        }
    }
    eprintln!("evaluated in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn serve(settings: Settings, addr: Option<String>, data: PathBuf) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let config = ServerConfig::from_settings(&settings);
        let addr = addr.unwrap_or_else(|| settings.server.addr.clone());
        // Checked before the data folder is opened: nothing to undo.
        let listener = server::bind(&addr, &config).await?;
        let runtime = RuntimeBuilder::new(&data)
            .settings(settings)
            .start()
            .await
            .with_context(|| format!("cannot start the runtime on {}", data.display()))?;
        let local = listener.local_addr()?;
        println!(
            "recall listening on http://{local} (data in {})",
            data.display()
        );
        let report = server::serve(listener, runtime, config, shutdown_signal()).await?;
        println!(
            "recall stopped: {} live session(s) ended, {} reflection(s) left queued for the next start",
            report.sessions_ended, report.reflections_left
        );
        anyhow::Ok(())
    })
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    // A second Ctrl-C stops at once; what is not flushed is recovered at
    // the next start.
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("second interrupt: stopping now");
            std::process::exit(130);
        }
    });
}

fn client(remote: &Remote) -> Client {
    // The one place the token's variable is read: the binary.
    Client::new(&remote.url, std::env::var(&remote.token_env).ok())
}

async fn client_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Context { action } => match action {
            ContextCmd::Show {
                agent,
                user,
                message,
                budget,
                remote,
            } => {
                let c = client(&remote);
                let v = c
                    .get(&format!(
                        "/v1/agents/{}/users/{}/context",
                        encode(&agent),
                        encode(&user)
                    ))
                    .await?;
                let assembled = c
                    .get(&format!(
                        "/v1/agents/{}/context?user_id={}&message={}&budget_tokens={budget}",
                        encode(&agent),
                        encode(&user),
                        encode(&message)
                    ))
                    .await?;
                if remote.json {
                    return print_json(&json!({"live": v, "assembled": assembled}));
                }
                let sessions = items(&v["sessions"]);
                if sessions.is_empty() {
                    println!("no live session for agent {agent} with user {user}");
                } else {
                    let rows = sessions
                        .iter()
                        .map(|s| {
                            vec![
                                text(&s["session"]["session_id"]),
                                text(&s["session"]["connection_id"]),
                                text(&s["turn_count"]),
                                text(&s["token_estimate"]),
                                idle(&s["idle_secs"]),
                                text(&s["session"]["started_at"]),
                            ]
                        })
                        .collect();
                    table(
                        &[
                            "SESSION",
                            "CONNECTION",
                            "TURNS",
                            "TOKENS~",
                            "SINCE LAST",
                            "STARTED",
                        ],
                        rows,
                    );
                }
                println!();
                println!(
                    "assembled context: {} of {} tokens",
                    text(&assembled["total_tokens"]),
                    text(&assembled["budget_tokens"])
                );
                let tiers = items(&assembled["tiers"]);
                let rows = tiers
                    .iter()
                    .map(|t| {
                        vec![
                            text(&t["tier"]),
                            t["items"].as_array().map(Vec::len).unwrap_or(0).to_string(),
                            text(&t["tokens"]),
                        ]
                    })
                    .collect();
                table(&["TIER", "ITEMS", "TOKENS"], rows);
                let trimmed = assembled["trimmed"].as_array().map(Vec::len).unwrap_or(0);
                if trimmed > 0 {
                    println!("{trimmed} item(s) trimmed to fit the budget");
                }
                for m in items(&assembled["messages"]) {
                    println!();
                    println!("--- {} ---", text(&m["role"]));
                    println!("{}", text(&m["content"]));
                }
                Ok(())
            }
            ContextCmd::Clear {
                agent,
                user,
                remote,
            } => {
                let v = client(&remote)
                    .delete(&format!(
                        "/v1/agents/{}/users/{}/context",
                        encode(&agent),
                        encode(&user)
                    ))
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                let ended = v["ended"].as_array().map(Vec::len).unwrap_or(0);
                println!("cleared: {ended} live session(s) ended with reason cleared");
                Ok(())
            }
        },
        Command::Sessions {
            agent,
            user,
            live,
            limit,
            remote,
        } => {
            let mut q = vec![format!("limit={limit}")];
            if let Some(a) = &agent {
                q.push(format!("agent_id={}", encode(a)));
            }
            if let Some(u) = &user {
                q.push(format!("user_id={}", encode(u)));
            }
            if live {
                q.push("live=true".into());
            }
            let v = client(&remote)
                .get(&format!("/v1/sessions?{}", q.join("&")))
                .await?;
            if remote.json {
                return print_json(&v);
            }
            let rows = items(&v["sessions"])
                .iter()
                .map(|s| {
                    vec![
                        text(&s["session_id"]),
                        text(&s["agent_id"]),
                        text(&s["user_id"]),
                        text(&s["connection_id"]),
                        text(&s["started_at"]),
                        if s["live"] == true {
                            "live".to_string()
                        } else {
                            text(&s["end_reason"])
                        },
                        text(&s["turn_count"]),
                    ]
                })
                .collect();
            table(
                &[
                    "SESSION",
                    "AGENT",
                    "USER",
                    "CONNECTION",
                    "STARTED",
                    "STATE",
                    "TURNS",
                ],
                rows,
            );
            Ok(())
        }
        Command::Summaries {
            agent,
            kind,
            user,
            since,
            until,
            limit,
            remote,
        } => {
            let q = query_string(
                vec![format!("limit={limit}")],
                [
                    ("type", kind),
                    ("user_id", user),
                    ("since", since),
                    ("until", until),
                ],
            );
            let v = client(&remote)
                .get(&format!("/v1/agents/{}/summaries?{q}", encode(&agent)))
                .await?;
            if remote.json {
                return print_json(&v);
            }
            let rows = items(&v["summaries"])
                .iter()
                .map(|s| {
                    vec![
                        text(&s["summary_id"]),
                        text(&s["summary_type"]),
                        text(&s["user_id"]),
                        text(&s["period_end"]),
                        s["topics"]
                            .as_array()
                            .map(|t| t.iter().map(text).collect::<Vec<_>>().join(", "))
                            .unwrap_or_default(),
                        shorten(&text(&s["summary_text"]), 60),
                    ]
                })
                .collect();
            table(
                &["SUMMARY", "TYPE", "USER", "PERIOD END", "TOPICS", "TEXT"],
                rows,
            );
            Ok(())
        }
        Command::Blocks { action } => match action {
            BlocksCmd::Get {
                agent,
                label,
                user,
                remote,
            } => {
                let c = client(&remote);
                let one = |l: &str| {
                    let mut path = format!("/v1/agents/{}/blocks/{}", encode(&agent), encode(l));
                    if let Some(u) = &user {
                        path.push_str(&format!("?user_id={}", encode(u)));
                    }
                    path
                };
                let v = match (&label, &user) {
                    (Some(l), _) => c.get(&one(l)).await?,
                    (None, None) => {
                        c.get(&format!("/v1/agents/{}/blocks", encode(&agent)))
                            .await?
                    }
                    (None, Some(_)) => {
                        let mut blocks = Vec::new();
                        for l in recall::BlockLabel::ALL {
                            blocks.push(c.get(&one(l.as_str())).await?);
                        }
                        json!({ "blocks": blocks })
                    }
                };
                if remote.json {
                    return print_json(&v);
                }
                let blocks = match v.get("blocks").and_then(Value::as_array) {
                    Some(all) => all.clone(),
                    None => vec![v],
                };
                for b in blocks {
                    let value = b["value"].as_str().unwrap_or_default();
                    println!(
                        "[{}] {}/{} characters, updated {}",
                        text(&b["label"]),
                        value.chars().count(),
                        text(&b["limit"]),
                        text(&b["updated_at"])
                    );
                    if !value.is_empty() {
                        println!("{value}");
                    }
                    println!();
                }
                Ok(())
            }
            BlocksCmd::Set {
                agent,
                label,
                value,
                remote,
            } => {
                let value = if value == "-" {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .context("cannot read the value from standard input")?;
                    s
                } else {
                    value
                };
                let v = client(&remote)
                    .put(
                        &format!("/v1/agents/{}/blocks/{}", encode(&agent), encode(&label)),
                        &json!({ "value": value }),
                    )
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                println!(
                    "{} set: {}/{} characters",
                    text(&v["label"]),
                    value.chars().count(),
                    text(&v["limit"])
                );
                Ok(())
            }
        },
        Command::DeadLetters { action } => match action {
            DeadLettersCmd::List { agent, remote } => {
                let v = client(&remote)
                    .get(&format!("/v1/agents/{}/dead-letters", encode(&agent)))
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                let rows = items(&v["dead_letters"])
                    .iter()
                    .map(|d| {
                        vec![
                            text(&d["session_id"]),
                            text(&d["user_id"]),
                            text(&d["attempts"]),
                            text(&d["error_kind"]),
                            text(&d["failed_at"]),
                            shorten(&text(&d["error"]), 60),
                        ]
                    })
                    .collect();
                table(
                    &["SESSION", "USER", "ATTEMPTS", "KIND", "FAILED AT", "ERROR"],
                    rows,
                );
                Ok(())
            }
            DeadLettersCmd::Retry { session_id, remote } => {
                let v = client(&remote)
                    .post(
                        &format!("/v1/dead-letters/{}/retry", encode(&session_id)),
                        &json!({}),
                    )
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                println!("requeued the reflection of session {session_id}");
                Ok(())
            }
        },
        Command::Replay {
            agent,
            user,
            since,
            remote,
        } => replay(&remote, &agent, user, since).await,
        Command::Forget {
            user,
            agent,
            yes,
            remote,
        } => {
            if !yes {
                let scope = agent
                    .as_deref()
                    .map_or("every agent".to_string(), |a| format!("agent {a:?}"));
                anyhow::bail!(
                    "this deletes everything user {user:?} shared with {scope}, for good; add --yes to go ahead"
                );
            }
            let query = query_string(Vec::new(), [("agent_id", agent)]);
            let mut path = format!("/v1/users/{}", encode(&user));
            if !query.is_empty() {
                path = format!("{path}?{query}");
            }
            let v = client(&remote).delete(&path).await?;
            if remote.json {
                return print_json(&v);
            }
            let rows = [
                "sessions",
                "turns",
                "session_summaries",
                "daily_summaries",
                "weekly_summaries",
                "topic_summaries",
                "facts",
                "topics",
                "blocks",
                "reflection_jobs",
                "dead_letters",
                "vectors",
                "inbox_rows",
            ]
            .iter()
            .map(|k| vec![k.replace('_', " "), text(&v[*k])])
            .collect();
            table(&["REMOVED", "COUNT"], rows);
            let agents: Vec<String> = items(&v["agents"]).iter().map(text).collect();
            println!(
                "background context rebuilt for: {}",
                if agents.is_empty() {
                    "-".to_string()
                } else {
                    agents.join(", ")
                }
            );
            Ok(())
        }
        Command::Topics {
            agent,
            user,
            remote,
        } => {
            let mut path = format!("/v1/agents/{}/topics", encode(&agent));
            if let Some(u) = &user {
                path.push_str(&format!("?user_id={}", encode(u)));
            }
            let v = client(&remote).get(&path).await?;
            if remote.json {
                return print_json(&v);
            }
            let rows = items(&v["topics"])
                .iter()
                .map(|t| {
                    vec![
                        text(&t["topic_id"]),
                        text(&t["user_id"]),
                        text(&t["label"]),
                        text(&t["member_count"]),
                        text(&t["last_active"]),
                        shorten(&text(&t["summary"]), 60),
                    ]
                })
                .collect();
            table(
                &[
                    "TOPIC",
                    "USER",
                    "LABEL",
                    "MEMBERS",
                    "LAST ACTIVE",
                    "SUMMARY",
                ],
                rows,
            );
            Ok(())
        }
        Command::Search {
            query,
            agent,
            user,
            kind,
            since,
            until,
            limit,
            remote,
        } => {
            let q = query_string(
                vec![format!("q={}", encode(&query)), format!("limit={limit}")],
                [
                    ("type", kind),
                    ("user_id", user),
                    ("since", since),
                    ("until", until),
                ],
            );
            let v = client(&remote)
                .get(&format!("/v1/agents/{}/search?{q}", encode(&agent)))
                .await?;
            if remote.json {
                return print_json(&v);
            }
            let rows = items(&v["results"])
                .iter()
                .map(|r| {
                    let body = text(&r["text"]);
                    // The archival text's last line before the closing tag
                    // is the summary or fact itself.
                    let gist = body
                        .lines()
                        .rev()
                        .nth(1)
                        .unwrap_or(body.as_str())
                        .to_string();
                    vec![
                        format!("{:.2}", r["score"].as_f64().unwrap_or(0.0)),
                        text(&r["type"]),
                        text(&r["user_id"]),
                        text(&r["period_end"]),
                        text(&r["id"]),
                        shorten(&gist, 60),
                    ]
                })
                .collect();
            table(&["SCORE", "TYPE", "USER", "WHEN", "ID", "TEXT"], rows);
            Ok(())
        }
        Command::Facts { action } => match action {
            FactsCmd::List {
                agent,
                user,
                remote,
            } => {
                let v = client(&remote)
                    .get(&format!(
                        "/v1/agents/{}/facts?user_id={}",
                        encode(&agent),
                        encode(&user)
                    ))
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                let rows = items(&v["facts"])
                    .iter()
                    .map(|f| {
                        vec![
                            text(&f["fact_id"]),
                            text(&f["user_id"]),
                            text(&f["category"]),
                            text(&f["visibility"]),
                            if f["conflicts_with"].is_string() {
                                "conflict".to_string()
                            } else {
                                String::new()
                            },
                            shorten(&text(&f["content"]), 60),
                        ]
                    })
                    .collect();
                table(
                    &["FACT", "USER", "CATEGORY", "VISIBILITY", "FLAG", "CONTENT"],
                    rows,
                );
                Ok(())
            }
            FactsCmd::Share {
                fact_id,
                user,
                remote,
            } => set_visibility(&remote, &fact_id, &user, "shared").await,
            FactsCmd::Unshare {
                fact_id,
                user,
                remote,
            } => set_visibility(&remote, &fact_id, &user, "private").await,
            FactsCmd::Delete {
                fact_id,
                user,
                remote,
            } => {
                let v = client(&remote)
                    .delete(&format!(
                        "/v1/facts/{}?user_id={}",
                        encode(&fact_id),
                        encode(&user)
                    ))
                    .await?;
                if remote.json {
                    return print_json(&v);
                }
                println!("deleted fact {fact_id}: {}", text(&v["deleted"]["content"]));
                Ok(())
            }
        },
        Command::Serve { .. } | Command::Simulate { .. } | Command::Eval { .. } => {
            unreachable!("handled in run")
        }
    }
}

async fn set_visibility(
    remote: &Remote,
    fact_id: &str,
    user: &str,
    visibility: &str,
) -> anyhow::Result<()> {
    let v = client(remote)
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/facts/{}", encode(fact_id)),
            Some(&json!({ "user_id": user, "visibility": visibility })),
        )
        .await?;
    if remote.json {
        return print_json(&v);
    }
    println!(
        "fact {fact_id} is now {visibility}: {}",
        text(&v["content"])
    );
    Ok(())
}

fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// `recall replay`: streams the server's progress into a progress bar (on a
/// terminal), then prints what changed.
async fn replay(
    remote: &Remote,
    agent: &str,
    user: Option<String>,
    since: Option<String>,
) -> anyhow::Result<()> {
    let mut body = serde_json::json!({});
    if let Some(u) = user {
        body["user_id"] = Value::String(u);
    }
    if let Some(s) = since {
        let t: chrono::DateTime<chrono::Utc> = s
            .parse()
            .map_err(|e| anyhow::anyhow!("--since {s:?} is not an RFC 3339 time: {e}"))?;
        body["since"] = serde_json::json!(t);
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} sessions  {msg}  [{elapsed_precise}, {eta} left]",
        )
        .expect("a valid template"),
    );
    let mut last = Value::Null;
    client(remote)
        .post_lines(
            &format!("/v1/agents/{}/replay?stream=true", encode(agent)),
            &body,
            |line| match line["type"].as_str() {
                Some("progress") => {
                    bar.set_length(line["total"].as_u64().unwrap_or(0));
                    bar.set_position(line["done"].as_u64().unwrap_or(0));
                    bar.set_message(format!(
                        "{} changed, {} unchanged, {} failed",
                        line["changed"], line["unchanged"], line["failed"]
                    ));
                }
                _ => last = line,
            },
        )
        .await?;
    bar.finish_and_clear();
    match last["type"].as_str() {
        Some("report") => {}
        Some("error") => anyhow::bail!(
            "{}: {}",
            text(&last["error"]["code"]),
            text(&last["error"]["message"])
        ),
        _ => anyhow::bail!("the server closed the replay without a report"),
    }
    let report = &last["report"];
    if remote.json {
        return print_json(report);
    }
    let p = &report["progress"];
    println!(
        "{} sessions: {} changed, {} unchanged, {} failed, {} without turns{}",
        p["total"],
        p["changed"],
        p["unchanged"],
        p["failed"],
        report["without_turns"],
        if report["interrupted"] == Value::Bool(true) {
            " (interrupted: run it again to resume)"
        } else {
            ""
        }
    );
    let rows = items(&report["changed"])
        .iter()
        .map(|c| {
            vec![
                text(&c["session_id"]),
                text(&c["user_id"]),
                shorten(&text(&c["old_text"]), 40),
                shorten(&text(&c["new_text"]), 40),
                format!("+{}", items(&c["facts_added"]).len()),
            ]
        })
        .collect();
    table(&["SESSION", "USER", "WAS", "NOW", "NEW FACTS"], rows);
    if let Some(r) = report["rollups"].as_object() {
        println!(
            "rollups revised: {}, topics updated: {}",
            r.get("revised").unwrap_or(&Value::Null),
            r.get("topics_updated").unwrap_or(&Value::Null)
        );
    }
    for f in items(&report["failed"]) {
        eprintln!("failed: {} {}", text(&f["session_id"]), text(&f["error"]));
    }
    Ok(())
}

/// `fixed` then the optional parameters that are set, URL-encoded.
fn query_string<const N: usize>(
    mut fixed: Vec<String>,
    optional: [(&str, Option<String>); N],
) -> String {
    for (k, v) in optional {
        if let Some(v) = v {
            fixed.push(format!("{k}={}", encode(&v)));
        }
    }
    fixed.join("&")
}

/// The elements of a JSON array (none if it is not one).
fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// A JSON value as a table cell.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn idle(v: &Value) -> String {
    match v.as_f64() {
        Some(s) if s < 60.0 => format!("{s:.0} s"),
        Some(s) if s < 3600.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
        None => "-".into(),
    }
}

fn shorten(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max - 1).collect::<String>())
    }
}

fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    if rows.is_empty() {
        println!("(none)");
        return;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}
