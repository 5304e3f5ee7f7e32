//! Checking a graph file's traffic and faults (the file's own and each scenario's): every
//! problem under its key path, and the load and timed faults the simulator runs.

use std::collections::BTreeMap;
use std::time::Duration;

use rampart::config::format_duration;

use super::Traffic;
use super::check::{Problems, show};
use super::file::{FaultFile, FaultKind, SegmentFile, SegmentKind, ServiceFile, TrafficFile};
use crate::service::{TimedFault, Window};
use crate::sim::{ALL_CRITICAL, Load, Mix};

/// How finely a ramp is cut into constant steps.
const RAMP_STEP: Duration = Duration::from_millis(100);

pub(super) fn check_traffic(p: &mut Problems, at: &str, t: &TrafficFile) -> Option<Traffic> {
    let key = |k: &str| format!("{at}.{k}");
    let deadline = p.required(t.deadline, &key("deadline"), "");
    if deadline.is_some_and(|d| d.0.is_zero()) {
        p.add(key("deadline"), "must be positive (was 0ns)");
    }
    let mix = match &t.mix {
        None => ALL_CRITICAL,
        Some(m) => {
            let mut mix: Mix = [0.0; 4];
            for (i, (name, share)) in [
                ("sheddable", m.sheddable),
                ("sheddable_plus", m.sheddable_plus),
                ("critical", m.critical),
                ("critical_plus", m.critical_plus),
            ]
            .into_iter()
            .enumerate()
            {
                let share = share.unwrap_or(0.0);
                if !(share.is_finite() && share >= 0.0) {
                    p.add(
                        key(&format!("mix.{name}")),
                        format!("must be a finite share, at least 0 (was {share})"),
                    );
                } else {
                    mix[i] = share;
                }
            }
            if mix.iter().sum::<f64>() <= 0.0 {
                p.add(key("mix"), "must give some level a share above 0");
            }
            mix
        }
    };
    let mut phases = Vec::new();
    let mut total = Duration::ZERO;
    let mut described = Vec::new();
    match t.segments.as_deref() {
        None | Some([]) => p.add(key("segments"), "must have at least one segment"),
        Some(segments) => {
            let (mut sends, mut checked) = (false, 0);
            for (i, s) in segments.iter().enumerate() {
                let path = key(&format!("segments[{i}]"));
                if let Some((lasts, rates, text)) = check_segment(p, &path, s) {
                    sends |= rates.0 > 0.0 || rates.1 > 0.0;
                    push_phases(&mut phases, total, lasts, rates);
                    total += lasts;
                    described.push(text);
                    checked += 1;
                }
            }
            if !sends && checked == segments.len() {
                p.add(key("segments"), "must send some roots (every rate is 0)");
            }
        }
    }
    let warmup = t.warmup.map_or(Duration::ZERO, |w| w.0);
    if !total.is_zero() && warmup >= total {
        p.add(
            key("warmup"),
            format!(
                "must be shorter than the segments' {} (was {})",
                format_duration(total),
                format_duration(warmup)
            ),
        );
    }
    if t.policy.as_deref() == Some("") {
        p.add(key("policy"), "must name a policy (was \"\")");
    }
    let deadline = deadline?.0;
    if total.is_zero() {
        return None;
    }
    Some(Traffic {
        load: Load {
            phases,
            duration: total,
            warmup,
            patience: deadline,
            patience_change: None,
            mix,
        },
        policy: t.policy.clone(),
        propagate: t.propagate.unwrap_or(true),
        linger: t.linger.map_or(Duration::from_secs(30), |l| l.0),
        segments: described,
    })
}

/// A segment's length, its rates at start and end, and a description.
fn check_segment(
    p: &mut Problems,
    path: &str,
    s: &SegmentFile,
) -> Option<(Duration, (f64, f64), String)> {
    let kind = p.required(s.kind, &format!("{path}.kind"), " (steady, ramp or spike)");
    let lasts = p.required(s.lasts, &format!("{path}.for"), "");
    if lasts.is_some_and(|l| l.0.is_zero()) {
        p.add(format!("{path}.for"), "must be positive (was 0ns)");
    }
    let rates = match kind? {
        SegmentKind::Steady | SegmentKind::Spike => {
            let name = if kind == Some(SegmentKind::Spike) {
                "spike"
            } else {
                "steady"
            };
            let what = format!("a {name} segment");
            p.not_for(
                s.from.is_some(),
                &format!("{path}.from"),
                s.from.unwrap_or(0.0),
                &what,
            );
            p.not_for(
                s.to.is_some(),
                &format!("{path}.to"),
                s.to.unwrap_or(0.0),
                &what,
            );
            let rate = p.rate(s.rate, &format!("{path}.rate"), name);
            (rate, rate)
        }
        SegmentKind::Ramp => {
            let what = "a ramp segment (give from and to)";
            p.not_for(
                s.rate.is_some(),
                &format!("{path}.rate"),
                s.rate.unwrap_or(0.0),
                what,
            );
            let from = p.rate(s.from, &format!("{path}.from"), "ramp");
            let to = p.rate(s.to, &format!("{path}.to"), "ramp");
            (from, to)
        }
    };
    let rates = (rates.0?, rates.1?);
    let lasts = lasts?.0;
    if lasts.is_zero() {
        return None;
    }
    let text = match kind? {
        SegmentKind::Ramp => format!(
            "ramp {}/s → {}/s for {}",
            rates.0,
            rates.1,
            format_duration(lasts)
        ),
        SegmentKind::Spike => format!("spike {}/s for {}", rates.0, format_duration(lasts)),
        SegmentKind::Steady => format!("steady {}/s for {}", rates.0, format_duration(lasts)),
    };
    Some((lasts, rates, text))
}

