//! Generation counters per agent and user: which parts of a context's
//! sources a write changed, so a cached context re-reads only those.

use super::*;

/// The parts of an agent's context sources a write may change, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts(u8);

impl Parts {
    /// The agent's blocks, users' blocks and the agent's record (its
    /// persistent context).
    pub const BLOCKS: Parts = Parts(1);
    /// Session records (a call ended).
    pub const SESSIONS: Parts = Parts(1 << 1);
    /// Summaries of every type.
    pub const SUMMARIES: Parts = Parts(1 << 2);
    /// Facts.
    pub const FACTS: Parts = Parts(1 << 3);
    /// Topics.
    pub const TOPICS: Parts = Parts(1 << 4);
    /// No part.
    pub const NONE: Parts = Parts(0);
    /// Every part.
    pub const ALL: Parts = Parts((1 << 5) - 1);
    const COUNT: usize = 5;

    pub fn contains(self, other: Parts) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the sets share a part.
    pub fn intersects(self, other: Parts) -> bool {
        self.0 & other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many parts the set holds.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// The set as bits (one per part), as the change feed carries it.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The set of `bits` (bits of no part are dropped).
    pub fn from_bits(bits: u8) -> Parts {
        Parts(bits & Parts::ALL.0)
    }
}

impl std::ops::BitOr for Parts {
    type Output = Parts;
    fn bitor(self, other: Parts) -> Parts {
        Parts(self.0 | other.0)
    }
}

/// The change counters that bear on one user's context with an agent, one
/// per part: the agent's (writes that change what every user of it sees)
/// and the user's own (their calls, summaries, facts and topics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    agent: [u64; Parts::COUNT],
    user: [u64; Parts::COUNT],
}

impl Stamp {
    /// The parts whose counter differs from `earlier`'s.
    pub fn changed_since(&self, earlier: &Stamp) -> Parts {
        let mut out = Parts::NONE;
        for i in 0..Parts::COUNT {
            if self.agent[i] != earlier.agent[i] || self.user[i] != earlier.user[i] {
                out = out | Parts(1 << i);
            }
        }
        out
    }
}

/// An agent's counters, and each of its users'.
#[derive(Debug, Default)]
pub(super) struct AgentCounts {
    all: [u64; Parts::COUNT],
    users: HashMap<String, [u64; Parts::COUNT]>,
}

pub(super) fn add(counts: &mut [u64; Parts::COUNT], parts: Parts) {
    for (i, n) in counts.iter_mut().enumerate() {
        if parts.contains(Parts(1 << i)) {
            *n += 1;
        }
    }
}

/// Change counters, one per part of what contexts are assembled from
/// (blocks, ended sessions, summaries, facts, topics), kept per agent and,
/// for what is one user's alone, per user: a user's call ending leaves
/// the other users' cached contexts current. The Store bumps the parts a
/// write changed, after the write, so a reader that saw the old counts and
/// then read the data can only be stale in the safe direction: it sees
/// newer counts next time and re-reads those parts. Turn appends do not
/// bump: live turns are read from the session actors.
#[derive(Debug, Default)]
pub struct Generations {
    counts: std::sync::Mutex<Counts>,
    /// Where this instance's changes are announced to the others (a
    /// shared store's), once set.
    feed: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Change>>,
    /// Who is told of every change, this instance's and the others' (the
    /// mirror).
    watchers: std::sync::Mutex<Vec<tokio::sync::mpsc::UnboundedSender<Watched>>>,
}

/// A change as [`Generations::watch`] tells it: `parts` of what one user
/// (every user with `None`) of an agent (every agent with `None`) sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub parts: Parts,
}

#[derive(Debug, Default)]
struct Counts {
    agents: HashMap<String, AgentCounts>,
    /// Moved for every agent at once: another instance's changes may have
    /// been missed.
    everything: [u64; Parts::COUNT],
}

impl Generations {
    /// The counters of a user's context with the agent (all 0 before the
    /// first change).
    pub fn get(&self, agent_id: &str, user_id: &str) -> Stamp {
        let counts = self.lock();
        let mut agent = counts.everything;
        let mut user = [0; Parts::COUNT];
        if let Some(c) = counts.agents.get(agent_id) {
            for (a, n) in agent.iter_mut().zip(c.all) {
                *a += n;
            }
            user = c.users.get(user_id).copied().unwrap_or_default();
        }
        Stamp { agent, user }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces every change from now on to `feed` (once).
    pub fn announce_to(&self, feed: tokio::sync::mpsc::UnboundedSender<Change>) {
        let _ = self.feed.set(feed);
    }

    fn announce(&self, agent_id: &str, user_id: Option<&str>, parts: Parts) {
        if let Some(feed) = self.feed.get() {
            let _ = feed.send(Change {
                agent_id: agent_id.to_string(),
                user_id: user_id.map(str::to_string),
                parts,
            });
        }
    }

    /// Tells every change from now on (this instance's and, over a shared
    /// store, the others') to the receiver, until it is dropped.
    pub fn watch(&self) -> tokio::sync::mpsc::UnboundedReceiver<Watched> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    fn tell(&self, agent_id: Option<&str>, user_id: Option<&str>, parts: Parts) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        if watchers.is_empty() {
            return;
        }
        let change = Watched {
            agent_id: agent_id.map(str::to_string),
            user_id: user_id.map(str::to_string),
            parts,
        };
        watchers.retain(|w| w.send(change.clone()).is_ok());
    }

    /// Moves the counters of `parts` for every user of the agent.
    pub fn bump(&self, agent_id: &str, parts: Parts) {
        self.apply(agent_id, None, parts);
        self.announce(agent_id, None, parts);
    }

    /// Moves the counters of `parts` for one user of the agent.
    pub fn bump_user(&self, agent_id: &str, user_id: &str, parts: Parts) {
        self.apply(agent_id, Some(user_id), parts);
        self.announce(agent_id, Some(user_id), parts);
    }

    /// Moves the counters of a change another instance made (it is not
    /// announced again).
    pub fn apply(&self, agent_id: &str, user_id: Option<&str>, parts: Parts) {
        {
            let mut counts = self.lock();
            let agent = counts.agents.entry(agent_id.to_string()).or_default();
            match user_id {
                None => add(&mut agent.all, parts),
                Some(user) => add(agent.users.entry(user.to_string()).or_default(), parts),
            }
        }
        self.tell(Some(agent_id), user_id, parts);
    }

    /// Moves `parts` for every agent and user at once.
    pub fn bump_everything(&self, parts: Parts) {
        add(&mut self.lock().everything, parts);
        self.tell(None, None, parts);
    }
}
