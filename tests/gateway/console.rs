//! The console and the admin calls it reads: `/console` served with a strict policy and no
//! inline script; `/admin/requests` (filters, CSV), `/admin/requests/{id}` (attempts in
//! order), `/admin/spend`, `/admin/budgets` and `/admin/config` (secrets redacted), each
//! refused without the admin token, and the metrics token refused on every write.

use std::sync::Arc;

use reqwest::Method;
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};
use switchyard::store::now_ms;
use switchyard::store::request_log::{LogAttempt, LogRow};

use super::support::*;

const TOKEN: &str = "admin-token-for-console-tests";
const URL_PASSWORD: &str = "url-password-7c1e";

/// The fakes behind a gateway, kept alive as long as it.
type Fakes = (FakeHandle, FakeHandle);

/// Route `r` = primary (answering as `script` says) → secondary, with quick retries and one
/// attempt a step; the admin API on with [`TOKEN`], and [`METRICS_TOKEN`] for the
/// observability endpoints.
async fn started_with(script: Vec<Behavior>, extra: &str) -> (Fakes, Gateway) {
    let primary = scripted("primary", script).await;
    let secondary = scripted("secondary", []).await;
    let config = TestGateway::new()
        .provider("primary", &primary)
        .provider("secondary", &secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .fast_retry()
        .with("attempts_per_step = 1\n")
        .with(OBSERVABILITY)
        .with(extra)
        .config();
    let options = StartOptions {
        admin_token: Some(Secret::new(TOKEN)),
        ..StartOptions::default()
    };
    let gateway = Gateway::start_with(config, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .expect("gateway starts");
    ((primary, secondary), gateway)
}

async fn started(extra: &str) -> (Fakes, Gateway) {
    started_with(Vec::new(), extra).await
}

async fn admin(gateway: &Gateway, path: &str) -> (u16, Value) {
    let response = admin_request(gateway, Some(TOKEN), Method::GET, path, None).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A row of the log, as the writer would store it.
fn row(
    id: &str,
    time_ms: i64,
    key: Option<&str>,
    user: &str,
    route: &str,
    outcome: &str,
    status: u16,
) -> LogRow {
    LogRow {
        id: id.into(),
        time_ms,
        key_id: key.map(str::to_owned),
        user: Some(user.into()),
        route: Some(Arc::from(route)),
        outcome: outcome.into(),
        step: Some(0),
        provider: Some(Arc::from("primary")),
        model: Some(Arc::from("model-a")),
        attempts: vec![LogAttempt {
            step: 0,
            provider: Arc::from("primary"),
            model: Arc::from("model-a"),
            failure: None,
            status: Some(status),
            latency_ms: 1.0,
            reached_upstream: true,
            hedge: false,
        }],
        status,
        latency_ms: 2.0,
        ttft_ms: None,
        overhead_ms: 0.1,
        tokens_in: Some(10),
        tokens_out: Some(5),
        cost_usd: Some(0.25),
        stream: false,
        partial: false,
        error: None,
        cache: None,
        trace_id: None,
    }
}

fn ids(answer: &Value) -> Vec<String> {
    answer["requests"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_and_no_inline_script() {
    let (_fakes, gateway) = started("").await;
    let page = client()
        .get(format!("{}/console", gateway.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let policy = header(&page, "content-security-policy").to_owned();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(part), "{policy}");
    }
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"));
    assert_eq!(header(&page, "x-frame-options"), "DENY");
    assert_eq!(header(&page, "referrer-policy"), "no-referrer");
    assert!(header(&page, "set-cookie").is_empty());
    let html = page.text().await.unwrap();
    // Every script comes from a file; no element carries an inline style or handler.
    for script in html.split("<script").skip(1) {
        assert!(
            script.starts_with(" type=\"module\" src=\"/console/"),
            "{script}"
        );
        assert!(script.split_once('>').unwrap().1.starts_with("</script>"));
    }
    assert!(!html.contains(" style=") && !html.contains(" onclick="));

    for (file, kind) in [
        ("console.js", "text/javascript"),
        ("api.js", "text/javascript"),
        ("views.js", "text/javascript"),
        ("console.css", "text/css"),
    ] {
        let response = client()
            .get(format!("{}/console/{file}", gateway.admin_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{file}");
        assert!(
            header(&response, "content-type").starts_with(kind),
            "{file}"
        );
        assert_eq!(header(&response, "x-content-type-options"), "nosniff");
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("innerHTML") && !text.contains("document.cookie"),
            "{file}"
        );
    }
    let missing = client()
        .get(format!("{}/console/secrets.txt", gateway.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn without_any_token_configured_there_is_no_console() {
    let primary = scripted("primary", []).await;
    let gateway = TestGateway::new()
        .provider("primary", &primary)
        .route("r", &[("primary", "m")], "")
        .start()
        .await;
    let response = client()
        .get(format!("{}/console", gateway.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn the_new_admin_calls_need_the_admin_token_and_the_metrics_token_writes_nothing() {
    let (_fakes, gateway) = started("").await;
    let reads = [
        "/admin/requests",
        "/admin/requests?format=csv",
        "/admin/requests/01a24528-866f-7673-8f43-b281a5da8da9",
        "/admin/spend",
        "/admin/budgets",
        "/admin/config",
    ];
    for path in reads {
        for token in [None, Some(METRICS_TOKEN), Some("wrong")] {
            let response = admin_request(&gateway, token, Method::GET, path, None).await;
            assert_eq!(response.status(), 401, "{path} with {token:?}");
            let body: Value = response.json().await.unwrap();
            error_message(&body);
        }
    }
    for path in &reads[..2] {
        assert_eq!(admin(&gateway, path).await.0, 200, "{path}");
    }
    for path in &reads[3..] {
        assert_eq!(admin(&gateway, path).await.0, 200, "{path}");
    }
    // Every call that changes something, with the read-only token.
    let writes: [(Method, &str, Option<Value>); 7] = [
        (
            Method::POST,
            "/admin/virtual-keys",
            Some(json!({"user": "u", "role": "default"})),
        ),
        (
            Method::PATCH,
            "/admin/virtual-keys/some-id",
            Some(json!({"requests_per_minute": 1})),
        ),
        (Method::DELETE, "/admin/virtual-keys/some-id", None),
        (
            Method::PUT,
            "/admin/keys/primary",
            Some(json!({"secret": "sk-x-0123456789"})),
        ),
        (Method::POST, "/admin/keys/primary/rollback", None),
        (Method::POST, "/admin/breakers/reset", None),
        (Method::POST, "/admin/reload", None),
    ];
    for (method, path, body) in writes {
        let response = admin_request(
            &gateway,
            Some(METRICS_TOKEN),
            method.clone(),
            path,
            body.as_ref(),
        )
        .await;
        assert_eq!(response.status(), 401, "{method} {path}");
    }
    // The read-only token keeps its view.
    assert_eq!(observe(&gateway, "/v1/scorecard").await.status(), 200);
    assert_eq!(observe(&gateway, "/dashboard").await.status(), 200);
}

#[tokio::test]
async fn the_request_log_filters_by_key_user_route_outcome_status_and_time() {
    let (_fakes, gateway) = started("").await;
    let now = now_ms();
    let rows = vec![
        row("a", now - 50_000, Some("key-1"), "ann", "r", "success", 200),
        row(
            "b",
            now - 40_000,
            Some("key-2"),
            "bob",
            "r",
            "fallback",
            200,
        ),
        row(
            "c",
            now - 30_000,
            Some("key-1"),
            "ann",
            "other",
            "error",
            502,
        ),
        row("d", now - 20_000, None, "cat", "r", "rejected", 429),
        row("e", now - 10_000, Some("key-1"), "ann", "r", "error", 503),
    ];
    gateway.store().insert_log(rows).await.unwrap();

    let found = |query: &str| {
        let path = format!("/admin/requests?{query}");
        let gateway = &gateway;
        async move {
            let (status, answer) = admin(gateway, &path).await;
            assert_eq!(status, 200, "{path}: {answer}");
            ids(&answer)
        }
    };
    assert_eq!(found("").await, ["e", "d", "c", "b", "a"], "newest first");
    assert_eq!(found("key=key-1").await, ["e", "c", "a"]);
    assert_eq!(found("user=bob").await, ["b"]);
    assert_eq!(found("route=other").await, ["c"]);
    assert_eq!(found("outcome=error").await, ["e", "c"]);
    assert_eq!(found("status=429").await, ["d"]);
    assert_eq!(found("status=5xx").await, ["e", "c"]);
    assert_eq!(found("key=key-1&status=5xx&route=r").await, ["e"]);
    let since = now - 35_000;
    let until = now - 15_000;
    assert_eq!(
        found(&format!("since={since}&until={until}")).await,
        ["d", "c"]
    );
    assert_eq!(found("since=45s").await, ["e", "d", "c", "b"]);
    let (_, limited) = admin(&gateway, "/admin/requests?limit=2").await;
    assert_eq!(ids(&limited), ["e", "d"]);
    assert_eq!(limited["more"], true);
    assert_eq!(limited["requests"][0]["attempt_count"], 1);
    assert!(limited["requests"][0].get("attempts").is_none());

    for bad in ["status=6xx", "since=yesterday", "format=xml", "colour=red"] {
        let (status, answer) = admin(&gateway, &format!("/admin/requests?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        error_message(&answer);
    }
}

#[tokio::test]
async fn the_request_log_exports_csv_with_formulas_defused() {
    let (_fakes, gateway) = started("").await;
    let now = now_ms();
    let mut risky = row(
        "x",
        now - 1_000,
        Some("key-1"),
        "=HYPERLINK(\"http://evil\")",
        "r",
        "error",
        502,
    );
    risky.error = Some("upstream said: \"no\", twice".into());
    let rows = vec![
        row("w", now - 2_000, Some("key-1"), "ann", "r", "success", 200),
        risky,
    ];
    gateway.store().insert_log(rows).await.unwrap();

    let response = admin_request(
        &gateway,
        Some(TOKEN),
        Method::GET,
        "/admin/requests?key=key-1&format=csv",
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("text/csv"));
    assert!(header(&response, "content-disposition").starts_with("attachment;"));
    let text = response.text().await.unwrap();
    let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("id,time,time_ms,key_id,user,route,outcome,status,"));
    assert!(lines[1].starts_with("x,"), "newest first: {text}");
    assert!(
        lines[1].contains(",\"'=HYPERLINK(\"\"http://evil\"\")\","),
        "{text}"
    );
    assert!(
        lines[1].contains(",\"upstream said: \"\"no\"\", twice\","),
        "{text}"
    );
    assert!(lines[2].starts_with("w,") && lines[2].contains(",success,200,"));
}

#[tokio::test]
async fn one_request_shows_its_attempts_in_the_order_they_were_made() {
    let (_fakes, gateway) = started_with(vec![Behavior::status(500)], "").await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let id = header(&response, "x-request-id").to_owned();
    record(&gateway, &id).await;
    // The writer stores the row a moment after the record is made.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let detail = loop {
        let (status, detail) = admin(&gateway, &format!("/admin/requests/{id}")).await;
        if status == 200 {
            break detail;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never stored: {detail}"
        );
        gateway
            .telemetry()
            .wait_for_rows(gateway.telemetry().rows_written() + 1)
            .await;
    };
    assert_eq!(detail["id"], id);
    assert_eq!(detail["outcome"], "fallback");
    let attempts = detail["attempts"].as_array().unwrap();
    let order: Vec<(&str, Option<&str>)> = attempts
        .iter()
        .map(|a| (a["provider"].as_str().unwrap(), a["failure"].as_str()))
        .collect();
    assert_eq!(
        order,
        [("primary", Some("server_error")), ("secondary", None)]
    );

    for unknown in ["01a24528-866f-7673-8f43-b281a5da8da9", "not-a-uuid"] {
        let (status, answer) = admin(&gateway, &format!("/admin/requests/{unknown}")).await;
        assert_eq!(status, 404, "{unknown}");
        error_message(&answer);
    }
}

#[tokio::test]
async fn spend_adds_up_the_log_per_key_and_role_against_their_budgets() {
    let roles = "[[roles]]\nname = \"team\"\nbudget_per_day = 5\nbudget_per_month = 50\n";
    let (_fakes, gateway) = started(roles).await;
    let (status, created) = admin_post(
        &gateway,
        "/admin/virtual-keys",
        json!({"user": "ann", "role": "team", "budget_per_day": 2}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let key_id = created["id"].as_str().unwrap();
    let now = now_ms();
    let day_start = now - now.rem_euclid(86_400_000);
    let mut rows = vec![
        row(
            "today-1",
            now - 1_000,
            Some(key_id),
            "ann",
            "r",
            "success",
            200,
        ),
        row(
            "today-2",
            now - 2_000,
            Some(key_id),
            "ann",
            "r",
            "success",
            200,
        ),
        row("keyless", now - 3_000, None, "walk-in", "r", "success", 200),
    ];
    // Yesterday counts for the month unless today is the 1st.
    let earlier_day = day_start - 3_600_000;
    let earlier_in_month = month_of(earlier_day) == month_of(now);
    if earlier_in_month {
        rows.push(row(
            "earlier",
            earlier_day,
            Some(key_id),
            "ann",
            "r",
            "success",
            200,
        ));
    }
    gateway.store().insert_log(rows).await.unwrap();

    let (status, spend) = admin(&gateway, "/admin/spend").await;
    assert_eq!(status, 200, "{spend}");
    let key = spend["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id)
        .unwrap();
    assert_eq!(key["day_usd"], 0.5);
    assert_eq!(key["month_usd"], if earlier_in_month { 0.75 } else { 0.5 });
    assert_eq!(key["budget_per_day"], 2, "the key's own budget");
    assert_eq!(key["budget_per_month"], 50, "its role's");
    assert_eq!(key["day_used"], 0.25);
    let team = spend["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "team")
        .unwrap();
    assert_eq!(team["day_usd"], 0.5);
    assert_eq!(team["budget_per_day_per_caller"], 5);
    assert_eq!(spend["users"][0]["user"], "walk-in");
    assert_eq!(spend["users"][0]["day_usd"], 0.25);
    assert!(
        !spend
            .to_string()
            .contains(created["secret"].as_str().unwrap())
    );
}

/// The month and year of an epoch-ms time (UTC), as `Nov 1994`: an HTTP date's.
fn month_of(ms: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.unsigned_abs());
    httpdate::fmt_http_date(time)[8..16].to_owned()
}

async fn admin_post(gateway: &Gateway, path: &str, body: Value) -> (u16, Value) {
    let response = admin_request(gateway, Some(TOKEN), Method::POST, path, Some(&body)).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_budgets_show_the_retry_budget_and_the_hedging_routes() {
    let extra = "[[routes]]\nname = \"hedged\"\nsteps = [{ provider = \"primary\", model = \"m\" }, \
                 { provider = \"secondary\", model = \"m\" }]\nhedge = { after = \"p95\", max = 1 }\n";
    let (_fakes, gateway) = started(extra).await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    let (status, budgets) = admin(&gateway, "/admin/budgets").await;
    assert_eq!(status, 200);
    assert_eq!(budgets["retry"]["budget_percent"], 20.0);
    assert_eq!(budgets["retry"]["off"], false);
    let deployments = budgets["retry"]["deployments"].as_array().unwrap();
    assert!(
        deployments
            .iter()
            .any(|d| d["provider"] == "primary" && d["requests"] == 1),
        "{budgets}"
    );
    assert_eq!(
        budgets["hedge"]["routes"],
        json!([{"route": "hedged", "after": "p95", "max": 1}])
    );
}

#[tokio::test]
async fn the_config_is_shown_with_every_secret_redacted() {
    let extra = format!(
        "[[providers]]\nname = \"proxied\"\nkind = \"openai\"\n\
         base_url = \"http://ann:{URL_PASSWORD}@127.0.0.1:9/v1\"\nkey_required = false\n"
    );
    let (_fakes, gateway) = started(&extra).await;
    let (status, config) = admin(&gateway, "/admin/config").await;
    assert_eq!(status, 200);
    let text = config["config"].as_str().unwrap();
    assert!(
        text.contains("proxied") && text.contains("http://***@127.0.0.1:9/v1"),
        "{text}"
    );
    assert!(
        text.contains("metrics_token: Some(") && text.contains("***"),
        "{text}"
    );
    let whole = config.to_string();
    for secret in [URL_PASSWORD, METRICS_TOKEN, TOKEN] {
        assert!(!whole.contains(secret), "{secret} shown");
    }
    assert_eq!(config["sha256"].as_str().unwrap().len(), 16);
}

#[tokio::test]
async fn with_an_admin_listener_the_console_is_there_and_not_on_the_client_port() {
    let (_fakes, gateway) = started("[server]\nadmin_listen = \"127.0.0.1:0\"\n").await;
    assert_ne!(gateway.admin_url(), gateway.url());
    let on = |base: String| async move {
        client()
            .get(format!("{base}/console"))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(on(gateway.admin_url()).await, 200);
    assert_eq!(on(gateway.url()).await, 404);
}
