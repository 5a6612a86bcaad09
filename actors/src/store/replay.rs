//! What storing a replay's re-derivation changed: a new version of a
//! session summary, linked to the one it replaces, and the facts the new
//! reflection found.

use crate::model::{ConversationSummary, FactRecord};

/// What storing a revision changed.
#[derive(Debug, Clone, Default)]
pub struct Revision {
    /// False when this version was stored already (a replay run again).
    pub stored: bool,
    /// The replaced version, now marked `superseded_by`.
    pub old: Option<ConversationSummary>,
    pub facts_added: Vec<FactRecord>,
    /// Stored facts whose place in their subject's history moved (a
    /// re-derived value stated earlier or later than theirs).
    pub facts_moved: Vec<FactRecord>,
}

/// Why `new` cannot replace `old` (there is one current version per
/// session, always: the chain never forks), or `None` if it can.
pub fn revision_refused(
    old: &ConversationSummary,
    new: &ConversationSummary,
) -> Option<&'static str> {
    use crate::model::SummaryType;
    if !old.is_current() {
        Some("the version it replaces was replaced already")
    } else if old.summary_type != SummaryType::Session || new.summary_type != SummaryType::Session {
        Some("only session summaries are revised")
    } else if old.agent_id != new.agent_id || old.user_id != new.user_id {
        Some("the versions belong to different agents or users")
    } else {
        None
    }
}
