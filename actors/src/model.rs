//! The domain model (design note 000, `docs/design/README.md`): turns, sessions, summaries, memory blocks and
//! the background context rendered into the `background_context` block.
//!
//! Every record is serde so the Store keeps typed values, never
//! `"role: content"` strings.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The layer a summary belongs to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryType {
    Session,
    Daily,
    Weekly,
    Topic,
}

impl SummaryType {
    pub const ALL: [SummaryType; 4] = [
        SummaryType::Session,
        SummaryType::Daily,
        SummaryType::Weekly,
        SummaryType::Topic,
    ];

    /// The lowercase name used in storage and JSON (`session`, `daily`…).
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryType::Session => "session",
            SummaryType::Daily => "daily",
            SummaryType::Weekly => "weekly",
            SummaryType::Topic => "topic",
        }
    }

    /// One byte used in store keys so summaries of one type scan together.
    pub fn tag(self) -> u8 {
        match self {
            SummaryType::Session => 0,
            SummaryType::Daily => 1,
            SummaryType::Weekly => 2,
            SummaryType::Topic => 3,
        }
    }
}

impl fmt::Display for SummaryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A single completed exchange: what the user said and what the agent answered.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationTurn {
    pub user_message: String,
    pub agent_response: String,
    pub timestamp: DateTime<Utc>,
}

impl ConversationTurn {
    /// The text a turn's vector is made of: both sides, so that what the
    /// agent side said is found by meaning as the user's words are (the
    /// other party's life, an agent's recommendation). `None` when neither
    /// said anything.
    pub fn vector_text(&self) -> Option<String> {
        let (user, agent) = (self.user_message.trim(), self.agent_response.trim());
        match (user.is_empty(), agent.is_empty()) {
            (true, true) => None,
            (false, true) => Some(user.to_string()),
            (true, false) => Some(agent.to_string()),
            (false, false) => Some(format!("{user}\n{agent}")),
        }
    }
}

/// Why a session ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// No turn and no touch for the silence timeout.
    SilenceTimeout,
    /// The caller ended it (the voice connection closed).
    Disconnect,
    /// The runtime shut down gracefully while the session was live.
    Shutdown,
    /// Found open in the store when the runtime started (the process died).
    Recovered,
    /// Its actor panicked; the turns came back from the store.
    Crashed,
    /// An operator cleared the working context (`recall context clear`);
    /// the next turn on the connection starts a fresh session.
    Cleared,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::SilenceTimeout => "silence_timeout",
            EndReason::Disconnect => "disconnect",
            EndReason::Shutdown => "shutdown",
            EndReason::Recovered => "recovered",
            EndReason::Crashed => "crashed",
            EndReason::Cleared => "cleared",
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EndReason {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "silence_timeout" => EndReason::SilenceTimeout,
            "disconnect" => EndReason::Disconnect,
            "shutdown" => EndReason::Shutdown,
            "recovered" => EndReason::Recovered,
            "crashed" => EndReason::Crashed,
            "cleared" => EndReason::Cleared,
            other => {
                return Err(InputError::Invalid {
                    field: "reason",
                    reason: format!("unknown end reason {other:?}"),
                })
            }
        })
    }
}

/// A session as the store keeps it. Turns are stored separately, keyed by
/// session and sequence number, so that appending one never rewrites this.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: Uuid,
    pub agent_id: String,
    pub user_id: String,
    pub connection_id: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub end_reason: Option<EndReason>,
    pub turn_count: u32,
}

impl SessionRecord {
    pub fn is_open(&self) -> bool {
        self.ended_at.is_none()
    }
}

/// A summary of a session or of a period (design note 000), with its
/// `user_id`, `emotional_tone` and the `fallback` mark of note 003.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationSummary {
    /// For a session summary this is the session id, which makes storing it
    /// idempotent.
    pub summary_id: Uuid,
    pub summary_type: SummaryType,
    pub agent_id: String,
    pub user_id: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub summary_text: String,
    pub topics: Vec<String>,
    pub key_entities: Vec<String>,
    #[serde(default)]
    pub emotional_tone: Option<String>,
    #[serde(default)]
    pub source_summary_ids: Vec<Uuid>,
    /// The raw messages a session summary stands for, so it can be made
    /// again from them (summaries of summaries name theirs in
    /// `source_summary_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_range: Option<SourceRange>,
    pub turn_count: u32,
    pub created_at: DateTime<Utc>,
    /// True when the reflection could not be parsed and `summary_text` is the
    /// raw output with heuristic topics and entities.
    #[serde(default)]
    pub fallback: bool,
    /// The earlier version of this rollup it replaces (a session summary
    /// arrived after its period was rolled up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Uuid>,
    /// Set on a rollup a newer version replaced; it is kept for audit but
    /// no longer read into contexts, blocks or search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Uuid>,
    /// For a session summary: what it was derived from (the summarizer,
    /// its prompts and the turns), as a fingerprint. A replay re-derives a
    /// session only when this would change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derivation: Option<String>,
}

