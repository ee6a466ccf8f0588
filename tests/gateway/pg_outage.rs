//! PostgreSQL stopped under load and started again: requests keep being served (keys from
//! the gateway's snapshot, rows into the spill journal), and once the store is back every
//! answered request's row is in it exactly once. The test runs a PostgreSQL of its own on a
//! spare port; the shared one is never stopped.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use switchyard::fake::FakeHandle;
use switchyard::store::postgres::testdb::TestDb;
use tokio::time::Instant;

use super::logqueue::{QUIET, Spawned};
use super::redis_faults::proxy::Proxy;
use super::services::PgServer;
use super::support::*;

/// The store stays down for at least this many requests answered meanwhile, so the outage
/// spans many writer retries and journal batches at any speed...
const ANSWERED_DURING_OUTAGE: usize = 2000;
/// ...and for at least this long (the issue's figure): forty of the writer's half-second
/// retries against a store that refuses them, with the journal taking every batch.
const OUTAGE: Duration = Duration::from_secs(20);
/// A master key every process of the test shares.
const MASTER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

async fn row_ids(url: &str) -> Option<Vec<String>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(connection);
    let rows = client.query("SELECT id FROM request_log", &[]).await.ok()?;
    Some(rows.iter().map(|r| r.get(0)).collect())
}

pub async fn postgres_down_under_load_loses_no_row_and_duplicates_none() {
    let test = "postgres_down_under_load_loses_no_row_and_duplicates_none";
    let server = PgServer::start();
    let db = TestDb::create_on(&server.url()).await;
    let fake = scripted("up", []).await;
    let head = TestGateway::new()
        .with("[auth]\nrequired = true\n[store]\n")
        .set("url", db.url());
    let (gateway, config) = start_gateway(head, &fake).await;
    let key = create_key(&config);

    let stop = Arc::new(AtomicBool::new(false));
    let load = (0..4).map(|_| {
        let (url, key, stop) = (gateway.url.clone(), key.clone(), stop.clone());
        tokio::spawn(async move {
            let client = client();
            let mut answered = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let response = client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&chat("r"))
                    .send()
                    .await
                    .unwrap();
                // Auth comes from the snapshot: the outage refuses no one.
                assert_eq!(response.status(), 200);
                answered.push(header(&response, "x-switchyard-request-id").to_owned());
            }
            answered
        })
    });
    let load: Vec<_> = load.collect();
    let before = fake.calls();
    fake.wait_until(|s| s.calls >= before + 50).await;
    server.stop();
    let down_at = Instant::now();
    let during = fake.calls();
    fake.wait_until(|s| s.calls >= during + ANSWERED_DURING_OUTAGE)
        .await;
    // Not a wait for something to happen: the fault is held this long while the load runs.
    tokio::time::sleep_until(down_at + OUTAGE).await;
    eprintln!(
        "{test}: PostgreSQL was down for {:?}, {} requests answered meanwhile",
        down_at.elapsed(),
        fake.calls() - during
    );
    // Nothing journaled can reach the store before it is back, so the writer's word that its
    // journal is replayed can only come after this.
    let recovered = gateway.stderr_len();
    server.restart();
    let after = fake.calls();
    fake.wait_until(|s| s.calls >= after + 50).await;
    stop.store(true, Ordering::Relaxed);
    let mut answered = Vec::new();
    for worker in load {
        answered.extend(worker.await.unwrap());
    }
    let answered_ids: BTreeSet<String> = answered.iter().cloned().collect();
    assert_eq!(answered_ids.len(), answered.len());

    // Every answered row arrives once the store is back, exactly once: the journal's rows
    // by the replay, the last requests' by the clean exit, which writes what the queue holds.
    all_stored(gateway, recovered).await;
    let stored = row_ids(&db.url()).await.expect("PostgreSQL answers again");
    let stored_ids: BTreeSet<String> = stored.iter().cloned().collect();
    assert_eq!(stored.len(), stored_ids.len(), "no row twice");
    let missing: Vec<_> = answered_ids.difference(&stored_ids).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} rows missing, e.g. {missing:?}",
        answered_ids.len() - answered_ids.intersection(&stored_ids).count(),
        answered.len()
    );
    assert_eq!(
        stored.len(),
        answered.len(),
        "only the answered requests' rows, once each"
    );
}

