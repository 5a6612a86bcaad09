//! The lexicon's tables the fact rules (`text::facts`) read:
//! contractions, the words that open, end or trim a clause, relations and
//! pets, names that are no names, occupations, and the words the rules'
//! checks refuse. Data only (and the lookups that are no more than a
//! table's); the short forms of relations and days, the stopwords, months
//! and weekdays are the lexicon's shared tables (`lexicon`).

/// Contractions whose parts are not the word minus a suffix.
pub(crate) const SPECIAL: &[(&str, &str, &str)] = &[
    ("can't", "can", "not"),
    ("cannot", "can", "not"),
    ("won't", "will", "not"),
    ("ain't", "is", "not"),
    ("gonna", "going", "to"),
    ("wanna", "want", "to"),
];

/// Suffixes split off a word, with what they stand for.
pub(crate) const SUFFIXES: &[(&str, &str)] = &[
    ("n't", "not"),
    ("'m", "am"),
    ("'re", "are"),
    ("'ve", "have"),
    ("'ll", "will"),
    ("'d", "would"),
    ("'s", "'s"),
];

/// Contractions written without their apostrophe, as typed chat and some
/// transcripts give them ("im", "shes", "dont"): the words they stand for.
/// Only forms that are not words of their own ("its", "were", "ill",
/// "id", "lets" and "hell" are left as they are). The short forms of
/// relations and days ("gf", "bday") are the lexicon's
/// [`SHORT_FORMS`](super::SHORT_FORMS).
#[rustfmt::skip]
pub(crate) const UNMARKED: &[(&str, &[&str])] = &[
    ("arent", &["are", "not"]),
    ("cant", &["can", "not"]), ("couldnt", &["could", "not"]), ("didnt", &["did", "not"]),
    ("doesnt", &["does", "not"]), ("dont", &["do", "not"]),
    ("hadnt", &["had", "not"]), ("hasnt", &["has", "not"]), ("havent", &["have", "not"]),
    ("hes", &["he", "'s"]), ("im", &["i", "am"]),
    ("isnt", &["is", "not"]), ("ive", &["i", "have"]), ("shes", &["she", "'s"]),
    ("shouldnt", &["should", "not"]), ("thats", &["that", "'s"]), ("theres", &["there", "'s"]),
    ("theyre", &["they", "are"]), ("theyve", &["they", "have"]), ("wasnt", &["was", "not"]),
    ("werent", &["were", "not"]), ("weve", &["we", "have"]), ("whats", &["what", "'s"]),
    ("wouldnt", &["would", "not"]), ("youre", &["you", "are"]), ("youve", &["you", "have"]),
];

/// Words after which a new clause starts.
#[rustfmt::skip]
pub(crate) const OPENERS: &[&str] = &[
    "and", "but", "so", "because", "cause", "since", "also", "actually", "well", "oh", "yeah",
    "yes", "now", "plus", "anyway", "though", "ok", "okay", "um", "uh", "honestly", "basically",
    "btw", "then", "that", "hey", "hi", "hello", "guess", "see", "fyi", "ps", "sorry", "listen",
    "please", "alright", "right", "wow", "nope", "no", "fact", "bc", "tbh", "ngl", "lol",
];

/// Adverbs a pattern steps over between its words ("I just moved to").
#[rustfmt::skip]
pub(crate) const SKIPPABLE: &[&str] = &[
    "just", "really", "recently", "finally", "actually", "now", "also", "still", "currently",
    "already", "officially", "totally", "definitely", "usually", "often", "always", "sometimes",
    "normally", "basically", "literally", "absolutely", "seriously", "honestly", "mostly",
    "generally", "truly", "kinda", "newly", "originally", "fully", "completely", "strictly",
    "entirely",
];

/// Words that always end a value: another clause begins.
pub(crate) const CLAUSE_STOPS: &[&str] = &[
    "but", "because", "cause", "cuz", "so", "since", "although", "though", "while", "whereas",
    "which", "who", "whom", "where", "when", "if", "unless", "until", "like", "then", "plus",
    "anyway", "whenever", "cos",
];

/// After "and"/"or", these start a new statement ("… and I love it").
pub(crate) const SUBJECT_WORDS: &[&str] = &[
    "i", "my", "we", "our", "he", "she", "they", "it", "you", "his", "her", "their", "then",
    "also", "that", "this", "there", "now",
];

