//! A primary upstream the test steers by hand: it fails, or it holds each request until
//! the test lets it answer, or it answers at once. A held probe is how a test can look at
//! the whole cluster while the probe is out, without guessing how long that lasts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 500 at once.
    Fail,
    /// Holds each request until [`Primary::release`], then answers 200.
    Hold,
    /// 200 at once.
    Serve,
}

struct Inner {
    calls: AtomicUsize,
    mode: Mutex<Mode>,
    released: watch::Sender<bool>,
}

#[derive(Clone)]
pub struct Primary {
    inner: Arc<Inner>,
    pub addr: SocketAddr,
}

impl Primary {
    pub async fn start(mode: Mode) -> Primary {
        let inner = Arc::new(Inner {
            calls: AtomicUsize::new(0),
            mode: Mutex::new(mode),
            released: watch::Sender::new(false),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Primary { inner, addr }
    }

    /// Chat requests received so far.
    pub fn calls(&self) -> usize {
        self.inner.calls.load(Ordering::SeqCst)
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.inner.mode.lock().unwrap() = mode;
    }

    /// Lets every held request answer, and serves the next ones at once.
    pub fn release(&self) {
        self.set_mode(Mode::Serve);
        self.inner.released.send_replace(true);
    }

    /// Its base URL, for a provider block.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    Json(_): Json<Value>,
) -> (StatusCode, Json<Value>) {
    inner.calls.fetch_add(1, Ordering::SeqCst);
    let mode = *inner.mode.lock().unwrap();
    match mode {
        Mode::Fail => {
            let error = json!({ "error": { "message": "down", "type": "server_error" } });
            return (StatusCode::INTERNAL_SERVER_ERROR, Json(error));
        }
        Mode::Hold => {
            let mut released = inner.released.subscribe();
            let _ = released.wait_for(|r| *r).await;
        }
        Mode::Serve => {}
    }
    let body = json!({
        "id": "chatcmpl-primary",
        "object": "chat.completion",
        "created": 0,
        "model": "model-a",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": "from primary" },
            "finish_reason": "stop"
        }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    });
    (StatusCode::OK, Json(body))
}
