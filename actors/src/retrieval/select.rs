//! Choosing what fits the budget: the retrieved items within their
//! share first, then the other tiers by priority, an item that does not
//! fit skipped or cut at a sentence, never the end of the selection.

use std::collections::BTreeSet;

use crate::context::{
    check_budget, item, AssembledContext, ContextError, ContextItem, PreparedFacts, Role, Source,
    Tier, TierUsage, TokenCounter, Trimmed,
};
use crate::model::BlockLabel;

/// A retrieved item and when what it holds was said (the retrieved tier
/// shows its items in time order, whatever their rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieved {
    pub item: ContextItem,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Prepared items to choose from. Summaries and turns come in chunks,
/// oldest first across and within them, so a caller can combine what it
/// holds (stored summaries, a live call's window summary) without copying.
pub struct Selection<'a> {
    /// Most essential first, as
    /// [`prepare_blocks`](crate::assembly::prepare_blocks) orders them.
    pub blocks: &'a [ContextItem],
    pub facts: &'a PreparedFacts,
    pub summaries: &'a [&'a [ContextItem]],
    pub turns: &'a [&'a [ContextItem]],
    /// Best first. Their sources are never shown again in another tier.
    pub retrieved: &'a [Retrieved],
    /// The share of the budget (after the message) retrieved items take
    /// first; the rest of them fill what the other tiers leave.
    pub retrieval_share: f32,
    pub current_message: &'a str,
    pub budget_tokens: usize,
    /// The least room worth cutting an item down to: less would show a
    /// fragment, not a statement (`context.ranking.min_cut_tokens`).
    pub min_cut_tokens: usize,
}

/// What marks a cut item's end.
const CUT_MARK: &str = " …";

/// The longest start of `text`, ending at a sentence boundary (or, if no
/// sentence fits, a word boundary), that fits `room` tokens with the cut
/// mark. `None` when not even a word does, or `room` is under `min_tokens`
/// (the least room worth cutting down to).
pub fn cut_text(
    text: &str,
    room: usize,
    min_tokens: usize,
    counter: &dyn TokenCounter,
) -> Option<String> {
    if room < min_tokens {
        return None;
    }
    let fits = |end: usize| counter.count(&text[..end]) + counter.count(CUT_MARK) <= room;
    // The longest fitting prefix among candidate ends (ascending); the
    // count grows with the prefix, so a binary search finds it.
    let longest = |ends: &[usize]| -> Option<usize> {
        let n = ends.partition_point(|&e| fits(e));
        n.checked_sub(1).map(|i| ends[i])
    };
    let mut sentence_ends = Vec::new();
    let mut word_ends = Vec::new();
    // No prefix past this many bytes can fit (a token is never more than
    // 16 bytes of text: four characters of at most four bytes each), so a
    // long item costs no more to cut than a short one.
    let reach = room.saturating_mul(16).saturating_add(16);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i > reach {
            break;
        }
        let next_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        if matches!(c, '.' | '!' | '?') && next_space {
            sentence_ends.push(i + c.len_utf8());
        } else if c == '\n' {
            sentence_ends.push(i);
        }
        if !c.is_whitespace() && next_space {
            word_ends.push(i + c.len_utf8());
        }
    }
    // A sentence boundary, unless it keeps under half of what a word
    // boundary would (a block cut to its label line alone).
    let end = match (
        longest(&sentence_ends).filter(|&e| e > 0),
        longest(&word_ends),
    ) {
        (Some(s), Some(w)) if s * 2 < w => w,
        (Some(s), _) => s,
        (None, w) => w?,
    };
    let kept = text[..end].trim_end();
    (!kept.is_empty() && kept.len() < text.trim_end().len()).then(|| format!("{kept}{CUT_MARK}"))
}

/// Places items greedily within `room`: an item that does not fit is
/// skipped (or, when `cut` and the room is worth it, cut to fit), never
/// the end of the selection.
struct Filler<'c> {
    room: usize,
    /// The least room worth cutting an item down to.
    min_cut: usize,
    counter: &'c dyn TokenCounter,
    trimmed: Vec<Trimmed>,
}

