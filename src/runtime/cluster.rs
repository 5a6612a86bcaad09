//! Several instances over one shared store (PostgreSQL): what each runs
//! beside its actors.
//!
//! - **Heartbeat**, every third of `store.postgres.lease_secs`: renews
//!   this instance's heartbeat and its claims on reflections, takes or
//!   keeps the `rollup` and `watchdog` leases (the Rollup actor and the
//!   Watchdog work only while theirs is held), ends the open sessions of
//!   instances whose heartbeat lapsed (reason `recovered`, as at a
//!   restart) and claims queued reflections no running instance holds, as
//!   many as its reflectors have room for.
//! - **Change feed**: the Store actor's generation bumps are announced to
//!   the other instances (NOTIFY), and theirs move this instance's
//!   counters, so a cached context re-reads what another instance changed,
//!   and a search index built from it is built again at its next search.
//!   When notifications may have been missed (the feed's connection was
//!   lost), every cached context and index is dropped; and every
//!   `store.postgres.refresh_secs` every cached context is read afresh, in
//!   case an announcement was lost on its way out.
//! - **Forgets**: a forget is announced too; the others end that user's
//!   live calls they hold (unreflected) and forget again what those calls
//!   wrote meanwhile.
//!
//! The heartbeat's reads and claims go to the backend directly, not
//! through the Store actor: they change no record a context is made of;
//! ending an orphaned session goes through the actor, as at a restart.

use std::time::Instant;

use chrono::{DateTime, Utc};
use recall_actors::lease::Lease;
use recall_actors::model::ReflectionJob;
use recall_actors::store::{read_blocking, Change, ForgetEntry, Parts, RemoteChange};
use recall_actors::supervisor::SupervisorStats;

use super::*;

