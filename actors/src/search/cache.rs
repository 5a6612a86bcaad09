//! The agents' indexes, built on an agent's first search and kept current
//! by the Store actor after each of its writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::index::AgentIndex;
use crate::store_error::StoreError;

/// A change to an agent's index, held while the index is being built.
type Op = Box<dyn FnOnce(&mut AgentIndex) + Send>;

enum Slot {
    /// Built off the Store actor; the changes made meanwhile wait here and
    /// are applied, in order, before the index is handed out (a change is
    /// a replace or a removal by id, so applying one the build already saw
    /// changes nothing). `id` tells this build from a later one for the
    /// same agent (after a `clear`).
    Building {
        id: u64,
        pending: Vec<Op>,
        done: tokio::sync::watch::Receiver<()>,
    },
    Ready(Arc<RwLock<AgentIndex>>),
}

/// The agents' indexes. Shared between the Store actor (the only one that
/// changes them, after each of its writes), the builds (on the blocking
/// pool, never on the Store actor: a build of any size delays no write)
/// and searching callers.
#[derive(Default)]
pub struct SearchIndex {
    /// An embedder that makes vectors on the spot
    /// ([`Embed::embed_now`](crate::embed::Embed::embed_now)): turns get
    /// theirs as they are indexed.
    inline: Option<Arc<dyn crate::embed::Embed>>,
    agents: Mutex<HashMap<String, Slot>>,
    next_build: std::sync::atomic::AtomicU64,
    /// Builds under way, so a shutdown can wait until none holds the store.
    running: Arc<tokio::sync::watch::Sender<usize>>,
    /// Set by [`SearchIndex::close`]: no build starts after it.
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("built", &self.built())
            .finish()
    }
}

/// A failed index build, shared by everyone who waited for it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("building the search index of agent {agent_id} failed: {source}")]
pub struct BuildError {
    pub agent_id: String,
    #[source]
    pub source: Arc<StoreError>,
}

/// Counts a build as running until dropped (even if its task panics).
struct Running(Arc<tokio::sync::watch::Sender<usize>>);

