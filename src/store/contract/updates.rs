//! The contract for what later migrations added: key updates and stored responses.

use super::super::response_state::StoredResponse;
use super::*;

pub async fn an_update_changes_a_live_key_and_bumps_the_generation(backend: &str, store: &Store) {
    let secret = "sy-abcdefghijklmnop";
    store
        .insert_virtual_key(virtual_key("k1", secret))
        .await
        .unwrap();
    let mut changed = virtual_key("k1", secret);
    changed.role = "ops".into();
    changed.permissions = vec![];
    changed.models = None;
    // The day's budget changes, the month's is cleared.
    changed.limits = LimitOverrides {
        max_concurrent: Some(2),
        budget_per_day_micros: Some(7_250_001),
        ..LimitOverrides::default()
    };
    changed.expires_ms = Some(42);
    let before = store.generation().await.unwrap();
    assert!(store.update_virtual_key(changed.clone()).await.unwrap());
    assert!(store.generation().await.unwrap() > before, "{backend}");
    assert_eq!(
        store.virtual_keys().await.unwrap(),
        vec![changed.clone()],
        "{backend}"
    );
    let unknown = virtual_key("nope", "sy-nothing-here");
    assert!(
        !store.update_virtual_key(unknown).await.unwrap(),
        "{backend}"
    );
    store.revoke_virtual_key("k1").await.unwrap();
    assert!(
        !store.update_virtual_key(changed).await.unwrap(),
        "{backend}: a revoked key stays as it was revoked"
    );
}

fn stored(id: &str, scope: &str, created_ms: i64) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        scope: scope.into(),
        created_ms,
        input: "[]".into(),
        response: "{}".into(),
        items: vec![(format!("fc_{id}"), format!("{{\"id\":\"fc_{id}\"}}"))],
    }
}

pub async fn responses_are_found_only_in_their_scope_and_purged_by_age(
    backend: &str,
    store: &Store,
) {
    for (id, scope, at) in [("resp_a", "key1", 1_000), ("resp_b", "key1", 5_000)] {
        store.put_response(stored(id, scope, at)).await.unwrap();
    }
    // The same id in another scope is another response, and overwrites nothing.
    store
        .put_response(stored("resp_b", "key2", 6_000))
        .await
        .unwrap();
    // Items are read by id, not with their response.
    let mut found = store.response("resp_a", "key1").await.unwrap().unwrap();
    found.items = stored("resp_a", "key1", 1_000).items;
    assert_eq!(found, stored("resp_a", "key1", 1_000), "{backend}");
    let item = |id: &'static str, scope: &'static str| store.response_item(id, scope);
    assert_eq!(
        item("fc_resp_a", "key1").await.unwrap(),
        Some("{\"id\":\"fc_resp_a\"}".into()),
        "{backend}"
    );
    assert_eq!(item("fc_resp_a", "key2").await.unwrap(), None, "{backend}");
    assert_eq!(store.response("resp_a", "key2").await.unwrap(), None);
    assert!(!store.delete_response("resp_a", "key2").await.unwrap());
    assert_eq!(store.purge_responses(2_000).await.unwrap(), 1, "{backend}");
    assert_eq!(store.response("resp_a", "key1").await.unwrap(), None);
    assert_eq!(item("fc_resp_a", "key1").await.unwrap(), None, "{backend}");
    assert!(store.delete_response("resp_b", "key1").await.unwrap());
    assert_eq!(item("fc_resp_b", "key1").await.unwrap(), None, "{backend}");
    assert_eq!(store.response("resp_b", "key1").await.unwrap(), None);
    assert_eq!(
        store.response("resp_b", "key2").await.unwrap(),
        Some(StoredResponse {
            items: Vec::new(),
            ..stored("resp_b", "key2", 6_000)
        }),
        "{backend}"
    );
}
