//! Forgetting a user in sled.

use super::*;

/// `meta` keys of forgets begun and not yet finished.
const PENDING: &[u8] = b"forget/";

fn pending_key(user_id: &str, agent_id: Option<&str>) -> Vec<u8> {
    // Ids hold no NUL, so it separates them unambiguously.
    let mut k = PENDING.to_vec();
    k.extend_from_slice(user_id.as_bytes());
    if let Some(a) = agent_id {
        k.push(0);
        k.extend_from_slice(a.as_bytes());
    }
    k
}

impl Trees {
    /// Forgets begun and not finished (a crash came in between): user and
    /// the agent it was limited to.
    pub fn pending_forgets(&self) -> Result<Vec<PendingForget>, StoreError> {
        let mut out = Vec::new();
        for item in self.meta.scan_prefix(PENDING) {
            let (k, _) = item?;
            let rest = String::from_utf8_lossy(&k[PENDING.len()..]).into_owned();
            match rest.split_once('\0') {
                Some((u, a)) => out.push((u.to_string(), Some(a.to_string()))),
                None => out.push((rest, None)),
            }
        }
        Ok(out)
    }

    /// The forget log, oldest first.
    pub fn forget_log(&self) -> Result<Vec<ForgetEntry>, StoreError> {
        let mut out = Vec::new();
        for item in self.forget_log.iter() {
            let (k, v) = item?;
            if let Some(e) = self.decode::<ForgetEntry>(keys::TREE_FORGET_LOG, &k, &v) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Adds entries to the forget log (a forget's own, or an import's).
    pub fn log_forgets(&self, entries: &[ForgetEntry]) -> Result<(), StoreError> {
        let mut batch = ::sled::Batch::default();
        for e in entries {
            batch.insert(
                keys::forget_log(e.at, e.user_hash, e.agent_id.as_deref()),
                encode(e)?,
            );
        }
        self.forget_log.apply_batch(batch)?;
        Ok(())
    }

    /// Ids forgotten at or after `since`, with when; older ones are removed
    /// as they are passed over, so the tree holds the forgets of one
    /// [`FORGOTTEN_FOR`] window.
    pub fn forgotten_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
        let mut out = Vec::new();
        let mut old = ::sled::Batch::default();
        for item in self.forgotten.iter() {
            let (k, v) = item?;
            match (Uuid::from_slice(&k), keys::millis_at(&v)) {
                (Ok(id), Some(at)) if at >= since => out.push((id, at)),
                _ => old.remove(k),
            }
        }
        self.forgotten.apply_batch(old)?;
        Ok(out)
    }

    /// Keeps `ids` as forgotten at `at` (and lets go of those forgotten
    /// more than [`FORGOTTEN_FOR`] before it).
    pub fn keep_forgotten(
        &self,
        ids: impl IntoIterator<Item = Uuid>,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let window = chrono::Duration::from_std(FORGOTTEN_FOR).unwrap_or_default();
        self.forgotten_since(at - window)?;
        let mut batch = ::sled::Batch::default();
        for id in ids {
            batch.insert(id.as_bytes(), &keys::time_key(at));
        }
        self.forgotten.apply_batch(batch)?;
        Ok(())
    }

    /// Removes every record of `user_id` (with one agent's, or with every
    /// agent's) and every record built from them, logs the forget, then
    /// flushes.
    pub fn forget_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        let res = self.remove_user(user_id, agent_id);
        // Done or not, the batches do not say which keys they removed.
        self.drop_mirrors();
        res
    }
}

/// A forget's removals, a batch per tree, applied once every record to
/// remove is found.
#[derive(Default)]
struct Removals {
    sessions: ::sled::Batch,
    open: ::sled::Batch,
    user_sessions: ::sled::Batch,
    session_starts: ::sled::Batch,
    turns: ::sled::Batch,
    queue: ::sled::Batch,
    dead: ::sled::Batch,
    dead_by_agent: ::sled::Batch,
    summaries: ::sled::Batch,
    summary_index: ::sled::Batch,
    facts: ::sled::Batch,
    fact_index: ::sled::Batch,
    tombstones: ::sled::Batch,
    topics: ::sled::Batch,
    blocks: ::sled::Batch,
    embeddings: ::sled::Batch,
    inbox: ::sled::Batch,
}

