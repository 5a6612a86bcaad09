//! Incremental topic clustering (seed Phase 3): each new session summary
//! joins the user's most similar topic when the cosine similarity of its
//! vector and the topic's centroid reaches the threshold, or starts a new
//! topic. Centroids are the sum of member vectors, labels the members' most
//! frequent topic keywords. Everything here is a pure function of the
//! summaries in the order they are given, so the same input gives the same
//! topics; ties go to the older topic.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::embed::cosine;
use crate::model::{ConversationSummary, Topic};

/// Namespace of topic ids (UUID v5 of agent, user and first member).
const TOPIC_NAMESPACE: Uuid = Uuid::from_u128(0x6c1f_5a9e_2b7d_4e21_9c3a_0f4d_8e6b_1a72);

/// Keywords in a label.
const LABEL_KEYWORDS: usize = 2;
/// Keyword counts a topic keeps.
const KEPT_KEYWORDS: usize = 24;

/// The index of the topic `vector` belongs to, if any reaches `threshold`.
/// Topics of another embedder are never matched.
pub fn closest(topics: &[Topic], embedder: &str, vector: &[f32], threshold: f32) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, t) in topics.iter().enumerate() {
        if t.embedder != embedder {
            continue;
        }
        let sim = cosine(&t.centroid, vector);
        if sim >= threshold && best.is_none_or(|(_, b)| sim > b) {
            best = Some((i, sim));
        }
    }
    best.map(|(i, _)| i)
}

/// A new topic with `first` as its only member.
pub fn start(
    first: &ConversationSummary,
    embedder: &str,
    vector: &[f32],
    now: DateTime<Utc>,
) -> Topic {
    let name = format!(
        "{}\0{}\0{}",
        first.agent_id, first.user_id, first.summary_id
    );
    let mut t = Topic {
        topic_id: Uuid::new_v5(&TOPIC_NAMESPACE, name.as_bytes()),
        agent_id: first.agent_id.clone(),
        user_id: first.user_id.clone(),
        label: String::new(),
        keywords: Vec::new(),
        centroid: vec![0.0; vector.len()],
        embedder: embedder.to_string(),
        member_ids: Vec::new(),
        created_at: now,
        updated_at: now,
        last_active: first.period_end,
    };
    join(&mut t, first, vector, now);
    t
}

/// Adds a member (once: a summary already in the topic changes nothing).
/// Returns whether it joined.
/// Takes `member` out of `topic`: its id, and its keywords from the counts
/// (a replayed session's old version, before its new one joins).
pub fn leave(topic: &mut Topic, member: &ConversationSummary) {
    topic.member_ids.retain(|m| *m != member.summary_id);
    for k in &member.topics {
        let k = k.trim().to_lowercase();
        if let Some((_, n)) = topic.keywords.iter_mut().find(|(w, _)| *w == k) {
            *n = n.saturating_sub(1);
        }
    }
    topic.keywords.retain(|(_, n)| *n > 0);
    topic.keywords.sort_by_key(|k| std::cmp::Reverse(k.1));
    topic.label = label(&topic.keywords);
}

pub fn join(
    topic: &mut Topic,
    member: &ConversationSummary,
    vector: &[f32],
    now: DateTime<Utc>,
) -> bool {
    if topic.member_ids.contains(&member.summary_id) {
        return false;
    }
    topic.member_ids.push(member.summary_id);
    if topic.centroid.len() == vector.len() {
        for (c, v) in topic.centroid.iter_mut().zip(vector) {
            *c += v;
        }
    }
    for k in &member.topics {
        let k = k.trim().to_lowercase();
        if k.is_empty() {
            continue;
        }
        match topic.keywords.iter_mut().find(|(w, _)| *w == k) {
            Some((_, n)) => *n += 1,
            None => topic.keywords.push((k, 1)),
        }
    }
    // Stable sort: among equal counts the keyword seen first stays first.
    topic.keywords.sort_by_key(|k| std::cmp::Reverse(k.1));
    topic.keywords.truncate(KEPT_KEYWORDS);
    topic.label = label(&topic.keywords);
    topic.updated_at = now;
    topic.last_active = topic.last_active.max(member.period_end);
    true
}

