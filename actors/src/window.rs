//! In-session rolling memory (seed `003`): a sliding window of the
//! session's messages summarized in the background, read without waiting.
//!
//! Every user and assistant message has a sequence number (turn `i` is
//! `2i` and `2i + 1`). When a round ends at `last_seq >= threshold` and no
//! summary is in flight, the window `[max(0, end − window + 1), end]`
//! (aligned so that it starts on a user message) is summarized in the
//! background: a memory is recorded as `processing` with the previous
//! completed one as its `base_id`, and becomes `completed` (or `failed`)
//! when the summary comes back. At most one is in flight per session.
//!
//! A read never waits: it takes the latest completed memory and the gap of
//! raw messages after it ("caught up" when nothing newer is processing), or,
//! while the newest is still processing, the previous completed one with a
//! larger gap.
//!
//! The long layer (seed `001`): the completed windows a read shows form a
//! chain back from the latest, each ending before the next one starts. When
//! the chain's older windows (all but the latest) reach a count or a size,
//! they fold, with the previous narrative, into a long narrative of the
//! call so far, made in the background like a window (one at a time). A
//! read shows the latest completed narrative, the chain after it and the
//! gap; windows a narrative covers are dropped once it completes. Every
//! memory keeps the sequence range of the raw messages it stands for, so it
//! can be regenerated. Summaries whose first 120 characters match a newer
//! one's are shown once ([`dedup_key`]).
//!
//! This is pure state; the session actor owns one per session and runs the
//! summaries.

use serde::Serialize;

/// Where a memory stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryStatus {
    Processing,
    Completed,
    /// The summary could not be made; the next round may try again.
    Failed,
}

/// One summary of a window of messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowMemory {
    pub id: u64,
    pub start_seq: u64,
    pub end_seq: u64,
    /// The completed memory this one extends, if any.
    pub base_id: Option<u64>,
    pub status: MemoryStatus,
    pub summary: Option<String>,
}

/// A summary to make: the messages `start_seq..=end_seq`, on top of the
/// memory `base_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowJob {
    pub id: u64,
    pub start_seq: u64,
    pub end_seq: u64,
    pub base_id: Option<u64>,
}

/// A narrative of the call from its first message to `end_seq`, folded
/// from window summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LongMemory {
    pub id: u64,
    /// Always 0: a narrative covers the call from its start.
    pub start_seq: u64,
    pub end_seq: u64,
    /// The windows folded in (their ids).
    pub source_ids: Vec<u64>,
    /// The narrative it extends, if any.
    pub base_id: Option<u64>,
    pub status: MemoryStatus,
    pub summary: Option<String>,
}

/// A fold to make: the narrative `base_id` (if any) and the summaries of
/// `windows`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldJob {
    pub id: u64,
    pub end_seq: u64,
    pub base_id: Option<u64>,
    pub windows: Vec<u64>,
}

/// The key summaries are de-duplicated by (seed `001`): a hash of their
/// first 120 characters, case and surrounding space ignored.
pub fn dedup_key(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut prefix = String::with_capacity(128);
    prefix.extend(text.trim().chars().take(120).flat_map(char::to_lowercase));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prefix.hash(&mut h);
    h.finish()
}

/// When the chain's older windows fold into the long narrative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldPolicy {
    /// Older windows (the latest is never folded) that trigger a fold.
    pub windows: usize,
    /// Or their summaries' total characters.
    pub chars: usize,
}

impl Default for FoldPolicy {
    fn default() -> Self {
        FoldPolicy {
            windows: 4,
            chars: 4000,
        }
    }
}

/// What a read sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRead<'a> {
    /// The completed memory to start from, if any.
    pub memory: Option<&'a WindowMemory>,
    /// The raw messages after it, `gap_start..next_seq` (empty when equal).
    pub gap_start: u64,
    /// True when no newer memory is still processing.
    pub caught_up: bool,
}

