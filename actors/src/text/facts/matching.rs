//! Matching a compiled pattern against a sentence's tokens: where a
//! clause starts and ends, which values each slot takes (the shortest
//! that lets the rest of the pattern match), and the values refused.

use super::checks::bare_role;
use super::dates::date_end;
use super::pattern::{Captures, El, Slot};
use super::phrasing::upper_first;
use super::tokens::{name_token, render, render_third_person, Tok};
use crate::lang::fact_words::{
    BOOKISH, CLAUSE_STOPS, DOG_BREEDS, MANY_RELATIONS, NUMBER_WORDS, OPENERS, PETS,
    REJECT_ANYWHERE, REJECT_START, REJECT_START_PAIRS, SINGLE_RELATIONS, SKIPPABLE, SUBJECT_WORDS,
    TRAILING,
};
use crate::lang::{MONTHS, WEEKDAYS};

pub(super) fn clause_start(toks: &[Tok], i: usize) -> bool {
    i == 0 || toks[i - 1].punct || OPENERS.contains(&toks[i - 1].lower.as_str())
}

fn boundary(toks: &[Tok], j: usize) -> bool {
    j >= toks.len() || toks[j].punct
}

/// Where the clause starting at `j` ends: punctuation, a conjunction
/// starting another statement, or `max` tokens on (then `None`: too long to
/// be a crisp fact).
fn clause_end(toks: &[Tok], j: usize, max: usize, strict: bool) -> Option<usize> {
    let mut k = j;
    while k < toks.len() {
        let t = &toks[k];
        if t.punct {
            break;
        }
        let w = t.lower.as_str();
        if k > j && strict && CLAUSE_STOPS.contains(&w) {
            break;
        }
        if k > j && !strict && matches!(w, "but" | "because" | "so") {
            break;
        }
        if k > j
            && matches!(w, "and" | "or" | "&")
            && toks
                .get(k + 1)
                .is_some_and(|n| SUBJECT_WORDS.contains(&n.lower.as_str()))
        {
            break;
        }
        k += 1;
        if k - j > max {
            return if strict { None } else { Some(k) };
        }
    }
    Some(k)
}

/// `toks[j..end]` without trailing time words ("right now", "lately").
fn trim_trailing(toks: &[Tok], j: usize, mut end: usize) -> usize {
    loop {
        let before = end;
        for tail in TRAILING {
            if end > j + tail.len()
                && toks[end - tail.len()..end]
                    .iter()
                    .zip(tail.iter())
                    .all(|(t, w)| t.lower == *w)
            {
                end -= tail.len();
                break;
            }
        }
        if end == before {
            return end;
        }
    }
}

fn acceptable_value(toks: &[Tok]) -> bool {
    let Some(first) = toks.first() else {
        return false;
    };
    if REJECT_START.contains(&first.lower.as_str()) {
        return false;
    }
    if let Some(second) = toks.get(1) {
        if REJECT_START_PAIRS
            .iter()
            .any(|[a, b]| first.lower == *a && second.lower == *b)
        {
            return false;
        }
    }
    !toks
        .iter()
        .any(|t| REJECT_ANYWHERE.contains(&t.lower.as_str()))
}

/// A capitalized run (a place or an organization), with an optional
/// leading "the" and inner connectors ("Bank of America").
fn proper_run(toks: &[Tok], j: usize, connectors: &[&str]) -> Option<usize> {
    let proper = |t: &Tok| {
        t.capitalized()
            && t.lower != "i"
            && !WEEKDAYS.contains(&t.lower.as_str())
            && !MONTHS[..12].contains(&t.lower.as_str())
    };
    let mut k = j;
    if toks.get(k).is_some_and(|t| t.lower == "the") {
        k += 1;
    }
    let first = k;
    while k < toks.len() && k - first < 6 {
        if proper(&toks[k]) {
            k += 1;
        } else if k > first
            && connectors.contains(&toks[k].lower.as_str())
            && toks.get(k + 1).is_some_and(proper)
        {
            k += 2;
        } else {
            break;
        }
    }
    (k > first).then_some(k)
}

