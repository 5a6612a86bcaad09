//! Retrieval: what a context read finds in the user's memory for the
//! current message, how the hits are shown, and what of everything fits
//! the budget. Pure functions of what the caller holds: the runtime
//! gathers the sources (stored records, the search index, the turns
//! either side of a hit) and calls in here.
//!
//! # Layout
//!
//! - [`query`]: the search a message asks, and how its hits are ranked.
//! - [`shape`]: hits to items — a turn with the turns beside it, an
//!   agent's question with the answer to it, each exchange and summary
//!   sentence once.
//! - [`excerpt`]: a retrieved summary as the sentences holding the words
//!   asked.
//! - [`select`]: choosing what fits the budget, tier by tier.
//!
//! The keyword and vector index itself is [`crate::search`], which also
//! keeps each stored turn prepared as a retrieved item
//! ([`crate::search::turns`]).

pub mod excerpt;
pub mod query;
pub mod select;
pub mod shape;

pub use excerpt::{summary_excerpt, SummarySentences};
pub use query::{query, ranking};
pub use select::{cut_text, select, Retrieved, Selection};
pub use shape::{shape, turns_to_read, Shaping};
