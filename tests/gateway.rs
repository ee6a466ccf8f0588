//! Integration tests: the real gateway on 127.0.0.1:0 in front of fake upstreams that each
//! test scripts for itself, over real HTTP.

mod gateway {
    pub mod services;
    pub mod support;

    mod breakers;
    mod cross_vendor;
    mod dashboard;
    mod embeddings;
    mod fallback;
    mod keys;
    mod lifecycle;
    mod limits;
    mod lossless;
    mod messages;
    mod passthrough;
    mod retry_after;
    mod streaming;
    pub mod telemetry;
}
