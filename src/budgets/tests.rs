use std::sync::Arc;

use super::*;
use crate::store::{LimitOverrides, VirtualKey};

fn config() -> Config {
    Config::parse(
        "[[roles]]\nname = \"ae\"\nbudget_per_day = 25.0\nbudget_per_month = 500.0\n\
         [[roles]]\nname = \"free\"\n",
    )
    .unwrap()
}

fn caller(role: &str, overrides: Option<LimitOverrides>) -> Caller {
    let key = overrides.map(|limits| {
        Arc::new(VirtualKey {
            id: "key-1".into(),
            hash: String::new(),
            prefix: "sy-".into(),
            user: "ann".into(),
            role: role.into(),
            permissions: Vec::new(),
            models: None,
            limits,
            created_ms: 0,
            revoked_ms: None,
            expires_ms: None,
        })
    });
    Caller {
        key,
        user: Arc::from("ann"),
        role: Arc::from(role),
    }
}

#[test]
fn a_keys_override_replaces_its_roles_budget_for_that_period_only() {
    let config = config();
    let limits = Limits::new(&config, Arc::default()).unwrap();
    let budgets = Budgets::new(&config, &limits, Arc::default());
    assert_eq!(
        budgets.budget(&caller("ae", None)),
        Budget {
            per_day: Some(25_000_000),
            per_month: Some(500_000_000)
        }
    );
    let day_override = LimitOverrides {
        budget_per_day_micros: Some(1_000_000),
        ..LimitOverrides::default()
    };
    assert_eq!(
        budgets.budget(&caller("ae", Some(day_override))),
        Budget {
            per_day: Some(1_000_000),
            per_month: Some(500_000_000)
        }
    );
    // A key with no overrides has its role's budgets; a key can add one its role lacks.
    let plain = budgets.budget(&caller("ae", Some(LimitOverrides::default())));
    assert_eq!(plain.per_day, Some(25_000_000));
    let month_override = LimitOverrides {
        budget_per_month_micros: Some(7),
        ..LimitOverrides::default()
    };
    assert_eq!(
        budgets.budget(&caller("free", Some(month_override))),
        Budget {
            per_day: None,
            per_month: Some(7)
        }
    );
    assert!(budgets.budget(&caller("free", None)).is_unlimited());
    // Spend is counted per key when there is one, else per user.
    assert_eq!(&*owner_of(&caller("ae", None)), "user:ann");
    assert_eq!(
        &*owner_of(&caller("ae", Some(LimitOverrides::default()))),
        "key:key-1"
    );
}

#[test]
fn the_judgement_names_the_month_first_and_says_what_is_left() {
    let resets = [Duration::from_secs(10), Duration::from_secs(100)];
    let both = Budget {
        per_day: Some(100),
        per_month: Some(1_000),
    };
    assert_eq!(
        judge(30, both, 50, 500, resets),
        Verdict::Reserved {
            remaining: Some(20)
        }
    );
    assert_eq!(
        judge(60, both, 50, 980, resets),
        Verdict::Exceeded {
            period: Period::Month,
            budget: 1_000,
            spent: 980,
            reset: resets[1]
        }
    );
    assert_eq!(
        judge(60, both, 50, 0, resets),
        Verdict::Exceeded {
            period: Period::Day,
            budget: 100,
            spent: 50,
            reset: resets[0]
        }
    );
    assert_eq!(
        judge(101, both, 0, 0, resets),
        Verdict::NeverFits {
            period: Period::Day,
            budget: 100
        }
    );
    // Exactly filling a budget fits.
    assert_eq!(
        judge(50, both, 50, 0, resets),
        Verdict::Reserved { remaining: Some(0) }
    );
}