impl Trees {
    /// Marks a forget as begun (what a crash right after it leaves);
    /// returns the marker's key.
    pub fn begin_forget(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<Vec<u8>, StoreError> {
        let marker = pending_key(user_id, agent_id);
        self.meta.insert(&marker, &[1u8])?;
        Ok(marker)
    }

    fn remove_user(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
    ) -> Result<ForgetReport, StoreError> {
        let marker = self.begin_forget(user_id, agent_id)?;
        let mut r = ForgetReport {
            user_id: user_id.to_string(),
            agent_id: agent_id.map(str::to_string),
            ..ForgetReport::default()
        };
        let ours = |agent: &str, user: &str| user == user_id && agent_id.is_none_or(|a| a == agent);
        let mut x = Removals::default();
        let turn_vectors = self.find_sessions(user_id, agent_id, &ours, &mut x, &mut r)?;
        self.find_summaries(&ours, &mut x, &mut r)?;
        self.find_facts_and_topics(&ours, &mut x, &mut r)?;
        self.find_blocks(&ours, &mut x, &mut r)?;

        // Vectors and inbox rows of everything removed.
        for id in r.removed_ids.iter().chain(&turn_vectors) {
            if self.embeddings.contains_key(keys::embedding(*id))? {
                x.embeddings.remove(&keys::embedding(*id)[..]);
                r.vectors += 1;
            }
        }
        for item in self.rollup_inbox.iter() {
            let (k, _) = item?;
            if keys::inbox_item(&k).is_some_and(|(_, id)| r.removed_ids.contains(&id)) {
                x.inbox.remove(k);
                r.inbox_rows += 1;
            }
        }
        // Contexts of these agents are assembled afresh.
        for agent in &r.agents {
            let mut meta = self.agent(agent)?;
            meta.summary_version += 1;
            self.agents.insert(keys::agent(agent), encode(&meta)?)?;
        }

        self.apply_removals(x, &r)?;
        // Logged and remembered before the marker goes: a forget finished
        // after a crash logs itself again, which is harmless.
        let now = Utc::now();
        self.log_forgets(&[ForgetEntry::new(user_id, agent_id, now)])?;
        self.keep_forgotten(r.removed_ids.iter().copied(), now)?;
        self.meta.remove(&marker)?;
        self.db.flush()?;
        Ok(r)
    }

    /// The user's sessions, with their turns, open marks, jobs and dead
    /// letters; returns the ids of their turns' vectors.
    fn find_sessions(
        &self,
        user_id: &str,
        agent_id: Option<&str>,
        ours: &dyn Fn(&str, &str) -> bool,
        x: &mut Removals,
        r: &mut ForgetReport,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut turn_vectors: Vec<Uuid> = Vec::new();
        // With one agent, the index has the user's sessions; with every
        // agent, the tree is scanned.
        let theirs: Vec<SessionRecord> = match agent_id {
            Some(agent) => self.user_sessions(agent, user_id)?,
            None => self
                .matching::<SessionRecord>(&self.sessions, keys::TREE_SESSIONS, |s| {
                    ours(&s.agent_id, &s.user_id)
                })?
                .into_iter()
                .map(|(_, s)| s)
                .collect(),
        };
        for s in theirs {
            let key = keys::session(s.session_id);
            x.sessions.remove(&key[..]);
            x.open.remove(&key[..]);
            x.user_sessions.remove(keys::user_session(&s));
            for (k, _) in super::sessions::start_rows(&s) {
                x.session_starts.remove(k);
            }
            for t in self.turns.scan_prefix(keys::turns_prefix(s.session_id)) {
                let k = t?.0;
                // The turn's vector (a meaning embedder's), by where it is.
                if let Some(seq) = k.get(16..20).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
                    let id = crate::search::TurnRef {
                        session_id: s.session_id,
                        seq: u32::from_be_bytes(seq),
                    }
                    .doc_id();
                    turn_vectors.push(id);
                }
                x.turns.remove(k);
                r.turns += 1;
            }
            if self.queue.contains_key(key)? {
                x.queue.remove(&key[..]);
                r.reflection_jobs += 1;
            }
            if let Some(v) = self.dead.get(key)? {
                x.dead.remove(&key[..]);
                if let Some(letter) = self.decode::<DeadLetter>(keys::TREE_DEAD, &key, &v) {
                    x.dead_by_agent.remove(keys::agent_dead_letter(&letter));
                }
                r.dead_letters += 1;
            }
            r.sessions += 1;
            r.removed_ids.insert(s.session_id);
            r.agents.insert(s.agent_id);
        }
        // Dead letters whose session record is gone or damaged.
        let orphans = self.matching::<DeadLetter>(&self.dead, keys::TREE_DEAD, |d| {
            ours(&d.agent_id, &d.user_id) && !r.removed_ids.contains(&d.session_id)
        })?;
        for (k, letter) in orphans {
            x.dead.remove(k);
            x.dead_by_agent.remove(keys::agent_dead_letter(&letter));
            r.dead_letters += 1;
        }
        Ok(turn_vectors)
    }

