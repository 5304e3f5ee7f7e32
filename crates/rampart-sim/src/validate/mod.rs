//! `rampart-sim validate`: the what-if checked against real traffic. The loopback chain runs
//! for real under a baseline policy file while its services record their spans; the importer
//! builds a graph from those spans; the what-if predicts what two policy changes do on that
//! graph; the chain then runs for real under each change, and the report sets predicted
//! against measured.
//!
//! Why: a what-if on an imported graph is only worth what it predicts. The round trip
//! (`tests/roundtrip.rs`) checks the importer against a graph whose truth is known, but every
//! span there came from the simulator itself. Here the spans come from real axum services on
//! 127.0.0.1, through rampart-http's real layers, real sockets and a real clock, and the
//! prediction is judged by running the change, not by another simulation.
//!
//! ```text
//! rampart-sim validate            # 2,000 roots per run, about a minute
//! rampart-sim validate --quick    # 50 roots per run, a few seconds
//! rampart-sim validate --json v.json   # and every number as JSON
//! rampart-sim validate --html v.html   # and the report as one HTML page
//! ```
//!
//! `--json PATH` writes [`Validation::json`]: what was imported and filled in, each policy
//! file's policies and its numbers predicted, measured and their error, the what-if's whole
//! run of it (in `what-if --json`'s form), and each change's effect. `--html PATH` writes
//! [`Validation::html`], the report as a self-contained page.
//!
//! # The steps
//!
//! 1. The chain of [`crate::loopback`] (edge → middle → leaf, rampart-http's `InboundLayer` on
//!    every service, its `OutboundLayer` on every client, the client's 500 ms sent as
//!    `X-Deadline-Ms`; the leaf answers in a lognormal 3 ms, p99 10 ms, and 5% of its requests
//!    never answer) runs under `graphs/validate/baseline.toml`, [`RATE`] roots a second, each
//!    service recording a SERVER span per request and a CLIENT span per attempt
//!    ([`chain`], [`record`]).
//! 2. The spans, written as OTLP JSON ([`write_otlp`]), are imported ([`otlp_to_graph`]).
//!    The keys the importer marks `not inferred` that the chain's owner knows are filled in
//!    ([`FILLED`]): the client's 500 ms, and each service's inbound layer (its reserve,
//!    `reject_expired` and `enforce`). One inferred key is replaced: `workers`, the most
//!    requests seen at once, is a lower bound, and the chain's axum services have no limit (a
//!    hung request holds a worker in the chain, not in the simulation, so the bound would
//!    shed what the chain serves).
//! 3. `what-if` on that graph: the baseline against `shorter-timeout.toml` (the leaf call's
//!    attempt timeout 1 s → 50 ms), and against `hedged.toml` (the leaf call hedged after
//!    20 ms), with the seed given.
//! 4. The chain runs for real under each changed file, with the same leaf fates (each leaf
//!    request's delay is drawn from the seed, its root and its place among the root's leaf
//!    requests).
//! 5. The report: per policy file, predicted and measured answered in time, p99 of the roots
//!    answered in time, and leaf requests per root, with the error (predicted − measured);
//!    then each change's effect on the baseline, predicted against measured; then, for the
//!    roots whose middle sent the leaf a second attempt (the slow roots a change rescues,
//!    whose times make its p99), where their time went, part by part ([`phases`]): the
//!    imported graph simulated and traced under the file against the real run's spans.
//!
//! # Reading the result
//!
//! The report also says how each service's own failures sit in its latency. Here the leaf's
//! requests that never answer are cut by its own inbound layer at the propagated deadline and
//! answered 504 after about 485 ms. The importer reads a service's own 504s as requests that
//! hang (`hang_rate`); with `enforce` filled in, as the chain's inbound layers have it, the
//! simulated leaf answers them 504 at the deadline it received less its reserve, as the
//! chain's did. Before the importer read them so (it wrote them as `error_rate`, drawn
//! independently of the time), the baseline was predicted far better than it is, with a p99
//! near the deadline.
//!
//! The policy files set `use_ambient_deadline = true`, which rampart-http's outbound layer
//! always does (and refuses in a file): without it the simulated clients neither read the
//! deadline their inbound layer received nor send what is left of it, so a hung leaf request
//! held the middle for its 1 s attempt timeout, and the middle and the edge each retried it
//! after the client had gone (1.08 leaf requests per root predicted for the baseline, 1.00
//! measured). With it, the leaf's 504 reaches the middle with 5 ms of its deadline left and
//! the edge with 10 ms, neither more than the 10 ms floor, so neither retries. In the chain
//! the edge has 8 to 11 ms left (each hop loses under a millisecond to its own work and to
//! the whole milliseconds of `X-Deadline-Ms`), and now and then retries.
//!
//! Each call of the imported graph spends its `wire` (the CLIENT span less the SERVER span
//! under it: the wire both ways, the client's stack) before its callee sees it; without it
//! every simulated root was about 0.7 ms shorter than the chain's (two hops of 0.3 to 0.4 ms).
//! What the last table then shows is left: a real timer fires late. tokio rounds a timer up
//! to its millisecond tick and its thread parks for whole milliseconds, so the chain's 20 ms
//! hedge went after 21.1 ms on average, and with the shorter timeout the second attempt
//! (after the leaf's 504 at the 45 ms it received, then a backoff: two timers) went 1.2 ms
//! later than simulated; the simulator's virtual clock fires timers on time. A hedge's second request
//! took about 0.3 to 0.9 ms longer than the simulated one, about 0.35 ms of it outside the
//! leaf (0.69 to 0.77 ms against a first attempt's 0.36): likely a connection of its own, as
//! the pooled one is held by the request it races (not measured). The simulated clock ticks in
//! whole milliseconds (each time drawn either side so that its mean holds), so a predicted
//! p99 is a whole number of milliseconds.
//!
//! The numbers are what they are: the report is printed whatever it shows. Real time on a
//! shared machine moves the measured side by a point or so between runs; the simulated side
//! repeats with its seed.

