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
            items: vec![(format!("fc_{id}"), format!("{{\"id\":\"fc_{id}\"}}"))],
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
        // Items are read by id, not with their response.
        let mut found = store.response("resp_a", "key1").await.unwrap().unwrap();
        found.items = stored("resp_a", "key1", 1_000).items;
        assert_eq!(found, stored("resp_a", "key1", 1_000));
        assert_eq!(
            store.response_item("fc_resp_a", "key1").await.unwrap(),
            Some("{\"id\":\"fc_resp_a\"}".into())
        );
        assert_eq!(
            store.response_item("fc_resp_a", "key2").await.unwrap(),
            None
        );
        assert_eq!(store.response("resp_a", "key2").await.unwrap(), None);
        assert!(!store.delete_response("resp_a", "key2").await.unwrap());
        assert_eq!(store.purge_responses(2_000).await.unwrap(), 1);
        assert_eq!(store.response("resp_a", "key1").await.unwrap(), None);
        assert_eq!(
            store.response_item("fc_resp_a", "key1").await.unwrap(),
            None
        );
        assert!(store.delete_response("resp_b", "key1").await.unwrap());
        assert_eq!(
            store.response_item("fc_resp_b", "key1").await.unwrap(),
            None
        );
        assert_eq!(store.response("resp_b", "key1").await.unwrap(), None);
        assert_eq!(
            store.response("resp_b", "key2").await.unwrap(),
            Some(StoredResponse {
                items: Vec::new(),
                ..stored("resp_b", "key2", 6_000)
            })
        );
    }
}
