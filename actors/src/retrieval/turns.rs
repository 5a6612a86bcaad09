//! A stored turn as a retrieved item, and what shaping reads of it.

use std::sync::Arc;

use chrono::{DateTime, Datelike, Timelike, Utc};
use uuid::Uuid;

use super::excerpt::stem_keys;
use crate::context::{CharEstimate, ContextItem, Source, Tier, TokenCounter};
use crate::model::{ConversationTurn, Speaker};
use crate::search::TurnRef;

/// A stored turn prepared as a retrieved item, with what retrieval asks
/// of it. Its text is made once, when it is prepared (relative dates
/// resolved, the agent's answer split into sentences with their words'
/// stems); a read only picks which of the answer's sentences to show.
pub struct PreparedTurn {
    pub seq: u32,
    pub at: DateTime<Utc>,
    /// Its exchange ([`exchange_key`]); `None` when the user said nothing.
    pub key: Option<u64>,
    /// Whether the agent's answer asks something (the user's next turn
    /// answers it).
    pub asks: bool,
    /// Its user's sentences, as
    /// [`said_key`](crate::reflect::extractive::said_key)s.
    pub said: Box<[u64]>,
    source: Source,
    /// "- [2024-03-12 19:05] user: what the user said".
    head: Box<str>,
    /// "\n  agent: ", with the agent side's id.
    agent_label: Box<str>,
    answer: Box<[AnswerSentence]>,
    /// The answer's tokens.
    answer_tokens: usize,
    /// The stems of the user's words ([`stem_key`]), sorted, once each.
    user_stems: Box<[u64]>,
    /// Those of the user's sentences that tell of the user's own life
    /// ([`crate::text::of_itself`]), and of the others.
    user_own: Box<[u64]>,
    user_rest: Box<[u64]>,
    /// The item with the whole answer, and with none of it: made once, as
    /// most reads show one of the two.
    whole: ContextItem,
    bare: ContextItem,
}

/// A sentence of the agent side's answer.
struct AnswerSentence {
    text: Box<str>,
    /// The stems of its words ([`stem_key`]), sorted, once each.
    stems: Box<[u64]>,
    asks: bool,
    /// It tells of the agent side's own life ([`crate::text::of_itself`]).
    own: bool,
}

/// An answer of at most this many tokens is one statement: shown whole
/// whenever its turn is shown.
const SHORT_ANSWER_TOKENS: usize = 30;

/// The answer of the turn a search hit, of at most this many tokens, is
/// shown whole: the exchange the words asked were found in is where the
/// answer most likely is, whichever side said it.
const HIT_ANSWER_TOKENS: usize = 80;

/// The sentences of a longer answer that hold the words asked, shown at
/// most.
const ANSWER_SENTENCES: usize = 3;

impl PreparedTurn {
    /// Where `side`'s words in it hold a word asked (`asked`:
    /// [`stem_keys`] of the query): in sentences telling of its own life,
    /// and in the others.
    pub fn holds(&self, side: Speaker, asked: &[u64]) -> (bool, bool) {
        let any = |stems: &[u64]| stems.iter().any(|k| asked.binary_search(k).is_ok());
        match side {
            Speaker::User => (any(&self.user_own), any(&self.user_rest)),
            Speaker::Agent => self.answer.iter().fold((false, false), |(own, rest), s| {
                let held = any(&s.stems);
                (own || (held && s.own), rest || (held && !s.own))
            }),
        }
    }

    /// The turn as a retrieved item for a read asking `asked` ([`stem_keys`]
    /// of its query): what the user said, and of the agent side's answer
    /// all of it when it is short (or, for the turn a search hit (`hit`),
    /// not long), else the sentences that hold a word asked (the most words
    /// first, at most three, in their order) and the question it ends on,
    /// which the user's next turn answers. Where none of the answer's
    /// sentences holds a word asked but the user's words do, the answer is
    /// the reply to them: its opening sentences are shown.
    pub fn item(&self, asked: &[u64], hit: bool) -> ContextItem {
        let limit = if hit {
            HIT_ANSWER_TOKENS
        } else {
            SHORT_ANSWER_TOKENS
        };
        let holds = |stems: &[u64]| {
            stems
                .iter()
                .filter(|k| asked.binary_search(k).is_ok())
                .count()
        };
        let shown: Vec<usize> = if self.answer_tokens <= limit {
            (0..self.answer.len()).collect()
        } else {
            let mut ranked: Vec<(usize, usize)> = self
                .answer
                .iter()
                .enumerate()
                .map(|(i, s)| (i, holds(&s.stems)))
                .filter(|&(_, n)| n > 0)
                .collect();
            ranked.sort_by_key(|&(i, n)| (std::cmp::Reverse(n), i));
            ranked.truncate(ANSWER_SENTENCES);
            let mut shown: Vec<usize> = ranked.into_iter().map(|(i, _)| i).collect();
            if shown.is_empty() && holds(&self.user_stems) > 0 {
                let mut used = 0;
                for (i, s) in self.answer.iter().enumerate() {
                    used += CharEstimate.count(&s.text);
                    if i > 0 && used > SHORT_ANSWER_TOKENS {
                        break;
                    }
                    shown.push(i);
                }
            }
            if let Some(last) = self.answer.len().checked_sub(1) {
                if self.answer[last].asks && !shown.contains(&last) {
                    shown.push(last);
                }
            }
            shown.sort_unstable();
            shown
        };
        if shown.is_empty() {
            return self.bare.clone();
        }
        if shown.len() == self.answer.len() {
            return self.whole.clone();
        }
        render(
            &self.head,
            &self.agent_label,
            &self.answer,
            &shown,
            self.source,
        )
    }
}