/// The rolling memory of one session.
#[derive(Debug, Clone, Default)]
pub struct RollingMemory {
    threshold: u64,
    window: u64,
    memories: Vec<WindowMemory>,
    /// The sequence number the next message gets.
    next_seq: u64,
    fold: FoldPolicy,
    narratives: Vec<LongMemory>,
    /// Messages after the latest window's end before a round starts the
    /// next (2: every round, the seed's sliding window).
    every: u64,
}

/// The layers a read shows, oldest first: the latest completed narrative,
/// the chain of windows after it (the last being the latest completed
/// window), then the raw messages from `gap_start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayeredRead<'a> {
    pub long: Option<&'a LongMemory>,
    pub windows: Vec<&'a WindowMemory>,
    pub gap_start: u64,
}

impl RollingMemory {
    /// `threshold`: the last sequence number at which summaries start;
    /// `window`: messages per summary (at least 2, made even).
    pub fn new(threshold: u64, window: u64) -> Self {
        RollingMemory {
            threshold,
            window: window.max(2).div_ceil(2) * 2,
            memories: Vec::new(),
            next_seq: 0,
            fold: FoldPolicy::default(),
            narratives: Vec::new(),
            every: 2,
        }
    }

    /// A window starts only once `every` messages (made even) came after
    /// the latest window's end, not at every round: each message is
    /// summarized fewer times (with `window` / `every` windows over it)
    /// while the raw messages a read shows after the latest window stay
    /// fewer than `every` plus what a summary in flight covers.
    pub fn with_every(mut self, every: u64) -> Self {
        self.every = every.max(2).div_ceil(2) * 2;
        self
    }

    pub fn with_fold(mut self, fold: FoldPolicy) -> Self {
        self.fold = FoldPolicy {
            windows: fold.windows.max(1),
            chars: fold.chars.max(1),
        };
        self
    }

    pub fn narratives(&self) -> &[LongMemory] {
        &self.narratives
    }

    fn latest_narrative(&self) -> Option<&LongMemory> {
        self.narratives
            .iter()
            .filter(|n| n.status == MemoryStatus::Completed)
            .max_by_key(|n| (n.end_seq, n.id))
    }

    /// The completed windows a read shows, back from the latest, after the
    /// message `after` (exclusive); oldest first. Each step goes to the
    /// window that reaches furthest back while still touching the current
    /// one (windows slide every round, so the one ending just before it
    /// usually exists: no overlap); failing that, to the latest that ends
    /// before it (a few messages uncovered).
    fn chain(&self, after: Option<u64>) -> Vec<&WindowMemory> {
        let done = || {
            self.memories
                .iter()
                .filter(|m| m.status == MemoryStatus::Completed)
                .filter(move |m| after.is_none_or(|a| m.end_seq > a))
        };
        let covered = |start: u64| start == 0 || after.is_some_and(|a| start <= a + 1);
        let mut out: Vec<&WindowMemory> = Vec::new();
        let mut cur = done().max_by_key(|m| (m.end_seq, m.id));
        while let Some(m) = cur {
            out.push(m);
            if covered(m.start_seq) {
                break;
            }
            let s = m.start_seq;
            cur = done()
                .filter(|w| w.start_seq < s && w.end_seq + 1 >= s)
                .min_by_key(|w| (w.start_seq, w.end_seq, w.id))
                .or_else(|| {
                    done()
                        .filter(|w| w.end_seq < s)
                        .max_by_key(|w| (w.end_seq, w.id))
                });
        }
        out.reverse();
        out
    }

