//! What makes two requests the same for the cache: who may share the answer, the route, the
//! endpoint and its format, and the body in canonical form.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use super::canonical::append_canonical;

use crate::config::CacheScope;
use crate::providers::{ClientFormat, ClientRequest, Operation};

/// The top-level fields that cannot change an answer's content, left out of the key:
/// - `stream` and `stream_options`: a JSON and a streamed request share an entry;
/// - `user`, `metadata`, `safety_identifier` and `prompt_cache_key`: they tag the request
///   for the provider's own accounting, abuse checks and prompt caching;
/// - `store`: whether the provider keeps the answer on its side;
/// - `service_tier`: which of the provider's queues serves it, not what it says.
pub const IGNORED_FIELDS: &[&str] = &[
    "stream",
    "stream_options",
    "user",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "store",
    "service_tier",
];

/// A cache entry's name: the request's whole form (who may share the answer, the route, the
/// endpoint, the canonical body), and a hash of it. Two keys are equal only when their forms
/// are, so a hash that collides costs a comparison, never another caller's answer.
#[derive(Clone)]
pub struct CacheKey {
    hash: u64,
    form: Arc<[u8]>,
}

impl CacheKey {
    /// The bytes it takes to keep.
    pub fn size(&self) -> usize {
        self.form.len()
    }

    /// The SHA-256 of its form, in hex: the same in every process, and no request can be
    /// made to share another's, so a store shared by instances can name entries by it alone.
    pub fn digest(&self) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(&self.form[..]);
        let mut hex = String::with_capacity(64);
        for byte in digest {
            // Writing to a String cannot fail.
            let _ = std::fmt::Write::write_fmt(&mut hex, format_args!("{byte:02x}"));
        }
        hex
    }
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &CacheKey) -> bool {
        self.hash == other.hash && self.form == other.form
    }
}

impl Eq for CacheKey {}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.hash)
    }
}

/// The hash of a request's form: seeded at random once per process, so no client can aim
/// its requests at one slot of the map.
static HASHER: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);

/// Whose answers a request may be served: the identity its scope names.
pub fn identity(scope: CacheScope, key_id: Option<&str>, role: &str) -> String {
    match scope {
        // Without auth every anonymous caller is one caller, as the limits count them.
        CacheScope::Key => format!("key:{}", key_id.unwrap_or("anonymous")),
        CacheScope::Role => format!("role:{role}"),
        CacheScope::Shared => "shared".to_owned(),
    }
}

/// The key of `request` on `route` for callers of `identity`; `None` when the body cannot be
/// read as JSON, which the request's own checks have refused before this.
pub fn cache_key(identity: &str, route: &str, request: &ClientRequest) -> Option<CacheKey> {
    let body = request.body.raw();
    let mut form = Vec::with_capacity(body.len() + identity.len() + route.len() + 64);
    for part in [
        identity,
        route,
        operation_name(request.operation),
        format_name(request.format),
        request.anthropic_beta.as_deref().unwrap_or(""),
    ] {
        // Each part's length first, so no two different lists of parts run together alike.
        form.extend_from_slice(&(part.len() as u64).to_le_bytes());
        form.extend_from_slice(part.as_bytes());
    }
    let form = append_canonical(form, body, IGNORED_FIELDS)?;
    Some(CacheKey {
        hash: HASHER.hash_one(&form[..]),
        form: Arc::from(form),
    })
}

fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Chat => "chat",
        Operation::Embeddings => "embeddings",
        Operation::CountTokens => "count_tokens",
        Operation::Completions => "completions",
        Operation::Responses => "responses",
    }
}

