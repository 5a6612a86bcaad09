//! The runtime's side of context assembly.
//!
//! What is stored for an (agent, user) — blocks, visible facts, summaries,
//! the ended sessions and the latest one's turns, topics — is read from the
//! Store's in-memory records, prepared (rendered and counted once) and
//! cached until the Store reports a change to a part of it (the agent's or
//! the user's counter for that part moves; only the parts that moved are
//! read again) or the rendered background context would change with time
//! (a recent summary leaves the look-back). Each read then adds only what
//! is live — the call's window summary and gap turns, asked of its session
//! actor — applies the decay bands to the previous call, and selects within
//! the budget. Nothing here waits on an LLM; a cache miss costs store
//! reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Duration, Utc};
use ractor::call_t;
use recall_actors::assembly::{
    distinct_summary_indices, live_summary_item, prepare_blocks, prepare_summary, prepare_turns,
    user_view,
};
use recall_actors::context::{
    fact_item, AssembledContext, ContextItem, ItemRun, PreparedFacts, Source, TokenCounter,
};
use recall_actors::embed::StoredVector;
use recall_actors::model::{
    BlockLabel, BlockWriter, ConversationSummary, ConversationTurn, EarlierValue, FactRecord,
    MemoryBlock, Speaker, SummaryType, Topic,
};
use recall_actors::retrieval::{self, select, Retrieved, Selection, Shaping, SummarySentences};
use recall_actors::session::SessionMsg;
use recall_actors::store::{read_blocking, CurrentFacts, Parts, SourceParts, Stamp, StoredBlocks};
use recall_actors::watchdog::{render_context, topic_order, Hierarchy};
use uuid::Uuid;

use super::{RecallError, Runtime, CALL_TIMEOUT_MS};

/// An ended call of the user's, as the decay bands need it.
struct EndedCall {
    session_id: Uuid,
    ended_at: DateTime<Utc>,
}

/// A previous call's turns, prepared, and when it was last active.
struct PreviousTurns {
    session_id: Uuid,
    last_activity: DateTime<Utc>,
    turns: ItemRun,
    /// Stored turns (items leave out empty sides).
    turn_count: u32,
}

/// The stored sources of one (agent, user)'s context, prepared. Each part
/// is shared with the entry it was kept from when the Store reports no
/// change to it (see [`Parts`]).
pub(super) struct Sources {
    stamp: Stamp,
    /// The rendered background context holds until then.
    valid_until: Option<DateTime<Utc>>,
    /// What the blocks (with this user's background context) are rendered
    /// from.
    stored_blocks: Arc<StoredBlocks>,
    stored_summaries: Arc<Vec<Arc<ConversationSummary>>>,
    /// Each of `stored_summaries` by its id: a retrieved summary is shown
    /// from here, not read from the store again.
    summary_at: Arc<HashMap<Uuid, usize, foldhash::fast::RandomState>>,
    topics: Arc<Vec<Topic>>,
    blocks: Vec<ContextItem>,
    facts: Arc<PreparedFacts>,
    /// The people and pets the user's facts name, as (the stem of what
    /// they are to the user, the name): ("brother", "Rob").
    names: Arc<Vec<(String, String)>>,
    /// Oldest first.
    summaries: ItemRun,
    /// By end time.
    ended: Arc<Vec<EndedCall>>,
    /// The latest ended call's turns.
    latest: Option<Arc<PreviousTurns>>,
    last_used: AtomicU64,
}

/// A stored summary rendered and counted, with its duplicate key, kept
/// with the decoded record it was made from (the store hands out the same
/// record while its bytes do not change, so a read after a write prepares
/// only what changed).
struct PreparedSummary {
    summary: Arc<ConversationSummary>,
    key: u64,
    item: ContextItem,
}

/// A stored fact rendered for a viewer (its owner, or another user it is
/// shared with), with the value it replaced, kept with the record.
struct PreparedFact {
    fact: Arc<FactRecord>,
    earlier: Option<EarlierValue>,
    item: ContextItem,
    /// The people and pets it names ([`names_of_fact`]).
    names: Arc<[(String, String)]>,
}

/// Records rendered by earlier reads, by the address of the record (held,
/// so the address is not reused); those the store no longer holds are let
/// go once the map has doubled since it was last swept.
struct Prepared<K, V> {
    map: HashMap<K, V, foldhash::fast::RandomState>,
    sweep_above: usize,
}

impl<K, V> Default for Prepared<K, V> {
    fn default() -> Self {
        Prepared {
            map: HashMap::default(),
            sweep_above: 1024,
        }
    }
}

impl<K: std::hash::Hash + Eq, V> Prepared<K, V> {
    /// Lets go of the records only this map holds (`held` says whether
    /// another holder is left).
    fn sweep(&mut self, held: impl Fn(&V) -> bool) {
        self.map.retain(|_, v| held(v));
        self.sweep_above = (2 * self.map.len()).max(1024);
    }

    fn sweep_when_grown(&mut self, held: impl Fn(&V) -> bool) {
        if self.map.len() > self.sweep_above {
            self.sweep(held);
        }
    }
}

/// Prepared sources per agent and user, least recently used evicted.
pub(super) struct SourceCache {
    /// What items' tokens are counted with (`context.tokenizer`).
    counter: Arc<dyn TokenCounter>,
    /// By the address of the record (held, so the address is not reused).
    prepared: std::sync::Mutex<Prepared<usize, PreparedSummary>>,
    /// By the address of the record and whether the viewer is another
    /// user than its owner.
    prepared_facts: std::sync::Mutex<Prepared<(usize, bool), PreparedFact>>,
    /// Retrieved summaries' sentences.
    splits: SummarySplits,
    capacity: usize,
    entries: RwLock<HashMap<String, HashMap<String, Arc<Sources>>>>,
    tick: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    partial_misses: AtomicU64,
    parts_read: AtomicU64,
}

/// A message's vector being made: every read of the message awaits the
/// one forward pass.
type MakingVector =
    futures::future::Shared<futures::future::BoxFuture<'static, Option<Arc<StoredVector>>>>;

