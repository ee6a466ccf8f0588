//! The tests that need a service beside the gateway: the machine's Redis or PostgreSQL, or a
//! `redis-server`, a PostgreSQL or a Chromium a test runs itself; with them, the other tests
//! of the files they share.
//!
//! libtest cannot decide at run time that a test is skipped, so this binary has a harness of
//! its own (libtest-mimic, `harness = false`). It looks for each service once, before any test
//! starts. A test whose service is missing is marked ignored, and the run ends with the list
//! of what it skipped and why. With `SWITCHYARD_REQUIRE_SERVICES=1` (as `scripts/test`, and so
//! CI, sets it) such a test runs anyway and fails, so nothing is skipped there.

// Tests stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::future::Future;

use libtest_mimic::{Arguments, Trial};
use switchyard::store::postgres::instances;
use switchyard::store::postgres::testdb::TestDb;
use switchyard::store::{Store, contract};

use gateway::services::Need;

mod gateway {
    // The gateway binary's modules, for the helpers these tests share with its tests. Their
    // own tests are left out of a binary with its own harness, and what only those use is
    // unused here.
    #[allow(dead_code, unused_imports)]
    pub mod budgets;
    #[allow(dead_code, unused_imports)]
    pub mod key_budgets;
    #[allow(dead_code, unused_imports)]
    pub mod limits;
    #[allow(dead_code, unused_imports)]
    pub mod logqueue;
    #[allow(dead_code, unused_imports)]
    pub mod support;
    #[allow(dead_code, unused_imports)]
    pub mod telemetry;
    #[allow(dead_code, unused_imports)]
    pub mod virtual_keys;

    // Every test in these is a `pub fn` listed below: one left out is dead code, which the
    // lints refuse, and a `#[test]` attribute here would be dropped (see
    // `no_test_here_is_marked_for_a_harness_that_is_not_here`).
    pub mod budgets_on_redis;
    pub mod cache_shared;
    pub mod cluster;
    pub mod cluster_breakers;
    pub mod cluster_limits;
    pub mod cluster_revoke;
    pub mod dashboard;
    pub mod key_budgets_on_postgres;
    pub mod limits_on_redis;
    pub mod managed_services;
    pub mod pg_outage;
    pub mod redis_faults;
    pub mod services;
}

/// `runtime [needs] path;` for each test: `sync` for a plain `#[test]`, `current` for a
/// `#[tokio::test]`, `threads(n)` for one with `flavor = "multi_thread", worker_threads = n`.
macro_rules! tests {
    (@run sync $path:path) => { Box::new(|| $path()) };
    (@run current $path:path) => { Box::new(|| drive(None, $path())) };
    (@run threads($threads:literal) $path:path) => { Box::new(|| drive(Some($threads), $path())) };
    ($($runtime:ident $(($threads:literal))? [$($need:ident),*] $($path:ident)::+;)*) => {
        vec![$(
            Test {
                name: stringify!($($path)::+)
                    .split_whitespace()
                    .collect::<String>()
                    .replacen("gateway::", "", 1),
                needs: vec![$(Need::$need),*],
                run: tests!(@run $runtime $(($threads))? $($path)::+),
            }
        ),*]
    };
}

struct Test {
    name: String,
    needs: Vec<Need>,
    run: Box<dyn FnOnce() + Send>,
}

/// Runs `test` to its end on a runtime of its own: the current thread's, or `threads`
/// workers, as its `#[tokio::test]` attribute asked.
fn drive(threads: Option<usize>, test: impl Future<Output = ()>) {
    let mut builder = match threads {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(threads) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
    };
    builder.enable_all().build().unwrap().block_on(test);
}

