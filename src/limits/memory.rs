//! The in-process limiter: exact, with a lock per user so users never contend.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::{Decision, Lease, LimitKind, Permit, Quota, RateHeaders, Refusal, WindowState};
use crate::config::Window;

const MINUTE: Duration = Duration::from_secs(60);

/// One user's counters.
#[derive(Default)]
struct UserWindow {
    /// Fixed windows: which calendar minute (since the Unix epoch) the counts belong to.
    minute: u64,
    requests: u64,
    tokens: u64,
    /// Sliding windows: when each request of the last minute came, and each charge.
    request_times: VecDeque<Instant>,
    charges: VecDeque<(Instant, u64)>,
    charged: u64,
    in_flight: u64,
}

/// Each user's counters, behind their own lock.
type UserMap = HashMap<Arc<str>, Arc<Mutex<UserWindow>>>;

/// Counters for every user, in this process.
#[derive(Clone)]
pub struct MemoryLimiter {
    // The outer lock is held only to find or add a user; each user's counts have their own.
    users: Arc<Mutex<UserMap>>,
    /// Where this limiter's monotonic clock meets `epoch_wall_ms`.
    epoch: Instant,
    /// The wall clock at `epoch`, in milliseconds since the Unix epoch.
    epoch_wall_ms: u64,
}

impl Default for MemoryLimiter {
    fn default() -> MemoryLimiter {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        MemoryLimiter::starting_at(wall)
    }
}

