//! Loading settings: `config/default.toml` (compiled in), then an optional
//! user file, then `RECALL_<SECTION>__<KEY>` environment variables. Unknown
//! keys and invalid values are rejected with the key named.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use config::{Config, Environment, File, FileFormat};
use recall_actors::settings::{Settings, SettingsError};

/// The defaults file, every key with a comment.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read settings file {}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: config::ConfigError,
    },
    #[error("unknown setting `{key}` (from {origin})")]
    UnknownKey { key: String, origin: String },
    #[error("invalid setting `{key}`: {reason}")]
    InvalidValue { key: String, reason: String },
    #[error("cannot read settings")]
    Config(#[source] config::ConfigError),
    #[error(transparent)]
    Invalid(#[from] SettingsError),
}

impl LoadError {
    /// The setting the error is about, when it names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LoadError::UnknownKey { key, .. } | LoadError::InvalidValue { key, .. } => Some(key),
            LoadError::Invalid(e) => Some(e.key),
            _ => None,
        }
    }
}

/// Environment variables that name settings: `RECALL_` + section + `__` +
/// key. Others starting with `RECALL_` (such as the default API-key
/// variable `RECALL_LLM_API_KEY`) are not settings and are left alone.
pub fn settings_env(vars: impl IntoIterator<Item = (String, String)>) -> HashMap<String, String> {
    vars.into_iter()
        .filter(|(k, _)| k.starts_with("RECALL_") && k["RECALL_".len()..].contains("__"))
        .collect()
}

/// Settings that are maps from ids to values: any key below them is an
/// entry, not a setting.
const MAP_KEYS: &[&str] = &["rollup.agent_time_zones"];

/// Every setting's dotted key (`session.silence_timeout_secs`), from the
/// settings types themselves (a map setting is one key).
pub fn known_keys() -> BTreeSet<String> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) if !map.is_empty() && !MAP_KEYS.contains(&prefix) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            _ => {
                out.insert(prefix.to_string());
            }
        }
    }
    let defaults = serde_json::to_value(Settings::default()).expect("settings serialize");
    let mut out = BTreeSet::new();
    walk("", &defaults, &mut out);
    out
}

/// Whether `key` is a setting, a section of settings, or an entry of a
/// map setting.
fn is_known(known: &BTreeSet<String>, key: &str) -> bool {
    known.contains(key)
        || known.iter().any(|k| k.starts_with(&format!("{key}.")))
        || MAP_KEYS.iter().any(|m| key.starts_with(&format!("{m}.")))
}

/// An unknown section is named by its first setting (`[sessions]` with
/// `silence_timeout_secs` in it is `sessions.silence_timeout_secs`); an
/// empty one, or a setting, by itself.
fn first_leaf(cfg: &Config, mut key: String) -> String {
    while let Ok(table) = cfg.get_table(&key) {
        match table.keys().min() {
            Some(first) => key = format!("{key}.{first}"),
            None => break,
        }
    }
    key
}

/// What is wrong with a value, without the key and origin the `config`
/// crate adds to its message (the error names them itself).
fn reason_of(e: &config::ConfigError) -> String {
    match e {
        config::ConfigError::At { error, .. } => reason_of(error),
        config::ConfigError::Type {
            unexpected,
            expected,
            ..
        } => format!("invalid type: {unexpected}, expected {expected}"),
        other => other.to_string(),
    }
}

/// Loads settings from the defaults, `file` and the given environment.
///
/// The settings types reject unknown keys and bad values as they are read
/// (`deny_unknown_fields`, typed time zones and weekdays);
/// `serde_path_to_error` says at which key, and where that key came from
/// decides the origin named.
pub fn load_from(file: Option<&Path>, env: HashMap<String, String>) -> Result<Settings, LoadError> {
    // Only `RECALL_<SECTION>__<KEY>` variables are settings.
    let env = settings_env(env);
    let mut builder = Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
    if let Some(path) = file {
        // Read on its own first, so that an unreadable file is a file error.
        Config::builder()
            .add_source(File::from(path).format(FileFormat::Toml).required(true))
            .build()
            .map_err(|source| LoadError::File {
                path: path.to_path_buf(),
                source,
            })?;
        builder = builder.add_source(File::from(path).format(FileFormat::Toml));
    }
    // The variable each key comes from.
    let from_env: HashMap<String, String> = env
        .keys()
        .map(|var| {
            let key = var["RECALL_".len()..].to_lowercase().replace("__", ".");
            (key, var.clone())
        })
        .collect();
    builder = builder.add_source(
        Environment::with_prefix("RECALL")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(env.into_iter().collect())),
    );
    let cfg = builder.build().map_err(LoadError::Config)?;
    let settings: Settings = serde_path_to_error::deserialize(cfg.cache.clone()).map_err(|e| {
        let key = first_leaf(&cfg, e.path().to_string());
        let reason = reason_of(e.inner());
        if key.is_empty() || key == "." {
            return LoadError::Config(e.into_inner());
        }
        if is_known(&known_keys(), &key) {
            return LoadError::InvalidValue { key, reason };
        }
        let origin = match (from_env.get(&key), file) {
            (Some(var), _) => format!("environment variable {var}"),
            (None, Some(path)) => path.display().to_string(),
            (None, None) => "the defaults".to_string(),
        };
        LoadError::UnknownKey { key, origin }
    })?;
    settings.validate()?;
    Ok(settings)
}

/// Loads settings from the defaults, `file` and the process environment.
pub fn load(file: Option<&Path>) -> Result<Settings, LoadError> {
    load_from(file, settings_env(std::env::vars()))
}
