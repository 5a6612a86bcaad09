//! Settings of a conversation: sessions, the assembled context, the
//! watchdog, memory blocks and the reflector.

use super::*;

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
    /// How the hits are ranked and how much of each is shown
    /// (`[context.ranking]`).
    pub ranking: RankingSettings,
    /// How budgets, trims and `total_tokens` are counted.
    pub tokenizer: TokenizerKind,
    /// The Hugging Face `tokenizer.json` counted with, for
    /// `tokenizer = "huggingface"`.
    pub tokenizer_file: String,
}

/// How a context's tokens are counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// Characters / 4, rounded up: an estimate, no model's count.
    #[default]
    Chars4,
    /// OpenAI's encoding of GPT-4 and GPT-3.5 (feature `tiktoken`).
    Cl100kBase,
    /// OpenAI's encoding of GPT-4o and later (feature `tiktoken`).
    O200kBase,
    /// A Hugging Face `tokenizer.json` (`tokenizer_file`; feature
    /// `hf-tokenizer`, which `local-embed` has).
    Huggingface,
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
            ranking: RankingSettings::default(),
            tokenizer: TokenizerKind::Chars4,
            tokenizer_file: String::new(),
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
    /// Live sessions one agent may have at once; starting one more is
    /// refused (`too_many_sessions`). A late turn reopening a session on
    /// a connection is never refused: it was acknowledged.
    pub max_live_per_agent: usize,
    /// Live sessions of every agent at once: agent ids are the callers'
    /// to choose, so the per-agent cap alone bounds nothing.
    pub max_live: usize,
    /// Turns a live session keeps in memory (for its window summaries and
    /// the context's newest turns); older ones stay on disk, where the
    /// session's reflection reads them, and in its window summaries.
    pub max_turns_in_memory: usize,
    /// Bytes of text a live session keeps in memory: past them, older
    /// turns leave memory as past `max_turns_in_memory` (two windows' turns
    /// always stay, whatever their size).
    pub max_bytes_in_memory: usize,
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
    /// A request to the summarizer that has not answered by then counts as
    /// a timeout (each part's, for a call reflected in parts).
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
    /// The most tokens one request may hold (characters / 4 over the
    /// system message and the prompt, its own text included); a call whose
    /// prompt is longer is reflected in parts and the parts combined. 0:
    /// unbounded. A server's `context_length_exceeded` answer halves the
    /// parts either way.
    pub max_prompt_tokens: usize,
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
            max_live_per_agent: 10_000,
            max_live: 50_000,
            max_turns_in_memory: 2_000,
            max_bytes_in_memory: 4 * 1024 * 1024,
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

/// `reflector.openai.max_prompt_tokens` by default: the default server is
/// a local Ollama, which runs a model with a 4,096-token context unless told
/// otherwise (on a machine with less than 24 GiB of GPU memory) and cuts a
/// longer prompt from its start without a word, so an unbounded long call
/// would lose its first turns rather than be refused; 3,072 leaves a
/// thousand tokens of that context for the answer.
pub const DEFAULT_MAX_PROMPT_TOKENS: usize = 3_072;

/// The smallest `reflector.openai.max_prompt_tokens` other than 0: the
/// built-in reflection prompt's own text is about 830 tokens.
pub const MIN_MAX_PROMPT_TOKENS: usize = 1_024;

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "http://127.0.0.1:11434/v1".to_string(),
            model: "llama3.1".to_string(),
            api_key_env: "RECALL_LLM_API_KEY".to_string(),
            timeout_secs: 60,
            temperature: 0.2,
            json_mode: true,
            max_prompt_tokens: DEFAULT_MAX_PROMPT_TOKENS,
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

impl SessionSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        positive("session.silence_timeout_secs", self.silence_timeout_secs)?;
        positive("session.max_message_chars", self.max_message_chars as u64)?;
        positive("session.max_live_per_agent", self.max_live_per_agent as u64)?;
        positive("session.max_live", self.max_live as u64)?;
        if self.max_bytes_in_memory < 64 * 1024 {
            return Err(SettingsError {
                key: "session.max_bytes_in_memory",
                reason: "must be at least 65536 (64 KiB)".into(),
            });
        }
        if (self.max_turns_in_memory as u64) * 2 < self.window_messages {
            return Err(SettingsError {
                key: "session.max_turns_in_memory",
                reason: format!(
                    "must hold at least one window's turns (session.window_messages = {} messages, {} turns)",
                    self.window_messages,
                    self.window_messages.div_ceil(2)
                ),
            });
        }
        if self.window_messages < 2 {
            return Err(SettingsError {
                key: "session.window_messages",
                reason: "must be at least 2 (one user message and one answer)".into(),
            });
        }
        if self.window_every_messages < 2 {
            return Err(SettingsError {
                key: "session.window_every_messages",
                reason: "must be at least 2 (one round)".into(),
            });
        }
        if self.window_concurrency > 256 {
            return Err(SettingsError {
                key: "session.window_concurrency",
                reason: "at most 256 (0: chosen by the summarizer)".into(),
            });
        }
        if self.window_start_messages < 2 {
            return Err(SettingsError {
                key: "session.window_start_messages",
                reason: "must be at least 2".into(),
            });
        }
        positive("session.long_fold_windows", self.long_fold_windows as u64)?;
        positive("session.long_fold_chars", self.long_fold_chars as u64)?;
        Ok(())
    }
}