impl ConversationSummary {
    /// A session summary of `text` at `at` (start and end), with one turn
    /// and nothing else set: a base for fixtures (`..ConversationSummary::session(…)`).
    pub fn session(
        summary_id: Uuid,
        agent_id: &str,
        user_id: &str,
        at: DateTime<Utc>,
        text: &str,
    ) -> ConversationSummary {
        ConversationSummary {
            summary_id,
            summary_type: SummaryType::Session,
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            period_start: at,
            period_end: at,
            summary_text: text.to_string(),
            topics: Vec::new(),
            key_entities: Vec::new(),
            emotional_tone: None,
            source_summary_ids: Vec::new(),
            source_range: None,
            turn_count: 1,
            created_at: at,
            fallback: false,
            supersedes: None,
            superseded_by: None,
            derivation: None,
        }
    }

    /// Whether this is the version in force (not replaced by a newer one).
    pub fn is_current(&self) -> bool {
        self.superseded_by.is_none()
    }
}

/// Messages `start_seq..=end_seq` of a session (turn `i` is messages `2i`
/// and `2i + 1`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRange {
    pub session_id: Uuid,
    pub start_seq: u64,
    pub end_seq: u64,
}

impl SourceRange {
    /// All the messages of a session of `turns` turns.
    pub fn session(session_id: Uuid, turns: u32) -> Option<SourceRange> {
        (turns > 0).then(|| SourceRange {
            session_id,
            start_seq: 0,
            end_seq: 2 * turns as u64 - 1,
        })
    }
}

/// Python's `datetime.isoformat()` for an aware UTC datetime: microseconds
/// only when non-zero, and a `+00:00` offset.
pub fn isoformat(t: &DateTime<Utc>) -> String {
    let format = if t.timestamp_subsec_micros() == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Micros
    };
    t.to_rfc3339_opts(format, false).replacen("Z", "+00:00", 1)
}

impl ConversationSummary {
    /// The seed's archival text, byte for byte.
    pub fn to_archival_text(&self) -> String {
        let tag = self.summary_type.as_str().to_uppercase();
        format!(
            "[SUMMARY:{tag}]\nPeriod: {} to {}\nTopics: {}\nEntities: {}\nTurns: {}\n\n{}\n[/SUMMARY:{tag}]",
            isoformat(&self.period_start),
            isoformat(&self.period_end),
            self.topics.join(", "),
            self.key_entities.join(", "),
            self.turn_count,
            self.summary_text,
        )
    }
}

/// A cluster of one user's session summaries about the same thing. Its
/// topic summary is a [`ConversationSummary`] of type `topic` with the
/// same id, whose `source_summary_ids` are the members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    pub topic_id: Uuid,
    pub agent_id: String,
    pub user_id: String,
    /// The members' most frequent topic keywords.
    pub label: String,
    /// Keyword counts over the members, most frequent first.
    pub keywords: Vec<(String, u32)>,
    /// The sum of the members' vectors (compared by cosine, so unscaled).
    pub centroid: Vec<f32>,
    /// The embedder the centroid was made with.
    pub embedder: String,
    /// Member session summaries, in the order they joined.
    pub member_ids: Vec<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When its latest member's conversation ended.
    pub last_active: DateTime<Utc>,
}

/// What the watchdog renders into the `background_context` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundContext {
    pub last_updated: DateTime<Utc>,
    pub recent_session_summary: Option<String>,
    pub active_topics: Vec<String>,
    pub persistent_context: Vec<String>,
}

impl BackgroundContext {
    /// The block text, at most `max_chars` characters (not bytes): the seed
    /// slices a Python string, which counts code points, so this does too and
    /// never splits a multibyte character.
    pub fn to_block_value(&self, max_chars: usize) -> String {
        let mut lines = Vec::new();
        if let Some(recent) = &self.recent_session_summary {
            lines.push(format!("Recent: {recent}"));
        }
        if !self.active_topics.is_empty() {
            lines.push(format!("Active topics: {}", self.active_topics.join(", ")));
        }
        for ctx in &self.persistent_context {
            lines.push(format!("- {ctx}"));
        }
        truncate_chars(&lines.join("\n"), max_chars).to_string()
    }
}

