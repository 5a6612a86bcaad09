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
