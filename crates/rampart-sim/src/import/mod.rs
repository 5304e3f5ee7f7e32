//! The importer: a call graph file ([`crate::graph`]) learned from a service's recorded
//! OpenTelemetry spans.
//!
//! Describing a call graph by hand is where a what-if goes wrong first: nobody remembers that
//! the cart reads the database twice per request, in turn, or that one answer in twenty from
//! the catalog takes 60 ms. The traces know. [`otlp_to_graph`] reads the OTLP JSON that the
//! OpenTelemetry collector's file exporter writes (one export request per line) and builds,
//! for each caller → callee edge, the calls per request (sequence or parallel, from their
//! start and end times), their concurrency, the callee's latency and the error rate by
//! status; for each service, an estimate of its workers and a histogram of its own service
//! time. [`ImportedGraph::to_toml`] writes a graph file a person can read and edit, with a
//! comment on every key the traces could not give.
//!
//! ```
//! use rampart_sim::graph::Graph;
//! use rampart_sim::import::otlp_to_graph;
//!
//! // One root request to `web` (10 ms) calling `db` once (6 ms), as the collector writes it.
//! let line = |service: &str, id: &str, parent: &str, kind: u8, start: u64, end: u64| {
//!     format!(
//!         r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"{service}"}}}}]}},"scopeSpans":[{{"scope":{{"name":"x"}},"spans":[{{"traceId":"t1","spanId":"{id}","parentSpanId":"{parent}","name":"GET","kind":{kind},"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","status":{{}}}}]}}]}}]}}"#
//!     )
//! };
//! let file = [
//!     line("web", "a", "", 2, 1_000_000, 11_000_000),
//!     line("web", "b", "a", 3, 3_000_000, 10_000_000),
//!     line("db", "c", "b", 2, 3_500_000, 9_500_000),
//! ]
//! .join("\n");
//!
//! let graph = otlp_to_graph(file.as_bytes())?;
//! assert_eq!(graph.entry, "web");
//! let web = graph.service("web").expect("web handled the root");
//! assert_eq!(web.calls[0].to, "db");
//! assert_eq!(web.calls[0].per_parent, 1.0);
//! // Its own time: 10 ms less the 7 ms it waited on db.
//! assert_eq!(web.own_time.buckets, [(std::time::Duration::from_millis(3), 1)]);
//!
//! // The file it writes is a graph file the simulator reads.
//! let toml = graph.to_toml();
//! assert!(toml.contains("policy = \"db\""));
//! Graph::parse(&toml, None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What it infers, and what it cannot
//!
//! | graph key | from the traces | how |
//! |---|---|---|
//! | `entry` | yes | the service of the most root requests (SERVER spans with no SERVER span above them) |
//! | `workers` | an estimate | the most of the service's SERVER spans open at once: a lower bound if it never queued, too high if its spans include time in a queue |
//! | `service_time` | yes | a histogram of each SERVER span less the time it spent in calls (the union of its CLIENT spans, clamped at 0), 12 buckets by quantile ([`BUCKET_ENDS`]) |
//! | `error_rate` | yes | failed requests none of whose calls failed, other than those that ran out of time (a failed call fails its caller in the simulator) |
//! | `error_time` | yes, with at least [`SPLIT_AT`] own failures | the own time of those failed requests, apart from the others' (then `service_time`), so that failures that are the slow tail stay the slow tail |
//! | `calls[i].count` | yes | first attempts per request of the caller, rounded, at least 1; CLIENT spans with `http.request.resend_count` above 0 are retries and not counted; with a `share`, per request that made any |
//! | `calls[i].share` | yes | the share of the caller's requests that made any call on the edge, two decimals, written when below [`SHARE_BELOW`] (a caller whose requests fail before their calls lowers it too: read it beside `error_rate`) |
//! | `calls[i].mode` | yes | `parallel` when most requests that made several calls on the edge had two in flight at once |
//! | `calls[i].wire` | yes, for calls with CLIENT spans | a histogram of each call's CLIENT span less its callee's SERVER span (before it starts and after it ends), over the calls whose CLIENT span holds the SERVER span; written when it is not all 0 |
//! | `calls[i].with_previous` | yes | when most requests that made both started it before the calls of the entry before it had ended |
//! | `traffic.segments` | yes | the roots' start times, in up to 12 steady segments |
//! | `hang_rate` | yes | failed requests none of whose calls failed that ran out of time (504, gRPC `DEADLINE_EXCEEDED`): a server that cuts a hanging handler at the deadline it received answers so, and the simulator's hung request is answered so at the same deadline by a service with `enforce`, or else cut by its caller's own ceiling there when the caller's policy reads it (`use_ambient_deadline = true`, as a rampart-http client's always does) |
//! | `queue`, `admission`, `inbound` | no | marked `not inferred` in the file |
//! | `calls[i].policy` | no | named after the callee; the policy file must define it (for a rampart-http client, with `use_ambient_deadline = true`: its outbound layer always reads the ambient deadline, a policy file's default does not) |
//! | `traffic.deadline`, `mix` | no | twice the slowest root, and every root critical, marked |
//!
//! A span fails when its status code is ERROR, its `http.response.status_code` (or the older
//! `http.status_code`) is 500 or more, or its `rpc.grpc.status_code` is not 0; a call's
//! status is its CLIENT span's, or its callee's when the client span has none.
//!
//! What the file holds but the graph cannot use (spans whose parent is not in the file,
//! calls into services that were not traced, client spans outside any request, calls from a
//! service to itself, services the entry never reaches) is counted in
//! [`ImportedGraph::notes`] and written at the top of the graph file, never guessed at.
//!
//! # Jaeger
//!
//! [`jaeger_to_graph`] reads Jaeger's JSON instead, the document its query API
//! (`/api/traces`) answers and its UI downloads, into the same spans: the parent from the
//! first `CHILD_OF` reference, the service from the span's process, times from whole
//! microseconds, the kind from the `span.kind` tag, the status from the `error`,
//! `otel.status_code` and status code tags as above, a retry from `http.request.resend_count`.
//! Everything after is the same inference.
//!
//! # Errors
//!
//! A line that is not JSON, is cut short, is not an export request, has a resource without
//! `service.name`, a span without ids, a time that is not a whole number of nanoseconds or an
//! end before its start, or a span that appears twice: an [`ImportError`] naming the line and
//! what was wrong. No spans at all, or no root request, is an error of the whole file. A Jaeger
//! file's problem is named by its place in the document (`data[0].spans[3].startTime`), or,
//! when it is not JSON, by its line and column.