pub mod chain;
pub mod phases;
pub mod record;
mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rampart::config::{Policies, PolicyConfig};
use serde_json::{Value, json};

use crate::SimError;
use crate::graph::{Graph, Outcome};
use crate::import::{ImportedGraph, otlp_to_graph};
use crate::scenario::{Runner, ms};
use crate::sim::quantile;
use crate::spans::{RecordedSpan, SpanKind, write_otlp};
use crate::whatif::{self, PolicyFile};

use phases::Phases;

/// Root requests per run in a full validation.
pub const ROOTS: usize = 2000;
/// Root requests per run with `--quick`.
pub const QUICK_ROOTS: usize = 50;
/// Root requests sent per second.
pub const RATE: f64 = 100.0;

/// The policy files: the table's name for each, its file name and its text, the baseline
/// first.
pub const FILES: [(&str, &str, &str); 3] = [
    (
        "baseline",
        "baseline.toml",
        include_str!("../../graphs/validate/baseline.toml"),
    ),
    (
        "shorter attempt timeout",
        "shorter-timeout.toml",
        include_str!("../../graphs/validate/shorter-timeout.toml"),
    ),
    (
        "hedging on",
        "hedged.toml",
        include_str!("../../graphs/validate/hedged.toml"),
    ),
];

/// The keys of the imported graph filled in from what the chain's owner knows, not from the
/// spans: `(key, value)`, each service's keys for every service.
pub const FILLED: [(&str, &str); 6] = [
    ("traffic.deadline", "\"500ms\""),
    ("services.*.inbound", "true"),
    ("services.*.reserve", "\"5ms\""),
    ("services.*.reject_expired", "true"),
    ("services.*.enforce", "true"),
    // The importer's `workers` is the most requests seen at once, a lower bound; the chain's
    // axum services have no limit, so the graph gets none either (a hung request holds a
    // worker in the chain until its deadline, not in the simulation).
    ("services.*.workers", "10000"),
];

/// The three numbers compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Numbers {
    /// Share of roots answered 200 within the client's 500 ms.
    pub in_time: f64,
    /// p99 latency of the roots answered in time (nearest rank).
    pub p99: Duration,
    /// Requests reaching the leaf (attempts and hedges) per root.
    pub leaf_per_root: f64,
}

impl Numbers {
    fn predicted(outcome: &Outcome) -> Numbers {
        Numbers {
            in_time: outcome.answered_in_time,
            p99: outcome.latency[1],
            leaf_per_root: outcome.leaf_per_root(),
        }
    }

    /// `self − other`, number by number (an error, or an effect).
    fn minus(&self, other: &Numbers) -> Differences {
        Differences {
            in_time: self.in_time - other.in_time,
            p99_ms: ms(self.p99) - ms(other.p99),
            leaf_per_root: self.leaf_per_root - other.leaf_per_root,
        }
    }

    fn json(&self) -> Value {
        json!({
            "answered_in_time": self.in_time,
            "p99_ms": ms(self.p99),
            "leaf_requests_per_root": self.leaf_per_root,
        })
    }