/// Appends a segment starting at `start` to `phases`: one phase, or a ramp cut into steps of
/// at most [`RAMP_STEP`] at the rate of each step's middle.
fn push_phases(
    phases: &mut Vec<(Duration, f64)>,
    start: Duration,
    lasts: Duration,
    rates: (f64, f64),
) {
    let (from, to) = rates;
    if from == to {
        phases.push((start + lasts, from));
        return;
    }
    let steps = lasts.as_nanos().div_ceil(RAMP_STEP.as_nanos()).max(1) as u32;
    for i in 0..steps {
        let until = start + lasts.mul_f64(f64::from(i + 1) / f64::from(steps));
        let middle = (f64::from(i) + 0.5) / f64::from(steps);
        phases.push((until, from + (to - from) * middle));
    }
}

pub(super) fn check_faults(
    p: &mut Problems,
    at: &str,
    faults: &[FaultFile],
    names: &[&str],
    services: &BTreeMap<String, ServiceFile>,
) -> Vec<(usize, TimedFault)> {
    let mut out = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        let path = format!("{at}[{i}]");
        let key = |k: &str| format!("{path}.{k}");
        let kind = p.required(f.kind, &key("kind"), " (outage, latency or capacity)");
        let service = match p.required(f.service.as_deref(), &key("service"), "") {
            Some(name) => {
                let found = names.iter().position(|n| *n == name);
                if found.is_none() {
                    p.add(
                        key("service"),
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
        let from = p.required(f.from, &key("from"), "");
        let to = p.required(f.to, &key("to"), "");
        if let (Some(from), Some(to)) = (from, to)
            && from >= to
        {
            p.add(
                key("from"),
                format!(
                    "must be before to (was {}, to {})",
                    format_duration(from.0),
                    format_duration(to.0)
                ),
            );
        }
        let fault = match kind {
            None => None,
            Some(FaultKind::Outage) => {
                p.not_for(f.added.is_some(), &key("added"), show(f.added), "an outage");
                p.not_for(
                    f.workers.is_some(),
                    &key("workers"),
                    f.workers.unwrap_or(0),
                    "an outage",
                );
                Some(Kind::Outage)
            }
            Some(FaultKind::Latency) => {
                let what = "a latency fault";
                p.not_for(
                    f.workers.is_some(),
                    &key("workers"),
                    f.workers.unwrap_or(0),
                    what,
                );
                let added = p.required(f.added, &key("added"), " for a latency fault");
                if added.is_some_and(|a| a.0.is_zero()) {
                    p.add(key("added"), "must be positive (was 0ns)");
                }
                added.map(|a| Kind::Latency(a.0))
            }
            Some(FaultKind::Capacity) => {
                let what = "a capacity fault";
                p.not_for(f.added.is_some(), &key("added"), show(f.added), what);
                let workers = p.required(
                    f.workers,
                    &key("workers"),
                    " (the workers left) for a capacity fault",
                );
                if workers == Some(0) {
                    p.add(
                        key("workers"),
                        "must be at least 1 (was 0; an outage is kind = \"outage\")",
                    );
                }
                if let (Some(left), Some(service)) = (workers, service)
                    && let Some(all) = services.get(names[service]).and_then(|s| s.workers)
                    && left >= all
                {
                    p.add(
                        key("workers"),
                        format!("must be fewer than the service's {all} workers (was {left})"),
                    );
                }
                workers.map(Kind::Capacity)
            }
        };
        if let (Some(fault), Some(service), Some(from), Some(to)) = (fault, service, from, to) {
            let window = Window {
                from: from.0,
                to: to.0,
            };
            out.push((
                service,
                match fault {
                    Kind::Outage => TimedFault::Outage(window),
                    Kind::Latency(added) => TimedFault::AddedLatency(window, added),
                    Kind::Capacity(left) => TimedFault::LostCapacity(window, left.max(1)),
                },
            ));
        }
    }
    out
}

enum Kind {
    Outage,
    Latency(Duration),
    Capacity(u32),
}
