//! What a reload keeps: an open breaker stays open, and limit and retry-budget counts keep
//! counting.

use switchyard::fake::Behavior;

use super::super::support::*;
use super::{FromFile, TOKEN};

#[tokio::test]
async fn an_open_breaker_stays_open_across_a_reload() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
    let config = TestGateway::new()
        .fallback_chain(&primary, &secondary, ["m", "m"])
        .with("[breaker]\nconsecutive_failures = 1\ncooldown = \"60s\"\ncooldown_min = \"60s\"\n");
    let served = FromFile::start(&config).await;
    let response = post(&served.gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    let calls = primary.calls();
    assert!(calls >= 1);

    served.rewrite(&config.route("fresh", &[("secondary", "m2")], ""));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["needs_restart"].as_array().unwrap().is_empty(),
        "{body}"
    );

    for _ in 0..5 {
        let response = post(&served.gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    }
    assert_eq!(
        primary.calls(),
        calls,
        "the open breaker still skips the primary"
    );
    let breakers = get_json(
        &format!("{}/admin/breakers", served.gateway.admin_url()),
        TOKEN,
    )
    .await;
    let open = breakers["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["provider"] == "primary" && b["state"] == "open");
    assert!(open, "{breakers}");
}

#[tokio::test]
async fn limit_counts_survive_a_reload_and_the_role_takes_its_new_limit() {
    let up = scripted("up", []).await;
    let config = |per_minute: u32| {
        TestGateway::new()
            .with("[auth]\nrequired = false\ndefault_role = \"ae\"\n")
            .with("[[roles]]\nname = \"ae\"\nwindow = \"sliding\"\n")
            .set("requests_per_minute", per_minute)
            .provider("up", &up)
            .route("r", &[("up", "m")], "")
    };
    let served = FromFile::start(&config(2)).await;
    for _ in 0..2 {
        assert_eq!(post(&served.gateway, &chat("r")).await.status(), 200);
    }
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 429);

    // One more a minute: the two already counted still count.
    served.rewrite(&config(3).route("fresh", &[("up", "m2")], ""));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(post(&served.gateway, &chat("fresh")).await.status(), 200);
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 429);
}

#[tokio::test]
async fn retry_budget_counts_survive_a_reload_and_its_new_floor_applies_at_once() {
    // The primary answers 429 to everything: each request retries it in place twice (3
    // attempts a step), as far as the budget allows, then falls back.
    let (primary, secondary) = primary_and_secondary([Behavior::status(429)]).await;
    // Only the floor: `per_second` × 10 retries in place per 10 s.
    let config = |per_second: u32| {
        TestGateway::new()
            .provider("primary", &primary)
            .provider("secondary", &secondary)
            .route("r", &[("primary", "m"), ("secondary", "m")], "")
            .with("[breaker]\nconsecutive_failures = 1000000\nmin_requests = 1000000\n")
            .with("[retry]\nbudget_percent = 0\nbackoff_base = \"1ms\"\nbackoff_max = \"5ms\"\n")
            .set("min_retries_per_second", per_second)
    };
    let served = FromFile::start(&config(1)).await;
    let fall_back = async |requests: usize| {
        for _ in 0..requests {
            let response = post(&served.gateway, &chat("r")).await;
            assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
        }
    };
    fall_back(11).await;
    assert_eq!(
        primary.calls(),
        11 + 10,
        "the floor's 10 retries, then none"
    );

    served.rewrite(&config(2));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["needs_restart"].as_array().unwrap().is_empty(),
        "{body}"
    );
    // 20 per 10 s now, and the 10 already made still count: 10 more, not 20.
    fall_back(11).await;
    assert_eq!(primary.calls(), 21 + 11 + 10);
    assert_eq!(secondary.calls(), 22);
}