/// A message's vector at hand, or being made, each with where it came
/// from (see `Runtime::vector_job`).
type VectorJob = Result<(Arc<StoredVector>, &'static str), (MakingVector, &'static str)>;

/// Messages' vectors, by their text, most recent kept: a vector that came
/// too late for one read serves the next read of the same message, and a
/// vector asked for ahead of the read ([`Runtime::prepare_message`]) serves
/// the read that follows.
pub(super) struct QueryVectors {
    /// Let go whole at a forget (a message's text is the user's words): a
    /// job started before does not hold its vector, or its text, after it.
    held: Held<String, Arc<StoredVector>>,
    /// Vectors being made, by text; a job leaves once its vector is held.
    making: std::sync::Mutex<HashMap<String, MakingVector>>,
    /// Jobs at once (`embed.max_query_jobs`): vectors being made, and
    /// prepared messages' related words being worked out.
    max_jobs: usize,
    /// Prepared messages whose words' related words are being worked out.
    relating: std::sync::atomic::AtomicUsize,
}

impl QueryVectors {
    pub(super) fn new(capacity: usize, max_jobs: usize) -> Self {
        QueryVectors {
            held: Held::new(capacity.max(1)),
            making: std::sync::Mutex::new(HashMap::new()),
            max_jobs: max_jobs.max(1),
            relating: Default::default(),
        }
    }

    /// Lets every held vector go, and the texts they were held by.
    pub(super) fn clear(&self) {
        self.held.clear();
    }

    fn get(&self, text: &str) -> Option<Arc<StoredVector>> {
        self.held.get(text).ok()
    }
}

/// What a [`Held`] holds.
struct HeldItems<K, V> {
    map: HashMap<K, V, foldhash::fast::RandomState>,
    order: std::collections::VecDeque<K>,
    /// Moves when everything is let go, so a read that started before
    /// does not put back what it read.
    generation: u64,
}

