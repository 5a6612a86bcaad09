//! `recall mcp`: the runtime as a Model Context Protocol server, over
//! stdio (a client starts it) or streamable HTTP (the API's server, its
//! MCP endpoint at `/mcp`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use recall::mcp::RecallMcp;
use recall::server::Access;
use recall::RuntimeBuilder;
use rmcp::ServiceExt;

/// How `recall mcp` speaks.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// JSON-RPC over the process's stdin and stdout: an MCP client starts
    /// `recall mcp` itself. Nothing else is written to stdout; the log
    /// goes to stderr.
    Stdio,
    /// Streamable HTTP at `/mcp`, beside the API, as `recall serve` runs
    /// it: behind its tokens and its host and origin rules.
    Http,
}

/// `recall mcp`.
#[derive(Args)]
pub struct McpArgs {
    #[arg(long, value_enum, default_value = "stdio")]
    transport: Transport,
    /// Address to listen on, with `--transport http` (default:
    /// server.addr, 127.0.0.1:7878).
    #[arg(long)]
    addr: Option<String>,
    /// Data folder.
    #[arg(long, default_value = "recall-data")]
    data: PathBuf,
    /// A settings file layered over config/default.toml.
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn mcp(a: McpArgs) -> anyhow::Result<()> {
    if a.transport == Transport::Http {
        return super::serve::serve(super::serve::ServeArgs {
            addr: a.addr,
            data: a.data,
            config: a.config,
        });
    }
    if a.addr.is_some() {
        anyhow::bail!("--addr is for --transport http; over stdio there is nothing to listen on");
    }
    let settings = recall::settings::load(a.config.as_deref())?;
    // (to stderr: stdout carries the protocol)
    super::init_logging(&settings.log.filter, settings.log.format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let data = a.data;
        let runtime = RuntimeBuilder::new(&data)
            .settings(settings)
            .start()
            .await
            .with_context(|| format!("cannot start the runtime on {}", data.display()))?;
        // The process is its client's: every agent is theirs to touch.
        let server = RecallMcp::new(runtime.clone(), Access::All)
            .serve(rmcp::transport::stdio())
            .await;
        match server {
            Ok(running) => {
                let token = running.cancellation_token();
                tokio::select! {
                    quit = running.waiting() => {
                        tracing::info!(?quit, "the MCP client went away");
                    }
                    () = super::serve::shutdown_signal() => token.cancel(),
                }
            }
            Err(e) => tracing::warn!(error = %e, "the MCP client did not initialize"),
        }
        let grace = std::time::Duration::from_secs(runtime.settings().server.shutdown_grace_secs);
        let report = runtime.shutdown_with_grace(grace).await?;
        tracing::info!(
            sessions_ended = report.sessions_ended,
            reflections_left = report.reflections_left,
            "runtime stopped"
        );
        anyhow::Ok(())
    })
}
