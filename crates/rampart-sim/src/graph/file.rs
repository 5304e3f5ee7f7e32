//! The graph file as data: what serde reads, before any check. Every key is optional here so
//! that [`check`](super::check) can name each missing or wrong one under its key path, all at
//! once; an unknown key is refused while reading, with its name.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// A duration written as people write them (`"250ms"`, `"2s"`, `"1.5s"`), read by
/// [`rampart::config::parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct Span(pub Duration);

impl TryFrom<String> for Span {
    type Error = rampart::config::DurationError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        rampart::config::parse_duration(&text).map(Span)
    }
}

/// A whole graph file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphFile {
    /// The service the edge sends root requests to.
    pub entry: Option<String>,
    /// The services, by name.
    #[serde(default)]
    pub services: BTreeMap<String, ServiceFile>,
    /// The root requests of the default scenario.
    pub traffic: Option<TrafficFile>,
    /// The faults of the default scenario.
    #[serde(default)]
    pub faults: Vec<FaultFile>,
    /// Other scenarios, by name: each replaces the traffic or the faults it gives.
    #[serde(default)]
    pub scenarios: BTreeMap<String, ScenarioFile>,
}

/// One service.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceFile {
    /// Requests handled at once.
    pub workers: Option<u32>,
    /// Requests waiting at most, beyond those being handled (default 0).
    pub queue: Option<usize>,
    /// `"fifo"` (default) or `"criticality"` (rampart's `CriticalityLimit`).
    pub admission: Option<AdmissionKind>,
    /// How long a refusal keeps the levels below it refused (criticality admission only;
    /// default 1s).
    pub hold: Option<Span>,
    /// Read `X-Deadline-Ms` and `X-Criticality` as rampart-http's `InboundLayer` does
    /// (default false).
    pub inbound: Option<bool>,
    /// What the service keeps for itself from a received deadline (inbound only; default 0).
    pub reserve: Option<Span>,
    /// Answer 504 at once to a request arriving with no more than the reserve left (inbound
    /// only; default false).
    pub reject_expired: Option<bool>,
    /// Answer 504 at the deadline (received minus the reserve) a request still being handled,
    /// a hung one too (inbound only; default false).
    pub enforce: Option<bool>,
    /// Where a request's level comes from: `"wire"` (default) or `"route"` (a public edge).
    pub levels: Option<LevelsKind>,
    /// How long a handler works before its calls.
    pub service_time: Option<ServiceTimeFile>,
    /// Share of handled requests that fail (default 0).
    pub error_rate: Option<f64>,
    /// How long a request that fails on its own (`error_rate`) works before it fails, in the
    /// same forms as `service_time` (default: its `service_time`). A service whose failures
    /// are its slow tail (hung requests cut at a deadline, say) is one whose answered time
    /// and failed time differ.
    pub error_time: Option<ServiceTimeFile>,
    /// Share of handled requests that never answer (default 0).
    pub hang_rate: Option<f64>,
    /// The calls each handler makes after its own work, in order.
    #[serde(default)]
    pub calls: Vec<CallFile>,
}

/// How a service admits work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionKind {
    /// One FIFO queue in front of the workers.
    Fifo,
    /// rampart's `CriticalityLimit`.
    Criticality,
}

/// Where a service takes a request's level from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelsKind {
    /// `X-Criticality`.
    Wire,
    /// The route (the root's level, `CriticalPlus` included).
    Route,
}

/// A service time: `median` and `p99` (lognormal), or a `histogram`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceTimeFile {
    /// The lognormal's median.
    pub median: Option<Span>,
    /// The lognormal's 99th percentile.
    pub p99: Option<Span>,
    /// `[latency, weight]` pairs.
    pub histogram: Option<Vec<(Span, f64)>>,
}

/// One entry of a service's calls.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallFile {
    /// The callee.
    pub to: Option<String>,
    /// The client policy, by name in the policy file.
    pub policy: Option<String>,
    /// Calls per request (default 1).
    pub count: Option<u32>,
    /// The share of the handler's requests that make this entry's calls, in (0, 1] (default
    /// 1: every request); drawn for each request from the run's seed.
    pub share: Option<f64>,
    /// How the `count` calls go: `"parallel"` (default) or `"sequence"`.
    pub mode: Option<Mode>,
    /// Run alongside the entry before instead of after it (default false).
    pub with_previous: Option<bool>,
    /// Send the deadline and level on the wire (default true).
    pub propagate: Option<bool>,
    /// The time each attempt spends outside the callee: on the wire both ways and in the
    /// caller's client stack (default none), in `service_time`'s forms.
    pub wire: Option<ServiceTimeFile>,
}

/// At once or one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// At once.
    Parallel,
    /// One after another.
    Sequence,
}

/// The root requests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficFile {
    /// How long the edge waits for each root (its deadline).
    pub deadline: Option<Span>,
    /// Roots sent before this are not measured (default 0).
    pub warmup: Option<Span>,
    /// How long the run goes on after the last root is sent (default 30s).
    pub linger: Option<Span>,
    /// The policy the edge calls the entry through (default: one attempt under the root's
    /// deadline).
    pub policy: Option<String>,
    /// The edge sends the root's deadline and level on the wire (default true).
    pub propagate: Option<bool>,
    /// The share of roots at each level (default every root `critical`).
    pub mix: Option<MixFile>,
    /// The root rate over time, one segment after another.
    pub segments: Option<Vec<SegmentFile>>,
}

/// Shares of roots by level; they need not sum to 1 (they are normalized).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixFile {
    /// `Sheddable`.
    pub sheddable: Option<f64>,
    /// `SheddablePlus`.
    pub sheddable_plus: Option<f64>,
    /// `Critical`.
    pub critical: Option<f64>,
    /// `CriticalPlus`.
    pub critical_plus: Option<f64>,
}

/// One segment of the root rate.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentFile {
    /// `"steady"`, `"ramp"` or `"spike"`.
    pub kind: Option<SegmentKind>,
    /// Roots per second (steady and spike).
    pub rate: Option<f64>,
    /// The rate at the start (ramp).
    pub from: Option<f64>,
    /// The rate at the end (ramp).
    pub to: Option<f64>,
    /// How long the segment lasts.
    #[serde(rename = "for")]
    pub lasts: Option<Span>,
}

/// The kinds of segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// A constant rate.
    Steady,
    /// A rate changing linearly from `from` to `to`.
    Ramp,
    /// A constant rate, named as a spike.
    Spike,
}

/// One fault over a window of the run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultFile {
    /// `"outage"`, `"latency"` or `"capacity"`.
    pub kind: Option<FaultKind>,
    /// The service it strikes.
    pub service: Option<String>,
    /// When it starts, from the start of the run.
    pub from: Option<Span>,
    /// When it ends, from the start of the run.
    pub to: Option<Span>,
    /// What each handler takes longer (latency).
    pub added: Option<Span>,
    /// The workers left (capacity).
    pub workers: Option<u32>,
}

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Every request refused.
    Outage,
    /// Every handler slower.
    Latency,
    /// Fewer workers.
    Capacity,
}

/// A named scenario: the traffic and faults it replaces.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// One line about it.
    pub summary: Option<String>,
    /// Its traffic, instead of the default's.
    pub traffic: Option<TrafficFile>,
    /// Its faults, instead of the default's.
    pub faults: Option<Vec<FaultFile>>,
}