#[test]
fn refusals_name_the_budget_the_amount_and_the_reset() {
    let exceeded = BudgetRefusal::Exceeded {
        period: Period::Day,
        budget: 25_000_000,
        spent: 24_990_000,
        needed: 12_345,
        reset: Duration::from_secs(60),
        resets_at_ms: 1_796_083_200_000,
    };
    let message = exceeded.to_string();
    for part in [
        "$25.000000 daily budget",
        "$0.012345",
        "2026-12-01T00:00:00Z",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(exceeded.kind(), "budget_exceeded");
    assert_eq!(exceeded.retry_after(), Some(Duration::from_secs(60)));
    let never = BudgetRefusal::NeverFits {
        period: Period::Month,
        budget: 1_000_000,
        needed: 2_000_000,
    };
    assert!(never.to_string().contains("whole $1.000000 monthly budget"));
    assert!(never.to_string().contains("never fit"));
    assert_eq!(never.kind(), "budget_too_small");
    assert_eq!(never.retry_after(), None);
    assert_eq!(dollars(5_000), "0.005000");
}

/// Route `r` (given as its `route` lines) on provider `a`, whose output costs $1,000 per
/// million tokens, so a 10-token answer reserves $0.01; role `ae` has `per_day` dollars a day.
fn priced(route: &str, per_day: f64) -> (Config, Budgets, RequestBody) {
    let config = Config::parse(&format!(
        "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n\
         [[routes]]\nname = \"r\"\n{route}\n\
         [[prices]]\nprovider = \"a\"\nmodel = \"m\"\ninput_per_1m = 0.0\noutput_per_1m = 1000.0\n\
         [[roles]]\nname = \"ae\"\nbudget_per_day = {per_day}\n",
    ))
    .unwrap();
    let limits = Limits::new(&config, Arc::default()).unwrap();
    let budgets = Budgets::new(&config, &limits, Arc::default());
    let body = RequestBody::parse(bytes::Bytes::from_static(
        br#"{"model":"r","max_tokens":10,"messages":[]}"#,
    ))
    .unwrap();
    (config, budgets, body)
}

#[tokio::test]
async fn a_dropped_reservation_stays_charged_and_a_settled_one_returns_the_rest() {
    let (config, budgets, body) = priced("steps = [{ provider = \"a\", model = \"m\" }]", 0.025);
    let caller = caller("ae", None);
    let ask = |id: &'static str| Ask {
        caller: &caller,
        request_id: id,
        route: &config.routes[0],
        first_step: 0,
        body: &body,
        operation: Operation::Chat,
    };
    let first = budgets.reserve(ask("1")).await.unwrap().unwrap();
    assert_eq!(first.amount(), 10_000);
    assert_eq!(first.remaining_header().as_deref(), Some("0.015000"));
    drop(first);
    let second = budgets.reserve(ask("2")).await.unwrap().unwrap();
    assert_eq!(second.remaining_header().as_deref(), Some("0.005000"));
    second.settle(2_000).await;
    let third = budgets.reserve(ask("3")).await.unwrap().unwrap();
    assert_eq!(third.remaining_header().as_deref(), Some("0.003000"));
    let refused = budgets.reserve(ask("4")).await;
    assert!(matches!(
        refused,
        Err(BudgetError::Refused(BudgetRefusal::Exceeded { .. }))
    ));
}

#[tokio::test]
async fn a_hedged_route_reserves_for_every_racer_and_a_cancelled_one_stays_charged() {
    let (config, budgets, body) = priced(
        "hedge = { after = \"100ms\" }\n\
         steps = [{ provider = \"a\", model = \"m\" }, { provider = \"a\", model = \"m\" }]",
        0.05,
    );
    let caller = caller("ae", None);
    let ask = |id: &'static str, first_step: usize| Ask {
        caller: &caller,
        request_id: id,
        route: &config.routes[0],
        first_step,
        body: &body,
        operation: Operation::Chat,
    };
    // Step 0 and one hedge may both be in flight: two attempts' worth.
    let mut hedged = budgets.reserve(ask("1", 0)).await.unwrap().unwrap();
    assert_eq!(hedged.amount(), 20_000);
    // The hedge won at 2,000; the cancelled step 0 keeps its whole share.
    hedged.charge_cancelled(1);
    hedged.settle(2_000).await;
    let next = budgets.reserve(ask("2", 0)).await.unwrap().unwrap();
    assert_eq!(next.remaining_header().as_deref(), Some("0.018000"));
    next.settle(0).await;
    // Forced past step 0, nothing is hedged: one attempt's worth.
    let forced = budgets.reserve(ask("3", 1)).await.unwrap().unwrap();
    assert_eq!(forced.amount(), 10_000);
}
