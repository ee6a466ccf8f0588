//! Provider keys in PostgreSQL: every version of every key, sealed, with its history.
//! Each change takes [`KEYS_LOCK`] for its transaction, so rotations on two instances at
//! once get distinct versions instead of a conflict.

use tokio_postgres::Row;

use super::{KEYS_LOCK, PgStore, bump_generation};
use crate::store::Sealed;
use crate::store::{KeyState, NewProviderKey, ProviderKeyRow, StoreError, now_ms};

async fn lock_keys(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&KEYS_LOCK])
        .await?;
    Ok(())
}

impl PgStore {
    /// Stores a key; an existing id is rotated: a new version, the old one kept as history.
    pub async fn put_provider_key(&self, key: NewProviderKey) -> Result<i64, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_keys(&tx).await?;
        let now = now_ms();
        let latest: Option<i64> = tx
            .query_one(
                "SELECT MAX(version) FROM provider_keys WHERE provider = $1 AND key_id = $2",
                &[&key.provider, &key.key_id],
            )
            .await?
            .get(0);
        tx.execute(
            "UPDATE provider_keys SET state = 'history', rotated_ms = $3
             WHERE provider = $1 AND key_id = $2 AND state = 'active'",
            &[&key.provider, &key.key_id, &now],
        )
        .await?;
        let version = latest.unwrap_or(0) + 1;
        tx.execute(
            "INSERT INTO provider_keys (provider, key_id, version, nonce, ciphertext, weight,
                 created_ms, rotated_ms, expires_ms, state)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, 'active')",
            &[
                &key.provider,
                &key.key_id,
                &version,
                &key.sealed.nonce,
                &key.sealed.ciphertext,
                &i64::from(key.weight),
                &now,
                &key.expires_ms,
            ],
        )
        .await?;
        bump_generation(&tx).await?;
        tx.commit().await?;
        Ok(version)
    }

    /// Every version of every key, oldest first.
    pub async fn provider_keys(&self) -> Result<Vec<ProviderKeyRow>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT provider, key_id, version, nonce, ciphertext, weight, created_ms,
                        rotated_ms, expires_ms, state
                 FROM provider_keys ORDER BY provider, key_id, version",
                &[],
            )
            .await?;
        rows.iter().map(read_key).collect()
    }

    /// Restores the version the last rotation replaced, if it was replaced within `window_ms`.
    /// The version rolled back from is retired, so a second rollback goes further back.
    pub async fn rollback_provider_key(
        &self,
        provider: &str,
        key_id: &str,
        window_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_keys(&tx).await?;
        let now = now_ms();
        let previous: Option<i64> = tx
            .query_one(
                "SELECT MAX(version) FROM provider_keys
                 WHERE provider = $1 AND key_id = $2 AND state = 'history' AND rotated_ms >= $3",
                &[&provider, &key_id, &(now - window_ms)],
            )
            .await?
            .get(0);
        let Some(previous) = previous else {
            return Ok(None);
        };
        tx.execute(
            "UPDATE provider_keys SET state = 'retired', rotated_ms = $3
             WHERE provider = $1 AND key_id = $2 AND state = 'active'",
            &[&provider, &key_id, &now],
        )
        .await?;
        tx.execute(
            "UPDATE provider_keys SET state = 'active', rotated_ms = NULL
             WHERE provider = $1 AND key_id = $2 AND version = $3",
            &[&provider, &key_id, &previous],
        )
        .await?;
        bump_generation(&tx).await?;
        tx.commit().await?;
        Ok(Some(previous))
    }

    /// Removes a key and its history; false when there was none.
    pub async fn remove_provider_key(
        &self,
        provider: &str,
        key_id: &str,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_keys(&tx).await?;
        let removed = tx
            .execute(
                "DELETE FROM provider_keys WHERE provider = $1 AND key_id = $2",
                &[&provider, &key_id],
            )
            .await?;
        if removed > 0 {
            bump_generation(&tx).await?;
        }
        tx.commit().await?;
        Ok(removed > 0)
    }

    /// Deletes expired keys, and history older than the rollback window.
    pub async fn purge_provider_keys(&self, window_ms: i64) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_keys(&tx).await?;
        let now = now_ms();
        let purged = tx
            .execute(
                "DELETE FROM provider_keys
                 WHERE (expires_ms IS NOT NULL AND expires_ms <= $1)
                    OR (state != 'active' AND rotated_ms < $2)",
                &[&now, &(now - window_ms)],
            )
            .await?;
        if purged > 0 {
            bump_generation(&tx).await?;
        }
        tx.commit().await?;
        Ok(purged as usize)
    }

    /// Stores a sealed value unless one of that name exists; returns the one kept (the
    /// first instance's, when several start at once).
    pub async fn init_sealed_meta(&self, name: &str, value: Sealed) -> Result<Sealed, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO sealed_meta (name, nonce, ciphertext) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO NOTHING",
                &[&name, &value.nonce, &value.ciphertext],
            )
            .await?;
        let row = client
            .query_one(
                "SELECT nonce, ciphertext FROM sealed_meta WHERE name = $1",
                &[&name],
            )
            .await?;
        Ok(Sealed {
            nonce: row.try_get(0)?,
            ciphertext: row.try_get(1)?,
        })
    }
}

fn read_key(row: &Row) -> Result<ProviderKeyRow, StoreError> {
    let state: String = row.try_get(9)?;
    let weight: i64 = row.try_get(5)?;
    Ok(ProviderKeyRow {
        provider: row.try_get(0)?,
        key_id: row.try_get(1)?,
        version: row.try_get(2)?,
        sealed: Sealed {
            nonce: row.try_get(3)?,
            ciphertext: row.try_get(4)?,
        },
        weight: u32::try_from(weight).unwrap_or(u32::MAX),
        created_ms: row.try_get(6)?,
        rotated_ms: row.try_get(7)?,
        expires_ms: row.try_get(8)?,
        state: match state.as_str() {
            "active" => KeyState::Active,
            "history" => KeyState::History,
            _ => KeyState::Retired,
        },
    })
}
