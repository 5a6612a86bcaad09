//! The reads a context is assembled from, in PostgreSQL: the asked parts,
//! read at once over as many connections.

use std::sync::Arc;

use super::*;

impl PgBackend {
    /// A user's current summaries with an agent, of every type, oldest
    /// first (by period end, creation, id).
    async fn user_summaries(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<Arc<ConversationSummary>>, StoreError> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT summary_id, body::text FROM summaries
             WHERE agent_id = $1 AND user_id = $2 AND current",
        )
        .bind(agent_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<Arc<ConversationSummary>> = self
            .decode_all::<ConversationSummary, _>("summaries", rows)
            .into_iter()
            .filter(|s| s.is_current())
            .map(Arc::new)
            .collect();
        out.sort_by(|a, b| {
            (a.period_end, a.created_at, a.summary_id).cmp(&(
                b.period_end,
                b.created_at,
                b.summary_id,
            ))
        });
        Ok(out)
    }

    async fn ended_sessions(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<Arc<SessionRecord>>, StoreError> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT session_id, body::text FROM sessions
             WHERE agent_id = $1 AND user_id = $2 AND ended_at IS NOT NULL",
        )
        .bind(agent_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<Arc<SessionRecord>> = self
            .decode_all::<SessionRecord, _>("sessions", rows)
            .into_iter()
            .filter(|s| s.ended_at.is_some())
            .map(Arc::new)
            .collect();
        out.sort_by_key(|s| (s.ended_at, s.session_id));
        Ok(out)
    }

    async fn stored_blocks(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<StoredBlocks, StoreError> {
        let (agent_blocks, user_blocks, agent) = futures::try_join!(
            self.blocks(agent_id),
            self.user_blocks(agent_id, user_id),
            self.agent(agent_id)
        )?;
        Ok(StoredBlocks {
            agent_blocks,
            user_blocks,
            persistent_context: agent.persistent_context,
        })
    }
}

/// A part read if asked.
async fn part<T>(
    asked: bool,
    read: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<Option<T>, StoreError> {
    if asked {
        read.await.map(Some)
    } else {
        Ok(None)
    }
}

#[async_trait::async_trait]
impl SourceStore for PgBackend {
    async fn source_parts(
        &self,
        agent_id: &str,
        user_id: &str,
        parts: Parts,
    ) -> Result<SourceParts, StoreError> {
        self.write_turns().await?;
        let (summaries, ended, facts, blocks, topics) = futures::try_join!(
            part(
                parts.contains(Parts::SUMMARIES),
                self.user_summaries(agent_id, user_id)
            ),
            part(
                parts.contains(Parts::SESSIONS),
                self.ended_sessions(agent_id, user_id)
            ),
            part(parts.contains(Parts::FACTS), async {
                let visible = self.visible_facts(agent_id, user_id).await?;
                Ok(CurrentFacts::of(
                    visible.into_iter().map(Arc::new).collect(),
                ))
            }),
            part(
                parts.contains(Parts::BLOCKS),
                self.stored_blocks(agent_id, user_id)
            ),
            part(
                parts.contains(Parts::TOPICS),
                self.topics(agent_id, Some(user_id))
            ),
        )?;
        Ok(SourceParts {
            blocks,
            facts,
            summaries,
            ended,
            topics,
        })
    }
}
