//! The in-memory mirrors of the sessions, summaries, facts and topics
//! trees: each record by key and by (agent, user) group, so that a
//! context read takes one group instead of scanning a tree.

use super::*;

/// Who a mirrored record belongs to: the (agent, user) whose context reads
/// it, and whether every user of the agent sees it too (a shared fact).
pub trait Owned {
    fn owner(&self) -> (&str, &str);
    fn shared(&self) -> bool {
        false
    }
}

impl Owned for SessionRecord {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

impl Owned for ConversationSummary {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

impl Owned for FactRecord {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
    fn shared(&self) -> bool {
        self.visibility == Visibility::Shared
    }
}

impl Owned for Topic {
    fn owner(&self) -> (&str, &str) {
        (&self.agent_id, &self.user_id)
    }
}

/// The records of one group, by key.
pub(super) type Group<T> = std::collections::BTreeMap<::sled::IVec, std::sync::Arc<T>>;

/// What a [`Mirror`] holds: every record by key, and by group — each
/// (agent, user)'s, and each agent's shared ones (user "" in the key).
pub(super) struct Held<T> {
    pub(super) by_key: HashMap<::sled::IVec, std::sync::Arc<T>>,
    pub(super) groups: HashMap<(String, String), Group<T>>,
}

impl<T: Owned> Held<T> {
    pub(super) fn groups_of(rec: &T) -> impl Iterator<Item = (String, String)> {
        let (agent, user) = rec.owner();
        let shared = rec.shared().then(|| (agent.to_string(), String::new()));
        std::iter::once((agent.to_string(), user.to_string())).chain(shared)
    }

    pub(super) fn insert(&mut self, key: ::sled::IVec, rec: std::sync::Arc<T>) {
        self.remove(&key);
        for g in Self::groups_of(&rec) {
            self.groups
                .entry(g)
                .or_default()
                .insert(key.clone(), rec.clone());
        }
        self.by_key.insert(key, rec);
    }

    /// The records of `groups` that satisfy `keep`, each once: a record
    /// is in its owner's group and, when shared, in its agent's (user
    /// ""), so one a group before took by its owner is not taken again.
    pub(super) fn select(
        &self,
        groups: &[(&str, &str)],
        keep: &impl Fn(&T) -> bool,
    ) -> Vec<std::sync::Arc<T>> {
        let mut out: Vec<std::sync::Arc<T>> = Vec::new();
        for (i, (agent, user)) in groups.iter().enumerate() {
            let Some(group) = self.groups.get(&(agent.to_string(), user.to_string())) else {
                continue;
            };
            let before = &groups[..i];
            let taken = |r: &T| {
                let (agent, user) = r.owner();
                before
                    .iter()
                    .any(|&g| g == (agent, user) || (r.shared() && g == (agent, "")))
            };
            out.extend(group.values().filter(|r| keep(r) && !taken(r)).cloned());
        }
        out
    }