/// Trailing words that only say when ("right now", "these days").
pub(crate) const TRAILING: &[&[&str]] = &[
    &["right", "now"],
    &["these", "days"],
    &["at", "the", "moment"],
    &["for", "now"],
    &["as", "well"],
    &["at", "the", "minute"],
    &["now"],
    &["currently"],
    &["lately"],
    &["nowadays"],
    &["anymore"],
    &["again"],
    &["too"],
    &["though"],
    &["actually"],
    &["anyway"],
    &["honestly"],
    &["really"],
    &["today"],
    &["tonight"],
    &["recently"],
    &["haha"],
    &["lol"],
    &["btw"],
];

/// A value starting with one of these is not a fact ("I love it", "I'm
/// learning a lot", "I hate that").
#[rustfmt::skip]
pub(crate) const REJECT_START: &[&str] = &[
    "not", "no", "never", "it", "that", "this", "these", "those", "them", "him", "her", "so",
    "such", "much", "lot", "lots", "sure", "something", "anything", "nothing", "everything",
    "what", "how", "why", "when", "where", "whether", "if", "too", "very", "some", "more", "less",
    "enough", "any", "right", "okay", "ok", "there", "here", "one", "someone", "somebody",
    "anyone", "everyone", "stuff",
];

/// Two-word starts refused the same way.
pub(crate) const REJECT_START_PAIRS: &[[&str; 2]] = &[
    ["a", "lot"],
    ["a", "bit"],
    ["a", "little"],
    ["kind", "of"],
    ["sort", "of"],
    ["the", "same"],
    ["a", "few"],
];

/// Pronouns that make a value speak to the agent or about someone the
/// third-person reading cannot name.
pub(crate) const REJECT_ANYWHERE: &[&str] = &["you", "your", "yours", "yourself", "i"];

/// First-person words and what they become in the third person.
pub(crate) const THIRD_PERSON: &[(&str, &str)] = &[
    ("my", "their"),
    ("me", "them"),
    ("myself", "themselves"),
    ("mine", "theirs"),
    ("we", "they"),
    ("our", "their"),
    ("ours", "theirs"),
    ("us", "them"),
    ("ourselves", "themselves"),
];

/// Sentences opening like this are questions, even without a `?`.
pub(crate) const QUESTION_STARTS: &[&str] = &[
    "do", "does", "did", "is", "are", "was", "were", "can", "could", "would", "will", "should",
    "shall", "what", "where", "when", "why", "how", "who", "whom", "which", "have", "has", "am",
    "might", "whose",
];

/// Capitalized words that are not names.
#[rustfmt::skip]
pub(crate) const NOT_NAMES: &[&str] = &[
    "mom", "mum", "dad", "god", "lol", "idk", "dunno", "tbd", "undecided", "secret", "anyway", "sorry", "please", "listen", "look", "wow", "man",
    "dude", "guys", "sir", "madam", "buddy", "everyone", "everybody", "nobody", "somebody", "hmm",
    "um", "uh", "ah", "ha", "haha", "alright", "cool", "nice", "awesome", "amazing", "christmas",
    "easter", "thanksgiving", "english", "american", "british", "irish", "scottish", "welsh",
    "canadian", "mexican", "brazilian", "french", "german", "spanish", "italian", "portuguese",
    "dutch", "polish", "russian", "ukrainian", "greek", "turkish", "chinese", "japanese", "korean",
    "vietnamese", "thai", "indian", "pakistani", "filipino", "nigerian", "kenyan", "african",
    "asian", "european", "australian", "jewish", "catholic", "christian", "muslim", "hindu",
    "buddhist", "black", "white", "latino", "latina", "luckily", "unluckily", "unfortunately",
    "fortunately", "thankfully", "hopefully", "sadly", "honestly", "basically", "apparently",
    "obviously", "seriously", "clearly", "naturally", "personally", "frankly", "funnily",
    "weirdly", "oddly", "surprisingly", "ironically", "meanwhile", "actually", "nope", "yep",
    "yeah", "nah", "maybe", "sure", "thanks", "later", "tonight", "tomorrow", "today",
    "yesterday", "soon", "never", "always", "definitely", "absolutely", "exactly", "right",
];

