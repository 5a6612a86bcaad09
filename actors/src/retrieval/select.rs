//! Choosing what fits the budget: the retrieved items within their
//! share first, then the other tiers by priority, an item that does not
//! fit skipped or cut at a sentence, never the end of the selection.

use crate::context::{
    check_budget, item, AssembledContext, ContextError, ContextItem, ItemRun, Items, PreparedFacts,
    Role, Source, Tier, TierUsage, TokenCounter, Trimmed, TrimmedItems,
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
    // No prefix past this many bytes can fit (an estimated token is never
    // more than 16 bytes of text: four characters of at most four bytes
    // each), so a long item costs no more to cut than a short one. (A
    // model's token may be longer, a run of dashes say: the cut then keeps
    // less than would fit, never more.)
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
    /// Places `it` whole if it fits `room`, else (when `cut`) cut to fit.
    /// Called for every item the walk looks at: what fits, or cannot be
    /// cut for want of room, is decided here; the cut itself is out of
    /// line.
    #[inline]
    fn place(&mut self, it: &ContextItem, source: Source, cut: bool, room: &mut usize) -> Placed {
        if it.tokens <= *room {
            *room -= it.tokens;
            self.room -= it.tokens;
            return Placed::Whole;
        }
        if !cut || *room < self.min_cut {
            return Placed::Left;
        }
        self.cut(it, source, room)
    }

    /// Whether no item of `run` (of its list) can be placed in `room`,
    /// whole or cut: the walk over it is done.
    #[inline]
    fn nothing_fits(&self, run: &ItemRun, room: usize) -> bool {
        room < run.least_tokens() && room < self.min_cut
    }

    /// `it` cut to fit `room`, or left out when not even a word does.
    #[inline(never)]
    fn cut(&mut self, it: &ContextItem, source: Source, room: &mut usize) -> Placed {
        let Some(text) = cut_text(&it.text, *room, self.min_cut, self.counter) else {
            return Placed::Left;
        };
        let tokens = self.counter.count(&text);
        *room -= tokens;
        self.room -= tokens;
        self.trimmed.push(Trimmed {
            tier: it.tier,
            source,
            tokens: it.tokens.saturating_sub(tokens),
            cut: true,
        });
        Placed::Cut(ContextItem {
            source,
            text: text.into(),
            tokens,
            ..it.clone()
        })
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
/// summaries (newest first), skipping what retrieval already shows. An
/// item that does not fit is skipped, or cut at a sentence boundary to
/// fill the room left (facts are never cut), and the walk goes on, so a
/// long item never ends the selection. The facts are taken all at once when they all fit;
/// the newest stretch of a run of turns or summaries that fits whole is
/// taken at once (its tokens read from sums the run was made with), and
/// the walk over a run stops where no item of its list could fit, whole
/// or cut. Facts are looked at one by one where retrieval holds facts
/// (each could be shown already); of a run of summaries, the items
/// retrieval holds too (found by source in an index the list keeps), the
/// stretches between them as above. Copies the text of the few items cut,
/// and a handle per unbroken stretch of a prepared run shown or left out
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

/// Where the walk put an item: left out, whole, or cut (the cut is in the
/// walk's `cuts`, under the item's list and place). One byte: the walk
/// keeps one per item it looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Left,
    Whole,
    Cut,
}

/// The lists the walk places items from, naming a cut's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Retrieved,
    Blocks,
    Turns,
    Summaries,
}

