//! Breakers and balancing through the real attempt loop, on paused time: nothing sleeps for
//! real, and every latency below is exact.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::StatusCode;
use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use tokio::time::Instant;

use super::*;
use crate::config::Provider;
use crate::keys::Secret;
use crate::router::breaker::BreakerState;
use crate::router::chain::{
    Attempt, Attempter, ChainEnd, ChainInputs, ChainRun, Failure, UpstreamReply, run_chain,
};
use crate::router::classify::classify_status;

#[derive(Clone, Copy)]
struct Answer {
    status: u16,
    delay: Duration,
    retry_after: Option<&'static str>,
}

#[derive(Default)]
struct FleetState {
    answers: HashMap<String, Answer>,
    calls: Vec<String>,
}

/// Fake providers, each answering as told; `a`, or `k:k1` for provider `k` with key `k1`.
/// Clones share their state, so concurrent requests each take one.
#[derive(Clone, Default)]
struct Fleet(Arc<Mutex<FleetState>>);

impl Fleet {
    fn answer(&self, who: &str, status: u16, delay_ms: u64) -> &Fleet {
        self.answer_with(who, status, delay_ms, None)
    }

    fn answer_with(
        &self,
        who: &str,
        status: u16,
        delay_ms: u64,
        retry_after: Option<&'static str>,
    ) -> &Fleet {
        let answer = Answer {
            status,
            delay: Duration::from_millis(delay_ms),
            retry_after,
        };
        self.0.lock().unwrap().answers.insert(who.into(), answer);
        self
    }

    fn calls(&self, who: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| *c == who)
            .count()
    }
}

impl Attempter for Fleet {
    type Output = ();

    async fn attempt(
        &self,
        deployment: &Deployment,
        _provider: &Provider,
        key: Option<&KeyLease>,
        timeout: Duration,
        _span: opentelemetry::trace::SpanId,
    ) -> Attempt<()> {
        let who = match key {
            Some(key) => format!("{}:{}", deployment.provider, key.id),
            None => deployment.provider.to_string(),
        };
        let answer = {
            let mut state = self.0.lock().unwrap();
            state.calls.push(who.clone());
            state.answers.get(&who).copied().unwrap_or(Answer {
                status: 200,
                delay: Duration::ZERO,
                retry_after: None,
            })
        };
        if answer.delay > timeout {
            tokio::time::sleep(timeout).await;
            return Attempt::Failed(Failure::without_reply(FailureClass::Timeout));
        }
        tokio::time::sleep(answer.delay).await;
        if answer.status == 200 {
            return Attempt::Served(());
        }
        let mut headers = HeaderMap::new();
        if let Some(after) = answer.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(after));
        }
        let status = StatusCode::from_u16(answer.status).unwrap();
        let (class, action) = classify_status(status, &headers, b"", false);
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

struct Harness {
    config: Config,
    keys: KeyRing,
    health: Arc<Health>,
}

/// Keyless providers `a`, `b`, `c`, and `k` with keys `k1`, `k2`; opens after 3 failures in
/// a row, for 10 s.
fn harness(routes: &str, extra: &str) -> Harness {
    let mut text = String::new();
    for name in ["a", "b", "c"] {
        text += &format!(
            "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\nkey_required = false\n"
        );
    }
    text += "[[providers]]\nname = \"k\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n";
    text += routes;
    text += "\n[breaker]\nconsecutive_failures = 3\ncooldown = \"10s\"\nmin_requests = 100\n";
    text += extra;
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let keys = KeyRing::default();
    let k = ProviderId(Arc::from("k"));
    keys.put(&k, "k1", Secret::new("sk-1"));
    keys.put(&k, "k2", Secret::new("sk-2"));
    Harness {
        health: Arc::new(Health::new(config.breaker.clone())),
        config,
        keys,
    }
}

const TWO_STEPS: &str = r#"
[[routes]]
name = "r"
steps = [{ provider = "a", model = "m" }, { provider = "b", model = "m" }]
"#;

