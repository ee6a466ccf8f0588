//! The fake's answers sent over time: scripted streams (events with pauses, a drop, a stall,
//! an error event, or no end), a JSON answer dripped in pieces, and bodies too big to hold.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use tokio::sync::mpsc;

use super::{FakeBody, FakeState};
use crate::fake::answer::{Completion, Shape};
use crate::fake::bedrock;
use crate::fake::behavior::Behavior;

/// The content type of a stream in `shape`.
pub(super) fn stream_content_type(shape: Shape) -> &'static str {
    match shape {
        Shape::Bedrock => bedrock::EVENTSTREAM,
        _ => "text/event-stream",
    }
}

type FrameResult = Result<Frame<Bytes>, std::io::Error>;

/// A scripted stream: its events, pauses, drop, stall or error, sent from a task of its own
/// that counts how the stream ended.
pub(super) fn stream_response(
    state: Arc<FakeState>,
    completion: Completion,
    behavior: Behavior,
) -> Response<FakeBody> {
    let content_type = stream_content_type(completion.shape);
    let (sender, receiver) = mpsc::channel::<FrameResult>(4);
    tokio::spawn(async move {
        let end = send_stream(&sender, &completion, &behavior).await;
        state.stats.send_modify(|s| match end {
            StreamEnd::Finished => s.streams_completed += 1,
            StreamEnd::Cancelled => s.streams_cancelled += 1,
            StreamEnd::Abandoned => {
                s.streams_cancelled += 1;
                s.answers_abandoned += 1;
            }
        });
    });
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|frame| (frame, receiver))
    });
    let body = StreamBody::new(frames).boxed();
    let mut response = Response::new(body);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// How a scripted stream ended.
enum StreamEnd {
    /// Sent to its scripted end.
    Finished,
    /// The client went away mid-stream.
    Cancelled,
    /// The client went away before the first event.
    Abandoned,
}

/// Sends the scripted stream.
async fn send_stream(
    sender: &mpsc::Sender<FrameResult>,
    completion: &Completion,
    behavior: &Behavior,
) -> StreamEnd {
    let interval = Duration::from_millis(behavior.first_event_delay_ms);
    if !interval.is_zero() {
        tokio::select! {
            _ = sender.closed() => return StreamEnd::Abandoned,
            _ = tokio::time::sleep(interval) => {}
        }
    }
    let end = |finished: bool| {
        if finished {
            StreamEnd::Finished
        } else {
            StreamEnd::Cancelled
        }
    };
    end(send_events(sender, completion, behavior).await)
}

/// Sends the stream's events; false when the client went away first.
async fn send_events(
    sender: &mpsc::Sender<FrameResult>,
    completion: &Completion,
    behavior: &Behavior,
) -> bool {
    let interval = Duration::from_millis(behavior.chunk_interval_ms);
    for i in 0..=completion.chunks {
        if i > 0 && !interval.is_zero() {
            tokio::select! {
                _ = sender.closed() => return false,
                _ = tokio::time::sleep(interval) => {}
            }
        }
        if behavior.drop_after == Some(i) {
            let _ = sender
                .send(Err(std::io::Error::other("scripted drop")))
                .await;
            return true;
        }
        if behavior.stall_after == Some(i) {
            sender.closed().await;
            return false;
        }
        if behavior.error_after == Some(i) {
            let _ = sender
                .send(Ok(Frame::data(
                    completion.stream_error(behavior.error_message.as_deref()),
                )))
                .await;
            return true;
        }
        if i == completion.chunks {
            break;
        }
        for frame in completion.content_frames(i) {
            if sender.send(Ok(Frame::data(frame))).await.is_err() {
                return false;
            }
        }
        if behavior.endless {
            return send_forever(sender, completion, interval).await;
        }
    }
    let mut tail = Vec::new();
    if behavior.malformed {
        tail.push(match completion.shape {
            Shape::Bedrock => completion.bedrock_malformed_event(),
            _ => Bytes::from_static(b"data: {\"choices\": [{\"delta\": nope\n\n"),
        });
    }
    tail.extend(completion.tail_frames());
    for frame in tail {
        if sender.send(Ok(Frame::data(frame))).await.is_err() {
            return false;
        }
    }
    true
}

/// Repeats a content chunk every `interval` until the client goes away.
async fn send_forever(
    sender: &mpsc::Sender<FrameResult>,
    completion: &Completion,
    interval: Duration,
) -> bool {
    // Piece 0 also opens the message, so later repeats use piece 1 when there is one.
    let piece = usize::from(completion.chunks > 1);
    loop {
        tokio::select! {
            _ = sender.closed() => return false,
            _ = tokio::time::sleep(interval) => {}
        }
        for frame in completion.content_frames(piece) {
            if sender.send(Ok(Frame::data(frame))).await.is_err() {
                return false;
            }
        }
    }
}

/// `bytes` bytes of padding, made as they are sent so the fake holds one chunk of them; as
/// a stream in `stream`'s shape, one event that never ends.
pub(super) fn huge_response(bytes: u64, stream: Option<Shape>) -> Response<FakeBody> {
    const CHUNK: usize = 64 * 1024;
    let (content_type, prefix) = match stream {
        None => ("application/json", Bytes::new()),
        Some(Shape::Bedrock) => (bedrock::EVENTSTREAM, bedrock::huge_prefix(bytes)),
        Some(_) => ("text/event-stream", Bytes::from_static(b"data: ")),
    };
    let padding = Bytes::from(vec![b' '; CHUNK]);
    let mut left = bytes.saturating_sub(prefix.len() as u64);
    let pieces = std::iter::once(prefix).chain(std::iter::from_fn(move || {
        let size = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
        left -= size as u64;
        (size > 0).then(|| padding.slice(..size))
    }));
    let frames = futures_util::stream::iter(pieces.map(|piece| Ok(Frame::data(piece))));
    let mut response = Response::new(StreamBody::new(frames).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// A whole JSON answer sent slowly, in `pieces` parts `interval_ms` apart.
pub(super) fn drip_response(body: String, pieces: usize, interval_ms: u64) -> Response<FakeBody> {
    let (sender, receiver) = mpsc::channel::<FrameResult>(1);
    tokio::spawn(async move {
        let bytes = Bytes::from(body);
        let size = bytes.len().div_ceil(pieces.max(1)).max(1);
        for (i, start) in (0..bytes.len()).step_by(size).enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(interval_ms)).await;
            }
            let piece = bytes.slice(start..(start + size).min(bytes.len()));
            if sender.send(Ok(Frame::data(piece))).await.is_err() {
                return;
            }
        }
    });
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|frame| (frame, receiver))
    });
    let mut response = Response::new(StreamBody::new(frames).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
