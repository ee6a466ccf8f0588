//! The request log as stored: one [`LogRow`] per request, with its attempts.
//!
//! Plain strings and numbers, so the store needs nothing from the router, and the CLI and the
//! scorecard read rows without a running gateway. Route, provider and model names are
//! `Arc<str>`, as the config holds them: the writer shares them rather than copying each
//! into every row.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One upstream attempt (or skipped step) of a logged request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogAttempt {
    pub step: usize,
    pub provider: Arc<str>,
    pub model: Arc<str>,
    /// The failure class (`server_error`, `timeout`, `circuit_open`…); `None` when it served.
    pub failure: Option<String>,
    pub status: Option<u16>,
    pub latency_ms: f64,
    /// False for steps skipped without a request (`no_key`, `circuit_open`, …).
    pub reached_upstream: bool,
    /// Whether this attempt was a hedge, raced against a slow step 0. Absent from rows
    /// written before hedging existed, and from every attempt that was not one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hedge: bool,
}

/// One request's row in the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogRow {
    pub id: String,
    /// When the request arrived, in epoch milliseconds.
    pub time_ms: i64,
    pub key_id: Option<String>,
    pub user: Option<String>,
    pub route: Option<Arc<str>>,
    /// `success`, `fallback`, `degraded`, `error` or `rejected`.
    pub outcome: String,
    pub step: Option<usize>,
    pub provider: Option<Arc<str>>,
    pub model: Option<Arc<str>>,
    pub attempts: Vec<LogAttempt>,
    pub status: u16,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub overhead_ms: f64,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    /// US dollars, from the `[[prices]]` table; `None` when the model has no price.
    pub cost_usd: Option<f64>,
    pub stream: bool,
    pub partial: bool,
    pub error: Option<String>,
    /// What the response cache did: `hit`, `miss`, `bypass` or `coalesced`; `None` on a
    /// route that caches nothing (and in rows written before the cache existed).
    #[serde(default)]
    pub cache: Option<String>,
    /// The W3C trace id (32 hex digits) when the request was traced.
    #[serde(default)]
    pub trace_id: Option<String>,
}

/// Which rows `switchyard logs` (or the scorecard) reads.
#[derive(Clone, Debug, Default)]
pub struct LogQuery {
    /// Only rows at or after this time (epoch ms).
    pub since_ms: Option<i64>,
    /// Only rows before this time (epoch ms).
    pub until_ms: Option<i64>,
    pub outcome: Option<String>,
    pub route: Option<String>,
    pub user: Option<String>,
    pub trace_id: Option<String>,
    /// Only the rows of this virtual key (its id).
    pub key_id: Option<String>,
    /// Only the row of this request.
    pub id: Option<String>,
    /// Only rows whose status is within these bounds, both included.
    pub status: Option<(u16, u16)>,
    /// The newest this many rows (still returned oldest first).
    pub limit: Option<usize>,
}

/// Rows handled between offers of the core to another thread (a few µs of CPU each).
const ROWS_PER_TURN: usize = 8;

/// How a batch of the request log shares its core with the request path.
///
/// A batch is a few hundred µs of CPU in one go, and the scheduler (EEVDF) lets a running
/// thread finish its slice before a woken one preempts it: a request woken onto that core
/// waited the batch out, the gateway's latency tail at c=1 (docs/src/performance.md). So while
/// the writer keeps up it offers the core every few rows. But when the gateway is saturated
/// every offer is taken, the writer falls behind, its queue fills and new requests are
/// refused (`log_full`): a writer that is behind runs flat out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Offer the core after every [`ROWS_PER_TURN`]th row; when no thread waits, an offer
    /// costs a syscall.
    Sharing,
    /// Never offer it: the queue is what is at stake.
    FlatOut,
}

impl Pace {
    /// The pace of a batch of `taken` records when a batch holds at most `batch`: one that
    /// emptied the queue keeps up; a full one may have left records behind it.
    pub fn for_batch(taken: usize, batch: usize) -> Pace {
        if taken < batch {
            Pace::Sharing
        } else {
            Pace::FlatOut
        }
    }

    /// Called with each row's index in its batch.
    pub fn offer_core_at(self, index: usize) {
        if self == Pace::Sharing && index % ROWS_PER_TURN == ROWS_PER_TURN - 1 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_that_emptied_the_queue_shares_the_core_and_a_full_one_does_not() {
        assert_eq!(Pace::for_batch(1, 256), Pace::Sharing);
        assert_eq!(Pace::for_batch(255, 256), Pace::Sharing);
        assert_eq!(Pace::for_batch(256, 256), Pace::FlatOut);
    }
}
