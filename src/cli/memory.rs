//! `recall summaries`, `blocks`, `facts`, `topics` and `search`.

use std::io::Read;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use recall::api::{
    Block, BlockIn, BlockList, BlockParams, Client, FactPatch, FactUser, SearchParams,
    SummaryParams, TopicParams,
};
use recall::engine::model::{BlockLabel, SummaryType, Visibility};
use uuid::Uuid;

use super::render::{shorten, table, time, Output};

/// `recall summaries`.
#[derive(Args)]
pub struct SummariesArgs {
    #[arg(long)]
    agent: String,
    /// session, daily, weekly or topic.
    #[arg(long = "type", value_parser = parse_summary_type)]
    kind: Option<SummaryType>,
    #[arg(long)]
    user: Option<String>,
    /// RFC 3339 time: summaries ending at or after it.
    #[arg(long, value_parser = super::parse_time)]
    since: Option<DateTime<Utc>>,
    /// RFC 3339 time: summaries starting at or before it.
    #[arg(long, value_parser = super::parse_time)]
    until: Option<DateTime<Utc>>,
    /// The next page: the summaries after this one (the last listed).
    #[arg(long)]
    before: Option<Uuid>,
    /// 1 to 1000.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

fn parse_summary_type(s: &str) -> Result<SummaryType, String> {
    SummaryType::ALL
        .into_iter()
        .find(|t| t.as_str() == s)
        .ok_or_else(|| format!("{s:?} is not one of session, daily, weekly, topic"))
}

pub async fn summaries(a: SummariesArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    let q = SummaryParams {
        kind: a.kind,
        user_id: a.user,
        since: a.since,
        until: a.until,
        before: a.before,
        limit: Some(a.limit),
    };
    let list = c.summaries(&a.agent, &q).await?;
    out.show(&list, |list| {
        table(
            ["SUMMARY", "TYPE", "USER", "PERIOD END", "TOPICS", "TEXT"],
            list.summaries.iter().map(|s| {
                [
                    s.summary_id.to_string(),
                    s.summary_type.to_string(),
                    s.user_id.clone(),
                    time(&s.period_end),
                    s.topics.join(", "),
                    shorten(&s.summary_text, 60),
                ]
            }),
        )
    })
}

/// `recall blocks`.
#[derive(Subcommand)]
pub enum BlocksCmd {
    /// One block, or all of the agent's.
    Get {
        #[arg(long)]
        agent: String,
        label: Option<String>,
        /// The blocks as this user's context shows them (their own
        /// `background_context`) instead of the agent's.
        #[arg(long)]
        user: Option<String>,
    },
    /// Set a block (`-` reads the value from standard input).
    Set {
        #[arg(long)]
        agent: String,
        label: String,
        value: String,
    },
}

fn print_block(b: &Block) {
    println!(
        "[{}] {}/{} characters, updated {}",
        b.label,
        b.value.chars().count(),
        b.limit,
        b.updated_at.as_ref().map_or_else(|| "-".into(), time)
    );
    if !b.value.is_empty() {
        println!("{}", b.value);
    }
    println!();
}

pub async fn blocks(cmd: BlocksCmd, c: &Client, out: Output) -> anyhow::Result<()> {
    match cmd {
        BlocksCmd::Get { agent, label, user } => {
            let q = BlockParams { user_id: user };
            let list = match (label, &q.user_id) {
                (Some(l), _) => {
                    let b = c.block(&agent, &l, &q).await?;
                    return out.show(&b, print_block);
                }
                (None, None) => c.blocks(&agent).await?,
                (None, Some(_)) => {
                    let mut blocks = Vec::new();
                    for l in BlockLabel::ALL {
                        blocks.push(c.block(&agent, l.as_str(), &q).await?);
                    }
                    BlockList { blocks }
                }
            };
            out.show(&list, |list| list.blocks.iter().for_each(print_block))
        }
        BlocksCmd::Set {
            agent,
            label,
            value,
        } => {
            let value = if value == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read the value from standard input")?;
                s
            } else {
                value
            };
            let b = c.set_block(&agent, &label, &BlockIn { value }).await?;
            out.show(&b, |b| {
                println!(
                    "{} set: {}/{} characters",
                    b.label,
                    b.value.chars().count(),
                    b.limit
                )
            })
        }
    }
}

/// `recall facts`.
#[derive(Subcommand)]
pub enum FactsCmd {
    /// The facts a user may see: their own and the shared ones.
    List {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
    },
    /// Share a fact with the agent's other users (as its owner).
    Share {
        fact_id: Uuid,
        /// The acting user: the fact's owner.
        #[arg(long)]
        user: String,
    },
    /// Make a shared fact private again (as its owner).
    Unshare {
        fact_id: Uuid,
        #[arg(long)]
        user: String,
    },
    /// Delete a fact (as its owner).
    Delete {
        fact_id: Uuid,
        #[arg(long)]
        user: String,
    },
}

