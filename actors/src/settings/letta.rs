//! `[letta]`: the Letta mirror (see [`crate::mirror`]).

use serde::{Deserialize, Serialize};

use super::{positive, SettingsError};
use crate::mirror::Target;

/// Which Letta agents mirror which recall agent's (or user's) memory, and
/// how the mirror reaches the server. Off while `base_url` is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LettaSettings {
    /// The Letta server, e.g. `http://127.0.0.1:8283` (empty: no mirror).
    pub base_url: String,
    /// The environment variable holding the server's token (unset or
    /// empty: no `Authorization` header).
    pub token_env: String,
    /// HTTP timeout per request, in seconds.
    pub timeout_secs: u64,
    /// How long a change waits before it is mirrored, in milliseconds (the
    /// writes of one reflection go together).
    pub delay_ms: u64,
    /// The longest wait between tries of a target that fails, in seconds
    /// (the wait starts at 1 s and doubles).
    pub retry_max_secs: u64,
    /// How often every target is brought in step again, in seconds (the
    /// rendered `background_context` moves with time; what was changed
    /// on the Letta side by hand is put back).
    pub refresh_secs: u64,
    pub agents: Vec<LettaAgent>,
}

/// One mapping: a Letta agent that mirrors a recall agent's summaries, of
/// every user, or of one user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LettaAgent {
    pub recall_agent: String,
    /// Only this user's summaries, and this user's `background_context`
    /// (without: every user's summaries, and the agent's own block, which
    /// holds no user's conversations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The Letta agent's id (`agent-…`).
    pub letta_agent: String,
}

impl Default for LettaSettings {
    fn default() -> Self {
        LettaSettings {
            base_url: String::new(),
            token_env: "RECALL_LETTA_TOKEN".into(),
            timeout_secs: 30,
            delay_ms: 500,
            retry_max_secs: 300,
            refresh_secs: 3_600,
            agents: Vec::new(),
        }
    }
}

impl LettaSettings {
    /// Whether the mirror runs.
    pub fn enabled(&self) -> bool {
        !self.base_url.trim().is_empty()
    }

    /// The mirror's targets.
    pub fn targets(&self) -> Vec<Target> {
        self.agents
            .iter()
            .map(|a| Target {
                agent_id: a.recall_agent.clone(),
                user_id: a.user.clone(),
                remote: a.letta_agent.clone(),
            })
            .collect()
    }

    /// Rejects values the mirror cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let err = |key, reason: String| Err(SettingsError { key, reason });
        if !self.enabled() {
            if !self.agents.is_empty() {
                return err(
                    "letta.base_url",
                    "is empty, but letta.agents maps agents: set the Letta server's URL".into(),
                );
            }
            return Ok(());
        }
        let url = self.base_url.trim();
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.chars().any(char::is_whitespace)) {
            return err(
                "letta.base_url",
                format!("{url:?} is not an http:// or https:// URL"),
            );
        }
        positive("letta.timeout_secs", self.timeout_secs)?;
        positive("letta.retry_max_secs", self.retry_max_secs)?;
        positive("letta.refresh_secs", self.refresh_secs)?;
        if self.agents.is_empty() {
            return err(
                "letta.agents",
                "maps no agent: add [[letta.agents]] with recall_agent and letta_agent".into(),
            );
        }
        let mut seen_remote = std::collections::HashSet::new();
        let mut seen_source = std::collections::HashSet::new();
        for a in &self.agents {
            if let Err(e) = crate::model::validate_id("recall_agent", &a.recall_agent) {
                return err("letta.agents.recall_agent", e.to_string());
            }
            if let Some(u) = &a.user {
                if let Err(e) = crate::model::validate_id("user", u) {
                    return err("letta.agents.user", e.to_string());
                }
            }
            let id = &a.letta_agent;
            // (At least one letter or digit: `.` and `..` are no id, and
            // a URL path would drop them.)
            if id.len() > 256
                || !id.chars().any(|c| c.is_ascii_alphanumeric())
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            {
                return err(
                    "letta.agents.letta_agent",
                    format!("{id:?} is not a Letta agent id such as agent-1f0c…: ASCII letters, digits, - _ . : (1 to 256)"),
                );
            }
            // One Letta agent mirrors one source: two would overwrite each
            // other's block and delete each other's passages.
            if !seen_remote.insert(id.as_str()) {
                return err(
                    "letta.agents.letta_agent",
                    format!(
                        "{id:?} is mapped twice; a Letta agent mirrors one recall agent (or user)"
                    ),
                );
            }
            if !seen_source.insert((a.recall_agent.as_str(), a.user.as_deref())) {
                return err(
                    "letta.agents",
                    format!(
                        "recall agent {:?}{} is mapped twice",
                        a.recall_agent,
                        a.user
                            .as_ref()
                            .map(|u| format!(" with user {u:?}"))
                            .unwrap_or_default()
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(agents: &[(&str, Option<&str>, &str)]) -> LettaSettings {
        LettaSettings {
            base_url: "http://127.0.0.1:8283".into(),
            agents: agents
                .iter()
                .map(|(a, u, l)| LettaAgent {
                    recall_agent: a.to_string(),
                    user: u.map(str::to_string),
                    letta_agent: l.to_string(),
                })
                .collect(),
            ..LettaSettings::default()
        }
    }

    #[test]
    fn off_by_default_and_a_mapping_without_a_server_is_refused() {
        let s = LettaSettings::default();
        assert!(!s.enabled());
        s.validate().unwrap();
        let s = LettaSettings {
            base_url: String::new(),
            ..mapped(&[("kairix", None, "agent-1")])
        };
        assert_eq!(s.validate().unwrap_err().key, "letta.base_url");
    }

    #[test]
    fn mappings_are_checked_and_name_their_key() {
        mapped(&[
            ("kairix", None, "agent-1"),
            ("kairix", Some("alice"), "agent-2"),
        ])
        .validate()
        .unwrap();
        let cases = [
            (mapped(&[]), "letta.agents"),
            (
                mapped(&[("", None, "agent-1")]),
                "letta.agents.recall_agent",
            ),
            (
                mapped(&[("kairix", Some(""), "agent-1")]),
                "letta.agents.user",
            ),
            (mapped(&[("kairix", None, "")]), "letta.agents.letta_agent"),
            (
                mapped(&[("kairix", None, "agent 1")]),
                "letta.agents.letta_agent",
            ),
            (
                mapped(&[("kairix", None, "agent-1"), ("other", None, "agent-1")]),
                "letta.agents.letta_agent",
            ),
            (
                mapped(&[
                    ("kairix", Some("a"), "agent-1"),
                    ("kairix", Some("a"), "agent-2"),
                ]),
                "letta.agents",
            ),
        ];
        for (s, key) in cases {
            assert_eq!(s.validate().unwrap_err().key, key, "{s:?}");
        }
        let mut s = mapped(&[("kairix", None, "agent-1")]);
        s.base_url = "127.0.0.1:8283".into();
        assert_eq!(s.validate().unwrap_err().key, "letta.base_url");
        let mut s = mapped(&[("kairix", None, "agent-1")]);
        s.retry_max_secs = 0;
        assert_eq!(s.validate().unwrap_err().key, "letta.retry_max_secs");
    }

    #[test]
    fn targets_follow_the_mappings() {
        let s = mapped(&[("kairix", Some("alice"), "agent-2")]);
        assert_eq!(
            s.targets(),
            vec![Target {
                agent_id: "kairix".into(),
                user_id: Some("alice".into()),
                remote: "agent-2".into(),
            }]
        );
    }
}