enum Placed {
    Whole,
    Cut(ContextItem),
    Left,
}

impl Filler<'_> {
    fn place(&mut self, it: &ContextItem, source: Source, cut: bool, room: &mut usize) -> Placed {
        if it.tokens <= *room {
            *room -= it.tokens;
            self.room -= it.tokens;
            return Placed::Whole;
        }
        if cut {
            if let Some(text) = cut_text(&it.text, *room, self.min_cut, self.counter) {
                let tokens = self.counter.count(&text);
                *room -= tokens;
                self.room -= tokens;
                self.trimmed.push(Trimmed {
                    tier: it.tier,
                    source,
                    tokens: it.tokens.saturating_sub(tokens),
                    cut: true,
                });
                return Placed::Cut(ContextItem {
                    source,
                    text: text.into(),
                    tokens,
                    ..it.clone()
                });
            }
        }
        Placed::Left
    }
}

/// Chooses what fits the budget from prepared items.
///
/// Retrieved items come first, in rank order, within their share of the
/// budget. Then the other tiers, most important first: facts (newest
/// extracted first), blocks (most essential first), turns (newest first),
/// the remaining retrieved items (what the message found is worth more
/// to its answer than a summary it did not find), the
/// `background_context` block when the message found anything (it tells
/// of the latest days in general, which the found items answer better),
/// summaries (newest first), skipping what retrieval already shows. An item that does not
/// fit is skipped, or cut at a sentence boundary to fill the room left
/// (facts are never cut), and the walk goes on, so a long item never
/// ends the selection. Linear in the items; copies only handles, and the
/// text of the few items cut.
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
    let mut walk = Walk::new(sel, counter, budget - message.tokens);
    walk.retrieved_within_share();
    let mut room = walk.f.room;
    walk.facts(&mut room);
    walk.blocks(false, &mut room);
    walk.turns(&mut room);
    walk.rest_of_retrieved(&mut room);
    walk.blocks(true, &mut room);
    walk.summaries(&mut room);
    let trimmed = walk.left_out();
    Ok(walk.into_context(message, budget, trimmed))
}

/// The walk [`select`] takes over the tiers: what each placed, by slot
/// (`None`: left out), and what retrieval shows.
struct Walk<'s, 'c> {
    sel: &'s Selection<'s>,
    f: Filler<'c>,
    /// What retrieval holds, sorted: the other tiers look only their items
    /// that retrieval also holds up in what is taken (a binary search, not
    /// a hash per fact and summary).
    retrieved_sources: Vec<Source>,
    /// The sources shown, of the items retrieval also holds: not shown
    /// again.
    taken: BTreeSet<Source>,
    retrieved: Vec<Option<ContextItem>>,
    kept_facts: Vec<bool>,
    blocks: Vec<Option<ContextItem>>,
    turn_items: Vec<(Source, &'s ContextItem)>,
    turns: Vec<Option<ContextItem>>,
    summary_items: Vec<&'s ContextItem>,
    summaries: Vec<Option<ContextItem>>,
}

impl<'s, 'c> Walk<'s, 'c> {
    /// Nothing placed yet, `room` tokens to fill.
    fn new(sel: &'s Selection<'s>, counter: &'c dyn TokenCounter, room: usize) -> Self {
        let mut retrieved_sources: Vec<Source> =
            sel.retrieved.iter().map(|r| r.item.source).collect();
        retrieved_sources.sort_unstable();
        retrieved_sources.dedup();
        let turn_items: Vec<(Source, &ContextItem)> = numbered(sel.turns).collect();
        let summary_items: Vec<&ContextItem> =
            sel.summaries.iter().flat_map(|c| c.iter()).collect();
        Walk {
            sel,
            f: Filler {
                room,
                min_cut: sel.min_cut_tokens,
                counter,
                trimmed: Vec::new(),
            },
            retrieved_sources,
            taken: BTreeSet::new(),
            retrieved: vec![None; sel.retrieved.len()],
            kept_facts: vec![false; sel.facts.len()],
            blocks: vec![None; sel.blocks.len()],
            turns: vec![None; turn_items.len()],
            turn_items,
            summaries: vec![None; summary_items.len()],
            summary_items,
        }
    }