mod error;
mod infer;
mod jaeger;
mod otlp;
mod stats;
mod write;

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::time::Duration;

pub use error::ImportError;
pub use stats::{BUCKET_ENDS, Histogram};

use crate::graph::file::Mode;

/// Reads OTLP JSON spans (one export request per line, as the OpenTelemetry collector's file
/// exporter writes them) and builds the call graph they show.
///
/// # Errors
///
/// The first malformed line, named by its number (see the [module docs](self#errors)); a file
/// with no spans, or no root request.
pub fn otlp_to_graph(reader: impl BufRead) -> Result<ImportedGraph, ImportError> {
    infer::build(otlp::read(reader)?)
}

/// Reads Jaeger's JSON (what its query API answers and its UI downloads: `{"data":
/// [{"traceID", "spans", "processes"}]}`) and builds the call graph it shows, as
/// [`otlp_to_graph`] does from the same spans (see the [module docs](self#jaeger)).
///
/// # Errors
///
/// A document that is not JSON, named by its line and column; the first malformed trace or
/// span, named by its place (`data[0].spans[3].startTime`); a file with no spans, or no root
/// request.
pub fn jaeger_to_graph(reader: impl Read) -> Result<ImportedGraph, ImportError> {
    infer::build(jaeger::read(reader)?)
}

/// A call graph learned from spans: what [`otlp_to_graph`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedGraph {
    /// The service the roots reach (the most of them, if they reach several).
    pub entry: String,
    /// The services the entry reaches, the entry included, by name.
    pub services: Vec<ImportedService>,
    /// The root requests.
    pub traffic: ImportedTraffic,
    /// Spans read.
    pub spans: u64,
    /// Traces read.
    pub traces: u64,
    /// What the file holds that the graph does not use, one line each.
    pub notes: Vec<String>,
}

impl ImportedGraph {
    /// The service named `name`.
    pub fn service(&self, name: &str) -> Option<&ImportedService> {
        self.services.iter().find(|s| s.name == name)
    }