    pub(super) fn remove(&mut self, key: &[u8]) {
        let Some(old) = self.by_key.remove(key) else {
            return;
        };
        for g in Self::groups_of(&old) {
            if let Some(group) = self.groups.get_mut(&g) {
                group.remove(key);
                if group.is_empty() {
                    self.groups.remove(&g);
                }
            }
        }
    }
}

/// Every record of a tree, decoded and held in memory from the first read
/// that asks (one scan of the tree), grouped by the (agent, user) it
/// belongs to, then kept as the tree by the writes: each write names the
/// keys it wrote ([`Trees::mirror_note`]), and those are read back. A
/// context read after a write takes one user's records from here instead
/// of iterating the tree, which sled does at about a microsecond a record
/// (every user's, and for sessions every agent's). Dropped (and built again
/// at the next read) where a write cannot say what it wrote.
///
/// The scan that builds it runs outside the lock: a write meanwhile only
/// leaves its keys, read back when the scan is done, so the Store actor
/// never waits for a build.
pub struct Mirror<T> {
    state: std::sync::Mutex<MirrorState<T>>,
}

pub(super) enum MirrorState<T> {
    Empty,
    /// A scan is running (the `u64` tells one build from the next); the
    /// keys written meanwhile.
    Building(u64, Vec<::sled::IVec>),
    Ready(Held<T>),
}

impl<T> Default for Mirror<T> {
    fn default() -> Self {
        Mirror {
            state: std::sync::Mutex::new(MirrorState::Empty),
        }
    }
}

impl<T> Mirror<T> {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, MirrorState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds of mirrors, numbered.
pub(super) static MIRROR_BUILDS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

impl Trees {
    /// The records of a mirrored tree in the groups asked (an (agent,
    /// user)'s, and with user "" the agent's shared ones) that satisfy
    /// `keep`, each once, in key order within a group; the first read scans
    /// the tree into the mirror (a read while another builds it reads the
    /// tree itself).
    pub(super) fn mirrored<T: DeserializeOwned + Owned>(
        &self,
        mirror: &Mirror<T>,
        tree: &::sled::Tree,
        name: &str,
        groups: &[(&str, &str)],
        keep: impl Fn(&T) -> bool,
    ) -> Result<Vec<std::sync::Arc<T>>, StoreError> {
        let build = {
            let mut state = mirror.lock();
            match &*state {
                MirrorState::Ready(held) => return Ok(held.select(groups, &keep)),
                MirrorState::Building(..) => None,
                MirrorState::Empty => {
                    let id = MIRROR_BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    *state = MirrorState::Building(id, Vec::new());
                    Some(id)
                }
            }
        };
        let mut held = Held {
            by_key: HashMap::new(),
            groups: HashMap::new(),
        };
        let scanned = (|| {
            for item in tree.iter() {
                let (k, v) = item?;
                if let Some(rec) = self.decode::<T>(name, &k, &v) {
                    held.insert(k, std::sync::Arc::new(rec));
                }
            }
            Ok::<_, StoreError>(())
        })();
        let Some(id) = build else {
            scanned?;
            return Ok(held.select(groups, &keep));
        };
        let mut state = mirror.lock();
        let MirrorState::Building(b, written) = &mut *state else {
            // Dropped meanwhile (a forget): this scan may predate it.
            drop(state);
            scanned?;
            return self.mirrored(mirror, tree, name, groups, keep);
        };
        if *b != id {
            drop(state);
            scanned?;
            return self.mirrored(mirror, tree, name, groups, keep);
        }
        if let Err(err) = scanned {
            *state = MirrorState::Empty;
            return Err(err);
        }
        let written = std::mem::take(written);
        if !self.read_back(&mut held, tree, name, &written) {
            *state = MirrorState::Empty;
            return Err(StoreError::Unavailable);
        }
        let out = held.select(groups, &keep);
        *state = MirrorState::Ready(held);
        Ok(out)
    }

    /// The records of `groups` from a mirror already built, `None` while it
    /// is not (the caller reads the tree; nothing is built here). The Store
    /// actor notes each of its writes in the mirrors as it makes them, so
    /// on the actor a built mirror holds what the tree holds.
    pub(super) fn mirror_if_built<T: Owned>(
        mirror: &Mirror<T>,
        groups: &[(&str, &str)],
    ) -> Option<Vec<std::sync::Arc<T>>> {
        match &*mirror.lock() {
            MirrorState::Ready(held) => Some(held.select(groups, &|_| true)),
            _ => None,
        }
    }

