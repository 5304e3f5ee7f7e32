//! Reading the OTLP JSON that the OpenTelemetry collector's file exporter writes: one
//! `ExportTraceServiceRequest` per line, numbers of nanoseconds as strings, enums as integers
//! (their names are accepted too). Only what the importer uses is read; every other field is
//! ignored, so newer collectors' additions do not break it.

use std::collections::HashMap;
use std::io::BufRead;

use serde::Deserialize;

use super::ImportError;

/// `SpanKind`: a span that handles a request.
pub(super) const SERVER: i64 = 2;
/// `SpanKind`: a span that makes a request.
pub(super) const CLIENT: i64 = 3;
/// `Status.code`: the operation failed.
const STATUS_ERROR: i64 = 2;

/// Where in its file a span was read: what a note names it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// A line of an OTLP file (1-based): one export request.
    Line(usize),
    /// `data[trace].spans[span]` of a Jaeger file.
    Jaeger {
        /// The trace's index in `data`.
        trace: usize,
        /// The span's index in its trace's `spans`.
        span: usize,
    },
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Line(line) => write!(f, "line {line}"),
            Place::Jaeger { trace, span } => write!(f, "data[{trace}].spans[{span}]"),
        }
    }
}

/// One span as the importer keeps it.
#[derive(Debug, Clone)]
pub(super) struct SpanRecord {
    /// Where it was read.
    pub(super) place: Place,
    /// Its trace, interned.
    pub(super) trace: usize,
    /// Its id, as written.
    pub(super) id: String,
    /// Its parent's id, when it names one.
    pub(super) parent: Option<String>,
    /// Its service, an index into [`Spans::services`].
    pub(super) service: usize,
    /// `SpanKind` as an integer.
    pub(super) kind: i64,
    /// Start, in nanoseconds since the epoch.
    pub(super) start: u64,
    /// End, in nanoseconds since the epoch (at least `start`).
    pub(super) end: u64,
    /// Whether the span records a failure (see [`outcome`]).
    pub(super) failed: bool,
    /// Its status as a label: `http 503`, `grpc 14`, `error` or `ok`.
    pub(super) status: String,
    /// `http.request.resend_count` above 0: a retry of an earlier request.
    pub(super) resend: bool,
}

impl SpanRecord {
    /// End less start, in nanoseconds.
    pub(super) fn duration(&self) -> u64 {
        self.end - self.start
    }
}

/// Every span of a file.
#[derive(Debug, Default)]
pub(super) struct Spans {
    /// The spans, in file order.
    pub(super) spans: Vec<SpanRecord>,
    /// Service names, by first appearance.
    pub(super) services: Vec<String>,
    /// How many traces.
    pub(super) traces: usize,
}

/// Reads every line of `reader`.
pub(super) fn read(mut reader: impl BufRead) -> Result<Spans, ImportError> {
    let mut out = Spans::default();
    let mut traces: HashMap<String, usize> = HashMap::new();
    let mut services: HashMap<String, usize> = HashMap::new();
    let mut seen: HashMap<(usize, String), usize> = HashMap::new();
    let mut bytes = Vec::new();
    let mut line = 0;
    loop {
        bytes.clear();
        line += 1;
        let read = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| ImportError::io(line, e))?;
        if read == 0 {
            break;
        }
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return Err(ImportError::at(line, "not UTF-8 text"));
        };
        if text.trim().is_empty() {
            continue;
        }
        let request: ExportRequest =
            serde_json::from_str(text).map_err(|e| ImportError::json(line, &e))?;
        for (r, resource) in request.resource_spans.iter().enumerate() {
            let service = service_name(&resource.resource.attributes).ok_or_else(|| {
                ImportError::at(
                    line,
                    format!(
                        "resourceSpans[{r}] has no service.name string attribute (every span \
                         needs its service)"
                    ),
                )
            })?;
            let next = services.len();
            let service = *services.entry(service.to_owned()).or_insert_with(|| {
                out.services.push(service.to_owned());
                next
            });
            for scope in &resource.scope_spans {
                for span in &scope.spans {
                    let record = record(line, span, service, &mut traces)?;
                    let key = (record.trace, record.id.clone());
                    if let Some(first) = seen.insert(key, line) {
                        return Err(ImportError::at(
                            line,
                            format!(
                                "span {} of trace {} appears twice (first on line {first})",
                                span.span_id, span.trace_id
                            ),
                        ));
                    }
                    out.spans.push(record);
                }
            }
        }
    }
    out.traces = traces.len();
    Ok(out)
}

