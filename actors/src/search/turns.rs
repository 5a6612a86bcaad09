//! A stored turn as a retrieved item, and what shaping reads of it: made
//! once, when the index takes the turn in, and kept by the index
//! ([`AgentIndex::turns_around`](super::AgentIndex::turns_around)).

use std::sync::Arc;

use chrono::{DateTime, Datelike, Timelike, Utc};
use uuid::Uuid;

use super::TurnRef;
use crate::context::{CharEstimate, ContextItem, Source, Tier, TokenCounter};
use crate::lang::stem_keys;
use crate::model::{ConversationTurn, Speaker};

/// A stored turn prepared as a retrieved item, with what retrieval asks
/// of it. Its text is made once, when the turn is indexed (relative dates
/// resolved, the agent's answer split into sentences with their words'
/// stems); a read only picks which of the answer's sentences to show.
#[derive(Debug)]
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
    /// Its call.
    session: Uuid,
    /// "- [2024-03-12 19:05] user: what the user said" (the head), then
    /// the agent side's answer, sentence by sentence, one after another.
    /// A turn is kept in four allocations (this, `stems`, `answer` and
    /// `said`): the index holds every ended call's turns.
    text: Box<str>,
    head_len: u32,
    /// "\n  agent: ", with the agent side's id (one per index).
    agent_label: Arc<str>,
    answer: Box<[AnswerSentence]>,
    /// The answer's tokens.
    answer_tokens: u32,
    /// The stems of words ([`stem_key`](crate::lang::stem_key)), each part
    /// sorted, once each:
    /// those of the user's sentences that tell of the user's own life
    /// ([`crate::text::of_itself`]) up to `own_end`, of the user's others
    /// up to `user_end`, then each answer sentence's.
    stems: Box<[u64]>,
    own_end: u32,
    user_end: u32,
}

/// A stored turn and those either side of it, prepared, in order.
pub type Around = Arc<[Arc<PreparedTurn>]>;

/// Why a turn is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// A search hit it.
    Hit,
    /// The user's answer to the question the hit's answer ends on: the
    /// two are one statement, and the agent side's reply to it goes on
    /// with what the hit was about ("I've sprained my wrist." "Your
    /// drawing hand?" "No, my left one." "Right, listen. Frozen peas…").
    Answer,
    /// It was said just before or after a hit.
    Beside,
}

/// A sentence of the agent side's answer: where its text and its words'
/// stems end in its turn's.
#[derive(Debug)]
struct AnswerSentence {
    text_end: u32,
    stems_end: u32,
    asks: bool,
    /// It tells of the agent side's own life ([`crate::text::of_itself`]).
    own: bool,
}

/// How much of a turn's answer [`PreparedTurn::item`] shows (a context
/// read takes these from `context.ranking`; [`AnswerLimits::DEFAULT`]
/// holds its defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// An answer of at most this many tokens is one statement: shown whole
    /// whenever its turn is shown.
    pub short_tokens: usize,
    /// The answer of the turn a search hit, of at most this many tokens,
    /// is shown whole: the exchange the words asked were found in is where
    /// the answer most likely is, whichever side said it.
    pub hit_tokens: usize,
    /// The sentences of a longer answer that hold the words asked, shown
    /// at most.
    pub sentences: usize,
}

impl AnswerLimits {
    /// 30 tokens for a short answer, 80 for the hit's, three sentences.
    pub const DEFAULT: AnswerLimits = AnswerLimits {
        short_tokens: 30,
        hit_tokens: 80,
        sentences: 3,
    };
}

impl Default for AnswerLimits {
    fn default() -> Self {
        AnswerLimits::DEFAULT
    }
}

impl PreparedTurn {
    /// Where it is stored.
    pub fn turn(&self) -> TurnRef {
        TurnRef {
            session_id: self.session,
            seq: self.seq,
        }
    }

    fn head(&self) -> &str {
        &self.text[..self.head_len as usize]
    }

    fn user_own(&self) -> &[u64] {
        &self.stems[..self.own_end as usize]
    }