/// The tasks of one instance's share in a cluster; they stop when the
/// runtime does.
#[derive(Default)]
pub(super) struct Cluster {
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Cluster {
    pub(super) fn stop(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }

    pub(super) fn add(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
    }
}

/// The leases of work one instance at a time does.
pub(super) struct Leases {
    pub rollup: Arc<Lease>,
    pub watchdog: Arc<Lease>,
    pub mirror: Arc<Lease>,
}

impl Leases {
    pub(super) fn for_backend(backend: &SharedBackend) -> Leases {
        let lease = |name| {
            Arc::new(if backend.shared() {
                Lease::shared(name)
            } else {
                Lease::always(name)
            })
        };
        Leases {
            rollup: lease("rollup"),
            watchdog: lease("watchdog"),
            mirror: lease("mirror"),
        }
    }
}

/// Ends the open sessions no running instance has a call of (every open
/// one, over a store of this instance's alone), through the Store actor,
/// and hands their reflections to the supervisor.
pub(super) async fn end_orphans(
    store: &ActorRef<StoreMsg>,
    supervisor: &ActorRef<SupervisorMsg>,
    backend: &SharedBackend,
    at: DateTime<Utc>,
) -> Result<Vec<SessionRecord>, RecallError> {
    let open = read_blocking(backend.clone(), |b| Box::pin(b.orphaned_sessions())).await?;
    let mut ended = Vec::new();
    let mut left: Vec<Uuid> = Vec::new();
    let mut failure = None;
    for rec in open {
        let session_id = rec.session_id;
        if failure.is_some() {
            left.push(session_id);
            continue;
        }
        match end_orphan(store, supervisor, session_id, at).await {
            Ok(Some(rec)) => ended.push(rec),
            Ok(None) => {}
            Err(err) => {
                left.push(session_id);
                failure = Some(err);
            }
        }
    }
    if let Some(err) = failure {
        // Given back, for this instance's next look or another's.
        if let Err(e) = backend.release_sessions(&left).await {
            warn!(error = %e, sessions = left.len(), "orphaned sessions not given back; they stay this instance's until it stops");
        }
        return Err(err);
    }
    Ok(ended)
}

async fn end_orphan(
    store: &ActorRef<StoreMsg>,
    supervisor: &ActorRef<SupervisorMsg>,
    session_id: Uuid,
    at: DateTime<Utc>,
) -> Result<Option<SessionRecord>, RecallError> {
    let closed = call_t!(
        store,
        |reply| StoreMsg::CloseOrphan {
            session_id,
            reason: EndReason::Recovered,
            at,
            reply
        },
        CALL_TIMEOUT_MS
    )
    .map_err(|e| RecallError::Unavailable("store", e.to_string()))??;
    if let Some(rec) = &closed {
        info!(%session_id, turns = rec.turn_count, "recovered a session left open");
        if rec.turn_count > 0 {
            let job = ReflectionJob {
                session_id,
                agent_id: rec.agent_id.clone(),
                enqueued_at: at,
            };
            supervisor
                .cast(SupervisorMsg::Enqueue(job))
                .map_err(|e| RecallError::Unavailable("supervisor", e.to_string()))?;
        }
    }
    Ok(closed)
}

/// Claims up to `limit` queued reflections and hands them to the
/// supervisor.
pub(super) async fn claim_reflections(
    supervisor: &ActorRef<SupervisorMsg>,
    backend: &SharedBackend,
    limit: usize,
) -> Result<usize, RecallError> {
    let jobs = read_blocking(backend.clone(), move |b| Box::pin(b.claim_jobs(limit))).await?;
    let n = jobs.len();
    for job in jobs {
        supervisor
            .cast(SupervisorMsg::Enqueue(job))
            .map_err(|e| RecallError::Unavailable("supervisor", e.to_string()))?;
    }
    Ok(n)
}

/// What the cluster's tasks work with.
pub(super) struct Shared {
    pub backend: SharedBackend,
    pub store: ActorRef<StoreMsg>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub stats: watch::Receiver<SupervisorStats>,
    pub generations: Arc<Generations>,
    pub search: Arc<SearchIndex>,
    pub leases: Leases,
    pub clock: Clock,
    pub max_reflections: usize,
    pub refresh: Duration,
    /// Where forgets made by other instances go (the runtime forgets the
    /// user here too).
    pub forgets: tokio::sync::mpsc::UnboundedSender<Forgot>,
}

/// A forget another instance made.
pub(super) enum Forgot {
    /// Announced: the user, and the agent it was limited to.
    Announced(String, Option<String>),
    /// Found in the forget log (its announcement may have been missed).
    Logged(Vec<ForgetEntry>),
}

/// Reads the forget log's entries after `head` (moving it) and hands them
/// on: the forgets whose announcement this instance may have missed.
async fn read_forget_log(
    backend: &SharedBackend,
    head: &tokio::sync::Mutex<i64>,
    out: &tokio::sync::mpsc::UnboundedSender<Forgot>,
) {
    let mut head = head.lock().await;
    match backend.forgets_after(*head).await {
        Ok((next, entries)) => {
            *head = next;
            if !entries.is_empty() {
                let _ = out.send(Forgot::Logged(entries));
            }
        }
        Err(err) => warn!(error = %err, "the forget log could not be read; trying again later"),
    }
}

/// Starts the tasks (a store no other instance shares needs none).
pub(super) async fn start(cluster: &Cluster, p: Shared) -> Result<(), StartupError> {
    let Some(lease_time) = p.backend.lease_time().filter(|_| p.backend.shared()) else {
        return Ok(());
    };
    // Announce this instance's changes.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Change>();
    p.generations.announce_to(tx);
    let backend = p.backend.clone();
    cluster.add(tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                if !batch.contains(&more) {
                    batch.push(more);
                }
            }
            if let Err(err) = backend.publish(&batch).await {
                warn!(error = %err, changes = batch.len(), "changes not announced to the other instances");
            }
        }
    }));
    // The forgets made from now on are this instance's to hear of (a
    // forget made before it started left nothing of the user to end).
    let head = Arc::new(tokio::sync::Mutex::new(p.backend.forget_log_head().await?));
    // Follow the others'.
    if let Some(mut feed) = p.backend.follow().await? {
        let (generations, search) = (p.generations.clone(), p.search.clone());
        let (forgets, backend, head) = (p.forgets.clone(), p.backend.clone(), head.clone());
        cluster.add(tokio::spawn(async move {
            while let Some(change) = feed.recv().await {
                match change {
                    RemoteChange::Changed(c) => {
                        generations.apply(&c.agent_id, c.user_id.as_deref(), c.parts);
                        let indexed = Parts::SUMMARIES | Parts::FACTS | Parts::SESSIONS;
                        if (0..5).any(|i| {
                            let part = Parts::from_bits(1 << i);
                            indexed.contains(part) && c.parts.contains(part)
                        }) {
                            search.clear_agent(&c.agent_id);
                        }
                    }
                    RemoteChange::Lost => {
                        generations.bump_everything(Parts::ALL);
                        search.clear();
                        read_forget_log(&backend, &head, &forgets).await;
                    }
                    RemoteChange::Forgotten { user_id, agent_id } => {
                        let _ = forgets.send(Forgot::Announced(user_id, agent_id));
                    }
                }
            }
        }));
    }
    // What a lost notification missed is caught up within `refresh`: the
    // caches, and the forget log (a notification can be lost without the
    // listener noticing, between its reconnection and the read above).
    let (generations, backend, forgets) =
        (p.generations.clone(), p.backend.clone(), p.forgets.clone());
    let refresh = p.refresh;
    cluster.add(tokio::spawn(async move {
        let mut every = tokio::time::interval(refresh);
        every.tick().await;
        loop {
            every.tick().await;
            generations.bump_everything(Parts::ALL);
            read_forget_log(&backend, &head, &forgets).await;
        }
    }));
    // The heartbeat and the leases, on a timer of their own: a long
    // takeover never makes this instance look gone.
    let (backend, leases) = (
        p.backend.clone(),
        [
            p.leases.rollup.clone(),
            p.leases.watchdog.clone(),
            p.leases.mirror.clone(),
        ],
    );
    cluster.add(tokio::spawn(async move {
        let mut every = tokio::time::interval(lease_time / 3);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(err) = beat(&backend, &leases, lease_time).await {
                warn!(error = %err, "heartbeat failed");
            }
        }
    }));
    // Taking over what instances that died left, and claiming reflections.
    cluster.add(tokio::spawn(async move {
        let mut every = tokio::time::interval(lease_time / 3);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(err) = take_over(&p).await {
                warn!(error = %err, "taking over work failed");
            }
        }
    }));
    Ok(())
}

async fn beat(
    backend: &SharedBackend,
    leases: &[Arc<Lease>],
    lease_time: Duration,
) -> Result<(), RecallError> {
    backend.heartbeat().await?;
    for lease in leases {
        let asked = Instant::now();
        let held = backend.take_lease(lease.name()).await?;
        if held != lease.held() {
            info!(lease = lease.name(), held, "lease changed hands");
        }
        lease.renewed(asked, lease_time, held);
    }
    Ok(())
}

async fn take_over(p: &Shared) -> Result<(), RecallError> {
    end_orphans(&p.store, &p.supervisor, &p.backend, p.clock.now()).await?;
    let s = *p.stats.borrow();
    let room = p
        .max_reflections
        .saturating_sub(s.reflections_running + s.reflections_queued);
    claim_reflections(&p.supervisor, &p.backend, room).await?;
    Ok(())
}
