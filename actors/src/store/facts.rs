//! Facts and their history: reading them, which new facts are worth
//! storing, and where each fact on a one-valued subject stands.
//!
//! A subject (`home`, `employer`, `sister:leela:role`) holds one value at
//! a time. Its facts are grouped by the call they were stated in and put
//! in the order of those calls: the latest call's facts are current, each
//! earlier call's are superseded by the next call's first fact, as of when
//! that was stated. Two values stated in one call are a conflict: the later
//! ones name the first in `conflicts_with`, and both stay current until a
//! later call settles it. This is a function of the set of facts alone, so
//! a late reflection, a replay in any order or a deletion always leaves
//! the same history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreError;
use crate::model::{normalize_fact, EarlierValue, Fact, FactHistory, FactRecord, Speaker};

/// What storing a reflection's facts changes.
#[derive(Debug, Clone, Default)]
pub struct FactChanges {
    /// New facts, their history set.
    pub added: Vec<FactRecord>,
    /// Stored facts whose history or conflict mark changed.
    pub updated: Vec<FactRecord>,
}

/// The facts of `candidates` worth storing against `existing`: one whose
/// content (normalized) the user has is dropped, unless it is a value of a
/// one-valued subject said again after another value replaced it ("we
/// moved back to Austin"), in a call later than any on that subject.
pub fn dedup_facts(existing: &[FactRecord], candidates: Vec<FactRecord>) -> Vec<FactRecord> {
    // (speaker and normalized content, subject, when stated, current): the
    // same words from the other side are another fact
    let mut known: Vec<(String, Option<String>, DateTime<Utc>, bool)> = existing
        .iter()
        .map(|f| (spoken_key(f), f.subject.clone(), f.stated(), f.is_current()))
        .collect();
    let mut out = Vec::new();
    for c in candidates {
        if normalize_fact(&c.content).is_empty() {
            continue;
        }
        let norm = spoken_key(&c);
        let mut same = known.iter().filter(|k| k.0 == norm).peekable();
        let keep = if same.peek().is_none() {
            true
        } else {
            match &c.subject {
                None => false,
                Some(subject) => {
                    let latest = known
                        .iter()
                        .filter(|k| k.1.as_ref() == Some(subject))
                        .map(|k| k.2)
                        .max();
                    same.all(|k| !k.3) && latest.is_some_and(|t| c.stated() > t)
                }
            }
        };
        if keep {
            known.push((norm, c.subject.clone(), c.stated(), c.is_current()));
            out.push(c);
        }
    }
    out
}

/// A fact's normalized content, marked with its speaker when that is the
/// agent side (so that the user's "Has a dog" and the agent side's are two
/// facts).
pub fn spoken_key(f: &Fact) -> String {
    let norm = normalize_fact(&f.content);
    match f.speaker {
        Speaker::User => norm,
        Speaker::Agent => format!("{}{norm}", Speaker::AGENT_SUBJECT),
    }
}

/// What storing `facts` (one reflection's, all about one user, stated in
/// the call that started at `stated_at`) changes against the user's
/// `existing` facts: the new ones worth storing (none that `deleted` says
/// the user deleted) and the stored ones whose place in their subject's
/// history moves. Stored facts on those subjects from before their call's
/// time was kept get it from their session (`started`).
pub fn plan_fact_changes(
    existing: Vec<FactRecord>,
    facts: &[Fact],
    stated_at: DateTime<Utc>,
    mut deleted: impl FnMut(&FactRecord) -> Result<bool, StoreError>,
    mut started: impl FnMut(Uuid) -> Result<Option<DateTime<Utc>>, StoreError>,
) -> Result<FactChanges, StoreError> {
    let candidates: Vec<FactRecord> = facts
        .iter()
        .map(|f| FactRecord {
            fact: Fact {
                conflicts_with: None,
                ..f.clone()
            },
            history: FactHistory {
                stated_at: Some(stated_at),
                ..FactHistory::default()
            },
        })
        .collect();
    let mut added = Vec::new();
    for f in dedup_facts(&existing, candidates) {
        if !deleted(&f)? {
            added.push(f);
        }
    }
    let subjects: BTreeSet<String> = facts.iter().filter_map(|f| f.subject.clone()).collect();
    let mut updated: BTreeMap<Uuid, FactRecord> = BTreeMap::new();
    let mut all = existing;
    for f in all.iter_mut() {
        let on_subject = f.subject.as_ref().is_some_and(|s| subjects.contains(s));
        if on_subject && f.history.stated_at.is_none() {
            if let Some(id) = f.source_session_id {
                f.history.stated_at = started(id)?;
                if f.history.stated_at.is_some() {
                    updated.insert(f.fact_id, f.clone());
                }
            }
        }
    }
    all.extend(added.iter().cloned());
    for f in reconcile_facts(&all, &subjects) {
        match added.iter_mut().find(|a| a.fact_id == f.fact_id) {
            Some(a) => *a = f,
            None => {
                updated.insert(f.fact_id, f);
            }
        }
    }
    Ok(FactChanges {
        added,
        updated: updated.into_values().collect(),
    })
}

