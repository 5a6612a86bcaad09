//! The `background_context` block as plain functions: what it is
//! rendered from, its active topics and lines, and the live topic of
//! each call.

use super::*;

/// What a `background_context` block is rendered from: the summary
/// hierarchy, newest first where there are several.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hierarchy<'a> {
    /// Session summaries within the look-back, newest first.
    pub recent: &'a [&'a ConversationSummary],
    /// The latest daily and weekly rollups (current versions).
    pub daily: Option<&'a ConversationSummary>,
    pub weekly: Option<&'a ConversationSummary>,
    /// Topic labels, the most relevant first (a live call's topic, then by
    /// last activity).
    pub topics: &'a [String],
    pub persistent: &'a [String],
}

/// The active topics: topic labels when there are topics, otherwise the
/// recent summaries' keywords by frequency.
pub(super) fn active_topics(h: &Hierarchy<'_>, max_topics: usize) -> Vec<String> {
    if !h.topics.is_empty() {
        return h.topics.iter().take(max_topics).cloned().collect();
    }
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut order = 0;
    for s in h.recent {
        for t in &s.topics {
            let e = counts.entry(t.as_str()).or_insert((0, order));
            e.0 += 1;
            order += 1;
        }
    }
    let mut topics: Vec<(&str, (usize, usize))> = counts.into_iter().collect();
    topics.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    topics
        .into_iter()
        .take(max_topics)
        .map(|(t, _)| t.to_string())
        .collect()
}

/// Renders the block from the hierarchy within `limit` characters.
///
/// Lines, in this order: `Recent:` (the newest session summary in the
/// look-back), `Today so far:`/`Day <date>:` (the latest daily rollup),
/// `Week of <date>:` (the latest weekly rollup), `Active topics:`, then the
/// persistent context lines. What goes first when it does not fit: the
/// weekly line, then the daily line, then topics from the least relevant,
/// then the recent summary is shortened to a 40-character stub, then
/// persistent lines from the last; the final cut is on a character
/// boundary. Persistent context, set by an operator, is kept longest.
pub fn render_context(
    now: DateTime<Utc>,
    h: &Hierarchy<'_>,
    max_topics: usize,
    limit: usize,
) -> String {
    let mut ctx = BackgroundContext {
        last_updated: now,
        recent_session_summary: h.recent.first().map(|s| s.summary_text.clone()),
        active_topics: active_topics(h, max_topics),
        persistent_context: h.persistent.to_vec(),
    };
    let mut daily = h.daily.map(|d| {
        format!(
            "Day {}: {}",
            d.period_start.format("%Y-%m-%d"),
            d.summary_text
        )
    });
    let mut weekly = h.weekly.map(|w| {
        format!(
            "Week of {}: {}",
            w.period_start.format("%Y-%m-%d"),
            w.summary_text
        )
    });
    let render = |c: &BackgroundContext, daily: &Option<String>, weekly: &Option<String>| {
        let mut lines = Vec::new();
        if let Some(r) = &c.recent_session_summary {
            lines.push(format!("Recent: {r}"));
        }
        lines.extend(daily.iter().cloned());
        lines.extend(weekly.iter().cloned());
        if !c.active_topics.is_empty() {
            lines.push(format!("Active topics: {}", c.active_topics.join(", ")));
        }
        for p in &c.persistent_context {
            lines.push(format!("- {p}"));
        }
        lines.join("\n")
    };
    let over = |c: &BackgroundContext, d: &Option<String>, w: &Option<String>| {
        render(c, d, w).chars().count().saturating_sub(limit)
    };
    if over(&ctx, &daily, &weekly) > 0 {
        weekly = None;
    }
    if over(&ctx, &daily, &weekly) > 0 {
        daily = None;
    }
    while over(&ctx, &daily, &weekly) > 0 && !ctx.active_topics.is_empty() {
        ctx.active_topics.pop();
    }
    let excess = over(&ctx, &daily, &weekly);
    if excess > 0 {
        if let Some(recent) = &ctx.recent_session_summary {
            // keep at least a readable stub of the recent summary
            let keep = recent.chars().count().saturating_sub(excess + 1).max(40);
            if keep < recent.chars().count() {
                ctx.recent_session_summary =
                    Some(format!("{}…", truncate_chars(recent, keep).trim_end()));
            }
        }
    }
    while over(&ctx, &daily, &weekly) > 0 && !ctx.persistent_context.is_empty() {
        ctx.persistent_context.pop();
    }
    truncate_chars(&render(&ctx, &daily, &weekly), limit).to_string()
}

/// Topic labels in the order a block lists them: the live call's topic
/// first, then by last activity.
pub fn topic_order(topics: &[Topic], live: Option<Uuid>) -> Vec<String> {
    let mut sorted: Vec<&Topic> = topics.iter().collect();
    sorted.sort_by_key(|t| {
        (
            std::cmp::Reverse(Some(t.topic_id) == live),
            std::cmp::Reverse(t.last_active),
            t.topic_id,
        )
    });
    let mut seen = std::collections::HashSet::new();
    sorted
        .into_iter()
        .filter(|t| seen.insert(t.label.clone()))
        .map(|t| t.label.clone())
        .collect()
}

/// The topic a live call is on, per (agent, user): set by the watchdog on
/// a topic shift, read when blocks are rendered.
#[derive(Debug, Default)]
pub struct LiveTopics(std::sync::Mutex<HashMap<AgentUser, (Uuid, DateTime<Utc>)>>);

/// An (agent, user) pair.
pub(super) type AgentUser = (String, String);

impl LiveTopics {
    /// The live topic of a user, if set within `max_age`.
    pub fn get(
        &self,
        agent_id: &str,
        user_id: &str,
        now: DateTime<Utc>,
        max_age: chrono::Duration,
    ) -> Option<Uuid> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(agent_id.to_string(), user_id.to_string()))
            .filter(|(_, at)| now - *at <= max_age)
            .map(|(id, _)| *id)
    }

    /// Forgets a user's live topic (with one agent, or with all).
    pub fn remove_user(&self, user_id: &str, agent_id: Option<&str>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|(a, u), _| !(u == user_id && agent_id.is_none_or(|x| x == a)));
    }

    /// Sets (or refreshes) the live topic.
    pub(super) fn set(&self, agent_id: &str, user_id: &str, topic: Uuid, now: DateTime<Utc>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert((agent_id.to_string(), user_id.to_string()), (topic, now));
    }
}
