//! Reflecting on a call longer than the summarizer's model can read at
//! once: in parts, combined.
//!
//! A request holds at most a budget of tokens, counted the way context
//! budgets are ([`CharEstimate`], characters / 4) over the system message
//! and the rendered prompt, so the prompt's own text counts against it,
//! plus [`FRAMING_TOKENS`] for the chat format's own. The budget starts at
//! the summarizer's [`Reflect::max_prompt_tokens`] (none: unbounded). A
//! call whose prompt is over it is reflected in parts: runs of consecutive
//! turns, as many as fit, each through the session prompt as if it were a
//! call of its own (its own times and turn count). A turn is never split.
//!
//! A server that answers that a prompt is over its model's context
//! ([`ReflectError::ContextLengthExceeded`]) halves the budget to half of
//! that prompt's estimate, and the turns from that prompt's first on are
//! planned again; parts already answered are kept. When not even one turn
//! with the prompt's own text fits the budget any more, the reflection
//! gives up ([`ReflectError::ContextTooSmall`], which dead-letters): each
//! refusal halves the budget, so that comes after at most log2 of the
//! first prompt's tokens refusals, never a loop.
//!
//! The parts' answers are combined. What is a set is merged
//! deterministically: facts in call order, the same fact (speaker and
//! normalized words) once, and on a one-valued subject (`home`) the latest
//! part's value only, as one reading of the whole call would state it
//! (two values from one call would be stored as a conflict); topics and
//! entities round-robin across the parts so that early and late ones are
//! both kept within the usual caps; `self_perception` and `relationship`
//! the latest part's that has one (how things stood when the call ended).
//! The summary text is one more request over the parts' summaries
//! ([`crate::prompt::SESSION_COMBINE`]): the session summary is two or
//! three sentences that the background context, rollups and search show,
//! and the parts' summaries strung together would be a dozen times that.
//! Their summaries are short, so the combining request fits where the parts
//! did; when it does not, they are combined in groups that fit, and the
//! groups' summaries again. An answer that is not the JSON asked for
//! leaves the group's summaries joined, marked `fallback`.

use std::time::Duration;

use tracing::{info, warn};

use super::parse::{parse_reflection, Reflection, MAX_ENTITIES, MAX_TOPICS};
use super::{Reflect, ReflectError, ReflectRequest};
use crate::context::{CharEstimate, TokenCounter};
use crate::model::{isoformat, normalize_fact, ConversationTurn, FactCandidate, SessionRecord};
use crate::prompt::{conversation_text, Prompts};

/// Tokens a chat request takes beyond its messages' text: about four per
/// message for the role markers and three to start the answer (OpenAI's
/// counting), for the two messages a reflection sends.
pub const FRAMING_TOKENS: usize = 11;

/// The estimated tokens of a request: its system message and prompt, as
/// [`CharEstimate`] counts them, and the chat format's own.
pub fn request_tokens(request: &ReflectRequest) -> usize {
    CharEstimate.count(&request.system) + CharEstimate.count(&request.prompt) + FRAMING_TOKENS
}

/// The request reflecting on `session`, and the conversation text it holds
/// (the parser's fallback).
pub fn session_request(
    session: &SessionRecord,
    turns: &[ConversationTurn],
    prompts: &Prompts,
) -> (ReflectRequest, String) {
    let conversation = conversation_text(turns);
    let ended_at = session.ended_at.unwrap_or(session.started_at);
    let request = ReflectRequest {
        system: prompts.system.clone(),
        prompt: render_for(
            &prompts.session,
            session,
            (session.started_at, ended_at),
            turns.len(),
            &conversation,
        ),
        session: session.clone(),
        turns: turns.to_vec(),
        sources: Vec::new(),
        max_chars: None,
    };
    (request, conversation)
}

/// A session template (the reflection's, or the combining one, which takes
/// the same values) rendered for `session` over `span` and `turns` turns,
/// with `body` the conversation or the parts' summaries.
fn render_for(
    template: &crate::prompt::PromptTemplate,
    session: &SessionRecord,
    span: (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>),
    turns: usize,
    body: &str,
) -> String {
    let (id, start, end, count) = (
        session.session_id.to_string(),
        isoformat(&span.0),
        isoformat(&span.1),
        turns.to_string(),
    );
    template.render(&[
        &session.agent_id,
        &session.user_id,
        &id,
        &start,
        &end,
        &count,
        body,
    ])
}

