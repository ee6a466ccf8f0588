//! Who a breaker's results came from, so that one caller's failures alone cannot open it
//! for everyone while other callers are being served.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

/// A caller as breakers tell callers apart: a hash of an identity the server chooses (the
/// virtual key's user, or one shared identity for anonymous callers). Never the key itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallerTag(u64);

impl CallerTag {
    /// The tag of `identity`. Equal identities give equal tags within one process, which is
    /// all a breaker needs; a collision only merges two callers.
    pub fn new(identity: &str) -> CallerTag {
        let mut hasher = DefaultHasher::new();
        identity.hash(&mut hasher);
        CallerTag(hasher.finish())
    }
}

/// The most recent distinct callers of one kind of result, each with its latest time.
///
/// It keeps `cap` callers, the most recent ones. That is enough to answer both questions a
/// breaker asks with `cap = min_callers`: "did at least `cap` callers fail in the window?"
/// (the `cap` most recent failing callers are then all in it) and "was anyone outside a set
/// of fewer than `cap` callers served in the window?" (if such a caller was pushed out, the
/// `cap` newer ones are in the window and one of them is outside the set).
#[derive(Clone, Debug)]
pub struct RecentCallers {
    cap: usize,
    /// Oldest first.
    seen: Vec<(CallerTag, Instant)>,
}

impl RecentCallers {
    /// Remembers at most `cap` callers (at least one).
    pub fn new(cap: usize) -> RecentCallers {
        RecentCallers {
            cap: cap.max(1),
            seen: Vec::new(),
        }
    }

    /// Notes a result from `caller` at `now`.
    pub fn note(&mut self, caller: CallerTag, now: Instant) {
        self.seen.retain(|(tag, _)| *tag != caller);
        if self.seen.len() >= self.cap {
            self.seen.remove(0);
        }
        self.seen.push((caller, now));
    }

    /// The callers seen within `window` before `now`.
    pub fn within(&self, now: Instant, window: Duration) -> impl Iterator<Item = CallerTag> + '_ {
        self.seen
            .iter()
            .filter(move |(_, at)| now.saturating_duration_since(*at) < window)
            .map(|(tag, _)| *tag)
    }

    pub fn clear(&mut self) {
        self.seen.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_distinct_callers() {
        let t0 = Instant::now();
        let window = Duration::from_secs(10);
        let (a, b, c) = (
            CallerTag::new("a"),
            CallerTag::new("b"),
            CallerTag::new("c"),
        );
        let mut recent = RecentCallers::new(2);
        recent.note(a, t0);
        recent.note(a, t0);
        assert_eq!(recent.within(t0, window).count(), 1);
        recent.note(b, t0);
        recent.note(c, t0 + Duration::from_secs(1));
        let kept: Vec<_> = recent.within(t0, window).collect();
        assert_eq!(kept, [b, c]);
        // Out of the window, a caller no longer counts.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(recent.within(later, window).collect::<Vec<_>>(), [c]);
    }
}
