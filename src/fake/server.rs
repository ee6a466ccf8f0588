//! The fake's HTTP server, on hyper directly: a scripted reset must close the connection
//! without any answer, which a router framework would not let a handler do. Answers sent over
//! time (streams, drips, huge bodies) are `stream`'s.

mod stream;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::answer::{self, Completion, Route, Shape};
use super::bedrock::{self, AwsAccount, AwsIssuer};
use super::behavior::{Behavior, Script};
use super::google::GoogleIssuer;
use stream::{drip_response, huge_response, stream_content_type, stream_response};

type FakeBody = BoxBody<Bytes, std::io::Error>;

/// Counters a test can wait on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FakeStats {
    /// Chat requests received.
    pub calls: usize,
    /// TCP connections open now.
    pub open_connections: usize,
    /// Streams sent to their end.
    pub streams_completed: usize,
    /// Streams whose client went away before their end.
    pub streams_cancelled: usize,
    /// Chat requests whose client went away before their answer was written: a JSON one
    /// during its `delay_ms`, a stream before its first event. A hedged gateway's loser.
    pub answers_abandoned: usize,
    /// Requests to the AWS credential endpoints (STS, ECS), granted or not.
    pub credential_requests: usize,
    /// AWS credentials those endpoints issued.
    pub credentials_issued: usize,
}

/// One request as the fake received it.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedRequest {
    pub method: String,
    /// The path and query, however the request named its target.
    pub path: String,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl RecordedRequest {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

const RECORDED_MAX: usize = 10_000;

struct ScriptState {
    script: Script,
    /// The call count when this script was set: behaviours are counted from here.
    base: usize,
}

struct FakeState {
    name: String,
    script: Mutex<ScriptState>,
    recorded: Mutex<Vec<RecordedRequest>>,
    stats: watch::Sender<FakeStats>,
    /// The only key accepted, when set.
    required_key: Option<String>,
    /// Google auth for Vertex paths, when set: the token endpoint and the tokens it issued.
    google: Option<GoogleIssuer>,
    /// The AWS identity Bedrock requests must be signed by (SigV4), when set.
    aws: Option<AwsAccount>,
    /// AWS's credential endpoints, handing out that identity's credentials, when set.
    aws_issuer: Option<AwsIssuer>,
    /// Whether answers may go out; while closed ([`FakeHandle::hold`]) every request, once
    /// counted, waits until it opens.
    gate: watch::Sender<bool>,
}

impl FakeState {
    fn next_behavior(&self) -> (usize, Behavior) {
        let mut call = 0;
        self.stats.send_modify(|s| {
            call = s.calls;
            s.calls += 1;
        });
        // A poisoned lock means a test thread panicked; the script is still readable.
        let state = self.script.lock().unwrap_or_else(|e| e.into_inner());
        (
            call,
            state.script.behavior_for(call.saturating_sub(state.base)),
        )
    }

    fn record(&self, request: RecordedRequest) {
        let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        if recorded.len() == RECORDED_MAX {
            recorded.remove(0);
        }
        recorded.push(request);
    }
}

/// A running fake. Dropping it stops accepting connections.
pub struct FakeHandle {
    addr: SocketAddr,
    state: Arc<FakeState>,
    accept: JoinHandle<()>,
}

impl Drop for FakeHandle {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeHandle {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `base_url` an OpenAI-family provider config should name: `http://addr/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The `base_url` for the other kinds (anthropic, gemini, azure): `http://addr`.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests to the Google token endpoint so far (0 without Google auth).
    pub fn token_requests(&self) -> usize {
        self.state.google.as_ref().map_or(0, GoogleIssuer::requests)
    }

    /// Revokes every Google token issued so far: requests carrying one get a 401.
    pub fn revoke_tokens(&self) {
        if let Some(google) = &self.state.google {
            google.revoke();
        }
    }

    /// AWS credentials issued so far by STS and ECS requests (0 without
    /// [`crate::fake::FakeUpstream::aws_credential_issuer`]).
    pub fn credentials_issued(&self) -> usize {
        self.state.stats.borrow().credentials_issued
    }

    /// Changes how long the AWS credentials issued from now on last.
    pub fn set_credential_lifetime(&self, lifetime: Duration) {
        if let Some(issuer) = &self.state.aws_issuer {
            issuer.set_lifetime(lifetime);
        }
    }

    /// Chat requests received so far.
    pub fn calls(&self) -> usize {
        self.state.stats.borrow().calls
    }

    /// Every counter at once.
    pub fn stats(&self) -> FakeStats {
        *self.state.stats.borrow()
    }

    /// The requests received, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Holds every answer until [`FakeHandle::release`]: a test sees requests arrive (in
    /// [`FakeHandle::wait_until`]) while none is answered yet.
    pub fn hold(&self) {
        self.state.gate.send_replace(false);
    }

    /// Lets held answers, and every one after, go out.
    pub fn release(&self) {
        self.state.gate.send_replace(true);
    }

    /// Replaces the script; its first behaviour answers the next request.
    pub fn set_script(&self, script: Script) {
        set_script(&self.state, script);
    }

    /// Resolves once the counters satisfy `ready`.
    pub async fn wait_until(&self, ready: impl FnMut(&FakeStats) -> bool) {
        let mut stats = self.state.stats.subscribe();
        // The sender lives in `self.state`, so the channel cannot close while we wait.
        let _ = stats.wait_for(ready).await;
    }
}

fn set_script(state: &FakeState, script: Script) {
    let calls = state.stats.borrow().calls;
    let mut current = state.script.lock().unwrap_or_else(|e| e.into_inner());
    *current = ScriptState {
        script,
        base: calls,
    };
}

/// What a fake asks of the requests it answers, and the credentials it issues.
pub struct Auth {
    /// The only key accepted, when set.
    pub required_key: Option<String>,
    /// Google auth for Vertex paths.
    pub google: Option<GoogleIssuer>,
    /// The AWS identity Bedrock requests must be signed by.
    pub aws: Option<AwsAccount>,
    /// AWS's credential endpoints.
    pub aws_issuer: Option<AwsIssuer>,
}

/// Serves `listener` until the handle is dropped.
pub fn spawn(
    listener: TcpListener,
    name: String,
    script: Script,
    http2_max_streams: Option<u32>,
    auth: Auth,
) -> FakeHandle {
    let Auth {
        required_key,
        google,
        aws,
        aws_issuer,
    } = auth;
    // Binding succeeded, so the local address is known.
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let state = Arc::new(FakeState {
        name,
        script: Mutex::new(ScriptState { script, base: 0 }),
        recorded: Mutex::new(Vec::new()),
        stats: watch::Sender::new(FakeStats::default()),
        required_key,
        google,
        aws,
        aws_issuer,
        gate: watch::Sender::new(true),
    });
    let accept_state = state.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let state = accept_state.clone();
            tokio::spawn(async move {
                state.stats.send_modify(|s| s.open_connections += 1);
                let service_state = state.clone();
                let service = service_fn(move |request| handle(service_state.clone(), request));
                // HTTP/1.1, or HTTP/2 with prior knowledge (a provider with `http2 = true`).
                let mut builder = auto::Builder::new(TokioExecutor::new());
                if let Some(streams) = http2_max_streams {
                    builder.http2().max_concurrent_streams(streams);
                }
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                state.stats.send_modify(|s| s.open_connections -= 1);
            });
        }
    });
    FakeHandle {
        addr,
        state,
        accept,
    }
}

