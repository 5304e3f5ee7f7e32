//! Spans of a simulated run, written as the OpenTelemetry collector's file exporter writes
//! them: what a service's tracing would have recorded, so that the importer
//! ([`crate::import`]) can be checked against a graph whose truth is known.
//!
//! Why: an importer is only as good as what it recovers. Simulating a known graph, writing
//! its spans, importing them and simulating the imported graph closes the loop
//! (`tests/roundtrip.rs`): each number the importer gets wrong shows up as a difference
//! between two runs of the same traffic. `rampart-sim trace --graph G --policies P --otlp
//! FILE` writes them for one run ([`crate::graph::run::trace`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use rampart_sim::graph::{Graph, run::trace};
//! use rampart_sim::spans::write_otlp;
//!
//! let graph = Graph::parse(r#"
//!     entry = "web"
//!     [services.web]
//!     workers = 8
//!     service_time = { median = "2ms", p99 = "4ms" }
//!     calls = [{ to = "db", policy = "db" }]
//!     [services.db]
//!     workers = 8
//!     service_time = { median = "5ms", p99 = "9ms" }
//!     [traffic]
//!     deadline = "1s"
//!     segments = [{ kind = "steady", rate = 20, for = "1s" }]
//! "#, None)?;
//! let policies = BTreeMap::from([("db".to_owned(), Default::default())]);
//! let (outcome, spans) = trace(&graph, &policies, 1)?;
//! // A SERVER span per request each service handled, a CLIENT span per attempt of web's.
//! assert_eq!(spans.len() as u64, 3 * outcome.edges[1].calls);
//!
//! let mut file = Vec::new();
//! write_otlp(&spans, &mut file)?;
//! let imported = rampart_sim::import::otlp_to_graph(file.as_slice())?;
//! assert_eq!(imported.entry, "web");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What is recorded
//!
//! | span | when | kind | parent | status |
//! |---|---|---|---|---|
//! | a request a service answers | from its arrival (queue included) to its answer | SERVER | the CLIENT span that sent it; none for a root | `http.response.status_code`: 200, 500 (its own failure), 503 (shed, or refused), 504 (expired or timed out); status ERROR from 500 |
//! | an attempt a handler makes (retries and hedges included) | from sending to the answer, or to when the caller stopped waiting | CLIENT | the handler's SERVER span | the answer's status as above; a caller that stopped waiting (an attempt timeout, a hedge that lost, a caller gone) has no status code, status ERROR and `error.type = "cancelled"` |
//!
//! A retry or a hedge carries `http.request.resend_count` (how many earlier attempts of its
//! call were sent), as OpenTelemetry's HTTP conventions mark a resend. The edge that sends
//! root requests is not traced (a browser, a load balancer): each root's trace starts at the
//! entry's SERVER span.
//! A request that never answers (`hang_rate`) leaves no span, as an unfinished span is never
//! exported; a refused connection (an `outage`) leaves no SERVER span, and its CLIENT span
//! reads 500. Times are virtual, from [`EPOCH_NANOS`]; each trace id is the root's number
//! plus one, each span id a counter, in hex.
//!
//! Recording costs nothing when it is off: a service holds no sink and every request carries
//! `None` for its span.

use std::cell::{Cell, RefCell};
use std::io::{self, Write};
use std::rc::Rc;
use std::time::Duration;

use rampart::Instant;
use serde_json::{Value, json};

use crate::SimError;
use crate::cli::TraceOptions;
use crate::graph::Graph;
use crate::service::{Failure, Reply, Trace};
use crate::whatif::PolicyFile;

/// Where span times start: 2026-01-01T00:00:00Z, in nanoseconds since the Unix epoch.
pub const EPOCH_NANOS: u64 = 1_767_225_600_000_000_000;

/// Spans per line of the file (one export request each), as a collector's batch would hold.
pub const SPANS_PER_LINE: usize = 512;

/// Whether a span handles a request or makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A request a service handled (OTLP `SPAN_KIND_SERVER`, 2).
    Server,
    /// An attempt a handler made (OTLP `SPAN_KIND_CLIENT`, 3).
    Client,
}

