//! Checking a graph file: every problem at once, each under its key path, then the graph the
//! simulator runs. The services, their calls and the shape of the graph are checked here; the
//! traffic and faults in [`traffic`](super::traffic).

use std::collections::BTreeMap;
use std::time::Duration;

use rampart::ConfigError;
use rampart::ConfigProblem;
use rampart::config::format_duration;

use super::file::{
    AdmissionKind, CallFile, GraphFile, LevelsKind, Mode, ServiceFile, ServiceTimeFile, Span,
};
use super::traffic::{check_faults, check_traffic};
use super::{DEFAULT_SCENARIO, Edge, Graph, Node};
use crate::contender::SHED_HOLD;
use crate::dist::{Empirical, LogNormal, ServiceTime};
use crate::service::{Admission, LevelSource, ServerSide, ServiceConfig};

/// The problems found so far.
#[derive(Default)]
pub(super) struct Problems(Vec<ConfigProblem>);

impl Problems {
    pub(super) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigProblem::new(path.into(), message));
    }

    pub(super) fn required<T: Copy>(
        &mut self,
        value: Option<T>,
        path: &str,
        why: &str,
    ) -> Option<T> {
        if value.is_none() {
            self.add(path, format!("is required{why}"));
        }
        value
    }

    pub(super) fn not_for(
        &mut self,
        set: bool,
        path: &str,
        value: impl std::fmt::Display,
        what: &str,
    ) {
        if set {
            self.add(path, format!("does not apply to {what} (was {value})"));
        }
    }

    pub(super) fn share(&mut self, value: Option<f64>, path: &str) -> f64 {
        let share = value.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&share) {
            self.add(path, format!("must be between 0 and 1 (was {share})"));
        }
        share
    }

    pub(super) fn rate(&mut self, value: Option<f64>, path: &str, kind: &str) -> Option<f64> {
        let rate = self.required(value, path, &format!(" for a {kind} segment"))?;
        if !(rate.is_finite() && rate >= 0.0) {
            self.add(
                path,
                format!("must be a finite number of roots per second, at least 0 (was {rate})"),
            );
            return None;
        }
        Some(rate)
    }
}

pub(super) fn show(span: Option<Span>) -> String {
    span.map_or_else(String::new, |s| format_duration(s.0))
}

fn leak(name: &str) -> &'static str {
    // The simulator names services with `&'static str` (they live for the whole program);
    // a graph file's few names are leaked once per load.
    Box::leak(name.to_owned().into_boxed_str())
}

