//! The rule table: each rule's pattern, the category of what it finds,
//! the one-valued subject it speaks of if any, how the fact reads and
//! the checks that refuse a match; and the patterns compiled once.

use std::sync::LazyLock;

use super::checks::{
    bare, capitalized_value, course, duration, edible, effort, employer, liked, medicine,
    not_a_person, occupation, past_role, plan, played, standalone_role, vehicle, workplace,
};
use super::pattern::{compile, Captures, El};
use crate::lang::fact_words::AWAY;
use crate::model::FactCategory::{self, *};

/// A rule: where its pattern may start, what it finds and how it reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rule {
    pub(super) pattern: &'static str,
    pub(super) category: FactCategory,
    /// The one-valued subject, with `{slot}` placeholders (lower-cased).
    pub(super) subject: Option<&'static str>,
    /// How the fact reads, with `{slot}` placeholders.
    pub(super) reads: &'static str,
    /// Matches anywhere in a sentence, not only where a clause starts.
    pub(super) anywhere: bool,
    /// Tried in questions too (requests to remember).
    pub(super) in_questions: bool,
    /// Refuses a match on its captured value.
    pub(super) check: Option<fn(&Captures) -> bool>,
    /// Refuses a sentence holding any of these words.
    pub(super) unless: &'static [&'static str],
    /// The longest clause value, in tokens.
    pub(super) max_value: usize,
}

/// The longest clause value most rules take: longer ones are rarely
/// crisp facts.
const MAX_VALUE: usize = 10;

const fn rule(pattern: &'static str, category: FactCategory, reads: &'static str) -> Rule {
    Rule {
        pattern,
        category,
        subject: None,
        reads,
        anywhere: false,
        in_questions: false,
        check: None,
        unless: &[],
        max_value: MAX_VALUE,
    }
}

impl Rule {
    const fn about(mut self, subject: &'static str) -> Rule {
        self.subject = Some(subject);
        self
    }
    const fn anywhere(mut self) -> Rule {
        self.anywhere = true;
        self
    }
    const fn in_questions(mut self) -> Rule {
        self.in_questions = true;
        self
    }
    const fn check(mut self, f: fn(&Captures) -> bool) -> Rule {
        self.check = Some(f);
        self
    }
    const fn unless(mut self, words: &'static [&'static str]) -> Rule {
        self.unless = words;
        self
    }
    /// Values up to `n` tokens: a noun phrase that naturally carries a
    /// place and a time ("a half marathon in Fort Worth at the end of March").
    const fn longer(mut self, n: usize) -> Rule {
        self.max_value = n;
        self
    }
}

