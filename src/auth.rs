//! Virtual keys: issuing them, and recognising callers by them on every request.
//!
//! The store keeps only each key's hash. A gateway holds every live key in memory (behind
//! `ArcSwap`, so a lookup takes no lock) and reloads them when the store's generation moves,
//! which the server's store watcher checks every 250 ms: a `vkeys revoke` from another
//! process takes effect within that. A key past its expiry stays loaded but is refused,
//! so it stops working at its instant rather than at the next reload.

pub mod usd;
pub mod validate;

pub use validate::Invalid;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use tokio::sync::watch;

use crate::config::{Config, pattern_matches};
use crate::providers::anthropic::X_API_KEY;
use crate::store::sqlite::hash_key;
use crate::store::{LimitOverrides, Store, StoreError, VirtualKey, now_ms};

/// Who is calling, as far as routing and limits care.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The virtual key used; `None` for an anonymous caller.
    pub key: Option<Arc<VirtualKey>>,
    /// Whose counters this request goes on.
    pub user: Arc<str>,
    pub role: Arc<str>,
}

/// Why a caller may not use a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A direct `provider/model` name that `[auth] direct_models` does not allow.
    DirectName,
    /// The caller's role does not list it.
    Role,
    /// The caller's virtual key does not list it.
    Key,
}

impl Caller {
    /// Whether the caller may use `model` (a route name or `provider/model`): a direct
    /// name must pass `[auth] direct_models`, and the name must match the role's list and
    /// the key's, where they have one.
    pub fn may_use(&self, config: &Config, model: &str) -> Result<(), Denied> {
        if !config.is_route(model) && !config.auth.direct_models.allows(config, model) {
            return Err(Denied::DirectName);
        }
        let role = config.roles.iter().find(|r| r.name == *self.role);
        if let Some(patterns) = role.and_then(|r| r.models.as_ref())
            && !patterns.iter().any(|p| p.matches(model))
        {
            return Err(Denied::Role);
        }
        if let Some(patterns) = self.key.as_ref().and_then(|k| k.models.as_ref())
            && !patterns.iter().any(|p| pattern_matches(p, model))
        {
            return Err(Denied::Key);
        }
        Ok(())
    }

    /// Whether the caller's key has `permission`.
    pub fn has_permission(&self, permission: &str) -> bool {
        self.key
            .as_ref()
            .is_some_and(|k| k.has_permission(permission))
    }

    /// The key's own limits, over its role's.
    pub fn overrides(&self) -> LimitOverrides {
        self.key
            .as_ref()
            .map(|k| k.limits.clone())
            .unwrap_or_default()
    }
}

/// Why a caller was not let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No key was sent and keys are required.
    Missing,
    /// The key is unknown or revoked.
    Invalid,
    /// The key is past its expiry; it names whose key it was, for the log row.
    Expired(Arc<VirtualKey>),
}

/// Every live virtual key, by hash.
pub struct Directory {
    keys: ArcSwap<HashMap<String, Arc<VirtualKey>>>,
    /// Hashes of revoked keys: refused even where auth is optional (see `authenticate`).
    revoked: ArcSwap<HashSet<String>>,
    required: bool,
    default_role: Arc<str>,
    loaded: watch::Sender<i64>,
}

impl Directory {
    /// Loads the live keys; the server's store watcher calls [`Directory::reload`] on changes.
    pub async fn load(
        store: Store,
        required: bool,
        default_role: &str,
    ) -> Result<Arc<Directory>, StoreError> {
        let generation = store.generation().await?;
        let directory = Arc::new(Directory {
            keys: ArcSwap::from_pointee(HashMap::new()),
            revoked: ArcSwap::from_pointee(HashSet::new()),
            required,
            default_role: Arc::from(default_role),
            loaded: watch::Sender::new(generation),
        });
        directory.reload(&store, generation).await?;
        Ok(directory)
    }

