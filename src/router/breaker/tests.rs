//! The breaker's unit and property tests, on made-up instants: nothing sleeps.

use std::collections::HashSet;
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
        cooldown_min: Duration::from_secs(30),
        min_callers: 2,
    }
}

fn alice() -> CallerTag {
    CallerTag::new("alice")
}

fn bob() -> CallerTag {
    CallerTag::new("bob")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Admits and records `verdict` at `now`.
fn run(breaker: &mut Breaker, now: Instant, verdict: Verdict) {
    let ticket = breaker.admit(now).expect("admitted");
    breaker.record(now, ticket, verdict, alice());
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
    breaker.record(after, probe, Verdict::Success, alice());
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(!breaker.admit(after).expect("closed admits").is_probe());
}

#[test]
fn with_active_checks_only_a_check_probes_and_never_while_closed() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(1, 1.0, 1000), t0);
    assert_eq!(breaker.admit_health_check(), None, "closed: no check runs");
    run(&mut breaker, t0, Verdict::Failure);
    // Long past the cooldown, a user's request is still refused: it is never the probe.
    let later = t0 + Duration::from_secs(3600);
    assert!(matches!(
        breaker.admit_checked(later),
        Err(Refusal::Open { .. })
    ));
    let check = breaker
        .admit_health_check()
        .expect("open: the check is the probe");
    assert!(check.is_probe());
    assert_eq!(breaker.admit_health_check(), None, "one probe at a time");
    assert_eq!(breaker.admit_checked(later), Err(Refusal::ProbeInFlight));
    breaker.record(later, check, Verdict::Failure, alice());
    assert_eq!(breaker.state(), BreakerState::Open);
    let check = breaker
        .admit_health_check()
        .expect("still open: checked again");
    breaker.record(later, check, Verdict::Success, alice());
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(
        !breaker
            .admit_checked(later)
            .expect("closed admits")
            .is_probe()
    );
}

#[test]
fn a_failed_probe_reopens_for_a_fresh_cooldown() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let after = t0 + Duration::from_secs(40);
    let probe = breaker.admit(after).expect("the probe");
    breaker.record(after, probe, Verdict::Failure, alice());
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
    breaker.record(after, probe, Verdict::Neutral, alice());
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
    breaker.record(t0, slow, Verdict::Success, alice());
    assert_eq!(breaker.state(), BreakerState::Open);
    // And a stale cancel cannot free a later probe's slot.
    let after = t0 + Duration::from_secs(30);
    let probe = breaker.admit(after).expect("the probe");
    breaker.cancel(slow);
    assert_eq!(breaker.admit(after), Err(Refusal::ProbeInFlight));
    breaker.record(after, probe, Verdict::Success, alice());
}