    fn measured(run: &chain::Run) -> Numbers {
        let roots = run.roots.max(1) as f64;
        Numbers {
            in_time: run.in_time as f64 / roots,
            p99: quantile(&run.latencies, 0.99),
            leaf_per_root: run.leaf_requests as f64 / roots,
        }
    }
}

/// The difference of two [`Numbers`]: a p99 difference may be negative.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Differences {
    in_time: f64,
    p99_ms: f64,
    leaf_per_root: f64,
}

impl Differences {
    fn minus(&self, other: &Differences) -> Differences {
        Differences {
            in_time: self.in_time - other.in_time,
            p99_ms: self.p99_ms - other.p99_ms,
            leaf_per_root: self.leaf_per_root - other.leaf_per_root,
        }
    }

    fn json(&self) -> Value {
        json!({
            "answered_in_time": self.in_time,
            "p99_ms": self.p99_ms,
            "leaf_requests_per_root": self.leaf_per_root,
        })
    }
}

/// One policy file: its configuration, what the what-if predicted and what the chain did.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its name in the table.
    pub name: &'static str,
    /// Its file name.
    pub file: &'static str,
    /// What it changes from the baseline (`key: from → to`), empty for the baseline.
    pub change: String,
    /// Each policy of the file, resolved, on one line: `(name, settings)`.
    pub config: Vec<(String, String)>,
    /// Each policy of the file the graph calls through, resolved.
    pub resolved: BTreeMap<String, PolicyConfig>,
    /// The what-if's run of the file on the imported graph, every number of it.
    pub outcome: Outcome,
    /// The what-if's numbers, on the imported graph.
    pub predicted: Numbers,
    /// The real chain's numbers.
    pub measured: Numbers,
    /// Roots the prediction measured (the simulated traffic's, drawn at the imported rate).
    pub predicted_roots: usize,
    /// Whether every span of the real run had ended when recording stopped.
    pub drained: bool,
    /// Where the time of the roots whose middle sent the leaf a second attempt went:
    /// predicted (a traced simulation of the imported graph under the file, with the seed),
    /// then measured (the real run's spans); `None` where no such root answered.
    pub phases: [Option<Phases>; 2],
}

/// Everything a validation made.
#[derive(Debug, Clone)]
pub struct Validation {
    /// Roots per real run.
    pub roots: usize,
    /// The seed of every run.
    pub seed: u64,
    /// The baseline run's spans.
    pub spans: Vec<RecordedSpan>,
    /// What the importer made of them.
    pub imported: ImportedGraph,
    /// The graph file the what-if ran: the importer's, with [`FILLED`] filled in.
    pub graph_file: String,
    /// The baseline, then each change.
    pub rows: Vec<Row>,
}

/// Runs the validation: `roots` roots per real run, every draw seeded from `seed`, the
/// simulations on `runner`'s threads.
///
/// # Errors
///
/// A policy file does not build (a bug), the chain cannot start, the spans do not import, or
/// a simulation fails.
pub fn run(roots: usize, seed: u64, runner: &Runner) -> Result<Validation, SimError> {
    run_with(roots, seed, runner, |file| {
        let policy = |name: &str| {
            file.resolved(name)
                .ok_or_else(|| SimError::new(format!("no policy named {name:?}")))
        };
        chain::run(&policy("middle")?, &policy("leaf")?, roots, RATE, seed)
    })
}

