//! A Responses WebSocket from the handover to its close: messages read, each lane's turns
//! run in order and lanes side by side, frames written by one writer, and the socket closed
//! as documented when it is idle, its client sends too much, the gateway needs its place, or
//! shuts down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::handshake::Handoff;
use super::memory::{MAX_LANES, Memory};
use super::turn::{self, Socket};
use crate::server::connection::ClientStream;

/// How often an open socket is pinged, so proxies and NATs on the way keep it.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Turns one lane may have waiting behind the one it runs.
const LANE_QUEUE: usize = 8;
/// Frames waiting for a client that reads slowly; past it, turns wait for it.
const OUT_QUEUE: usize = 64;
/// How long a closing socket's last frames may take to leave.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Serves a socket hyper handed over, with the bytes it had already read past the upgrade.
pub async fn serve(
    stream: ClientStream,
    read_ahead: Bytes,
    handoff: Handoff,
    mut stop: watch::Receiver<bool>,
) {
    // The connection stays busy while the socket is open (its caller holds the mark, from
    // before the 101): an open socket is never the idle connection a full gateway closes to
    // make room, as it holds its conversations' memory and its client counts on it between
    // turns. Over the cap, a new socket is refused instead (`max_connections(_per_ip)`).
    let server = &handoff.state.config().server;
    let limit = server.max_body_bytes;
    let idle = server.websocket_idle_timeout;
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit));
    let socket = WebSocketStream::from_partially_read(
        stream,
        read_ahead.to_vec(),
        Role::Server,
        Some(config),
    )
    .await;
    let (mut sink, mut source) = socket.split();
    let (out, mut frames) = mpsc::channel::<Message>(OUT_QUEUE);
    // A client that takes nothing of a frame for an idle timeout has stopped reading: the
    // writer gives up, which ends the socket and its turns (as an HTTP answer nobody reads).
    let stalled = server.idle_timeout;
    let writer = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            let closing = matches!(frame, Message::Close(_));
            match tokio::time::timeout(stalled, sink.send(frame)).await {
                Ok(Ok(())) if !closing => {}
                _ => break,
            }
        }
    });
    let socket = Arc::new(Socket {
        state: handoff.state,
        caller: handoff.caller,
        headers: handoff.headers,
        peer: handoff.peer,
        memory: Memory::default(),
        out: out.clone(),
    });
    let mut lanes = Lanes::new(socket);
    let mut last_message = Instant::now();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let mut draining = false;
    let close = loop {
        if draining && lanes.idle() {
            break Some(close(CloseCode::Away, "the gateway is shutting down"));
        }
        // Pongs and pings are not use: only a message or a turn keeps a socket open.
        let idle_deadline = lanes
            .quiet_since()
            .map(|since| since.max(last_message) + idle);
        tokio::select! {
            message = source.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    last_message = Instant::now();
                    lanes.take(&text, draining).await;
                }
                Some(Ok(Message::Binary(_))) => {
                    last_message = Instant::now();
                    let refusal = turn::error_event(
                        400, "invalid_request_error", Some("invalid_event"),
                        "events are JSON text frames, not binary ones", None,
                    );
                    lanes.tell(None, refusal).await;
                }
                // tungstenite answers pings itself; a pong only says the client is there.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                    let why = format!("a message is larger than the limit of {limit} bytes");
                    break Some(close(CloseCode::Size, &why));
                }
                Some(Err(_)) => break None,
            },
            () = sleep_until(idle_deadline) => {
                break Some(close(CloseCode::Normal, "idle: no response in flight and no message"));
            }
            _ = ping.tick() => {
                let _ = out.try_send(Message::Ping(Bytes::new()));
            }
            () = stopping(&mut stop), if !draining => draining = true,
            () = lanes.finished() => {}
            // The writer gave up on a client that stopped reading, or the socket broke.
            () = out.closed() => break None,
        }
    };
    lanes.end();
    if let Some(frame) = close {
        let _ = out.send(frame).await;
    }
    drop(out);
    let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
}

fn close(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(reason.to_owned()),
    }))
}

/// Shutdown has begun. (The watch's guard stays in here: held across the loop's awaits it
/// would make the connection's future not `Send`.)
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket's lanes: one queue of `response.create`s per `stream_id` (one for those with
/// none), each served in order by a task of its own.
struct Lanes {
    socket: Arc<Socket>,
    work: Arc<Work>,
    queues: foldhash::HashMap<String, mpsc::Sender<Map<String, Value>>>,
    tasks: JoinSet<()>,
}

/// The turns a socket has taken and not yet finished, queued or running.
struct Work {
    pending: AtomicUsize,
    /// When the last turn ended (the socket's start, before one has).
    last_end: Mutex<Instant>,
    /// Told as each turn ends, so the socket looks again at whether it is idle.
    ended: Notify,
}

