//! The attempt loop on paused time, with a scripted attempter.

use std::collections::VecDeque;

use super::*;

/// Answers each attempt from a script: after `delay`, a status (200 serves).
struct Scripted {
    script: std::sync::Mutex<VecDeque<(Duration, u16, Option<&'static str>)>>,
    calls: std::sync::Mutex<Vec<String>>,
}

impl Attempter for Scripted {
    type Output = ();

    async fn attempt(
        &self,
        step: &Deployment,
        _provider: &Provider,
        _key: Option<&KeyLease>,
        timeout: Duration,
        _span: opentelemetry::trace::SpanId,
    ) -> Attempt<()> {
        self.calls.lock().unwrap().push(step.provider.to_string());
        let next = self.script.lock().unwrap().pop_front();
        let (delay, status, retry_after) = next.unwrap_or((Duration::ZERO, 200, None));
        if delay > timeout {
            tokio::time::sleep(timeout).await;
            return Attempt::Failed(Failure::without_reply(FailureClass::Timeout));
        }
        tokio::time::sleep(delay).await;
        if status == 200 {
            return Attempt::Served(());
        }
        let mut headers = http::header::HeaderMap::new();
        if let Some(after) = retry_after {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static(after));
        }
        let status = StatusCode::from_u16(status).unwrap();
        let (class, action) = super::super::classify::classify_status(status, &headers, b"", false);
        Attempt::Failed(Failure {
            class,
            action,
            reply: Some(UpstreamReply {
                upstream_request_id: None,
                status,
                content_type: None,
                body: Bytes::new(),
            }),
        })
    }
}

fn config(retry: &str) -> Config {
    Config::parse(&format!(
        r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1"
key_required = false
[[providers]]
name = "b"
kind = "openai"
base_url = "http://127.0.0.1:1"
key_required = false
[[routes]]
name = "r"
steps = [{{ provider = "a", model = "m" }}, {{ provider = "b", model = "m" }}]
[retry]
{retry}
"#
    ))
    .unwrap()
}