    /// The user's summaries of every layer, and their index rows.
    fn find_summaries(
        &self,
        ours: &dyn Fn(&str, &str) -> bool,
        x: &mut Removals,
        r: &mut ForgetReport,
    ) -> Result<(), StoreError> {
        let theirs =
            self.matching::<ConversationSummary>(&self.summaries, keys::TREE_SUMMARIES, |s| {
                ours(&s.agent_id, &s.user_id)
            })?;
        for (k, s) in theirs {
            x.summaries.remove(k);
            x.summary_index.remove(s.summary_id.as_bytes());
            match s.summary_type {
                SummaryType::Session => r.session_summaries += 1,
                SummaryType::Daily => r.daily_summaries += 1,
                SummaryType::Weekly => r.weekly_summaries += 1,
                SummaryType::Topic => r.topic_summaries += 1,
            }
            r.removed_ids.insert(s.summary_id);
            r.agents.insert(s.agent_id);
        }
        Ok(())
    }

    /// The user's facts (with their tombstones) and topics.
    fn find_facts_and_topics(
        &self,
        ours: &dyn Fn(&str, &str) -> bool,
        x: &mut Removals,
        r: &mut ForgetReport,
    ) -> Result<(), StoreError> {
        let theirs = self.matching::<Fact>(&self.facts, keys::TREE_FACTS, |f| {
            ours(&f.agent_id, &f.user_id)
        })?;
        for (k, f) in theirs {
            x.facts.remove(k);
            x.fact_index.remove(f.fact_id.as_bytes());
            r.facts += 1;
            r.removed_ids.insert(f.fact_id);
            r.agents.insert(f.agent_id);
        }
        for item in self.fact_tombstones.iter() {
            let (k, _) = item?;
            if keys::fact_owner(&k).is_some_and(|(a, u)| ours(&a, &u)) {
                x.tombstones.remove(k);
            }
        }
        let theirs = self.matching::<Topic>(&self.topics, keys::TREE_TOPICS, |t| {
            ours(&t.agent_id, &t.user_id)
        })?;
        for (k, t) in theirs {
            x.topics.remove(k);
            r.topics += 1;
            r.removed_ids.insert(t.topic_id);
            r.agents.insert(t.agent_id);
        }
        Ok(())
    }

    /// The blocks drawn from the user's calls, and the mixed blocks of
    /// every agent touched (rebuilt by the watchdog from what is left).
    fn find_blocks(
        &self,
        ours: &dyn Fn(&str, &str) -> bool,
        x: &mut Removals,
        r: &mut ForgetReport,
    ) -> Result<(), StoreError> {
        let theirs = self.matching::<MemoryBlock>(&self.blocks, keys::TREE_BLOCKS, |b| {
            b.source_user_id
                .as_deref()
                .is_some_and(|u| ours(&b.agent_id, u))
        })?;
        for (k, b) in theirs {
            x.blocks.remove(k);
            r.blocks += 1;
            r.agents.insert(b.agent_id);
        }
        for agent in &r.agents {
            let key = keys::block(agent, BlockLabel::BackgroundContext);
            if self.blocks.contains_key(&key)? {
                x.blocks.remove(key);
            }
        }
        Ok(())
    }

    /// Applies a forget's removals: derived records first, raw turns last,
    /// so a crash in between leaves the marker, and the next start finishes
    /// the rest.
    fn apply_removals(&self, x: Removals, r: &ForgetReport) -> Result<(), StoreError> {
        self.embeddings.apply_batch(x.embeddings)?;
        self.rollup_inbox.apply_batch(x.inbox)?;
        self.blocks.apply_batch(x.blocks)?;
        self.topics.apply_batch(x.topics)?;
        self.summary_index.apply_batch(x.summary_index)?;
        self.summaries.apply_batch(x.summaries)?;
        self.fact_index.apply_batch(x.fact_index)?;
        self.facts.apply_batch(x.facts)?;
        self.fact_tombstones.apply_batch(x.tombstones)?;
        self.dead.apply_batch(x.dead)?;
        self.dead_letters_moved(0, r.dead_letters as u64);
        self.agent_dead_letters.apply_batch(x.dead_by_agent)?;
        self.queue.apply_batch(x.queue)?;
        self.open.apply_batch(x.open)?;
        self.turns.apply_batch(x.turns)?;
        self.user_sessions.apply_batch(x.user_sessions)?;
        self.session_starts.apply_batch(x.session_starts)?;
        self.sessions.apply_batch(x.sessions)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConversationSummary, EndReason};
    use chrono::{TimeZone, Utc};

