//! Settings loading: compiled-in defaults, a user file, then `RECALL_*`
//! environment variables, with every rejected setting named by its key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use recall::engine::settings::{FlushPolicy, ReflectorKind};
use recall::settings::{load_from, settings_env, LoadError, DEFAULT_TOML};
use recall::Settings;
use tempfile::TempDir;

fn no_env() -> HashMap<String, String> {
    HashMap::new()
}

fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
    settings_env(
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>(),
    )
}

/// Writes `text` as a settings file in a new temporary folder.
fn settings_file(text: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let path = dir.path().join("recall.toml");
    std::fs::write(&path, text).expect("settings file written");
    (dir, path)
}

/// Loads expecting an error, and checks that the error names `key` both in
/// `LoadError::key()` and in its message.
fn expect_key_error(file: Option<&Path>, env: HashMap<String, String>, key: &str) -> LoadError {
    let err = match load_from(file, env) {
        Ok(s) => panic!("expected an error about `{key}`, loaded {s:?}"),
        Err(e) => e,
    };
    assert_eq!(err.key(), Some(key), "error: {err} ({err:?})");
    let msg = err.to_string();
    assert!(msg.contains(key), "message {msg:?} does not name `{key}`");
    err
}

fn expect_file_key_error(toml: &str, key: &str) -> LoadError {
    let (_dir, path) = settings_file(toml);
    expect_key_error(Some(&path), no_env(), key)
}

#[test]
fn the_defaults_file_equals_the_built_in_defaults() {
    let loaded = load_from(None, no_env()).expect("defaults load");
    assert_eq!(loaded, Settings::default());
    loaded.validate().expect("defaults are valid");
}

#[test]
fn the_defaults_file_lists_every_key() {
    // Serializing the defaults and reading them back as TOML gives the same
    // tree as the commented defaults file.
    let from_file: key_paths::Paths = key_paths::parse(DEFAULT_TOML);
    let from_struct: key_paths::Paths = recall::settings::known_keys();
    assert_eq!(from_file, from_struct);
}

/// A minimal reading of a TOML file's `section.key` paths, so the test
/// needs no TOML crate of its own.
mod key_paths {
    use std::collections::BTreeSet;

    pub type Paths = BTreeSet<String>;

    /// Dotted key paths declared in a TOML document made of `[section]`
    /// headers and `key = value` lines.
    pub fn parse(text: &str) -> Paths {
        let mut section = String::new();
        let mut out = Paths::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.trim().to_string();
                continue;
            }
            if let Some((key, _)) = line.split_once('=') {
                out.insert(format!("{section}.{}", key.trim()));
            }
        }
        out
    }
}

#[test]
fn per_agent_time_zones_load_from_a_file_and_bad_ones_are_named() {
    let (_dir, path) = settings_file(
        r#"
[rollup]
time_zone = "Europe/Berlin"
agent_time_zones = { kairix = "America/New_York" }
weekly_weekday = "sunday"
"#,
    );
    let s = load_from(Some(&path), no_env()).expect("loads");
    assert_eq!(s.rollup.time_zone_of("kairix").name(), "America/New_York");
    assert_eq!(s.rollup.time_zone_of("other").name(), "Europe/Berlin");
    expect_file_key_error(
        "[rollup]\ntime_zone = \"Nowhere/City\"\n",
        "rollup.time_zone",
    );
    expect_file_key_error("[embed]\nkind = \"magic\"\n", "embed.kind");
    expect_file_key_error("[search]\nkeyword_weight = 1.5\n", "search.keyword_weight");
}

#[test]
fn a_user_file_overrides_the_defaults() {
    let (_dir, path) = settings_file(
        r#"
[session]
silence_timeout_secs = 45

[reflector]
kind = "openai"
max_attempts = 3

[reflector.openai]
model = "qwen2.5"
base_url = "http://localhost:8000/v1"

[store]
flush = "every_write"
"#,
    );
    let s = load_from(Some(&path), no_env()).expect("file loads");
    assert_eq!(s.session.silence_timeout_secs, 45);
    assert_eq!(s.reflector.kind, ReflectorKind::Openai);
    assert_eq!(s.reflector.max_attempts, 3);
    assert_eq!(s.reflector.openai.model, "qwen2.5");
    assert_eq!(s.reflector.openai.base_url, "http://localhost:8000/v1");
    assert_eq!(s.store.flush, FlushPolicy::EveryWrite);
    // Keys the file does not name keep their defaults.
    let d = Settings::default();
    assert_eq!(s.session.max_message_chars, d.session.max_message_chars);
    assert_eq!(
        s.reflector.openai.timeout_secs,
        d.reflector.openai.timeout_secs
    );
    assert_eq!(s.reflector.openai.json_mode, d.reflector.openai.json_mode);
    assert_eq!(s.blocks, d.blocks);
    assert_eq!(s.watchdog, d.watchdog);
}

