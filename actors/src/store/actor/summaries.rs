//! The Store actor's handling of session summaries: a replay's revisions
//! and derivation stamps, and the summary reads.

use super::*;

impl StoreState {
    /// Handles a message about summaries (`handle` routes only those here).
    pub(super) async fn handle_summaries(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::ReviseSession {
                summary,
                facts,
                reply,
            } => {
                let res = t.revise_session(&summary, &facts).await;
                if let Ok(r) = &res {
                    if r.stored {
                        self.generations.bump(&summary.agent_id, Parts::ALL);
                        let (old, added, moved) = (
                            r.old.as_ref().map(|o| o.summary_id),
                            r.facts_added.clone(),
                            r.facts_moved.clone(),
                        );
                        let s = summary.clone();
                        let mut vectors = vectors_for(
                            &self.search,
                            &t,
                            &summary.agent_id,
                            added.iter().chain(&moved).collect(),
                        )
                        .await;
                        self.search.update(&summary.agent_id, move |ix| {
                            if let Some(old) = old {
                                ix.remove(old);
                            }
                            ix.put_summary(&s, None);
                            index_facts(ix, added.iter().chain(&moved), &mut vectors);
                        });
                        self.wrote(myself).await;
                    }
                }
                let _ = reply.send(res);
            }
            StoreMsg::StampDerivation {
                summary_id,
                derivation,
                reply,
            } => {
                let res = t.stamp_derivation(summary_id, &derivation).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::GetSummary(id, reply) => {
                let _ = reply.send(t.summary(id).await);
            }
            StoreMsg::ListSummaries {
                agent_id,
                kind,
                since,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.summaries(&agent_id, kind, since).await })
            }),
            StoreMsg::PageSummaries {
                agent_id,
                listing,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.list_summaries(&agent_id, &listing).await })
            }),
            StoreMsg::LatestSummary {
                agent_id,
                kind,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.latest_summary(&agent_id, kind).await })
            }),
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