/// What earlier reads prepared from records that do not change (or that
/// are checked to be the same), by key: the oldest go first above the
/// capacity, and everything goes when a user is forgotten.
pub(super) struct Held<K, V> {
    capacity: usize,
    held: std::sync::Mutex<HeldItems<K, V>>,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Held<K, V> {
    fn new(capacity: usize) -> Self {
        Held {
            capacity,
            held: std::sync::Mutex::new(HeldItems {
                map: HashMap::default(),
                order: Default::default(),
                generation: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldItems<K, V>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is held for `key`, or the generation to put it with.
    fn get<Q>(&self, key: &Q) -> Result<V, u64>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let held = self.lock();
        held.map.get(key).cloned().ok_or(held.generation)
    }

    /// Holds `value` (in place of what was held for `key`), unless
    /// everything was let go since `generation` was read.
    fn put(&self, key: K, value: V, generation: u64) {
        if self.capacity == 0 {
            return;
        }
        let mut held = self.lock();
        if held.generation != generation || held.map.insert(key.clone(), value).is_some() {
            return;
        }
        held.order.push_back(key);
        while held.order.len() > self.capacity {
            if let Some(old) = held.order.pop_front() {
                held.map.remove(&old);
            }
        }
    }

    fn generation(&self) -> u64 {
        self.lock().generation
    }

    fn clear(&self) {
        let mut held = self.lock();
        held.map = HashMap::default();
        held.order = Default::default();
        held.generation += 1;
    }
}

/// Retrieved summaries split into sentences, by id, with the record they
/// were split from (the store hands out the same record while its bytes
/// do not change; another record is split again).
type SummarySplits = Held<Uuid, (Arc<ConversationSummary>, Arc<SummarySentences>)>;

/// How many summaries' sentences are held.
const SUMMARY_SPLITS_HELD: usize = 4_096;

/// How the source cache (the prepared sources of contexts) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SourceCacheStats {
    /// (agent, user) pairs held.
    pub entries: usize,
    /// Reads served from prepared sources.
    pub hits: u64,
    /// Reads that went to the store (absent, changed, or expired).
    pub misses: u64,
    /// Misses that kept what was held and read again only the parts a
    /// write changed (or none, when only time moved).
    pub partial_misses: u64,
    /// Parts of the sources (blocks, sessions, summaries, facts, topics)
    /// read from the store, in all: five for a read that keeps nothing.
    pub parts_read: u64,
}

impl SourceCache {
    pub(super) fn new(capacity: usize, counter: Arc<dyn TokenCounter>) -> Self {
        SourceCache {
            counter,
            prepared: Default::default(),
            prepared_facts: Default::default(),
            splits: SummarySplits::new(if capacity == 0 {
                0
            } else {
                SUMMARY_SPLITS_HELD
            }),
            capacity,
            entries: RwLock::new(HashMap::new()),
            tick: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            partial_misses: AtomicU64::new(0),
            parts_read: AtomicU64::new(0),
        }
    }

    fn get(&self, agent_id: &str, user_id: &str) -> Option<Arc<Sources>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let found = entries.get(agent_id)?.get(user_id)?.clone();
        found
            .last_used
            .store(self.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(found)
    }

    /// The (agent, user) pairs held.
    pub(super) fn owners(&self) -> Vec<(String, String)> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .flat_map(|(a, users)| users.keys().map(move |u| (a.clone(), u.clone())))
            .collect()
    }

    /// Drops what is held for a user (with one agent, or with all).
    pub(super) fn remove_user(&self, user_id: &str, agent_id: Option<&str>) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        for (a, users) in entries.iter_mut() {
            if agent_id.is_none_or(|x| x == a) {
                users.remove(user_id);
            }
        }
        entries.retain(|_, users| !users.is_empty());
        drop(entries);
        // What was rendered of their records (the store let go of them).
        self.prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sweep(|p| Arc::strong_count(&p.summary) > 1);
        self.prepared_facts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sweep(|p| Arc::strong_count(&p.fact) > 1);
        // Their summaries' sentences (of every user: a forget is rare, and
        // a read that started before it does not put theirs back); their
        // turns leave with the index's documents.
        self.splits.clear();
    }

    fn insert(&self, agent_id: &str, user_id: &str, sources: Arc<Sources>) {
        if self.capacity == 0 {
            return;
        }
        sources
            .last_used
            .store(self.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let present = entries
            .get(agent_id)
            .is_some_and(|u| u.contains_key(user_id));
        let len: usize = entries.values().map(HashMap::len).sum();
        if !present && len >= self.capacity {
            let oldest = entries
                .iter()
                .flat_map(|(a, users)| {
                    users
                        .iter()
                        .map(move |(u, s)| (s.last_used.load(Ordering::Relaxed), a, u))
                })
                .min()
                .map(|(_, a, u)| (a.clone(), u.clone()));
            if let Some((a, u)) = oldest {
                if let Some(users) = entries.get_mut(&a) {
                    users.remove(&u);
                    if users.is_empty() {
                        entries.remove(&a);
                    }
                }
            }
        }
        entries
            .entry(agent_id.to_string())
            .or_default()
            .insert(user_id.to_string(), sources);
    }

    /// The summaries a context shows of `summaries` (see
    /// [`distinct_summary_indices`]), prepared; a record an earlier read
    /// prepared is not rendered again.
    fn prepare_summaries(&self, summaries: &[Arc<ConversationSummary>]) -> Vec<ContextItem> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        let map = &mut prepared.map;
        let keys: Vec<u64> = summaries
            .iter()
            .map(|s| {
                let at = Arc::as_ptr(s) as usize;
                match map.get(&at) {
                    Some(p) if Arc::ptr_eq(&p.summary, s) => p.key,
                    _ => {
                        let key = recall_actors::context::dedup_key(&s.summary_text);
                        let item = prepare_summary(s, &*self.counter);
                        map.insert(
                            at,
                            PreparedSummary {
                                summary: s.clone(),
                                key,
                                item,
                            },
                        );
                        key
                    }
                }
            })
            .collect();
        let out = distinct_summary_indices(summaries, |i, _| keys[i])
            .into_iter()
            .filter_map(|i| {
                let at = Arc::as_ptr(&summaries[i]) as usize;
                map.get(&at).map(|p| p.item.clone())
            })
            .collect();
        // Records the store no longer hands out are held here alone.
        prepared.sweep_when_grown(|p| Arc::strong_count(&p.summary) > 1);
        out
    }

    /// The current facts `user_id` may see, prepared, rendering only the
    /// records (or earlier values) earlier reads did not; and the people
    /// and pets the user's own facts name ([`named_in`]), read once per
    /// record too.
    fn prepare_facts(
        &self,
        facts: &CurrentFacts,
        user_id: &str,
    ) -> (PreparedFacts, Vec<(String, String)>) {
        let mut prepared = self
            .prepared_facts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let map = &mut prepared.map;
        let mut names: Vec<(String, String)> = Vec::new();
        let items = facts
            .facts
            .iter()
            .map(|f| {
                let earlier = facts.earlier(f.fact_id);
                let own = f.user_id == user_id;
                let at = (Arc::as_ptr(f) as usize, !own);
                let (item, named) = match map.get(&at) {
                    Some(p) if Arc::ptr_eq(&p.fact, f) && p.earlier.as_ref() == earlier => {
                        (p.item.clone(), p.names.clone())
                    }
                    _ => {
                        let item = fact_item(&f.fact, earlier, user_id, &*self.counter);
                        let named: Arc<[(String, String)]> = names_of_fact(&f.fact).into();
                        map.insert(
                            at,
                            PreparedFact {
                                fact: f.clone(),
                                earlier: earlier.cloned(),
                                item: item.clone(),
                                names: named.clone(),
                            },
                        );
                        (item, named)
                    }
                };
                // the user's relations, not the agent side's
                if own && f.speaker == Speaker::User {
                    add_names(&mut names, &named);
                }
                (&f.fact, item)
            })
            .collect();
        // Records the store no longer holds are held here alone.
        prepared.sweep_when_grown(|p| Arc::strong_count(&p.fact) > 1);
        (PreparedFacts::from_items(items), names)
    }

    pub(super) fn stats(&self) -> SourceCacheStats {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        SourceCacheStats {
            entries: entries.values().map(HashMap::len).sum(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            partial_misses: self.partial_misses.load(Ordering::Relaxed),
            parts_read: self.parts_read.load(Ordering::Relaxed),
        }
    }
}

impl Runtime {
    /// The stored sources of a context, from the cache while the agent's
    /// parts have not moved and the background context still holds; after
    /// a write, only the parts it changed are read again.
    async fn stored_sources(
        &self,
        agent_id: &str,
        user_id: &str,
        now: DateTime<Utc>,
        cached: bool,
    ) -> Result<Arc<Sources>, RecallError> {
        // Read before the store: a write after this moves the counts, so a
        // stale part is never taken for current.
        let stamp = self.inner.generations.get(agent_id, user_id);
        let mut kept = None;
        if cached {
            if let Some(s) = self.inner.source_cache.get(agent_id, user_id) {
                if s.stamp == stamp && s.valid_until.is_none_or(|t| now <= t) {
                    self.inner.source_cache.hits.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("recall_context_cache_hits_total").increment(1);
                    return Ok(s);
                }
                kept = Some(s);
            }
            self.inner
                .source_cache
                .misses
                .fetch_add(1, Ordering::Relaxed);
            metrics::counter!("recall_context_cache_misses_total").increment(1);
        }
        // The barrier makes every write sent before this read visible (and
        // counted): the parts to read again are those that moved by then.
        // The read itself runs off the Store actor, so turn writes never
        // wait behind it.
        self.store_barrier().await?;
        let stamp = self.inner.generations.get(agent_id, user_id);
        let parts = match &kept {
            Some(s) => stamp.changed_since(&s.stamp),
            None => Parts::ALL,
        };
        if cached {
            let cache = &self.inner.source_cache;
            if parts != Parts::ALL {
                cache.partial_misses.fetch_add(1, Ordering::Relaxed);
            }
            cache
                .parts_read
                .fetch_add(u64::from(parts.count()), Ordering::Relaxed);
        }
        let stored = if parts.is_empty() {
            // Only time moved: the background context is rendered again.
            SourceParts::default()
        } else {
            let trees = self.reader()?;
            let (a, u) = (agent_id.to_string(), user_id.to_string());
            read_blocking(trees, move |b| {
                Box::pin(async move { b.source_parts(&a, &u, parts).await })
            })
            .await?
        };
        let sources = Arc::new(
            self.prepare_sources(agent_id, user_id, now, stamp, stored, kept.as_deref())
                .await?,
        );
        if cached {
            self.inner
                .source_cache
                .insert(agent_id, user_id, sources.clone());
        }
        Ok(sources)
    }

    /// Prepares what was read, taking every part not read from `kept`.
    async fn prepare_sources(
        &self,
        agent_id: &str,
        user_id: &str,
        now: DateTime<Utc>,
        stamp: Stamp,
        stored: SourceParts,
        kept: Option<&Sources>,
    ) -> Result<Sources, RecallError> {
        let SourceParts {
            blocks: stored_blocks,
            facts,
            summaries: stored_summaries,
            ended,
            topics,
        } = stored;
        // A part not read is kept (with no entry to keep from, every part
        // was read).
        let stored_blocks = match (stored_blocks, kept) {
            (None, Some(k)) => k.stored_blocks.clone(),
            (b, _) => Arc::new(b.unwrap_or_default()),
        };
        let topics = match (topics, kept) {
            (None, Some(k)) => k.topics.clone(),
            (t, _) => Arc::new(t.unwrap_or_default()),
        };
        let (stored_summaries, summary_at, summaries) = match (stored_summaries, kept) {
            (None, Some(k)) => (
                k.stored_summaries.clone(),
                k.summary_at.clone(),
                k.summaries.clone(),
            ),
            (list, _) => {
                let list = list.unwrap_or_default();
                let items = self.inner.source_cache.prepare_summaries(&list);
                let at = list
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.summary_id, i))
                    .collect();
                (Arc::new(list), Arc::new(at), ItemRun::from(items))
            }
        };
        let (facts, names) = match (facts, kept) {
            (None, Some(k)) => (k.facts.clone(), k.names.clone()),
            (f, _) => {
                let f = f.unwrap_or_default();
                let (facts, names) = self.inner.source_cache.prepare_facts(&f, user_id);
                (Arc::new(facts), Arc::new(names))
            }
        };
        let (ended, latest) = match (ended, kept) {
            (None, Some(k)) => (k.ended.clone(), k.latest.clone()),
            (list, _) => {
                let ended: Vec<EndedCall> = list
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|r| {
                        Some(EndedCall {
                            session_id: r.session_id,
                            ended_at: r.ended_at?,
                        })
                    })
                    .collect();
                let latest = match ended.last() {
                    Some(call) => Some(Arc::new(self.previous_turns(call).await?)),
                    None => None,
                };
                (Arc::new(ended), latest)
            }
        };
        let (blocks, valid_until) = self.render_blocks(
            agent_id,
            user_id,
            now,
            &stored_blocks,
            &stored_summaries,
            &topics,
        );
        Ok(Sources {
            stamp,
            valid_until,
            stored_blocks,
            stored_summaries,
            summary_at,
            topics,
            blocks,
            facts,
            names,
            summaries,
            ended,
            latest,
            last_used: AtomicU64::new(0),
        })
    }

    /// The blocks a user's context shows, prepared, and until when the
    /// rendered background context holds.
    fn render_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
        now: DateTime<Utc>,
        stored: &StoredBlocks,
        summaries: &[Arc<ConversationSummary>],
        topics: &[Topic],
    ) -> (Vec<ContextItem>, Option<DateTime<Utc>>) {
        // The agent's own blocks, each followed by what this user's
        // conversations added to it; never another user's.
        let mut blocks = user_view(&stored.agent_blocks, &stored.user_blocks);
        // The stored `background_context` block covers every user of the
        // agent; this user's is rendered from their own summary hierarchy
        // (recent sessions newest first, latest day and week, topics with
        // the live call's first) and the agent's persistent context. It
        // holds until the oldest recent summary leaves the look-back (a
        // topic shift rewrites the agent's block, which moves the blocks'
        // count).
        let settings = &self.inner.settings;
        let lookback = Duration::hours(settings.watchdog.lookback_hours as i64);
        let recent: Vec<&ConversationSummary> = summaries
            .iter()
            .rev()
            .map(|s| &**s)
            .filter(|s| s.summary_type == SummaryType::Session && s.period_end >= now - lookback)
            .collect();
        let latest = |kind: SummaryType| {
            summaries
                .iter()
                .rev()
                .find(|s| s.summary_type == kind && s.is_current())
                .map(|s| &**s)
        };
        let live = self.inner.live_topics.get(agent_id, user_id, now, lookback);
        let labels = topic_order(topics, live);
        let valid_until = recent.iter().map(|s| s.period_end + lookback).min();
        let persistent = &stored.persistent_context;
        let hierarchy = Hierarchy {
            recent: &recent,
            daily: latest(SummaryType::Daily),
            weekly: latest(SummaryType::Weekly),
            topics: &labels,
            persistent,
        };
        if !recent.is_empty()
            || !persistent.is_empty()
            || hierarchy.daily.is_some()
            || !labels.is_empty()
        {
            let limit = settings.blocks.background_context_limit;
            blocks.push(MemoryBlock {
                agent_id: agent_id.to_string(),
                label: BlockLabel::BackgroundContext,
                value: render_context(now, &hierarchy, settings.watchdog.max_topics, limit),
                limit,
                updated_at: now,
                source_user_id: Some(user_id.to_string()),
                written_by: Some(BlockWriter::Watchdog),
            });
        }
        (prepare_blocks(&blocks, &*self.inner.counter), valid_until)
    }

    async fn previous_turns(&self, call: &EndedCall) -> Result<PreviousTurns, RecallError> {
        let turns = self.turns(call.session_id).await?;
        Ok(PreviousTurns {
            session_id: call.session_id,
            last_activity: turns.last().map(|t| t.timestamp).unwrap_or(call.ended_at),
            turns: prepare_turns(&turns, &*self.inner.counter).into(),
            turn_count: turns.len() as u32,
        })
    }

    /// The `background_context` block as this user's context shows it:
    /// rendered from their own summaries, rollups and topics (the agent's
    /// stored block mixes every user's). Empty when there is nothing yet.
    pub async fn user_background_context(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<String, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let now = self.inner.clock.now();
        let src = self.stored_sources(agent_id, user_id, now, true).await?;
        let header = format!("[{}]\n", BlockLabel::BackgroundContext);
        Ok(src
            .blocks
            .iter()
            .find(|i| i.source == Source::Block(BlockLabel::BackgroundContext))
            .map(|i| i.text.strip_prefix(&header).unwrap_or(&i.text).to_string())
            .unwrap_or_default())
    }

    /// Assembles a context; `options.use_cache: false` reads everything
    /// from the store (what the cache must always agree with).
    pub(super) async fn assemble_context(
        &self,
        agent_id: &str,
        user_id: &str,
        current_message: &str,
        budget_tokens: usize,
        options: ContextOptions,
    ) -> Result<AssembledContext, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        self.check_message("message", current_message)?;
        let counter: &dyn TokenCounter = &*self.inner.counter;
        let now = self.inner.clock.now();
        let src = self
            .stored_sources(agent_id, user_id, now, options.use_cache)
            .await?;
        let LiveMemory {
            summaries: live_summaries,
            mut gap,
            started: live_started,
        } = self.live_memory(agent_id, user_id, counter).await;
        gap.sort_by_key(|t| t.timestamp);
        // The live call's latest user words sharpen what is retrieved (the
        // last message before this one: more would mostly add common words,
        // and every word costs its postings).
        let gap_queries: Vec<String> = gap
            .iter()
            .rev()
            .map(|t| t.user_message.clone())
            .filter(|m| !m.trim().is_empty())
            .take(1)
            .collect();
        let gap = prepare_turns(&gap, counter);
        // A caller that holds the live call's messages itself (a voice
        // framework's own LLM context) gets the rest of the memory only:
        // the live call's words would take its budget twice.
        let (live_summaries, gap) = if options.include_live {
            (live_summaries, gap)
        } else {
            (Vec::new(), Vec::new())
        };

        // Decay across calls (seed 002): the previous call's turns stay
        // verbatim if the user is back within the soft decay, only its last
        // few beside its summary until the hard decay, and none after.
        let decay = &self.inner.settings.context;
        let reference = live_started.unwrap_or(now);
        let loaded;
        let mut skip_summary = None;
        let mut previous = ItemRun::default();
        // The previous call's turns shown verbatim (its id, and the first
        // turn shown) are not retrieved again.
        let mut verbatim: Option<(Uuid, u32)> = None;
        if let Some(call) = src.ended.iter().rev().find(|c| c.ended_at <= reference) {
            let prev = match &src.latest {
                Some(p) if p.session_id == call.session_id => &**p,
                _ => {
                    loaded = self.previous_turns(call).await?;
                    &loaded
                }
            };
            let idle = reference - prev.last_activity;
            if idle <= Duration::minutes(decay.soft_decay_minutes as i64) {
                // Verbatim: its summary would only repeat it.
                skip_summary = Some(Source::Summary(prev.session_id));
                previous = prev.turns.clone();
                verbatim = Some((prev.session_id, 0));
            } else if idle <= Duration::minutes(decay.hard_decay_minutes as i64) {
                let keep = decay.turns_after_soft_decay.min(prev.turn_count as usize) as u32;
                let first = prev.turn_count - keep;
                let from = prev
                    .turns
                    .iter()
                    .position(|t| matches!(t.source, Source::Turn { index, .. } if index >= first))
                    .unwrap_or(prev.turns.len());
                previous = prev.turns.slice(from..prev.turns.len());
                verbatim = Some((prev.session_id, first));
            }
        }
        let (before, after) =
            match skip_summary.and_then(|s| src.summaries.iter().rposition(|i| i.source == s)) {
                Some(i) => (
                    src.summaries.slice(0..i),
                    src.summaries.slice(i + 1..src.summaries.len()),
                ),
                None => (src.summaries.clone(), ItemRun::default()),
            };
        let retrieved = self
            .retrieve(
                agent_id,
                user_id,
                Ask {
                    message: current_message,
                    live_words: &gap_queries,
                    skip_session: verbatim,
                    now,
                    cached: options.use_cache,
                },
                &src,
            )
            .await?;
        Ok(select(
            &Selection {
                blocks: &src.blocks,
                facts: &src.facts,
                summaries: &[before, after, live_summaries.into()],
                turns: &[previous, gap.into()],
                retrieved: &retrieved,
                retrieval_share: decay.retrieval_share,
                current_message,
                budget_tokens,
                min_cut_tokens: decay.ranking.min_cut_tokens,
            },
            counter,
        )?)
    }

    /// The user's live calls with the agent: their rolling memory (the
    /// latest completed long narrative and window summaries, never waited
    /// for) and the raw turns after them.
    async fn live_memory(
        &self,
        agent_id: &str,
        user_id: &str,
        counter: &dyn TokenCounter,
    ) -> LiveMemory {
        let mut live_summaries: Vec<ContextItem> = Vec::new();
        let mut gap: Vec<ConversationTurn> = Vec::new();
        let mut live_started: Option<DateTime<Utc>> = None;
        for live in self.inner.registry.live_of(agent_id, user_id) {
            // What the actor last gave, while no turn was sent to it and
            // no window summary completed since; else asked again (behind
            // every turn sent so far). An actor that ended meanwhile does
            // not answer: its turns are in the store by the time the next
            // read looks.
            let view = match live.view.current() {
                Some(view) => view,
                None => match call_t!(live.actor, SessionMsg::Working, CALL_TIMEOUT_MS) {
                    Ok(view) => view,
                    Err(_) => continue,
                },
            };
            live_started = Some(live_started.map_or(view.started_at, |s| s.min(view.started_at)));
            // The long narrative, then the windows after it, oldest first.
            let long = view
                .long
                .iter()
                .map(|l| (l.start_seq, l.end_seq, &l.summary));
            let windows = view
                .windows
                .iter()
                .map(|w| (w.start_seq, w.end_seq, &w.summary));
            for (start, end, text) in long.chain(windows) {
                if let Some(text) = text {
                    live_summaries.push(live_summary_item(
                        view.session_id,
                        start,
                        end,
                        text,
                        counter,
                    ));
                }
            }
            gap.extend(view.gap.iter().cloned());
        }
        LiveMemory {
            summaries: live_summaries,
            gap,
            started: live_started,
        }
    }

    /// What the user's memory holds about the current message (and the
    /// live call's latest words): the best hits of a keyword search over
    /// their ended calls' turns, summaries and the facts they may see,
    /// best first. Never waits on an LLM or an embedder; an empty message
    /// retrieves nothing.
    async fn retrieve(
        &self,
        agent_id: &str,
        user_id: &str,
        ask: Ask<'_>,
        src: &Sources,
    ) -> Result<Vec<Retrieved>, RecallError> {
        let Ask {
            message,
            live_words,
            skip_session,
            now,
            cached,
        } = ask;
        let settings = &self.inner.settings.context;
        let limit = settings.retrieval_candidates;
        if message.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let index = self.agent_index(agent_id).await?;
        let participants = {
            let ix = index.read().unwrap_or_else(|p| p.into_inner());
            ix.participants(user_id, agent_id)
        };
        let (query, about) = retrieval::query(
            message,
            live_words,
            &src.names,
            &participants,
            user_id,
            limit,
        );
        let vector = self.query_vector(message).await;
        // The query's words, split once: for the search and for the
        // sentences of what it finds.
        let asked: Vec<String> = recall_actors::lang::tokens(&query.text).collect();
        // The turns around each turn hit, as the index prepared them, read
        // under the search's own lock: a forget between the two cannot
        // leave a hit without its turn.
        let (hits, around) = {
            let ix = index.read().unwrap_or_else(|p| p.into_inner());
            let hits = ix.find(
                &query,
                &asked,
                vector.as_deref(),
                retrieval::ranking(settings, message, vector.is_some(), now),
            );
            let around: HashMap<_, _> = retrieval::turns_to_read(&hits, skip_session)
                .into_iter()
                .filter_map(|r| Some((r, ix.turns_around(r)?)))
                .collect();
            (hits, around)
        };
        let counter = &*self.inner.counter;
        let summary = |id: Uuid| {
            src.summary_at.get(&id).map(|&i| {
                let s = &src.stored_summaries[i];
                (s.clone(), self.summary_sentences(s, cached))
            })
        };
        Ok(retrieval::shape(
            Shaping {
                hits,
                around,
                skip_session,
                asked: recall_actors::lang::stem_keys_of(&asked),
                about,
                facts: &src.facts,
                summary: &summary,
                ranking: &settings.ranking,
            },
            counter,
        ))
    }
}

