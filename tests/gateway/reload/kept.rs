//! What a reload keeps: an open breaker stays open, and limit counts keep counting.

use serde_json::Value;
use switchyard::fake::{Behavior, FakeUpstream};

use super::super::support::*;
use super::{FromFile, TOKEN};

#[tokio::test]
async fn an_open_breaker_stays_open_across_a_reload() {
    let primary = FakeUpstream::new("primary")
        .then(Behavior::status(500))
        .start()
        .await
        .unwrap();
    let secondary = FakeUpstream::new("secondary").start().await.unwrap();
    let config = |extra: &str| {
        format!(
            "{}{}{}{FAST_RETRY}\n[breaker]\nconsecutive_failures = 1\ncooldown = \"60s\"\ncooldown_min = \"60s\"\n{extra}",
            provider("primary", &primary),
            provider("secondary", &secondary),
            route("r", &[("primary", "m"), ("secondary", "m")], ""),
        )
    };
    let served = FromFile::start(&config("")).await;
    let response = post(&served.gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    let calls = primary.calls();
    assert!(calls >= 1);

    served.rewrite(&config(&route("fresh", &[("secondary", "m2")], "")));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["needs_restart"].as_array().unwrap().is_empty(),
        "{body}"
    );

    for _ in 0..5 {
        let response = post(&served.gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    }
    assert_eq!(
        primary.calls(),
        calls,
        "the open breaker still skips the primary"
    );
    let breakers: Value = client()
        .get(format!("{}/admin/breakers", served.gateway.admin_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let open = breakers["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["provider"] == "primary" && b["state"] == "open");
    assert!(open, "{breakers}");
}

#[tokio::test]
async fn limit_counts_survive_a_reload_and_the_role_takes_its_new_limit() {
    let up = FakeUpstream::new("up").start().await.unwrap();
    let config = |per_minute: u32, extra: &str| {
        format!(
            "[auth]\nrequired = false\ndefault_role = \"ae\"\n\
             [[roles]]\nname = \"ae\"\nrequests_per_minute = {per_minute}\nwindow = \"sliding\"\n{}{}{extra}",
            provider("up", &up),
            route("r", &[("up", "m")], ""),
        )
    };
    let served = FromFile::start(&config(2, "")).await;
    for _ in 0..2 {
        assert_eq!(post(&served.gateway, &chat("r")).await.status(), 200);
    }
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 429);

    // One more a minute: the two already counted still count.
    served.rewrite(&config(3, &route("fresh", &[("up", "m2")], "")));
    let (status, body) = served.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(post(&served.gateway, &chat("fresh")).await.status(), 200);
    assert_eq!(post(&served.gateway, &chat("r")).await.status(), 429);
}
