//! The summary hierarchy through the runtime: running rollups, topics and
//! archival search.

use chrono::{DateTime, Utc};
use recall_actors::embed::StoredVector;
use recall_actors::model::{validate_id, InputError, Topic};
use recall_actors::rollup::{RollupMsg, RollupReport};
use recall_actors::search::{AgentIndex, Ranking, SearchHit, SearchQuery};
use recall_actors::store::{read_blocking, StoreError, StoreMsg};
use serde::Serialize;
use std::sync::Arc;
use uuid::Uuid;

use super::{ask, listing_limit, RecallError, Runtime};

/// Rollups of many agents take longer than a plain call.
pub(super) const ROLLUP_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// A topic as shown to callers: its label, members and topic summary.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct TopicView {
    pub topic_id: Uuid,
    pub agent_id: String,
    pub user_id: String,
    pub label: String,
    pub keywords: Vec<String>,
    pub member_count: usize,
    /// The member session summaries (the topic summary's
    /// `source_summary_ids`).
    pub source_summary_ids: Vec<Uuid>,
    /// The topic summary ("All job search conversations"), if made yet.
    pub summary: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_active: DateTime<Utc>,
}

impl Runtime {
    fn rollup_actor(&self) -> Result<&ractor::ActorRef<RollupMsg>, RecallError> {
        self.inner.rollup.as_ref().ok_or(RecallError::RollupsOff)
    }

    /// Rolls every agent up to its last complete day and week now (whatever
    /// the configured hour) and takes in new summaries (topics, vectors,
    /// late rollups). What the timers do, at once.
    pub async fn run_rollups(&self) -> Result<RollupReport, RecallError> {
        let r = self.rollup_actor()?;
        Ok(ask(r, "rollup", ROLLUP_TIMEOUT_MS, RollupMsg::RunNow).await??)
    }

    /// Takes in the summaries and facts stored since the last time (topics,
    /// vectors, late rollups) and returns when done.
    pub async fn process_new_summaries(&self) -> Result<RollupReport, RecallError> {
        let r = self.rollup_actor()?;
        Ok(ask(r, "rollup", ROLLUP_TIMEOUT_MS, RollupMsg::DrainInbox).await??)
    }

    /// An agent's topics, one user's or all, most recently active first.
    pub async fn topics(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
    ) -> Result<Vec<TopicView>, RecallError> {
        self.topics_up_to(agent_id, user_id, usize::MAX).await
    }