/// A turn's item: its head and, after the agent's label, the answer's
/// sentences `shown` (ascending), " … " where some are left out between.
fn render(
    head: &str,
    agent_label: &str,
    answer: &[AnswerSentence],
    shown: &[usize],
    source: Source,
) -> ContextItem {
    let mut text = String::with_capacity(head.len() + 160);
    text.push_str(head);
    if !shown.is_empty() {
        text.push_str(agent_label);
        for (k, &i) in shown.iter().enumerate() {
            if k > 0 {
                text.push_str(if i == shown[k - 1] + 1 { " " } else { " … " });
            }
            text.push_str(&answer[i].text);
        }
    }
    ContextItem {
        tier: Tier::Retrieved,
        source,
        role: crate::context::Role::System,
        tokens: CharEstimate.count(&text),
        text: text.into(),
    }
}

/// Who said what, as a retrieved turn names them.
#[derive(Debug, Clone, Copy)]
pub struct Speakers<'a> {
    pub user_id: &'a str,
    pub agent_id: &'a str,
    /// The agent's time zone: relative dates are resolved against the
    /// day a turn was said there.
    pub zone: chrono_tz::Tz,
}

/// The stored turns `turns` (by sequence number) of `session_id`, around
/// a hit, prepared as retrieved items.
pub fn prepare_around(
    who: Speakers<'_>,
    session_id: Uuid,
    turns: Vec<(u32, ConversationTurn)>,
) -> Arc<[PreparedTurn]> {
    turns
        .into_iter()
        .map(|(seq, t)| prepare(who, TurnRef { session_id, seq }, &t))
        .collect()
}

/// One stored turn, prepared.
fn prepare(who: Speakers<'_>, r: TurnRef, t: &ConversationTurn) -> PreparedTurn {
    let at = t.timestamp;
    let day = at.with_timezone(&who.zone).date_naive();
    let said = crate::text::resolve_relative_dates(t.user_message.trim(), day);
    // (written out: a format string is parsed again at every call)
    let head = format!(
        "- [{:04}-{:02}-{:02} {:02}:{:02}] {}: {}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        who.user_id,
        said
    );
    let answer_text = t.agent_response.trim();
    let answer: Box<[AnswerSentence]> = if answer_text.is_empty() {
        Box::default()
    } else {
        // (resolved whole: a sentence without a verb takes the tense of
        // the answer)
        crate::text::sentences(&crate::text::resolve_relative_dates(answer_text, day))
            .into_iter()
            .map(|s| {
                let text = s.trim().to_string();
                AnswerSentence {
                    stems: stem_keys(&text).into(),
                    asks: text.trim_end().ends_with('?'),
                    own: crate::text::of_itself(&text),
                    text: text.into(),
                }
            })
            .collect()
    };
    let source = Source::StoredTurn {
        session: r.session_id,
        seq: r.seq,
    };
    let agent_label = format!("\n  {}: ", who.agent_id);
    // The user's words stemmed once, sentence by sentence: all of them,
    // and those of the sentences telling of the user's own life apart.
    let (mut own, mut rest) = (Vec::new(), Vec::new());
    for s in crate::text::sentences(&t.user_message) {
        let into = if crate::text::of_itself(&s) {
            &mut own
        } else {
            &mut rest
        };
        into.extend(stem_keys(&s));
    }
    let sorted = |mut keys: Vec<u64>| -> Box<[u64]> {
        keys.sort_unstable();
        keys.dedup();
        keys.into()
    };
    let user_stems = sorted([own.as_slice(), rest.as_slice()].concat());
    let all: Vec<usize> = (0..answer.len()).collect();
    PreparedTurn {
        whole: render(&head, &agent_label, &answer, &all, source),
        bare: render(&head, &agent_label, &answer, &[], source),
        seq: r.seq,
        at,
        key: (!t.user_message.trim().is_empty()).then(|| exchange_key(t)),
        asks: asks_question(&t.agent_response),
        said: crate::text::sentences(&t.user_message)
            .iter()
            .map(|s| crate::reflect::extractive::said_key(s))
            .collect(),
        source,
        head: head.into(),
        agent_label: agent_label.into(),
        answer_tokens: CharEstimate.count(answer_text),
        user_stems,
        user_own: sorted(own),
        user_rest: sorted(rest),
        answer,
    }
}

