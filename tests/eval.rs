//! `recall eval`: the generated set is what it claims to be (deterministic,
//! long enough, every answer told in the conversation and nowhere else),
//! and a run on one persona reports every category.

use std::collections::{BTreeMap, BTreeSet};

use recall::eval::baseline::{holds, normalize};
use recall::eval::{self, Category, Dataset, EvalOptions, Selection, Split, DEFAULT_SEED};
use recall::Settings;

fn all(seed: u64) -> Dataset {
    eval::dataset(Selection::All, seed, &[]).expect("the set generates")
}

fn text_of<'a>(turns: impl Iterator<Item = &'a recall::eval::generate::Turn>) -> String {
    normalize(
        &turns
            .map(|t| format!("{}\n{}", t.user, t.agent))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[test]
fn the_generator_is_deterministic() {
    let a = all(DEFAULT_SEED);
    assert_eq!(a, all(DEFAULT_SEED));
    let b = all(DEFAULT_SEED + 1);
    assert_ne!(a, b, "another seed, another set");
    // the same facts and questions, told at other times among other talk
    for (x, y) in a.personas.iter().zip(&b.personas) {
        assert_eq!(x.questions, y.questions);
        assert_eq!(x.calls.len(), y.calls.len());
    }
}

#[test]
fn every_persona_has_many_calls_spread_over_months() {
    let set = all(DEFAULT_SEED);
    assert!(set.personas.len() >= 6);
    for p in &set.personas {
        assert!(p.calls.len() >= 40, "{}: {} calls", p.id, p.calls.len());
        let first = p.calls[0].started_at;
        let last = p.calls[p.calls.len() - 1].started_at;
        assert!(
            (last - first).num_days() >= 60,
            "{}: {} days",
            p.id,
            (last - first).num_days()
        );
        let mut same_day = 0;
        for w in p.calls.windows(2) {
            let end = w[0]
                .ended_at
                .unwrap_or(w[0].turns[w[0].turns.len() - 1].at + chrono::Duration::minutes(5));
            assert!(end < w[1].started_at, "{}: calls overlap", p.id);
            if w[0].started_at.date_naive() == w[1].started_at.date_naive() {
                same_day += 1;
            }
        }
        assert!(same_day > 0, "{}: never two calls a day", p.id);
        for c in &p.calls {
            assert!(
                (6..=22).contains(&c.turns.len()),
                "{} {}: {} turns",
                p.id,
                c.connection_id,
                c.turns.len()
            );
            let mut at = c.started_at;
            for t in &c.turns {
                // within the silence timeout (300 s) of the previous turn
                assert!(t.at > at && (t.at - at).num_seconds() < 300);
                at = t.at;
            }
        }
        assert!(p.calls.iter().any(|c| c.ended_at.is_none()));
        assert!(p.calls.iter().any(|c| c.ended_at.is_some()));
        assert!(
            (30..=60).contains(&p.questions.len()),
            "{}: {} questions",
            p.id,
            p.questions.len()
        );
    }
}

#[test]
fn every_answer_is_told_in_its_fact_and_nowhere_else() {
    let set = all(DEFAULT_SEED);
    let mut wrong = Vec::new();
    for p in &set.personas {
        let whole = text_of(p.turns());
        let small_talk = text_of(p.turns().filter(|t| t.fact.is_none()));
        // another user of the same agent
        let others: Vec<_> = set
            .personas
            .iter()
            .filter(|o| o.agent == p.agent && o.user != p.user)
            .map(|o| (o, text_of(o.turns())))
            .collect();
        assert!(!others.is_empty(), "{} shares its agent", p.id);
        for q in &p.questions {
            let told = text_of(p.turns().filter(|t| t.fact.as_deref() == Some(&q.fact)));
            let mut check = |ok: bool, what: String| {
                if !ok {
                    wrong.push(format!("{}: {:?}: {what}", p.id, q.text));
                }
            };
            check(holds(&whole, &q.answers), "not in the conversation".into());
            check(holds(&told, &q.answers), format!("not in fact {}", q.fact));
            check(!holds(&small_talk, &q.answers), "in small talk".into());
            for (o, text) in &others {
                check(
                    !holds(text, &q.answers),
                    format!("in {}'s conversation", o.id),
                );
            }
            if !q.stale.is_empty() {
                check(holds(&whole, &q.stale), "stale answers not told".into());
                check(
                    !q.stale.iter().any(|s| holds(&normalize(s), &q.answers)),
                    "current and stale answers overlap".into(),
                );
            }
            // a question is not its statement: it leaves the answer out
            check(
                !holds(&normalize(&q.text), &q.answers),
                "the question holds its answer".into(),
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_category_has_questions_in_both_splits() {
    let set = all(DEFAULT_SEED);
    let mut per: BTreeMap<(Split, Category), usize> = BTreeMap::new();
    let mut holdout = BTreeSet::new();
    for p in &set.personas {
        if p.split == Split::Holdout {
            holdout.insert(p.id.clone());
        }
        for q in &p.questions {
            *per.entry((p.split, q.category)).or_default() += 1;
        }
    }
    assert!(holdout.len() >= 2);
    for split in [Split::Dev, Split::Holdout] {
        for c in Category::ALL {
            assert!(
                per.get(&(split, c)).copied().unwrap_or(0) >= 2,
                "{c} in {split:?}: {per:?}"
            );
        }
    }
    // the hold-out personas talk to an agent of their own
    let dev_agents: BTreeSet<&str> = set
        .personas
        .iter()
        .filter(|p| p.split == Split::Dev)
        .map(|p| p.agent.as_str())
        .collect();
    assert!(set
        .personas
        .iter()
        .filter(|p| p.split == Split::Holdout)
        .all(|p| !dev_agents.contains(p.agent.as_str())));
}

#[test]
fn a_persona_is_written_as_a_script_simulate_reads() {
    let set = eval::dataset(Selection::Split(Split::Dev), DEFAULT_SEED, &["tom".into()]).unwrap();
    let p = &set.personas[0];
    let events = recall::simulate::parse_script(&p.to_script()).expect("a valid script");
    let turns = events
        .iter()
        .filter(|e| matches!(e.action, recall::simulate::Action::Turn { .. }))
        .count();
    assert_eq!(turns, p.turns().count());
    let dir = tempfile::tempdir().unwrap();
    let written = eval::write_scripts(&set, dir.path()).unwrap();
    assert_eq!(written, vec![dir.path().join("tom.jsonl")]);
}

#[test]
fn a_run_on_one_persona_reports_every_category() {
    let report = eval::run_blocking(EvalOptions {
        selection: Selection::Split(Split::Dev),
        budgets: vec![2000, 4000],
        seed: DEFAULT_SEED,
        settings: Settings::default(),
        personas: vec!["tom".into()],
        lowercase_users: false,
    })
    .expect("the evaluation runs");
    assert_eq!(report.counts.personas, 1);
    assert!(report.counts.calls >= 40);
    assert_eq!(report.counts.questions, report.outcomes.len());
    assert_eq!(report.categories.len(), Category::ALL.len());
    for r in report.categories.iter().chain([&report.overall]) {
        assert!(r.n > 0, "{}", r.category);
        for v in [&r.recall, &r.recency, &r.bm25] {
            assert_eq!(v.len(), 2);
            assert!(v.iter().all(|x| (0.0..=1.0).contains(x)));
        }
        // every answer is in the turns, by construction of the set
        assert_eq!(r.whole, 1.0, "{}", r.category);
    }
    for o in &report.outcomes {
        // a larger window holds everything a smaller one does
        assert!(!o.recency[0] || o.recency[1], "{}", o.question);
        assert!(!(o.recall[0] && o.recall_stale_only[0]));
    }
    // the last call's small talk does not answer questions asked a day
    // later: the recency window holds almost nothing
    assert!(
        report.overall.recency[0] < 0.2,
        "{}",
        report.overall.recency[0]
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["selection"], "dev");
    assert_eq!(
        json["outcomes"].as_array().unwrap().len(),
        report.outcomes.len()
    );
    let text = report.to_text();
    for c in Category::ALL {
        assert!(text.contains(c.as_str()));
    }
    assert!(text.contains("recall@2000") && text.contains("bm25@4000"));
    assert!(!text.contains("lower case") && !report.lowercase_users);
}

#[test]
fn a_run_without_case_replays_and_asks_in_lower_case() {
    let report = eval::run_blocking(EvalOptions {
        selection: Selection::Split(Split::Dev),
        budgets: vec![2000],
        seed: DEFAULT_SEED,
        settings: Settings::default(),
        personas: vec!["tom".into()],
        lowercase_users: true,
    })
    .expect("the evaluation runs");
    assert!(report.lowercase_users);
    assert!(report.to_text().contains("user messages in lower case"));
    for o in &report.outcomes {
        assert_eq!(o.question, o.question.to_lowercase());
        for (_, said) in &o.told {
            assert_eq!(*said, said.to_lowercase(), "{}", o.question);
        }
    }
}

#[test]
fn lowercase_users_takes_the_case_of_the_users_words_only() {
    let set = all(DEFAULT_SEED);
    let mut lower = all(DEFAULT_SEED);
    lower.lowercase_users();
    let turns = |d: &Dataset| -> Vec<recall::eval::generate::Turn> {
        d.personas.iter().flat_map(|p| p.turns().cloned()).collect()
    };
    let (before, after) = (turns(&set), turns(&lower));
    assert_eq!(before.len(), after.len());
    assert!(before
        .iter()
        .any(|t| t.user.chars().any(char::is_uppercase)));
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a.user, b.user.to_lowercase());
        assert_eq!(a.agent, b.agent);
        assert_eq!((a.at, &a.fact), (b.at, &b.fact));
    }
    let questions = |d: &Dataset| -> Vec<String> {
        d.personas
            .iter()
            .flat_map(|p| p.questions.iter().map(|q| q.text.clone()))
            .collect()
    };
    let (before, after) = (questions(&set), questions(&lower));
    assert_eq!(
        after,
        before.iter().map(|q| q.to_lowercase()).collect::<Vec<_>>()
    );
}

#[test]
fn the_cli_default_seed_is_the_evaluations() {
    // `recall eval --seed`'s default is written in the binary, which a
    // build without the evaluation has no library constant for.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["eval", "--help"])
        .output()
        .expect("recall runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains(&format!("[default: {DEFAULT_SEED}]")),
        "{help}"
    );
}
