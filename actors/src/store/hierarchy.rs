//! The summary hierarchy: what the Rollup actor's inbox holds.

use uuid::Uuid;

/// An item waiting in the Rollup actor's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The backend's key of the entry (opaque to the Rollup actor: given
    /// back as `after`, or to remove it).
    pub key: Vec<u8>,
    pub agent_id: String,
    pub kind: u8,
    pub id: Uuid,
}
