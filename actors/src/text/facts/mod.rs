//! Facts stated in the first person, found by rules: the offline
//! reflector's fact extraction.
//!
//! A sentence is cut into word tokens (contractions expanded, curly
//! apostrophes straightened, punctuation kept as tokens of its own) and
//! matched against `RULES` (in [`rules`]), a table of patterns. Each rule
//! names its category, the one-valued subject it speaks of if any (`home`,
//! `employer`, `partner`, `sister:leela:role`) and how the fact reads, in
//! the third person about the user ("Has a dog named Biscuit").
//!
//! Precision comes first: a wrong fact is worse than a missed one. So a
//! pattern starts where a clause starts (not after "if" or "I think"),
//! questions yield nothing but explicit requests to remember, values are
//! cut at the end of their clause and refused when they are long, start
//! with a negation or a pronoun, or speak to the agent ("you").
//!
//! The parts, in the order a sentence goes through them:
//!
//! - [`tokens`]: cutting a sentence into tokens and rendering them back.
//! - [`pattern`]: the pattern language and its compiling.
//! - [`rules`]: the rule table, compiled once.
//! - [`checks`]: what a rule checks of the values it captured.
//! - [`matching`]: matching a pattern against a sentence's tokens, slot by
//!   slot ([`dates`] reads a date's).
//! - [`phrasing`]: how a fact found reads.
//! - [`names`]: the user's relations and pets spoken of, and the names
//!   given of them.
//! - the word tables the above read are the lexicon's
//!   ([`crate::lang::fact_words`]).
//!
//! This file runs the rules over a text, sentence by sentence.

mod checks;
mod dates;
mod matching;
mod names;
mod pattern;
mod phrasing;
mod rules;
mod tokens;

use std::ops::Range;

use self::matching::{clause_start, match_at};
use self::names::Referent;
use self::pattern::capture;
use self::phrasing::{fill, fix_articles, upper_first};
use self::rules::COMPILED;
use self::tokens::{tokenize, Tok};
use super::sentences;
use crate::lang::fact_words::{ELIDED_PAST, NOT_DOING, QUESTION_STARTS, SKIPPABLE};
use crate::model::{normalize_fact, FactCandidate};

pub(super) use self::dates::is_day_number;
pub use self::names::{answered_name, named, pronoun_named};
pub use crate::lang::fact_words::is_relation_word;
pub(crate) use crate::lang::fact_words::OCCUPATIONS;

fn is_question(toks: &[Tok], sentence: &str) -> bool {
    sentence.trim_end().ends_with('?')
        || toks
            .first()
            .is_some_and(|t| QUESTION_STARTS.contains(&t.lower.as_str()))
}

