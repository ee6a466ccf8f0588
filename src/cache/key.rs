//! What makes two requests the same for the cache: who may share the answer, the route, the
//! endpoint and its format, and the body in canonical form.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

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

/// A cache entry's name: a SHA-256 digest, so neither the prompt nor the caller can be read
/// from it (it is a Redis key name in cluster mode).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…")
    }
}

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
    let mut body: Map<String, Value> = serde_json::from_slice(request.body.raw()).ok()?;
    for field in IGNORED_FIELDS {
        body.remove(*field);
    }
    // serde_json's maps are ordered by key, so this writes the same bytes for bodies that
    // differ only in key order or whitespace.
    let canonical = serde_json::to_vec(&Value::Object(body)).ok()?;
    let mut digest = Sha256::new();
    for part in [
        identity.as_bytes(),
        route.as_bytes(),
        operation_name(request.operation).as_bytes(),
        format_name(request.format).as_bytes(),
        request.anthropic_beta.as_deref().unwrap_or("").as_bytes(),
    ] {
        // Each part's length first, so no two different lists of parts run together alike.
        digest.update((part.len() as u64).to_le_bytes());
        digest.update(part);
    }
    digest.update(&canonical);
    Some(CacheKey(digest.finalize().into()))
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
    fn identities_follow_the_scope() {
        assert_eq!(identity(CacheScope::Key, Some("k1"), "dev"), "key:k1");
        assert_eq!(identity(CacheScope::Key, None, "dev"), "key:anonymous");
        assert_eq!(identity(CacheScope::Role, Some("k1"), "dev"), "role:dev");
        assert_eq!(identity(CacheScope::Shared, Some("k1"), "dev"), "shared");
    }
}
