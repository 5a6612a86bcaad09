//! The settings tree. `config/default.toml` lists every key with its default;
//! the `recall` crate layers a user file and `RECALL_*` environment variables
//! over it and hands the result to the actors as arguments.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::BlockLabel;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub session: SessionSettings,
    pub reflector: ReflectorSettings,
    pub watchdog: WatchdogSettings,
    pub blocks: BlockSettings,
    pub store: StoreSettings,
    pub server: ServerSettings,
    pub log: LogSettings,
    pub context: ContextSettings,
    pub rollup: RollupSettings,
    pub embed: EmbedSettings,
    pub search: SearchSettings,
}

/// Daily and weekly rollups, topics (the Rollup actor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollupSettings {
    /// Off: no rollups and no topics (session summaries are still made).
    pub enabled: bool,
    /// IANA time zone agents' days are counted in, unless listed in
    /// `agent_time_zones`.
    pub time_zone: String,
    /// Per-agent time zones: agent id → IANA name.
    pub agent_time_zones: std::collections::BTreeMap<String, String>,
    /// Local hour (0–23) at which the previous day is rolled up.
    pub daily_hour: u32,
    /// Weeks start on this day; the week before is rolled up on it, at
    /// `daily_hour`, after that day's daily rollup.
    pub weekly_weekday: String,
    /// Agents' rollups start within this many seconds after the hour (each
    /// at a fixed place set by its id), so many agents do not fire at once.
    pub spread_secs: u64,
    /// Seconds between looks at agents and summaries not seen yet: a
    /// safety net, since a finished reflection wakes the actor at once.
    pub check_interval_secs: u64,
    /// Agents rolled up at once.
    pub max_concurrent: usize,
    /// A summary joins the closest topic at or above this cosine
    /// similarity, else it starts a new topic.
    pub topic_threshold: f32,
    /// The same with a sentence model (local, openai): a model finds one
    /// user's calls closer to each other than shared words do
    /// (all-MiniLM-L6-v2 put 46 calls of one persona in one topic at 0.3).
    pub topic_threshold_meaning: f32,
    /// The same with the static word vectors (at 0.7 one persona's 46
    /// calls made 30 topics, 19 of one call; at 0.5, 14).
    pub topic_threshold_static: f32,
    /// Member summaries a topic summary is re-made from when one joins
    /// (the previous topic summary and the newest members).
    pub topic_sources: usize,
    /// The longest a daily, weekly or topic summary may be, in characters:
    /// the offline summarizer fills it with each source's disclosures
    /// first, and a longer answer from a model is cut at a sentence.
    pub combine_max_chars: usize,
}

impl Default for RollupSettings {
    fn default() -> Self {
        RollupSettings {
            enabled: true,
            time_zone: "UTC".into(),
            agent_time_zones: Default::default(),
            daily_hour: 3,
            weekly_weekday: "monday".into(),
            spread_secs: 900,
            check_interval_secs: 600,
            max_concurrent: 4,
            topic_threshold: 0.3,
            topic_threshold_meaning: 0.7,
            topic_threshold_static: 0.5,
            topic_sources: 6,
            combine_max_chars: 1_500,
        }
    }
}

impl RollupSettings {
    /// The topic threshold for an embedder's scale of similarities.
    pub fn topic_threshold_for(&self, closeness: crate::embed::Closeness) -> f32 {
        use crate::embed::Closeness;
        match closeness {
            Closeness::Words => self.topic_threshold,
            Closeness::WordVectors => self.topic_threshold_static,
            Closeness::Sentences => self.topic_threshold_meaning,
        }
    }
}

impl RollupSettings {
    /// The time zone of `agent_id`'s days.
    pub fn time_zone_of(&self, agent_id: &str) -> chrono_tz::Tz {
        let name = self
            .agent_time_zones
            .get(agent_id)
            .unwrap_or(&self.time_zone);
        // validate() checked every name; UTC if one slipped through.
        name.parse().unwrap_or(chrono_tz::Tz::UTC)
    }

