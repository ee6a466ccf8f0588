//! The store's contract, one check per behaviour, each run against every backend: SQLite
//! in memory by this module's unit tests, and a fresh PostgreSQL database of each check's own
//! by the `services` test binary (which lists the checks it skips where no PostgreSQL
//! answers), through [`checks`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fixture: a check stops at the first surprise"
)]

use std::future::Future;
use std::pin::Pin;

use super::request_log::{LogAttempt, LogQuery, LogRow};
use super::rollup::{Rollup, Series};
use super::sqlite::hash_key;
use super::*;

mod updates;

use updates::{
    an_update_changes_a_live_key_and_bumps_the_generation,
    responses_are_found_only_in_their_scope_and_purged_by_age,
};

/// One check: the backend's name (for failure messages) and a fresh store of it.
pub type Check = for<'a> fn(&'a str, &'a Store) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Every check, by name, and the SQLite unit test of each.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        /// Every check of the contract, by name.
        pub fn checks() -> Vec<(&'static str, Check)> {
            vec![$((stringify!($check), |backend, store| Box::pin($check(backend, store)))),*]
        }

        #[cfg(test)]
        mod on_sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let store = super::Store::open("sqlite::memory:").await.unwrap();
                    super::$check("sqlite", &store).await;
                }
            )*
        }
    };
}

contract!(
    virtual_keys_round_trip_and_revocation_moves_the_generation,
    provider_keys_rotate_roll_back_purge_and_go,
    the_first_master_key_check_value_is_kept,
    meta_values_are_set_replaced_and_leave_the_generation_alone,
    log_rows_round_trip_filter_and_purge,
    a_replayed_batch_is_stored_and_rolled_up_once,
    an_update_changes_a_live_key_and_bumps_the_generation,
    responses_are_found_only_in_their_scope_and_purged_by_age,
);

fn virtual_key(id: &str, secret: &str) -> VirtualKey {
    VirtualKey {
        id: id.into(),
        hash: hash_key(secret),
        prefix: secret[..9].into(),
        user: "ana".into(),
        role: "ae".into(),
        permissions: vec!["debug".into()],
        models: Some(vec!["smart".into(), "groq/llama".into()]),
        limits: LimitOverrides {
            requests_per_minute: Some(5),
            max_concurrent: Some(2),
            budget_per_day_micros: Some(12_500_000),
            // The most the store keeps: both backends hold it in a signed 64-bit column.
            budget_per_month_micros: Some(i64::MAX as u64),
            ..LimitOverrides::default()
        },
        created_ms: 1,
        revoked_ms: None,
        expires_ms: None,
    }
}

/// A provider key `key_id` of provider `openai`, sealed as `secret` (not a real sealing).
pub(crate) fn provider_key(key_id: &str, secret: &[u8]) -> NewProviderKey {
    NewProviderKey {
        provider: "openai".into(),
        key_id: key_id.into(),
        sealed: Sealed {
            nonce: vec![7; 12],
            ciphertext: secret.to_vec(),
        },
        weight: 3,
        expires_ms: None,
    }
}

fn states(rows: &[ProviderKeyRow]) -> Vec<(&str, i64, KeyState)> {
    rows.iter()
        .map(|r| (r.key_id.as_str(), r.version, r.state))
        .collect()
}

fn log_row(id: &str, time_ms: i64, outcome: &str) -> LogRow {
    LogRow {
        id: id.into(),
        time_ms,
        key_id: Some("k1".into()),
        user: Some("ana".into()),
        route: Some("r".into()),
        outcome: outcome.into(),
        step: Some(0),
        provider: Some("p".into()),
        model: Some("m".into()),
        attempts: vec![LogAttempt {
            step: 0,
            provider: "p".into(),
            model: "m".into(),
            failure: None,
            status: Some(200),
            latency_ms: 1.5,
            reached_upstream: true,
            hedge: false,
        }],
        status: 200,
        latency_ms: 2.0,
        ttft_ms: Some(1.0),
        overhead_ms: 0.5,
        tokens_in: Some(3),
        tokens_out: Some(4),
        cost_usd: Some(0.25),
        stream: false,
        partial: false,
        error: Some("none".into()),
        cache: Some("hit".into()),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
    }
}

