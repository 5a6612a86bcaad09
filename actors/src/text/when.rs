//! Relative time in what was said, resolved against the day it was said:
//! "I got the engine running yesterday", said on Tuesday 12 March 2024,
//! becomes "… yesterday (Monday 11 March 2024)", so a context can answer
//! "when" questions the words alone cannot.
//!
//! The date crates parse a text that *is* a date expression; here the
//! expressions are found inside speech, so finding them is this module's
//! and the calendar arithmetic is chrono's. Handled (case ignored):
//!
//! | said | resolved to |
//! |---|---|
//! | yesterday, the day before yesterday | the day, one or two before |
//! | tomorrow, the day after tomorrow | the day, one or two after |
//! | last Saturday | the latest Saturday before the day said |
//! | this Saturday, next Saturday | the first Saturday after the day said |
//! | (on) Saturday | the one after, or the one before when the sentence speaks of the past (a past-tense verb — "was", "fixed", an irregular past from the search lexicon's table, "put" — and no "will"/"going to") |
//! | this weekend, next weekend, last weekend | its Saturday and Sunday |
//! | N days / weeks ago, a week ago, a fortnight ago, a couple of days ago | the day, N days or 7·N days before |
//! | in N days / weeks, N days from now | the day, after |
//! | last week, next week | the week, by its Monday |
//! | last month, next month | the month and year |
//! | last year, next year | the year |
//! | (on) the 14th | the 14th of the month said in, or of the one before (after) when that day has not come (has passed) |
//!
//! N is a digit or a number word up to twelve, "a", "one", "a couple of".
//! Weekdays and months stay as the speaker's; a resolution is added in
//! brackets after the expression, never in its place.

use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// `text` with each relative time expression followed by the date it
/// means, said on `day`. The text unchanged when it holds none.
pub fn resolve_relative_dates(text: &str, day: NaiveDate) -> String {
    let spans = find(text, day);
    if spans.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + spans.len() * 28);
    let mut from = 0;
    for (end, resolved) in spans {
        out.push_str(&text[from..end]);
        out.push_str(" (");
        out.push_str(&resolved);
        out.push(')');
        from = end;
    }
    out.push_str(&text[from..]);
    out
}

/// A word of the text: its lowercased letters and digits, and where it
/// ends in the text.
struct Word {
    w: String,
    /// Where it starts and ends in the text.
    start: usize,
    end: usize,
    /// Whether it was written with a capital.
    capital: bool,
    /// The sentence it is in (index).
    sentence: usize,
}

fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut sentence = 0;
    let (mut start, mut last_end, mut capital) = (0, 0, false);
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() || (c == '\'' && !cur.is_empty()) {
            if cur.is_empty() {
                (start, capital) = (i, c.is_uppercase());
            }
            cur.extend(c.to_lowercase());
            last_end = i + c.len_utf8();
        } else {
            if !cur.is_empty() {
                out.push(Word {
                    w: std::mem::take(&mut cur),
                    start,
                    end: last_end,
                    capital,
                    sentence,
                });
            }
            if matches!(c, '.' | '!' | '?' | ';') {
                sentence += 1;
            }
        }
    }
    if !cur.is_empty() {
        out.push(Word {
            w: cur,
            start,
            end: last_end,
            capital,
            sentence,
        });
    }
    out
}

/// The weekday a lowercased word names in full ("friday", "fridays").
/// (Not chrono's `Weekday::from_str`: it takes the short forms too, and
/// "sat", "sun" and "wed" are everyday words in speech.)
fn weekday(w: &str) -> Option<Weekday> {
    Some(match w {
        "monday" | "mondays" => Weekday::Mon,
        "tuesday" | "tuesdays" => Weekday::Tue,
        "wednesday" | "wednesdays" => Weekday::Wed,
        "thursday" | "thursdays" => Weekday::Thu,
        "friday" | "fridays" => Weekday::Fri,
        "saturday" | "saturdays" => Weekday::Sat,
        "sunday" | "sundays" => Weekday::Sun,
        _ => return None,
    })
}

fn number(w: &str) -> Option<i64> {
    if let Ok(n) = w.parse::<i64>() {
        return (1..=60).contains(&n).then_some(n);
    }
    Some(match w {
        "a" | "an" | "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        "eleven" => 11,
        "twelve" => 12,
        _ => return None,
    })
}

/// Day of the month from "14th", "1st", "22nd", "3rd".
fn ordinal_day(w: &str) -> Option<u32> {
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))?;
    let n: u32 = digits.parse().ok()?;
    (1..=31).contains(&n).then_some(n)
}