impl GraphFile {
    /// Checks the whole file (every scenario) and returns the graph of `scenario` (the
    /// default one when `None` or `"default"`).
    ///
    /// # Errors
    ///
    /// Every problem of the file at once, each under its key path
    /// (`services.cart.workers must be at least 1 (was 0)`).
    pub fn check(&self, scenario: Option<&str>) -> Result<Graph, ConfigError> {
        let mut p = Problems::default();
        let names: Vec<&str> = self.services.keys().map(String::as_str).collect();
        let index = |name: &str| names.iter().position(|n| *n == name);
        let entry = match p.required(self.entry.as_deref(), "entry", "") {
            Some(name) => {
                let found = index(name);
                if found.is_none() {
                    p.add(
                        "entry",
                        format!(
                            "names no service (was {name:?}, the services: {})",
                            names.join(", ")
                        ),
                    );
                }
                found
            }
            None => None,
        };
        let mut nodes = Vec::new();
        for (name, service) in &self.services {
            nodes.push(check_service(&mut p, name, service, &names));
        }
        let tiers = tiers(&mut p, &nodes, &names, entry);
        let base_traffic = match &self.traffic {
            Some(t) => check_traffic(&mut p, "traffic", t),
            None => {
                p.add("traffic", "is required");
                None
            }
        };
        let base_faults = check_faults(&mut p, "faults", &self.faults, &names, &self.services);
        let mut scenarios = BTreeMap::new();
        for (name, s) in &self.scenarios {
            if name == DEFAULT_SCENARIO {
                p.add(
                    format!("scenarios.{name}"),
                    "is the name of the file's own traffic and faults; choose another",
                );
            }
            let traffic = s
                .traffic
                .as_ref()
                .map(|t| check_traffic(&mut p, &format!("scenarios.{name}.traffic"), t));
            let faults = s.faults.as_ref().map(|f| {
                let path = format!("scenarios.{name}.faults");
                check_faults(&mut p, &path, f, &names, &self.services)
            });
            scenarios.insert(name.as_str(), (s.summary.clone(), traffic, faults));
        }
        let chosen = scenario.filter(|s| *s != DEFAULT_SCENARIO);
        let (summary, traffic, faults) = match chosen {
            None => (None, base_traffic, base_faults),
            Some(name) => match scenarios.remove(name) {
                Some((summary, traffic, faults)) => (
                    summary,
                    traffic.unwrap_or(base_traffic),
                    faults.unwrap_or(base_faults),
                ),
                None => {
                    let mut all = vec![DEFAULT_SCENARIO];
                    all.extend(self.scenarios.keys().map(String::as_str));
                    p.add(
                        format!("scenarios.{name}"),
                        format!("is not in the file (it has: {})", all.join(", ")),
                    );
                    (None, None, Vec::new())
                }
            },
        };
        if !p.0.is_empty() {
            return Err(ConfigError::new(p.0));
        }
        let (Some(entry), Some(traffic)) = (entry, traffic) else {
            return Err(ConfigError::new(vec![ConfigProblem::new(
                "entry",
                "could not be checked",
            )]));
        };
        let mut services = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.into_iter().enumerate() {
            let Some(mut node) = node else {
                return Err(ConfigError::new(vec![ConfigProblem::new(
                    format!("services.{}", names[i]),
                    "could not be checked",
                )]));
            };
            node.tier = tiers[i].unwrap_or(0);
            for (service, fault) in &faults {
                if *service == i {
                    node.config.timeline.push(*fault);
                }
            }
            services.push(node);
        }
        Ok(Graph {
            scenario: chosen.unwrap_or(DEFAULT_SCENARIO).to_owned(),
            summary,
            entry,
            services,
            traffic,
            faults: faults
                .into_iter()
                .map(|(i, f)| (names[i].to_owned(), f))
                .collect(),
        })
    }
}

