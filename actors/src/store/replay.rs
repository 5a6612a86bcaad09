//! Storing what a replay re-derived: a new version of a session summary,
//! linked to the one it replaces, and the session's facts brought in line
//! with the new reflection.

use sled::transaction::{ConflictableTransactionError, Transactional};
use uuid::Uuid;

use super::{encode, tx_encode, StoreError, Trees};
use crate::keys;
use crate::model::{normalize_fact, ConversationSummary, Fact};

/// What storing a revision changed.
#[derive(Debug, Clone, Default)]
pub struct Revision {
    /// False when this version was stored already (a replay run again).
    pub stored: bool,
    /// The replaced version, now marked `superseded_by`.
    pub old: Option<ConversationSummary>,
    pub facts_added: Vec<Fact>,
    pub facts_removed: Vec<Fact>,
}

impl Trees {
    /// Stores `new` (whose `supersedes` names the current version of the
    /// same session's summary) and marks the old one superseded, in one
    /// transaction. The session's facts become `facts`: those the new
    /// reflection no longer finds are removed, new ones added (a user's
    /// fact from another session is kept and not repeated).
    pub fn revise_session(
        &self,
        new: &ConversationSummary,
        facts: &[Fact],
    ) -> Result<Revision, StoreError> {
        if self.summary_index.contains_key(new.summary_id.as_bytes())? {
            return Ok(Revision::default());
        }
        let Some(old_id) = new.supersedes else {
            return Err(StoreError::Corrupt {
                path: Default::default(),
                message: "a revision must name the version it replaces".into(),
            });
        };
        let Some(mut old) = self.summary(old_id)? else {
            return Err(StoreError::SummaryNotFound(old_id));
        };
        let session_id = new.source_range.as_ref().map(|r| r.session_id);
        let existing = self.user_facts(&new.agent_id, &new.user_id)?;
        let wanted: Vec<String> = facts.iter().map(|f| normalize_fact(&f.content)).collect();
        let (of_session, others): (Vec<Fact>, Vec<Fact>) = existing
            .into_iter()
            .partition(|f| f.source_session_id.is_some() && f.source_session_id == session_id);
        let facts_removed: Vec<Fact> = of_session
            .iter()
            .filter(|f| !wanted.contains(&normalize_fact(&f.content)))
            .cloned()
            .collect();
        let kept: Vec<Fact> = of_session
            .into_iter()
            .filter(|f| wanted.contains(&normalize_fact(&f.content)))
            .chain(others)
            .collect();
        let facts_added = Self::dedup_facts(&kept, facts);

        old.superseded_by = Some(new.summary_id);
        let old_row = (keys::summary_of(&old), encode(&old)?);
        let new_key = keys::summary_of(new);
        let mut meta = self.agent(&new.agent_id)?;
        meta.summary_version += 1;
        let added_rows: Vec<(Vec<u8>, Vec<u8>, Uuid)> = facts_added
            .iter()
            .map(|f| {
                Ok((
                    keys::fact(&f.agent_id, &f.user_id, f.fact_id),
                    encode(f)?,
                    f.fact_id,
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        let removed_keys: Vec<(Vec<u8>, Uuid)> = facts_removed
            .iter()
            .map(|f| (keys::fact(&f.agent_id, &f.user_id, f.fact_id), f.fact_id))
            .collect();
        // The Rollup actor revises the day and week, moves the session to
        // the new version in its topic, and makes vectors.
        let mut inbox_rows = Vec::new();
        if self.fill_inbox {
            inbox_rows.push(keys::inbox(
                new.period_start,
                keys::INBOX_SUMMARY,
                new.summary_id,
            ));
            inbox_rows.extend(
                facts_added
                    .iter()
                    .map(|f| keys::inbox(f.extracted_at, keys::INBOX_FACT, f.fact_id)),
            );
        }
        (
            &self.summaries,
            &self.summary_index,
            &self.agents,
            &self.facts,
            &self.fact_index,
            &self.embeddings,
            &self.rollup_inbox,
        )
            .transaction(
                |(summaries, index, agents, facts_tree, fact_index, embeddings, inbox)| {
                    summaries.insert(old_row.0.as_slice(), old_row.1.as_slice())?;
                    summaries.insert(new_key.as_slice(), tx_encode(new)?)?;
                    index.insert(new.summary_id.as_bytes(), new_key.as_slice())?;
                    agents.insert(keys::agent(&new.agent_id), tx_encode(&meta)?)?;
                    for (k, id) in &removed_keys {
                        facts_tree.remove(k.as_slice())?;
                        fact_index.remove(id.as_bytes())?;
                        embeddings.remove(&keys::embedding(*id))?;
                    }
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
        Ok(Revision {
            stored: true,
            old: Some(old),
            facts_added,
            facts_removed,
        })
    }

    /// Records that a summary is what its inputs derive today (a replay
    /// found the same content): the next replay skips it.
    pub fn stamp_derivation(&self, summary_id: Uuid, derivation: &str) -> Result<(), StoreError> {
        let Some(mut s) = self.summary(summary_id)? else {
            return Err(StoreError::SummaryNotFound(summary_id));
        };
        s.derivation = Some(derivation.to_string());
        self.summaries.insert(keys::summary_of(&s), encode(&s)?)?;
        Ok(())
    }
}
