//! The reads a context is assembled from, in sled.

use super::*;

impl Trees {
    /// Everything an (agent, user)'s context is assembled from.
    pub fn stored_sources(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<StoredSources, StoreError> {
        let parts = self.source_parts(agent_id, user_id, Parts::ALL)?;
        Ok(StoredSources::from(parts))
    }

    /// The asked parts of an (agent, user)'s context sources: a read after
    /// a write reads again only what the write changed.
    pub fn source_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<SourceParts, StoreError> {
        if !parts.contains(Parts::SUMMARIES) {
            return self.source_parts_but_summaries(agent_id, user_id, parts);
        }
        // The summaries (the largest records) are scanned on a thread of
        // their own while this one reads the other parts: a read after a
        // write waits for the longer of the two, not both. (Inline when no
        // thread can be had, or nothing else is asked.)
        if parts == Parts::SUMMARIES {
            return Ok(SourceParts {
                summaries: Some(self.user_summaries(agent_id, user_id)?),
                ..Default::default()
            });
        }
        let (summaries, rest) = std::thread::scope(|scope| {
            let summaries = std::thread::Builder::new()
                .name("recall-context".into())
                .spawn_scoped(scope, || self.user_summaries(agent_id, user_id));
            let rest = self.source_parts_but_summaries(agent_id, user_id, parts);
            let summaries = match summaries {
                // A panic there is a panic here, as it would be inline.
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => self.user_summaries(agent_id, user_id),
            };
            (summaries, rest)
        });
        Ok(SourceParts {
            summaries: Some(summaries?),
            ..rest?
        })
    }
}

impl Trees {
    /// A user's current summaries with an agent, of every type, oldest
    /// first (by period end, creation, id).
    pub(super) fn user_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<std::sync::Arc<ConversationSummary>>, StoreError> {
        let mut summaries = self.mirrored(
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
            &[(agent_id, user_id)],
            |s| s.is_current(),
        )?;
        summaries.sort_by(|a, b| {
            (a.period_end, a.created_at, a.summary_id).cmp(&(
                b.period_end,
                b.created_at,
                b.summary_id,
            ))
        });
        Ok(summaries)
    }

    /// [`SourceStore::source_parts`] without the summaries.
    pub(super) fn source_parts_but_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<SourceParts, StoreError> {
        let mut out = SourceParts::default();
        if parts.contains(Parts::SESSIONS) {
            let mut ended = self.mirrored(
                &self.mirror_sessions,
                &self.sessions,
                keys::TREE_SESSIONS,
                &[(agent_id, user_id)],
                |s| s.ended_at.is_some(),
            )?;
            ended.sort_by_key(|s| (s.ended_at, s.session_id));
            out.ended = Some(ended);
        }
        if parts.contains(Parts::FACTS) {
            // The user's own, and every user's shared ones.
            let visible = self.mirrored(
                &self.mirror_facts,
                &self.facts,
                keys::TREE_FACTS,
                &[(agent_id, user_id), (agent_id, "")],
                |_| true,
            )?;
            out.facts = Some(CurrentFacts::of(visible));
        }
        if parts.contains(Parts::BLOCKS) {
            out.blocks = Some(StoredBlocks {
                agent_blocks: self.blocks(agent_id)?,
                user_blocks: self.user_blocks(agent_id, user_id)?,
                persistent_context: self.agent(agent_id)?.persistent_context,
            });
        }
        if parts.contains(Parts::TOPICS) {
            let mut topics: Vec<Topic> = self
                .mirrored(
                    &self.mirror_topics,
                    &self.topics,
                    keys::TREE_TOPICS,
                    &[(agent_id, user_id)],
                    |_| true,
                )?
                .iter()
                .map(|t| (**t).clone())
                .collect();
            topics.sort_by_key(|t| (t.created_at, t.topic_id));
            out.topics = Some(topics);
        }
        Ok(out)
    }
}