/// The first `max_chars` characters of `s`, cut on a character boundary.
pub fn truncate_chars(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((idx, _)) => &s[..idx],
        None => s,
    }
}

/// The labelled core-memory blocks an agent has.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockLabel {
    Persona,
    Human,
    SelfPerception,
    Relationship,
    BackgroundContext,
}

impl BlockLabel {
    pub const ALL: [BlockLabel; 5] = [
        BlockLabel::Persona,
        BlockLabel::Human,
        BlockLabel::SelfPerception,
        BlockLabel::Relationship,
        BlockLabel::BackgroundContext,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockLabel::Persona => "persona",
            BlockLabel::Human => "human",
            BlockLabel::SelfPerception => "self_perception",
            BlockLabel::Relationship => "relationship",
            BlockLabel::BackgroundContext => "background_context",
        }
    }
}

impl fmt::Display for BlockLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BlockLabel {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BlockLabel::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| InputError::Invalid {
                field: "label",
                reason: format!("unknown block label {s:?}"),
            })
    }
}

/// Who wrote a block's value.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockWriter {
    /// The operator, through `PUT /v1/agents/{agent}/blocks/{label}` or
    /// `Runtime::set_block`: the agent's own blocks.
    Operator,
    /// A reflection on one user's call: that user's `relationship` and
    /// `self_perception`, never the agent's.
    Reflection,
    /// The watchdog's `background_context` (and a user's, rendered from
    /// their summaries).
    Watchdog,
}

/// A core-memory block as stored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBlock {
    pub agent_id: String,
    pub label: BlockLabel,
    pub value: String,
    /// The character limit the value was written under.
    pub limit: usize,
    pub updated_at: DateTime<Utc>,
    /// The user whose conversation this value was drawn from, for blocks a
    /// reflection writes (`relationship`, `self_perception`): it is kept
    /// as that user's and shown in their context only. `None` for the
    /// agent's own blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_user_id: Option<String>,
    /// Who wrote the value; `None` in a record from before this was kept
    /// (see [`crate::store::repair_agent_blocks`] for how those are told
    /// apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<BlockWriter>,
}

/// A durable request to reflect on one ended session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReflectionJob {
    pub session_id: Uuid,
    pub agent_id: String,
    pub enqueued_at: DateTime<Utc>,
}

/// A reflection that used up its retry budget, kept with its last error.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub session_id: Uuid,
    pub agent_id: String,
    pub user_id: String,
    pub attempts: u32,
    /// The error and its causes, outermost first.
    pub error: String,
    pub error_kind: String,
    pub failed_at: DateTime<Utc>,
}

/// Per-agent bookkeeping the watchdog uses to skip agents whose summaries
/// did not change since its last rebuild.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMeta {
    pub summary_version: u64,
    pub context_version: u64,
    #[serde(default)]
    pub persistent_context: Vec<String>,
    /// When the oldest summary in the current block leaves the lookback
    /// window, so the block is rebuilt even without new summaries.
    #[serde(default)]
    pub context_expires_at: Option<DateTime<Utc>>,
}

