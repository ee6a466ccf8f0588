//! The response cache against a real gateway and fake upstreams: hits and misses, scopes,
//! coalesced misses, what is never kept, `cache-control`, the log row and the admin purge.

use std::net::SocketAddr;

use futures_util::future::join_all;
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};
use switchyard::telemetry::CacheStatus;

use super::support::*;

const TOKEN: &str = "admin-token-for-cache-tests";

/// One provider, and route `r` over it that caches with `cache`.
fn cached(fake: &FakeHandle, cache: &str) -> TestGateway {
    TestGateway::new()
        .provider("p", fake)
        .route("r", &[("p", "m")], &format!("cache = {cache}"))
}

/// The same, with the admin API on.
async fn start_with_admin(config: &TestGateway) -> Gateway {
    let options = StartOptions {
        admin_token: Some(Secret::new(TOKEN)),
        ..StartOptions::default()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    Gateway::start_with(config.config(), addr, options)
        .await
        .expect("gateway starts")
}

fn ask(text: &str) -> Value {
    json!({"model": "r", "messages": [{"role": "user", "content": text}]})
}

async fn send(gateway: &Gateway, body: &Value, headers: &[(&str, &str)]) -> (String, Value) {
    let response = post_with(gateway, body, headers).await;
    assert_eq!(response.status(), 200);
    let cache = header(&response, "x-switchyard-cache").to_owned();
    (cache, response.json().await.unwrap())
}

#[tokio::test]
async fn an_identical_request_hits_and_a_different_one_misses() {
    let fake = scripted("p", []).await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;

    let first = post_with(&gateway, &ask("hello"), &[]).await;
    assert_eq!(header(&first, "x-switchyard-cache"), "miss");
    let first: Value = first.json().await.unwrap();

    // The same request, its keys reordered, with fields that cannot change the answer.
    let same = json!({"user": "u-9", "messages": [{"content": "hello", "role": "user"}],
                      "model": "r", "metadata": {"run": "2"}});
    let second = post_with(&gateway, &same, &[]).await;
    assert_eq!(header(&second, "x-switchyard-cache"), "hit");
    assert_eq!(header(&second, "x-switchyard-attempts"), "0");
    assert_eq!(header(&second, "x-switchyard-provider"), "p");
    assert!(header(&second, "age").parse::<u64>().is_ok());
    let row = record(&gateway, header(&second, "x-switchyard-request-id")).await;
    assert_eq!(row.cache, Some(CacheStatus::Hit));
    assert!(row.attempts.is_empty(), "a hit makes no upstream attempt");
    assert_eq!(second.json::<Value>().await.unwrap(), first);
    assert_eq!(fake.calls(), 1);

    let (cache, _) = send(&gateway, &ask("something else"), &[]).await;
    assert_eq!(cache, "miss");
    assert_eq!(fake.calls(), 2);
}

#[tokio::test]
async fn a_route_without_cache_says_nothing_and_keeps_nothing() {
    let fake = scripted("p", []).await;
    let gateway = one_route("p", &fake, "r", "m").await;
    for _ in 0..2 {
        let response = post_with(&gateway, &ask("hello"), &[]).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("x-switchyard-cache").is_none());
    }
    assert_eq!(fake.calls(), 2);
}

