//! Storing what a replay re-derived: a new version of a session summary,
//! linked to the one it replaces, and the facts the new reflection found.

use sled::transaction::{ConflictableTransactionError, Transactional};
use uuid::Uuid;

use super::{encode, tx_encode, StoreError, Trees};
use crate::keys;
use crate::model::{ConversationSummary, Fact, FactRecord};

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

impl Trees {
    /// Stores `new` (whose `supersedes` names the current version of the
    /// same session's summary) and marks the old one superseded, in one
    /// transaction, with the facts of `facts` the user has not got and did
    /// not delete.
    pub fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError> {
        if self.summary_index.contains_key(new.summary_id.as_bytes())? {
            return Ok(Revision::default());
        }
        let Some(old_id) = new.supersedes else {
            return Err(StoreError::InvalidRevision(
                new.summary_id,
                "it names no version it replaces",
            ));
        };
        let Some(mut old) = self.summary(old_id)? else {
            return Err(StoreError::SummaryNotFound(old_id));
        };
        // One current version per session, always: never fork the chain.
        let why = if !old.is_current() {
            Some("the version it replaces was replaced already")
        } else if old.summary_type != crate::model::SummaryType::Session
            || new.summary_type != crate::model::SummaryType::Session
        {
            Some("only session summaries are revised")
        } else if old.agent_id != new.agent_id || old.user_id != new.user_id {
            Some("the versions belong to different agents or users")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(StoreError::InvalidRevision(old_id, why));
        }
        // Facts are about the user, not about one version of a summary:
        // the new reflection adds what the user has not got yet, never one
        // they deleted, and takes nothing away (the same fact may rest on
        // other sessions too). What it adds on a one-valued subject takes
        // its place in that subject's history by when the call was.
        let changes = self.plan_facts(facts, new.period_start, true)?;

        old.superseded_by = Some(new.summary_id);
        let old_row = (keys::summary_of(&old), encode(&old)?);
        let new_key = keys::summary_of(new);
        let mut meta = self.agent(&new.agent_id)?;
        meta.summary_version += 1;
        let added_rows = Self::fact_rows(changes.added.iter().chain(&changes.updated))?;
        // The Rollup actor revises the day and week, moves the session to
        // the new version in its topic, and makes vectors.
        let inbox_rows = self.inbox_rows(new, &changes.added);
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.facts,
            &self.fact_index,
            &self.rollup_inbox,
        )
            .transaction(
                |(summaries, index, agents, facts_tree, fact_index, inbox)| {
                    summaries.insert(old_row.0.as_slice(), old_row.1.as_slice())?;
                    summaries.insert(new_key.as_slice(), tx_encode(new)?)?;
                    index.insert(new.summary_id.as_bytes(), new_key.as_slice())?;
                    agents.insert(keys::agent(&new.agent_id), tx_encode(&meta)?)?;
                    for (k, v, id) in &added_rows {
                        facts_tree.insert(k.as_slice(), v.as_slice())?;
                        fact_index.insert(id.as_bytes(), k.as_slice())?;
                    }
                    for row in &inbox_rows {
                        inbox.insert(&row[..], new.agent_id.as_bytes())?;
                    }
                    Ok::<_, ConflictableTransactionError<StoreError>>(())
                },
            )?;
        self.note_summaries([&old_row.0, &new_key]);
        self.note_facts(added_rows.iter().map(|(k, _, _)| k));
        Ok(Revision {
            stored: true,
            old: Some(old),
            facts_added: changes.added,
            facts_moved: changes.updated,
        })
    }

    /// Records that a summary is what its inputs derive today (a replay
    /// found the same content): the next replay skips it.
    pub fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError> {
        let Some(mut s) = self.summary(summary_id)? else {
            return Err(StoreError::SummaryNotFound(summary_id));
        };
        s.derivation = Some(derivation.to_string());
        let key = keys::summary_of(&s);
        self.summaries.insert(key.as_slice(), encode(&s)?)?;
        self.note_summaries([key]);
        Ok(())
    }
}