    fn user_rest(&self) -> &[u64] {
        &self.stems[self.own_end as usize..self.user_end as usize]
    }

    /// Answer sentence `i`'s text and its words' stems.
    fn sentence(&self, i: usize) -> (&str, &[u64]) {
        let (text_from, stems_from) = match i.checked_sub(1) {
            Some(p) => (self.answer[p].text_end, self.answer[p].stems_end),
            None => (self.head_len, self.user_end),
        };
        let s = &self.answer[i];
        (
            &self.text[text_from as usize..s.text_end as usize],
            &self.stems[stems_from as usize..s.stems_end as usize],
        )
    }

    /// Where `side`'s words in it hold a word asked (`asked`:
    /// [`stem_keys`] of the query): in sentences telling of its own life,
    /// and in the others.
    pub fn holds(&self, side: Speaker, asked: &[u64]) -> (bool, bool) {
        let any = |stems: &[u64]| stems.iter().any(|k| asked.binary_search(k).is_ok());
        match side {
            Speaker::User => (any(self.user_own()), any(self.user_rest())),
            Speaker::Agent => {
                self.answer
                    .iter()
                    .enumerate()
                    .fold((false, false), |(own, rest), (i, s)| {
                        let held = any(self.sentence(i).1);
                        (own || (held && s.own), rest || (held && !s.own))
                    })
            }
        }
    }