fn format_name(format: ClientFormat) -> &'static str {
    match format {
        ClientFormat::OpenAi => "openai",
        ClientFormat::Anthropic => "anthropic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::RequestBody;

    fn request(body: &str) -> ClientRequest {
        request_in(ClientFormat::OpenAi, body)
    }

    fn request_in(format: ClientFormat, body: &str) -> ClientRequest {
        let body = RequestBody::parse(bytes::Bytes::copy_from_slice(body.as_bytes())).unwrap();
        ClientRequest::new(format, Operation::Chat, body)
    }

    fn key(identity: &str, body: &str) -> CacheKey {
        cache_key(identity, "r", &request(body)).unwrap()
    }

    #[test]
    fn a_field_cannot_move_into_a_neighbouring_object() {
        let inside = key("shared", r#"{"a":{"b":1},"c":2}"#);
        let outside = key("shared", r#"{"a":{"b":1,"c":2}}"#);
        assert_ne!(inside, outside);
        assert_ne!(
            key("shared", r#"{"a":["b","c"]}"#),
            key("shared", r#"{"a":["bc"]}"#)
        );
        assert_ne!(key("shared", r#"{"a":"1"}"#), key("shared", r#"{"a":1}"#));
    }

    #[test]
    fn key_order_whitespace_and_ignored_fields_do_not_matter() {
        let plain = key(
            "shared",
            r#"{"model":"r","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let reordered = key(
            "shared",
            r#"{ "messages" : [ {"content":"hi", "role":"user"} ],
                "stream": true, "stream_options": {"include_usage": true},
                "user": "u-1", "metadata": {"a": "b"}, "model": "r" }"#,
        );
        assert_eq!(plain, reordered);
    }

    #[test]
    fn what_changes_the_answer_changes_the_key() {
        let base = r#"{"model":"r","messages":[{"role":"user","content":"hi"}]}"#;
        let other_prompt = r#"{"model":"r","messages":[{"role":"user","content":"ho"}]}"#;
        let other_temperature =
            r#"{"model":"r","messages":[{"role":"user","content":"hi"}],"temperature":0.5}"#;
        assert_ne!(key("shared", base), key("shared", other_prompt));
        assert_ne!(key("shared", base), key("shared", other_temperature));
        assert_ne!(
            key("key:a", base),
            key("key:b", base),
            "tenants never share"
        );
        assert_ne!(
            cache_key("shared", "r", &request(base)),
            cache_key("shared", "other", &request(base)),
        );
        let anthropic = request_in(ClientFormat::Anthropic, base);
        assert_ne!(
            cache_key("shared", "r", &request(base)),
            cache_key("shared", "r", &anthropic),
        );
    }

    #[test]
    fn keys_whose_hashes_collide_are_still_different_keys() {
        let one = CacheKey {
            hash: 7,
            form: Arc::from(&b"one"[..]),
        };
        let other = CacheKey {
            hash: 7,
            form: Arc::from(&b"two"[..]),
        };
        assert_ne!(one, other);
        let mut map = std::collections::HashMap::new();
        map.insert(one.clone(), "one's answer");
        assert_eq!(map.get(&other), None, "never another request's answer");
        assert_eq!(map.get(&one), Some(&"one's answer"));
    }

    #[test]
    fn the_digest_names_the_form_alone_and_is_the_same_in_every_process() {
        let one = CacheKey {
            hash: 7,
            form: Arc::from(&b"one"[..]),
        };
        // `printf one | sha256sum`
        assert_eq!(
            one.digest(),
            "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed"
        );
        let other = key("shared", r#"{"a":1}"#);
        assert_ne!(other.digest(), one.digest());
        assert_eq!(other.digest(), key("shared", r#"{ "a" : 1 }"#).digest());
    }

    #[test]
    fn identities_follow_the_scope() {
        assert_eq!(identity(CacheScope::Key, Some("k1"), "dev"), "key:k1");
        assert_eq!(identity(CacheScope::Key, None, "dev"), "key:anonymous");
        assert_eq!(identity(CacheScope::Role, Some("k1"), "dev"), "role:dev");
        assert_eq!(identity(CacheScope::Shared, Some("k1"), "dev"), "shared");
    }
}
