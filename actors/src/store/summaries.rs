//! Summaries, memory blocks and the per-agent bookkeeping of the
//! background context.

use super::*;

impl Trees {
    pub fn summary(&self, id: Uuid) -> Result<Option<ConversationSummary>, StoreError> {
        let Some(key) = self.summary_index.get(id.as_bytes())? else {
            return Ok(None);
        };
        self.get(&self.summaries, keys::TREE_SUMMARIES, &key)
    }

    /// An agent's summaries of one type, oldest first, ending at or after
    /// `since` when given.
    pub fn summaries(
        &self,
        agent_id: &str,
        kind: SummaryType,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        let prefix = keys::summaries_prefix(agent_id, kind);
        match since {
            None => self.scan(
                &self.summaries,
                keys::TREE_SUMMARIES,
                self.summaries.scan_prefix(&prefix),
            ),
            Some(t) => {
                let start = keys::summaries_since(agent_id, kind, t);
                let iter = self.summaries.range(start..).take_while(|r| {
                    r.as_ref()
                        .map(|(k, _)| k.starts_with(&prefix))
                        .unwrap_or(true)
                });
                self.scan(&self.summaries, keys::TREE_SUMMARIES, iter)
            }
        }
    }

    /// The agent's blocks (agent-wide; the latest reflection's
    /// `relationship`/`self_perception` among them).
    pub fn blocks(&self, agent_id: &str) -> Result<Vec<MemoryBlock>, StoreError> {
        let iter = self
            .blocks
            .scan_prefix(keys::blocks_prefix(agent_id))
            .filter(|r| {
                r.as_ref()
                    .map(|(k, _)| keys::is_agent_block(agent_id, k))
                    .unwrap_or(true)
            });
        self.scan(&self.blocks, keys::TREE_BLOCKS, iter)
    }

    /// The blocks reflections drew from one user's conversations.
    pub fn user_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<MemoryBlock>, StoreError> {
        let blocks: Vec<MemoryBlock> = self.scan(
            &self.blocks,
            keys::TREE_BLOCKS,
            self.blocks
                .scan_prefix(keys::blocks_prefix(agent_id))
                .filter(|r| {
                    r.as_ref()
                        .map(|(k, _)| !keys::is_agent_block(agent_id, k))
                        .unwrap_or(true)
                }),
        )?;
        Ok(blocks
            .into_iter()
            .filter(|b| b.source_user_id.as_deref() == Some(user_id))
            .collect())
    }

    pub fn block(
        &self,
        agent_id: &str,
        label: BlockLabel,
    ) -> Result<Option<MemoryBlock>, StoreError> {
        self.get(
            &self.blocks,
            keys::TREE_BLOCKS,
            &keys::block(agent_id, label),
        )
    }

    pub fn agent(&self, agent_id: &str) -> Result<AgentMeta, StoreError> {
        Ok(self
            .get(&self.agents, keys::TREE_AGENTS, keys::agent(agent_id))?
            .unwrap_or_default())
    }

    pub fn agents(&self) -> Result<Vec<(String, AgentMeta)>, StoreError> {
        let mut out = Vec::new();
        for item in self.agents.iter() {
            let (k, v) = item?;
            let Ok(id) = String::from_utf8(k.to_vec()) else {
                warn!(key = ?k, "skipping agent record with a non-utf8 id");
                continue;
            };
            if let Some(meta) = self.decode(keys::TREE_AGENTS, &k, &v) {
                out.push((id, meta));
            }
        }
        Ok(out)
    }
}
