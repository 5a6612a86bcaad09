//! A rollup pass: the daily and weekly rollups of several agents at once.
//!
//! For each level, one read off the Store actor (through its `Reader`)
//! gathers what every agent of the pass needs; their rollups are made, at
//! most `rollup.max_concurrent` agents at once across the passes under way
//! (two at a time); their vectors come from one
//! call to the `Embed` port; and the rollups and the cursors past them go
//! to the Store in one `PutRollups`. A pass of many agents so costs a few
//! hand-offs and one write a level, where rolling agents one by one cost
//! two reads and two writes an agent. The days are written before the
//! weeks are read: a week's rollup reads its days'.

use super::work::{Ctx, Target};
use super::*;
use crate::store::{Backend, CursorMove, NewRollup, RollupBatch};

/// Agents rolled up in one pass.
pub(super) const PASS_AGENTS: usize = 64;

/// What rolling a level up reads for one agent.
pub(super) struct LevelInputs {
    cursor: Option<NaiveDate>,
    /// The last period complete today.
    last: NaiveDate,
    sources: Vec<ConversationSummary>,
    existing: Vec<ConversationSummary>,
}

/// What making an agent's rollups of a level came to.
struct AgentLevel {
    agent_id: String,
    rollups: Vec<NewRollup>,
    /// Where its cursor moves (past every period done), if it moves.
    cursor: Option<NaiveDate>,
    /// The failure that stopped it, if one did.
    failed: Option<RollupError>,
}

impl Ctx {
    /// Rolls `agents` up, daily then weekly. An agent that fails a level
    /// goes no further this time; its report counts the failure, so that
    /// it is tried again at the next check.
    pub(super) async fn roll_pass(
        &self,
        agents: &[String],
        now: DateTime<Utc>,
    ) -> BTreeMap<String, RollupReport> {
        let mut reports: BTreeMap<String, RollupReport> = agents
            .iter()
            .map(|a| (a.clone(), RollupReport::default()))
            .collect();
        let mut going = agents.to_vec();
        for level in [Level::Daily, Level::Weekly] {
            if going.is_empty() {
                break;
            }
            let mut failed = BTreeSet::new();
            let res = self
                .roll_level(&going, level, now, &mut reports, &mut failed)
                .await;
            going.retain(|a| !failed.contains(a));
            if let Err(err) = res {
                // The pass's own read or write: every agent of it not
                // counted already failed.
                warn!(agents = going.len(), level = level.as_str(), error = %err, source = ?std::error::Error::source(&err), "rollups failed; they are tried again at the next check");
                for a in &going {
                    reports.entry(a.clone()).or_default().failures += 1;
                }
                break;
            }
        }
        reports
    }

