//! The fuzz targets' bodies, shared by the fuzz binaries (`fuzz/fuzz_targets/*.rs`) and the
//! corpus replay that `cargo test` runs (`tests/fuzz_replay.rs`), so the replay exercises
//! exactly what was fuzzed.
//!
//! Each target asserts properties where they are cheap, not only "no panic". Inputs that
//! choose among variants take their first byte as the choice and the rest as the payload.

use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::stream;
use http::StatusCode;
use serde_json::{Map, Value};
use switchyard::config::{Config, ConfigError, Provider, ProviderKind};
use switchyard::providers::sse::{SseEvent, SseReader};
use switchyard::providers::{self, ClientFormat, ClientRequest, Operation, StreamState, Target};
use switchyard::router::retry::{MAX_RETRY_AFTER, parse_retry_after};

/// Every provider kind, so one input byte can pick one.
const KINDS: [ProviderKind; 4] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
    ProviderKind::Azure,
];
const FORMATS: [ClientFormat; 2] = [ClientFormat::OpenAi, ClientFormat::Anthropic];
const OPERATIONS: [Operation; 2] = [Operation::Chat, Operation::Embeddings];

/// `retry-after`: never panics, and never asks for more than [`MAX_RETRY_AFTER`].
pub fn retry_after(data: &[u8]) {
    let (now, value) = match data.split_first_chunk::<4>() {
        Some((now, value)) => (u32::from_le_bytes(*now), value),
        None => (0, data),
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now.into());
    let value = String::from_utf8_lossy(value);
    if let Some(wait) = parse_retry_after(&value, now) {
        assert!(wait <= MAX_RETRY_AFTER, "{value:?} gave {wait:?}");
    }
}

/// The SSE reader: the same bytes in any chunking give the same events, the events' raw
/// bytes are exactly a prefix of the input, and what is left over holds no whole event.
pub fn sse(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = read_events(vec![Bytes::copy_from_slice(body)]);
    let chunked = read_events(chunk(body, seed));
    assert_eq!(whole, chunked, "chunking changed the events");
    let bytewise = read_events(body.chunks(1).map(Bytes::copy_from_slice).collect());
    assert_eq!(whole, bytewise, "byte-at-a-time changed the events");

    let (events, _) = whole;
    let consumed: Vec<u8> = events.iter().flat_map(|e| e.raw.iter().copied()).collect();
    assert!(body.starts_with(&consumed), "raw bytes are not the input");
}

/// Splits `body` into chunks whose lengths cycle through a pattern drawn from `seed`.
fn chunk(body: &[u8], seed: u8) -> Vec<Bytes> {
    let lengths = [1 + (seed & 7) as usize, 1 + (seed >> 3) as usize, 2];
    let mut chunks = Vec::new();
    let mut rest = body;
    for length in lengths.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at((*length).min(rest.len()));
        chunks.push(Bytes::copy_from_slice(head));
        rest = tail;
    }
    chunks
}

/// `[server] max_sse_event_bytes`'s default.
const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// Every event the reader gives for `chunks`, and the error that ended it, if any.
fn read_events(chunks: Vec<Bytes>) -> (Vec<SseEvent>, Option<String>) {
    // The gateway's default cap on one event, so the fuzzer also reaches the too-long path.
    let chunks = stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
    let mut reader = SseReader::new(chunks, MAX_EVENT_BYTES);
    let mut events = Vec::new();
    loop {
        // The chunks are all in memory, so every read completes at once.
        match reader.next_event().now_or_never() {
            Some(Ok(Some(event))) => events.push(event),
            Some(Ok(None)) => return (events, None),
            Some(Err(error)) => return (events, Some(error.to_string())),
            None => panic!("the reader waited on a stream that was ready"),
        }
    }
}

/// The config parser: never panics; a bad file's errors each name a field; a good one's
/// `switchyard check` report (worst cases included) computes without overflow.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Config::parse(&text) {
        Ok(config) => {
            switchyard::check::report(&config);
            for route in &config.routes {
                let worst = config.retry.worst_case(route.steps.len());
                assert!(worst <= config.retry.request_deadline);
            }
        }
        Err(ConfigError::Invalid(errors)) => {
            assert!(!errors.is_empty(), "an invalid config with no error");
            for error in errors {
                assert!(!error.field.is_empty(), "no field path: {error}");
                assert!(!error.message.is_empty(), "no message: {error}");
            }
        }
        Err(other) => panic!("parsing text gave {other}"),
    }
}