    /// The day weeks start on (and the weekly rollup runs).
    pub fn week_start(&self) -> chrono::Weekday {
        self.weekly_weekday.parse().unwrap_or(chrono::Weekday::Mon)
    }
}

/// Which embedder turns text into vectors for topics and search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedKind {
    /// Offline feature hashing of words and character 4-grams: the
    /// default.
    Hashing,
    /// Static word vectors distilled from a sentence model, built in.
    Static,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Openai,
    /// A sentence-transformers model folder run in-process on the CPU
    /// (needs the `local-embed` build feature).
    Local,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedSettings {
    pub kind: EmbedKind,
    /// Dimensions of the hashing embedder.
    pub dimensions: usize,
    pub openai: OpenAiEmbedSettings,
    pub local: LocalEmbedSettings,
}

impl Default for EmbedSettings {
    fn default() -> Self {
        EmbedSettings {
            kind: EmbedKind::Hashing,
            dimensions: 256,
            openai: OpenAiEmbedSettings::default(),
            local: LocalEmbedSettings::default(),
        }
    }
}

/// The in-process embedder: a sentence-transformers model folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalEmbedSettings {
    /// The model folder (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, `modules.json`, `1_Pooling/config.json`).
    pub model_dir: String,
    /// Texts per forward pass.
    pub batch: usize,
    /// Forward passes running at once, each on a thread of the blocking
    /// pool.
    pub concurrency: usize,
}

impl Default for LocalEmbedSettings {
    fn default() -> Self {
        LocalEmbedSettings {
            model_dir: String::new(),
            batch: 32,
            concurrency: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiEmbedSettings {
    pub base_url: String,
    pub model: String,
    pub api_key_env: String,
    pub timeout_secs: u64,
    /// Texts sent per request.
    pub batch: usize,
}

impl Default for OpenAiEmbedSettings {
    fn default() -> Self {
        OpenAiEmbedSettings {
            base_url: "http://127.0.0.1:11434/v1".to_string(),
            model: "nomic-embed-text".into(),
            api_key_env: "RECALL_LLM_API_KEY".to_string(),
            timeout_secs: 30,
            batch: 64,
        }
    }
}

/// Archival search over summaries and facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// Share of the score from keyword relevance (BM25, scaled to the best
    /// hit); the rest is embedding similarity.
    pub keyword_weight: f32,
    /// Keyword hits re-ranked by similarity per query.
    pub candidates: usize,
    /// Results when the query names no limit.
    pub default_limit: usize,
    /// Largest limit a query may ask for.
    pub max_limit: usize,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            keyword_weight: 0.6,
            candidates: 200,
            default_limit: 10,
            max_limit: 100,
        }
    }
}