#[test]
fn a_forced_probe_goes_before_the_cooldown_ends_but_only_one() {
    let t0 = Instant::now();
    let mut breaker = opened(t0);
    let early = t0 + ms(10);
    let probe = breaker.force_probe(early).expect("forced probe");
    assert!(probe.is_probe());
    assert_eq!(breaker.force_probe(early), Err(Refusal::ProbeInFlight));
    breaker.record(early, probe, Verdict::Success, alice());
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

#[test]
fn one_caller_cannot_open_it_while_others_are_served() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(5, 1.0, 1000), t0);
    run_as(&mut breaker, t0, Verdict::Success, bob());
    for _ in 0..20 {
        run_as(&mut breaker, t0 + ms(10), Verdict::Failure, alice());
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(breaker.view(t0).consecutive_failures, 20);
    // A second caller's failure: now it is the provider.
    run_as(&mut breaker, t0 + ms(20), Verdict::Failure, bob());
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[test]
fn a_lone_caller_still_opens_it_once_nobody_else_is_being_served() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(3, 1.0, 1000), t0);
    run_as(&mut breaker, t0, Verdict::Success, bob());
    for _ in 0..3 {
        run_as(&mut breaker, t0, Verdict::Failure, alice());
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    // Bob's success leaves the 10 s window: alice's next failure is the provider's.
    run_as(
        &mut breaker,
        t0 + Duration::from_secs(10),
        Verdict::Failure,
        alice(),
    );
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[test]
fn the_failure_rate_needs_two_callers_too() {
    let t0 = Instant::now();
    let mut breaker = Breaker::new(settings(100, 0.5, 4), t0);
    run_as(&mut breaker, t0, Verdict::Success, bob());
    for _ in 0..5 {
        run_as(&mut breaker, t0, Verdict::Failure, alice());
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    run_as(&mut breaker, t0, Verdict::Failure, CallerTag::new("carol"));
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[test]
fn min_callers_of_one_is_the_old_rule() {
    let t0 = Instant::now();
    let mut one = settings(2, 1.0, 1000);
    one.min_callers = 1;
    let mut breaker = Breaker::new(one, t0);
    run_as(&mut breaker, t0, Verdict::Success, bob());
    run_as(&mut breaker, t0, Verdict::Failure, alice());
    run_as(&mut breaker, t0, Verdict::Failure, alice());
    assert_eq!(breaker.state(), BreakerState::Open);
}

/// Probes at the end of each cooldown: four fail, then one succeeds. Paused time, so the
/// cooldowns are exact and nothing waits.
#[tokio::test(start_paused = true)]
async fn the_cooldown_grows_on_failed_probes_and_resets_on_success() {
    let mut growing = settings(1, 1.0, 1000);
    growing.cooldown_min = Duration::from_secs(10);
    growing.cooldown = Duration::from_secs(60);
    let mut breaker = Breaker::new(growing, Instant::now());
    let mut opens = Vec::new();
    run(&mut breaker, Instant::now(), Verdict::Failure);
    for verdict in [Verdict::Failure; 4].into_iter().chain([Verdict::Success]) {
        let until = breaker.open_until().expect("open");
        opens.push(until - Instant::now());
        tokio::time::advance(until - Instant::now() - ms(1)).await;
        assert!(
            breaker.admit(Instant::now()).is_err(),
            "refused until it ends"
        );
        tokio::time::advance(ms(1)).await;
        let probe = breaker.admit(Instant::now()).expect("the probe");
        breaker.record(Instant::now(), probe, verdict, alice());
    }
    let secs = |s: u64| Duration::from_secs(s);
    assert_eq!(opens, [secs(10), secs(20), secs(40), secs(60), secs(60)]);
    assert_eq!(breaker.state(), BreakerState::Closed);
    // Recovered: the next open is short again.
    run(&mut breaker, Instant::now(), Verdict::Failure);
    assert_eq!(breaker.view(Instant::now()).next_probe_in, Some(secs(10)));
}

/// Admits and records `verdict` at `now` for `caller`.
fn run_as(breaker: &mut Breaker, now: Instant, verdict: Verdict, caller: CallerTag) {
    let ticket = breaker.admit(now).expect("admitted");
    breaker.record(now, ticket, verdict, caller);
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Op {
    Admit,
    /// Finish the outstanding ticket at this index (modulo their number), as one of three
    /// callers.
    Record(usize, Verdict, usize),
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
        4 => (any::<usize>(), verdict, 0usize..3).prop_map(|(i, v, c)| Op::Record(i, v, c)),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => (0u64..3_000).prop_map(Op::Advance),
        1 => (0u64..2_000).prop_map(Op::Bench),
    ]
}

fn any_settings() -> impl Strategy<Value = BreakerConfig> {
    (
        (1u32..6, 0.05f64..=1.0, 0u32..10, 100u64..5_000),
        (1u64..2_000, 1u64..4, 1u32..4),
    )
        .prop_map(
            |((consecutive, rate, min_requests, window), (cooldown_min, growth, min_callers))| {
                BreakerConfig {
                    consecutive_failures: consecutive,
                    failure_rate: rate,
                    window: ms(window),
                    min_requests,
                    cooldown: ms(cooldown_min * growth * 3),
                    cooldown_min: ms(cooldown_min),
                    min_callers,
                }
            },
        )
}

/// A result the breaker took in while closed: who, when, and whether it failed.
struct Judged {
    caller: CallerTag,
    at: Instant,
    failed: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over random results from three callers and time advances: closed always admits, open
    /// never admits before its cooldown ends, half-open never has more than one probe out;
    /// each cooldown is `cooldown_min` after a close and doubles (to `cooldown`) after a
    /// failed probe; and a closed breaker opens only when its failures came from
    /// `min_callers` callers or nobody else was served, and stays closed past its threshold
    /// only for that reason.
    #[test]
    fn the_breaker_keeps_its_promises(settings in any_settings(), ops in proptest::collection::vec(op(), 1..200)) {
        let callers = [alice(), bob(), CallerTag::new("carol")];
        let t0 = Instant::now();
        let mut now = t0;
        let mut breaker = Breaker::new(settings.clone(), now);
        let mut outstanding: Vec<Ticket> = Vec::new();
        let mut benched_until = t0;
        let mut open_until: Option<Instant> = None;
        let mut times_opened = 0;
        let mut last_cooldown = settings.cooldown_min;
        let mut judged: Vec<Judged> = Vec::new();
        for op in ops {
            let before = breaker.state();
            let mut probe_failed = false;
            let mut closed_failure = false;
            match op {
                Op::Admit => {
                    let benched = now < benched_until;
                    match breaker.admit(now) {
                        Ok(ticket) => {
                            prop_assert!(!benched, "admitted while benched");
                            if before == BreakerState::Open {
                                let until = open_until.expect("an open breaker opened once");
                                prop_assert!(now >= until, "admitted before the cooldown ended");
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
                Op::Record(i, verdict, c) if !outstanding.is_empty() => {
                    let ticket = outstanding.remove(i % outstanding.len());
                    let current = ticket.epoch == breaker.epoch;
                    if current && before == BreakerState::Closed && verdict != Verdict::Neutral {
                        let failed = verdict == Verdict::Failure;
                        judged.push(Judged { caller: callers[c], at: now, failed });
                        closed_failure = failed;
                    }
                    probe_failed = current && ticket.is_probe() && verdict == Verdict::Failure;
                    breaker.record(now, ticket, verdict, callers[c]);
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
            let recent = |failed: bool| -> HashSet<CallerTag> {
                judged
                    .iter()
                    .filter(|j| j.failed == failed && now.saturating_duration_since(j.at) < settings.window)
                    .map(|j| j.caller)
                    .collect()
            };
            let failing = recent(true);
            let agree = failing.len() >= settings.min_callers as usize
                || recent(false).is_subset(&failing);
            if view.times_opened > times_opened {
                times_opened = view.times_opened;
                open_until = breaker.open_until();
                let expected = if probe_failed {
                    (last_cooldown * 2).min(settings.cooldown).max(settings.cooldown_min)
                } else {
                    prop_assert_eq!(before, BreakerState::Closed);
                    prop_assert!(agree, "opened on one caller's failures while others were served");
                    settings.cooldown_min
                };
                prop_assert_eq!(view.cooldown, expected);
                prop_assert_eq!(open_until, Some(now + expected));
                last_cooldown = expected;
            }
            if before != BreakerState::Closed && view.state == BreakerState::Closed {
                prop_assert_eq!(view.cooldown, settings.cooldown_min, "a successful probe resets the cooldown");
                last_cooldown = settings.cooldown_min;
                judged.clear();
            }
            if closed_failure && view.state == BreakerState::Closed
                && view.consecutive_failures >= settings.consecutive_failures
            {
                prop_assert!(!agree, "past its threshold, only the caller rule keeps it closed");
            }
            prop_assert!(view.cooldown >= settings.cooldown_min && view.cooldown <= settings.cooldown);
            prop_assert!(outstanding.iter().filter(|t| t.is_probe()).count() <= 1);
            if view.state == BreakerState::HalfOpen {
                prop_assert_eq!(view.probe_in_flight, outstanding.iter().any(|t| t.is_probe()));
            }
        }
    }
}
