//! The watchdog of one client connection: where the connection is between requests, and
//! when it must close if nothing changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Timeouts;

/// Where a connection is between requests, for the watchdog.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in flight since `since`; `head` is when the next one's first byte came.
    Waiting {
        since: Instant,
        first: bool,
        head: Option<Instant>,
    },
    /// Requests in flight (a response not yet fully sent counts) since the first began.
    Busy { requests: usize, since: Instant },
}

/// A connection's phase, shared by its socket, its service and its watchdog.
///
/// The watchdog sleeps until the deadline it last read, and a change wakes it only when it
/// brings the deadline forward. One that pushes it back (a request begins, its answer ends,
/// the next head starts on a busy connection) is found when the timer fires, and the timer
/// is set again. Waking it on every change woke the connection's own task two or three
/// times a request, each an extra poll of the whole connection.
#[derive(Debug)]
pub(super) struct Activity {
    watched: Mutex<Watched>,
    changed: Notify,
    /// Requests in flight whose body has not all arrived: they hold no work yet.
    unread_bodies: AtomicUsize,
}

#[derive(Debug)]
struct Watched {
    phase: Phase,
    /// The deadline the watchdog's timer is set for, and the timeouts it read it by; `None`
    /// until the watchdog starts (it reads the phase then).
    armed: Option<(Instant, Timeouts)>,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            watched: Mutex::new(Watched {
                phase: Phase::Waiting {
                    since: Instant::now(),
                    first: true,
                    head: None,
                },
                armed: None,
            }),
            changed: Notify::new(),
            unread_bodies: AtomicUsize::new(0),
        })
    }

    /// A request's body begins to arrive; it has all arrived (or was given up on) when the
    /// returned guard is dropped.
    pub(super) fn body_awaited(self: &Arc<Self>) -> BodyAwaited {
        self.unread_bodies.fetch_add(1, Ordering::Relaxed);
        BodyAwaited(self.clone())
    }

    /// Since when the connection has been idle: no request in flight and no byte of the
    /// next one yet (a kept-alive connection between requests, or a new one that has sent
    /// nothing). `None` while it is busy or a head is arriving.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        match self.watched().phase {
            Phase::Waiting {
                since, head: None, ..
            } => Some(since),
            _ => None,
        }
    }

    /// Whether the connection holds work a shutdown must wait for: a request whose body has
    /// all arrived (it may be routed, or its answer still going out). Nothing else does: a
    /// half-sent head or body is no request yet, and can be closed at once.
    pub(super) fn holds_work(&self) -> bool {
        let requests = match self.watched().phase {
            Phase::Busy { requests, .. } => requests,
            Phase::Waiting { .. } => 0,
        };
        requests > self.unread_bodies.load(Ordering::Relaxed)
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, Watched> {
        // A poisoned lock still holds a phase; the watchdog is better served by it than by
        // a panic.
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut Phase) -> bool) {
        let mut watched = self.watched();
        if !change(&mut watched.phase) {
            return;
        }
        let sooner = watched
            .armed
            .is_some_and(|(armed, timeouts)| deadline(watched.phase, timeouts) < armed);
        drop(watched);
        if sooner {
            // Kept as a permit if the watchdog is between two waits: it is not lost.
            self.changed.notify_one();
        }
    }

    pub(super) fn bytes_arrived(&self) {
        self.update(|phase| match phase {
            Phase::Waiting {
                head: head @ None, ..
            } => {
                *head = Some(Instant::now());
                true
            }
            _ => false,
        });
    }

    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.update(|phase| {
            *phase = match *phase {
                Phase::Busy { requests, since } => Phase::Busy {
                    requests: requests + 1,
                    since,
                },
                Phase::Waiting { .. } => Phase::Busy {
                    requests: 1,
                    since: Instant::now(),
                },
            };
            true
        });
        InFlight(self.clone())
    }

    /// The deadline now, which the watchdog's timer is from now on set for.
    fn arm(&self, timeouts: Timeouts) -> Instant {
        let mut watched = self.watched();
        let at = deadline(watched.phase, timeouts);
        watched.armed = Some((at, timeouts));
        at
    }

    /// Resolves when the connection has waited too long for a request head, or a request
    /// has been in flight too long.
    pub(super) async fn expiry(&self, timeouts: Timeouts) {
        let timer = tokio::time::sleep_until(self.arm(timeouts));
        tokio::pin!(timer);
        loop {
            tokio::select! {
                () = self.changed.notified() => {}
                () = timer.as_mut() => {
                    if deadline(self.watched().phase, timeouts) <= Instant::now() {
                        return;
                    }
                }
            }
            timer.as_mut().reset(self.arm(timeouts));
        }
    }
}

/// When a connection in `phase` must close if nothing changes.
fn deadline(phase: Phase, timeouts: Timeouts) -> Instant {
    match phase {
        Phase::Busy { since, .. } => since + timeouts.in_flight,
        Phase::Waiting {
            head: Some(head), ..
        } => head + timeouts.header,
        Phase::Waiting { since, first, .. } => {
            since
                + if first {
                    timeouts.header
                } else {
                    timeouts.idle
                }
        }
    }
}

/// A request body still arriving; see [`Activity::body_awaited`].
pub(super) struct BodyAwaited(Arc<Activity>);

impl Drop for BodyAwaited {
    fn drop(&mut self) {
        self.0.unread_bodies.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request in flight; dropped when its response has been sent (or abandoned).
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(|phase| {
            *phase = match *phase {
                Phase::Busy { requests, since } if requests > 1 => Phase::Busy {
                    requests: requests - 1,
                    since,
                },
                _ => Phase::Waiting {
                    since: Instant::now(),
                    first: false,
                    head: None,
                },
            };
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, timeout};

    use super::{Activity, Timeouts};

    const TIMEOUTS: Timeouts = Timeouts {
        header: Duration::from_millis(300),
        idle: Duration::from_secs(60),
        body: Duration::from_secs(5),
        in_flight: Duration::from_secs(120),
    };

    #[tokio::test(start_paused = true)]
    async fn a_head_after_an_idle_spell_brings_the_deadline_forward() {
        let activity = Activity::new();
        let watchdog = activity.expiry(TIMEOUTS);
        tokio::pin!(watchdog);
        // One request, answered; then idle past the header timeout, so the watchdog has
        // found the idle timeout and set its timer a minute ahead.
        activity.bytes_arrived();
        drop(activity.begin());
        assert!(
            timeout(Duration::from_secs(1), &mut watchdog)
                .await
                .is_err()
        );
        // The next head begins and stalls: it gets the header timeout from its first byte.
        activity.bytes_arrived();
        let begun = Instant::now();
        timeout(Duration::from_secs(1), &mut watchdog)
            .await
            .expect("the watchdog fires a header timeout after the head began");
        assert_eq!(begun.elapsed(), TIMEOUTS.header);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_outlives_the_deadline_the_timer_was_set_for() {
        let activity = Activity::new();
        let watchdog = activity.expiry(TIMEOUTS);
        tokio::pin!(watchdog);
        activity.bytes_arrived();
        let begun = Instant::now();
        let in_flight = activity.begin();
        // The timer was set for the head's header timeout; the request pushes it back.
        assert!(
            timeout(Duration::from_secs(100), &mut watchdog)
                .await
                .is_err()
        );
        timeout(Duration::from_secs(100), &mut watchdog)
            .await
            .expect("a request in flight too long is let go");
        assert_eq!(begun.elapsed(), TIMEOUTS.in_flight);
        drop(in_flight);
    }
}
