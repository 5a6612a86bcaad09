//! The words of English as recall reads them: the tokenizer every index
//! and rule cuts a text with, and the lexicon of word tables it reads.
//!
//! It stands below what reads words, so that a word meets itself wherever
//! it is looked up: the search index keys its postings by these tokens,
//! the static word vectors key their rows by these stems, and the text
//! rules read short forms and irregular verbs from these tables. It reads
//! only the word splitting and the stopwords of [`crate::text`].
//!
//! # Layout
//!
//! - `tokenizer`: [`tokens`] (content words reduced to their stems),
//!   [`stem`] and [`without_question_framing`].
//! - `lexicon`: the word tables: irregular past forms, the short forms
//!   typed chat uses, the phrases that only frame a question.

mod lexicon;
mod tokenizer;

#[cfg(test)]
pub(crate) use lexicon::IRREGULAR;
pub(crate) use lexicon::{is_irregular_past, SHORT_FORMS};
pub use tokenizer::{stem, tokens, without_question_framing};