    fn also_retrieved(&self, s: &Source) -> bool {
        self.retrieved_sources.binary_search(s).is_ok()
    }

    /// Retrieved first, within their share; what they show is not shown
    /// again. Whole items only: one cut to the share could not grow back
    /// when the rest of the budget has room.
    fn retrieved_within_share(&mut self) {
        let sel = self.sel;
        let share = sel.retrieval_share.clamp(0.0, 1.0);
        let mut share_room = (self.f.room as f64 * share as f64).floor() as usize;
        for (slot, r) in self.retrieved.iter_mut().zip(sel.retrieved) {
            if !self.taken.insert(r.item.source) {
                continue;
            }
            match self.f.place(&r.item, r.item.source, false, &mut share_room) {
                Placed::Whole => *slot = Some(r.item.clone()),
                Placed::Cut(c) => *slot = Some(c),
                Placed::Left => {
                    self.taken.remove(&r.item.source);
                }
            }
        }
    }

    /// Facts, newest extracted first, never cut.
    fn facts(&mut self, room: &mut usize) {
        let facts = self.sel.facts;
        for &i in facts.by_age.iter().rev() {
            let it = &facts.items[i as usize];
            let also = self.also_retrieved(&it.source);
            if also && self.taken.contains(&it.source) {
                continue;
            }
            if let Placed::Whole = self.f.place(it, it.source, false, room) {
                self.kept_facts[i as usize] = true;
                if also {
                    self.taken.insert(it.source);
                }
            }
        }
    }

    /// The blocks, most essential first: those before the retrieved
    /// items, or (`background`) the `background_context` block after
    /// them. It tells of the user's latest days in general; with items
    /// the message found, those come first, and the block takes what they
    /// leave. The other blocks (who the agent is, whom it talks to) come
    /// before.
    fn blocks(&mut self, background: bool, room: &mut usize) {
        let sel = self.sel;
        let found = !sel.retrieved.is_empty();
        for (slot, it) in self.blocks.iter_mut().zip(sel.blocks) {
            let later = found && it.source == Source::Block(BlockLabel::BackgroundContext);
            if later != background {
                continue;
            }
            match self.f.place(it, it.source, true, room) {
                Placed::Whole => *slot = Some(it.clone()),
                Placed::Cut(c) => *slot = Some(c),
                Placed::Left => {}
            }
        }
    }

    /// The turns, newest first.
    fn turns(&mut self, room: &mut usize) {
        for (slot, (source, it)) in self.turns.iter_mut().zip(&self.turn_items).rev() {
            match self.f.place(it, *source, true, room) {
                Placed::Whole => {
                    *slot = Some(ContextItem {
                        source: *source,
                        ..(*it).clone()
                    })
                }
                Placed::Cut(c) => *slot = Some(c),
                Placed::Left => {}
            }
        }
    }

    /// What the facts, blocks and turns left: the rest of the retrieved
    /// items (then the summaries). What the message found is worth more to
    /// its answer than a summary it did not find (the user's latest calls
    /// are in the `background_context` block already); a message that
    /// retrieves nothing leaves the room to the summaries.
    fn rest_of_retrieved(&mut self, room: &mut usize) {
        let sel = self.sel;
        for (slot, r) in self.retrieved.iter_mut().zip(sel.retrieved) {
            if slot.is_some() || self.taken.contains(&r.item.source) {
                continue;
            }
            self.taken.insert(r.item.source);
            let cut = !matches!(r.item.source, Source::Fact(_));
            match self.f.place(&r.item, r.item.source, cut, room) {
                Placed::Whole => *slot = Some(r.item.clone()),
                Placed::Cut(c) => *slot = Some(c),
                Placed::Left => {
                    self.taken.remove(&r.item.source);
                }
            }
        }
    }

