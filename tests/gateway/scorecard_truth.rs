//! The scorecard tells what the gateway and its providers did: clients' own mistakes do not
//! lower availability, and a fallback is charged to the route and the step that failed, not
//! to the provider that rescued the request.

use serde_json::Value;
use switchyard::fake::Behavior;

use super::support::*;

async fn scorecard(gateway: &switchyard::server::Gateway) -> Value {
    let response = observe(gateway, "/v1/scorecard").await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_flood_of_client_404s_leaves_availability_at_100_percent() {
    let up = scripted("up", []).await;
    let gateway = TestGateway::new()
        .provider("up", &up)
        .route("r", &[("up", "m")], "")
        .with(OBSERVABILITY)
        .start()
        .await;
    for _ in 0..5 {
        assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    }
    for _ in 0..50 {
        assert_eq!(post(&gateway, &chat("no-such-route")).await.status(), 404);
    }
    gateway.telemetry().wait_for_rows(55).await;
    let card = scorecard(&gateway).await;
    let five = &card["overall"]["5m"];
    assert_eq!(five["client_error"], 50, "{five}");
    assert_eq!(five["availability"], 1.0, "{five}");
    let alerts = card["alerts"].as_array().unwrap();
    assert!(
        !alerts
            .iter()
            .any(|a| a["alert"] == "availability_below_target"),
        "{alerts:?}"
    );
}

#[tokio::test]
async fn a_route_served_by_its_fallback_flags_the_route_not_the_rescuer() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
    let gateway = TestGateway::new()
        .fallback_chain(&primary, &secondary, ["model-a", "model-b"])
        .with(OBSERVABILITY)
        .with("[breaker]\nconsecutive_failures = 1000\nmin_requests = 1000\n")
        .start()
        .await;
    for _ in 0..10 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    }
    gateway.telemetry().wait_for_rows(10).await;
    let card = scorecard(&gateway).await;
    let flagged: Vec<(String, String)> = card["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["alert"] == "fallback_rate_above_max")
        .map(|a| {
            (
                a["scope"].as_str().unwrap().into(),
                a["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        flagged.contains(&("route".into(), "r".into())),
        "{flagged:?}"
    );
    assert!(
        flagged.contains(&("deployment".into(), "primary/model-a".into())),
        "{flagged:?}"
    );
    assert!(
        !flagged
            .iter()
            .any(|(_, name)| name.starts_with("secondary/")),
        "the healthy fallback is flagged: {flagged:?}"
    );
    let secondary_card = card["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["provider"] == "secondary")
        .unwrap();
    assert_eq!(secondary_card["windows"]["5m"]["success_rate"], 1.0);
}
