//! `/metrics` under hostile clients: label values come only from the config, so client-chosen
//! model names neither grow the exposition nor forge series; the output is parsed with a
//! real OpenMetrics parser, not a hand-rolled one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use openmetrics_parser::openmetrics::parse_openmetrics;
use switchyard::fake::FakeUpstream;
use switchyard::server::Gateway;

use super::support::*;

/// Every series of an exposition as `(family, labels)`, parsed strictly; panics with the
/// parser's complaint when the text is not valid OpenMetrics.
pub fn series(text: &str) -> BTreeSet<(String, BTreeMap<String, String>)> {
    let exposition = parse_openmetrics(text)
        .unwrap_or_else(|e| panic!("not valid OpenMetrics ({e:?}):\n{}", tail(text)));
    let mut series = BTreeSet::new();
    for (name, family) in &exposition.families {
        for sample in family.iter_samples() {
            let labels = sample
                .get_labelset()
                .expect("a sample's labels match its family's")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            series.insert((name.clone(), labels));
        }
    }
    series
}

fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(2000);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    &text[start..]
}

/// `/metrics` from the client port.
pub async fn scrape(gateway: &Gateway) -> String {
    let response = client()
        .get(format!("{}/metrics", gateway.url()))
        .send()
        .await
        .expect("gateway answers");
    assert_eq!(response.status(), 200);
    response.text().await.expect("a text body")
}

/// One provider `up` with route `r` over `up/m`, priced so cost is counted too.
async fn one_provider() -> (switchyard::fake::FakeHandle, Gateway) {
    let fake = FakeUpstream::new("up").start().await.unwrap();
    let gateway = gateway(&format!(
        "{}{}[[prices]]\nprovider = \"up\"\nmodel = \"m\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\n\
         [[prices]]\nprovider = \"up\"\nmodel = \"priced-only\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\n",
        provider("up", &fake),
        route("r", &[("up", "m")], ""),
    ))
    .await;
    (fake, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_direct_model_names_leave_metrics_small() {
    let (_fake, gateway) = one_provider().await;
    let http = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    const NAMES: usize = 10_000;
    let statuses: Vec<u16> = futures_util::stream::iter(0..NAMES)
        .map(|i| {
            let request = http.post(&url).json(&chat(&format!("up/name-{i}")));
            async move {
                request
                    .send()
                    .await
                    .expect("gateway answers")
                    .status()
                    .as_u16()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200));
    // Configured names keep their own series.
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    assert_eq!(post(&gateway, &chat("up/m")).await.status(), 200);
    assert_eq!(post(&gateway, &chat("up/priced-only")).await.status(), 200);
    tokio::time::timeout(
        Duration::from_secs(60),
        gateway.telemetry().wait_for_rows(NAMES as u64 + 3),
    )
    .await
    .expect("every request is logged");

    let text = scrape(&gateway).await;
    assert!(
        text.len() < 64 * 1024,
        "/metrics is {} bytes after {NAMES} names",
        text.len()
    );
    let series = series(&text);
    let values: BTreeSet<&str> = series
        .iter()
        .flat_map(|(_, labels)| labels.values().map(String::as_str))
        .collect();
    assert!(
        values.iter().all(|v| !v.starts_with("up/name-")),
        "a client-chosen name became a label"
    );
    let requests = |route: &str| {
        series.iter().any(|(family, labels)| {
            family == "switchyard_requests"
                && labels.get("route").map(String::as_str) == Some(route)
        })
    };
    assert!(
        requests("other"),
        "unconfigured names are counted as `other`"
    );
    assert!(requests("r") && requests("up/m") && requests("up/priced-only"));
    let attempts_for = |model: &str| {
        series.iter().any(|(family, labels)| {
            family == "switchyard_attempts"
                && labels.get("provider").map(String::as_str) == Some("up")
                && labels.get("model").map(String::as_str) == Some(model)
        })
    };
    assert!(attempts_for("other") && attempts_for("m") && attempts_for("priced-only"));
}

#[tokio::test]
async fn a_hostile_model_name_cannot_forge_a_series_or_end_the_scrape() {
    let (_fake, gateway) = one_provider().await;
    let hostile = "up/x\"} 1\nforged_total{route=\"r\"} 1e9\n# EOF\n\\\"";
    let response = post(&gateway, &chat(hostile)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    gateway.telemetry().wait_for_rows(2).await;

    let text = scrape(&gateway).await;
    let series = series(&text);
    let families: BTreeSet<&str> = series.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        families.iter().all(|f| f.starts_with("switchyard_")),
        "{families:?}"
    );
    let routes: BTreeSet<&str> = series
        .iter()
        .filter_map(|(_, labels)| labels.get("route").map(String::as_str))
        .collect();
    assert_eq!(routes, BTreeSet::from(["other", "r"]));
    let models: BTreeSet<&str> = series
        .iter()
        .filter_map(|(_, labels)| labels.get("model").map(String::as_str))
        .collect();
    assert_eq!(models, BTreeSet::from(["m", "other"]));
}
