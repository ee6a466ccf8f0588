//! Integration tests: the real gateway on 127.0.0.1:0 in front of fake upstreams that each
//! test scripts for itself, over real HTTP.

mod gateway {
    pub mod support;

    mod breakers;
    mod fallback;
    mod lifecycle;
    mod passthrough;
    mod streaming;
}
