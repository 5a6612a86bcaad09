//! Reading what an (agent, user)'s context is assembled from, in one go.

use super::*;

/// What is stored for an (agent, user)'s context, read in one go.
#[derive(Debug, Clone, Default)]
pub struct ContextSources {
    /// The agent-wide blocks.
    pub agent_blocks: Vec<MemoryBlock>,
    /// The blocks drawn from this user's conversations.
    pub user_blocks: Vec<MemoryBlock>,
    /// The current facts the user may see: their own and the agent's
    /// shared ones (a value a later call replaced is left out), each with
    /// the value it replaced ([`CurrentFacts::earlier`]).
    pub facts: CurrentFacts,
    /// The user's summaries of every type, oldest first (by period end,
    /// creation, id).
    pub summaries: Vec<std::sync::Arc<ConversationSummary>>,
    pub persistent_context: Vec<String>,
    /// The user's ended sessions with the agent, by end time.
    pub ended: Vec<std::sync::Arc<SessionRecord>>,
    /// The user's topics.
    pub topics: Vec<Topic>,
}

/// Current facts, oldest extracted first, and the values they replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentFacts {
    /// The records as the store decoded them (shared with its cache, so a
    /// read after a write decodes only what changed).
    pub facts: Vec<std::sync::Arc<FactRecord>>,
    /// For a fact of `facts` that replaced an earlier value on its subject
    /// (`home`: "Lives in Austin" then "Moved to Denver"), the latest value
    /// it replaced and until when that held, by the current fact's id.
    pub earlier: HashMap<Uuid, EarlierValue>,
}

impl CurrentFacts {
    /// The current facts among `visible` (every fact a user may see,
    /// current and earlier) and what each replaced.
    pub fn of(mut visible: Vec<std::sync::Arc<FactRecord>>) -> CurrentFacts {
        visible.sort_by_key(|f| (f.extracted_at, f.fact_id));
        CurrentFacts {
            earlier: facts::earlier_values(visible.iter().map(|f| &**f)),
            facts: visible.into_iter().filter(|f| f.is_current()).collect(),
        }
    }

    /// The value `fact_id` replaced, if it replaced one: for "earlier:
    /// Lives in Austin (until 2026-03-02)".
    pub fn earlier(&self, fact_id: Uuid) -> Option<&EarlierValue> {
        self.earlier.get(&fact_id)
    }

    /// The facts themselves.
    pub fn iter(&self) -> impl Iterator<Item = &Fact> {
        self.facts.iter().map(|f| &f.fact)
    }

    pub fn len(&self) -> usize {
        self.facts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }
}

/// What a context needs of a user's blocks and the agent's record.
#[derive(Debug, Clone, Default)]
pub struct StoredBlocks {
    /// The agent-wide blocks.
    pub agent_blocks: Vec<MemoryBlock>,
    /// The blocks drawn from this user's conversations.
    pub user_blocks: Vec<MemoryBlock>,
    pub persistent_context: Vec<String>,
}

/// The parts of an (agent, user)'s context sources that were asked for
/// ([`Trees::context_parts`]); `None` where not asked.
#[derive(Debug, Default)]
pub struct ContextParts {
    pub blocks: Option<StoredBlocks>,
    /// As [`ContextSources::facts`].
    pub facts: Option<CurrentFacts>,
    /// As [`ContextSources::summaries`].
    pub summaries: Option<Vec<std::sync::Arc<ConversationSummary>>>,
    /// As [`ContextSources::ended`].
    pub ended: Option<Vec<std::sync::Arc<SessionRecord>>>,
    pub topics: Option<Vec<Topic>>,
}

impl Trees {
    /// Everything an (agent, user)'s context is assembled from.
    pub fn context_sources(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<ContextSources, StoreError> {
        let parts = self.context_parts(agent_id, user_id, Parts::ALL)?;
        let blocks = parts.blocks.unwrap_or_default();
        Ok(ContextSources {
            agent_blocks: blocks.agent_blocks,
            user_blocks: blocks.user_blocks,
            persistent_context: blocks.persistent_context,
            facts: parts.facts.unwrap_or_default(),
            summaries: parts.summaries.unwrap_or_default(),
            ended: parts.ended.unwrap_or_default(),
            topics: parts.topics.unwrap_or_default(),
        })
    }

    /// The asked parts of an (agent, user)'s context sources: a read after
    /// a write reads again only what the write changed.
    pub fn context_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<ContextParts, StoreError> {
        if !parts.contains(Parts::SUMMARIES) {
            return self.context_parts_but_summaries(agent_id, user_id, parts);
        }
        // The summaries (the largest records) are scanned on a thread of
        // their own while this one reads the other parts: a read after a
        // write waits for the longer of the two, not both. (Inline when no
        // thread can be had, or nothing else is asked.)
        if parts == Parts::SUMMARIES {
            return Ok(ContextParts {
                summaries: Some(self.user_summaries(agent_id, user_id)?),
                ..Default::default()
            });
        }
        let (summaries, rest) = std::thread::scope(|scope| {
            let summaries = std::thread::Builder::new()
                .name("recall-context".into())
                .spawn_scoped(scope, || self.user_summaries(agent_id, user_id));
            let rest = self.context_parts_but_summaries(agent_id, user_id, parts);
            let summaries = match summaries {
                // A panic there is a panic here, as it would be inline.
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => self.user_summaries(agent_id, user_id),
            };
            (summaries, rest)
        });
        Ok(ContextParts {
            summaries: Some(summaries?),
            ..rest?
        })
    }

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

    /// [`Trees::context_parts`] without the summaries.
    pub(super) fn context_parts_but_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<ContextParts, StoreError> {
        let mut out = ContextParts::default();
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
