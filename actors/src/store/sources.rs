//! Reading what an (agent, user)'s context is assembled from, in one go.

use super::*;

/// What is stored for an (agent, user)'s context, read in one go.
#[derive(Debug, Clone, Default)]
pub struct StoredSources {
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
/// ([`Trees::source_parts`]); `None` where not asked.
#[derive(Debug, Default)]
pub struct SourceParts {
    pub blocks: Option<StoredBlocks>,
    /// As [`StoredSources::facts`].
    pub facts: Option<CurrentFacts>,
    /// As [`StoredSources::summaries`].
    pub summaries: Option<Vec<std::sync::Arc<ConversationSummary>>>,
    /// As [`StoredSources::ended`].
    pub ended: Option<Vec<std::sync::Arc<SessionRecord>>>,
    pub topics: Option<Vec<Topic>>,
}

impl From<SourceParts> for StoredSources {
    /// Every part read (a part not asked for is empty).
    fn from(parts: SourceParts) -> StoredSources {
        let blocks = parts.blocks.unwrap_or_default();
        StoredSources {
            agent_blocks: blocks.agent_blocks,
            user_blocks: blocks.user_blocks,
            persistent_context: blocks.persistent_context,
            facts: parts.facts.unwrap_or_default(),
            summaries: parts.summaries.unwrap_or_default(),
            ended: parts.ended.unwrap_or_default(),
            topics: parts.topics.unwrap_or_default(),
        }
    }
}
