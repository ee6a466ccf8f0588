//! Stored responses in SQLite: written once, read and deleted by id within their scope.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::response_state::StoredResponse;

impl SqliteStore {
    /// Stores a response (the same id again in the same scope replaces it).
    pub async fn put_response(&self, stored: StoredResponse) -> Result<(), StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            tx.execute(
                "INSERT OR REPLACE INTO response_state (id, scope, created_ms, input, response)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    stored.id,
                    stored.scope,
                    stored.created_ms,
                    stored.input,
                    stored.response
                ],
            )?;
            for (id, item) in &stored.items {
                tx.execute(
                    "INSERT OR REPLACE INTO response_items (scope, id, response_id, created_ms, item)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![stored.scope, id, stored.id, stored.created_ms, item],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The response `id` if `scope` stored it.
    pub async fn response(
        &self,
        id: &str,
        scope: &str,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let (id, scope) = (id.to_owned(), scope.to_owned());
        self.with(move |connection| {
            let found = connection
                .query_row(
                    "SELECT id, scope, created_ms, input, response FROM response_state
                     WHERE id = ?1 AND scope = ?2",
                    params![id, scope],
                    |row| {
                        Ok(StoredResponse {
                            id: row.get(0)?,
                            scope: row.get(1)?,
                            created_ms: row.get(2)?,
                            input: row.get(3)?,
                            response: row.get(4)?,
                            items: Vec::new(),
                        })
                    },
                )
                .optional()?;
            Ok(found)
        })
        .await
    }

    /// Deletes the response `id` of `scope`; false when there was none.
    pub async fn delete_response(&self, id: &str, scope: &str) -> Result<bool, StoreError> {
        let (id, scope) = (id.to_owned(), scope.to_owned());
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let deleted = tx.execute(
                "DELETE FROM response_state WHERE id = ?1 AND scope = ?2",
                params![id, scope],
            )?;
            tx.execute(
                "DELETE FROM response_items WHERE response_id = ?1 AND scope = ?2",
                params![id, scope],
            )?;
            tx.commit()?;
            Ok(deleted > 0)
        })
        .await
    }

    /// The stored output item `id` of `scope`, as JSON text.
    pub async fn response_item(&self, id: &str, scope: &str) -> Result<Option<String>, StoreError> {
        let (id, scope) = (id.to_owned(), scope.to_owned());
        self.with(move |connection| {
            Ok(connection
                .query_row(
                    "SELECT item FROM response_items WHERE scope = ?1 AND id = ?2",
                    params![scope, id],
                    |row| row.get(0),
                )
                .optional()?)
        })
        .await
    }

    /// Deletes responses (and their items) stored before `before_ms` (the log's retention).
    pub async fn purge_responses(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let purged = tx.execute(
                "DELETE FROM response_state WHERE created_ms < ?1",
                params![before_ms],
            )?;
            tx.execute(
                "DELETE FROM response_items WHERE created_ms < ?1",
                params![before_ms],
            )?;
            tx.commit()?;
            Ok(purged)
        })
        .await
    }
}
