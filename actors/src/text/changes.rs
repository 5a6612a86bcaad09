//! Changes of a one-valued part of someone's life (where they live, where
//! they work, what they drive, which club or sport they do, whom they are
//! with), told in a turn, and asked about in a question.
//!
//! "Where do I live now?" rarely shares a word with the turn that answers
//! it ("We got the keys to a little villa in Port Chalmers"), while the
//! older turn it replaced often does ("we've lived in Caversham for
//! years"): ranking by the question's words finds what held before and
//! misses what holds now. So the search index tags each user turn that
//! tells such a change with the subject it changes, and a question about
//! what holds now (or held before) on that subject also looks for the
//! tag: the turns that changed it become candidates, and the recency
//! bonus puts the latest first.
//!
//! Both sides are small word lists, judged on a turn's own words: a
//! subject's nouns ("flat", "lease", "job", "notice", "car", "club")
//! beside a word of change ("moved", "signed", "quit", "sold", "joined").
//! A tag that is wrong costs one candidate's place in a question about
//! that subject, nothing else.

use super::words;

/// Subjects a turn tells and a question asks about, as a set: parts of
/// a life whose value changes, what one does for a living, and (in
/// `text::feelings`) likes and dislikes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Subjects(u8);

impl Subjects {
    pub const NONE: Subjects = Subjects(0);
    /// Where someone lives.
    pub const HOME: Subjects = Subjects(1);
    /// Their job, employer or role.
    pub const WORK: Subjects = Subjects(1 << 1);
    /// What they drive or ride.
    pub const VEHICLE: Subjects = Subjects(1 << 2);
    /// The club, team, class, sport or cause they give their time to.
    pub const PASTIME: Subjects = Subjects(1 << 3);
    /// Whom they are seeing or living with.
    pub const PARTNER: Subjects = Subjects(1 << 4);
    /// Something they love or count their favourite.
    pub const LIKES: Subjects = Subjects(1 << 5);
    /// Something they cannot stand.
    pub const DISLIKES: Subjects = Subjects(1 << 6);
    /// What they do for a living, whether or not it changed.
    pub const OCCUPATION: Subjects = Subjects(1 << 7);

    const ALL: [(Subjects, &'static str); 8] = [
        (Subjects::HOME, "\u{1}home"),
        (Subjects::WORK, "\u{1}work"),
        (Subjects::VEHICLE, "\u{1}vehicle"),
        (Subjects::PASTIME, "\u{1}pastime"),
        (Subjects::PARTNER, "\u{1}partner"),
        (Subjects::LIKES, "\u{1}likes"),
        (Subjects::DISLIKES, "\u{1}dislikes"),
        (Subjects::OCCUPATION, "\u{1}occupation"),
    ];

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, other: Subjects) -> bool {
        self.0 & other.0 == other.0
    }

    /// The index terms of the subjects in the set: words no text yields
    /// (they start with a control character, which no token holds).
    pub fn terms(self) -> impl Iterator<Item = &'static str> {
        Subjects::ALL
            .into_iter()
            .filter(move |(s, _)| self.contains(*s))
            .map(|(_, t)| t)
    }
}

