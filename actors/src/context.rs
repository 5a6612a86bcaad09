//! Context assembly: what the agent's LLM sees on its next turn, under a
//! token budget, without waiting on anything.
//!
//! The order is seed `001`'s, after the core-memory blocks: blocks, facts
//! (authoritative anchors), layered summaries (broad situation), the raw
//! turns since the last summary (fine-grained state), then the current
//! message. Over budget, items go lowest priority first: the oldest
//! summaries, then the oldest turns, then blocks (`background_context`
//! first, `persona` last), and facts last of all (the oldest extracted
//! first): they are the authoritative anchors. The current message is never
//! cut; a budget too small for it is an error.
//!
//! Assembly is a pure function of its input, so the same state always gives
//! the same context, and it only reads memory the caller already holds.

use std::sync::Arc;

use serde::Serialize;
use uuid::Uuid;

pub use crate::window::dedup_key;

use crate::model::{
    BlockLabel, ConversationSummary, ConversationTurn, Fact, MemoryBlock, SummaryType, Visibility,
};

/// Counts tokens. The default estimate is seed `002`'s: characters / 4,
/// rounded up; an exact tokenizer can be plugged in.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> usize;
}

/// Characters / 4, rounded up.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharEstimate;

impl TokenCounter for CharEstimate {
    fn count(&self, text: &str) -> usize {
        text.chars().count().div_ceil(4)
    }
}

/// Largest budget accepted: far beyond any model's context window, so a
/// larger one is a mistake (a negative number cast, a unit mix-up).
pub const MAX_BUDGET_TOKENS: usize = 10_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("budget_tokens must be between 1 and {MAX_BUDGET_TOKENS}; got {0}")]
    InvalidBudget(usize),
    #[error("the current message alone takes {needed} tokens, over the budget of {budget}")]
    MessageOverBudget { needed: usize, budget: usize },
}

/// The tiers, in the order they appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Blocks,
    Facts,
    Summaries,
    Turns,
    Message,
}

impl Tier {
    pub const ALL: [Tier; 5] = [
        Tier::Blocks,
        Tier::Facts,
        Tier::Summaries,
        Tier::Turns,
        Tier::Message,
    ];
}

/// Who says an item, once rendered as chat messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// What an item comes from. Copy-sized, so reporting what was trimmed
/// allocates nothing; it renders as a block label, a fact or summary id,
/// `turn {i} user|assistant` (the turn's position in the context) or
/// `current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Block(BlockLabel),
    Fact(Uuid),
    Summary(Uuid),
    /// A live call's window summary or long narrative: the raw messages
    /// (sequence numbers) it stands for.
    Window {
        session: Uuid,
        start_seq: u32,
        end_seq: u32,
    },
    Turn {
        index: u32,
        role: Role,
    },
    Message,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Block(l) => f.write_str(l.as_str()),
            Source::Fact(id) | Source::Summary(id) => write!(f, "{id}"),
            Source::Window {
                session,
                start_seq,
                end_seq,
            } => write!(f, "{session}:{start_seq}-{end_seq}"),
            Source::Turn { index, role } => {
                let who = if *role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                write!(f, "turn {index} {who}")
            }
            Source::Message => f.write_str("current"),
        }
    }
}

impl Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One piece of the context. The text is shared: an item prepared once is
/// handed to any number of assembled contexts without copying it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextItem {
    pub tier: Tier,
    pub source: Source,
    pub role: Role,
    pub text: Arc<str>,
    pub tokens: usize,
}

/// Tokens and items of one tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TierUsage {
    pub tier: Tier,
    pub tokens: usize,
    pub items: Vec<ContextItem>,
}

/// Something left out to stay within the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Trimmed {
    pub tier: Tier,
    pub source: Source,
    pub tokens: usize,
}

/// The context for one LLM call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssembledContext {
    pub budget_tokens: usize,
    pub total_tokens: usize,
    /// Every tier, in order, even when empty.
    pub tiers: Vec<TierUsage>,
    /// What was left out, in the order it was removed.
    pub trimmed: Vec<Trimmed>,
}

