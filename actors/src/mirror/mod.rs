//! The mirror: recall's summaries, and the `background_context` block, kept
//! in step in another agent framework's memory (the seed's Letta agents:
//! every summary of every layer as an archival passage with its
//! `[SUMMARY:…]` markers, and the core block `background_context`).
//!
//! [`MirrorPort`] is the port (the `recall` crate has its Letta adapter);
//! [`MirrorActor`] keeps each [`Target`] in step with recall's store.
//!
//! # How nothing is lost
//!
//! The mirror does not queue the writes it must make: it derives them. What
//! a target should hold is what the store holds now (the current summaries
//! of its agent, or of its one user, and the block as rendered now); what
//! the target does hold is in the store's mirror ledger (each summary's
//! passage ids there, written after the target took the passage). A run
//! adds the passages the ledger lacks, deletes those of summaries that are
//! gone or replaced (a replay's superseded version, a forgotten user's
//! summaries) and rewrites the block when it differs from what was last
//! written. So the queue is recall's own durable store: an outage of the
//! target delays the run (it is retried with backoff, and recall's own
//! path never waits on it), and a restart runs every target once.
//!
//! A write is marked pending in the ledger before it is sent, with its
//! text's first line (the `[SUMMARY:…]` marker and its period, no words of
//! anyone's), so one whose answer was lost (a timeout, a crash) is looked
//! for on the target before it is written again, or deleted once its
//! summary is gone ([`lost_write`]: Letta's archival insert takes text
//! alone, so a passage is found by its text).

mod actor;

pub use actor::{MirrorActor, MirrorArgs, MirrorMsg, MirrorReport, MirrorRunError, MirrorStats};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::port::BoxFuture;

/// Where a part of recall's memory is mirrored: one agent of the other
/// framework (`remote`), holding one recall agent's summaries, of every
/// user or of one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub agent_id: String,
    /// `None`: every user of the agent (the remote agent's block then gets
    /// the agent's own `background_context`, which holds no user's
    /// conversations; a remote agent of one user gets that user's).
    pub user_id: Option<String>,
    /// The other framework's agent id.
    pub remote: String,
}

impl Target {
    /// Whether a change of `agent_id` (for one user, or every user with
    /// `None`) changes what this target should hold.
    pub fn touched_by(&self, agent_id: Option<&str>, user_id: Option<&str>) -> bool {
        let agent = agent_id.is_none_or(|a| a == self.agent_id);
        let user = match (&self.user_id, user_id) {
            (Some(mine), Some(theirs)) => mine == theirs,
            _ => true,
        };
        agent && user
    }
}

/// What the ledger keeps of one mirrored summary: the ids its passage (or
/// the chunks the target split it into) got there, and a hash of the text
/// written (a topic's summary is rewritten under its id as the topic
/// grows: a new text replaces the passage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirroredSummary {
    pub summary_id: Uuid,
    pub remote_ids: Vec<String>,
    #[serde(default)]
    pub text_hash: u64,
    /// The passages of a text this one replaced, until they are deleted
    /// (a failure between the new passage and the deletion leaves them
    /// here for the next run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_ids: Vec<String>,
    /// A write of this text was begun and its answer not recorded (a
    /// timeout, a crash): the server may hold it, so the next try looks
    /// for it first ([`lost_write`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// While pending: the first line of the text being written (what its
    /// first passage begins with), to find it by when the text is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_head: Option<String>,
}

/// A text's first line, with its line break: a summary's `[SUMMARY:…]`
/// marker (its period follows on the next).
pub fn head_of(text: &str) -> &str {
    let first = text.find('\n').map_or(text.len(), |i| i + 1);
    let second = text[first..]
        .find('\n')
        .map_or(text.len(), |i| first + i + 1);
    &text[..second]
}

/// A passage of a remote agent, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub text: String,
}

/// The shortest passage taken for a later chunk of a text it is part of
/// (a shorter one may be anything the agent stored).
const MIN_CHUNK_CHARS: usize = 32;

