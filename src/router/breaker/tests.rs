//! The breaker's unit and property tests, on made-up instants: nothing sleeps.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

fn settings(consecutive: u32, rate: f64, min_requests: u32) -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: consecutive,
        failure_rate: rate,
        window: Duration::from_secs(10),
        min_requests,
        cooldown: Duration::from_secs(30),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Admits and records `verdict` at `now`.
fn run(breaker: &mut Breaker, now: Instant, verdict: Verdict) {
    let ticket = breaker.admit(now).expect("admitted");
    breaker.record(now, ticket, verdict);
}

#[test]
fn opens_after_consecutive_failures_and_a_success_resets_the_count() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(3, 1.0, 1000), t0);
    run(&mut breaker, t0, Verdict::Failure);
    run(&mut breaker, t0, Verdict::Failure);
    run(&mut breaker, t0, Verdict::Success);
    run(&mut breaker, t0, Verdict::Failure);
    run(&mut breaker, t0, Verdict::Failure);
    assert_eq!(breaker.state(), BreakerState::Closed);
    run(&mut breaker, t0, Verdict::Failure);
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(
        breaker.admit(t0 + ms(29_999)),
        Err(Refusal::Open {
            until: t0 + Duration::from_secs(30)
        })
    );
}

#[test]
fn opens_on_the_failure_rate_only_with_enough_requests() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(100, 0.5, 6), t0);
    for verdict in [Verdict::Failure, Verdict::Success, Verdict::Failure] {
        run(&mut breaker, t0, verdict);
    }
    run(&mut breaker, t0, Verdict::Success);
    // 2 of 4 failed: the rate is reached, but not the minimum of 6 requests.
    assert_eq!(breaker.state(), BreakerState::Closed);
    run(&mut breaker, t0, Verdict::Success);
    run(&mut breaker, t0, Verdict::Failure);
    // 3 of 6.
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[test]
fn failures_older_than_the_window_no_longer_count() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(100, 0.5, 10), t0);
    for _ in 0..4 {
        run(&mut breaker, t0, Verdict::Failure);
        run(&mut breaker, t0, Verdict::Success);
    }
    let later = t0 + Duration::from_secs(11);
    assert_eq!(breaker.view(later).window_requests, 0);
    run(&mut breaker, later, Verdict::Success);
    run(&mut breaker, later, Verdict::Failure);
    // Counted whole, 5 of 10 would open it; the window holds only the last 2.
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(breaker.view(later).window_failures, 1);
}

#[test]
fn neutral_results_never_count() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(1, 0.1, 0), t0);
    for _ in 0..50 {
        run(&mut breaker, t0, Verdict::Neutral);
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(breaker.view(t0).window_requests, 0);
}

#[test]
fn client_faults_and_rate_limits_are_neutral() {
    for class in [
        FailureClass::BadRequest,
        FailureClass::ContextLength,
        FailureClass::ModelNotFound,
        FailureClass::RateLimited,
        FailureClass::Auth,
    ] {
        assert_eq!(Verdict::of(Some(class)), Verdict::Neutral, "{class:?}");
    }
    for class in [
        FailureClass::ServerError,
        FailureClass::Overloaded,
        FailureClass::Timeout,
        FailureClass::Connect,
        FailureClass::Reset,
        FailureClass::Malformed,
    ] {
        assert_eq!(Verdict::of(Some(class)), Verdict::Failure, "{class:?}");
    }
    assert_eq!(Verdict::of(None), Verdict::Success);
}

/// A breaker that opened at `t0`.
fn opened(t0: Instant) -> Breaker {
    let mut breaker = Breaker::new(settings(1, 1.0, 1000), t0);
    run(&mut breaker, t0, Verdict::Failure);
    assert_eq!(breaker.state(), BreakerState::Open);
    breaker
}

#[test]
fn after_the_cooldown_one_probe_goes_and_its_success_closes() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let after = t0 + Duration::from_secs(30);
    let probe = breaker.admit(after).expect("the probe");
    assert!(probe.is_probe());
    assert_eq!(breaker.admit(after), Err(Refusal::ProbeInFlight));
    breaker.record(after, probe, Verdict::Success);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(!breaker.admit(after).expect("closed admits").is_probe());
}

#[test]
fn a_failed_probe_reopens_for_a_fresh_cooldown() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let after = t0 + Duration::from_secs(40);
    let probe = breaker.admit(after).expect("the probe");
    breaker.record(after, probe, Verdict::Failure);
    assert_eq!(
        breaker.admit(after + Duration::from_secs(29)),
        Err(Refusal::Open {
            until: after + Duration::from_secs(30)
        })
    );
    assert_eq!(breaker.view(after).times_opened, 2);
}

#[test]
fn a_cancelled_or_neutral_probe_frees_the_slot() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let after = t0 + Duration::from_secs(30);
    let probe = breaker.admit(after).expect("the probe");
    breaker.cancel(probe);
    let probe = breaker.admit(after).expect("a new probe");
    breaker.record(after, probe, Verdict::Neutral);
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert!(breaker.admit(after).expect("another probe").is_probe());
}

#[test]
fn late_results_from_an_earlier_state_are_ignored() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(1, 1.0, 1000), t0);
    let slow = breaker.admit(t0).expect("closed admits");
    run(&mut breaker, t0, Verdict::Failure);
    // The slow request, admitted while closed, answers after the breaker opened.
    breaker.record(t0, slow, Verdict::Success);
    assert_eq!(breaker.state(), BreakerState::Open);
    // And a stale cancel cannot free a later probe's slot.
    let after = t0 + Duration::from_secs(30);
    let probe = breaker.admit(after).expect("the probe");
    breaker.cancel(slow);
    assert_eq!(breaker.admit(after), Err(Refusal::ProbeInFlight));
    breaker.record(after, probe, Verdict::Success);
}

