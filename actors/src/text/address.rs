//! The participants' names: what each side of a relationship is called,
//! read from their ids and from how each side addresses the other ("Hi
//! Gran, it's me", "Thank you, Dariusz", "Morning, Juniper"), and which
//! of them a question names ("When did Tomasz get the engine running?"
//! is about what Tomasz said himself, "I finally got it running").
//!
//! A name is kept as its key: its letters, lowercased ("Ji-woo's" and the
//! id `jiwoo` are both `jiwoo`).

use std::collections::HashMap;

use uuid::Uuid;

use crate::model::Speaker;

/// Words after which a capitalized word is the name of whoever is spoken
/// to: greetings, thanks and leave-takings ("Hi Gran", "Cheers, Juniper",
/// "Bye, Nkechi"). "Thank you, X" is read as "thank" "you" then the name.
const ADDRESSING: &[&str] = &[
    "hi",
    "hiya",
    "hey",
    "hello",
    "morning",
    "afternoon",
    "evening",
    "night",
    "goodnight",
    "thanks",
    "cheers",
    "bye",
    "goodbye",
    "congrats",
    "congratulations",
    "welcome",
];

/// A name learned from how it is said is believed once it is said this
/// often (a "Hi Mum" to someone else in the room is said once).
const SAID_OFTEN: u32 = 2;

/// A name's key: its letters lowercased, the possessive left out; `None`
/// for fewer than two letters.
pub fn name_key(word: &str) -> Option<String> {
    let word = word
        .strip_suffix("'s")
        .or_else(|| word.strip_suffix("’s"))
        .unwrap_or(word);
    let key: String = word
        .chars()
        .filter(|c| c.is_alphabetic())
        .flat_map(char::to_lowercase)
        .collect();
    (key.chars().count() >= 2).then_some(key)
}

/// A word with the punctuation around it left out, and whether
/// punctuation followed it.
fn bare(word: &str) -> (&str, bool) {
    let end = word.trim_end_matches(|c: char| !c.is_alphanumeric());
    let start = end.trim_start_matches(|c: char| !c.is_alphanumeric());
    (start, end.len() < word.len())
}

fn capitalized(word: &str) -> bool {
    word.chars().next().is_some_and(char::is_uppercase)
}

/// The names in one line of `speaker`'s: whom it addresses (the other
/// side) after a greeting, thanks or leave-taking, and its own name where
/// it says it ("my name is Kofi", "call me Dee"). Each as (the side it
/// names, key). A name must be capitalized, and be the greeting's last
/// word or have punctuation after it ("Hi Gran, it's me", "Morning,
/// Juniper."; not "Hi Sarah said…").
pub fn names_in(speaker: Speaker, line: &str) -> Vec<(Speaker, String)> {
    let other = match speaker {
        Speaker::User => Speaker::Agent,
        Speaker::Agent => Speaker::User,
    };
    // (no allocation for a word that starts nothing: it runs on every
    // turn indexed)
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    let is = |i: usize, word: &str| {
        words
            .get(i)
            .is_some_and(|w| bare(w).0.eq_ignore_ascii_case(word))
    };
    let mut i = 0;
    while i < words.len() {
        let (w, punct) = bare(words[i]);
        // (whose name, where it is)
        let at = if ADDRESSING.iter().any(|a| w.eq_ignore_ascii_case(a))
            && !words[i].ends_with(['!', '.', '?'])
        {
            Some((other, i + 1))
        } else if is(i, "thank") && !punct && is(i + 1, "you") {
            (!words[i + 1].ends_with(['!', '.', '?'])).then_some((other, i + 2))
        } else if is(i, "my") && is(i + 1, "name") && is(i + 2, "is") {
            Some((speaker, i + 3))
        } else if is(i, "call") && !punct && is(i + 1, "me") {
            Some((speaker, i + 2))
        } else {
            None
        };
        if let Some((side, j)) = at {
            if let Some(name) = words.get(j) {
                let (name, punct) = bare(name);
                let last = j + 1 == words.len();
                let lower = name.to_lowercase();
                if capitalized(name)
                    && (punct || last)
                    && !super::is_stopword(&lower)
                    && !ADDRESSING.contains(&lower.as_str())
                {
                    if let Some(key) = name_key(name) {
                        out.push((side, key));
                    }
                }
            }
        }
        i += 1;
    }
    out
}

