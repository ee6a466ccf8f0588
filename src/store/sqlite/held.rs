//! A connection that a call gives up as soon as its caller stops waiting.
//!
//! Store calls run on the blocking pool, and a caller's `[store] timeout` drops only the
//! future that awaits them: the blocking work would go on holding the connection, for as long
//! as the busy handler waits on another process's lock (seconds), and every later call would
//! queue behind it. So each call carries a flag its caller's drop sets: a call not yet begun
//! skips its work, a call waiting on a lock stops waiting, and a running statement is
//! interrupted.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, InterruptHandle};

use super::super::StoreError;

/// How long a call waits for another process's lock before failing, unless it says
/// otherwise; the CLI's writes last milliseconds.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Between two tries of a lock another process holds.
const BUSY_PAUSE: Duration = Duration::from_millis(5);

/// One SQLite connection, and the handle that interrupts what runs on it.
pub struct Held {
    // A sync mutex: every use is inside `spawn_blocking`, never across an await.
    connection: Mutex<Connection>,
    interrupt: InterruptHandle,
}

/// One call: whether its caller stopped waiting, and whether its work is running.
struct Call {
    abandoned: AtomicBool,
    /// How long it waits on another process's lock.
    busy_limit: Duration,
    /// Set while the work runs on the connection; the caller's drop interrupts only then, so
    /// an interrupt never lands on the next call's statements.
    running: Mutex<bool>,
}

thread_local! {
    /// The call the blocking thread runs, for the busy handler to consult.
    static CURRENT: RefCell<Option<Arc<Call>>> = const { RefCell::new(None) };
}

impl Held {
    /// Takes `connection`, whose lock waits now end early when their caller gives up.
    pub fn new(connection: Connection) -> Result<Held, StoreError> {
        connection.busy_handler(Some(busy))?;
        Ok(Held {
            interrupt: connection.get_interrupt_handle(),
            connection: Mutex::new(connection),
        })
    }

    /// Runs `work` with the connection on the blocking pool; dropping the returned future
    /// abandons it (see the module's comment).
    pub async fn run<T: Send + 'static>(
        self: &Arc<Held>,
        busy_limit: Duration,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let call = Arc::new(Call {
            abandoned: AtomicBool::new(false),
            busy_limit,
            running: Mutex::new(false),
        });
        let _abandon = Abandon {
            call: call.clone(),
            held: self.clone(),
        };
        let held = self.clone();
        tokio::task::spawn_blocking(move || {
            // A poisoned lock means a panic mid-query; SQLite rolled that transaction back.
            let mut connection = held.connection.lock().unwrap_or_else(|e| e.into_inner());
            if call.abandoned.load(Ordering::Acquire) {
                return Err(StoreError::Task("the caller stopped waiting".into()));
            }
            *lock(&call.running) = true;
            CURRENT.with(|current| *current.borrow_mut() = Some(call.clone()));
            let result = work(&mut connection);
            CURRENT.with(|current| *current.borrow_mut() = None);
            *lock(&call.running) = false;
            result
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }
}

/// Set off when the caller's future is dropped, finished or not: a finished call is no longer
/// running, so only an unfinished one is abandoned or interrupted.
struct Abandon {
    call: Arc<Call>,
    held: Arc<Held>,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.call.abandoned.store(true, Ordering::Release);
        let running = lock(&self.call.running);
        if *running {
            // With no statement running this is a no-op (SQLite's own guarantee), so the gap
            // between two statements of the work cannot carry it over to another call.
            self.held.interrupt.interrupt();
        }
    }
}

/// SQLite's busy handler: try the lock again after a pause, up to the call's limit, unless
/// the call on this thread has been abandoned.
fn busy(tries: i32) -> bool {
    let (abandoned, limit) = CURRENT.with(|current| match current.borrow().as_ref() {
        Some(call) => (call.abandoned.load(Ordering::Acquire), call.busy_limit),
        None => (false, BUSY_TIMEOUT),
    });
    let waited = BUSY_PAUSE.saturating_mul(u32::try_from(tries).unwrap_or(u32::MAX));
    if abandoned || waited >= limit {
        return false;
    }
    std::thread::sleep(BUSY_PAUSE);
    true
}

fn lock(running: &Mutex<bool>) -> std::sync::MutexGuard<'_, bool> {
    running.lock().unwrap_or_else(|e| e.into_inner())
}
