//! `recall serve`: the runtime behind the HTTP + WebSocket API.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use recall::engine::settings::StoreKind;
use recall::engine::store::{PgBackend, PG_SCHEMA_VERSION};
use recall::server::{self, ServerConfig};
use recall::RuntimeBuilder;

/// `recall serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on (default: server.addr, 127.0.0.1:7878).
    #[arg(long)]
    pub(super) addr: Option<String>,
    /// Data folder.
    #[arg(long, default_value = "recall-data")]
    pub(super) data: PathBuf,
    /// A settings file layered over config/default.toml.
    #[arg(long)]
    pub(super) config: Option<PathBuf>,
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let settings = recall::settings::load(a.config.as_deref())?;
    super::init_logging(&settings.log.filter, settings.log.format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let config = ServerConfig::from_settings(&settings);
        let addr = a.addr.unwrap_or_else(|| settings.server.addr.clone());
        // Checked before the data folder is opened: nothing to undo.
        let listener = server::bind(&addr, &config).await?;
        let data = a.data;
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

/// `recall migrate`.
#[derive(Args)]
pub struct MigrateArgs {
    /// A settings file layered over config/default.toml, with
    /// store.kind = "postgres" and store.postgres.url.
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn migrate(a: MigrateArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let settings = recall::settings::load(a.config.as_deref())?;
    super::init_logging("warn", settings.log.format);
    if settings.store.kind != StoreKind::Postgres {
        anyhow::bail!(
            "store.kind is \"sled\": there is nothing to migrate (a sled data folder is checked when it is opened); set store.kind = \"postgres\" and store.postgres.url"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async {
        let pg = PgBackend::open(&settings.store.postgres).await?;
        let applied = pg.migrate().await?;
        writeln!(
            out,
            "schema `{}`: {applied} migration(s) applied; at version {} (this build knows up to {PG_SCHEMA_VERSION})",
            pg.schema(),
            pg.schema_version().await?,
        )?;
        anyhow::Ok(())
    })
}

/// Ctrl-C or SIGTERM.
pub(super) async fn shutdown_signal() {
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
