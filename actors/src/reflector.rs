//! ReflectorActor: one per session reflection.
//!
//! Receives `Attempt(n)` (the first from `post_start`, later ones from its
//! own backoff timer). Loads the session and its turns from the Store,
//! renders the prompt template, calls the `Reflect` port (in parts,
//! combined, when the call is longer than a request may hold:
//! [`crate::reflect::parts`]), parses the output (raw-text fallback when it
//! is not the JSON asked for) and sends the summary with any
//! `self_perception`/`relationship` updates to the Store in one
//! `CompleteReflection`. Timeouts, 5xx and 429 are retried with
//! exponential backoff and equal jitter, honouring `Retry-After`; after
//! `max_attempts` the job goes to the dead-letter tree. Tells the supervisor
//! `ReflectionFinished` and stops.

use std::sync::Arc;
use std::time::Duration;

use ractor::{call_t, Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};
use uuid::Uuid;

use crate::clock::Clock;
use crate::model::{
    truncate_chars, BlockLabel, BlockWriter, ConversationSummary, ConversationTurn, DeadLetter,
    Fact, MemoryBlock, ReflectionJob, SessionRecord, SourceRange, SummaryType, Visibility,
};
use crate::prompt::Prompts;
use crate::reflect::parse::Reflection;
pub use crate::reflect::parts::session_request;
use crate::reflect::parts::{request_tokens, PartedReflection};
use crate::reflect::{Reflect, ReflectError, ReflectRequest};
use crate::settings::{BlockSettings, ReflectorSettings};
use crate::store::{StoreError, StoreMsg};
use crate::supervisor::{ReflectionOutcome, SupervisorMsg};

const STORE_TIMEOUT_MS: u64 = 30_000;
/// The longest `Retry-After` honoured; a server asking for more is retried
/// after this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3_600);

pub enum ReflectorMsg {
    /// Run attempt number `n` (1-based).
    Attempt(u32),
}

pub struct ReflectorArgs {
    pub job: ReflectionJob,
    pub store: ActorRef<StoreMsg>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub reflect: Arc<dyn Reflect>,
    pub prompts: Arc<Prompts>,
    pub settings: ReflectorSettings,
    pub blocks: BlockSettings,
    pub clock: Clock,
}

pub struct ReflectorState {
    args: ReflectorArgs,
    loaded: Option<(SessionRecord, Vec<ConversationTurn>)>,
    /// What requests may hold and the parts answered, kept across attempts.
    parted: PartedReflection,
}

