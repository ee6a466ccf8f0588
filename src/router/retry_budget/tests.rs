//! The budget's window on paused time, and the chain's use of it with a scripted attempter.

use crate::router::health::Health;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};

use super::*;
use crate::config::{Config, Deployment, Provider};
use crate::keys::{KeyLease, KeyRing};
use crate::router::chain::{
    Attempt, Attempter, ChainEnd, ChainInputs, ChainRun, Failure, UpstreamReply, describe_failures,
    rate_limited_everywhere, run_chain,
};
use crate::router::classify::classify_status;

fn deployment(name: &str) -> (ProviderId, ModelName) {
    (ProviderId(Arc::from(name)), ModelName(Arc::from("m")))
}

fn budget(percent: f64, floor: u32) -> RetryBudget {
    RetryBudget::try_new(percent, floor).unwrap()
}

#[tokio::test(start_paused = true)]
async fn counts_leave_the_window_ten_seconds_after_their_second() {
    let budgets = RetryBudgets::new();
    let (p, m) = deployment("a");
    let start = Instant::now();
    for _ in 0..50 {
        budgets.count_request(&p, &m, start);
    }
    assert!(budgets.try_retry(&p, &m, &budget(20.0, 0), start));
    let counts = |at| budgets.counts(&p, &m, at);
    let expected = BudgetCounts {
        requests: 50,
        retries: 1,
    };
    assert_eq!(counts(start + Duration::from_millis(9_999)), expected);
    assert_eq!(
        counts(start + Duration::from_secs(10)),
        BudgetCounts::default()
    );
    // A bucket reused ten seconds later starts empty, not on top of its old counts.
    tokio::time::advance(Duration::from_secs(10)).await;
    budgets.count_request(&p, &m, Instant::now());
    assert_eq!(
        counts(Instant::now()),
        BudgetCounts {
            requests: 1,
            retries: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_window_slides_a_second_at_a_time() {
    let budgets = RetryBudgets::new();
    let (p, m) = deployment("a");
    let start = Instant::now();
    for second in 0..15u64 {
        budgets.count_request(&p, &m, start + Duration::from_secs(second));
    }
    // At second 14 the window holds seconds 5 to 14.
    let counts = budgets.counts(&p, &m, start + Duration::from_secs(14));
    assert_eq!(counts.requests, 10);
}

#[tokio::test(start_paused = true)]
async fn the_floor_lets_retries_through_at_low_traffic_and_refills() {
    let budgets = RetryBudgets::new();
    let (p, m) = deployment("a");
    let policy = budget(20.0, 3);
    let now = Instant::now();
    budgets.count_request(&p, &m, now);
    let allowed = (0..40)
        .filter(|_| budgets.try_retry(&p, &m, &policy, now))
        .count();
    assert_eq!(allowed, 30, "3 a second over 10 s");
    // Refused retries are not counted: the window holds only the 30 that went.
    assert_eq!(budgets.counts(&p, &m, now).retries, 30);
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(budgets.try_retry(&p, &m, &policy, Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn above_the_floor_the_percentage_binds() {
    let budgets = RetryBudgets::new();
    let (p, m) = deployment("a");
    let now = Instant::now();
    for _ in 0..1_000 {
        budgets.count_request(&p, &m, now);
    }
    let allowed = |policy: RetryBudget| {
        (0..1_000)
            .filter(|_| budgets.try_retry(&p, &m, &policy, now))
            .count()
    };
    assert_eq!(allowed(budget(20.0, 3)), 200);
    // A reload's new policy applies to the same counts: 200 retries are already in.
    assert_eq!(allowed(budget(25.0, 3)), 50);
    assert_eq!(
        allowed(budget(100.0, 0)),
        1_000,
        "100 % turns the budget off"
    );
    // Each deployment has its own budget.
    let (other, _) = deployment("b");
    assert!(budgets.try_retry(&other, &m, &budget(20.0, 3), now));
}

#[tokio::test(start_paused = true)]
async fn a_full_table_forgets_idle_windows_and_never_refuses_untracked_ones() {
    let budgets = RetryBudgets::new();
    let start = Instant::now();
    for i in 0..MAX_TRACKED {
        let (p, m) = deployment(&format!("p{i}"));
        budgets.count_request(&p, &m, start);
    }
    let (p, m) = deployment("late");
    let policy = budget(0.0, 1);
    for _ in 0..20 {
        assert!(budgets.try_retry(&p, &m, &policy, start), "untracked");
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    let now = Instant::now();
    let allowed = (0..20)
        .filter(|_| budgets.try_retry(&p, &m, &policy, now))
        .count();
    assert_eq!(allowed, 10, "the idle windows made room");
}

fn attempt_record(name: &str, failure: Option<FailureClass>) -> AttemptRecord {
    let (provider, model) = deployment(name);
    AttemptRecord {
        step: 0,
        provider,
        model,
        failure,
        status: None,
        latency: Duration::ZERO,
        hedge: false,
        span: None,
    }
}

fn target(name: &str) -> Deployment {
    let (provider, model) = deployment(name);
    Deployment {
        provider,
        model,
        weight: 1,
    }
}

#[tokio::test(start_paused = true)]
async fn only_a_retry_in_place_is_refused_and_a_refusal_names_its_deployment() {
    let health = Health::new(Config::parse("").unwrap().breaker);
    let policy = budget(0.0, 1);
    let now = Instant::now();
    let charge = |attempts: &mut Vec<AttemptRecord>, next: &str| {
        refuses_retry_in_place(
            health.retry_budgets(),
            &policy,
            attempts,
            &target(next),
            now,
            Spend::Charge,
        )
    };
    // Nothing went upstream yet (a skipped step is not an attempt): a first attempt.
    let mut attempts = vec![attempt_record("a", Some(FailureClass::CircuitOpen))];
    for _ in 0..20 {
        assert!(!charge(&mut attempts, "a"));
    }
    attempts.push(attempt_record("b", Some(FailureClass::ServerError)));
    attempts.push(attempt_record("c", Some(FailureClass::Benched)));
    // Peeking counts nothing, so it never runs the budget out.
    for _ in 0..20 {
        let peek = Spend::Peek;
        assert!(!refuses_retry_in_place(
            health.retry_budgets(),
            &policy,
            &mut attempts,
            &target("b"),
            now,
            peek
        ));
    }
    for _ in 0..10 {
        assert!(!charge(&mut attempts, "b"));
    }
    // b's budget is spent, but moving on to another deployment is never refused or counted.
    for _ in 0..50 {
        assert!(!charge(&mut attempts, "c"));
    }
    assert!(charge(&mut attempts, "b"));
    let refusal = attempts.last().unwrap();
    assert_eq!(refusal.provider.as_str(), "b");
    assert_eq!(refusal.failure, Some(FailureClass::RetryBudgetExhausted));
    assert!(!refusal.reached_upstream());
    assert!(ended_by_refusal(&attempts));
    let retries = |name| {
        let (p, m) = deployment(name);
        health.retry_budgets().counts(&p, &m, now).retries
    };
    assert_eq!((retries("b"), retries("c")), (10, 0));
    // Once another attempt goes upstream after it, the refusal no longer has the last word.
    attempts.push(attempt_record("c", Some(FailureClass::ServerError)));
    assert!(!ended_by_refusal(&attempts));
}

/// Every attempt fails with `status` (and `retry-after`, if given); counts the calls.
struct Failing {
    status: u16,
    retry_after: Option<&'static str>,
    /// Behind a lock: attempts take `&self`, since a hedged request has two in flight.
    calls: std::sync::Mutex<Vec<String>>,
}

impl Attempter for Failing {
    type Output = ();

    async fn attempt(
        &self,
        deployment: &Deployment,
        _provider: &Provider,
        _key: Option<&KeyLease>,
        _timeout: Duration,
        _span: opentelemetry::trace::SpanId,
    ) -> Attempt<()> {
        self.calls
            .lock()
            .unwrap()
            .push(deployment.provider.to_string());
        let mut headers = HeaderMap::new();
        if let Some(after) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(after));
        }
        let status = StatusCode::from_u16(self.status).unwrap();
        let (class, action) = classify_status(status, &headers, b"", false);
        Attempt::Failed(Failure {
            class,
            action,
            reply: Some(UpstreamReply {
                status,
                content_type: None,
                body: Bytes::new(),
                upstream_request_id: None,
            }),
        })
    }
}

fn two_steps(retry: &str) -> Config {
    let provider = |name| {
        format!(
            "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\n\
             base_url = \"http://127.0.0.1:1\"\nkey_required = false\n"
        )
    };
    Config::parse(&format!(
        "{}{}[[routes]]\nname = \"r\"\n\
         steps = [{{ provider = \"a\", model = \"m\" }}, {{ provider = \"b\", model = \"m\" }}]\n\
         [breaker]\nconsecutive_failures = 1000000\nmin_requests = 1000000\n[retry]\n{retry}\n",
        provider("a"),
        provider("b")
    ))
    .unwrap()
}

async fn run(config: &Config, health: &Arc<Health>, attempter: &Failing) -> ChainRun<()> {
    let keys = KeyRing::default();
    let inputs = ChainInputs {
        config,
        keys: &keys,
        health,
        route: &config.routes[0],
        first_step: 0,
        deadline: Instant::now() + config.retry.request_deadline,
        caller: crate::router::breaker::CallerTag::new("test"),
        traced: false,
    };
    run_chain(inputs, attempter).await
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_never_refuses_a_fallback() {
    let config = two_steps("budget_percent = 20\nmin_retries_per_second = 0");
    let health = Arc::new(Health::new(config.breaker.clone()));
    let attempter = Failing {
        status: 500,
        retry_after: None,
        calls: Default::default(),
    };
    for _ in 0..10 {
        let run = run(&config, &health, &attempter).await;
        assert!(matches!(run.end, ChainEnd::Exhausted));
        assert!(!ended_by_refusal(&run.attempts));
        assert_eq!(run.upstream_attempts(), 2, "both steps, every time");
    }
    let calls = attempter.calls.lock().unwrap().clone();
    assert_eq!(calls.iter().filter(|c| *c == "b").count(), 10);
    // A 500 moves on: nothing was retried in place, so nothing was charged.
    for name in ["a", "b"] {
        let (p, m) = deployment(name);
        let counts = health.retry_budgets().counts(&p, &m, Instant::now());
        assert_eq!((counts.requests, counts.retries), (10, 0), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_retry_in_place_is_not_waited_for_and_a_429_stays_a_429() {
    let config = two_steps("budget_percent = 0\nmin_retries_per_second = 1");
    let health = Arc::new(Health::new(config.breaker.clone()));
    let floor = config.retry.budget;
    for name in ["a", "b"] {
        let (p, m) = deployment(name);
        while health
            .retry_budgets()
            .try_retry(&p, &m, &floor, Instant::now())
        {}
    }
    let attempter = Failing {
        status: 429,
        retry_after: Some("2"),
        calls: Default::default(),
    };
    let started = Instant::now();
    let run = run(&config, &health, &attempter).await;
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no backoff before a refusal"
    );
    // a's retry in place is refused, and the chain moves on to b at once, whose own retry in
    // place is refused too.
    assert_eq!(*attempter.calls.lock().unwrap(), ["a", "b"]);
    assert!(ended_by_refusal(&run.attempts));
    assert_eq!(
        describe_failures(&run),
        "step 0 a/m: rate_limited (429); no retry: retry_budget_exhausted (a/m); \
         step 1 b/m: rate_limited (429); no retry: retry_budget_exhausted (b/m)"
    );
    assert_eq!(rate_limited_everywhere(&run), Some(Duration::from_secs(2)));
}
