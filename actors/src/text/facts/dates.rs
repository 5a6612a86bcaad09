//! Dates as a rule's `{date}` slot reads them: a month with a day's
//! number or ordinal ("March 3rd", "the twelfth of June"), a date in
//! digits ("3/8"), a year.

use super::tokens::Tok;
use crate::lang::fact_words::ORDINAL_WORDS;
use crate::lang::MONTHS;

fn is_ordinal_day(w: &str) -> bool {
    if ORDINAL_WORDS.contains(&w)
        || w.strip_prefix("twenty-")
            .or_else(|| w.strip_prefix("thirty-"))
            .is_some_and(|rest| ORDINAL_WORDS[..9].contains(&rest))
    {
        return true;
    }
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    !digits.is_empty()
        && digits.len() <= 2
        && digits.chars().all(|c| c.is_ascii_digit())
        && matches!(suffix, "" | "st" | "nd" | "rd" | "th")
        && digits.parse::<u32>().is_ok_and(|d| (1..=31).contains(&d))
}

/// A day of the month written as a number with its suffix ("3rd", "14th"),
/// or a date in digits ("3/8").
pub(in crate::text) fn is_day_number(w: &str) -> bool {
    is_numeric_date(w)
        || w.len() > 2
            && w.ends_with(|c: char| c.is_ascii_alphabetic())
            && is_ordinal_day(w)
            && w.starts_with(|c: char| c.is_ascii_digit())
}

fn is_numeric_date(w: &str) -> bool {
    let parts: Vec<&str> = w.split(['/', '-']).collect();
    parts.len() >= 2
        && parts.len() <= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
}

pub(super) fn date_end(toks: &[Tok], j: usize) -> Option<usize> {
    let mut k = j;
    let mut month = false;
    while k < toks.len() && k - j < 6 {
        let t = &toks[k];
        if t.punct {
            break;
        }
        let w = t.lower.as_str();
        // "may" is the month written so, or beside a day's number ("may
        // 14th", "the 14th of may": a transcript writes no capitals).
        let is_month = MONTHS.contains(&w)
            && (w != "may"
                || t.capitalized()
                || toks.get(k + 1).is_some_and(|n| is_ordinal_day(&n.lower))
                || (k >= j + 2 && toks[k - 1].lower == "of" && is_ordinal_day(&toks[k - 2].lower)));
        if is_month || is_numeric_date(w) {
            month = true;
        } else if !(is_ordinal_day(w)
            || matches!(w, "the" | "of")
            || (matches!(w, "twenty" | "thirty")
                && toks
                    .get(k + 1)
                    .is_some_and(|n| ORDINAL_WORDS[..9].contains(&n.lower.as_str())))
            || (w.len() == 4 && w.chars().all(|c| c.is_ascii_digit())))
        {
            break;
        }
        k += 1;
    }
    while k > j && matches!(toks[k - 1].lower.as_str(), "the" | "of") {
        k -= 1;
    }
    (month && k > j).then_some(k)
}
