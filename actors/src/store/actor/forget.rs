//! The Store actor's handling of forgets: a user's records, and what is
//! left of the calls a forget ended.

use super::*;

impl StoreState {
    /// Handles a message about forgets (`handle` routes only those here).
    pub(super) async fn handle_forget(&mut self, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::Forget {
                user_id,
                agent_id,
                sessions,
                again,
                reply,
            } => {
                // An end waiting to be written again is theirs no more.
                self.unended.retain(|r| {
                    !(r.user_id == user_id && agent_id.as_deref().is_none_or(|a| a == r.agent_id))
                });
                let mut res = if again {
                    t.forget_user_again(&user_id, agent_id.as_deref()).await
                } else {
                    t.forget_user(&user_id, agent_id.as_deref()).await
                };
                // What is left of the calls this forget ended, whoever
                // removed their records first; a failure here is the
                // forget's, after what it did commit is cleaned up below.
                let mut left = Ok(());
                if let (Ok(r), false) = (&mut res, sessions.is_empty()) {
                    let ended = match t.forget_sessions(&sessions).await {
                        Ok(n) => t.keep_forgotten(&sessions).await.map(|()| n),
                        Err(e) => Err(e),
                    };
                    match ended {
                        Ok(n) => {
                            r.sessions += n;
                            r.removed_ids.extend(sessions.iter().copied());
                        }
                        Err(e) => left = Err(e),
                    }
                }
                if let Ok(r) = &res {
                    for agent in &r.agents {
                        self.generations.bump(agent, Parts::ALL);
                        let (ids, user) = (r.removed_ids.clone(), user_id.clone());
                        self.search.update(agent, move |ix| {
                            for id in ids {
                                ix.remove(id);
                            }
                            ix.remove_user(&user);
                        });
                    }
                    self.forgotten.extend(r.removed_ids.iter().copied());
                }
                let _ = reply.send(left.and(res));
            }
            StoreMsg::Forgetting(ids) => self.forgotten.extend(ids),
            StoreMsg::ForgetCalls { sessions, reply } => {
                let res = match t.forget_sessions(&sessions).await {
                    Ok(n) => t.keep_forgotten(&sessions).await.map(|()| n),
                    Err(e) => Err(e),
                };
                if res.is_ok() {
                    self.forgotten.extend(sessions.iter().copied());
                    // Their agents' indexes and contexts are read afresh.
                    self.search.clear();
                }
                let _ = reply.send(res);
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
