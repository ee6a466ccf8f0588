//! `GET /admin/config`: the config this gateway runs, secrets redacted.
//!
//! It is the config's `Debug` form, the one its digest is taken over: every token,
//! password and key in it is a type whose `Debug` prints `***`, and a URL's `user:password@`
//! is masked here as well, since a provider's `base_url` or an endpoint is a plain string.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::Admin;
use crate::server::AppState;

/// The running config, redacted, and which config it is.
pub async fn show(_: Admin, State(state): State<AppState>) -> Json<Value> {
    let live = state.live();
    let text = mask_url_credentials(&format!("{:#?}", live.config));
    Json(json!({
        "sha256": live.stamp.sha256,
        "loaded_at_ms": live.stamp.loaded_at_ms,
        "config": text,
    }))
}

/// Masks the `user:password@` of every URL in `text`: `https://***@host/`.
fn mask_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The authority ends at the first of these; a `@` before it ends the user info.
        let end = after
            .find(['/', '?', '#', '"', '\'', ' ', '\n', ',', ')'])
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::mask_url_credentials;

    #[test]
    fn credentials_in_urls_are_masked() {
        assert_eq!(
            mask_url_credentials("base_url: \"https://ann:hunter2@api.example/v1\","),
            "base_url: \"https://***@api.example/v1\","
        );
        assert_eq!(
            mask_url_credentials("a http://host:80/x and redis://:pw@r:6379"),
            "a http://host:80/x and redis://***@r:6379"
        );
        assert_eq!(mask_url_credentials("no url here"), "no url here");
    }
}