/// The words a speaker says of themselves.
pub const FIRST_PERSON: &[&str] = &[
    "i", "i'm", "i've", "i'll", "i'd", "my", "me", "mine", "myself", "we", "we're", "we've",
    "we'll", "we'd", "our", "ours", "us",
];
/// The words a speaker says of whom they speak to.
pub const SECOND_PERSON: &[&str] = &["you", "you're", "you've", "you'll", "your", "yours"];

/// Whether `sentence` tells of its speaker's own life: it speaks in the
/// first person and not to the listener ("My sister's a dentist in
/// Tijuana", not "My sister asked after you").
pub fn of_itself(sentence: &str) -> bool {
    // (no allocation: it runs on every sentence of a turn prepared for a
    // read)
    let is = |w: &str, list: &[&str]| {
        list.iter().any(|l| {
            l.len() == w.len()
                && l.bytes()
                    .zip(w.bytes())
                    .all(|(a, b)| a == b.to_ascii_lowercase())
        })
    };
    let mut first = false;
    for w in sentence.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        let w = w.trim_matches('\'');
        if is(w, SECOND_PERSON) {
            return false;
        }
        first |= is(w, FIRST_PERSON);
    }
    first
}

/// The names said in a user's calls with one agent, kept per call so
/// that a call indexed again replaces its own.
#[derive(Debug, Default, Clone)]
pub struct Addressed {
    calls: HashMap<Uuid, Box<[Named]>>,
    counts: HashMap<Named, u32>,
}

/// A name said: the side it names, and its key.
type Named = (Speaker, Box<str>);

impl Addressed {
    /// Sets the names said in call `session_id` (replacing what it held).
    pub fn put_call(&mut self, session_id: Uuid, names: Vec<(Speaker, String)>) {
        if let Some(old) = self.calls.remove(&session_id) {
            for key in old.iter() {
                if let Some(n) = self.counts.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        self.counts.remove(key);
                    }
                }
            }
        }
        if names.is_empty() {
            return;
        }
        let names: Box<[Named]> = names
            .into_iter()
            .map(|(s, k)| (s, k.into_boxed_str()))
            .collect();
        for key in names.iter() {
            *self.counts.entry(key.clone()).or_insert(0) += 1;
        }
        self.calls.insert(session_id, names);
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// The names each side of a relationship goes by.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Participants {
    names: Vec<(Speaker, String)>,
}

impl Participants {
    /// The names of `user_id` and `agent_id`: the letters of each id and
    /// of each of its parts ("caller-7731" is `caller`; "ji-woo" is
    /// `jiwoo`, `ji` and `woo`), and the names `addressed` holds said
    /// often enough. A name both sides go by names neither.
    pub fn new(user_id: &str, agent_id: &str, addressed: Option<&Addressed>) -> Participants {
        let mut names: Vec<(Speaker, String)> = Vec::new();
        for (side, id) in [(Speaker::User, user_id), (Speaker::Agent, agent_id)] {
            let parts = std::iter::once(id).chain(id.split(|c: char| !c.is_alphabetic()));
            for key in parts.filter_map(name_key) {
                if !names.contains(&(side, key.clone())) && !super::is_stopword(&key) {
                    names.push((side, key));
                }
            }
        }
        if let Some(a) = addressed {
            let mut said: Vec<(&Named, &u32)> =
                a.counts.iter().filter(|(_, &n)| n >= SAID_OFTEN).collect();
            said.sort_by(|(a, _), (b, _)| (&a.1, a.0.as_str()).cmp(&(&b.1, b.0.as_str())));
            for ((side, key), _) in said {
                if !names.iter().any(|(s, k)| s == side && **k == **key) {
                    names.push((*side, key.to_string()));
                }
            }
        }
        let both: Vec<String> = names
            .iter()
            .filter(|(s, k)| *s == Speaker::User && names.contains(&(Speaker::Agent, k.clone())))
            .map(|(_, k)| k.clone())
            .collect();
        names.retain(|(_, k)| !both.contains(k));
        Participants { names }
    }

    /// The side `key` names, if any.
    pub fn side_of(&self, key: &str) -> Option<Speaker> {
        self.names.iter().find(|(_, k)| k == key).map(|(s, _)| *s)
    }