pub(super) fn relation(toks: &[Tok], j: usize, which: Slot) -> Option<(usize, String)> {
    let t = toks.get(j)?;
    let (end, word) = if t.lower == "best" && toks.get(j + 1).is_some_and(|n| n.lower == "friend") {
        (j + 2, "best friend".to_string())
    } else {
        (j + 1, t.lower.clone())
    };
    let single = word == "best friend" || SINGLE_RELATIONS.iter().any(|(w, _)| *w == word);
    let known = single || MANY_RELATIONS.contains(&word.as_str());
    let fits = match which {
        Slot::Rel1 => single,
        Slot::RelN => known && !single,
        _ => known,
    };
    fits.then_some((end, word))
}

/// Matches `els` against `toks` from `j`; the end and the captures.
pub(super) fn match_at(
    els: &[El],
    toks: &[Tok],
    j: usize,
    first: bool,
    max_value: usize,
) -> Option<(usize, Captures)> {
    let Some((el, rest)) = els.split_first() else {
        return Some((j, Vec::new()));
    };
    let with = |end: usize, key: &'static str, value: String| {
        match_at(rest, toks, end, false, max_value).map(|(e, mut caps)| {
            caps.push((key, value));
            (e, caps)
        })
    };
    match el {
        El::End => boundary(toks, j)
            .then(|| match_at(rest, toks, j, false, max_value))
            .flatten(),
        El::Words(words, optional) => {
            // Step over a couple of adverbs between the words of a pattern.
            let mut k = j;
            if !first {
                while k < toks.len()
                    && k - j < 2
                    && SKIPPABLE.contains(&toks[k].lower.as_str())
                    && !words.contains(&toks[k].lower.as_str())
                {
                    k += 1;
                }
            }
            if toks
                .get(k)
                .is_some_and(|t| words.contains(&t.lower.as_str()))
            {
                if let Some(m) = match_at(rest, toks, k + 1, false, max_value) {
                    return Some(m);
                }
            }
            if *optional {
                return match_at(rest, toks, j, first, max_value);
            }
            None
        }
        El::Slot(slot) => match_slot(*slot, rest, toks, j, max_value, &with),
    }
}

type Continue<'a> = dyn Fn(usize, &'static str, String) -> Option<(usize, Captures)> + 'a;

/// Matches a slot at `j`, then the rest of the pattern through `with`.
fn match_slot(
    slot: Slot,
    rest: &[El],
    toks: &[Tok],
    j: usize,
    max_value: usize,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    let key = slot.key();
    match slot {
        Slot::Clause | Slot::Ing | Slot::Role | Slot::Title | Slot::Raw => {
            match_clause(slot, rest, toks, j, max_value, with)
        }
        Slot::Name => match_name(toks, j, key, with),
        Slot::Place => {
            let e = proper_run(toks, j, &["of", "de", "del", "la", "upon"])?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Org => {
            let e = proper_run(toks, j, &["of", "and", "&", "de", "for"])?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Date => {
            let e = date_end(toks, j)?;
            with(e, key, render(&toks[j..e]))
        }
        Slot::Num => {
            let t = toks.get(j)?;
            let ok = (t.lower.len() <= 3 && t.lower.chars().all(|c| c.is_ascii_digit()))
                || NUMBER_WORDS.contains(&t.lower.as_str());
            ok.then(|| with(j + 1, key, t.text.clone())).flatten()
        }
        Slot::Year => {
            let t = toks.get(j)?;
            let ok = t.lower.len() == 4
                && t.lower
                    .parse::<u32>()
                    .is_ok_and(|y| (1900..2100).contains(&y));
            ok.then(|| with(j + 1, key, t.text.clone())).flatten()
        }
        Slot::Rel | Slot::Rel1 | Slot::RelN => {
            let (e, word) = relation(toks, j, slot)?;
            with(e, key, word)
        }
        Slot::Pet => {
            let t = toks.get(j)?;
            let w = t.lower.as_str();
            if PETS.contains(&w) {
                with(j + 1, key, t.lower.clone())
            } else if DOG_BREEDS.contains(&w) {
                with(j + 1, key, format!("{w} (dog)"))
            } else {
                None
            }
        }
        Slot::Thing => match_thing(toks, j, key, with),
        Slot::Word(list) => match_word(list, toks, j, key, with),
    }
}

/// A clause-like slot (`{v}`, `{ing}`, `{role}`, `{title}`, `{raw}`):
/// the rest of the clause, or with more pattern after it the shortest
/// value that lets the rest match.
fn match_clause(
    slot: Slot,
    rest: &[El],
    toks: &[Tok],
    j: usize,
    max_value: usize,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    let key = slot.key();
    let raw = slot == Slot::Raw;
    let (max, strict) = if raw { (24, false) } else { (max_value, true) };
    let end = clause_end(toks, j, max, strict)?;
    // With more pattern after it, the value is the shortest that
    // lets the rest match ("I have a {v} allergy").
    let ends: Vec<usize> = if rest.is_empty() {
        vec![if raw {
            end
        } else {
            trim_trailing(toks, j, end)
        }]
    } else {
        (j + 1..=end).collect()
    };
    for e in ends {
        let value = &toks[j..e];
        if value.is_empty() {
            continue;
        }
        let rendered = if raw {
            Some(upper_first(&render(value)))
        } else {
            if !acceptable_value(value) || !slot_shape(slot, value) {
                continue;
            }
            render_third_person(value)
        };
        let Some(rendered) = rendered else { continue };
        if let Some(m) = with(e, key, rendered) {
            return Some(m);
        }
    }
    None
}

/// A `{name}`: up to three name words, a title before them kept.
fn match_name(
    toks: &[Tok],
    j: usize,
    key: &'static str,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    // A title before the name ("Dr. Patel", "Mrs Wilson") is kept.
    if toks.get(j).is_some_and(|t| {
        t.capitalized() && matches!(t.lower.as_str(), "dr" | "mr" | "mrs" | "ms" | "miss")
    }) {
        let after = if toks.get(j + 1).is_some_and(|t| t.lower == ".") {
            j + 2
        } else {
            j + 1
        };
        let mut k = after;
        while k < toks.len() && k - after < 2 && name_token(&toks[k]) {
            k += 1;
        }
        if k > after {
            let title = &toks[j].text;
            return with(k, key, format!("{title} {}", render(&toks[after..k])));
        }
    }
    let mut k = j;
    while k < toks.len() && k - j < 3 && name_token(&toks[k]) {
        k += 1;
    }
    // The longest run first, then shorter ones.
    (j + 1..=k)
        .rev()
        .find_map(|e| with(e, key, render(&toks[j..e])))
}

/// A `{thing}`: one or two plain words.
fn match_thing(
    toks: &[Tok],
    j: usize,
    key: &'static str,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    (j + 1..=(j + 2).min(toks.len())).find_map(|e| {
        let words = &toks[j..e];
        let plain = words.iter().all(|t| {
            !t.punct
                && !matches!(t.lower.as_str(), "is" | "'s" | "was")
                && t.lower.chars().all(|c| c.is_alphabetic() || c == '-')
        });
        if plain {
            with(e, key, render(words).to_lowercase())
        } else {
            None
        }
    })
}

