//! `forward_headers`: the client headers a provider is sent as they came. Credentials,
//! cookies, hop-by-hop headers and those the gateway writes itself can never be named.

use http::HeaderName;

use super::Errors;

/// Headers that are never forwarded, whatever a config says: credentials (the client's are
/// for the gateway, the provider's key is the gateway's to send), cookies, hop-by-hop
/// headers, and those the gateway sets itself.
const NEVER: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "traceparent",
    "tracestate",
];

/// `names` at `field`, each a header name that may be forwarded.
pub fn header_names(errors: &mut Errors, field: &str, names: Vec<String>) -> Vec<HeaderName> {
    let mut headers = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            errors.add(at, format!("`{name}` is not a header name"));
            continue;
        };
        if NEVER.contains(&header.as_str()) {
            let why = match header.as_str() {
                "traceparent" | "tracestate" => "trace context is sent on already",
                _ => {
                    "credentials, cookies, hop-by-hop headers and the gateway's own are never forwarded"
                }
            };
            errors.add(at, format!("`{name}` cannot be forwarded: {why}"));
            continue;
        }
        if !headers.contains(&header) {
            headers.push(header);
        }
    }
    headers
}