impl Runtime {
    /// The message's vector, from an embedder that captures meaning: kept
    /// from an earlier read or a [`Runtime::prepare_message`], or made now
    /// (or awaited, when already being made) if it comes within
    /// `context.query_embed_timeout_ms` (it is kept when it comes later).
    /// `None` ranks by words alone.
    async fn query_vector(&self, message: &str) -> Option<Arc<StoredVector>> {
        let (job, source) = match self.vector_job(message.trim())? {
            Ok((v, source)) => {
                metrics::counter!("recall_query_vectors_total", "source" => source).increment(1);
                return Some(v);
            }
            Err(job) => job,
        };
        let wait =
            std::time::Duration::from_millis(self.inner.settings.context.query_embed_timeout_ms);
        match tokio::time::timeout(wait, job).await {
            Ok(v) => {
                metrics::counter!("recall_query_vectors_total", "source" => source).increment(1);
                v
            }
            Err(_) => {
                metrics::counter!("recall_query_vectors_total", "source" => "late").increment(1);
                None
            }
        }
    }

    /// Starts making the vector of `text` unless it is held or being made:
    /// `None` when the embedder does not capture meaning (or the text is
    /// empty); else the held vector (`"cache"`) or one made on the spot by
    /// a table look-up (`"inline"`), or the job making it and whether this
    /// call started it (`"made"`) or found it started (`"prepared"`).
    /// The job runs to its end whoever waits for it, and its vector is
    /// held for the reads after it.
    fn vector_job(&self, text: &str) -> Option<VectorJob> {
        use futures::FutureExt;
        let embed = self.inner.embed.clone();
        if !embed.captures_meaning() || text.is_empty() {
            return None;
        }
        let vectors = &self.inner.query_vectors;
        if let Some(v) = vectors.get(text) {
            return Some(Ok((v, "cache")));
        }
        // A table look-up (the static vectors) is made here, and not held:
        // a task of its own would cost a wake-up on another worker, more
        // than the vector itself.
        if let Some(values) = embed.embed_now(text) {
            let v = StoredVector {
                embedder: embed.name().to_string(),
                values,
            };
            return Some(Ok((Arc::new(v), "inline")));
        }
        // Under the lock of the jobs, the held vectors are looked at
        // again: a job holds its vector before it leaves the jobs, so a
        // text in neither has no vector coming.
        let mut making = vectors.making.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(job) = making.get(text) {
            return Some(Err((job.clone(), "prepared")));
        }
        if let Some(v) = vectors.get(text) {
            return Some(Ok((v, "cache")));
        }
        if making.len() >= vectors.max_jobs {
            // Bounded: a burst of new messages (or of prepared ones) may
            // not queue forward passes without end; this read ranks by
            // words.
            metrics::counter!("recall_query_vectors_total", "source" => "over_limit").increment(1);
            return None;
        }
        let held = self.inner.query_vectors.clone();
        let generation = held.held.generation();
        let key = text.to_string();
        let task = self.inner.tokio.spawn(async move {
            let started = std::time::Instant::now();
            let res = embed.embed(vec![key.clone()]).await;
            metrics::histogram!("recall_query_embed_seconds")
                .record(started.elapsed().as_secs_f64());
            let v = match res {
                Ok(mut v) => v.pop().map(|values| {
                    Arc::new(StoredVector {
                        embedder: embed.name().to_string(),
                        values,
                    })
                }),
                Err(err) => {
                    tracing::warn!(error = %err, "no vector for the message; retrieval ranks by words");
                    None
                }
            };
            if let Some(v) = &v {
                held.held.put(key.clone(), v.clone(), generation);
            }
            held.making
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            v
        });
        let job: MakingVector = task.map(|r| r.ok().flatten()).boxed().shared();
        making.insert(text.to_string(), job.clone());
        Some(Err((job, "made")))
    }