impl Harness {
    async fn request(&self, route: &str, fleet: &Fleet) -> ChainRun<()> {
        let route = self
            .config
            .routes
            .iter()
            .find(|r| r.name.as_str() == route)
            .expect("a configured route");
        let inputs = ChainInputs {
            config: &self.config,
            keys: &self.keys,
            health: &self.health,
            route,
            first_step: 0,
            deadline: Instant::now() + self.config.retry.request_deadline,
            caller: crate::router::breaker::CallerTag::new("test"),
            traced: false,
        };
        run_chain(inputs, &fleet.clone()).await
    }

    /// Runs a request and says how long it took.
    async fn timed(&self, route: &str, fleet: &Fleet) -> (ChainRun<()>, Duration) {
        let started = Instant::now();
        let run = self.request(route, fleet).await;
        (run, started.elapsed())
    }

    fn state(&self, provider: &str) -> BreakerState {
        self.view(provider).state
    }

    fn view(&self, provider: &str) -> BreakerView {
        self.health
            .report(Instant::now())
            .into_iter()
            .find(|r| r.id.provider.as_str() == provider)
            .map(|r| r.view)
            .expect("a breaker for the provider")
    }
}

fn served_by<T>(run: &ChainRun<T>) -> Option<(usize, String)> {
    match run.end {
        ChainEnd::Served { step, .. } => run
            .answered_by
            .as_ref()
            .map(|d| (step, d.provider.to_string())),
        _ => None,
    }
}

fn classes<T>(run: &ChainRun<T>) -> Vec<&'static str> {
    run.attempts
        .iter()
        .map(|a| a.failure.map_or("served", |f| f.kind()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_open_primary_is_skipped_at_no_cost() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 300).answer("b", 200, 50);
    for _ in 0..3 {
        let (_, took) = h.timed("r", &fleet).await;
        assert_eq!(took, Duration::from_millis(350));
    }
    assert_eq!(h.state("a"), BreakerState::Open);
    for _ in 0..10 {
        let (run, took) = h.timed("r", &fleet).await;
        assert_eq!(
            took,
            Duration::from_millis(50),
            "the secondary's latency alone"
        );
        assert_eq!(served_by(&run), Some((1, "b".into())));
        assert_eq!(classes(&run), ["circuit_open", "served"]);
        assert_eq!(run.upstream_attempts(), 1);
    }
    assert_eq!(fleet.calls("a"), 3);
}

#[tokio::test(start_paused = true)]
async fn after_the_cooldown_twenty_requests_at_once_send_one_probe() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0);
    for _ in 0..3 {
        h.request("r", &fleet).await;
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    // A slow probe, so every other request arrives while it is out.
    fleet.answer("a", 200, 1_000);
    let runs = join_all((0..20).map(|_| h.request("r", &fleet))).await;
    assert_eq!(fleet.calls("a"), 4, "exactly one probe");
    let by_a = runs
        .iter()
        .filter(|r| served_by(r) == Some((0, "a".into())))
        .count();
    assert_eq!(by_a, 1);
    assert_eq!(
        h.state("a"),
        BreakerState::Closed,
        "the probe's success closed it"
    );
    let run = h.request("r", &fleet).await;
    assert_eq!(served_by(&run), Some((0, "a".into())));
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_a_whole_cooldown() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0);
    for _ in 0..3 {
        h.request("r", &fleet).await;
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    h.request("r", &fleet).await;
    assert_eq!(fleet.calls("a"), 4);
    assert_eq!(h.state("a"), BreakerState::Open);
    tokio::time::advance(Duration::from_millis(9_999)).await;
    h.request("r", &fleet).await;
    assert_eq!(fleet.calls("a"), 4, "still cooling down");
    tokio::time::advance(Duration::from_millis(1)).await;
    h.request("r", &fleet).await;
    assert_eq!(fleet.calls("a"), 5);
}

#[tokio::test(start_paused = true)]
async fn a_probe_dropped_mid_flight_frees_its_slot() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0);
    for _ in 0..3 {
        h.request("r", &fleet).await;
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    fleet.answer("a", 200, 3_000);
    // The client goes away while the probe is out.
    let dropped = tokio::time::timeout(Duration::from_secs(1), h.request("r", &fleet)).await;
    assert!(dropped.is_err());
    assert!(!h.view("a").probe_in_flight);
    let run = h.request("r", &fleet).await;
    assert_eq!(fleet.calls("a"), 5, "the next request probes");
    assert_eq!(served_by(&run), Some((0, "a".into())));
}

