//! Live config reload: `SIGHUP` and `POST /admin/reload` read the file again. A valid file
//! swaps in at once without failing a request or forgetting breakers and limit counts; an
//! invalid one changes nothing and names its field; `check`, `serve` and a reload refuse
//! the same files.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::Value;
use switchyard::config::Config;
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::process::*;
use super::support::*;

mod binary;
mod kept;

pub(super) const TOKEN: &str = "admin-token-for-reload-tests";

/// A gateway started from a config file it can reload, with the admin API on.
pub(super) struct FromFile {
    pub(super) gateway: Gateway,
    pub(super) file: PathBuf,
    _dir: TempDir,
}

impl FromFile {
    pub(super) async fn start(config: &TestGateway) -> FromFile {
        let dir = TempDir::new();
        let file = dir.0.join("switchyard.toml");
        std::fs::write(&file, config.text()).unwrap();
        let options = StartOptions {
            admin_token: Some(Secret::new(TOKEN)),
            config_path: Some(file.clone()),
            ..StartOptions::default()
        };
        let loaded = Config::load(&file).unwrap();
        let gateway = Gateway::start_with(loaded, SocketAddr::from(([127, 0, 0, 1], 0)), options)
            .await
            .expect("gateway starts");
        FromFile {
            gateway,
            file,
            _dir: dir,
        }
    }

    /// Writes `config` (with the test defaults) over the file.
    pub(super) fn rewrite(&self, config: &TestGateway) {
        std::fs::write(&self.file, config.text()).unwrap();
    }

    /// `POST /admin/reload`: its status and body.
    pub(super) async fn reload(&self) -> (u16, Value) {
        let response = client()
            .post(format!("{}/admin/reload", self.gateway.admin_url()))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }
}

/// Route `r` to `up` (as model `m`).
pub(super) fn one_route(up: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", up)
        .route("r", &[("up", "m")], "")
}

