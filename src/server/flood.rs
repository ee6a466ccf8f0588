//! Log rows for unauthenticated requests, bounded per source address.
//!
//! A refused request is evidence, so it keeps its row; but a client that sends thousands of
//! bad keys must not fill the store. Each source address gets a few rows a minute; past that
//! its refusals are only counted, and when its minute is over one summary row records how
//! many went unlogged. Summaries are handed out by the next refusal (from any address), so
//! this needs no timer task of its own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::telemetry::{Outcome, RequestRecord};

/// How long an address's allowance lasts.
const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at once; refusals from any more share one allowance, so a flood from
/// many addresses cannot grow this table without bound either.
const MAX_SOURCES: usize = 4096;

/// Where refusals are counted: one address, or all the addresses past [`MAX_SOURCES`] (and
/// connections whose peer is unknown).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Source {
    Addr(IpAddr),
    Others,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    written: u32,
    dropped: u64,
}

#[derive(Debug)]
struct Table {
    windows: HashMap<Source, Window>,
    next_sweep: Instant,
}

/// What to do with one refusal's row.
#[derive(Debug)]
pub struct Verdict {
    /// Whether the refusal gets its own row.
    pub write: bool,
    /// Summary rows of minutes that ended with refusals left unlogged, to write now.
    pub summaries: Vec<RequestRecord>,
}

/// Each source address's allowance of 401 rows.
#[derive(Debug)]
pub struct UnauthorizedRows {
    per_minute: u32,
    table: Mutex<Table>,
}

impl UnauthorizedRows {
    /// Allows `per_minute` rows per address each minute.
    pub fn new(per_minute: u32) -> UnauthorizedRows {
        UnauthorizedRows {
            per_minute,
            table: Mutex::new(Table {
                windows: HashMap::new(),
                next_sweep: Instant::now() + WINDOW,
            }),
        }
    }

    /// Decides whether a refusal from `peer` gets a row.
    pub fn check(&self, peer: IpAddr, now: Instant) -> Verdict {
        // Poison only means a panic mid-update; the counts are still usable.
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut summaries = Vec::new();
        if now >= table.next_sweep {
            table.windows.retain(|source, window| {
                let over = now.duration_since(window.started) >= WINDOW;
                if over && window.dropped > 0 {
                    summaries.push(summary(*source, window.dropped));
                }
                !over
            });
            table.next_sweep = now + WINDOW;
        }
        let source = if table.windows.len() < MAX_SOURCES
            || table.windows.contains_key(&Source::Addr(peer))
        {
            Source::Addr(peer)
        } else {
            Source::Others
        };
        let window = table.windows.entry(source).or_insert(Window {
            started: now,
            written: 0,
            dropped: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            if window.dropped > 0 {
                summaries.push(summary(source, window.dropped));
            }
            *window = Window {
                started: now,
                written: 0,
                dropped: 0,
            };
        }
        let write = window.written < self.per_minute;
        if write {
            window.written += 1;
        } else {
            window.dropped += 1;
        }
        Verdict { write, summaries }
    }
}

/// The row standing in for `dropped` refusals from `source`.
fn summary(source: Source, dropped: u64) -> RequestRecord {
    let from = match source {
        Source::Addr(addr) => addr.to_string(),
        Source::Others => "other addresses".to_owned(),
    };
    RequestRecord {
        started_at: SystemTime::now(),
        outcome: Outcome::Rejected,
        status: 401,
        error: Some(format!(
            "unauthorized: {dropped} more from {from} in a minute, not logged one by one"
        )),
        ..RequestRecord::new(uuid::Uuid::now_v7().to_string(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(rows: &UnauthorizedRows, peer: &str, now: Instant) -> Verdict {
        rows.check(peer.parse().unwrap(), now)
    }

    #[tokio::test(start_paused = true)]
    async fn each_address_gets_its_allowance_then_one_summary_when_its_minute_ends() {
        let rows = UnauthorizedRows::new(3);
        let start = Instant::now();
        let written = (0..10)
            .filter(|_| write(&rows, "10.0.0.1", start).write)
            .count();
        assert_eq!(written, 3);
        // Another address has its own allowance.
        assert!(write(&rows, "10.0.0.2", start).write);

        tokio::time::advance(WINDOW).await;
        let next = write(&rows, "10.0.0.9", Instant::now());
        assert!(next.write);
        assert_eq!(next.summaries.len(), 1, "only 10.0.0.1 had rows left out");
        let summary = &next.summaries[0];
        assert_eq!((summary.status, summary.outcome), (401, Outcome::Rejected));
        let error = summary.error.as_deref().unwrap();
        assert!(error.contains("7 more from 10.0.0.1"), "{error}");
        // A new minute, a new allowance, and no second summary for the old one.
        assert!(write(&rows, "10.0.0.1", Instant::now()).write);
        assert!(
            write(&rows, "10.0.0.1", Instant::now())
                .summaries
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn addresses_past_the_table_share_one_allowance() {
        let rows = UnauthorizedRows::new(1);
        let now = Instant::now();
        for i in 0..MAX_SOURCES {
            let addr = IpAddr::from(std::net::Ipv6Addr::from(i as u128));
            assert!(rows.check(addr, now).write);
        }
        let late = |n: u128| IpAddr::from(std::net::Ipv6Addr::from(u128::MAX - n));
        assert!(rows.check(late(0), now).write);
        assert!(!rows.check(late(1), now).write);
        assert!(!rows.check(late(2), now).write);
        assert_eq!(rows.table.lock().unwrap().windows.len(), MAX_SOURCES + 1);
    }
}
