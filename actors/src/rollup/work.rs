//! The work of a rollup run, outside the actor: a rollup itself, late
//! summaries, topics and vectors, each step a call to the Store, the
//! `Reflect` or the `Embed` port. The daily and weekly rollups of many
//! agents at once are `pass`'s.

use super::*;
use crate::store::NewRollup;

/// What a rollup run needs, shared by agents rolled up at once.
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) store: ActorRef<StoreMsg>,
    pub(super) reader: crate::store::Reader,
    pub(super) reflect: Arc<dyn Reflect>,
    pub(super) embed: Arc<dyn Embed>,
    pub(super) prompts: Arc<RollupPrompts>,
    pub(super) settings: Arc<RollupSettings>,
    pub(super) attempt_timeout: Duration,
    /// What bounds the agents being rolled up at once
    /// (`rollup.max_concurrent`), across the passes under way.
    pub(super) slots: Arc<tokio::sync::Semaphore>,
}

impl Ctx {
    pub(super) fn tz(&self, agent_id: &str) -> Tz {
        self.settings.time_zone_of(agent_id)
    }

    pub(super) async fn summarize(&self, request: ReflectRequest) -> Result<String, RollupError> {
        match tokio::time::timeout(self.attempt_timeout, self.reflect.reflect(request)).await {
            Ok(res) => Ok(res?),
            Err(_) => Err(ReflectError::Timeout(self.attempt_timeout).into()),
        }
    }

    pub(super) async fn vectors(
        &self,
        texts: Vec<String>,
    ) -> Result<Vec<StoredVector>, RollupError> {
        let n = texts.len();
        let out = self.embed.embed(texts).await?;
        if out.len() != n {
            return Err(
                EmbedError::Failed(format!("asked for {n} vectors, got {}", out.len())).into(),
            );
        }
        Ok(out
            .into_iter()
            .map(|values| StoredVector {
                embedder: self.embed.name().to_string(),
                values,
            })
            .collect())
    }

    /// Gives the turns of a summary's call vectors of what both sides said
    /// ([`crate::model::ConversationTurn::vector_text`]), for retrieval by meaning. An embedding failure leaves them to
    /// keyword search (logged); a store failure is an error.
    pub(super) async fn embed_turns(&self, s: &ConversationSummary) -> Result<u64, RollupError> {
        if self.embed.embeds_inline() {
            // The search index makes them as it indexes the turns.
            return Ok(0);
        }
        // A session summary's id is its session's, unless a replay made a
        // new version: its source range names the session then.
        let session_id = s.source_range.map_or(s.summary_id, |r| r.session_id);
        let turns = store_call!(self.store, |reply| StoreMsg::GetNumberedTurns(
            session_id, reply
        ))?;
        let turns: Vec<(u32, String)> = turns
            .into_iter()
            .filter_map(|(seq, t)| Some((seq, t.vector_text()?)))
            .collect();
        if turns.is_empty() {
            return Ok(0);
        }
        let texts = turns.iter().map(|(_, t)| t.clone()).collect();
        let vectors = match self.vectors(texts).await {
            Ok(v) => v,
            Err(err) => {
                warn!(%session_id, error = %err, "no vectors for the call's turns; they are found by their words only");
                return Ok(0);
            }
        };
        let items: Vec<(u32, StoredVector)> =
            turns.into_iter().map(|(seq, _)| seq).zip(vectors).collect();
        let n = items.len() as u64;
        store_call!(self.store, |reply| StoreMsg::PutTurnVectors {
            agent_id: s.agent_id.clone(),
            session_id,
            items,
            reply
        })?;
        Ok(n)
    }

    pub(super) async fn vector(&self, text: String) -> Option<StoredVector> {
        match self.vectors(vec![text]).await {
            Ok(mut v) => v.pop(),
            Err(err) => {
                warn!(error = %err, "no vector for a rollup; it is found by its words only");
                None
            }
        }
    }