/// What the translators need that does not come from the input: one provider of each kind.
struct Fixture {
    providers: Vec<Provider>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let mut text = String::from("[auth]\nrequired = false\n[store]\nurl = \"sqlite::memory:\"\n");
        for (name, base_url) in [
            ("openai", "http://127.0.0.1:9/v1"),
            ("anthropic", "http://127.0.0.1:9"),
            ("gemini", "http://127.0.0.1:9"),
            ("azure", "http://127.0.0.1:9"),
        ] {
            text.push_str(&format!(
                "[[providers]]\nname = \"{name}\"\nkind = \"{name}\"\nbase_url = \"{base_url}\"\nkey_required = false\n"
            ));
        }
        let config = match Config::parse(&text) {
            Ok(config) => config,
            Err(e) => panic!("the fixture's config is bad: {e}"),
        };
        Fixture {
            providers: config.providers,
        }
    })
}

fn provider(kind: ProviderKind) -> &'static Provider {
    match fixture().providers.iter().find(|p| p.kind == kind) {
        Some(provider) => provider,
        None => panic!("the fixture has no {kind:?} provider"),
    }
}

/// A client's request body: only a JSON object gets past the server's own checks.
fn client_request(
    format: ClientFormat,
    operation: Operation,
    body: &[u8],
) -> Option<ClientRequest> {
    // As the server reads it: the request's own bytes, spliced where the formats match.
    let body = providers::RequestBody::parse(bytes::Bytes::copy_from_slice(body)).ok()?;
    Some(ClientRequest::new(format, operation, body))
}

/// Request translators, every client format to every provider kind, whole and streamed:
/// never panic, and either refuse with a message or build a request whose body is JSON.
pub fn request(data: &[u8]) {
    let Some((&choice, body)) = data.split_first() else {
        return;
    };
    let choice = usize::from(choice);
    let kind = KINDS[choice % 4];
    let format = FORMATS[(choice / 4) % 2];
    let operation = OPERATIONS[(choice / 8) % 2];
    let stream = (choice / 16) % 2 == 1;
    same_body_both_ways(body);
    let Some(request) = client_request(format, operation, body) else {
        return;
    };
    let target = Target {
        provider: provider(kind),
        key: None,
        model: "model-x",
    };
    match providers::adapter(kind, "model-x").request(&target, &request, stream) {
        Ok(built) => {
            if let Err(e) = built.uri.parse::<http::Uri>() {
                panic!("{kind:?} built a bad URI ({e}): {}", built.uri);
            }
            if let Some(name) = built.invalid() {
                panic!("{kind:?} built a bad {name} header");
            }
            let bytes = &built.body.to_bytes()[..];
            if let Err(e) = json_syntax(bytes) {
                panic!("{kind:?} request body is not JSON ({e}): {bytes:?}");
            }
        }
        Err(rejection) => assert!(!rejection.message.is_empty(), "a rejection says why"),
    }
}

/// The body check's fast path finds what serde_json finds, and refuses what it refuses
/// with serde_json's own words.
fn same_body_both_ways(body: &[u8]) {
    let fast = providers::RequestBody::parse(Bytes::copy_from_slice(body));
    let serde = providers::RequestBody::parse_by_serde(Bytes::copy_from_slice(body));
    match (fast, serde) {
        (Ok(fast), Ok(serde)) => assert_eq!(fast.layout(), serde.layout()),
        (Err(fast), Err(serde)) => assert_eq!(fast.to_string(), serde.to_string()),
        (fast, serde) => panic!(
            "fast {:?}, serde_json {:?}",
            fast.err().map(|e| e.to_string()),
            serde.err().map(|e| e.to_string())
        ),
    }
}

