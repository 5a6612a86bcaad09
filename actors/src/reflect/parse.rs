//! Parsing reflection output. The prompt asks for a JSON object; models do
//! not always comply, so anything unparseable falls back to the raw text
//! with heuristic topics and entities, marked `fallback` (design note 003's
//! fallback, `docs/design/README.md`).

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use crate::model::{normalize_fact, FactCandidate, FactCategory, Speaker};
use crate::text;

/// A parsed reflection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reflection {
    pub summary: String,
    pub topics: Vec<String>,
    pub entities: Vec<String>,
    pub emotional_tone: Option<String>,
    pub self_perception: Option<String>,
    pub relationship: Option<String>,
    pub facts: Vec<FactCandidate>,
    pub fallback: bool,
}

pub const MAX_TOPICS: usize = 8;
pub const MAX_ENTITIES: usize = 16;
pub const MAX_FACTS: usize = 32;

#[derive(Deserialize)]
struct Raw {
    #[serde(alias = "summary_text")]
    summary: Option<Value>,
    #[serde(default)]
    topics: Option<Value>,
    #[serde(default, alias = "key_entities")]
    entities: Option<Value>,
    #[serde(default, alias = "tone")]
    emotional_tone: Option<Value>,
    #[serde(default)]
    self_perception: Option<Value>,
    #[serde(default)]
    relationship: Option<Value>,
    #[serde(default)]
    facts: Option<Value>,
}

/// Facts given as `[{"category", "content", "subject"?}]` (or plain
/// strings, filed as `other`); malformed entries are skipped, duplicates
/// dropped.
fn facts_of(v: Option<Value>) -> Vec<FactCandidate> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    let mut out: Vec<FactCandidate> = Vec::new();
    for item in items {
        let (category, content, subject, speaker) = match item {
            Value::String(s) => (FactCategory::Other, s, None, Speaker::User),
            Value::Object(mut o) => {
                let content = match o.remove("content").or_else(|| o.remove("fact")) {
                    Some(Value::String(s)) => s,
                    _ => continue,
                };
                let category = match o.remove("category") {
                    Some(Value::String(c)) => FactCategory::parse_lenient(&c),
                    _ => FactCategory::Other,
                };
                let subject = match o.remove("subject") {
                    Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_lowercase()),
                    _ => None,
                };
                // whose words: the user's unless the agent side is named
                let speaker = match o.remove("speaker") {
                    Some(Value::String(s)) => Speaker::parse_lenient(&s),
                    _ => Speaker::User,
                };
                (category, content, subject, speaker)
            }
            _ => continue,
        };
        let content = content.trim().to_string();
        if content.is_empty() {
            continue;
        }
        let norm = normalize_fact(&content);
        if !out
            .iter()
            .any(|f| f.speaker == speaker && normalize_fact(&f.content) == norm)
        {
            out.push(FactCandidate {
                category,
                content,
                subject,
                speaker,
            });
        }
        if out.len() == MAX_FACTS {
            break;
        }
    }
    out
}

fn string_of(v: Option<Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
}