/// Keys of two users on one route: `scope` says whether they share entries.
async fn two_keys_ask_the_same(scope: &str) -> (Vec<String>, usize) {
    let fake = scripted("p", []).await;
    let gateway = cached(&fake, &format!(r#"{{ ttl = "1h", scope = "{scope}" }}"#))
        .with("[auth]\nrequired = true\n")
        .start()
        .await;
    let (ann, _) = stored_key(&gateway, "ann", "default", None).await;
    let (bob, _) = stored_key(&gateway, "bob", "default", None).await;
    let mut seen = Vec::new();
    for key in [&ann, &bob, &ann, &bob] {
        let bearer = format!("Bearer {key}");
        let (cache, _) = send(&gateway, &ask("hello"), &[("authorization", &bearer)]).await;
        seen.push(cache);
    }
    (seen, fake.calls())
}

#[tokio::test]
async fn two_keys_never_see_each_others_entries_on_a_key_scoped_route() {
    let (seen, calls) = two_keys_ask_the_same("key").await;
    assert_eq!(seen, ["miss", "miss", "hit", "hit"]);
    assert_eq!(calls, 2);
}

#[tokio::test]
async fn keys_share_entries_on_a_shared_route_and_within_a_role() {
    for scope in ["shared", "role"] {
        let (seen, calls) = two_keys_ask_the_same(scope).await;
        assert_eq!(seen, ["miss", "hit", "hit", "hit"], "{scope}");
        assert_eq!(calls, 1, "{scope}");
    }
}

#[tokio::test]
async fn fifty_concurrent_identical_misses_make_one_upstream_call() {
    let fake = scripted("p", []).await;
    let gateway = cached(&fake, r#"{ ttl = "1h", scope = "shared" }"#)
        .start()
        .await;
    // The first request reaches the fake and is held there until the other 49 wait on it.
    fake.hold();
    let body = ask("hello");
    let requests = join_all((0..50).map(|_| send(&gateway, &body, &[])));
    let release = async {
        fake.wait_until(|stats| stats.calls == 1).await;
        gateway.cache().wait_waiting(|waiting| *waiting == 49).await;
        fake.release();
    };
    let (answers, ()) = tokio::join!(requests, release);
    assert_eq!(fake.calls(), 1);
    let mut statuses: Vec<&str> = answers.iter().map(|(cache, _)| cache.as_str()).collect();
    statuses.sort_unstable();
    statuses.dedup();
    assert_eq!(statuses, ["coalesced", "miss"]);
    assert!(answers.iter().all(|(_, body)| body == &answers[0].1));
}

#[tokio::test]
async fn failed_answers_are_never_kept() {
    for failure in [
        Behavior::status(500),
        Behavior::status(429),
        Behavior::status(400),
    ] {
        let fake = scripted("p", [failure.clone(), Behavior::ok()]).await;
        let gateway = cached(&fake, r#"{ ttl = "1h" }"#)
            .with("[retry]\nattempts_per_step = 1\n")
            .start()
            .await;
        let failed = post_with(&gateway, &ask("hello"), &[]).await;
        assert_ne!(failed.status(), 200, "{failure:?}");
        assert_eq!(header(&failed, "x-switchyard-cache"), "miss");
        let (cache, _) = send(&gateway, &ask("hello"), &[]).await;
        assert_eq!(cache, "miss", "the failure was not kept: {failure:?}");
        let (cache, _) = send(&gateway, &ask("hello"), &[]).await;
        assert_eq!(cache, "hit", "the success was: {failure:?}");
    }
}

#[tokio::test]
async fn a_degraded_answer_and_a_filtered_one_are_not_kept() {
    let fake = scripted("p", [Behavior::status(503), Behavior::ok().body( r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}"#, ), Behavior::ok()]).await;
    let gateway = TestGateway::new()
        .provider("p", &fake)
        .route(
            "r",
            &[("p", "m")],
            "cache = { ttl = \"1h\" }\ndegraded = { content = \"Back soon.\" }",
        )
        .with("[retry]\nattempts_per_step = 1\n")
        .start()
        .await;
    let degraded = post_with(&gateway, &ask("hello"), &[]).await;
    assert_eq!(header(&degraded, "x-switchyard-outcome"), "degraded");
    let (cache, filtered) = send(&gateway, &ask("hello"), &[]).await;
    assert_eq!(cache, "miss", "the degraded answer was not kept");
    assert_eq!(filtered["choices"][0]["finish_reason"], "content_filter");
    let (cache, _) = send(&gateway, &ask("hello"), &[]).await;
    assert_eq!(cache, "miss", "nor the filtered one");
    let (cache, _) = send(&gateway, &ask("hello"), &[]).await;
    assert_eq!(cache, "hit");
}

#[tokio::test]
async fn no_store_neither_reads_nor_writes_and_no_cache_writes_without_reading() {
    let fake = scripted("p", []).await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;
    let no_store = [("cache-control", "no-store")];
    let no_cache = [("cache-control", "max-age=0, No-Cache")];

    assert_eq!(send(&gateway, &ask("a"), &no_store).await.0, "bypass");
    assert_eq!(
        send(&gateway, &ask("a"), &[]).await.0,
        "miss",
        "nothing was kept"
    );
    assert_eq!(
        send(&gateway, &ask("a"), &no_store).await.0,
        "bypass",
        "nor read"
    );

    assert_eq!(send(&gateway, &ask("b"), &no_cache).await.0, "bypass");
    assert_eq!(send(&gateway, &ask("b"), &[]).await.0, "hit", "kept");
    assert_eq!(fake.calls(), 4);
}

/// A fake that answers `content`, behind route `r`, which caches.
async fn answering(content: &str) -> (FakeHandle, Gateway) {
    let fake = scripted("p", [Behavior::ok().content(content)]).await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;
    (fake, gateway)
}

#[tokio::test]
async fn a_kept_answer_is_replayed_to_a_stream_with_its_usage() {
    let (fake, gateway) = answering("Kept words.").await;
    let (_, whole) = send(&gateway, &ask("hello"), &[]).await;

    let mut body = ask("hello");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = post_with(&gateway, &body, &[]).await;
    assert_eq!(header(&response, "x-switchyard-cache"), "hit");
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(streamed_text(&events), "Kept words.");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["usage"], whole["usage"]);
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_kept_message_is_replayed_as_messages_events() {
    let (fake, gateway) = answering("Kept words.").await;
    let whole = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert_eq!(header(&whole, "x-switchyard-cache"), "miss");
    let whole: Value = whole.json().await.unwrap();
    let streamed = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    assert_eq!(header(&streamed, "x-switchyard-cache"), "hit");
    let events = sse_events(&streamed.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "Kept words.");
    let (name, delta) = &events[events.len() - 2];
    assert_eq!(name, "message_delta");
    assert_eq!(delta["delta"]["stop_reason"], whole["stop_reason"]);
    assert_eq!(delta["usage"], whole["usage"]);
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_streamed_answer_is_kept_and_served_to_json_and_streams() {
    let fake = scripted("p", [Behavior::ok().content("one two three").chunks(3, 0)]).await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;
    let mut stream = ask("hello");
    stream["stream"] = json!(true);
    let first = post_with(&gateway, &stream, &[]).await;
    assert_eq!(header(&first, "x-switchyard-cache"), "miss");
    assert_eq!(
        streamed_text(&sse_data(&first.text().await.unwrap())),
        "one two three"
    );

    // The client did not ask for usage; the kept answer has it all the same.
    let (cache, whole) = send(&gateway, &ask("hello"), &[]).await;
    assert_eq!(cache, "hit");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["content"], "one two three");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    assert!(
        whole["usage"]["completion_tokens"].as_u64().is_some(),
        "{whole}"
    );

    let again = post_with(&gateway, &stream, &[]).await;
    assert_eq!(header(&again, "x-switchyard-cache"), "hit");
    assert_eq!(
        streamed_text(&sse_data(&again.text().await.unwrap())),
        "one two three"
    );
    assert_eq!(fake.calls(), 1);
    let no_cache = [("cache-control", "no-cache")];
    let response = post_with(&gateway, &stream, &no_cache).await;
    assert_eq!(header(&response, "x-switchyard-cache"), "bypass");
}

#[tokio::test]
async fn a_streamed_message_is_kept_and_served_as_json() {
    let fake = scripted("p", [Behavior::ok().content("one two three").chunks(3, 0)]).await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;
    let streamed = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    assert_eq!(header(&streamed, "x-switchyard-cache"), "miss");
    let events = sse_events(&streamed.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "one two three");
    let whole = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert_eq!(header(&whole, "x-switchyard-cache"), "hit");
    let whole: Value = whole.json().await.unwrap();
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["content"][0]["text"], "one two three");
    assert_eq!(whole["stop_reason"], "end_turn");
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_cut_or_failed_stream_is_not_kept() {
    let fake = scripted(
        "p",
        [
            Behavior::ok().content("a b c d").chunks(4, 0).drop_after(2),
            Behavior::ok()
                .content("a b c d")
                .chunks(4, 0)
                .error_after(2),
            Behavior::ok().content("whole"),
        ],
    )
    .await;
    let gateway = cached(&fake, r#"{ ttl = "1h" }"#).start().await;
    let mut stream = ask("hello");
    stream["stream"] = json!(true);
    for _ in 0..2 {
        let cut = post_with(&gateway, &stream, &[]).await;
        assert_eq!(header(&cut, "x-switchyard-cache"), "miss");
        let _ = cut.text().await;
    }
    let (cache, whole) = send(&gateway, &ask("hello"), &[]).await;
    assert_eq!(cache, "miss", "neither broken stream was kept");
    assert_eq!(whole["choices"][0]["message"]["content"], "whole");
}

#[tokio::test]
async fn the_admin_api_reports_the_cache_and_purges_it() {
    let fake = scripted("p", []).await;
    let config = cached(&fake, r#"{ ttl = "1h" }"#).route(
        "other",
        &[("p", "m")],
        "cache = { ttl = \"1h\" }",
    );
    let gateway = start_with_admin(&config).await;
    let mut other = ask("hello");
    other["model"] = json!("other");
    for body in [&ask("hello"), &ask("hello"), &other] {
        send(&gateway, body, &[]).await;
    }
    let stats = |gateway| async move {
        admin_request(
            gateway,
            Some(TOKEN),
            reqwest::Method::GET,
            "/admin/cache",
            None,
        )
        .await
        .json::<Value>()
        .await
        .unwrap()
    };
    let before = stats(&gateway).await;
    assert_eq!(before["entries"], 2);
    assert_eq!(
        (before["hits"].as_u64(), before["misses"].as_u64()),
        (Some(1), Some(2))
    );

    let purge = |path: &'static str| {
        admin_request(&gateway, Some(TOKEN), reqwest::Method::DELETE, path, None)
    };
    let purged: Value = purge("/admin/cache?route=other")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(purged["purged"], 1);
    assert_eq!(
        send(&gateway, &ask("hello"), &[]).await.0,
        "hit",
        "r's entry stays"
    );
    let purged: Value = purge("/admin/cache").await.json().await.unwrap();
    assert_eq!(purged["purged"], 1);
    assert_eq!(send(&gateway, &ask("hello"), &[]).await.0, "miss");
    let refused = purge("/admin/cache?everything=yes").await;
    assert_eq!(refused.status(), 400);
    let anonymous = admin_request(
        &gateway,
        None,
        reqwest::Method::DELETE,
        "/admin/cache",
        None,
    );
    assert_eq!(anonymous.await.status(), 401);
}

#[tokio::test]
async fn a_cache_config_with_a_bad_ttl_or_scope_is_refused_by_field() {
    for (cache, field) in [
        (r#"{ ttl = "soon" }"#, "routes[0].cache.ttl"),
        (r#"{ ttl = "0s" }"#, "routes[0].cache.ttl"),
        (
            r#"{ ttl = "1h", scope = "everyone" }"#,
            "routes[0].cache.scope",
        ),
    ] {
        let fake_url = "http://127.0.0.1:9/v1";
        let text = TestGateway::new()
            .provider_at("p", fake_url, "key_required = false")
            .route("r", &[("p", "m")], &format!("cache = {cache}"))
            .text();
        let error = switchyard::config::Config::parse(&text)
            .unwrap_err()
            .to_string();
        assert!(error.contains(field), "{cache}: {error}");
    }
    let text = TestGateway::new()
        .with("[cache]\nbackend = \"disk\"\n")
        .text();
    let error = switchyard::config::Config::parse(&text)
        .unwrap_err()
        .to_string();
    assert!(error.contains("cache.backend"), "{error}");
}
