//! From spans to a graph: which span handles which request, which calls it made and to whom,
//! and what each service and each edge did.
//!
//! A *request* is a SERVER span. A *call* is a CLIENT span with a SERVER span under it in
//! another service (or a SERVER span whose parent is another service's span that is not a
//! CLIENT: a caller that propagates the context without a client span of its own). A call
//! belongs to the request of its service above it (INTERNAL spans in between are passed
//! through). A *root* is a request with no request above it: what the edge sends.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::otlp::{CLIENT, SERVER, SpanRecord, Spans};
use super::stats::{Histogram, median, most_at_once, offset, union_length};
use super::{
    ImportError, ImportedCall, ImportedGraph, ImportedService, ImportedTraffic, SHARE_BELOW,
    SPLIT_AT,
};
use crate::graph::file::Mode;

/// How many notes of one kind name their spans.
const EXAMPLES: usize = 3;

/// One call: the request that made it, the request it became, when it ran, how it ended.
struct Call {
    caller: usize,
    callee: usize,
    start: u64,
    end: u64,
    failed: bool,
    status: String,
    resend: bool,
    /// Its time outside the callee (the CLIENT span less the SERVER span, before and after
    /// it), when the CLIENT span holds the SERVER span: not for a call its caller stopped
    /// waiting for, nor one with no CLIENT span.
    wire: Option<u64>,
}

/// The parent of each span: `None` (a root), `Some(Ok(index))`, or `Some(Err(()))` when it
/// names a parent that is not in the file.
type Parents = Vec<Option<Result<usize, ()>>>;

