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
        }
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
        if self.next_seq - 1 < self.threshold {
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
        let (start_seq, end_seq) = self.window_range(end);
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
}