/// One reflection of a session, kept across its attempts: what a request
/// may hold, as the server has shown it, and the parts answered so far, so
/// that an attempt after a passing failure (a timeout, a 5xx) asks only
/// for the rest.
#[derive(Debug, Default)]
pub struct PartedReflection {
    /// The most tokens a request may hold; `None`: unbounded.
    budget: Option<usize>,
    /// The parts answered, in call order: the turns they cover (a range of
    /// indices) and what their answer said.
    answered: Vec<(std::ops::Range<usize>, Reflection)>,
    /// The server's last refusal of a prompt as too long.
    refused: Option<ReflectError>,
    /// Requests made, every attempt.
    requests: usize,
}

/// A summary standing for a run of turns: a part's, or a group of parts'
/// once combined.
#[derive(Debug, Clone)]
struct Piece {
    turns: std::ops::Range<usize>,
    summary: String,
}

impl PartedReflection {
    /// A reflection whose requests hold at most `max_prompt_tokens`.
    pub fn new(max_prompt_tokens: Option<usize>) -> Self {
        PartedReflection {
            budget: max_prompt_tokens,
            ..PartedReflection::default()
        }
    }

    /// The most tokens a request may now hold; `None`: unbounded.
    pub fn budget(&self) -> Option<usize> {
        self.budget
    }

    /// The parts answered so far (none when the call went in one request).
    pub fn parts(&self) -> usize {
        self.answered.len()
    }