/// Whole-answer translators, every provider kind to every client format: a decoded answer
/// and a translated error body are JSON, the error in the client's own shape.
pub fn response(data: &[u8]) {
    let Some((&choice, body)) = data.split_first() else {
        return;
    };
    let choice = usize::from(choice);
    let kind = KINDS[choice % 4];
    let format = FORMATS[(choice / 4) % 2];
    let operation = OPERATIONS[(choice / 8) % 2];
    // The client's own request matters to a few decoders (Gemini's embeddings echo it).
    let request = ClientRequest::new(format, operation, Map::new());
    let adapter = providers::adapter(kind, "model-x");
    if choice / 16 % 2 == 0 {
        if let Some(decoded) = adapter.decode(&request, &Bytes::copy_from_slice(body))
            && let Err(e) = json_syntax(&decoded.body)
        {
            panic!("{kind:?} decoded to non-JSON ({e}): {:?}", decoded.body);
        }
        return;
    }
    let status =
        StatusCode::from_u16(400 + (choice / 32) as u16 * 17).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(translated) = adapter.error_body(&request, status, body) {
        let value: Value = match serde_json::from_slice(&translated) {
            Ok(value) => value,
            Err(e) => panic!("{kind:?} error body is not JSON ({e})"),
        };
        assert_error_shape(format, &value);
    }
}

/// Whether `bytes` are JSON as a client's parser reads it: UTF-8, and well formed. A
/// passthrough may carry numbers past `f64` (`1e400`), which JSON allows and
/// `serde_json::Value` refuses, so this checks syntax, not ranges.
fn json_syntax(bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn assert_error_shape(format: ClientFormat, value: &Value) {
    let error = &value["error"];
    assert!(error["message"].is_string(), "no error message: {value}");
    match format {
        ClientFormat::OpenAi => assert!(error["type"].is_string(), "no error type: {value}"),
        ClientFormat::Anthropic => assert_eq!(value["type"], "error", "{value}"),
    }
}

/// Stream translators, every provider kind to every client format, fed the provider's SSE
/// bytes as the gateway would: never panic; where the formats cross, every frame written
/// is a whole SSE event whose data is JSON (or `[DONE]`).
pub fn stream(data: &[u8]) {
    let Some((&choice, body)) = data.split_first() else {
        return;
    };
    let choice = usize::from(choice);
    let kind = KINDS[choice % 4];
    let format = FORMATS[(choice / 4) % 2];
    let mut client_body = Map::new();
    if choice / 8 % 2 == 1 {
        let options = serde_json::json!({"include_usage": true});
        client_body.insert("stream_options".into(), options);
    }
    let request = ClientRequest::new(format, Operation::Chat, client_body);
    let native = matches!(
        (kind, format),
        (
            ProviderKind::OpenAi | ProviderKind::Azure,
            ClientFormat::OpenAi
        ) | (ProviderKind::Anthropic, ClientFormat::Anthropic)
    );
    let mut translator = providers::adapter(kind, "model-x").stream(&request);
    let check = |frames: &[Bytes]| {
        if !native {
            frames.iter().for_each(assert_sse_frame);
        }
    };
    let (events, _) = read_events(vec![Bytes::copy_from_slice(body)]);
    let mut ended = false;
    for event in events.iter().filter(|e| !e.data().is_empty()) {
        let translated = translator.event(event);
        check(&translated.frames);
        if !matches!(translated.state, StreamState::Open | StreamState::KeepAlive) {
            ended = true;
            break;
        }
    }
    if !ended {
        check(&translator.end().frames);
    }
    let message = events.last().map(|e| e.data()).unwrap_or("broken");
    assert_sse_frame(&translator.error_event(message, "upstream_error"));
}

fn assert_sse_frame(frame: &Bytes) {
    let Ok(text) = std::str::from_utf8(frame) else {
        panic!("a frame is not UTF-8: {frame:?}");
    };
    let Some(body) = text.strip_suffix("\n\n") else {
        panic!("a frame does not end its event: {text:?}");
    };
    for line in body.split('\n') {
        if let Some(data) = line.strip_prefix("data: ") {
            if data != "[DONE]"
                && let Err(e) = serde_json::from_str::<Value>(data)
            {
                panic!("a frame's data is not JSON ({e}): {text:?}");
            }
        } else {
            let known = line.starts_with("event: ") || line.starts_with(':');
            assert!(known, "a frame has a stray line {line:?}: {text:?}");
        }
    }
}
