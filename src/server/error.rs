//! The one error type handlers return, answered in OpenAI's error shape.

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::budgets::BudgetRefusal;
use crate::limits::{RateHeaders, Refusal};
use crate::providers::{self, ClientFormat};

/// Whole seconds to wait, rounded up: a client that waits this long will be admitted.
fn retry_after_secs(refusal: &Refusal) -> u64 {
    secs_up(refusal.retry_after)
}

/// Whole seconds, rounded up, at least 1: what `retry-after` can say.
fn secs_up(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// `retry-after` and `retry-after-ms` for a wait.
fn retry_headers(headers: &mut axum::http::HeaderMap, wait: std::time::Duration) {
    headers.insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(secs_up(wait)),
    );
    // One SDK ignores a `retry-after` of 60 s or more; the milliseconds it reads too.
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    headers.insert(
        "retry-after-ms",
        axum::http::HeaderValue::from(millis.max(1)),
    );
}

/// Every way the gateway itself refuses or fails a request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("the request body did not arrive in time")]
    BodyTimeout,
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<&'static str>,
    },
    /// A request field the endpoint's API does not have.
    #[error("unknown field `{0}`: this endpoint's API has no such parameter")]
    UnknownField(String),
    #[error("the model `{0}` does not exist: it is neither a route nor provider/model")]
    UnknownModel(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("rate limit reached: {} (retry after {}s)", .0.limit.as_str(), retry_after_secs(.0))]
    RateLimited(Refusal),
    #[error("the rate-limit backend is unavailable, and limits fail closed")]
    LimitsUnavailable,
    /// A spend budget refuses the request's reservation: a 402.
    #[error("{0}")]
    OverBudget(BudgetRefusal),
    #[error("the spend-budget backend is unavailable, and limits fail closed")]
    BudgetsUnavailable,
    #[error(
        "the gateway cannot log requests right now: the request log's queue is full (the store takes rows more slowly than requests arrive, or refuses writes and the spill journal is full), so this request was not served; retry later"
    )]
    LogFull,
    #[error("all steps failed: {0}")]
    AllStepsFailed(String),
    #[error("every step is rate-limited by its provider (retry after {}s): {failures}", secs_up(*.retry_after))]
    UpstreamRateLimited {
        failures: String,
        retry_after: std::time::Duration,
    },
    #[error("no route matches {0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{0}")]
    Missing(String),
    /// The request contradicts the resource's state (a change to a revoked key).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Internal(&'static str),
    /// Too much of one kind of work at once; retrying in a moment helps.
    #[error("{0}")]
    Busy(&'static str),
}

impl ApiError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::InvalidJson(_)
            | ApiError::InvalidRequest { .. }
            | ApiError::UnknownField(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownModel(_) | ApiError::NotFound(_) | ApiError::Missing(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::RateLimited(_) | ApiError::UpstreamRateLimited { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::OverBudget(_) => StatusCode::PAYMENT_REQUIRED,
            ApiError::AllStepsFailed(_)
            | ApiError::LimitsUnavailable
            | ApiError::BudgetsUnavailable
            | ApiError::Busy(_)
            | ApiError::LogFull => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
        }
    }

    /// Whether the request was refused before routing, for who the caller is or their limits.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            ApiError::Unauthorized(_)
                | ApiError::Forbidden(_)
                | ApiError::RateLimited(_)
                | ApiError::OverBudget(_)
        )
    }

    /// A short stable name, for the error's `code`, logs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::BodyTooLarge { .. } => "body_too_large",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::InvalidRequest { .. } => "invalid_request",
            ApiError::UnknownField(_) => "unknown_parameter",
            ApiError::UnknownModel(_) => "model_not_found",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::RateLimited(_) => "rate_limit_exceeded",
            ApiError::LimitsUnavailable => "limits_unavailable",
            ApiError::OverBudget(refusal) => refusal.kind(),
            ApiError::BudgetsUnavailable => "budgets_unavailable",
            ApiError::LogFull => "log_full",
            ApiError::AllStepsFailed(_) => "all_steps_failed",
            ApiError::UpstreamRateLimited { .. } => "upstream_rate_limited",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Missing(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Internal(_) => "internal_error",
            ApiError::Busy(_) => "busy",
        }
    }

    fn error_type(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "authentication_error",
            ApiError::Forbidden(_) => "permission_error",
            ApiError::RateLimited(_) | ApiError::UpstreamRateLimited { .. } => "rate_limit_error",
            // OpenAI's own type for a spent quota, which its SDKs and users recognise.
            ApiError::OverBudget(_) => "insufficient_quota",
            ApiError::AllStepsFailed(_)
            | ApiError::LimitsUnavailable
            | ApiError::BudgetsUnavailable
            | ApiError::Busy(_)
            | ApiError::LogFull => "api_error",
            _ => "invalid_request_error",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidRequest { param, .. } => *param,
            ApiError::UnknownField(field) => Some(field),
            ApiError::UnknownModel(_) => Some("model"),
            _ => None,
        }
    }
}

impl ApiError {
    /// The error in the client's own API shape: Anthropic's on `/v1/messages`.
    pub fn into_response_for(self, format: ClientFormat) -> Response {
        let status = self.status();
        let mut response = match format {
            ClientFormat::OpenAi => {
                let body = json!({
                    "error": {
                        "message": self.to_string(),
                        "type": self.error_type(),
                        "param": self.param(),
                        "code": self.kind(),
                    }
                });
                (status, Json(body)).into_response()
            }
            ClientFormat::Anthropic => {
                let body = providers::error_body(
                    format,
                    status,
                    &self.to_string(),
                    self.kind(),
                    self.param(),
                );
                let content_type = [(axum::http::header::CONTENT_TYPE, "application/json")];
                (status, content_type, body).into_response()
            }
        };
        if let ApiError::Busy(_) = &self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if let ApiError::RateLimited(refusal) = &self {
            add_rate_headers(&mut response, &refusal.headers);
            retry_headers(response.headers_mut(), refusal.retry_after);
        }
        if let Some(wait) = match &self {
            ApiError::OverBudget(refusal) => refusal.retry_after(),
            _ => None,
        } {
            retry_headers(response.headers_mut(), wait);
        }
        if let ApiError::UpstreamRateLimited { retry_after, .. } = &self {
            retry_headers(response.headers_mut(), *retry_after);
        }
        if let ApiError::AllStepsFailed(_) = &self {
            // The chain already spent the retries and the deadline: an SDK retrying on its
            // own would walk it again. The OpenAI and Anthropic SDKs obey this header.
            response.headers_mut().insert(
                "x-should-retry",
                axum::http::HeaderValue::from_static("false"),
            );
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.into_response_for(ClientFormat::OpenAi)
    }
}

/// Adds the `x-ratelimit-*` headers.
pub fn add_rate_headers(response: &mut Response, headers: &RateHeaders) {
    let map = response.headers_mut();
    for (name, value) in headers.pairs() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            map.insert(HeaderName::from_static(name), value);
        }
    }
}

/// The request body did not arrive whole within `[server] body_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body timeout")]
pub struct BodyTimeout;

/// Whether an error (a body rejection, say) was caused by a [`BodyTimeout`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<BodyTimeout>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Longer than `[server] max_body_bytes`.
    TooLarge,
    /// Not whole within `[server] body_timeout`.
    Timeout,
    /// The connection failed mid-body, say.
    Unreadable(String),
}
