//! The Store actor's handling of facts: the listing, one fact, an
//! owner's changes (visibility, deletion) and facts stated outside a
//! call, kept in step with the search index.

use super::*;

impl StoreState {
    /// Handles a message about facts (`handle` routes only those here).
    pub(super) async fn handle_facts(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::ListFacts {
                agent_id,
                user_id,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.visible_facts(&agent_id, &user_id).await })
            }),
            StoreMsg::GetFact(id, reply) => {
                let _ = reply.send(t.fact(id).await);
            }
            StoreMsg::SetFactVisibility {
                fact_id,
                user_id,
                visibility,
                reply,
            } => {
                let res = t.set_fact_visibility(fact_id, &user_id, visibility).await;
                if let Ok(f) = &res {
                    self.generations.bump(&f.agent_id, Parts::FACTS);
                    let f2 = f.clone();
                    let mut vectors = vectors_for(&self.search, &t, &f.agent_id, vec![&f2]).await;
                    self.search
                        .update(&f.agent_id, move |ix| index_facts(ix, [&f2], &mut vectors));
                }
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::DeleteFact {
                fact_id,
                user_id,
                reply,
            } => {
                let res = t.delete_fact(fact_id, &user_id).await;
                if let Ok((f, moved)) = &res {
                    self.generations.bump(&f.agent_id, Parts::FACTS);
                    let (id, moved) = (f.fact_id, moved.clone());
                    let mut vectors =
                        vectors_for(&self.search, &t, &f.agent_id, moved.iter().collect()).await;
                    self.search.update(&f.agent_id, move |ix| {
                        ix.remove(id);
                        index_facts(ix, &moved, &mut vectors);
                    });
                }
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res.map(|(f, _)| f));
            }
            StoreMsg::PutStatedFacts {
                facts,
                stated_at,
                reply,
            } => {
                let res = t.put_stated_facts(&facts, stated_at).await;
                let changed = res
                    .as_ref()
                    .is_ok_and(|c| !c.added.is_empty() || !c.updated.is_empty());
                if let (Ok(changes), Some(first), true) = (&res, facts.first(), changed) {
                    let (agent, user) = (&first.agent_id, &first.user_id);
                    let touched: Vec<FactRecord> = changes
                        .added
                        .iter()
                        .chain(&changes.updated)
                        .cloned()
                        .collect();
                    // The user's facts; every user's where one is shared.
                    self.generations.bump_user(agent, user, Parts::FACTS);
                    if touched.iter().any(|f| f.visibility == Visibility::Shared) {
                        self.generations.bump(agent, Parts::FACTS);
                    }
                    let mut vectors =
                        vectors_for(&self.search, &t, agent, touched.iter().collect()).await;
                    self.search
                        .update(agent, move |ix| index_facts(ix, &touched, &mut vectors));
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
