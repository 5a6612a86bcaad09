//! The words of English as recall reads them: the tokenizer every index
//! and rule cuts a text with, and the lexicon of word tables it reads.
//!
//! It stands below what reads words, so that a word meets itself wherever
//! it is looked up: the search index keys its postings by these tokens,
//! the static word vectors key their rows by these stems, and the text
//! rules read short forms, stopwords and irregular verbs from these
//! tables. It reads nothing of the modules above it.
//!
//! # Layout
//!
//! - `tokenizer`: [`words`] (the word splitting), [`tokens`] (content
//!   words reduced to their stems), [`stem`], [`without_question_framing`]
//!   [`term_frequencies`] and a stem as a number ([`stem_key`],
//!   [`stem_keys`]).
//! - `lexicon`: the shared word tables: stopwords, months and weekdays,
//!   irregular past forms, the short forms typed chat uses, the phrases
//!   that only frame a question.
//! - [`fact_words`]: the tables the fact rules read (contractions, clause
//!   words, relations, pets, occupations, what the rules refuse).

pub(crate) mod fact_words;
mod lexicon;
mod tokenizer;

pub use lexicon::is_stopword;
#[cfg(test)]
pub(crate) use lexicon::IRREGULAR;
pub(crate) use lexicon::{is_irregular_past, MONTHS, SHORT_FORMS, WEEKDAYS};
pub(crate) use tokenizer::content_word;
pub use tokenizer::{
    stem, stem_key, stem_keys, stem_keys_of, term_frequencies, tokens, without_question_framing,
    words,
};