    /// `keys` read back from `tree` into `held`; false if a read failed.
    pub(super) fn read_back<T: DeserializeOwned + Owned, K: AsRef<[u8]>>(
        &self,
        held: &mut Held<T>,
        tree: &::sled::Tree,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> bool {
        for key in keys {
            let key = key.as_ref();
            match tree.get(key) {
                Ok(Some(v)) => match self.decode::<T>(name, key, &v) {
                    Some(rec) => held.insert(::sled::IVec::from(key), std::sync::Arc::new(rec)),
                    None => held.remove(key),
                },
                Ok(None) => held.remove(key),
                Err(err) => {
                    warn!(tree = name, error = %err, "a mirrored record did not read back; the mirror is built again");
                    return false;
                }
            }
        }
        true
    }

    /// After a write to a mirrored tree: the keys it wrote, read back into
    /// the mirror (a key gone or undecodable leaves it), or left for the
    /// build running. A read that fails drops the mirror, to be built
    /// again.
    pub(super) fn mirror_note<T: DeserializeOwned + Owned, K: AsRef<[u8]>>(
        &self,
        mirror: &Mirror<T>,
        tree: &::sled::Tree,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) {
        let mut state = mirror.lock();
        match &mut *state {
            MirrorState::Empty => {}
            MirrorState::Building(_, written) => {
                written.extend(keys.into_iter().map(|k| ::sled::IVec::from(k.as_ref())));
            }
            MirrorState::Ready(held) => {
                if !self.read_back(held, tree, name, keys) {
                    *state = MirrorState::Empty;
                }
            }
        }
    }

    /// After a write to the sessions tree.
    pub(crate) fn note_sessions<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(
            &self.mirror_sessions,
            &self.sessions,
            keys::TREE_SESSIONS,
            keys,
        );
    }

    /// After a write to the facts tree.
    pub(crate) fn note_facts<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(&self.mirror_facts, &self.facts, keys::TREE_FACTS, keys);
    }

    /// After a write to the summaries tree.
    pub(crate) fn note_summaries<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
            keys,
        );
    }

    /// After a write to the topics tree.
    pub(crate) fn note_topics<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        self.mirror_note(&self.mirror_topics, &self.topics, keys::TREE_TOPICS, keys);
    }

    /// After a write that cannot name its keys (a forget): every mirror is
    /// built again at the next read.
    pub(crate) fn drop_mirrors(&self) {
        *self.mirror_sessions.lock() = MirrorState::Empty;
        *self.mirror_summaries.lock() = MirrorState::Empty;
        *self.mirror_facts.lock() = MirrorState::Empty;
        *self.mirror_topics.lock() = MirrorState::Empty;
    }

    /// Whether every mirror is built and holds what its tree holds (for
    /// tests).
    #[doc(hidden)]
    pub fn mirrors_match(&self) -> Result<bool, StoreError> {
        fn same<T: DeserializeOwned + PartialEq + Owned>(
            t: &Trees,
            mirror: &Mirror<T>,
            tree: &::sled::Tree,
            name: &str,
        ) -> Result<bool, StoreError> {
            let state = mirror.lock();
            let MirrorState::Ready(records) = &*state else {
                return Ok(false);
            };
            // The tree, grouped afresh.
            let mut fresh = Held {
                by_key: HashMap::new(),
                groups: HashMap::new(),
            };
            for item in tree.iter() {
                let (k, v) = item?;
                if let Some(rec) = t.decode::<T>(name, &k, &v) {
                    fresh.insert(k, std::sync::Arc::new(rec));
                }
            }
            let same_group = |a: &Group<T>, b: &Group<T>| {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((ka, ra), (kb, rb))| ka == kb && **ra == **rb)
            };
            Ok(fresh.by_key.len() == records.by_key.len()
                && fresh.groups.len() == records.groups.len()
                && fresh
                    .groups
                    .iter()
                    .all(|(g, a)| records.groups.get(g).is_some_and(|b| same_group(a, b))))
        }
        Ok(same(
            self,
            &self.mirror_sessions,
            &self.sessions,
            keys::TREE_SESSIONS,
        )? && same(
            self,
            &self.mirror_summaries,
            &self.summaries,
            keys::TREE_SUMMARIES,
        )? && same(self, &self.mirror_facts, &self.facts, keys::TREE_FACTS)?
            && same(self, &self.mirror_topics, &self.topics, keys::TREE_TOPICS)?)
    }

    /// Every record of `tree` that decodes and satisfies `keep`, with its
    /// key.
    pub(super) fn matching<T: DeserializeOwned>(
        &self,
        tree: &::sled::Tree,
        name: &str,
        mut keep: impl FnMut(&T) -> bool,
    ) -> Result<Vec<(::sled::IVec, T)>, StoreError> {
        let mut out = Vec::new();
        for item in tree.iter() {
            let (k, v) = item?;
            if let Some(rec) = self.decode::<T>(name, &k, &v) {
                if keep(&rec) {
                    out.push((k, rec));
                }
            }
        }
        Ok(out)
    }
}
