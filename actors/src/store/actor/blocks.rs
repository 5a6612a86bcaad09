//! The Store actor's handling of memory blocks and the agents'
//! bookkeeping (persistent context, the background context's version).

use super::*;

impl StoreState {
    /// Handles a message about blocks and agents (`handle` routes only those
    /// here).
    pub(super) async fn handle_blocks(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::PutBlock { block, reply } => {
                let res = t.put_block(&block).await;
                self.generations.bump(&block.agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::SetPersistentContext {
                agent_id,
                lines,
                reply,
            } => {
                let res = t.set_persistent_context(&agent_id, lines).await;
                self.generations.bump(&agent_id, Parts::BLOCKS);
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::MarkContextBuilt {
                agent_id,
                version,
                expires_at,
            } => match t.mark_context_built(&agent_id, version, expires_at).await {
                Ok(()) => self.wrote(myself).await,
                Err(e) => self.failed("mark_context_built", &e),
            },
            StoreMsg::GetBlocks(agent, reply) => self.read_off(reply, move |b| {
                Box::pin(async move { b.blocks(&agent).await })
            }),
            StoreMsg::GetUserBlocks {
                agent_id,
                user_id,
                reply,
            } => self.read_off(reply, move |b| {
                Box::pin(async move { b.user_blocks(&agent_id, &user_id).await })
            }),
            StoreMsg::ListAgents(reply) => {
                self.read_off(reply, |b| Box::pin(async move { b.agents().await }))
            }
            StoreMsg::GetAgent(agent_id, reply) => {
                let _ = reply.send(t.agent(&agent_id).await);
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