/// Relations a person has one of at a time, and the subject a fact about
/// their name is filed under.
pub(crate) const SINGLE_RELATIONS: &[(&str, &str)] = &[
    ("wife", "partner"),
    ("husband", "partner"),
    ("spouse", "partner"),
    ("partner", "partner"),
    ("girlfriend", "partner"),
    ("boyfriend", "partner"),
    ("fiance", "partner"),
    ("fiancé", "partner"),
    ("fiancee", "partner"),
    ("fiancée", "partner"),
    ("manager", "manager"),
    ("boss", "manager"),
    ("supervisor", "manager"),
    ("mom", "mother"),
    ("mother", "mother"),
    ("mum", "mother"),
    ("mommy", "mother"),
    ("mam", "mother"),
    ("mammy", "mother"),
    ("mummy", "mother"),
    ("dad", "father"),
    ("father", "father"),
    ("daddy", "father"),
    ("stepmom", "stepmother"),
    ("stepmother", "stepmother"),
    ("stepdad", "stepfather"),
    ("stepfather", "stepfather"),
    ("therapist", "therapist"),
    ("landlord", "landlord"),
    ("landlady", "landlord"),
    ("mother-in-law", "mother-in-law"),
    ("father-in-law", "father-in-law"),
];

/// Relations a person may have several of.
#[rustfmt::skip]
pub(crate) const MANY_RELATIONS: &[&str] = &[
    "sister", "brother", "son", "daughter", "kid", "child", "baby", "friend", "cousin", "aunt",
    "uncle", "niece", "nephew", "grandma", "grandmother", "grandpa", "grandfather",
    "granddaughter", "grandson", "coworker", "co-worker", "colleague", "neighbor", "neighbour",
    "roommate", "flatmate", "housemate", "teammate", "coach", "teacher", "mentor", "ex", "ex-wife",
    "ex-husband", "ex-girlfriend", "ex-boyfriend", "twin", "stepson", "stepdaughter", "stepsister",
    "stepbrother", "sister-in-law", "brother-in-law", "godmother", "godfather", "doctor",
];

pub(crate) const PETS: &[&str] = &[
    "dog",
    "puppy",
    "pup",
    "cat",
    "kitten",
    "kitty",
    "rabbit",
    "bunny",
    "hamster",
    "parrot",
    "bird",
    "budgie",
    "goldfish",
    "turtle",
    "tortoise",
    "horse",
    "pony",
    "lizard",
    "gecko",
    "snake",
    "ferret",
    "hedgehog",
    "guinea-pig",
];

/// Dog breeds, which name a pet as well as "dog" does ("Rusty, our
/// beagle"): read as "beagle (dog)", so a question about the dog finds it.
#[rustfmt::skip]
pub(crate) const DOG_BREEDS: &[&str] = &[
    "beagle", "corgi", "labrador", "poodle", "labradoodle", "cockapoo", "terrier",
    "spaniel", "collie", "retriever", "dachshund", "husky", "pug", "greyhound", "whippet",
    "lurcher", "schnauzer", "chihuahua", "rottweiler", "dalmatian", "bulldog",
    "doberman", "shih-tzu", "pomeranian", "sheepdog", "staffie", "mutt",
];

/// Adjectives allowed between "my" and a relation or pet.
pub(crate) const ADJECTIVES: &[&str] = &[
    "older", "younger", "little", "big", "baby", "twin", "new", "old", "eldest", "oldest",
    "youngest", "middle", "elder", "late", "sweet", "lovely", "rescue", "first", "second", "third",
];

/// Words that mark a value as a book or the like.
#[rustfmt::skip]
pub(crate) const BOOKISH: &[&str] = &[
    "book", "books", "novel", "memoir", "biography", "series", "trilogy", "poetry", "comic",
    "comics", "manga", "autobiography",
];

/// Starts refused after "I want to" / "I'm going to" and the like: talk
/// about the conversation, not plans.
#[rustfmt::skip]
pub(crate) const CHATTY_VERBS: &[&str] = &[
    "be", "go", "have", "say", "tell", "ask", "try", "need", "do", "get", "make", "take", "see",
    "think", "let", "check", "look", "grab", "call", "talk", "head", "give", "keep", "put", "know",
    "thank", "hear", "understand", "share", "mention", "clarify", "confirm", "focus", "add",
    "explain", "remember", "figure", "decide", "find", "help", "hang", "sleep", "stop", "start",
    "continue", "wait", "leave", "show", "write", "read", "use", "send", "come", "pick", "cry",
    "scream", "die", "kill", "quickly", "just",
];