/// Places every fact on each of `subjects` in its subject's history (see
/// the module doc). Returns the facts of `facts` whose history or conflict
/// mark that changes, changed.
pub fn reconcile_facts(facts: &[FactRecord], subjects: &BTreeSet<String>) -> Vec<FactRecord> {
    let mut changed = Vec::new();
    for subject in subjects {
        // call → its facts, calls in the order they were stated
        let mut calls: BTreeMap<Uuid, Vec<&FactRecord>> = BTreeMap::new();
        for f in facts.iter().filter(|f| f.subject.as_ref() == Some(subject)) {
            let call = f.source_session_id.unwrap_or(f.fact_id);
            calls.entry(call).or_default().push(f);
        }
        let mut calls: Vec<Vec<&FactRecord>> = calls.into_values().collect();
        for c in &mut calls {
            c.sort_by_key(|f| (f.stated(), f.fact_id));
        }
        calls.sort_by_key(|c| (c[0].stated(), c[0].fact_id));
        for (i, call) in calls.iter().enumerate() {
            let next = calls.get(i + 1).map(|n| (n[0].fact_id, n[0].stated()));
            let first = call[0].fact_id;
            for (j, f) in call.iter().enumerate() {
                let history = FactHistory {
                    stated_at: f.history.stated_at,
                    superseded_by: next.map(|n| n.0),
                    superseded_at: next.map(|n| n.1),
                };
                let conflicts_with = (j > 0).then_some(first);
                if history != f.history || conflicts_with != f.conflicts_with {
                    let mut f = (*f).clone();
                    f.history = history;
                    f.fact.conflicts_with = conflicts_with;
                    changed.push(f);
                }
            }
        }
    }
    changed
}

/// For each current fact of `facts` that replaced another of `facts`: the
/// latest value it replaced, by the current fact's id.
pub fn earlier_values<'a, I>(facts: I) -> HashMap<Uuid, EarlierValue>
where
    I: IntoIterator<Item = &'a FactRecord> + Clone,
{
    let mut out: HashMap<Uuid, EarlierValue> = HashMap::new();
    for f in facts.clone() {
        let (Some(by), Some(until)) = (f.history.superseded_by, f.history.superseded_at) else {
            continue;
        };
        if out.get(&by).is_some_and(|e| e.until >= until) {
            continue;
        }
        out.insert(
            by,
            EarlierValue {
                fact_id: f.fact_id,
                content: f.content.clone(),
                stated_at: f.stated(),
                until,
            },
        );
    }
    let current: BTreeSet<Uuid> = facts
        .into_iter()
        .filter(|f| f.is_current())
        .map(|f| f.fact_id)
        .collect();
    out.retain(|id, _| current.contains(id));
    out
}

