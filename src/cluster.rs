//! Cluster mode's shared breakers: instances on one Redis hear of each other's opens and
//! closes within a second, and send one probe between them when a cooldown ends.
//!
//! The request path never waits on Redis. It reads and changes its local breakers as a
//! single node does, and hands what the cluster must hear of to a [`Link`]: a change of
//! state, or a wish for the probe lease. One background task per gateway, the
//! [`member`], carries these to Redis and brings the other instances' changes back:
//!
//! - a change runs one script that bumps a version, stores the breaker's shared state
//!   and publishes it, so every instance applies it in the same order;
//! - a periodic read of the shared state is the backstop for messages missed across a
//!   reconnect;
//! - when a cooldown ends, each instance that has traffic for the breaker asks for the
//!   probe lease (`SET NX PX`, only if the shared state is still the open it knows);
//!   only the holder probes, and its result closes or reopens the breaker everywhere.
//!
//! When Redis cannot be reached, every breaker goes back to deciding alone, `/readyz` and
//! `switchyard_breakers_shared` say so, and the member keeps trying to rejoin.

pub mod member;
mod scripts;
mod wire;

pub use crate::router::health::link::{Change, Inbox, Link};
