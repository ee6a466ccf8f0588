//! Circuit breakers and load balancing over real HTTP: skipping an open provider costs
//! nothing, a cooled-down breaker sends one probe, an all-open route still probes, weights
//! split traffic, and the operator can see and reset it all.
//!
//! Nothing sleeps to wait for an event. The only wait is for a cooldown to pass, the
//! behaviour under test, and it lasts exactly as long as the gateway's own
//! `next_probe_in_ms` says.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream, Script};
use switchyard::router::FailureClass;
use switchyard::server::Gateway;

use super::support::*;

const TOKEN: &str = "admin-token-for-tests";

/// A gateway with the admin API on.
async fn admin_gateway(config: &TestGateway) -> Gateway {
    start_with_admin(config, TOKEN).await
}

/// primary → secondary, with `breaker` as the `[breaker]` section's lines.
async fn two_step_with(primary: &FakeHandle, secondary: &FakeHandle, breaker: &str) -> Gateway {
    let config = TestGateway::new()
        .fallback_chain(primary, secondary, ["model-a", "model-b"])
        .with("[breaker]\n")
        .with(breaker);
    admin_gateway(&config).await
}

/// Route `r` as the one step `step` (its TOML) over the deployments of `providers`.
async fn one_balanced_step(providers: [(&str, &FakeHandle); 2], step: &str) -> Gateway {
    let config = providers
        .into_iter()
        .fold(TestGateway::new(), |config, (name, fake)| {
            config.provider(name, fake)
        })
        .with(&format!("[[routes]]\nname = \"r\"\nsteps = [{step}]\n"));
    admin_gateway(&config).await
}

/// `GET /admin/breakers`'s entry for `provider`.
async fn breaker(gateway: &Gateway, provider: &str) -> Value {
    let body = get_json(&format!("{}/admin/breakers", gateway.url()), TOKEN).await;
    body["breakers"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["provider"] == provider))
        .cloned()
        .unwrap_or_else(|| panic!("no breaker for {provider}: {body}"))
}

/// Waits out a cooldown: exactly as long as the gateway says the next probe is away.
///
/// Time passing is the scenario, and no clock can be moved for it here: the breaker reads
/// tokio's clock, but the gateway serves each connection on a runtime of its own
/// (`server::shards`), whose clock `tokio::time::pause` in the test's runtime does not
/// touch. So the one test that waits keeps its cooldown to a second.
async fn wait_for_probe_time(gateway: &Gateway, provider: &str) {
    let entry = breaker(gateway, provider).await;
    let wait = entry["next_probe_in_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no probe time: {entry}"));
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// Posts and reports how long the answer took.
async fn timed(gateway: &Gateway, model: &str) -> (reqwest::Response, Duration) {
    let started = Instant::now();
    let response = post(gateway, &chat(model)).await;
    (response, started.elapsed())
}

#[tokio::test]
async fn an_open_primary_is_skipped_and_costs_nothing() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(500).delay_ms(300)]).await;
    let gateway = two_step_with(
        &primary,
        &secondary,
        "consecutive_failures = 5\ncooldown = \"60s\"",
    )
    .await;

    for _ in 0..5 {
        let (response, took) = timed(&gateway, "r").await;
        assert_eq!(header(&response, "x-switchyard-step"), "1");
        assert!(took >= Duration::from_millis(300), "{took:?}");
    }
    assert_eq!(primary.calls(), 5);
    assert_eq!(breaker(&gateway, "primary").await["state"], "open");

    // Costs nothing: the primary is never dialled (no call, no attempt that reached it), which
    // is what keeps its 300 ms off the answer; timing it here would depend on the machine.
    for _ in 0..10 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-step"), "1");
        assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
        assert_eq!(header(&response, "x-switchyard-attempts"), "1");
        let row = record_of(&gateway, &response).await;
        assert_eq!(row.attempts[0].failure, Some(FailureClass::CircuitOpen));
        assert!(!row.attempts[0].reached_upstream());
    }
    assert_eq!(primary.calls(), 5, "the open primary is never reached");
}