/// What a turn's exchange says, as a key: its words (the user's, then
/// the agent's) lowercased, spacing ignored, hashed: two different
/// exchanges share a key with odds of one in 2^64.
fn exchange_key(t: &ConversationTurn) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static WORDS: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    // The words in one buffer (kept per thread), hashed once with a fast
    // hash: a hash per character, or a new buffer per turn, costs more
    // than the rest of a retrieved turn.
    WORDS.with(|cell| {
        let mut words = cell.borrow_mut();
        words.clear();
        for w in t
            .user_message
            .split_whitespace()
            .chain(t.agent_response.split_whitespace())
        {
            if w.is_ascii() {
                let from = words.len();
                words.push_str(w);
                words[from..].make_ascii_lowercase();
            } else {
                words.extend(w.chars().flat_map(char::to_lowercase));
            }
            words.push(' ');
        }
        let mut h = foldhash::quality::FixedState::with_seed(0x7265_6361_6c6c).build_hasher();
        h.write(words.as_bytes());
        h.finish()
    })
}

/// Whether the agent's answer asks the user something (what the user's
/// next turn then answers).
fn asks_question(agent_response: &str) -> bool {
    agent_response.contains('?')
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn turn(at: DateTime<Utc>, user: &str, agent: &str) -> ConversationTurn {
        ConversationTurn {
            user_message: user.into(),
            agent_response: agent.into(),
            timestamp: at,
        }
    }

    fn prepared(zone: chrono_tz::Tz, t: &ConversationTurn) -> PreparedTurn {
        let who = Speakers {
            user_id: "hanna",
            agent_id: "ruth",
            zone,
        };
        let r = TurnRef {
            session_id: Uuid::nil(),
            seq: 3,
        };
        prepare(who, r, t)
    }

    #[test]
    fn a_long_answer_shows_what_holds_the_words_asked_and_its_last_question() {
        let at = Utc.with_ymd_and_hms(2024, 3, 12, 18, 0, 0).unwrap();
        let t = turn(
            at,
            "How was your week?",
            "Busy, the shop's been mad since the new sign went up. \
             Oh, and I finally got the greenhouse door fixed, it had been hanging off for a month. \
             My neighbour lent me his drill for the hinges. \
             The tomatoes are in, too, I put them in on Sunday. \
             Anyway, did you ever hear back about the flat?",
        );
        let p = prepared(chrono_tz::Tz::UTC, &t);
        let text = p
            .item(&stem_keys("what did she fix in the greenhouse"), false)
            .text;
        assert!(text.starts_with("- [2024-03-12 18:00] hanna: How was your week?"));
        assert!(text.contains("\n  ruth: Oh, and I finally got the greenhouse door fixed"));
        assert!(text.contains("hear back about the flat?"), "{text}");
        assert!(!text.contains("new sign"), "{text}");
        assert!(!text.contains("drill"), "{text}");
        // other words asked, other sentences
        let text = p.item(&stem_keys("who lent her a drill"), false).text;
        assert!(
            text.contains("lent me his drill") && !text.contains("greenhouse"),
            "{text}"
        );
        // the answer's sentences, each with the date its time words mean
        let text = p.item(&stem_keys("tomatoes"), false).text;
        assert!(text.contains("on Sunday (Sunday 10 March 2024)"), "{text}");
    }

    #[test]
    fn a_short_answer_is_shown_whole_and_dates_are_the_agents_local_days() {
        // 23:30 in London on the 11th is already the 12th in Warsaw
        let at = Utc.with_ymd_and_hms(2024, 3, 11, 23, 30, 0).unwrap();
        let t = turn(at, "I sailed yesterday!", "Lovely. Which boat?");
        let text = prepared(chrono_tz::Europe::Warsaw, &t)
            .item(&[], false)
            .text;
        assert!(
            text.contains("I sailed yesterday (Monday 11 March 2024)!"),
            "{text}"
        );
        assert!(text.ends_with("\n  ruth: Lovely. Which boat?"), "{text}");
        let text = prepared(chrono_tz::Tz::UTC, &t).item(&[], false).text;
        assert!(text.contains("yesterday (Sunday 10 March 2024)"), "{text}");
    }

    #[test]
    fn an_empty_answer_shows_the_user_alone() {
        let at = Utc.with_ymd_and_hms(2024, 3, 11, 9, 0, 0).unwrap();
        let text = prepared(chrono_tz::Tz::UTC, &turn(at, "Hello?", "  "))
            .item(&[], false)
            .text;
        assert_eq!(&*text, "- [2024-03-11 09:00] hanna: Hello?");
    }
}
