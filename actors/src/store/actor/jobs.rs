//! The Store actor's handling of the reflection queue: what a finished
//! reflection stores, dead letters, requeues and the queue's reads.

use super::*;

impl StoreState {
    /// Handles a message about the reflection queue and dead letters (`handle`
    /// routes only those here).
    pub(super) async fn handle_jobs(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::CompleteReflection {
                summary,
                blocks,
                facts,
                reply,
            } => {
                self.complete_reflection(myself, summary, blocks, facts, reply)
                    .await
            }
            StoreMsg::DeadLetter { letter, reply } => {
                let res = t.dead_letter(&letter).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::Requeue {
                session_id,
                at,
                reply,
            } => {
                let res = t.requeue(session_id, at).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::ListQueue(reply) => {
                self.read_off(reply, |b| Box::pin(async move { b.queued().await }))
            }
            StoreMsg::ListDeadLetters(reply) => {
                self.read_off(reply, |b| Box::pin(async move { b.dead_letters().await }))
            }
            StoreMsg::AgentDeadLetters {
                agent_id,
                after,
                limit,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.agent_dead_letters(&agent_id, after, limit).await })
            }),
            StoreMsg::GetDeadLetter(id, reply) => {
                let _ = reply.send(t.find_dead_letter(id).await);
            }
            // Off the writer: a shared backend counts in the database.
            StoreMsg::CountDeadLetters(reply) => self.read_off(reply, |b| {
                Box::pin(async move { b.dead_letter_count().await })
            }),
            _ => error!("a message reached the handler of another kind"),
        }
    }

    /// Stores a finished reflection's summary, blocks and facts, moves the
    /// generations of the parts it changed and brings the search index in
    /// line.
    async fn complete_reflection(
        &mut self,
        myself: &ActorRef<StoreMsg>,
        summary: Box<ConversationSummary>,
        blocks: Vec<MemoryBlock>,
        facts: Vec<Fact>,
        reply: RpcReplyPort<Result<bool, StoreError>>,
    ) {
        let t = self.backend.clone();
        let res = t.store_reflection(&summary, &blocks, &facts).await;
        // The user's summary, facts and blocks (a reflection writes
        // the user's own, never the agent's); every user's facts
        // where a fact is shared (the summary counter it moves in
        // the agent's record is the watchdog's, not part of a
        // context). A reflection without a shared fact leaves the
        // other users' cached contexts current.
        let (agent, user) = (&summary.agent_id, &summary.user_id);
        let theirs = Parts::SUMMARIES
            | Parts::FACTS
            | if blocks.is_empty() {
                Parts::NONE
            } else {
                Parts::BLOCKS
            };
        self.generations.bump_user(agent, user, theirs);
        if matches!(res, Ok(Reflected { shared: true, .. })) {
            self.generations.bump(agent, Parts::FACTS);
        }
        let res = res.map(|r| r.stored);
        if res.as_ref().is_ok_and(|stored| *stored) && self.search.tracks(&summary.agent_id) {
            // The facts that survived de-duplication, and those on
            // their subjects, as they now stand.
            let subjects: std::collections::BTreeSet<&String> =
                facts.iter().filter_map(|f| f.subject.as_ref()).collect();
            let touched: Vec<FactRecord> = match facts.first() {
                Some(f) => t
                    .user_facts(&f.agent_id, &f.user_id)
                    .await
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|s| {
                        facts.iter().any(|c| c.fact_id == s.fact_id)
                            || s.subject.as_ref().is_some_and(|x| subjects.contains(x))
                    })
                    .collect(),
                None => Vec::new(),
            };
            let s = summary.clone();
            let mut vectors = fact_vectors(&*t, touched.iter().collect()).await;
            self.search.update(&summary.agent_id, move |ix| {
                ix.put_summary(&s, None);
                index_facts(ix, &touched, &mut vectors);
            });
        }
        if res.is_ok() {
            self.wrote(myself).await;
        }
        let _ = reply.send(res);
    }
}