/// Facts in the order every listing gives them: oldest extracted first.
pub(crate) fn sorted_facts(mut facts: Vec<FactRecord>) -> Vec<FactRecord> {
    facts.sort_by_key(|f| (f.extracted_at, f.fact_id));
    facts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Visibility;
    use chrono::{Duration, TimeZone};

    fn at(day: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap() + Duration::days(day)
    }

    fn record(content: &str, subject: Option<&str>, call: u128, day: i64) -> FactRecord {
        FactRecord {
            fact: Fact {
                fact_id: Uuid::new_v4(),
                agent_id: "kairix".into(),
                user_id: "mark".into(),
                category: crate::model::FactCategory::Biographical,
                content: content.into(),
                subject: subject.map(str::to_string),
                visibility: Visibility::Private,
                source_session_id: Some(Uuid::from_u128(call)),
                extracted_at: at(40),
                conflicts_with: None,
                speaker: Default::default(),
            },
            history: FactHistory {
                stated_at: Some(at(day)),
                ..FactHistory::default()
            },
        }
    }

    fn apply(all: &mut [FactRecord], changed: Vec<FactRecord>) {
        for c in changed {
            if let Some(f) = all.iter_mut().find(|f| f.fact_id == c.fact_id) {
                *f = c;
            }
        }
    }

    #[test]
    fn a_later_call_supersedes_and_the_order_of_arrival_does_not_matter() {
        let austin = record("Lives in Austin", Some("home"), 1, 0);
        let denver = record("Moved to Denver", Some("home"), 2, 1);
        let porto = record("Lives in Porto", Some("home"), 3, 5);
        let subjects = BTreeSet::from(["home".to_string()]);
        let expect = |all: &[FactRecord]| {
            let by = |c: &str| all.iter().find(|f| f.content == c).unwrap().clone();
            let (a, d, p) = (
                by("Lives in Austin"),
                by("Moved to Denver"),
                by("Lives in Porto"),
            );
            assert_eq!(
                (a.history.superseded_by, a.history.superseded_at),
                (Some(d.fact_id), Some(at(1)))
            );
            assert_eq!(
                (d.history.superseded_by, d.history.superseded_at),
                (Some(p.fact_id), Some(at(5)))
            );
            assert!(p.is_current());
            assert!(all.iter().all(|f| f.conflicts_with.is_none()));
            let earlier = earlier_values(all);
            assert_eq!(earlier.len(), 1);
            assert_eq!(earlier[&p.fact_id].content, "Moved to Denver");
            assert_eq!(earlier[&p.fact_id].until, at(5));
        };
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let facts = [austin.clone(), denver.clone(), porto.clone()];
            let mut all: Vec<FactRecord> = order.iter().map(|&i| facts[i].clone()).collect();
            // one at a time, as reflections arrive
            for n in 1..=all.len() {
                let changed = reconcile_facts(&all[..n], &subjects);
                apply(&mut all, changed);
            }
            expect(&all);
            assert!(reconcile_facts(&all, &subjects).is_empty(), "stable");
        }
    }

    #[test]
    fn two_values_in_one_call_conflict_and_a_later_call_settles_them() {
        let subjects = BTreeSet::from(["employer".to_string()]);
        let mut all = vec![
            record("Works at Initech", Some("employer"), 1, 0),
            record("Works at Globex", Some("employer"), 1, 0),
        ];
        let changed = reconcile_facts(&all, &subjects);
        apply(&mut all, changed);
        assert!(all.iter().all(FactRecord::is_current));
        let flagged: Vec<_> = all.iter().filter_map(|f| f.conflicts_with).collect();
        assert_eq!(flagged.len(), 1);
        all.push(record("Works at Hooli", Some("employer"), 2, 3));
        let changed = reconcile_facts(&all, &subjects);
        apply(&mut all, changed);
        let current: Vec<_> = all
            .iter()
            .filter(|f| f.is_current())
            .map(|f| &f.content)
            .collect();
        assert_eq!(current, ["Works at Hooli"]);
    }

    #[test]
    fn a_value_said_again_after_another_replaced_it_is_back() {
        let mut all = vec![
            record("Lives in Austin", Some("home"), 1, 0),
            record("Lives in Denver", Some("home"), 2, 1),
        ];
        let changed = reconcile_facts(&all, &BTreeSet::from(["home".to_string()]));
        apply(&mut all, changed);
        // the first call replayed: nothing new
        let again = record("lives in austin.", Some("home"), 1, 0);
        assert!(dedup_facts(&all, vec![again]).is_empty());
        // a later call: Austin again
        let back = record("Lives in Austin", Some("home"), 3, 9);
        assert_eq!(dedup_facts(&all, vec![back.clone()]).len(), 1);
        // without a subject, a fact is known once
        let pref = record("Prefers tea", None, 1, 0);
        all.push(pref);
        assert!(dedup_facts(&all, vec![record("prefers tea", None, 4, 10)]).is_empty());
    }
}