fn is_month(w: &str) -> bool {
    super::MONTHS[..12].contains(&w)
}

/// "Saturday 9 March 2024".
fn day_text(d: NaiveDate) -> String {
    d.format("%A %-d %B %Y").to_string()
}

/// "March 2024".
fn month_text(d: NaiveDate) -> String {
    d.format("%B %Y").to_string()
}

fn weekend_text(saturday: NaiveDate) -> String {
    format!(
        "{} – {}",
        day_text(saturday),
        day_text(saturday + Duration::days(1))
    )
}

/// Whether the sentence speaks of the past: a past-tense word and no word
/// of the future. A sentence with neither ("The skate park, on
/// Saturday.") takes the tense of the whole text it is in ("He tried a
/// jump and landed on his hand."); a text with neither is taken to speak
/// of what is to come ("I'm seeing her on Thursday").
fn past_tense(words: &[Word], sentence: usize) -> bool {
    tense(words, Some(sentence))
        .or_else(|| tense(words, None))
        .unwrap_or(false)
}

/// The tense of one sentence (of every sentence, with `None`): `Some(true)`
/// for the past, `Some(false)` for the future, `None` when no word tells.
fn tense(words: &[Word], sentence: Option<usize>) -> Option<bool> {
    // Past forms the irregular-verb table leaves out (they are nouns
    // too, or the present's form), and the auxiliaries.
    const PAST: &[&str] = &[
        "was", "were", "did", "had", "went", "got", "came", "made", "said", "told", "saw", "met",
        "left", "felt", "put", "set", "cut", "hit", "shut", "quit", "hurt", "ago",
    ];
    const FUTURE: &[&str] = &[
        "will", "i'll", "we'll", "you'll", "he'll", "she'll", "they'll", "it'll", "gonna", "going",
        "shall", "tomorrow", "next", "planning", "plan",
    ];
    // "I've got", "she's got": having, not a past.
    let of: Vec<&str> = words
        .iter()
        .filter(|w| sentence.is_none_or(|s| w.sentence == s))
        .map(|w| w.w.as_str())
        .collect();
    let had = |k: usize| {
        of[k] == "got"
            && k > 0
            // (a curly apostrophe splits "I’ve" into "i" and "ve")
            && (matches!(of[k - 1], "have" | "has" | "ve" | "s")
                || of[k - 1].ends_with("'ve")
                || (of[k - 1].ends_with("'s") && of[k - 1] != "let's"))
    };
    if of.iter().any(|w| FUTURE.contains(w)) {
        return Some(false);
    }
    of.iter()
        .enumerate()
        .filter(|&(k, _)| !had(k))
        .any(|(_, w)| {
            PAST.contains(w)
                || crate::lang::is_irregular_past(w)
                || (w.len() > 4 && w.ends_with("ed") && !w.ends_with("eed"))
        })
        .then_some(true)
}

/// The first `wd` after `day` (1–7 days on).
fn next_weekday(day: NaiveDate, wd: Weekday) -> NaiveDate {
    let ahead =
        (wd.num_days_from_monday() as i64 - day.weekday().num_days_from_monday() as i64 + 7) % 7;
    day + Duration::days(if ahead == 0 { 7 } else { ahead })
}

/// The latest `wd` before `day` (1–7 days back).
fn last_weekday(day: NaiveDate, wd: Weekday) -> NaiveDate {
    let back =
        (day.weekday().num_days_from_monday() as i64 - wd.num_days_from_monday() as i64 + 7) % 7;
    day - Duration::days(if back == 0 { 7 } else { back })
}

fn monday_of(day: NaiveDate) -> NaiveDate {
    day - Duration::days(day.weekday().num_days_from_monday() as i64)
}

fn add_months(day: NaiveDate, months: i32) -> NaiveDate {
    let m0 = day.year() * 12 + day.month0() as i32 + months;
    NaiveDate::from_ymd_opt(m0.div_euclid(12), m0.rem_euclid(12) as u32 + 1, 1).unwrap_or(day)
}

/// The expressions found: where each ends in the text and what it means.
fn find(text: &str, day: NaiveDate) -> Vec<(usize, String)> {
    let ws = words(text);
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < ws.len() {
        match expression_at(text, &ws, i, day) {
            Some((last, text)) => {
                out.push((ws[last].end, text));
                i = last + 1;
            }
            None => i += 1,
        }
    }
    out
}

/// The word at `i`, empty past the last.
fn word_at(ws: &[Word], i: usize) -> &str {
    ws.get(i).map(|x| x.w.as_str()).unwrap_or("")
}