    /// Starts the work a context read with this message would do first and
    /// that depends on the message alone — its vector, and its words'
    /// related words — so that the read finds it done: for a voice server to
    /// call with the user's words as soon as its speech-to-text has them,
    /// before the end of the user's turn is settled (the read's message
    /// must be the same text, spaces around it aside). Returns at once.
    /// No vector is made on an embedder whose vectors cost no more than a
    /// lookup (hashing, static), or for a message already prepared or
    /// read. Callable from any thread. `TooLong` past
    /// `session.max_message_chars`.
    pub fn prepare_message(&self, message: &str) -> Result<(), RecallError> {
        self.check_message("message", message)?;
        // (a table look-up's vector is made by the read itself)
        if !self.inner.embed.embeds_inline() {
            if let Some(Err((_, "made"))) = self.vector_job(message.trim()) {
                metrics::counter!("recall_query_vectors_prepared_total").increment(1);
            }
        }
        // Its words' related words, worked out once per word and kept for
        // every agent: off the read too.
        let settings = &self.inner.settings.context;
        let vectors = &self.inner.query_vectors;
        let relating = &vectors.relating;
        let admitted = relating
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < vectors.max_jobs).then_some(n + 1)
            })
            .is_ok();
        if settings.retrieval_related_words > 0 && admitted {
            let similarity = settings.retrieval_related_similarity;
            let words: Vec<String> = recall_actors::lang::tokens(message).collect();
            // Counted out when the job is done, or if it panics.
            struct Done(Arc<QueryVectors>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.relating.fetch_sub(1, Ordering::AcqRel);
                }
            }
            let done = Done(vectors.clone());
            self.inner.tokio.spawn_blocking(move || {
                let _done = done;
                for w in words {
                    recall_actors::static_embed::related_stems(&w, similarity);
                }
            });
        } else if admitted {
            relating.fetch_sub(1, Ordering::AcqRel);
        } else {
            // The read works them out itself.
            metrics::counter!("recall_related_words_skipped_total").increment(1);
        }
        Ok(())
    }
}

