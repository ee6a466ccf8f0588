//! The request log through a store outage: the real binary, a SQLite file whose write lock a
//! second connection holds for the outage window, load all along, and the process's memory
//! measured from outside.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use switchyard::fake::{Behavior, FakeHandle};

use super::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
/// Warnings, and the line that says where it listens; no line per request.
pub const QUIET: &str = "warn,switchyard=info,switchyard::requests=warn";

/// A `switchyard serve` process with its config file; killed and cleaned up on drop.
pub struct Spawned {
    pub child: Child,
    pub url: String,
    config: std::path::PathBuf,
    /// Everything it wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    /// Bumped after each line is added to `stderr`, for [`Spawned::said`] to wait on.
    lines: Arc<tokio::sync::watch::Sender<usize>>,
}

/// Long enough for any step of these tests on a loaded machine; only a hang reaches it.
const BOUND: Duration = Duration::from_secs(30);

/// The line the writer logs once its spill journal is all in the store.
const REPLAYED: &str = "the spill journal is replayed into the store";

impl Spawned {
    /// Starts the binary on an ephemeral port and waits for its word that it listens.
    pub fn start(config_text: &str, log_level: &str) -> Spawned {
        let mut started = Spawned::start_all(&[config_text], log_level, &[]);
        started.remove(0)
    }

    /// Starts one process per config at the same moment, with `env` set for each, then
    /// waits for each one's word that it listens.
    pub fn start_all(configs: &[&str], log_level: &str, env: &[(&str, &str)]) -> Vec<Spawned> {
        let launched: Vec<_> = configs
            .iter()
            .map(|config_text| Spawned::launch(config_text, log_level, env))
            .collect();
        launched
            .into_iter()
            .map(|(mut spawned, hear)| {
                let addr = hear
                    .recv_timeout(Duration::from_secs(30))
                    .unwrap_or_else(|_| {
                        panic!(
                            "the gateway says where it listens; it said:\n{}",
                            spawned.stderr.lock().unwrap()
                        )
                    });
                spawned.url = format!("http://{addr}");
                spawned
            })
            .collect()
    }