/// How the working context decays between calls (seed `002`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextSettings {
    /// Back within this many minutes of the last turn: the previous call's
    /// turns stay verbatim.
    pub soft_decay_minutes: u64,
    /// Back after this many minutes: nothing of the previous call but its
    /// long-term memory (summary, facts, blocks).
    pub hard_decay_minutes: u64,
    /// Between the two: how many of the previous call's last turns stay
    /// verbatim beside its summary.
    pub turns_after_soft_decay: usize,
    /// A live call whose raw turns since its last window summary go over
    /// this many tokens is summarized early.
    pub max_session_tokens: usize,
    /// How many (agent, user) pairs keep their stored context sources
    /// prepared in memory (least recently used go first); 0 turns the
    /// cache off, so every context read goes to the store.
    pub cache_entries: usize,
    /// The share of a context's budget (after the current message) that
    /// what the user's memory holds about the message takes first; the
    /// other tiers then fill the rest, and retrieval what they leave.
    pub retrieval_share: f32,
    /// How many of the best search hits a context read considers.
    pub retrieval_candidates: usize,
    /// The bonus a hit from just now gets over the keyword score (the best
    /// hit's is 1): of two hits that match about as well, the newer wins.
    pub retrieval_recency_weight: f32,
    /// The recency bonus halves every this many days.
    pub retrieval_half_life_days: f32,
    /// With an embedder that captures meaning: the share of a hit's score
    /// from its words (BM25 scaled to the best hit's); the rest is the
    /// similarity of its vector to the message's.
    pub retrieval_keyword_weight: f32,
    /// How long a context read waits for the message's vector (an
    /// embedder that captures meaning) before it ranks by words alone;
    /// the vector, once made, is kept for the next read of the message.
    pub query_embed_timeout_ms: u64,
    /// Each word of the message also matches up to this many of the words
    /// the user's memory holds that are nearest it in meaning (by the
    /// built-in static word vectors, whatever the embedder): "insect"
    /// finds "wasp", "city" the city's name; and as many again of those
    /// said in at most two of its items ("Micra" for "car"). 0 matches
    /// the message's own words only.
    pub retrieval_related_words: usize,
    /// How close a word must be to count as related (cosine of the static
    /// vectors; a related word weighs its similarity).
    pub retrieval_related_similarity: f32,
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            soft_decay_minutes: 10,
            hard_decay_minutes: 30,
            turns_after_soft_decay: 2,
            max_session_tokens: 8000,
            cache_entries: 1024,
            retrieval_share: 0.5,
            retrieval_candidates: 40,
            retrieval_recency_weight: 0.2,
            retrieval_half_life_days: 30.0,
            retrieval_keyword_weight: 0.5,
            query_embed_timeout_ms: 50,
            retrieval_related_words: 10,
            retrieval_related_similarity: 0.3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    pub silence_timeout_secs: u64,
    pub max_message_chars: usize,
    pub reopen_window_secs: u64,
    /// Messages (user and assistant each count one) a session has before
    /// its first in-session window summary.
    pub window_start_messages: u64,
    /// Messages each in-session window summary covers.
    pub window_messages: u64,
    /// Messages after the latest window's end before the next window
    /// starts (2: at every round).
    pub window_every_messages: u64,
    /// In-session summaries (windows and folds) made at once, across
    /// every live call; 0: half the cores (at least one) with the offline
    /// summarizer, whose summaries take a core each, and
    /// `reflector.max_concurrent` with an LLM, whose summaries wait on
    /// the network.
    pub window_concurrency: usize,
    /// Older window summaries of a live call (all but the latest shown)
    /// that fold into its long narrative…
    pub long_fold_windows: usize,
    /// …or their total characters, whichever comes first.
    pub long_fold_chars: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReflectorKind {
    Extractive,
    Openai,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReflectorSettings {
    pub kind: ReflectorKind,
    pub max_concurrent: usize,
    pub max_attempts: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// An attempt that has not answered by then counts as a timeout.
    pub attempt_timeout_secs: u64,
    /// A prompt template file replacing the built-in one; empty for built-in.
    pub prompt_file: String,
    pub openai: OpenAiSettings,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    pub base_url: String,
    pub model: String,
    pub api_key_env: String,
    pub timeout_secs: u64,
    pub temperature: f32,
    pub json_mode: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchdogSettings {
    pub interval_secs: u64,
    pub lookback_hours: u64,
    pub max_topics: usize,
}

/// Character limits of the core-memory blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockSettings {
    pub persona_limit: usize,
    pub human_limit: usize,
    pub self_perception_limit: usize,
    pub relationship_limit: usize,
    pub background_context_limit: usize,
}

/// `recall serve`: where it listens and who may call it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    /// One bearer token for every agent; empty for none.
    pub token: String,
    /// Bearer tokens limited to some agents.
    pub tokens: Vec<TokenGrant>,
    pub max_body_bytes: usize,
    pub shutdown_grace_secs: u64,
}

/// A bearer token and the agents it covers (`"*"` for all).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenGrant {
    pub token: String,
    pub agents: Vec<String>,
}

impl std::fmt::Debug for TokenGrant {
    // The token is a secret: never in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGrant")
            .field("token", &"…")
            .field("agents", &self.agents)
            .finish()
    }
}