pub struct ReflectorActor;

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Reflect(#[from] ReflectError),
    #[error("store error")]
    Store(#[source] StoreError),
    #[error("store unreachable: {0}")]
    StoreUnreachable(String),
}

impl AttemptError {
    fn retryable(&self) -> bool {
        match self {
            AttemptError::Reflect(e) => e.is_retryable(),
            AttemptError::Store(_) | AttemptError::StoreUnreachable(_) => true,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AttemptError::Reflect(e) => e.kind(),
            AttemptError::Store(_) | AttemptError::StoreUnreachable(_) => "store",
        }
    }

    fn chain(&self) -> String {
        match self {
            AttemptError::Reflect(e) => e.chain(),
            other => crate::port::error_chain(other),
        }
    }
}

/// The delay before attempt `next` (2 or more): exponential in the attempt
/// number, capped, with equal jitter derived from the session id so a run is
/// reproducible; `Retry-After` wins when the server sent one.
pub fn backoff(
    settings: &ReflectorSettings,
    session_id: uuid::Uuid,
    next: u32,
    retry_after: Option<Duration>,
) -> Duration {
    if let Some(ra) = retry_after {
        return ra.min(MAX_RETRY_AFTER);
    }
    let exp = next.saturating_sub(2).min(30);
    let ceiling = settings
        .backoff_base_ms
        .saturating_mul(1u64 << exp)
        .min(settings.backoff_max_ms);
    let half = ceiling / 2;
    let seed = session_id.as_u128() as u64 ^ u64::from(next).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64 finaliser: a well-spread value from the seed
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let jitter = if half == 0 { 0 } else { z % (half + 1) };
    Duration::from_millis(ceiling - half + jitter)
}

impl ReflectorState {
    async fn load(
        &mut self,
    ) -> Result<Option<(SessionRecord, Vec<ConversationTurn>)>, AttemptError> {
        if self.loaded.is_none() {
            let session_id = self.args.job.session_id;
            let res = call_t!(
                self.args.store,
                |reply| StoreMsg::LoadSession { session_id, reply },
                STORE_TIMEOUT_MS
            )
            .map_err(|e| AttemptError::StoreUnreachable(e.to_string()))?
            .map_err(AttemptError::Store)?;
            self.loaded = res;
        }
        Ok(self.loaded.clone())
    }

    async fn attempt(&mut self) -> Result<Option<ReflectionOutcome>, AttemptError> {
        let Some((session, turns)) = self.load().await? else {
            return Ok(None);
        };
        let reflect = &*self.args.reflect;
        let (request, _) = session_request(&session, &turns, &self.args.prompts);
        let derivation = derivation(&reflect.identity(), &request, reflect.max_prompt_tokens());
        let limit = Duration::from_secs(self.args.settings.attempt_timeout_secs);
        let started = std::time::Instant::now();
        let reflection = self
            .parted
            .run(reflect, &self.args.prompts, &session, &turns, limit)
            .await?;
        metrics::histogram!("recall_reflection_seconds", "reflect" => reflect.name())
            .record(started.elapsed().as_secs_f64());
        let now = self.args.clock.now();
        let (mut summary, blocks, facts) =
            build_reflection(&session, &turns, reflection, now, &self.args.blocks);
        // A fallback (the answer was not the JSON asked for) is not what the
        // inputs should derive: a replay tries it again.
        if !summary.fallback {
            summary.derivation = Some(derivation);
        }
        let stored = call_t!(
            self.args.store,
            |reply| StoreMsg::CompleteReflection {
                summary: Box::new(summary),
                blocks,
                facts,
                reply
            },
            STORE_TIMEOUT_MS
        )
        .map_err(|e| AttemptError::StoreUnreachable(e.to_string()))?
        .map_err(AttemptError::Store)?;
        Ok(Some(if stored {
            ReflectionOutcome::Stored
        } else {
            ReflectionOutcome::Duplicate
        }))
    }

    fn finish(&self, myself: &ActorRef<ReflectorMsg>, outcome: ReflectionOutcome) {
        let _ = self
            .args
            .supervisor
            .cast(SupervisorMsg::ReflectionFinished {
                session_id: self.args.job.session_id,
                outcome,
            });
        myself.stop(None);
    }
}

/// The fingerprint of what a reflection is derived from: the summarizer's
/// identity and the full prompt (template, session and turns), and, for a
/// call whose prompt is over what a request may hold (`max_prompt_tokens`,
/// the summarizer's), that bound, which cuts it into parts. The same inputs
/// give the same fingerprint in every build.
pub fn derivation(
    identity: &str,
    request: &ReflectRequest,
    max_prompt_tokens: Option<usize>,
) -> String {
    const NS: Uuid = Uuid::from_u128(0x7265_6361_6c6c_2d64_6572_6976_6174_696f);
    let mut bytes = Vec::with_capacity(request.system.len() + request.prompt.len() + 64);
    let version = DERIVATION_VERSION.to_string();
    for part in [&version, identity, &request.system, &request.prompt] {
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    if let Some(limit) = max_prompt_tokens.filter(|l| request_tokens(request) > *l) {
        bytes.extend_from_slice(format!("parts of {limit} tokens").as_bytes());
        bytes.push(0);
    }
    // The turns themselves, for a template that leaves them out and a
    // summarizer that reads them directly.
    for t in &request.turns {
        for part in [&t.user_message, &t.agent_response] {
            bytes.extend_from_slice(part.as_bytes());
            bytes.push(0);
        }
    }
    Uuid::new_v5(&NS, &bytes).simple().to_string()
}

/// Bumped when the parsing or building of a reflection changes what the
/// same answer becomes, so that a replay re-derives every session.
pub const DERIVATION_VERSION: u32 = 1;

/// The id of the `index`-th fact drawn into the summary `summary_id`:
/// named by what it came from, so the same reflection stored twice (a
/// retry, a resumed replay) names its facts the same, and a replay in
/// virtual time gives the same ids every run.
pub fn fact_id(summary_id: Uuid, index: usize) -> Uuid {
    Uuid::new_v5(&summary_id, format!("fact {index}").as_bytes())
}

/// A reflection's summary, block updates and facts for `session`.
pub fn build_reflection(
    session: &SessionRecord,
    turns: &[ConversationTurn],
    r: Reflection,
    now: chrono::DateTime<chrono::Utc>,
    block_settings: &BlockSettings,
) -> (ConversationSummary, Vec<MemoryBlock>, Vec<Fact>) {
    let mut blocks = Vec::new();
    for (label, value) in [
        (BlockLabel::SelfPerception, &r.self_perception),
        (BlockLabel::Relationship, &r.relationship),
    ] {
        if let Some(v) = value {
            let limit = block_settings.limit(label);
            blocks.push(MemoryBlock {
                agent_id: session.agent_id.clone(),
                label,
                value: truncate_chars(v, limit).to_string(),
                limit,
                updated_at: now,
                // Drawn from this user's conversation: theirs only.
                source_user_id: Some(session.user_id.clone()),
                written_by: Some(BlockWriter::Reflection),
            });
        }
    }
    // Scoped to this agent and user, private until the user shares them.
    let facts = r
        .facts
        .into_iter()
        .enumerate()
        .map(|(i, f)| Fact {
            fact_id: fact_id(session.session_id, i),
            agent_id: session.agent_id.clone(),
            user_id: session.user_id.clone(),
            category: f.category,
            content: f.content,
            // the agent side's one-valued subjects are its own
            subject: f.speaker.subject(f.subject),
            visibility: Visibility::Private,
            source_session_id: Some(session.session_id),
            extracted_at: now,
            conflicts_with: None,
            speaker: f.speaker,
        })
        .collect();
    let summary = ConversationSummary {
        summary_id: session.session_id,
        summary_type: SummaryType::Session,
        agent_id: session.agent_id.clone(),
        user_id: session.user_id.clone(),
        period_start: session.started_at,
        period_end: session.ended_at.unwrap_or(now),
        summary_text: r.summary,
        topics: r.topics,
        key_entities: r.entities,
        emotional_tone: r.emotional_tone,
        source_summary_ids: Vec::new(),
        source_range: SourceRange::session(session.session_id, turns.len() as u32),
        turn_count: turns.len() as u32,
        created_at: now,
        fallback: r.fallback,
        supersedes: None,
        superseded_by: None,
        derivation: None,
    };
    (summary, blocks, facts)
}

impl Actor for ReflectorActor {
    type Msg = ReflectorMsg;
    type State = ReflectorState;
    type Arguments = ReflectorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ReflectorMsg>,
        args: ReflectorArgs,
    ) -> Result<ReflectorState, ActorProcessingErr> {
        myself.cast(ReflectorMsg::Attempt(1))?;
        let parted = PartedReflection::new(args.reflect.max_prompt_tokens());
        Ok(ReflectorState {
            args,
            loaded: None,
            parted,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ReflectorMsg>,
        msg: ReflectorMsg,
        state: &mut ReflectorState,
    ) -> Result<(), ActorProcessingErr> {
        let ReflectorMsg::Attempt(n) = msg;
        let session_id = state.args.job.session_id;
        match state.attempt().await {
            Ok(Some(outcome)) => {
                info!(%session_id, attempt = n, reflect = state.args.reflect.name(), ?outcome, "session reflected");
                state.finish(&myself, outcome);
            }
            Ok(None) => {
                warn!(%session_id, "session to reflect on is not in the store");
                let letter = DeadLetter {
                    session_id,
                    agent_id: state.args.job.agent_id.clone(),
                    user_id: String::new(),
                    attempts: n,
                    error: "session not found in the store".into(),
                    error_kind: "missing".into(),
                    failed_at: state.args.clock.now(),
                };
                let _ = call_t!(
                    state.args.store,
                    |reply| StoreMsg::DeadLetter { letter, reply },
                    STORE_TIMEOUT_MS
                );
                state.finish(&myself, ReflectionOutcome::Missing);
            }
            Err(err) if err.retryable() && n < state.args.settings.max_attempts => {
                let retry_after = match &err {
                    AttemptError::Reflect(e) => e.retry_after(),
                    _ => None,
                };
                let delay = backoff(&state.args.settings, session_id, n + 1, retry_after);
                // Read the session again next time: it may have been
                // forgotten meanwhile, and then it is not sent again.
                state.loaded = None;
                warn!(%session_id, attempt = n, error = %err.chain(), delay_ms = delay.as_millis() as u64, "reflection failed; retrying");
                myself.send_after(delay, move || ReflectorMsg::Attempt(n + 1));
            }
            Err(err) => {
                warn!(%session_id, attempt = n, error = %err.chain(), "reflection failed; dead-lettering");
                let user_id = state
                    .loaded
                    .as_ref()
                    .map(|(s, _)| s.user_id.clone())
                    .unwrap_or_default();
                let letter = DeadLetter {
                    session_id,
                    agent_id: state.args.job.agent_id.clone(),
                    user_id,
                    attempts: n,
                    error: err.chain(),
                    error_kind: err.kind().to_string(),
                    failed_at: state.args.clock.now(),
                };
                match call_t!(
                    state.args.store,
                    |reply| StoreMsg::DeadLetter { letter, reply },
                    STORE_TIMEOUT_MS
                ) {
                    Ok(Ok(())) => {}
                    // The job is still in the queue tree: it resumes at the
                    // next start rather than being lost.
                    Ok(Err(e)) => {
                        warn!(%session_id, error = %e, "cannot dead-letter; job stays queued")
                    }
                    Err(e) => warn!(%session_id, error = %e, "store unreachable; job stays queued"),
                }
                metrics::counter!("recall_reflections_failed_total").increment(1);
                state.finish(&myself, ReflectionOutcome::DeadLettered);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_honours_retry_after() {
        let s = ReflectorSettings {
            backoff_base_ms: 1_000,
            backoff_max_ms: 8_000,
            ..ReflectorSettings::default()
        };
        let id = uuid::Uuid::from_u128(42);
        let d2 = backoff(&s, id, 2, None);
        assert!(d2 >= Duration::from_millis(500) && d2 <= Duration::from_millis(1_000));
        let d4 = backoff(&s, id, 4, None);
        assert!(d4 >= Duration::from_millis(2_000) && d4 <= Duration::from_millis(4_000));
        let d20 = backoff(&s, id, 20, None);
        assert!(d20 >= Duration::from_millis(4_000) && d20 <= Duration::from_millis(8_000));
        // The jitter is drawn from the session id: the same for a session
        // retried after a restart, spread across sessions (so that calls
        // ended together do not retry together), within its half of the
        // ceiling.
        let d3: Vec<Duration> = (0..64u128)
            .map(|i| backoff(&s, uuid::Uuid::from_u128(i), 3, None))
            .collect();
        assert_eq!(
            d3,
            (0..64u128)
                .map(|i| backoff(&s, uuid::Uuid::from_u128(i), 3, None))
                .collect::<Vec<_>>()
        );
        assert!(d3
            .iter()
            .all(|d| *d >= Duration::from_millis(1_000) && *d <= Duration::from_millis(2_000)));
        let distinct: std::collections::HashSet<_> = d3.iter().collect();
        assert!(distinct.len() > 48, "spread: {} of 64", distinct.len());
        let (lo, hi) = (d3.iter().min().unwrap(), d3.iter().max().unwrap());
        assert!(
            *lo < Duration::from_millis(1_200) && *hi > Duration::from_millis(1_800),
            "{lo:?}..{hi:?}"
        );
        assert_eq!(
            backoff(&s, id, 2, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }
}