fn record(
    line: usize,
    span: &SpanJson,
    service: usize,
    traces: &mut HashMap<String, usize>,
) -> Result<SpanRecord, ImportError> {
    let name = |field: &str| format!("span {:?} ({:?}): {field}", span.span_id, span.name);
    if span.trace_id.is_empty() {
        return Err(ImportError::at(line, name("traceId is empty")));
    }
    if span.span_id.is_empty() {
        return Err(ImportError::at(line, name("spanId is empty")));
    }
    let nanos = |value: &Number, field: &str| {
        value.whole().ok_or_else(|| {
            ImportError::at(
                line,
                name(&format!(
                    "{field} is not a whole number of nanoseconds (was {value})"
                )),
            )
        })
    };
    let start = nanos(&span.start_time_unix_nano, "startTimeUnixNano")?;
    let end = nanos(&span.end_time_unix_nano, "endTimeUnixNano")?;
    if end < start {
        return Err(ImportError::at(
            line,
            name(&format!(
                "endTimeUnixNano {end} is before startTimeUnixNano {start}"
            )),
        ));
    }
    let kind = span.kind.code(&[
        ("SPAN_KIND_UNSPECIFIED", 0),
        ("SPAN_KIND_INTERNAL", 1),
        ("SPAN_KIND_SERVER", SERVER),
        ("SPAN_KIND_CLIENT", CLIENT),
        ("SPAN_KIND_PRODUCER", 4),
        ("SPAN_KIND_CONSUMER", 5),
    ]);
    let Some(kind) = kind else {
        return Err(ImportError::at(
            line,
            name(&format!("kind is not a SpanKind (was {})", span.kind)),
        ));
    };
    let code = span.status.code.code(&[
        ("STATUS_CODE_UNSET", 0),
        ("STATUS_CODE_OK", 1),
        ("STATUS_CODE_ERROR", STATUS_ERROR),
    ]);
    let Some(code) = code else {
        return Err(ImportError::at(
            line,
            name(&format!(
                "status.code is not a StatusCode (was {})",
                span.status.code
            )),
        ));
    };
    let (failed, status) = outcome(code, &span.attributes);
    let next = traces.len();
    let trace = *traces.entry(span.trace_id.clone()).or_insert(next);
    Ok(SpanRecord {
        place: Place::Line(line),
        trace,
        id: span.span_id.clone(),
        parent: Some(span.parent_span_id.clone()).filter(|p| !p.is_empty()),
        service,
        kind,
        start,
        end,
        failed,
        status,
        resend: int_attribute(&span.attributes, "http.request.resend_count").is_some_and(|n| n > 0),
    })
}

/// Whether a span failed, and its status as a label. It failed when its status code is
/// ERROR, its HTTP status is 500 or more (`http.response.status_code`, or the older
/// `http.status_code`), or its gRPC status is not OK (`rpc.grpc.status_code`). A 4xx alone is
/// not a failure: the simulator's services fail with a 500.
fn outcome(code: i64, attributes: &[KeyValue]) -> (bool, String) {
    let http = int_attribute(attributes, "http.response.status_code")
        .or_else(|| int_attribute(attributes, "http.status_code"));
    let grpc = int_attribute(attributes, "rpc.grpc.status_code");
    status(code == STATUS_ERROR, http, grpc)
}

/// Whether a span failed, and its status as a label, from what its format says: an error
/// mark (OTLP's status ERROR, Jaeger's `error` tag), its HTTP status and its gRPC status.
pub(super) fn status(error: bool, http: Option<i64>, grpc: Option<i64>) -> (bool, String) {
    match (http, grpc) {
        (Some(status), _) => (error || status >= 500, format!("http {status}")),
        (None, Some(status)) => (error || status != 0, format!("grpc {status}")),
        (None, None) if error => (true, "error".to_owned()),
        (None, None) => (false, "ok".to_owned()),
    }
}

