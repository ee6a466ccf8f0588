//! `forward_headers`: the client headers a provider is sent as they came, a server-wide
//! default, and the names no config may give.

use switchyard::fake::Behavior;

use super::support::*;

#[tokio::test]
async fn named_client_headers_reach_the_provider_that_names_them_and_no_other() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
    let gateway = TestGateway::new()
        .with("[server]\nforward_headers = [\"x-trace-id\"]\n")
        .provider("primary", &primary)
        .with("forward_headers = [\"OpenAI-Organization\", \"x-trace-id\"]\n")
        .provider("secondary", &secondary)
        .route("r", &[("primary", "a"), ("secondary", "b")], "")
        .fast_retry()
        .start()
        .await;
    let headers = [
        ("openai-organization", "org-7"),
        ("x-trace-id", "t-1"),
        ("x-not-named", "nope"),
    ];
    assert_eq!(
        post_with(&gateway, &chat("r"), &headers).await.status(),
        200
    );
    let to_primary = &primary.requests()[0].headers;
    assert_eq!(
        to_primary.get("openai-organization").map(String::as_str),
        Some("org-7")
    );
    assert_eq!(
        to_primary.get("x-trace-id").map(String::as_str),
        Some("t-1")
    );
    assert!(!to_primary.contains_key("x-not-named"));
    let to_secondary = &secondary.requests()[0].headers;
    assert_eq!(
        to_secondary.get("x-trace-id").map(String::as_str),
        Some("t-1"),
        "the server-wide default"
    );
    assert!(!to_secondary.contains_key("openai-organization"));
}

#[tokio::test]
async fn nothing_is_forwarded_unless_named() {
    let fake = scripted("p", []).await;
    let gateway = one_route("p", &fake, "r", "m").await;
    let headers = [("openai-organization", "org-7"), ("x-trace-id", "t-1")];
    assert_eq!(
        post_with(&gateway, &chat("r"), &headers).await.status(),
        200
    );
    let sent = &fake.requests()[0].headers;
    assert!(!sent.contains_key("openai-organization") && !sent.contains_key("x-trace-id"));
}

#[test]
fn credentials_cookies_and_hop_by_hop_headers_are_refused_at_load() {
    let text = TestGateway::new()
        .with("[server]\nforward_headers = [\"Authorization\", \"x-ok\"]\n")
        .provider_at("p", "http://127.0.0.1:9/v1", "key_required = false")
        .with("forward_headers = [\"cookie\", \"Connection\", \"x-api-key\", \"api-key\", \"traceparent\", \"bad header\"]\n")
        .route("r", &[("p", "m")], "")
        .text();
    let error = switchyard::config::Config::parse(&text)
        .unwrap_err()
        .to_string();
    for field in [
        "server.forward_headers[0]: `Authorization` cannot be forwarded",
        "providers[0].forward_headers[0]: `cookie` cannot be forwarded",
        "providers[0].forward_headers[1]: `Connection` cannot be forwarded",
        "providers[0].forward_headers[2]: `x-api-key` cannot be forwarded",
        "providers[0].forward_headers[3]: `api-key` cannot be forwarded",
        "providers[0].forward_headers[4]: `traceparent` cannot be forwarded: trace context is sent on already",
        "providers[0].forward_headers[5]: `bad header` is not a header name",
    ] {
        assert!(error.contains(field), "{field}\n{error}");
    }
    assert!(!error.contains("x-ok"), "{error}");
}