impl Runtime {
    /// A summary's sentences: held from an earlier read of the same record
    /// (with `cached`), else split and held.
    fn summary_sentences(
        &self,
        s: &Arc<ConversationSummary>,
        cached: bool,
    ) -> Arc<SummarySentences> {
        if !cached {
            return Arc::new(SummarySentences::new(s));
        }
        let held = &self.inner.source_cache.splits;
        let generation = match held.get(&s.summary_id) {
            Ok((record, split)) if Arc::ptr_eq(&record, s) => return split,
            // (another record of the summary: split and held in its place)
            Ok(_) => held.generation(),
            Err(generation) => generation,
        };
        let split = Arc::new(SummarySentences::new(s));
        held.put(s.summary_id, (s.clone(), split.clone()), generation);
        split
    }
}

/// The people and pets `user_id`'s own current facts name, as (the stem
/// of what they are to the user, the name): from the fact's words ("Has a
/// brother named Rob"), its subject where that names a person
/// ("brother:rob:role" for "Brother Rob is a firefighter") and its
/// one-valued subject ("partner" for "Wife is named Ana").
#[cfg(test)]
fn named_in(facts: &CurrentFacts, user_id: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for f in facts
        .iter()
        .filter(|f| f.user_id == user_id && f.speaker == Speaker::User)
    {
        add_names(&mut out, &names_of_fact(f));
    }
    out
}

