//! The Store actor's handling of topics and the vectors of summaries,
//! facts and turns.

use super::*;

impl StoreState {
    /// Handles a message about topics and vectors (`handle` routes only
    /// those here).
    pub(super) async fn handle_topics(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::Topics {
                agent_id,
                user_id,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.topics(&agent_id, user_id.as_deref()).await })
            }),
            StoreMsg::PutTopic {
                topic,
                summary,
                vector,
                reply,
            } => {
                let res = t.put_topic(&topic, &summary, vector.as_ref()).await;
                if res.is_ok() {
                    // The topic and its summary, one user's.
                    self.generations.bump_user(
                        &topic.agent_id,
                        &topic.user_id,
                        Parts::TOPICS | Parts::SUMMARIES,
                    );
                    let s = summary.clone();
                    self.search
                        .update(&summary.agent_id, move |ix| ix.put_summary(&s, vector));
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::PutVectors {
                agent_id,
                items,
                reply,
            } => {
                let res = t.put_vectors(&items).await;
                if let Ok(stored) = &res {
                    let stored = stored.clone();
                    self.search.update(&agent_id, move |ix| {
                        for (id, v) in items {
                            if stored.contains(&id) {
                                ix.set_vector(id, v);
                            }
                        }
                    });
                    self.wrote(myself).await;
                }
                let _ = reply.send(res.map(|_| ()));
            }
            StoreMsg::PutTurnVectors {
                agent_id,
                session_id,
                items,
                reply,
            } => {
                let res = t.put_turn_vectors(session_id, &items).await;
                if let Ok(stored) = &res {
                    let stored: std::collections::HashSet<u32> = stored.iter().copied().collect();
                    self.search.update(&agent_id, move |ix| {
                        for (seq, v) in items {
                            if stored.contains(&seq) {
                                ix.set_vector(TurnRef { session_id, seq }.doc_id(), v);
                            }
                        }
                    });
                    self.wrote(myself).await;
                }
                let _ = reply.send(res.map(|_| ()));
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