/// Words that put a "here in …" somewhere other than home.
#[rustfmt::skip]
pub(crate) const AWAY: &[&str] = &[
    "holiday", "vacation", "trip", "visiting", "visit", "staying", "hotel", "conference",
    "honeymoon", "travelling", "traveling", "layover", "stopover", "wedding", "funeral",
    "interview", "anymore", "not", "never", "passing",
];

/// Verbs after "I like to" or "I hate to" that say something rather than
/// a taste ("I like to think she inspired him").
#[rustfmt::skip]
pub(crate) const SAYING: &[&str] = &[
    "think", "believe", "imagine", "say", "admit", "tell", "bother", "interrupt", "complain",
    "ask",
];

/// Someone, as what is loved or hated: no taste.
#[rustfmt::skip]
pub(crate) const SOMEONE: &[&str] = &[
    "myself", "yourself", "himself", "herself", "ourselves", "themselves", "you", "him", "her",
    "me", "us",
];

/// Kinds of place one works at, named without a capital ("the hospital",
/// "the care home").
#[rustfmt::skip]
pub(crate) const WORKPLACES: &[&str] = &[
    "hospital", "clinic", "surgery", "home", "school", "factory", "plant", "mine", "mill",
    "store", "shop", "supermarket", "restaurant", "cafe", "café", "bakery", "hotel", "bank",
    "office", "warehouse", "lodge", "library", "garage", "farm", "airport", "university",
    "college", "daycare", "pharmacy", "salon", "site", "depot", "yard", "call", "centre",
    "center", "museum", "council", "ward", "kitchen", "refinery", "port", "dock",
];

/// Words that name an occupation, as the last word of a role ("a practice
/// nurse", "kitchen supervisor"): what tells "I'm a nurse" from "I'm a
/// mess". Words as often said of oneself outside work ("driver", "cook",
/// "runner") are left out.
#[rustfmt::skip]
pub(crate) const OCCUPATIONS: &[&str] = &[
    "accountant", "actor", "actress", "administrator", "aide", "analyst", "apprentice",
    "arborist", "architect", "assistant", "attendant", "attorney", "auditor", "baker", "banker",
    "barber", "barista", "bartender", "beautician", "bookkeeper", "bricklayer", "builder",
    "butcher", "caregiver", "carer", "caretaker", "carpenter", "cashier", "caterer", "chef",
    "chemist", "chiropractor", "cleaner", "clerk", "coach", "consultant", "contractor",
    "coordinator", "counsellor", "counselor", "courier", "curator", "custodian", "deckhand",
    "dentist", "designer", "detective", "developer", "dietitian", "dispatcher", "doctor",
    "economist", "editor", "electrician", "engineer", "farmer", "firefighter", "fisherman",
    "florist", "foreman", "gardener", "geologist", "groomer", "hairdresser", "handyman",
    "housekeeper", "hygienist", "illustrator", "inspector", "instructor", "intern",
    "interpreter", "janitor", "journalist", "laborer", "labourer", "landscaper", "lawyer",
    "lecturer", "librarian", "lifeguard", "locksmith", "machinist", "manager", "mechanic",
    "midwife", "miner", "nanny", "nurse", "officer", "optician", "optometrist", "painter",
    "paralegal", "paramedic", "pharmacist", "photographer", "physician", "physiotherapist",
    "pilot", "plasterer", "plumber", "postman", "postwoman", "priest", "professor",
    "programmer", "psychologist", "receptionist", "reporter", "researcher", "roofer",
    "salesman", "saleswoman", "scientist", "secretary", "sergeant", "shopkeeper", "solicitor",
    "superintendent", "supervisor", "surgeon", "surveyor", "tailor", "teacher", "technician",
    "therapist", "trainee", "translator", "trucker", "tutor", "vet", "veterinarian", "waiter",
    "waitress", "welder", "zookeeper",
];

/// Whether a word names an occupation ([`OCCUPATIONS`], sorted).
pub(crate) fn is_occupation(word: &str) -> bool {
    OCCUPATIONS.binary_search(&word).is_ok()
}

/// Words that judge how one does a thing, not what one does for a living
/// ("I'm a terrible teacher").
pub(crate) const ROLE_JUDGEMENTS: &[&str] = &[
    "good", "bad", "terrible", "great", "awful", "better", "worse", "lousy", "horrible", "natural",
    "born", "hopeless", "useless", "decent", "proper", "real", "total",
];