/// How a span ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanStatus {
    /// An answer with this HTTP status code.
    Http(u16),
    /// The caller stopped waiting before an answer came.
    Cancelled,
    /// No status: a SERVER span whose handler was dropped before it answered (its caller
    /// went away), as tracing-opentelemetry exports a span closed before anything set its
    /// status: no `http.response.status_code`, status unset. Only real services
    /// ([`crate::validate`]) record it.
    Unset,
}

impl SpanStatus {
    /// The HTTP status of a reply as rampart-http answers it: 200; 500 for a handler's
    /// failure (or a refused connection); 503 for a shed or refused request; 504 for one that
    /// expired or timed out.
    pub fn of(reply: &Reply) -> SpanStatus {
        SpanStatus::Http(match reply {
            Ok(()) => 200,
            Err(Failure::Error) => 500,
            Err(Failure::Overloaded(_) | Failure::Refused) => 503,
            Err(Failure::Expired | Failure::Timeout) => 504,
        })
    }

    /// Whether the span records a failure (status ERROR): a cancellation, or 500 and above.
    pub fn is_error(self) -> bool {
        match self {
            SpanStatus::Http(code) => code >= 500,
            SpanStatus::Cancelled => true,
            SpanStatus::Unset => false,
        }
    }
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSpan {
    /// Its trace: the root request's number.
    pub trace: u64,
    /// Its id, from 1.
    pub id: u64,
    /// Its parent's id; `None` for a root.
    pub parent: Option<u64>,
    /// The service that recorded it.
    pub service: &'static str,
    /// SERVER or CLIENT.
    pub kind: SpanKind,
    /// When it started, from the start of the run.
    pub start: Duration,
    /// When it ended, from the start of the run.
    pub end: Duration,
    /// How it ended.
    pub status: SpanStatus,
    /// `http.request.resend_count`: 0 for a first attempt (and every SERVER span).
    pub resend: u32,
}

impl RecordedSpan {
    /// End less start.
    pub fn duration(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// Where a run's spans go: shared by every service of the run.
#[derive(Debug)]
pub struct SpanSink {
    origin: Instant,
    next: Cell<u64>,
    closed: Cell<bool>,
    spans: RefCell<Vec<RecordedSpan>>,
}

/// The span a request is sent or handled under, as it travels with the request's [`Trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanParent {
    /// The span's id.
    pub id: u64,
    /// The service that recorded it.
    pub service: &'static str,
}

/// A span started and not yet ended. Ending it records it; a SERVER span dropped unended
/// (a request that hung, a refused connection) records nothing, a CLIENT span dropped
/// unended (its caller stopped waiting) records a cancellation, while the run lasts.
#[derive(Debug)]
pub struct OpenSpan {
    sink: Rc<SpanSink>,
    span: RecordedSpan,
}

impl SpanSink {
    /// A sink whose times start now.
    pub fn new() -> Rc<SpanSink> {
        Rc::new(SpanSink {
            origin: Instant::now(),
            next: Cell::new(0),
            closed: Cell::new(false),
            spans: RefCell::new(Vec::new()),
        })
    }

    /// Starts a span now in `service` for root `trace`, under `parent`.
    pub fn open(
        self: &Rc<Self>,
        kind: SpanKind,
        service: &'static str,
        trace: &Trace,
        parent: Option<SpanParent>,
        resend: u32,
    ) -> OpenSpan {
        let id = self.next.get() + 1;
        self.next.set(id);
        let now = self.now();
        OpenSpan {
            sink: Rc::clone(self),
            span: RecordedSpan {
                trace: trace.root,
                id,
                parent: parent.map(|p| p.id),
                service,
                kind,
                start: now,
                end: now,
                status: SpanStatus::Cancelled,
                resend,
            },
        }
    }