pub(super) fn build(read: Spans) -> Result<ImportedGraph, ImportError> {
    let Spans {
        spans,
        services: names,
        traces,
    } = read;
    if spans.is_empty() {
        return Err(ImportError::whole("the file has no spans"));
    }
    let mut notes = Vec::new();
    let parents = parents(&spans);
    let missing: Vec<&SpanRecord> = spans
        .iter()
        .zip(&parents)
        .filter(|(_, p)| matches!(p, Some(Err(()))))
        .map(|(s, _)| s)
        .collect();
    if !missing.is_empty() {
        notes.push(format!(
            "{} spans name a parent that is not in the file ({}); they count for their \
             service, not as calls or roots",
            missing.len(),
            examples(&missing)
        ));
    }
    let limit = spans.len();
    let handler = |i: usize| -> Option<usize> {
        let mut at = i;
        for _ in 0..=limit {
            if spans[at].kind == SERVER {
                return Some(at);
            }
            let p = parents[at]?.ok()?;
            if spans[p].service != spans[i].service {
                return None;
            }
            at = p;
        }
        None
    };
    let is_root = |i: usize| -> bool {
        let mut at = i;
        for _ in 0..=limit {
            match parents[at] {
                None => return true,
                Some(Err(())) => return false,
                Some(Ok(p)) if spans[p].kind == SERVER => return false,
                Some(Ok(p)) => at = p,
            }
        }
        false
    };

    // The calls, and every interval a request spent waiting on one.
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, p) in parents.iter().enumerate() {
        if let Some(Ok(p)) = p {
            children.entry(*p).or_default().push(i);
        }
    }
    let mut calls = Vec::new();
    let mut waits: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    let mut failed_calls: HashMap<usize, bool> = HashMap::new();
    let (mut unmatched, mut outside, mut to_self) = (Vec::new(), Vec::new(), Vec::new());
    for (i, span) in spans.iter().enumerate() {
        let (caller, callee, client) = match span.kind {
            CLIENT => {
                let Some(h) = handler(i) else {
                    outside.push(span);
                    continue;
                };
                waits.entry(h).or_default().push((span.start, span.end));
                *failed_calls.entry(h).or_default() |= span.failed;
                let server = children
                    .get(&i)
                    .and_then(|c| c.iter().copied().find(|&c| spans[c].kind == SERVER));
                match server {
                    Some(s) => (h, s, true),
                    None => {
                        unmatched.push(span);
                        continue;
                    }
                }
            }
            SERVER => match parents[i] {
                Some(Ok(p)) if spans[p].kind != CLIENT && spans[p].service != span.service => {
                    let Some(h) = handler(p) else { continue };
                    waits.entry(h).or_default().push((span.start, span.end));
                    *failed_calls.entry(h).or_default() |= span.failed;
                    (h, i, false)
                }
                _ => continue,
            },
            _ => continue,
        };
        let (from, to) = (&spans[caller], &spans[callee]);
        if from.service == to.service {
            to_self.push(span);
            continue;
        }
        let failed = span.failed || to.failed;
        *failed_calls.entry(caller).or_default() |= failed;
        calls.push(Call {
            caller,
            callee,
            start: span.start,
            end: span.end,
            failed,
            status: if span.status == "ok" {
                to.status.clone()
            } else {
                span.status.clone()
            },
            resend: span.resend,
            wire: (client && span.start <= to.start && to.end <= span.end)
                .then(|| (to.start - span.start) + (span.end - to.end)),
        });
    }
    if !unmatched.is_empty() {
        notes.push(format!(
            "{} client spans have no SERVER span under them: the callee is not traced, or the \
             call never reached it ({}); they are not in the graph",
            unmatched.len(),
            examples(&unmatched)
        ));
    }
    if !outside.is_empty() {
        notes.push(format!(
            "{} client spans belong to no request of their service (a load generator, a \
             batch job: {}); the graph starts at the requests they made",
            outside.len(),
            examples(&outside)
        ));
    }
    if !to_self.is_empty() {
        notes.push(format!(
            "{} calls are from a service to itself ({}), which a graph file cannot have; \
             they are left out",
            to_self.len(),
            examples(&to_self)
        ));
    }

    // The roots and the entry.
    let roots: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].kind == SERVER && is_root(i))
        .collect();
    let mut by_entry: BTreeMap<usize, u64> = BTreeMap::new();
    for &r in &roots {
        *by_entry.entry(spans[r].service).or_default() += 1;
    }
    let Some((&entry, _)) = by_entry
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(names[*b.0].cmp(&names[*a.0])))
    else {
        return Err(ImportError::whole(format!(
            "no root request: no SERVER span without a SERVER span above it among {} spans \
             (are the SERVER spans' kind set, and their parents in the file?)",
            spans.len()
        )));
    };
    let others: Vec<(String, u64)> = by_entry
        .iter()
        .filter(|&(&s, _)| s != entry)
        .map(|(&s, &n)| (names[s].clone(), n))
        .collect();
    if !others.is_empty() {
        let list: Vec<String> = others.iter().map(|(s, n)| format!("{s} ({n})")).collect();
        notes.push(format!(
            "roots also reach {}; the entry is {}, which has the most, and only what it \
             reaches is in the graph",
            list.join(", "),
            names[entry]
        ));
    }

    let extent = (
        spans.iter().map(|s| s.start).min().unwrap_or(0),
        spans.iter().map(|s| s.end).max().unwrap_or(0),
    );
    let window = extent.1 - extent.0;

    // Each service, and its calls.
    let mut requests: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
    for (i, s) in spans.iter().enumerate() {
        if s.kind == SERVER {
            requests[s.service].push(i);
        }
    }
    let mut edges: BTreeMap<(usize, usize), Vec<&Call>> = BTreeMap::new();
    for call in &calls {
        let key = (spans[call.caller].service, spans[call.callee].service);
        edges.entry(key).or_default().push(call);
    }
    let mut services: Vec<Option<ImportedService>> = Vec::new();
    for (s, handled) in requests.iter().enumerate() {
        if handled.is_empty() {
            services.push(None);
            continue;
        }
        let mut own: Vec<u64> = handled
            .iter()
            .map(|&h| {
                let span = &spans[h];
                let waited = waits
                    .get_mut(&h)
                    .map_or(0, |w| union_length(w, (span.start, span.end)));
                span.duration().saturating_sub(waited)
            })
            .collect();
        let mut latency: Vec<u64> = handled.iter().map(|&h| spans[h].duration()).collect();
        let own_failure = |h: usize| {
            let span = &spans[h];
            if !span.failed || failed_calls.get(&h).copied().unwrap_or(false) {
                None
            } else if timed_out(&span.status) {
                Some(OwnFailure::TimedOut)
            } else {
                Some(OwnFailure::Error)
            }
        };
        let count = |kind| {
            handled
                .iter()
                .filter(|&&h| own_failure(h) == Some(kind))
                .count()
        };
        let (own_errors, own_timeouts) = (
            count(OwnFailure::Error) as u64,
            count(OwnFailure::TimedOut) as u64,
        );
        let split = (own_errors >= SPLIT_AT || own_timeouts > 0).then(|| {
            let (mut failed, mut answered): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
            for (&h, &t) in handled.iter().zip(&own) {
                match own_failure(h) {
                    None => answered.push(t),
                    Some(OwnFailure::Error) => failed.push(t),
                    Some(OwnFailure::TimedOut) => {}
                }
            }
            let failed = (own_errors >= SPLIT_AT).then(|| Histogram::of(&mut failed));
            (Histogram::of(&mut answered), failed)
        });
        let mut found: Vec<Found> = edges
            .range((s, 0)..=(s, usize::MAX))
            .map(|(&(_, to), list)| edge(&spans, &names[to], handled.len(), list, window))
            .collect();
        found.sort_by(|a, b| a.start.total_cmp(&b.start));
        let calls = steps(found);
        services.push(Some(ImportedService {
            name: names[s].clone(),
            requests: handled.len() as u64,
            workers: u32::try_from(most_at_once(
                handled.iter().map(|&h| (spans[h].start, spans[h].end)),
            ))
            .unwrap_or(u32::MAX)
            .max(1),
            own_time: Histogram::of(&mut own),
            latency: Histogram::of(&mut latency),
            own_errors,
            split,
            error_rate: own_errors as f64 / handled.len() as f64,
            own_timeouts,
            hang_rate: own_timeouts as f64 / handled.len() as f64,
            calls,
        }));
    }

    // Only what the entry reaches.
    let mut reached = vec![false; names.len()];
    reached[entry] = true;
    let mut frontier = vec![entry];
    while let Some(at) = frontier.pop() {
        if let Some(service) = &services[at] {
            for call in &service.calls {
                if let Some(to) = names.iter().position(|n| *n == call.to)
                    && !reached[to]
                {
                    reached[to] = true;
                    frontier.push(to);
                }
            }
        }
    }
    let unreached: Vec<&str> = (0..names.len())
        .filter(|&s| services[s].is_some() && !reached[s])
        .map(|s| names[s].as_str())
        .collect();
    if !unreached.is_empty() {
        notes.push(format!(
            "the entry ({}) never reaches {}; left out",
            names[entry],
            unreached.join(", ")
        ));
    }
    let mut kept: Vec<ImportedService> = services
        .into_iter()
        .enumerate()
        .filter(|&(s, _)| reached[s])
        .filter_map(|(_, service)| service)
        .collect();
    kept.sort_by(|a, b| a.name.cmp(&b.name));

    Ok(ImportedGraph {
        entry: names[entry].clone(),
        services: kept,
        traffic: traffic(&spans, &roots, entry),
        spans: spans.len() as u64,
        traces: traces as u64,
        notes,
    })
}