#[test]
fn a_forced_probe_goes_before_the_cooldown_ends_but_only_one() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let early = t0 + ms(10);
    let probe = breaker.force_probe(early).expect("forced probe");
    assert!(probe.is_probe());
    assert_eq!(breaker.force_probe(early), Err(Refusal::ProbeInFlight));
    breaker.record(early, probe, Verdict::Success);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn a_bench_refuses_until_it_ends_even_when_closed() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(5, 0.5, 20), t0);
    breaker.bench(t0 + ms(500));
    assert_eq!(
        breaker.admit(t0 + ms(499)),
        Err(Refusal::Benched {
            until: t0 + ms(500)
        })
    );
    assert!(breaker.admit(t0 + ms(500)).is_ok());
    assert_eq!(breaker.view(t0).benched_for, Some(ms(500)));
}

#[test]
fn reset_closes_and_forgets() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    breaker.bench(t0 + Duration::from_secs(60));
    breaker.reset();
    let view = breaker.view(t0);
    assert_eq!(view.state, BreakerState::Closed);
    assert_eq!((view.consecutive_failures, view.times_opened), (0, 0));
    assert!(breaker.admit(t0).is_ok());
}

#[test]
fn the_view_says_when_the_next_probe_may_go() {
    let t0 = Instant::now();
    let breaker = opened(t0);
    let view = breaker.view(t0 + Duration::from_secs(10));
    assert_eq!(view.state, BreakerState::Open);
    assert_eq!(view.next_probe_in, Some(Duration::from_secs(20)));
    assert_eq!(view.consecutive_failures, 1);
    assert_eq!(
        breaker
            .view(t0 + Duration::from_secs(99))
            .next_probe_in
            .unwrap(),
        Duration::ZERO
    );
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Op {
    Admit,
    /// Finish the outstanding ticket at this index (modulo their number).
    Record(usize, Verdict),
    Cancel(usize),
    Advance(u64),
    Bench(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let verdict = prop_oneof![
        Just(Verdict::Success),
        Just(Verdict::Failure),
        Just(Verdict::Neutral)
    ];
    prop_oneof![
        4 => Just(Op::Admit),
        4 => (any::<usize>(), verdict).prop_map(|(i, v)| Op::Record(i, v)),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => (0u64..3_000).prop_map(Op::Advance),
        1 => (0u64..2_000).prop_map(Op::Bench),
    ]
}

fn any_settings() -> impl Strategy<Value = BreakerConfig> {
    (1u32..6, 0.05f64..=1.0, 0u32..10, 100u64..5_000, 1u64..5_000).prop_map(
        |(consecutive, rate, min_requests, window, cooldown)| BreakerConfig {
            consecutive_failures: consecutive,
            failure_rate: rate,
            window: ms(window),
            min_requests,
            cooldown: ms(cooldown),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over random results and time advances: closed always admits, open never admits
    /// before its cooldown ends, and half-open never has more than one probe out.
    #[test]
    fn the_breaker_keeps_its_promises(settings in any_settings(), ops in proptest::collection::vec(op(), 1..200)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut breaker = Breaker::new(settings.clone(), now);
        let mut outstanding: Vec<Ticket> = Vec::new();
        let mut benched_until = t0;
        let mut opened_at: Option<Instant> = None;
        let mut times_opened = 0;
        for op in ops {
            match op {
                Op::Admit => {
                    let before = breaker.state();
                    let benched = now < benched_until;
                    match breaker.admit(now) {
                        Ok(ticket) => {
                            prop_assert!(!benched, "admitted while benched");
                            if before == BreakerState::Open {
                                let opened_at = opened_at.expect("an open breaker opened once");
                                prop_assert!(now >= opened_at + settings.cooldown, "admitted before the cooldown ended");
                            }
                            if ticket.is_probe() {
                                let probes = outstanding.iter().filter(|t| t.is_probe()).count();
                                prop_assert_eq!(probes, 0, "a second probe while one is out");
                            }
                            outstanding.push(ticket);
                        }
                        Err(refusal) => {
                            prop_assert!(before != BreakerState::Closed || benched, "closed refused: {:?}", refusal);
                        }
                    }
                }
                Op::Record(i, verdict) if !outstanding.is_empty() => {
                    let ticket = outstanding.remove(i % outstanding.len());
                    breaker.record(now, ticket, verdict);
                }
                Op::Cancel(i) if !outstanding.is_empty() => {
                    let ticket = outstanding.remove(i % outstanding.len());
                    breaker.cancel(ticket);
                }
                Op::Record(..) | Op::Cancel(_) => {}
                Op::Advance(step) => now += ms(step),
                Op::Bench(length) => {
                    benched_until = benched_until.max(now + ms(length));
                    breaker.bench(now + ms(length));
                }
            }
            let view = breaker.view(now);
            if view.times_opened > times_opened {
                times_opened = view.times_opened;
                opened_at = Some(now);
            }
            prop_assert!(outstanding.iter().filter(|t| t.is_probe()).count() <= 1);
            if view.state == BreakerState::HalfOpen {
                prop_assert_eq!(view.probe_in_flight, outstanding.iter().any(|t| t.is_probe()));
            }
        }
    }
}
