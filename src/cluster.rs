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

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use crate::router::breaker::Transition;
use crate::router::health::DeploymentId;

/// How many lease wishes may wait for the member; more are dropped, and the next refused
/// request wishes again.
const WISHES: usize = 256;

/// What the cluster must hear of.
#[derive(Debug)]
pub enum Change {
    /// A breaker opened or closed here.
    Moved {
        id: DeploymentId,
        transition: Transition,
    },
    /// An operator reset these breakers here.
    Reset {
        provider: Option<String>,
        model: Option<String>,
    },
}

/// The request path's side of cluster mode: cheap, never waiting.
pub struct Link {
    shared: AtomicBool,
    problem: Mutex<Option<&'static str>>,
    changes: mpsc::UnboundedSender<Change>,
    wishes: mpsc::Sender<DeploymentId>,
}

/// The member's side of a [`Link`].
pub struct Inbox {
    changes: mpsc::UnboundedReceiver<Change>,
    wishes: mpsc::Receiver<DeploymentId>,
}

impl Link {
    /// A link not yet sharing: breakers decide alone until the member has joined.
    pub fn new() -> (Link, Inbox) {
        let (changes_tx, changes) = mpsc::unbounded_channel();
        let (wishes_tx, wishes) = mpsc::channel(WISHES);
        let link = Link {
            shared: AtomicBool::new(false),
            problem: Mutex::new(Some("not connected yet")),
            changes: changes_tx,
            wishes: wishes_tx,
        };
        (link, Inbox { changes, wishes })
    }

    /// Whether breakers are shared now (the member is connected to Redis).
    pub fn shared(&self) -> bool {
        self.shared.load(Ordering::SeqCst)
    }

    /// Why breakers are local now, in words safe to show anyone.
    pub fn problem(&self) -> Option<&'static str> {
        *self.problem.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_shared(&self, shared: bool, problem: Option<&'static str>) {
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = problem;
        self.shared.store(shared, Ordering::SeqCst);
    }

    /// Hands a change to the member; `false` when breakers are local now and the cluster
    /// will learn of it when the member rejoins.
    pub fn moved(&self, id: &DeploymentId, transition: Transition) -> bool {
        self.shared()
            && self
                .changes
                .send(Change::Moved {
                    id: id.clone(),
                    transition,
                })
                .is_ok()
    }

    /// Hands an operator's reset to the member.
    pub fn reset(&self, provider: Option<&str>, model: Option<&str>) {
        if self.shared() {
            let _ = self.changes.send(Change::Reset {
                provider: provider.map(str::to_owned),
                model: model.map(str::to_owned),
            });
        }
    }

    /// Asks the member to take the probe lease for `id`. Never waits: a full queue drops
    /// the wish, and the next refused request makes it again.
    pub fn wish_lease(&self, id: &DeploymentId) {
        if self.shared() {
            let _ = self.wishes.try_send(id.clone());
        }
    }
}