fn gateway_tests() -> Vec<Test> {
    tests! {
        current [Redis] gateway::budgets_on_redis::the_scripts_are_idempotent_by_request_id;
        threads(2) [Redis] gateway::budgets_on_redis::settling_on_redis_returns_the_unused_part;
        threads(2) [Redis]
            gateway::budgets_on_redis::three_gateways_on_one_redis_admit_exactly_twenty_of_fifty;
        current [Redis]
            gateway::cache_shared::fifty_identical_misses_over_three_instances_make_one_upstream_call;
        current [Redis]
            gateway::cache_shared::an_answer_kept_by_one_instance_is_served_and_purged_by_another;
        current [Redis]
            gateway::cache_shared::every_key_the_cache_writes_in_redis_expires_within_the_routes_ttl;
        current [Redis]
            gateway::cache_shared::when_the_lock_holder_fails_a_waiter_on_another_instance_makes_its_own_call;
        current [RedisServer]
            gateway::cache_shared::a_redis_that_stops_mid_load_fails_no_request_and_is_used_again_once_back;
        current [RedisServer]
            gateway::cache_shared::a_redis_that_hangs_costs_a_request_its_timeout_not_its_answer;
        threads(2) [Postgres]
            gateway::cluster::three_instances_starting_at_once_on_an_empty_database_migrate_it_once;
        threads(2) [Postgres]
            gateway::cluster::three_thousand_requests_over_three_instances_are_three_thousand_rows;
        threads(2) [Postgres]
            gateway::cluster::a_provider_key_rotated_on_one_instance_is_sent_by_the_others_within_a_second;
        sync []
            gateway::cluster::check_and_serve_refuse_a_sslmode_they_do_not_know_and_name_a_store_they_cannot_reach;
        threads(4) [Redis]
            gateway::cluster_breakers::three_processes_open_together_send_one_probe_and_close_together;
        current [Redis] gateway::cluster_breakers::a_reset_on_one_instance_closes_the_breaker_on_all;
        current [Redis] gateway::cluster_breakers::an_instance_that_joins_later_reads_the_open_breakers;
        current [RedisServer]
            gateway::cluster_breakers::without_redis_breakers_are_local_and_rejoin_when_it_returns;
        current [] gateway::cluster_breakers::without_a_cluster_breakers_stay_local;
        threads(2) [Redis, Postgres]
            gateway::cluster_limits::three_processes_admit_exactly_20_of_25_concurrent_requests_with_one_key;
        threads(2) [Redis, Postgres]
            gateway::cluster_limits::kill_9_of_one_instance_mid_load_leaves_two_serving_with_the_limit_exact;
        threads(2) [Postgres]
            gateway::cluster_revoke::a_key_revoked_on_one_instance_is_refused_by_the_others_within_a_second;
        threads(2) [Postgres]
            gateway::cluster_revoke::a_key_revoked_through_a_s_admin_api_is_refused_by_the_others_within_a_second;
        threads(2) [Chromium]
            gateway::dashboard::the_dashboard_draws_the_scorecard_in_headless_chromium;
        threads(2) [Chromium]
            gateway::dashboard::on_the_client_port_the_dashboard_opens_with_the_token_as_basic_password;
        threads(2) [Postgres]
            gateway::key_budgets_on_postgres::a_budget_changed_on_one_gateway_reaches_another_on_postgresql;
        threads(2) [Redis] gateway::limits_on_redis::three_instances_admit_exactly_20_of_25_fifty_times;
        threads(2) [Redis] gateway::limits_on_redis::a_sliding_window_is_exact_across_instances_too;
        current [] gateway::limits_on_redis::a_closed_port_fails_closed_or_open_as_configured;
        current [RedisServer]
            gateway::limits_on_redis::a_redis_that_stops_and_comes_back_is_reconnected_by_itself;
        sync [PgServer] gateway::managed_services::postgres_over_tls_is_verified_as_sslmode_says;
        threads(2) [PgServer]
            gateway::managed_services::a_gateway_serves_with_its_store_over_verified_tls;
        threads(2) [RedisServer]
            gateway::managed_services::redis_over_tls_is_verified_and_counts_limits;
        threads(2) [PgServer]
            gateway::pg_outage::postgres_down_under_load_loses_no_row_and_duplicates_none;
        threads(2) [Postgres]
            gateway::pg_outage::a_store_that_stops_answering_is_spilled_not_waited_on;
        threads(2) [Postgres]
            gateway::pg_outage::a_stored_turn_read_from_a_hung_store_fails_within_the_timeout;
        threads(2) [Postgres]
            gateway::pg_outage::an_admin_call_to_a_hung_store_ends_within_its_deadline;
        threads(2) [Postgres]
            gateway::pg_outage::a_listening_connection_gone_silent_is_given_up_and_remade;
        current [RedisServer]
            gateway::redis_faults::readiness_comes_back_with_redis_without_any_request;
        current [RedisServer]
            gateway::redis_faults::readiness_notices_redis_going_away_without_any_request;
        current [RedisServer]
            gateway::redis_faults::a_cut_connection_costs_no_spurious_503_when_failing_closed;
        current [RedisServer]
            gateway::redis_faults::a_cut_connection_admits_no_extra_request_when_failing_open;
        current [RedisServer] gateway::redis_faults::a_lost_reply_holds_no_slot_and_counts_once;
        current [RedisServer]
            gateway::redis_faults::a_slot_is_released_over_a_new_connection_after_a_cut;
        threads(2) [RedisServer]
            gateway::redis_faults::a_slot_outlives_its_lease_while_its_stream_lives;
        current [] gateway::redis_faults::failing_open_still_holds_each_instance_to_the_limit;
        current [RedisServer] gateway::redis_faults::the_health_check_ends_with_the_gateway;
        current [RedisServer]
            gateway::redis_faults::releases_missed_while_redis_was_away_are_replayed_when_it_answers;
        threads(2) [RedisServer]
            gateway::redis_faults::a_slow_redis_holds_no_request_when_failing_closed;
        threads(2) [RedisServer]
            gateway::redis_faults::a_slow_redis_holds_no_request_when_failing_open;
    }
}

