//! The embedded offline summarizer: no network, no model. A deterministic
//! extractive summary (the highest-scoring sentences the user said, plus
//! the agent's most informative answer), keyword topics, entity spans and a
//! lexicon tone, returned as the same JSON an LLM is asked for.

use serde_json::json;

use super::parse::{MAX_ENTITIES, MAX_TOPICS};
use super::{BoxFuture, Reflect, ReflectError, ReflectRequest};
use crate::model::ConversationTurn;
use crate::text;

/// The offline `Reflect` implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveReflect;

impl Reflect for ExtractiveReflect {
    fn name(&self) -> &'static str {
        "extractive"
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        // CPU work over the whole conversation: off the async workers, so
        // that a burst of sessions ending does not stall live connections.
        Box::pin(async move {
            let job = move || {
                if request.sources.is_empty() {
                    summarize(&request.session.user_id, &request.turns)
                } else {
                    combine(&request.sources)
                }
            };
            match tokio::task::spawn_blocking(job).await {
                Ok(text) => Ok(text),
                Err(e) => Err(ReflectError::Config(format!("the summarizer failed: {e}"))),
            }
        })
    }
}

/// Scores a sentence by the corpus frequency of its content words, damped
/// by length so long rambles do not always win.
fn score(sentence: &str, tf: &std::collections::BTreeMap<String, usize>) -> f64 {
    let words: Vec<String> = text::words(sentence).collect();
    if words.len() < 3 {
        return 0.0;
    }
    let sum: usize = words.iter().filter_map(|w| tf.get(w)).sum();
    sum as f64 / (words.len() as f64).sqrt()
}

fn best_sentences(
    sentences: &[String],
    tf: &std::collections::BTreeMap<String, usize>,
    n: usize,
) -> Vec<String> {
    let mut scored: Vec<(usize, f64)> = sentences
        .iter()
        .enumerate()
        .map(|(i, s)| (i, score(s, tf)))
        .filter(|(_, s)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut picked: Vec<usize> = scored.into_iter().take(n).map(|(i, _)| i).collect();
    picked.sort_unstable();
    picked.into_iter().map(|i| sentences[i].clone()).collect()
}

fn join_words(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The reflection JSON for a session's turns.
pub fn summarize(user_id: &str, turns: &[ConversationTurn]) -> String {
    let user_text: String = turns
        .iter()
        .map(|t| t.user_message.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let agent_text: String = turns
        .iter()
        .map(|t| t.agent_response.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let all = format!("{user_text}\n{agent_text}");
    let tf = text::term_frequencies(&all);
    let topics = text::keyword_topics(&all, MAX_TOPICS);
    // Entities from what the user said first: they are about the user's life.
    let mut entities = text::entities(&user_text, MAX_ENTITIES);
    for e in text::entities(&agent_text, MAX_ENTITIES) {
        if entities.len() < MAX_ENTITIES && !entities.iter().any(|x| x.eq_ignore_ascii_case(&e)) {
            entities.push(e);
        }
    }
    let user_sentences = text::sentences(&user_text);
    let agent_sentences = text::sentences(&agent_text);
    let mut parts = Vec::new();
    if !topics.is_empty() {
        let head: Vec<String> = topics.iter().take(3).cloned().collect();
        parts.push(format!("{user_id} talked about {}.", join_words(&head)));
    }
    for s in best_sentences(&user_sentences, &tf, 2) {
        parts.push(format!("They said: \"{s}\""));
    }
    if let Some(s) = best_sentences(&agent_sentences, &tf, 1).into_iter().next() {
        parts.push(format!("The agent answered: \"{s}\""));
    }
    if parts.is_empty() {
        parts.push(format!(
            "{user_id} had a short exchange of {} turn(s).",
            turns.len()
        ));
    }
    json!({
        "summary": parts.join(" "),
        "topics": topics,
        "entities": entities,
        "emotional_tone": text::emotional_tone(&user_text),
        "facts": text::facts(&user_text),
    })
    .to_string()
}

/// The reflection JSON combining summaries (oldest first): their most
/// informative sentences in order, and topics and entities over all.
pub fn combine(sources: &[String]) -> String {
    let all = sources.join("\n");
    let tf = text::term_frequencies(&all);
    let sentences: Vec<String> = sources.iter().flat_map(|s| text::sentences(s)).collect();
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<String> = sentences
        .into_iter()
        .filter(|s| seen.insert(s.to_lowercase()))
        .collect();
    let picked = best_sentences(&unique, &tf, 4);
    let summary = if picked.is_empty() {
        sources.last().cloned().unwrap_or_default()
    } else {
        picked.join(" ")
    };
    json!({
        "summary": summary,
        "topics": text::keyword_topics(&all, MAX_TOPICS),
        "entities": text::entities(&all, MAX_ENTITIES),
        "emotional_tone": text::emotional_tone(&all),
        "facts": [],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_reflection;
    use super::*;
    use chrono::Utc;

    fn turn(u: &str, a: &str) -> ConversationTurn {
        ConversationTurn {
            user_message: u.into(),
            agent_response: a.into(),
            timestamp: Utc::now(),
        }
    }

    #[test]
    fn summary_is_deterministic_and_parses() {
        let turns = vec![
            turn(
                "I have an interview with Globex on Friday and I'm nervous.",
                "Let's practice the interview questions together.",
            ),
            turn(
                "They want someone who knows Kubernetes. The salary is $140k.",
                "Your Kubernetes work at Initech is a strong story.",
            ),
        ];
        let a = summarize("mark", &turns);
        assert_eq!(a, summarize("mark", &turns));
        let r = parse_reflection(&a, "");
        assert!(!r.fallback);
        assert!(r.summary.starts_with("mark talked about"));
        assert!(r.topics.contains(&"interview".to_string()));
        assert!(r.topics.contains(&"kubernetes".to_string()));
        for e in ["Globex", "Friday", "$140k", "Initech"] {
            assert!(
                r.entities.contains(&e.to_string()),
                "{e} missing from {:?}",
                r.entities
            );
        }
        assert_eq!(r.emotional_tone.as_deref(), Some("anxious"));
    }
}