/// An OpenAI-style chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// What the context is assembled from. Slices are in the caller's order:
/// summaries and turns oldest first, facts in any order (they are sorted).
pub struct ContextInput<'a> {
    pub blocks: &'a [MemoryBlock],
    pub facts: &'a [Fact],
    /// The user the context is for: shared facts of other users are marked.
    pub user_id: &'a str,
    pub summaries: &'a [ConversationSummary],
    pub turns: &'a [ConversationTurn],
    pub current_message: &'a str,
    pub budget_tokens: usize,
}

/// Block labels from most to least essential.
const BLOCK_PRIORITY: [BlockLabel; 5] = [
    BlockLabel::Persona,
    BlockLabel::Human,
    BlockLabel::Relationship,
    BlockLabel::SelfPerception,
    BlockLabel::BackgroundContext,
];

fn summary_kind(t: SummaryType) -> &'static str {
    match t {
        SummaryType::Session => "session",
        SummaryType::Daily => "day",
        SummaryType::Weekly => "week",
        SummaryType::Topic => "topic",
    }
}

fn item(
    counter: &dyn TokenCounter,
    tier: Tier,
    source: Source,
    role: Role,
    text: String,
) -> ContextItem {
    let tokens = counter.count(&text);
    ContextItem {
        tier,
        source,
        role,
        text: text.into(),
        tokens,
    }
}

/// The non-empty blocks as items, most essential first.
pub fn prepare_blocks(blocks: &[MemoryBlock], counter: &dyn TokenCounter) -> Vec<ContextItem> {
    BLOCK_PRIORITY
        .into_iter()
        .filter_map(|label| {
            let b = blocks
                .iter()
                .find(|b| b.label == label && !b.value.trim().is_empty())?;
            Some(item(
                counter,
                Tier::Blocks,
                Source::Block(label),
                Role::System,
                format!("[{label}]\n{}", b.value.trim()),
            ))
        })
        .collect()
}

/// Facts as items, in display order (by category, then oldest first, stable
/// across calls), with the order they are trimmed in (oldest extracted
/// first).
#[derive(Debug, Clone, Default)]
pub struct PreparedFacts {
    items: Vec<ContextItem>,
    /// Display indices, oldest extracted first.
    by_age: Vec<u32>,
    /// For each display index, its position in `by_age`.
    rank: Vec<u32>,
}