/// One step balanced over `a` and `b` with these weights, as route `r`.
fn balanced(a: &FakeHandle, b: &FakeHandle, weights: (u32, u32)) -> TestGateway {
    let (a_weight, b_weight) = weights;
    TestGateway::new()
        .provider("a", a)
        .provider("b", b)
        .with("[[routes]]\nname = \"r\"\n")
        .with(&format!(
            "steps = [{{ deployments = [\
             {{ provider = \"a\", model = \"m\", weight = {a_weight} }}, \
             {{ provider = \"b\", model = \"m\", weight = {b_weight} }}] }}]\n"
        ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_requests_across_a_reload_all_succeed_and_the_new_route_serves_at_once() {
    let a = scripted("a", []).await;
    let b = scripted("b", []).await;
    let served = FromFile::start(&balanced(&a, &b, (1, 1))).await;
    let gateway = &served.gateway;
    assert_eq!(post(gateway, &chat("fresh")).await.status(), 404);

    const TOTAL: usize = 2_000;
    let done = Arc::new(tokio::sync::watch::Sender::new(0usize));
    let url = format!("{}/v1/chat/completions", gateway.url());
    let load = {
        let done = done.clone();
        tokio::spawn(async move {
            let client = client();
            futures_util::stream::iter(0..TOTAL)
                .map(|_| {
                    let (client, url, done) = (client.clone(), url.clone(), done.clone());
                    async move {
                        let status = match client.post(&url).json(&chat("r")).send().await {
                            Ok(response) => response.status().as_u16(),
                            Err(_) => 0,
                        };
                        done.send_modify(|n| *n += 1);
                        status
                    }
                })
                .buffer_unordered(32)
                .collect::<Vec<u16>>()
                .await
        })
    };
    // Reload once a quarter of the load is through, with the rest still to come.
    let mut progress = done.subscribe();
    let quarter = progress.wait_for(|n| *n >= TOTAL / 4);
    tokio::time::timeout(std::time::Duration::from_secs(120), quarter)
        .await
        .expect("the load progresses")
        .unwrap();
    served.rewrite(&balanced(&a, &b, (3, 1)).route("fresh", &[("a", "m2")], ""));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    // The very next request takes the new config.
    let fresh = post(gateway, &chat("fresh")).await;
    assert_eq!(
        fresh.status(),
        200,
        "the new route serves as soon as the reload returns"
    );
    let at_reload = *done.borrow();
    assert!(
        at_reload < TOTAL,
        "the reload came while requests were still going"
    );

    let statuses = load.await.unwrap();
    let failed: Vec<&u16> = statuses.iter().filter(|s| **s != 200).collect();
    assert_eq!(statuses.len(), TOTAL);
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());

    // The new weights: three of every four to `a`.
    let (a_before, b_before) = (a.calls(), b.calls());
    for _ in 0..40 {
        assert_eq!(post(gateway, &chat("r")).await.status(), 200);
    }
    let (to_a, to_b) = (a.calls() - a_before, b.calls() - b_before);
    assert!(
        (28..=32).contains(&to_a),
        "a got {to_a}, b got {to_b} of 40"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_finishes_on_the_config_it_started_with() {
    let slow = scripted("slow", [Behavior::ok().delay_ms(1_000)]).await;
    let slow_route = |name: &str| {
        TestGateway::new()
            .provider("slow", &slow)
            .route(name, &[("slow", "m")], "")
    };
    let served = FromFile::start(&slow_route("r")).await;
    let url = format!("{}/v1/chat/completions", served.gateway.url());
    let in_flight = tokio::spawn(async move { client().post(url).json(&chat("r")).send().await });
    slow.wait_until(|stats| stats.calls >= 1).await;

    // The new file drops route `r` while its request waits on the upstream.
    served.rewrite(&slow_route("other"));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 404);
    let finished = in_flight.await.unwrap().unwrap();
    assert_eq!(
        finished.status(),
        200,
        "it finishes on the route it started on"
    );
}

#[tokio::test]
async fn an_invalid_file_changes_nothing_and_the_answer_names_the_field() {
    let up = scripted("up", []).await;
    let served = FromFile::start(&one_route(&up).with(OBSERVABILITY)).await;
    let anonymous = client()
        .post(format!("{}/admin/reload", served.gateway.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401, "a reload needs the admin token");
    served.rewrite(&one_route(&up).route("fresh", &[("ghost", "m")], ""));
    let (status, body) = served.reload().await;
    assert_eq!(status, 422, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], "config_invalid", "{body}");
    assert_eq!(error["param"], "routes[1].steps[0].provider", "{body}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("routes[1].steps[0].provider: no provider is named `ghost`"),
        "{message}"
    );
    assert_eq!(error["fields"][0]["field"], "routes[1].steps[0].provider");

    // The running config keeps serving, and nothing of the bad file got in.
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 200);
    assert_eq!(post(&served.gateway, &chat("fresh")).await.status(), 404);
    let metrics = metrics_text(&served.gateway.url(), METRICS_TOKEN).await;
    assert!(
        metrics.contains("switchyard_config_reloads_total{result=\"error\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_setting_that_needs_a_restart_is_named_and_the_rest_applies() {
    let up = scripted("up", []).await;
    let served = FromFile::start(&one_route(&up).with(OBSERVABILITY)).await;
    let before = metrics_text(&served.gateway.url(), METRICS_TOKEN).await;
    served.rewrite(
        &TestGateway::new()
            .with("[server]\nmax_body_bytes = 1234\n")
            .provider("up", &up)
            .route("r", &[("up", "m")], "")
            .route("fresh", &[("up", "m2")], "")
            .with(OBSERVABILITY),
    );
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["needs_restart"][0]["field"], "server.max_body_bytes");
    assert_eq!(body["needs_restart"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(post(&served.gateway, &chat("fresh")).await.status(), 200);

    // The metrics name the config now live, and the new route has series of its own.
    let after = metrics_text(&served.gateway.url(), METRICS_TOKEN).await;
    let digest = body["config"]["sha256"].as_str().unwrap();
    assert!(
        after.contains(&format!("switchyard_config_info{{sha256=\"{digest}\"}} 1")),
        "{after}"
    );
    assert!(!before.contains(digest), "a new config has a new digest");
    assert!(
        after.contains("switchyard_config_reloads_total{result=\"ok\"} 1"),
        "{after}"
    );
    assert!(after.contains("route=\"fresh\""), "{after}");
}