    /// The requests made so far, every attempt.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Reflects on `session`: in one request while its prompt fits, else in
    /// parts, combined. Each request waits at most `timeout`. An error other
    /// than a prompt over the context ends the attempt; calling again goes
    /// on from the parts answered.
    pub async fn run(
        &mut self,
        reflect: &dyn Reflect,
        prompts: &Prompts,
        session: &SessionRecord,
        turns: &[ConversationTurn],
        timeout: Duration,
    ) -> Result<Reflection, ReflectError> {
        if self.answered.is_empty() {
            let (request, conversation) = session_request(session, turns, prompts);
            let tokens = request_tokens(&request);
            if turns.is_empty() || self.budget.is_none_or(|b| tokens <= b) {
                match self.ask(reflect, request, timeout).await {
                    Ok(raw) => return Ok(parse_reflection(&raw, &conversation)),
                    Err(e @ ReflectError::ContextLengthExceeded { .. }) => {
                        self.halve(session, tokens, e);
                        if turns.is_empty() {
                            return Err(self.too_small(tokens));
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let mut next = self.answered.last().map_or(0, |(r, _)| r.end);
        while next < turns.len() {
            let (range, request, conversation) = self.fit(session, turns, next, prompts)?;
            let tokens = request_tokens(&request);
            match self.ask(reflect, request, timeout).await {
                Ok(raw) => {
                    self.answered
                        .push((range.clone(), parse_reflection(&raw, &conversation)));
                    next = range.end;
                }
                Err(e @ ReflectError::ContextLengthExceeded { .. }) => {
                    self.halve(session, tokens, e);
                }
                Err(e) => return Err(e),
            }
        }
        let (summary, tone, fallback) = self
            .combine(reflect, prompts, session, turns, timeout)
            .await?;
        info!(
            session_id = %session.session_id,
            parts = self.answered.len(),
            budget = self.budget,
            requests = self.requests,
            "session reflected in parts"
        );
        Ok(merge(
            self.answered.iter().map(|(_, r)| r),
            summary,
            tone,
            fallback,
        ))
    }

    async fn ask(
        &mut self,
        reflect: &dyn Reflect,
        request: ReflectRequest,
        timeout: Duration,
    ) -> Result<String, ReflectError> {
        self.requests += 1;
        let res = match tokio::time::timeout(timeout, reflect.reflect(request)).await {
            Ok(res) => res,
            Err(_) => Err(ReflectError::Timeout(timeout)),
        };
        if let Err(e) = &res {
            metrics::counter!("recall_llm_errors_total", "kind" => e.kind()).increment(1);
        }
        res
    }

    /// The server refused a prompt of about `tokens` as too long: a
    /// request may hold half of that from now on.
    fn halve(&mut self, session: &SessionRecord, tokens: usize, refused: ReflectError) {
        let budget = tokens / 2;
        warn!(
            session_id = %session.session_id,
            tokens,
            budget,
            error = %refused,
            "prompt over the model's context; halving the parts"
        );
        self.budget = Some(budget);
        self.refused = Some(refused);
    }

    fn too_small(&mut self, tokens: usize) -> ReflectError {
        ReflectError::ContextTooSmall {
            tokens,
            budget: self.budget.unwrap_or(usize::MAX),
            refused: self.refused.take().map(Box::new),
        }
    }

    /// The next part from turn `start`: as many turns as fit the budget.
    fn fit(
        &mut self,
        session: &SessionRecord,
        turns: &[ConversationTurn],
        start: usize,
        prompts: &Prompts,
    ) -> Result<(std::ops::Range<usize>, ReflectRequest, String), ReflectError> {
        let budget = self.budget.unwrap_or(usize::MAX);
        // The prompt without its conversation, with the whole call's
        // values (the widest turn count), then each turn's lines and the
        // blank line between turns: an estimate to grow the part by,
        // checked on the rendered request below.
        let (empty, _) = session_request(session, &[], prompts);
        let fixed_chars = empty.prompt.chars().count() + turns.len().to_string().len();
        let fixed_tokens = CharEstimate.count(&empty.system) + FRAMING_TOKENS;
        let mut chars = fixed_chars;
        let mut end = start;
        while end < turns.len() {
            let add = conversation_text(std::slice::from_ref(&turns[end]))
                .chars()
                .count()
                + if end > start { 2 } else { 0 };
            if fixed_tokens + (chars + add).div_ceil(4) > budget {
                break;
            }
            chars += add;
            end += 1;
        }
        let mut end = end.max(start + 1);
        loop {
            let (request, conversation) = part_request(session, turns, start..end, prompts);
            let tokens = request_tokens(&request);
            if tokens <= budget {
                return Ok((start..end, request, conversation));
            }
            if end == start + 1 {
                return Err(self.too_small(tokens));
            }
            end -= 1;
        }
    }

    /// The call's summary from its parts': the one part's, or a combining
    /// request's (in groups that fit, as many levels as it takes). Returns
    /// the summary, the tone the last combining answer gave and whether an
    /// answer was not the JSON asked for.
    async fn combine(
        &mut self,
        reflect: &dyn Reflect,
        prompts: &Prompts,
        session: &SessionRecord,
        turns: &[ConversationTurn],
        timeout: Duration,
    ) -> Result<(String, Option<String>, bool), ReflectError> {
        let mut level: Vec<Piece> = self
            .answered
            .iter()
            .map(|(r, x)| Piece {
                turns: r.clone(),
                summary: x.summary.clone(),
            })
            .collect();
        let mut tone = None;
        let mut fallback = false;
        'level: while level.len() > 1 {
            let groups = self.groups(session, turns, &level, prompts)?;
            let mut next = Vec::with_capacity(groups.len());
            for group in groups {
                if group.len() == 1 {
                    next.push(level[group.start].clone());
                    continue;
                }
                let pieces = &level[group.clone()];
                let (request, listing) = combine_request(session, turns, pieces, prompts);
                let tokens = request_tokens(&request);
                let raw = match self.ask(reflect, request, timeout).await {
                    Ok(raw) => raw,
                    Err(e @ ReflectError::ContextLengthExceeded { .. }) => {
                        self.halve(session, tokens, e);
                        continue 'level;
                    }
                    Err(e) => return Err(e),
                };
                let r = parse_reflection(&raw, &listing);
                let summary = if r.fallback {
                    fallback = true;
                    joined(pieces)
                } else {
                    tone = r.emotional_tone;
                    r.summary
                };
                next.push(Piece {
                    turns: pieces[0].turns.start..pieces[pieces.len() - 1].turns.end,
                    summary,
                });
            }
            level = next;
        }
        let summary = level.pop().map(|p| p.summary).unwrap_or_default();
        Ok((summary, tone, fallback))
    }

    /// `level` cut into runs of consecutive pieces whose combining request
    /// fits the budget, each of two pieces at least where two fit.
    fn groups(
        &mut self,
        session: &SessionRecord,
        turns: &[ConversationTurn],
        level: &[Piece],
        prompts: &Prompts,
    ) -> Result<Vec<std::ops::Range<usize>>, ReflectError> {
        let budget = self.budget.unwrap_or(usize::MAX);
        let mut groups = Vec::new();
        let mut start = 0;
        while start < level.len() {
            let mut end = start + 1;
            while end < level.len() {
                let (request, _) = combine_request(session, turns, &level[start..=end], prompts);
                if request_tokens(&request) > budget {
                    break;
                }
                end += 1;
            }
            groups.push(start..end);
            start = end;
        }
        // Without a group of two, another level would be this one again.
        if groups.iter().all(|g| g.len() < 2) {
            let (request, _) = combine_request(session, turns, &level[..2], prompts);
            return Err(self.too_small(request_tokens(&request)));
        }
        Ok(groups)
    }
}

/// The request reflecting on `turns[range]` of `session`, as if it were a
/// call of its own: its times are its first and last turn's (the call's
/// own at either end).
fn part_request(
    session: &SessionRecord,
    turns: &[ConversationTurn],
    range: std::ops::Range<usize>,
    prompts: &Prompts,
) -> (ReflectRequest, String) {
    let mut part = session.clone();
    if range.start > 0 {
        part.started_at = turns[range.start].timestamp;
    }
    if range.end < turns.len() {
        part.ended_at = Some(turns[range.end - 1].timestamp);
    }
    part.turn_count = range.len() as u32;
    session_request(&part, &turns[range], prompts)
}

/// The request combining `pieces`' summaries into the summary of the turns
/// they cover, and the listing it holds (the parser's fallback). Each
/// summary is quoted as a JSON string, as each side's words are in a
/// session prompt, so that one cannot forge another's line.
fn combine_request(
    session: &SessionRecord,
    turns: &[ConversationTurn],
    pieces: &[Piece],
    prompts: &Prompts,
) -> (ReflectRequest, String) {
    let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let listing = pieces
        .iter()
        .map(|p| {
            format!(
                "- turns {}-{}: {}",
                p.turns.start + 1,
                p.turns.end,
                quoted(&p.summary)
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let (first, last) = (
        pieces.first().map_or(0, |p| p.turns.start),
        pieces.last().map_or(0, |p| p.turns.end),
    );
    let started_at = match first {
        0 => session.started_at,
        i => turns.get(i).map_or(session.started_at, |t| t.timestamp),
    };
    let ended_at = if last >= turns.len() {
        session.ended_at.unwrap_or(session.started_at)
    } else {
        turns
            .get(last.saturating_sub(1))
            .map_or(session.started_at, |t| t.timestamp)
    };
    let request = ReflectRequest {
        system: prompts.system.clone(),
        prompt: render_for(
            &prompts.combine,
            session,
            (started_at, ended_at),
            last - first,
            &listing,
        ),
        session: session.clone(),
        turns: Vec::new(),
        sources: pieces.iter().map(|p| p.summary.clone()).collect(),
        max_chars: None,
    };
    (request, listing)
}

/// Summaries joined in order, each once: what a combining answer that is
/// not the JSON asked for leaves.
fn joined(pieces: &[Piece]) -> String {
    let mut seen = std::collections::HashSet::new();
    pieces
        .iter()
        .map(|p| p.summary.trim())
        .filter(|s| !s.is_empty() && seen.insert(s.to_lowercase()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Items of several lists taken round-robin (each list's first, then each
/// one's second, …), each once (case ignored), at most `max`.
fn round_robin<'a>(lists: impl Iterator<Item = &'a [String]>, max: usize) -> Vec<String> {
    let lists: Vec<&[String]> = lists.collect();
    let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for i in 0..longest {
        for l in &lists {
            if out.len() == max {
                return out;
            }
            if let Some(item) = l.get(i) {
                if seen.insert(item.to_lowercase()) {
                    out.push(item.clone());
                }
            }
        }
    }
    out
}

/// The reflection of a call from its parts' (in call order) and the
/// combined summary (see the module's notes).
fn merge<'a>(
    parts: impl Iterator<Item = &'a Reflection> + Clone,
    summary: String,
    tone: Option<String>,
    combine_fallback: bool,
) -> Reflection {
    let mut facts: Vec<FactCandidate> = Vec::new();
    for f in parts.clone().flat_map(|p| &p.facts) {
        let norm = normalize_fact(&f.content);
        if facts
            .iter()
            .any(|k| k.speaker == f.speaker && normalize_fact(&k.content) == norm)
        {
            continue;
        }
        if f.subject.is_some() {
            facts.retain(|k| !(k.speaker == f.speaker && k.subject == f.subject));
        }
        facts.push(f.clone());
    }
    let last_of = |pick: fn(&Reflection) -> &Option<String>| {
        parts.clone().filter_map(|p| pick(p).clone()).last()
    };
    Reflection {
        summary,
        topics: round_robin(parts.clone().map(|p| p.topics.as_slice()), MAX_TOPICS),
        entities: round_robin(parts.clone().map(|p| p.entities.as_slice()), MAX_ENTITIES),
        emotional_tone: tone.or_else(|| last_of(|p| &p.emotional_tone)),
        self_perception: last_of(|p| &p.self_perception),
        relationship: last_of(|p| &p.relationship),
        fallback: combine_fallback || parts.clone().any(|p| p.fallback),
        facts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FactCategory, Speaker};
    use crate::reflect::BoxFuture;
    use std::sync::{Arc, Mutex};

    /// A summarizer whose model reads at most `limit` tokens (estimated as
    /// the server side would: characters / 4 of each message) and answers
    /// a part with the user's words it read, a combining request with the
    /// summaries it read.
    struct Limited {
        limit: usize,
        configured: Option<usize>,
        seen: Arc<Mutex<Vec<(usize, bool)>>>,
    }

    impl Reflect for Limited {
        fn name(&self) -> &'static str {
            "limited"
        }
        fn max_prompt_tokens(&self) -> Option<usize> {
            self.configured
        }
        fn reflect(
            &self,
            request: ReflectRequest,
        ) -> BoxFuture<'static, Result<String, ReflectError>> {
            let tokens = CharEstimate.count(&request.system) + CharEstimate.count(&request.prompt);
            let fits = tokens <= self.limit;
            self.seen
                .lock()
                .unwrap()
                .push((tokens, request.sources.is_empty()));
            Box::pin(async move {
                if !fits {
                    return Err(ReflectError::ContextLengthExceeded {
                        status: 400,
                        body: "context_length_exceeded".into(),
                    });
                }
                let answer = if request.sources.is_empty() {
                    let words: Vec<&str> = request
                        .turns
                        .iter()
                        .map(|t| t.user_message.as_str())
                        .collect();
                    let n = request.turns.len();
                    serde_json::json!({
                        "summary": format!("{}..{}", words[0], words[n - 1]),
                        "topics": [format!("topic {}", words[0])],
                        "relationship": format!("after {}", words[n - 1]),
                        "facts": words.iter().filter(|w| w.contains("home")).map(|w| {
                            serde_json::json!({"category": "biographical", "content": w, "subject": "home"})
                        }).chain(words.iter().filter(|w| w.contains("dog")).map(|w| {
                            serde_json::json!({"category": "biographical", "content": w})
                        })).collect::<Vec<_>>(),
                    })
                } else {
                    serde_json::json!({"summary": request.sources.join(" + "), "emotional_tone": "calm"})
                };
                Ok(answer.to_string())
            })
        }
    }

    fn call(n: usize) -> (SessionRecord, Vec<ConversationTurn>) {
        let at = chrono::DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let session = SessionRecord {
            session_id: uuid::Uuid::from_u128(9),
            agent_id: "kairix".into(),
            user_id: "mark".into(),
            connection_id: "c1".into(),
            started_at: at,
            ended_at: Some(at + chrono::Duration::seconds(60 * n as i64)),
            end_reason: None,
            turn_count: n as u32,
        };
        let turns = (0..n)
            .map(|i| ConversationTurn {
                user_message: match i {
                    3 => "t3 my dog is called Biscuit".into(),
                    5 => "t5 my home is Austin".into(),
                    i if i == n - 2 => format!("t{i} my home is Denver now"),
                    i => format!("t{i} some words about the weather and the week"),
                },
                agent_response: "I see, tell me more about that please.".into(),
                timestamp: at + chrono::Duration::seconds(60 * i as i64),
            })
            .collect();
        (session, turns)
    }

    async fn reflect_with(
        limit: usize,
        configured: Option<usize>,
        n: usize,
    ) -> (
        Result<Reflection, ReflectError>,
        Vec<(usize, bool)>,
        PartedReflection,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let r = Limited {
            limit,
            configured,
            seen: seen.clone(),
        };
        let (session, turns) = call(n);
        let mut parted = PartedReflection::new(r.max_prompt_tokens());
        let out = parted
            .run(
                &r,
                &Prompts::builtin(),
                &session,
                &turns,
                Duration::from_secs(5),
            )
            .await;
        let seen = seen.lock().unwrap().clone();
        (out, seen, parted)
    }

    #[tokio::test]
    async fn a_call_over_the_budget_goes_in_parts_each_within_it() {
        let (out, seen, parted) = reflect_with(2_000, Some(1_500), 120).await;
        let r = out.unwrap();
        assert!(parted.parts() >= 3, "{}", parted.parts());
        assert!(
            seen.iter().all(|(t, _)| *t + FRAMING_TOKENS <= 1_500),
            "{seen:?}"
        );
        assert_eq!(
            seen.iter().filter(|(_, part)| !part).count(),
            1,
            "one combine"
        );
        // the summary is the combine's, over every part's, first to last
        assert!(r.summary.starts_with("t0 "), "{}", r.summary);
        assert!(r.summary.contains("t119 "), "{}", r.summary);
        assert_eq!(r.emotional_tone.as_deref(), Some("calm"));
        assert!(r.relationship.unwrap().starts_with("after t119"));
        // facts from early and late parts; the home the call ended with
        let facts: Vec<&str> = r.facts.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(
            facts,
            ["t3 my dog is called Biscuit", "t118 my home is Denver now"]
        );
        assert!(r.topics.len() > 1 && r.topics.len() <= MAX_TOPICS);
        assert!(!r.fallback);
    }

    #[tokio::test]
    async fn a_refused_prompt_halves_the_parts_until_they_fit() {
        let (out, seen, parted) = reflect_with(1_200, None, 120).await;
        let r = out.unwrap();
        let refused = seen.iter().filter(|(t, _)| *t > 1_200).count();
        assert!(refused >= 2, "the whole call, then a half: {seen:?}");
        assert!(refused <= 6, "{seen:?}");
        assert!(parted.budget().unwrap() < 1_200);
        assert!(r.summary.starts_with("t0 ") && r.summary.contains("t119 "));
        assert_eq!(r.facts.len(), 2, "{:?}", r.facts);
    }

    #[tokio::test]
    async fn a_model_that_cannot_take_one_turn_gives_up_without_looping() {
        let (out, seen, _) = reflect_with(200, None, 400).await;
        let err = out.unwrap_err();
        assert!(
            matches!(
                &err,
                ReflectError::ContextTooSmall {
                    refused: Some(_),
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.kind(), "context_too_small");
        assert!(!err.is_retryable());
        assert!(
            err.chain().contains("context_length_exceeded"),
            "{}",
            err.chain()
        );
        // each refusal halves: about log2 of the first prompt's tokens
        assert!(seen.len() <= 16, "{}", seen.len());
        // a configured budget below one turn fails before any request
        let (out, seen, _) = reflect_with(10_000, Some(100), 40).await;
        assert!(matches!(
            out.unwrap_err(),
            ReflectError::ContextTooSmall { refused: None, .. }
        ));
        assert!(seen.is_empty());
    }

    #[tokio::test]
    async fn a_call_within_the_budget_is_one_request() {
        let (out, seen, parted) = reflect_with(100_000, Some(50_000), 30).await;
        assert!(out.unwrap().summary.starts_with("t0 "));
        assert_eq!(seen.len(), 1);
        assert_eq!(parted.parts(), 0);
    }

    #[test]
    fn merging_keeps_facts_once_and_the_latest_value_of_a_subject() {
        let fact = |content: &str, subject: Option<&str>, speaker| FactCandidate {
            category: FactCategory::Biographical,
            content: content.into(),
            subject: subject.map(str::to_string),
            speaker,
        };
        let part = |facts: Vec<FactCandidate>, topics: &[&str], rel: Option<&str>| Reflection {
            summary: String::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            entities: Vec::new(),
            emotional_tone: None,
            self_perception: None,
            relationship: rel.map(str::to_string),
            facts,
            fallback: false,
        };
        let parts = [
            part(
                vec![
                    fact("Lives in Austin", Some("home"), Speaker::User),
                    fact("Has a dog", None, Speaker::User),
                    fact("Will send the list", None, Speaker::Agent),
                ],
                &["a1", "a2", "a3"],
                Some("early"),
            ),
            part(
                vec![
                    fact("has a  dog", None, Speaker::User),
                    fact("Moved to Denver", Some("home"), Speaker::User),
                ],
                &["b1", "A1"],
                None,
            ),
        ];
        let r = merge(parts.iter(), "s".into(), None, false);
        let facts: Vec<&str> = r.facts.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(
            facts,
            ["Has a dog", "Will send the list", "Moved to Denver"]
        );
        assert_eq!(r.topics, ["a1", "b1", "a2", "a3"]);
        assert_eq!(r.relationship.as_deref(), Some("early"));
        let many: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        assert_eq!(
            round_robin([many.as_slice(), &["late".to_string()][..]].into_iter(), 3),
            ["t0", "late", "t1"]
        );
    }
}