/// The passages of a lost write whose text is gone, by its first line: each
/// passage that begins with `head`, and the chunks listed right after it
/// (the server stores one text's chunks together, in order) up to the one
/// that closes the summary (`[/SUMMARY:…]`), none of `known`.
fn by_head(listed: &[Listed], head: &str, known: &std::collections::HashSet<&str>) -> Vec<String> {
    let Some(tag) = head
        .strip_prefix("[SUMMARY:")
        .and_then(|rest| rest.split_once(']'))
        .map(|(tag, _)| tag)
    else {
        return Vec::new();
    };
    let closing = format!("[/SUMMARY:{tag}]");
    let mut out = Vec::new();
    for (i, p) in listed.iter().enumerate() {
        if known.contains(p.id.as_str()) || !p.text.starts_with(head) {
            continue;
        }
        out.push(p.id.clone());
        if p.text.contains(&closing) {
            continue;
        }
        for q in &listed[i + 1..] {
            if known.contains(q.id.as_str()) || q.text.starts_with("[SUMMARY:") {
                break;
            }
            out.push(q.id.clone());
            if q.text.contains(&closing) {
                break;
            }
        }
    }
    out
}

/// The passages of `listed` that a write of `text` whose answer was lost
/// left there, none of `known` (ids the ledger holds for other summaries
/// or older texts): the passage that is `text`, or the chunks it was split
/// into, found by their first (which begins as `text` does, marker and
/// period included). With `text` gone (a summary deleted since) only its
/// first line is known: the passages that begin with it. Nothing when no
/// first chunk is there: the write did not arrive.
pub fn lost_write(
    listed: &[Listed],
    text: Option<&str>,
    head: &str,
    known: &std::collections::HashSet<&str>,
) -> Vec<String> {
    let fresh = || listed.iter().filter(|p| !known.contains(p.id.as_str()));
    let Some(text) = text else {
        return by_head(listed, head, known);
    };
    let text = text.trim();
    if let Some(p) = fresh().find(|p| p.text.trim() == text) {
        return vec![p.id.clone()];
    }
    let Some(first) = fresh().find(|p| {
        let t = p.text.trim();
        t.len() >= head.trim().len() && t.starts_with(head.trim()) && text.starts_with(t)
    }) else {
        return Vec::new();
    };
    let rest = &text[first.text.trim().len()..];
    std::iter::once(first.id.clone())
        .chain(
            fresh()
                .filter(|p| p.id != first.id)
                .filter(|p| {
                    let t = p.text.trim();
                    t.chars().count() >= MIN_CHUNK_CHARS && rest.contains(t)
                })
                .map(|p| p.id.clone()),
        )
        .collect()
}

/// The hash [`MirroredSummary::text_hash`] keeps (FNV-1a: the same in
/// every process and version).
pub fn text_hash(text: &str) -> u64 {
    crate::embed::fnv1a(text.as_bytes())
}

/// A mirror call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    /// No answer (refused, reset, timed out): tried again with backoff.
    #[error("the mirror's server cannot be reached: {0}")]
    Unreachable(String),
    /// An answer other than success; tried again with backoff, since a
    /// server's refusal may be its outage (a 503) or be mended by its
    /// operator (a wrong agent id, a token).
    #[error("the mirror's server answered {status}: {body}")]
    Status {
        status: u16,
        body: String,
        /// The server's `Retry-After`, when it gave one.
        retry_after: Option<Duration>,
    },
    /// A success whose body is not what the port expects.
    #[error("the mirror's server answered with something unreadable: {0}")]
    Malformed(String),
}

impl MirrorError {
    /// Whether the server refused this request for good: a 4xx other than
    /// a missing agent (404, mended by the operator), a timeout (408), a
    /// conflict (409) or a rate limit (429). What such a request would
    /// have written was not written.
    pub fn is_refusal(&self) -> bool {
        matches!(self, MirrorError::Status { status, .. }
            if (400..500).contains(status) && ![404, 408, 409, 425, 429].contains(status))
    }

    /// How long the server asked to be left alone, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            MirrorError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A block as the mirror writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockValue<'a> {
    pub label: &'a str,
    pub value: &'a str,
    /// The character limit recall keeps it under (the limit a block made
    /// on the remote agent gets).
    pub limit: usize,
}

/// The port: writing to the other framework's agents.
pub trait MirrorPort: Send + Sync + 'static {
    /// A short name for logs (`letta`).
    fn name(&self) -> &'static str;
    /// Stores `text` as an archival passage of agent `remote`; the ids of
    /// what it stored (a server may split a long text into several).
    fn put_passage<'a>(
        &'a self,
        remote: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, MirrorError>>;
    /// Every passage of agent `remote` (to find what a write whose answer
    /// was lost left there: [`lost_write`]).
    fn list_passages<'a>(
        &'a self,
        remote: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Listed>, MirrorError>>;
    /// Deletes a passage of agent `remote`; one that is gone already is
    /// not an error.
    fn delete_passage<'a>(
        &'a self,
        remote: &'a str,
        passage_id: &'a str,
    ) -> BoxFuture<'a, Result<(), MirrorError>>;
    /// Sets a core block of agent `remote`, making and attaching it when
    /// the agent has none of that label.
    fn set_block<'a>(
        &'a self,
        remote: &'a str,
        block: BlockValue<'a>,
    ) -> BoxFuture<'a, Result<(), MirrorError>>;
}

