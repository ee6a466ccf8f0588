//! The request path's side of cluster mode: what the breakers hand to the cluster's member
//! task (a change of state, a wish for the probe lease) and how they learn whether they are
//! shared. It lives with the breakers, so the router needs nothing of `cluster`; the member
//! (`crate::cluster::member`) holds the other end, the [`Inbox`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use super::DeploymentId;
use crate::router::breaker::Transition;

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
    pub(crate) changes: mpsc::UnboundedReceiver<Change>,
    pub(crate) wishes: mpsc::Receiver<DeploymentId>,
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

    /// Says whether breakers are shared now, and if not, why: the member's to say.
    pub(crate) fn set_shared(&self, shared: bool, problem: Option<&'static str>) {
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