fn check_service(p: &mut Problems, name: &str, s: &ServiceFile, names: &[&str]) -> Option<Node> {
    let at = |key: &str| format!("services.{name}.{key}");
    let workers = p.required(s.workers, &at("workers"), "");
    if workers == Some(0) {
        p.add(at("workers"), "must be at least 1 (was 0)");
    }
    let admission = match s.admission.unwrap_or(AdmissionKind::Fifo) {
        AdmissionKind::Fifo => {
            p.not_for(
                s.hold.is_some(),
                &at("hold"),
                show(s.hold),
                "fifo admission",
            );
            Admission::Fifo
        }
        AdmissionKind::Criticality => {
            let hold = s.hold.map_or(SHED_HOLD, |h| h.0);
            if hold.is_zero() {
                p.add(at("hold"), "must be positive (was 0ns)");
            }
            Admission::Criticality { hold }
        }
    };
    let inbound = s.inbound.unwrap_or(false);
    if !inbound {
        let what = "a service without inbound = true";
        p.not_for(s.reserve.is_some(), &at("reserve"), show(s.reserve), what);
        let expired = s.reject_expired.unwrap_or(false);
        p.not_for(
            s.reject_expired.is_some(),
            &at("reject_expired"),
            expired,
            what,
        );
        let enforce = s.enforce.unwrap_or(false);
        p.not_for(s.enforce.is_some(), &at("enforce"), enforce, what);
    }
    let service_time = match &s.service_time {
        Some(t) => check_service_time(p, &at("service_time"), t),
        None => {
            p.add(at("service_time"), "is required");
            None
        }
    };
    let error_rate = p.share(s.error_rate, &at("error_rate"));
    let error_time = s
        .error_time
        .as_ref()
        .and_then(|t| check_service_time(p, &at("error_time"), t));
    if s.error_time.is_some() && s.error_rate.unwrap_or(0.0) == 0.0 {
        p.add(
            at("error_time"),
            "is set but no request fails on its own (error_rate is 0)",
        );
    }
    let hang_rate = p.share(s.hang_rate, &at("hang_rate"));
    let mut steps: Vec<Vec<Edge>> = Vec::new();
    for (i, call) in s.calls.iter().enumerate() {
        let path = at(&format!("calls[{i}]"));
        let edge = check_call(p, &path, name, call, names);
        if call.with_previous == Some(true) && i == 0 {
            p.add(
                format!("{path}.with_previous"),
                "has no entry before it (was true)",
            );
        }
        if let Some(edge) = edge {
            match steps.last_mut() {
                Some(step) if call.with_previous == Some(true) => step.push(edge),
                _ => steps.push(vec![edge]),
            }
        }
    }
    let (workers, service_time) = (workers?, service_time?);
    let mut config = ServiceConfig::new(leak(name), workers, s.queue.unwrap_or(0), service_time);
    config.faults.error_rate = error_rate;
    config.error_time = error_time;
    config.faults.hang_rate = hang_rate;
    config.levels = match s.levels.unwrap_or(LevelsKind::Wire) {
        LevelsKind::Wire => LevelSource::Wire,
        LevelsKind::Route => LevelSource::Route,
    };
    Some(Node {
        config,
        server: ServerSide {
            admission,
            inbound,
            reserve: s.reserve.map_or(Duration::ZERO, |r| r.0),
            reject_expired: s.reject_expired.unwrap_or(false),
            enforce: s.enforce.unwrap_or(false),
        },
        steps,
        tier: 0,
    })
}

fn check_service_time(p: &mut Problems, at: &str, t: &ServiceTimeFile) -> Option<ServiceTime> {
    match (&t.histogram, t.median, t.p99) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            p.add(
                format!("{at}.histogram"),
                "cannot be set with median and p99 (give one form: a histogram, or a lognormal's median and p99)",
            );
            None
        }
        (Some(histogram), None, None) => {
            if histogram.is_empty() {
                p.add(
                    format!("{at}.histogram"),
                    "must have at least one [latency, weight] pair",
                );
                return None;
            }
            let mut fine = true;
            for (i, &(_, weight)) in histogram.iter().enumerate() {
                if !(weight.is_finite() && weight >= 0.0) {
                    p.add(
                        format!("{at}.histogram[{i}]"),
                        format!("weight must be a finite number, at least 0 (was {weight})"),
                    );
                    fine = false;
                }
            }
            let pairs: Vec<(Duration, f64)> = histogram.iter().map(|&(d, w)| (d.0, w)).collect();
            let empirical = Empirical::new(&pairs);
            if fine && empirical.is_none() {
                p.add(format!("{at}.histogram"), "weights must not all be 0");
            }
            empirical.map(ServiceTime::from)
        }
        (None, median, p99) => {
            let why = " (or give a histogram)";
            let median = p.required(median, &format!("{at}.median"), why);
            let p99 = p.required(p99, &format!("{at}.p99"), why);
            let (median, p99) = (median?, p99?);
            if median.0.is_zero() {
                p.add(format!("{at}.median"), "must be positive (was 0ns)");
                return None;
            }
            if p99 < median {
                p.add(
                    format!("{at}.p99"),
                    format!(
                        "must be at least the median (was {}, median {})",
                        format_duration(p99.0),
                        format_duration(median.0)
                    ),
                );
                return None;
            }
            Some(LogNormal::from_median_p99(median.0, p99.0).into())
        }
    }
}