impl Lanes {
    fn new(socket: Arc<Socket>) -> Lanes {
        let work = Work {
            pending: AtomicUsize::new(0),
            last_end: Mutex::new(Instant::now()),
            ended: Notify::new(),
        };
        Lanes {
            socket,
            work: Arc::new(work),
            queues: foldhash::HashMap::default(),
            tasks: JoinSet::new(),
        }
    }

    /// Takes one client message: a `response.create` joins its lane's queue.
    async fn take(&mut self, text: &str, draining: bool) {
        let mut event = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(event)) => event,
            _ => {
                let refusal = turn::error_event(
                    400,
                    "invalid_request_error",
                    Some("invalid_json"),
                    "an event must be a JSON object",
                    None,
                );
                return self.tell(None, refusal).await;
            }
        };
        let lane = match event.remove("stream_id") {
            Some(Value::String(lane)) => Some(lane),
            _ => None,
        };
        let kind = event.remove("type");
        let refusal = match kind.as_ref().and_then(Value::as_str) {
            Some("response.create") if draining => Some(turn::error_event(
                503,
                "api_error",
                Some("shutting_down"),
                "the gateway is shutting down: open a new socket",
                None,
            )),
            Some("response.create") => self.enqueue(lane.as_deref(), event),
            Some(other) => Some(turn::error_event(
                400,
                "invalid_request_error",
                Some("unsupported_event"),
                &format!("`{other}` is not served here; `response.create` is"),
                Some("type"),
            )),
            None => Some(turn::error_event(
                400,
                "invalid_request_error",
                Some("invalid_event"),
                "an event needs a `type`",
                Some("type"),
            )),
        };
        if let Some(refusal) = refusal {
            self.tell(lane.as_deref(), refusal).await;
        }
    }

    /// Queues a turn on its lane, starting the lane if it is new; a refusal if it cannot.
    fn enqueue(&mut self, lane: Option<&str>, create: Map<String, Value>) -> Option<Value> {
        let key = lane.unwrap_or_default();
        if !self.queues.contains_key(key) && self.queues.len() >= MAX_LANES {
            return Some(turn::error_event(
                429,
                "invalid_request_error",
                Some("too_many_streams"),
                &format!("a socket runs at most {MAX_LANES} `stream_id`s at once"),
                Some("stream_id"),
            ));
        }
        let queue = self.queues.entry(key.to_owned()).or_insert_with(|| {
            let (queue, turns) = mpsc::channel(LANE_QUEUE);
            let (socket, work) = (self.socket.clone(), self.work.clone());
            self.tasks
                .spawn(serve_lane(socket, work, lane.map(str::to_owned), turns));
            queue
        });
        match queue.try_send(create) {
            Ok(()) => {
                self.work.pending.fetch_add(1, Ordering::SeqCst);
                None
            }
            Err(_) => Some(turn::error_event(
                429,
                "invalid_request_error",
                Some("too_many_queued"),
                &format!("a lane queues at most {LANE_QUEUE} responses behind the one it runs"),
                None,
            )),
        }
    }

    /// Sends one event outside any turn.
    async fn tell(&self, lane: Option<&str>, mut event: Value) {
        if let (Some(lane), Value::Object(fields)) = (lane, &mut event) {
            fields.insert("stream_id".into(), Value::String(lane.to_owned()));
        }
        let _ = self.socket.out.send(Message::text(event.to_string())).await;
    }

    /// Whether no lane has a turn running or waiting.
    fn idle(&self) -> bool {
        self.work.pending.load(Ordering::SeqCst) == 0
    }

    /// Since when no turn has been running or waiting; `None` while one is.
    fn quiet_since(&self) -> Option<Instant> {
        self.idle().then(|| *self.work.last_end())
    }

    /// Waits for a turn to end, so the loop looks again at what the socket holds.
    async fn finished(&self) {
        self.work.ended.notified().await;
    }

    /// Stops taking turns; those running end with the socket.
    fn end(&mut self) {
        self.queues.clear();
        self.tasks.abort_all();
    }
}

impl Work {
    fn last_end(&self) -> MutexGuard<'_, Instant> {
        // A poisoned lock still holds an instant.
        self.last_end.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs a lane's turns in order until the socket ends.
async fn serve_lane(
    socket: Arc<Socket>,
    work: Arc<Work>,
    lane: Option<String>,
    mut turns: mpsc::Receiver<Map<String, Value>>,
) {
    while let Some(create) = turns.recv().await {
        turn::run(&socket, lane.as_deref(), create).await;
        *work.last_end() = Instant::now();
        work.pending.fetch_sub(1, Ordering::SeqCst);
        // A permit if the socket is not waiting now: it looks again on its next wait.
        work.ended.notify_one();
    }
}
