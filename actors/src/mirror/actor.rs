//! MirrorActor: brings each mirror target in step with the store (see the
//! module's introduction for why that loses nothing).
//!
//! Receives `Changed` from the store's change counters (this instance's
//! writes and, over a shared store, the others'), `Run` from its own
//! timer (one asked for at a time), `Refresh` from its interval (every
//! target again: the rendered block moves with time, and a block changed
//! on the other side by hand is written back), and `SyncNow` calls. A
//! change waits `delay` so the writes of one reflection go together; a
//! failed run of a target is tried again after a backoff that doubles up
//! to `retry_max` (or the server's `Retry-After`), while the other targets
//! go on. A run handles at most [`MAX_WRITES_PER_RUN`] summaries and goes
//! on in its next run, so the actor answers `Changed` and stats between
//! the runs of a first mirror of a long history.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, warn};
use uuid::Uuid;

use super::{
    head_of, lost_write, text_hash, BlockSource, BlockValue, MirrorError, MirrorPort,
    MirroredSummary, Target,
};
use crate::lease::Lease;
use crate::model::{BlockLabel, ConversationSummary, SummaryType};
use crate::port::error_chain;
use crate::store::{StoreError, StoreMsg};

const STORE_TIMEOUT_MS: u64 = 60_000;

/// How often an instance without the mirror lease looks whether it has
/// it now.
const LEASE_LOOK: Duration = Duration::from_secs(10);

/// The longest `Retry-After` obeyed.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Summaries one run of one target writes or deletes the passages of, at
/// most.
pub const MAX_WRITES_PER_RUN: usize = 64;

pub enum MirrorMsg {
    /// The store changed what `agent_id` (every agent with `None`) shows
    /// one user (every user with `None`).
    Changed {
        agent_id: Option<String>,
        user_id: Option<String>,
    },
    /// Timer: run the targets that are due (the number of the timer; one
    /// asked for after it makes it stale).
    Run(u64),
    /// Timer: every target again.
    Refresh,
    /// Runs every target now, backoff or not, until each is in step or
    /// fails; replies with what was written.
    SyncNow(RpcReplyPort<Result<MirrorReport, MirrorRunError>>),
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorRunError {
    #[error("store error")]
    Store(#[from] StoreError),
    #[error("store unreachable: {0}")]
    StoreUnreachable(String),
    #[error("rendering the block of {agent_id} failed: {reason}")]
    Render { agent_id: String, reason: String },
    #[error("mirroring to {remote} failed")]
    Remote {
        remote: String,
        #[source]
        error: MirrorError,
    },
    #[error("the mirror runs on another instance (it holds the mirror lease)")]
    Elsewhere,
}

/// What runs wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Summaries written (each as one passage or, split by the server,
    /// several).
    pub passages_written: u64,
    /// Summaries whose passages were deleted (gone, or replaced).
    pub passages_deleted: u64,
    /// Summaries the server refused for good (a 4xx other than a missing
    /// agent, a timeout or a rate limit); tried again at the next change
    /// or refresh.
    pub passages_refused: u64,
    pub blocks_written: u64,
}

impl MirrorReport {
    fn add(&mut self, other: MirrorReport) {
        self.passages_written += other.passages_written;
        self.passages_deleted += other.passages_deleted;
        self.passages_refused += other.passages_refused;
        self.blocks_written += other.blocks_written;
    }
}

/// The mirror's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorStats {
    pub targets: usize,
    /// Targets not in step yet (changed, or failing).
    pub pending: usize,
    pub written: MirrorReport,
    /// Runs of a target that failed.
    pub failed_runs: u64,
    /// The latest failure, until a run of that target succeeds.
    pub last_error: Option<String>,
}

pub struct MirrorArgs {
    pub store: ActorRef<StoreMsg>,
    pub port: Arc<dyn MirrorPort>,
    pub source: Arc<dyn BlockSource>,
    pub targets: Vec<Target>,
    /// How long a change waits before its run.
    pub delay: Duration,
    /// The longest backoff after failures.
    pub retry_max: Duration,
    /// How often every target runs again.
    pub refresh: Duration,
    /// The `background_context` limit (a block made on the remote agent
    /// gets it).
    pub block_limit: usize,
    /// Where the counters are published (read without a call).
    pub stats: tokio::sync::watch::Sender<MirrorStats>,
    /// Targets run where this is held (one instance at a time over a
    /// shared store).
    pub lease: Arc<Lease>,
}

