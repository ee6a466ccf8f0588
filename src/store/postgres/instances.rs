//! What only PostgreSQL does: several instances migrating, writing and listening at once.
//! Run by the `services` test binary, which lists them as skipped where no PostgreSQL
//! answers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fixture: a check stops at the first surprise"
)]

use std::time::Duration;

use super::testdb::TestDb;
use super::{Listener, PgStore, migrate};
use crate::store::contract::provider_key;

/// Needs a multi-threaded runtime: the instances race.
pub async fn instances_opening_an_empty_database_at_once_migrate_it_once() {
    let db = TestDb::create().await;
    let url = db.url();
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PgStore::open(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().expect("every instance opens the store"));
    }
    let client = stores[0].client().await.unwrap();
    let versions: Vec<i64> = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<i64> = (1..=migrate::VERSIONS as i64).collect();
    assert_eq!(versions, expected, "each migration ran once");
}

/// Needs a multi-threaded runtime: the instances race.
pub async fn rotations_on_two_instances_at_once_get_distinct_versions() {
    let db = TestDb::create().await;
    let a = PgStore::open(&db.url()).await.unwrap();
    let b = PgStore::open(&db.url()).await.unwrap();
    let puts: Vec<_> = (0..10)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { store.put_provider_key(provider_key("main", &[i])).await })
        })
        .collect();
    let mut versions = Vec::new();
    for put in puts {
        versions.push(put.await.unwrap().expect("no rotation fails"));
    }
    versions.sort();
    assert_eq!(versions, (1..=10).collect::<Vec<i64>>());
    let active = a.provider_keys().await.unwrap();
    assert_eq!(active.iter().filter(|r| r.usable(0)).count(), 1);
}

/// Two instances on `db`: one to write, one listening, its listener connected.
async fn writer_and_listener(db: &TestDb) -> (PgStore, PgStore, Listener) {
    let writer = PgStore::open(&db.url()).await.unwrap();
    let watcher = PgStore::open(&db.url()).await.unwrap();
    let mut listener = watcher.listen();
    // The first wake-up comes with the connection: anything may have changed before it.
    tokio::time::timeout(Duration::from_secs(10), listener.changed())
        .await
        .expect("the listener connects");
    (writer, watcher, listener)
}

/// Needs a multi-threaded runtime: the instances race.
pub async fn a_change_on_one_instance_wakes_the_listener_of_another() {
    let db = TestDb::create().await;
    let (writer, watcher, mut listener) = writer_and_listener(&db).await;
    writer
        .put_provider_key(provider_key("main", b"one"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), listener.changed())
        .await
        .expect("the rotation is announced");
    assert_eq!(watcher.generation().await.unwrap(), 1);
}

/// Needs a multi-threaded runtime: the instances race.
pub async fn a_listener_cut_off_reconnects_and_wakes_for_what_it_may_have_missed() {
    let db = TestDb::create().await;
    let (writer, _watcher, mut listener) = writer_and_listener(&db).await;
    let client = writer.client().await.unwrap();
    let cut = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(cut.len(), 1, "one listening connection");
    // Made while no connection listens: its NOTIFY is lost, the reconnection makes up for it.
    writer
        .put_provider_key(provider_key("main", b"one"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), listener.changed())
        .await
        .expect("the listener wakes after reconnecting");
}
