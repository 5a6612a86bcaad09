//! Replay / re-derive (seed `000`, Phase 4.2): an agent's stored sessions
//! reflected on again with today's prompts and summarizer.
//!
//! Each session summary carries a `derivation` fingerprint of what made it
//! (the summarizer's identity and the full prompt, turns included). A
//! session whose fingerprint would not change is skipped without a call to
//! the summarizer, which is what makes a second run change nothing and an
//! interrupted run resume where it stopped. A session whose new reflection
//! says the same is only stamped with the new fingerprint. Otherwise the new
//! summary is stored as a new version (`supersedes` the old one, which gets
//! `superseded_by` and is kept for audit), facts it finds that the user has
//! not got (and did not delete) are added, and the Rollup actor revises the
//! day and week and moves the session to its new version in its topic. An
//! answer that is not the JSON asked for never replaces a real summary.
//! Blocks are left alone: they hold the latest conversation's state, not an
//! older one's.

use chrono::{DateTime, Utc};
use recall_actors::model::{validate_id, ConversationSummary, ConversationTurn, SessionRecord};
use recall_actors::reflect::parse::Reflection;
use recall_actors::reflect::parts::PartedReflection;
use recall_actors::reflect::ReflectError;
use recall_actors::reflector::{backoff, build_reflection, derivation, fact_id, session_request};
use recall_actors::rollup::RollupReport;
use recall_actors::store::StoreMsg;
use serde::Serialize;
use tracing::{info, warn};
use uuid::Uuid;

use super::{ask, RecallError, Runtime, CALL_TIMEOUT_MS};

/// What to replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayRequest {
    pub agent_id: String,
    /// One user's sessions (every user's without).
    pub user_id: Option<String>,
    /// Sessions started at or after this time.
    pub since: Option<DateTime<Utc>>,
}

/// Where a replay stands, after each session.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct ReplayProgress {
    pub done: usize,
    pub total: usize,
    pub changed: usize,
    pub unchanged: usize,
    pub failed: usize,
}

/// A session whose summary changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReplayChange {
    pub session_id: Uuid,
    pub user_id: String,
    /// The version replaced (`None` if the session had no summary yet).
    pub old_summary_id: Option<Uuid>,
    pub new_summary_id: Uuid,
    pub old_text: Option<String>,
    pub new_text: String,
    /// Facts the new reflection found that the user had not got (facts are
    /// never taken away by a replay, and a deleted one never comes back).
    pub facts_added: Vec<String>,
}

/// A session the replay could not reflect on; the rest went on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReplayFailure {
    pub session_id: Uuid,
    pub error: String,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReplayReport {
    pub progress: ReplayProgress,
    pub changed: Vec<ReplayChange>,
    /// Sessions without stored turns (nothing to re-derive).
    pub without_turns: usize,
    pub failed: Vec<ReplayFailure>,
    /// Rollups revised and topics updated after the new versions (none
    /// with rollups off).
    pub rollups: Option<RollupReport>,
    /// Stopped before the end; running it again resumes.
    pub interrupted: bool,
}

enum Outcome {
    Changed(ReplayChange),
    Unchanged,
    NoTurns,
}

/// Whether two summaries say the same.
fn same_content(a: &ConversationSummary, b: &ConversationSummary) -> bool {
    a.summary_text == b.summary_text
        && a.topics == b.topics
        && a.key_entities == b.key_entities
        && a.emotional_tone == b.emotional_tone
        && a.fallback == b.fallback
}

impl Runtime {
    /// Re-derives the session summaries and facts of `req`'s sessions
    /// (ended ones, oldest first), then lets the rollups and topics follow
    /// and rebuilds `background_context`. `progress` sees where it stands
    /// before the first session and after each; returning `false` stops the
    /// replay there (`interrupted`). Failed sessions are reported and
    /// skipped.
    pub async fn replay(
        &self,
        req: &ReplayRequest,
        mut progress: impl FnMut(&ReplayProgress) -> bool,
    ) -> Result<ReplayReport, RecallError> {
        validate_id("agent_id", &req.agent_id)?;
        if let Some(u) = &req.user_id {
            validate_id("user_id", u)?;
        }
        let sessions: Vec<SessionRecord> = self
            .sessions(Some(&req.agent_id))
            .await?
            .into_iter()
            .filter(|s| {
                !s.is_open()
                    && req.user_id.as_deref().is_none_or(|u| s.user_id == u)
                    && req.since.is_none_or(|t| s.started_at >= t)
            })
            .collect();
        let mut report = ReplayReport {
            progress: ReplayProgress {
                total: sessions.len(),
                ..Default::default()
            },
            ..Default::default()
        };
        if !progress(&report.progress) {
            report.interrupted = true;
            return Ok(report);
        }
        for rec in &sessions {
            match self.replay_session(rec).await {
                Ok(Outcome::Changed(c)) => {
                    report.progress.changed += 1;
                    report.changed.push(c);
                }
                Ok(Outcome::Unchanged) => report.progress.unchanged += 1,
                Ok(Outcome::NoTurns) => report.without_turns += 1,
                Err(e) => {
                    warn!(session_id = %rec.session_id, error = %e, "replay could not re-derive a session");
                    report.progress.failed += 1;
                    report.failed.push(ReplayFailure {
                        session_id: rec.session_id,
                        error: e.to_string(),
                    });
                }
            }
            report.progress.done += 1;
            if !progress(&report.progress) && report.progress.done < report.progress.total {
                report.interrupted = true;
                break;
            }
        }
        if !report.changed.is_empty() && self.inner.rollup.is_some() {
            report.rollups = Some(self.process_new_summaries().await?);
        }
        if !report.changed.is_empty() {
            self.refresh_background_context().await?;
        }
        info!(
            agent_id = %req.agent_id,
            sessions = report.progress.total,
            changed = report.progress.changed,
            unchanged = report.progress.unchanged,
            failed = report.progress.failed,
            interrupted = report.interrupted,
            "replay finished"
        );
        Ok(report)
    }

