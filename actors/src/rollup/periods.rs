//! Plain functions of a rollup: when an agent is due, a rollup's id, the
//! text its summarizer is given, and the record of a period.

use super::*;

/// An agent's place in the spread: a fixed offset from its id.
pub fn spread_offset(agent_id: &str, spread_secs: u64) -> ChronoDuration {
    if spread_secs == 0 {
        return ChronoDuration::zero();
    }
    let h = crate::embed::fnv1a(agent_id.as_bytes());
    ChronoDuration::seconds((h % spread_secs) as i64)
}

/// The id of a rollup: the same period and sources give the same id.
pub fn rollup_id(
    agent_id: &str,
    user_id: &str,
    level: Level,
    period: NaiveDate,
    sources: &[Uuid],
) -> Uuid {
    let mut ids = sources.to_vec();
    ids.sort();
    let mut name = format!("{agent_id}\0{user_id}\0{}\0{period}", level.as_str());
    for id in ids {
        name.push('\0');
        name.push_str(&id.to_string());
    }
    Uuid::new_v5(&ROLLUP_NAMESPACE, name.as_bytes())
}

/// Characters of source summaries one rollup prompt carries at most: a
/// user with very many sessions in a day gets each shortened rather than a
/// prompt no model accepts.
pub(super) const MAX_SOURCE_CHARS: usize = 24_000;

/// A member's text within its share of [`MAX_SOURCE_CHARS`].
pub(super) fn capped(text: &str, members: usize) -> String {
    let share = (MAX_SOURCE_CHARS / members.max(1)).max(160);
    if text.chars().count() <= share {
        text.to_string()
    } else {
        format!("{}…", crate::model::truncate_chars(text, share).trim_end())
    }
}

/// A rollup's text within `max_chars`: whole sentences while they fit
/// (a model may answer longer than asked), else a hard cut.
pub(super) fn within(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out = String::new();
    for s in crate::text::sentences(text) {
        let extra = s.chars().count() + usize::from(!out.is_empty());
        if out.chars().count() + extra > max_chars {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s);
    }
    if out.is_empty() {
        out = format!(
            "{}…",
            crate::model::truncate_chars(text, max_chars.saturating_sub(1)).trim_end()
        );
    }
    out
}

/// Members as the prompt lists them, oldest first, each within its share.
pub(super) fn listing(members: &[&ConversationSummary]) -> String {
    members
        .iter()
        .map(|m| {
            format!(
                "- [{}] {}",
                isoformat(&m.period_start),
                capped(&m.summary_text, members.len())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The record a `Reflect` request carries for a summary of summaries:
/// the period it covers, as if it were one long session.
pub(super) fn period_record(
    id: Uuid,
    agent_id: &str,
    user_id: &str,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    turn_count: u32,
) -> SessionRecord {
    SessionRecord {
        session_id: id,
        agent_id: agent_id.to_string(),
        user_id: user_id.to_string(),
        connection_id: String::new(),
        started_at: start,
        ended_at: Some(end),
        end_reason: None,
        turn_count,
    }
}

pub(super) fn summary_type(level: Level) -> SummaryType {
    match level {
        Level::Daily => SummaryType::Daily,
        Level::Weekly => SummaryType::Weekly,
    }
}

/// The level whose rollups are made of summaries of `t`.
pub(super) fn source_type(level: Level) -> SummaryType {
    match level {
        Level::Daily => SummaryType::Session,
        Level::Weekly => SummaryType::Daily,
    }
}