/// One target's progress.
#[derive(Debug)]
struct Progress {
    target: Target,
    /// Something may differ from the store.
    dirty: bool,
    /// Not run before this (a change's delay, or a backoff).
    due: Instant,
    failures: u32,
    /// The block value last written in this process (`None`: write it).
    block: Option<String>,
    last_error: Option<String>,
}

pub struct MirrorState {
    args: MirrorArgs,
    targets: Vec<Progress>,
    /// When the `Run` asked for last comes (`None`: none is asked for).
    next_run: Option<Instant>,
    /// The number of the `Run` asked for last: an earlier one that comes
    /// finds it stale and does nothing, so one timer runs at a time.
    run_timer: u64,
    written: MirrorReport,
    failed_runs: u64,
}

pub struct MirrorActor;

/// What one run of one target did, and whether it is in step.
struct Step {
    report: MirrorReport,
    done: bool,
}

impl MirrorState {
    async fn store<T>(
        &self,
        msg: impl FnOnce(RpcReplyPort<Result<T, StoreError>>) -> StoreMsg,
    ) -> Result<T, MirrorRunError>
    where
        T: Send + 'static,
    {
        Ok(call_t!(self.args.store, msg, STORE_TIMEOUT_MS)
            .map_err(|e| MirrorRunError::StoreUnreachable(e.to_string()))??)
    }

    async fn put_ledger(&self, remote: &str, entry: MirroredSummary) -> Result<(), MirrorRunError> {
        self.store(|reply| StoreMsg::PutMirrored {
            remote: remote.to_string(),
            entry,
            reply,
        })
        .await
    }

    /// Deletes the stale passages of `entry` (those of a text it replaced)
    /// and records it without them.
    async fn delete_stale(
        &self,
        remote: &str,
        mut entry: MirroredSummary,
    ) -> Result<(), MirrorRunError> {
        for id in &entry.stale_ids {
            self.delete(remote, id).await?;
        }
        entry.stale_ids.clear();
        self.put_ledger(remote, entry).await
    }

    /// The current summaries `target` should hold, oldest first.
    async fn wanted(&self, target: &Target) -> Result<Vec<ConversationSummary>, MirrorRunError> {
        let mut out = Vec::new();
        for kind in SummaryType::ALL {
            let agent_id = target.agent_id.clone();
            let all = self
                .store(|reply| StoreMsg::ListSummaries {
                    agent_id,
                    kind,
                    since: None,
                    reply,
                })
                .await?;
            out.extend(all.into_iter().filter(|s| {
                s.is_current() && target.user_id.as_ref().is_none_or(|u| *u == s.user_id)
            }));
        }
        out.sort_by(|a, b| {
            (a.period_start, a.created_at, a.summary_id).cmp(&(
                b.period_start,
                b.created_at,
                b.summary_id,
            ))
        });
        Ok(out)
    }