#[tokio::test]
async fn after_the_cooldown_twenty_concurrent_requests_send_one_probe() {
    // Five quick failures open it; the probe then fails slowly, so it is still out while
    // the other nineteen requests arrive, and reopens the breaker for another cooldown.
    let mut script = FakeUpstream::new("primary");
    for _ in 0..5 {
        script = script.then(Behavior::status(500));
    }
    let primary = script
        .then(Behavior::status(500).delay_ms(300))
        .start()
        .await
        .unwrap();
    let secondary = scripted("secondary", []).await;
    let gateway = two_step_with(
        &primary,
        &secondary,
        "consecutive_failures = 5\ncooldown = \"1s\"",
    )
    .await;
    for _ in 0..5 {
        post(&gateway, &chat("r")).await;
    }
    assert_eq!(breaker(&gateway, "primary").await["state"], "open");

    wait_for_probe_time(&gateway, "primary").await;
    let body = chat("r");
    let responses = join_all((0..20).map(|_| post(&gateway, &body))).await;
    assert!(responses.iter().all(|r| r.status() == 200));
    assert!(
        responses
            .iter()
            .all(|r| header(r, "x-switchyard-provider") == "secondary")
    );
    assert_eq!(primary.calls(), 6, "exactly one probe");
    let probed: Vec<&str> = responses
        .iter()
        .map(|r| header(r, "x-switchyard-attempts"))
        .filter(|attempts| *attempts == "2")
        .collect();
    assert_eq!(probed.len(), 1, "one request carried the probe");
    let entry = breaker(&gateway, "primary").await;
    assert_eq!(entry["state"], "open", "{entry}");
    assert_eq!(entry["times_opened"], 2, "{entry}");
}

#[tokio::test]
async fn when_every_step_is_open_the_soonest_is_probed_and_recovers() {
    let a = scripted("a", [Behavior::status(500)]).await;
    let b = scripted("b", [Behavior::status(500)]).await;
    let config = TestGateway::new()
        .provider("a", &a)
        .provider("b", &b)
        .route("r", &[("a", "m"), ("b", "m")], "")
        .fast_retry()
        .with("[breaker]\nconsecutive_failures = 2\ncooldown = \"60s\"\n");
    let gateway = admin_gateway(&config).await;
    // b opens first, then a: b's cooldown ends first though it is the later step.
    for model in ["b/m", "b/m", "a/m", "a/m"] {
        post(&gateway, &chat(model)).await;
    }
    assert_eq!(breaker(&gateway, "a").await["state"], "open");
    assert_eq!(breaker(&gateway, "b").await["state"], "open");

    // Every step open: b is probed anyway, fails, and the 503 tells the story.
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "x-switchyard-attempts"), "1");
    let message = error_message(&response.json().await.unwrap());
    assert!(
        message.contains("step 0 a/m: circuit_open, next probe in "),
        "{message}"
    );
    assert!(
        message.contains("step 1 b/m: server_error (500)"),
        "{message}"
    );
    assert_eq!((a.calls(), b.calls()), (2, 3));

    // b reopened for a fresh cooldown, so a is now the soonest: it is probed, and serves.
    a.set_script(Script::default());
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-outcome"), "success");
    assert_eq!(breaker(&gateway, "a").await["state"], "closed");

    // Recovered: the next request goes to a as usual.
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-provider"), "a");
    assert_eq!((a.calls(), b.calls()), (4, 3));
}

#[tokio::test]
async fn a_stream_skips_an_open_primary_too() {
    let primary = scripted("primary", [Behavior::status(500)]).await;
    let secondary = scripted("secondary", [Behavior::ok().content("from the secondary")]).await;
    let gateway = two_step_with(&primary, &secondary, "consecutive_failures = 1").await;
    post(&gateway, &chat_stream("r"))
        .await
        .text()
        .await
        .unwrap();
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    assert_eq!(header(&response, "x-switchyard-attempts"), "1");
    let text = response.text().await.unwrap();
    assert_eq!(streamed_text(&sse_data(&text)), "from the secondary");
    assert_eq!(primary.calls(), 1);
}