fn parents(spans: &[SpanRecord]) -> Parents {
    let index: HashMap<(usize, &str), usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.trace, s.id.as_str()), i))
        .collect();
    spans
        .iter()
        .map(|s| {
            s.parent
                .as_deref()
                .map(|p| index.get(&(s.trace, p)).copied().ok_or(()))
        })
        .collect()
}

fn examples(spans: &[&SpanRecord]) -> String {
    let mut shown: Vec<String> = spans
        .iter()
        .take(EXAMPLES)
        .map(|s| format!("{} span {}", s.place, s.id))
        .collect();
    if spans.len() > EXAMPLES {
        shown.push("...".to_owned());
    }
    shown.join(", ")
}

/// One edge, before it is put in order among its caller's calls.
struct Found {
    /// Its numbers.
    call: ImportedCall,
    /// The median, over the requests that made them, of when the first call starts after
    /// the request does, in nanoseconds.
    start: f64,
    /// Each request's (first start, last end) of the edge's calls.
    bounds: HashMap<usize, (u64, u64)>,
}

/// One edge's numbers.
fn edge(spans: &[SpanRecord], to: &str, parents: usize, list: &[&Call], window: u64) -> Found {
    let mut per_request: HashMap<usize, Vec<&Call>> = HashMap::new();
    for call in list {
        per_request.entry(call.caller).or_default().push(call);
    }
    let first: u64 = list.iter().filter(|c| !c.resend).count() as u64;
    let retries = list.len() as u64 - first;
    let (mut several, mut overlapped) = (0u64, 0u64);
    let mut bounds = HashMap::new();
    let mut offsets = Vec::new();
    for (&request, calls) in &mut per_request {
        calls.sort_by_key(|c| (c.start, c.end));
        let start = calls.first().map_or(0, |c| c.start);
        let end = calls.iter().map(|c| c.end).max().unwrap_or(start);
        bounds.insert(request, (start, end));
        offsets.push(offset(start, spans[request].start));
        let firsts: Vec<&&Call> = calls.iter().filter(|c| !c.resend).collect();
        if firsts.len() >= 2 {
            several += 1;
            let mut reached = 0;
            let mut overlaps = false;
            for c in firsts {
                overlaps |= c.start < reached;
                reached = reached.max(c.end);
            }
            overlapped += u64::from(overlaps);
        }
    }
    let per_parent = first as f64 / parents.max(1) as f64;
    let callers = per_request.len() as u64;
    let made_by = callers as f64 / parents.max(1) as f64;
    let (share, count) = if made_by < SHARE_BELOW {
        let each = first as f64 / callers.max(1) as f64;
        ((made_by * 100.0).round().max(1.0) / 100.0, each.round())
    } else {
        (1.0, per_parent.round())
    };
    let mode = (several > 0).then(|| {
        if overlapped * 2 >= several {
            Mode::Parallel
        } else {
            Mode::Sequence
        }
    });
    let failed = list.iter().filter(|c| c.failed).count() as u64;
    let mut by_status = BTreeMap::new();
    for call in list {
        *by_status.entry(call.status.clone()).or_insert(0u64) += 1;
    }
    let mut latency: Vec<u64> = list.iter().map(|c| spans[c.callee].duration()).collect();
    let mut wire: Vec<u64> = list.iter().filter_map(|c| c.wire).collect();
    let busy: u128 = list.iter().map(|c| u128::from(c.end - c.start)).sum();
    let call = ImportedCall {
        to: to.to_owned(),
        calls: first,
        retries,
        parents: parents as u64,
        per_parent,
        count: (count as u32).max(1),
        share,
        callers,
        mode,
        several,
        overlapped,
        with_previous: false,
        most_at_once: most_at_once(list.iter().map(|c| (c.start, c.end))),
        mean_at_once: if window == 0 {
            0.0
        } else {
            busy as f64 / window as f64
        },
        latency: Histogram::of(&mut latency),
        wire: Histogram::of(&mut wire),
        failed,
        error_rate: failed as f64 / list.len().max(1) as f64,
        by_status,
    };
    Found {
        call,
        start: median(&mut offsets),
        bounds,
    }
}

