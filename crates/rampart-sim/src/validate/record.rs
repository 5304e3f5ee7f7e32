//! A span recorder for real services: the same [`RecordedSpan`]s a simulated run records
//! ([`crate::spans`]), made by services on real sockets, from any thread, in real time.
//!
//! A span is opened when a request arrives (SERVER) or an attempt is sent (CLIENT) and ended
//! with the answer's status. One dropped before it ended records what an OpenTelemetry
//! exporter would have seen: a CLIENT span a cancellation (its caller stopped waiting), a
//! SERVER span no status at all ([`SpanStatus::Unset`]: its handler was dropped because its
//! caller went away). Nothing is recorded after [`Recorder::close`].
//!
//! The trace context travels in a W3C `traceparent` header: the trace id is the root's
//! number plus one (as [`write_otlp`](crate::spans::write_otlp) writes it), the parent id the
//! span the request was sent under.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderValue;

use crate::loopback::lock;
use crate::spans::{RecordedSpan, SpanKind, SpanStatus};

/// The W3C trace-context header.
pub const TRACEPARENT: &str = "traceparent";

/// Where the spans of one run of the chain go.
#[derive(Debug)]
pub struct Recorder {
    origin: Instant,
    next: AtomicU64,
    open: AtomicUsize,
    closed: AtomicBool,
    spans: Mutex<Vec<RecordedSpan>>,
}

/// A span's place in its trace, as it travels with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The root's number.
    pub trace: u64,
    /// The span's id.
    pub span: u64,
}

impl Context {
    /// The `traceparent` header naming this span as the parent.
    pub fn header(self) -> HeaderValue {
        let text = format!("00-{:032x}-{:016x}-01", self.trace + 1, self.span);
        HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
    }

    /// Reads a `traceparent` header as [`header`](Self::header) writes it.
    pub fn parse(value: &HeaderValue) -> Option<Context> {
        let mut parts = value.to_str().ok()?.split('-');
        let (_version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Context {
            trace: u64::from_str_radix(trace, 16).ok()?.checked_sub(1)?,
            span: u64::from_str_radix(span, 16).ok()?,
        })
    }
}

/// A span started and not yet ended; see the [module docs](self) for what dropping it records.
#[derive(Debug)]
pub struct Open {
    recorder: Arc<Recorder>,
    span: Option<RecordedSpan>,
}

impl Recorder {
    /// A recorder whose times start now.
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: Instant::now(),
            next: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            spans: Mutex::new(Vec::new()),
        })
    }

    /// Starts a span now in `service` for root `trace`, under the span `parent`.
    pub fn open(
        self: &Arc<Self>,
        kind: SpanKind,
        service: &'static str,
        trace: u64,
        parent: Option<u64>,
        resend: u32,
    ) -> Open {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        self.open.fetch_add(1, Ordering::SeqCst);
        let now = self.now();
        Open {
            recorder: Arc::clone(self),
            span: Some(RecordedSpan {
                trace,
                id,
                parent,
                service,
                kind,
                start: now,
                end: now,
                status: SpanStatus::Unset,
                resend,
            }),
        }
    }

    /// Spans opened and not yet ended or dropped.
    pub fn open_spans(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Every span ended so far, in the order they ended; nothing is recorded after this.
    pub fn close(&self) -> Vec<RecordedSpan> {
        self.closed.store(true, Ordering::SeqCst);
        std::mem::take(&mut *lock(&self.spans))
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn record(&self, mut span: RecordedSpan, status: SpanStatus) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        span.end = self.now();
        span.status = status;
        lock(&self.spans).push(span);
    }
}

impl Open {
    /// What a request sent or handled under this span carries.
    pub fn context(&self) -> Context {
        self.span
            .as_ref()
            .map_or(Context { trace: 0, span: 0 }, |s| Context {
                trace: s.trace,
                span: s.id,
            })
    }

    /// Ends the span now with `status`.
    pub fn end(mut self, status: SpanStatus) {
        if let Some(span) = self.span.take() {
            self.recorder.record(span, status);
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            let status = match span.kind {
                SpanKind::Client => SpanStatus::Cancelled,
                SpanKind::Server => SpanStatus::Unset,
            };
            self.recorder.record(span, status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_header_reads_back_as_the_context_it_was_written_from() {
        let context = Context { trace: 41, span: 7 };
        let header = context.header();
        assert_eq!(
            header.to_str().ok(),
            Some("00-0000000000000000000000000000002a-0000000000000007-01")
        );
        assert_eq!(Context::parse(&header), Some(context));
        assert_eq!(Context::parse(&HeaderValue::from_static("garbage")), None);
    }

    #[test]
    fn a_dropped_client_span_is_cancelled_and_a_dropped_server_span_has_no_status() {
        let recorder = Recorder::new();
        let server = recorder.open(SpanKind::Server, "leaf", 3, Some(1), 0);
        let client = recorder.open(SpanKind::Client, "middle", 3, Some(2), 1);
        let answered = recorder.open(SpanKind::Server, "middle", 3, None, 0);
        assert_eq!(recorder.open_spans(), 3);
        drop(server);
        drop(client);
        answered.end(SpanStatus::Http(200));
        assert_eq!(recorder.open_spans(), 0);
        let spans = recorder.close();
        let statuses: Vec<_> = spans.iter().map(|s| (s.kind, s.status, s.resend)).collect();
        assert_eq!(
            statuses,
            [
                (SpanKind::Server, SpanStatus::Unset, 0),
                (SpanKind::Client, SpanStatus::Cancelled, 1),
                (SpanKind::Server, SpanStatus::Http(200), 0),
            ]
        );
        recorder.open(SpanKind::Server, "leaf", 4, None, 0);
        assert!(recorder.close().is_empty(), "nothing after close");
    }
}