impl std::ops::BitOr for Subjects {
    type Output = Subjects;
    fn bitor(self, rhs: Subjects) -> Subjects {
        Subjects(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Subjects {
    fn bitor_assign(&mut self, rhs: Subjects) {
        self.0 |= rhs.0;
    }
}

/// Words that tell a change on any subject.
#[rustfmt::skip]
const CHANGE: &[&str] = &[
    "new", "moved", "moving", "relocated", "relocating", "sold", "selling", "bought", "buying",
    "got", "getting", "picked", "traded", "swapped", "replaced", "upgraded", "switched",
    "quit", "quitting", "left", "leaving", "resigned", "joined", "joining", "started",
    "starting", "signed", "signing", "handed", "took", "accepted", "hired", "finally",
    "instead", "anymore", "longer", "first", "gave", "scrapped", "totalled", "transferred",
    "start", "starts",
];

/// Words of change that say the subject by themselves.
#[rustfmt::skip]
const HOME_CHANGE: &[&str] = &[
    "moved", "moving", "relocated", "relocating", "move-in", "movers", "flit", "flitted",
    "flitting",
];

#[rustfmt::skip]
const HOME_NOUNS: &[&str] = &[
    "house", "flat", "apartment", "condo", "villa", "cottage", "bungalow", "semi", "townhouse",
    "place", "lease", "keys", "landlord", "mortgage", "neighbourhood", "neighborhood",
    "address", "bedroom", "two-bed", "three-bed", "one-bed", "studio", "rent", "renting",
];

#[rustfmt::skip]
const WORK_NOUNS: &[&str] = &[
    "job", "notice", "employer", "boss", "position", "role", "contract", "hired", "career",
    "apprenticeship", "traineeship", "internship", "promotion", "promoted", "redundancy",
    "redundant", "fired", "laid", "resigned", "retired", "retirement", "shift", "shifts",
    "work", "working", "company", "firm", "interview", "offer", "salary", "payroll",
    "business", "freelance", "self-employed",
];

#[rustfmt::skip]
const VEHICLE_NOUNS: &[&str] = &[
    "car", "van", "truck", "ute", "suv", "hatchback", "wagon", "pickup", "motorbike",
    "motorcycle", "scooter", "moped", "tricycle", "trike", "bike", "e-bike", "ebike",
    "camper", "minivan", "sedan", "drive", "driving",
];

#[rustfmt::skip]
const PASTIME_NOUNS: &[&str] = &[
    "club", "team", "league", "class", "classes", "lessons", "choir", "squad", "crew",
    "sport", "gym", "training", "membership", "volunteer", "volunteering", "volunteers",
];

#[rustfmt::skip]
const PARTNER_NOUNS: &[&str] = &[
    "boyfriend", "girlfriend", "partner", "fiance", "fiancé", "fiancee", "fiancée", "dating",
    "date", "relationship",
];

/// How a partner found or lost is told without the nouns: "I'm seeing
/// someone", "I met somebody", "we broke up", "we're done" (and, in
/// three words, "asked me out", "going out with").
const PARTNER_PAIRS: &[[&str; 2]] = &[
    ["seeing", "someone"],
    ["seeing", "somebody"],
    ["met", "someone"],
    ["met", "somebody"],
    ["broke", "up"],
    ["split", "up"],
    ["are", "done"],
    ["we're", "done"],
    ["dumped", "me"],
];

/// Words that say a dislike by themselves: `text::feelings` reads them
/// by their bit ([`IN_DISLIKE`]), beside the phrases it knows.
#[rustfmt::skip]
const DISLIKE_WORDS: &[&str] = &[
    "hate", "hated", "hates", "detest", "loathe", "loathed", "disgusting", "gross", "vile",
    "revolting", "dislike", "yuck", "ugh", "allergic",
];

/// Words that say a strong liking, read the same way ([`IN_LIKE`]).
#[rustfmt::skip]
const LIKE_WORDS: &[&str] = &[
    "favourite", "favorite", "fave", "obsessed", "adore", "addicted", "addiction", "weakness",
];

#[cfg(test)]
fn changed_in(user_text: &str) -> Subjects {
    let ws: Vec<String> = words(user_text).collect();
    changed_in_words(&ws, lists_of(&ws))
}

/// The word lists the index's tags read, each a bit.
const IN_CHANGE: u16 = 1;
const IN_HOME_CHANGE: u16 = 1 << 1;
const IN_HOME: u16 = 1 << 2;
const IN_WORK: u16 = 1 << 3;
const IN_VEHICLE: u16 = 1 << 4;
const IN_PASTIME: u16 = 1 << 5;
const IN_PARTNER: u16 = 1 << 6;
pub(super) const IN_DISLIKE: u16 = 1 << 7;
pub(super) const IN_LIKE: u16 = 1 << 8;
const IN_OCCUPATION: u16 = 1 << 9;
const IN_FIRST_PERSON: u16 = 1 << 10;

/// Each word of the lists with the bits of the lists it is in: a turn's
/// words are looked up once each, not compared with every list (an index
/// build reads every turn).
static LISTS: std::sync::LazyLock<
    std::collections::HashMap<&'static str, u16, foldhash::fast::FixedState>,
> = std::sync::LazyLock::new(|| {
    let mut m = std::collections::HashMap::default();
    for (list, bit) in [
        (CHANGE, IN_CHANGE),
        (HOME_CHANGE, IN_HOME_CHANGE),
        (HOME_NOUNS, IN_HOME),
        (WORK_NOUNS, IN_WORK),
        (VEHICLE_NOUNS, IN_VEHICLE),
        (PASTIME_NOUNS, IN_PASTIME),
        (PARTNER_NOUNS, IN_PARTNER),
        (DISLIKE_WORDS, IN_DISLIKE),
        (LIKE_WORDS, IN_LIKE),
        (super::facts::OCCUPATIONS, IN_OCCUPATION),
        (&["i", "i'm", "i've", "my", "me"], IN_FIRST_PERSON),
    ] {
        for w in list {
            *m.entry(*w).or_insert(0) |= bit;
        }
    }
    m
});

/// The bits of the lists a turn's words are in.
pub(super) fn lists_of(ws: &[String]) -> u16 {
    ws.iter()
        .fold(0, |a, w| a | LISTS.get(w.as_str()).copied().unwrap_or(0))
}

/// The subjects a user's words tell a change of ("we got the keys to the
/// new flat", "I handed in my notice", "sold the car", "joined a rowing
/// club"), given with the bits of the lists they are in. Questions tell
/// none.
pub(super) fn changed_in_words(ws: &[String], lists: u16) -> Subjects {
    if ws.is_empty() {
        return Subjects::NONE;
    }
    let has = |bit: u16| lists & bit != 0;
    let mut out = Subjects::NONE;
    // "took me on", "first day (week, shift) at": a job started, said
    // without its nouns.
    let took_me_on = ws.windows(3).any(|w| w == ["took", "me", "on"]);
    let first_day = ws
        .windows(2)
        .any(|w| w[0] == "first" && matches!(w[1].as_str(), "day" | "week" | "shift"));
    // "my notice", "two weeks' notice", "handed in notice": a job left.
    let notice = ws.windows(2).any(|w| {
        w[1] == "notice" && matches!(w[0].as_str(), "my" | "weeks" | "weeks'" | "week's" | "in")
    });
    // "signed up for ringette": a pastime taken up, whatever it is.
    let signed_up = ws.windows(2).any(|w| w == ["signed", "up"]);
    // "gone out on my own", "set up on my own": a business of one's own.
    let on_my_own = ws
        .windows(4)
        .any(|w| matches!(w[0].as_str(), "out" | "up") && w[1..] == ["on", "my", "own"]);
    if has(IN_HOME_CHANGE) || (has(IN_HOME) && has(IN_CHANGE)) {
        out |= Subjects::HOME;
    }
    if took_me_on || first_day || on_my_own || notice || (has(IN_WORK) && has(IN_CHANGE)) {
        out |= Subjects::WORK;
    }
    if has(IN_VEHICLE) && has(IN_CHANGE) {
        out |= Subjects::VEHICLE;
    }
    if signed_up || (has(IN_PASTIME) && has(IN_CHANGE)) {
        out |= Subjects::PASTIME;
    }
    if (has(IN_PARTNER) && has(IN_CHANGE))
        || ws
            .windows(2)
            .any(|w| PARTNER_PAIRS.contains(&[&w[0], &w[1]].map(String::as_str)))
        || ws
            .windows(3)
            .any(|w| w == ["asked", "me", "out"] || w == ["going", "out", "with"])
    {
        out |= Subjects::PARTNER;
    }
    out
}

/// Words that ask what holds now, or what held before.
#[rustfmt::skip]
const WHEN: &[&str] = &[
    "now", "currently", "nowadays", "anymore", "still", "latest", "present", "days",
    "before", "previously", "earlier", "used", "old", "former", "originally", "formerly",
];

#[rustfmt::skip]
const HOME_ASKED: &[&str] = &[
    "live", "living", "lives", "home", "house", "flat", "apartment", "based", "address",
    "neighbourhood", "neighborhood", "move", "moved", "reside", "stay", "staying", "place",
];

#[rustfmt::skip]
const WORK_ASKED: &[&str] = &[
    "work", "working", "job", "employer", "company", "boss", "career", "occupation",
    "employed", "firm", "workplace", "profession",
];

#[rustfmt::skip]
const VEHICLE_ASKED: &[&str] = &[
    "drive", "driving", "car", "van", "truck", "ute", "vehicle", "ride", "riding", "around",
    "motorbike", "bike",
];

#[rustfmt::skip]
const PASTIME_ASKED: &[&str] = &[
    "sport", "sports", "play", "playing", "club", "team", "hobby", "exercise", "training",
    "train", "league", "class", "volunteer", "volunteering",
];

#[rustfmt::skip]
const PARTNER_ASKED: &[&str] = &[
    "dating", "seeing", "boyfriend", "girlfriend", "partner", "fiance", "fiancé", "fiancee",
    "fiancée", "relationship",
];

/// The subjects a question asks the current or an earlier value of
/// ("Where do I live now?", "What was I driving before?"): none without a
/// word of time, or about someone else ("Where does my sister live
/// now?").
pub fn asked_about(question: &str) -> Subjects {
    asked_about_words(&words(question).collect::<Vec<_>>())
}

/// [`asked_about`] of a question's [`words`].
pub(super) fn asked_about_words(ws: &[String]) -> Subjects {
    let has = |list: &[&str]| ws.iter().any(|w| list.contains(&w.as_str()));
    if !has(WHEN) || ws.iter().any(|w| w == "my" || w == "our") && !mine(ws) {
        return Subjects::NONE;
    }
    // "do for a living" is work; "where am I living" home.
    let mut out = if ws.windows(2).any(|w| w == ["a", "living"]) {
        Subjects::WORK
    } else {
        Subjects::NONE
    };
    for (list, s) in [
        (HOME_ASKED, Subjects::HOME),
        (WORK_ASKED, Subjects::WORK),
        (VEHICLE_ASKED, Subjects::VEHICLE),
        (PASTIME_ASKED, Subjects::PASTIME),
        (PARTNER_ASKED, Subjects::PARTNER),
    ] {
        if ws.iter().enumerate().any(|(i, w)| {
            list.contains(&w.as_str()) && !(w == "living" && i > 0 && ws[i - 1] == "a")
        }) {
            out |= s;
        }
    }
    out
}

#[cfg(test)]
fn occupation_in(user_text: &str) -> Subjects {
    occupation_in_lists(lists_of(&words(user_text).collect::<Vec<_>>()))
}

/// Whether a user's words name an occupation, speaking of themselves
/// ("I clean teeth all day, dental hygienist, fourteen years"), by the
/// bits of the lists they are in: "What's my profession?" shares no word
/// with it.
pub(super) fn occupation_in_lists(lists: u16) -> Subjects {
    if lists & IN_FIRST_PERSON != 0 && lists & IN_OCCUPATION != 0 {
        Subjects::OCCUPATION
    } else {
        Subjects::NONE
    }
}

/// Whether a question asks what the user does for a living ("What's my
/// profession?", "What's my trade?"), not what someone else does.
pub fn occupation_asked(question: &str) -> Subjects {
    occupation_asked_words(&words(question).collect::<Vec<_>>())
}

/// [`occupation_asked`] of a question's [`words`].
pub(super) fn occupation_asked_words(ws: &[String]) -> Subjects {
    let asks = ws.iter().any(|w| {
        matches!(
            w.as_str(),
            "profession" | "occupation" | "trade" | "career" | "title" | "vocation"
        )
    }) || ws
        .windows(2)
        .any(|w| w == ["a", "living"] || w == ["of", "work"]);
    if asks && mine(ws) {
        Subjects::OCCUPATION
    } else {
        Subjects::NONE
    }
}

/// Whether "my"/"our" in a question speaks of the user's own things ("my
/// job", "our car") or partner, not of someone else ("my daughter").
fn mine(ws: &[String]) -> bool {
    ws.windows(2)
        .filter(|w| w[0] == "my" || w[0] == "our")
        .all(|w| PARTNER_ASKED.contains(&w[1].as_str()) || !super::is_relation_word(&w[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_tagged_with_what_it_changes() {
        let cases = [
            (
                "We got the keys on Friday, a little flat above the bakery.",
                Subjects::HOME,
            ),
            ("We've moved! Two streets from the river.", Subjects::HOME),
            ("I handed in my notice this morning.", Subjects::WORK),
            ("The hospice took me on, nights to start.", Subjects::WORK),
            (
                "First day at the brewery, my arms are dead.",
                Subjects::WORK,
            ),
            (
                "Sold the hatchback and got a motorbike instead.",
                Subjects::VEHICLE,
            ),
            ("I joined a fencing club last week.", Subjects::PASTIME),
            (
                "I've left Gaz, I've gone out on my own, my own little school.",
                Subjects::WORK,
            ),
            ("We've flitted, hen! South side.", Subjects::HOME),
            (
                "Don't judge, I'm kind of seeing someone. She's the lighting tech.",
                Subjects::PARTNER,
            ),
            (
                "So Colt and I are done, like officially done.",
                Subjects::PARTNER,
            ),
            (
                "I give my two weeks' notice already, and I start Monday with the agency.",
                Subjects::WORK,
            ),
            (
                "She's signed up for ringette in the fall.",
                Subjects::PASTIME,
            ),
            ("Reuben finally asked me out!", Subjects::PARTNER),
            (
                "I've started volunteering at the food bank on Tuesdays.",
                Subjects::PASTIME,
            ),
        ];
        for (text, want) in cases {
            assert!(changed_in(text).contains(want), "{text:?}");
        }
        for text in [
            "It rained all day and the bus was late.",
            "My boss asked me to stay late, so we're going out for pizza.",
            "My sister called about the weekend.",
            "What do you think about that?",
        ] {
            assert!(changed_in(text).is_empty(), "{text:?}");
        }
    }

    #[test]
    fn a_question_of_now_or_before_asks_about_its_subject() {
        assert_eq!(asked_about("Where am I living these days?"), Subjects::HOME);
        assert_eq!(asked_about("Who is my employer now?"), Subjects::WORK);
        assert_eq!(
            asked_about("What did I drive before the new one?"),
            Subjects::VEHICLE
        );
        assert_eq!(asked_about("Which club am I in now?"), Subjects::PASTIME);
        assert_eq!(
            asked_about("Who am I dating these days?"),
            Subjects::PARTNER
        );
        // the user's own partner is not "someone else"
        assert_eq!(asked_about("Who is my girlfriend now?"), Subjects::PARTNER);
        // no word of time: the question's own words rank
        assert!(asked_about("Where do I live?").is_empty());
        // someone else's home
        assert!(asked_about("Where does my brother live now?").is_empty());
    }

    #[test]
    fn an_occupation_said_of_oneself_is_tagged_and_asked_for() {
        assert_eq!(
            occupation_in("I clean teeth all day, dental hygienist, fourteen years."),
            Subjects::OCCUPATION
        );
        // someone else's, said without a word of the user's own
        assert!(occupation_in("The nurse was lovely.").is_empty());
        assert_eq!(
            occupation_asked("What's my profession?"),
            Subjects::OCCUPATION
        );
        assert_eq!(
            occupation_asked("What do I do for a living?"),
            Subjects::OCCUPATION
        );
        assert!(occupation_asked("What does my mother do for a living?").is_empty());
        assert!(occupation_asked("Where do I live?").is_empty());
    }

    #[test]
    fn the_terms_are_no_words() {
        let all = Subjects::HOME
            | Subjects::WORK
            | Subjects::VEHICLE
            | Subjects::PASTIME
            | Subjects::PARTNER;
        for t in all.terms() {
            // a token is letters and digits: none starts so
            assert!(t.starts_with('\u{1}'), "{t:?}");
            assert!(crate::lang::tokens(t).all(|w| w != t), "{t:?}");
        }
        assert_eq!(all.terms().count(), 5);
    }
}