impl PreparedFacts {
    pub fn new(facts: &[Fact], user_id: &str, counter: &dyn TokenCounter) -> Self {
        let mut sorted: Vec<&Fact> = facts.iter().collect();
        sorted.sort_by(|a, b| {
            (a.category, a.extracted_at, a.fact_id).cmp(&(b.category, b.extracted_at, b.fact_id))
        });
        let items: Vec<ContextItem> = sorted
            .iter()
            .map(|f| {
                let whose = if f.user_id != user_id && f.visibility == Visibility::Shared {
                    format!(" (shared by {})", f.user_id)
                } else {
                    String::new()
                };
                item(
                    counter,
                    Tier::Facts,
                    Source::Fact(f.fact_id),
                    Role::System,
                    format!("- [{}] {}{whose}", f.category.as_str(), f.content.trim()),
                )
            })
            .collect();
        let mut by_age: Vec<u32> = (0..sorted.len() as u32).collect();
        by_age.sort_by_key(|&i| (sorted[i as usize].extracted_at, sorted[i as usize].fact_id));
        let mut rank = vec![0; by_age.len()];
        for (r, &i) in by_age.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        PreparedFacts {
            items,
            by_age,
            rank,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The summaries worth showing, in their order. Layers: a summary a daily
/// or weekly rollup was made from is left to the rollup (older days read
/// as days, older weeks as weeks, today as its sessions); a topic with one
/// member would only repeat it and waits for a second. Of those whose
/// first 120 characters match (seed `001`'s duplicate check,
/// [`dedup_key`]), only the newest — the last — is kept.
pub fn distinct_summaries(oldest_first: &[ConversationSummary]) -> Vec<&ConversationSummary> {
    let covered: std::collections::HashSet<Uuid> = oldest_first
        .iter()
        .filter(|s| matches!(s.summary_type, SummaryType::Daily | SummaryType::Weekly))
        .filter(|s| s.is_current())
        .flat_map(|s| s.source_summary_ids.iter().copied())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<&ConversationSummary> = oldest_first
        .iter()
        .rev()
        .filter(|s| s.is_current() && !covered.contains(&s.summary_id))
        .filter(|s| s.summary_type != SummaryType::Topic || s.source_summary_ids.len() > 1)
        .filter(|s| seen.insert(dedup_key(&s.summary_text)))
        .collect();
    out.reverse();
    out
}

/// A summary as an item.
pub fn prepare_summary(s: &ConversationSummary, counter: &dyn TokenCounter) -> ContextItem {
    item(
        counter,
        Tier::Summaries,
        Source::Summary(s.summary_id),
        Role::System,
        format!(
            "- [{} {}] {}",
            summary_kind(s.summary_type),
            s.period_start.format("%Y-%m-%d"),
            s.summary_text.trim()
        ),
    )
}

/// A live call's window summary or long narrative as a summary item,
/// naming the messages it stands for.
pub fn live_summary_item(
    session: Uuid,
    start_seq: u64,
    end_seq: u64,
    text: &str,
    counter: &dyn TokenCounter,
) -> ContextItem {
    item(
        counter,
        Tier::Summaries,
        Source::Window {
            session,
            start_seq: start_seq as u32,
            end_seq: end_seq as u32,
        },
        Role::System,
        format!(
            "- [this call, messages {start_seq}-{end_seq}] {}",
            text.trim()
        ),
    )
}

/// Turns as user and assistant items, empty sides left out, numbered from
/// 0; a context numbers them on across the chunks it combines.
pub fn prepare_turns(turns: &[ConversationTurn], counter: &dyn TokenCounter) -> Vec<ContextItem> {
    let mut out = Vec::with_capacity(turns.len() * 2);
    for (index, t) in turns.iter().enumerate() {
        for (role, text) in [
            (Role::User, &t.user_message),
            (Role::Assistant, &t.agent_response),
        ] {
            if !text.trim().is_empty() {
                out.push(item(
                    counter,
                    Tier::Turns,
                    Source::Turn {
                        index: index as u32,
                        role,
                    },
                    role,
                    text.clone(),
                ));
            }
        }
    }
    out
}

/// Prepared items to choose from. Summaries and turns come in chunks,
/// oldest first across and within them, so a caller can combine what it
/// holds (stored summaries, a live call's window summary) without copying.
pub struct Selection<'a> {
    /// Most essential first, as [`prepare_blocks`] orders them.
    pub blocks: &'a [ContextItem],
    pub facts: &'a PreparedFacts,
    pub summaries: &'a [&'a [ContextItem]],
    pub turns: &'a [&'a [ContextItem]],
    pub current_message: &'a str,
    pub budget_tokens: usize,
}

/// Assembles the context within `input.budget_tokens`.
pub fn assemble(
    input: &ContextInput<'_>,
    counter: &dyn TokenCounter,
) -> Result<AssembledContext, ContextError> {
    check_budget(input.budget_tokens)?;
    let blocks = prepare_blocks(input.blocks, counter);
    let facts = PreparedFacts::new(input.facts, input.user_id, counter);
    let summaries: Vec<ContextItem> = distinct_summaries(input.summaries)
        .into_iter()
        .map(|s| prepare_summary(s, counter))
        .collect();
    let turns = prepare_turns(input.turns, counter);
    select(
        &Selection {
            blocks: &blocks,
            facts: &facts,
            summaries: &[&summaries],
            turns: &[&turns],
            current_message: input.current_message,
            budget_tokens: input.budget_tokens,
        },
        counter,
    )
}

/// Turn items with their sources numbered across chunks.
fn numbered<'x>(
    chunks: &'x [&'x [ContextItem]],
) -> impl Iterator<Item = (Source, &'x ContextItem)> {
    let mut offset = 0u32;
    chunks.iter().flat_map(move |c| {
        let base = offset;
        if let Some(Source::Turn { index, .. }) = c.last().map(|l| l.source) {
            offset = base + index + 1;
        }
        c.iter().map(move |it| {
            let source = match it.source {
                Source::Turn { index, role } => Source::Turn {
                    index: base + index,
                    role,
                },
                other => other,
            };
            (source, it)
        })
    })
}

