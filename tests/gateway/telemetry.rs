//! Telemetry that adds up: /metrics parsed, the scorecard's rates, the dashboard page, and a
//! scorecard that survives a restart because it is computed from the stored log.

use std::collections::BTreeMap;

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

use super::support::*;

/// `(name, labels)` → value, from the Prometheus text format.
pub type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// Parses an exposition: every sample line, with its labels; comments skipped.
pub fn parse_metrics(text: &str) -> Samples {
    let mut samples = Samples::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
            None => (series, BTreeMap::new()),
        };
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        samples.insert((name.to_owned(), labels), value);
    }
    samples
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let end = after.find('"').expect("a closed label value");
        labels.insert(
            name.trim_start_matches(',').to_owned(),
            after[..end].to_owned(),
        );
        rest = &after[end + 1..];
    }
    labels
}

/// One sample's value, 0 when absent.
pub fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .get(&(name.to_owned(), labels))
        .copied()
        .unwrap_or(0.0)
}

/// An observability endpoint's JSON, read with the token [`OBSERVABILITY`] configures.
pub async fn get_json(gateway: &Gateway, path: &str) -> Value {
    let response = observe(gateway, path).await;
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

/// 70 answers, then failures forever: with the secondary's 20, exactly 70/20/10.
pub async fn scripted_fakes() -> (FakeHandle, FakeHandle) {
    let mut primary = FakeUpstream::new("primary");
    for _ in 0..70 {
        primary = primary.then(Behavior::ok());
    }
    let mut secondary = FakeUpstream::new("secondary");
    for _ in 0..20 {
        secondary = secondary.then(Behavior::ok());
    }
    (
        primary.then(Behavior::status(500)).start().await.unwrap(),
        secondary.then(Behavior::status(500)).start().await.unwrap(),
    )
}

/// Route `r` = primary → secondary → canned answer; one attempt a step, breakers that stay
/// closed, and both models priced.
pub fn scripted(primary: &FakeHandle, secondary: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            "degraded = { content = \"Busy; try again soon.\" }",
        )
        .with(concat!(
            "[retry]\nattempts_per_step = 1\nbackoff_base = \"1ms\"\nbackoff_max = \"2ms\"\n",
            "[breaker]\nconsecutive_failures = 1000\nmin_requests = 1000\n",
            "[[prices]]\nprovider = \"primary\"\nmodel = \"model-a\"\ninput_per_1m = 2.5\noutput_per_1m = 10.0\n",
            "[[prices]]\nprovider = \"secondary\"\nmodel = \"model-b\"\ninput_per_1m = 1.0\noutput_per_1m = 2.0\n",
        ))
}

