//! Stored responses in SQLite: written once, read and deleted by id within their scope.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::response_state::StoredResponse;

impl SqliteStore {
    /// Stores a response (the same id again in the same scope replaces it).
    pub async fn put_response(&self, stored: StoredResponse) -> Result<(), StoreError> {
        self.with(move |connection| {
            connection.execute(
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
            let deleted = connection.execute(
                "DELETE FROM response_state WHERE id = ?1 AND scope = ?2",
                params![id, scope],
            )?;
            Ok(deleted > 0)
        })
        .await
    }

    /// Deletes responses stored before `before_ms` (the log's retention).
    pub async fn purge_responses(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.with(move |connection| {
            Ok(connection.execute(
                "DELETE FROM response_state WHERE created_ms < ?1",
                params![before_ms],
            )?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: &str, scope: &str, created_ms: i64) -> StoredResponse {
        StoredResponse {
            id: id.into(),
            scope: scope.into(),
            created_ms,
            input: "[]".into(),
            response: "{}".into(),
        }
    }

    #[tokio::test]
    async fn responses_are_found_only_in_their_scope_and_purged_by_age() {
        let store = SqliteStore::open_memory().await.unwrap();
        store
            .put_response(stored("resp_a", "key1", 1_000))
            .await
            .unwrap();
        store
            .put_response(stored("resp_b", "key1", 5_000))
            .await
            .unwrap();
        // The same id in another scope is another response, and overwrites nothing.
        store
            .put_response(stored("resp_b", "key2", 6_000))
            .await
            .unwrap();
        assert_eq!(
            store.response("resp_a", "key1").await.unwrap(),
            Some(stored("resp_a", "key1", 1_000))
        );
        assert_eq!(store.response("resp_a", "key2").await.unwrap(), None);
        assert!(!store.delete_response("resp_a", "key2").await.unwrap());
        assert_eq!(store.purge_responses(2_000).await.unwrap(), 1);
        assert_eq!(store.response("resp_a", "key1").await.unwrap(), None);
        assert!(store.delete_response("resp_b", "key1").await.unwrap());
        assert_eq!(store.response("resp_b", "key1").await.unwrap(), None);
        assert_eq!(
            store.response("resp_b", "key2").await.unwrap(),
            Some(stored("resp_b", "key2", 6_000))
        );
    }
}
