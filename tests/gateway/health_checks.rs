//! Active health checks: while a checked provider's breaker is open, the gateway's own
//! smallest request is its probe, every `every`; no user's request is ever the probe, and
//! the first check that passes gives the primary its traffic back.

use std::time::Duration;

use switchyard::fake::{Behavior, FakeHandle, FakeUpstream, Script, ScriptMode};
use switchyard::server::Gateway;
use switchyard::telemetry::{Outcome, RequestRecord};

use super::support::*;

/// Waits for the next health check's log row after the `seen` already read.
async fn next_check(gateway: &Gateway, seen: usize) -> RequestRecord {
    let telemetry = gateway.telemetry();
    let wait = async {
        loop {
            let checks: Vec<RequestRecord> = telemetry
                .recent()
                .into_iter()
                .filter(|r| r.outcome == Outcome::HealthCheck)
                .collect();
            if let Some(row) = checks.into_iter().nth(seen) {
                return row;
            }
            telemetry.wait_for_rows(telemetry.rows_written() + 1).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .expect("a health check is logged")
}

/// Route `r` = primary (checked every second) → secondary.
fn checked(primary: &FakeHandle, secondary: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("primary", primary)
        .with("health_check = { every = \"1s\" }\n")
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
}

fn always(behavior: Behavior) -> Script {
    Script {
        behaviors: vec![behavior],
        mode: ScriptMode::Cycle,
    }
}

#[tokio::test]
async fn while_open_only_health_checks_probe_and_a_passing_one_gives_the_traffic_back() {
    let primary = FakeUpstream::new("primary")
        .script(always(Behavior::status(500)))
        .start()
        .await
        .unwrap();
    let secondary = scripted("secondary", []).await;
    // A cooldown of 100 ms: without active checks, a user's request would be the probe after it.
    let gateway = checked(&primary, &secondary)
        .with(concat!(
            "[breaker]\nconsecutive_failures = 2\nmin_callers = 1\n",
            "cooldown_min = \"100ms\"\ncooldown = \"100ms\"\n",
        ))
        .with(OBSERVABILITY)
        .start()
        .await;
    for _ in 0..2 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    }
    // Open now. Users keep coming, every 20 ms, while two checks fail a second apart: the
    // 100 ms cooldown runs out long before each next check, and still no user's request is
    // the probe: each is served by the fallback, with step 0 skipped at no cost.
    let checks = |gateway: &Gateway| {
        gateway
            .telemetry()
            .recent()
            .into_iter()
            .filter(|r| r.outcome == Outcome::HealthCheck)
            .collect::<Vec<_>>()
    };
    let mut pace = tokio::time::interval(Duration::from_millis(20));
    let mut users = 0;
    while checks(&gateway).len() < 2 {
        assert!(users < 1_000, "two checks within 1,000 requests");
        pace.tick().await;
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
        assert_eq!(
            header(&response, "x-switchyard-attempts"),
            "1",
            "step 0 skipped"
        );
        users += 1;
    }
    for check in checks(&gateway) {
        assert_eq!(check.provider.as_ref().unwrap().as_str(), "primary");
        assert_eq!(check.error.as_deref(), Some("server_error"));
        assert_eq!(check.status, 500);
        assert_eq!(check.route, None);
    }
    let after_open: Vec<_> = primary.requests().into_iter().skip(2).collect();
    assert!(after_open.len() >= 2);
    for request in &after_open {
        let body = request.json();
        assert_eq!(body["max_tokens"], 1, "only checks reach the open primary");
        assert_eq!(body["model"], "model-a");
    }

    // The primary recovers: the next check passes and closes the breaker, and the very next
    // request is served by step 0 again.
    primary.set_script(always(Behavior::ok()));
    let check = loop {
        let seen = gateway
            .telemetry()
            .recent()
            .iter()
            .filter(|r| r.outcome == Outcome::HealthCheck)
            .count();
        let check = next_check(&gateway, seen).await;
        if check.error.is_none() {
            break check;
        }
    };
    assert_eq!(check.status, 200);
    assert!(check.tokens_out.is_some(), "a check's tokens are counted");
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-outcome"), "success");

    let metrics = observe(&gateway, "/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("outcome=\"health_check\""),
        "checks are counted apart from users' requests"
    );
}

#[tokio::test]
async fn a_check_more_often_than_every_second_is_refused_by_name() {
    let primary = scripted("primary", []).await;
    let text = TestGateway::new()
        .provider("primary", &primary)
        .with("health_check = { every = \"100ms\" }\n")
        .raw_text();
    let error = switchyard::config::Config::parse(&text)
        .unwrap_err()
        .to_string();
    assert!(error.contains("providers[0].health_check.every"), "{error}");
}

#[tokio::test]
async fn a_check_in_flight_does_not_hold_the_shutdown() {
    // The primary fails twice (the breaker opens), then never answers a check in time.
    let primary = scripted(
        "primary",
        [
            Behavior::status(500),
            Behavior::status(500),
            Behavior::ok().delay_ms(600_000),
        ],
    )
    .await;
    let secondary = scripted("secondary", []).await;
    let gateway = checked(&primary, &secondary)
        .with("[breaker]\nconsecutive_failures = 2\nmin_callers = 1\n")
        .with("[retry]\nattempt_timeout = \"300s\"\nrequest_deadline = \"600s\"\n")
        .start()
        .await;
    for _ in 0..2 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    }
    // The check is out, and will hang for minutes.
    primary.wait_until(|stats| stats.calls == 3).await;
    // Shutting down waits for clients' requests, not for the gateway's own check: the
    // bound is far under the check's 300 s attempt timeout.
    tokio::time::timeout(Duration::from_secs(30), gateway.shutdown())
        .await
        .expect("the shutdown does not wait on a health check")
        .unwrap();
}