    /// Every span ended so far, in the order they ended; nothing is recorded after this.
    pub fn close(&self) -> Vec<RecordedSpan> {
        self.closed.set(true);
        self.spans.take()
    }

    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    fn record(&self, mut span: RecordedSpan, status: SpanStatus) {
        if self.closed.get() {
            return;
        }
        span.end = self.now();
        span.status = status;
        self.spans.borrow_mut().push(span);
    }
}

impl OpenSpan {
    /// What a request sent or handled under this span carries.
    pub fn parent(&self) -> SpanParent {
        SpanParent {
            id: self.span.id,
            service: self.span.service,
        }
    }

    /// Ends the span now with `reply`'s status.
    pub fn end(mut self, reply: &Reply) {
        let span = std::mem::replace(&mut self.span, placeholder());
        self.sink.record(span, SpanStatus::of(reply));
    }
}

impl Drop for OpenSpan {
    fn drop(&mut self) {
        if self.span.kind == SpanKind::Client && self.span.id != 0 {
            let span = std::mem::replace(&mut self.span, placeholder());
            self.sink.record(span, SpanStatus::Cancelled);
        }
    }
}

/// What an ended span leaves behind (id 0: nothing to record).
fn placeholder() -> RecordedSpan {
    RecordedSpan {
        trace: 0,
        id: 0,
        parent: None,
        service: "",
        kind: SpanKind::Server,
        start: Duration::ZERO,
        end: Duration::ZERO,
        status: SpanStatus::Cancelled,
        resend: 0,
    }
}

/// Writes `spans` as OTLP JSON, as the OpenTelemetry collector's file exporter does: one
/// `ExportTraceServiceRequest` per line of up to [`SPANS_PER_LINE`] spans, in the order
/// given, grouped by service (`resource.attributes` `service.name`) within a line; ids in
/// hex, times as strings of nanoseconds, enums as integers.
///
/// # Errors
///
/// What writing to `out` returns.
pub fn write_otlp(spans: &[RecordedSpan], mut out: impl Write) -> io::Result<()> {
    for batch in spans.chunks(SPANS_PER_LINE) {
        let mut services: Vec<(&str, Vec<Value>)> = Vec::new();
        for span in batch {
            let at = match services.iter().position(|(s, _)| *s == span.service) {
                Some(at) => at,
                None => {
                    services.push((span.service, Vec::new()));
                    services.len() - 1
                }
            };
            services[at].1.push(span_json(span));
        }
        let resources: Vec<Value> = services
            .into_iter()
            .map(|(service, spans)| {
                json!({
                    "resource": {"attributes": [
                        {"key": "service.name", "value": {"stringValue": service}}
                    ]},
                    "scopeSpans": [{"scope": {"name": "rampart-sim"}, "spans": spans}],
                })
            })
            .collect();
        serde_json::to_writer(&mut out, &json!({ "resourceSpans": resources }))?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// `rampart-sim trace`: reads the graph (with the chosen scenario) and the policy file, runs
/// the graph once with the seed, and writes its spans to the `--otlp` file; returns a line
/// saying what was written.
///
/// # Errors
///
/// A file's problems (as `what-if` reports them), a failed run, or the spans cannot be
/// written.
pub fn command(options: &TraceOptions) -> Result<String, SimError> {
    let graph = Graph::load(&options.graph, options.scenario.as_deref())?;
    let policies = PolicyFile::load(&options.policies, &graph)?;
    let (outcome, spans) = crate::graph::run::trace(&graph, &policies.resolved, options.seed)?;
    let path = &options.otlp;
    let cannot = |e: io::Error| SimError::new(format!("cannot write {}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(cannot)?;
    write_otlp(&spans, io::BufWriter::new(file)).map_err(cannot)?;
    let servers = spans.iter().filter(|s| s.kind == SpanKind::Server).count();
    let roots = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server && s.parent.is_none())
        .count();
    Ok(format!(
        "{}: {} spans ({servers} SERVER, {} CLIENT) in {roots} traces, scenario {}, seed {}; \
         {:.1}% of the measured roots answered in time",
        path.display(),
        spans.len(),
        spans.len() - servers,
        graph.scenario,
        options.seed,
        outcome.answered_in_time * 100.0
    ))
}

fn span_json(span: &RecordedSpan) -> Value {
    let nanos = |at: Duration| {
        let at = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        EPOCH_NANOS.saturating_add(at).to_string()
    };
    let mut attributes = Vec::new();
    match span.status {
        SpanStatus::Http(code) => attributes.push(json!({
            "key": "http.response.status_code",
            "value": {"intValue": code.to_string()},
        })),
        SpanStatus::Cancelled => attributes.push(json!({
            "key": "error.type",
            "value": {"stringValue": "cancelled"},
        })),
        SpanStatus::Unset => {}
    }
    if span.resend > 0 {
        attributes.push(json!({
            "key": "http.request.resend_count",
            "value": {"intValue": span.resend.to_string()},
        }));
    }
    let mut out = json!({
        "traceId": format!("{:032x}", span.trace + 1),
        "spanId": format!("{:016x}", span.id),
        "name": "GET",
        "kind": match span.kind {
            SpanKind::Server => 2,
            SpanKind::Client => 3,
        },
        "startTimeUnixNano": nanos(span.start),
        "endTimeUnixNano": nanos(span.end),
        "attributes": attributes,
        "status": if span.status.is_error() { json!({"code": 2}) } else { json!({}) },
    });
    if let Some(parent) = span.parent {
        out["parentSpanId"] = format!("{parent:016x}").into();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(kind: SpanKind, status: SpanStatus, resend: u32) -> RecordedSpan {
        RecordedSpan {
            trace: 0,
            id: 7,
            parent: Some(3),
            service: "db",
            kind,
            start: Duration::from_millis(1),
            end: Duration::from_millis(4),
            status,
            resend,
        }
    }

    #[test]
    fn a_span_is_written_in_the_collectors_form() {
        let json = span_json(&span(SpanKind::Client, SpanStatus::Http(503), 2));
        assert_eq!(json["traceId"], "00000000000000000000000000000001");
        assert_eq!(json["spanId"], "0000000000000007");
        assert_eq!(json["parentSpanId"], "0000000000000003");
        assert_eq!(json["kind"], 3);
        assert_eq!(json["startTimeUnixNano"], "1767225600001000000");
        assert_eq!(json["endTimeUnixNano"], "1767225600004000000");
        assert_eq!(json["status"]["code"], 2);
        assert_eq!(json["attributes"][0]["value"]["intValue"], "503");
        assert_eq!(json["attributes"][1]["key"], "http.request.resend_count");
    }

    #[test]
    fn a_cancelled_attempt_is_an_error_without_a_status_code() {
        let json = span_json(&span(SpanKind::Client, SpanStatus::Cancelled, 0));
        assert_eq!(json["status"]["code"], 2);
        assert_eq!(json["attributes"][0]["key"], "error.type");
        assert_eq!(json["attributes"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_server_span_dropped_unanswered_has_no_status_and_no_error() {
        let json = span_json(&span(SpanKind::Server, SpanStatus::Unset, 0));
        assert_eq!(json["status"], json!({}));
        assert_eq!(json["attributes"], json!([]));
    }

    #[test]
    fn each_line_holds_one_resource_per_service() {
        let mut spans = vec![span(SpanKind::Server, SpanStatus::Http(200), 0); 3];
        spans[1].service = "web";
        let mut out = Vec::new();
        write_otlp(&spans, &mut out).expect("written");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(text.lines().count(), 1);
        let line: Value = serde_json::from_str(text.trim()).expect("json");
        let resources = line["resourceSpans"].as_array().expect("resources");
        assert_eq!(resources.len(), 2);
        assert_eq!(
            resources[0]["scopeSpans"][0]["spans"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn every_reply_maps_to_the_status_rampart_http_answers() {
        let codes: Vec<SpanStatus> = [
            Ok(()),
            Err(Failure::Error),
            Err(Failure::Overloaded(None)),
            Err(Failure::Refused),
            Err(Failure::Expired),
            Err(Failure::Timeout),
        ]
        .iter()
        .map(SpanStatus::of)
        .collect();
        let http = |c| SpanStatus::Http(c);
        assert_eq!(
            codes,
            [
                http(200),
                http(500),
                http(503),
                http(503),
                http(504),
                http(504)
            ]
        );
    }
}
