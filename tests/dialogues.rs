//! The dialogue split (`eval/dialogues/`): every file reads and holds
//! what its questions ask (without replaying anything: the hold-out's
//! results are looked at once per piece of work, not here), and a fixed
//! part of dev is replayed and held to the figure committed in
//! `eval/dialogues/ci-figure.txt`.

use std::path::Path;

use recall::eval::baseline::normalize;
use recall::eval::data::Split;
use recall::eval::dialogue::{self, holds_any, DialogueOptions, Kind, Side};
use recall::Settings;

fn dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/eval/dialogues"))
}

#[test]
fn every_dialogue_file_reads_and_holds_its_answers() {
    let all = dialogue::load(dir(), None, &[]).expect("the dialogue files read");
    let dev = all.iter().filter(|c| c.split == Split::Dev).count();
    let holdout = all.len() - dev;
    assert!(dev >= 5 && holdout >= 3, "{dev} dev, {holdout} hold-out");
    let questions: usize = all.iter().map(|c| c.questions.len()).sum();
    assert!(questions >= 400, "{questions} questions");
    let mut agent_side = 0;
    for c in &all {
        assert!(c.calls.len() >= 15, "{}: {} calls", c.id, c.calls.len());
        let side_text = |user: bool| {
            normalize(
                &c.calls
                    .iter()
                    .flat_map(|x| &x.turns)
                    .map(|(u, a)| if user { u.as_str() } else { a.as_str() })
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        };
        let (user, agent) = (side_text(true), side_text(false));
        let both = format!("{user}{agent}");
        for q in &c.questions {
            agent_side += usize::from(q.side == Side::Agent);
            if q.kind == Kind::Temporal || q.dated {
                continue; // a date may be worked out from the call's, not said
            }
            let text = match q.side {
                Side::User => &user,
                Side::Agent => &agent,
                Side::Both => &both,
            };
            assert!(
                holds_any(text, &q.answers),
                "{}:{}: the answer is not in the {} side's words",
                c.id,
                q.line,
                q.side.as_str()
            );
        }
    }
    // About half the answers are the agent side's.
    assert!(
        agent_side * 10 >= questions * 4,
        "{agent_side} of {questions}"
    );
}

/// The committed figure: the conversations, the budget and recall's share.
fn committed() -> (Vec<String>, usize, f64) {
    let text = std::fs::read_to_string(dir().join("ci-figure.txt")).expect("ci-figure.txt");
    let mut convs = Vec::new();
    let (mut budget, mut recall) = (None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once(' ').expect("`key value` lines");
        match key {
            "conversations" => convs = value.split_whitespace().map(String::from).collect(),
            "budget" => budget = value.trim().parse().ok(),
            "recall" => recall = value.trim().parse().ok(),
            other => panic!("unknown key {other:?} in ci-figure.txt"),
        }
    }
    (
        convs,
        budget.expect("a budget"),
        recall.expect("a recall figure"),
    )
}

#[test]
fn dev_dialogues_hold_the_committed_figure() {
    let (conversations, budget, figure) = committed();
    let report = dialogue::run_blocking(DialogueOptions {
        dir: dir().to_path_buf(),
        split: Split::Dev,
        only: conversations,
        budgets: vec![budget],
        settings: Settings::default(),
    })
    .expect("the dialogues replay");
    let got = report.overall.recall[0];
    eprintln!("{}", report.to_text());
    assert!(
        got >= figure - 0.02,
        "answer recall {:.1} % is more than 2 points below the committed {:.1} %",
        got * 100.0,
        figure * 100.0
    );
}