/// The line the writer logs once its spill journal is all in the store.
const REPLAYED: &str = "the spill journal is replayed into the store";

/// Waits for `gateway`'s word, past byte `from` of its stderr, that its journal is replayed,
/// then stops it cleanly, which writes what its queue still holds: every row it was given is
/// in the store then, with nothing left to wait for.
async fn all_stored(gateway: Spawned, from: usize) {
    // Generous: the replay goes at the store's pace, on a machine running other tests.
    gateway.said(REPLAYED, from, Duration::from_secs(60)).await;
    let stderr = gateway.stderr.clone();
    gateway.terminate();
    let said = stderr.lock().unwrap();
    assert!(
        !said[from..].contains("rows stay in the spill journal"),
        "the journal was left unreplayed at exit:\n{said}"
    );
}

/// A database of the test's own, the proxy the test can freeze between it and the gateway,
/// and the `[store] url` that goes through the proxy.
async fn behind_a_proxy() -> (TestDb, Proxy, String) {
    let db = TestDb::create().await;
    let server = switchyard::store::postgres::testdb::server_url();
    let address = server.rsplit('@').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(address).await;
    let url = format!("postgres://postgres@{}/{}", proxy.addr(), db.name);
    (db, proxy, url)
}

/// `head` (its `[auth]`, `[store]` and `[log]`) and route `r` served by `fake`.
fn serving(head: TestGateway, fake: &FakeHandle) -> TestGateway {
    head.provider("up", fake).route("r", &[("up", "m")], "")
}

/// Auth off, and the store at `url` with a `[store] timeout` of 200 ms.
fn hung_store(url: &str) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = false\n[store]\n")
        .set("url", url)
        .with("timeout = \"200ms\"\n")
}

/// A gateway process whose config is `head` (its `[auth]`, `[store]` and `[log]`) and route
/// `r` served by `fake`, once it is ready; and that config.
async fn start_gateway(head: TestGateway, fake: &FakeHandle) -> (Spawned, String) {
    let config = serving(head, fake).raw_text();
    let mut started =
        Spawned::start_all(&[&config], QUIET, &[("SWITCHYARD_MASTER_KEY", MASTER_KEY)]);
    let gateway = started.remove(0);
    gateway.ready().await;
    (gateway, config)
}

fn create_key(config: &str) -> String {
    let path = std::env::temp_dir().join(format!("switchyard-cli-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, config).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "vkeys", "create", "--user", "ana", "--role", "default", "--config",
        ])
        .arg(&path)
        .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Places in the request log's queue for [`a_store_that_stops_answering_is_spilled_not_waited_on`]:
/// a writer waiting on the store fills it after this many requests.
const QUEUE: usize = 1024;

/// PostgreSQL stops answering with its connections open (a hung server, a network that drops
/// packets; a proxy the test controls holds every byte). The writer gives a batch `[store]
/// timeout`, then spills rows to the journal as for a store that refuses: requests are
/// answered far past what the queue holds, and once the store answers again every row is in
/// it exactly once.
pub async fn a_store_that_stops_answering_is_spilled_not_waited_on() {
    let (db, proxy, url) = behind_a_proxy().await;
    let fake = scripted("up", []).await;
    let head = hung_store(&url)
        .with("[log]\n")
        .set("queue_records", QUEUE as i64);
    let (gateway, _) = start_gateway(head, &fake).await;
    let (client, url) = (client(), format!("{}/v1/chat/completions", gateway.url));
    let mut answered = BTreeSet::new();
    let mut ask = async |during: &str| {
        let response = client.post(&url).json(&chat("r")).send().await.unwrap();
        let id = header(&response, "x-switchyard-request-id").to_owned();
        let status = response.status();
        assert_eq!(status, 200, "{during}: {}", response.text().await.unwrap());
        assert!(answered.insert(id));
    };
    ask("before the freeze").await;
    proxy.freeze(true);
    for n in 0..QUEUE * 3 {
        ask(&format!("request {n} while the store hangs")).await;
    }
    // Nothing gets through the frozen proxy, so the journal's replay is said after this.
    let thawed = gateway.stderr_len();
    proxy.freeze(false);

    all_stored(gateway, thawed).await;
    // Straight to the server, past the proxy.
    let stored = row_ids(&db.url()).await.expect("PostgreSQL answers");
    let stored_ids: BTreeSet<String> = stored.iter().cloned().collect();
    assert_eq!(stored.len(), stored_ids.len(), "no row twice");
    let missing: Vec<_> = answered.difference(&stored_ids).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} rows missing, e.g. {missing:?}",
        answered.difference(&stored_ids).count(),
        answered.len()
    );
    assert_eq!(stored.len(), answered.len(), "no row but the answered ones");
}