/// The expression that starts at word `i`, if one does: the index of its
/// last word and what it means.
fn expression_at(text: &str, ws: &[Word], i: usize, day: NaiveDate) -> Option<(usize, String)> {
    let w = |i: usize| word_at(ws, i);
    let here = w(i);
    // "the day before yesterday", "the day after tomorrow"
    if here == "day" && w(i + 1) == "before" && w(i + 2) == "yesterday" {
        Some((i + 2, day_text(day - Duration::days(2))))
    } else if here == "day" && w(i + 1) == "after" && w(i + 2) == "tomorrow" {
        Some((i + 2, day_text(day + Duration::days(2))))
    } else if here == "yesterday" {
        Some((i, day_text(day - Duration::days(1))))
    } else if here == "tomorrow" {
        Some((i, day_text(day + Duration::days(1))))
    } else if matches!(here, "last" | "this" | "next" | "past" | "coming") {
        relative_to(here, w(i + 1), i, day)
    } else if let Some(wd) = weekday(here) {
        lone_weekday(text, ws, i, wd, day)
    } else if let Some(n) = number(here) {
        span_of_days(ws, i, n, day)
    } else if here == "fortnight" && w(i + 1) == "ago" {
        Some((i + 1, day_text(day - Duration::days(14))))
    } else if here == "the" {
        day_of_month(ws, i, day)
    } else {
        None
    }
}

/// "last", "this", "next", "past" or "coming" (`here`, word `i`) before
/// a weekday, "weekend", "week", "month" or "year" (`next`).
fn relative_to(here: &str, next: &str, i: usize, day: NaiveDate) -> Option<(usize, String)> {
    if let Some(wd) = weekday(next) {
        let d = if matches!(here, "last" | "past") {
            last_weekday(day, wd)
        } else {
            next_weekday(day, wd)
        };
        Some((i + 1, day_text(d)))
    } else if next == "weekend" {
        let saturday = match here {
            "last" | "past" => last_weekday(day, Weekday::Sat),
            // said on the weekend, "this weekend" is the one it is in
            "this" if day.weekday() == Weekday::Sun => day - Duration::days(1),
            "this" if day.weekday() == Weekday::Sat => day,
            _ => next_weekday(day, Weekday::Sat),
        };
        Some((i + 1, weekend_text(saturday)))
    } else if next == "week" && here != "this" {
        let monday = monday_of(day)
            + Duration::days(if matches!(here, "last" | "past") {
                -7
            } else {
                7
            });
        Some((i + 1, format!("the week of {}", day_text(monday))))
    } else if next == "month" && here != "this" {
        let m = add_months(
            day,
            if matches!(here, "last" | "past") {
                -1
            } else {
                1
            },
        );
        Some((i + 1, month_text(m)))
    } else if next == "year" && here != "this" {
        let y = day.year()
            + if matches!(here, "last" | "past") {
                -1
            } else {
                1
            };
        Some((i + 1, y.to_string()))
    } else {
        None
    }
}

/// A weekday on its own ("on Thursday", "Thursday we went") at word `i`:
/// not one a word before already resolved, nor a date's ("Thursday 14
/// March"), nor a habit ("on Thursdays").
fn lone_weekday(
    text: &str,
    ws: &[Word],
    i: usize,
    wd: Weekday,
    day: NaiveDate,
) -> Option<(usize, String)> {
    let w = |i: usize| word_at(ws, i);
    let here = w(i);
    let before = if i > 0 { w(i - 1) } else { "" };
    // A capitalized word right before it, within a sentence (a
    // sentence's first word has its capital anyway: "Still
    // Friday?"), that no relative expression starts with makes it
    // part of a name ("on Good Friday", "the Black Friday sales",
    // "a Happy Sunday"): a day of its own, or today's.
    let named = i > 1
        && ws[i - 1].capital
        && ws[i - 2].sentence == ws[i - 1].sentence
        && text[ws[i - 1].end..ws[i].start]
            .chars()
            .all(char::is_whitespace)
        && !matches!(
            before,
            "on" | "by" | "until" | "till" | "since" | "from" | "before" | "after" | "that"
        );
    let dated = w(i + 1).parse::<u32>().is_ok()
        || ordinal_day(w(i + 1)).is_some()
        || is_month(w(i + 1))
        || (w(i + 1) == "the" && ordinal_day(w(i + 2)).is_some());
    if !matches!(
        before,
        "last" | "this" | "next" | "past" | "coming" | "every"
    ) && !dated
        && !named
        && !here.ends_with('s')
    {
        let d = if past_tense(ws, ws[i].sentence) {
            last_weekday(day, wd)
        } else {
            next_weekday(day, wd)
        };
        Some((i, day_text(d)))
    } else {
        None
    }
}

