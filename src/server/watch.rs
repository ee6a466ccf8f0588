//! Keeps a gateway current with its store: a change made by another process (the CLI,
//! another instance) reaches this one quickly.
//!
//! SQLite has no way to announce a change, so its generation is polled every 250 ms.
//! PostgreSQL announces each one (`NOTIFY`, see `store::postgres::listen`), so a change is
//! loaded as soon as it commits; a slower poll backs that up for notifications lost while
//! the listening connection was down.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::Shared;
use crate::store::Store;

/// How often SQLite's generation is checked.
const POLL: Duration = Duration::from_millis(250);
/// How often PostgreSQL's generation is checked besides the notifications: the backstop.
const RECONCILE: Duration = Duration::from_secs(2);
/// How often expired keys and old history are purged.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Watches until the gateway is gone (nothing else holds its state).
pub async fn watch_store(state: Weak<Shared>, mut seen: i64) {
    let mut listener = match state.upgrade() {
        Some(shared) => match &shared.store {
            Store::Postgres(pg) => Some(pg.listen()),
            Store::Sqlite(_) => None,
        },
        None => return,
    };
    let poll = if listener.is_some() { RECONCILE } else { POLL };
    let mut next_purge = Instant::now() + PURGE_EVERY;
    // An unreachable store is said once, not at every poll, and its return once too.
    let mut unreachable = false;
    loop {
        match listener.as_mut() {
            Some(listener) => tokio::select! {
                () = listener.changed() => {}
                () = tokio::time::sleep(poll) => {}
            },
            None => tokio::time::sleep(poll).await,
        }
        let Some(state) = state.upgrade() else {
            return;
        };
        if Instant::now() >= next_purge {
            next_purge = Instant::now() + PURGE_EVERY;
            if let Err(e) = state.keys.purge().await {
                tracing::warn!(error = %e, "cannot purge expired provider keys");
            }
        }
        let generation = match state.store.generation().await {
            Ok(generation) => generation,
            Err(e) => {
                if !unreachable {
                    tracing::warn!(error = %e, "cannot check the store for changes; serving the keys already loaded");
                }
                unreachable = true;
                continue;
            }
        };
        if unreachable {
            tracing::info!("the store answers again");
            unreachable = false;
        }
        if generation != seen {
            match state.reload(generation).await {
                Ok(()) => {
                    seen = generation;
                    // Said once the change is in effect here: an operator (or a test) can
                    // tell when a change made elsewhere reached this instance.
                    tracing::info!(generation, "loaded the store's changes");
                }
                Err(e) => tracing::warn!(error = %e, "cannot reload keys from the store"),
            }
        }
    }
}
