//! What the search index tags a user's turn with and looks for from a
//! question: a change of a one-valued part of a life and an occupation
//! of one's own ([`super::changes`]), a strong like or dislike
//! ([`super::feelings`]). Both read the same word lists, looked up once
//! a turn.

use super::changes::{
    asked_about_words, changed_in_words, lists_of, occupation_asked_words, occupation_in_lists,
    Subjects,
};
use super::feelings::{feeling_asked_words, felt_in_words};
use super::words;

/// Everything a user's words tell that the index tags (a change of home,
/// work, vehicle, pastime or partner; a strong like or dislike; an
/// occupation of their own), the words split and looked up once.
pub fn told_in(user_text: &str) -> Subjects {
    let ws: Vec<String> = words(user_text).collect();
    let lists = lists_of(&ws);
    changed_in_words(&ws, lists) | felt_in_words(&ws, lists) | occupation_in_lists(lists)
}

/// Everything a question asks that the index tags
/// ([`asked_about`](super::asked_about),
/// [`feeling_asked`](super::feeling_asked),
/// [`occupation_asked`](super::occupation_asked)).
pub fn asked_in(question: &str) -> Subjects {
    asked_in_words(&words(question).collect::<Vec<_>>())
}

/// [`asked_in`] of a question's [`words`], split once.
pub fn asked_in_words(ws: &[String]) -> Subjects {
    asked_about_words(ws) | feeling_asked_words(ws) | occupation_asked_words(ws)
}