    /// Current summaries of `kind` of an agent whose period starts on or
    /// after `from`.
    pub(super) async fn summaries_from(
        &self,
        agent_id: &str,
        kind: SummaryType,
        from: DateTime<Utc>,
    ) -> Result<Vec<ConversationSummary>, RollupError> {
        let all = store_call!(self.store, |reply| StoreMsg::ListSummaries {
            agent_id: agent_id.to_string(),
            kind,
            since: Some(from),
            reply
        })?;
        Ok(all
            .into_iter()
            .filter(|s| s.is_current() && s.period_start >= from)
            .collect())
    }

    /// Makes (and stores) the rollup of `level` for `user` over the period
    /// starting on `period` from `members`, superseding `existing` if its
    /// sources differ. Returns whether something new was stored.
    pub(super) async fn make_rollup(
        &self,
        target: Target<'_>,
        members: &[&ConversationSummary],
        existing: Option<&ConversationSummary>,
        now: DateTime<Utc>,
    ) -> Result<bool, RollupError> {
        let Some(NewRollup {
            summary,
            supersedes,
            ..
        }) = self.prepare_rollup(target, members, existing, now).await?
        else {
            return Ok(false);
        };
        let vector = self.vector(embed::summary_text(&summary)).await;
        let stored = store_call!(self.store, |reply| StoreMsg::PutRollup {
            summary: Box::new(summary),
            supersedes,
            vector,
            reply
        })?;
        Ok(stored)
    }

    /// The rollup of `level` for `user` over the period starting on
    /// `period` from `members`, superseding `existing`, without its vector;
    /// `None` when `existing` has the same sources (or there are none).
    pub(super) async fn prepare_rollup(
        &self,
        target: Target<'_>,
        members: &[&ConversationSummary],
        existing: Option<&ConversationSummary>,
        now: DateTime<Utc>,
    ) -> Result<Option<NewRollup>, RollupError> {
        let Target {
            agent_id,
            user_id,
            level,
            period,
        } = target;
        let ids: Vec<Uuid> = members.iter().map(|m| m.summary_id).collect();
        let id = rollup_id(agent_id, user_id, level, period, &ids);
        if existing.is_some_and(|e| e.summary_id == id) || members.is_empty() {
            return Ok(None);
        }
        let tz = self.tz(agent_id);
        let (start, end) = period::bounds(&tz, level, period);
        let label = match level {
            Level::Daily => period.format("%A %Y-%m-%d").to_string(),
            Level::Weekly => format!("the week of {period}"),
        };
        let listed = listing(members);
        let vars = [
            agent_id.to_string(),
            user_id.to_string(),
            label,
            isoformat(&start),
            isoformat(&end),
            members.len().to_string(),
            listed.clone(),
            self.settings.combine_max_chars.to_string(),
        ];
        let values: Vec<&str> = vars.iter().map(String::as_str).collect();
        let template = match level {
            Level::Daily => &self.prompts.daily,
            Level::Weekly => &self.prompts.weekly,
        };
        let turn_count: u32 = members.iter().map(|m| m.turn_count).sum();
        let request = ReflectRequest {
            system: self.prompts.system.clone(),
            prompt: template.render(&values),
            session: period_record(id, agent_id, user_id, (start, end), turn_count),
            turns: Vec::new(),
            sources: members
                .iter()
                .map(|m| capped(&m.summary_text, members.len()))
                .collect(),
            max_chars: Some(self.settings.combine_max_chars),
        };
        let raw = self.summarize(request).await?;
        let mut r = parse_reflection(&raw, &listed);
        r.summary = within(&r.summary, self.settings.combine_max_chars);
        let summary = ConversationSummary {
            summary_id: id,
            summary_type: summary_type(level),
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            period_start: start,
            period_end: end,
            summary_text: r.summary,
            topics: r.topics,
            key_entities: r.entities,
            emotional_tone: r.emotional_tone,
            source_summary_ids: ids,
            source_range: None,
            turn_count,
            created_at: now,
            fallback: r.fallback,
            supersedes: existing.map(|e| e.summary_id),
            superseded_by: None,
            derivation: None,
        };
        Ok(Some(NewRollup {
            supersedes: summary.supersedes,
            summary,
            vector: None,
        }))
    }

