//! Choosing what fits the budget: the retrieved items within their
//! share first, then the other tiers by priority, an item that does not
//! fit skipped or cut at a sentence, never the end of the selection.

use crate::context::{
    check_budget, item, AssembledContext, ContextError, ContextItem, ItemRun, Items, PreparedFacts,
    Role, Source, Tier, TierUsage, TokenCounter, Trimmed,
};
use crate::model::BlockLabel;

/// A retrieved item and when what it holds was said (the retrieved tier
/// shows its items in time order, whatever their rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieved {
    pub item: ContextItem,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Prepared items to choose from. Summaries and turns come in runs,
/// oldest first across and within them, so a caller can combine what it
/// holds (stored summaries, a live call's window summary) without copying;
/// the context shares the stretches of a run it shows whole.
pub struct Selection<'a> {
    /// Most essential first, as
    /// [`prepare_blocks`](crate::assembly::prepare_blocks) orders them.
    pub blocks: &'a [ContextItem],
    pub facts: &'a PreparedFacts,
    pub summaries: &'a [ItemRun],
    pub turns: &'a [ItemRun],
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
/// ends the selection. Linear in the items; copies the text of the few
/// items cut, and a handle per unbroken stretch of a prepared run shown
/// (and per block, retrieved item and turn renumbered across runs).
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

/// Where the walk put an item: left out, whole, or cut (its index in the
/// walk's `cuts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Left,
    Whole,
    Cut(usize),
}

/// The walk [`select`] takes over the tiers: where each item went, by
/// slot, and which of the sources retrieval holds are shown. The context
/// is built from the slots at the end: a stretch of a prepared run shown
/// whole as one handle, any other item shown as a handle of its own.
struct Walk<'s, 'c> {
    sel: &'s Selection<'s>,
    f: Filler<'c>,
    /// What retrieval holds, sorted: the other tiers look only their items
    /// that retrieval also holds up in what is taken (a bit of `filter`,
    /// then a binary search when it is set; not a hash per fact and
    /// summary).
    retrieved_sources: Vec<Source>,
    /// A bit per [`filter_bit`] of `retrieved_sources`: most items are not
    /// retrieved, and a bit clear rules that out without a search.
    filter: [u64; 4],
    /// By `retrieved_sources`' order: shown (in whatever tier), so not
    /// shown again.
    taken: Vec<bool>,
    retrieved: Vec<Slot>,
    kept_facts: Vec<bool>,
    blocks: Vec<Slot>,
    turn_items: Vec<(Source, &'s ContextItem)>,
    turns: Vec<Slot>,
    summary_items: Vec<&'s ContextItem>,
    summaries: Vec<Slot>,
    /// The items cut to fit, by [`Slot::Cut`] index.
    cuts: Vec<Option<ContextItem>>,
}

impl<'s, 'c> Walk<'s, 'c> {
    /// Nothing placed yet, `room` tokens to fill.
    fn new(sel: &'s Selection<'s>, counter: &'c dyn TokenCounter, room: usize) -> Self {
        let mut retrieved_sources: Vec<Source> =
            sel.retrieved.iter().map(|r| r.item.source).collect();
        retrieved_sources.sort_unstable();
        retrieved_sources.dedup();
        let mut filter = [0u64; 4];
        for s in &retrieved_sources {
            let b = filter_bit(s);
            filter[b / 64] |= 1 << (b % 64);
        }
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
            taken: vec![false; retrieved_sources.len()],
            retrieved_sources,
            filter,
            retrieved: vec![Slot::Left; sel.retrieved.len()],
            kept_facts: vec![false; sel.facts.len()],
            blocks: vec![Slot::Left; sel.blocks.len()],
            turns: vec![Slot::Left; turn_items.len()],
            turn_items,
            summaries: vec![Slot::Left; summary_items.len()],
            summary_items,
            cuts: Vec::new(),
        }
    }