impl Running {
    fn start(counter: &Arc<tokio::sync::watch::Sender<usize>>) -> Running {
        counter.send_modify(|n| *n += 1);
        Running(counter.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl SearchIndex {
    /// An index whose turns get `embed`'s vectors as they are indexed, if
    /// it makes them on the spot.
    pub fn new(embed: &Arc<dyn crate::embed::Embed>) -> SearchIndex {
        SearchIndex {
            inline: embed.embeds_inline().then(|| embed.clone()),
            ..SearchIndex::default()
        }
    }

    /// The embedder turns get their vectors from as they are indexed.
    pub fn inline(&self) -> Option<Arc<dyn crate::embed::Embed>> {
        self.inline.clone()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the agent's index is built or being built (an update would
    /// be applied to it).
    pub fn tracks(&self, agent_id: &str) -> bool {
        self.slots().contains_key(agent_id)
    }

    /// The agent's index, if it is built.
    pub fn agent(&self, agent_id: &str) -> Option<Arc<RwLock<AgentIndex>>> {
        match self.slots().get(agent_id) {
            Some(Slot::Ready(ix)) => Some(ix.clone()),
            _ => None,
        }
    }

    /// The agent's index, built by `build` on the blocking pool first if
    /// it is not (callers asking meanwhile wait for the same build). The
    /// build finishes even if the caller stops waiting.
    pub async fn ensure(
        self: &Arc<Self>,
        agent_id: &str,
        build: impl FnOnce() -> Result<AgentIndex, StoreError> + Clone + Send + 'static,
    ) -> Result<Arc<RwLock<AgentIndex>>, BuildError> {
        loop {
            let started = {
                let mut slots = self.slots();
                match slots.get(agent_id) {
                    Some(Slot::Ready(ix)) => return Ok(ix.clone()),
                    Some(Slot::Building { id, done, .. }) => Err((*id, done.clone())),
                    None => {
                        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
                            return Err(BuildError {
                                agent_id: agent_id.to_string(),
                                source: Arc::new(StoreError::Unavailable),
                            });
                        }
                        let build = build.clone();
                        let id = self
                            .next_build
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let (tx, rx) = tokio::sync::watch::channel(());
                        slots.insert(
                            agent_id.to_string(),
                            Slot::Building {
                                id,
                                pending: Vec::new(),
                                done: rx,
                            },
                        );
                        let this = self.clone();
                        let agent = agent_id.to_string();
                        let running = Running::start(&self.running);
                        Ok(tokio::spawn(async move {
                            let res = match tokio::task::spawn_blocking(build).await {
                                Ok(res) => res,
                                Err(e) => Err(StoreError::ReadAborted(e)),
                            };
                            let out = this.finish(&agent, id, res);
                            drop(running);
                            let _ = tx.send(());
                            out
                        }))
                    }
                }
            };
            match started {
                Ok(task) => match task.await {
                    Ok(Ok(Some(ix))) => return Ok(ix),
                    // Cleared meanwhile: look again.
                    Ok(Ok(None)) => continue,
                    Ok(Err(e)) => return Err(e),
                    Err(e) => {
                        return Err(BuildError {
                            agent_id: agent_id.to_string(),
                            source: Arc::new(StoreError::ReadAborted(e)),
                        })
                    }
                },
                // Someone else's build: its end (or failure) wakes us.
                Err((id, mut done)) => {
                    if done.changed().await.is_err() {
                        // Its task is gone without a word (its runtime
                        // stopped): forget it so the next look builds anew.
                        let mut slots = self.slots();
                        if matches!(slots.get(agent_id), Some(Slot::Building { id: b, .. }) if *b == id)
                        {
                            slots.remove(agent_id);
                        }
                    }
                }
            }
        }
    }

    /// Installs build `id`'s index after the changes made during it, if the
    /// agent's slot is still that build's; `None` if it was cleared (or
    /// replaced) meanwhile.
    fn finish(
        &self,
        agent_id: &str,
        id: u64,
        res: Result<AgentIndex, StoreError>,
    ) -> Result<Option<Arc<RwLock<AgentIndex>>>, BuildError> {
        let mut ix = match res {
            Ok(ix) => ix,
            Err(e) => {
                let mut slots = self.slots();
                if matches!(slots.get(agent_id), Some(Slot::Building { id: b, .. }) if *b == id) {
                    slots.remove(agent_id);
                }
                return Err(BuildError {
                    agent_id: agent_id.to_string(),
                    source: Arc::new(e),
                });
            }
        };
        // The changes made meanwhile are applied outside the lock (they may
        // read the store), in rounds, until none is left; the index is
        // installed under the lock once there are none.
        loop {
            let batch = {
                let mut slots = self.slots();
                match slots.get_mut(agent_id) {
                    Some(Slot::Building { id: b, pending, .. }) if *b == id => {
                        if pending.is_empty() {
                            let ix = Arc::new(RwLock::new(ix));
                            slots.insert(agent_id.to_string(), Slot::Ready(ix.clone()));
                            return Ok(Some(ix));
                        }
                        std::mem::take(pending)
                    }
                    _ => return Ok(None),
                }
            };
            for op in batch {
                op(&mut ix);
            }
        }
    }

    /// Applies `f` to the agent's index if it is built, or after the build
    /// under way; an agent with neither is built from the store when it is
    /// first searched.
    pub fn update(&self, agent_id: &str, f: impl FnOnce(&mut AgentIndex) + Send + 'static) {
        let ix = {
            let mut slots = self.slots();
            match slots.get_mut(agent_id) {
                Some(Slot::Ready(ix)) => ix.clone(),
                Some(Slot::Building { pending, .. }) => {
                    pending.push(Box::new(f));
                    return;
                }
                None => return,
            }
        };
        f(&mut ix.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Forgets every index (they are rebuilt on the next search); a build
    /// under way is dropped when it ends.
    pub fn clear(&self) {
        self.slots().clear();
    }

    /// Forgets one agent's index (rebuilt on its next search; a build under
    /// way is dropped when it ends): another instance changed what it is
    /// built from.
    pub fn clear_agent(&self, agent_id: &str) {
        self.slots().remove(agent_id);
    }

    /// Forgets every index and waits until no build holds the store (a
    /// shutdown, before the store's folder is let go).
    pub async fn close(&self) {
        {
            // Under the lock a build starts under: none starts after this.
            let mut slots = self.slots();
            self.closed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            slots.clear();
        }
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// Agents with a built index.
    pub fn built(&self) -> usize {
        self.slots()
            .values()
            .filter(|s| matches!(s, Slot::Ready(_)))
            .count()
    }
}