/// The label of a topic with these keyword counts.
pub fn label(keywords: &[(String, u32)]) -> String {
    let words: Vec<&str> = keywords
        .iter()
        .take(LABEL_KEYWORDS)
        .map(|(w, _)| w.as_str())
        .collect();
    if words.is_empty() {
        "untitled".to_string()
    } else {
        words.join(" & ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashingEmbed;

    fn summary(text: &str, topics: &[&str], minute: i64) -> ConversationSummary {
        let t = DateTime::<Utc>::from_timestamp(1_790_000_000 + minute * 60, 0).unwrap();
        let id = Uuid::new_v5(&Uuid::NAMESPACE_OID, text.as_bytes());
        ConversationSummary {
            topics: topics.iter().map(|s| s.to_string()).collect(),
            turn_count: 2,
            ..ConversationSummary::session(id, "kairix", "mark", t, text)
        }
    }

    fn cluster(items: &[ConversationSummary]) -> Vec<Topic> {
        let e = HashingEmbed::default();
        let now = Utc::now();
        let mut topics: Vec<Topic> = Vec::new();
        for s in items {
            let v = e.vector(&crate::embed::summary_text(s));
            match closest(&topics, "hashing", &v, 0.3) {
                Some(i) => {
                    join(&mut topics[i], s, &v, now);
                }
                None => topics.push(start(s, "hashing", &v, now)),
            }
        }
        topics
    }

    fn corpus() -> Vec<ConversationSummary> {
        vec![
            summary(
                "Mark prepared for the Globex interview and asked about salary.",
                &["interview", "globex", "salary"],
                0,
            ),
            summary(
                "Mark planned a sailing weekend in Porto with his sister.",
                &["sailing", "porto", "weekend"],
                60,
            ),
            summary(
                "Mark got a second Globex interview and negotiated the salary offer.",
                &["interview", "globex", "offer"],
                120,
            ),
            summary(
                "Mark booked the boat for the sailing trip to Porto.",
                &["sailing", "porto", "boat"],
                180,
            ),
            summary(
                "Mark rehearsed interview answers about Kubernetes for Globex.",
                &["interview", "kubernetes", "globex"],
                240,
            ),
        ]
    }

    #[test]
    fn similar_summaries_share_a_topic_and_labels_follow_keywords() {
        let topics = cluster(&corpus());
        assert_eq!(topics.len(), 2, "{topics:#?}");
        let ids = |t: &Topic| t.member_ids.clone();
        let c = corpus();
        assert_eq!(
            ids(&topics[0]),
            [c[0].summary_id, c[2].summary_id, c[4].summary_id]
        );
        assert_eq!(ids(&topics[1]), [c[1].summary_id, c[3].summary_id]);
        assert_eq!(topics[0].label, "interview & globex");
        assert_eq!(topics[1].label, "sailing & porto");
        assert_eq!(topics[1].last_active, c[3].period_end);
    }

    #[test]
    fn membership_is_stable_for_the_same_input() {
        let a = cluster(&corpus());
        let b = cluster(&corpus());
        let key = |ts: &[Topic]| {
            ts.iter()
                .map(|t| (t.topic_id, t.member_ids.clone(), t.label.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&a), key(&b));
        // joining a member twice changes nothing
        let mut t = a[0].clone();
        let c = corpus();
        let v = HashingEmbed::default().vector(&crate::embed::summary_text(&c[0]));
        assert!(!join(&mut t, &c[0], &v, Utc::now()));
        assert_eq!(t.member_ids, a[0].member_ids);
        assert_eq!(t.centroid, a[0].centroid);
    }

    #[test]
    fn another_embedders_topics_are_not_matched() {
        let topics = cluster(&corpus());
        let v = HashingEmbed::default().vector("Globex interview salary");
        assert_eq!(closest(&topics, "hashing", &v, 0.3), Some(0));
        assert_eq!(closest(&topics, "openai", &v, 0.3), None);
    }
}