    /// Where retrieval holds `s` too, its place in `retrieved_sources`.
    fn also_retrieved(&self, s: &Source) -> Option<usize> {
        let b = filter_bit(s);
        if self.filter[b / 64] & (1 << (b % 64)) == 0 {
            return None;
        }
        self.retrieved_sources.binary_search(s).ok()
    }

    /// Whether `s` is shown, of the sources retrieval holds.
    fn is_taken(&self, s: &Source) -> bool {
        self.also_retrieved(s).is_some_and(|i| self.taken[i])
    }

    /// Marks `s` (a source retrieval holds) shown or not; whether it was
    /// shown before.
    fn set_taken(&mut self, s: &Source, shown: bool) -> bool {
        match self.also_retrieved(s) {
            Some(i) => std::mem::replace(&mut self.taken[i], shown),
            None => false,
        }
    }

    /// The slot for what the filler made of an item.
    fn slot(cuts: &mut Vec<Option<ContextItem>>, placed: Placed) -> Slot {
        match placed {
            Placed::Whole => Slot::Whole,
            Placed::Cut(c) => {
                cuts.push(Some(c));
                Slot::Cut(cuts.len() - 1)
            }
            Placed::Left => Slot::Left,
        }
    }

    /// Retrieved first, within their share; what they show is not shown
    /// again. Whole items only: one cut to the share could not grow back
    /// when the rest of the budget has room.
    fn retrieved_within_share(&mut self) {
        let sel = self.sel;
        let share = sel.retrieval_share.clamp(0.0, 1.0);
        let mut share_room = (self.f.room as f64 * share as f64).floor() as usize;
        for (k, r) in sel.retrieved.iter().enumerate() {
            if self.set_taken(&r.item.source, true) {
                continue;
            }
            let placed = self.f.place(&r.item, r.item.source, false, &mut share_room);
            self.retrieved[k] = Self::slot(&mut self.cuts, placed);
            if self.retrieved[k] == Slot::Left {
                self.set_taken(&r.item.source, false);
            }
        }
    }