#[tokio::test]
async fn weights_split_a_thousand_requests_as_configured() {
    let a = scripted("a", []).await;
    let b = scripted("b", []).await;
    let gateway = one_balanced_step(
        [("a", &a), ("b", &b)],
        concat!(
            "{ deployments = [",
            "{ provider = \"a\", model = \"big\", weight = 3 }, ",
            "{ provider = \"b\", model = \"small\", weight = 1 }] }",
        ),
    )
    .await;
    let http = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    let served: Vec<String> = futures_util::stream::iter(0..1000)
        .map(|_| {
            let request = http.post(&url).json(&chat("r")).send();
            async move {
                let response = request.await.expect("gateway answers");
                assert_eq!(header(&response, "x-switchyard-step"), "0");
                format!(
                    "{}/{}",
                    header(&response, "x-switchyard-provider"),
                    header(&response, "x-switchyard-model")
                )
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let to_a = served.iter().filter(|s| *s == "a/big").count();
    let to_b = served.iter().filter(|s| *s == "b/small").count();
    assert_eq!(to_a + to_b, 1000, "the headers name who served");
    assert_eq!((a.calls(), b.calls()), (to_a, to_b));
    let share = to_a as f64 / 1000.0;
    assert!((share - 0.75).abs() <= 0.05, "a took {share}");
}

#[tokio::test]
async fn latency_balance_sends_traffic_to_the_fastest() {
    let slow = scripted("slow", [Behavior::ok().delay_ms(600)]).await;
    let fast = scripted("fast", []).await;
    let gateway = one_balanced_step(
        [("slow", &slow), ("fast", &fast)],
        concat!(
            "{ deployments = [",
            "{ provider = \"slow\", model = \"m\" }, { provider = \"fast\", model = \"m\" }], ",
            "balance = \"latency\" }",
        ),
    )
    .await;
    for _ in 0..10 {
        assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    }
    // Each is measured once, then the fast one takes the rest. The gap is wide, so that no
    // scheduling hiccup on a loaded machine can make the fast one's first sample look slower.
    assert_eq!((slow.calls(), fast.calls()), (1, 9));
    // The estimate decays with a 10 s half-life, so on a slow machine its absolute value
    // says little; that the slow one is estimated slower is what balancing relies on.
    let slow_entry = breaker(&gateway, "slow").await;
    let fast_entry = breaker(&gateway, "fast").await;
    let (slow_ms, fast_ms) = (
        slow_entry["latency_ewma_ms"].as_f64().unwrap(),
        fast_entry["latency_ewma_ms"].as_f64().unwrap(),
    );
    assert!(slow_ms > fast_ms, "{slow_entry} {fast_entry}");
}

#[tokio::test]
async fn a_429_benches_the_primary_without_opening_it() {
    let (primary, secondary) =
        primary_and_secondary([Behavior::status(429).header("retry-after", "60")]).await;
    let gateway = two_step_with(&primary, &secondary, "consecutive_failures = 1").await;
    // 60 s is past the deadline: no wait, straight to the secondary.
    let first = post(&gateway, &chat("r")).await;
    assert_eq!(header(&first, "x-switchyard-step"), "1");
    let second = post(&gateway, &chat("r")).await;
    assert_eq!(header(&second, "x-switchyard-attempts"), "1");
    let row = record_of(&gateway, &second).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::Benched));
    assert_eq!(primary.calls(), 1);
    let entry = breaker(&gateway, "primary").await;
    assert_eq!(entry["state"], "closed", "{entry}");
    assert!(
        entry["benched_for_ms"].as_u64().unwrap() > 50_000,
        "{entry}"
    );
}

#[tokio::test]
async fn operators_see_and_reset_breakers_behind_the_admin_token() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(503)]).await;
    // The first open lasts `cooldown_min`: pinned to a minute here, to read it back.
    let gateway = two_step_with(
        &primary,
        &secondary,
        "consecutive_failures = 2\ncooldown = \"60s\"\ncooldown_min = \"60s\"",
    )
    .await;
    for _ in 0..2 {
        post(&gateway, &chat("r")).await;
    }
    let http = client();
    let list = format!("{}/admin/breakers", gateway.url());
    let reset = format!("{}/admin/breakers/reset", gateway.url());
    assert_eq!(http.get(&list).send().await.unwrap().status(), 401);
    let wrong = http.post(&reset).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);

    let entry = breaker(&gateway, "primary").await;
    assert_eq!(entry["state"], "open");
    assert_eq!(entry["model"], "model-a");
    assert_eq!(entry["consecutive_failures"], 2);
    assert_eq!(entry["window"]["failures"], 2);
    let next = entry["next_probe_in_ms"].as_u64().unwrap();
    assert!(next > 50_000 && next <= 60_000, "{entry}");
    assert_eq!(entry["cooldown_ms"], 60_000);
    let metrics = metrics_text(&gateway.url(), TOKEN).await;
    assert!(
        metrics.contains(r#"switchyard_breaker_state{provider="primary",model="model-a"} 2"#),
        "{metrics}"
    );

    let done: Value = http
        .post(format!("{reset}?provider=primary"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["reset"], 1);
    assert_eq!(breaker(&gateway, "primary").await["state"], "closed");
    assert!(
        metrics_text(&gateway.url(), TOKEN)
            .await
            .contains(r#"switchyard_breaker_state{provider="primary",model="model-a"} 0"#)
    );
    post(&gateway, &chat("r")).await;
    assert_eq!(primary.calls(), 3, "closed again: the primary is tried");
}

#[tokio::test]
async fn the_admin_api_is_off_without_a_token() {
    let fake = scripted("up", []).await;
    let gateway = TestGateway::new()
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .start()
        .await;
    let response = client()
        .get(format!("{}/admin/breakers", gateway.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}