/// The key a request presents, however its provider kind sends it.
fn presented_key(headers: &hyper::HeaderMap) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| header("x-api-key"))
        .or_else(|| header("api-key"))
        .or_else(|| header("x-goog-api-key"))
        .map(str::to_owned)
}

/// Returned by the service to make hyper close the connection without answering.
#[derive(Debug)]
struct ScriptedReset;

impl std::fmt::Display for ScriptedReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("scripted reset")
    }
}

impl std::error::Error for ScriptedReset {}

async fn handle(
    state: Arc<FakeState>,
    request: Request<Incoming>,
) -> Result<Response<FakeBody>, ScriptedReset> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    if let Some(control) = path.strip_prefix("/_fake/") {
        return Ok(control_request(&state, &parts.method, control, &body));
    }
    if let (Some(google), true) = (&state.google, path.ends_with("/token")) {
        let (status, answer) = google.token(&body);
        return Ok(json_response(status, &answer));
    }
    if let Some(issuer) = &state.aws_issuer
        && let Some(endpoint) = AwsIssuer::endpoint(&parts.method, &path, &body)
    {
        state.stats.send_modify(|s| s.credential_requests += 1);
        // Held like any answer, so a test sees a refresh arrive before it is answered.
        let _ = state.gate.subscribe().wait_for(|open| *open).await;
        let answer = issuer.answer(endpoint, &body);
        if answer.granted {
            state.stats.send_modify(|s| s.credentials_issued += 1);
        }
        return Ok(raw_response(
            answer.status,
            answer.content_type,
            Bytes::from(answer.body),
        ));
    }
    let Some(route) = answer::route(&path) else {
        return Ok(json_response(404, &answer::error_body(Shape::OpenAi, 404)));
    };
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    state.record(RecordedRequest {
        method: parts.method.to_string(),
        // HTTP/2 names the whole URI; HTTP/1.1, the path alone.
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.to_string(), ToString::to_string),
        version: format!("{:?}", parts.version),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    if let Some(required) = &state.required_key {
        let offered = presented_key(&parts.headers);
        if offered.as_deref() != Some(required.as_str()) {
            state.next_behavior();
            // Real providers echo (part of) a wrong key back; the gateway must not pass it on.
            let body = serde_json::json!({"error": {
                "message": format!("Incorrect API key provided: {}", offered.unwrap_or_default()),
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
            return Ok(json_response(401, &body.to_string()));
        }
    }
    if let Some(google) = &state.google {
        let authorization = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if !google.authorized(authorization) {
            state.next_behavior();
            let body = serde_json::json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                "message": "Request had invalid authentication credentials."}});
            return Ok(json_response(401, &body.to_string()));
        }
    }
    if let (Some(aws), Route::Chat { shape, .. } | Route::Embeddings(shape)) = (&state.aws, &route)
        && *shape == Shape::Bedrock
        && let Err(refused) = aws.check(&parts, &body)
    {
        state.next_behavior();
        return Ok(bedrock_error(refused));
    }
    let (call, behavior) = state.next_behavior();
    // Hyper drops this future when the client closes the connection while it waits.
    let unanswered = Unanswered(Some(state.clone()));
    // The sender lives in `state`, so the channel cannot close while this waits.
    let _ = state.gate.subscribe().wait_for(|open| *open).await;
    if behavior.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(behavior.delay_ms)).await;
    }
    unanswered.answered();
    if behavior.reset {
        return Err(ScriptedReset);
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let shape = match route {
        Route::Chat { shape, .. } | Route::Embeddings(shape) => shape,
        Route::CountTokens => Shape::Anthropic,
        Route::TextCompletions => Shape::OpenAi,
    };
    let completion = Completion::new(&state.name, call, shape, &path, &request, &behavior);
    let status = behavior.status.unwrap_or(200);
    let mut response = if status != 200 || behavior.body.is_some() {
        let body = behavior
            .body
            .clone()
            .unwrap_or_else(|| answer::error_body(shape, status));
        let streamed_ok = status == 200 && completion.stream;
        let content_type = if streamed_ok {
            stream_content_type(shape)
        } else {
            "application/json"
        };
        let mut response = raw_response(status, content_type, Bytes::from(body));
        if shape == Shape::Bedrock && status != 200 {
            insert_header(
                &mut response,
                "x-amzn-errortype",
                &bedrock::error_type_header(status),
            );
        }
        response
    } else if let Some(bytes) = behavior.body_bytes {
        huge_response(bytes, completion.stream.then_some(shape))
    } else if route == Route::Embeddings(Shape::Bedrock) {
        match bedrock::invoke::embeddings(&path, &request, call) {
            Ok(answer) => json_response(200, &answer.to_string()),
            Err(refused) => bedrock_error(refused),
        }
    } else if let Route::Embeddings(shape) = route {
        json_response(200, &answer::embeddings(shape, &request).to_string())
    } else if route == Route::CountTokens {
        json_response(200, &answer::count_tokens(&request).to_string())
    } else if route == Route::TextCompletions {
        let content_type = if completion.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let body = answer::text_completion(&completion, completion.stream);
        raw_response(200, content_type, body)
    } else if completion.stream {
        stream_response(state.clone(), completion, behavior.clone())
    } else if behavior.malformed {
        raw_response(
            200,
            "application/json",
            Bytes::from_static(b"{\"id\":\"chatcmpl-fake\",\"choices\":["),
        )
    } else if behavior.chunk_interval_ms > 0 {
        drip_response(
            completion.whole().to_string(),
            completion.chunks,
            behavior.chunk_interval_ms,
        )
    } else {
        json_response(200, &completion.whole().to_string())
    };
    for (name, value) in &behavior.headers {
        insert_header(&mut response, name, value);
    }
    Ok(response)
}

