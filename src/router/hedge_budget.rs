//! The hedge budget (`[retry] hedge_budget_percent`): of a route's requests in the last
//! 10 s, at most that share may be hedged, so a provider that turns slow for everyone
//! cannot double the calls (and the spend) behind it.
//!
//! Per instance, in memory: a sliding window of ten one-second buckets per route, counting
//! the requests that reached the hedge's decision and the hedges started. A request counts
//! as it starts step 0, so the share is of every request of the route, hedged or not.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RouteName;

/// The window's length in buckets of one second.
const BUCKETS: usize = 10;
/// Routes tracked at most: only hedging routes count, which config bounds; the cap only
/// keeps reloads that rename routes from growing this without end.
const MAX_ROUTES: usize = 1_000;

/// One second's counts.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Which second since the window's origin these counts are of.
    second: u64,
    requests: u64,
    hedges: u64,
}

/// One route's last ten seconds.
#[derive(Debug)]
pub struct Window {
    origin: Instant,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    /// An empty window whose seconds count from `origin`.
    pub fn new(origin: Instant) -> Window {
        Window {
            origin,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let second = now.saturating_duration_since(self.origin).as_secs();
        let bucket = &mut self.buckets[(second % BUCKETS as u64) as usize];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// The requests and hedges of the last ten seconds, this one included.
    fn totals(&self, now: Instant) -> (u64, u64) {
        let second = now.saturating_duration_since(self.origin).as_secs();
        self.buckets
            .iter()
            .filter(|b| b.second + (BUCKETS as u64) > second && b.second <= second)
            .fold((0, 0), |(r, h), b| (r + b.requests, h + b.hedges))
    }

    /// Counts one request.
    pub fn note_request(&mut self, now: Instant) {
        self.bucket(now).requests += 1;
    }

    /// Takes one hedge if the window allows it: while hedges stay within `percent` of the
    /// window's requests, rounded up, so a quiet route (a request or two in ten seconds) may
    /// still hedge once.
    pub fn try_hedge(&mut self, percent: f64, now: Instant) -> bool {
        let (requests, hedges) = self.totals(now);
        let allowed = (requests as f64 * percent / 100.0).ceil() as u64;
        if hedges >= allowed {
            return false;
        }
        self.bucket(now).hedges += 1;
        true
    }
}

/// Every hedging route's window; one per gateway, in its [`super::super::Health`].
#[derive(Default)]
pub struct HedgeBudgets {
    windows: Mutex<HashMap<RouteName, Window>>,
}

impl HedgeBudgets {
    fn with<T>(
        &self,
        route: &RouteName,
        now: Instant,
        f: impl FnOnce(&mut Window) -> T,
    ) -> Option<T> {
        // Poison only means a panic between two counter updates; the counts are still whole.
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if !windows.contains_key(route) {
            if windows.len() >= MAX_ROUTES {
                return None;
            }
            windows.insert(route.clone(), Window::new(now));
        }
        windows.get_mut(route).map(f)
    }

    /// Counts a request of `route` that may come to hedge.
    pub fn note_request(&self, route: &RouteName, now: Instant) {
        self.with(route, now, |w| w.note_request(now));
    }

    /// Takes one hedge for `route` if its budget allows.
    pub fn try_hedge(&self, route: &RouteName, percent: f64, now: Instant) -> bool {
        self.with(route, now, |w| w.try_hedge(percent, now))
            .unwrap_or(false)
    }
}

/// How long the window looks back.
pub const WINDOW: Duration = Duration::from_secs(BUCKETS as u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn at_most_the_share_of_requests_is_hedged_rounded_up() {
        let mut window = Window::new(Instant::now());
        let mut hedged = 0;
        for _ in 0..40 {
            window.note_request(Instant::now());
            if window.try_hedge(10.0, Instant::now()) {
                hedged += 1;
            }
        }
        assert_eq!(hedged, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_route_may_hedge_once_per_window() {
        let mut window = Window::new(Instant::now());
        window.note_request(Instant::now());
        assert!(window.try_hedge(10.0, Instant::now()));
        window.note_request(Instant::now());
        assert!(!window.try_hedge(10.0, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn old_seconds_leave_the_window() {
        let mut window = Window::new(Instant::now());
        for _ in 0..10 {
            window.note_request(Instant::now());
        }
        assert!(window.try_hedge(10.0, Instant::now()));
        assert!(!window.try_hedge(10.0, Instant::now()));
        tokio::time::advance(WINDOW).await;
        // The hedge and its requests are ten seconds old: a new request may hedge again.
        window.note_request(Instant::now());
        assert!(window.try_hedge(10.0, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn within_the_window_the_counts_add_up_across_seconds() {
        let mut window = Window::new(Instant::now());
        for _ in 0..9 {
            window.note_request(Instant::now());
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        window.note_request(Instant::now());
        assert!(window.try_hedge(10.0, Instant::now()));
        assert!(!window.try_hedge(10.0, Instant::now()));
    }
}