impl std::fmt::Debug for ServerSettings {
    // Tokens are secrets: never in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("addr", &self.addr)
            .field("token", &if self.token.is_empty() { "" } else { "…" })
            .field("tokens", &self.tokens)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("shutdown_grace_secs", &self.shutdown_grace_secs)
            .finish()
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            addr: "127.0.0.1:7878".into(),
            token: String::new(),
            tokens: Vec::new(),
            max_body_bytes: 1 << 20,
            shutdown_grace_secs: 30,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `recall=debug,warn`; the
    /// `RECALL_LOG` variable overrides it.
    pub filter: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Human,
            filter: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// Writes are acknowledged to the process at once and flushed to disk
    /// together every `flush_interval_ms`.
    GroupCommit,
    /// Every write is flushed before the Store handles the next message.
    EveryWrite,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    pub flush: FlushPolicy,
    pub flush_interval_ms: u64,
    pub cache_capacity_mb: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            silence_timeout_secs: 300,
            max_message_chars: 32_768,
            reopen_window_secs: 3_600,
            window_start_messages: 20,
            window_messages: 14,
            window_every_messages: 6,
            window_concurrency: 0,
            long_fold_windows: 4,
            long_fold_chars: 4000,
        }
    }
}

impl Default for ReflectorSettings {
    fn default() -> Self {
        ReflectorSettings {
            kind: ReflectorKind::Extractive,
            max_concurrent: 4,
            max_attempts: 5,
            backoff_base_ms: 1_000,
            backoff_max_ms: 60_000,
            attempt_timeout_secs: 120,
            prompt_file: String::new(),
            openai: OpenAiSettings::default(),
        }
    }
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "http://127.0.0.1:11434/v1".to_string(),
            model: "llama3.1".to_string(),
            api_key_env: "RECALL_LLM_API_KEY".to_string(),
            timeout_secs: 60,
            temperature: 0.2,
            json_mode: true,
        }
    }
}

impl Default for WatchdogSettings {
    fn default() -> Self {
        WatchdogSettings {
            interval_secs: 300,
            lookback_hours: 24,
            max_topics: 12,
        }
    }
}

impl Default for BlockSettings {
    fn default() -> Self {
        BlockSettings {
            persona_limit: 2_000,
            human_limit: 2_000,
            self_perception_limit: 2_000,
            relationship_limit: 2_000,
            background_context_limit: 2_000,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            flush: FlushPolicy::GroupCommit,
            flush_interval_ms: 5,
            cache_capacity_mb: 64,
        }
    }
}

/// A setting with a value the runtime cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{key}`: {reason}")]
pub struct SettingsError {
    pub key: &'static str,
    pub reason: String,
}

fn positive(key: &'static str, v: u64) -> Result<(), SettingsError> {
    if v == 0 {
        return Err(SettingsError {
            key,
            reason: "must be greater than 0".into(),
        });
    }
    Ok(())
}

