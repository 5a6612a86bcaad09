//! The Letta mirror (`[letta]`): starting the Mirror actor with its port,
//! the block it writes rendered as a context read renders it, and the
//! store's changes forwarded to it.

use std::sync::{Arc, Weak};

use recall_actors::mirror::{
    BlockSource, BoxFuture, MirrorActor, MirrorArgs, MirrorMsg, MirrorPort, MirrorReport,
    MirrorStats,
};
use recall_actors::store::Parts;

use super::*;

/// What the mirror needs once the runtime runs: its actor and counters.
pub(super) struct Mirrored {
    pub actor: ActorRef<MirrorMsg>,
    pub stats: watch::Receiver<MirrorStats>,
}

/// Renders a target's `background_context` through the runtime: a user's
/// as their context shows it, or the agent's stored block. It holds the
/// runtime weakly, so the mirror never keeps it alive.
struct Blocks(Weak<Inner>);

impl BlockSource for Blocks {
    fn background<'a>(
        &'a self,
        agent_id: &'a str,
        user_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let inner = self.0.upgrade().ok_or("the runtime has stopped")?;
            let runtime = Runtime {
                inner,
                recovered: Vec::new(),
            };
            let res = match user_id {
                Some(user) => runtime.user_background_context(agent_id, user).await,
                None => runtime
                    .block(agent_id, BlockLabel::BackgroundContext)
                    .await
                    .map(|b| b.map(|b| b.value).unwrap_or_default()),
            };
            res.map_err(|e| e.to_string())
        })
    }
}

impl Runtime {
    /// Starts the Mirror actor on `port` for `[letta]`'s targets, and the
    /// task that tells it of the store's changes (this instance's and the
    /// others'): summaries, topics and blocks are what it mirrors.
    pub(super) async fn start_mirror(
        &self,
        port: Arc<dyn MirrorPort>,
        lease: Arc<recall_actors::lease::Lease>,
    ) -> Result<(), StartupError> {
        let inner = &self.inner;
        let s = &inner.settings;
        self.warn_of_unmapped().await;
        let (stats_tx, stats) = watch::channel(MirrorStats::default());
        let mut changes = inner.generations.watch();
        let args = MirrorArgs {
            store: inner.store.clone(),
            port,
            source: Arc::new(Blocks(Arc::downgrade(&self.inner))),
            targets: s.letta.targets(),
            delay: Duration::from_millis(s.letta.delay_ms),
            retry_max: Duration::from_secs(s.letta.retry_max_secs),
            refresh: Duration::from_secs(s.letta.refresh_secs),
            block_limit: s.blocks.background_context_limit,
            stats: stats_tx,
            lease,
        };
        let (actor, _) = Actor::spawn(None, MirrorActor, args)
            .await
            .map_err(|e| StartupError::Spawn("mirror", e))?;
        let to = actor.clone();
        let mirrored = Parts::SUMMARIES | Parts::TOPICS | Parts::BLOCKS;
        inner.cluster.add(tokio::spawn(async move {
            while let Some(c) = changes.recv().await {
                if c.parts.intersects(mirrored)
                    && to
                        .cast(MirrorMsg::Changed {
                            agent_id: c.agent_id,
                            user_id: c.user_id,
                        })
                        .is_err()
                {
                    return;
                }
            }
        }));
        let _ = inner.mirror.set(Mirrored { actor, stats });
        Ok(())
    }

    /// Warns of Letta agents the ledger holds passages of that `[letta]`
    /// maps no more: the mirror leaves them as they are (a forget does not
    /// reach them), which the operator must know.
    async fn warn_of_unmapped(&self) {
        let mapped: Vec<String> = self
            .inner
            .settings
            .letta
            .targets()
            .into_iter()
            .map(|t| t.remote)
            .collect();
        let Ok(backend) = self.reader() else { return };
        let listed =
            recall_actors::store::read_blocking(backend, |b| Box::pin(b.mirrored_remotes()));
        match listed.await {
            Ok(remotes) => {
                for (remote, passages) in remotes {
                    if !mapped.contains(&remote) {
                        warn!(
                            %remote,
                            summaries = passages,
                            "a Letta agent no longer in [letta] holds summaries the mirror wrote; \
                             they stay there (forgets do not reach it): map it again, or delete them in Letta"
                        );
                    }
                }
            }
            Err(err) => warn!(error = %err, "cannot read the mirror ledger's Letta agents"),
        }
    }

    /// Brings every mirror target in step now (backoff or not); what it
    /// wrote. An error names the first target that failed (the others
    /// still ran). [`RecallError::MirrorOff`] without `[letta]`.
    pub async fn sync_mirror(&self) -> Result<MirrorReport, RecallError> {
        let m = self.inner.mirror.get().ok_or(RecallError::MirrorOff)?;
        ask(&m.actor, "mirror", CALL_TIMEOUT_MS, MirrorMsg::SyncNow)
            .await?
            .map_err(RecallError::Mirror)
    }

    /// The mirror's counters (`None` without `[letta]`).
    pub fn mirror_stats(&self) -> Option<MirrorStats> {
        self.inner.mirror.get().map(|m| m.stats.borrow().clone())
    }
}