/// Marks each call (in order of their median start) `with_previous` when, in most requests
/// that made both, it started before the calls of the step before it had all ended.
fn steps(sorted: Vec<Found>) -> Vec<ImportedCall> {
    let mut out = Vec::new();
    let mut step_ends: HashMap<usize, u64> = HashMap::new();
    for found in sorted {
        let Found {
            mut call, bounds, ..
        } = found;
        let (mut both, mut overlapping) = (0u64, 0u64);
        for (request, &(start, _)) in &bounds {
            if let Some(&end) = step_ends.get(request) {
                both += 1;
                overlapping += u64::from(start < end);
            }
        }
        call.with_previous = !out.is_empty() && both > 0 && overlapping * 2 > both;
        if !call.with_previous {
            step_ends.clear();
        }
        for (request, (_, end)) in bounds {
            let e = step_ends.entry(request).or_insert(end);
            *e = (*e).max(end);
        }
        out.push(call);
    }
    out
}

/// The root rate: the roots' window cut into up to 12 slices (about 50 roots each), neighbours
/// within a quarter of each other merged.
fn traffic(spans: &[SpanRecord], roots: &[usize], entry: usize) -> ImportedTraffic {
    let mut starts: Vec<u64> = roots
        .iter()
        .filter(|&&r| spans[r].service == entry)
        .map(|&r| spans[r].start)
        .collect();
    starts.sort_unstable();
    let mut latency: Vec<u64> = roots
        .iter()
        .filter(|&&r| spans[r].service == entry)
        .map(|&r| spans[r].duration())
        .collect();
    let n = starts.len();
    let window = match (starts.first(), starts.last()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    let mut segments: Vec<(Duration, f64)> = Vec::new();
    if n >= 2 && window > 0 {
        let slices = (n / 50).clamp(1, 12) as u64;
        let length = window.div_ceil(slices).max(1);
        let mut counts = vec![0u64; slices as usize];
        for &s in &starts {
            let i = ((s - starts[0]) / length).min(slices - 1);
            counts[i as usize] += 1;
        }
        for (i, &count) in counts.iter().enumerate() {
            // The last root starts the last slice's end: count the gaps, n - 1 of them.
            let count = if i + 1 == counts.len() {
                count.saturating_sub(1)
            } else {
                count
            };
            let lasts = Duration::from_nanos(length);
            let rate = count as f64 / lasts.as_secs_f64();
            match segments.last_mut() {
                Some((d, r)) if (*r - rate).abs() <= 0.25 * r.max(rate) => {
                    let total = *d + lasts;
                    *r = (*r * d.as_secs_f64() + rate * lasts.as_secs_f64()) / total.as_secs_f64();
                    *d = total;
                }
                _ => segments.push((lasts, rate)),
            }
        }
    }
    ImportedTraffic {
        roots: n as u64,
        window: Duration::from_nanos(window),
        segments,
        latency: Histogram::of(&mut latency),
    }
}

/// How a request failed on its own (none of its calls failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnFailure {
    /// It ran out of time: answered 504 or gRPC `DEADLINE_EXCEEDED`, as a server whose
    /// inbound layer cuts a handler at the deadline it received answers one that hangs.
    TimedOut,
    /// Any other failure.
    Error,
}

/// Whether a status label says the request ran out of time.
fn timed_out(status: &str) -> bool {
    status == "http 504" || status == "grpc 4"
}