    /// [`Runtime::topics`], at most `limit` (1 to
    /// [`super::LIST_MAX_LIMIT`]; [`super::LIST_DEFAULT_LIMIT`] when
    /// `None`). The topic records are read
    /// whole (an agent's, or one user's: they have no order by activity
    /// to read in); their summaries only for the topics returned.
    pub async fn list_topics(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<TopicView>, RecallError> {
        let limit = listing_limit(limit)?;
        self.topics_up_to(agent_id, user_id, limit).await
    }

    async fn topics_up_to(
        &self,
        agent_id: &str,
        user_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TopicView>, RecallError> {
        validate_id("agent_id", agent_id)?;
        if let Some(u) = user_id {
            validate_id("user_id", u)?;
        }
        let mut topics: Vec<Topic> = self
            .store(|reply| StoreMsg::Topics {
                agent_id: agent_id.to_string(),
                user_id: user_id.map(str::to_string),
                reply,
            })
            .await?;
        topics.sort_by_key(|t| std::cmp::Reverse((t.last_active, t.topic_id)));
        topics.truncate(limit);
        let mut out = Vec::with_capacity(topics.len());
        for t in topics {
            let summary = self.summary(t.topic_id).await?.map(|s| s.summary_text);
            out.push(TopicView {
                topic_id: t.topic_id,
                agent_id: t.agent_id,
                user_id: t.user_id,
                label: t.label,
                keywords: t.keywords.into_iter().map(|(w, _)| w).collect(),
                member_count: t.member_ids.len(),
                source_summary_ids: t.member_ids,
                summary,
                created_at: t.created_at,
                updated_at: t.updated_at,
                last_active: t.last_active,
            });
        }
        Ok(out)
    }

    /// Searches an agent's summaries (every type, current versions) and
    /// facts: BM25 over their words blended with embedding similarity.
    /// With `user_id`, only what that user may see. The first search of an
    /// agent builds its index from the store.
    pub async fn search(
        &self,
        agent_id: &str,
        mut query: SearchQuery,
    ) -> Result<Vec<SearchHit>, RecallError> {
        validate_id("agent_id", agent_id)?;
        if let Some(u) = &query.user_id {
            validate_id("user_id", u)?;
        }
        let settings = &self.inner.settings.search;
        if query.text.trim().is_empty() {
            return Err(InputError::Empty { field: "q" }.into());
        }
        if query.text.len() > 4096 {
            return Err(InputError::TooLong {
                field: "q",
                len: query.text.len(),
                max: 4096,
            }
            .into());
        }
        if query.limit == 0 {
            query.limit = settings.default_limit;
        }
        if query.limit > settings.max_limit {
            return Err(InputError::Invalid {
                field: "limit",
                reason: format!("at most {}", settings.max_limit),
            }
            .into());
        }
        // (`since` after `until` is an empty window: nothing is found in it.)
        if let (Some(s), Some(u)) = (query.since, query.until) {
            if s > u {
                return Ok(Vec::new());
            }
        }
        let index = self.agent_index(agent_id).await?;
        let embed = &self.inner.embed;
        let vector = embed
            .embed(vec![query.text.clone()])
            .await?
            .pop()
            .map(|values| StoredVector {
                embedder: embed.name().to_string(),
                values,
            });
        let ranking = Ranking {
            keyword_weight: settings.keyword_weight,
            candidates: settings.candidates,
            max_term_share: 1.0,
            recency: None,
            // A model's vectors find what shares no word with the query.
            dense: if embed.captures_meaning() {
                settings.candidates
            } else {
                0
            },
            exhaustive: false,
            related: None,
            distinct: false,
            changes: recall_actors::text::Subjects::NONE,
            expects: recall_actors::text::Answers::NONE,
            keyword: recall_actors::search::KeywordTuning::DEFAULT,
        };
        let mut hits = {
            let ix = index.read().unwrap_or_else(|p| p.into_inner());
            ix.search(&query, vector.as_ref(), ranking)
        };
        metrics::counter!("recall_searches_total").increment(1);
        // A turn's words are in the store, not the index.
        if hits.iter().any(|h| h.turn.is_some()) {
            let trees = self.reader()?;
            let handle = tokio::runtime::Handle::current();
            hits = tokio::task::spawn_blocking(move || {
                for h in hits.iter_mut() {
                    if let Some(r) = h.turn {
                        if let Some(t) = handle.block_on(trees.turn(r.session_id, r.seq))? {
                            h.text = format!(
                                "[TURN]\nAt: {}\n\nuser: {}\nagent: {}\n[/TURN]",
                                recall_actors::model::isoformat(&t.timestamp),
                                t.user_message,
                                t.agent_response
                            );
                        }
                    }
                }
                Ok::<_, StoreError>(hits)
            })
            .await
            .map_err(StoreError::ReadAborted)??;
        }
        Ok(hits)
    }

    /// The agent's search index, built off the Store actor first if it is
    /// not (a build waits for nothing but the store's reads; callers asking
    /// meanwhile share it).
    pub(super) async fn agent_index(
        &self,
        agent_id: &str,
    ) -> Result<Arc<std::sync::RwLock<AgentIndex>>, RecallError> {
        let trees = self.reader()?;
        let agent = agent_id.to_string();
        let inline = self.inner.search.inline();
        let zone = self.inner.settings.rollup.time_zone_of(agent_id);
        let handle = tokio::runtime::Handle::current();
        Ok(self
            .inner
            .search
            // (On the blocking pool.)
            .ensure(agent_id, move || {
                handle.block_on(trees.build_search_index(&agent, inline.as_deref(), zone))
            })
            .await?)
    }

    /// Builds every agent's index in the background, one after another,
    /// so the first context read of a call after a start finds it built
    /// (a read that comes sooner waits for the same build).
    pub(super) fn warm_indexes(&self) {
        let rt = self.clone();
        tokio::spawn(async move {
            let Ok(trees) = rt.reader() else {
                return;
            };
            let agents = match read_blocking(trees, |b| Box::pin(b.agents())).await {
                Ok(agents) => agents,
                _ => return,
            };
            for (agent, _) in agents {
                if let Err(err) = rt.agent_index(&agent).await {
                    // (Also how a shutdown ends the warm-up.)
                    tracing::debug!(agent_id = %agent, error = %err, "search index not built");
                    return;
                }
            }
        });
    }

    /// The owner of every item in the agent's search index (building it
    /// first if it is not): what checks that a forget left nothing of a
    /// user in it scan.
    #[doc(hidden)]
    pub async fn indexed_items(&self, agent_id: &str) -> Result<Vec<(Uuid, String)>, RecallError> {
        validate_id("agent_id", agent_id)?;
        let index = self.agent_index(agent_id).await?;
        let ix = index.read().unwrap_or_else(|p| p.into_inner());
        Ok(ix.owners().map(|(id, u)| (id, u.to_string())).collect())
    }

    /// Forgets every built search index; the next search of each agent
    /// rebuilds its index from the store.
    pub fn drop_search_indexes(&self) {
        self.inner.search.clear();
    }

    /// Agents whose search index is built.
    pub fn search_indexes_built(&self) -> usize {
        self.inner.search.built()
    }
}