/// The rules, most specific first: a match takes its words, and a later
/// rule overlapping them is not tried there.
const RULES: &[Rule] = &[
    // --- names
    rule("my name is|'s {name}", Biographical, "Name: {name}").about("name"),
    rule("call me {name} $", Biographical, "Goes by {name}").about("nickname"),
    rule("you can call me {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("i go by {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("everyone|people|friends call me {name}", Biographical, "Goes by {name}").about("nickname"),
    rule("my friends call me {name}", Biographical, "Goes by {name}").about("nickname"),
    // --- home and origins
    rule("i|we live in {place}", Biographical, "Lives in {place}").about("home"),
    rule("i am|are living in {place}", Biographical, "Lives in {place}").about("home"),
    rule("we are living in {place}", Biographical, "Lives in {place}").about("home"),
    rule("i|we moved|relocated to {place}", Biographical, "Moved to {place}").about("home"),
    rule("i|we have moved to {place}", Biographical, "Moved to {place}").about("home"),
    rule(
        "i|we bought a|an new? {word:house/home/condo/apartment/flat/place} in {place}",
        Biographical,
        "Bought a {word} in {place}",
    )
    .about("home"),
    rule("i no longer live in {place}", Biographical, "No longer lives in {place}").about("home"),
    rule("i do not live in {place} anymore", Biographical, "No longer lives in {place}")
        .about("home"),
    rule("i am moving to {place}", Goal, "Is moving to {place}"),
    rule("we are moving to {place}", Goal, "Is moving to {place}"),
    // "It's freezing here in Duluth": said in passing, where one is; a
    // trip or a visit in the sentence says it is not home.
    rule("here in {place}", Biographical, "Lives in {place}")
        .about("home")
        .anywhere()
        .unless(AWAY),
    rule("i am from {place}", Biographical, "Is from {place}").about("hometown"),
    rule("i grew up in {place}", Biographical, "Grew up in {place}"),
    rule("i was born in {year}", Biographical, "Was born in {year}").about("birth_year"),
    rule("i was born in {place}", Biographical, "Was born in {place}").about("birthplace"),
    rule("i was born on {date}", Biographical, "Was born on {date}").about("birthday"),
    rule("i speak {v}", Biographical, "Speaks {v}").check(capitalized_value),
    // --- dates and age
    rule("my birthday is|'s on? {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("my birthday is|'s in {date}", Biographical, "Birthday is in {date}").about("birthday"),
    // "I'm turning 25 on the 14th of August": the day is the birthday.
    rule("i am turning {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("i turn {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("i will|shall be {num} on {date}", Biographical, "Birthday is {date}").about("birthday"),
    rule("my birthday is|'s coming up on? {date}", Biographical, "Birthday is {date}")
        .about("birthday"),
    // (A relation one may have several of names no one subject: no
    // subject for any, a birthday does not change.)
    rule("my ~adj {rel} 's birthday is|'s on? {date}", Relationship, "{rel}'s birthday is {date}"),
    rule("my ~adj {rel} turns {num} on {date}", Relationship, "{rel}'s birthday is {date}"),
    rule("{name} 's birthday is|'s on? {date}", Relationship, "{name}'s birthday is {date}"),
    rule("{name} turns {num} on {date}", Relationship, "{name}'s birthday is {date}"),
    rule("my ~adj {rel} is turning {num} on {date}", Relationship, "{rel}'s birthday is {date}"),
    rule(
        "our|my wedding? anniversary is|'s on? {date}",
        Relationship,
        "Anniversary is {date}",
    )
    .about("anniversary"),
    rule("i am {num} years? old?", Biographical, "Is {num} years old").about("age"),
    rule("i just? turned {num} $", Biographical, "Is {num} years old").about("age"),
    // --- work
    rule("i work at|for {org}", Occupation, "Works at {org}").about("employer"),
    rule("i am working at|for {org}", Occupation, "Works at {org}").about("employer"),
    // "I'm working at the hospital now": a workplace no capital names
    rule("i work|am working at|in the {v}", Occupation, "Works at the {v}")
        .about("employer")
        .check(workplace),
    rule("i am employed at|by {org}", Occupation, "Works at {org}").about("employer"),
    rule("i work as {role}", Occupation, "Works as {role}").about("role"),
    rule("i have been {role} for {v}", Occupation, "Has been {role} for {v}").about("role"),
    rule("i am working as {role}", Occupation, "Works as {role}").about("role"),
    rule("i was {role} for {v}", Occupation, "Was {role} for {v}")
        .check(past_role),
    rule("i used to be {role} $", Occupation, "Used to be {role}").check(standalone_role),
    rule("i used to work at|for {org}", Occupation, "Used to work at {org}"),
    rule("i worked at|for {org} for {v}", Occupation, "Worked at {org} for {v}").check(duration),
    rule("i retired as {role}", Occupation, "Retired as {role}").check(standalone_role),
    rule(
        "a|an|my old|former {word:colleague/coworker/co-worker/boss/manager} from {org}",
        Occupation,
        "Has a former {word} from {org}",
    )
    .anywhere(),
    rule("i am {role} at|for {org}", Occupation, "Is {role} at {org}").about("role"),
    rule("i am going to be {role} at|for {org}", Occupation, "Will be {role} at {org}")
        .about("role")
        .check(occupation),
    rule("i will be {role} at|for {org}", Occupation, "Will be {role} at {org}")
        .about("role")
        .check(occupation),
    rule("i am going to be {role} $", Occupation, "Will be {role}")
        .about("role")
        .check(occupation),
    rule("i will be {role} $", Occupation, "Will be {role}")
        .about("role")
        .check(occupation),
    rule("i am {role} $", Occupation, "Is {role}")
        .about("role")
        .check(occupation),
    rule(
        "i got|landed|accepted a|the new? job|position|offer at|with|from {org}",
        Occupation,
        "Got a job at {org}",
    )
    .about("employer"),
    rule("i am joining {org} $", Occupation, "Is joining {org}")
        .about("employer")
        .check(employer),
    rule("i will be joining {org} $", Occupation, "Is joining {org}")
        .about("employer")
        .check(employer),
    rule("i got hired at|by {org}", Occupation, "Got a job at {org}").about("employer"),
    rule("i was hired at|by {org}", Occupation, "Got a job at {org}").about("employer"),
    rule("i started a|my new? job at|with {org}", Occupation, "Got a job at {org}")
        .about("employer"),
    rule("i am? start|starting at {org}", Occupation, "Is starting at {org}").about("employer"),
    rule("i got a new job $", Occupation, "Got a new job").about("employer"),
    rule("i lost my job at|with {v}", Occupation, "Lost their job at {v}").about("employer"),
    rule("i lost my job $", Occupation, "Lost their job").about("employer"),
    rule("i got|was fired|sacked from {org}", Occupation, "Was fired from {org}").about("employer"),
    rule("i got|was fired|sacked $", Occupation, "Was fired").about("employer"),
    rule("i got|was laid off from|by|at {org}", Occupation, "Was laid off from {org}")
        .about("employer"),
    rule("i got|was laid off $", Occupation, "Was laid off").about("employer"),
    rule("i quit my job at {org}", Occupation, "Quit their job at {org}").about("employer"),
    rule("i quit my job $", Occupation, "Quit their job").about("employer"),
    rule("i left my job at {v}", Occupation, "Left their job at {v}").about("employer"),
    rule("i no longer work at|for {org}", Occupation, "No longer works at {org}")
        .about("employer"),
    rule("i do not work at|for {org} anymore", Occupation, "No longer works at {org}")
        .about("employer"),
    rule("i retired from {org}", Occupation, "Retired from {org}").about("employer"),
    rule(
        "i am {word:retired/unemployed/self-employed/freelancing/jobless} $",
        Occupation,
        "Is {word}",
    )
    .about("employer"),
    rule("i am between jobs", Occupation, "Is between jobs").about("employer"),
    rule("i got|was promoted to {v}", Occupation, "Was promoted to {v}").about("role"),
    rule("i got a promotion $", Milestone, "Got a promotion"),
    rule("i work from home $", Habit, "Works from home"),
    rule("i work remotely $", Habit, "Works remotely"),
    rule("i work {word:nights/weekends} $", Habit, "Works {word}"),
    rule("i am a student at {org}", Occupation, "Is a student at {org}").about("school"),
    rule("i study at {org}", Occupation, "Studies at {org}").about("school"),
    rule("i am studying {v}", Occupation, "Is studying {v}"),
    rule("i graduated from {org}", Milestone, "Graduated from {org}"),
    rule("i just? graduated $", Milestone, "Graduated"),
    // --- people
    rule("my ~adj {rel} {name} is|'s {role}", Relationship, "{rel} {name} is {role}")
        .about("{rel}:{name}:role"),
    rule("my ~adj {rel} {name} works as {role}", Relationship, "{rel} {name} is {role}")
        .about("{rel}:{name}:role"),
    rule(
        "my ~adj {rel} {name} lives in {place}",
        Relationship,
        "{rel} {name} lives in {place}",
    )
    .about("{rel}:{name}:home"),
    rule(
        "my ~adj {rel} {name} works at|for {org}",
        Relationship,
        "{rel} {name} works at {org}",
    )
    .about("{rel}:{name}:employer"),
    rule("my ~adj {rel} {name} moved to {place}", Relationship, "{rel} {name} lives in {place}")
        .about("{rel}:{name}:home"),
    rule("my ~adj {rel1} is|'s {role}", Relationship, "{rel} is {role}").about("{rel}:role"),
    // "my daughter, she is a teacher": the pronoun again, as speech has it
    rule("my ~adj {rel1} ,? he|she is|'s {role}", Relationship, "{rel} is {role}")
        .about("{rel}:role"),
    rule("my ~adj {reln} ,? he|she is|'s {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {rel1} works as {role}", Relationship, "{rel} is {role}").about("{rel}:role"),
    // "my boyfriend's a lineman for the electric company": the role, without
    // a place that no capital names
    rule("my ~adj {rel1} is|'s {role} for|at|with|in the|a", Relationship, "{rel} is {role}")
        .about("{rel}:role"),
    // (a relation one may have several of: no subject, which a second
    // sister's job would take over)
    rule("my ~adj {reln} is|'s {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {reln} works as {role}", Relationship, "{rel} is {role}"),
    rule("my ~adj {rel1} works at|for {org}", Relationship, "{rel} works at {org}")
        .about("{rel}:employer"),
    rule(
        "my ~adj {rel1} is working|based in|at|for {place}",
        Relationship,
        "{rel} works in {place}",
    )
    .about("{rel}:employer"),
    rule("my ~adj {rel1} lives in {place}", Relationship, "{rel} lives in {place}")
        .about("{rel}:home"),
    rule("my ~adj {rel1} passed away|died", Milestone, "{rel} passed away").about("{rel}:alive"),
    rule("my ~adj {rel1} 's name is {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {rel1} is|'s called|named {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {rel1} is|'s {name} $", Relationship, "{rel} is named {name}").about("{rel}"),
    rule("my ~adj {reln} 's name is {name}", Relationship, "Has a {rel} named {name}"),
    rule("my ~adj {rel1} , his|her name is|'s {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("my ~adj {reln} , his|her name is|'s {name}", Relationship, "Has a {rel} named {name}"),
    rule("the name of my ~adj {rel1} is {name}", Relationship, "{rel} is named {name}")
        .about("{rel}"),
    rule("the name of my ~adj {reln} is {name}", Relationship, "Has a {rel} named {name}"),
    rule("the name of my|our ~adj {pet} is {name}", Biographical, "Has a {pet} named {name}"),
    // "our youngest, Declan": a child by their place among the children
    rule(
        "my|our {word:youngest/eldest/oldest/middle} one? ,? {name} $",
        Relationship,
        "{word} child is named {name}",
    )
    .anywhere(),
    rule(
        "my|our {word:youngest/eldest/oldest} is|'s called|named? {name}",
        Relationship,
        "{word} child is named {name}",
    ),
    rule("my ~adj {reln} is|'s called|named {name}", Relationship, "Has a {rel} named {name}"),
    rule("my ~adj {reln} is|'s {name} $", Relationship, "Has a {rel} named {name}"),
    rule(
        "i have|'ve got? a|an ~adj {rel1} named|called {name}",
        Relationship,
        "{rel} is named {name}",
    )
    .about("{rel}"),
    rule(
        "i have|'ve got? a|an ~adj {reln} named|called {name}",
        Relationship,
        "Has a {rel} named {name}",
    ),
    rule("i am married to {name}", Relationship, "Is married to {name}").about("partner"),
    rule("i am engaged to {name}", Relationship, "Is engaged to {name}").about("partner"),
    rule("i got married|engaged to {name}", Relationship, "Is married to {name}").about("partner"),
    rule("i broke up with {name}", Relationship, "Broke up with {name}").about("partner"),
    rule("i split up with {name}", Relationship, "Broke up with {name}").about("partner"),
    // "so um colt and i are done like officially done"
    rule("{name} and i broke|split up", Relationship, "Broke up with {name}").about("partner"),
    rule("{name} and i are done|over|finished", Relationship, "Broke up with {name}")
        .about("partner"),
    rule(
        "i got {word:married/engaged/divorced/separated}",
        Milestone,
        "Got {word}",
    )
    .about("marital"),
    rule(
        "i am {word:married/single/divorced/engaged/widowed/separated} $",
        Relationship,
        "Is {word}",
    )
    .about("marital"),
    rule(
        "i have {num} {word:kids/children/sons/daughters/grandkids/grandchildren/siblings/brothers/sisters}",
        Relationship,
        "Has {num} {word}",
    )
    .about("{word}"),
    rule(
        "i have|'ve got? a|an ~adj {word:son/daughter/sister/brother/kid/child/baby/twin} $",
        Relationship,
        "Has a {word}",
    ),
    rule("i am pregnant", Milestone, "Is pregnant"),
    rule(
        "i|we am|are expecting a|our ~adj {word:baby/child/boy/girl/twins}",
        Milestone,
        "Is expecting a baby",
    ),
    rule("i|we am|are having a baby", Milestone, "Is expecting a baby"),
    rule("we|i had a baby", Milestone, "Had a baby"),
    // --- pets
    rule("my|our ~adj {pet} is|'s called|named {name}", Biographical, "Has a {pet} named {name}"),
    rule("my|our ~adj {pet} 's name is {name}", Biographical, "Has a {pet} named {name}"),
    rule(
        "i|we have|'ve got? a|an ~adj {pet} named|called {name}",
        Biographical,
        "Has a {pet} named {name}",
    ),
    rule(
        "i|we adopted|got|rescued a|an ~adj {pet} named|called {name}",
        Biographical,
        "Has a {pet} named {name}",
    ),
    rule("i|we have|'ve got? a|an ~adj {pet} , {name} $", Biographical, "Has a {pet} named {name}"),
    rule("i|we have|'ve got? a|an ~adj {pet} $", Biographical, "Has a {pet}"),
    rule("i|we adopted|rescued|got a|an ~adj {pet} $", Biographical, "Has a {pet}"),
    rule("i am a {word:dog/cat} person", Preference, "Is a {word} person"),
    rule("{name} , my|our ~adj {pet} $", Biographical, "Has a {pet} named {name}").anywhere(),
    rule("our ~adj {pet} {name}", Biographical, "Has a {pet} named {name}").anywhere(),
    // --- things
    rule("i drive {v}", Biographical, "Drives {v}").about("car").check(vehicle),
    rule(
        "i|we traded|swapped|part-exchanged in? my|our|the old? {word:car/van/truck} for {v}",
        Biographical,
        "Traded their old {word} for {v}",
    )
    .about("car")
    .check(vehicle),
    rule("my car is|'s {role}", Biographical, "Drives {role}").about("car"),
    rule(
        "i|we bought|got a|an new? {word:car/truck/motorcycle/motorbike/van/bike/e-bike/ebike/bicycle/scooter/moped/boat/piano/camper/caravan}",
        Milestone,
        "Bought a {word}",
    ),
    rule(
        "i|we bought a|an new? {word:house/home/condo/apartment/flat} $",
        Milestone,
        "Bought a {word}",
    ),
    // --- activities
    rule("i am reading {title}", Hobby, "Is reading {title}").about("reading"),
    rule("i am learning {v}", Hobby, "Is learning {v}"),
    rule("i have? started learning {v}", Hobby, "Is learning {v}"),
    rule("i am|have been? training for {v}", Goal, "Is training for {v}"),
    rule("i signed up for {v}", Goal, "Signed up for {v}").longer(14),
    rule("i registered for {v}", Goal, "Signed up for {v}").longer(14),
    rule("i have? started {ing}", Habit, "Started {ing}"),
    rule("i took up {v}", Hobby, "Took up {v}").check(bare),
    rule("i quit|stopped {ing}", Habit, "Quit {ing}"),
    rule("i gave up {v}", Habit, "Gave up {v}").check(bare),
    rule("i have? switched to {v}", Preference, "Switched to {v}"),
    rule("i play {v}", Hobby, "Plays {v}").check(played),
    rule("i go {ing}", Hobby, "Goes {ing}"),
    rule("i like to go {ing}", Hobby, "Goes {ing}"),
    rule("i volunteer at|with|for {v}", Hobby, "Volunteers at {v}"),
    rule(
        "i {word:run/swim/cycle/bike/climb/paint/knit/bake/surf/ski/dance/meditate/hike/jog/walk/cook/row/skate} every|each {v}",
        Habit,
        "{word}s every {v}",
    ),
    rule("i wake|get up at {v}", Habit, "Wakes up at {v}").about("wake_time"),
    rule("i go to bed at {v}", Habit, "Goes to bed at {v}").about("bed_time"),
    rule(
        "i|we go to {v} on|every {word:mondays/tuesdays/wednesdays/thursdays/fridays/saturdays/sundays/monday/tuesday/wednesday/thursday/friday/saturday/sunday/weekends}",
        Hobby,
        "Goes to {v} on {word}",
    ),
    rule("i am taking a|an {v}", Hobby, "Is taking a {v}").check(course),
    // --- preferences
    rule("my favorite|favourite {thing} is|'s {v}", Preference, "Favorite {thing} is {v}")
        .about("favorite:{thing}"),
    rule("i prefer {v}", Preference, "Prefers {v}"),
    rule("i love|adore {v}", Preference, "Loves {v}").check(liked),
    rule("i like {v}", Preference, "Likes {v}").check(liked),
    rule("i enjoy {v}", Preference, "Enjoys {v}").check(liked),
    rule("i do not like {v}", Preference, "Doesn't like {v}").check(liked),
    rule("i hate|dislike|detest {v}", Preference, "Dislikes {v}").check(liked),
    rule("i can not stand {v}", Preference, "Dislikes {v}").check(liked),
    rule("i am into {v}", Preference, "Is into {v}"),
    rule("i am afraid|scared|terrified of {v}", Personality, "Is afraid of {v}"),
    rule("i am a big|huge? fan of {v}", Preference, "Is a fan of {v}"),
    rule("i am a {word:morning/night} person", Preference, "Is a {word} person")
        .about("chronotype"),
    rule("i take my coffee {v}", Preference, "Takes their coffee {v}").about("coffee"),
    rule("i support {org}", Preference, "Supports {org}"),
    // --- health and diet
    rule("i am allergic to {v}", Constraint, "Allergic to {v}"),
    // Medicines, named by a word no everyday talk uses ("I'm on warfarin
    // for it", "the doctor has moved me onto apixaban"; not "I'm on nights
    // for a week"), taken for what was just said ("for it": not "I'm on
    // Facebook for work"). No subject: one may take several.
    rule("i am on {thing} for it|that|this|them", Constraint, "Takes {thing}").check(medicine),
    rule("i take {thing} for|every|each|twice|daily", Constraint, "Takes {thing}").check(medicine),
    rule("put|moved|switched|changed|started me on|onto|to {thing}", Constraint, "Takes {thing}")
        .check(medicine)
        .anywhere(),
    rule("i have a|an {v} allergy", Constraint, "Has a {v} allergy"),
    rule(
        "i am a|an? {word:vegetarian/vegan/pescatarian/pescetarian/carnivore}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule(
        "i have? went|became|turned|gone {word:vegetarian/vegan/pescatarian/pescetarian}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule(
        "i have been {word:vegetarian/vegan/pescatarian/pescetarian}",
        Constraint,
        "Is {word}",
    )
    .about("diet"),
    rule("i am on a|an {v} diet", Constraint, "Is on a {v} diet").about("diet"),
    rule("{thing} and i do not|never get along|on $", Constraint, "Doesn't get along with {thing}")
        .check(not_a_person),
    rule("i eat {word:kosher/halal} $", Constraint, "Eats {word}").about("diet"),
    rule(
        "i am {word:diabetic/celiac/coeliac/asthmatic/epileptic/deaf/blind/colorblind/sober/autistic}",
        Constraint,
        "Is {word}",
    ),
    rule("i am {word:lactose/gluten} intolerant", Constraint, "Is {word} intolerant"),
    rule(
        "i have {word:diabetes/asthma/adhd/arthritis/epilepsy/migraines/insomnia/celiac/coeliac/eczema/tinnitus/lupus/endometriosis/dyslexia/autism/psoriasis} $",
        Constraint,
        "Has {word}",
    ),
    rule("i have type {num} diabetes", Constraint, "Has type {num} diabetes"),
    rule("i have {word:high/low} blood pressure", Constraint, "Has {word} blood pressure"),
    rule("i have high cholesterol", Constraint, "Has high cholesterol"),
    rule("i was diagnosed with {v}", Constraint, "Was diagnosed with {v}"),
    rule("i can not eat|have|drink {v}", Constraint, "Can't {word} {v}").check(edible),
    rule("i do not eat {v}", Constraint, "Doesn't eat {v}").check(edible),
    rule("i do not drink {word:alcohol/coffee/caffeine/milk/beer/wine}", Constraint, "Doesn't drink {word}"),
    rule("i do not drink $", Constraint, "Doesn't drink alcohol"),
    rule("i use a|an {word:wheelchair/cane/walker/inhaler/cpap}", Constraint, "Uses a {word}"),
    // --- plans and goals
    rule("i am planning to {v}", Goal, "Plans to {v}").check(effort),
    rule("i am planning on {ing}", Goal, "Plans on {ing}"),
    rule("i plan to {v}", Goal, "Plans to {v}").check(effort),
    rule("we are planning to {v}", Goal, "Plans to {v}").check(effort),
    rule("i am going to {v}", Goal, "Is going to {v}").check(plan),
    rule("i want to {v}", Goal, "Wants to {v}").check(plan),
    rule("my goal is to {v}", Goal, "Goal is to {v}"),
    rule("i hope to {v}", Goal, "Hopes to {v}").check(effort),
    rule("i am saving up? for {v}", Goal, "Is saving for {v}"),
    rule("i am trying to {v}", Goal, "Is trying to {v}").check(effort),
    rule("i am applying for|to {v}", Goal, "Is applying for {v}"),
    rule("i applied to|for {v}", Goal, "Applied to {v}"),
    rule("i|we am|are getting married {word:in/on} {date}", Milestone, "Is getting married {word} {date}"),
    rule("i|we am|are getting married $", Milestone, "Is getting married"),
    // --- asked to remember
    rule("please? remember that {raw}", Other, "{raw}").in_questions(),
    rule("please remember {raw}", Other, "{raw}").in_questions(),
    rule(
        "can|could|would|will you please? remember|note that? {raw}",
        Other,
        "{raw}",
    )
    .in_questions(),
    rule("do not forget that {raw}", Other, "{raw}"),
    rule("note that {raw}", Other, "{raw}"),
    // --- names anywhere, last: the sentences above say more
    rule("my ~adj {rel1} {name}", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("my ~adj {reln} {name}", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("{name} , my ~adj {rel1} $", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("{name} , my ~adj {reln} $", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("my ~adj {rel1} , {name} $", Relationship, "{rel} is named {name}")
        .about("{rel}")
        .anywhere(),
    rule("my ~adj {reln} , {name} $", Relationship, "Has a {rel} named {name}").anywhere(),
    rule("my ~adj {pet} {name}", Biographical, "Has a {pet} named {name}").anywhere(),
];

pub(super) struct Compiled {
    pub(super) rule: Rule,
    pub(super) els: Vec<El>,
    /// The words of the rule's first required word element: a sentence
    /// holding none of them cannot match, and is not tried.
    pub(super) anchor: Option<Vec<&'static str>>,
}

pub(super) static COMPILED: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|r| {
            let els = compile(r.pattern);
            let anchor = els.iter().find_map(|e| match e {
                El::Words(words, false) => Some(words.clone()),
                _ => None,
            });
            Compiled {
                rule: *r,
                els,
                anchor,
            }
        })
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::facts::pattern::Slot;

    #[test]
    fn every_pattern_compiles_to_known_slots() {
        for c in COMPILED.iter() {
            for el in &c.els {
                if let El::Slot(Slot::Word(list)) = el {
                    assert!(!list.is_empty(), "unknown slot in {:?}", c.rule.pattern);
                }
            }
            assert!(!c.els.is_empty());
        }
    }
}