pub async fn facts(cmd: FactsCmd, c: &Client, out: Output) -> anyhow::Result<()> {
    let (fact_id, user, visibility) = match cmd {
        FactsCmd::List { agent, user } => {
            let list = c.facts(&agent, &FactUser { user_id: user }).await?;
            return out.show(&list, |list| {
                table(
                    [
                        "FACT",
                        "USER",
                        "SAID BY",
                        "CATEGORY",
                        "VISIBILITY",
                        "FLAG",
                        "CONTENT",
                    ],
                    list.facts.iter().map(|f| {
                        [
                            f.fact_id.to_string(),
                            f.user_id.clone(),
                            f.speaker.as_str().to_string(),
                            f.category.as_str().to_string(),
                            visibility_name(f.visibility).to_string(),
                            if f.conflicts_with.is_some() {
                                "conflict".to_string()
                            } else {
                                String::new()
                            },
                            shorten(&f.content, 60),
                        ]
                    }),
                )
            });
        }
        FactsCmd::Delete { fact_id, user } => {
            let deleted = c.delete_fact(fact_id, &FactUser { user_id: user }).await?;
            return out.show(&deleted, |d| {
                println!("deleted fact {fact_id}: {}", d.deleted.content)
            });
        }
        FactsCmd::Share { fact_id, user } => (fact_id, user, Visibility::Shared),
        FactsCmd::Unshare { fact_id, user } => (fact_id, user, Visibility::Private),
    };
    let patch = FactPatch {
        user_id: user,
        visibility,
    };
    let fact = c.patch_fact(fact_id, &patch).await?;
    out.show(&fact, |f| {
        println!(
            "fact {fact_id} is now {}: {}",
            visibility_name(f.visibility),
            f.content
        )
    })
}

fn visibility_name(v: Visibility) -> &'static str {
    match v {
        Visibility::Private => "private",
        Visibility::Shared => "shared",
    }
}

/// `recall topics`.
#[derive(Args)]
pub struct TopicsArgs {
    #[arg(long)]
    agent: String,
    /// One user's topics (all users' without it).
    #[arg(long)]
    user: Option<String>,
    /// At most this many, most recently active first (1 to 1000; 100
    /// without it).
    #[arg(long)]
    limit: Option<usize>,
}

pub async fn topics(a: TopicsArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    let q = TopicParams {
        user_id: a.user,
        limit: a.limit,
    };
    let list = c.topics(&a.agent, &q).await?;
    out.show(&list, |list| {
        table(
            [
                "TOPIC",
                "USER",
                "LABEL",
                "MEMBERS",
                "LAST ACTIVE",
                "SUMMARY",
            ],
            list.topics.iter().map(|t| {
                [
                    t.topic_id.to_string(),
                    t.user_id.clone(),
                    t.label.clone(),
                    t.member_count.to_string(),
                    time(&t.last_active),
                    shorten(t.summary.as_deref().unwrap_or("-"), 60),
                ]
            }),
        )
    })
}

/// `recall search`.
#[derive(Args)]
pub struct SearchArgs {
    /// What to look for, e.g. "Google interview".
    query: String,
    #[arg(long)]
    agent: String,
    /// Only what this user may see: their items and facts others shared.
    #[arg(long)]
    user: Option<String>,
    /// session, daily, weekly, topic, fact or turn (comma-separated for several).
    #[arg(long = "type")]
    kind: Option<String>,
    /// RFC 3339 time: items reaching it or later.
    #[arg(long, value_parser = super::parse_time)]
    since: Option<DateTime<Utc>>,
    /// RFC 3339 time: items starting at or before it.
    #[arg(long, value_parser = super::parse_time)]
    until: Option<DateTime<Utc>>,
    #[arg(long, default_value_t = 10)]
    limit: usize,
}

pub async fn search(a: SearchArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    let q = SearchParams {
        q: a.query,
        kind: a.kind,
        user_id: a.user,
        since: a.since,
        until: a.until,
        limit: Some(a.limit),
    };
    let results = c.search(&a.agent, &q).await?;
    out.show(&results, |r| {
        table(
            ["SCORE", "TYPE", "USER", "WHEN", "ID", "TEXT"],
            r.results.iter().map(|h| {
                // The archival text's last line before the closing tag is
                // the summary or fact itself.
                let gist = h.text.lines().rev().nth(1).unwrap_or(&h.text);
                [
                    format!("{:.2}", h.score),
                    h.kind.as_str().to_string(),
                    h.user_id.clone(),
                    time(&h.period_end),
                    h.id.to_string(),
                    shorten(gist, 60),
                ]
            }),
        )
    })
}
