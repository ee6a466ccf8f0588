//! Spend budgets of a virtual key: set in US dollars through the admin API and the CLI,
//! stored exactly in micro-dollars, shown back in dollars, changed and cleared live, and
//! refused with the field at fault when they are not an amount. (The engine that enforces
//! them is tested on its own; these tests hold the key's side of it.)

use reqwest::Method;
use serde_json::{Value, json};

use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::support::*;
use super::virtual_keys::{
    TOKEN, admin, create, keyed_config, keyed_config_on_disk, refused, start, started, vkeys_cli,
};

/// Any 32 bytes, base64: a store on PostgreSQL needs a master key to start on.
const MASTER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The stored budgets of key `id`, in micro-dollars: (per day, per month).
async fn stored(gateway: &Gateway, id: &str) -> (Option<u64>, Option<u64>) {
    let keys = gateway.store().virtual_keys().await.unwrap();
    let key = keys.iter().find(|k| k.id == id).expect("the key is stored");
    (
        key.limits.budget_per_day_micros,
        key.limits.budget_per_month_micros,
    )
}

fn budgets(shown: &Value) -> (&Value, &Value) {
    (&shown["budget_per_day"], &shown["budget_per_month"])
}

#[tokio::test]
async fn budgets_are_set_shown_changed_and_cleared_over_the_admin_api() {
    let (_primary, _secondary, gateway) = started().await;
    let body = json!({"user": "ana", "role": "ae", "budget_per_day": 5, "budget_per_month": 12.50});
    let (status, created) = admin(&gateway, Method::POST, "/admin/virtual-keys", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(budgets(&created), (&json!(5), &json!(12.5)), "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        stored(&gateway, &id).await,
        (Some(5_000_000), Some(12_500_000))
    );
    let path = format!("/admin/virtual-keys/{id}");
    let (_, one) = admin(&gateway, Method::GET, &path, None).await;
    assert_eq!(budgets(&one), (&json!(5), &json!(12.5)), "{one}");
    let (_, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(&listed["virtual_keys"][0], &one);

    // A change of one budget leaves the other as it was; so does a change of anything else.
    let change = json!({"budget_per_day": 0.000001});
    let (status, updated) = admin(&gateway, Method::PATCH, &path, Some(change)).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(budgets(&updated), (&json!(0.000001), &json!(12.5)));
    let change = json!({"requests_per_minute": 60});
    let (status, updated) = admin(&gateway, Method::PATCH, &path, Some(change)).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(budgets(&updated), (&json!(0.000001), &json!(12.5)));
    assert_eq!(stored(&gateway, &id).await, (Some(1), Some(12_500_000)));

    // Null clears: the key falls back on its role's budget.
    let change = json!({"budget_per_month": null, "budget_per_day": 1234.567891});
    let (status, updated) = admin(&gateway, Method::PATCH, &path, Some(change)).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(budgets(&updated), (&json!(1234.567891), &Value::Null));
    assert_eq!(stored(&gateway, &id).await, (Some(1_234_567_891), None));
    let (_, one) = admin(&gateway, Method::GET, &path, None).await;
    assert_eq!(&one, &updated);

    // A key made without budgets shows them as null.
    let (other, _) = create(&gateway, json!({"user": "bo", "role": "ae"})).await;
    let (_, shown) = admin(
        &gateway,
        Method::GET,
        &format!("/admin/virtual-keys/{other}"),
        None,
    )
    .await;
    assert_eq!(budgets(&shown), (&Value::Null, &Value::Null), "{shown}");
}

#[tokio::test]
async fn bad_budgets_are_refused_with_the_field_at_fault() {
    let (_primary, _secondary, gateway) = started().await;
    let bad = [
        (json!(-1), "negative"),
        (json!(-0.5), "negative"),
        (json!(1.0000001), "6 decimal"),
        (json!(0), "more than 0"),
        (json!(1e30), "at most"),
        (json!(u64::MAX), "at most"),
        (json!("5"), "number"),
        (json!(true), "number"),
    ];
    for field in ["budget_per_day", "budget_per_month"] {
        for (amount, said) in &bad {
            let body = json!({"user": "ana", "role": "ae", field: amount});
            let answer = refused(&gateway, Method::POST, "/admin/virtual-keys", &body).await;
            assert_eq!(answer["error"]["param"], field, "{body} -> {answer}");
            let message = error_message(&answer);
            assert!(message.contains(said), "{body} -> {message}");
        }
    }
    let (_, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(listed, json!({"virtual_keys": []}), "nothing was stored");

    let (id, _) = create(
        &gateway,
        json!({"user": "ana", "role": "ae", "budget_per_day": 5}),
    )
    .await;
    let path = format!("/admin/virtual-keys/{id}");
    for field in ["budget_per_day", "budget_per_month"] {
        for (amount, said) in &bad {
            let body = json!({ field: amount });
            let answer = refused(&gateway, Method::PATCH, &path, &body).await;
            assert_eq!(answer["error"]["param"], field, "{body} -> {answer}");
            assert!(error_message(&answer).contains(said), "{body} -> {answer}");
        }
    }
    assert_eq!(
        stored(&gateway, &id).await,
        (Some(5_000_000), None),
        "unchanged"
    );
}

#[tokio::test]
async fn vkeys_create_takes_budgets_in_dollars_and_list_shows_them() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let (dir, served, config) = keyed_config_on_disk(&primary, &secondary, "budgets");
    let cli = |args: &[&str]| vkeys_cli(&config, args);
    let create = ["create", "--user", "cli", "--role", "ae"];

    for (flag, amount, said) in [
        ("--budget-per-day", "-1", "negative"),
        ("--budget-per-month", "12.3456789", "6 decimal"),
        ("--budget-per-day", "NaN", "finite"),
        ("--budget-per-month", "inf", "finite"),
        ("--budget-per-day", "five", "amount"),
        ("--budget-per-day", "99999999999999", "at most"),
        ("--budget-per-month", "0", "more than 0"),
    ] {
        let refused = cli(&[&create[..], &[flag, amount]].concat());
        assert!(!refused.status.success(), "{flag} {amount}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        let field = &flag[2..].replace('-', "_");
        assert!(
            (stderr.contains(flag) || stderr.contains(field.as_str())) && stderr.contains(said),
            "{flag} {amount}: {stderr}"
        );
    }

    let made = cli(&[
        &create[..],
        &["--budget-per-day", "5", "--budget-per-month", "12.50"],
    ]
    .concat());
    assert!(made.status.success(), "{made:?}");
    let listed = cli(&["list"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    let row = table
        .lines()
        .find(|l| l.contains("cli"))
        .expect("the key is listed");
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("DAY USD") && header.contains("MONTH USD"),
        "{table}"
    );
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells.contains(&"5") && cells.contains(&"12.5"), "{table}");

    // The admin API reads what the CLI stored.
    let gateway = start(&served).await;
    let (_, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(
        budgets(&listed["virtual_keys"][0]),
        (&json!(5), &json!(12.5)),
        "{listed}"
    );
    gateway.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Gateways A and B on the store at `store_url`: a budget changed through A's admin API is
/// what B holds for the key, once B has loaded the store's generation.
pub async fn a_budget_change_on_a_reaches_b(store_url: &str) {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let served = keyed_config(&primary, &secondary)
        .with("[store]\n")
        .set("url", store_url);
    let start = || {
        let options = StartOptions {
            admin_token: Some(Secret::new(TOKEN)),
            master_key: Some(Secret::new(MASTER_KEY)),
            ..StartOptions::default()
        };
        Gateway::start_with(served.config(), "127.0.0.1:0".parse().unwrap(), options)
    };
    let (a, b) = (start().await.unwrap(), start().await.unwrap());
    let body = json!({"user": "ana", "role": "ae", "budget_per_month": 100});
    let (id, key) = create(&a, body).await;
    let seen_by_b = || async {
        // B's store watcher reloads on its own; this waits for it, bounded.
        let current = tokio::time::timeout(std::time::Duration::from_secs(5), b.keys_current());
        current.await.expect("B loads the store's keys within 5 s");
        let limits = b.key_limits(&key).expect("B admits the key");
        (limits.budget_per_day_micros, limits.budget_per_month_micros)
    };
    assert_eq!(seen_by_b().await, (None, Some(100_000_000)));

    let path = format!("/admin/virtual-keys/{id}");
    let change = json!({"budget_per_day": 2.5, "budget_per_month": null});
    let (status, updated) = admin(&a, Method::PATCH, &path, Some(change)).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(seen_by_b().await, (Some(2_500_000), None));
    let (_, on_b) = admin(&b, Method::GET, &path, None).await;
    assert_eq!(budgets(&on_b), (&json!(2.5), &Value::Null), "{on_b}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_budget_changed_on_one_gateway_reaches_another_on_the_same_sqlite_file() {
    let dir = std::env::temp_dir().join(format!("switchyard-budgets-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    a_budget_change_on_a_reaches_b(&format!("sqlite://{}", dir.join("store.db").display())).await;
    let _ = std::fs::remove_dir_all(&dir);
}