fn flat<'x>(chunks: &'x [&'x [ContextItem]]) -> impl Iterator<Item = &'x ContextItem> {
    chunks.iter().flat_map(|c| c.iter())
}

fn check_budget(budget: usize) -> Result<(), ContextError> {
    if budget == 0 || budget > MAX_BUDGET_TOKENS {
        return Err(ContextError::InvalidBudget(budget));
    }
    Ok(())
}

/// Chooses what fits the budget from prepared items. Items go lowest
/// priority first — the oldest summaries, the oldest turns, the least
/// essential blocks, and facts last (the oldest extracted first) — so what
/// stays is the longest run of that removal order, read from its end, that
/// fits. Found by walking from the most important item until one does not
/// fit: linear, and it copies only the kept items' handles.
pub fn select(
    sel: &Selection<'_>,
    counter: &dyn TokenCounter,
) -> Result<AssembledContext, ContextError> {
    let budget = sel.budget_tokens;
    check_budget(budget)?;
    let message = item(
        counter,
        Tier::Message,
        Source::Message,
        Role::User,
        sel.current_message.to_string(),
    );
    if message.tokens > budget {
        return Err(ContextError::MessageOverBudget {
            needed: message.tokens,
            budget,
        });
    }
    let mut room = budget - message.tokens;
    let mut full = false;
    // How many of `tokens` (most important first) fit, once `full` is set
    // none do.
    let mut fit = |tokens: &mut dyn Iterator<Item = usize>| -> usize {
        let mut kept = 0;
        if full {
            return 0;
        }
        for t in tokens {
            if t > room {
                full = true;
                break;
            }
            room -= t;
            kept += 1;
        }
        kept
    };
    let facts = sel.facts;
    let kept_facts = fit(&mut facts
        .by_age
        .iter()
        .rev()
        .map(|&i| facts.items[i as usize].tokens));
    let kept_blocks = fit(&mut sel.blocks.iter().map(|b| b.tokens));
    let chained =
        |chunks: &'_ [&'_ [ContextItem]]| -> usize { chunks.iter().map(|c| c.len()).sum() };
    let n_turns = chained(sel.turns);
    let kept_turns = fit(&mut sel
        .turns
        .iter()
        .rev()
        .flat_map(|c| c.iter().rev())
        .map(|i| i.tokens));
    let n_summaries = chained(sel.summaries);
    let kept_summaries = fit(&mut sel
        .summaries
        .iter()
        .rev()
        .flat_map(|c| c.iter().rev())
        .map(|i| i.tokens));

    let mut trimmed = Vec::new();
    let dropped = |it: &ContextItem, source: Source| Trimmed {
        tier: it.tier,
        source,
        tokens: it.tokens,
    };
    trimmed.extend(
        flat(sel.summaries)
            .take(n_summaries - kept_summaries)
            .map(|it| dropped(it, it.source)),
    );
    trimmed.extend(
        numbered(sel.turns)
            .take(n_turns - kept_turns)
            .map(|(source, it)| dropped(it, source)),
    );
    trimmed.extend(
        sel.blocks[kept_blocks..]
            .iter()
            .rev()
            .map(|it| dropped(it, it.source)),
    );
    let n_facts = facts.len();
    trimmed.extend(facts.by_age[..n_facts - kept_facts].iter().map(|&i| {
        let it = &facts.items[i as usize];
        dropped(it, it.source)
    }));

    let tier = |tier, items: Vec<ContextItem>| TierUsage {
        tier,
        tokens: items.iter().map(|i| i.tokens).sum(),
        items,
    };
    let first_kept_fact = (n_facts - kept_facts) as u32;
    let tiers = vec![
        tier(Tier::Blocks, sel.blocks[..kept_blocks].to_vec()),
        tier(
            Tier::Facts,
            facts
                .items
                .iter()
                .zip(&facts.rank)
                .filter(|(_, &r)| r >= first_kept_fact)
                .map(|(it, _)| it.clone())
                .collect(),
        ),
        tier(
            Tier::Summaries,
            flat(sel.summaries)
                .skip(n_summaries - kept_summaries)
                .cloned()
                .collect(),
        ),
        tier(
            Tier::Turns,
            numbered(sel.turns)
                .skip(n_turns - kept_turns)
                .map(|(source, it)| ContextItem {
                    source,
                    ..it.clone()
                })
                .collect(),
        ),
        tier(Tier::Message, vec![message]),
    ];
    Ok(AssembledContext {
        budget_tokens: budget,
        total_tokens: budget - room,
        tiers,
        trimmed,
    })
}

