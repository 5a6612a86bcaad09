//! `recall export` and `recall import`: every record of one store as JSON
//! lines, and those lines into an empty store, of either backend (a sled
//! data folder into PostgreSQL when one node is outgrown, and back).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use recall::engine::settings::{Settings, StoreKind};
use recall::engine::store::transfer::{
    Counts, Damaged, ExportReader, ExportWriter, Honour, Record, Sink, TransferError,
};
use recall::engine::store::{import_folder, ForgetEntry, PgBackend, Trees, PG_SCHEMA_VERSION};

/// Which store the settings and `--data` name.
#[derive(Args)]
pub struct StoreArgs {
    /// Data folder (store.kind = "sled", the default).
    #[arg(long, default_value = "recall-data")]
    data: PathBuf,
    /// A settings file layered over config/default.toml; with
    /// store.kind = "postgres", the schema of store.postgres is the store.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `recall export`.
#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The file to write (put in place once complete); `-` for standard
    /// output.
    #[arg(long, short)]
    out: PathBuf,
    /// Leave out records that do not decode (each is named on standard
    /// error) instead of stopping at the first.
    #[arg(long)]
    skip_damaged: bool,
    /// Write only the forget log (no user's records): what `recall import
    /// --forgets` needs to keep a backup from bringing forgotten users
    /// back.
    #[arg(long)]
    forgets_only: bool,
}

/// `recall import`.
#[derive(Args)]
pub struct ImportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The export to import; `-` for standard input.
    file: PathBuf,
    /// Another export of the same memory, taken later (a whole one, or
    /// one made with `--forgets-only`): the users its forget log forgot
    /// after FILE was taken are left out of the import, and those forgets
    /// are logged in the store imported into. Repeatable.
    #[arg(long = "forgets", value_name = "EXPORT")]
    forgets: Vec<PathBuf>,
}

/// The forget log of the export at `path`, read whole (its end line
/// checked like an import's).
fn forget_log_of(path: &Path) -> anyhow::Result<Vec<ForgetEntry>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = ExportReader::new(BufReader::new(file))
        .with_context(|| format!("{} is not an export recall can read", path.display()))?;
    // An older export has no forget log: it would honour nothing, silently.
    let version = reader.header().version;
    if version < 3 {
        anyhow::bail!(
            "{} is a version {version} export, which carries no forget log (version 3 does): give --forgets a newer export",
            path.display()
        );
    }
    let mut out = Vec::new();
    for record in reader {
        if let Record::Forget(e) =
            record.with_context(|| format!("cannot read the forget log of {}", path.display()))?
        {
            out.push(e);
        }
    }
    Ok(out)
}

fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// "3 agent, 120 turn, …".
fn counted(counts: &Counts) -> String {
    counts
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The store an export reads or an import writes, as a message names it.
fn described(settings: &Settings, data: &Path) -> String {
    match settings.store.kind {
        StoreKind::Sled => format!("data folder {}", data.display()),
        StoreKind::Postgres => format!("PostgreSQL schema `{}`", settings.store.postgres.schema),
    }
}

/// Connects to the configured schema for an export: it must be at this
/// build's version (an export changes nothing, migrations included).
async fn pg_for_export(settings: &Settings) -> anyhow::Result<PgBackend> {
    let pg = PgBackend::open(&settings.store.postgres).await?;
    let version = pg.schema_version().await?;
    if version == 0 {
        anyhow::bail!(
            "PostgreSQL schema `{}` holds no recall records (no migrations were applied to it)",
            pg.schema()
        );
    }
    if version != PG_SCHEMA_VERSION {
        anyhow::bail!(
            "PostgreSQL schema `{}` is at migration {version}, and this build of recall knows migrations up to {PG_SCHEMA_VERSION}: {}",
            pg.schema(),
            if version < PG_SCHEMA_VERSION {
                "run `recall migrate` first"
            } else {
                "export with a newer recall"
            }
        );
    }
    Ok(pg)
}

/// Writes every record of the store to `out`; returns the counts, what
/// was left out and the writer, flushed.
fn export_to<W: Write>(
    settings: &Settings,
    data: &Path,
    (skip_damaged, forgets_only): (bool, bool),
    out: W,
) -> Result<(Counts, Damaged, W), anyhow::Error> {
    let mut damaged = Damaged::default();
    let skip = skip_damaged.then_some(&mut damaged);
    let kept = |r: &Record| !forgets_only || matches!(r, Record::Forget(_));
    let (end, out) = match settings.store.kind {
        StoreKind::Sled => {
            // Opening creates a folder that is missing: an export must
            // not (a mistyped --data would export nothing, and say so
            // as if that were the memory).
            if !data.join("db").is_file() {
                return Err(TransferError::NoFolder {
                    path: data.to_path_buf(),
                }
                .into());
            }
            let trees = Trees::open(data, &settings.store)
                .with_context(|| format!("cannot open data folder {}", data.display()))?;
            let mut w = ExportWriter::new(out, "sled")?;
            let sink: &mut Sink<'_> = &mut |r| if kept(&r) { w.write(&r) } else { Ok(()) };
            trees.export_records(skip, sink)?;
            w.finish()?
        }
        StoreKind::Postgres => runtime()?.block_on(async {
            let pg = pg_for_export(settings).await?;
            let mut w = ExportWriter::new(out, "postgres")?;
            let sink: &mut Sink<'_> = &mut |r| if kept(&r) { w.write(&r) } else { Ok(()) };
            pg.export_records(skip, sink).await?;
            anyhow::Ok(w.finish()?)
        })?,
    };
    Ok((end.counts, damaged, out))
}

pub fn export(a: ExportArgs) -> anyhow::Result<()> {
    let settings = recall::settings::load(a.store.config.as_deref())?;
    super::init_logging("warn", settings.log.format);
    let what = described(&settings, &a.store.data);
    let (counts, damaged, report): (_, _, Box<dyn Write>) = if is_stdio(&a.out) {
        let stdout = std::io::stdout().lock();
        let (counts, damaged, _) = export_to(
            &settings,
            &a.store.data,
            (a.skip_damaged, a.forgets_only),
            BufWriter::new(stdout),
        )?;
        (counts, damaged, Box::new(std::io::stderr()))
    } else {
        // Written aside and put in place once complete: a failed export
        // leaves no file that looks whole.
        let dir = match a.out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = a
            .out
            .file_name()
            .with_context(|| format!("{} is not a file name", a.out.display()))?
            .to_string_lossy()
            .into_owned();
        let aside = dir.join(format!(".{name}.partial-{}", uuid::Uuid::new_v4().simple()));
        // Readable by its owner only: it holds every user's words.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options
            .open(&aside)
            .with_context(|| format!("cannot write {}", a.out.display()))?;
        let done = export_to(
            &settings,
            &a.store.data,
            (a.skip_damaged, a.forgets_only),
            BufWriter::new(file),
        )
        .and_then(|(counts, damaged, out)| {
            // On the disk before it is put in place.
            out.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| f.sync_all())
                .and_then(|()| std::fs::rename(&aside, &a.out))
                .with_context(|| format!("cannot write {}", a.out.display()))?;
            Ok((counts, damaged))
        });
        if done.is_err() {
            let _ = std::fs::remove_file(&aside);
        }
        let (counts, damaged) =
            done.with_context(|| format!("cannot export {what}; nothing was written"))?;
        (counts, damaged, Box::new(std::io::stdout()))
    };
    let mut report = report;
    let total: u64 = counts.values().sum();
    writeln!(
        report,
        "exported {total} record(s) of {what}: {}",
        counted(&counts)
    )?;
    for (table, key, error) in &damaged.0 {
        writeln!(report, "left out record {key} of {table}: {error}")?;
    }
    Ok(())
}

pub fn import(a: ImportArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let settings = recall::settings::load(a.store.config.as_deref())?;
    super::init_logging("warn", settings.log.format);
    let what = described(&settings, &a.store.data);
    let input: Box<dyn std::io::BufRead> = if is_stdio(&a.file) {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file =
            File::open(&a.file).with_context(|| format!("cannot open {}", a.file.display()))?;
        Box::new(BufReader::new(file))
    };
    let reader = ExportReader::new(input)
        .with_context(|| format!("{} is not an export recall can read", a.file.display()))?;
    let header = reader.header().clone();
    let mut later = Vec::new();
    for path in &a.forgets {
        later.extend(forget_log_of(path)?);
    }
    let source = header.source.clone();
    let mut reader = Honour::new(reader, &header, later);
    let counts = match settings.store.kind {
        StoreKind::Sled => import_folder(&a.store.data, &settings.store, &mut reader),
        StoreKind::Postgres => runtime()?.block_on(async {
            let pg = PgBackend::open(&settings.store.postgres).await?;
            pg.prepare_import().await?;
            pg.import_records(&mut reader).await
        }),
    }
    .map_err(|e: TransferError| anyhow::Error::new(e))
    .with_context(|| format!("cannot import {} into {what}", a.file.display()))?;
    let total: u64 = counts.values().sum();
    writeln!(
        out,
        "imported {total} record(s) exported from {source} into {what}: {}",
        counted(&counts)
    )?;
    if !a.forgets.is_empty() {
        let left: u64 = reader.left_out().values().sum();
        writeln!(
            out,
            "honoured {} forget(s) made after the export was taken: left out {left} record(s){}",
            reader.forgets().len(),
            if left > 0 {
                format!(": {}", counted(reader.left_out()))
            } else {
                String::new()
            }
        )?;
    }
    Ok(())
}