impl ContextSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.tokenizer == TokenizerKind::Huggingface && self.tokenizer_file.trim().is_empty() {
            return Err(SettingsError {
                key: "context.tokenizer_file",
                reason: "tokenizer = \"huggingface\" counts with a tokenizer.json: name its path"
                    .into(),
            });
        }
        let share = self.retrieval_share;
        if !(0.0..=1.0).contains(&share) {
            return Err(SettingsError {
                key: "context.retrieval_share",
                reason: format!("must be between 0 and 1; got {share}"),
            });
        }
        let w = self.retrieval_recency_weight;
        if !(0.0..=1.0).contains(&w) {
            return Err(SettingsError {
                key: "context.retrieval_recency_weight",
                reason: format!("must be between 0 and 1; got {w}"),
            });
        }
        let w = self.retrieval_keyword_weight;
        if !(0.0..=1.0).contains(&w) {
            return Err(SettingsError {
                key: "context.retrieval_keyword_weight",
                reason: format!("must be between 0 and 1; got {w}"),
            });
        }
        if self.query_embed_timeout_ms > 10_000 {
            return Err(SettingsError {
                key: "context.query_embed_timeout_ms",
                reason: "at most 10000".into(),
            });
        }
        let h = self.retrieval_half_life_days;
        if !(h > 0.0 && h.is_finite()) {
            return Err(SettingsError {
                key: "context.retrieval_half_life_days",
                reason: format!("must be a positive number of days; got {h}"),
            });
        }
        let r = self.retrieval_related_similarity;
        if !(r > 0.0 && r <= 1.0) {
            return Err(SettingsError {
                key: "context.retrieval_related_similarity",
                reason: format!("must be above 0 and at most 1; got {r}"),
            });
        }
        if self.retrieval_related_words > crate::static_embed::RELATED_MAX {
            return Err(SettingsError {
                key: "context.retrieval_related_words",
                reason: format!("at most {}", crate::static_embed::RELATED_MAX),
            });
        }
        if self.retrieval_candidates > 1000 {
            return Err(SettingsError {
                key: "context.retrieval_candidates",
                reason: "at most 1000".into(),
            });
        }
        if self.hard_decay_minutes < self.soft_decay_minutes {
            return Err(SettingsError {
                key: "context.hard_decay_minutes",
                reason: "must be at least context.soft_decay_minutes".into(),
            });
        }
        positive("context.max_session_tokens", self.max_session_tokens as u64)?;
        self.ranking.validate()
    }
}

impl WatchdogSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        positive("watchdog.interval_secs", self.interval_secs)?;
        positive("watchdog.lookback_hours", self.lookback_hours)?;
        Ok(())
    }
}

impl ReflectorSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        positive("reflector.max_concurrent", self.max_concurrent as u64)?;
        positive("reflector.max_attempts", self.max_attempts as u64)?;
        positive("reflector.backoff_base_ms", self.backoff_base_ms)?;
        if self.backoff_max_ms < self.backoff_base_ms {
            return Err(SettingsError {
                key: "reflector.backoff_max_ms",
                reason: "must be at least reflector.backoff_base_ms".into(),
            });
        }
        positive("reflector.attempt_timeout_secs", self.attempt_timeout_secs)?;
        let o = &self.openai;
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
        if o.max_prompt_tokens != 0 && o.max_prompt_tokens < MIN_MAX_PROMPT_TOKENS {
            return Err(SettingsError {
                key: "reflector.openai.max_prompt_tokens",
                reason: format!(
                    "must be 0 (unbounded) or at least {MIN_MAX_PROMPT_TOKENS}: the reflection prompt's own text takes about 830"
                ),
            });
        }
        Ok(())
    }
}

impl BlockSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for label in BlockLabel::ALL {
            positive(block_limit_key(label), self.limit(label) as u64)?;
        }
        Ok(())
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