    /// Rolls every complete period of `level` after each agent's cursor up
    /// to its today (exclusive), and moves the cursors. An agent stops at
    /// its first failure, with its cursor on the last period it finished,
    /// and is put in `failed` (its report counting the failure). An error
    /// is the pass's own (the read or the write), which no agent of it got
    /// past.
    async fn roll_level(
        &self,
        agents: &[String],
        level: Level,
        now: DateTime<Utc>,
        reports: &mut BTreeMap<String, RollupReport>,
        failed: &mut BTreeSet<String>,
    ) -> Result<(), RollupError> {
        let mut jobs = Vec::new();
        for (agent_id, read) in self.level_inputs(agents, level, now).await? {
            match read {
                Ok(Some(inputs)) => jobs.push(self.make_level(agent_id, level, inputs, now)),
                Ok(None) => {}
                Err(err) => {
                    warn!(%agent_id, level = level.as_str(), error = %err, source = ?std::error::Error::source(&err), "rollup inputs not read; tried again at the next check");
                    reports.entry(agent_id.clone()).or_default().failures += 1;
                    failed.insert(agent_id);
                }
            }
        }
        let made: Vec<AgentLevel> = futures::future::join_all(jobs).await;
        let mut batch = RollupBatch::default();
        let mut owners = Vec::new();
        for m in made {
            if let Some(err) = &m.failed {
                warn!(agent_id = %m.agent_id, level = level.as_str(), error = %err, source = ?std::error::Error::source(err), "rollup failed; it is tried again at the next check");
                reports.entry(m.agent_id.clone()).or_default().failures += 1;
                failed.insert(m.agent_id.clone());
            }
            if let Some(period) = m.cursor {
                batch.cursors.push(CursorMove {
                    agent_id: m.agent_id.clone(),
                    level,
                    period,
                });
            }
            owners.extend(m.rollups.iter().map(|_| m.agent_id.clone()));
            batch.rollups.extend(m.rollups);
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.add_vectors(&mut batch.rollups).await;
        let stored = store_call!(self.store, |reply| StoreMsg::PutRollups { batch, reply })?;
        debug_assert_eq!(owners.len(), stored.len());
        for (agent_id, new) in owners.into_iter().zip(stored) {
            if new {
                let r = reports.entry(agent_id).or_default();
                match level {
                    Level::Daily => r.daily += 1,
                    Level::Weekly => r.weekly += 1,
                }
            }
        }
        Ok(())
    }

    /// Makes an agent's rollups of `level` from what was read: per period
    /// in time order, per user in name order.
    async fn make_level(
        &self,
        agent_id: String,
        level: Level,
        inputs: LevelInputs,
        now: DateTime<Utc>,
    ) -> AgentLevel {
        // (The semaphore is never closed.)
        let _slot = self.slots.acquire().await.ok();
        let tz = self.tz(&agent_id);
        let week_start = self.settings.week_start();
        let LevelInputs {
            cursor,
            last,
            sources,
            existing,
        } = inputs;
        // period → user → members, in time order
        let mut groups: BTreeMap<NaiveDate, BTreeMap<&str, Vec<&ConversationSummary>>> =
            BTreeMap::new();
        for s in &sources {
            let p = period::period_of(level, period::local_date(&tz, s.period_start), week_start);
            groups
                .entry(p)
                .or_default()
                .entry(s.user_id.as_str())
                .or_default()
                .push(s);
        }
        let mut rollups = Vec::new();
        let mut done = cursor;
        for (p, users) in groups {
            for (user, mut members) in users {
                members.sort_by_key(|m| (m.period_start, m.summary_id));
                let (start, _) = period::bounds(&tz, level, p);
                let old = existing
                    .iter()
                    .find(|e| e.user_id == user && e.period_start == start);
                let target = Target {
                    agent_id: &agent_id,
                    user_id: user,
                    level,
                    period: p,
                };
                match self.prepare_rollup(target, &members, old, now).await {
                    Ok(Some(r)) => rollups.push(r),
                    Ok(None) => {}
                    Err(err) => {
                        return AgentLevel {
                            cursor: done.filter(|d| Some(*d) != cursor),
                            agent_id,
                            rollups,
                            failed: Some(err),
                        };
                    }
                }
            }
            done = Some(p);
        }
        AgentLevel {
            cursor: cursor.is_none_or(|c| c < last).then_some(last),
            agent_id,
            rollups,
            failed: None,
        }
    }

    /// Gives the rollups their vectors, in one call to the `Embed` port.
    /// An embedding failure leaves them to keyword search (logged).
    async fn add_vectors(&self, rollups: &mut [NewRollup]) {
        if rollups.is_empty() {
            return;
        }
        let texts = rollups
            .iter()
            .map(|r| embed::summary_text(&r.summary))
            .collect();
        match self.vectors(texts).await {
            Ok(vectors) => {
                for (r, v) in rollups.iter_mut().zip(vectors) {
                    r.vector = Some(v);
                }
            }
            Err(err) => {
                warn!(rollups = rollups.len(), error = %err, "no vectors for rollups; they are found by their words only");
            }
        }
    }

    /// What rolling `level` up reads for each agent, in one read off the
    /// Store actor: per agent, its inputs (`None` when no period is due)
    /// or the error reading them. An error is the read's own.
    #[allow(clippy::type_complexity)]
    async fn level_inputs(
        &self,
        agents: &[String],
        level: Level,
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, Result<Option<LevelInputs>, StoreError>)>, RollupError> {
        let week_start = self.settings.week_start();
        let asks: Vec<(String, Tz)> = agents.iter().map(|a| (a.clone(), self.tz(a))).collect();
        Ok(self
            .reader
            .read(move |b| {
                Box::pin(async move {
                    let mut out = Vec::with_capacity(asks.len());
                    for (agent_id, tz) in asks {
                        let today = period::local_date(&tz, now);
                        let read = read_level_inputs(b, &agent_id, level, today, &tz, week_start);
                        let read = read.await;
                        out.push((agent_id, read));
                    }
                    Ok(out)
                })
            })
            .await?)
    }
}

/// What rolling `level` of an agent up to `today` (exclusive) reads: the
/// cursor, the current sources of the periods after it that are complete,
/// and the rollups of those periods already stored. `None` when no period
/// is due.
async fn read_level_inputs(
    b: &dyn Backend,
    agent_id: &str,
    level: Level,
    today: NaiveDate,
    tz: &Tz,
    week_start: chrono::Weekday,
) -> Result<Option<LevelInputs>, StoreError> {
    let cursor = b.rollup_cursor(agent_id, level).await?;
    let step = ChronoDuration::days(level.days());
    // The last period that is complete today.
    let last = period::period_of(level, today, week_start) - step;
    let current_from = |all: Vec<ConversationSummary>, from| {
        all.into_iter()
            .filter(|s| s.is_current() && s.period_start >= from)
            .collect::<Vec<_>>()
    };
    // Never rolled: from the period of the oldest source (whose listing is
    // then the sources' too).
    let (first, all) = match cursor {
        Some(c) => (c + step, None),
        None => {
            let all = b.summaries(agent_id, source_type(level), None).await?;
            let oldest = all
                .iter()
                .filter(|s| s.is_current())
                .map(|s| s.period_start)
                .min();
            match oldest {
                Some(t) => (
                    period::period_of(level, period::local_date(tz, t), week_start),
                    Some(all),
                ),
                None => return Ok(None),
            }
        }
    };
    if first > last {
        return Ok(None);
    }
    let (from, _) = period::bounds(tz, level, first);
    let (_, until) = period::bounds(tz, level, last);
    let all = match all {
        Some(all) => all,
        None => {
            b.summaries(agent_id, source_type(level), Some(from))
                .await?
        }
    };
    let sources = current_from(all, from)
        .into_iter()
        .filter(|s| s.period_start < until)
        .collect();
    let existing = current_from(
        b.summaries(agent_id, summary_type(level), Some(from))
            .await?,
        from,
    );
    Ok(Some(LevelInputs {
        cursor,
        last,
        sources,
        existing,
    }))
}