    /// A late session summary: re-make its day's rollup (and its week's)
    /// if that period was already rolled up.
    pub(super) async fn revise_for(
        &self,
        s: &ConversationSummary,
        now: DateTime<Utc>,
        report: &mut RollupReport,
    ) -> Result<(), RollupError> {
        let tz = self.tz(&s.agent_id);
        let week_start = self.settings.week_start();
        let day = period::local_date(&tz, s.period_start);
        for level in [Level::Daily, Level::Weekly] {
            let p = period::period_of(level, day, week_start);
            let cursor = store_call!(self.store, |reply| StoreMsg::RollupCursor {
                agent_id: s.agent_id.clone(),
                level,
                reply
            })?;
            if cursor.is_none_or(|c| c < p) {
                return Ok(());
            }
            let (start, end) = period::bounds(&tz, level, p);
            let mut members: Vec<ConversationSummary> = self
                .summaries_from(&s.agent_id, source_type(level), start)
                .await?
                .into_iter()
                .filter(|m| m.user_id == s.user_id && m.period_start < end)
                .collect();
            members.sort_by_key(|m| (m.period_start, m.summary_id));
            let existing = self
                .summaries_from(&s.agent_id, summary_type(level), start)
                .await?
                .into_iter()
                .find(|e| e.user_id == s.user_id && e.period_start == start);
            let refs: Vec<&ConversationSummary> = members.iter().collect();
            if self
                .make_rollup(
                    Target {
                        agent_id: &s.agent_id,
                        user_id: &s.user_id,
                        level,
                        period: p,
                    },
                    &refs,
                    existing.as_ref(),
                    now,
                )
                .await?
            {
                report.revised += 1;
                info!(agent_id = %s.agent_id, user_id = %s.user_id, level = level.as_str(), %p, "rollup revised for a late summary");
            }
        }
        Ok(())
    }