/// "two days ago", "a couple of weeks ago", "in three days", "three
/// days from now": `n` (word `i`) days, weeks or fortnights.
fn span_of_days(ws: &[Word], i: usize, n: i64, day: NaiveDate) -> Option<(usize, String)> {
    let w = |i: usize| word_at(ws, i);
    let here = w(i);
    let (n, unit_at) = if here == "a" && w(i + 1) == "couple" && w(i + 2) == "of" {
        (2, i + 3)
    } else {
        (n, i + 1)
    };
    let unit = match w(unit_at) {
        "day" | "days" => Some(1),
        "week" | "weeks" => Some(7),
        "fortnight" => Some(14),
        _ => None,
    };
    if let Some(unit) = unit {
        let span = n * unit;
        let prev = if i > 0 { w(i - 1) } else { "" };
        if w(unit_at + 1) == "ago" {
            return Some((unit_at + 1, day_text(day - Duration::days(span))));
        } else if prev == "in" || (w(unit_at + 1) == "from" && w(unit_at + 2) == "now") {
            let end = if prev == "in" { unit_at } else { unit_at + 2 };
            return Some((end, day_text(day + Duration::days(span))));
        }
    }
    None
}

/// "on the 14th" (word `i` is "the"), not "the 14th of March" / "March
/// the 14th": the day of the month said in, or of the month before or
/// after.
fn day_of_month(ws: &[Word], i: usize, day: NaiveDate) -> Option<(usize, String)> {
    let w = |i: usize| word_at(ws, i);
    if let Some(d) = ordinal_day(w(i + 1)) {
        let named_month = (w(i + 2) == "of" && is_month(w(i + 3)))
            || is_month(w(i + 2))
            || (i > 0 && is_month(w(i - 1)));
        if !named_month {
            let past = past_tense(ws, ws[i].sentence);
            let this = NaiveDate::from_ymd_opt(day.year(), day.month(), d);
            let resolved = match this {
                Some(t) if past && t < day => Some(t),
                Some(t) if !past && t > day => Some(t),
                _ => {
                    let other = add_months(day, if past { -1 } else { 1 });
                    NaiveDate::from_ymd_opt(other.year(), other.month(), d)
                }
            };
            if let Some(r) = resolved {
                return Some((i + 1, day_text(r)));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tuesday 12 March 2024.
    fn tue() -> NaiveDate {
        NaiveDate::from_ymd_opt(2024, 3, 12).unwrap()
    }

    fn r(text: &str) -> String {
        resolve_relative_dates(text, tue())
    }

    #[test]
    fn days_either_side() {
        assert_eq!(
            r("I finally got the engine running yesterday."),
            "I finally got the engine running yesterday (Monday 11 March 2024)."
        );
        assert_eq!(
            r("The parcel comes tomorrow, or the day after tomorrow"),
            "The parcel comes tomorrow (Wednesday 13 March 2024), or the day after tomorrow (Thursday 14 March 2024)"
        );
        assert_eq!(
            r("She rang the day before yesterday"),
            "She rang the day before yesterday (Sunday 10 March 2024)"
        );
    }

    #[test]
    fn a_weekday_in_a_name_is_not_resolved() {
        for said in [
            "The Black Friday sales were mobbed.",
            "We always have lamb on Easter Sunday.",
            "We gave up sweets on Ash Wednesday.",
            "And a Happy Sunday to you, love!",
            "Is Good Friday a bank holiday here?",
            "We're watching Super Bowl Sunday at Dev's.",
        ] {
            assert_eq!(r(said), said);
        }
        // a capital that starts a relative expression, or a sentence, is
        // no name; nor one a comma parts from the day
        assert_eq!(
            r("On Friday we drove up."),
            "On Friday (Friday 8 March 2024) we drove up."
        );
        assert_eq!(
            r("Until Friday, she's off."),
            "Until Friday (Friday 15 March 2024), she's off."
        );
        assert_eq!(
            r("Yes, Friday we drove up."),
            "Yes, Friday (Friday 8 March 2024) we drove up."
        );
        assert_eq!(
            r("Are you off then? Still Friday?"),
            "Are you off then? Still Friday (Friday 15 March 2024)?"
        );
    }

    #[test]
    fn having_got_something_is_not_the_past() {
        // "I've got a ticket": no past tense, so the day is the next one
        for said in [
            "Thursday, I've got the dentist.",
            "Thursday, she's got a match.",
            "Thursday, I’ve got the dentist.",
            "Thursday, we have got tickets.",
        ] {
            assert!(r(said).contains("(Thursday 14 March 2024)"), "{said}");
        }
        assert!(r("Thursday, I got the tickets.").contains("(Thursday 7 March 2024)"));
    }

    #[test]
    fn weekdays_last_this_next_and_by_tense() {
        assert_eq!(
            r("We sailed last Saturday"),
            "We sailed last Saturday (Saturday 9 March 2024)"
        );
        assert_eq!(
            r("Next Friday is the gig"),
            "Next Friday (Friday 15 March 2024) is the gig"
        );
        // a weekday alone: the past one when the sentence is in the past
        assert_eq!(
            r("The vet came round on Thursday."),
            "The vet came round on Thursday (Thursday 7 March 2024)."
        );
        assert_eq!(
            r("I'm seeing her on Thursday."),
            "I'm seeing her on Thursday (Thursday 14 March 2024)."
        );
        assert_eq!(
            r("I'll drive over Monday. We painted it on Sunday."),
            "I'll drive over Monday (Monday 18 March 2024). We painted it on Sunday (Sunday 10 March 2024)."
        );
        // habits and dates are left alone
        assert_eq!(r("I swim on Mondays"), "I swim on Mondays");
        assert_eq!(r("It was Friday 8 March"), "It was Friday 8 March");
    }

    #[test]
    fn weekends_weeks_months_years() {
        assert_eq!(
            r("this weekend"),
            "this weekend (Saturday 16 March 2024 – Sunday 17 March 2024)"
        );
        assert_eq!(
            r("Last weekend we moved."),
            "Last weekend (Saturday 9 March 2024 – Sunday 10 March 2024) we moved."
        );
        assert_eq!(
            r("last week"),
            "last week (the week of Monday 4 March 2024)"
        );
        assert_eq!(r("next month"), "next month (April 2024)");
        assert_eq!(
            resolve_relative_dates("last month", NaiveDate::from_ymd_opt(2024, 1, 20).unwrap()),
            "last month (December 2023)"
        );
        assert_eq!(r("since last year"), "since last year (2023)");
        // "this week" says no more than the call's date
        assert_eq!(r("busy this week"), "busy this week");
    }

    #[test]
    fn spans_ago_and_ahead() {
        assert_eq!(
            r("I started two weeks ago"),
            "I started two weeks ago (Tuesday 27 February 2024)"
        );
        assert_eq!(
            r("a couple of days ago"),
            "a couple of days ago (Sunday 10 March 2024)"
        );
        assert_eq!(
            r("about 3 days ago"),
            "about 3 days ago (Saturday 9 March 2024)"
        );
        assert_eq!(
            r("a fortnight ago"),
            "a fortnight ago (Tuesday 27 February 2024)"
        );
        assert_eq!(r("in ten days"), "in ten days (Friday 22 March 2024)");
        assert_eq!(
            r("a week from now"),
            "a week from now (Tuesday 19 March 2024)"
        );
        // a number of days that is not a span in time
        assert_eq!(r("it takes two days"), "it takes two days");
    }

    #[test]
    fn the_day_of_the_month() {
        assert_eq!(
            r("The scan is on the 20th."),
            "The scan is on the 20th (Wednesday 20 March 2024)."
        );
        assert_eq!(
            r("It arrived on the 5th."),
            "It arrived on the 5th (Tuesday 5 March 2024)."
        );
        // a day already past, said of the future: next month's
        assert_eq!(
            r("My appointment is on the 2nd"),
            "My appointment is on the 2nd (Tuesday 2 April 2024)"
        );
        // a sentence without a verb takes the tense of the text it is in
        assert_eq!(
            r("The skate park, on Saturday. He tried a jump and landed badly."),
            "The skate park, on Saturday (Saturday 9 March 2024). He tried a jump and landed badly."
        );
        // an irregular past, or one the same as the present, is the past
        assert_eq!(
            r("We bought it on Friday"),
            "We bought it on Friday (Friday 8 March 2024)"
        );
        assert_eq!(
            r("I put them in on Sunday"),
            "I put them in on Sunday (Sunday 10 March 2024)"
        );
        // with its month it needs nothing
        assert_eq!(r("on the 14th of June"), "on the 14th of June");
        assert_eq!(r("June the 14th"), "June the 14th");
    }

    #[test]
    fn text_without_expressions_is_unchanged() {
        assert_eq!(
            r("Nothing to resolve here, honestly."),
            "Nothing to resolve here, honestly."
        );
    }
}