    /// Facts, newest extracted first, never cut.
    fn facts(&mut self, room: &mut usize) {
        let facts = self.sel.facts;
        for &i in facts.by_age.iter().rev() {
            let it = &facts.items[i as usize];
            let also = self.also_retrieved(&it.source);
            if also.is_some_and(|k| self.taken[k]) {
                continue;
            }
            if let Placed::Whole = self.f.place(it, it.source, false, room) {
                self.kept_facts[i as usize] = true;
                if let Some(k) = also {
                    self.taken[k] = true;
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
        for (k, it) in sel.blocks.iter().enumerate() {
            let later = found && it.source == Source::Block(BlockLabel::BackgroundContext);
            if later != background {
                continue;
            }
            let placed = self.f.place(it, it.source, true, room);
            self.blocks[k] = Self::slot(&mut self.cuts, placed);
        }
    }

    /// The turns, newest first.
    fn turns(&mut self, room: &mut usize) {
        for k in (0..self.turn_items.len()).rev() {
            let (source, it) = self.turn_items[k];
            let placed = self.f.place(it, source, true, room);
            self.turns[k] = Self::slot(&mut self.cuts, placed);
        }
    }

    /// What the facts, blocks and turns left: the rest of the retrieved
    /// items (then the summaries). What the message found is worth more to
    /// its answer than a summary it did not find (the user's latest calls
    /// are in the `background_context` block already); a message that
    /// retrieves nothing leaves the room to the summaries.
    fn rest_of_retrieved(&mut self, room: &mut usize) {
        let sel = self.sel;
        for (k, r) in sel.retrieved.iter().enumerate() {
            if self.retrieved[k] != Slot::Left || self.set_taken(&r.item.source, true) {
                continue;
            }
            let cut = !matches!(r.item.source, Source::Fact(_));
            let placed = self.f.place(&r.item, r.item.source, cut, room);
            self.retrieved[k] = Self::slot(&mut self.cuts, placed);
            if self.retrieved[k] == Slot::Left {
                self.set_taken(&r.item.source, false);
            }
        }
    }

    /// The summaries, newest first, skipping what retrieval shows.
    fn summaries(&mut self, room: &mut usize) {
        for k in (0..self.summary_items.len()).rev() {
            let it = self.summary_items[k];
            let also = self.also_retrieved(&it.source);
            if also.is_some_and(|i| self.taken[i]) {
                continue;
            }
            let placed = self.f.place(it, it.source, true, room);
            self.summaries[k] = Self::slot(&mut self.cuts, placed);
            if let (Some(i), false) = (also, self.summaries[k] == Slot::Left) {
                self.taken[i] = true;
            }
        }
    }

    /// What was left out whole, lowest priority first (cut items were
    /// reported as they were cut).
    fn left_out(&mut self) -> Vec<Trimmed> {
        let sel = self.sel;
        let mut trimmed = std::mem::take(&mut self.f.trimmed);
        let slots = [&self.summaries, &self.turns, &self.blocks, &self.retrieved];
        let left_slots: usize = slots
            .iter()
            .map(|s| s.iter().filter(|&&s| s == Slot::Left).count())
            .sum();
        let left_facts = self.kept_facts.iter().filter(|&&k| !k).count();
        trimmed.reserve(left_slots + left_facts);
        let left = |it: &ContextItem, source: Source| Trimmed {
            tier: it.tier,
            source,
            tokens: it.tokens,
            cut: false,
        };
        for (slot, it) in self.summaries.iter().zip(&self.summary_items) {
            if *slot == Slot::Left && !self.is_taken(&it.source) {
                trimmed.push(left(it, it.source));
            }
        }
        for (slot, (source, it)) in self.turns.iter().zip(&self.turn_items) {
            if *slot == Slot::Left {
                trimmed.push(left(it, *source));
            }
        }
        for (slot, it) in self.blocks.iter().zip(sel.blocks).rev() {
            if *slot == Slot::Left {
                trimmed.push(left(it, it.source));
            }
        }
        for &i in &sel.facts.by_age {
            let it = &sel.facts.items[i as usize];
            if !self.kept_facts[i as usize] && !self.is_taken(&it.source) {
                trimmed.push(left(it, it.source));
            }
        }
        let mut seen_retrieved = vec![false; self.retrieved_sources.len()];
        for (slot, r) in self.retrieved.iter().zip(sel.retrieved).rev() {
            let Some(i) = self.also_retrieved(&r.item.source) else {
                continue;
            };
            if *slot == Slot::Left
                && !std::mem::replace(&mut seen_retrieved[i], true)
                && !self.taken[i]
            {
                trimmed.push(left(&r.item, r.item.source));
            }
        }
        trimmed
    }

    /// The context of what was placed: every tier, in order, the
    /// retrieved items in time order (ties by rank): grouped by call.
    fn into_context(
        mut self,
        message: ContextItem,
        budget: usize,
        trimmed: Vec<Trimmed>,
    ) -> AssembledContext {
        let sel = self.sel;
        let cuts = &mut self.cuts;
        let mut blocks = TierItems::default();
        for (&slot, it) in self.blocks.iter().zip(sel.blocks) {
            blocks.add(slot, Shown::Own(it, it.source), cuts);
        }
        let mut facts = TierItems::default();
        for (pos, _) in self.kept_facts.iter().enumerate().filter(|(_, &k)| k) {
            facts.add(
                Slot::Whole,
                Shown::Shared(&sel.facts.items, pos, None),
                cuts,
            );
        }
        let mut summaries = TierItems::default();
        let positions = sel
            .summaries
            .iter()
            .flat_map(|r| (0..r.len()).map(move |p| (r, p)));
        for (&slot, (run, pos)) in self.summaries.iter().zip(positions) {
            summaries.add(slot, Shown::Shared(run, pos, None), cuts);
        }
        let mut found: Vec<(chrono::DateTime<chrono::Utc>, usize, Slot, &ContextItem)> = self
            .retrieved
            .iter()
            .zip(sel.retrieved)
            .enumerate()
            .filter(|(_, (&slot, _))| slot != Slot::Left)
            .map(|(rank, (&slot, r))| (r.at, rank, slot, &r.item))
            .collect();
        found.sort_by_key(|(at, rank, _, _)| (*at, *rank));
        let mut retrieved = TierItems::default();
        for (_, _, slot, it) in found {
            retrieved.add(slot, Shown::Own(it, it.source), cuts);
        }
        let mut turns = TierItems::default();
        let positions = sel
            .turns
            .iter()
            .flat_map(|r| (0..r.len()).map(move |p| (r, p)));
        for ((&slot, &(source, _)), (run, pos)) in
            self.turns.iter().zip(&self.turn_items).zip(positions)
        {
            turns.add(slot, Shown::Shared(run, pos, Some(source)), cuts);
        }
        let mut current = TierItems {
            tokens: message.tokens,
            ..TierItems::default()
        };
        current.items.push(message);
        let tiers = vec![
            blocks.tier(Tier::Blocks),
            facts.tier(Tier::Facts),
            summaries.tier(Tier::Summaries),
            retrieved.tier(Tier::Retrieved),
            turns.tier(Tier::Turns),
            current.tier(Tier::Message),
        ];
        AssembledContext {
            budget_tokens: budget,
            total_tokens: budget - self.f.room,
            tiers,
            trimmed,
        }
    }
}

/// An item the walk placed: one of a prepared run (at its position, shown
/// under another source when given: a turn numbered across runs), or one
/// held elsewhere, with the source it is shown as.
enum Shown<'a> {
    Shared(&'a ItemRun, usize, Option<Source>),
    Own(&'a ContextItem, Source),
}

/// A tier's items as the walk placed them, and their tokens.
#[derive(Default)]
struct TierItems {
    items: Items,
    tokens: usize,
}

impl TierItems {
    /// What `slot` holds of `shown`: nothing, the item (shared with its
    /// run when shown as prepared), or its cut.
    fn add(&mut self, slot: Slot, shown: Shown<'_>, cuts: &mut [Option<ContextItem>]) {
        let own = |it: &ContextItem, source: Source| ContextItem {
            source,
            ..it.clone()
        };
        match (slot, shown) {
            (Slot::Left, _) => {}
            (Slot::Cut(c), _) => {
                if let Some(cut) = cuts[c].take() {
                    self.tokens += cut.tokens;
                    self.items.push(cut);
                }
            }
            (Slot::Whole, Shown::Shared(run, pos, source)) => {
                let it = &run[pos];
                self.tokens += it.tokens;
                match source {
                    Some(s) if s != it.source => self.items.push(own(it, s)),
                    _ => self.items.push_shared(run, pos),
                }
            }
            (Slot::Whole, Shown::Own(it, source)) => {
                self.tokens += it.tokens;
                self.items.push(own(it, source));
            }
        }
    }

    fn tier(self, tier: Tier) -> TierUsage {
        TierUsage {
            tier,
            tokens: self.tokens,
            items: self.items,
        }
    }
}

/// Which of 256 bits stands for `s` in [`Walk`]'s filter: a byte of what
/// tells sources of a kind apart (ids are random in their last byte).
fn filter_bit(s: &Source) -> usize {
    let b = match s {
        Source::Fact(id) | Source::Summary(id) => id.as_bytes()[15],
        Source::Window {
            session, start_seq, ..
        } => session.as_bytes()[15] ^ *start_seq as u8,
        Source::StoredTurn { session, seq } => session.as_bytes()[15] ^ *seq as u8,
        Source::Turn { index, .. } => *index as u8,
        Source::Block(label) => *label as u8,
        Source::Message => 0,
    };
    b as usize
}

/// Turn items with their sources numbered across runs.
fn numbered(runs: &[ItemRun]) -> impl Iterator<Item = (Source, &ContextItem)> {
    let mut offset = 0u32;
    runs.iter().flat_map(move |c| {
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
