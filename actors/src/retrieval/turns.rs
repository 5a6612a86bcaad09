//! A stored turn as a retrieved item, and what shaping reads of it.

use std::sync::Arc;

use chrono::{DateTime, Datelike, Timelike, Utc};
use uuid::Uuid;

use crate::context::{CharEstimate, ContextItem, Source, Tier, TokenCounter};
use crate::model::ConversationTurn;
use crate::search::TurnRef;

/// A stored turn prepared as a retrieved item, with what retrieval asks
/// of it.
pub struct PreparedTurn {
    pub seq: u32,
    pub item: ContextItem,
    pub at: DateTime<Utc>,
    /// Its exchange ([`exchange_key`]); `None` when the user said nothing.
    pub key: Option<u64>,
    /// Whether the agent's answer asks something (the user's next turn
    /// answers it).
    pub asks: bool,
    /// Its user's sentences, as
    /// [`said_key`](crate::reflect::extractive::said_key)s.
    pub said: Box<[u64]>,
}

/// The stored turns `turns` (by sequence number) of `session_id`, around
/// a hit, prepared as retrieved items of `user_id`'s.
pub fn prepare_around(
    user_id: &str,
    session_id: Uuid,
    turns: Vec<(u32, ConversationTurn)>,
) -> Arc<[PreparedTurn]> {
    turns
        .into_iter()
        .map(|(seq, t)| PreparedTurn {
            seq,
            item: retrieved_turn(user_id, TurnRef { session_id, seq }, &t),
            at: t.timestamp,
            key: (!t.user_message.trim().is_empty()).then(|| exchange_key(&t)),
            asks: asks_question(&t.agent_response),
            said: crate::text::sentences(&t.user_message)
                .iter()
                .map(|s| crate::reflect::extractive::said_key(s))
                .collect(),
        })
        .collect()
}

/// What a turn's exchange says, as a key: its words (the user's, then
/// the agent's) lowercased, spacing ignored, hashed: two different
/// exchanges share a key with odds of one in 2^64.
fn exchange_key(t: &ConversationTurn) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static WORDS: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    // The words in one buffer (kept per thread), hashed once with a fast
    // hash: a hash per character, or a new buffer per turn, costs more
    // than the rest of a retrieved turn.
    WORDS.with(|cell| {
        let mut words = cell.borrow_mut();
        words.clear();
        for w in t
            .user_message
            .split_whitespace()
            .chain(t.agent_response.split_whitespace())
        {
            if w.is_ascii() {
                let from = words.len();
                words.push_str(w);
                words[from..].make_ascii_lowercase();
            } else {
                words.extend(w.chars().flat_map(char::to_lowercase));
            }
            words.push(' ');
        }
        let mut h = foldhash::quality::FixedState::with_seed(0x7265_6361_6c6c).build_hasher();
        h.write(words.as_bytes());
        h.finish()
    })
}

/// Whether the agent's answer asks the user something (what the user's
/// next turn then answers).
fn asks_question(agent_response: &str) -> bool {
    agent_response.contains('?')
}

/// A stored turn as a retrieved item: when, the user's words, and of the
/// agent's answer the sentences that ask something or say a number back
/// (at most two). The user's own words are what is remembered; a question
/// says what their next turn answers, and a number said back is often the
/// user's in digits ("the 23rd of July, noted" after "july twenty
/// third"). The rest of an answer ("Ha, the classic couch wake-up.") is
/// left out: on the answer-recall set its room holds more of what was
/// said (dev 87.0 -> 87.9 % at 2,000 tokens).
fn retrieved_turn(user_id: &str, r: TurnRef, t: &ConversationTurn) -> ContextItem {
    let at = t.timestamp;
    // (written out: a format string is parsed again at every call)
    let mut text = format!(
        "- [{:04}-{:02}-{:02} {:02}:{:02}] {user_id}: {}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        t.user_message.trim()
    );
    // (most answers neither ask nor say a number: not split at all)
    let answer = &t.agent_response;
    if answer.bytes().any(|b| b == b'?' || b.is_ascii_digit()) {
        let said: Vec<String> = crate::text::sentences(answer)
            .into_iter()
            .filter(|s| s.trim_end().ends_with('?') || s.chars().any(|c| c.is_ascii_digit()))
            .take(2)
            .collect();
        if !said.is_empty() {
            text.push_str("\n  agent: ");
            text.push_str(&said.join(" "));
        }
    }
    ContextItem {
        tier: Tier::Retrieved,
        source: Source::StoredTurn {
            session: r.session_id,
            seq: r.seq,
        },
        role: crate::context::Role::System,
        tokens: CharEstimate.count(&text),
        text: text.into(),
    }
}
