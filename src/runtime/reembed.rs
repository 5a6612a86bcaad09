//! Re-embedding what is stored when the embedder changes.
//!
//! Stored vectors carry the name of the embedder that made them, and
//! vectors of different embedders are never compared. So after a switch
//! (say from `hashing` to `local`), what was stored before has no vector the
//! new embedder's queries can use: searches rank those items by their words
//! alone until they are embedded again. At every start a background task
//! looks for current summaries and facts whose vector is missing or another
//! embedder's — and, with an embedder that captures meaning, turns of ended
//! calls likewise — and embeds them again in batches, writing each batch
//! through the Store actor (which keeps the search index current). Progress
//! is in [`Runtime::reembed_progress`], `/readyz` and the logs.
//!
//! When the embedder fails, the pass stops and what is left is counted as
//! failed (the next start tries again); a stopping runtime ends the task at
//! its next store call.

use std::collections::BTreeMap;

use ractor::call_t;
use recall_actors::embed::{summary_text, StoredVector};
use recall_actors::model::SummaryType;
use recall_actors::search::TurnRef;
use recall_actors::store::{read_blocking, Backend, StoreError, StoreMsg};
use serde::Serialize;
use uuid::Uuid;

use super::{Runtime, CALL_TIMEOUT_MS};

/// Texts embedded per batch.
const BATCH: usize = 64;

/// How far re-embedding has come since the start.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct ReembedProgress {
    /// Still looking for items, or embedding them.
    pub running: bool,
    /// Items found with another embedder's vector, or none.
    pub found: u64,
    /// Of those, embedded again and stored.
    pub done: u64,
    /// Of those, left for the next start (the embedder failed, which
    /// stops the pass).
    pub failed: u64,
}

/// Where a vector goes.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// A summary or a fact, by id.
    Item(Uuid),
    Turn(TurnRef),
}

struct Work {
    agent_id: String,
    target: Target,
    text: String,
}

/// Everything of every agent whose vector is missing or not `embedder`'s.
async fn find(trees: &dyn Backend, embedder: &str, turns: bool) -> Result<Vec<Work>, StoreError> {
    let stale = async |id: Uuid| -> Result<bool, StoreError> {
        Ok(trees
            .vector(id)
            .await?
            .is_none_or(|v| v.embedder != embedder))
    };
    let mut out = Vec::new();
    for (agent, _) in trees.agents().await? {
        for kind in SummaryType::ALL {
            for s in trees.summaries(&agent, kind, None).await? {
                if s.is_current() && stale(s.summary_id).await? {
                    out.push(Work {
                        agent_id: agent.clone(),
                        target: Target::Item(s.summary_id),
                        text: summary_text(&s),
                    });
                }
            }
        }
        for f in trees.agent_facts(&agent).await? {
            if f.is_current() && stale(f.fact_id).await? {
                out.push(Work {
                    agent_id: agent.clone(),
                    target: Target::Item(f.fact_id),
                    text: f.fact.content.clone(),
                });
            }
        }
        if !turns {
            continue;
        }
        for s in trees.sessions(Some(&agent)).await? {
            if s.ended_at.is_none() {
                continue;
            }
            for (seq, t) in trees.numbered_turns(s.session_id).await? {
                let r = TurnRef {
                    session_id: s.session_id,
                    seq,
                };
                if let Some(text) = t.vector_text() {
                    if stale(r.doc_id()).await? {
                        out.push(Work {
                            agent_id: agent.clone(),
                            target: Target::Turn(r),
                            text,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

impl Runtime {
    /// How far re-embedding stored items with the current embedder has come.
    pub fn reembed_progress(&self) -> ReembedProgress {
        *self.inner.reembed.borrow()
    }

    /// Starts the background re-embedding of what another embedder (or
    /// none) embedded.
    pub(super) fn start_reembedding(&self) {
        let rt = self.clone();
        tokio::spawn(async move {
            if let Err(err) = rt.reembed().await {
                tracing::debug!(error = %err, "re-embedding stopped");
            }
            rt.inner.reembed.send_modify(|p| p.running = false);
        });
    }

    async fn reembed(&self) -> Result<(), String> {
        let embed = self.inner.embed.clone();
        let name = embed.name().to_string();
        // Turns get vectors stored unless the index makes them itself.
        let turns = embed.captures_meaning() && !embed.embeds_inline();
        self.inner.reembed.send_modify(|p| p.running = true);
        let trees = self.reader().map_err(|e| e.to_string())?;
        let (n, work) = {
            let name = name.clone();
            let work = read_blocking(trees, move |b| {
                Box::pin(async move { find(b, &name, turns).await })
            })
            .await
            .map_err(|e| e.to_string())?;
            (work.len() as u64, work)
        };
        self.inner.reembed.send_modify(|p| p.found = n);
        if n == 0 {
            return Ok(());
        }
        tracing::info!(items = n, embedder = %name, "re-embedding stored items made by another embedder; until each is done, searches find it by its words");
        let mut logged = 0u64;
        for (b, batch) in work.chunks(BATCH).enumerate() {
            let texts = batch.iter().map(|w| w.text.clone()).collect();
            let failure = match embed.embed(texts).await {
                Ok(v) if v.len() == batch.len() => Ok(v),
                Ok(v) => Err(format!(
                    "asked for {} vectors, got {}",
                    batch.len(),
                    v.len()
                )),
                Err(err) => Err(err.to_string()),
            };
            let vectors = match failure {
                Ok(v) => v,
                Err(err) => {
                    // An embedder that fails once (a server down) would
                    // fail the rest too: all of it waits for the next start.
                    let left = n - (b * BATCH) as u64;
                    tracing::warn!(error = %err, left, "re-embedding stopped: the embedder failed; the rest waits for the next start");
                    self.inner.reembed.send_modify(|p| p.failed += left);
                    break;
                }
            };
            // Grouped by agent, then by call for turns.
            let mut items: BTreeMap<&str, Vec<(Uuid, StoredVector)>> = BTreeMap::new();
            let mut turn_items: BTreeMap<(&str, Uuid), Vec<(u32, StoredVector)>> = BTreeMap::new();
            for (w, values) in batch.iter().zip(vectors) {
                let v = StoredVector {
                    embedder: name.clone(),
                    values,
                };
                match w.target {
                    Target::Item(id) => items.entry(&w.agent_id).or_default().push((id, v)),
                    Target::Turn(r) => turn_items
                        .entry((&w.agent_id, r.session_id))
                        .or_default()
                        .push((r.seq, v)),
                }
            }
            let store = &self.inner.store;
            for (agent, items) in items {
                call_t!(
                    store,
                    |reply| StoreMsg::PutVectors {
                        agent_id: agent.to_string(),
                        items,
                        reply
                    },
                    CALL_TIMEOUT_MS
                )
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            }
            for ((agent, session_id), items) in turn_items {
                call_t!(
                    store,
                    |reply| StoreMsg::PutTurnVectors {
                        agent_id: agent.to_string(),
                        session_id,
                        items,
                        reply
                    },
                    CALL_TIMEOUT_MS
                )
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            }
            self.inner
                .reembed
                .send_modify(|p| p.done += batch.len() as u64);
            let done = self.inner.reembed.borrow().done;
            if done * 10 / n > logged * 10 / n {
                logged = done;
                tracing::info!(done, of = n, "re-embedding");
            }
        }
        let p = *self.inner.reembed.borrow();
        tracing::info!(done = p.done, failed = p.failed, "re-embedding finished");
        Ok(())
    }
}
