//! The first frame of a streamed answer goes out on its own.
//!
//! hyper writes a response body only when the body has no frame ready. A stream commits on
//! its first event, and by then the upstream has often sent more (a short answer can arrive
//! whole in one read); without a pause the response head and that first event would wait
//! for every event behind them to be read and translated, and the client's first byte with
//! them.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};

/// `frames`, with one turn of the scheduler after the first, in which hyper writes it.
pub struct FirstAlone<S> {
    frames: Pin<Box<S>>,
    taken: Taken,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Taken {
    None,
    First,
    Paused,
}

impl<S: Stream> FirstAlone<S> {
    pub fn new(frames: S) -> FirstAlone<S> {
        FirstAlone {
            frames: Box::pin(frames),
            taken: Taken::None,
        }
    }
}

impl<S: Stream> Stream for FirstAlone<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.taken == Taken::First {
            self.taken = Taken::Paused;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = std::task::ready!(self.frames.poll_next_unpin(cx));
        if next.is_some() && self.taken == Taken::None {
            self.taken = Taken::First;
        }
        Poll::Ready(next)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_first_frame_is_followed_by_one_pause_that_wakes_itself() {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = counter.clone().into();
        let mut cx = Context::from_waker(&waker);
        let mut frames = FirstAlone::new(futures_util::stream::iter(["a", "b", "c"]));
        let mut poll = || frames.poll_next_unpin(&mut cx);
        assert_eq!(poll(), Poll::Ready(Some("a")));
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "a pause must wake its task"
        );
        assert_eq!(poll(), Poll::Ready(Some("b")));
        assert_eq!(poll(), Poll::Ready(Some("c")));
        assert_eq!(poll(), Poll::Ready(None));
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "only the first frame pauses"
        );
    }

    #[test]
    fn an_empty_stream_ends_without_a_pause() {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = counter.clone().into();
        let mut cx = Context::from_waker(&waker);
        let mut frames = FirstAlone::new(futures_util::stream::iter(Vec::<u8>::new()));
        assert_eq!(frames.poll_next_unpin(&mut cx), Poll::Ready(None));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    }
}
