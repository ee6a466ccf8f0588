//! Revocation in cluster mode: a virtual key revoked on instance A, by the CLI against its
//! store or through its admin API, is refused by B and C within a second. Three real
//! `switchyard serve` processes on a fresh PostgreSQL database of the test's own.

use serde_json::json;
use switchyard::fake::FakeUpstream;
use switchyard::store::postgres::testdb::TestDb;
use tokio::time::Instant;

use super::cluster::{ADMIN_TOKEN, PROPAGATION, cli, config, generation, instances, loaded, send};
use super::logqueue::Spawned;
use super::support::*;

/// How the operator on instance A revokes a key.
enum Revoke {
    /// `switchyard vkeys revoke` against A's config (its store).
    Cli,
    /// `DELETE /admin/virtual-keys/{id}` on A's admin API.
    AdminApi,
}

/// A key created through A's admin API is admitted everywhere; revoked on A as `how`
/// says, it is refused by B and C within a second.
async fn revoked_on_a_is_refused_by_b_and_c(how: Revoke) {
    let db = TestDb::create().await;
    let fake = FakeUpstream::new("up").start().await.unwrap();
    let config = config(&db, &provider("up", &fake), true);
    let gateways = instances(&config, 3);
    let created: serde_json::Value = admin(&gateways[0], reqwest::Method::POST, "")
        .json(&json!({"user": "ana", "role": "default"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (id, key) = (
        created["id"].as_str().unwrap(),
        created["secret"].as_str().unwrap(),
    );
    // Created on A, it reaches every instance as quickly.
    let deadline = Instant::now() + PROPAGATION;
    loaded(&gateways, generation(&db).await, deadline).await;
    for gateway in &gateways {
        let status = send(gateway, Some(key)).await.status();
        assert_eq!(
            status, 200,
            "{} admits the new key once loaded",
            gateway.url
        );
    }
    match how {
        Revoke::Cli => {
            cli(&config, &["vkeys", "revoke", key]);
        }
        Revoke::AdminApi => {
            let path = format!("/{id}");
            let revoked = admin(&gateways[0], reqwest::Method::DELETE, &path)
                .send()
                .await
                .unwrap();
            assert_eq!(revoked.status(), 200);
        }
    }
    let deadline = Instant::now() + PROPAGATION;
    loaded(&gateways[1..], generation(&db).await, deadline).await;
    for gateway in &gateways[1..] {
        let status = send(gateway, Some(key)).await.status();
        assert_eq!(
            status, 401,
            "{} refuses the revoked key once loaded",
            gateway.url
        );
    }
}

/// A request to `instance`'s virtual-key admin API, `/admin/virtual-keys{path}`.
fn admin(instance: &Spawned, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    client()
        .request(method, format!("{}/admin/virtual-keys{path}", instance.url))
        .bearer_auth(ADMIN_TOKEN)
}

pub async fn a_key_revoked_on_one_instance_is_refused_by_the_others_within_a_second() {
    revoked_on_a_is_refused_by_b_and_c(Revoke::Cli).await;
}

pub async fn a_key_revoked_through_a_s_admin_api_is_refused_by_the_others_within_a_second() {
    revoked_on_a_is_refused_by_b_and_c(Revoke::AdminApi).await;
}