    fn launch(
        config_text: &str,
        log_level: &str,
        env: &[(&str, &str)],
    ) -> (Spawned, std::sync::mpsc::Receiver<String>) {
        let config =
            std::env::temp_dir().join(format!("switchyard-test-{}.toml", uuid::Uuid::now_v7()));
        let text = TestGateway::new()
            .with("[server]\nlisten = \"127.0.0.1:0\"\n")
            .with(config_text)
            .raw_text();
        std::fs::write(&config, text).unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .env("SWITCHYARD_LOG", log_level)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let seen = Arc::new(Mutex::new(String::new()));
        let lines = Arc::new(tokio::sync::watch::Sender::new(0));
        let (said, hear) = std::sync::mpsc::channel();
        let (keep, count) = (seen.clone(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("switchyard listening")
                    && let Some(addr) = line.split("addr=").nth(1)
                {
                    let _ = said.send(addr.trim().to_owned());
                }
                let mut seen = keep.lock().unwrap();
                seen.push_str(&line);
                seen.push('\n');
                drop(seen);
                count.send_modify(|n| *n += 1);
            }
        });
        let spawned = Spawned {
            child,
            url: String::new(),
            config,
            stderr: seen,
            lines,
        };
        (spawned, hear)
    }

    /// Asserts that `/readyz` answers 200, with no waiting: [`Spawned::start`] has heard the
    /// gateway say it listens, which it says only once everything that can stop a start has
    /// happened, and from then on it is ready while its store and limit backend answer.
    pub async fn ready(&self) {
        let asked = client().get(format!("{}/readyz", self.url)).send();
        let response = tokio::time::timeout(BOUND, asked)
            .await
            .expect("/readyz answers in time")
            .expect("/readyz answers");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert_eq!(
            status,
            200,
            "not ready once it listens: {body}\n{}",
            self.stderr.lock().unwrap()
        );
    }

    /// How much it has written to stderr so far: a place to look for lines from.
    pub fn stderr_len(&self) -> usize {
        self.stderr.lock().unwrap().len()
    }

    /// Resolves once stderr past byte `from` holds `words`; panics with all of stderr if it
    /// does not within `limit`.
    pub async fn said(&self, words: &str, from: usize, limit: Duration) {
        let mut lines = self.lines.subscribe();
        let heard = lines.wait_for(|_| self.stderr.lock().unwrap()[from..].contains(words));
        if tokio::time::timeout(limit, heard).await.is_err() {
            panic!(
                "the gateway never said \"{words}\"; it said:\n{}",
                self.stderr.lock().unwrap()
            );
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(mut self) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Resident memory in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A fresh SQLite path in the temp dir, and its cleanup.
pub struct TempDb(pub std::path::PathBuf);

impl TempDb {
    pub fn new(tag: &str) -> TempDb {
        TempDb(std::env::temp_dir().join(format!("switchyard-{tag}-{}.db", uuid::Uuid::now_v7())))
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.0.display())
    }

    /// Every id in its request log (read through a connection of our own).
    pub fn logged_ids(&self) -> Vec<String> {
        let connection = rusqlite::Connection::open(&self.0).unwrap();
        connection.busy_timeout(Duration::from_secs(5)).unwrap();
        let mut statement = connection.prepare("SELECT id FROM request_log").unwrap();
        statement
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-spill", ".key"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

/// Auth off, the store in `db`, and route `r` over provider `up` at `fake`.
fn served_from(db: &TempDb, fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = false\n[store]\n")
        .set("url", db.url())
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
}

/// The outage the test rides out: longer than the old writer's retries of one batch (five
/// tries, each waiting out SQLite's 5 s busy timeout, with 6.3 s of pauses: about 31 s),
/// after which it dropped the batch, so a writer that still gives up on a batch fails here.
const OUTAGE: Duration = Duration::from_secs(40);
/// What the gateway may hold resident through the outage: it peaks at about 35 MiB under
/// this load, with the journal taking what the store refuses.
const RSS_BOUND_KIB: u64 = 64 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_under_load_loses_no_answered_request_and_memory_stays_bounded() {
    let fake = scripted("up", [Behavior::ok().delay_ms(2)]).await;
    let db = TempDb::new("outage");
    let mut gateway = Spawned::start(
        &served_from(&db, &fake).with(OBSERVABILITY).raw_text(),
        QUIET,
    );
    gateway.ready().await;
    let endpoint = format!("{}/v1/chat/completions", gateway.url);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Eight clients, one request after another each, until told to stop.
    let load = (0..8)
        .map(|_| {
            let (endpoint, mut stopped) = (endpoint.clone(), stopped.clone());
            tokio::spawn(async move {
                let client = client();
                let mut answered = Vec::new();
                while !*stopped.borrow_and_update() {
                    let response = client.post(&endpoint).json(&chat("r")).send().await;
                    let response = match response {
                        Ok(response) => response,
                        Err(error) => return Err(error),
                    };
                    assert_eq!(response.status(), 200);
                    answered.push(header(&response, "x-switchyard-request-id").to_owned());
                    response.bytes().await.unwrap();
                }
                Ok(answered)
            })
        })
        .collect::<Vec<_>>();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (pid, peak, mut stopped) = (gateway.child.id(), peak.clone(), stopped.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !*stopped.borrow_and_update() {
                tick.tick().await;
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::SeqCst);
            }
        })
    };

    // The outage: the write lock held by another connection, as a long migration or a
    // backup tool would. Every write the gateway tries fails with SQLITE_BUSY. Its length is
    // the scenario, not a wait for an event: a writer that gives up on a batch after a while
    // fails only if the outage outlasts that while, and memory must stay bounded all along.
    // The gateway is another process on the wall clock, so no clock can be moved for it.
    let blocker = rusqlite::Connection::open(&db.0).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    tokio::time::sleep(OUTAGE).await;
    // Nothing journaled can reach the store before this, so the writer's word that its
    // journal is replayed can only come after it.
    let recovered = gateway.stderr_len();
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    stop.send(true).unwrap();
    let mut answered = BTreeSet::new();
    let mut total = 0;
    for client in load {
        let ids = client.await.unwrap().unwrap_or_else(|error| {
            panic!(
                "a request failed: {error}\ngateway: {:?}\n{}",
                gateway.child.try_wait(),
                gateway.stderr.lock().unwrap()
            )
        });
        total += ids.len();
        answered.extend(ids);
    }
    sampler.await.unwrap();
    assert_eq!(answered.len(), total, "request ids are unique");

    // The writer says when its journal is all in the store, while it still runs.
    gateway
        .said(REPLAYED, recovered, Duration::from_secs(60))
        .await;
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "outage of {OUTAGE:?}: {} answered, peak RSS {} MiB",
        answered.len(),
        peak / 1024
    );
    assert!(peak > 0, "RSS was measured");
    assert!(peak < RSS_BOUND_KIB, "peak RSS {peak} KiB");
    // The outage was real: rows went to the journal, and all of them came back from it.
    let metrics = metrics_text(&gateway.url, METRICS_TOKEN).await;
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let spilled = counter("switchyard_log_rows_spilled_total");
    assert!(spilled > 0, "{metrics}");
    assert_eq!(counter("switchyard_log_rows_replayed_total"), spilled);
    assert_eq!(counter("switchyard_log_rows_lost_total"), 0);
    // A clean exit writes what the queue still holds (the last requests' records): then
    // every answered request is in the store, with nothing left to wait for.
    gateway.terminate();
    let rows = db.logged_ids();
    let logged: BTreeSet<String> = rows.iter().cloned().collect();
    assert_eq!(rows.len(), logged.len(), "no request has two rows");
    let missing = answered.difference(&logged).count();
    assert_eq!(
        missing,
        0,
        "{} answered, {missing} of them never logged",
        answered.len()
    );
    assert_eq!(logged, answered, "a row for each answer, and no other");
}