    /// Resolves once the keys of store generation `generation` (or later) are loaded.
    pub async fn wait_for_generation(&self, generation: i64) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = loaded.wait_for(|g| *g >= generation).await;
    }

    /// Loads the store's live keys, as of `generation`.
    pub async fn reload(&self, store: &Store, generation: i64) -> Result<(), StoreError> {
        let (revoked, live): (Vec<_>, Vec<_>) = store
            .virtual_keys()
            .await?
            .into_iter()
            .partition(|k| k.revoked_ms.is_some());
        let live = live.into_iter().map(|k| (k.hash.clone(), Arc::new(k)));
        self.keys.store(Arc::new(live.collect()));
        let revoked = revoked.into_iter().map(|k| k.hash);
        self.revoked.store(Arc::new(revoked.collect()));
        // Never backwards: a reload asked for an older generation read the store as it is.
        self.loaded.send_if_modified(|loaded| {
            let newer = generation > *loaded;
            *loaded = (*loaded).max(generation);
            newer
        });
        Ok(())
    }

    /// Whether `headers` offer a virtual key (`sy-…`) this directory neither holds nor holds
    /// as revoked: one made since the last load, perhaps, which the store may already have.
    pub fn offers_unknown_key(&self, headers: &HeaderMap) -> bool {
        let Some(offered) = credential(headers).filter(|k| k.starts_with(KEY_PREFIX)) else {
            return false;
        };
        let hash = hash_key(offered);
        !self.keys.load().contains_key(&hash) && !self.revoked.load().contains(&hash)
    }

    /// The store generation whose keys are loaded.
    pub fn loaded_generation(&self) -> i64 {
        *self.loaded.borrow()
    }

    /// Recognises the caller from `Authorization: Bearer` or `x-api-key`.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthFailure> {
        let offered = credential(headers);
        let hash = offered.map(hash_key);
        let key = hash.as_ref().and_then(|h| self.keys.load().get(h).cloned());
        // Refused even without required auth, as an expired key is: the caller meant it.
        if key.is_none() && hash.is_some_and(|h| self.revoked.load().contains(&h)) {
            return Err(AuthFailure::Invalid);
        }
        match (key, offered) {
            // Refused even without required auth: the caller meant this key, and an
            // anonymous answer would hide that it has stopped working.
            (Some(key), _) if key.expired(now_ms()) => Err(AuthFailure::Expired(key)),
            (Some(key), _) => Ok(Caller {
                user: Arc::from(key.user.as_str()),
                role: Arc::from(key.role.as_str()),
                key: Some(key),
            }),
            // SDKs always send some key, so without required auth an unknown one is ignored.
            (None, _) if !self.required => Ok(Caller {
                key: None,
                user: Arc::from("anonymous"),
                role: self.default_role.clone(),
            }),
            (None, None) => Err(AuthFailure::Missing),
            (None, Some(_)) => Err(AuthFailure::Invalid),
        }
    }
}

fn credential(headers: &HeaderMap) -> Option<&str> {
    // The scheme is case-insensitive (RFC 9110 §11.1): `bearer sy-…` is as good.
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .and_then(|(scheme, key)| scheme.eq_ignore_ascii_case("bearer").then_some(key));
    let api_key = headers.get(X_API_KEY).and_then(|v| v.to_str().ok());
    bearer.or(api_key).map(str::trim).filter(|k| !k.is_empty())
}

/// A key just issued: the key itself, shown once, and what the store keeps.
pub struct IssuedKey {
    pub key: String,
    pub record: VirtualKey,
}

/// What a new virtual key is for.
pub struct KeyRequest {
    pub user: String,
    pub role: String,
    pub permissions: Vec<String>,
    pub models: Option<Vec<String>>,
    pub limits: LimitOverrides,
}

/// What every virtual key starts with.
pub const KEY_PREFIX: &str = "sy-";

/// Makes a new key: `sy-` and 32 random bytes in base64url (43 characters).
pub fn issue(request: KeyRequest) -> Result<IssuedKey, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let record = VirtualKey {
        id: uuid::Uuid::now_v7().to_string(),
        hash: hash_key(&key),
        prefix: key.chars().take(11).collect(),
        user: request.user,
        role: request.role,
        permissions: request.permissions,
        models: request.models,
        limits: request.limits,
        created_ms: now_ms(),
        revoked_ms: None,
        expires_ms: None,
    };
    Ok(IssuedKey { key, record })
}

/// `vkeys list`: one key a line, masked, with its user, role, budgets (in dollars) and state.
pub fn table(keys: &[VirtualKey]) -> String {
    let mut out = format!(
        "{:<36}  {:<14}  {:<16}  {:<12}  {:<12}  {:<20}  {:<12}  {:<12}  {:<29}  {:<29}  {}\n",
        "ID",
        "KEY",
        "USER",
        "ROLE",
        "PERMISSIONS",
        "MODELS",
        "DAY USD",
        "MONTH USD",
        "CREATED",
        "EXPIRES",
        "STATE"
    );
    // A budget the key does not set is its role's.
    let budget = |micros: Option<u64>| micros.map(usd::format).unwrap_or_else(|| "-".into());
    let now = now_ms();
    for key in keys {
        out.push_str(&format!(
            "{:<36}  {:<14}  {:<16}  {:<12}  {:<12}  {:<20}  {:<12}  {:<12}  {:<29}  {:<29}  {}\n",
            key.id,
            key.masked(),
            key.user,
            key.role,
            key.permissions.join(","),
            key.models
                .as_ref()
                .map(|m| m.join(","))
                .unwrap_or_else(|| "*".into()),
            budget(key.limits.budget_per_day_micros),
            budget(key.limits.budget_per_month_micros),
            date(key.created_ms),
            key.expires_ms.map(date).unwrap_or_else(|| "never".into()),
            key.state(now),
        ));
    }
    out
}