/// The facts of one sentence, in the order they were said. `nested` is
/// set for what a request to remember asked for.
fn sentence_facts(sentence: &str, nested: bool, may_elide: bool) -> Vec<FactCandidate> {
    let toks = tokenize(sentence);
    let question = !nested && is_question(&toks, sentence);
    let mut taken: Vec<Range<usize>> = Vec::new();
    let mut found: Vec<(usize, FactCandidate)> = Vec::new();
    let mut words: std::collections::HashSet<&str> =
        toks.iter().map(|t| t.lower.as_str()).collect();
    let elided = if may_elide && !nested {
        elided_subject(&toks)
    } else {
        None
    };
    if let Some(v) = &elided {
        words.extend(v.iter().take(2).map(|t| t.lower.as_str()));
    }
    let tries = toks.len() + usize::from(elided.is_some());
    // Where a clause starts, worked out once for every rule.
    let starts: Vec<bool> = (0..toks.len()).map(|i| clause_start(&toks, i)).collect();
    for compiled in COMPILED.iter() {
        let rule = &compiled.rule;
        if question && !rule.in_questions {
            continue;
        }
        if compiled
            .anchor
            .as_ref()
            .is_some_and(|a| !a.iter().any(|w| words.contains(w)))
        {
            continue;
        }
        if rule.unless.iter().any(|w| words.contains(w)) {
            continue;
        }
        for attempt in 0..tries {
            // The sentence's own words from each start, then, for one
            // opening without its subject, the same words after it.
            let (start, view, at, prefix) = match &elided {
                Some(v) if attempt == toks.len() => {
                    if rule.anywhere {
                        continue;
                    }
                    (0, v.as_slice(), 0, v.len() - toks.len())
                }
                _ => {
                    if !rule.anywhere && starts.get(attempt) != Some(&true) {
                        continue;
                    }
                    (attempt, toks.as_slice(), attempt, 0)
                }
            };
            if taken.iter().any(|r| r.contains(&start)) {
                continue;
            }
            let Some((end, caps)) = match_at(&compiled.els, view, at, true, rule.max_value) else {
                continue;
            };
            // A match of the supplied subject alone says nothing.
            if end <= at + prefix {
                continue;
            }
            let end = start + (end - at - prefix);
            if taken.iter().any(|r| r.start < end && start < r.end) {
                continue;
            }
            if rule.check.is_some_and(|check| !check(&caps)) {
                continue;
            }
            // "Can't {word} …" reads the verb the user said.
            let mut caps = caps;
            if rule.reads.contains("{word}") && capture(&caps, "word").is_none() {
                let verb = toks[start..end]
                    .iter()
                    .find(|t| matches!(t.lower.as_str(), "eat" | "have" | "drink"))
                    .map_or("eat".to_string(), |t| t.lower.clone());
                caps.push(("word", verb));
            }
            taken.push(start..end);
            // "Can you remember that my birthday is May 2nd?": the fact
            // itself, read like any other, when a rule knows it.
            if let Some(raw) = capture(&caps, "raw").filter(|_| !nested) {
                let inner = sentence_facts(raw, true, false);
                if !inner.is_empty() {
                    found.extend(inner.into_iter().map(|f| (start, f)));
                    continue;
                }
            }
            let content = upper_first(&fix_articles(&fill(rule.reads, &caps, false)));
            let subject = rule.subject.map(|s| fill(s, &caps, true));
            found.push((
                start,
                FactCandidate {
                    category: rule.category,
                    content,
                    subject,
                    speaker: Default::default(),
                },
            ));
        }
    }
    // Stable: what one request held stays in its order.
    found.sort_by_key(|(start, _)| *start);
    found.into_iter().map(|(_, f)| f).collect()
}

/// A sentence that opens with what the speaker did or is doing, its
/// subject left out as people do in speech ("Learning Korean from
/// videos", "Moved to Leeds in May"): its words after the subject
/// ("I", or "I am" before a verb in -ing). Only at the sentence's start:
/// after "and" the subject left out is the previous clause's ("My sister
/// moved to Leeds and started nursing").
fn elided_subject(toks: &[Tok]) -> Option<Vec<Tok>> {
    let first = toks
        .iter()
        .find(|t| !SKIPPABLE.contains(&t.lower.as_str()))?;
    let w = first.lower.as_str();
    // "Moving to Denver would be a nightmare": the -ing word opens the
    // subject when a verb of its own follows in the clause.
    let is_subject = toks
        .iter()
        .skip_while(|t| !std::ptr::eq(*t, first))
        .skip(1)
        .take_while(|t| !t.punct)
        .any(|t| {
            matches!(
                t.lower.as_str(),
                "is" | "was"
                    | "are"
                    | "were"
                    | "would"
                    | "will"
                    | "'s"
                    | "can"
                    | "could"
                    | "might"
                    | "should"
                    | "makes"
                    | "made"
                    | "sounds"
                    | "seems"
                    | "has"
                    | "had"
                    | "takes"
            )
        });
    let prefix: &[(&str, &str)] = if ELIDED_PAST.contains(&w) {
        &[("I", "i")]
    } else if w.len() > 4
        && w.ends_with("ing")
        && !NOT_DOING.contains(&w)
        && !first.punct
        && !is_subject
    {
        &[("I", "i"), ("am", "am")]
    } else {
        return None;
    };
    let mut v: Vec<Tok> = prefix
        .iter()
        .map(|(text, lower)| Tok::word(text, lower, false))
        .collect();
    v.extend(toks.iter().cloned());
    Some(v)
}

/// Facts stated in the first person, in the order they were said,
/// de-duplicated (normalized content).
pub fn facts(user_text: &str) -> Vec<FactCandidate> {
    let mut out: Vec<FactCandidate> = Vec::new();
    for line in user_text.lines() {
        for f in facts_by_sentence(&sentences(line)).into_iter().flatten() {
            let norm = normalize_fact(&f.content);
            if !out.iter().any(|o| normalize_fact(&o.content) == norm) {
                out.push(f);
            }
        }
    }
    out
}

