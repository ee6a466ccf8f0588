//! Spend budgets on the request path: reserve after the limits admit, settle when the
//! answer ends, and say what is left in `x-switchyard-budget-remaining`.

use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

use super::AppState;
use super::error::ApiError;
use crate::auth::Caller;
use crate::budgets::{Ask, BudgetError, Reservation};
use crate::config::Route;
use crate::providers::ClientRequest;
use crate::router::classify::FailureClass;
use crate::router::upstream::JsonReply;
use crate::router::{ChainEnd, ChainRun};

/// What is left of the caller's tightest budget, in US dollars, after this request's
/// reservation.
const REMAINING: HeaderName = HeaderName::from_static("x-switchyard-budget-remaining");

/// Reserves the most the request can cost; `None` when no budget applies to the caller.
pub async fn reserve(
    state: &AppState,
    caller: &Caller,
    request_id: &str,
    route: &Route,
    first_step: usize,
    request: &ClientRequest,
) -> Result<Option<Reservation>, ApiError> {
    let ask = Ask {
        caller,
        request_id,
        route,
        first_step,
        body: &request.body,
        operation: request.operation,
    };
    state
        .budgets()
        .reserve(ask)
        .await
        .map_err(|error| match error {
            BudgetError::Refused(refusal) => ApiError::OverBudget(refusal),
            BudgetError::Unavailable => ApiError::BudgetsUnavailable,
        })
}

/// Settles a whole (non-stream) answer: at its reported usage, priced at the deployment that
/// served; at nothing when no step answered or the answer was an error; kept whole when a
/// served answer reported no usage.
pub async fn settle_json(mut reservation: Option<Reservation>, run: &ChainRun<JsonReply>) {
    charge_cancelled_hedges(&mut reservation, run);
    let Some(reservation) = reservation else {
        return;
    };
    let cost = match &run.end {
        ChainEnd::Served { output, .. } => run
            .answered_by
            .as_ref()
            .and_then(|served| reservation.cost_of(&served.provider, &served.model, output.usage)),
        ChainEnd::Returned { .. } | ChainEnd::Exhausted => Some(0),
    };
    reservation.settle_or_keep(cost).await;
}

/// Charges the hedge racers the chain cancelled after they went upstream, whatever the
/// answer: the provider may bill them, and the reservation held a share for each.
pub fn charge_cancelled_hedges<T>(reservation: &mut Option<Reservation>, run: &ChainRun<T>) {
    let cancelled = run
        .attempts
        .iter()
        .filter(|a| a.failure == Some(FailureClass::HedgeLost))
        .count();
    if let Some(reservation) = reservation.as_mut().filter(|_| cancelled > 0) {
        reservation.charge_cancelled(cancelled);
    }
}

/// Settles a stream that never started: no step committed, so nothing was generated.
pub async fn settle_unserved(reservation: Option<Reservation>) {
    if let Some(reservation) = reservation {
        reservation.settle(0).await;
    }
}

/// Adds `x-switchyard-budget-remaining` to an answer.
pub fn add_remaining_header(response: &mut Response, remaining: Option<String>) {
    if let Some(value) = remaining.and_then(|r| HeaderValue::from_str(&r).ok()) {
        response.headers_mut().insert(REMAINING, value);
    }
}