fn service_name(attributes: &[KeyValue]) -> Option<&str> {
    attributes
        .iter()
        .find(|a| a.key == "service.name")
        .and_then(|a| a.value.string_value.as_deref())
}

fn int_attribute(attributes: &[KeyValue], key: &str) -> Option<i64> {
    let value = &attributes.iter().find(|a| a.key == key)?.value;
    match &value.int_value {
        Some(n) => n.signed(),
        None => value.string_value.as_deref()?.parse().ok(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportRequest {
    #[serde(default)]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    resource: Resource,
    #[serde(default)]
    scope_spans: Vec<ScopeSpans>,
}

#[derive(Deserialize, Default)]
struct Resource {
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    spans: Vec<SpanJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpanJson {
    trace_id: String,
    span_id: String,
    #[serde(default)]
    parent_span_id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: Number,
    start_time_unix_nano: Number,
    end_time_unix_nano: Number,
    #[serde(default)]
    status: Status,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    code: Number,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: AnyValue,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    string_value: Option<String>,
    int_value: Option<Number>,
}

/// A number as proto3 JSON writes it: 64-bit integers as strings, or as numbers; enums as
/// integers, or by name.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Unsigned(u64),
    Text(String),
    Float(f64),
}

impl Default for Number {
    fn default() -> Self {
        Number::Int(0)
    }
}

impl Number {
    /// A non-negative whole number.
    fn whole(&self) -> Option<u64> {
        match self {
            Number::Int(n) => u64::try_from(*n).ok(),
            Number::Unsigned(n) => Some(*n),
            Number::Text(t) => t.parse().ok(),
            Number::Float(_) => None,
        }
    }

    fn signed(&self) -> Option<i64> {
        match self {
            Number::Int(n) => Some(*n),
            Number::Unsigned(n) => i64::try_from(*n).ok(),
            Number::Text(t) => t.parse().ok(),
            Number::Float(_) => None,
        }
    }

    /// An enum's value: the integer, or the value of its name in `names`.
    fn code(&self, names: &[(&str, i64)]) -> Option<i64> {
        match self {
            Number::Text(t) => names
                .iter()
                .find(|(name, _)| name == t)
                .map(|&(_, v)| v)
                .or_else(|| t.parse().ok()),
            _ => self.signed(),
        }
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Number::Int(n) => write!(f, "{n}"),
            Number::Unsigned(n) => write!(f, "{n}"),
            Number::Text(t) => write!(f, "{t:?}"),
            Number::Float(x) => write!(f, "{x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(json: &str) -> Vec<KeyValue> {
        serde_json::from_str(json).expect("valid attributes")
    }

    #[test]
    fn an_http_500_is_a_failure_and_a_404_is_not() {
        let five =
            attributes(r#"[{"key":"http.response.status_code","value":{"intValue":"500"}}]"#);
        assert_eq!(outcome(0, &five), (true, "http 500".to_owned()));
        let four = attributes(r#"[{"key":"http.status_code","value":{"intValue":404}}]"#);
        assert_eq!(outcome(0, &four), (false, "http 404".to_owned()));
    }

    #[test]
    fn a_grpc_status_other_than_ok_is_a_failure() {
        let unavailable =
            attributes(r#"[{"key":"rpc.grpc.status_code","value":{"intValue":"14"}}]"#);
        assert_eq!(outcome(0, &unavailable), (true, "grpc 14".to_owned()));
        let ok = attributes(r#"[{"key":"rpc.grpc.status_code","value":{"intValue":"0"}}]"#);
        assert_eq!(outcome(0, &ok), (false, "grpc 0".to_owned()));
    }

    #[test]
    fn a_status_code_of_error_alone_is_a_failure() {
        assert_eq!(outcome(STATUS_ERROR, &[]), (true, "error".to_owned()));
        assert_eq!(outcome(1, &[]), (false, "ok".to_owned()));
    }

    #[test]
    fn enums_are_read_as_integers_or_by_name() {
        let names = [("SPAN_KIND_SERVER", SERVER)];
        assert_eq!(Number::Int(2).code(&names), Some(SERVER));
        assert_eq!(
            Number::Text("SPAN_KIND_SERVER".into()).code(&names),
            Some(SERVER)
        );
        assert_eq!(Number::Text("nope".into()).code(&names), None);
    }
}