fn check_call(
    p: &mut Problems,
    path: &str,
    caller: &str,
    call: &CallFile,
    names: &[&str],
) -> Option<Edge> {
    let to = match p.required(call.to.as_deref(), &format!("{path}.to"), "") {
        Some(to) if to == caller => {
            p.add(
                format!("{path}.to"),
                format!("names the service itself (was {to:?})"),
            );
            None
        }
        Some(to) => {
            let found = names.iter().position(|n| *n == to);
            if found.is_none() {
                p.add(
                    format!("{path}.to"),
                    format!(
                        "names no service (was {to:?}, the services: {})",
                        names.join(", ")
                    ),
                );
            }
            found
        }
        None => None,
    };
    let policy = p.required(call.policy.as_deref(), &format!("{path}.policy"), "");
    if call.count == Some(0) {
        p.add(format!("{path}.count"), "must be at least 1 (was 0)");
    }
    let share = call.share.unwrap_or(1.0);
    if !(share > 0.0 && share <= 1.0) {
        p.add(
            format!("{path}.share"),
            format!("must be above 0 and at most 1 (was {share})"),
        );
    }
    let wire = call
        .wire
        .as_ref()
        .and_then(|t| check_service_time(p, &format!("{path}.wire"), t));
    Some(Edge {
        to: to?,
        policy: policy?.to_owned(),
        count: call.count.unwrap_or(1).max(1),
        share,
        parallel: call.mode.unwrap_or(Mode::Parallel) == Mode::Parallel,
        propagate: call.propagate.unwrap_or(true),
        wire: wire.filter(|w| !w.mean().is_zero()),
        path: path.to_owned(),
    })
}

/// Each service's tier (calls from the entry); problems for cycles and for services the
/// entry never reaches.
fn tiers(
    p: &mut Problems,
    nodes: &[Option<Node>],
    names: &[&str],
    entry: Option<usize>,
) -> Vec<Option<usize>> {
    let callees = |i: usize| -> Vec<(usize, &str)> {
        nodes[i].as_ref().map_or_else(Vec::new, |n| {
            n.steps
                .iter()
                .flatten()
                .map(|e| (e.to, e.path.as_str()))
                .collect()
        })
    };
    // A cycle: a depth-first search that meets a service on its own path.
    let mut state = vec![0u8; nodes.len()]; // 0 unseen, 1 on the path, 2 done
    let mut cycle = None;
    for start in 0..nodes.len() {
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (at, ref mut next)) = stack.last_mut() {
            if *next == 0 {
                if state[at] == 2 {
                    stack.pop();
                    continue;
                }
                state[at] = 1;
            }
            let list = callees(at);
            if let Some(&(to, path)) = list.get(*next) {
                *next += 1;
                if state[to] == 1 && cycle.is_none() {
                    let from = stack.iter().position(|&(s, _)| s == to).unwrap_or(0);
                    let mut loop_names: Vec<&str> =
                        stack[from..].iter().map(|&(s, _)| names[s]).collect();
                    loop_names.push(names[to]);
                    cycle = Some((format!("{path}.to"), loop_names.join(" → ")));
                } else if state[to] == 0 {
                    stack.push((to, 0));
                }
            } else {
                state[at] = 2;
                stack.pop();
            }
        }
    }
    if let Some((path, loop_names)) = &cycle {
        p.add(
            path.clone(),
            format!("makes a cycle ({loop_names}), which a call graph cannot have"),
        );
    }
    let mut tier = vec![None; nodes.len()];
    let Some(entry) = entry else {
        return tier;
    };
    if cycle.is_some() {
        return tier;
    }
    tier[entry] = Some(0);
    let mut frontier = vec![entry];
    let mut depth = 0;
    while !frontier.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for &at in &frontier {
            for (to, _) in callees(at) {
                if tier[to].is_none() {
                    tier[to] = Some(depth);
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    for (i, t) in tier.iter().enumerate() {
        if t.is_none() && nodes[i].is_some() {
            p.add(
                format!("services.{}", names[i]),
                format!("is not reached from the entry ({})", names[entry]),
            );
        }
    }
    tier
}
