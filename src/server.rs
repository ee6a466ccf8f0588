//! The HTTP server: state, routes, and a graceful lifecycle.
//!
//! `run` takes its listener and its shutdown signal, so tests bind `127.0.0.1:0` and stop
//! it when they like; `serve` is the binary's entry, with SIGTERM and Ctrl-C.

pub mod admin;
mod admission;
mod chat;
mod client_api;
mod completions;
mod connection;
mod console;
mod degraded;
mod embeddings;
mod endpoint;
mod error;
mod flood;
mod header_values;
mod health_checks;
mod lifecycle;
mod listener;
mod messages;
mod models;
mod preflight;
mod readiness;
mod refusal;
pub mod reload;
mod response_cache;
mod responses;
mod scorecard;
mod shards;
mod span_content;
mod spend;
mod stamp;
mod start;
mod startup;
mod state;
mod stream;
mod surface;
mod watch;

pub use admission::FORCE_FALLBACK;
pub use error::ApiError;
pub use lifecycle::{Gateway, run};
pub use preflight::{preflight, store_path_problem};
pub use reload::{Live, ReloadError, Reloaded};
pub use start::{StartError, StartOptions};
pub use state::{AppState, ServerState, Shared};
pub use surface::{admin_app, app};