const EVERY_WAY: &str = r#"
[[routes]]
name = "r"
steps = [{ provider = "a", model = "m" }, { provider = "b", model = "m" }]
[[routes]]
name = "only-a"
steps = [{ provider = "a", model = "m" }]
[[routes]]
name = "only-b"
steps = [{ provider = "b", model = "m" }]
"#;

#[tokio::test(start_paused = true)]
async fn when_every_step_is_open_the_soonest_to_end_is_probed() {
    let h = harness(EVERY_WAY, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0).answer("b", 500, 0);
    // b opens first, so its cooldown ends first, although it is the later step.
    for _ in 0..3 {
        h.request("only-b", &fleet).await;
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    for _ in 0..3 {
        h.request("only-a", &fleet).await;
    }
    fleet.answer("b", 200, 0);
    let run = h.request("r", &fleet).await;
    assert_eq!(served_by(&run), Some((1, "b".into())));
    assert_eq!(classes(&run), ["circuit_open", "circuit_open", "served"]);
    assert_eq!((fleet.calls("a"), fleet.calls("b")), (3, 4));
    assert_eq!(h.state("b"), BreakerState::Closed);
    assert_eq!(h.state("a"), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_failed_forced_probe_exhausts_the_chain_without_retrying() {
    let h = harness(EVERY_WAY, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0).answer("b", 500, 0);
    for _ in 0..3 {
        h.request("r", &fleet).await;
    }
    let run = h.request("r", &fleet).await;
    assert!(matches!(run.end, ChainEnd::Exhausted));
    // a opened first (step 0 fails before step 1 in every request): a is the probe.
    assert_eq!(
        classes(&run),
        ["circuit_open", "circuit_open", "server_error"]
    );
    assert_eq!((fleet.calls("a"), fleet.calls("b")), (4, 3));
    assert_eq!(h.view("a").times_opened, 2);
}

#[tokio::test(start_paused = true)]
async fn client_errors_never_open_the_breaker() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    for status in [422, 400, 404, 401] {
        fleet.answer("a", status, 0);
        for _ in 0..5 {
            h.request("r", &fleet).await;
        }
    }
    let view = h.view("a");
    assert_eq!(view.state, BreakerState::Closed);
    assert_eq!((view.consecutive_failures, view.window_requests), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_429_benches_the_deployment_for_its_retry_after_without_counting() {
    let h = harness(TWO_STEPS, "[retry]\nattempts_per_step = 1\n");
    let fleet = Fleet::default();
    fleet.answer_with("a", 429, 0, Some("5"));
    let run = h.request("r", &fleet).await;
    assert_eq!(served_by(&run), Some((1, "b".into())));
    let (run, took) = h.timed("r", &fleet).await;
    assert_eq!(classes(&run), ["benched", "served"]);
    assert_eq!(took, Duration::ZERO);
    assert_eq!(fleet.calls("a"), 1);
    let view = h.view("a");
    assert_eq!(view.state, BreakerState::Closed);
    assert_eq!(view.consecutive_failures, 0);
    tokio::time::advance(Duration::from_secs(5)).await;
    h.request("r", &fleet).await;
    assert_eq!(fleet.calls("a"), 2, "the bench is over");
}

const KEYED: &str = r#"
[[routes]]
name = "keyed"
steps = [{ provider = "k", model = "m" }]
"#;

#[tokio::test(start_paused = true)]
async fn a_429_on_one_key_moves_to_the_other_key_at_once() {
    let h = harness(KEYED, "");
    let fleet = Fleet::default();
    fleet.answer_with("k:k1", 429, 0, Some("30"));
    let (run, took) = h.timed("keyed", &fleet).await;
    assert_eq!(served_by(&run), Some((0, "k".into())));
    assert_eq!(took, Duration::ZERO, "no wait for k1's retry-after");
    assert_eq!((fleet.calls("k:k1"), fleet.calls("k:k2")), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_breaker() {
    let h = harness(KEYED, "");
    let fleet = Fleet::default();
    fleet.answer("k:k1", 500, 0);
    // Equal weights alternate k1, k2: k1 fails three times in a row of its own.
    for _ in 0..6 {
        h.request("keyed", &fleet).await;
    }
    assert_eq!((fleet.calls("k:k1"), fleet.calls("k:k2")), (3, 3));
    for _ in 0..6 {
        let run = h.request("keyed", &fleet).await;
        assert_eq!(served_by(&run), Some((0, "k".into())));
    }
    assert_eq!((fleet.calls("k:k1"), fleet.calls("k:k2")), (3, 9));
}

const BALANCED: &str = r#"
[[routes]]
name = "weighted"
steps = [
  { deployments = [{ provider = "a", model = "m", weight = 3 }, { provider = "c", model = "m" }] },
  { provider = "b", model = "m" },
]
[[routes]]
name = "fastest"
steps = [{ deployments = [{ provider = "a", model = "m" }, { provider = "c", model = "m" }], balance = "latency" }]
"#;

#[tokio::test(start_paused = true)]
async fn weights_split_a_step_exactly_over_its_healthy_deployments() {
    let h = harness(BALANCED, "");
    let fleet = Fleet::default();
    for _ in 0..400 {
        let run = h.request("weighted", &fleet).await;
        assert!(matches!(run.end, ChainEnd::Served { step: 0, .. }));
    }
    assert_eq!((fleet.calls("a"), fleet.calls("c")), (300, 100));
    // a fails: the request tries c, the step's other deployment, before the next step.
    fleet.answer("a", 500, 0);
    let run = h.request("weighted", &fleet).await;
    assert_eq!(served_by(&run), Some((0, "c".into())));
    assert_eq!(classes(&run), ["server_error", "served"]);
    for _ in 0..10 {
        h.request("weighted", &fleet).await;
    }
    // Once a is open, c takes everything.
    assert_eq!(h.state("a"), BreakerState::Open);
    assert_eq!(fleet.calls("a"), 303);
    assert_eq!(fleet.calls("b"), 0);
}

#[tokio::test(start_paused = true)]
async fn latency_balance_prefers_the_fastest_and_remeasures_the_slow_later() {
    let h = harness(BALANCED, "");
    let fleet = Fleet::default();
    fleet.answer("a", 200, 100).answer("c", 200, 10);
    for _ in 0..10 {
        h.request("fastest", &fleet).await;
    }
    // Each unmeasured one is tried once; then the fastest.
    assert_eq!((fleet.calls("a"), fleet.calls("c")), (1, 9));
    // Idle estimates decay: after a while a is measured again.
    tokio::time::advance(Duration::from_secs(60)).await;
    for _ in 0..10 {
        h.request("fastest", &fleet).await;
    }
    assert!(fleet.calls("a") >= 2, "a is re-measured");
}

#[tokio::test(start_paused = true)]
async fn timeouts_count_unless_the_deadline_cut_them_short() {
    let cut = harness(
        TWO_STEPS,
        "[retry]\nattempt_timeout = \"5s\"\nrequest_deadline = \"1s\"\n",
    );
    let fleet = Fleet::default();
    fleet.answer("a", 200, 60_000);
    for _ in 0..5 {
        cut.request("r", &fleet).await;
    }
    assert_eq!(cut.state("a"), BreakerState::Closed);

    let full = harness(TWO_STEPS, "[retry]\nattempt_timeout = \"1s\"\n");
    for _ in 0..3 {
        full.request("r", &fleet).await;
    }
    assert_eq!(full.state("a"), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn reset_closes_the_named_breakers() {
    let h = harness(TWO_STEPS, "");
    let fleet = Fleet::default();
    fleet.answer("a", 500, 0).answer("b", 500, 0);
    for _ in 0..3 {
        h.request("r", &fleet).await;
    }
    assert_eq!(h.health.states().len(), 2);
    assert_eq!(h.health.reset(Some("a"), None), 1);
    assert_eq!(h.state("a"), BreakerState::Closed);
    assert_eq!(h.state("b"), BreakerState::Open);
    assert_eq!(h.health.reset(None, None), 2);
    assert_eq!(h.state("b"), BreakerState::Closed);
}