/// Sends the 100 scripted requests one by one, checking each outcome header as it goes.
pub async fn run_script(gateway: &Gateway) {
    for i in 0..100 {
        let response = post(gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        let expected = match i {
            0..70 => "success",
            70..90 => "fallback",
            _ => "degraded",
        };
        assert_eq!(header(&response, "x-switchyard-outcome"), expected, "#{i}");
    }
    gateway.telemetry().wait_for_rows(100).await;
}

fn assert_rates(card: &Value) {
    let routes = card["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 1, "{card}");
    let five = &routes[0]["windows"]["5m"];
    assert_eq!(five["requests"], 100, "{five}");
    assert_eq!(
        (
            &five["success"],
            &five["fallback"],
            &five["degraded"],
            &five["error"]
        ),
        (&70.into(), &20.into(), &10.into(), &0.into())
    );
    assert_eq!(five["success_rate"], 0.7);
    assert_eq!(five["fallback_rate"], 0.2);
    assert_eq!(five["degraded_rate"], 0.1);
    assert_eq!(five["error_rate"], 0.0);
    assert_eq!(five["availability"], 0.9);
    assert_eq!(five["alerts"]["availability_below_target"], true);
    assert_eq!(five["alerts"]["fallback_rate_above_max"], false);
    assert!(five["latency_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert!(five["cost_usd"].as_f64().unwrap() > 0.0);
    for window in ["1h", "24h"] {
        assert_eq!(routes[0]["windows"][window]["requests"], 100, "{window}");
    }
    let points: u64 = card["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["success"].as_u64().unwrap())
        .sum();
    assert_eq!(points, 70);
}

#[tokio::test]
async fn seventy_twenty_ten_are_exact_in_metrics_and_the_scorecard_even_after_a_restart() {
    let (primary, secondary) = scripted_fakes().await;
    let db = std::env::temp_dir().join(format!("switchyard-card-{}.db", uuid::Uuid::now_v7()));
    let config = scripted(&primary, &secondary)
        .with("[store]\n")
        .set("url", format!("sqlite://{}", db.display()))
        .with(OBSERVABILITY);
    let gateway = config.start().await;
    run_script(&gateway).await;

    let text = observe(&gateway, "/metrics").await.text().await.unwrap();
    let samples = parse_metrics(&text);
    let requests = |outcome| {
        sample(
            &samples,
            "switchyard_requests_total",
            &[("route", "r"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        [
            requests("success"),
            requests("fallback"),
            requests("degraded"),
            requests("error")
        ],
        [70.0, 20.0, 10.0, 0.0]
    );
    let attempts = |provider, model, result| {
        sample(
            &samples,
            "switchyard_attempts_total",
            &[("provider", provider), ("model", model), ("result", result)],
        )
    };
    assert_eq!(attempts("primary", "model-a", "success"), 70.0);
    assert_eq!(attempts("secondary", "model-b", "success"), 20.0);
    assert_eq!(
        sample(
            &samples,
            "switchyard_request_duration_seconds_count",
            &[("route", "r")]
        ),
        100.0
    );
    let cost = |provider, model| {
        sample(
            &samples,
            "switchyard_cost_usd_total",
            &[("provider", provider), ("model", model)],
        )
    };
    assert!(cost("primary", "model-a") > 0.0 && cost("secondary", "model-b") > 0.0);

    assert_rates(&get_json(&gateway, "/v1/scorecard").await);

    // A new gateway on the same store: the scorecard comes from the log, so nothing is lost.
    gateway.shutdown().await.unwrap();
    let again = config.start().await;
    let card = get_json(&again, "/v1/scorecard").await;
    assert_rates(&card);
    let deployments = card["deployments"].as_array().unwrap();
    let primary_card = deployments
        .iter()
        .find(|d| d["provider"] == "primary")
        .unwrap();
    assert_eq!(primary_card["windows"]["5m"]["requests"], 100);
    assert_eq!(primary_card["windows"]["5m"]["attempts"], 100);
    drop(again);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

#[tokio::test]
async fn the_dashboard_is_one_page_with_nothing_external() {
    let fake = super::support::scripted("up", []).await;
    let gateway = TestGateway::new()
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .with(OBSERVABILITY)
        .start()
        .await;
    let response = observe(&gateway, "/dashboard").await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("text/html"));
    let page = response.text().await.unwrap();
    assert!(page.contains("/v1/scorecard"));
    for external in ["http://", "https://", "<link", "src="] {
        let allowed = external == "http://" && page.contains("http://www.w3.org/2000/svg");
        let count = page.matches(external).count() - usize::from(allowed);
        assert_eq!(count, 0, "the page loads `{external}` from elsewhere");
    }
}

#[tokio::test]
async fn switchyard_logs_prints_a_table_or_json_lines_with_filters() {
    let (primary, secondary) = scripted_fakes().await;
    let db = std::env::temp_dir().join(format!("switchyard-logs-{}.db", uuid::Uuid::now_v7()));
    let config = scripted(&primary, &secondary)
        .with("[store]\n")
        .set("url", format!("sqlite://{}", db.display()));
    // The file the CLI reads is the whole config, test defaults included.
    let text = config.text();
    let gateway = config.start().await;
    run_script(&gateway).await;
    gateway.shutdown().await.unwrap();
    let path = std::env::temp_dir().join(format!("switchyard-logs-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, &text).unwrap();

    let logs = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("logs")
            .arg("--config")
            .arg(&path)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let lines = logs(&["--json", "--since", "1h"]);
    let rows: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 100);
    let fallback = logs(&["--json", "--outcome", "fallback", "--route", "r"]);
    let fallback: Vec<Value> = fallback
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(fallback.len(), 20);
    let row = &fallback[0];
    assert_eq!(row["outcome"], "fallback");
    assert_eq!(row["provider"], "secondary");
    assert_eq!(row["attempts"][0]["failure"], "server_error");
    assert!(row["cost_usd"].as_f64().unwrap() > 0.0);
    let table = logs(&["--outcome", "degraded", "--limit", "3"]);
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("TIME (UTC)"));
    assert_eq!(lines.clone().count(), 3, "{table}");
    assert!(lines.all(|l| l.contains("degraded")), "{table}");
    let _ = std::fs::remove_file(&path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}