    /// Brings target `i` in step, or as far as one run goes: first the
    /// passages of summaries that are gone (a forgotten user's, a replay's
    /// old versions: a summary Letta keeps refusing must not hold them
    /// back), then new summaries and new texts, then the block.
    async fn run_target(&mut self, i: usize) -> Result<Step, MirrorRunError> {
        let target = self.targets[i].target.clone();
        let remote = target.remote.as_str();
        let wanted = self.wanted(&target).await?;
        let ledger = self
            .store(|reply| StoreMsg::Mirrored {
                remote: remote.to_string(),
                reply,
            })
            .await?;
        let held: HashMap<Uuid, &MirroredSummary> =
            ledger.iter().map(|m| (m.summary_id, m)).collect();
        let keep: HashSet<Uuid> = wanted.iter().map(|s| s.summary_id).collect();
        // What a write whose answer was lost may have left is looked for
        // among the agent's passages, none the ledger holds already.
        let known: HashSet<&str> = ledger
            .iter()
            .flat_map(|m| m.remote_ids.iter().chain(&m.stale_ids))
            .map(String::as_str)
            .collect();
        let listed = if ledger.iter().any(|m| m.pending) {
            self.check_lease()?;
            Some(
                self.args
                    .port
                    .list_passages(remote)
                    .await
                    .map_err(|error| remote_error(remote, error))?,
            )
        } else {
            None
        };
        let lost = |m: &MirroredSummary, text: Option<&str>| match (&listed, m.pending) {
            (Some(listed), true) => lost_write(
                listed,
                text,
                m.pending_head.as_deref().unwrap_or(""),
                &known,
            ),
            _ => Vec::new(),
        };
        let mut report = MirrorReport::default();
        let mut changed = 0;
        let more = |changed: usize, report: MirrorReport| {
            (changed >= MAX_WRITES_PER_RUN).then_some(Step {
                report,
                done: false,
            })
        };
        for m in ledger.iter().filter(|m| !keep.contains(&m.summary_id)) {
            if let Some(step) = more(changed, report) {
                return Ok(step);
            }
            self.check_lease()?;
            // (A write of it whose answer was lost: found by its first
            // line, its text being gone.)
            let lost = lost(m, None);
            for id in m.stale_ids.iter().chain(&m.remote_ids).chain(&lost) {
                self.delete(remote, id).await?;
            }
            let summary_id = m.summary_id;
            self.store(|reply| StoreMsg::DropMirrored {
                remote: remote.to_string(),
                summary_id,
                reply,
            })
            .await?;
            report.passages_deleted += 1;
            changed += 1;
        }
        for s in &wanted {
            let text = s.to_archival_text();
            let hash = text_hash(&text);
            let old = held.get(&s.summary_id).copied();
            if let Some(m) = old.filter(|m| m.text_hash == hash && !m.pending) {
                // In step, but for the passages of a text it replaced that
                // a failure left behind.
                if !m.stale_ids.is_empty() {
                    self.check_lease()?;
                    self.delete_stale(remote, m.clone()).await?;
                }
                continue;
            }
            if let Some(step) = more(changed, report) {
                return Ok(step);
            }
            self.check_lease()?;
            // A write of this text whose answer was lost is taken as
            // written; one of an older text is deleted with its passages.
            let lost = old.map(|m| {
                if m.text_hash == hash {
                    (lost(m, Some(&text)), Vec::new())
                } else {
                    (Vec::new(), lost(m, None))
                }
            });
            let (found, orphans) = lost.unwrap_or_default();
            if self
                .write(remote, s.summary_id, &text, old, found, orphans)
                .await?
            {
                report.passages_written += 1;
            } else {
                report.passages_refused += 1;
            }
            changed += 1;
        }
        let value = self
            .args
            .source
            .background(&target.agent_id, target.user_id.as_deref())
            .await
            .map_err(|reason| MirrorRunError::Render {
                agent_id: target.agent_id.clone(),
                reason,
            })?;
        if self.targets[i].block.as_deref() != Some(value.as_str()) {
            self.check_lease()?;
            let block = BlockValue {
                label: BlockLabel::BackgroundContext.as_str(),
                value: &value,
                limit: self.args.block_limit,
            };
            self.args
                .port
                .set_block(remote, block)
                .await
                .map_err(|error| remote_error(remote, error))?;
            self.targets[i].block = Some(value);
            report.blocks_written += 1;
        }
        Ok(Step { report, done: true })
    }

    /// Writes a summary's text to `remote`, whose ledger entry is `old`:
    /// whether it was written (`false`: the server refused this text for
    /// good, a 4xx other than a missing agent, a timeout or a rate limit;
    /// the entry stays as it was and the other summaries go on).
    ///
    /// The entry is marked pending before the write: a write whose answer
    /// was lost (a timeout, a crash) may have been stored, so the next
    /// try looks for it first (`found`: its passages, taken as written;
    /// `orphans`: those of a lost write of an older text, deleted with
    /// the older text's).
    async fn write(
        &self,
        remote: &str,
        summary_id: Uuid,
        text: &str,
        old: Option<&MirroredSummary>,
        found: Vec<String>,
        orphans: Vec<String>,
    ) -> Result<bool, MirrorRunError> {
        let port = &self.args.port;
        // The old text's passages (a topic's summary is rewritten under its
        // id) go once the new one is there.
        let mut stale_ids = old.map(|m| m.stale_ids.clone()).unwrap_or_default();
        stale_ids.extend(old.iter().flat_map(|m| m.remote_ids.iter().cloned()));
        stale_ids.extend(orphans);
        let mut entry = MirroredSummary {
            summary_id,
            remote_ids: Vec::new(),
            text_hash: text_hash(text),
            stale_ids,
            pending: true,
            pending_head: Some(head_of(text).to_string()),
        };
        if found.is_empty() {
            self.put_ledger(remote, entry.clone()).await?;
            match port.put_passage(remote, text).await {
                Ok(ids) => entry.remote_ids = ids,
                Err(error) if error.is_refusal() => {
                    warn!(%remote, %summary_id, error = %error, "the mirror's server refused a summary; the others go on");
                    match old {
                        Some(m) => self.put_ledger(remote, m.clone()).await?,
                        None => self.drop_ledger(remote, summary_id).await?,
                    }
                    return Ok(false);
                }
                Err(error) => return Err(remote_error(remote, error)),
            }
        } else {
            entry.remote_ids = found;
        }
        entry.pending = false;
        entry.pending_head = None;
        self.put_ledger(remote, entry.clone()).await?;
        if !entry.stale_ids.is_empty() {
            self.delete_stale(remote, entry).await?;
        }
        Ok(true)
    }

