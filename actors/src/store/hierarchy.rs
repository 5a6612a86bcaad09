//! The summary hierarchy: what the Rollup actor's inbox holds, and the
//! rollups and cursor moves a rollup pass writes at once.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::embed::StoredVector;
use crate::keys;
use crate::model::ConversationSummary;
use crate::period::Level;

/// What an inbox entry points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxItem {
    Summary,
    Fact,
}

impl InboxItem {
    /// Its code in a stored inbox key.
    pub(crate) fn code(self) -> u8 {
        match self {
            InboxItem::Summary => keys::INBOX_SUMMARY,
            InboxItem::Fact => keys::INBOX_FACT,
        }
    }

    /// The item a stored code names (`None`: a code no version writes).
    pub(crate) fn from_code(code: u8) -> Option<InboxItem> {
        match code {
            keys::INBOX_SUMMARY => Some(InboxItem::Summary),
            keys::INBOX_FACT => Some(InboxItem::Fact),
            _ => None,
        }
    }
}

/// Where an entry stands in the Rollup actor's inbox, which is read in
/// the order of these fields: the time of the item (a session's start, a
/// fact's extraction; to the millisecond, as a backend keeps it), what it
/// is and its id. Each backend stores it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InboxKey {
    pub at: DateTime<Utc>,
    pub item: InboxItem,
    pub id: Uuid,
}

impl InboxKey {
    /// Its `rollup_inbox` key.
    pub(crate) fn key(&self) -> [u8; 25] {
        keys::inbox(self.at, self.item.code(), self.id)
    }

    /// The entry a `rollup_inbox` key stands for (`None`: not an inbox key,
    /// or of a kind no version writes).
    pub(crate) fn of_key(key: &[u8]) -> Option<InboxKey> {
        let (at, code, id) = keys::inbox_parts(key)?;
        Some(InboxKey {
            at,
            item: InboxItem::from_code(code)?,
            id,
        })
    }
}

/// An item waiting in the Rollup actor's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// Where the entry stands (given back as `after`, or to remove it).
    pub key: InboxKey,
    pub agent_id: String,
    /// What the entry points at (as in `key`).
    pub kind: InboxItem,
    pub id: Uuid,
}

impl InboxEntry {
    /// The entry at `key`, of `agent_id`.
    pub(crate) fn new(key: InboxKey, agent_id: String) -> InboxEntry {
        InboxEntry {
            key,
            agent_id,
            kind: key.item,
            id: key.id,
        }
    }
}

/// A daily or weekly rollup to store (once per id), marking the version it
/// supersedes, with its vector if it has one.
#[derive(Debug, Clone)]
pub struct NewRollup {
    pub summary: ConversationSummary,
    pub supersedes: Option<Uuid>,
    pub vector: Option<StoredVector>,
}

/// That an agent's periods of `level` up to the one starting on `period`
/// are rolled up (a cursor only moves forward).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorMove {
    pub agent_id: String,
    pub level: Level,
    pub period: NaiveDate,
}

/// What a rollup pass over several agents writes at once: their new
/// rollups, then the cursors past them. A cursor is never written ahead
/// of the rollups it passes.
#[derive(Debug, Clone, Default)]
pub struct RollupBatch {
    pub rollups: Vec<NewRollup>,
    pub cursors: Vec<CursorMove>,
}

impl RollupBatch {
    pub fn is_empty(&self) -> bool {
        self.rollups.is_empty() && self.cursors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_keys_sort_as_the_entries_they_stand_for() {
        use chrono::TimeZone;
        let at = |millis| Utc.timestamp_millis_opt(millis).unwrap();
        let entries = [
            InboxKey {
                at: at(-1_500),
                item: InboxItem::Fact,
                id: Uuid::from_u128(9),
            },
            InboxKey {
                at: at(0),
                item: InboxItem::Summary,
                id: Uuid::from_u128(9),
            },
            InboxKey {
                at: at(0),
                item: InboxItem::Fact,
                id: Uuid::from_u128(1),
            },
            InboxKey {
                at: at(0),
                item: InboxItem::Fact,
                id: Uuid::from_u128(2),
            },
        ];
        for pair in entries.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(pair[0].key() < pair[1].key());
        }
        for k in entries {
            assert_eq!(InboxKey::of_key(&k.key()), Some(k));
        }
        assert_eq!(InboxKey::of_key(&keys::inbox(at(0), 7, Uuid::nil())), None);
    }
}
