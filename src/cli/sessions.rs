//! `recall sessions` and `recall context`: sessions and the working
//! context.

use clap::{Args, Subcommand};
use recall::api::{Client, ContextParams, ListSessions};
use serde_json::json;

use super::render::{idle, opt, table, time, Output};

/// `recall sessions`.
#[derive(Args)]
pub struct SessionsArgs {
    #[arg(long)]
    agent: Option<String>,
    #[arg(long)]
    user: Option<String>,
    /// Only live sessions.
    #[arg(long)]
    live: bool,
    /// The next page: the sessions after this one (the last listed).
    #[arg(long)]
    before: Option<uuid::Uuid>,
    /// 1 to 1000.
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

pub async fn sessions(a: SessionsArgs, c: &Client, out: Output) -> anyhow::Result<()> {
    let q = ListSessions {
        agent_id: a.agent,
        user_id: a.user,
        live: a.live.then_some(true),
        before: a.before,
        limit: Some(a.limit),
    };
    let list = c.sessions(&q).await?;
    out.show(&list, |list| {
        table(
            [
                "SESSION",
                "AGENT",
                "USER",
                "CONNECTION",
                "STARTED",
                "STATE",
                "TURNS",
            ],
            list.sessions.iter().map(|s| {
                let r = &s.record;
                [
                    r.session_id.to_string(),
                    r.agent_id.clone(),
                    r.user_id.clone(),
                    r.connection_id.clone(),
                    time(&r.started_at),
                    if s.live {
                        "live".to_string()
                    } else {
                        opt(&r.end_reason)
                    },
                    r.turn_count.to_string(),
                ]
            }),
        )
    })
}

/// `recall context`.
#[derive(Subcommand)]
pub enum ContextCmd {
    /// Live sessions (turns, token estimate, time since the last turn) and
    /// the context the agent's LLM would get now, tier by tier.
    Show {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
        /// The message the context is assembled for.
        #[arg(long, default_value = "")]
        message: String,
        /// Token budget of the assembled context.
        #[arg(long, default_value_t = 8000)]
        budget: usize,
    },
    /// End the live sessions (reason `cleared`): the next turn starts fresh.
    Clear {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        user: String,
    },
}

pub async fn context(cmd: ContextCmd, c: &Client, out: Output) -> anyhow::Result<()> {
    match cmd {
        ContextCmd::Show {
            agent,
            user,
            message,
            budget,
        } => {
            let live = c.working_context(&agent, &user).await?;
            let q = ContextParams {
                user_id: user.clone(),
                message,
                budget_tokens: budget,
                live: true,
            };
            let assembled = c.context(&agent, &q).await?;
            let both = json!({"live": live, "assembled": assembled});
            out.show(&both, |_| {
                if live.sessions.is_empty() {
                    println!("no live session for agent {agent} with user {user}");
                } else {
                    table(
                        [
                            "SESSION",
                            "CONNECTION",
                            "TURNS",
                            "TOKENS~",
                            "SINCE LAST",
                            "STARTED",
                        ],
                        live.sessions.iter().map(|s| {
                            [
                                s.session.session_id.to_string(),
                                s.session.connection_id.clone(),
                                s.turn_count.to_string(),
                                s.token_estimate.to_string(),
                                idle(s.idle_secs),
                                time(&s.session.started_at),
                            ]
                        }),
                    );
                }
                println!();
                println!(
                    "assembled context: {} of {} tokens",
                    assembled.total_tokens, assembled.budget_tokens
                );
                table(
                    ["TIER", "ITEMS", "TOKENS"],
                    assembled.tiers.iter().map(|t| {
                        [
                            t.tier.as_str().to_string(),
                            t.items.len().to_string(),
                            t.tokens.to_string(),
                        ]
                    }),
                );
                if !assembled.trimmed.is_empty() {
                    println!(
                        "{} item(s) trimmed to fit the budget",
                        assembled.trimmed.len()
                    );
                }
                for m in &assembled.messages {
                    println!();
                    println!("--- {} ---", m.role.as_str());
                    println!("{}", m.content);
                }
            })
        }
        ContextCmd::Clear { agent, user } => {
            let cleared = c.clear_context(&agent, &user).await?;
            out.show(&cleared, |c| {
                println!(
                    "cleared: {} live session(s) ended with reason cleared",
                    c.ended.len()
                )
            })
        }
    }
}