impl AssembledContext {
    /// The tokens of one tier.
    pub fn tokens(&self, tier: Tier) -> usize {
        self.tiers
            .iter()
            .find(|t| t.tier == tier)
            .map(|t| t.tokens)
            .unwrap_or(0)
    }

    /// OpenAI-style chat messages: one system message with the blocks,
    /// facts and summaries (headed per tier), the turns as user/assistant
    /// messages, then the current message.
    pub fn to_messages(&self) -> Vec<ChatMessage> {
        let mut system = String::new();
        for t in &self.tiers {
            let heading = match t.tier {
                Tier::Blocks => "Core memory",
                Tier::Facts => "Facts about the user",
                Tier::Summaries => "Earlier conversations",
                Tier::Turns | Tier::Message => continue,
            };
            if t.items.is_empty() {
                continue;
            }
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str("## ");
            system.push_str(heading);
            for i in &t.items {
                system.push('\n');
                system.push_str(&i.text);
            }
        }
        let mut out = Vec::new();
        if !system.is_empty() {
            out.push(ChatMessage {
                role: Role::System,
                content: system,
            });
        }
        for t in &self.tiers {
            if matches!(t.tier, Tier::Turns | Tier::Message) {
                out.extend(t.items.iter().map(|i| ChatMessage {
                    role: i.role,
                    content: i.text.to_string(),
                }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FactCategory;
    use chrono::{DateTime, Duration, TimeZone, Utc};
    use uuid::Uuid;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap()
    }

    fn block(label: BlockLabel, value: &str) -> MemoryBlock {
        MemoryBlock {
            agent_id: "kairix".into(),
            label,
            value: value.into(),
            limit: 2000,
            updated_at: t0(),
            source_user_id: None,
        }
    }

    fn fact(n: u128, user: &str, category: FactCategory, content: &str, age_min: i64) -> Fact {
        Fact {
            fact_id: Uuid::from_u128(n),
            agent_id: "kairix".into(),
            user_id: user.into(),
            category,
            content: content.into(),
            subject: None,
            visibility: Visibility::Private,
            source_session_id: None,
            extracted_at: t0() + Duration::minutes(age_min),
            conflicts_with: None,
        }
    }

    fn summary(n: u128, day: i64, text: &str) -> ConversationSummary {
        let at = t0() + Duration::days(day);
        ConversationSummary::session(Uuid::from_u128(n), "kairix", "mark", at, text)
    }

    fn turn(u: &str, a: &str) -> ConversationTurn {
        ConversationTurn {
            user_message: u.into(),
            agent_response: a.into(),
            timestamp: t0(),
        }
    }

    struct Fixture {
        blocks: Vec<MemoryBlock>,
        facts: Vec<Fact>,
        summaries: Vec<ConversationSummary>,
        turns: Vec<ConversationTurn>,
    }

    fn fixture() -> Fixture {
        Fixture {
            blocks: vec![
                block(BlockLabel::BackgroundContext, "Recent: interview prep."),
                block(BlockLabel::Persona, "I am Kairix, a career coach."),
                block(BlockLabel::Human, ""),
            ],
            facts: vec![
                fact(1, "mark", FactCategory::Occupation, "works at Initech", 5),
                fact(2, "mark", FactCategory::Preference, "prefers mornings", 1),
                fact(3, "ada", FactCategory::Milestone, "team offsite in May", 3),
            ],
            summaries: vec![
                summary(10, 0, "Talked about leaving Initech."),
                summary(11, 7, "Prepared for the Globex interview."),
            ],
            turns: vec![
                turn("It went well", "Great to hear"),
                turn("They called back", ""),
            ],
        }
    }

    fn input<'a>(f: &'a Fixture, message: &'a str, budget: usize) -> ContextInput<'a> {
        ContextInput {
            blocks: &f.blocks,
            facts: &f.facts,
            user_id: "mark",
            summaries: &f.summaries,
            turns: &f.turns,
            current_message: message,
            budget_tokens: budget,
        }
    }

    fn sources(c: &AssembledContext, tier: Tier) -> Vec<String> {
        c.tiers
            .iter()
            .find(|t| t.tier == tier)
            .map(|t| t.items.iter().map(|i| i.source.to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn the_estimate_is_characters_over_four_rounded_up() {
        assert_eq!(CharEstimate.count(""), 0);
        assert_eq!(CharEstimate.count("abcd"), 1);
        assert_eq!(CharEstimate.count("abcde"), 2);
        assert_eq!(CharEstimate.count("éééé"), 1, "characters, not bytes");
    }

    #[test]
    fn tiers_come_in_order_and_render_as_chat_messages() {
        let f = fixture();
        let c = assemble(&input(&f, "What should I ask them?", 10_000), &CharEstimate).unwrap();
        assert!(c.trimmed.is_empty());
        let order: Vec<Tier> = c.tiers.iter().map(|t| t.tier).collect();
        assert_eq!(order, Tier::ALL);
        // persona before background_context; the empty human block is left out
        assert_eq!(sources(&c, Tier::Blocks), ["persona", "background_context"]);
        // every fact passed in is used: filtering by visibility is the
        // caller's (the Store's) job
        assert_eq!(sources(&c, Tier::Facts).len(), 3);
        assert_eq!(
            sources(&c, Tier::Turns),
            ["turn 0 user", "turn 0 assistant", "turn 1 user"]
        );
        let total: usize = c.tiers.iter().map(|t| t.tokens).sum();
        assert_eq!(c.total_tokens, total);
        let msgs = c.to_messages();
        assert_eq!(msgs[0].role, Role::System);
        let sys = &msgs[0].content;
        let (p, fa, su) = (
            sys.find("## Core memory").unwrap(),
            sys.find("## Facts about the user").unwrap(),
            sys.find("## Earlier conversations").unwrap(),
        );
        assert!(p < fa && fa < su, "{sys}");
        assert!(sys.contains("- [occupation] works at Initech"));
        let roles: Vec<Role> = msgs[1..].iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User, Role::User]);
        assert_eq!(msgs.last().unwrap().content, "What should I ask them?");
    }

    #[test]
    fn shared_facts_of_other_users_are_marked() {
        let mut f = fixture();
        f.facts[2].visibility = Visibility::Shared;
        let c = assemble(&input(&f, "hi", 10_000), &CharEstimate).unwrap();
        let sys = &c.to_messages()[0].content;
        assert!(sys.contains("team offsite in May (shared by ada)"), "{sys}");
        assert!(!sys.contains("Initech (shared"), "{sys}");
    }

    #[test]
    fn trimming_goes_summaries_then_turns_then_blocks_then_facts() {
        let f = fixture();
        let full = assemble(&input(&f, "hi", 10_000), &CharEstimate).unwrap();
        let need = |tier| full.tokens(tier);
        let message = need(Tier::Message);
        // one token short of everything: the oldest summary goes first
        let c = assemble(&input(&f, "hi", full.total_tokens - 1), &CharEstimate).unwrap();
        assert_eq!(c.trimmed.len(), 1);
        assert_eq!(c.trimmed[0].source, Source::Summary(Uuid::from_u128(10)));
        // room for blocks and facts only: summaries and turns all go, oldest
        // first, facts untouched
        let budget = need(Tier::Blocks) + need(Tier::Facts) + message;
        let c = assemble(&input(&f, "hi", budget), &CharEstimate).unwrap();
        let tiers: Vec<Tier> = c.trimmed.iter().map(|t| t.tier).collect();
        assert_eq!(
            tiers,
            [
                Tier::Summaries,
                Tier::Summaries,
                Tier::Turns,
                Tier::Turns,
                Tier::Turns
            ]
        );
        assert_eq!(c.tokens(Tier::Facts), need(Tier::Facts));
        // one token less: the least essential block goes next, facts stay
        let c = assemble(&input(&f, "hi", budget - 1), &CharEstimate).unwrap();
        assert_eq!(
            c.trimmed.last().unwrap().source,
            Source::Block(BlockLabel::BackgroundContext)
        );
        assert_eq!(c.tokens(Tier::Facts), need(Tier::Facts));
        // room for the facts only: every block goes, facts untouched
        let c = assemble(&input(&f, "hi", need(Tier::Facts) + message), &CharEstimate).unwrap();
        assert_eq!(c.tokens(Tier::Blocks), 0);
        assert_eq!(c.tokens(Tier::Facts), need(Tier::Facts));
        // one token less: the oldest-extracted fact (mark's preference,
        // minute 1) is the first fact to go
        let c = assemble(
            &input(&f, "hi", need(Tier::Facts) + message - 1),
            &CharEstimate,
        )
        .unwrap();
        assert_eq!(
            c.trimmed.last().unwrap().source,
            Source::Fact(Uuid::from_u128(2))
        );
        // only the message fits
        let c = assemble(&input(&f, "hi", message), &CharEstimate).unwrap();
        assert_eq!(c.total_tokens, message);
        assert_eq!(c.tokens(Tier::Facts), 0);
    }

    #[test]
    fn bad_budgets_are_errors() {
        let f = fixture();
        assert_eq!(
            assemble(&input(&f, "hi", 0), &CharEstimate),
            Err(ContextError::InvalidBudget(0))
        );
        assert!(matches!(
            assemble(&input(&f, "hi", MAX_BUDGET_TOKENS + 1), &CharEstimate),
            Err(ContextError::InvalidBudget(_))
        ));
        assert_eq!(
            assemble(&input(&f, &"x".repeat(41), 10), &CharEstimate),
            Err(ContextError::MessageOverBudget {
                needed: 11,
                budget: 10
            })
        );
    }

    /// xorshift64*: a seeded generator, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn text(&mut self) -> String {
            let words = [
                "job",
                "Initech",
                "interview",
                "café",
                "salary",
                "Lisbon",
                "😀",
                "next",
            ];
            (0..self.below(40))
                .map(|_| words[self.below(words.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    /// The removal loop the selection must agree with: drop the lowest
    /// priority item until the rest fits.
    fn reference(inp: &ContextInput<'_>) -> Result<AssembledContext, ContextError> {
        let c = &CharEstimate;
        check_budget(inp.budget_tokens)?;
        let mut blocks = prepare_blocks(inp.blocks, c);
        let pf = PreparedFacts::new(inp.facts, inp.user_id, c);
        let mut facts: Vec<(u32, ContextItem)> = pf
            .items
            .iter()
            .cloned()
            .zip(pf.rank.iter().copied())
            .map(|(i, r)| (r, i))
            .collect();
        let mut summaries: Vec<ContextItem> = distinct_summaries(inp.summaries)
            .into_iter()
            .map(|s| prepare_summary(s, c))
            .collect();
        let mut turns = prepare_turns(inp.turns, c);
        let message = item(
            c,
            Tier::Message,
            Source::Message,
            Role::User,
            inp.current_message.into(),
        );
        let budget = inp.budget_tokens;
        if message.tokens > budget {
            return Err(ContextError::MessageOverBudget {
                needed: message.tokens,
                budget,
            });
        }
        let sum = |v: &[ContextItem]| v.iter().map(|i| i.tokens).sum::<usize>();
        let mut used = sum(&blocks)
            + facts.iter().map(|(_, i)| i.tokens).sum::<usize>()
            + sum(&summaries)
            + sum(&turns)
            + message.tokens;
        let mut trimmed = Vec::new();
        let mut drop = |it: ContextItem, used: &mut usize| {
            *used -= it.tokens;
            trimmed.push(Trimmed {
                tier: it.tier,
                source: it.source,
                tokens: it.tokens,
            });
        };
        while used > budget && !summaries.is_empty() {
            drop(summaries.remove(0), &mut used);
        }
        while used > budget && !turns.is_empty() {
            drop(turns.remove(0), &mut used);
        }
        while used > budget && !blocks.is_empty() {
            let b = blocks.pop().unwrap();
            drop(b, &mut used);
        }
        while used > budget && !facts.is_empty() {
            let oldest = (0..facts.len()).min_by_key(|&i| facts[i].0).unwrap();
            drop(facts.remove(oldest).1, &mut used);
        }
        let tier = |tier, items: Vec<ContextItem>| TierUsage {
            tier,
            tokens: sum(&items),
            items,
        };
        Ok(AssembledContext {
            budget_tokens: budget,
            total_tokens: used,
            tiers: vec![
                tier(Tier::Blocks, blocks),
                tier(Tier::Facts, facts.into_iter().map(|(_, i)| i).collect()),
                tier(Tier::Summaries, summaries),
                tier(Tier::Turns, turns),
                tier(Tier::Message, vec![message]),
            ],
            trimmed,
        })
    }

    #[test]
    fn the_budget_is_never_exceeded_and_assembly_is_deterministic() {
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        let categories = [
            FactCategory::Goal,
            FactCategory::Preference,
            FactCategory::Occupation,
            FactCategory::Other,
        ];
        for case in 0..500 {
            let mut blocks = Vec::new();
            for l in BlockLabel::ALL {
                if rng.below(3) > 0 {
                    blocks.push(block(l, &rng.text()));
                }
            }
            let facts: Vec<Fact> = (0..rng.below(30))
                .map(|i| {
                    let c = categories[rng.below(4) as usize];
                    let user = if rng.below(4) == 0 { "ada" } else { "mark" };
                    let age = rng.below(1000) as i64;
                    fact(1000 + i as u128, user, c, &rng.text(), age)
                })
                .collect();
            let summaries: Vec<ConversationSummary> = (0..rng.below(30))
                .map(|i| summary(5000 + i as u128, i as i64, &rng.text()))
                .collect();
            let turns: Vec<ConversationTurn> = (0..rng.below(40))
                .map(|_| turn(&rng.text(), &rng.text()))
                .collect();
            let message = rng.text();
            let budget = 1 + rng.below(600) as usize;
            let f = Fixture {
                blocks,
                facts,
                summaries,
                turns,
            };
            let inp = input(&f, &message, budget);
            match assemble(&inp, &CharEstimate) {
                Ok(c) => {
                    assert!(
                        c.total_tokens <= budget,
                        "case {case}: {} > {budget}",
                        c.total_tokens
                    );
                    let counted: usize = c
                        .tiers
                        .iter()
                        .flat_map(|t| &t.items)
                        .map(|i| CharEstimate.count(&i.text))
                        .sum();
                    assert_eq!(counted, c.total_tokens, "case {case}");
                    // nothing trimmed from a tier while a lower one kept items
                    let kept = |t: Tier| c.tiers.iter().any(|x| x.tier == t && !x.items.is_empty());
                    for tr in &c.trimmed {
                        match tr.tier {
                            Tier::Turns => assert!(!kept(Tier::Summaries), "case {case}"),
                            Tier::Blocks => {
                                assert!(!kept(Tier::Summaries) && !kept(Tier::Turns), "case {case}")
                            }
                            Tier::Facts => assert!(
                                !kept(Tier::Summaries) && !kept(Tier::Turns) && !kept(Tier::Blocks),
                                "case {case}"
                            ),
                            _ => {}
                        }
                    }
                    assert_eq!(assemble(&inp, &CharEstimate).unwrap(), c, "case {case}");
                    assert_eq!(reference(&inp), Ok(c), "case {case}");
                }
                Err(e @ ContextError::MessageOverBudget { needed, .. }) => {
                    assert!(needed > budget, "case {case}");
                    assert_eq!(reference(&inp), Err(e), "case {case}");
                }
                Err(e) => panic!("case {case}: {e}"),
            }
        }
    }
}