/// Caller input the runtime refuses, before changing anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("a turn needs a user message or an agent response; both are empty")]
    EmptyTurn,
    #[error("{field} is {len} bytes, over the limit of {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} contains a control character")]
    ControlCharacter { field: &'static str },
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Longest id (agent, user, connection) accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// Checks an identifier: non-empty, at most [`MAX_ID_LEN`] bytes, no control
/// characters (ids end up in store keys and log lines).
pub fn validate_id(field: &'static str, value: &str) -> Result<(), InputError> {
    if value.is_empty() {
        return Err(InputError::Empty { field });
    }
    if value.len() > MAX_ID_LEN {
        return Err(InputError::TooLong {
            field,
            len: value.len(),
            max: MAX_ID_LEN,
        });
    }
    if value.chars().any(char::is_control) {
        return Err(InputError::ControlCharacter { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_turns_vector_is_made_of_both_sides() {
        let t = |u: &str, a: &str| {
            ConversationTurn {
                user_message: u.into(),
                agent_response: a.into(),
                timestamp: Utc.with_ymd_and_hms(2024, 3, 12, 9, 0, 0).unwrap(),
            }
            .vector_text()
        };
        assert_eq!(
            t("How's the boat?", " I got the engine running yesterday. "),
            Some("How's the boat?\nI got the engine running yesterday.".into())
        );
        assert_eq!(t("  ", "Hello?"), Some("Hello?".into()));
        assert_eq!(t("Hi", ""), Some("Hi".into()));
        assert_eq!(t(" ", "\n"), None);
    }

    #[test]
    fn archival_text_matches_the_seed_format() {
        let s = ConversationSummary {
            summary_id: Uuid::nil(),
            summary_type: SummaryType::Session,
            agent_id: "kairix".into(),
            user_id: "mark".into(),
            period_start: Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap(),
            period_end: Utc.with_ymd_and_hms(2026, 1, 5, 9, 4, 30).unwrap(),
            summary_text: "Mark prepared for an interview.".into(),
            topics: vec!["interview".into(), "resume".into()],
            key_entities: vec!["Acme".into()],
            emotional_tone: None,
            source_summary_ids: vec![],
            source_range: None,
            turn_count: 3,
            created_at: Utc.with_ymd_and_hms(2026, 1, 5, 9, 5, 0).unwrap(),
            fallback: false,
            supersedes: None,
            superseded_by: None,
            derivation: None,
        };
        assert_eq!(
            s.to_archival_text(),
            "[SUMMARY:SESSION]\nPeriod: 2026-01-05T09:00:00+00:00 to 2026-01-05T09:04:30+00:00\n\
             Topics: interview, resume\nEntities: Acme\nTurns: 3\n\n\
             Mark prepared for an interview.\n[/SUMMARY:SESSION]"
        );
    }

    #[test]
    fn isoformat_keeps_microseconds_like_python() {
        let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap()
            + chrono::Duration::microseconds(1500);
        assert_eq!(isoformat(&t), "2026-01-05T09:00:00.001500+00:00");
    }

    #[test]
    fn block_value_cuts_on_char_boundary() {
        let ctx = BackgroundContext {
            last_updated: Utc::now(),
            recent_session_summary: Some("Zoë sprach über Köln 🎉🎉🎉".into()),
            active_topics: vec!["日本語".into()],
            persistent_context: vec!["ünïcödé".into()],
        };
        let full = ctx.to_block_value(10_000);
        for n in 0..full.chars().count() + 2 {
            let v = ctx.to_block_value(n);
            assert_eq!(v.chars().count(), n.min(full.chars().count()));
            assert!(full.starts_with(&v));
        }
    }

    #[test]
    fn ids_are_validated() {
        assert!(validate_id("agent_id", "kairix").is_ok());
        assert_eq!(
            validate_id("agent_id", ""),
            Err(InputError::Empty { field: "agent_id" })
        );
        assert!(matches!(
            validate_id("user_id", &"x".repeat(300)),
            Err(InputError::TooLong { .. })
        ));
        assert!(matches!(
            validate_id("connection_id", "a\nb"),
            Err(InputError::ControlCharacter { .. })
        ));
    }
}

/// What a fact is about (seed `004`'s categories plus preference, goal,
/// constraint and biographical from seed `001`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactCategory {
    Personality,
    Hobby,
    Relationship,
    Milestone,
    Occupation,
    Preference,
    Habit,
    Goal,
    Constraint,
    Biographical,
    Other,
}

impl FactCategory {
    /// A category named by a model: known names (any case), else `other`.
    pub fn parse_lenient(s: &str) -> FactCategory {
        match s.trim().to_lowercase().as_str() {
            "personality" => FactCategory::Personality,
            "hobby" | "hobbies" => FactCategory::Hobby,
            "relationship" | "relationships" => FactCategory::Relationship,
            "milestone" => FactCategory::Milestone,
            "occupation" | "work" | "job" => FactCategory::Occupation,
            "preference" | "preferences" => FactCategory::Preference,
            "habit" | "habits" => FactCategory::Habit,
            "goal" | "goals" => FactCategory::Goal,
            "constraint" | "constraints" | "health" => FactCategory::Constraint,
            "biographical" | "biography" | "personal" => FactCategory::Biographical,
            _ => FactCategory::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FactCategory::Personality => "personality",
            FactCategory::Hobby => "hobby",
            FactCategory::Relationship => "relationship",
            FactCategory::Milestone => "milestone",
            FactCategory::Occupation => "occupation",
            FactCategory::Preference => "preference",
            FactCategory::Habit => "habit",
            FactCategory::Goal => "goal",
            FactCategory::Constraint => "constraint",
            FactCategory::Biographical => "biographical",
            FactCategory::Other => "other",
        }
    }
}

/// Who may see a fact besides the user it is about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Only the user it belongs to.
    #[default]
    Private,
    /// Every user of the agent.
    Shared,
}

/// Whose words a fact came from: the user's, or the agent side's (what
/// the agent said it would do or recommended, and in a call between two
/// people what the other person told of their own life). A fact of the
/// agent side is never one about the user: it is shown under the agent's
/// id, and its one-valued subjects are its own ([`Speaker::subject`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    /// The user's own words (every fact stored before speakers were kept).
    #[default]
    User,
    /// The agent side's words.
    Agent,
}

impl Speaker {
    pub fn as_str(self) -> &'static str {
        match self {
            Speaker::User => "user",
            Speaker::Agent => "agent",
        }
    }

    /// A speaker named by a model or a client: `agent` (or `assistant`),
    /// else the user.
    pub fn parse_lenient(s: &str) -> Speaker {
        match s.trim().to_lowercase().as_str() {
            "agent" | "assistant" | "ai" | "bot" => Speaker::Agent,
            _ => Speaker::User,
        }
    }

    /// The prefix that keeps the agent side's one-valued subjects apart
    /// from the user's: the agent's `home` is `agent:home`, so that what
    /// the agent side says of its own home never replaces the user's.
    pub const AGENT_SUBJECT: &'static str = "agent:";

    /// `subject` as this speaker's facts hold it.
    pub fn subject(self, subject: Option<String>) -> Option<String> {
        match (self, subject) {
            (Speaker::Agent, Some(s)) if !s.starts_with(Self::AGENT_SUBJECT) => {
                Some(format!("{}{s}", Self::AGENT_SUBJECT))
            }
            (_, s) => s,
        }
    }
}