    /// The summaries, newest first, skipping what retrieval shows.
    fn summaries(&mut self, room: &mut usize) {
        for (slot, it) in self.summaries.iter_mut().zip(&self.summary_items).rev() {
            let also = self.retrieved_sources.binary_search(&it.source).is_ok();
            if also && self.taken.contains(&it.source) {
                continue;
            }
            match self.f.place(it, it.source, true, room) {
                Placed::Whole => *slot = Some((*it).clone()),
                Placed::Cut(c) => *slot = Some(c),
                Placed::Left => continue,
            }
            if also {
                self.taken.insert(it.source);
            }
        }
    }

    /// What was left out whole, lowest priority first (cut items were
    /// reported as they were cut).
    fn left_out(&mut self) -> Vec<Trimmed> {
        let sel = self.sel;
        let mut trimmed = std::mem::take(&mut self.f.trimmed);
        let left = |it: &ContextItem, source: Source| Trimmed {
            tier: it.tier,
            source,
            tokens: it.tokens,
            cut: false,
        };
        let shown = &self.taken;
        for (slot, it) in self.summaries.iter().zip(&self.summary_items) {
            if slot.is_none() && !shown.contains(&it.source) {
                trimmed.push(left(it, it.source));
            }
        }
        for (slot, (source, it)) in self.turns.iter().zip(&self.turn_items) {
            if slot.is_none() {
                trimmed.push(left(it, *source));
            }
        }
        for (slot, it) in self.blocks.iter().zip(sel.blocks).rev() {
            if slot.is_none() {
                trimmed.push(left(it, it.source));
            }
        }
        for &i in &sel.facts.by_age {
            let it = &sel.facts.items[i as usize];
            if !self.kept_facts[i as usize] && !shown.contains(&it.source) {
                trimmed.push(left(it, it.source));
            }
        }
        let mut seen_retrieved = std::collections::HashSet::new();
        for (slot, r) in self.retrieved.iter().zip(sel.retrieved).rev() {
            if slot.is_none()
                && seen_retrieved.insert(r.item.source)
                && !shown.contains(&r.item.source)
            {
                trimmed.push(left(&r.item, r.item.source));
            }
        }
        trimmed
    }

    /// The context of what was placed: every tier, in order, the
    /// retrieved items in time order (ties by rank): grouped by call.
    fn into_context(
        self,
        message: ContextItem,
        budget: usize,
        trimmed: Vec<Trimmed>,
    ) -> AssembledContext {
        let sel = self.sel;
        let tier = |tier, items: Vec<ContextItem>| TierUsage {
            tier,
            tokens: items.iter().map(|i| i.tokens).sum(),
            items,
        };
        let mut shown_retrieved: Vec<(chrono::DateTime<chrono::Utc>, usize, ContextItem)> = self
            .retrieved
            .into_iter()
            .zip(sel.retrieved)
            .enumerate()
            .filter_map(|(rank, (slot, r))| slot.map(|i| (r.at, rank, i)))
            .collect();
        shown_retrieved.sort_by_key(|(at, rank, _)| (*at, *rank));
        let facts = sel
            .facts
            .items
            .iter()
            .zip(&self.kept_facts)
            .filter(|(_, &k)| k)
            .map(|(it, _)| it.clone())
            .collect();
        let tiers = vec![
            tier(Tier::Blocks, self.blocks.into_iter().flatten().collect()),
            tier(Tier::Facts, facts),
            tier(
                Tier::Summaries,
                self.summaries.into_iter().flatten().collect(),
            ),
            tier(
                Tier::Retrieved,
                shown_retrieved.into_iter().map(|(_, _, i)| i).collect(),
            ),
            tier(Tier::Turns, self.turns.into_iter().flatten().collect()),
            tier(Tier::Message, vec![message]),
        ];
        AssembledContext {
            budget_tokens: budget,
            total_tokens: budget - self.f.room,
            tiers,
            trimmed,
        }
    }
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
