//! Archival search over an agent's summaries and facts: BM25 over their
//! words, re-ranked by embedding similarity.
//!
//! The index is derived state: one in-memory index per agent, built from
//! the Store's trees on the agent's first search and kept current by the
//! Store actor after each write it makes (summaries, rollups, topics, fact
//! changes, vectors), so it can never disagree with sled for longer than a
//! message. Nothing of it is written to disk; a lost or never-built index
//! is rebuilt from the store.
//!
//! Why not tantivy: the store is the only durable state and sled its only
//! writer; a second on-disk index would need its own commit protocol kept
//! in step with sled transactions across crashes, and the hybrid ranking
//! needs every document's vector in memory anyway. The in-memory BM25 over
//! one agent's documents is small (see docs/performance.md) and a query
//! touches only the postings of its words.
//!
//! # Layout
//!
//! Split the way tantivy splits an index:
//!
//! - `query`: what a search asks and returns: [`DocKind`], [`SearchQuery`]
//!   and its filters, [`Ranking`], [`SearchHit`] (and [`Found`], a hit without its words), [`TurnRef`].
//! - `index`: [`AgentIndex`], one agent's items and who may see each, and
//!   [`AgentIndex::search`], which runs the two sides below and blends
//!   what they find.
//! - `keyword`: BM25 over the items' stems, a query's words widened to
//!   related words, the common words that only re-rank, repeats kept to
//!   one place.
//! - `vector`: vectors as signed bytes, the scan of their sign bits and
//!   the partition (IVF) a large index probes.
//! - `cache`: [`SearchIndex`], every agent's index, built on its first
//!   search and kept current by the Store actor.
//! - [`turns`]: a stored turn as a retrieved item ([`PreparedTurn`]),
//!   prepared once when the index takes it in, and what shaping reads of
//!   it.
//!
//! The tokens items are indexed under are [`crate::lang`]'s.

mod cache;
mod index;
mod keyword;
mod query;
#[cfg(test)]
mod testing;
pub mod turns;
mod vector;

pub use cache::{BuildError, SearchIndex};
pub use index::{fact_text, AgentIndex};
pub use query::{
    DocKind, Found, KeywordTuning, Ranking, Recency, RelatedWords, SearchHit, SearchQuery, TurnRef,
};
pub use turns::{
    agent_label, prepare, prepare_around, AnswerLimits, Around, PreparedTurn, Shown, Speakers,
};
