//! `parse_reflection` on arbitrary model output: it never fails, and what it
//! returns keeps the promises the reflector and the Store rely on.
//!
//! Input: the raw model output, a NUL byte, then the conversation as the
//! reflector renders it (`User: …` / `Agent: …` lines). Bytes that are not
//! UTF-8 are replaced, as a model's text would arrive already decoded.
//!
//! Shared by the fuzz target of the same name and by `tests/fuzz_corpus.rs`,
//! which runs it over the committed corpus on every test run.

use std::collections::HashSet;

use recall_actors::model::normalize_fact;
use recall_actors::reflect::parse::{parse_reflection, MAX_ENTITIES, MAX_FACTS, MAX_TOPICS};

/// One input: what it must keep to, asserted.
pub fn check(data: &[u8]) {
    let (raw, conversation) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let raw = String::from_utf8_lossy(raw);
    let conversation = String::from_utf8_lossy(conversation);
    let r = parse_reflection(&raw, &conversation);

    // A session is never summarized by nothing while there was something.
    let nothing = raw.trim().is_empty() && conversation.trim().is_empty();
    assert_eq!(r.summary.is_empty(), nothing, "summary {:?}", r.summary);
    assert_eq!(r.summary, r.summary.trim());
    if r.fallback {
        let basis = if raw.trim().is_empty() {
            &conversation
        } else {
            &raw
        };
        assert_eq!(r.summary, basis.trim());
        assert_eq!(r.self_perception, None);
        assert_eq!(r.relationship, None);
        if let Some(tone) = &r.emotional_tone {
            assert!(["mixed", "positive", "anxious"].contains(&tone.as_str()));
        }
    }

    assert!(r.topics.len() <= MAX_TOPICS, "{} topics", r.topics.len());
    assert!(
        r.entities.len() <= MAX_ENTITIES,
        "{} entities",
        r.entities.len()
    );
    assert!(r.facts.len() <= MAX_FACTS, "{} facts", r.facts.len());

    let mut topics = HashSet::new();
    for t in &r.topics {
        assert!(!t.trim().is_empty(), "blank topic in {:?}", r.topics);
        assert_eq!(*t, t.to_lowercase(), "topic not lowercased");
        assert!(topics.insert(t), "topic {t:?} twice in {:?}", r.topics);
    }
    for (i, e) in r.entities.iter().enumerate() {
        assert!(!e.trim().is_empty(), "blank entity in {:?}", r.entities);
        assert!(
            !r.entities[..i]
                .iter()
                .any(|o| o.to_lowercase() == e.to_lowercase()),
            "entity {e:?} twice in {:?}",
            r.entities
        );
    }
    for s in [&r.emotional_tone, &r.self_perception, &r.relationship]
        .into_iter()
        .flatten()
    {
        assert!(!s.is_empty() && *s == s.trim(), "{s:?}");
    }
    let mut facts = HashSet::new();
    for f in &r.facts {
        assert!(!f.content.trim().is_empty(), "blank fact in {:?}", r.facts);
        // (the same words from each side are two facts)
        assert!(
            facts.insert((f.speaker, normalize_fact(&f.content))),
            "fact {:?} twice in {:?}",
            f.content,
            r.facts
        );
        if let Some(subject) = &f.subject {
            assert!(!subject.is_empty() && *subject == subject.trim());
        }
    }

    // A pure function: the same text, the same reflection.
    assert_eq!(parse_reflection(&raw, &conversation), r);
}
