//! The dashboard in a real browser: headless Chromium loads `/dashboard` after scripted
//! traffic, runs its script against `/v1/scorecard`, and the charts it draws hold the data.

use std::path::PathBuf;
use std::process::Command;

use super::support::*;
use super::telemetry::{run_script, scripted, scripted_fakes};

/// Runs headless Chromium on `url` with `args` (a fresh profile each time), giving it 10 s of
/// virtual time for the page's fetches and timers; returns stdout.
async fn chromium(url: String, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let profile =
            std::env::temp_dir().join(format!("switchyard-chromium-{}", uuid::Uuid::now_v7()));
        let output = Command::new("timeout")
            .arg("120")
            .arg("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=10000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .arg(url)
            .output()
            .expect("chromium runs");
        let _ = std::fs::remove_dir_all(&profile);
        assert!(
            output.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    })
    .await
    .expect("the chromium task finishes")
}

/// The `data-value`s of every element marked `data-point="{kind}"`, in document order.
fn points(dom: &str, kind: &str) -> Vec<f64> {
    let marker = format!("data-point=\"{kind}\"");
    dom.split('<')
        .filter(|element| element.contains(&marker))
        .map(|element| {
            element
                .split_once("data-value=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .and_then(|(value, _)| value.parse().ok())
                .unwrap_or(f64::NAN)
        })
        .collect()
}

pub async fn the_dashboard_draws_the_scorecard_in_headless_chromium() {
    let (primary, secondary) = scripted_fakes().await;
    // On the admin listener, where the page and its scorecard need no token.
    // Anonymous callers get a sliding limit of 100 a minute: the script's 100 pass, 5 more
    // are refused, and the limiter's chart has something to draw.
    let listen = "[server]\nadmin_listen = \"127.0.0.1:0\"\n\
        [[roles]]\nname = \"default\"\nrequests_per_minute = 100\nwindow = \"sliding\"\n";
    let gateway = gateway(&scripted(&primary, &secondary).with(listen).raw_text()).await;
    run_script(&gateway).await;
    for _ in 0..5 {
        assert_eq!(post(&gateway, &chat("r")).await.status(), 429);
    }
    gateway.telemetry().wait_for_rows(105).await;
    let url = format!("{}/dashboard", gateway.admin_url());

    let dom = chromium(url.clone(), vec!["--dump-dom".into()]).await;
    assert!(
        dom.contains("data-loaded=\"true\""),
        "the script ran:\n{dom}"
    );
    let requests = points(&dom, "requests");
    assert!(requests.len() >= 3, "a bar per outcome:\n{dom}");
    assert_eq!(
        requests.iter().sum::<f64>(),
        105.0,
        "every request is drawn"
    );
    let route = points(&dom, "route-requests");
    assert_eq!(
        route.iter().sum::<f64>(),
        105.0,
        "route r's requests are drawn by minute"
    );
    assert_eq!(dom.matches("data-point=\"route\"").count(), 1);
    let limited = points(&dom, "limited");
    assert_eq!(limited.iter().sum::<f64>(), 5.0, "the limiter's refusals");
    let fallback = points(&dom, "fallback-rate");
    assert!(!fallback.is_empty(), "the fallback rate is drawn");
    assert!(fallback.iter().all(|r| (0.0..=1.0).contains(r)));
    let latency = points(&dom, "latency");
    assert_eq!(latency.len(), 4, "p50 and p95 for two deployments");
    assert!(latency.iter().all(|l| *l > 0.0));
    assert_eq!(dom.matches("data-point=\"breaker\"").count(), 2);
    assert!(
        dom.contains("data-alert=\"availability_below_target\""),
        "90% is under the 99% target"
    );

    // One screenshot for people to look at; target/ is not committed.
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        url,
        vec![
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,900".into(),
            "--hide-scrollbars".into(),
        ],
    )
    .await;
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot at {}", shot.display());
}

pub async fn on_the_client_port_the_dashboard_opens_with_the_token_as_basic_password() {
    let (primary, secondary) = scripted_fakes().await;
    let gateway = gateway(
        &scripted(&primary, &secondary)
            .with(OBSERVABILITY)
            .raw_text(),
    )
    .await;
    run_script(&gateway).await;
    let with_token = format!(
        "http://operator:{METRICS_TOKEN}@{}/dashboard",
        gateway.addr()
    );
    let dom = chromium(with_token, vec!["--dump-dom".into()]).await;
    assert!(
        dom.contains("data-loaded=\"true\""),
        "the page's own fetch of the scorecard was let in:\n{dom}"
    );
    assert_eq!(points(&dom, "requests").iter().sum::<f64>(), 100.0);

    let without = format!("{}/dashboard", gateway.url());
    let dom = chromium(without, vec!["--dump-dom".into()]).await;
    assert!(
        !dom.contains("data-point"),
        "nothing drawn without the token:\n{dom}"
    );
}
