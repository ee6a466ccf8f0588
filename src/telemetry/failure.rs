//! Why an attempt did not serve: the classes the chain assigns (`router::classify`) and the
//! request log, metrics and scorecard record.

/// Why an attempt (or a step) did not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// 429: the provider is rate limiting us.
    RateLimited,
    /// 529, or 503 with `retry-after`: the provider is overloaded.
    Overloaded,
    /// Any other 5xx.
    ServerError,
    /// A 3xx: redirects are never followed, since they would carry our key elsewhere.
    Redirect,
    /// 408, or no answer (or first event) within the attempt timeout.
    Timeout,
    /// The TCP or TLS connection could not be made.
    Connect,
    /// The connection broke before a complete answer.
    Reset,
    /// 401/403: the provider refused our key.
    Auth,
    /// 404: the provider does not know the model.
    ModelNotFound,
    /// 400 because the prompt is too long for the model.
    ContextLength,
    /// Any other 4xx: the request itself is at fault.
    BadRequest,
    /// A 2xx whose body or first event could not be parsed.
    Malformed,
    /// An answer (or one stream event) larger than the gateway will read.
    Oversized,
    /// The provider needs a key and has none usable.
    NoKey,
    /// The request deadline ran out before this step could be tried.
    Deadline,
    /// Skipped without an attempt: the breaker is open, or its one probe is in flight.
    CircuitOpen,
    /// Skipped without an attempt: a 429's `retry-after` benched the deployment.
    Benched,
    /// Not retried: the failed deployment's retry budget (`[retry] budget_percent`) was spent.
    RetryBudgetExhausted,
    /// Cancelled: another attempt of a hedged request committed first, and this one's
    /// connection was dropped. It reached the upstream, but says nothing bad of it.
    HedgeLost,
}

impl FailureClass {
    /// A short stable name, for headers, logs and metric labels.
    pub fn kind(self) -> &'static str {
        match self {
            FailureClass::RateLimited => "rate_limited",
            FailureClass::Overloaded => "overloaded",
            FailureClass::ServerError => "server_error",
            FailureClass::Redirect => "redirect",
            FailureClass::Timeout => "timeout",
            FailureClass::Connect => "connect_error",
            FailureClass::Reset => "connection_reset",
            FailureClass::Auth => "auth",
            FailureClass::ModelNotFound => "model_not_found",
            FailureClass::ContextLength => "context_length",
            FailureClass::BadRequest => "bad_request",
            FailureClass::Malformed => "malformed_response",
            FailureClass::Oversized => "oversized",
            FailureClass::NoKey => "no_key",
            FailureClass::Deadline => "deadline",
            FailureClass::CircuitOpen => "circuit_open",
            FailureClass::Benched => "benched",
            FailureClass::RetryBudgetExhausted => "retry_budget_exhausted",
            FailureClass::HedgeLost => "hedge_lost",
        }
    }
}