/// What renders the `background_context` a target's block gets: a user's,
/// from their summary hierarchy, or the agent's own (the `recall` crate's
/// runtime renders it as a context read does).
pub trait BlockSource: Send + Sync + 'static {
    fn background<'a>(
        &'a self,
        agent_id: &'a str,
        user_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, String>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_write_is_found_by_its_first_chunk_and_never_among_known_ids() {
        let text = "[SUMMARY:TOPIC]\nPeriod: 2026-03-02 to 2026-03-03\nTopics: lisbon\n\nAlice plans a trip to Lisbon in May with her sister Ana, tiles first.";
        let head = head_of(text);
        assert_eq!(head, "[SUMMARY:TOPIC]\nPeriod: 2026-03-02 to 2026-03-03\n");
        let p = |id: &str, t: &str| Listed {
            id: id.into(),
            text: t.into(),
        };
        let (first, rest) = text.split_at(65);
        let old_chunk = "Alice plans a trip to Lisbon in May with her sister Ana,";
        let listed = [
            p(
                "old-1",
                "[SUMMARY:TOPIC]\nPeriod: 2026-03-02 to 2026-03-02\nTopics: lisbon",
            ),
            p("old-2", old_chunk),
            p("mine", "Lisbon"),
            p("new-1", first),
            p("new-2", rest),
        ];
        let none = std::collections::HashSet::new();
        // Its chunks, by the first; the agent's own short note is not one.
        let mut found = lost_write(&listed, Some(text), head, &none);
        found.sort();
        assert_eq!(found, ["new-1", "new-2", "old-2"]);
        // An older version's chunk the ledger holds is left alone.
        let known: std::collections::HashSet<&str> = ["old-2"].into();
        let mut found = lost_write(&listed, Some(text), head, &known);
        found.sort();
        assert_eq!(found, ["new-1", "new-2"]);
        // No first chunk: the write did not arrive.
        assert!(lost_write(&listed[..3], Some(text), head, &none).is_empty());
        // The whole text as one passage.
        let whole = [p("w", text)];
        assert_eq!(lost_write(&whole, Some(text), head, &none), ["w"]);
        // The text gone: what begins with its first line, and the chunks
        // after it up to the one that closes the summary.
        let closed = format!("{rest}\n[/SUMMARY:TOPIC]");
        let chunks = [
            p("new-1", first),
            p("new-2", &closed),
            p("next", "[SUMMARY:SESSION]\nPeriod: x\n\nOther."),
        ];
        assert_eq!(lost_write(&chunks, None, head, &none), ["new-1", "new-2"]);
        assert_eq!(lost_write(&listed, None, head, &none), ["new-1", "new-2"]);
        assert!(lost_write(&listed, None, "", &none).is_empty());
    }

    #[test]
    fn refusals_are_the_4xx_a_retry_would_not_mend() {
        let status = |status| MirrorError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        assert!(status(400).is_refusal() && status(413).is_refusal() && status(422).is_refusal());
        for s in [404, 408, 409, 429, 500, 503] {
            assert!(!status(s).is_refusal(), "{s}");
        }
        assert!(!MirrorError::Unreachable("reset".into()).is_refusal());
    }

    #[test]
    fn a_target_is_touched_by_its_agent_and_its_user_or_by_changes_of_every_user() {
        let one = Target {
            agent_id: "kairix".into(),
            user_id: Some("alice".into()),
            remote: "agent-1".into(),
        };
        let all = Target {
            user_id: None,
            ..one.clone()
        };
        assert!(one.touched_by(Some("kairix"), Some("alice")));
        assert!(!one.touched_by(Some("kairix"), Some("bob")));
        assert!(one.touched_by(Some("kairix"), None), "every user's change");
        assert!(!one.touched_by(Some("other"), Some("alice")));
        assert!(one.touched_by(None, None), "everything may have changed");
        assert!(all.touched_by(Some("kairix"), Some("bob")));
        assert!(!all.touched_by(Some("other"), None));
    }
}