    /// The current version of a session's summary: the first one's
    /// `superseded_by` chain followed to its end.
    async fn current_version(
        &self,
        session_id: Uuid,
    ) -> Result<Option<ConversationSummary>, RecallError> {
        let Some(mut s) = self.summary(session_id).await? else {
            return Ok(None);
        };
        // A chain longer than this is a loop in damaged data.
        for _ in 0..1_000 {
            match s.superseded_by {
                Some(next) => match self.summary(next).await? {
                    Some(n) => s = n,
                    None => break,
                },
                None => break,
            }
        }
        Ok(Some(s))
    }

    /// The summarizer's reflection (in parts when the call is longer than
    /// a request may hold), with the reflector's attempts and backoff.
    async fn reflect_with_retries(
        &self,
        rec: &SessionRecord,
        turns: &[ConversationTurn],
    ) -> Result<Reflection, ReflectError> {
        let settings = &self.inner.settings.reflector;
        let limit = std::time::Duration::from_secs(settings.attempt_timeout_secs);
        let reflect = &*self.inner.reflect;
        let mut parted = PartedReflection::new(reflect.max_prompt_tokens());
        let mut attempt = 1;
        loop {
            match parted
                .run(reflect, &self.inner.prompts, rec, turns, limit)
                .await
            {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable() && attempt < settings.max_attempts => {
                    attempt += 1;
                    let wait = backoff(settings, rec.session_id, attempt, e.retry_after());
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn replay_session(&self, rec: &SessionRecord) -> Result<Outcome, RecallError> {
        let turns = self.turns(rec.session_id).await?;
        if turns.is_empty() {
            return Ok(Outcome::NoTurns);
        }
        let current = self.current_version(rec.session_id).await?;
        let (request, _) = session_request(rec, &turns, &self.inner.prompts);
        let reflect = &self.inner.reflect;
        let fingerprint = derivation(&reflect.identity(), &request, reflect.max_prompt_tokens());
        if current
            .as_ref()
            .is_some_and(|c| c.derivation.as_deref() == Some(fingerprint.as_str()))
        {
            return Ok(Outcome::Unchanged);
        }
        let reflection = self
            .reflect_with_retries(rec, &turns)
            .await
            .map_err(RecallError::Summarizer)?;
        let now = self.inner.clock.now();
        let (mut summary, _blocks, mut facts) =
            build_reflection(rec, &turns, reflection, now, &self.inner.settings.blocks);
        if summary.fallback {
            // Not the JSON asked for (a refusal, prose): never in place of a
            // real summary, and not stamped, so the next replay tries again.
            match &current {
                Some(c) if c.fallback => return Ok(Outcome::Unchanged),
                Some(_) => return Err(RecallError::NotReflection),
                None => {}
            }
        } else {
            summary.derivation = Some(fingerprint.clone());
        }
        let store = &self.inner.store;
        let Some(current) = current else {
            // Never summarized (its reflection is queued or dead-lettered):
            // this is its first summary.
            ask(store, "store", CALL_TIMEOUT_MS, |reply| {
                StoreMsg::CompleteReflection {
                    summary: Box::new(summary.clone()),
                    blocks: Vec::new(),
                    facts: facts.clone(),
                    reply,
                }
            })
            .await??;
            return Ok(Outcome::Changed(ReplayChange {
                session_id: rec.session_id,
                user_id: rec.user_id.clone(),
                old_summary_id: None,
                new_summary_id: summary.summary_id,
                old_text: None,
                new_text: summary.summary_text,
                facts_added: facts.into_iter().map(|f| f.content).collect(),
            }));
        };
        if same_content(&current, &summary) {
            ask(store, "store", CALL_TIMEOUT_MS, |reply| {
                StoreMsg::StampDerivation {
                    summary_id: current.summary_id,
                    derivation: fingerprint,
                    reply,
                }
            })
            .await??;
            return Ok(Outcome::Unchanged);
        }
        // A new version, named by what it was derived from: storing it
        // again (an interrupted run resumed) is a no-op.
        summary.summary_id = Uuid::new_v5(&current.summary_id, fingerprint.as_bytes());
        summary.supersedes = Some(current.summary_id);
        // Its facts are named after it, not after the version they replace.
        for (i, f) in facts.iter_mut().enumerate() {
            f.fact_id = fact_id(summary.summary_id, i);
        }
        let revision = ask(store, "store", CALL_TIMEOUT_MS, |reply| {
            StoreMsg::ReviseSession {
                summary: Box::new(summary.clone()),
                facts,
                reply,
            }
        })
        .await??;
        Ok(Outcome::Changed(ReplayChange {
            session_id: rec.session_id,
            user_id: rec.user_id.clone(),
            old_summary_id: Some(current.summary_id),
            new_summary_id: summary.summary_id,
            old_text: Some(current.summary_text),
            new_text: summary.summary_text,
            facts_added: revision
                .facts_added
                .into_iter()
                .map(|f| f.fact.content)
                .collect(),
        }))
    }
}