/// [`run()`] with `real` running the chain under a policy file: the baseline (traced), then
/// each change.
fn run_with(
    roots: usize,
    seed: u64,
    runner: &Runner,
    mut real: impl FnMut(&Policies) -> Result<chain::Run, SimError>,
) -> Result<Validation, SimError> {
    let files: Vec<Policies> = FILES
        .iter()
        .map(|(_, name, text)| {
            toml::from_str(text).map_err(|e| SimError::new(format!("{name}: {e}")))
        })
        .collect::<Result<_, _>>()?;

    // 1. The baseline, for real, traced.
    let baseline = real(&files[0])?;
    // 2. Its spans imported, the known keys filled in.
    let mut otlp = Vec::new();
    write_otlp(&baseline.spans, &mut otlp)
        .map_err(|e| SimError::new(format!("cannot write the spans: {e}")))?;
    let imported = otlp_to_graph(otlp.as_slice())
        .map_err(|e| SimError::new(format!("the recorded spans do not import: {e}")))?;
    let graph_file = fill(&imported.to_toml())?;
    let graph = Graph::parse(&graph_file, None)
        .map_err(|e| SimError::new(format!("the imported graph: {e}")))?;
    // 3. The what-if of each change against the baseline.
    let policy_files: Vec<PolicyFile> = FILES
        .iter()
        .zip(&files)
        .map(|((_, name, _), file)| PolicyFile::check(Path::new(name), file.clone(), &graph))
        .collect::<Result<_, _>>()?;
    let mut predicted: Vec<(Outcome, String)> = Vec::new();
    for changed in &policy_files[1..] {
        let what_if = whatif::run(
            graph.clone(),
            policy_files[0].clone(),
            changed.clone(),
            seed,
            runner,
        )?;
        let [base, outcome] = what_if.outcomes;
        if predicted.is_empty() {
            predicted.push((base, String::new()));
        }
        let change: Vec<String> = what_if
            .attribution
            .iter()
            .map(|a| format!("{}: {} → {}", a.change.path, a.change.from, a.change.to))
            .collect();
        predicted.push((outcome, change.join("; ")));
    }
    // Where the roots sent a second leaf attempt spent their time, as simulated.
    let traced: Vec<Option<Phases>> = policy_files
        .iter()
        .map(|file| {
            let (_, spans) = crate::graph::run::trace(&graph, &file.resolved, seed)?;
            Ok(Phases::of(&spans, "middle"))
        })
        .collect::<Result<_, SimError>>()?;
    // 4. Each change, for real.
    let mut measured = vec![baseline.clone()];
    for file in &files[1..] {
        measured.push(real(file)?);
    }
    // 5. Side by side.
    let rows = FILES
        .iter()
        .zip(&policy_files)
        .zip(predicted.into_iter().zip(&measured))
        .zip(traced)
        .map(
            |((((name, file, _), policies), ((outcome, change), run)), traced)| Row {
                name,
                file,
                change,
                config: policies
                    .resolved
                    .iter()
                    .map(|(name, config)| (name.clone(), whatif::diff::resolved(config)))
                    .collect(),
                resolved: policies.resolved.clone(),
                predicted: Numbers::predicted(&outcome),
                measured: Numbers::measured(run),
                predicted_roots: outcome.roots,
                drained: run.drained,
                phases: [traced, Phases::of(&run.spans, "middle")],
                outcome,
            },
        )
        .collect();
    Ok(Validation {
        roots,
        seed,
        spans: baseline.spans,
        imported,
        graph_file,
        rows,
    })
}

/// The imported graph file with [`FILLED`]'s keys set.
fn fill(imported: &str) -> Result<String, SimError> {
    let mut table: toml::Table = toml::from_str(imported)
        .map_err(|e| SimError::new(format!("the importer wrote no TOML: {e}")))?;
    for (path, value) in FILLED {
        let value = filled_value(value);
        let (section, key) = path.split_once('.').unwrap_or(("", path));
        let Some(toml::Value::Table(section)) = table.get_mut(section) else {
            continue;
        };
        match key.strip_prefix("*.") {
            // Every entry of the section: each service.
            Some(key) => {
                for (_, entry) in section.iter_mut() {
                    if let toml::Value::Table(entry) = entry {
                        entry.insert(key.into(), value.clone());
                    }
                }
            }
            None => {
                section.insert(key.into(), value);
            }
        }
    }
    toml::to_string(&table).map_err(|e| SimError::new(format!("cannot write the graph: {e}")))
}

/// A value of [`FILLED`], written in TOML, as a TOML value.
fn filled_value(value: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| unreachable!("FILLED holds TOML values: {value}"))
}

/// How a service's failed requests sit in its latency: what an imported graph cannot keep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowFailures {
    /// Its failed requests (SERVER spans that record a failure).
    pub failed: usize,
    /// Of them, those that took longer than `p95`.
    pub slow: usize,
    /// The p95 of all its requests (nearest rank).
    pub p95: Duration,
}

/// Of `service`'s SERVER spans in `spans`, the failed ones and how many of them took longer
/// than the p95 of all; `None` when none failed.
pub fn slow_failures(spans: &[RecordedSpan], service: &str) -> Option<SlowFailures> {
    let handled: Vec<&RecordedSpan> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server && s.service == service)
        .collect();
    let mut times: Vec<Duration> = handled.iter().map(|s| s.duration()).collect();
    times.sort_unstable();
    let p95 = quantile(&times, 0.95);
    let failed: Vec<&&RecordedSpan> = handled.iter().filter(|s| s.status.is_error()).collect();
    (!failed.is_empty()).then(|| SlowFailures {
        failed: failed.len(),
        slow: failed.iter().filter(|s| s.duration() > p95).count(),
        p95,
    })
}

#[cfg(test)]
mod tests;
