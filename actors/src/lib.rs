//! The recall engine: domain model, actors, the Store and the ports.
//!
//! # Layout
//!
//! - [`model`]: turns, sessions, summaries, blocks, background context.
//! - [`clock`]: the runtime clock that follows tokio's (virtual) time.
//! - [`context`]: the context the agent's LLM sees next turn: its items,
//!   tiers and budget, and its text as chat messages.
//! - [`assembly`]: assembling a context from its sources (blocks, facts,
//!   summaries, turns) under a token budget.
//! - [`port`]: what the ports share (the boxed future a call returns).
//! - [`embed`]: the `Embed` port and the offline hashing embedder.
//! - [`static_embed`]: the offline embedder of static word vectors (the
//!   default).
//! - [`background`]: threads at the lowest CPU priority for derived work
//!   that may lag (the offline summarizer's window summaries).
//! - [`lease`]: whether this instance holds a lease for work one instance
//!   at a time does (rollups, the watchdog).
//! - [`settings`]: the settings tree, defaults and validation.
//! - [`period`]: local days and weeks in an agent's time zone.
//! - [`topics`]: incremental topic clustering.
//! - [`retrieval`]: what a context read finds for the message (query,
//!   ranking, hit shaping) and what fits the budget (selection).
//! - [`lang`]: the word splitting, the tokenizer (tokens, stems) and the
//!   one lexicon of word tables (stopwords, short forms, irregular verbs,
//!   the fact rules' words) that the search index, the word vectors and
//!   the text rules share.
//! - [`search`]: the archival search index: the query and its ranking,
//!   one agent's index with its keyword (BM25) and vector (int8, sign
//!   bits, IVF) sides, the stored turns it keeps prepared as retrieved
//!   items, and the per-agent cache of built indexes.
//! - [`rollup`]: `RollupActor`, daily and weekly rollups and topics on
//!   timers.
//! - [`keys`]: every sled key the Store writes (it reads nothing of the
//!   Store).
//! - [`store`]: `StoreActor`, through which every write goes, and the
//!   backends behind it (sled; PostgreSQL, shared by several instances).
//! - [`store_error`]: `StoreError`, what reading or writing a record can
//!   fail with (below both the Store and the search index it keeps
//!   current).
//! - [`registry`]: the connection table the hot path reads.
//! - [`session`]: `SessionActor`, one per live session, with its silence timer.
//! - [`supervisor`]: `SessionSupervisor`, spawning sessions and reflectors.
//! - [`reflector`]: `ReflectorActor`, one per session reflection, with retries.
//! - [`watchdog`]: `WatchdogActor`, rebuilding `background_context` on a timer.
//! - [`mirror`]: the `MirrorPort` port and `MirrorActor`, keeping another
//!   framework's agents (Letta's) in step with the summaries and blocks.
//! - [`window`]: the in-session rolling memory (sliding-window summaries).
//! - [`reflect`]: the `Reflect` port, output parsing, reflecting a long
//!   call in parts and the offline extractive implementation.
//! - [`prompt`]: prompt templates.
//! - [`text`]: the heuristics (sentences, keywords, entities, tone).

pub mod assembly;
pub mod background;
pub mod clock;
pub mod context;
pub mod embed;
pub mod keys;
pub mod lang;
pub mod lease;
pub mod mirror;
pub mod model;
pub mod period;
pub mod port;
pub mod prompt;
pub mod reflect;
pub mod reflector;
pub mod registry;
pub mod retrieval;
pub mod rollup;
pub mod search;
pub mod session;
pub mod settings;
pub mod static_embed;
pub mod store;
pub mod store_error;
pub mod supervisor;
pub mod text;
pub mod topics;
pub mod watchdog;
pub mod window;
