//! Switchyard: a self-hosted LLM gateway that turns provider failures into routing decisions.
//!
//! # Layout
//! - [`config`]: the TOML file, parsed strictly and validated with field paths.
//! - [`server`]: HTTP surface and lifecycle; checks each request, then hands it to the router.
//! - [`router`]: resolves a route, runs the attempt loop over its chain, classifies failures;
//!   keeps each deployment's circuit breaker and retry budget, and balances a step's
//!   deployments.
//! - [`providers`]: wire formats: encoding requests, decoding answers and event streams.
//! - [`budgets`]: spend budgets per key and role, reserved at admission and settled on usage.
//! - [`cache`]: answers kept per route that opts in, scoped to the caller, misses coalesced.
//! - [`keys`]: provider secrets, and which keys are benched.
//! - [`telemetry`]: one record per request, written off the hot path, and its trace's spans.
//! - [`tls`]: TLS for the gateway's own outgoing connections.
//! - [`fake`]: the scriptable fake provider used by tests, the demo and the benchmark.
//! - [`demo`]: fake providers and a gateway in one process, for a first look.
//! - [`check`]: `switchyard check`'s report of each route's chain and worst case.
//! - [`cluster`]: cluster mode's shared breakers, through Redis.
//! - [`init`]: `switchyard init`'s example config and admin token file.
//!
//! One request takes one path: `server` → `router` → `providers`, and exactly one
//! [`telemetry::RequestRecord`] comes out of it.

pub mod auth;
pub mod budgets;
pub mod cache;
mod calendar;
pub mod check;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod fake;
pub mod init;
pub mod keys;
pub mod limits;
pub mod providers;
pub mod router;
pub mod secret;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;