#[test]
fn environment_variables_override_the_file() {
    let (_dir, path) = settings_file(
        r#"
[session]
silence_timeout_secs = 45
max_message_chars = 1000

[reflector.openai]
model = "qwen2.5"
"#,
    );
    let s = load_from(
        Some(&path),
        env(&[
            ("RECALL_SESSION__SILENCE_TIMEOUT_SECS", "120"),
            ("RECALL_REFLECTOR__OPENAI__MODEL", "gpt-4o-mini"),
            ("RECALL_REFLECTOR__KIND", "openai"),
            ("RECALL_REFLECTOR__OPENAI__JSON_MODE", "false"),
            ("RECALL_REFLECTOR__OPENAI__TEMPERATURE", "0.7"),
        ]),
    )
    .expect("file and environment load");
    assert_eq!(s.session.silence_timeout_secs, 120);
    assert_eq!(s.reflector.openai.model, "gpt-4o-mini");
    assert_eq!(s.reflector.kind, ReflectorKind::Openai);
    assert!(!s.reflector.openai.json_mode);
    assert!((s.reflector.openai.temperature - 0.7).abs() < 1e-6);
    // The file still wins over the defaults where the environment is silent.
    assert_eq!(s.session.max_message_chars, 1000);
}

#[test]
fn environment_variables_override_the_defaults_without_a_file() {
    let s = load_from(
        None,
        env(&[
            ("RECALL_SESSION__SILENCE_TIMEOUT_SECS", "120"),
            ("RECALL_REFLECTOR__OPENAI__MODEL", "llama3.2"),
            ("RECALL_REFLECTOR__OPENAI__API_KEY_ENV", "OPENAI_API_KEY"),
            ("RECALL_BLOCKS__BACKGROUND_CONTEXT_LIMIT", "4000"),
        ]),
    )
    .expect("environment loads");
    assert_eq!(s.session.silence_timeout_secs, 120);
    assert_eq!(s.reflector.openai.model, "llama3.2");
    assert_eq!(s.reflector.openai.api_key_env, "OPENAI_API_KEY");
    assert_eq!(s.blocks.background_context_limit, 4000);
}

#[test]
fn a_numeric_looking_string_setting_stays_a_string() {
    let s = load_from(None, env(&[("RECALL_REFLECTOR__OPENAI__MODEL", "4")]))
        .expect("environment loads");
    assert_eq!(s.reflector.openai.model, "4");
}

#[test]
fn settings_env_keeps_only_setting_variables() {
    let vars = env(&[
        ("RECALL_SESSION__SILENCE_TIMEOUT_SECS", "120"),
        ("RECALL_REFLECTOR__OPENAI__MODEL", "gpt-4o-mini"),
        ("RECALL_LLM_API_KEY", "sk-secret"),
        ("RECALL_", "x"),
        ("PATH", "/usr/bin"),
        ("HOME", "/home/mark"),
        ("OPENAI_API_KEY", "sk-other"),
        ("SESSION__SILENCE_TIMEOUT_SECS", "5"),
    ]);
    let mut keys: Vec<&str> = vars.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "RECALL_REFLECTOR__OPENAI__MODEL",
            "RECALL_SESSION__SILENCE_TIMEOUT_SECS"
        ]
    );
    assert_eq!(vars["RECALL_SESSION__SILENCE_TIMEOUT_SECS"], "120");
    // What it keeps loads; the API key never reaches the loader.
    let s = load_from(None, vars).expect("filtered environment loads");
    assert_eq!(s.session.silence_timeout_secs, 120);
}