impl MemoryLimiter {
    /// A limiter whose `Instant::now()` is `wall` after the Unix epoch, so tests on paused
    /// time can place it anywhere in a calendar minute.
    pub(crate) fn starting_at(wall: Duration) -> MemoryLimiter {
        MemoryLimiter {
            users: Arc::default(),
            epoch: Instant::now(),
            epoch_wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn user(&self, user: &Arc<str>) -> Arc<Mutex<UserWindow>> {
        // Poison only means a panic elsewhere mid-update of plain counters; keep counting.
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users.entry(user.clone()).or_default().clone()
    }

    /// Checks every limit and counts the request, in one step under the user's lock.
    pub fn admit(&self, user: &Arc<str>, quota: Quota) -> Decision {
        let now = Instant::now();
        let state = self.user(user);
        let mut window = state.lock().unwrap_or_else(|e| e.into_inner());
        let (used, tokens, reset, token_reset) = self.roll(&mut window, now, quota.window);
        let headers = |requests_used: u64| RateHeaders {
            requests: quota.requests_per_minute.map(|limit| WindowState {
                limit,
                remaining: limit.saturating_sub(requests_used),
                reset,
            }),
            tokens: quota.tokens_per_minute.map(|limit| WindowState {
                limit,
                remaining: limit.saturating_sub(tokens),
                reset: token_reset,
            }),
        };
        let refuse = |limit, retry_after| {
            Decision::Refuse(Refusal {
                limit,
                retry_after,
                headers: headers(used),
            })
        };
        if quota
            .max_concurrent
            .is_some_and(|max| window.in_flight >= max)
        {
            return refuse(LimitKind::Concurrency, Duration::from_secs(1));
        }
        if quota.requests_per_minute.is_some_and(|limit| used >= limit) {
            return refuse(LimitKind::Requests, reset);
        }
        if quota.tokens_per_minute.is_some_and(|limit| tokens >= limit) {
            return refuse(LimitKind::Tokens, token_reset);
        }
        match quota.window {
            Window::Fixed => window.requests += 1,
            Window::Sliding => window.request_times.push_back(now),
        }
        if quota.max_concurrent.is_some() {
            window.in_flight += 1;
        }
        Decision::Admit(Permit {
            headers: headers(used + 1),
            lease: Lease::Memory {
                limiter: self.clone(),
                user: user.clone(),
                quota,
            },
        })
    }

    /// Drops what has left the window; returns (requests used, tokens used, their resets).
    fn roll(
        &self,
        window: &mut UserWindow,
        now: Instant,
        mode: Window,
    ) -> (u64, u64, Duration, Duration) {
        match mode {
            Window::Fixed => {
                // Calendar minutes, as Redis counts them, so both backends reset together.
                let since =
                    u64::try_from(now.duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
                let wall_ms = self.epoch_wall_ms.saturating_add(since);
                let minute_ms = MINUTE.as_millis() as u64;
                let minute = wall_ms / minute_ms;
                if minute != window.minute {
                    window.minute = minute;
                    window.requests = 0;
                    window.tokens = 0;
                }
                let reset = Duration::from_millis((minute + 1) * minute_ms - wall_ms);
                (window.requests, window.tokens, reset, reset)
            }
            Window::Sliding => {
                while window
                    .request_times
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= MINUTE)
                {
                    window.request_times.pop_front();
                }
                while let Some(&(t, tokens)) = window.charges.front() {
                    if now.duration_since(t) < MINUTE {
                        break;
                    }
                    window.charges.pop_front();
                    window.charged -= tokens;
                }
                let reset_of = |oldest: Option<Instant>| {
                    oldest
                        .map(|t| MINUTE - now.duration_since(t))
                        .unwrap_or(MINUTE)
                };
                (
                    window.request_times.len() as u64,
                    window.charged,
                    reset_of(window.request_times.front().copied()),
                    reset_of(window.charges.front().map(|c| c.0)),
                )
            }
        }
    }

    /// Adds an answer's tokens to the user's window.
    pub fn charge(&self, user: &Arc<str>, tokens: u64, mode: Window) {
        let now = Instant::now();
        let state = self.user(user);
        let mut window = state.lock().unwrap_or_else(|e| e.into_inner());
        self.roll(&mut window, now, mode);
        match mode {
            Window::Fixed => window.tokens += tokens,
            Window::Sliding => {
                window.charges.push_back((now, tokens));
                window.charged += tokens;
            }
        }
    }

    /// Frees one concurrency slot.
    pub fn release(&self, user: &Arc<str>) {
        let state = self.user(user);
        let mut window = state.lock().unwrap_or_else(|e| e.into_inner());
        window.in_flight = window.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn quota(rpm: Option<u64>, tpm: Option<u64>, max: Option<u64>, window: Window) -> Quota {
        Quota {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            max_concurrent: max,
            window,
        }
    }

    fn admitted(decision: Decision) -> Option<Permit> {
        match decision {
            Decision::Admit(permit) => Some(permit),
            Decision::Refuse(_) => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_window_admits_exactly_its_limit_then_resets() {
        let limiter = MemoryLimiter::default();
        let user: Arc<str> = Arc::from("ana");
        let q = quota(Some(20), None, None, Window::Fixed);
        let admitted_count = (0..25)
            .filter(|_| admitted(limiter.admit(&user, q)).is_some())
            .count();
        assert_eq!(admitted_count, 20);
        match limiter.admit(&user, q) {
            Decision::Refuse(refusal) => {
                assert_eq!(refusal.limit, LimitKind::Requests);
                assert_eq!(refusal.headers.requests.unwrap().remaining, 0);
            }
            Decision::Admit(_) => panic!("over the limit"),
        }
        tokio::time::advance(MINUTE).await;
        assert!(admitted(limiter.admit(&user, q)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_window_follows_the_calendar_minute_not_the_process_start() {
        // Started 45 s into a calendar minute: that window ends 15 s later.
        let limiter = MemoryLimiter::starting_at(Duration::from_secs(29_000_000 * 60 + 45));
        let user: Arc<str> = Arc::from("ana");
        let q = quota(Some(2), None, None, Window::Fixed);
        let first = admitted(limiter.admit(&user, q)).unwrap();
        assert_eq!(
            first.headers.requests.unwrap().reset,
            Duration::from_secs(15)
        );
        assert!(admitted(limiter.admit(&user, q)).is_some());
        match limiter.admit(&user, q) {
            Decision::Refuse(refusal) => assert_eq!(refusal.retry_after, Duration::from_secs(15)),
            Decision::Admit(_) => panic!("over the limit"),
        }
        tokio::time::advance(Duration::from_millis(14_999)).await;
        assert!(admitted(limiter.admit(&user, q)).is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            admitted(limiter.admit(&user, q)).is_some(),
            "a new calendar minute began"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_sliding_window_frees_one_slot_per_expired_request() {
        let limiter = MemoryLimiter::default();
        let user: Arc<str> = Arc::from("ana");
        let q = quota(Some(2), None, None, Window::Sliding);
        assert!(admitted(limiter.admit(&user, q)).is_some());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(admitted(limiter.admit(&user, q)).is_some());
        assert!(admitted(limiter.admit(&user, q)).is_none());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(
            admitted(limiter.admit(&user, q)).is_some(),
            "the first request left the window"
        );
        assert!(admitted(limiter.admit(&user, q)).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_charged_after_the_answer_and_checked_on_admission() {
        let limiter = MemoryLimiter::default();
        let user: Arc<str> = Arc::from("ana");
        let q = quota(None, Some(100), None, Window::Fixed);
        let permit = admitted(limiter.admit(&user, q)).unwrap();
        permit.charge_tokens(100);
        assert!(admitted(limiter.admit(&user, q)).is_none());
    }

    #[tokio::test]
    async fn concurrency_slots_come_back_when_permits_drop() {
        let limiter = MemoryLimiter::default();
        let user: Arc<str> = Arc::from("ana");
        let q = quota(None, None, Some(1), Window::Fixed);
        let permit = admitted(limiter.admit(&user, q)).unwrap();
        assert!(admitted(limiter.admit(&user, q)).is_none());
        drop(permit);
        assert!(admitted(limiter.admit(&user, q)).is_some());
    }

    #[tokio::test]
    async fn users_never_share_counters() {
        let limiter = MemoryLimiter::default();
        let q = quota(Some(1), None, None, Window::Fixed);
        assert!(admitted(limiter.admit(&Arc::from("ana"), q)).is_some());
        assert!(admitted(limiter.admit(&Arc::from("bo"), q)).is_some());
    }

    #[test]
    fn concurrent_admissions_are_exact() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for _ in 0..50 {
                // At the start of a calendar minute, so no burst straddles two windows.
                let limiter = MemoryLimiter::starting_at(Duration::ZERO);
                let q = quota(Some(20), None, None, Window::Fixed);
                let tasks: Vec<_> = (0..25)
                    .map(|_| {
                        let limiter = limiter.clone();
                        tokio::spawn(async move {
                            admitted(limiter.admit(&Arc::from("ana"), q)).is_some()
                        })
                    })
                    .collect();
                let mut count = 0;
                for task in tasks {
                    count += usize::from(task.await.unwrap());
                }
                assert_eq!(count, 20);
            }
        });
    }

    proptest! {
        #[test]
        fn never_more_than_the_limit_in_any_sliding_minute(
            limit in 1u64..10,
            gaps in proptest::collection::vec(0u64..30_000, 1..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            runtime.block_on(async {
                let limiter = MemoryLimiter::default();
                let user: Arc<str> = Arc::from("ana");
                let q = quota(Some(limit), None, None, Window::Sliding);
                let mut admitted_at: Vec<Instant> = Vec::new();
                for gap in gaps {
                    tokio::time::advance(Duration::from_millis(gap)).await;
                    if admitted(limiter.admit(&user, q)).is_some() {
                        admitted_at.push(Instant::now());
                    }
                    let now = Instant::now();
                    let in_window = admitted_at.iter().filter(|t| now.duration_since(**t) < MINUTE).count() as u64;
                    assert!(in_window <= limit);
                }
            });
        }
    }
}
