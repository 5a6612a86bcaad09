//! The mirror's ledger (see [`crate::mirror`]).

use async_trait::async_trait;

use super::*;

#[async_trait]
impl MirrorStore for PgBackend {
    async fn mirrored(&self, remote: &str) -> Result<Vec<MirroredSummary>, StoreError> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT summary_id, body::text FROM mirror_ledger
             WHERE remote = $1 ORDER BY summary_id",
        )
        .bind(remote)
        .fetch_all(&self.pool)
        .await?;
        Ok(self.decode_all("mirror_ledger", rows))
    }

    async fn put_mirrored(&self, remote: &str, entry: &MirroredSummary) -> Result<(), StoreError> {
        let body = serde_json::to_string(entry)?;
        sqlx::query(
            "INSERT INTO mirror_ledger (remote, summary_id, body) VALUES ($1, $2, $3::json)
             ON CONFLICT (remote, summary_id) DO UPDATE SET body = EXCLUDED.body",
        )
        .bind(remote)
        .bind(entry.summary_id)
        .bind(body)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn drop_mirrored(&self, remote: &str, summary_id: Uuid) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM mirror_ledger WHERE remote = $1 AND summary_id = $2")
            .bind(remote)
            .bind(summary_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mirrored_remotes(&self) -> Result<Vec<(String, usize)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT remote, count(*) FROM mirror_ledger GROUP BY remote ORDER BY remote",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(r, n)| (r, usize::try_from(n).unwrap_or(0)))
            .collect())
    }
}