    /// Deletes a passage of `remote`.
    async fn delete(&self, remote: &str, id: &str) -> Result<(), MirrorRunError> {
        self.args
            .port
            .delete_passage(remote, id)
            .await
            .map_err(|error| remote_error(remote, error))
    }

    async fn drop_ledger(&self, remote: &str, summary_id: Uuid) -> Result<(), MirrorRunError> {
        self.store(|reply| StoreMsg::DropMirrored {
            remote: remote.to_string(),
            summary_id,
            reply,
        })
        .await
    }

    /// Another instance may have taken the lease while this run went on:
    /// it stops before its next write.
    fn check_lease(&self) -> Result<(), MirrorRunError> {
        if self.args.lease.held() {
            Ok(())
        } else {
            Err(MirrorRunError::Elsewhere)
        }
    }

    /// Runs target `i` and keeps its progress: in step, due again at once
    /// (more to write), or due after a backoff.
    async fn run_and_keep(&mut self, i: usize) -> Result<MirrorReport, MirrorRunError> {
        let res = self.run_target(i).await;
        let now = Instant::now();
        let p = &mut self.targets[i];
        match res {
            Ok(step) => {
                p.failures = 0;
                p.last_error = None;
                p.dirty = !step.done;
                p.due = now;
                self.written.add(step.report);
                Ok(step.report)
            }
            // The lease went to another instance during the run: this one
            // looks again later, as it does when it never had it.
            Err(MirrorRunError::Elsewhere) => {
                p.due = now + LEASE_LOOK;
                Err(MirrorRunError::Elsewhere)
            }
            Err(err) => {
                p.failures = p.failures.saturating_add(1);
                let asked = match &err {
                    MirrorRunError::Remote { error, .. } => error.retry_after(),
                    _ => None,
                };
                // The server's Retry-After when it is longer (up to an
                // hour), else the backoff.
                let wait = backoff(p.failures, self.args.retry_max)
                    .max(asked.unwrap_or_default().min(MAX_RETRY_AFTER));
                p.due = now + wait;
                p.last_error = Some(error_chain(&err));
                self.failed_runs += 1;
                warn!(
                    remote = %p.target.remote,
                    agent_id = %p.target.agent_id,
                    failures = p.failures,
                    retry_in_ms = wait.as_millis() as u64,
                    error = %error_chain(&err),
                    "mirror run failed; it is tried again"
                );
                Err(err)
            }
        }
    }

    /// Runs the targets that are due; the time of the next one due.
    async fn run_due(&mut self) -> Option<Instant> {
        for i in 0..self.targets.len() {
            let p = &self.targets[i];
            if p.dirty && p.due <= Instant::now() {
                let _ = self.run_and_keep(i).await;
            }
        }
        self.targets.iter().filter(|p| p.dirty).map(|p| p.due).min()
    }

    fn publish(&self) {
        let stats = MirrorStats {
            targets: self.targets.len(),
            pending: self.targets.iter().filter(|p| p.dirty).count(),
            written: self.written,
            failed_runs: self.failed_runs,
            last_error: self.targets.iter().find_map(|p| p.last_error.clone()),
        };
        self.args.stats.send_replace(stats);
    }
}

/// The wait after `failures` failed runs: 1 s, doubling, up to `max`.
fn backoff(failures: u32, max: Duration) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(20);
    Duration::from_secs(secs).min(max)
}