/// A list given as a JSON array of strings or as one comma-separated string.
fn list_of(v: Option<Value>, max: usize) -> Vec<String> {
    let items: Vec<String> = match v {
        Some(Value::Array(a)) => a
            .into_iter()
            .filter_map(|x| match x {
                Value::String(s) => Some(s),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect(),
        Some(Value::String(s)) => s.split(',').map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let mut out: Vec<String> = Vec::new();
    // Full Unicode case: topics are lowercased after this, and "Éa" and
    // "éa" must not both survive as "éa".
    let mut seen = HashSet::new();
    for s in items {
        if out.len() == max {
            break;
        }
        let s = s.trim().to_string();
        if !s.is_empty() && seen.insert(s.to_lowercase()) {
            out.push(s);
        }
    }
    out
}

/// The JSON object inside `raw`: the whole text, or the text between the
/// first `{` and the last `}` (models like to wrap JSON in prose or fences).
fn json_object(raw: &str) -> Option<Raw> {
    if let Ok(r) = serde_json::from_str::<Raw>(raw.trim()) {
        return Some(r);
    }
    let start = raw.find('{')?;
    let end = raw.rfind('}')?;
    if end <= start {
        return None;
    }
    serde_json::from_str::<Raw>(&raw[start..=end]).ok()
}

/// A side's words as [`crate::prompt::conversation_text`] quotes them,
/// unquoted (`"a \"b\""` → `a "b"`); what is not a JSON string is taken as
/// it stands.
fn unquoted(words: &str) -> String {
    serde_json::from_str::<String>(words).unwrap_or_else(|_| words.to_string())
}

/// A conversation as [`crate::prompt::conversation_text`] renders it, with
/// each side's words unquoted: what a summary made of the conversation
/// itself shows.
fn plain_lines(conversation: &str) -> String {
    conversation
        .lines()
        .map(|l| {
            for label in ["User: ", "Agent: "] {
                if let Some(words) = l.strip_prefix(label) {
                    return format!("{label}{}", unquoted(words));
                }
            }
            l.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The user's words of a conversation rendered as `User: …` / `Agent: …`
/// lines, unquoted.
fn user_lines(conversation: &str) -> String {
    conversation
        .lines()
        .filter_map(|l| l.strip_prefix("User: "))
        .map(unquoted)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses reflection output; never fails. `conversation` is used for the
/// fallback when the output is empty, so that a session is never summarized
/// by nothing.
pub fn parse_reflection(raw: &str, conversation: &str) -> Reflection {
    if let Some(r) = json_object(raw) {
        if let Some(summary) = string_of(r.summary) {
            let mut topics = list_of(r.topics, MAX_TOPICS);
            let mut entities = list_of(r.entities, MAX_ENTITIES);
            if topics.is_empty() {
                topics = text::keyword_topics(&summary, MAX_TOPICS);
            }
            if entities.is_empty() {
                entities = text::entities(&summary, MAX_ENTITIES);
            }
            return Reflection {
                summary,
                topics: topics.into_iter().map(|t| t.to_lowercase()).collect(),
                entities,
                emotional_tone: string_of(r.emotional_tone),
                self_perception: string_of(r.self_perception),
                relationship: string_of(r.relationship),
                facts: facts_of(r.facts),
                fallback: false,
            };
        }
    }
    let plain;
    let basis = if raw.trim().is_empty() {
        plain = plain_lines(conversation);
        &plain
    } else {
        raw
    };
    Reflection {
        summary: basis.trim().to_string(),
        topics: text::keyword_topics(basis, MAX_TOPICS),
        entities: text::entities(basis, MAX_ENTITIES),
        emotional_tone: text::emotional_tone(basis),
        self_perception: None,
        relationship: None,
        // The user's own words, not the model's prose, are the source of
        // facts here; capped like the facts a model lists.
        facts: text::facts(&user_lines(conversation))
            .into_iter()
            .take(MAX_FACTS)
            .collect(),
        fallback: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_json_in_fences_with_aliases() {
        let raw = "Sure!\n```json\n{\"summary_text\": \"Mark prepped for Acme.\", \"topics\": \"Interview, salary\", \"key_entities\": [\"Acme\"], \"tone\": \"hopeful\"}\n```";
        let r = parse_reflection(raw, "");
        assert!(!r.fallback);
        assert_eq!(r.summary, "Mark prepped for Acme.");
        assert_eq!(r.topics, vec!["interview", "salary"]);
        assert_eq!(r.entities, vec!["Acme"]);
        assert_eq!(r.emotional_tone.as_deref(), Some("hopeful"));
    }

    #[test]
    fn malformed_output_falls_back_to_raw_text() {
        let raw = "{\"summary\": \"Mark talked about the Globex interview on Friday";
        let r = parse_reflection(raw, "");
        assert!(r.fallback);
        assert_eq!(r.summary, raw);
        assert!(
            r.entities.contains(&"Globex".to_string()),
            "{:?}",
            r.entities
        );
        assert!(r.topics.contains(&"interview".to_string()));
    }

    #[test]
    fn facts_are_parsed_leniently() {
        let raw = r#"{"summary": "Mark talked about work.", "facts": [
            {"category": "Occupation", "content": "Works at Initech", "subject": "Employer"},
            {"category": "astrology", "content": "Is a Leo"},
            "Has a dog",
            {"category": "preference"},
            {"category": "occupation", "content": "works at initech."},
            42
        ]}"#;
        let r = parse_reflection(raw, "");
        assert!(!r.fallback);
        let got: Vec<(FactCategory, &str, Option<&str>)> = r
            .facts
            .iter()
            .map(|f| (f.category, f.content.as_str(), f.subject.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    FactCategory::Occupation,
                    "Works at Initech",
                    Some("employer")
                ),
                (FactCategory::Other, "Is a Leo", None),
                (FactCategory::Other, "Has a dog", None),
            ]
        );
    }

    #[test]
    fn a_facts_speaker_is_kept_and_the_same_words_from_each_side_are_two_facts() {
        let raw = r#"{"summary": "s", "facts": [
            {"category": "hobby", "content": "Keeps bees", "speaker": "Agent"},
            {"category": "hobby", "content": "Keeps bees"},
            {"category": "goal", "content": "Will send the list on Friday", "speaker": "assistant"},
            {"category": "hobby", "content": "keeps bees.", "speaker": "user"},
            {"category": "hobby", "content": "Runs", "speaker": 3}
        ]}"#;
        let r = parse_reflection(raw, "");
        let got: Vec<(&str, Speaker)> = r
            .facts
            .iter()
            .map(|f| (f.content.as_str(), f.speaker))
            .collect();
        assert_eq!(
            got,
            [
                ("Keeps bees", Speaker::Agent),
                ("Keeps bees", Speaker::User),
                ("Will send the list on Friday", Speaker::Agent),
                ("Runs", Speaker::User),
            ]
        );
    }

    #[test]
    fn a_fallback_takes_facts_from_the_users_words_only() {
        let conversation = "User: I work at Hooli\nAgent: I prefer tea myself";
        let r = parse_reflection("not json", conversation);
        assert!(r.fallback);
        let contents: Vec<&str> = r.facts.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(contents, ["Works at Hooli"]);
    }

    #[test]
    fn lists_drop_duplicates_that_differ_in_unicode_case() {
        // Found by the reflect_parse fuzz target.
        let raw = r#"{"summary": "Zoë applied in Köln.", "topics": ["Éa", "éa"], "entities": ["Müller", "MÜLLER"]}"#;
        let r = parse_reflection(raw, "");
        assert_eq!(r.topics, vec!["éa"]);
        assert_eq!(r.entities, vec!["Müller"]);
    }

    #[test]
    fn a_fallback_keeps_at_most_max_facts() {
        // Found by the reflect_parse fuzz target: a prose answer to a long
        // call listed every rule match.
        let conversation: String = (0..MAX_FACTS + 8)
            .map(|i| format!("User: I prefer option {i}\n"))
            .collect();
        let r = parse_reflection("not json", &conversation);
        assert!(r.fallback);
        assert_eq!(r.facts.len(), MAX_FACTS);
        assert_eq!(r.facts[0].content, "Prefers option 0");
    }

    #[test]
    fn empty_output_falls_back_to_the_conversation() {
        let r = parse_reflection("   ", "User: I start at Initech on Monday");
        assert!(r.fallback);
        assert!(r.summary.contains("Initech"));
        // as the prompts quote it: the summary shows the words themselves
        let turn = crate::model::ConversationTurn {
            user_message: "I start at \"Initech\"\non Monday".into(),
            agent_response: "Good luck, Mark".into(),
            timestamp: chrono::Utc::now(),
        };
        let conversation = crate::prompt::conversation_text(&[turn]);
        let r = parse_reflection("", &conversation);
        assert_eq!(
            r.summary,
            "User: I start at \"Initech\"\non Monday\nAgent: Good luck, Mark"
        );
        assert_eq!(r.facts.len(), 1, "{:?}", r.facts);
    }
}
