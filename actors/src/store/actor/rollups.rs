//! The Store actor's handling of rollups, their cursors and the Rollup
//! actor's inbox.

use super::*;

impl StoreState {
    /// Handles a message about rollups and the inbox (`handle` routes only
    /// those here).
    pub(super) async fn handle_rollups(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::PutRollup {
                summary,
                supersedes,
                vector,
                reply,
            } => {
                let res = t.put_rollup(&summary, supersedes, vector.as_ref()).await;
                if let Ok(true) = res {
                    // A rollup is one user's.
                    self.generations.bump_user(
                        &summary.agent_id,
                        &summary.user_id,
                        Parts::SUMMARIES,
                    );
                    let s = summary.clone();
                    self.search.update(&summary.agent_id, move |ix| {
                        if let Some(old) = supersedes {
                            ix.remove(old);
                        }
                        ix.put_summary(&s, vector);
                    });
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutRollups { mut batch, reply } => {
                // A rollup made from a forgotten summary is not stored (as
                // `PutRollup`'s is not); the others are.
                let kept: Vec<bool> = batch
                    .rollups
                    .iter()
                    .map(|r| !self.built_from_forgotten(&r.summary))
                    .collect();
                let mut keep = kept.iter();
                batch.rollups.retain(|_| *keep.next().unwrap_or(&true));
                let res = t.put_rollups(&batch).await;
                if res.is_err() {
                    // A backend that writes a batch in parts (PostgreSQL's
                    // rollups, one transaction each) may have stored some:
                    // nothing held in memory is trusted for its agents and
                    // users (their indexes are built again on the next
                    // search, their contexts read again).
                    for r in &batch.rollups {
                        self.generations.bump_user(
                            &r.summary.agent_id,
                            &r.summary.user_id,
                            Parts::SUMMARIES,
                        );
                        self.search.clear_agent(&r.summary.agent_id);
                    }
                }
                if let Ok(stored) = &res {
                    let mut agents: HashMap<String, Vec<NewRollup>> = HashMap::new();
                    for (r, new) in batch.rollups.into_iter().zip(stored) {
                        if *new {
                            // A rollup is one user's.
                            self.generations.bump_user(
                                &r.summary.agent_id,
                                &r.summary.user_id,
                                Parts::SUMMARIES,
                            );
                            agents
                                .entry(r.summary.agent_id.clone())
                                .or_default()
                                .push(r);
                        }
                    }
                    for (agent_id, rollups) in agents {
                        self.search.update(&agent_id, move |ix| {
                            for r in rollups {
                                if let Some(old) = r.supersedes {
                                    ix.remove(old);
                                }
                                ix.put_summary(&r.summary, r.vector);
                            }
                        });
                    }
                    if !batch.cursors.is_empty() || stored.iter().any(|new| *new) {
                        self.wrote(myself).await;
                    }
                }
                // Aligned with the batch as sent: a dropped rollup was not new.
                let _ = reply.send(res.map(|stored| {
                    let mut it = stored.into_iter();
                    kept.iter()
                        .map(|k| *k && it.next().unwrap_or(false))
                        .collect()
                }));
            }
            StoreMsg::RollupCursor {
                agent_id,
                level,
                reply,
            } => {
                let _ = reply.send(t.rollup_cursor(&agent_id, level).await);
            }
            StoreMsg::SetRollupCursor {
                agent_id,
                level,
                period,
                reply,
            } => {
                let res = t.set_rollup_cursor(&agent_id, level, period).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::Inbox {
                after,
                limit,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.inbox(after.as_ref(), limit).await })
            }),
            StoreMsg::InboxDone { keys, reply } => {
                let res = t.inbox_done(&keys).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
