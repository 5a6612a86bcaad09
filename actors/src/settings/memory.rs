//! Settings of the memory hierarchy: rollups and topics, embeddings and
//! search.

use super::*;

/// Daily and weekly rollups, topics (the Rollup actor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollupSettings {
    /// Off: no rollups and no topics (session summaries are still made).
    pub enabled: bool,
    /// IANA time zone agents' days are counted in, unless listed in
    /// `agent_time_zones`.
    pub time_zone: TimeZone,
    /// Per-agent time zones: agent id → IANA name.
    pub agent_time_zones: std::collections::BTreeMap<String, TimeZone>,
    /// Local hour (0–23) at which the previous day is rolled up.
    pub daily_hour: u32,
    /// Weeks start on this day; the week before is rolled up on it, at
    /// `daily_hour`, after that day's daily rollup.
    pub weekly_weekday: Weekday,
    /// Agents' rollups start within this many seconds after the hour (each
    /// at a fixed place set by its id), so many agents do not fire at once.
    pub spread_secs: u64,
    /// Seconds between looks at agents and summaries not seen yet: a
    /// safety net, since a finished reflection wakes the actor at once.
    pub check_interval_secs: u64,
    /// Agents whose rollups are being made at once (across the passes
    /// under way).
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
            time_zone: TimeZone(chrono_tz::Tz::UTC),
            agent_time_zones: Default::default(),
            daily_hour: 3,
            weekly_weekday: Weekday(chrono::Weekday::Mon),
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
        self.agent_time_zones
            .get(agent_id)
            .unwrap_or(&self.time_zone)
            .0
    }

    /// The day weeks start on (and the weekly rollup runs).
    pub fn week_start(&self) -> chrono::Weekday {
        self.weekly_weekday.0
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
    /// Messages' vectors being made at once (a context read's, or one
    /// prepared ahead), and, as many again, prepared messages whose words'
    /// related words are being worked out; past it a read ranks its
    /// message by words, and the words' related words are worked out by
    /// the read that needs them.
    pub max_query_jobs: usize,
    pub openai: OpenAiEmbedSettings,
    pub local: LocalEmbedSettings,
}

impl Default for EmbedSettings {
    fn default() -> Self {
        EmbedSettings {
            kind: EmbedKind::Hashing,
            dimensions: 256,
            max_query_jobs: 64,
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

impl RollupSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let r = self;
        if r.daily_hour > 23 {
            return Err(SettingsError {
                key: "rollup.daily_hour",
                reason: "must be between 0 and 23".into(),
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
        Ok(())
    }
}

impl EmbedSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let e = self;
        super::positive("embed.max_query_jobs", e.max_query_jobs as u64)?;
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
        Ok(())
    }
}

impl SearchSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let s = self;
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
}
