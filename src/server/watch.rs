//! Keeps a gateway current with its store: a change made by another process (the CLI,
//! another instance) reaches this one within a poll, 250 ms.

use std::sync::Weak;
use std::time::Duration;

use super::Shared;

/// How often the store's generation is checked.
const POLL: Duration = Duration::from_millis(250);
/// Expired keys and old history are purged every this many polls (a minute).
const PURGE_EVERY: u32 = 240;

/// Watches until the gateway is gone (nothing else holds its state).
pub async fn watch_store(state: Weak<Shared>, mut seen: i64) {
    let mut polls = 0u32;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        polls = polls.wrapping_add(1);
        if polls % PURGE_EVERY == 0
            && let Err(e) = state.keys.purge().await
        {
            tracing::warn!(error = %e, "cannot purge expired provider keys");
        }
        match state.store.generation().await {
            Ok(generation) if generation != seen => match state.reload(generation).await {
                Ok(()) => seen = generation,
                Err(e) => tracing::warn!(error = %e, "cannot reload keys from the store"),
            },
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot check the store for changes"),
        }
    }
}