    /// Adds a session summary to its user's topics and re-makes the topic
    /// summary it joined.
    pub(super) async fn assign_topic(
        &self,
        s: &ConversationSummary,
        vector: &StoredVector,
        topics: &mut Vec<Topic>,
        now: DateTime<Utc>,
    ) -> Result<bool, RollupError> {
        if topics.iter().any(|t| t.member_ids.contains(&s.summary_id)) {
            return Ok(false);
        }
        let threshold = self.settings.topic_threshold_for(self.embed.closeness());
        // A replayed session's new version takes its old version's place in
        // the old version's topic: the old one's keywords and turns leave it
        // (its centroid keeps the old vector: the two are close, and the sum
        // is only compared by direction).
        let mut replaced: Option<(usize, ConversationSummary)> = None;
        if let Some(old_id) = s.supersedes {
            if let Some(i) = topics.iter().position(|t| t.member_ids.contains(&old_id)) {
                if let Some(old) =
                    store_call!(self.store, |reply| StoreMsg::GetSummary(old_id, reply))?
                {
                    replaced = Some((i, old));
                }
            }
        }
        let (mut topic, previous) = match replaced
            .as_ref()
            .map(|(i, _)| *i)
            .or_else(|| topics::closest(topics, &vector.embedder, &vector.values, threshold))
        {
            Some(i) => {
                let mut t = topics[i].clone();
                if let Some((_, old)) = &replaced {
                    topics::leave(&mut t, old);
                }
                topics::join(&mut t, s, &vector.values, now);
                let prev =
                    store_call!(self.store, |reply| StoreMsg::GetSummary(t.topic_id, reply))?;
                (t, prev)
            }
            None => (
                topics::start(s, &vector.embedder, &vector.values, now),
                None,
            ),
        };
        // The newest members (this one among them) re-make the summary.
        let keep = self.settings.topic_sources;
        let mut members: Vec<ConversationSummary> = Vec::new();
        for id in topic.member_ids.iter().rev().take(keep) {
            if *id == s.summary_id {
                members.push(s.clone());
            } else if let Some(m) =
                store_call!(self.store, |reply| StoreMsg::GetSummary(*id, reply))?
            {
                members.push(m);
            }
        }
        members.reverse();
        // After a swap the old text speaks of the old version: the summary
        // is re-made from the members alone.
        let prev_text = match (&previous, &replaced) {
            (Some(p), None) => p.summary_text.clone(),
            _ => String::new(),
        };
        let refs: Vec<&ConversationSummary> = members.iter().collect();
        let listed = listing(&refs);
        let vars = [
            topic.agent_id.clone(),
            topic.user_id.clone(),
            topic.label.clone(),
            prev_text.clone(),
            listed.clone(),
            self.settings.combine_max_chars.to_string(),
        ];
        let values: Vec<&str> = vars.iter().map(String::as_str).collect();
        let mut sources: Vec<String> = Vec::new();
        if !prev_text.is_empty() {
            sources.push(prev_text);
        }
        sources.extend(members.iter().map(|m| m.summary_text.clone()));
        let start = previous
            .as_ref()
            .map_or(s.period_start, |p| p.period_start.min(s.period_start));
        let end = previous
            .as_ref()
            .map_or(s.period_end, |p| p.period_end.max(s.period_end));
        let turn_count = (previous.as_ref().map_or(0, |p| p.turn_count) + s.turn_count)
            .saturating_sub(replaced.as_ref().map_or(0, |(_, old)| old.turn_count));
        let request = ReflectRequest {
            system: self.prompts.system.clone(),
            prompt: self.prompts.topic.render(&values),
            session: period_record(
                topic.topic_id,
                &topic.agent_id,
                &topic.user_id,
                (start, end),
                turn_count,
            ),
            turns: Vec::new(),
            sources,
            max_chars: Some(self.settings.combine_max_chars),
        };
        let raw = self.summarize(request).await?;
        let mut r = parse_reflection(&raw, &listed);
        r.summary = within(&r.summary, self.settings.combine_max_chars);
        let mut keywords: Vec<String> = topic
            .keywords
            .iter()
            .map(|(w, _)| w.clone())
            .take(8)
            .collect();
        if keywords.is_empty() {
            keywords = r.topics.clone();
        }
        let summary = ConversationSummary {
            summary_id: topic.topic_id,
            summary_type: SummaryType::Topic,
            agent_id: topic.agent_id.clone(),
            user_id: topic.user_id.clone(),
            period_start: start,
            period_end: end,
            summary_text: r.summary,
            topics: keywords,
            key_entities: r.entities,
            emotional_tone: r.emotional_tone,
            source_summary_ids: topic.member_ids.clone(),
            source_range: None,
            turn_count,
            created_at: previous.as_ref().map_or(now, |p| p.created_at),
            fallback: r.fallback,
            supersedes: None,
            superseded_by: None,
            derivation: None,
        };
        topic.updated_at = now;
        let vector = self.vector(embed::summary_text(&summary)).await;
        let t = topic.clone();
        store_call!(self.store, |reply| StoreMsg::PutTopic {
            topic: Box::new(t),
            summary: Box::new(summary),
            vector,
            reply
        })?;
        match topics.iter_mut().find(|x| x.topic_id == topic.topic_id) {
            Some(slot) => *slot = topic,
            None => topics.push(topic),
        }
        Ok(true)
    }

