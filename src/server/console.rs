//! `/console`: the operator's console, plain HTML, CSS and JavaScript embedded in the
//! binary (no build step), served beside the admin API it drives.
//!
//! The files hold no data and no secret, so they are served to anyone who can reach the
//! admin API's address; everything the console shows comes from admin API calls that carry
//! the token in `Authorization`, which the page keeps in memory or `sessionStorage` and a
//! browser never sends by itself, so another site cannot make a call on the operator's
//! behalf (no CSRF), and, the API sending no CORS headers, cannot read an answer either.
//! The headers below keep the page from being framed, from running any script but its own,
//! and from telling other sites its address.

use axum::Router;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, AppState, ServerState};

/// The console's files: name, type, content.
const FILES: [(&str, &str, &str); 4] = [
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("console/api.js"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("console/console.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_str!("console/views.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
];

const PAGE: &str = include_str!("console/index.html");

/// Only the console's own files run, load and connect; nothing may frame it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes.
pub fn routes() -> Router<ServerState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/{file}", get(file))
}

/// The console's page.
async fn page(State(server): State<ServerState>) -> Response {
    if !console_on(&AppState::from_ref(&server)) {
        return ApiError::NotFound("/console".into()).into_response();
    }
    served("text/html; charset=utf-8", PAGE)
}

/// One of the console's scripts or its style sheet.
async fn file(State(server): State<ServerState>, Path(name): Path<String>) -> Response {
    let path = format!("/console/{name}");
    if !console_on(&AppState::from_ref(&server)) {
        return ApiError::NotFound(path).into_response();
    }
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, kind, body)) => served(kind, body),
        None => ApiError::NotFound(path).into_response(),
    }
}

/// The console is there when someone could sign in to it: an admin token or a metrics token
/// is configured.
fn console_on(state: &AppState) -> bool {
    state.admin_token.is_some() || state.config().admin.metrics_token.is_some()
}

fn served(kind: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    let mut set = |name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(header::CONTENT_TYPE, kind);
    set(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY);
    set(header::X_FRAME_OPTIONS, "DENY");
    set(header::REFERRER_POLICY, "no-referrer");
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::CACHE_CONTROL, "no-cache");
    set(
        HeaderName::from_static("cross-origin-opener-policy"),
        "same-origin",
    );
    set(
        HeaderName::from_static("cross-origin-resource-policy"),
        "same-origin",
    );
    response
}