/// A gateway on a file store whose log has no journal and a queue of four, with the store's
/// write lock held by a connection of the test's: the log fills after a few requests.
async fn full_log(
    when_full: &str,
) -> (
    switchyard::server::Gateway,
    TempDb,
    rusqlite::Connection,
    switchyard::fake::FakeHandle,
) {
    let fake = scripted("up", []).await;
    let db = TempDb::new(&format!("full-{when_full}"));
    let gateway = TestGateway::new()
        .with("[store]\n")
        .set("url", db.url())
        .with("[log]\nqueue_records = 4\nspill_bytes = 0\n")
        .set("when_full", when_full)
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .with(OBSERVABILITY)
        .start()
        .await;
    let blocker = rusqlite::Connection::open(&db.0).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    (gateway, db, blocker, fake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_refuses_new_requests_with_a_503_and_readyz_says_why() {
    let (gateway, _db, blocker, _fake) = full_log("refuse").await;
    let mut answered = Vec::new();
    let refused = loop {
        let response = post(&gateway, &chat("r")).await;
        if response.status() == 503 {
            break response;
        }
        assert_eq!(response.status(), 200);
        answered.push(header(&response, "x-switchyard-request-id").to_owned());
        // The writer holds one batch (at most 4) and the queue 4 more.
        assert!(
            answered.len() <= 8,
            "{} answered and none refused",
            answered.len()
        );
    };
    let body: serde_json::Value = refused.json().await.unwrap();
    let message = error_message(&body);
    assert_eq!(body["error"]["code"], "log_full", "{body}");
    assert!(message.contains("request log"), "{message}");
    let anthropic = post_to(&gateway, "/v1/messages", &message_body()).await;
    assert_eq!(anthropic.status(), 503);
    let anthropic: serde_json::Value = anthropic.json().await.unwrap();
    assert_eq!(anthropic["type"], "error", "{anthropic}");

    let (status, ready) = readiness(&gateway).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["log"]["status"], "full", "{ready}");
    let reason = ready["log"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("refuse"), "{reason}");
    assert!(gateway.telemetry().metrics.log_requests_refused.get() >= 2);

    // The store takes writes again: the held batch and the queue drain, requests are served.
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    tokio::time::timeout(
        Duration::from_secs(10),
        gateway.telemetry().wait_for_rows(answered.len() as u64),
    )
    .await
    .expect("what the log held is stored once the store takes writes");
    assert_eq!(readiness(&gateway).await.0, 200);
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200, "served again");
    answered.push(header(&response, "x-switchyard-request-id").to_owned());
    let all_logged = async {
        gateway.telemetry().wait_idle().await;
        gateway
            .telemetry()
            .wait_for_rows(answered.len() as u64)
            .await;
    };
    tokio::time::timeout(Duration::from_secs(10), all_logged)
        .await
        .expect("every answered request is logged");
    let rows = gateway
        .store()
        .query_log(switchyard::store::request_log::LogQuery::default())
        .await
        .unwrap();
    let logged: BTreeSet<_> = rows.iter().map(|r| r.id.clone()).collect();
    let answered: BTreeSet<_> = answered.into_iter().collect();
    assert_eq!(
        logged, answered,
        "refused requests have no row; answered ones do"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_in_drop_mode_serves_requests_and_counts_each_dropped_record() {
    let (gateway, _db, blocker, _fake) = full_log("drop").await;
    let sent = 30;
    for _ in 0..sent {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
    }
    // The queue holds 4 and the writer the batch it gathered before the store refused it.
    let dropped = gateway.telemetry().metrics.log_records_dropped.get();
    assert!(dropped > 0 && dropped < sent, "{dropped} of {sent} dropped");
    let (status, ready) = readiness(&gateway).await;
    assert_eq!(status, 200, "drop mode still serves: {ready}");
    assert_eq!(ready["log"]["status"], "full", "{ready}");
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    let kept = sent - dropped;
    tokio::time::timeout(
        Duration::from_secs(10),
        gateway.telemetry().wait_for_rows(kept),
    )
    .await
    .expect("the kept records are stored");
    assert_eq!(gateway.store().count_log().await.unwrap(), kept);
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    assert!(
        metrics.contains(&format!("switchyard_log_records_dropped_total {dropped}")),
        "{metrics}"
    );
}

fn message_body() -> serde_json::Value {
    message("r", false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stderr_holds_up_neither_requests_nor_the_request_log() {
    let fake = scripted("up", []).await;
    let db = TempDb::new("stuck-stderr");
    let config =
        std::env::temp_dir().join(format!("switchyard-test-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(
        &config,
        served_from(&db, &fake)
            .with("[server]\nlisten = \"127.0.0.1:0\"\n")
            .set("drain_delay", "0s")
            .raw_text(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env("SWITCHYARD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    // Read up to the line that says where it listens, then never again: with a line a
    // request at `info`, the pipe fills after a few hundred.
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let listening = tokio::task::spawn_blocking(move || {
        let mut stderr = stderr;
        let mut line = String::new();
        while stderr.read_line(&mut line).is_ok_and(|read| read > 0) {
            if line.contains("switchyard listening")
                && let Some(addr) = line.split("addr=").nth(1)
            {
                return Some((addr.trim().to_owned(), stderr));
            }
            line.clear();
        }
        None
    });
    let (addr, unread) = tokio::time::timeout(BOUND, listening)
        .await
        .expect("the gateway says where it listens in time")
        .unwrap()
        .expect("the gateway says where it listens");
    let client = client();
    let requests = 1_500;
    let endpoint = format!("http://{addr}/v1/chat/completions");
    let statuses: Vec<u16> = futures_util::stream::iter(0..requests)
        .map(|_| {
            let (client, endpoint) = (&client, &endpoint);
            async move {
                let response = client.post(endpoint).json(&chat("r")).send().await.unwrap();
                let status = response.status().as_u16();
                response.bytes().await.unwrap();
                status
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200));
    // A clean exit first writes every record the log still holds, so once the process is
    // gone they are all in the store. A writer held up by stderr never gets there.
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let exit = tokio::task::spawn_blocking(move || child.wait());
    let exited = tokio::time::timeout(BOUND, exit).await;
    if exited.is_err() {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    drop(unread);
    let _ = std::fs::remove_file(&config);
    let status = exited
        .unwrap_or_else(|_| {
            panic!(
                "{} of {requests} rows stored, and the gateway never exited: the writer waits on stderr",
                db.logged_ids().len()
            )
        })
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(db.logged_ids().len(), requests, "a row for each request");
}

/// Requests sent at once and answered before the gateway is killed.
async fn answered_before_kill(gateway: &Spawned, count: usize) -> BTreeSet<String> {
    let endpoint = format!("{}/v1/chat/completions", gateway.url);
    let client = client();
    let ids: Vec<String> = futures_util::stream::iter(0..count)
        .map(|_| {
            let (client, endpoint) = (&client, &endpoint);
            async move {
                let response = client.post(endpoint).json(&chat("r")).send().await.unwrap();
                assert_eq!(response.status(), 200);
                let id = header(&response, "x-switchyard-request-id").to_owned();
                response.bytes().await.unwrap();
                id
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    ids.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fsync_durability_kill_9_loses_no_answered_request() {
    let fake = scripted("up", []).await;
    let db = TempDb::new("fsync-kill");
    let config = served_from(&db, &fake)
        .with("[log]\ndurability = \"fsync\"\n")
        .raw_text();
    let mut gateway = Spawned::start(&config, QUIET);
    gateway.ready().await;
    let answered = answered_before_kill(&gateway, 400).await;
    // SIGKILL the moment the last answer is in: no flush, no shutdown.
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    drop(gateway);

    // The next start replays the journal into the store. The journal is opened, and said to
    // be replayed, before the gateway says it listens; a kill that came after the last batch
    // was stored left it empty, and nothing to replay.
    let again = Spawned::start(&config, QUIET);
    again.ready().await;
    let journaled = again
        .stderr
        .lock()
        .unwrap()
        .contains("replaying the spill journal");
    if journaled {
        again.said(REPLAYED, 0, BOUND).await;
    }
    let logged: BTreeSet<String> = db.logged_ids().into_iter().collect();
    assert!(
        answered.is_subset(&logged),
        "{} answered, {} of them not in the store after a restart",
        answered.len(),
        answered.difference(&logged).count()
    );
    assert_eq!(
        db.logged_ids().len(),
        logged.len(),
        "no request has two rows"
    );
    again.terminate();
}