/// A request that reads stored Responses state from a store that stopped answering gets an
/// error once `[store] timeout` has passed, on a pooled connection the hang caught idle.
pub async fn a_stored_turn_read_from_a_hung_store_fails_within_the_timeout() {
    let (_db, proxy, url) = behind_a_proxy().await;
    let fake = scripted("up", []).await;
    let (gateway, _) = start_gateway(hung_store(&url), &fake).await;
    let responses = format!("{}/v1/responses", gateway.url);
    // Longer than any timeout of the gateway's own: only a wait on the store outlasts it.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let turn = send_for_json(
        client
            .post(&responses)
            .json(&serde_json::json!({"model": "r", "input": "Hello"})),
    )
    .await;
    let stored = format!("{responses}/{}", turn["id"].as_str().unwrap());
    assert_eq!(client.get(&stored).send().await.unwrap().status(), 200);
    proxy.freeze(true);
    let read = client.get(&stored).send().await;
    let read = read.expect("an answer, not a wait on the hung store");
    assert_eq!(read.status(), 500);
    proxy.freeze(false);
    gateway.terminate();
}

/// The admin API over a store that stops answering: each call ends with a 503 after a few of
/// the store's timeouts, instead of holding the operator's tool (and the reload lock) until
/// the store comes back; once it does, the admin API works again.
pub async fn an_admin_call_to_a_hung_store_ends_within_its_deadline() {
    let (_db, proxy, url) = behind_a_proxy().await;
    let fake = scripted("up", []).await;
    let config = serving(hung_store(&url), &fake).raw_text();
    const TOKEN: &str = "admin-token-for-a-hung-store";
    let mut started = Spawned::start_all(
        &[&config],
        QUIET,
        &[
            ("SWITCHYARD_MASTER_KEY", MASTER_KEY),
            ("SWITCHYARD_ADMIN_TOKEN", TOKEN),
        ],
    );
    let gateway = started.remove(0);
    gateway.ready().await;
    // Longer than any deadline of the gateway's own: only a wait on the store outlasts it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let keys = format!("{}/admin/keys", gateway.url);
    assert_eq!(
        client
            .get(&keys)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    proxy.freeze(true);
    let put = client
        .put(format!("{keys}/up"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"secret": "sk-while-hung-0001"}))
        .send()
        .await
        .expect("an answer, not a wait on the hung store");
    assert_eq!(put.status(), 503);
    let listed = client.get(&keys).bearer_auth(TOKEN).send().await;
    assert_eq!(listed.expect("an answer").status(), 503);
    proxy.freeze(false);
    proxy.cut();
    // A poll, for want of an event: the pool learns that a cut connection is closed only when
    // that connection's own task reads the close, and says so to no one, so a call may still
    // draw one and get a 503. The poll asks until a call lands on a fresh connection.
    let again = async {
        loop {
            let answer = client.get(&keys).bearer_auth(TOKEN).send().await.unwrap();
            if answer.status() == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("the admin API works again once the store answers");
    gateway.terminate();
}

/// The connection that listens for store changes, when its server goes silent with the socket
/// open (a hung host, a route that drops packets): no error ever arrives on it, so the
/// listener asks it a question now and then, gives it up when no answer comes, and connects
/// again, instead of waiting on it for ever while changes go unheard.
pub async fn a_listening_connection_gone_silent_is_given_up_and_remade() {
    let (_db, proxy, url) = behind_a_proxy().await;
    let store = switchyard::store::postgres::PgStore::open(&url)
        .await
        .unwrap();
    let mut listener = store.listen();
    // Its first connection counts as a change.
    tokio::time::timeout(Duration::from_secs(10), listener.changed())
        .await
        .expect("the listener connects");
    let before = proxy.accepted();
    proxy.freeze(true);
    // Its check every 15 s, 3 s for the answer, half a second before connecting again.
    tokio::time::timeout(Duration::from_secs(40), proxy.accepted_more_than(before))
        .await
        .expect("the silent connection is given up and a new one tried");
    proxy.freeze(false);
}