    /// The layers a read shows now, without waiting: windows whose summary
    /// matches a newer shown one's first 120 characters are left out.
    pub fn layered(&self) -> LayeredRead<'_> {
        let long = self.latest_narrative();
        let chain = self.chain(long.map(|l| l.end_seq));
        let gap_start = chain
            .last()
            .map(|m| m.end_seq + 1)
            .or(long.map(|l| l.end_seq + 1))
            .unwrap_or(0);
        let mut seen = std::collections::HashSet::new();
        if let Some(text) = long.and_then(|l| l.summary.as_deref()) {
            seen.insert(dedup_key(text));
        }
        let mut windows: Vec<&WindowMemory> = chain
            .into_iter()
            .rev()
            .filter(|m| seen.insert(dedup_key(m.summary.as_deref().unwrap_or_default())))
            .collect();
        windows.reverse();
        LayeredRead {
            long,
            windows,
            gap_start,
        }
    }

    /// Starts a fold if the chain's older windows reached the policy and
    /// none is in flight.
    pub fn maybe_fold(&mut self) -> Option<FoldJob> {
        if self
            .narratives
            .iter()
            .any(|n| n.status == MemoryStatus::Processing)
        {
            return None;
        }
        let base = self.latest_narrative();
        let base_id = base.map(|b| b.id);
        let chain = self.chain(base.map(|b| b.end_seq));
        let older = &chain[..chain.len().saturating_sub(1)];
        let chars: usize = older
            .iter()
            .map(|m| m.summary.as_deref().map_or(0, |s| s.chars().count()))
            .sum();
        if older.is_empty() || (older.len() < self.fold.windows && chars < self.fold.chars) {
            return None;
        }
        let windows: Vec<u64> = older.iter().map(|m| m.id).collect();
        let end_seq = older.last().map(|m| m.end_seq).unwrap_or(0);
        let id = self.narratives.last().map(|n| n.id + 1).unwrap_or(1);
        self.narratives.push(LongMemory {
            id,
            start_seq: 0,
            end_seq,
            source_ids: windows.clone(),
            base_id,
            status: MemoryStatus::Processing,
            summary: None,
        });
        Some(FoldJob {
            id,
            end_seq,
            base_id,
            windows,
        })
    }

    /// The texts a fold combines: the base narrative, then its windows'
    /// summaries, each once (by [`dedup_key`]).
    pub fn fold_sources(&self, job: &FoldJob) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        let base = job
            .base_id
            .and_then(|id| self.narratives.iter().find(|n| n.id == id))
            .and_then(|n| n.summary.clone());
        base.into_iter()
            .chain(job.windows.iter().filter_map(|id| {
                self.memories
                    .iter()
                    .find(|m| m.id == *id)
                    .and_then(|m| m.summary.clone())
            }))
            .filter(|t| seen.insert(dedup_key(t)))
            .collect()
    }

    /// Fold `id` came back: the narrative completes and the windows it
    /// covers are dropped (the narrative keeps their ids and range).
    pub fn fold_completed(&mut self, id: u64, summary: String) {
        let Some(n) = self.narratives.iter_mut().find(|n| n.id == id) else {
            return;
        };
        n.status = MemoryStatus::Completed;
        n.summary = Some(summary);
        let end = n.end_seq;
        self.memories
            .retain(|m| m.end_seq > end || m.status == MemoryStatus::Processing);
        // Older narratives are superseded by this one.
        self.narratives
            .retain(|n| n.id == id || n.status == MemoryStatus::Processing || n.end_seq > end);
    }

    /// Fold `id` failed: the windows stay, and a later window tries again.
    pub fn fold_failed(&mut self, id: u64) {
        if let Some(n) = self.narratives.iter_mut().find(|n| n.id == id) {
            n.status = MemoryStatus::Failed;
        }
        self.narratives.retain(|n| n.status != MemoryStatus::Failed);
    }

    /// The window ending at `end_seq`: `max(0, end − window + 1)`, moved to
    /// the user message of its pair.
    pub fn window_range(&self, end_seq: u64) -> (u64, u64) {
        let start = (end_seq + 1).saturating_sub(self.window);
        (start - start % 2, end_seq)
    }

    pub fn memories(&self) -> &[WindowMemory] {
        &self.memories
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A round (user message and answer) was recorded. Returns the summary
    /// to start, if the threshold is reached and none is in flight.
    pub fn round_ended(&mut self) -> Option<WindowJob> {
        self.next_seq += 2;
        let end = self.next_seq - 1;
        if end < self.threshold {
            return None;
        }
        // (a failed window is tried again at the next round)
        let latest = self
            .memories
            .iter()
            .filter(|m| m.status != MemoryStatus::Failed)
            .map(|m| m.end_seq)
            .max();
        if latest.is_some_and(|l| end < l + self.every) {
            return None;
        }
        self.start()
    }

    /// Starts a summary of the latest window now, before the threshold
    /// (the raw turns grew too long), unless one is in flight.
    pub fn summarize_early(&mut self) -> Option<WindowJob> {
        if self.next_seq == 0 {
            return None;
        }
        self.start()
    }

    fn start(&mut self) -> Option<WindowJob> {
        let end = self.next_seq - 1;
        if self.in_flight().is_some() {
            return None;
        }
        let (mut start_seq, end_seq) = self.window_range(end);
        // Summaries that lagged (a busy machine: they wait their turn)
        // left messages after the latest completed window: the next covers
        // them too, up to three windows' worth, so that none goes
        // unsummarized while the call lasts.
        if let Some(done) = self.latest_completed() {
            let from = (done.end_seq + 1).max(end_seq.saturating_sub(3 * self.window) + 1);
            start_seq = start_seq.min(from - from % 2);
        }
        let base_id = self.latest_completed().map(|m| m.id);
        let id = self.memories.last().map(|m| m.id + 1).unwrap_or(1);
        self.memories.push(WindowMemory {
            id,
            start_seq,
            end_seq,
            base_id,
            status: MemoryStatus::Processing,
            summary: None,
        });
        Some(WindowJob {
            id,
            start_seq,
            end_seq,
            base_id,
        })
    }

    /// The summary of job `id` came back.
    pub fn completed(&mut self, id: u64, summary: String) {
        if let Some(m) = self.memories.iter_mut().find(|m| m.id == id) {
            m.status = MemoryStatus::Completed;
            m.summary = Some(summary);
        }
    }

    /// Job `id` could not be summarized; a later round starts another.
    pub fn failed(&mut self, id: u64) {
        if let Some(m) = self.memories.iter_mut().find(|m| m.id == id) {
            m.status = MemoryStatus::Failed;
        }
    }

    pub fn in_flight(&self) -> Option<&WindowMemory> {
        self.memories
            .iter()
            .find(|m| m.status == MemoryStatus::Processing)
    }

    fn latest_completed(&self) -> Option<&WindowMemory> {
        self.memories
            .iter()
            .filter(|m| m.status == MemoryStatus::Completed)
            .max_by_key(|m| (m.end_seq, m.id))
    }

    /// What the next LLM call starts from, without waiting.
    pub fn read(&self) -> WindowRead<'_> {
        let memory = self.latest_completed();
        let caught_up = match (self.in_flight(), memory) {
            (None, _) => true,
            (Some(p), Some(m)) => p.end_seq <= m.end_seq,
            (Some(_), None) => false,
        };
        WindowRead {
            memory,
            gap_start: memory.map(|m| m.end_seq + 1).unwrap_or(0),
            caught_up,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_slides_and_keeps_pairs() {
        let m = RollingMemory::new(5, 14);
        assert_eq!(m.window_range(5), (0, 5));
        assert_eq!(m.window_range(13), (0, 13));
        assert_eq!(m.window_range(15), (2, 15));
        assert_eq!(m.window_range(19), (6, 19));
        // an odd start moves back to its user message
        let odd = RollingMemory::new(5, 13);
        assert_eq!(odd.window, 14);
        let m = RollingMemory::new(5, 4);
        assert_eq!(m.window_range(9), (6, 9));
        // a round ends on an assistant message; were it not so, the start
        // still lands on a user message
        assert_eq!(m.window_range(8), (4, 8));
    }

    /// Seed `003`'s Round 1–10 simulation, window 14, first trigger when
    /// round 3 ends (seq 5). `done_before` says which processing memory
    /// completes before a round starts.
    #[test]
    fn the_seed_003_rounds_1_to_10() {
        let mut m = RollingMemory::new(5, 14);
        // (round, memory used at start, gap start, caught up, triggered at end)
        type Row = (
            u32,
            Option<u64>,
            u64,
            bool,
            Option<(u64, u64, u64, Option<u64>)>,
        );
        let expected: [Row; 10] = [
            (1, None, 0, true, None),
            (2, None, 0, true, None),
            (3, None, 0, true, Some((1, 0, 5, None))),
            (4, Some(1), 6, true, Some((2, 0, 7, Some(1)))),
            (5, Some(1), 6, false, None),
            (6, Some(2), 8, true, Some((3, 0, 11, Some(2)))),
            (7, Some(2), 8, false, None),
            (8, Some(3), 12, true, Some((4, 2, 15, Some(3)))),
            (9, Some(3), 12, false, None),
            (10, Some(4), 16, true, Some((5, 6, 19, Some(4)))),
        ];
        // Rounds after which the user paused long enough for the summary
        // in flight to complete (4, 6, 8, 10 start caught up).
        let completes_before = [4u32, 6, 8, 10];
        for (round, memory, gap_start, caught_up, trigger) in expected {
            if completes_before.contains(&round) {
                if let Some(p) = m.in_flight().map(|p| p.id) {
                    m.completed(p, format!("summary {p}"));
                }
            }
            let read = m.read();
            assert_eq!(read.memory.map(|x| x.id), memory, "round {round} start");
            assert_eq!(read.gap_start, gap_start, "round {round} gap");
            assert_eq!(read.caught_up, caught_up, "round {round} caught up");
            let job = m.round_ended();
            assert_eq!(
                job.map(|j| (j.id, j.start_seq, j.end_seq, j.base_id)),
                trigger,
                "round {round} end"
            );
            assert_eq!(m.next_seq(), 2 * round as u64);
        }
        let table: Vec<(u64, u64, u64, Option<u64>, MemoryStatus)> = m
            .memories()
            .iter()
            .map(|x| (x.id, x.start_seq, x.end_seq, x.base_id, x.status))
            .collect();
        use MemoryStatus::*;
        assert_eq!(
            table,
            [
                (1, 0, 5, None, Completed),
                (2, 0, 7, Some(1), Completed),
                (3, 0, 11, Some(2), Completed),
                (4, 2, 15, Some(3), Completed),
                (5, 6, 19, Some(4), Processing),
            ]
        );
    }

    #[test]
    fn a_long_call_is_summarized_early() {
        let mut m = RollingMemory::new(99, 4);
        assert!(m.summarize_early().is_none(), "nothing to summarize yet");
        assert!(m.round_ended().is_none());
        assert!(m.round_ended().is_none());
        let job = m.summarize_early().expect("early summary");
        assert_eq!((job.start_seq, job.end_seq), (0, 3));
        assert!(m.summarize_early().is_none(), "one in flight at a time");
    }

    #[test]
    fn a_failed_summary_lets_the_next_round_try_again() {
        let mut m = RollingMemory::new(1, 4);
        let first = m.round_ended().expect("trigger at seq 1");
        assert!(m.round_ended().is_none(), "one in flight at a time");
        m.failed(first.id);
        let read = m.read();
        assert!(read.memory.is_none() && read.caught_up);
        let second = m.round_ended().expect("tries again");
        assert_eq!(
            (second.start_seq, second.end_seq, second.base_id),
            (2, 5, None)
        );
        m.completed(second.id, "s".into());
        assert_eq!(m.read().gap_start, 6);
    }

    /// Runs `rounds` rounds, completing every window at once and, with
    /// `fold`, every fold at once.
    fn run(m: &mut RollingMemory, rounds: u64, fold: bool) {
        for _ in 0..rounds {
            if let Some(job) = m.round_ended() {
                m.completed(
                    job.id,
                    format!(
                        "window {} covers {}..={}",
                        job.id, job.start_seq, job.end_seq
                    ),
                );
                if fold {
                    if let Some(f) = m.maybe_fold() {
                        let text = m.fold_sources(&f).join(" / ");
                        m.fold_completed(f.id, text);
                    }
                }
            }
        }
    }

    /// The layers shown leave no message out: the narrative from 0, then
    /// windows each starting at or before the message after the previous
    /// (overlapping by less than a window), then the gap.
    fn assert_covers(m: &RollingMemory) {
        let read = m.layered();
        let mut next = read.long.map(|l| l.end_seq + 1).unwrap_or(0);
        for w in &read.windows {
            assert!(
                w.start_seq <= next && w.end_seq >= next,
                "no hole: {read:?}"
            );
            assert!(next - w.start_seq < m.window, "little overlap: {read:?}");
            next = w.end_seq + 1;
        }
        assert_eq!(read.gap_start, next);
        assert!(read.gap_start <= m.next_seq());
    }

    #[test]
    fn older_windows_fold_into_a_long_narrative_and_the_layers_cover_the_call() {
        let mut m = RollingMemory::new(3, 4).with_fold(FoldPolicy {
            windows: 3,
            chars: 100_000,
        });
        run(&mut m, 40, true);
        let read = m.layered();
        let long = read.long.expect("a narrative");
        assert_eq!(long.start_seq, 0);
        assert!(long.end_seq > 40, "{long:?}");
        assert!(!long.source_ids.is_empty());
        assert!(
            long.summary.as_deref().unwrap().contains("window"),
            "folded from the windows and the previous narrative"
        );
        assert!(read.windows.len() <= 3, "{read:?}");
        assert_covers(&m);
        // folded windows are dropped: memory stays small in a long call
        assert!(m.memories().len() <= 8, "{}", m.memories().len());
        assert!(m.narratives().len() <= 2);
        // each narrative extends the previous one
        assert!(long.base_id.is_some());
    }

    #[test]
    fn without_folds_the_chain_still_covers_the_call() {
        let mut m = RollingMemory::new(5, 14);
        run(&mut m, 30, false);
        assert!(m.layered().long.is_none());
        assert_covers(&m);
        assert!(m.layered().windows.len() >= 4);
    }

    #[test]
    fn a_fold_in_flight_or_failed_keeps_showing_the_windows() {
        let mut m = RollingMemory::new(3, 4).with_fold(FoldPolicy {
            windows: 2,
            chars: 100_000,
        });
        run(&mut m, 8, false);
        let shown = m.layered().windows.len();
        let f = m.maybe_fold().expect("two older windows");
        assert_eq!(f.windows.len(), shown - 1, "all but the latest");
        assert!(m.maybe_fold().is_none(), "one fold at a time");
        assert_eq!(
            m.layered().windows.len(),
            shown,
            "still shown while folding"
        );
        assert!(m.layered().long.is_none());
        m.fold_failed(f.id);
        assert_eq!(m.layered().windows.len(), shown);
        assert_covers(&m);
        let again = m.maybe_fold().expect("tries again");
        m.fold_completed(again.id, "the story so far".into());
        let read = m.layered();
        assert_eq!(read.long.unwrap().end_seq, again.end_seq);
        assert_eq!(read.windows.len(), 1, "only the latest window is left");
        assert_covers(&m);
    }

    #[test]
    fn a_fold_triggers_on_size_too() {
        let mut m = RollingMemory::new(3, 4).with_fold(FoldPolicy {
            windows: 100,
            chars: 50,
        });
        for _ in 0..6 {
            if let Some(job) = m.round_ended() {
                m.completed(job.id, "x".repeat(30) + &job.id.to_string());
            }
        }
        assert!(
            m.maybe_fold().is_some(),
            "two older windows of 30+ characters"
        );
    }

    #[test]
    fn summaries_with_the_same_first_120_characters_are_shown_once() {
        assert_eq!(dedup_key("  Same START "), dedup_key("same start"));
        let long = "a".repeat(120);
        assert_eq!(dedup_key(&(long.clone() + "x")), dedup_key(&(long + "y")));
        assert_ne!(dedup_key("one"), dedup_key("two"));
        let mut m = RollingMemory::new(3, 4);
        for _ in 0..8 {
            if let Some(job) = m.round_ended() {
                m.completed(job.id, "The user keeps asking about the weather.".into());
            }
        }
        let read = m.layered();
        assert_eq!(read.windows.len(), 1, "{read:?}");
        assert_eq!(read.gap_start, m.next_seq(), "the latest is the one kept");
    }

    /// With `every` 6, a window starts at the threshold and then once six
    /// messages (three rounds) came after the latest one's end; a summary
    /// in flight still holds the next back.
    #[test]
    fn a_window_starts_every_few_rounds() {
        let mut m = RollingMemory::new(5, 14).with_every(6);
        let mut started = Vec::new();
        for _ in 0..12 {
            if let Some(job) = m.round_ended() {
                started.push((job.start_seq, job.end_seq));
                m.completed(job.id, format!("window {}", job.id));
            }
        }
        assert_eq!(started, [(0, 5), (0, 11), (4, 17), (10, 23)]);
        // odd settings are made even; below a round, one round
        assert_eq!(RollingMemory::new(5, 14).with_every(5).every, 6);
        assert_eq!(RollingMemory::new(5, 14).with_every(0).every, 2);
        // a failed window is tried again at the next round
        let mut m = RollingMemory::new(5, 14).with_every(6);
        let mut failed = false;
        let mut ends = Vec::new();
        for _ in 0..6 {
            if let Some(job) = m.round_ended() {
                ends.push(job.end_seq);
                if failed {
                    m.completed(job.id, "ok".into());
                } else {
                    m.failed(job.id);
                    failed = true;
                }
            }
        }
        assert_eq!(ends, [5, 7]);
    }

    /// Summaries that waited (a busy machine) leave the messages after the
    /// latest completed window unsummarized: the next window reaches back
    /// to them, at most three windows' worth.
    #[test]
    fn a_window_after_a_lag_covers_everything_since_the_last() {
        let mut m2 = RollingMemory::new(5, 8).with_every(4);
        let mut jobs = Vec::new();
        for _ in 0..3 {
            jobs.extend(m2.round_ended());
        }
        assert_eq!(
            jobs.iter()
                .map(|j| (j.start_seq, j.end_seq))
                .collect::<Vec<_>>(),
            [(0, 5)]
        );
        m2.completed(jobs[0].id, "first".into());
        // the next is due at seq 9; it is in flight for twelve rounds
        let mut late = None;
        for _ in 0..12 {
            if let Some(j) = m2.round_ended() {
                assert!(late.is_none(), "one in flight at a time");
                late = Some(j);
            }
        }
        let late = late.expect("started at seq 9");
        assert_eq!((late.start_seq, late.end_seq), (2, 9));
        m2.completed(late.id, "second".into());
        // 26 messages since: the next window starts right after the last
        let next = m2.round_ended().expect("due");
        assert_eq!((next.start_seq, next.end_seq), (10, 31));
        m2.completed(next.id, "third".into());
        let read = m2.layered();
        assert_eq!(read.gap_start, 32);
        // far behind: at most three windows' worth (24 messages)
        let mut m3 = RollingMemory::new(1, 8).with_every(2);
        let j = m3.round_ended().expect("at the threshold");
        m3.completed(j.id, "a".into());
        let held = m3.round_ended().expect("next round");
        for _ in 0..40 {
            assert!(m3.round_ended().is_none());
        }
        m3.failed(held.id);
        let j = m3.round_ended().expect("after the failure");
        assert_eq!(j.end_seq, 85);
        assert_eq!(j.start_seq, 85 - 24 + 1, "{j:?}");
    }
}
