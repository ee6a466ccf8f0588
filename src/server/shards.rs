//! Client connections are served on single-threaded runtimes, one per core, each on a thread
//! of its own; the multi-threaded runtime keeps the accept loop and the background work.
//!
//! Why: on tokio's multi-threaded runtime a task that wakes another on the same worker (the
//! handler waking its upstream connection's task, hyper's body channel waking its sender)
//! also wakes a parked worker to steal it, so a lone request paid a futex and a thread switch
//! several times over (docs/src/performance.md). On a runtime of its own, a connection's
//! tasks (its handler, its upstream connections, from a pool of the shard's own) wake one
//! another on one thread. Load spreads by connection: each goes to the shard serving the
//! fewest.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::router::upstream::drop_this_threads_pools;

/// The serving runtimes.
pub struct Shards {
    first: Shard,
    rest: Vec<Shard>,
}

struct Shard {
    handle: Handle,
    /// Connections being served on it.
    load: Arc<AtomicUsize>,
    /// Dropped (or sent) to end the runtime.
    stop: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

/// A connection's place on a shard, given up when dropped.
pub struct Placed {
    load: Arc<AtomicUsize>,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.load.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shards {
    /// Starts `count` runtimes (at least one), each on a thread named after it.
    pub fn start(count: usize) -> std::io::Result<Shards> {
        let first = Shard::start(0)?;
        let rest = (1..count).map(Shard::start).collect::<Result<_, _>>()?;
        Ok(Shards { first, rest })
    }

    /// `count` runtimes, or by default one a core, as many as the process may use (its CPU
    /// quota included).
    pub fn start_or_per_core(count: Option<usize>) -> std::io::Result<Shards> {
        let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
        Shards::start(count.unwrap_or_else(cores))
    }

    /// The shard serving the fewest connections, with the new one counted in.
    pub fn place(&self) -> (&Handle, Placed) {
        let load = |shard: &Shard| shard.load.load(Ordering::Relaxed);
        let least = self.rest.iter().fold(&self.first, |least, shard| {
            if load(shard) < load(least) {
                shard
            } else {
                least
            }
        });
        least.load.fetch_add(1, Ordering::Relaxed);
        let placed = Placed {
            load: least.load.clone(),
        };
        (&least.handle, placed)
    }

    /// Ends every runtime and waits for its thread: each first gives what its requests left
    /// behind a moment to finish (`finish_leftovers`), then drops whatever is still there.
    pub async fn stop(self) {
        let threads: Vec<_> = std::iter::once(self.first)
            .chain(self.rest)
            .map(|shard| {
                let _ = shard.stop.send(());
                shard.thread
            })
            .collect();
        // Joining blocks; a blocking thread waits rather than a runtime worker.
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

/// How long a stopping shard waits for the work its requests left behind.
const LEFTOVER_WAIT: Duration = Duration::from_secs(1);
/// How often it looks.
const LEFTOVER_CHECK: Duration = Duration::from_millis(5);

/// Lets what finished requests spawned on this runtime finish (the release of a rate-limit
/// slot in Redis, the charge of its tokens), for a moment at most: dropping the runtime drops
/// such tasks unrun. Its connections are all closed by then; the idle upstream ones go first,
/// as their tasks would otherwise live as long as the pool.
async fn finish_leftovers() {
    drop_this_threads_pools();
    let metrics = Handle::current().metrics();
    let deadline = tokio::time::Instant::now() + LEFTOVER_WAIT;
    while metrics.num_alive_tasks() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(LEFTOVER_CHECK).await;
    }
}

impl Shard {
    fn start(index: usize) -> std::io::Result<Shard> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("switchyard-serve-{index}"))
            .spawn(move || {
                runtime.block_on(async {
                    // Either a stop or the sender dropped ends it.
                    let _ = stopped.await;
                    finish_leftovers().await;
                });
            })?;
        Ok(Shard {
            handle,
            load: Arc::new(AtomicUsize::new(0)),
            stop,
            thread,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_go_to_the_least_loaded_shard() {
        let shards = Shards::start(2).unwrap();
        let (first, a) = shards.place();
        let first = first.id();
        let (second, b) = shards.place();
        assert_ne!(first, second.id(), "the second goes to the idle shard");
        drop(a);
        let (third, _c) = shards.place();
        assert_eq!(third.id(), first, "the first shard is idle again");
        drop(b);
        shards.stop().await;
    }

    #[tokio::test]
    async fn stopping_lets_the_work_requests_left_behind_finish() {
        let shards = Shards::start(1).unwrap();
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (handle, placed) = shards.place();
        let done = finished.clone();
        // As a permit's release is: spawned as the request ends, and still running.
        handle.spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            done.store(true, Ordering::SeqCst);
        });
        drop(placed);
        shards.stop().await;
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_task_placed_on_a_shard_runs_on_its_thread() {
        let shards = Shards::start(1).unwrap();
        let (handle, _placed) = shards.place();
        let name = handle
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("switchyard-serve-0"));
        shards.stop().await;
    }
}
