//! Bodies: the inbound layer's responses, and the outbound layer's replayable requests.
//!
//! The inbound layer answers some requests itself (a problem document), so its responses
//! carry a [`ResponseBody`]: the handler's body, or the problem's. The outbound layer may
//! send a request several times, so it reads a replayable request's body into memory first
//! (up to a limit) and hands the inner service a [`ReplayBody`]: the buffered bytes, cheap to
//! send again, or the caller's body streamed once when it was too large to keep.
//!
//! ```
//! use bytes::Bytes;
//! use http_body::Body as _;
//! use rampart_http::ReplayBody;
//!
//! let body: ReplayBody<http_body_util::Empty<Bytes>> = ReplayBody::buffered(Bytes::from_static(b"hello"));
//! assert_eq!(body.size_hint().exact(), Some(5));
//! let once = ReplayBody::new(http_body_util::Full::new(Bytes::from_static(b"streamed")));
//! assert_eq!(once.size_hint().exact(), Some(8));
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response that passed through the inbound layer: the handler's own, or a
    /// problem document the layer answered with.
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Inner { #[pin] body: B },
        Answer { body: Full<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// The handler's body, passed through.
    pub fn new(body: B) -> Self {
        ResponseBody {
            kind: ResponseKind::Inner { body },
        }
    }

    /// A body the layer wrote itself.
    pub fn answer(body: Full<Bytes>) -> Self {
        ResponseBody {
            kind: ResponseKind::Answer { body },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            ResponseKindProj::Inner { body } => body.poll_frame(cx),
            ResponseKindProj::Answer { body } => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|e: Infallible| match e {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Inner { body } => body.is_end_stream(),
            ResponseKind::Answer { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Inner { body } => body.size_hint(),
            ResponseKind::Answer { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ResponseKind::Inner { .. } => f.write_str("ResponseBody::Inner"),
            ResponseKind::Answer { .. } => f.write_str("ResponseBody::Answer"),
        }
    }
}

pin_project! {
    /// The body the outbound layer hands its inner service: buffered bytes that can be sent
    /// again, or the caller's body streamed once (after any bytes already read from it).
    ///
    /// Put it in the inner service's request type: a hyper-util client is built as
    /// `Client<_, ReplayBody<B>>`; a tonic channel goes under the layer with
    /// `OutboundLayer::grpc` (feature `tonic`), which wraps it in `tonic::body::Body::new`.
    pub struct ReplayBody<B> {
        #[pin]
        kind: ReplayKind<B>,
    }
}

pin_project! {
    #[project = ReplayKindProj]
    enum ReplayKind<B> {
        Buffered { data: Option<Bytes>, trailers: Option<HeaderMap> },
        Streaming { prefix: Option<Bytes>, #[pin] body: B },
    }
}

impl<B> ReplayBody<B> {
    /// The caller's body, streamed once.
    pub fn new(body: B) -> Self {
        ReplayBody::streaming(None, body)
    }

    /// Bytes in memory, cheap to send again.
    pub fn buffered(data: Bytes) -> Self {
        ReplayBody::replay(data, None)
    }

    pub(crate) fn replay(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        ReplayBody {
            kind: ReplayKind::Buffered {
                data: Some(data).filter(|d| !d.is_empty()),
                trailers,
            },
        }
    }

    /// The caller's body back, when it is one [`new`](Self::new) made and nothing was read
    /// from it.
    pub(crate) fn into_unread(self) -> Option<B> {
        match self.kind {
            ReplayKind::Streaming { prefix: None, body } => Some(body),
            _ => None,
        }
    }

    fn streaming(prefix: Option<Bytes>, body: B) -> Self {
        ReplayBody {
            kind: ReplayKind::Streaming {
                prefix: prefix.filter(|p| !p.is_empty()),
                body,
            },
        }
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            ReplayKindProj::Buffered { data, trailers } => {
                if let Some(data) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            ReplayKindProj::Streaming { prefix, body } => {
                if let Some(prefix) = prefix.take() {
                    return Poll::Ready(Some(Ok(Frame::data(prefix))));
                }
                body.poll_frame(cx)
                    .map(|frame| frame.map(|f| f.map(|f| f.map_data(into_bytes))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ReplayKind::Buffered { data, trailers } => data.is_none() && trailers.is_none(),
            ReplayKind::Streaming { prefix, body } => prefix.is_none() && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ReplayKind::Buffered { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ReplayKind::Streaming { prefix, body } => {
                let extra = prefix.as_ref().map_or(0, |p| p.len() as u64);
                let inner = body.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(extra));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(extra));
                }
                hint
            }
        }
    }
}

impl<B> std::fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ReplayKind::Buffered { data, .. } => f
                .debug_struct("ReplayBody::Buffered")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
            ReplayKind::Streaming { .. } => f.write_str("ReplayBody::Streaming"),
        }
    }
}

fn into_bytes<D: Buf>(mut data: D) -> Bytes {
    data.copy_to_bytes(data.remaining())
}

/// A request body after the outbound layer tried to keep it for replay.
pub(crate) enum Kept<B> {
    /// All of it, in memory: every attempt gets a copy.
    Replayable {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// Too large: the bytes read so far and the rest, for one attempt.
    Once(ReplayBody<B>),
}

/// Reads `body` into memory if it fits in `limit` bytes. A body whose size hint already says
/// it is larger is not read at all.
pub(crate) fn keep<B>(body: B, limit: usize) -> Keep<B>
where
    B: Body + Unpin,
{
    Keep {
        body: Some(body),
        limit: limit as u64,
        started: false,
        first: None,
        joined: BytesMut::new(),
        len: 0,
        trailers: None,
    }
}

/// The future of [`keep`]: a named type, so that a future holding it need not be boxed.
pub(crate) struct Keep<B> {
    /// Taken when the future answers.
    body: Option<B>,
    limit: u64,
    /// Whether the end and the size hint were looked at.
    started: bool,
    /// The first data frame, kept as it is while it is the only one.
    first: Option<Bytes>,
    /// Every frame, once there are two.
    joined: BytesMut,
    len: u64,
    trailers: Option<HeaderMap>,
}

impl<B: Body + Unpin> Future for Keep<B> {
    type Output = Result<Kept<B>, B::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else {
            panic!("a kept body's future polled after it answered")
        };
        if !this.started {
            this.started = true;
            if body.is_end_stream() {
                this.body = None;
                return Poll::Ready(Ok(Kept::Replayable {
                    data: Bytes::new(),
                    trailers: None,
                }));
            }
            if body.size_hint().lower() > this.limit {
                return Poll::Ready(Ok(this.give_up(None)));
            }
        }
        while let Some(frame) = std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
            match frame?.into_data() {
                Ok(data) => {
                    let data = into_bytes(data);
                    this.len += data.len() as u64;
                    match this.first.take() {
                        None if this.joined.is_empty() => this.first = Some(data),
                        earlier => {
                            if let Some(earlier) = earlier {
                                this.joined.extend_from_slice(&earlier);
                            }
                            this.joined.extend_from_slice(&data);
                        }
                    }
                    if this.len > this.limit {
                        let read = match this.first.take() {
                            Some(first) => first,
                            None => this.joined.split().freeze(),
                        };
                        return Poll::Ready(Ok(this.give_up(Some(read))));
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        this.trailers = Some(trailers);
                    }
                }
            }
        }
        this.body = None;
        let data = match this.first.take() {
            Some(first) => first,
            None => std::mem::take(&mut this.joined).freeze(),
        };
        Poll::Ready(Ok(Kept::Replayable {
            data,
            trailers: this.trailers.take(),
        }))
    }
}

impl<B> Keep<B> {
    /// The body streamed once, after the bytes `read` from it.
    fn give_up(&mut self, read: Option<Bytes>) -> Kept<B> {
        let Some(body) = self.body.take() else {
            unreachable!("a kept body gives up once")
        };
        Kept::Once(ReplayBody::streaming(read, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use std::collections::VecDeque;

    /// A body of several data frames, with no size hint.
    struct Chunks(VecDeque<&'static str>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes())))),
            )
        }
    }

    fn chunks(parts: &[&'static str]) -> Chunks {
        Chunks(parts.iter().copied().collect())
    }

    #[tokio::test]
    async fn a_small_body_is_kept_whole_and_replays_identically() {
        let Kept::Replayable { data, .. } = keep(chunks(&["ab", "cd", "e"]), 16)
            .await
            .expect("infallible")
        else {
            panic!("kept for replay")
        };
        assert_eq!(data, "abcde");
        for _ in 0..2 {
            let body: ReplayBody<Full<Bytes>> = ReplayBody::replay(data.clone(), None);
            let collected = body.collect().await.expect("infallible").to_bytes();
            assert_eq!(collected, "abcde");
        }
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_streamed_once_with_nothing_lost() {
        let Kept::Once(body) = keep(chunks(&["abc", "def", "ghi"]), 4)
            .await
            .expect("infallible")
        else {
            panic!("too large to keep")
        };
        let collected = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(collected, "abcdefghi");
    }

    #[tokio::test]
    async fn a_body_whose_size_hint_is_too_large_is_not_read() {
        let full = Full::new(Bytes::from_static(b"0123456789"));
        assert!(matches!(keep(full, 4).await, Ok(Kept::Once(_))));
    }
}
