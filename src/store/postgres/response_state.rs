//! Stored responses in PostgreSQL: written once, read and deleted by id within their scope.

use super::PgStore;
use crate::store::StoreError;
use crate::store::response_state::StoredResponse;

impl PgStore {
    /// Stores a response (the same id again in the same scope replaces it).
    pub async fn put_response(&self, stored: StoredResponse) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO response_state (id, scope, created_ms, input, response)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (scope, id) DO UPDATE SET created_ms = EXCLUDED.created_ms,
                 input = EXCLUDED.input, response = EXCLUDED.response",
            &[
                &stored.id,
                &stored.scope,
                &stored.created_ms,
                &stored.input,
                &stored.response,
            ],
        )
        .await?;
        for (id, item) in &stored.items {
            tx.execute(
                "INSERT INTO response_items (scope, id, response_id, created_ms, item)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (scope, id) DO UPDATE SET response_id = EXCLUDED.response_id,
                     created_ms = EXCLUDED.created_ms, item = EXCLUDED.item",
                &[&stored.scope, id, &stored.id, &stored.created_ms, item],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The response `id` if `scope` stored it.
    pub async fn response(
        &self,
        id: &str,
        scope: &str,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT id, scope, created_ms, input, response FROM response_state
                 WHERE id = $1 AND scope = $2",
                &[&id, &scope],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(StoredResponse {
            id: row.try_get(0)?,
            scope: row.try_get(1)?,
            created_ms: row.try_get(2)?,
            input: row.try_get(3)?,
            response: row.try_get(4)?,
            items: Vec::new(),
        }))
    }

    /// Deletes the response `id` of `scope`; false when there was none.
    pub async fn delete_response(&self, id: &str, scope: &str) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let deleted = tx
            .execute(
                "DELETE FROM response_state WHERE id = $1 AND scope = $2",
                &[&id, &scope],
            )
            .await?;
        tx.execute(
            "DELETE FROM response_items WHERE response_id = $1 AND scope = $2",
            &[&id, &scope],
        )
        .await?;
        tx.commit().await?;
        Ok(deleted > 0)
    }

    /// The stored output item `id` of `scope`, as JSON text.
    pub async fn response_item(&self, id: &str, scope: &str) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT item FROM response_items WHERE scope = $1 AND id = $2",
                &[&scope, &id],
            )
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    /// Deletes responses (and their items) stored before `before_ms` (the log's retention).
    pub async fn purge_responses(&self, before_ms: i64) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let purged = tx
            .execute(
                "DELETE FROM response_state WHERE created_ms < $1",
                &[&before_ms],
            )
            .await?;
        tx.execute(
            "DELETE FROM response_items WHERE created_ms < $1",
            &[&before_ms],
        )
        .await?;
        tx.commit().await?;
        Ok(purged as usize)
    }
}