/// The store's own checks on PostgreSQL: its contract (which the library's unit tests run on
/// SQLite), and what several instances do at once.
fn store_tests() -> Vec<Test> {
    let mut tests = tests! {
        threads(2) [Postgres]
            instances::instances_opening_an_empty_database_at_once_migrate_it_once;
        threads(2) [Postgres] instances::rotations_on_two_instances_at_once_get_distinct_versions;
        threads(2) [Postgres] instances::a_change_on_one_instance_wakes_the_listener_of_another;
        threads(2) [Postgres]
            instances::a_listener_cut_off_reconnects_and_wakes_for_what_it_may_have_missed;
    };
    for test in &mut tests {
        test.name = format!("store::postgres::{}", test.name);
    }
    for (name, check) in contract::checks() {
        tests.push(Test {
            name: format!("store::contract::{name}"),
            needs: vec![Need::Postgres],
            run: Box::new(move || {
                drive(None, async move {
                    let db = TestDb::create().await;
                    let store = Store::open(&db.url()).await.unwrap();
                    check("postgres", &store).await;
                });
            }),
        });
    }
    tests
}

fn main() {
    let arguments = Arguments::from_args();
    let required = std::env::var("SWITCHYARD_REQUIRE_SERVICES").is_ok_and(|v| v == "1");
    let mut tests: Vec<Test> = gateway_tests().into_iter().chain(store_tests()).collect();
    tests.push(Test {
        name: "no_test_here_is_marked_for_a_harness_that_is_not_here".into(),
        needs: Vec::new(),
        run: Box::new(no_test_here_is_marked_for_a_harness_that_is_not_here),
    });

    // Each service looked for once, and only for the tests this run selects.
    let mut missing: BTreeMap<Need, Option<String>> = BTreeMap::new();
    for test in tests.iter().filter(|t| selected(&arguments, &t.name)) {
        for need in &test.needs {
            missing.entry(*need).or_insert_with(|| need.missing());
        }
    }

    let mut skipped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let trials = tests
        .into_iter()
        .map(|test| {
            let absent: Vec<String> = test
                .needs
                .iter()
                .filter_map(|need| missing.get(need).cloned().flatten())
                .collect();
            let skip = !absent.is_empty() && !required;
            if skip && selected(&arguments, &test.name) {
                for why in &absent {
                    skipped
                        .entry(why.clone())
                        .or_default()
                        .push(test.name.clone());
                }
            }
            let run = test.run;
            Trial::test(test.name, move || {
                if !absent.is_empty() {
                    return Err(format!(
                        "{}, and SWITCHYARD_REQUIRE_SERVICES=1 forbids skipping",
                        absent.join("; ")
                    )
                    .into());
                }
                run();
                Ok(())
            })
            .with_ignored_flag(skip)
        })
        .collect();

    let conclusion = libtest_mimic::run(&arguments, trials);
    if !skipped.is_empty() {
        println!("Skipped here, since a service they need is missing");
        println!(
            "(`scripts/test` installs and starts them; SWITCHYARD_REQUIRE_SERVICES=1 fails these instead):"
        );
        for (why, names) in &skipped {
            println!("  {why}:");
            for name in names {
                println!("    {name}");
            }
        }
        println!();
    }
    conclusion.exit();
}

/// Whether this run's filter (`cargo test --test services <filter>`) selects the test, as
/// libtest-mimic decides it.
fn selected(arguments: &Arguments, name: &str) -> bool {
    let matches = |filter: &str| {
        if arguments.exact {
            name == filter
        } else {
            name.contains(filter)
        }
    };
    arguments.filter.as_deref().is_none_or(matches) && !arguments.skip.iter().any(|s| matches(s))
}

/// A `#[test]` or `#[tokio::test]` in a module only this binary compiles would never run: this
/// harness drops such tests without a word. Each test here is a `pub fn` in the lists above.
fn no_test_here_is_marked_for_a_harness_that_is_not_here() {
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
    let declared = |root: &str| -> Vec<String> {
        let text = std::fs::read_to_string(format!("{tests}/{root}")).unwrap();
        text.lines()
            .filter_map(|line| {
                let line = line.trim();
                line.strip_prefix("pub mod ").or(line.strip_prefix("mod "))
            })
            .filter_map(|name| name.strip_suffix(';'))
            .map(str::to_owned)
            .collect()
    };
    let in_gateway = declared("gateway.rs");
    let only_here: Vec<String> = declared("services.rs")
        .into_iter()
        .filter(|name| !in_gateway.contains(name))
        .collect();
    assert!(
        only_here.contains(&"redis_faults".to_owned()),
        "{only_here:?}"
    );
    for name in only_here {
        let text = std::fs::read_to_string(format!("{tests}/gateway/{name}.rs")).unwrap();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            assert!(
                !(line.starts_with("#[test]") || line.starts_with("#[tokio::test")),
                "tests/gateway/{name}.rs:{}: `{line}` would never run: list the test in \
                 tests/services.rs instead",
                number + 1
            );
        }
    }
}