    fn session(trees: &Trees, n: u128, agent: &str, user: &str) -> Uuid {
        let at = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        let id = Uuid::from_u128(n);
        let rec = SessionRecord {
            session_id: id,
            agent_id: agent.into(),
            user_id: user.into(),
            connection_id: format!("c{n}"),
            started_at: at,
            ended_at: Some(at),
            end_reason: Some(EndReason::Disconnect),
            turn_count: 0,
        };
        trees.end_session(&rec, at).unwrap();
        let s = ConversationSummary::session(id, agent, user, at, "Zoe sails to Zanzibar.");
        trees.complete_reflection(&s, &[], &[]).unwrap();
        id
    }

    #[test]
    fn a_forget_is_scoped_idempotent_and_leaves_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        let a = session(&trees, 1, "kairix", "zoe");
        let b = session(&trees, 2, "nova", "zoe");
        let c = session(&trees, 3, "kairix", "ada");

        let r = trees.forget_user("zoe", Some("nova")).unwrap();
        assert_eq!((r.sessions, r.session_summaries), (1, 1));
        assert_eq!(r.agents, ["nova".to_string()].into());
        assert!(r.removed_ids.contains(&b));
        assert!(trees.session(a).unwrap().is_some());
        assert!(trees.session(b).unwrap().is_none());

        let r = trees.forget_user("zoe", None).unwrap();
        assert_eq!((r.sessions, r.session_summaries), (1, 1));
        assert!(trees.forget_user("zoe", None).unwrap().is_empty());
        assert!(trees.session(c).unwrap().is_some());
        assert!(trees.summary(c).unwrap().is_some());
        assert!(trees.pending_forgets().unwrap().is_empty());
    }

    #[test]
    fn a_forget_is_logged_by_hash_and_its_ids_kept_for_their_window_only() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        let a = session(&trees, 1, "kairix", "zoe");
        session(&trees, 2, "kairix", "ada");
        let before = Utc::now() - chrono::Duration::seconds(1);
        trees.forget_user("zoe", Some("kairix")).unwrap();
        trees.forget_user("nobody", None).unwrap();
        let log = trees.forget_log().unwrap();
        assert_eq!(log.len(), 2, "a forget of nothing is logged too");
        // (in time order; two in one millisecond by hash)
        let zoe = log.iter().find(|e| e.covers("kairix", "zoe")).unwrap();
        assert!(!zoe.covers("nova", "zoe"), "limited to its agent");
        let nobody = log.iter().find(|e| e.covers("nova", "nobody")).unwrap();
        assert!(nobody.covers("kairix", "nobody") && !nobody.covers("kairix", "zoe"));
        assert!(log.iter().all(|e| e.at > before));
        // No user id in the log's keys or values.
        for item in trees.forget_log.iter() {
            let (k, v) = item.unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&v)
            );
            assert!(!text.contains("zoe") && !text.contains("nobody"), "{text}");
        }
        // The removed ids are kept, across a reopen…
        drop(trees);
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        let kept = trees.forgotten_since(before).unwrap();
        assert!(kept.iter().any(|(id, _)| *id == a), "{kept:?}");
        // …and let go of once their window has passed.
        let later = Utc::now() + chrono::Duration::from_std(FORGOTTEN_FOR).unwrap();
        trees.keep_forgotten([Uuid::from_u128(9)], later).unwrap();
        let kept = trees.forgotten_since(before).unwrap();
        assert_eq!(
            kept.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [Uuid::from_u128(9)]
        );
        assert_eq!(trees.forgotten.len(), 1);
    }

    #[test]
    fn a_begun_forget_is_pending_until_done() {
        let dir = tempfile::tempdir().unwrap();
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        trees.begin_forget("zoe", None).unwrap();
        trees.begin_forget("ada", Some("kairix")).unwrap();
        let mut pending = trees.pending_forgets().unwrap();
        pending.sort();
        assert_eq!(
            pending,
            [
                ("ada".to_string(), Some("kairix".to_string())),
                ("zoe".to_string(), None)
            ]
        );
        trees.forget_user("zoe", None).unwrap();
        assert_eq!(trees.pending_forgets().unwrap().len(), 1);
    }
}