async fn run(
    config: &Config,
    script: Vec<(Duration, u16, Option<&'static str>)>,
) -> (ChainRun<()>, Vec<String>, Duration) {
    let keys = KeyRing::default();
    let health = std::sync::Arc::new(Health::new(config.breaker.clone()));
    let started = Instant::now();
    let attempter = Scripted {
        script: std::sync::Mutex::new(script.into()),
        calls: std::sync::Mutex::new(Vec::new()),
    };
    let inputs = ChainInputs {
        config,
        keys: &keys,
        health: &health,
        route: &config.routes[0],
        first_step: 0,
        deadline: started + config.retry.request_deadline,
        caller: crate::router::breaker::CallerTag::new("test"),
        traced: false,
    };
    let run = run_chain(inputs, &attempter).await;
    (
        run,
        attempter.calls.into_inner().unwrap(),
        started.elapsed(),
    )
}

fn served_step<T>(run: &ChainRun<T>) -> Option<usize> {
    match run.end {
        ChainEnd::Served { step, .. } => Some(step),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_waits_for_its_retry_after_then_retries_the_same_step() {
    let config = config("");
    let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 429, Some("2"))]).await;
    assert_eq!(served_step(&run), Some(0));
    assert_eq!(calls, ["a", "a"]);
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_deadline_moves_on_at_once() {
    let config = config("");
    let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 429, Some("3600"))]).await;
    assert_eq!(served_step(&run), Some(1));
    assert_eq!(calls, ["a", "b"]);
    assert_eq!(elapsed, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn attempts_per_step_and_max_attempts_bound_the_retries() {
    let config = config(
        "attempts_per_step = 2\nmax_attempts = 3\nbackoff_base = \"10ms\"\nbackoff_max = \"20ms\"",
    );
    let always_429 = vec![(Duration::ZERO, 429, None); 10];
    let (run, calls, _) = run(&config, always_429).await;
    assert!(matches!(run.end, ChainEnd::Exhausted));
    assert_eq!(calls, ["a", "a", "b"]);
    assert_eq!(run.upstream_attempts(), 3);
}

#[tokio::test(start_paused = true)]
async fn hanging_upstreams_cannot_outlast_the_deadline() {
    let config = config("attempt_timeout = \"4s\"\nrequest_deadline = \"10s\"");
    let hang = (Duration::from_secs(3600), 200, None);
    let (run, _, elapsed) = run(&config, vec![hang; 10]).await;
    assert!(matches!(run.end, ChainEnd::Exhausted));
    assert!(elapsed <= Duration::from_secs(10), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_5xx_moves_on_without_waiting() {
    let config = config("");
    let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 500, None)]).await;
    assert_eq!(served_step(&run), Some(1));
    assert_eq!(calls, ["a", "b"]);
    assert_eq!(elapsed, Duration::ZERO);
    assert_eq!(
        describe_failures(&run),
        "step 0 a/m: server_error (500); step 1 b/m: served (200)"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_error_is_returned_without_fallback() {
    let config = config("");
    let (run, calls, _) = run(&config, vec![(Duration::ZERO, 422, None)]).await;
    assert!(matches!(run.end, ChainEnd::Returned { step: 0, .. }));
    assert_eq!(calls, ["a"]);
}

/// Step "a" answers 500 until `recovers_at`, then serves; "b" always serves.
struct Outage {
    recovers_at: Instant,
}

impl Attempter for Outage {
    type Output = ();

    async fn attempt(
        &self,
        deployment: &Deployment,
        _provider: &Provider,
        _key: Option<&KeyLease>,
        _timeout: Duration,
        _span: opentelemetry::trace::SpanId,
    ) -> Attempt<()> {
        if deployment.provider.as_str() == "b" || Instant::now() >= self.recovers_at {
            return Attempt::Served(());
        }
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        let headers = http::header::HeaderMap::new();
        let (class, action) = super::super::classify::classify_status(status, &headers, b"", false);
        Attempt::Failed(Failure {
            class,
            action,
            reply: None,
        })
    }
}

/// Steady traffic (a request every `every`) through a primary that is down for `outage`:
/// how long after its recovery step 0 served again.
async fn back_after_recovery(config: &Config, outage: Duration, every: Duration) -> Duration {
    let keys = KeyRing::default();
    let health = std::sync::Arc::new(Health::new(config.breaker.clone()));
    let started = Instant::now();
    let attempter = Outage {
        recovers_at: started + outage,
    };
    loop {
        let now = Instant::now();
        assert!(
            now < started + outage + Duration::from_secs(300),
            "never came back"
        );
        let inputs = ChainInputs {
            config,
            keys: &keys,
            health: &health,
            route: &config.routes[0],
            first_step: 0,
            deadline: now + config.retry.request_deadline,
            caller: crate::router::breaker::CallerTag::new("test"),
            traced: false,
        };
        let run = run_chain(inputs, &attempter).await;
        assert!(served_step(&run).is_some(), "the fallback serves meanwhile");
        if served_step(&run) == Some(0) && now >= attempter.recovers_at {
            return now - attempter.recovers_at;
        }
        tokio::time::sleep(every).await;
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_defaults_a_recovered_primary_serves_again_within_20_seconds() {
    // The growing cooldown (10 s, doubled by each failed probe) is capped at 20 s by default,
    // so whatever the outage's length, the next probe after the recovery is at most 20 s
    // away. With a cap of 60 s, an outage of 75 s kept the fallback serving for 55 s more.
    let config = config("");
    let every = Duration::from_millis(250);
    for seconds in (60..=90).step_by(5) {
        let outage = Duration::from_secs(seconds);
        let back = back_after_recovery(&config, outage, every).await;
        assert!(
            back <= Duration::from_secs(20) + every,
            "down {seconds} s: back {back:?} after recovering"
        );
    }
}
