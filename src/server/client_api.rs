//! The client API's POST endpoints (chat, messages, completions, embeddings, responses),
//! served straight from the connection rather than through the router's layers.
//!
//! Why: on a 4 KB chat request the router's layers (path lookup, the declared-length
//! middleware with its boxed `Next`, the extractors, the `ConnectInfo` extension, the boxed
//! handler and route futures that each layer moves by value) cost about 13k instructions, a
//! tenth of the serving thread's work (`bench/instructions.sh`). [`serve`] does what they
//! did, once: it refuses a declared length over `[server] max_body_bytes`, reads the body
//! under that cap and its timeout, and calls the endpoint's handler. The router keeps their
//! paths, with no handler, so that other methods get its 405.

use std::net::IpAddr;

use axum::response::Response;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::endpoint::Endpoint;
use super::error::{BodyError, is_body_timeout};
use super::responses::compact;
use super::{AppState, completions, embeddings, messages, responses};
use super::{chat, refusal};

/// The client API's POST endpoints, by path.
pub(super) const ENDPOINTS: [(&str, &Endpoint); 7] = [
    ("/v1/chat/completions", &chat::CHAT),
    ("/v1/messages", &messages::MESSAGES),
    ("/v1/messages/count_tokens", &messages::COUNT_TOKENS),
    ("/v1/completions", &completions::COMPLETIONS),
    ("/v1/embeddings", &embeddings::EMBEDDINGS),
    ("/v1/responses", &responses::RESPONSES),
    (compact::PATH, &compact::COMPACT),
];

/// The endpoint a POST to `path` is for, if it is one of the client API's.
pub(super) fn endpoint(path: &str) -> Option<&'static Endpoint> {
    ENDPOINTS
        .iter()
        .find(|(known, _)| *known == path)
        .map(|(_, endpoint)| *endpoint)
}

/// Serves a POST to `endpoint` from `peer`.
pub(super) async fn serve<B>(
    state: AppState,
    peer: IpAddr,
    request: Request<B>,
    endpoint: &'static Endpoint,
) -> Response
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = request.into_parts();
    if let Some(refused) =
        refusal::declared_oversize_refusal(&state, &parts.headers, parts.uri.path())
    {
        return refused;
    }
    let body = read_body(body, state.config().server.max_body_bytes).await;
    let unread = body.is_err();
    let mut response = if parts.uri.path() == compact::PATH {
        // Boxed: inline, its two steps' futures would make every request's future larger.
        Box::pin(serve_compact(&state, peer, &parts.headers, body)).await
    } else {
        chat::handle(&state, peer, &parts.headers, body, endpoint).await
    };
    if unread {
        // The rest of the body was never read, so the connection cannot carry another
        // request: say so, rather than leave hyper to find out.
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// `POST /v1/responses/compact`: the summary is an ordinary Responses request, routed as
/// any other, and its answer becomes the compacted conversation.
async fn serve_compact(
    state: &AppState,
    peer: IpAddr,
    headers: &http::HeaderMap,
    body: Result<Bytes, BodyError>,
) -> Response {
    match compact::ask(state, headers, body).await {
        compact::Ask::Answered(response) => response,
        compact::Ask::AsIs(body) => {
            chat::handle(state, peer, headers, body, &responses::RESPONSES).await
        }
        compact::Ask::Summarize(compaction, request) => {
            let summary = chat::handle(state, peer, headers, Ok(request), &responses::RESPONSES);
            compaction.answer(state.keys.vault(), summary.await).await
        }
    }
}

/// The whole body, at most `limit` bytes of it.
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(BodyError::TooLarge),
        Err(error) if is_body_timeout(&*error) => Err(BodyError::Timeout),
        Err(error) => Err(BodyError::Unreadable(format!(
            "Failed to buffer the request body: {error}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    #[tokio::test]
    async fn a_body_over_the_cap_is_too_large_and_one_at_it_is_read() {
        let at_cap = Full::new(Bytes::from(vec![b'x'; 16]));
        assert_eq!(read_body(at_cap, 16).await.unwrap().len(), 16);
        let over = Full::new(Bytes::from(vec![b'x'; 17]));
        assert!(matches!(
            read_body(over, 16).await,
            Err(BodyError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn a_body_that_fails_mid_way_is_unreadable_and_says_why() {
        let frames: Vec<Result<hyper::body::Frame<Bytes>, std::io::Error>> = vec![
            Ok(hyper::body::Frame::data(Bytes::from_static(b"{\"model\""))),
            Err(std::io::Error::other("connection reset")),
        ];
        let body = StreamBody::new(futures_util::stream::iter(frames));
        match read_body(body, 1024).await {
            Err(BodyError::Unreadable(why)) => assert!(why.contains("connection reset"), "{why}"),
            other => panic!("expected an unreadable body, got {other:?}"),
        }
    }

    #[test]
    fn only_the_client_apis_post_paths_are_served_directly() {
        assert!(endpoint("/v1/chat/completions").is_some());
        assert!(endpoint("/v1/messages/count_tokens").is_some());
        assert!(endpoint("/v1/chat/completions/").is_none());
        assert!(endpoint("/v1/models").is_none());
        assert!(endpoint("/admin/keys").is_none());
    }
}