    /// The side of the first participant `message` names by a
    /// capitalized name: whose words it asks about (a question's subject
    /// comes first: "What did Rafael tell Ji-woo to pack?" is about
    /// Rafael's words).
    pub fn named_in(&self, message: &str) -> Option<Speaker> {
        message.split_whitespace().find_map(|word| {
            let (w, _) = bare(word);
            capitalized(w)
                .then(|| name_key(w))
                .flatten()
                .and_then(|k| self.side_of(&k))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Speaker::{Agent, User};

    fn keys(v: Vec<(Speaker, String)>) -> Vec<(Speaker, &'static str)> {
        v.into_iter()
            .map(|(s, k)| (s, &*Box::leak(k.into_boxed_str())))
            .collect()
    }

    #[test]
    fn a_greeting_thanks_or_goodbye_names_the_other_side() {
        assert_eq!(
            keys(names_in(User, "Hey Priya, you got a sec?")),
            [(Agent, "priya")]
        );
        assert_eq!(
            keys(names_in(User, "Evening, Bartholomew.")),
            [(Agent, "bartholomew")]
        );
        assert_eq!(
            keys(names_in(Agent, "Thank you, Oluwaseun! Speak soon.")),
            [(User, "oluwaseun")]
        );
        assert_eq!(keys(names_in(Agent, "Well, goodbye Tam")), [(User, "tam")]);
        assert_eq!(
            keys(names_in(User, "Oh thanks Auntie, that's so kind")),
            [(Agent, "auntie")]
        );
        // its own name, said
        assert_eq!(
            keys(names_in(User, "Hello, my name is Zainab.")),
            [(User, "zainab")]
        );
        assert_eq!(
            keys(names_in(Agent, "Please, call me Dee.")),
            [(Agent, "dee")]
        );
    }

    #[test]
    fn what_only_looks_like_an_address_names_nobody() {
        for line in [
            "Hi, how are you?",
            "hello there, stranger",
            "Thanks for the tip about Lisbon.",
            "Say hi to Marta for me.",
            "Hi Sarah said she'd come too",
            "Morning! You're up early.",
            "Congratulations! Brilliant news.",
            "Thank you so much.",
            "Bye bye, see you Friday",
            "My name is on the list.",
        ] {
            assert_eq!(names_in(User, line), [], "{line}");
        }
    }

    #[test]
    fn a_sentence_of_itself_speaks_in_the_first_person_and_not_to_the_listener() {
        assert!(of_itself("My cousin just opened a bakery in Accra."));
        assert!(of_itself("We finally painted the hallway green"));
        assert!(!of_itself("My cousin says hello to you."));
        assert!(!of_itself("Did your cousin open the bakery?"));
        assert!(!of_itself("The bakery opened on Monday."));
        assert!(of_itself("I'm off to Accra, I've packed."));
        assert!(!of_itself("YOU'RE right, I think."));
    }

    #[test]
    fn names_come_from_ids_and_from_what_is_said_often() {
        let mut a = Addressed::default();
        let (c1, c2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        a.put_call(c1, vec![(Agent, "nan".into()), (User, "kwame".into())]);
        let p = Participants::new("caller-12", "line-3", Some(&a));
        // said once: not yet
        assert_eq!(p.side_of("nan"), None);
        assert_eq!(p.side_of("caller"), Some(User));
        assert_eq!(p.side_of("line"), Some(Agent));
        a.put_call(c2, vec![(Agent, "nan".into())]);
        let p = Participants::new("caller-12", "line-3", Some(&a));
        assert_eq!(p.side_of("nan"), Some(Agent));
        // a call indexed again replaces its own
        a.put_call(c2, vec![]);
        a.put_call(c1, vec![(Agent, "nan".into())]);
        assert_eq!(Participants::new("u", "a", Some(&a)).side_of("nan"), None);
        // hyphened ids and possessives
        let p = Participants::new("ji-woo", "rafael", None);
        for k in ["jiwoo", "ji", "woo"] {
            assert_eq!(p.side_of(k), Some(User), "{k}");
        }
        // a name both go by is neither's
        let p = Participants::new("sam", "sam", None);
        assert_eq!(p.side_of("sam"), None);
    }

    #[test]
    fn a_question_naming_a_participant_is_about_that_sides_words() {
        let p = Participants::new("ji-woo", "rafael", None);
        let about = p.named_in("What did Rafael tell Ji-woo's sister to pack?");
        assert_eq!(about, Some(Agent));
        let about = p.named_in("Which film did Ji-woo watch with Rafael?");
        assert_eq!(about, Some(User));
        assert_eq!(p.named_in("Which film did we watch?"), None);
        // lowercase is a word, not a name
        let p = Participants::new("tomasz", "gran", None);
        assert_eq!(p.named_in("what did my gran bake?"), None);
        assert_eq!(p.named_in("When was Gran's hip operation?"), Some(Agent));
    }
}