    /// The turn as a retrieved item for a read asking `asked` ([`stem_keys`]
    /// of its query), shown as `shown`: what the user said, and of the
    /// agent side's answer all of it when it is short (or, for the turn a
    /// search hit, not long), else the sentences that hold a word asked
    /// (the most words first, at most `limits.sentences`, in their order) and the
    /// question it ends on, which the user's next turn answers. Where none
    /// of the answer's sentences holds a word asked but the user's words
    /// do, or the turn is the user's answer to the hit's question, the
    /// answer is the reply to them: its opening sentences are shown.
    pub fn item(
        &self,
        asked: &[u64],
        shown_as: Shown,
        limits: AnswerLimits,
        counter: &dyn TokenCounter,
    ) -> ContextItem {
        let limit = if shown_as == Shown::Hit {
            limits.hit_tokens
        } else {
            limits.short_tokens
        };
        let holds = |stems: &[u64]| {
            stems
                .iter()
                .filter(|k| asked.binary_search(k).is_ok())
                .count()
        };
        let shown: Vec<usize> = if self.answer_tokens as usize <= limit {
            (0..self.answer.len()).collect()
        } else {
            let mut ranked: Vec<(usize, usize)> = self
                .answer
                .iter()
                .enumerate()
                .map(|(i, _)| (i, holds(self.sentence(i).1)))
                .filter(|&(_, n)| n > 0)
                .collect();
            ranked.sort_by_key(|&(i, n)| (std::cmp::Reverse(n), i));
            ranked.truncate(limits.sentences);
            let mut shown: Vec<usize> = ranked.into_iter().map(|(i, _)| i).collect();
            let user_holds = holds(self.user_own()) + holds(self.user_rest()) > 0;
            if shown.is_empty() && (user_holds || shown_as == Shown::Answer) {
                let mut used = 0;
                for i in 0..self.answer.len() {
                    used += CharEstimate.count(self.sentence(i).0);
                    if i > 0 && used > limits.short_tokens {
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
        self.render(&shown, counter)
    }

    /// The item: its head and, after the agent's label, the answer's
    /// sentences `shown` (ascending), " … " where some are left out
    /// between.
    fn render(&self, shown: &[usize], counter: &dyn TokenCounter) -> ContextItem {
        let head = self.head();
        let mut text = String::with_capacity(head.len() + 160);
        text.push_str(head);
        if !shown.is_empty() {
            text.push_str(&self.agent_label);
            for (k, &i) in shown.iter().enumerate() {
                if k > 0 {
                    text.push_str(if i == shown[k - 1] + 1 { " " } else { " … " });
                }
                text.push_str(self.sentence(i).0);
            }
        }
        ContextItem {
            tier: Tier::Retrieved,
            source: Source::StoredTurn {
                session: self.session,
                seq: self.seq,
            },
            role: crate::context::Role::System,
            tokens: counter.count(&text),
            text: text.into(),
        }
    }
}

/// Who said what, as a retrieved turn names them.
#[derive(Debug, Clone, Copy)]
pub struct Speakers<'a> {
    pub user_id: &'a str,
    /// "\n  agent: ", with the agent side's id ([`agent_label`]).
    pub agent_label: &'a Arc<str>,
    /// The agent's time zone: relative dates are resolved against the
    /// day a turn was said there.
    pub zone: chrono_tz::Tz,
}

/// What comes before the agent side's words in a retrieved turn.
pub fn agent_label(agent_id: &str) -> Arc<str> {
    format!("\n  {agent_id}: ").into()
}

/// The stored turns `turns` (by sequence number) of `session_id`, around
/// a hit, prepared as retrieved items.
pub fn prepare_around(
    who: Speakers<'_>,
    session_id: Uuid,
    turns: Vec<(u32, ConversationTurn)>,
) -> Around {
    turns
        .into_iter()
        .map(|(seq, t)| Arc::new(prepare(who, TurnRef { session_id, seq }, &t)))
        .collect()
}

/// One stored turn, prepared: what the index keeps of it for reads.
pub fn prepare(who: Speakers<'_>, r: TurnRef, t: &ConversationTurn) -> PreparedTurn {
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
    let mut text = head;
    let head_len = text.len() as u32;
    // The user's words stemmed once, sentence by sentence, those of the
    // sentences telling of the user's own life apart.
    let sorted = |stems: &mut Vec<u64>, from: usize| {
        stems[from..].sort_unstable();
        let mut kept = from;
        for k in from..stems.len() {
            if k == from || stems[k] != stems[kept - 1] {
                stems[kept] = stems[k];
                kept += 1;
            }
        }
        stems.truncate(kept);
    };
    let user_sentences = crate::text::sentences(&t.user_message);
    let (mut own, mut rest) = (Vec::new(), Vec::new());
    for s in &user_sentences {
        let into = if crate::text::of_itself(s) {
            &mut own
        } else {
            &mut rest
        };
        into.extend(stem_keys(s));
    }
    let mut stems = own;
    sorted(&mut stems, 0);
    let own_end = stems.len() as u32;
    stems.extend(rest);
    sorted(&mut stems, own_end as usize);
    let user_end = stems.len() as u32;
    let answer_text = t.agent_response.trim();
    let mut answer = Vec::new();
    if !answer_text.is_empty() {
        // (resolved whole: a sentence without a verb takes the tense of
        // the answer)
        for s in crate::text::sentences(&crate::text::resolve_relative_dates(answer_text, day)) {
            let s = s.trim();
            let from = stems.len();
            stems.extend(stem_keys(s));
            sorted(&mut stems, from);
            text.push_str(s);
            answer.push(AnswerSentence {
                text_end: text.len() as u32,
                stems_end: stems.len() as u32,
                asks: s.ends_with('?'),
                own: crate::text::of_itself(s),
            });
        }
    }
    PreparedTurn {
        seq: r.seq,
        at,
        key: (!t.user_message.trim().is_empty()).then(|| exchange_key(t)),
        asks: asks_question(&t.agent_response),
        said: user_sentences
            .iter()
            .map(|s| crate::reflect::extractive::said_key(s))
            .collect(),
        session: r.session_id,
        text: text.into(),
        head_len,
        agent_label: who.agent_label.clone(),
        answer_tokens: CharEstimate.count(answer_text) as u32,
        stems: stems.into(),
        own_end,
        user_end,
        answer: answer.into(),
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
            agent_label: &agent_label("ruth"),
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
            .item(
                &stem_keys("what did she fix in the greenhouse"),
                Shown::Beside,
                AnswerLimits::DEFAULT,
                &crate::context::CharEstimate,
            )
            .text;
        assert!(text.starts_with("- [2024-03-12 18:00] hanna: How was your week?"));
        assert!(text.contains("\n  ruth: Oh, and I finally got the greenhouse door fixed"));
        assert!(text.contains("hear back about the flat?"), "{text}");
        assert!(!text.contains("new sign"), "{text}");
        assert!(!text.contains("drill"), "{text}");
        // other words asked, other sentences
        let text = p
            .item(
                &stem_keys("who lent her a drill"),
                Shown::Beside,
                AnswerLimits::DEFAULT,
                &crate::context::CharEstimate,
            )
            .text;
        assert!(
            text.contains("lent me his drill") && !text.contains("greenhouse"),
            "{text}"
        );
        // the answer's sentences, each with the date its time words mean
        let text = p
            .item(
                &stem_keys("tomatoes"),
                Shown::Beside,
                AnswerLimits::DEFAULT,
                &CharEstimate,
            )
            .text;
        assert!(text.contains("on Sunday (Sunday 10 March 2024)"), "{text}");
    }

    #[test]
    fn a_short_answer_is_shown_whole_and_dates_are_the_agents_local_days() {
        // 23:30 in London on the 11th is already the 12th in Warsaw
        let at = Utc.with_ymd_and_hms(2024, 3, 11, 23, 30, 0).unwrap();
        let t = turn(at, "I sailed yesterday!", "Lovely. Which boat?");
        let text = prepared(chrono_tz::Europe::Warsaw, &t)
            .item(&[], Shown::Beside, AnswerLimits::DEFAULT, &CharEstimate)
            .text;
        assert!(
            text.contains("I sailed yesterday (Monday 11 March 2024)!"),
            "{text}"
        );
        assert!(text.ends_with("\n  ruth: Lovely. Which boat?"), "{text}");
        let text = prepared(chrono_tz::Tz::UTC, &t)
            .item(&[], Shown::Beside, AnswerLimits::DEFAULT, &CharEstimate)
            .text;
        assert!(text.contains("yesterday (Sunday 10 March 2024)"), "{text}");
    }

    #[test]
    fn the_users_answer_to_the_hits_question_shows_the_reply_that_goes_on() {
        // "My car failed its inspection." "Was it the brakes?" — then:
        let at = Utc.with_ymd_and_hms(2024, 5, 2, 18, 0, 0).unwrap();
        let t = turn(
            at,
            "No, the exhaust, it's rusted right through.",
            "Okay, here's what you do. Ring Hamid at the garage, he'll weld it cheap. \
             Tell him I sent you and he'll knock a bit off, he owes me one, \
             after I sorted his website out for nothing last spring. \
             Anyway, how's the new job going?",
        );
        let p = prepared(chrono_tz::Tz::UTC, &t);
        let asked = stem_keys("what did you tell me to do about the car inspection");
        // as the answer to the hit's question: the reply's opening
        let text = p
            .item(&asked, Shown::Answer, AnswerLimits::DEFAULT, &CharEstimate)
            .text;
        assert!(text.contains("Ring Hamid at the garage"), "{text}");
        assert!(text.contains("how's the new job going?"), "{text}");
        // said beside a hit, none of its words asked: only its question
        let text = p
            .item(&asked, Shown::Beside, AnswerLimits::DEFAULT, &CharEstimate)
            .text;
        assert!(!text.contains("Hamid"), "{text}");
        assert!(text.contains("how's the new job going?"), "{text}");
    }

    #[test]
    fn an_empty_answer_shows_the_user_alone() {
        let at = Utc.with_ymd_and_hms(2024, 3, 11, 9, 0, 0).unwrap();
        let text = prepared(chrono_tz::Tz::UTC, &turn(at, "Hello?", "  "))
            .item(&[], Shown::Beside, AnswerLimits::DEFAULT, &CharEstimate)
            .text;
        assert_eq!(&*text, "- [2024-03-11 09:00] hanna: Hello?");
    }
}
