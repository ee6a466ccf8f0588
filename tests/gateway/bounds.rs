//! Bounds on what a client or an upstream may cost the gateway: connections, timeouts, body
//! sizes and stream lengths.

mod bodies;
mod connections;
pub mod spawned;
