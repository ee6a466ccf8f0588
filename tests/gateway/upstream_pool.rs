//! The upstream connection pool, seen from an upstream that counts its connections: kept
//! connections are reused, requests name only their path and carry the origin's `Host`, and
//! a connection the upstream closed while it sat in the pool costs no request its attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::support::*;

const ANSWER: &str = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

const STREAMED: &str = concat!(
    r#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    "\n\ndata: [DONE]\n\n"
);

/// An HTTP/1.1 upstream over raw TCP, so the test decides when a connection closes.
struct RawUpstream {
    base_url: String,
    accepted: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl RawUpstream {
    /// Answers every request with [`ANSWER`], or [`STREAMED`] when it asks for a stream; after each answer it closes the connection
    /// when `close_after_each`, without saying so in a `connection` header.
    async fn start(close_after_each: bool) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (counter, seen) = (accepted.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, close_after_each, seen.clone()));
            }
        });
        RawUpstream {
            base_url: format!("http://{addr}/v1"),
            accepted,
            heads,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// One serving thread: each thread keeps a pool of its own, and a client's connections
    /// may land on any of them.
    fn config(&self) -> TestGateway {
        TestGateway::new()
            .with("[server]\nthreads = 1\n")
            .provider_at("raw", &self.base_url, "key_required = false")
            .route("r", &[("raw", "m")], "")
    }
}

async fn serve(stream: TcpStream, close_after_each: bool, heads: Arc<Mutex<Vec<String>>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match stream.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push_str(&line),
            }
        }
        let length = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        heads.lock().unwrap().push(head);
        let (content_type, answer) = if body.windows(13).any(|w| w == br#""stream":true"#) {
            ("text/event-stream", STREAMED)
        } else {
            ("application/json", ANSWER)
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.get_mut().write_all(answer.as_bytes()).await.is_err() || close_after_each {
            return;
        }
    }
}

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let upstream = RawUpstream::start(false).await;
    let gateway = upstream.config().start().await;
    for _ in 0..5 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(upstream.accepted(), 1);
}

#[tokio::test]
async fn a_streams_connection_is_kept_for_the_next_request_once_the_stream_ends() {
    let upstream = RawUpstream::start(false).await;
    let gateway = upstream.config().start().await;
    for body in [chat_stream("r"), chat_stream("r"), chat("r")] {
        let response = post(&gateway, &body).await;
        assert_eq!(response.status(), 200);
        // Read to the end, so the upstream's answer is read to its end too.
        response.text().await.unwrap();
    }
    assert_eq!(upstream.accepted(), 1);
}

#[tokio::test]
async fn concurrent_requests_reuse_the_connections_they_opened() {
    let upstream = RawUpstream::start(false).await;
    let gateway = upstream.config().start().await;
    let body = chat("r");
    for _ in 0..3 {
        let requests = (0..8).map(|_| post(&gateway, &body));
        for response in futures_util::future::join_all(requests).await {
            assert_eq!(response.status(), 200);
        }
    }
    // Never more connections than requests at once, however the three rounds interleave.
    assert!(
        upstream.accepted() <= 8,
        "{} connections",
        upstream.accepted()
    );
}

#[tokio::test]
async fn a_request_names_its_path_and_the_origins_host() {
    let upstream = RawUpstream::start(false).await;
    let gateway = upstream.config().start().await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    let heads = upstream.heads.lock().unwrap().clone();
    let authority = upstream.base_url.trim_start_matches("http://");
    let authority = authority.trim_end_matches("/v1");
    let head = &heads[0];
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("\r\nhost: {authority}\r\n")),
        "{head}"
    );
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_used_again() {
    let upstream = RawUpstream::start(true).await;
    let gateway = upstream.config().start().await;
    for _ in 0..10 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 200);
        let row = record_of(&gateway, &response).await;
        assert_eq!(row.attempts.len(), 1, "{:?}", row.attempts);
    }
    assert_eq!(upstream.accepted(), 10);
}
