//! Loading settings: `config/default.toml` (compiled in), then an optional
//! user file, then `RECALL_<SECTION>__<KEY>` environment variables. Unknown
//! keys and invalid values are rejected with the key named.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use config::{Config, Environment, File, FileFormat, Value, ValueKind};
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

/// Settings that are maps from ids to values.
const MAP_KEYS: &[&str] = &["rollup.agent_time_zones"];

fn leaf_keys(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match &v.kind {
        // An empty table is a key of its own, so that an unknown empty
        // section is still reported.
        ValueKind::Table(t) if t.is_empty() && !prefix.is_empty() => out.push(prefix.to_string()),
        ValueKind::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_keys(&key, v, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

fn known_keys() -> Result<BTreeSet<String>, LoadError> {
    let defaults = Config::builder()
        .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
        .build()
        .map_err(LoadError::Config)?;
    let root: Value = defaults.cache.clone();
    let mut keys = Vec::new();
    leaf_keys("", &root, &mut keys);
    Ok(keys.into_iter().collect())
}

/// Finds the key a deserialization message is about.
fn key_in_message(msg: &str, known: &BTreeSet<String>) -> Option<String> {
    if let Some(i) = msg.find("for key `") {
        let rest = &msg[i + "for key `".len()..];
        if let Some(end) = rest.find('`') {
            return Some(rest[..end].to_string());
        }
    }
    known
        .iter()
        .filter(|k| {
            let leaf = k.rsplit('.').next().unwrap_or(k);
            msg.contains(&format!("`{leaf}`")) || msg.contains(k.as_str())
        })
        .max_by_key(|k| k.len())
        .cloned()
}

/// Loads settings from the defaults, `file` and the given environment.
pub fn load_from(file: Option<&Path>, env: HashMap<String, String>) -> Result<Settings, LoadError> {
    let known = known_keys()?;
    // Only `RECALL_<SECTION>__<KEY>` variables are settings.
    let env = settings_env(env);
    let mut builder = Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
    if let Some(path) = file {
        let user = Config::builder()
            .add_source(File::from(path).format(FileFormat::Toml).required(true))
            .build()
            .map_err(|source| LoadError::File {
                path: path.to_path_buf(),
                source,
            })?;
        let mut keys = Vec::new();
        leaf_keys("", &user.cache, &mut keys);
        // A known key, or a known section left empty.
        // Under a map setting (per-agent time zones), any key is an entry.
        let is_known = |k: &String| {
            known.contains(k)
                || known.iter().any(|kk| kk.starts_with(&format!("{k}.")))
                || MAP_KEYS.iter().any(|m| k.starts_with(&format!("{m}.")))
        };
        if let Some(k) = keys.into_iter().find(|k| !is_known(k)) {
            return Err(LoadError::UnknownKey {
                key: k,
                origin: path.display().to_string(),
            });
        }
        builder = builder.add_source(File::from(path).format(FileFormat::Toml));
    }
    for var in env.keys() {
        let key = var["RECALL_".len()..].to_lowercase().replace("__", ".");
        if !known.contains(&key) && !MAP_KEYS.iter().any(|m| key.starts_with(&format!("{m}."))) {
            return Err(LoadError::UnknownKey {
                key,
                origin: format!("environment variable {var}"),
            });
        }
    }
    builder = builder.add_source(
        Environment::with_prefix("RECALL")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(env.into_iter().collect())),
    );
    let cfg = builder.build().map_err(LoadError::Config)?;
    let settings: Settings = cfg.try_deserialize().map_err(|e| {
        let reason = e.to_string();
        match key_in_message(&reason, &known) {
            Some(key) => LoadError::InvalidValue { key, reason },
            None => LoadError::Config(e),
        }
    })?;
    settings.validate()?;
    Ok(settings)
}

/// Loads settings from the defaults, `file` and the process environment.
pub fn load(file: Option<&Path>) -> Result<Settings, LoadError> {
    load_from(file, settings_env(std::env::vars()))
}
