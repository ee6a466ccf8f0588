//! A collector that is down (its port closed, for 20 s of load) or stalled (it takes exports
//! and never answers), under load: no request fails or waits on it, the lost spans are
//! counted, and export resumes by itself once the collector is back.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

use super::super::support::*;
use super::receiver::Receiver;
use super::{of_kind, one_traced_route, traced, wait_for_dropped};

/// `waves` bursts of 25 requests at once; every one must be answered 200.
async fn load(gateway: &switchyard::server::Gateway, waves: usize) {
    let body = chat("r");
    for _ in 0..waves {
        let answers = join_all((0..25).map(|_| post(gateway, &body))).await;
        assert!(answers.iter().all(|a| a.status() == 200));
    }
}

#[tokio::test]
async fn a_collector_that_is_down_fails_no_request_and_export_resumes_when_it_is_back() {
    let receiver = Receiver::start().await;
    let (_fake, gateway) = one_traced_route(&receiver).await;
    // Up first, so the exporter holds a connection the outage then breaks.
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    receiver.stop();
    // The outage lasts as long as the issue's: 20 s of requests, ten at a time. The clock
    // only says when to stop sending; nothing waits on it.
    let outage = Instant::now();
    let (mut waves, body) = (0, chat("r"));
    while outage.elapsed() < Duration::from_secs(20) {
        let answers = join_all((0..10).map(|_| post(&gateway, &body))).await;
        assert!(answers.iter().all(|a| a.status() == 200));
        waves += 1;
    }
    // A server span and a client span a request.
    wait_for_dropped(&gateway, 20.0 * waves as f64).await;
    assert_eq!(
        receiver.spans().len(),
        2,
        "nothing arrived while it was down"
    );

    receiver.restart().await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 4).await;
    assert_eq!(of_kind(&receiver.spans(), SpanKind::Server).len(), 2);
}

#[tokio::test]
async fn a_collector_that_stalls_holds_up_no_request_and_export_resumes_after() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", []).await;
    let gateway = traced(&receiver)
        .set("timeout", "100ms")
        .set("max_queue_spans", 8)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    receiver.stall(true);
    load(&gateway, 4).await;
    // The queue holds 8 and the stalled export a batch: the rest are dropped at once.
    wait_for_dropped(&gateway, 150.0).await;

    receiver.stall(false);
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    let servers = of_kind(&receiver.spans(), SpanKind::Server).len();
    assert!(servers >= 1, "export resumed");
}