/// A day's ordinal spelled out, as speech is written down ("the twelfth of
/// June"; "twenty-first" is "twenty-" and one of the first nine).
#[rustfmt::skip]
pub(crate) const ORDINAL_WORDS: &[&str] = &[
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
    "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
    "seventeenth", "eighteenth", "nineteenth", "twentieth", "thirtieth",
];

/// Numbers spelled out, as a `{num}` slot takes them.
#[rustfmt::skip]
pub(crate) const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// Verbs a sentence often opens with, its subject ("I") left out: "Quit
/// the café!", "Moved to Leeds last month".
#[rustfmt::skip]
pub(crate) const ELIDED_PAST: &[&str] = &[
    "moved", "relocated", "quit", "started", "signed", "registered", "bought", "got", "switched",
    "adopted", "rescued", "joined", "went", "took", "gave", "graduated", "retired", "traded",
    "lost", "left", "booked", "applied", "landed", "accepted", "finished",
];

/// Words in -ing that open a sentence without being what the speaker is
/// doing.
#[rustfmt::skip]
pub(crate) const NOT_DOING: &[&str] = &[
    "thing", "something", "anything", "nothing", "everything", "morning", "evening", "during",
    "spring", "string", "sibling", "bring", "wedding", "feeling", "being", "according",
    "raining", "snowing", "pouring", "amazing", "boring", "interesting", "building", "ceiling",
    "darling", "pudding", "king", "ring", "sing", "wing", "ping",
];

/// Relations that are a man's; [`FEMALE_RELATIONS`] a woman's.
#[rustfmt::skip]
pub(crate) const MALE_RELATIONS: &[&str] = &[
    "husband", "boyfriend", "fiance", "dad", "father", "daddy", "stepdad", "stepfather",
    "father-in-law", "brother", "son", "uncle", "nephew", "grandpa", "grandfather", "grandson",
    "landlord",
];
#[rustfmt::skip]
pub(crate) const FEMALE_RELATIONS: &[&str] = &[
    "wife", "girlfriend", "fiancee", "fiancée", "mom", "mother", "mum", "mommy", "mam", "mammy",
    "mummy", "stepmom", "stepmother", "mother-in-law", "sister", "daughter", "aunt", "niece",
    "grandma", "grandmother", "granddaughter", "landlady",
];

/// Someone spoken of who is not the user's relation.
#[rustfmt::skip]
pub(crate) const SOMEONE_ELSE: &[&str] = &[
    "lady", "guy", "man", "woman", "client", "customer", "girl", "boy", "someone", "somebody",
    "fellow", "bloke", "gentleman", "stranger",
];

/// Words that follow "'s" read as "is" ("my boyfriend's a lineman", "my
/// mum's not well"), where another word makes it a possessive ("my
/// neighbour's goat").
#[rustfmt::skip]
pub(crate) const AFTER_IS: &[&str] = &[
    "a", "an", "the", "been", "got", "gone", "going", "not", "so", "very", "really", "just",
    "always", "never", "still", "also", "now", "finally", "in", "at", "from", "on", "back",
    "home", "off", "out", "over", "up", "like", "um", "uh", "doing", "getting", "coming",
    "moving", "working", "living", "retired", "married", "engaged", "pregnant", "called",
    "named",
];

/// Words a spoken sentence may open on before its subject.
pub(crate) const FILLERS: &[&str] = &["so", "um", "uh", "oh", "and", "well", "yeah", "like", "but"];

/// Whether a word names a relation or a pet (for scoring what a sentence
/// discloses).
pub fn is_relation_word(word: &str) -> bool {
    SINGLE_RELATIONS.iter().any(|(w, _)| *w == word)
        || MANY_RELATIONS.contains(&word)
        || PETS.contains(&word)
        || DOG_BREEDS.contains(&word)
}

/// The subject a one-valued relation's name is filed under.
pub(crate) fn relation_subject(rel: &str) -> &str {
    SINGLE_RELATIONS
        .iter()
        .find(|(w, _)| *w == rel)
        .map_or(rel, |(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_occupations_are_sorted() {
        assert!(OCCUPATIONS.windows(2).all(|w| w[0] < w[1]));
    }
}