/// The walk [`select`] takes over the tiers: where each item went, by
/// slot, and which of the sources retrieval holds are shown. The context
/// is built from the slots at the end: a stretch of a prepared run shown
/// whole as one handle, any other item shown as a handle of its own.
struct Walk<'s, 'c> {
    sel: &'s Selection<'s>,
    f: Filler<'c>,
    /// What retrieval holds, sorted: the facts tier looks only its items
    /// that retrieval also holds up in what is taken (a bit of `filter`,
    /// then a binary search when it is set; not a hash per fact); a run
    /// of summaries finds the items retrieval holds by their sources
    /// ([`Walk::retrieved_in`]).
    retrieved_sources: Vec<Source>,
    /// A bit per [`filter_bit`] of `retrieved_sources`: most items are not
    /// retrieved, and a bit clear rules that out without a search.
    filter: [u64; 4],
    /// A bit per [`Source::kind_bit`] of `retrieved_sources`: an item of a kind
    /// retrieval holds none of is looked up no further (a tier of facts
    /// when retrieval found only turns).
    kinds: u8,
    /// By `retrieved_sources`' order: shown (in whatever tier), so not
    /// shown again.
    taken: Vec<bool>,
    retrieved: Vec<Slot>,
    kept_facts: Vec<bool>,
    blocks: Vec<Slot>,
    /// By position across `sel.turns`' runs, in order.
    turns: Vec<Slot>,
    /// What the turns of each of `sel.turns`' runs are numbered from (a
    /// turn's index across the runs: the live call's after the previous
    /// call's).
    turn_bases: Vec<u32>,
    /// By position across `sel.summaries`' runs, in order.
    summaries: Vec<Slot>,
    /// The items cut to fit, by list and place.
    cuts: Vec<(List, usize, ContextItem)>,
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
        let kinds = retrieved_sources.iter().fold(0, |k, s| k | s.kind_bit());
        let turn_count = sel.turns.iter().map(|r| r.len()).sum();
        let summary_count = sel.summaries.iter().map(|r| r.len()).sum();
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
            kinds,
            retrieved: vec![Slot::Left; sel.retrieved.len()],
            kept_facts: vec![false; sel.facts.len()],
            blocks: vec![Slot::Left; sel.blocks.len()],
            turns: vec![Slot::Left; turn_count],
            turn_bases: turn_bases(sel.turns),
            summaries: vec![Slot::Left; summary_count],
            cuts: Vec::new(),
        }
    }

    /// Where retrieval holds `s` too, its place in `retrieved_sources`.
    #[inline]
    fn also_retrieved(&self, s: &Source) -> Option<usize> {
        if self.kinds & s.kind_bit() == 0 {
            return None;
        }
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

    /// The slot for what the filler made of the item at `k` of `list`.
    fn slot(&mut self, list: List, k: usize, placed: Placed) -> Slot {
        match placed {
            Placed::Whole => Slot::Whole,
            Placed::Cut(c) => {
                self.cuts.push((list, k, c));
                Slot::Cut
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
            self.retrieved[k] = self.slot(List::Retrieved, k, placed);
            if self.retrieved[k] == Slot::Left {
                self.set_taken(&r.item.source, false);
            }
        }
    }

    /// Facts, newest extracted first, never cut.
    fn facts(&mut self, room: &mut usize) {
        let facts = self.sel.facts;
        // All fit, and retrieval holds nothing of their kind: all shown,
        // without a look at each.
        if self.kinds & facts.items.kinds() == 0 && facts.tier_tokens <= *room {
            for &i in &facts.by_age {
                self.kept_facts[i as usize] = true;
            }
            *room -= facts.tier_tokens;
            self.f.room -= facts.tier_tokens;
            return;
        }
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
            self.blocks[k] = self.slot(List::Blocks, k, placed);
        }
    }

    /// The turns, newest first.
    fn turns(&mut self, room: &mut usize) {
        let sel = self.sel;
        let mut end = self.turns.len();
        for (r, run) in sel.turns.iter().enumerate().rev() {
            let base = self.turn_bases[r];
            let first = end - run.len();
            // The newest that fit one after another, shown whole at once.
            let fit = self.whole_from(run, 0..run.len(), room);
            self.turns[first + fit..end].fill(Slot::Whole);
            for (pos, it) in run[..fit].iter().enumerate().rev() {
                if self.f.nothing_fits(run, *room) {
                    break;
                }
                let k = first + pos;
                let placed = self.f.place(it, numbered_source(it, base), true, room);
                self.turns[k] = self.slot(List::Turns, k, placed);
            }
            end = first;
        }
    }

    /// Where the newest items of `run` `within` a range of it that fit
    /// `room` one after another begin (the range's end when not even its
    /// newest does), taken out of `room` as [`Filler::place`] would one by
    /// one.
    fn whole_from(
        &mut self,
        run: &ItemRun,
        within: std::ops::Range<usize>,
        room: &mut usize,
    ) -> usize {
        // The tokens from a position to the end shrink as it grows: the
        // first position whose stretch fits.
        let (mut lo, mut hi) = (within.start, within.end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if run.tokens(mid..within.end) <= *room {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let tokens = run.tokens(lo..within.end);
        *room -= tokens;
        self.f.room -= tokens;
        lo
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
            self.retrieved[k] = self.slot(List::Retrieved, k, placed);
            if self.retrieved[k] == Slot::Left {
                self.set_taken(&r.item.source, false);
            }
        }
    }

    /// The summaries, newest first, skipping what retrieval shows.
    fn summaries(&mut self, room: &mut usize) {
        let sel = self.sel;
        let mut end = self.summaries.len();
        for run in sel.summaries.iter().rev() {
            let first = end - run.len();
            end = first;
            // Between the items retrieval holds too, the newest that fit
            // one after another are shown whole at once; the others one by
            // one; a held item unless retrieval shows it.
            let held = self.retrieved_in(run);
            let mut rest = &held[..];
            let mut top = run.len();
            'run: loop {
                let (lo, mark) = match rest.split_last() {
                    Some((&(pos, i), earlier)) => {
                        rest = earlier;
                        (pos + 1, Some((pos, i)))
                    }
                    None => (0, None),
                };
                let fit = self.whole_from(run, lo..top, room);
                self.summaries[first + fit..first + top].fill(Slot::Whole);
                for (pos, it) in run[lo..fit].iter().enumerate().rev() {
                    if self.f.nothing_fits(run, *room) {
                        break 'run;
                    }
                    let k = first + lo + pos;
                    let placed = self.f.place(it, it.source, true, room);
                    self.summaries[k] = self.slot(List::Summaries, k, placed);
                }
                let Some((pos, i)) = mark else {
                    break;
                };
                if self.f.nothing_fits(run, *room) {
                    break;
                }
                if !self.taken[i] {
                    let (k, it) = (first + pos, &run[pos]);
                    let placed = self.f.place(it, it.source, true, room);
                    self.summaries[k] = self.slot(List::Summaries, k, placed);
                    self.taken[i] = self.summaries[k] != Slot::Left;
                }
                top = pos;
            }
        }
    }

    /// The positions in `run` of the items retrieval holds too, in order,
    /// each with the place of its source in `retrieved_sources`: looked
    /// up by source, not by a look at every item.
    fn retrieved_in(&self, run: &ItemRun) -> Vec<(usize, usize)> {
        let mut held = Vec::new();
        if self.kinds & run.kinds() == 0 {
            return held;
        }
        for (i, s) in self.retrieved_sources.iter().enumerate() {
            if s.kind_bit() & run.kinds() != 0 {
                held.extend(run.positions_of(s).map(|pos| (pos, i)));
            }
        }
        held.sort_unstable();
        held
    }

    /// What was left out whole, lowest priority first (cut items were
    /// reported as they were cut): each unbroken stretch of a prepared run
    /// left out as one handle on it.
    fn left_out(&mut self) -> TrimmedItems {
        let sel = self.sel;
        let mut trimmed: TrimmedItems = std::mem::take(&mut self.f.trimmed).into();
        let left = |it: &ContextItem, source: Source| Trimmed {
            tier: it.tier,
            source,
            tokens: it.tokens,
            cut: false,
        };
        let mut offset = 0;
        for run in sel.summaries {
            let slots = &self.summaries[offset..offset + run.len()];
            // (an item retrieval shows is not left out)
            let shown: Vec<usize> = (self.retrieved_in(run).into_iter())
                .filter(|&(_, i)| self.taken[i])
                .map(|(pos, _)| pos)
                .collect();
            left_stretches(run, slots, &shown, &mut trimmed);
            offset += run.len();
        }
        let mut offset = 0;
        for (run, &base) in sel.turns.iter().zip(&self.turn_bases) {
            let slots = &self.turns[offset..offset + run.len()];
            if base == 0 {
                // (numbered as they are: no turn is a record of its own)
                left_stretches(run, slots, &[], &mut trimmed);
                offset += run.len();
                continue;
            }
            let mut stretch = LeftStretch::new(run);
            for (pos, it) in run.iter().enumerate() {
                let source = numbered_source(it, base);
                let out = slots[pos] == Slot::Left;
                // (A turn numbered anew is a record of its own.)
                let renumbered = out && source != it.source;
                stretch.at(pos, out && !renumbered, &mut trimmed);
                if renumbered {
                    trimmed.push(left(it, source));
                }
            }
            stretch.at(run.len(), false, &mut trimmed);
            offset += run.len();
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

    /// The cut made of the item at `k` of `list`.
    fn take_cut(&mut self, list: List, k: usize) -> Option<ContextItem> {
        let at = self.cuts.iter().position(|c| c.0 == list && c.1 == k)?;
        Some(self.cuts.swap_remove(at).2)
    }

    /// The items of prepared `runs` as `slots` (by position across them;
    /// the walk's slots of `list`) place them: each unbroken stretch of
    /// whole items as one handle on its run, each cut (kept under `list`)
    /// as an item of its own. `bases`, when given, number the turns of
    /// each run across them; a turn whose number changes so is an item of
    /// its own, under its new number.
    fn runs_shown(
        &mut self,
        list: List,
        slots: &[Slot],
        runs: &[ItemRun],
        bases: Option<&[u32]>,
        out: &mut TierItems,
    ) {
        let mut offset = 0;
        for (r, run) in runs.iter().enumerate() {
            let base = bases.map_or(0, |b| b[r]);
            let run_slots = &slots[offset..offset + run.len()];
            let mut pos = 0;
            while pos < run_slots.len() {
                match run_slots[pos] {
                    Slot::Left => pos += 1,
                    Slot::Cut => {
                        if let Some(cut) = self.take_cut(list, offset + pos) {
                            out.tokens += cut.tokens;
                            out.items.push(cut);
                        }
                        pos += 1;
                    }
                    Slot::Whole => {
                        let it = &run[pos];
                        // (a run numbered from 0 keeps its numbers)
                        let renumbered =
                            |it: &ContextItem| base != 0 && numbered_source(it, base) != it.source;
                        if renumbered(it) {
                            out.tokens += it.tokens;
                            out.items.push(ContextItem {
                                source: numbered_source(it, base),
                                ..it.clone()
                            });
                            pos += 1;
                            continue;
                        }
                        // To the first item not whole or numbered anew.
                        let end = (pos..run_slots.len())
                            .find(|&e| run_slots[e] != Slot::Whole || renumbered(&run[e]))
                            .unwrap_or(run_slots.len());
                        out.tokens += run.tokens(pos..end);
                        out.items.push_shared_range(run, pos..end);
                        pos = end;
                    }
                }
            }
            offset += run.len();
        }
    }

    /// The context of what was placed: every tier, in order, the
    /// retrieved items in time order (ties by rank): grouped by call.
    fn into_context(
        mut self,
        message: ContextItem,
        budget: usize,
        trimmed: TrimmedItems,
    ) -> AssembledContext {
        let sel = self.sel;
        let mut blocks = TierItems::default();
        for (k, it) in sel.blocks.iter().enumerate() {
            match self.blocks[k] {
                Slot::Left => {}
                Slot::Whole => blocks.add(it.clone()),
                Slot::Cut => {
                    if let Some(cut) = self.take_cut(List::Blocks, k) {
                        blocks.add(cut);
                    }
                }
            }
        }
        let mut facts = TierItems::default();
        let kept = &self.kept_facts;
        let mut pos = 0;
        while pos < kept.len() {
            if !kept[pos] {
                pos += 1;
                continue;
            }
            let end = pos
                + kept[pos..]
                    .iter()
                    .position(|&k| !k)
                    .unwrap_or(kept.len() - pos);
            facts.tokens += sel.facts.items.tokens(pos..end);
            facts.items.push_shared_range(&sel.facts.items, pos..end);
            pos = end;
        }
        let mut summaries = TierItems::default();
        let slots = std::mem::take(&mut self.summaries);
        self.runs_shown(List::Summaries, &slots, sel.summaries, None, &mut summaries);
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
        for (_, rank, slot, it) in found {
            match slot {
                Slot::Left => {}
                Slot::Whole => retrieved.add(it.clone()),
                Slot::Cut => {
                    if let Some(cut) = self.take_cut(List::Retrieved, rank) {
                        retrieved.add(cut);
                    }
                }
            }
        }
        let mut turns = TierItems::default();
        let bases = std::mem::take(&mut self.turn_bases);
        let slots = std::mem::take(&mut self.turns);
        self.runs_shown(List::Turns, &slots, sel.turns, Some(&bases), &mut turns);
        let mut current = TierItems::default();
        current.add(message);
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

/// The stretches of a run left out whole, gathered position by position
/// into [`TrimmedItems`].
struct LeftStretch<'r> {
    run: &'r ItemRun,
    from: Option<usize>,
}

impl<'r> LeftStretch<'r> {
    fn new(run: &'r ItemRun) -> Self {
        LeftStretch { run, from: None }
    }

    /// Whether the item at `pos` is left out (`out`); a stretch ends, into
    /// `trimmed`, at the first position that is not (the run's length
    /// ends the last).
    fn at(&mut self, pos: usize, out: bool, trimmed: &mut TrimmedItems) {
        match (out, self.from) {
            (true, None) => self.from = Some(pos),
            (false, Some(f)) => {
                trimmed.push_run(self.run, f..pos);
                self.from = None;
            }
            _ => {}
        }
    }
}

/// Each stretch of `run` its `slots` leave out whole, as one handle on it,
/// into `trimmed` (what [`LeftStretch`] gathers, from the slots alone),
/// but for the positions in `shown` (in order: shown elsewhere).
fn left_stretches(run: &ItemRun, slots: &[Slot], shown: &[usize], trimmed: &mut TrimmedItems) {
    let mut shown = shown.iter().copied().peekable();
    let mut pos = 0;
    while let Some(from) = slots[pos..].iter().position(|&s| s == Slot::Left) {
        let mut from = pos + from;
        let end = slots[from..]
            .iter()
            .position(|&s| s != Slot::Left)
            .map_or(slots.len(), |e| from + e);
        while let Some(at) = shown.next_if(|&at| at < end) {
            if at >= from {
                if from < at {
                    trimmed.push_run(run, from..at);
                }
                from = at + 1;
            }
        }
        if from < end {
            trimmed.push_run(run, from..end);
        }
        pos = end;
    }
}

/// A tier's items as the walk placed them, and their tokens.
#[derive(Default)]
struct TierItems {
    items: Items,
    tokens: usize,
}

impl TierItems {
    /// An item of its own.
    fn add(&mut self, item: ContextItem) {
        self.tokens += item.tokens;
        self.items.push(item);
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
#[inline]
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

/// What each run's turns are numbered from across `runs`: a run's turn
/// index plus its base is its index across them (each run after one that
/// ends with a turn starts after that turn).
fn turn_bases(runs: &[ItemRun]) -> Vec<u32> {
    let mut offset = 0u32;
    runs.iter()
        .map(|c| {
            let base = offset;
            if let Some(Source::Turn { index, .. }) = c.last().map(|l| l.source) {
                offset = base + index + 1;
            }
            base
        })
        .collect()
}

/// The source `it` (of a run numbered from `base`) is shown under.
fn numbered_source(it: &ContextItem, base: u32) -> Source {
    match it.source {
        Source::Turn { index, role } => Source::Turn {
            index: base + index,
            role,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{CharEstimate, PreparedFacts};
    use crate::model::{Fact, FactCategory, Visibility};
    use chrono::{Duration, TimeZone, Utc};
    use uuid::Uuid;

    /// A fixed sequence of numbers (no seed from the clock).
    struct Seq(u64);

    impl Seq {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }

        /// Now and then no text (an item of no tokens), else [`Seq::text`].
        fn text_or_none(&mut self, most: u64) -> String {
            if self.below(8) == 0 {
                String::new()
            } else {
                self.text(most)
            }
        }

        /// `run`, or a part of it (its list's least tokens and kinds
        /// those of the whole).
        fn part_of(&mut self, run: ItemRun) -> ItemRun {
            let front = (self.below(4) as usize).min(run.len());
            let back = (self.below(4) as usize).min(run.len() - front);
            run.slice(front..run.len() - back)
        }

        /// Sentences, of one to `most` words in all.
        fn text(&mut self, most: u64) -> String {
            let words = 1 + self.below(most);
            (0..words)
                .map(|w| {
                    let word = ["tea", "harbour", "interview", "a", "onsite", "Porto"]
                        [self.below(6) as usize];
                    if w % 7 == 6 {
                        format!("{word}.")
                    } else {
                        word.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    /// What the walk does, item by item, as its documentation says, with
    /// no blocks and no share for retrieval: every fact that fits (newest
    /// extracted first), then the turns newest first, then the retrieved
    /// items in order (a fact whole or not at all), then the summaries
    /// newest first, each whole when it fits, else cut to the room when it
    /// is worth cutting to; a source shown once. The sources shown, per
    /// tier (facts, summaries, turns, retrieved), as (source, tokens), and
    /// what was left out or cut.
    #[allow(clippy::type_complexity)]
    fn item_by_item(
        facts: &PreparedFacts,
        summaries: &[ItemRun],
        turns: &[ItemRun],
        retrieved: &[Retrieved],
        room: usize,
        min_cut: usize,
    ) -> (Vec<Vec<(Source, usize)>>, Vec<(Source, usize, bool)>) {
        let counter = &CharEstimate;
        let mut room = room;
        let mut left = Vec::new();
        let mut kept = vec![false; facts.items.len()];
        let mut taken: Vec<Source> = Vec::new();
        for &i in facts.by_age.iter().rev() {
            let it = &facts.items[i as usize];
            if it.tokens <= room {
                room -= it.tokens;
                kept[i as usize] = true;
                taken.push(it.source);
            }
        }
        let mut place = |it: &ContextItem, source: Source, room: &mut usize| {
            if it.tokens <= *room {
                *room -= it.tokens;
                return Some(it.tokens);
            }
            if matches!(source, Source::Fact(_)) {
                return None;
            }
            let cut = cut_text(&it.text, *room, min_cut, counter)?;
            let tokens = counter.count(&cut);
            *room -= tokens;
            left.push((source, it.tokens - tokens, true));
            Some(tokens)
        };
        let bases = turn_bases(turns);
        let mut shown_turns = vec![Vec::new(); turns.len()];
        for (r, run) in turns.iter().enumerate().rev() {
            for it in run.iter().rev() {
                let source = numbered_source(it, bases[r]);
                if let Some(t) = place(it, source, &mut room) {
                    shown_turns[r].push((source, t));
                }
            }
        }
        let mut shown_retrieved = Vec::new();
        let mut retrieved_left = vec![true; retrieved.len()];
        for (k, r) in retrieved.iter().enumerate() {
            let source = r.item.source;
            if taken.contains(&source) {
                continue;
            }
            if let Some(t) = place(&r.item, source, &mut room) {
                taken.push(source);
                shown_retrieved.push((source, t));
                retrieved_left[k] = false;
            }
        }
        let mut shown_summaries = vec![Vec::new(); summaries.len()];
        for (r, run) in summaries.iter().enumerate().rev() {
            for it in run.iter().rev() {
                if taken.contains(&it.source) {
                    continue;
                }
                if let Some(t) = place(it, it.source, &mut room) {
                    shown_summaries[r].push((it.source, t));
                    if retrieved.iter().any(|x| x.item.source == it.source) {
                        taken.push(it.source);
                    }
                }
            }
        }
        let cut: Vec<Source> = left.iter().map(|l| l.0).collect();
        for (run, r) in summaries.iter().zip(&shown_summaries) {
            for it in run.iter() {
                if !r.iter().any(|s| s.0 == it.source) && !taken.contains(&it.source) {
                    left.push((it.source, it.tokens, false));
                }
            }
        }
        for ((run, r), base) in turns.iter().zip(&shown_turns).zip(&bases) {
            for it in run.iter() {
                let source = numbered_source(it, *base);
                if !r.iter().any(|s| s.0 == source) && !cut.contains(&source) {
                    left.push((source, it.tokens, false));
                }
            }
        }
        for &i in &facts.by_age {
            let it = &facts.items[i as usize];
            if !kept[i as usize] && !taken.contains(&it.source) {
                left.push((it.source, it.tokens, false));
            }
        }
        let mut reported = Vec::new();
        for (r, &out) in retrieved.iter().zip(&retrieved_left).rev() {
            let source = r.item.source;
            if out && !taken.contains(&source) && !reported.contains(&source) {
                reported.push(source);
                left.push((source, r.item.tokens, false));
            }
        }
        let shown_facts = (0..facts.items.len())
            .filter(|&i| kept[i])
            .map(|i| (facts.items[i].source, facts.items[i].tokens))
            .collect();
        let in_order = |runs: Vec<Vec<(Source, usize)>>| -> Vec<(Source, usize)> {
            runs.into_iter().flat_map(|r| r.into_iter().rev()).collect()
        };
        (
            vec![
                shown_facts,
                in_order(shown_summaries),
                in_order(shown_turns),
                shown_retrieved,
            ],
            left,
        )
    }

    /// What retrieval holds in the walk's test case `case`: half the
    /// time a fact too long to show (one of the user's or another), so the
    /// facts are looked at one by one; half the time summaries too.
    fn retrieved_for(
        case: u128,
        seq: &mut Seq,
        fact_list: &[Fact],
        summaries: &[ItemRun],
        budget: usize,
    ) -> Vec<Retrieved> {
        let counter = &CharEstimate;
        let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        // Half the time, retrieval holds a fact too long to show (one
        // of the user's or another): the facts are looked at one by one.
        let mut retrieved: Vec<Retrieved> = match seq.below(4) {
            0 | 1 => Vec::new(),
            pick => {
                let id = match fact_list.get(seq.below(12) as usize) {
                    Some(f) if pick == 2 => f.fact_id,
                    _ => Uuid::from_u128(u128::MAX - case),
                };
                let text = "word ".repeat(budget);
                let it = item(
                    counter,
                    Tier::Retrieved,
                    Source::Fact(id),
                    Role::System,
                    text,
                );
                vec![Retrieved { item: it, at: t0 }]
            }
        };
        // Half the time, retrieval holds summaries too: some of the
        // runs' (as they are, or in other words), perhaps one twice,
        // perhaps one no run holds. The summaries are placed around them.
        if seq.below(2) == 0 {
            let held: Vec<&ContextItem> = summaries.iter().flat_map(|r| r.iter()).collect();
            for _ in 0..1 + seq.below(4) {
                let (source, text) = match held.get(seq.below(held.len() as u64 + 1) as usize) {
                    Some(it) if it.tokens > 0 && seq.below(2) == 0 => {
                        (it.source, it.text.to_string())
                    }
                    Some(it) => (it.source, seq.text(90)),
                    None => (
                        Source::Summary(Uuid::from_u128(u128::MAX - case)),
                        seq.text(30),
                    ),
                };
                let it = item(counter, Tier::Retrieved, source, Role::System, text);
                retrieved.push(Retrieved { item: it, at: t0 });
            }
        }
        retrieved
    }

    /// The walk takes what fits of a run at once, and stops looking when
    /// nothing more can fit: what it shows, cuts and leaves out is what
    /// the walk item by item gives, over runs of every size and budgets
    /// from none to all.
    #[test]
    fn the_walk_by_stretches_shows_and_leaves_what_the_walk_item_by_item_does() {
        let counter = &CharEstimate;
        let t0 = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        let mut seq = Seq(11);
        let mut shown_whole_runs = 0;
        for case in 0..400u128 {
            let fact_list: Vec<Fact> = (0..seq.below(12))
                .map(|n| Fact {
                    fact_id: Uuid::from_u128(case << 32 | n as u128),
                    agent_id: "kairix".into(),
                    user_id: "mark".into(),
                    category: FactCategory::Preference,
                    content: seq.text(12),
                    subject: None,
                    visibility: Visibility::Private,
                    source_session_id: None,
                    extracted_at: t0 + Duration::minutes(seq.below(1000) as i64),
                    conflicts_with: None,
                    speaker: Default::default(),
                })
                .collect();
            let facts = PreparedFacts::new(&fact_list, "mark", counter);
            let summaries: Vec<ItemRun> = (0..1 + seq.below(3))
                .map(|r| {
                    let run: ItemRun = (0..seq.below(15))
                        .map(|n| {
                            let id = Uuid::from_u128(
                                1 << 100 | case << 32 | (r as u128) << 16 | n as u128,
                            );
                            let text = seq.text_or_none(60);
                            item(
                                counter,
                                Tier::Summaries,
                                Source::Summary(id),
                                Role::System,
                                text,
                            )
                        })
                        .collect::<Vec<_>>()
                        .into();
                    seq.part_of(run)
                })
                .collect();
            let turns: Vec<ItemRun> = (0..1 + seq.below(2))
                .map(|_| {
                    let run: ItemRun = (0..seq.below(20))
                        .map(|n| {
                            let role = if n % 2 == 0 {
                                Role::User
                            } else {
                                Role::Assistant
                            };
                            let source = Source::Turn {
                                index: n as u32 / 2,
                                role,
                            };
                            item(counter, Tier::Turns, source, role, seq.text_or_none(40))
                        })
                        .collect::<Vec<_>>()
                        .into();
                    seq.part_of(run)
                })
                .collect();
            let everything: usize = facts.tier_tokens
                + summaries
                    .iter()
                    .chain(&turns)
                    .map(|r| r.tokens(0..r.len()))
                    .sum::<usize>();
            let min_cut = [0, 8, 20][seq.below(3) as usize];
            let budget = 4 + seq.below(everything as u64 + 40) as usize;
            let retrieved = retrieved_for(case, &mut seq, &fact_list, &summaries, budget);
            let sel = Selection {
                blocks: &[],
                facts: &facts,
                summaries: &summaries,
                turns: &turns,
                retrieved: &retrieved,
                retrieval_share: 0.0,
                current_message: "Hi",
                budget_tokens: budget,
                min_cut_tokens: min_cut,
            };
            let ctx = select(&sel, counter).unwrap();
            let room = budget - counter.count("Hi");
            let (shown, left) = item_by_item(&facts, &summaries, &turns, &retrieved, room, min_cut);
            let tier = |t: Tier| -> Vec<(Source, usize)> {
                let usage = ctx.tiers.iter().find(|u| u.tier == t).unwrap();
                assert_eq!(
                    usage.tokens,
                    usage.items.iter().map(|i| i.tokens).sum::<usize>()
                );
                usage.items.iter().map(|i| (i.source, i.tokens)).collect()
            };
            assert_eq!(tier(Tier::Facts), shown[0], "case {case}: facts");
            assert_eq!(tier(Tier::Summaries), shown[1], "case {case}: summaries");
            assert_eq!(tier(Tier::Turns), shown[2], "case {case}: turns");
            assert_eq!(tier(Tier::Retrieved), shown[3], "case {case}: retrieved");
            let shown_tokens: usize = shown.iter().flatten().map(|s| s.1).sum();
            assert_eq!(ctx.total_tokens, shown_tokens + counter.count("Hi"));
            let trimmed: Vec<(Source, usize, bool)> = ctx
                .trimmed
                .iter()
                .map(|t| (t.source, t.tokens, t.cut))
                .collect();
            assert_eq!(trimmed, left, "case {case}: left out, in order");
            shown_whole_runs += summaries
                .iter()
                .chain(&turns)
                .filter(|r| {
                    !r.is_empty()
                        && shown[1..3]
                            .iter()
                            .flatten()
                            .filter(|s| r.iter().any(|i| i.source == s.0))
                            .count()
                            == r.len()
                })
                .count();
        }
        // (runs shown whole, the stretch taken at once, and runs cut short)
        assert!(shown_whole_runs > 100, "{shown_whole_runs}");
    }
}