/// `pairs` added to `names`, each once.
fn add_names(names: &mut Vec<(String, String)>, pairs: &[(String, String)]) {
    for pair in pairs {
        if !names.contains(pair) {
            names.push(pair.clone());
        }
    }
}

/// The people and pets one fact names, as in [`named_in`].
fn names_of_fact(f: &recall_actors::model::Fact) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |what: &str, name: &str| {
        let pair = (
            recall_actors::lang::stem(&what.to_lowercase()),
            name.to_string(),
        );
        if !pair.0.is_empty() && !pair.1.is_empty() && !out.contains(&pair) {
            out.push(pair);
        }
    };
    let subject = f.subject.as_deref().unwrap_or("");
    if let Some((what, name)) = recall_actors::text::named(&f.content) {
        // "older sister": the sister.
        if let Some(last) = what.split_whitespace().last() {
            add(last, &name);
        }
        if !subject.is_empty() && !subject.contains(':') {
            add(subject, &name);
        }
    } else if let [what, name, _] = subject.split(':').collect::<Vec<_>>()[..] {
        // "brother:rob:role"; not "brother:home" or "favorite:band".
        if recall_actors::text::is_relation_word(what) {
            add(what, name);
        }
    }
    out
}

/// How [`Runtime::context`] reads a context. The default shows the live
/// call and reads through the source cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOptions {
    /// Show the live call (its window summaries and raw turns). Off for a
    /// caller that sends the call's messages to its LLM itself; the live
    /// call still sets the decay bands and sharpens retrieval.
    pub include_live: bool,
    /// Read what is stored through the source cache. Off reads everything
    /// from the store, bypassing the cache: what the cached read must
    /// always equal, for tests and benchmarks that compare the two.
    pub use_cache: bool,
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions {
            include_live: true,
            use_cache: true,
        }
    }
}

/// What [`Runtime::live_memory`] gathers of the live calls.
struct LiveMemory {
    summaries: Vec<ContextItem>,
    gap: Vec<ConversationTurn>,
    /// When the earliest of them started.
    started: Option<DateTime<Utc>>,
}

