//! `recall dead-letters`, `replay` and `forget`.

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use recall::api::{Client, DeadLetterParams, ForgetParams, ReplayIn};
use uuid::Uuid;

use super::render::{shorten, table, time, Output};

/// `recall dead-letters`.
#[derive(Subcommand)]
pub enum DeadLettersCmd {
    List {
        #[arg(long)]
        agent: String,
        /// At most this many, oldest first (1 to 1000; 100 without it).
        #[arg(long)]
        limit: Option<usize>,
        /// The next page: the letters after this one (the session id of
        /// the last one listed).
        #[arg(long)]
        after: Option<Uuid>,
    },
    /// Queue a dead letter's reflection again.
    Retry {
        /// The session id of the dead letter.
        session_id: Uuid,
    },
}

pub async fn dead_letters(cmd: DeadLettersCmd, c: &Client, out: Output) -> anyhow::Result<()> {
    match cmd {
        DeadLettersCmd::List {
            agent,
            limit,
            after,
        } => {
            let list = c
                .dead_letters(&agent, &DeadLetterParams { limit, after })
                .await?;
            out.show(&list, |list| {
                table(
                    ["SESSION", "USER", "ATTEMPTS", "KIND", "FAILED AT", "ERROR"],
                    list.dead_letters.iter().map(|d| {
                        [
                            d.session_id.to_string(),
                            d.user_id.clone(),
                            d.attempts.to_string(),
                            d.error_kind.clone(),
                            time(&d.failed_at),
                            shorten(&d.error, 60),
                        ]
                    }),
                )
            })
        }
        DeadLettersCmd::Retry { session_id } => {
            let requeued = c.retry_dead_letter(session_id).await?;
            out.show(&requeued, |_| {
                println!("requeued the reflection of session {session_id}")
            })
        }
    }
}

/// `recall replay`.
#[derive(Args)]
pub struct ReplayArgs {
    #[arg(long)]
    agent: String,
    /// Only this user's sessions.
    #[arg(long)]
    user: Option<String>,
    /// RFC 3339 time: only sessions started at or after it.
    #[arg(long, value_parser = super::parse_time)]
    since: Option<DateTime<Utc>>,
}

/// Streams the server's progress into a progress bar (on a terminal), then
/// prints what changed.
pub async fn replay(a: ReplayArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} sessions  {msg}  [{elapsed_precise}, {eta} left]",
        )
        .expect("a valid template"),
    );
    let body = ReplayIn {
        user_id: a.user,
        since: a.since,
    };
    let report = c
        .replay_streamed(&a.agent, &body, |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(format!(
                "{} changed, {} unchanged, {} failed",
                p.changed, p.unchanged, p.failed
            ));
        })
        .await;
    bar.finish_and_clear();
    let report = report?;
    out.show(&report, |report| {
        let p = &report.progress;
        println!(
            "{} sessions: {} changed, {} unchanged, {} failed, {} without turns{}",
            p.total,
            p.changed,
            p.unchanged,
            p.failed,
            report.without_turns,
            if report.interrupted {
                " (interrupted: run it again to resume)"
            } else {
                ""
            }
        );
        table(
            ["SESSION", "USER", "WAS", "NOW", "NEW FACTS"],
            report.changed.iter().map(|c| {
                [
                    c.session_id.to_string(),
                    c.user_id.clone(),
                    shorten(c.old_text.as_deref().unwrap_or("-"), 40),
                    shorten(&c.new_text, 40),
                    format!("+{}", c.facts_added.len()),
                ]
            }),
        );
        if let Some(r) = &report.rollups {
            println!(
                "rollups revised: {}, topics updated: {}",
                r.revised, r.topics_updated
            );
        }
        for f in &report.failed {
            eprintln!("failed: {} {}", f.session_id, f.error);
        }
    })
}

/// `recall forget`.
#[derive(Args)]
pub struct ForgetArgs {
    #[arg(long)]
    user: String,
    /// Only what the user shared with this agent (every agent without).
    #[arg(long)]
    agent: Option<String>,
    /// Confirms the deletion; it cannot be undone.
    #[arg(long)]
    yes: bool,
}

pub async fn forget(a: ForgetArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    if !a.yes {
        let scope = a
            .agent
            .as_deref()
            .map_or("every agent".to_string(), |a| format!("agent {a:?}"));
        anyhow::bail!(
            "this deletes everything user {:?} shared with {scope}, for good; add --yes to go ahead",
            a.user
        );
    }
    let report = c
        .forget_user(&a.user, &ForgetParams { agent_id: a.agent })
        .await?;
    out.show(&report, |r| {
        let counts = [
            ("sessions", r.sessions),
            ("turns", r.turns),
            ("session summaries", r.session_summaries),
            ("daily summaries", r.daily_summaries),
            ("weekly summaries", r.weekly_summaries),
            ("topic summaries", r.topic_summaries),
            ("facts", r.facts),
            ("topics", r.topics),
            ("blocks", r.blocks),
            ("reflection jobs", r.reflection_jobs),
            ("dead letters", r.dead_letters),
            ("vectors", r.vectors),
            ("inbox rows", r.inbox_rows),
        ];
        table(
            ["REMOVED", "COUNT"],
            counts.map(|(k, n)| [k.to_string(), n.to_string()]),
        );
        let agents: Vec<&str> = r.agents.iter().map(String::as_str).collect();
        println!(
            "background context rebuilt for: {}",
            if agents.is_empty() {
                "-".to_string()
            } else {
                agents.join(", ")
            }
        );
    })
}