    /// Takes in the inbox: vectors, topics and late rollups for each new
    /// session summary, vectors for each new fact. An item leaves the
    /// inbox only once all of that is done.
    pub(super) async fn drain_inbox(
        &self,
        now: DateTime<Utc>,
        agents: &mut BTreeSet<String>,
    ) -> Result<RollupReport, RollupError> {
        let mut report = RollupReport::default();
        // Past what was read, so an item that keeps failing stays for the
        // next drain without holding up the ones after it.
        let mut after: Option<InboxKey> = None;
        loop {
            let entries: Vec<InboxEntry> = store_call!(self.store, |reply| StoreMsg::Inbox {
                after,
                limit: INBOX_BATCH,
                reply
            })?;
            let Some(last) = entries.last() else {
                return Ok(report);
            };
            after = Some(last.key);
            // Load the items; what is gone (deleted) just leaves the inbox.
            let mut items: Vec<(InboxEntry, Option<Item>)> = Vec::new();
            for e in entries {
                agents.insert(e.agent_id.clone());
                let item = match e.kind {
                    InboxItem::Summary => {
                        // A version replaced meanwhile (a replay) is not
                        // taken in: its successor is.
                        store_call!(self.store, |reply| StoreMsg::GetSummary(e.id, reply))?
                            .filter(ConversationSummary::is_current)
                            .map(|s| Item::Summary(Box::new(s)))
                    }
                    InboxItem::Fact => {
                        store_call!(self.store, |reply| StoreMsg::GetFact(e.id, reply))?
                            .map(|f| Item::Fact(f.fact.agent_id, f.fact.content))
                    }
                };
                items.push((e, item));
            }
            let texts: Vec<String> = items
                .iter()
                .filter_map(|(_, i)| i.as_ref().map(Item::text))
                .collect();
            let mut vectors = self.vectors(texts).await?.into_iter();
            let mut topic_cache: HashMap<(String, String), Vec<Topic>> = HashMap::new();
            let mut done = Vec::new();
            let mut by_agent: HashMap<String, Vec<(Uuid, StoredVector)>> = HashMap::new();
            for (entry, item) in items {
                let Some(item) = item else {
                    done.push(entry.key);
                    continue;
                };
                let Some(vector) = vectors.next() else {
                    break;
                };
                by_agent
                    .entry(item.agent().to_string())
                    .or_default()
                    .push((entry.id, vector.clone()));
                if let Item::Summary(s) = &item {
                    if s.summary_type == SummaryType::Session {
                        let key = (s.agent_id.clone(), s.user_id.clone());
                        if !topic_cache.contains_key(&key) {
                            let loaded = store_call!(self.store, |reply| StoreMsg::Topics {
                                agent_id: s.agent_id.clone(),
                                user_id: Some(s.user_id.clone()),
                                reply
                            })?;
                            topic_cache.insert(key.clone(), loaded);
                        }
                        let topics = topic_cache
                            .get_mut(&key)
                            .map(std::mem::take)
                            .unwrap_or_default();
                        let mut topics = topics;
                        let res = self.assign_topic(s, &vector, &mut topics, now).await;
                        topic_cache.insert(key, topics);
                        let res = match res {
                            Ok(updated) => {
                                report.topics_updated += updated as u64;
                                self.revise_for(s, now, &mut report).await
                            }
                            Err(e) => Err(e),
                        };
                        if let Err(err) = res {
                            report.failures += 1;
                            warn!(summary_id = %s.summary_id, error = %err, "taking in a summary failed; it stays in the inbox");
                            continue;
                        }
                        if self.embed.captures_meaning() {
                            report.turn_vectors += self.embed_turns(s).await?;
                        }
                    }
                }
                done.push(entry.key);
            }
            for (agent_id, items) in by_agent {
                report.vectors += items.len() as u64;
                store_call!(self.store, |reply| StoreMsg::PutVectors {
                    agent_id,
                    items,
                    reply
                })?;
            }
            store_call!(self.store, |reply| StoreMsg::InboxDone {
                keys: done,
                reply
            })?;
        }
    }
}

/// The rollup one call makes: a user's period of a level.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) agent_id: &'a str,
    pub(super) user_id: &'a str,
    pub(super) level: Level,
    pub(super) period: NaiveDate,
}

pub(super) enum Item {
    Summary(Box<ConversationSummary>),
    /// A fact's agent and content.
    Fact(String, String),
}

impl Item {
    pub(super) fn text(&self) -> String {
        match self {
            Item::Summary(s) => embed::summary_text(s),
            Item::Fact(_, content) => content.clone(),
        }
    }

    pub(super) fn agent(&self) -> &str {
        match self {
            Item::Summary(s) => &s.agent_id,
            Item::Fact(agent, _) => agent,
        }
    }
}