/// What a context read retrieves by.
struct Ask<'a> {
    /// The current message.
    message: &'a str,
    /// The live call's latest user messages.
    live_words: &'a [String],
    /// A call whose turns the context shows verbatim already, and the
    /// first of them shown (a turn's sequence number is its place).
    skip_session: Option<(Uuid, u32)>,
    now: DateTime<Utc>,
    /// Whether what earlier reads prepared may serve.
    cached: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_actors::model::{Fact, FactCategory, FactHistory, Visibility};

    /// Vectors of meaning made through the port (as a model's are); with
    /// a `Notify`, each answers only once let go (forward passes that pile
    /// up).
    struct Ported(Option<Arc<tokio::sync::Notify>>);

    impl recall_actors::embed::Embed for Ported {
        fn name(&self) -> &str {
            "ported"
        }
        fn dimensions(&self) -> usize {
            4
        }
        fn embed(
            &self,
            texts: Vec<String>,
        ) -> futures::future::BoxFuture<
            'static,
            Result<Vec<Vec<f32>>, recall_actors::embed::EmbedError>,
        > {
            let go = self.0.clone();
            Box::pin(async move {
                if let Some(go) = go {
                    go.notified().await;
                }
                Ok(texts.iter().map(|_| vec![0.5; 4]).collect())
            })
        }
    }

    #[tokio::test]
    async fn a_forget_lets_go_of_every_messages_vector_and_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let rt = crate::RuntimeBuilder::new(dir.path())
            .settings(recall_actors::settings::Settings::for_test())
            .embed(Arc::new(Ported(None)))
            .start()
            .await
            .unwrap();
        let message = "Where did I say my sister lives?";
        rt.context("kairix", "mark", message, 2_000, ContextOptions::default())
            .await
            .unwrap();
        assert!(rt.inner.query_vectors.get(message).is_some(), "held");
        rt.forget_user("mark", None).await.unwrap();
        assert!(rt.inner.query_vectors.get(message).is_none(), "let go");
        // a vector made before the forget and put after it is not held
        let before = rt.inner.query_vectors.held.generation();
        rt.inner.query_vectors.clear();
        let v = Arc::new(StoredVector {
            embedder: "ported".into(),
            values: vec![0.5; 4],
        });
        rt.inner
            .query_vectors
            .held
            .put(message.to_string(), v.clone(), before);
        assert!(rt.inner.query_vectors.get(message).is_none());
        let now = rt.inner.query_vectors.held.generation();
        rt.inner.query_vectors.held.put(message.to_string(), v, now);
        assert!(rt.inner.query_vectors.get(message).is_some());
        rt.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn query_vectors_being_made_at_once_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = recall_actors::settings::Settings::for_test();
        settings.embed.max_query_jobs = 3;
        let go = Arc::new(tokio::sync::Notify::new());
        let rt = crate::RuntimeBuilder::new(dir.path())
            .settings(settings)
            .embed(Arc::new(Ported(Some(go.clone()))))
            .start()
            .await
            .unwrap();
        for n in 0..10 {
            rt.prepare_message(&format!("Message number {n}")).unwrap();
        }
        assert_eq!(rt.inner.query_vectors.making.lock().unwrap().len(), 3);
        // past the bound a read has no vector coming (it ranks by words)
        // and starts none
        assert!(rt.vector_job("Yet another message").is_none());
        // one being made is still found
        assert!(matches!(
            rt.vector_job("Message number 0"),
            Some(Err((_, "prepared")))
        ));
        // once they are made, new ones start again
        for _ in 0..50 {
            go.notify_waiters();
            if rt.inner.query_vectors.making.lock().unwrap().is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(rt.inner.query_vectors.making.lock().unwrap().is_empty());
        assert!(rt.inner.query_vectors.get("Message number 2").is_some());
        assert!(matches!(
            rt.vector_job("Yet another message"),
            Some(Err((_, "made")))
        ));
        go.notify_waiters();
        rt.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_table_look_up_vector_is_made_in_the_read_and_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = recall_actors::settings::Settings::default();
        settings.embed.kind = recall_actors::settings::EmbedKind::Static;
        let rt = crate::RuntimeBuilder::new(dir.path())
            .settings(settings)
            .start()
            .await
            .unwrap();
        let message = "What was the name of that book?";
        let Some(Ok((v, source))) = rt.vector_job(message) else {
            panic!("a vector made on the spot");
        };
        assert_eq!(source, "inline");
        assert_eq!(v.values, rt.inner.embed.embed_now(message).unwrap());
        // no job was started, and the text is not kept
        assert!(rt.inner.query_vectors.get(message).is_none());
        assert!(rt.inner.query_vectors.making.lock().unwrap().is_empty());
        // a read by it finds the vector the same way
        assert!(rt.query_vector(message).await.is_some());
        assert!(rt.inner.query_vectors.get(message).is_none());
        rt.shutdown().await.unwrap();
    }

    fn fact(user: &str, content: &str, subject: Option<&str>) -> Arc<FactRecord> {
        Arc::new(FactRecord {
            fact: Fact {
                fact_id: Uuid::new_v4(),
                agent_id: "kairix".into(),
                user_id: user.into(),
                category: FactCategory::Relationship,
                content: content.into(),
                subject: subject.map(str::to_string),
                visibility: Visibility::Shared,
                source_session_id: None,
                extracted_at: Utc::now(),
                conflicts_with: None,
                speaker: Default::default(),
            },
            history: FactHistory::default(),
        })
    }

    #[test]
    fn names_come_from_the_users_own_facts_that_name_someone() {
        let facts = CurrentFacts::of(vec![
            fact(
                "mark",
                "Brother Rob is a firefighter",
                Some("brother:rob:role"),
            ),
            fact("mark", "Has a dog named Biscuit", None),
            fact("mark", "Wife is named Ana", Some("partner")),
            fact("mark", "Has an older sister named Leela", None),
            // Subjects that name no one.
            fact("mark", "Brother lives in Leeds", Some("brother:home")),
            fact("mark", "Favorite band is Low", Some("favorite:band")),
            fact("mark", "Boss Sue is strict", Some("boss:sue:role:x")),
            // Another user's, though shared.
            fact("ada", "Has a brother named Tom", None),
        ]);
        let mut names = named_in(&facts, "mark");
        names.sort();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            names,
            [
                pair("brother", "rob"),
                pair("dog", "Biscuit"),
                pair("partner", "Ana"),
                pair("sister", "Leela"),
                pair("wife", "Ana"),
            ]
        );
    }
}