/// A fact as a reflection states it, before it is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactCandidate {
    pub category: FactCategory,
    pub content: String,
    #[serde(default)]
    pub subject: Option<String>,
    /// Whose words it came from.
    #[serde(default)]
    pub speaker: Speaker,
}

/// Normalized for de-duplication: lower case, single spaces, no trailing
/// punctuation.
pub fn normalize_fact(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(['.', '!', '?', ';', ','])
        .to_lowercase()
}

/// A verbatim fact about a user, extracted by a reflection.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    pub fact_id: Uuid,
    pub agent_id: String,
    /// The user the fact is about, and its owner.
    pub user_id: String,
    pub category: FactCategory,
    pub content: String,
    /// What the fact is about when it holds one value at a time (`name`,
    /// `employer`, `home`, `sister:leela:role`): a later call's value
    /// replaces an earlier call's; two values in one call conflict.
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub visibility: Visibility,
    /// The session it was extracted from.
    #[serde(default)]
    pub source_session_id: Option<Uuid>,
    pub extracted_at: DateTime<Utc>,
    /// Another fact on the same subject stated in the same call with
    /// another value: flagged for resolution, neither overwritten. (A
    /// value from a later call replaces the earlier one instead: see
    /// [`FactHistory`].)
    #[serde(default)]
    pub conflicts_with: Option<Uuid>,
    /// Whose words it came from: the user's (also every fact stored
    /// before this was kept) or the agent side's.
    #[serde(default)]
    pub speaker: Speaker,
}

/// A fact's place in the history of its subject.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactHistory {
    /// When the user said it: the start of the call it came from. `None`
    /// on facts stored before it was kept (read as `extracted_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stated_at: Option<DateTime<Utc>>,
    /// Set when a later call gave the fact's subject another value: the
    /// fact that did. Such a fact is kept as history, not shown as current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Uuid>,
    /// When the value that replaced it was stated: the end of its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_at: Option<DateTime<Utc>>,
}

/// A fact as the Store keeps it and the facts API lists it: the fact and
/// its history, in one flat JSON object (so records stored before the
/// history was kept load with an empty one).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactRecord {
    #[serde(flatten)]
    pub fact: Fact,
    #[serde(flatten)]
    pub history: FactHistory,
}

impl FactRecord {
    /// When the user said it (the start of the call), else when it was
    /// extracted.
    pub fn stated(&self) -> DateTime<Utc> {
        self.history.stated_at.unwrap_or(self.fact.extracted_at)
    }

    /// Whether this is its subject's value in force: not replaced by a
    /// later call's.
    pub fn is_current(&self) -> bool {
        self.history.superseded_by.is_none()
    }
}

impl std::ops::Deref for FactRecord {
    type Target = Fact;
    fn deref(&self) -> &Fact {
        &self.fact
    }
}

/// The value a current fact replaced, for a context to say "earlier:
/// Lives in Austin (until 2026-03-02)".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierValue {
    /// The earlier fact (kept as history).
    pub fact_id: Uuid,
    pub content: String,
    /// When the earlier value was stated.
    pub stated_at: DateTime<Utc>,
    /// When the value that replaced it was stated.
    pub until: DateTime<Utc>,
}
