//! What a run of `examples/two_services.rs` saw, and whether its sides agree: one row per
//! request (what the load loop got, rampart's `CallEnded` stop reasons and the call's
//! `CallReport`), rampart's counters read from the run's debugging recorder, and the printout
//! that sets them side by side. Kept apart from the services, so that `two_services.rs` reads
//! as the two services a team would run, and this file as the measurement around them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use http::StatusCode;
use metrics_util::debugging::{DebugValue, Snapshotter};
use rampart::StopReason;

use super::Route;

/// One request of the load loop, seen from the three places that record it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The request's id.
    pub(crate) id: u64,
    /// What the load loop got: the frontend's status, or the transport error.
    pub(crate) client: Result<StatusCode, String>,
    /// How long it waited for it.
    pub(crate) latency: Duration,
    /// The stop reasons of the frontend's calls for this request, from rampart's `CallEnded`
    /// events (exactly one is expected).
    pub(crate) rampart: Vec<StopReason>,
    /// The stop reason the frontend read from the call's `CallReport` (in the response, or in
    /// `ClientError::Status`); `None` when the call ended with an error that carries no
    /// report (a timeout, a refusal, a transport error), or, on the hedged route, with a
    /// success of its first attempt (the outbound layer's response then carries none), and
    /// always on the gRPC route (a gRPC response carries none).
    pub(crate) report: Option<StopReason>,
}

impl Row {
    /// The route the request took.
    pub(crate) fn route(&self) -> Route {
        Route::of(self.id)
    }

    /// Whether the load loop saw a failure.
    pub(crate) fn client_failed(&self) -> bool {
        !matches!(self.client, Ok(status) if status.is_success())
    }

    /// Whether rampart ended the request's call with anything but success.
    pub(crate) fn rampart_failed(&self) -> bool {
        self.rampart != [StopReason::Succeeded]
    }
}

/// One series of a counter rampart's metrics moved: its name, its labels and its value.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// The counter's name.
    pub(crate) name: String,
    /// The labels as `(key, value)`, in the recorder's order (`policy` first).
    pub(crate) labels: Vec<(String, String)>,
    /// The counter's value at the end of the run.
    pub(crate) value: u64,
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let labels: Vec<_> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(f, "{}{{{}}} {}", self.name, labels.join(","), self.value)
    }
}

impl Series {
    /// The value of label `key`, if the series has it.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find_map(|(k, v)| (k == key).then_some(v.as_str()))
    }
}

/// What a run saw.
#[derive(Debug)]
pub(crate) struct Summary {
    /// One row per request, by id.
    pub(crate) rows: Vec<Row>,
    /// Attempts the backend served.
    pub(crate) backend_attempts: u64,
    /// The series of rampart's `rampart.calls` counter: one per `stop_reason` seen and per
    /// policy and host: the outbound layer's (`policy` its name, `server.address` the
    /// backend's HTTP port for the first two routes' calls, its gRPC port for the fourth's),
    /// and the plain policy's, the third route's.
    pub(crate) calls: Vec<Series>,
    /// The series of `rampart.hedges`, one per `event` seen (started, won, ...): the hedged
    /// route's legs. How many fire depends on timing: printed, never asserted.
    pub(crate) hedges: Vec<Series>,
}

impl Summary {
    /// The requests on which the load loop and rampart disagree: a client failure without a
    /// non-success stop reason, or the reverse, or a call report that contradicts rampart's
    /// event, or a request with other than one call.
    pub(crate) fn disagreements(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|row| {
                row.rampart.len() != 1
                    || row.client_failed() != row.rampart_failed()
                    || row.report.is_some_and(|stop| row.rampart != [stop])
            })
            .collect()
    }

    /// Requests the load loop saw fail.
    pub(crate) fn client_failures(&self) -> usize {
        self.rows.iter().filter(|row| row.client_failed()).count()
    }

    /// Calls rampart ended with a stop reason other than `Succeeded`.
    pub(crate) fn rampart_failures(&self) -> usize {
        self.rows
            .iter()
            .flat_map(|row| &row.rampart)
            .filter(|stop| **stop != StopReason::Succeeded)
            .count()
    }

    /// Calls counted by `rampart.calls`, every stop reason.
    pub(crate) fn metric_calls(&self) -> u64 {
        self.calls.iter().map(|series| series.value).sum()
    }

    /// Calls counted by `rampart.calls` with a `stop_reason` other than `succeeded`.
    pub(crate) fn metric_failures(&self) -> u64 {
        self.calls
            .iter()
            .filter(|series| series.label("stop_reason") != Some("succeeded"))
            .map(|series| series.value)
            .sum()
    }

    /// Prints, per route, the client's latencies and failures beside rampart's stop reasons,
    /// then rampart's metrics for every route.
    pub(crate) fn print(&self) {
        println!(
            "{} requests, {} attempts at the backend",
            self.rows.len(),
            self.backend_attempts
        );
        for route in Route::ALL {
            let rows: Vec<_> = self.rows.iter().filter(|r| r.route() == route).collect();
            println!(
                "{} ({}): {} requests",
                route.path(),
                route.client(),
                rows.len()
            );
            print_route(&rows);
        }
        println!("every route, rampart's metrics:");
        for series in self.calls.iter().chain(&self.hedges) {
            println!("  {series}");
        }
        println!(
            "  failures:   rampart.calls {} of {}, CallEnded events {}, callers {} of {} requests",
            self.metric_failures(),
            self.metric_calls(),
            self.rampart_failures(),
            self.client_failures(),
            self.rows.len()
        );
        println!("disagreements: {}", self.disagreements().len());
    }
}

/// Prints the latencies and statuses of one route's `rows` beside their `CallEnded` stops.
fn print_route(rows: &[&Row]) {
    let mut latencies: Vec<_> = rows.iter().map(|row| row.latency).collect();
    latencies.sort();
    let quantile = |q: f64| {
        let rank = ((latencies.len() as f64 * q).ceil() as usize).max(1);
        latencies.get(rank - 1).copied().unwrap_or_default()
    };
    println!(
        "  client side:  p50 {:.1?}  p99 {:.1?}  max {:.1?}",
        quantile(0.5),
        quantile(0.99),
        latencies.last().copied().unwrap_or_default()
    );
    let mut statuses = BTreeMap::new();
    for row in rows {
        let key = match &row.client {
            Ok(status) => status.as_u16().to_string(),
            Err(_) => "transport error".to_owned(),
        };
        *statuses.entry(key).or_insert(0) += 1;
    }
    println!("    statuses:   {statuses:?}");
    let failed = rows.iter().filter(|row| row.client_failed()).count();
    println!("    failures:   {failed}");
    let mut stops = BTreeMap::new();
    for stop in rows.iter().flat_map(|row| &row.rampart) {
        *stops.entry(stop.as_str()).or_insert(0) += 1;
    }
    let failed = rows.iter().filter(|row| row.rampart_failed()).count();
    println!("  rampart, its CallEnded events:");
    println!("    stops:      {stops:?}");
    println!("    failures:   {failed}");
}

/// Every counter `snapshotter`'s recorder holds, sorted by name and labels. (A snapshot of the
/// debugging recorder resets its counters: take one.)
pub(crate) fn counters(snapshotter: &Snapshotter) -> Vec<Series> {
    let mut series: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(value) => Some(Series {
                name: key.key().name().to_owned(),
                labels: key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect(),
                value,
            }),
            _ => None,
        })
        .collect();
    series.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
    series
}