/// The facts of each of a run of sentences said one after another. A
/// sentence without its subject is read as the speaker's only when the one
/// before it was theirs too, or short, or there was none ("My brother's
/// doing great. Moved to Denver in March." is the brother's move).
pub fn facts_by_sentence(sentences: &[String]) -> Vec<Vec<FactCandidate>> {
    facts_by_sentence_after(&[], sentences)
}

/// [`facts_by_sentence`], the user's sentences `before` (their message
/// before) told first: a sentence that opens on "he" or "she" is read as
/// said of the user's own relation or pet spoken of last before it (see
/// [`Referent`]).
pub fn facts_by_sentence_after(before: &[String], sentences: &[String]) -> Vec<Vec<FactCandidate>> {
    let mut referent = None;
    for s in before {
        referent = Referent::after(referent, &tokenize(s));
    }
    let mut may_elide = true;
    sentences
        .iter()
        .map(|s| {
            let toks = tokenize(s);
            let resolved = referent
                .as_ref()
                .and_then(|r| r.in_place_of_pronoun(s, &toks));
            referent = Referent::after(referent.take(), &toks);
            let found = match resolved
                .map(|r| sentence_facts(&r, false, false))
                .filter(|f| !f.is_empty())
            {
                Some(found) => found,
                None => sentence_facts(s, false, may_elide),
            };
            let toks = tokenize(s);
            let words: Vec<&Tok> = toks.iter().filter(|t| !t.punct).collect();
            may_elide = words.len() <= 3
                || words
                    .first()
                    .is_some_and(|t| matches!(t.lower.as_str(), "i" | "we"))
                || elided_subject(&toks).is_some();
            found
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FactCategory::{self, *};

    fn got(text: &str) -> Vec<(FactCategory, String, Option<String>)> {
        facts(text)
            .into_iter()
            .map(|f| (f.category, f.content, f.subject))
            .collect()
    }

    fn contents(text: &str) -> Vec<String> {
        facts(text).into_iter().map(|f| f.content).collect()
    }

    #[test]
    fn an_occupation_is_read_with_or_without_its_article() {
        for (text, want) in [
            ("I'm a nurse.", "Is a nurse"),
            (
                "I'm a dental hygienist in Truro.",
                "Is a dental hygienist in Truro",
            ),
            (
                "So I'm a driving instructor, I don't think I've said.",
                "Is a driving instructor",
            ),
            (
                "I will be kitchen supervisor.",
                "Will be kitchen supervisor",
            ),
            (
                "I'm going to be a practice nurse at Larkfield Surgery, five minutes away.",
                "Will be a practice nurse at Larkfield Surgery",
            ),
        ] {
            assert_eq!(
                one(text),
                (want.to_string(), Some("role".to_string())),
                "{text:?}"
            );
        }
        assert_eq!(
            one("My son is nurse in Calgary.").0,
            "Son is nurse in Calgary"
        );
        // what one is like, not what one does
        for text in [
            "I'm a terrible teacher.",
            "I'm a big mess today.",
            "I'm a mother of three.",
            "I'm a morning person.",
        ] {
            assert!(
                !got(text).iter().any(|f| f.0 == FactCategory::Occupation),
                "{text:?}: {:?}",
                got(text)
            );
        }
    }

    #[test]
    fn everyday_statements_of_a_family_and_a_working_life() {
        for (text, want) in [
            (
                "Our middle one, Harper, lost a tooth.",
                "Middle child is named Harper",
            ),
            (
                "My oldest one, Liam, is twelve.",
                "Oldest child is named Liam",
            ),
            (
                "My husband is working in Fort McMurray.",
                "Husband works in Fort McMurray",
            ),
            (
                "Harper's birthday is March 3rd.",
                "Harper's birthday is March 3rd",
            ),
            (
                "Harper turns seven on March 3rd.",
                "Harper's birthday is March 3rd",
            ),
            ("I go to Zumba on Tuesdays.", "Goes to Zumba on tuesdays"),
            (
                "I'm taking an online course in bookkeeping.",
                "Is taking an online course in bookkeeping",
            ),
            ("I have high blood pressure.", "Has high blood pressure"),
            ("My doctor is Dr. Patel.", "Has a doctor named Dr Patel"),
            ("I'm working at the hospital now.", "Works at the hospital"),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        // a place that is no workplace, a taking that is no course
        assert!(got("I work in the garden on Sundays.").is_empty());
        assert!(got("I'm taking a break from all that.").is_empty());
    }

    #[test]
    fn a_mine_is_a_pit_after_a_noun() {
        assert_eq!(
            contents("My son is engineer in the nickel mine."),
            ["Son is engineer in the nickel mine"]
        );
    }

    #[test]
    fn a_day_spelled_out_is_a_date() {
        for (text, want) in [
            (
                "My birthday is the twelfth of June.",
                "Birthday is the twelfth of June",
            ),
            (
                "My birthday is on June twelfth.",
                "Birthday is June twelfth",
            ),
            (
                "My birthday is the twenty-first of March.",
                "Birthday is the twenty-first of March",
            ),
            (
                "My birthday is the twenty first of March.",
                "Birthday is the twenty first of March",
            ),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        // an ordinal alone is no date
        assert!(got("My birthday is the first thing I forget.").is_empty());
    }

    #[test]
    fn names_given_after_a_comma_or_as_the_name_of() {
        for (text, want) in [
            (
                "My husband, his name is Ramon, he drives the tour bus.",
                "Husband is named Ramon",
            ),
            ("The name of my husband is Ramon.", "Husband is named Ramon"),
            (
                "The name of my cat is Mingming.",
                "Has a cat named Mingming",
            ),
            ("Our son Declan started school.", "Has a son named Declan"),
            ("Our daughter is called Ava.", "Has a daughter named Ava"),
            (
                "Our youngest, Declan, started grade primary.",
                "Youngest child is named Declan",
            ),
            ("My eldest is called Ava.", "Eldest child is named Ava"),
            ("We have a dog, Pickles.", "Has a dog named Pickles"),
        ] {
            assert_eq!(one(text).0, want, "{text:?}");
        }
        assert_eq!(
            contents("My sister, she is a teacher in Manila."),
            ["Sister is a teacher in Manila"]
        );
    }

    fn one(text: &str) -> (String, Option<String>) {
        let f = facts(text);
        assert_eq!(f.len(), 1, "{text:?} gave {f:?}");
        (f[0].content.clone(), f[0].subject.clone())
    }

    #[test]
    fn the_name_a_fact_gives_is_read_back() {
        for text in [
            "I went hiking with my little brother Tomas on Sunday.",
            "my manager is Beatriz",
            "my dog is called Biscuit",
        ] {
            let (content, _) = one(text);
            assert!(named(&content).is_some(), "{content}");
        }
        assert_eq!(
            named("Has a brother named Tomas"),
            Some(("brother".into(), "Tomas".into()))
        );
        assert_eq!(
            named("Manager is named Beatriz"),
            Some(("manager".into(), "Beatriz".into()))
        );
        assert_eq!(
            named("Has an older sister named Leela"),
            Some(("older sister".into(), "Leela".into()))
        );
        assert_eq!(named("Lives in Denver"), None);
        assert_eq!(named("Has a dog"), None);
    }

    #[test]
    fn names_homes_and_work() {
        assert_eq!(
            got("Hi, my name is Mark and I work at Initech, in sales."),
            [
                (Biographical, "Name: Mark".into(), Some("name".into())),
                (
                    Occupation,
                    "Works at Initech".into(),
                    Some("employer".into())
                ),
            ]
        );
        assert_eq!(
            one("So we just moved to Denver last month."),
            ("Moved to Denver".into(), Some("home".into()))
        );
        assert_eq!(
            one("I live in the Bay Area, near Oakland."),
            ("Lives in the Bay Area".into(), Some("home".into()))
        );
        assert_eq!(
            one("I\u{2019}m a nurse at Mercy Hospital these days."),
            ("Is a nurse at Mercy Hospital".into(), Some("role".into()))
        );
        assert_eq!(
            one("Honestly I lost my job at the mechanical engineering company."),
            (
                "Lost their job at the mechanical engineering company".into(),
                Some("employer".into())
            )
        );
        assert_eq!(
            one("I got laid off from Initech on Friday and I'm a bit lost."),
            ("Was laid off from Initech".into(), Some("employer".into()))
        );
        assert_eq!(
            one("Call me Jo."),
            ("Goes by Jo".into(), Some("nickname".into()))
        );
        assert_eq!(
            one("I work for Bank of America."),
            ("Works at Bank of America".into(), Some("employer".into()))
        );
    }

    #[test]
    fn people_and_their_names() {
        assert_eq!(
            one("My sister Leela is a nurse."),
            (
                "Sister Leela is a nurse".into(),
                Some("sister:leela:role".into())
            )
        );
        assert_eq!(
            one("my manager is Beatriz"),
            ("Manager is named Beatriz".into(), Some("manager".into()))
        );
        assert_eq!(
            one("I told Beatriz, my manager, that I need Friday off."),
            ("Manager is named Beatriz".into(), Some("manager".into()))
        );
        assert_eq!(
            one("We had dinner with my wife Ana's parents."),
            ("Wife is named Ana".into(), Some("partner".into()))
        );
        assert_eq!(
            one("I went hiking with my little brother Tomas on Sunday."),
            ("Has a brother named Tomas".into(), None)
        );
        assert_eq!(
            one("My best friend Priya lives in Leeds."),
            (
                "Best friend Priya lives in Leeds".into(),
                Some("best friend:priya:home".into())
            )
        );
        assert_eq!(
            one("I have two kids."),
            ("Has two kids".into(), Some("kids".into()))
        );
    }

    #[test]
    fn pets_things_and_activities() {
        assert_eq!(
            contents("My dog is called Biscuit. I drive a Corolla."),
            ["Has a dog named Biscuit", "Drives a Corolla"]
        );
        assert_eq!(
            contents("My dog\u{2019}s name is Biscuit"),
            ["Has a dog named Biscuit"]
        );
        assert_eq!(
            contents("I\u{2019}m reading Piranesi right now and I love it."),
            ["Is reading Piranesi"]
        );
        assert_eq!(
            contents("I'm learning Japanese. I signed up for the Chicago marathon!"),
            ["Is learning Japanese", "Signed up for the Chicago marathon"]
        );
        assert_eq!(
            contents("I've been training for my first triathlon."),
            ["Is training for their first triathlon"]
        );
        assert_eq!(
            contents("I recently started running, and I switched to oat milk."),
            ["Started running", "Switched to oat milk"]
        );
        assert_eq!(contents("I swim every morning."), ["Swims every morning"]);
    }

    #[test]
    fn dates_preferences_health_and_plans() {
        assert_eq!(
            one("My birthday is the 14th of August."),
            (
                "Birthday is the 14th of August".into(),
                Some("birthday".into())
            )
        );
        assert_eq!(
            one("our anniversary's on June 3rd"),
            ("Anniversary is June 3rd".into(), Some("anniversary".into()))
        );
        assert_eq!(
            contents("I can't eat gluten. I'm allergic to peanuts and shellfish."),
            ["Can't eat gluten", "Allergic to peanuts and shellfish"]
        );
        assert_eq!(
            one("I'm vegetarian"),
            ("Is vegetarian".into(), Some("diet".into()))
        );
        assert_eq!(
            contents("I love hiking but I hate running in the rain."),
            ["Loves hiking", "Dislikes running in the rain"]
        );
        // a feeling about someone, and a way of saying something, are no
        // tastes
        for text in [
            "I hum it in the shower. I hate myself.",
            "He's a dentist now, and I like to think she inspired him.",
            "I hate to say it, but he was right.",
            // a verb with a particle or a place after it
            "My knee's bad, I can't stand up for more than an hour.",
            "Honestly I cannot stand still at gigs.",
            "I can't stand out there in the cold all day.",
            "I can't stand around waiting for the bus.",
        ] {
            assert!(
                !contents(text)
                    .iter()
                    .any(|c| c.starts_with("Likes") || c.starts_with("Dislikes")),
                "{text}"
            );
        }
        assert_eq!(contents("I like to swim."), ["Likes to swim"]);
        assert_eq!(
            one("My favourite band is Radiohead."),
            (
                "Favorite band is Radiohead".into(),
                Some("favorite:band".into())
            )
        );
        assert_eq!(
            contents("I'm planning to visit my grandmother in Lisbon."),
            ["Plans to visit their grandmother in Lisbon"]
        );
        assert_eq!(
            contents("I want to run a half marathon next spring."),
            ["Wants to run a half marathon next spring"]
        );
    }

    #[test]
    fn requests_to_remember_keep_the_users_words() {
        assert_eq!(
            got("Please remember that my interview is on Friday."),
            [(Other, "My interview is on Friday".into(), None)]
        );
        assert_eq!(
            contents("Can you remember that my birthday is May 2nd?"),
            ["Birthday is May 2nd"]
        );
    }

    #[test]
    fn negations_questions_and_small_talk_give_nothing() {
        for text in [
            "my dog is not happy",
            "Is my name on the list?",
            "is my name on the list",
            "Do you know where I live?",
            "I don't work at Initech",
            "I'm not allergic to anything.",
            "If my name is on the list, call me.",
            "I think I'm allergic to cats",
            "I love it when you say that.",
            "I want to ask you something.",
            "I'm going to be honest.",
            "I'm learning a lot from this.",
            "I watched a documentary about octopuses.",
            "Anyway, firemy name is not a thing",
            "my name is",
            "I play with my kids after school.",
            "I drive to work.",
            "I like that.",
            "Sorry, my friend.",
            "I'm going to the store.",
            "My mom is Korean.",
            "I don't remember that movie.",
            "I was a backend engineer there for six years.",
            "Thanks, see you tomorrow!",
            "If I lived in Paris I'd eat croissants every day.",
            "I wish I had a dog.",
            "My friend thinks I'm allergic to gluten but I'm not.",
            "I never said I work at Google.",
            "I'm going to grab lunch.",
            "My dog is sick today.",
            "I'm reading between the lines here.",
            "I drive myself crazy sometimes.",
            "My boss is Mad about the report.",
            "I'm from the support team.",
            "I prefer not to say.",
            "I moved to the other room.",
            "I'm into it.",
            "What's my name again?",
            "Do you remember where I work?",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

    #[test]
    fn relatives_pets_and_milestones_without_a_name() {
        assert_eq!(
            contents(
                "Our cat's name is Pickle. My mom lives in Florida. I got engaged last weekend! \
                 I've been a pharmacist for about ten years now. I'm terrified of spiders."
            ),
            [
                "Has a cat named Pickle",
                "Mom lives in Florida",
                "Got engaged",
                "Has been a pharmacist for about ten years",
                "Is afraid of spiders"
            ]
        );
        assert_eq!(
            one("I don't live in Austin anymore."),
            ("No longer lives in Austin".into(), Some("home".into()))
        );
    }

    #[test]
    fn facts_said_in_passing_in_a_sentence_about_something_else() {
        for (text, want) in [
            (
                "It was thirty-one below this morning here in Duluth.",
                ("Lives in Duluth", Some("home")),
            ),
            (
                "Rusty, our beagle, got out the back gate again.",
                ("Has a beagle (dog) named Rusty", None),
            ),
            (
                "Mochi, my rabbit, chewed through my charger.",
                ("Has a rabbit named Mochi", None),
            ),
            (
                "I was a civil engineer for thirty-four years, mostly bridges.",
                ("Was a civil engineer for thirty-four years", None),
            ),
            (
                "I've been vegetarian since I was fifteen, so pizza night is a negotiation.",
                ("Is vegetarian", Some("diet")),
            ),
            ("I've gone fully vegan now.", ("Is vegan", Some("diet"))),
            (
                "I signed up for a half marathon in Fort Worth at the end of March.",
                (
                    "Signed up for a half marathon in Fort Worth at the end of March",
                    None,
                ),
            ),
            ("I bought an e-bike!", ("Bought an e-bike", None)),
            (
                "Traded in the old car for a Kia Niro.",
                ("Traded their old car for a Kia Niro", Some("car")),
            ),
            (
                "Shellfish and I don't get along.",
                ("Doesn't get along with shellfish", None),
            ),
            (
                "Ran into an old colleague from MnDOT at the hardware store.",
                ("Has a former colleague from MnDOT", None),
            ),
            (
                "I'm joining Quokka, a small startup doing payments.",
                ("Is joining Quokka", Some("employer")),
            ),
            (
                "I used to work for Boeing.",
                ("Used to work at Boeing", None),
            ),
        ] {
            let (content, subject) = one(text);
            assert_eq!((content.as_str(), subject.as_deref()), want, "{text}");
        }
        // Away from home, "here in" is not where one lives; a role that
        // points elsewhere, or a time that is no span, is no past job.
        for text in [
            "It's so sunny here in Lisbon, the holiday is perfect.",
            "We're staying with friends here in Rome.",
            "I was a mess for weeks after that.",
            "I was a kid for most of it, honestly.",
            "Traded in my lunch for a nap.",
            "I'm joining the Zoom now.",
            "I'm joining Mike and Sarah for dinner.",
            "I'm joining Dad at the clinic.",
            "I was a mess for months after the divorce.",
            "My sister and I don't get on the same flight.",
            "My dad sold his bike and traded the old car for a Tesla.",
            "I'm literally blind without my glasses.",
            "I'm here in Chicago for a wedding.",
            "I don't live here in Ohio anymore.",
            "My brother's doing great. Moved to Denver in March.",
            "Moving to Denver would be a nightmare.",
            "Started raining on the way home.",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

    #[test]
    fn a_sentence_without_its_subject_is_the_speakers() {
        assert_eq!(
            contents("Learning Korean from YouTube videos, slowly."),
            ["Is learning Korean from YouTube videos"]
        );
        assert_eq!(
            one("Just moved to Denver last month!"),
            ("Moved to Denver".into(), Some("home".into()))
        );
        assert_eq!(
            contents("Quit my job at Initech!"),
            ["Quit their job at Initech"]
        );
        // The subject left out after "and" is the clause's before it.
        for text in [
            "My sister moved to Leeds and started nursing.",
            "Raining again, ugh.",
            "Going to grab lunch.",
            "Got it, thanks.",
            "Something came up at work.",
        ] {
            assert!(facts(text).is_empty(), "{text:?} gave {:?}", facts(text));
        }
    }

    #[test]
    fn long_values_are_refused_not_cut() {
        assert!(facts(
            "I love the way the light falls on the river in the evening when the boats come back in"
        )
        .is_empty());
    }

    #[test]
    fn changes_name_the_subject_they_change() {
        for (text, subject) in [
            ("I no longer work at Initech.", "employer"),
            ("I got a new job!", "employer"),
            ("We moved to Denver.", "home"),
            ("I went vegan last year.", "diet"),
            ("I broke up with Sam.", "partner"),
            ("So Colt and I are done, like officially done.", "partner"),
            ("Sam and I split up in March.", "partner"),
        ] {
            assert_eq!(one(text).1.as_deref(), Some(subject), "{text}");
        }
    }

    #[test]
    fn contractions_without_apostrophes_and_short_forms_read_as_written_out() {
        for (marked, unmarked) in [
            ("I'm allergic to peanuts.", "im allergic to peanuts."),
            (
                "I've got a dog called Biscuit.",
                "ive got a dog called Biscuit.",
            ),
            ("I don't eat meat any more.", "i dont eat meat any more."),
            (
                "I'm lactose intolerant and I know it.",
                "im lactose intolerant and i KNOW it.",
            ),
            ("My boyfriend Sam is a chef.", "my bf Sam is a chef."),
            (
                "My birthday is on the 14th of August.",
                "my bday is on the 14th of august.",
            ),
            ("I'm reading Dune.", "Im reading Dune."),
        ] {
            let contents = |s: &str| -> Vec<String> {
                facts(s).iter().map(|f| f.content.to_lowercase()).collect()
            };
            let want = contents(marked);
            assert!(!want.is_empty(), "{marked:?} states a fact");
            assert_eq!(contents(unmarked), want, "{unmarked:?}");
        }
        // Words of their own stay as they are ("its", "were", "ill").
        let lower = |s: &str| -> Vec<String> { tokenize(s).into_iter().map(|t| t.lower).collect() };
        assert_eq!(
            lower("its cold, we were ill"),
            ["its", "cold", ",", "we", "were", "ill"]
        );
        assert_eq!(
            lower("Im sure shes fine"),
            ["i", "am", "sure", "she", "'s", "fine"]
        );
    }

    #[test]
    fn he_or_she_opening_a_sentence_is_the_users_relation_spoken_of_before() {
        let found = |before: &[&str], said: &str| -> Vec<String> {
            let before: Vec<String> = before.iter().map(|s| s.to_string()).collect();
            facts_by_sentence_after(&before, &sentences(said))
                .into_iter()
                .flatten()
                .map(|f| f.content)
                .collect()
        };
        // from the message before, and from the sentence before
        assert!(found(
            &["sorry um my boyfriend got called out at 2 in the morning"],
            "he's a lineman for the electric company"
        )
        .iter()
        .any(|f| f.starts_with("Boyfriend is a lineman")));
        assert!(found(&[], "My sister rang. She works as a nurse.")
            .iter()
            .any(|f| f.starts_with("Sister is a nurse")));
        // a pronoun of the other sex, someone else spoken of since, or no
        // relation of the user's: no fact of the relation
        for (before, said) in [
            (
                &["my boyfriend got called out"][..],
                "she's a lineman for the electric company",
            ),
            (
                &["my sister rang, and a lady at work came by"][..],
                "she works as a nurse",
            ),
            (
                &["a client of mine called"][..],
                "he's a lineman for the electric company",
            ),
            (
                &["my neighbour's goat ate the gourds"][..],
                "she is a nurse, that goat",
            ),
        ] {
            let f = found(before, said);
            assert!(
                f.iter()
                    .all(|f| !f.contains("lineman") && !f.contains("nurse")),
                "{before:?} {said:?}: {f:?}"
            );
        }
    }

    #[test]
    fn medicines_taken_are_facts_and_everyday_words_are_not() {
        for (said, fact) in [
            (
                "atrial fibrillation, they call it, and I'm on warfarin for it",
                "Takes warfarin",
            ),
            (
                "The new doctor has moved me onto apixaban, twice a day.",
                "Takes apixaban",
            ),
            ("i take metformin every morning", "Takes metformin"),
        ] {
            let found: Vec<String> = facts(said).into_iter().map(|f| f.content).collect();
            assert!(found.iter().any(|f| f == fact), "{said:?}: {found:?}");
        }
        for said in [
            "I'm on nights for the next two weeks.",
            "I'm on holiday for a fortnight.",
            "They moved me to accounts last month.",
            "I take the bus every morning.",
            "I take lunch at noon every day.",
            "I'm on Facebook for work, mostly.",
        ] {
            let found = facts(said);
            assert!(
                found.iter().all(|f| !f.content.starts_with("Takes")),
                "{said:?}: {found:?}"
            );
        }
    }

    #[test]
    fn a_birthday_told_by_the_age_one_turns_on_the_day() {
        for (said, fact) in [
            (
                "fun fact im turning 25 on the 14th of august and i want a cake",
                "Birthday is the 14th of august",
            ),
            ("I turn 40 on March 3rd.", "Birthday is March 3rd"),
            (
                "I shall be eighty on the 30th of March, and the family are plotting.",
                "Birthday is the 30th of March",
            ),
            (
                "my birthday's coming up may 14th and um my mom wants a dinner",
                "Birthday is may 14th",
            ),
            (
                "my birthday is the 2nd of may",
                "Birthday is the 2nd of may",
            ),
            (
                "help. my gf turns 26 on december 3rd and i have zero ideas.",
                "Girlfriend's birthday is december 3rd",
            ),
            (
                "My little sister is turning 9 on the 2nd of May!",
                "Sister's birthday is the 2nd of May",
            ),
            (
                "My husband's birthday is on June 19th.",
                "Husband's birthday is June 19th",
            ),
        ] {
            let found: Vec<String> = facts(said).into_iter().map(|f| f.content).collect();
            assert!(found.iter().any(|f| f == fact), "{said:?}: {found:?}");
        }
        // a number of years, not a day; "may" the verb is no month
        for said in [
            "My son turns 12 next year.",
            "I will be 12 minutes late on the way.",
            "my birthday is may be in june",
        ] {
            let found = facts(said);
            assert!(
                found
                    .iter()
                    .all(|f| !f.content.starts_with("Birthday is may")
                        && f.content != "Birthday is 12"),
                "{said:?}: {found:?}"
            );
        }
    }
}