    /// The graph file ([`crate::graph`]), commented: what each number was learned from, and
    /// every key the traces could not give marked `not inferred`.
    pub fn to_toml(&self) -> String {
        write::toml(self)
    }
}

/// One service: what its SERVER spans show.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedService {
    /// Its `service.name`.
    pub name: String,
    /// Requests it handled (SERVER spans).
    pub requests: u64,
    /// The most requests it handled at once, at least 1.
    pub workers: u32,
    /// Each request's time less its time in calls.
    pub own_time: Histogram,
    /// Each request's time (its SERVER span).
    pub latency: Histogram,
    /// Failed requests none of whose calls failed.
    pub own_errors: u64,
    /// Requests that ran out of time on their own (504, gRPC `DEADLINE_EXCEEDED`, none of
    /// their calls failed): not in `own_errors`.
    pub own_timeouts: u64,
    /// `own_timeouts` per request: the graph's `hang_rate`, requests that hang in the
    /// simulator, answered 504 at their deadline by a service with `enforce`, or else cut by
    /// their caller's own ceiling.
    pub hang_rate: f64,
    /// With at least [`SPLIT_AT`] own errors or any own timeout, the own time of the requests
    /// that did not fail on their own (the graph's `service_time`), and, with at least
    /// [`SPLIT_AT`] own errors, that of the errors apart (`error_time`: a service whose
    /// failures are its slow tail keeps that shape).
    pub split: Option<(Histogram, Option<Histogram>)>,
    /// `own_errors` per request.
    pub error_rate: f64,
    /// Its calls, one entry per callee, in order of when they start in a request.
    pub calls: Vec<ImportedCall>,
}

/// One edge, caller → callee: the caller's calls to one service.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedCall {
    /// The callee.
    pub to: String,
    /// First attempts (calls that are not retries).
    pub calls: u64,
    /// Retries (CLIENT spans with `http.request.resend_count` above 0).
    pub retries: u64,
    /// Requests the caller handled.
    pub parents: u64,
    /// `calls` per request of the caller.
    pub per_parent: f64,
    /// The graph's `count`: `per_parent` rounded, at least 1; with a [`share`](Self::share)
    /// below 1, the calls per request that made any, rounded, at least 1.
    pub count: u32,
    /// The graph's `share`: `callers` over `parents` (two decimals) when that is below
    /// [`SHARE_BELOW`], 1 otherwise (a few requests that failed before calling make no
    /// share).
    pub share: f64,
    /// Requests of the caller that made at least one call on the edge.
    pub callers: u64,
    /// How the calls of one request go, judged from the requests that made several; `None`
    /// when none did.
    pub mode: Option<Mode>,
    /// Requests that made several first attempts on the edge.
    pub several: u64,
    /// Of `several`, those with two calls in flight at once.
    pub overlapped: u64,
    /// The calls start before the previous entry's calls have ended.
    pub with_previous: bool,
    /// The most calls in flight at once, over all requests.
    pub most_at_once: u64,
    /// Calls in flight on average over the file's time span.
    pub mean_at_once: f64,
    /// The callee's SERVER spans under these calls.
    pub latency: Histogram,
    /// Each call's time outside the callee: its CLIENT span less the callee's SERVER span
    /// (the wire both ways, the caller's client stack), over the calls whose CLIENT span holds
    /// the SERVER span (not those the caller stopped waiting for); the graph's `wire`.
    pub wire: Histogram,
    /// Calls (retries included) that failed.
    pub failed: u64,
    /// `failed` per call (retries included).
    pub error_rate: f64,
    /// Calls (retries included) by status: `http 200`, `http 503`, `grpc 14`, `error`, `ok`.
    pub by_status: BTreeMap<String, u64>,
}

/// The fewest own failures of a service for which the importer writes their time apart
/// (`error_time`): fewer make too coarse a histogram to draw from.
pub const SPLIT_AT: u64 = 20;

/// A call made by fewer than this share of its caller's requests is written with a `share`.
pub const SHARE_BELOW: f64 = 0.95;

/// The root requests: SERVER spans of the entry with no SERVER span above them.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedTraffic {
    /// How many.
    pub roots: u64,
    /// From the first root's start to the last's.
    pub window: Duration,
    /// `(length, roots per second)`, one after another; empty when there are fewer than two
    /// roots or they all start at once.
    pub segments: Vec<(Duration, f64)>,
    /// Their latency.
    pub latency: Histogram,
}
