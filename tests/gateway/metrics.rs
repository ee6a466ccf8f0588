//! Observability under hostile clients. `/metrics` labels come only from the config, so
//! client-chosen model names neither grow the exposition nor forge series (read back with a
//! strict OpenMetrics reader written from the spec's ABNF, which the SDK suite cross-checks
//! with the reference parser); `/metrics`, `/v1/scorecard` and `/dashboard`
//! want a token or the admin listener; `switchyard logs` escapes what clients wrote; and a
//! flood of 401s cannot fill the request log.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use switchyard::fake::FakeHandle;
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::support::*;

#[path = "../common/openmetrics.rs"]
mod openmetrics;

/// Every series of an exposition as `(family, labels)`, parsed strictly; panics with the
/// parser's complaint when the text is not valid OpenMetrics.
pub fn series(text: &str) -> BTreeSet<(String, BTreeMap<String, String>)> {
    let families = openmetrics::parse(text)
        .unwrap_or_else(|e| panic!("not valid OpenMetrics ({e}):\n{}", tail(text)));
    let mut series = BTreeSet::new();
    for family in families {
        for sample in family.samples {
            series.insert((family.name.clone(), sample.labels));
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

/// `/metrics` from the client port, with the token [`OBSERVABILITY`] configures.
pub async fn scrape(gateway: &Gateway) -> String {
    let response = observe(gateway, "/metrics").await;
    assert_eq!(response.status(), 200);
    response.text().await.expect("a text body")
}

/// Auth off and any direct name allowed, so every label path sees what clients chose.
const OPEN_DIRECT_NAMES: &str = "[admin]\nmetrics_token = \"test-metrics-token\"\n[auth]\nrequired = false\ndirect_models = true\n";

/// One provider `up` with route `r` over `up/m`, priced so cost is counted too.
async fn one_provider() -> (switchyard::fake::FakeHandle, Gateway) {
    let fake = scripted("up", []).await;
    let gateway = one_route(&fake)
        .with(concat!(
            "[[prices]]\nprovider = \"up\"\nmodel = \"m\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\n",
            "[[prices]]\nprovider = \"up\"\nmodel = \"priced-only\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\n",
        ))
        .with(OPEN_DIRECT_NAMES)
        .start()
        .await;
    (fake, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_direct_model_names_leave_metrics_small() {
    let (_fake, gateway) = one_provider().await;
    let http = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    const NAMES: usize = 10_000;
    let requests = (0..NAMES).map(|i| http.post(&url).json(&chat(&format!("up/name-{i}"))));
    let statuses = statuses_of(requests, 32).await;
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
    // A route configured with a name that would close its label: it is a label, escaped.
    let configured = "r\"} 1 forged_total{route=\"r\"} 1e9 # EOF \\\"";
    let fake = scripted("up", []).await;
    let gateway = one_route(&fake)
        .with("[[routes]]\n")
        .set("name", configured)
        .with("steps = [{ provider = \"up\", model = \"m\" }]\n")
        .with(OPEN_DIRECT_NAMES)
        .start()
        .await;
    // A name with a line break is refused before it reaches any upstream or label...
    let hostile = "up/x\"} 1\nforged_total{route=\"r\"} 1e9\n# EOF\n\\\"";
    assert_eq!(post(&gateway, &chat(hostile)).await.status(), 400);
    // ...and one without is served, and counted as `other`.
    let hostile = "up/x\"} 1 forged_total{route=\"r\"} 1e9 # EOF \\\"";
    let response = post(&gateway, &chat(hostile)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    assert_eq!(post(&gateway, &chat(configured)).await.status(), 200);
    gateway.telemetry().wait_for_rows(4).await;

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
    // `-` is the route of the request refused before it named one.
    assert_eq!(routes, BTreeSet::from(["-", "other", "r", configured]));
    let models: BTreeSet<&str> = series
        .iter()
        .filter_map(|(_, labels)| labels.get("model").map(String::as_str))
        .collect();
    assert_eq!(models, BTreeSet::from(["m", "other"]));
}

/// The observability endpoints: none of them may answer an anonymous caller on the client port.
const OBSERVABILITY_PATHS: [&str; 3] = ["/metrics", "/v1/scorecard", "/dashboard"];

/// Provider `up` for `fake`, and route `r` over its model `m`.
fn one_route(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
}

async fn get(url: String, auth: Option<(&str, &str)>) -> reqwest::Response {
    let mut request = client().get(url);
    match auth {
        Some(("bearer", token)) => request = request.bearer_auth(token),
        Some((user, password)) => request = request.basic_auth(user, Some(password)),
        None => {}
    }
    request.send().await.expect("gateway answers")
}

#[tokio::test]
async fn observability_endpoints_want_the_admin_token_on_the_client_port() {
    let fake = scripted("up", []).await;
    let options = StartOptions {
        admin_token: Some(Secret::new("admin-token-for-tests")),
        ..StartOptions::default()
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let gateway = Gateway::start_with(one_route(&fake).config(), addr, options)
        .await
        .unwrap();
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    for path in OBSERVABILITY_PATHS {
        let url = format!("{}{path}", gateway.url());
        let anonymous = get(url.clone(), None).await;
        assert_eq!(anonymous.status(), 401, "{path}");
        assert!(header(&anonymous, "www-authenticate").starts_with("Basic"));
        let message = error_message(&anonymous.json().await.unwrap());
        assert!(message.contains("token"), "{message}");
        let wrong = get(url.clone(), Some(("bearer", "admin-token-for-test"))).await;
        assert_eq!(wrong.status(), 401, "{path}");
        let admin = get(url, Some(("bearer", "admin-token-for-tests"))).await;
        assert_eq!(admin.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn a_metrics_token_opens_them_by_bearer_or_basic_and_with_no_token_they_are_off() {
    let fake = scripted("up", []).await;
    let gateway = one_route(&fake).with(OBSERVABILITY).start().await;
    for path in OBSERVABILITY_PATHS {
        let url = format!("{}{path}", gateway.url());
        assert_eq!(get(url.clone(), None).await.status(), 401, "{path}");
        let bearer = get(url.clone(), Some(("bearer", METRICS_TOKEN))).await;
        assert_eq!(bearer.status(), 200, "{path}");
        // A browser opening /dashboard answers the Basic challenge; any user name will do.
        let basic = get(url.clone(), Some(("operator", METRICS_TOKEN))).await;
        assert_eq!(basic.status(), 200, "{path}");
        let wrong = get(url, Some(("operator", "test-metrics-toke"))).await;
        assert_eq!(wrong.status(), 401, "{path}");
    }

    // Neither token nor admin listener: refused with a message that says how to turn them on.
    let closed = one_route(&fake).start().await;
    for path in OBSERVABILITY_PATHS {
        let response = get(format!("{}{path}", closed.url()), None).await;
        assert_eq!(response.status(), 403, "{path}");
        let message = error_message(&response.json().await.unwrap());
        assert!(
            message.contains("metrics_token") && message.contains("admin_listen"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn with_an_admin_listener_they_answer_there_and_not_on_the_client_port() {
    let fake = scripted("up", []).await;
    let listen = "[server]\nadmin_listen = \"127.0.0.1:0\"\n";
    let gateway = one_route(&fake).with(listen).start().await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    gateway.telemetry().wait_for_rows(1).await;
    assert_ne!(gateway.admin_url(), gateway.url());
    for path in OBSERVABILITY_PATHS {
        let on_admin = get(format!("{}{path}", gateway.admin_url()), None).await;
        assert_eq!(on_admin.status(), 200, "{path} on the admin listener");
        let on_client = get(format!("{}{path}", gateway.url()), None).await;
        assert_eq!(on_client.status(), 404, "{path} on the client port");
    }
    let text = get(format!("{}/metrics", gateway.admin_url()), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(series(&text).iter().any(
        |(f, l)| f == "switchyard_requests" && l.get("route").map(String::as_str) == Some("r")
    ));

    // A metrics token, when set, is wanted on the admin listener too.
    let guarded = one_route(&fake)
        .with(listen)
        .with(OBSERVABILITY)
        .start()
        .await;
    let url = format!("{}/metrics", guarded.admin_url());
    assert_eq!(get(url.clone(), None).await.status(), 401);
    assert_eq!(
        get(url, Some(("bearer", METRICS_TOKEN))).await.status(),
        200
    );
}

#[tokio::test]
async fn the_demo_shows_its_metrics_on_its_admin_listener_and_says_where() {
    let demo = switchyard::demo::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (url, admin) = (demo.gateway.url(), demo.gateway.admin_url());
    let instructions = switchyard::demo::instructions(&url, &admin);
    assert!(
        instructions.contains(&format!("{admin}/metrics")),
        "{instructions}"
    );
    assert!(instructions.contains(&format!("{admin}/dashboard")));
    assert_eq!(post(&demo.gateway, &chat("smart")).await.status(), 200);
    for path in OBSERVABILITY_PATHS {
        assert_eq!(
            get(format!("{admin}{path}"), None).await.status(),
            200,
            "{path}"
        );
        assert_eq!(
            get(format!("{url}{path}"), None).await.status(),
            404,
            "{path}"
        );
    }
}

#[tokio::test]
async fn switchyard_logs_escapes_control_characters_so_a_name_cannot_forge_rows() {
    // The gateway refuses control characters in model names, so a hostile row can no longer
    // come from a client; the table must escape whatever the store holds all the same.
    let db = std::env::temp_dir().join(format!("switchyard-esc-{}.db", uuid::Uuid::now_v7()));
    let text = TestGateway::new()
        .with("[store]\n")
        .set("url", format!("sqlite://{}", db.display()))
        .raw_text();
    let hostile =
        "up/evil\u{1b}[2J\u{1b}[H\r\n2026-01-01 00:00:00.000  forged  \u{202e}desrever\u{7}";
    let store = switchyard::store::Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let row = switchyard::store::request_log::LogRow {
        id: "01a0".into(),
        time_ms: switchyard::store::now_ms(),
        key_id: None,
        user: Some(hostile.into()),
        route: Some(hostile.into()),
        outcome: "error".into(),
        step: None,
        provider: None,
        model: None,
        attempts: Vec::new(),
        status: 400,
        latency_ms: 0.1,
        ttft_ms: None,
        overhead_ms: 0.1,
        tokens_in: None,
        tokens_out: None,
        cost_usd: None,
        stream: false,
        partial: false,
        error: Some(hostile.into()),
        cache: None,
        trace_id: None,
    };
    store.insert_log(vec![row]).await.unwrap();
    drop(store);
    let path = db.with_extension("toml");
    std::fs::write(&path, &text).unwrap();

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["logs", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    for raw in ['\u{1b}', '\r', '\u{7}', '\u{202e}'] {
        assert!(
            !table.contains(raw),
            "{raw:?} reached the terminal:\n{table:?}"
        );
    }
    assert_eq!(table.lines().count(), 2, "a header and one row:\n{table}");
    assert!(
        table.contains("evil\\u{1b}[2J\\u{1b}[H\\r\\n2026-01-01"),
        "{table}"
    );
    let _ = std::fs::remove_file(&path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_401s_from_one_address_writes_a_bounded_number_of_rows() {
    let fake = scripted("up", []).await;
    let gateway = one_route(&fake)
        .with("[auth]\nrequired = true\nunauthorized_log_rows_per_minute = 5\n")
        .with(OBSERVABILITY)
        .start()
        .await;
    let started = std::time::Instant::now();
    const FLOOD: usize = 300;
    let http = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    let requests = (0..FLOOD).map(|i| {
        http.post(&url)
            .bearer_auth(format!("sy-guess-{i}"))
            .json(&chat("r"))
    });
    let statuses = statuses_of(requests, 16).await;
    assert!(statuses.iter().all(|s| *s == 401));
    gateway.telemetry().wait_idle().await;
    let text = scrape(&gateway).await;
    let store = gateway.store().clone();
    gateway.shutdown().await.unwrap();

    let rows = store.query_log(Default::default()).await.unwrap();
    assert!(rows.iter().all(|r| r.status == 401));
    // A minute's allowance (5) per minute the test took, and one summary row each.
    let minutes = started.elapsed().as_secs() as usize / 60 + 1;
    assert!(
        rows.len() <= minutes * 6,
        "{} rows for {FLOOD} refusals in {minutes} minute(s)",
        rows.len()
    );
    assert!(rows.len() >= 5, "the first refusals are still evidence");
    let dropped: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_unauthorized_rows_dropped_total "))
        .and_then(|v| v.parse().ok())
        .expect("the dropped rows are counted");
    let summaries = rows
        .iter()
        .filter(|r| r.error.as_deref().unwrap_or("").contains("not logged"))
        .count();
    assert_eq!(
        dropped + rows.len() - summaries,
        FLOOD,
        "each refusal is logged or counted"
    );
}

/// A client's mistake (a model no route serves, a malformed body, a 4xx the provider returns
/// as is) is outcome `client_error`, apart from the gateway's own errors, so error-rate alerts
/// do not fire on typos.
#[tokio::test]
async fn a_clients_mistake_is_a_client_error_not_the_gateways() {
    let fake = scripted("up", [switchyard::fake::Behavior::status(422)]).await;
    let gateway = one_route(&fake).with(OBSERVABILITY).start().await;
    let typo = post(&gateway, &chat("no-such-route")).await;
    assert_eq!(typo.status(), 404);
    let returned = post(&gateway, &chat("r")).await;
    assert_eq!(returned.status(), 422);
    assert_eq!(header(&returned, "x-switchyard-outcome"), "client_error");
    let id = header(&returned, "x-switchyard-request-id").to_owned();
    let row = record(&gateway, &id).await;
    assert_eq!(row.outcome, switchyard::telemetry::Outcome::ClientError);
    let text = scrape(&gateway).await;
    let outcomes: Vec<String> = series(&text)
        .into_iter()
        .filter(|(family, _)| family == "switchyard_requests")
        .filter_map(|(_, labels)| labels.get("outcome").cloned())
        .collect();
    assert!(outcomes.iter().any(|o| o == "client_error"), "{outcomes:?}");
    assert!(!outcomes.iter().any(|o| o == "error"), "{outcomes:?}");
}

/// Sends `requests`, `at_once` at a time, and collects their statuses.
async fn statuses_of(
    requests: impl Iterator<Item = reqwest::RequestBuilder>,
    at_once: usize,
) -> Vec<u16> {
    futures_util::stream::iter(requests)
        .map(|request| async move {
            request
                .send()
                .await
                .expect("gateway answers")
                .status()
                .as_u16()
        })
        .buffer_unordered(at_once)
        .collect()
        .await
}
