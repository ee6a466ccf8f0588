//! `switchyard health`, the container image's HEALTHCHECK: exit 0 when `/readyz` answers a
//! 2xx, 1 with the reason when it answers anything else or nothing.

use std::process::Output;

use super::process::BIN;
use super::support::*;

/// Runs `switchyard health --url URL` off the runtime that serves the gateway.
async fn health(url: String) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .args(["health", "--url", &url, "--timeout", "10"])
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_ready_gateway_passes_and_anything_else_fails_with_the_reason() {
    let fake = scripted("up", []).await;
    let gateway = one_route("up", &fake, "r", "m").await;

    let ready = health(format!("{}/readyz", gateway.url())).await;
    assert!(ready.status.success(), "{ready:?}");

    // The fake has no /readyz: a 404 is not ready.
    let not_found = health(format!("http://{}/readyz", fake.addr())).await;
    assert_eq!(not_found.status.code(), Some(1), "{not_found:?}");
    assert!(
        String::from_utf8_lossy(&not_found.stderr).contains("answered 404"),
        "{not_found:?}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let refused = health(format!("http://{closed}/readyz")).await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot connect"),
        "{refused:?}"
    );
}
