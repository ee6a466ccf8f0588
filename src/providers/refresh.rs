//! A credential that expires, refreshed one caller at a time: Vertex's access tokens and
//! Bedrock's AWS credentials.
//!
//! Callers that find it stale queue on one refresh and take its result, so 100 requests
//! arriving as a token expires cost one refresh, and a refresh that fails fails the callers
//! that waited on it rather than each trying again. For [`QUIET_AFTER_FAILURE`] after a
//! failure, callers with nothing usable fail at once: a source that cannot answer (no
//! credentials anywhere, a token endpoint down) would otherwise hold every request for its
//! whole attempt time before the chain moved on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::time::Instant;

/// How long a failed refresh is not tried again.
pub const QUIET_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Each provider's credential source, by provider id: made at its first request, and made
/// again when a reload changes what it was made from.
pub struct PerProvider<S> {
    sources: Mutex<HashMap<Arc<str>, Arc<S>>>,
}

impl<S> Default for PerProvider<S> {
    fn default() -> Self {
        PerProvider {
            sources: Mutex::new(HashMap::new()),
        }
    }
}

impl<S> PerProvider<S> {
    /// `id`'s source while `current` says it was made from today's settings, else `make`'s.
    pub fn get_or_make(
        &self,
        id: &str,
        current: impl Fn(&S) -> bool,
        make: impl FnOnce() -> S,
    ) -> Arc<S> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        match sources.get(id) {
            Some(source) if current(source) => source.clone(),
            _ => {
                let source = Arc::new(make());
                sources.insert(Arc::from(id), source.clone());
                source
            }
        }
    }

    /// `id`'s source, if it has one.
    pub fn get(&self, id: &str) -> Option<Arc<S>> {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.get(id).cloned()
    }
}

/// The current value and the one refresh in flight.
pub struct Refreshed<T> {
    current: ArcSwapOption<T>,
    /// Held by the one refresh in flight.
    refreshing: tokio::sync::Mutex<()>,
    /// When the last refresh failed, and why (secret-free).
    failed: Mutex<Option<(Instant, String)>>,
}

impl<T> Default for Refreshed<T> {
    fn default() -> Self {
        Refreshed {
            current: ArcSwapOption::empty(),
            refreshing: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
        }
    }
}

impl<T> Refreshed<T> {
    /// The current value while `fresh` says it is, else the one that `refresh` makes (or
    /// that a refresh finishing while this waited made).
    pub async fn get<F, R>(&self, fresh: impl Fn(&T) -> bool, refresh: F) -> Result<Arc<T>, String>
    where
        F: FnOnce() -> R,
        R: Future<Output = Result<Arc<T>, String>>,
    {
        let seen = self.current.load_full();
        if let Some(value) = seen.as_ref().filter(|v| fresh(v)) {
            return Ok(value.clone());
        }
        let arrived = Instant::now();
        if let Some(why) = self.failed_since(arrived.checked_sub(QUIET_AFTER_FAILURE)) {
            return Err(why);
        }
        let _refreshing = self.refreshing.lock().await;
        // A refresh that failed while this one waited fails it too.
        if let Some(why) = self.failed_since(Some(arrived)) {
            return Err(why);
        }
        // A refresh that finished while this one waited serves it too.
        let now = self.current.load_full();
        let refreshed = match (&seen, &now) {
            (Some(seen), Some(now)) => !Arc::ptr_eq(seen, now),
            (None, Some(_)) => true,
            _ => false,
        };
        if let (true, Some(value)) = (refreshed, now) {
            return Ok(value);
        }
        match refresh().await {
            Ok(value) => {
                self.current.store(Some(value.clone()));
                Ok(value)
            }
            Err(why) => {
                let failed = Some((Instant::now(), why.clone()));
                *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = failed;
                Err(why)
            }
        }
    }

    /// Why the last refresh failed, if it failed at or after `since` (`None`: ever).
    fn failed_since(&self, since: Option<Instant>) -> Option<String> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .as_ref()
            .filter(|(at, _)| since.is_none_or(|since| *at >= since))
            .map(|(_, why)| why.clone())
    }

    /// The current value, fresh or not.
    pub fn current(&self) -> Option<Arc<T>> {
        self.current.load_full()
    }

    /// Whether there is a current value and `test` holds for it.
    pub fn current_is(&self, test: impl Fn(&T) -> bool) -> bool {
        self.current.load().as_deref().is_some_and(test)
    }

    /// Forgets the current value if `refused` says it is the one refused; a newer one stays.
    /// Returns whether it forgot one.
    pub fn forget_if(&self, refused: impl Fn(&T) -> bool) -> bool {
        let current = self.current.load_full();
        match current {
            Some(value) if refused(&value) => {
                self.current.compare_and_swap(&Some(value), None::<Arc<T>>);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn many_callers_share_one_refresh_and_its_failure() {
        let cell = Arc::new(Refreshed::<u32>::default());
        let refreshes = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut callers = Vec::new();
        for _ in 0..50 {
            let (cell, refreshes, gate) = (cell.clone(), refreshes.clone(), gate.clone());
            callers.push(tokio::spawn(async move {
                cell.get(
                    |_| true,
                    || async {
                        refreshes.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Ok(Arc::new(7))
                    },
                )
                .await
            }));
        }
        while refreshes.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for caller in callers {
            assert_eq!(*caller.await.unwrap().unwrap(), 7);
        }
        assert_eq!(refreshes.load(Ordering::SeqCst), 1);
        assert!(cell.forget_if(|v| *v == 7));
        let failed = cell.get(|_| true, || async { Err("no".to_owned()) }).await;
        assert_eq!(failed.unwrap_err(), "no");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_is_not_tried_again_for_a_while() {
        let cell = Refreshed::<u32>::default();
        let tries = AtomicUsize::new(0);
        let refresh = || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err::<Arc<u32>, _>("the source is down".to_owned())
        };
        for _ in 0..3 {
            let failed = cell.get(|_| true, refresh).await;
            assert_eq!(failed.unwrap_err(), "the source is down");
        }
        assert_eq!(
            tries.load(Ordering::SeqCst),
            1,
            "callers in the quiet time fail at once"
        );
        tokio::time::advance(QUIET_AFTER_FAILURE + Duration::from_millis(1)).await;
        let served = cell.get(|_| true, || async { Ok(Arc::new(3)) }).await;
        assert_eq!(*served.unwrap(), 3);
    }
}