fn date(ms: i64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    httpdate::fmt_http_date(time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> KeyRequest {
        KeyRequest {
            user: "ana".into(),
            role: "ae".into(),
            permissions: vec![],
            models: Some(vec!["smart".into()]),
            limits: LimitOverrides::default(),
        }
    }

    #[test]
    fn issued_keys_are_long_random_and_only_hashed() {
        let a = issue(request()).unwrap();
        let b = issue(request()).unwrap();
        assert!(a.key.starts_with("sy-"));
        assert_eq!(a.key.len(), 3 + 43);
        assert_ne!(a.key, b.key);
        assert_eq!(a.record.hash, hash_key(&a.key));
        assert!(!a.record.hash.contains(&a.key[3..]));
    }

    #[tokio::test]
    async fn required_auth_refuses_missing_unknown_and_revoked_keys() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let issued = issue(request()).unwrap();
        store
            .insert_virtual_key(issued.record.clone())
            .await
            .unwrap();
        let directory = Directory::load(store.clone(), true, "default")
            .await
            .unwrap();

        let mut headers = HeaderMap::new();
        assert_eq!(
            directory.authenticate(&headers).unwrap_err(),
            AuthFailure::Missing
        );
        headers.insert("x-api-key", "sy-nope".parse().unwrap());
        assert_eq!(
            directory.authenticate(&headers).unwrap_err(),
            AuthFailure::Invalid
        );
        headers.insert(
            AUTHORIZATION,
            format!("Bearer {}", issued.key).parse().unwrap(),
        );
        let caller = directory.authenticate(&headers).unwrap();
        assert_eq!(&*caller.user, "ana");
        let config = Config::parse(
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nkey_required = false\n\
             [[routes]]\nname = \"smart\"\nsteps = [{ provider = \"p\", model = \"m\" }]\n\
             [[routes]]\nname = \"other\"\nsteps = [{ provider = \"p\", model = \"m\" }]\n",
        )
        .unwrap();
        assert_eq!(caller.may_use(&config, "smart"), Ok(()));
        assert_eq!(caller.may_use(&config, "other"), Err(Denied::Key));
        assert_eq!(caller.may_use(&config, "p/x"), Err(Denied::DirectName));

        store.revoke_virtual_key(&issued.key).await.unwrap();
        let generation = store.generation().await.unwrap();
        directory.reload(&store, generation).await.unwrap();
        assert_eq!(
            directory.authenticate(&headers).unwrap_err(),
            AuthFailure::Invalid
        );
    }

    #[tokio::test]
    async fn the_loaded_generation_never_goes_back() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let directory = Directory::load(store.clone(), true, "guest").await.unwrap();
        directory.reload(&store, 7).await.unwrap();
        // A reload that was asked for an older generation, finishing last.
        directory.reload(&store, 3).await.unwrap();
        assert_eq!(*directory.loaded.borrow(), 7);
    }

    #[tokio::test]
    async fn an_expired_key_is_refused_even_where_auth_is_optional() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let mut issued = issue(request()).unwrap();
        issued.record.expires_ms = Some(now_ms() - 1);
        store
            .insert_virtual_key(issued.record.clone())
            .await
            .unwrap();
        let directory = Directory::load(store, false, "guest").await.unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            format!("Bearer {}", issued.key).parse().unwrap(),
        );
        match directory.authenticate(&headers) {
            Err(AuthFailure::Expired(key)) => assert_eq!(key.id, issued.record.id),
            other => panic!("expected an expiry, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_revoked_key_is_refused_even_where_auth_is_optional() {
        // The caller meant that key; an anonymous answer would hide that it was revoked, and
        // give the revoked user whatever the default role may do.
        let store = Store::open("sqlite::memory:").await.unwrap();
        let issued = issue(request()).unwrap();
        store.insert_virtual_key(issued.record).await.unwrap();
        store.revoke_virtual_key(&issued.key).await.unwrap();
        let directory = Directory::load(store, false, "guest").await.unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            format!("Bearer {}", issued.key).parse().unwrap(),
        );
        assert!(matches!(
            directory.authenticate(&headers),
            Err(AuthFailure::Invalid)
        ));
    }

    #[tokio::test]
    async fn optional_auth_ignores_unknown_keys() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let directory = Directory::load(store, false, "guest").await.unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, "Bearer sk-whatever".parse().unwrap());
        let caller = directory.authenticate(&headers).unwrap();
        assert_eq!((&*caller.user, &*caller.role), ("anonymous", "guest"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer sy-1", "bearer sy-1", "BEARER sy-1"] {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, value.parse().unwrap());
            assert_eq!(credential(&headers), Some("sy-1"), "{value}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, "Basic sy-1".parse().unwrap());
        assert_eq!(credential(&headers), None);
    }
}
