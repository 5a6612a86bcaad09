//! The Store actor's handling of the mirror's ledger.

use super::*;

impl StoreState {
    /// Handles a message about the mirror's ledger (`handle` routes only
    /// those here). Its writes change nothing a context reads.
    pub(super) async fn handle_mirror(&mut self, myself: &ActorRef<StoreMsg>, msg: StoreMsg) {
        let t = self.backend.clone();
        match msg {
            StoreMsg::Mirrored { remote, reply } => self.read_off(reply, move |b| {
                Box::pin(async move { b.mirrored(&remote).await })
            }),
            StoreMsg::PutMirrored {
                remote,
                entry,
                reply,
            } => {
                let res = t.put_mirrored(&remote, &entry).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            StoreMsg::DropMirrored {
                remote,
                summary_id,
                reply,
            } => {
                let res = t.drop_mirrored(&remote, summary_id).await;
                if res.is_ok() {
                    self.wrote(myself).await;
                }
                let _ = reply.send(res);
            }
            _ => error!("a message reached the handler of another kind"),
        }
    }
}
