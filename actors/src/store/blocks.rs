//! The agent's blocks stay the agent's: an agent-wide block changes only
//! by the operator's write (and `background_context` by the watchdog's); a
//! reflection's `relationship` and `self_perception` are kept as its
//! user's. An older version also kept the latest reflection's as the
//! agent's, over the operator's: [`repair_agent_blocks`] moves those to
//! their user at start.
//!
//! Which agent-wide records a reflection wrote:
//!
//! - a record that says so (`written_by: reflection`), or that names the
//!   user it was drawn from (`source_user_id`, which every reflection has
//!   written since blocks were kept per user, and the operator's write
//!   never has);
//! - an older record with neither, when a session summary of the agent was
//!   made at the very instant the block was written (its `created_at` is
//!   the block's `updated_at`): a reflection stamped its summary and its
//!   blocks with one reading of the clock, and an operator's write falling
//!   on the same microsecond as a reflection's is not a real risk. Its
//!   user is that summary's. Any other such record is the operator's, and
//!   is marked `written_by: operator` so it is not looked at again.

use super::*;

/// The labels a reflection writes.
pub const REFLECTION_LABELS: [BlockLabel; 2] =
    [BlockLabel::SelfPerception, BlockLabel::Relationship];

/// What [`repair_agent_blocks`] did with one agent-wide block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairedBlock {
    pub agent_id: String,
    pub label: BlockLabel,
    /// The user whose call it was drawn from.
    pub user_id: String,
    /// It became the user's own; `false`: the user had a newer one of
    /// their own, which is kept (the agent-wide one is removed either way).
    pub moved: bool,
}

/// Moves every agent-wide `relationship`/`self_perception` a reflection
/// wrote (see the module's notes) to the user it was drawn from, and marks
/// the older unmarked ones that are the operator's as such. Each block is
/// logged. Running it again finds nothing more.
pub async fn repair_agent_blocks(b: &dyn Backend) -> Result<Vec<RepairedBlock>, StoreError> {
    let mut repaired = Vec::new();
    for (agent_id, _) in b.agents().await? {
        // The agent's session summaries, read once and only for an
        // unmarked block.
        let mut summaries: Option<Vec<ConversationSummary>> = None;
        for label in REFLECTION_LABELS {
            let Some(block) = b.block(&agent_id, label).await? else {
                continue;
            };
            let user = match (&block.written_by, &block.source_user_id) {
                (Some(BlockWriter::Operator), _) => continue,
                (_, Some(user)) => Some(user.clone()),
                (Some(_), None) => None,
                (None, None) => {
                    if summaries.is_none() {
                        summaries = Some(b.summaries(&agent_id, SummaryType::Session, None).await?);
                    }
                    summaries
                        .iter()
                        .flatten()
                        .find(|s| s.created_at == block.updated_at)
                        .map(|s| s.user_id.clone())
                }
            };
            let Some(user_id) = user.filter(|u| !u.is_empty()) else {
                if block.written_by.is_none() {
                    b.put_block(&MemoryBlock {
                        written_by: Some(BlockWriter::Operator),
                        ..block
                    })
                    .await?;
                }
                continue;
            };
            let moved = b.reclaim_agent_block(&agent_id, label, &user_id).await?;
            warn!(
                agent_id = %agent_id,
                label = %label,
                user_id = %user_id,
                moved,
                "agent-wide block held one user's reflection; moved to that user's own"
            );
            repaired.push(RepairedBlock {
                agent_id: agent_id.clone(),
                label,
                user_id,
                moved,
            });
        }
    }
    Ok(repaired)
}

/// The record an agent-wide block drawn from `user_id`'s call becomes as
/// theirs, unless `theirs` (their own) was written later.
pub(crate) fn reclaimed(
    agent_wide: &MemoryBlock,
    theirs: Option<&MemoryBlock>,
    user_id: &str,
) -> Option<MemoryBlock> {
    if theirs.is_some_and(|t| t.updated_at >= agent_wide.updated_at) {
        return None;
    }
    Some(MemoryBlock {
        source_user_id: Some(user_id.to_string()),
        written_by: Some(BlockWriter::Reflection),
        ..agent_wide.clone()
    })
}