#[test]
fn an_unknown_key_in_the_file_is_named() {
    let err = expect_file_key_error(
        "[session]\nsilence_timeout = 3\n",
        "session.silence_timeout",
    );
    assert!(matches!(err, LoadError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn an_unknown_section_in_the_file_is_named() {
    let err = expect_file_key_error(
        "[sessions]\nsilence_timeout_secs = 3\n",
        "sessions.silence_timeout_secs",
    );
    assert!(matches!(err, LoadError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn an_empty_unknown_section_in_the_file_is_named() {
    let err = expect_file_key_error("[llm]\n", "llm");
    assert!(matches!(err, LoadError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn an_unknown_top_level_key_in_the_file_is_named() {
    let err = expect_file_key_error("verbose = true\n", "verbose");
    assert!(matches!(err, LoadError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn an_unknown_key_in_the_environment_is_named() {
    let err = expect_key_error(None, env(&[("RECALL_SESSION__NOPE", "1")]), "session.nope");
    match &err {
        LoadError::UnknownKey { origin, .. } => {
            assert!(origin.contains("RECALL_SESSION__NOPE"), "{origin}")
        }
        other => panic!("expected UnknownKey, got {other:?}"),
    }
}

#[test]
fn a_zero_silence_timeout_in_the_file_is_named() {
    let err = expect_file_key_error(
        "[session]\nsilence_timeout_secs = 0\n",
        "session.silence_timeout_secs",
    );
    assert!(matches!(err, LoadError::Invalid(_)), "{err:?}");
}

#[test]
fn a_zero_silence_timeout_in_the_environment_is_named() {
    let err = expect_key_error(
        None,
        env(&[("RECALL_SESSION__SILENCE_TIMEOUT_SECS", "0")]),
        "session.silence_timeout_secs",
    );
    assert!(matches!(err, LoadError::Invalid(_)), "{err:?}");
}

#[test]
fn a_zero_block_limit_is_named() {
    let err = expect_file_key_error(
        "[blocks]\nbackground_context_limit = 0\n",
        "blocks.background_context_limit",
    );
    assert!(matches!(err, LoadError::Invalid(_)), "{err:?}");
}

#[test]
fn an_unknown_reflector_kind_is_named() {
    let err = expect_file_key_error("[reflector]\nkind = \"gpt\"\n", "reflector.kind");
    assert!(err.to_string().contains("gpt"), "{err}");
}

#[test]
fn an_unknown_reflector_kind_in_the_environment_is_named() {
    expect_key_error(
        None,
        env(&[("RECALL_REFLECTOR__KIND", "gpt")]),
        "reflector.kind",
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named() {
    let err = expect_file_key_error(
        "[session]\nsilence_timeout_secs = \"soon\"\n",
        "session.silence_timeout_secs",
    );
    assert!(matches!(err, LoadError::InvalidValue { .. }), "{err:?}");
    // The key once, then what is wrong with the value.
    assert_eq!(
        err.to_string(),
        "invalid setting `session.silence_timeout_secs`: invalid type: string \"soon\", \
         expected an integer"
    );
}

#[test]
fn a_value_of_the_wrong_type_in_the_environment_is_named() {
    expect_key_error(
        None,
        env(&[("RECALL_WATCHDOG__MAX_TOPICS", "many")]),
        "watchdog.max_topics",
    );
}

#[test]
fn zero_concurrent_reflections_are_named() {
    expect_file_key_error(
        "[reflector]\nmax_concurrent = 0\n",
        "reflector.max_concurrent",
    );
}

#[test]
fn a_zero_http_timeout_is_named() {
    expect_file_key_error(
        "[reflector.openai]\ntimeout_secs = 0\n",
        "reflector.openai.timeout_secs",
    );
}

#[test]
fn a_missing_settings_file_is_a_file_error() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let path = dir.path().join("absent.toml");
    match load_from(Some(&path), no_env()) {
        Err(LoadError::File { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected LoadError::File, got {other:?}"),
    }
}

#[test]
fn a_settings_file_that_is_not_toml_is_a_file_error() {
    let (_dir, path) = settings_file("[session\nsilence_timeout_secs = \n");
    let err = load_from(Some(&path), no_env()).expect_err("not TOML");
    assert!(matches!(err, LoadError::File { .. }), "{err:?}");
    assert!(err.to_string().contains("recall.toml"), "{err}");
}

#[test]
fn an_empty_known_section_in_the_file_is_accepted() {
    let (_dir, path) = settings_file("[session]\n\n[reflector.openai]\n");
    let s = load_from(Some(&path), no_env()).expect("empty sections load");
    assert_eq!(s, Settings::default());
}

#[test]
fn load_from_ignores_variables_that_are_not_settings() {
    let vars: HashMap<String, String> = [
        ("PWD", "/"),
        ("HOME", "/home/mark"),
        ("RECALL_LLM_API_KEY", "sk-secret"),
        ("RECALL_SESSION__SILENCE_TIMEOUT_SECS", "90"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let s = load_from(None, vars).expect("unrelated variables are ignored");
    assert_eq!(s.session.silence_timeout_secs, 90);
}

#[test]
fn server_and_log_settings_load_from_file_and_environment() {
    let (_dir, path) = settings_file(
        r#"
[server]
addr = "0.0.0.0:9000"

allowed_hosts = ["memory.internal", "memory.internal:7878", "[::1]:9000"]
allowed_origins = ["https://app.example.com", "http://localhost:3000"]

[[server.tokens]]
token = "kairix-only"
agents = ["kairix"]

[log]
format = "json"
"#,
    );
    let s = load_from(Some(&path), env(&[("RECALL_SERVER__TOKEN", "root-secret")])).expect("loads");
    assert_eq!(s.server.addr, "0.0.0.0:9000");
    assert_eq!(s.server.token, "root-secret");
    assert_eq!(s.server.tokens.len(), 1);
    assert_eq!(s.server.tokens[0].agents, vec!["kairix".to_string()]);
    assert_eq!(s.server.allowed_hosts.len(), 3);
    assert_eq!(s.server.allowed_origins[1], "http://localhost:3000");
    assert_eq!(s.log.format, recall::engine::settings::LogFormat::Json);
    // the token never shows in debug output
    let debug = format!("{s:?}");
    assert!(!debug.contains("kairix-only") && !debug.contains("root-secret"));
}

#[test]
fn invalid_server_and_log_settings_name_their_key() {
    expect_file_key_error("[server]\naddr = \"localhost\"\n", "server.addr");
    expect_file_key_error("[server]\nmax_body_bytes = 0\n", "server.max_body_bytes");
    expect_file_key_error(
        "[[server.tokens]]\ntoken = \"t\"\nagents = []\n",
        "server.tokens",
    );
    for bad in ["\"https://memory.internal\"", "\"memory internal\"", "\"\""] {
        expect_file_key_error(
            &format!("[server]\nallowed_hosts = [{bad}]\n"),
            "server.allowed_hosts",
        );
    }
    for bad in [
        "\"app.example.com\"",
        "\"https://app.example.com/path\"",
        "\"https://\"",
        "\"*\"",
    ] {
        expect_file_key_error(
            &format!("[server]\nallowed_origins = [{bad}]\n"),
            "server.allowed_origins",
        );
    }
    for key in [
        "header_timeout_secs",
        "request_timeout_secs",
        "max_connections",
        "ws_ping_secs",
    ] {
        expect_file_key_error(&format!("[server]\n{key} = 0\n"), &format!("server.{key}"));
    }
    // a stream answering every ping must not be closed as idle
    expect_file_key_error(
        "[server]\nws_ping_secs = 30\nws_idle_secs = 30\n",
        "server.ws_idle_secs",
    );
    expect_file_key_error(
        "[session]\nmax_live_per_agent = 0\n",
        "session.max_live_per_agent",
    );
    expect_file_key_error("[session]\nmax_live = 0\n", "session.max_live");
    expect_file_key_error(
        "[server]\nmax_connections = 2000000\n",
        "server.max_connections",
    );
    // fewer turns than one window summary covers
    expect_file_key_error(
        "[session]\nwindow_messages = 14\nmax_turns_in_memory = 6\n",
        "session.max_turns_in_memory",
    );
    expect_file_key_error(
        "[session]\nmax_bytes_in_memory = 1000\n",
        "session.max_bytes_in_memory",
    );
    expect_file_key_error(
        "[store]\nmax_unwritten_turns = 0\n",
        "store.max_unwritten_turns",
    );
    expect_file_key_error("[log]\nformat = \"xml\"\n", "log.format");
    expect_key_error(
        None,
        env(&[("RECALL_SERVER__TOKEN", "has space")]),
        "server.token",
    );
}

#[test]
fn topic_thresholds_out_of_range_are_named_and_each_embedder_gets_its_own() {
    for key in [
        "topic_threshold",
        "topic_threshold_meaning",
        "topic_threshold_static",
    ] {
        expect_file_key_error(
            &format!("[rollup]\n{key} = 0.0\n"),
            &format!("rollup.{key}"),
        );
        expect_file_key_error(
            &format!("[rollup]\n{key} = 1.5\n"),
            &format!("rollup.{key}"),
        );
    }
    use recall::engine::embed::{Closeness, Embed, HashingEmbed};
    use recall::engine::static_embed::StaticEmbed;
    let r = recall::Settings::default().rollup;
    let hashing = HashingEmbed::default();
    let words = StaticEmbed::builtin().expect("the built-in table");
    assert_eq!(hashing.closeness(), Closeness::Words);
    assert_eq!(words.closeness(), Closeness::WordVectors);
    assert_eq!(r.topic_threshold_for(hashing.closeness()), 0.3);
    assert_eq!(r.topic_threshold_for(words.closeness()), 0.5);
    assert_eq!(r.topic_threshold_for(Closeness::Sentences), 0.7);
}

#[test]
fn related_word_settings_out_of_range_are_named() {
    for bad in ["0.0", "-0.5", "1.5", "nan"] {
        expect_file_key_error(
            &format!("[context]\nretrieval_related_similarity = {bad}\n"),
            "context.retrieval_related_similarity",
        );
    }
    expect_file_key_error(
        "[context]\nretrieval_related_words = 100000\n",
        "context.retrieval_related_words",
    );
    // off, and the tightest threshold, are accepted
    let (_dir, path) = settings_file(
        "[context]\nretrieval_related_words = 0\nretrieval_related_similarity = 1.0\n",
    );
    let s = load_from(Some(&path), no_env()).expect("valid");
    assert_eq!(s.context.retrieval_related_words, 0);
}

#[test]
fn ranking_settings_load_from_a_file_and_the_environment_and_nonsense_is_named() {
    let (_dir, path) = settings_file("[context.ranking]\nmin_cut_tokens = 20\nbm25_b = 0.5\n");
    let s = load_from(
        Some(&path),
        env(&[("RECALL_CONTEXT__RANKING__ANSWER_SENTENCES", "4")]),
    )
    .expect("valid");
    assert_eq!(s.context.ranking.min_cut_tokens, 20);
    assert_eq!(s.context.ranking.bm25_b, 0.5);
    assert_eq!(s.context.ranking.answer_sentences, 4);
    assert_eq!(s.context.ranking.summary_sentences, 5);
    for bad in ["-0.1", "1.5", "nan"] {
        expect_file_key_error(
            &format!("[context.ranking]\nbm25_b = {bad}\n"),
            "context.ranking.bm25_b",
        );
    }
    expect_file_key_error(
        "[context.ranking]\nmax_term_share = 0.0\n",
        "context.ranking.max_term_share",
    );
    expect_file_key_error(
        "[context.ranking]\nhit_answer_tokens = 0\n",
        "context.ranking.hit_answer_tokens",
    );
}

#[test]
fn a_postgres_store_needs_a_url_and_a_plain_schema_name() {
    let err = expect_file_key_error("[store]\nkind = \"postgres\"\n", "store.postgres.url");
    assert!(err.to_string().contains("is needed"), "{err}");
    expect_file_key_error(
        "[store]\nkind = \"postgres\"\n[store.postgres]\nurl = \"mysql://db/recall\"\n",
        "store.postgres.url",
    );
    let err = expect_key_error(
        None,
        env(&[
            ("RECALL_STORE__KIND", "postgres"),
            ("RECALL_STORE__POSTGRES__URL", "postgres://db/recall"),
            ("RECALL_STORE__POSTGRES__SCHEMA", "Recall; DROP"),
        ]),
        "store.postgres.schema",
    );
    assert!(err.to_string().contains("not a schema name"), "{err}");
    expect_file_key_error(
        "[store.postgres]\npool_size = 0\n",
        "store.postgres.pool_size",
    );
    expect_file_key_error("[store]\nkind = \"mysql\"\n", "store.kind");
    expect_file_key_error(
        "[store.postgres]\nlease_secs = 2\n",
        "store.postgres.lease_secs",
    );
    let ok = load_from(
        None,
        env(&[
            ("RECALL_STORE__KIND", "postgres"),
            ("RECALL_STORE__POSTGRES__URL", "postgres://db/recall"),
        ]),
    )
    .unwrap();
    assert_eq!(ok.store.postgres.schema, "recall");
}
