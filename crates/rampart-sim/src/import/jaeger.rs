//! Reading Jaeger's JSON: what its query API (`/api/traces`) answers and its UI downloads,
//! `{"data": [{"traceID", "spans": [...], "processes": {...}}]}`, into the same spans the
//! OTLP reader gives, so that one inference builds the graph from either.
//!
//! | Jaeger | becomes |
//! |---|---|
//! | `spanID`, `traceID` (the span's, or its trace's) | the span's ids |
//! | the first `references` entry with `refType` `CHILD_OF` (or an older file's `parentSpanID`) | its parent; `FOLLOWS_FROM` is not a parent |
//! | `processes[processID].serviceName` (or the span's own `process`) | its service |
//! | `startTime`, `duration`: whole microseconds | start and end |
//! | tag `span.kind`: `server`, `client`, `producer`, `consumer`, `internal` | its kind (unspecified otherwise) |
//! | tags `error` (true), `otel.status_code` (`ERROR`), `http.response.status_code` or `http.status_code`, `rpc.grpc.status_code` | whether it failed, as the OTLP reader decides |
//! | tag `http.request.resend_count` above 0 | a retry |
//!
//! Every other field is ignored. A problem is named by its place in the document
//! (`data[0].spans[3].startTime`); a document that is not JSON by its line and column.

use std::collections::HashMap;
use std::io::Read;

use serde_json::{Map, Value};

use super::ImportError;
use super::otlp::{CLIENT, Place, SERVER, SpanRecord, Spans, status};

/// Reads the whole document.
pub(super) fn read(mut reader: impl Read) -> Result<Spans, ImportError> {
    let mut text = String::new();
    reader
        .read_to_string(&mut text)
        .map_err(ImportError::read)?;
    let document: Value = serde_json::from_str(&text).map_err(|e| ImportError::document(&e))?;
    let Some(data) = document.get("data").and_then(Value::as_array) else {
        return Err(ImportError::whole(
            "no \"data\" array of traces: not Jaeger's JSON ({\"data\": [{\"traceID\", \
             \"spans\", \"processes\"}], as its query API answers and its UI downloads)",
        ));
    };
    let mut out = Spans::default();
    let mut reader = Reader::default();
    for (t, trace) in data.iter().enumerate() {
        let at = format!("data[{t}]");
        let Some(trace) = trace.as_object() else {
            return Err(ImportError::whole(format!(
                "{at} is not an object (a trace)"
            )));
        };
        let processes = processes(trace, &at)?;
        let Some(spans) = trace.get("spans").and_then(Value::as_array) else {
            return Err(ImportError::whole(format!("{at}.spans is not an array")));
        };
        let trace_id = trace.get("traceID").and_then(Value::as_str);
        for (i, span) in spans.iter().enumerate() {
            let place = Place::Jaeger { trace: t, span: i };
            let record = reader.span(span, place, trace_id, &processes, &mut out)?;
            out.spans.push(record);
        }
    }
    out.traces = reader.traces.len();
    Ok(out)
}

/// `processes`: each id's service name (`None` when it has none).
fn processes<'a>(
    trace: &'a Map<String, Value>,
    at: &str,
) -> Result<HashMap<&'a str, Option<&'a str>>, ImportError> {
    match trace.get("processes") {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(map)) => Ok(map
            .iter()
            .map(|(id, p)| (id.as_str(), p.get("serviceName").and_then(Value::as_str)))
            .collect()),
        Some(other) => Err(ImportError::whole(format!(
            "{at}.processes is not an object (was {})",
            short(other)
        ))),
    }
}

/// What is interned across the document.
#[derive(Default)]
struct Reader {
    traces: HashMap<String, usize>,
    services: HashMap<String, usize>,
    seen: HashMap<(usize, String), Place>,
}

impl Reader {
    fn span(
        &mut self,
        span: &Value,
        place: Place,
        trace_id: Option<&str>,
        processes: &HashMap<&str, Option<&str>>,
        out: &mut Spans,
    ) -> Result<SpanRecord, ImportError> {
        let problem = |what: String| ImportError::whole(format!("{place}{what}"));
        let Some(span) = span.as_object() else {
            return Err(problem(" is not an object (a span)".to_owned()));
        };
        let text = |key: &str| {
            span.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let Some(id) = text("spanID") else {
            return Err(problem(".spanID is missing or empty".to_owned()));
        };
        let Some(trace_id) = text("traceID").or(trace_id.filter(|s| !s.is_empty())) else {
            return Err(problem(
                ".traceID is missing or empty (and so is its trace's)".to_owned(),
            ));
        };
        let service = service(span, processes).map_err(problem)?;
        let micros = |key: &str| {
            span.get(key).and_then(Value::as_u64).ok_or_else(|| {
                problem(format!(
                    ".{key} is not a whole number of microseconds (was {})",
                    span.get(key).map_or_else(|| "missing".to_owned(), short)
                ))
            })
        };
        let (start, duration) = (micros("startTime")?, micros("duration")?);
        let (Some(start), Some(duration)) = (start.checked_mul(1_000), duration.checked_mul(1_000))
        else {
            return Err(problem(
                ": startTime or duration is too large to be nanoseconds".to_owned(),
            ));
        };
        let Some(end) = start.checked_add(duration) else {
            return Err(problem(
                ": startTime + duration is too large to be nanoseconds".to_owned(),
            ));
        };
        let tags = match span.get("tags") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(tags)) => tags.as_slice(),
            Some(other) => {
                return Err(problem(format!(
                    ".tags is not an array (was {})",
                    short(other)
                )));
            }
        };
        let kind = match tag(tags, "span.kind").and_then(Value::as_str) {
            Some("server") => SERVER,
            Some("client") => CLIENT,
            Some("producer") => 4,
            Some("consumer") => 5,
            Some("internal") => 1,
            _ => 0,
        };
        let error = tag(tags, "error").is_some_and(|v| v == true || v == "true")
            || tag(tags, "otel.status_code").is_some_and(|v| v == "ERROR");
        let http = int_tag(tags, "http.response.status_code")
            .or_else(|| int_tag(tags, "http.status_code"));
        let (failed, status) = status(error, http, int_tag(tags, "rpc.grpc.status_code"));

