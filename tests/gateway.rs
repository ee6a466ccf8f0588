//! Integration tests: the real gateway on 127.0.0.1:0 in front of fake upstreams that each
//! test scripts for itself, over real HTTP.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod gateway {
    #[path = "../common/keyed.rs"]
    mod keyed;
    pub mod process;
    pub mod support;

    mod access;
    mod bedrock;
    mod bedrock_chain;
    pub mod bounds;
    mod breaker_judgement;
    mod breakers;
    mod budgets;
    mod cache;
    mod cache_endpoints;
    mod client_hints;
    mod console;
    mod cost_header;
    mod cross_vendor;
    mod docs;
    mod embeddings;
    mod endpoints;
    mod fallback;
    mod forward_headers;
    mod health_checks;
    mod health_command;
    mod hedging;
    mod http2_upstream;
    mod key_budgets;
    mod key_rows;
    mod keys;
    mod lifecycle;
    mod limits;
    pub mod logqueue;
    mod lossless;
    mod messages;
    mod metrics;
    mod operator;
    mod passthrough;
    mod presets;
    mod readme;
    mod reload;
    pub mod responses;
    mod responses_compact;
    mod responses_complete;
    mod responses_state;
    mod responses_stream;
    mod responses_websocket;
    mod responses_websocket_process;
    mod retry_after;
    mod retry_budget;
    mod scorecard_truth;
    mod secrets;
    mod stream_ends;
    mod streaming;
    pub mod telemetry;
    mod tracing;
    mod translation;
    mod upstream_pool;
    mod vertex;
    mod virtual_keys;
}