impl Settings {
    /// Settings for tests: every write flushed, short backoff.
    pub fn for_test() -> Self {
        let mut s = Settings::default();
        s.store.flush = FlushPolicy::EveryWrite;
        s.reflector.backoff_base_ms = 100;
        s.reflector.backoff_max_ms = 2_000;
        s
    }

    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        positive(
            "session.silence_timeout_secs",
            self.session.silence_timeout_secs,
        )?;
        positive(
            "session.max_message_chars",
            self.session.max_message_chars as u64,
        )?;
        let share = self.context.retrieval_share;
        if !(0.0..=1.0).contains(&share) {
            return Err(SettingsError {
                key: "context.retrieval_share",
                reason: format!("must be between 0 and 1; got {share}"),
            });
        }
        let w = self.context.retrieval_recency_weight;
        if !(0.0..=1.0).contains(&w) {
            return Err(SettingsError {
                key: "context.retrieval_recency_weight",
                reason: format!("must be between 0 and 1; got {w}"),
            });
        }
        let w = self.context.retrieval_keyword_weight;
        if !(0.0..=1.0).contains(&w) {
            return Err(SettingsError {
                key: "context.retrieval_keyword_weight",
                reason: format!("must be between 0 and 1; got {w}"),
            });
        }
        if self.context.query_embed_timeout_ms > 10_000 {
            return Err(SettingsError {
                key: "context.query_embed_timeout_ms",
                reason: "at most 10000".into(),
            });
        }
        let h = self.context.retrieval_half_life_days;
        if !(h > 0.0 && h.is_finite()) {
            return Err(SettingsError {
                key: "context.retrieval_half_life_days",
                reason: format!("must be a positive number of days; got {h}"),
            });
        }
        let r = self.context.retrieval_related_similarity;
        if !(r > 0.0 && r <= 1.0) {
            return Err(SettingsError {
                key: "context.retrieval_related_similarity",
                reason: format!("must be above 0 and at most 1; got {r}"),
            });
        }
        if self.context.retrieval_related_words > crate::static_embed::RELATED_MAX {
            return Err(SettingsError {
                key: "context.retrieval_related_words",
                reason: format!("at most {}", crate::static_embed::RELATED_MAX),
            });
        }
        if self.context.retrieval_candidates > 1000 {
            return Err(SettingsError {
                key: "context.retrieval_candidates",
                reason: "at most 1000".into(),
            });
        }
        if self.session.window_messages < 2 {
            return Err(SettingsError {
                key: "session.window_messages",
                reason: "must be at least 2 (one user message and one answer)".into(),
            });
        }
        if self.session.window_every_messages < 2 {
            return Err(SettingsError {
                key: "session.window_every_messages",
                reason: "must be at least 2 (one round)".into(),
            });
        }
        if self.session.window_concurrency > 256 {
            return Err(SettingsError {
                key: "session.window_concurrency",
                reason: "at most 256 (0: chosen by the summarizer)".into(),
            });
        }
        if self.session.window_start_messages < 2 {
            return Err(SettingsError {
                key: "session.window_start_messages",
                reason: "must be at least 2".into(),
            });
        }
        positive(
            "session.long_fold_windows",
            self.session.long_fold_windows as u64,
        )?;
        positive(
            "session.long_fold_chars",
            self.session.long_fold_chars as u64,
        )?;
        if self.context.hard_decay_minutes < self.context.soft_decay_minutes {
            return Err(SettingsError {
                key: "context.hard_decay_minutes",
                reason: "must be at least context.soft_decay_minutes".into(),
            });
        }
        positive(
            "context.max_session_tokens",
            self.context.max_session_tokens as u64,
        )?;
        positive("watchdog.interval_secs", self.watchdog.interval_secs)?;
        positive("watchdog.lookback_hours", self.watchdog.lookback_hours)?;
        positive(
            "reflector.max_concurrent",
            self.reflector.max_concurrent as u64,
        )?;
        positive("reflector.max_attempts", self.reflector.max_attempts as u64)?;
        positive("reflector.backoff_base_ms", self.reflector.backoff_base_ms)?;
        if self.reflector.backoff_max_ms < self.reflector.backoff_base_ms {
            return Err(SettingsError {
                key: "reflector.backoff_max_ms",
                reason: "must be at least reflector.backoff_base_ms".into(),
            });
        }
        positive(
            "reflector.attempt_timeout_secs",
            self.reflector.attempt_timeout_secs,
        )?;
        let o = &self.reflector.openai;
        positive("reflector.openai.timeout_secs", o.timeout_secs)?;
        if !(o.base_url.starts_with("http://") || o.base_url.starts_with("https://")) {
            return Err(SettingsError {
                key: "reflector.openai.base_url",
                reason: format!("{:?} is not an http(s) URL", o.base_url),
            });
        }
        if o.model.trim().is_empty() {
            return Err(SettingsError {
                key: "reflector.openai.model",
                reason: "must not be empty".into(),
            });
        }
        if !(0.0..=2.0).contains(&o.temperature) {
            return Err(SettingsError {
                key: "reflector.openai.temperature",
                reason: "must be between 0 and 2".into(),
            });
        }
        for label in BlockLabel::ALL {
            positive(block_limit_key(label), self.blocks.limit(label) as u64)?;
        }
        positive("store.flush_interval_ms", self.store.flush_interval_ms)?;
        positive("store.cache_capacity_mb", self.store.cache_capacity_mb)?;
        let srv = &self.server;
        let host_port = srv
            .addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if srv.addr.parse::<std::net::SocketAddr>().is_err() && !host_port {
            return Err(SettingsError {
                key: "server.addr",
                reason: format!("{:?} is not HOST:PORT, such as 127.0.0.1:7878", srv.addr),
            });
        }
        if srv.token.chars().any(char::is_whitespace) {
            return Err(SettingsError {
                key: "server.token",
                reason: "must not contain whitespace".into(),
            });
        }
        for grant in &srv.tokens {
            if grant.token.is_empty() || grant.token.chars().any(char::is_whitespace) {
                return Err(SettingsError {
                    key: "server.tokens",
                    reason: "a token must be non-empty and without whitespace".into(),
                });
            }
            if grant.agents.is_empty() || grant.agents.iter().any(|a| a.is_empty()) {
                return Err(SettingsError {
                    key: "server.tokens",
                    reason: "each token needs a list of agent ids, or [\"*\"] for all".into(),
                });
            }
        }
        positive("server.max_body_bytes", srv.max_body_bytes as u64)?;
        self.validate_memory()?;
        if self.log.filter.trim().is_empty() {
            return Err(SettingsError {
                key: "log.filter",
                reason: "must not be empty".into(),
            });
        }
        Ok(())
    }

    fn validate_memory(&self) -> Result<(), SettingsError> {
        let r = &self.rollup;
        let zone = |key: &'static str, name: &str| {
            name.parse::<chrono_tz::Tz>()
                .map(|_| ())
                .map_err(|_| SettingsError {
                    key,
                    reason: format!("{name:?} is not an IANA time zone such as Europe/Berlin"),
                })
        };
        zone("rollup.time_zone", &r.time_zone)?;
        for name in r.agent_time_zones.values() {
            zone("rollup.agent_time_zones", name)?;
        }
        if r.daily_hour > 23 {
            return Err(SettingsError {
                key: "rollup.daily_hour",
                reason: "must be between 0 and 23".into(),
            });
        }
        if r.weekly_weekday.parse::<chrono::Weekday>().is_err() {
            return Err(SettingsError {
                key: "rollup.weekly_weekday",
                reason: format!("{:?} is not a weekday such as monday", r.weekly_weekday),
            });
        }
        positive("rollup.check_interval_secs", r.check_interval_secs)?;
        positive("rollup.max_concurrent", r.max_concurrent as u64)?;
        positive("rollup.topic_sources", r.topic_sources as u64)?;
        if r.combine_max_chars < 200 {
            return Err(SettingsError {
                key: "rollup.combine_max_chars",
                reason: "must be at least 200".into(),
            });
        }
        if !(r.topic_threshold > 0.0 && r.topic_threshold <= 1.0) {
            return Err(SettingsError {
                key: "rollup.topic_threshold",
                reason: "must be in (0, 1]".into(),
            });
        }
        if !(r.topic_threshold_meaning > 0.0 && r.topic_threshold_meaning <= 1.0) {
            return Err(SettingsError {
                key: "rollup.topic_threshold_meaning",
                reason: "must be in (0, 1]".into(),
            });
        }
        if !(r.topic_threshold_static > 0.0 && r.topic_threshold_static <= 1.0) {
            return Err(SettingsError {
                key: "rollup.topic_threshold_static",
                reason: "must be in (0, 1]".into(),
            });
        }
        let e = &self.embed;
        if !(8..=8192).contains(&e.dimensions) {
            return Err(SettingsError {
                key: "embed.dimensions",
                reason: "must be between 8 and 8192".into(),
            });
        }
        positive("embed.openai.timeout_secs", e.openai.timeout_secs)?;
        positive("embed.local.batch", e.local.batch as u64)?;
        positive("embed.local.concurrency", e.local.concurrency as u64)?;
        if e.kind == EmbedKind::Local && e.local.model_dir.trim().is_empty() {
            return Err(SettingsError {
                key: "embed.local.model_dir",
                reason:
                    "must name a sentence-transformers model folder when embed.kind is \"local\""
                        .into(),
            });
        }
        positive("embed.openai.batch", e.openai.batch as u64)?;
        if !(e.openai.base_url.starts_with("http://") || e.openai.base_url.starts_with("https://"))
        {
            return Err(SettingsError {
                key: "embed.openai.base_url",
                reason: format!("{:?} is not an http(s) URL", e.openai.base_url),
            });
        }
        if e.openai.model.trim().is_empty() {
            return Err(SettingsError {
                key: "embed.openai.model",
                reason: "must not be empty".into(),
            });
        }
        let s = &self.search;
        if !(0.0..=1.0).contains(&s.keyword_weight) {
            return Err(SettingsError {
                key: "search.keyword_weight",
                reason: "must be between 0 and 1".into(),
            });
        }
        positive("search.candidates", s.candidates as u64)?;
        positive("search.default_limit", s.default_limit as u64)?;
        if s.max_limit < s.default_limit {
            return Err(SettingsError {
                key: "search.max_limit",
                reason: "must be at least search.default_limit".into(),
            });
        }
        Ok(())
    }

    pub fn silence_timeout(&self) -> Duration {
        Duration::from_secs(self.session.silence_timeout_secs)
    }
}