async fn overall_requests(store: &Store) -> u64 {
    store
        .fold_rollups(-1, 0u64, |n, rollup: Rollup| {
            if rollup.series == Series::Overall {
                *n += rollup.data.counts.requests;
            }
        })
        .await
        .unwrap()
}

pub async fn virtual_keys_round_trip_and_revocation_moves_the_generation(
    backend: &str,
    store: &Store,
) {
    let secret = "sy-abcdefghijklmnop";
    let before = store.generation().await.unwrap();
    store
        .insert_virtual_key(virtual_key("k1", secret))
        .await
        .unwrap();
    assert!(store.generation().await.unwrap() > before, "{backend}");
    assert_eq!(
        store.virtual_keys().await.unwrap(),
        vec![virtual_key("k1", secret)],
        "{backend}"
    );
    let before = store.generation().await.unwrap();
    assert!(store.revoke_virtual_key(secret).await.unwrap(), "{backend}");
    assert!(
        !store.revoke_virtual_key("k1").await.unwrap(),
        "{backend}: already revoked"
    );
    assert!(store.generation().await.unwrap() > before, "{backend}");
    assert!(store.virtual_keys().await.unwrap()[0].revoked_ms.is_some());
}

pub async fn provider_keys_rotate_roll_back_purge_and_go(backend: &str, store: &Store) {
    assert_eq!(
        store
            .put_provider_key(provider_key("main", b"one"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .put_provider_key(provider_key("main", b"two"))
            .await
            .unwrap(),
        2
    );
    let rows = store.provider_keys().await.unwrap();
    assert_eq!(
        states(&rows),
        [
            ("main", 1, KeyState::History),
            ("main", 2, KeyState::Active)
        ],
        "{backend}"
    );
    assert_eq!(rows[1].sealed.ciphertext, b"two", "{backend}");
    assert_eq!(rows[1].weight, 3, "{backend}");
    let rolled = store.rollback_provider_key("openai", "main", 60_000);
    assert_eq!(rolled.await.unwrap(), Some(1), "{backend}");
    assert_eq!(
        states(&store.provider_keys().await.unwrap()),
        [
            ("main", 1, KeyState::Active),
            ("main", 2, KeyState::Retired)
        ],
        "{backend}"
    );
    let again = store.rollback_provider_key("openai", "main", 60_000);
    assert_eq!(again.await.unwrap(), None, "{backend}: nothing older");
    // A window of -1 ms: the retired version is already outside it.
    assert_eq!(store.purge_provider_keys(-1).await.unwrap(), 1, "{backend}");
    let mut expired = provider_key("expired", b"old");
    expired.expires_ms = Some(1);
    store.put_provider_key(expired).await.unwrap();
    assert_eq!(
        store.purge_provider_keys(86_400_000).await.unwrap(),
        1,
        "{backend}"
    );
    let before = store.generation().await.unwrap();
    assert!(store.remove_provider_key("openai", "main").await.unwrap());
    assert!(!store.remove_provider_key("openai", "main").await.unwrap());
    assert!(store.generation().await.unwrap() > before, "{backend}");
    assert!(store.provider_keys().await.unwrap().is_empty(), "{backend}");
}

pub async fn the_first_master_key_check_value_is_kept(backend: &str, store: &Store) {
    let first = Sealed {
        nonce: vec![1; 12],
        ciphertext: vec![1, 2, 3],
    };
    let second = Sealed {
        nonce: vec![2; 12],
        ciphertext: vec![4, 5, 6],
    };
    assert_eq!(store.master_key_check(first.clone()).await.unwrap(), first);
    assert_eq!(
        store.master_key_check(second).await.unwrap(),
        first,
        "{backend}"
    );
}

pub async fn meta_values_are_set_replaced_and_leave_the_generation_alone(
    backend: &str,
    store: &Store,
) {
    let generation = store.generation().await.unwrap();
    assert_eq!(
        store.meta_value("env_seed:a").await.unwrap(),
        None,
        "{backend}"
    );
    store.set_meta_value("env_seed:a", i64::MIN).await.unwrap();
    store.set_meta_value("env_seed:b", 7).await.unwrap();
    store.set_meta_value("env_seed:a", -3).await.unwrap();
    assert_eq!(
        store.meta_value("env_seed:a").await.unwrap(),
        Some(-3),
        "{backend}"
    );
    assert_eq!(
        store.meta_value("env_seed:b").await.unwrap(),
        Some(7),
        "{backend}"
    );
    assert_eq!(store.generation().await.unwrap(), generation, "{backend}");
}

/// The console's filters, in the store: a virtual key, one request, a status range.
async fn log_rows_filter_by_key_id_and_status(backend: &str, store: &Store) {
    let mut other = log_row("d", 4_000, "error");
    other.key_id = Some("k2".into());
    other.status = 503;
    let mut limited = log_row("e", 5_000, "rejected");
    limited.status = 429;
    store.insert_log(vec![other, limited]).await.unwrap();
    let ids = |query: LogQuery| async move {
        let rows = store.query_log(query).await.unwrap();
        rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    let key = LogQuery {
        key_id: Some("k2".into()),
        ..LogQuery::default()
    };
    assert_eq!(ids(key).await, ["d"], "{backend}");
    let one = LogQuery {
        id: Some("c".into()),
        ..LogQuery::default()
    };
    assert_eq!(ids(one).await, ["c"], "{backend}");
    let server_errors = LogQuery {
        status: Some((500, 599)),
        ..LogQuery::default()
    };
    assert_eq!(ids(server_errors).await, ["d"], "{backend}");
    let exact = LogQuery {
        status: Some((429, 429)),
        key_id: Some("k1".into()),
        ..LogQuery::default()
    };
    assert_eq!(ids(exact).await, ["e"], "{backend}");
}

pub async fn log_rows_round_trip_filter_and_purge(backend: &str, store: &Store) {
    let rows = vec![
        log_row("a", 1_000, "success"),
        log_row("b", 2_000, "fallback"),
        log_row("c", 3_000, "success"),
    ];
    assert_eq!(store.insert_log(rows.clone()).await.unwrap(), 3);
    assert_eq!(
        store.query_log(LogQuery::default()).await.unwrap(),
        rows,
        "{backend}"
    );
    let since = LogQuery {
        since_ms: Some(2_000),
        outcome: Some("success".into()),
        ..LogQuery::default()
    };
    assert_eq!(store.query_log(since).await.unwrap(), vec![rows[2].clone()]);
    let window = LogQuery {
        since_ms: Some(1_500),
        until_ms: Some(3_000),
        user: Some("ana".into()),
        route: Some("r".into()),
        ..LogQuery::default()
    };
    assert_eq!(
        store.query_log(window).await.unwrap(),
        vec![rows[1].clone()]
    );
    let nobody = LogQuery {
        user: Some("nobody".into()),
        ..LogQuery::default()
    };
    assert!(
        store.query_log(nobody).await.unwrap().is_empty(),
        "{backend}"
    );
    let newest = LogQuery {
        limit: Some(2),
        ..LogQuery::default()
    };
    let ids: Vec<_> = store
        .query_log(newest)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["b", "c"], "{backend}");
    assert_eq!(overall_requests(store).await, 3, "{backend}");
    assert_eq!(store.purge_log(2_500).await.unwrap(), 2, "{backend}");
    assert_eq!(store.count_log().await.unwrap(), 1, "{backend}");
    log_rows_filter_by_key_id_and_status(backend, store).await;
}

pub async fn a_replayed_batch_is_stored_and_rolled_up_once(backend: &str, store: &Store) {
    let now = now_ms();
    let rows = vec![log_row("a", now, "success"), log_row("b", now, "fallback")];
    assert_eq!(store.insert_log(rows.clone()).await.unwrap(), 2);
    let again = vec![rows[1].clone(), log_row("c", now, "success")];
    assert_eq!(
        store.insert_log(again).await.unwrap(),
        1,
        "{backend}: only c is new"
    );
    assert_eq!(store.count_log().await.unwrap(), 3, "{backend}");
    assert_eq!(overall_requests(store).await, 3, "{backend}");
    let routes = store
        .fold_rollups(0, Vec::new(), |seen, rollup: Rollup| {
            if let Series::Route(route) = &rollup.series {
                seen.push((route.clone(), rollup.data.counts.fallback));
            }
        })
        .await
        .unwrap();
    assert_eq!(routes, [("r".to_owned(), 1)], "{backend}");
}
