//! Provider keys in SQLite: every version of every key, sealed, with its history.

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, bump_generation};
use crate::store::Sealed;
use crate::store::{KeyState, NewProviderKey, ProviderKeyRow, StoreError, now_ms};

impl SqliteStore {
    /// Stores a key; an existing id is rotated: a new version, the old one kept as history.
    pub async fn put_provider_key(&self, key: NewProviderKey) -> Result<i64, StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let now = now_ms();
            let latest: Option<i64> = tx.query_row(
                "SELECT MAX(version) FROM provider_keys WHERE provider = ?1 AND key_id = ?2",
                params![key.provider, key.key_id],
                |r| r.get(0),
            )?;
            tx.execute(
                "UPDATE provider_keys SET state = 'history', rotated_ms = ?3
                 WHERE provider = ?1 AND key_id = ?2 AND state = 'active'",
                params![key.provider, key.key_id, now],
            )?;
            let version = latest.unwrap_or(0) + 1;
            tx.execute(
                "INSERT INTO provider_keys (provider, key_id, version, nonce, ciphertext, weight,
                     created_ms, rotated_ms, expires_ms, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, 'active')",
                params![
                    key.provider,
                    key.key_id,
                    version,
                    key.sealed.nonce,
                    key.sealed.ciphertext,
                    key.weight,
                    now,
                    key.expires_ms
                ],
            )?;
            bump_generation(&tx)?;
            tx.commit()?;
            Ok(version)
        })
        .await
    }

    /// Every version of every key, oldest first.
    pub async fn provider_keys(&self) -> Result<Vec<ProviderKeyRow>, StoreError> {
        self.with(|connection| {
            let mut statement = connection.prepare(
                "SELECT provider, key_id, version, nonce, ciphertext, weight, created_ms,
                        rotated_ms, expires_ms, state
                 FROM provider_keys ORDER BY provider, key_id, version",
            )?;
            let rows = statement.query_map([], |row| {
                let state: String = row.get(9)?;
                Ok(ProviderKeyRow {
                    provider: row.get(0)?,
                    key_id: row.get(1)?,
                    version: row.get(2)?,
                    sealed: Sealed {
                        nonce: row.get(3)?,
                        ciphertext: row.get(4)?,
                    },
                    weight: row.get(5)?,
                    created_ms: row.get(6)?,
                    rotated_ms: row.get(7)?,
                    expires_ms: row.get(8)?,
                    state: match state.as_str() {
                        "active" => KeyState::Active,
                        "history" => KeyState::History,
                        _ => KeyState::Retired,
                    },
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Restores the version the last rotation replaced, if it was replaced within `window_ms`.
    /// The version rolled back from is retired, so a second rollback goes further back.
    pub async fn rollback_provider_key(
        &self,
        provider: &str,
        key_id: &str,
        window_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let (provider, key_id) = (provider.to_owned(), key_id.to_owned());
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let now = now_ms();
            let previous: Option<i64> = tx
                .query_row(
                    "SELECT MAX(version) FROM provider_keys
                     WHERE provider = ?1 AND key_id = ?2 AND state = 'history' AND rotated_ms >= ?3",
                    params![provider, key_id, now - window_ms],
                    |r| r.get(0),
                )
                .optional()?
                .flatten();
            let Some(previous) = previous else {
                return Ok(None);
            };
            tx.execute(
                "UPDATE provider_keys SET state = 'retired', rotated_ms = ?3
                 WHERE provider = ?1 AND key_id = ?2 AND state = 'active'",
                params![provider, key_id, now],
            )?;
            tx.execute(
                "UPDATE provider_keys SET state = 'active', rotated_ms = NULL
                 WHERE provider = ?1 AND key_id = ?2 AND version = ?3",
                params![provider, key_id, previous],
            )?;
            bump_generation(&tx)?;
            tx.commit()?;
            Ok(Some(previous))
        })
        .await
    }

    /// Removes a key and its history; false when there was none.
    pub async fn remove_provider_key(
        &self,
        provider: &str,
        key_id: &str,
    ) -> Result<bool, StoreError> {
        let (provider, key_id) = (provider.to_owned(), key_id.to_owned());
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let removed = tx.execute(
                "DELETE FROM provider_keys WHERE provider = ?1 AND key_id = ?2",
                params![provider, key_id],
            )?;
            if removed > 0 {
                bump_generation(&tx)?;
            }
            tx.commit()?;
            Ok(removed > 0)
        })
        .await
    }

    /// Deletes expired keys, and history older than the rollback window.
    pub async fn purge_provider_keys(&self, window_ms: i64) -> Result<usize, StoreError> {
        self.with(move |connection| {
            let tx = connection.transaction()?;
            let now = now_ms();
            let purged = tx.execute(
                "DELETE FROM provider_keys
                 WHERE (expires_ms IS NOT NULL AND expires_ms <= ?1)
                    OR (state != 'active' AND rotated_ms < ?2)",
                params![now, now - window_ms],
            )?;
            if purged > 0 {
                bump_generation(&tx)?;
            }
            tx.commit()?;
            Ok(purged)
        })
        .await
    }

    /// A sealed value the store keeps for itself, such as the master key's check value.
    pub async fn sealed_meta(&self, name: &str) -> Result<Option<Sealed>, StoreError> {
        let name = name.to_owned();
        self.with(move |connection| {
            Ok(connection
                .query_row(
                    "SELECT nonce, ciphertext FROM sealed_meta WHERE name = ?1",
                    params![name],
                    |r| {
                        Ok(Sealed {
                            nonce: r.get(0)?,
                            ciphertext: r.get(1)?,
                        })
                    },
                )
                .optional()?)
        })
        .await
    }

    /// Stores a sealed value unless one of that name exists; returns the one kept.
    pub async fn init_sealed_meta(&self, name: &str, value: Sealed) -> Result<Sealed, StoreError> {
        let name = name.to_owned();
        self.with(move |connection| {
            let tx = connection.transaction()?;
            tx.execute(
                "INSERT OR IGNORE INTO sealed_meta (name, nonce, ciphertext) VALUES (?1, ?2, ?3)",
                params![name, value.nonce, value.ciphertext],
            )?;
            let kept = tx.query_row(
                "SELECT nonce, ciphertext FROM sealed_meta WHERE name = ?1",
                params![name],
                |r| {
                    Ok(Sealed {
                        nonce: r.get(0)?,
                        ciphertext: r.get(1)?,
                    })
                },
            )?;
            tx.commit()?;
            Ok(kept)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &[u8]) -> NewProviderKey {
        NewProviderKey {
            provider: "openai".into(),
            key_id: "main".into(),
            sealed: Sealed {
                nonce: vec![0; 12],
                ciphertext: secret.to_vec(),
            },
            weight: 1,
            expires_ms: None,
        }
    }

    fn states(rows: &[ProviderKeyRow]) -> Vec<(i64, KeyState)> {
        rows.iter().map(|r| (r.version, r.state)).collect()
    }

    #[tokio::test]
    async fn rotation_keeps_history_and_rollback_restores_it() {
        let store = SqliteStore::open_memory().await.unwrap();
        assert_eq!(store.put_provider_key(key(b"one")).await.unwrap(), 1);
        assert_eq!(store.put_provider_key(key(b"two")).await.unwrap(), 2);
        let rows = store.provider_keys().await.unwrap();
        assert_eq!(
            states(&rows),
            [(1, KeyState::History), (2, KeyState::Active)]
        );

        assert_eq!(
            store
                .rollback_provider_key("openai", "main", 60_000)
                .await
                .unwrap(),
            Some(1)
        );
        let rows = store.provider_keys().await.unwrap();
        assert_eq!(
            states(&rows),
            [(1, KeyState::Active), (2, KeyState::Retired)]
        );
        assert_eq!(
            store
                .rollback_provider_key("openai", "main", 60_000)
                .await
                .unwrap(),
            None,
            "nothing older"
        );
    }

    #[tokio::test]
    async fn rollback_is_refused_outside_the_window_and_purge_drops_old_history() {
        let store = SqliteStore::open_memory().await.unwrap();
        store.put_provider_key(key(b"one")).await.unwrap();
        store.put_provider_key(key(b"two")).await.unwrap();
        // A window of -1 ms: the rotation a moment ago is already outside it.
        assert_eq!(
            store
                .rollback_provider_key("openai", "main", -1)
                .await
                .unwrap(),
            None
        );
        assert_eq!(store.purge_provider_keys(-1).await.unwrap(), 1);
        assert_eq!(
            states(&store.provider_keys().await.unwrap()),
            [(2, KeyState::Active)]
        );
    }

    #[tokio::test]
    async fn expired_keys_are_purged_and_removal_takes_every_version() {
        let store = SqliteStore::open_memory().await.unwrap();
        let mut expired = key(b"old");
        expired.key_id = "expired".into();
        expired.expires_ms = Some(1);
        store.put_provider_key(expired).await.unwrap();
        store.put_provider_key(key(b"one")).await.unwrap();
        store.put_provider_key(key(b"two")).await.unwrap();
        assert_eq!(store.purge_provider_keys(86_400_000).await.unwrap(), 1);
        assert!(store.remove_provider_key("openai", "main").await.unwrap());
        assert!(store.provider_keys().await.unwrap().is_empty());
    }
}