fn block_limit_key(label: BlockLabel) -> &'static str {
    match label {
        BlockLabel::Persona => "blocks.persona_limit",
        BlockLabel::Human => "blocks.human_limit",
        BlockLabel::SelfPerception => "blocks.self_perception_limit",
        BlockLabel::Relationship => "blocks.relationship_limit",
        BlockLabel::BackgroundContext => "blocks.background_context_limit",
    }
}

impl BlockSettings {
    pub fn limit(&self, label: BlockLabel) -> usize {
        match label {
            BlockLabel::Persona => self.persona_limit,
            BlockLabel::Human => self.human_limit,
            BlockLabel::SelfPerception => self.self_perception_limit,
            BlockLabel::Relationship => self.relationship_limit,
            BlockLabel::BackgroundContext => self.background_context_limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
        Settings::for_test().validate().unwrap();
    }

    #[test]
    fn zero_values_name_their_key() {
        let mut s = Settings::default();
        s.blocks.relationship_limit = 0;
        assert_eq!(s.validate().unwrap_err().key, "blocks.relationship_limit");
        let mut s = Settings::default();
        s.session.silence_timeout_secs = 0;
        assert_eq!(
            s.validate().unwrap_err().key,
            "session.silence_timeout_secs"
        );
    }

    #[test]
    fn time_zones_and_weekdays_are_checked() {
        let mut s = Settings::default();
        s.rollup
            .agent_time_zones
            .insert("kairix".into(), "Europe/Berlin".into());
        s.rollup.weekly_weekday = "Sunday".into();
        s.validate().unwrap();
        assert_eq!(
            s.rollup.time_zone_of("kairix"),
            chrono_tz::Tz::Europe__Berlin
        );
        assert_eq!(s.rollup.time_zone_of("other"), chrono_tz::Tz::UTC);
        assert_eq!(s.rollup.week_start(), chrono::Weekday::Sun);
        s.rollup
            .agent_time_zones
            .insert("x".into(), "Mars/Olympus".into());
        assert_eq!(s.validate().unwrap_err().key, "rollup.agent_time_zones");
        let mut s = Settings::default();
        s.rollup.weekly_weekday = "someday".into();
        assert_eq!(s.validate().unwrap_err().key, "rollup.weekly_weekday");
        let mut s = Settings::default();
        s.rollup.daily_hour = 24;
        assert_eq!(s.validate().unwrap_err().key, "rollup.daily_hour");
    }
}