/// A `{word:a/b/c}`: one of the list's words.
fn match_word(
    list: &'static str,
    toks: &[Tok],
    j: usize,
    key: &'static str,
    with: &Continue<'_>,
) -> Option<(usize, Captures)> {
    // Adverbs of degree and time step aside here too ("I've gone
    // fully vegan"), not manner ("I'm literally blind without them").
    let mut j = j;
    while toks.get(j).is_some_and(|t| {
        matches!(
            t.lower.as_str(),
            "fully"
                | "completely"
                | "strictly"
                | "entirely"
                | "now"
                | "officially"
                | "finally"
                | "recently"
                | "just"
                | "also"
        ) && !list.split('/').any(|w| w == t.lower)
    }) {
        j += 1;
    }
    let t = toks.get(j)?;
    (!list.is_empty() && list.split('/').any(|w| w == t.lower))
        .then(|| with(j + 1, key, t.lower.clone()))
        .flatten()
}

/// Shape checks of the clause-like slots.
fn slot_shape(slot: Slot, value: &[Tok]) -> bool {
    let first = value[0].lower.as_str();
    match slot {
        Slot::Ing => {
            first.len() > 4
                && first.ends_with("ing")
                && !matches!(
                    first,
                    "thing"
                        | "something"
                        | "anything"
                        | "nothing"
                        | "everything"
                        | "morning"
                        | "evening"
                        | "during"
                        | "spring"
                        | "string"
                        | "sibling"
                        | "bring"
                        | "wedding"
                        | "feeling"
                        | "being"
                        | "going"
                        | "raining"
                        | "snowing"
                        | "pouring"
                )
        }
        Slot::Role => {
            (matches!(first, "a" | "an") && (2..=5).contains(&value.len())) || bare_role(value)
        }
        Slot::Title => {
            value[0].capitalized() || value.iter().any(|t| BOOKISH.contains(&t.lower.as_str()))
        }
        _ => true,
    }
}