        let next = self.traces.len();
        let trace = *self.traces.entry(trace_id.to_owned()).or_insert(next);
        if let Some(first) = self.seen.insert((trace, id.to_owned()), place) {
            return Err(problem(format!(
                ": span {id} of trace {trace_id} appears twice (first at {first})"
            )));
        }
        let next = self.services.len();
        let service = *self.services.entry(service.to_owned()).or_insert_with(|| {
            out.services.push(service.to_owned());
            next
        });
        Ok(SpanRecord {
            place,
            trace,
            id: id.to_owned(),
            parent: parent(span).map(str::to_owned),
            service,
            kind,
            start,
            end,
            failed,
            status,
            resend: int_tag(tags, "http.request.resend_count").is_some_and(|n| n > 0),
        })
    }
}

/// The span's service: its own `process`, or its trace's `processes[processID]`.
fn service<'a>(
    span: &'a Map<String, Value>,
    processes: &HashMap<&str, Option<&'a str>>,
) -> Result<&'a str, String> {
    if let Some(process) = span.get("process") {
        return process
            .get("serviceName")
            .and_then(Value::as_str)
            .ok_or_else(|| ".process has no serviceName string".to_owned());
    }
    let Some(id) = span.get("processID").and_then(Value::as_str) else {
        return Err(" has no processID (every span needs its service)".to_owned());
    };
    match processes.get(id) {
        Some(Some(name)) => Ok(name),
        Some(None) => Err(format!(
            ".processID {id:?} names a process with no serviceName string"
        )),
        None => {
            let mut ids: Vec<&str> = processes.keys().copied().collect();
            ids.sort_unstable();
            Err(format!(
                ".processID {id:?} names no process of its trace (it has: {})",
                if ids.is_empty() {
                    "none".to_owned()
                } else {
                    ids.join(", ")
                }
            ))
        }
    }
}

/// The parent's span id: the first `CHILD_OF` reference, or an older file's `parentSpanID`.
fn parent(span: &Map<String, Value>) -> Option<&str> {
    let reference = span
        .get("references")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r.get("refType").and_then(Value::as_str) == Some("CHILD_OF"))
        .and_then(|r| r.get("spanID").and_then(Value::as_str));
    reference
        .or_else(|| span.get("parentSpanID").and_then(Value::as_str))
        .filter(|p| !p.is_empty() && p.bytes().any(|b| b != b'0'))
}

/// The value of the tag `key`, when there is one.
fn tag<'a>(tags: &'a [Value], key: &str) -> Option<&'a Value> {
    tags.iter()
        .find(|t| t.get("key").and_then(Value::as_str) == Some(key))
        .and_then(|t| t.get("value"))
}

/// An integer tag, written as a number or as a string of one.
fn int_tag(tags: &[Value], key: &str) -> Option<i64> {
    match tag(tags, key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A value for a message: itself when short, its kind otherwise.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 40 {
        return text;
    }
    match value {
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".to_owned(),
        Value::String(_) => "a long string".to_owned(),
        _ => "a long value".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_parent_is_the_first_child_of_reference_never_a_follows_from() {
        let span = json!({ "references": [
            { "refType": "FOLLOWS_FROM", "spanID": "a" },
            { "refType": "CHILD_OF", "spanID": "b" },
        ]});
        assert_eq!(parent(span.as_object().expect("object")), Some("b"));
        let follows = json!({ "references": [{ "refType": "FOLLOWS_FROM", "spanID": "a" }] });
        assert_eq!(parent(follows.as_object().expect("object")), None);
        let old = json!({ "parentSpanID": "c" });
        assert_eq!(parent(old.as_object().expect("object")), Some("c"));
        let zero = json!({ "parentSpanID": "0000000000000000" });
        assert_eq!(parent(zero.as_object().expect("object")), None);
    }

    #[test]
    fn integer_tags_are_read_as_numbers_or_strings() {
        let tags = [
            json!({ "key": "http.status_code", "type": "int64", "value": 503 }),
            json!({ "key": "rpc.grpc.status_code", "type": "string", "value": "14" }),
            json!({ "key": "odd", "type": "bool", "value": true }),
        ];
        assert_eq!(int_tag(&tags, "http.status_code"), Some(503));
        assert_eq!(int_tag(&tags, "rpc.grpc.status_code"), Some(14));
        assert_eq!(int_tag(&tags, "odd"), None);
        assert_eq!(int_tag(&tags, "absent"), None);
    }
}
