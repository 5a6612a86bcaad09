//! What the tests of the index share: items, queries, a ranking.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{KeywordTuning, Ranking, SearchQuery};
use crate::model::{ConversationSummary, ConversationTurn};
use crate::text::{Answers, Subjects};

pub(super) fn summary(user: &str, text: &str, topics: &[&str], day: i64) -> ConversationSummary {
    let t = DateTime::<Utc>::from_timestamp(1_790_000_000 + day * 86_400, 0).unwrap();
    ConversationSummary {
        period_end: t + chrono::Duration::minutes(5),
        topics: topics.iter().map(|s| s.to_string()).collect(),
        turn_count: 2,
        ..ConversationSummary::session(Uuid::new_v4(), "kairix", user, t, text)
    }
}

pub(super) fn query(text: &str, user: Option<&str>) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        user_id: user.map(str::to_string),
        limit: 10,
        ..Default::default()
    }
}

pub(super) const RANK: Ranking = Ranking {
    dense: 0,
    exhaustive: false,
    related: None,
    distinct: false,
    changes: Subjects::NONE,
    expects: Answers::NONE,
    keyword_weight: 0.6,
    candidates: 200,
    max_term_share: 1.0,
    recency: None,
    keyword: KeywordTuning::DEFAULT,
};

/// A turn of the user's words and the agent's answer, at a fixed time.
pub(super) fn said(user: &str, agent: &str) -> ConversationTurn {
    ConversationTurn {
        user_message: user.into(),
        agent_response: agent.into(),
        timestamp: DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap(),
    }
}