fn remote_error(remote: &str, error: MirrorError) -> MirrorRunError {
    MirrorRunError::Remote {
        remote: remote.to_string(),
        error,
    }
}

impl MirrorState {
    /// Asks for a `Run` at `at` (now if it is past), unless one is asked
    /// for by then already: one timer at a time, however many changes
    /// come.
    fn schedule(&mut self, myself: &ActorRef<MirrorMsg>, at: Instant) {
        if self.next_run.is_some_and(|t| t <= at) {
            return;
        }
        self.next_run = Some(at);
        self.run_timer += 1;
        let timer = self.run_timer;
        let wait = at.saturating_duration_since(Instant::now());
        myself.send_after(wait, move || MirrorMsg::Run(timer));
    }
}

impl Actor for MirrorActor {
    type Msg = MirrorMsg;
    type State = MirrorState;
    type Arguments = MirrorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<MirrorMsg>,
        args: MirrorArgs,
    ) -> Result<MirrorState, ActorProcessingErr> {
        // Every target runs once at the start: what changed while recall
        // was down, or failed before it stopped, is in the store.
        let now = Instant::now();
        let targets = args
            .targets
            .iter()
            .map(|t| Progress {
                target: t.clone(),
                dirty: true,
                due: now,
                failures: 0,
                block: None,
                last_error: None,
            })
            .collect();
        myself.send_interval(args.refresh, || MirrorMsg::Refresh);
        let mut state = MirrorState {
            args,
            targets,
            next_run: None,
            run_timer: 0,
            written: MirrorReport::default(),
            failed_runs: 0,
        };
        state.schedule(&myself, now);
        state.publish();
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<MirrorMsg>,
        msg: MirrorMsg,
        state: &mut MirrorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            MirrorMsg::Changed { agent_id, user_id } => {
                let due = Instant::now() + state.args.delay;
                let mut any = false;
                for p in &mut state.targets {
                    if p.target.touched_by(agent_id.as_deref(), user_id.as_deref()) {
                        // A target already due (or waiting out a backoff)
                        // keeps its time.
                        if !p.dirty {
                            p.due = due;
                        }
                        p.dirty = true;
                        any = true;
                    }
                }
                if any {
                    state.schedule(&myself, due);
                    state.publish();
                }
            }
            MirrorMsg::Refresh => {
                let now = Instant::now();
                for p in &mut state.targets {
                    if !p.dirty {
                        p.dirty = true;
                        p.due = now;
                    }
                    // Written again: the other side may have been changed.
                    p.block = None;
                }
                state.schedule(&myself, now);
            }
            // A timer an earlier one replaced.
            MirrorMsg::Run(timer) if timer != state.run_timer => {}
            MirrorMsg::Run(_) => {
                state.next_run = None;
                // Another instance mirrors; this one looks again now and
                // then, to take over when it stops.
                if !state.args.lease.held() {
                    state.schedule(&myself, Instant::now() + LEASE_LOOK);
                } else {
                    if let Some(next) = state.run_due().await {
                        state.schedule(&myself, next);
                    }
                    state.publish();
                }
            }
            MirrorMsg::SyncNow(reply) if !state.args.lease.held() => {
                let _ = reply.send(Err(MirrorRunError::Elsewhere));
            }
            MirrorMsg::SyncNow(reply) => {
                let res = sync_all(state).await;
                state.publish();
                if let Some(next) = state
                    .targets
                    .iter()
                    .filter(|p| p.dirty)
                    .map(|p| p.due)
                    .min()
                {
                    state.schedule(&myself, next);
                }
                let _ = reply.send(res);
            }
        }
        Ok(())
    }
}

/// Every target, until each is in step or fails (the first failure is the
/// answer; the other targets still run).
async fn sync_all(state: &mut MirrorState) -> Result<MirrorReport, MirrorRunError> {
    let mut total = MirrorReport::default();
    let mut first_err = None;
    for i in 0..state.targets.len() {
        state.targets[i].dirty = true;
        loop {
            match state.run_and_keep(i).await {
                Ok(r) => {
                    total.add(r);
                    if !state.targets[i].dirty {
                        break;
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                    break;
                }
            }
        }
    }
    debug!(targets = state.targets.len(), "mirror synced");
    match first_err {
        Some(e) => Err(e),
        None => Ok(total),
    }
}