/// Sets a header, unless its name or value cannot be one (a scripted oddity).
fn insert_header(response: &mut Response<FakeBody>, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        hyper::header::HeaderName::from_bytes(name.as_bytes()),
        hyper::header::HeaderValue::from_str(value),
    ) {
        response.headers_mut().insert(name, value);
    }
}

/// A refused Bedrock request's answer: its status, `x-amzn-ErrorType` and message.
fn bedrock_error(refused: bedrock::ErrorAnswer) -> Response<FakeBody> {
    let mut response = json_response(refused.status, &refused.body);
    insert_header(&mut response, "x-amzn-errortype", &refused.error_type);
    response
}

/// Counts an answer abandoned unless [`Unanswered::answered`] is called first.
struct Unanswered(Option<Arc<FakeState>>);

impl Unanswered {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            state.stats.send_modify(|s| s.answers_abandoned += 1);
        }
    }
}

fn control_request(
    state: &FakeState,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Response<FakeBody> {
    match (method, path) {
        (&Method::GET, "requests") => {
            let recorded = state.recorded.lock().unwrap_or_else(|e| e.into_inner());
            json_response(200, &serde_json::to_string(&*recorded).unwrap_or_default())
        }
        (&Method::GET, "stats") => json_response(
            200,
            &serde_json::to_string(&*state.stats.borrow()).unwrap_or_default(),
        ),
        (&Method::PUT, "script") => match serde_json::from_slice::<Script>(body) {
            Ok(script) => {
                set_script(state, script);
                json_response(200, r#"{"ok":true}"#)
            }
            Err(e) => json_response(
                400,
                &json!({"error": {"message": e.to_string()}}).to_string(),
            ),
        },
        _ => json_response(404, &answer::error_body(Shape::OpenAi, 404)),
    }
}

fn json_response(status: u16, body: &str) -> Response<FakeBody> {
    raw_response(status, "application/json", Bytes::from(body.to_owned()))
}

fn raw_response(status: u16, content_type: &'static str, body: Bytes) -> Response<FakeBody> {
    let body = Full::new(body)
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}
