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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use rampart::config::{Policies, PolicyConfig};
use serde_json::{Value, json};

use crate::SimError;
use crate::graph::{Graph, Outcome};
use crate::import::{ImportedGraph, otlp_to_graph};
use crate::report::{Table, escape, page_head};
use crate::scenario::{Runner, ms, pct};
use crate::sim::quantile;
use crate::spans::{RecordedSpan, SpanKind, write_otlp};
use crate::whatif::{self, PolicyFile};

use phases::{PARTS, Phases};

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

/// [`Row::phases`] as JSON: predicted and measured, each its roots and the mean of each part
/// in milliseconds (`null` where no such root answered).
fn phases_json(phases: [Option<Phases>; 2]) -> Value {
    let side = |x: Option<Phases>| {
        x.map_or(Value::Null, |x| {
            let parts: serde_json::Map<String, Value> = PARTS
                .iter()
                .zip(x.means)
                .map(|(part, mean)| ((*part).to_owned(), Value::from(mean)))
                .collect();
            json!({ "roots": x.roots, "mean_ms": parts })
        })
    };
    json!({ "predicted": side(phases[0]), "measured": side(phases[1]) })
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

fn signed_pts(d: f64) -> String {
    format!("{:+.1} pts", d * 100.0)
}

fn signed_ms(d: f64) -> String {
    format!("{d:+.1}")
}

fn signed(d: f64) -> String {
    format!("{d:+.3}")
}

/// The columns of both tables: `first`, then each number predicted, measured and the error.
fn columns(first: &'static str) -> [&'static str; 10] {
    [
        first,
        "in time: predicted",
        "measured",
        "error",
        "p99 ms: predicted",
        "measured",
        "error",
        "leaf/root: predicted",
        "measured",
        "error",
    ]
}

impl Validation {
    /// The tables: predicted against measured per policy file; each change's effect on the
    /// baseline, predicted against measured; and where the time of the roots whose leaf call
    /// was sent twice went, predicted against measured ([`phases`]).
    pub fn tables(&self) -> [Table; 3] {
        let mut side = Table::new(
            format!(
                "predicted (what-if on the imported graph) against measured (the real chain), {} roots per real run at {RATE:.0}/s, seed {}; error = predicted − measured",
                self.roots, self.seed
            ),
            &columns("policy file"),
        );
        for row in &self.rows {
            let (p, m) = (row.predicted, row.measured);
            side.row(vec![
                row.file.to_owned(),
                pct(p.in_time),
                pct(m.in_time),
                signed_pts(p.in_time - m.in_time),
                format!("{:.1}", ms(p.p99)),
                format!("{:.1}", ms(m.p99)),
                signed_ms(ms(p.p99) - ms(m.p99)),
                format!("{:.3}", p.leaf_per_root),
                format!("{:.3}", m.leaf_per_root),
                signed(p.leaf_per_root - m.leaf_per_root),
            ]);
        }
        let mut effect = Table::new(
            "each change's effect on the baseline (change − baseline): predicted against measured; error = predicted − measured",
            &columns("change"),
        );
        if let Some((base, changes)) = self.rows.split_first() {
            for row in changes {
                let d = |n: fn(&Numbers) -> f64| {
                    let p = n(&row.predicted) - n(&base.predicted);
                    let m = n(&row.measured) - n(&base.measured);
                    (p, m, p - m)
                };
                let (a, b, c) = (d(|n| n.in_time), d(|n| ms(n.p99)), d(|n| n.leaf_per_root));
                effect.row(vec![
                    row.name.to_owned(),
                    signed_pts(a.0),
                    signed_pts(a.1),
                    signed_pts(a.2),
                    signed_ms(b.0),
                    signed_ms(b.1),
                    signed_ms(b.2),
                    signed(c.0),
                    signed(c.1),
                    signed(c.2),
                ]);
            }
        }
        [side, effect, self.phases_table()]
    }

    /// Where the time of the roots whose middle sent the leaf a second attempt went, for each
    /// file where such roots answered on either side: the slow roots a change rescues, and so
    /// what its p99 is made of.
    fn phases_table(&self) -> Table {
        let mut table = Table::new(
            "roots whose middle sent the leaf a second attempt (a retry or a hedge): where their time went, mean ms; predicted (the imported graph simulated and traced under the file, same seed) against measured (the real run's spans); error = predicted − measured",
            &["policy file", "part", "predicted", "measured", "error"],
        );
        for row in &self.rows {
            let [p, m] = row.phases;
            if p.is_none() && m.is_none() {
                continue;
            }
            let count = |x: Option<Phases>| x.map_or(0, |x| x.roots).to_string();
            table.row(vec![
                row.file.to_owned(),
                "roots".to_owned(),
                count(p),
                count(m),
                String::new(),
            ]);
            for (i, part) in PARTS.iter().enumerate() {
                let mean = |x: Option<Phases>| x.map(|x| x.means[i]);
                let shown = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.2}"));
                let error = match (mean(p), mean(m)) {
                    (Some(a), Some(b)) => format!("{:+.2}", a - b),
                    _ => "–".to_owned(),
                };
                table.row(vec![
                    String::new(),
                    (*part).to_owned(),
                    shown(mean(p)),
                    shown(mean(m)),
                    error,
                ]);
            }
        }
        table
    }

    /// The report as text: what was imported, the policy files' configurations, the tables.
    pub fn text(&self) -> String {
        let mut out = self.preamble();
        out.push('\n');
        for table in self.tables() {
            out.push_str(&table.text());
            out.push('\n');
        }
        out.push_str(&self.closing());
        out
    }

    /// The report as one self-contained HTML page (the default report's styles; no scripts,
    /// fonts or linked files): what was imported and the policy files as the text says them,
    /// then the two tables, then the closing notes.
    pub fn html(&self) -> String {
        let mut out = page_head("rampart-sim validate");
        out.push_str("<h1>The what-if against the real chain</h1>\n");
        let _ = writeln!(
            out,
            "<section><h2>What was recorded, imported and filled in</h2>\n<pre>{}</pre></section>",
            escape(&self.preamble())
        );
        out.push_str("<section><h2>Predicted against measured</h2>\n");
        for table in self.tables() {
            out.push_str(&table.html());
        }
        let _ = writeln!(
            out,
            "<pre>{}</pre></section>\n</body>\n</html>",
            escape(&self.closing())
        );
        out
    }

    /// Writes [`html`](Self::html) to `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be written (the message names it).
    pub fn write_html(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, self.html())
            .map_err(|e| SimError::new(format!("cannot write {}: {e}", path.display())))
    }

    /// What was recorded and imported, what was filled in, and the policy files.
    fn preamble(&self) -> String {
        let mut out = String::new();
        let g = &self.imported;
        let _ = writeln!(
            out,
            "validate: the loopback chain (edge → middle → leaf on 127.0.0.1, rampart-http on every hop; 5% of leaf requests never answer; the client waits 500 ms)"
        );
        let _ = writeln!(
            out,
            "recorded under {}: {} spans in {} traces; imported: entry {}, {} roots",
            FILES[0].1, g.spans, g.traces, g.entry, g.traffic.roots
        );
        for s in &g.services {
            let calls: Vec<String> = s
                .calls
                .iter()
                .map(|c| {
                    format!(
                        "→ {} {:.2}/request ({} retries, {:.1}% failed)",
                        c.to,
                        c.per_parent,
                        c.retries,
                        c.error_rate * 100.0
                    )
                })
                .collect();
            let p = |q: f64| {
                let mut at = 0;
                for &(mean, count) in &s.own_time.buckets {
                    at += count;
                    if at as f64 >= q * s.own_time.samples as f64 {
                        return ms(mean);
                    }
                }
                0.0
            };
            let _ = writeln!(
                out,
                "  {}: {} requests, workers {}, own time p50 {:.1} ms p99 {:.1} ms, errors {:.1}% {}",
                s.name,
                s.requests,
                s.workers,
                p(0.5),
                p(0.99),
                s.error_rate * 100.0,
                calls.join(", ")
            );
        }
        for note in &g.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        // Only a service's own failures: one whose call failed fails with it, and the graph
        // keeps that.
        for s in g.services.iter().filter(|s| s.own_errors > 0) {
            if let Some(slow) = slow_failures(&self.spans, &s.name) {
                let _ = writeln!(
                    out,
                    "  {}: {} of its {} failed requests took longer than its p95 ({:.1} ms); the graph keeps failures (error_rate) and time (service_time) apart, and the what-if draws them independently",
                    s.name,
                    slow.slow,
                    slow.failed,
                    ms(slow.p95)
                );
            }
        }
        let filled: Vec<String> = FILLED.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = writeln!(
            out,
            "filled in (not inferred, known of the chain): {}",
            filled.join(", ")
        );
        let _ = writeln!(out, "\npolicy files (resolved):");
        for row in &self.rows {
            let what = if row.change.is_empty() {
                String::new()
            } else {
                format!(" [{}]", row.change)
            };
            let _ = writeln!(out, "  {} ({}){what}", row.file, row.name);
            for (name, config) in &row.config {
                let _ = writeln!(out, "    policies.{name} = {config}");
            }
        }
        out
    }

    /// What follows the tables: the roots each prediction simulated, and notes.
    fn closing(&self) -> String {
        let mut out = String::new();
        let simulated: Vec<String> = self
            .rows
            .iter()
            .map(|r| format!("{} {}", r.file, r.predicted_roots))
            .collect();
        let _ = writeln!(
            out,
            "predicted roots (simulated at the imported rate): {}",
            simulated.join(", ")
        );
        for row in self.rows.iter().filter(|r| !r.drained) {
            let _ = writeln!(
                out,
                "note: {}: some spans had not ended 5 s after the last root; they are not in the spans",
                row.file
            );
        }
        out
    }

    /// Every number, as JSON: the run's size and seed, what was imported and filled in, then
    /// per policy file its policies (as `what-if --json` writes them), the numbers predicted,
    /// measured and their error, and the what-if's whole run (`outcome`, as `what-if --json`
    /// writes it); then each change's effect on the baseline, predicted, measured and error.
    pub fn json(&self) -> Value {
        let g = &self.imported;
        let services: Vec<Value> = g
            .services
            .iter()
            .map(|s| {
                let calls: Vec<Value> = s
                    .calls
                    .iter()
                    .map(|c| {
                        json!({
                            "to": c.to,
                            "per_request": c.per_parent,
                            "retries": c.retries,
                            "failed_share": c.error_rate,
                        })
                    })
                    .collect();
                json!({
                    "name": s.name,
                    "requests": s.requests,
                    "workers": s.workers,
                    "error_rate": s.error_rate,
                    "hang_rate": s.hang_rate,
                    "calls": calls,
                })
            })
            .collect();
        let filled: serde_json::Map<String, Value> = FILLED
            .iter()
            .map(|(key, value)| {
                // The TOML value as JSON: `"500ms"` a string, `true` a boolean.
                let value = serde_json::to_value(filled_value(value))
                    .unwrap_or_else(|_| Value::from(*value));
                ((*key).to_owned(), value)
            })
            .collect();
        let files: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "name": row.name,
                    "path": row.file,
                    "change": row.change,
                    "policies": whatif::print::policies_json(&row.resolved),
                    "predicted": row.predicted.json(),
                    "measured": row.measured.json(),
                    "error": row.predicted.minus(&row.measured).json(),
                    "predicted_roots": row.predicted_roots,
                    "drained": row.drained,
                    "second_attempt_roots": phases_json(row.phases),
                    "outcome": whatif::print::outcome_json(&row.outcome),
                })
            })
            .collect();
        let effects: Vec<Value> = self
            .rows
            .split_first()
            .map(|(base, changes)| {
                changes
                    .iter()
                    .map(|row| {
                        let predicted = row.predicted.minus(&base.predicted);
                        let measured = row.measured.minus(&base.measured);
                        json!({
                            "change": row.name,
                            "predicted": predicted.json(),
                            "measured": measured.json(),
                            "error": predicted.minus(&measured).json(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "roots_per_real_run": self.roots,
            "rate_per_s": RATE,
            "seed": self.seed,
            "imported": {
                "entry": g.entry,
                "spans": g.spans,
                "traces": g.traces,
                "roots": g.traffic.roots,
                "services": services,
                "notes": g.notes,
            },
            "filled": filled,
            "files": files,
            "effects": effects,
        })
    }

    /// Writes [`json`](Self::json) to `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write_json(&self, path: &Path) -> Result<(), SimError> {
        whatif::print::write_json(path, &self.json())
    }

    /// Writes the baseline's spans (OTLP JSON) to `dir/spans.jsonl` and the graph the what-if
    /// ran to `dir/imported.toml`; returns both paths.
    ///
    /// # Errors
    ///
    /// The folder or a file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<[std::path::PathBuf; 2], SimError> {
        let cannot = |path: &Path, e: std::io::Error| {
            SimError::new(format!("cannot write {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| cannot(dir, e))?;
        let spans = dir.join("spans.jsonl");
        let file = std::fs::File::create(&spans).map_err(|e| cannot(&spans, e))?;
        write_otlp(&self.spans, std::io::BufWriter::new(file)).map_err(|e| cannot(&spans, e))?;
        let graph = dir.join("imported.toml");
        std::fs::write(&graph, &self.graph_file).map_err(|e| cannot(&graph, e))?;
        Ok([spans, graph])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback::PATIENCE;
    use crate::spans::SpanStatus;

    fn server(id: u64, millis: u64, status: SpanStatus) -> RecordedSpan {
        RecordedSpan {
            trace: id,
            id,
            parent: None,
            service: "leaf",
            kind: SpanKind::Server,
            start: Duration::ZERO,
            end: Duration::from_millis(millis),
            status,
            resend: 0,
        }
    }

    #[test]
    fn failures_in_the_slowest_twentieth_are_counted_as_slow() {
        let mut spans: Vec<RecordedSpan> = (0..38)
            .map(|i| server(i, 3, SpanStatus::Http(200)))
            .collect();
        spans.push(server(38, 480, SpanStatus::Http(504)));
        spans.push(server(39, 3, SpanStatus::Http(500)));
        let found = slow_failures(&spans, "leaf").expect("two failed");
        assert_eq!((found.failed, found.slow), (2, 1));
        assert_eq!(found.p95, Duration::from_millis(3));
        assert_eq!(slow_failures(&spans[..38], "leaf"), None);
    }

    /// The loopback chain's shape as the importer writes it, every leaf request hanging, 20
    /// roots; [`fill`] gives it the 500 ms deadline and the inbound layer of every hop.
    const HANGING_CHAIN: &str = r#"
entry = "edge"

[services.edge]
service_time = { histogram = [["200us", 1]] }
calls = [{ to = "middle", policy = "middle" }]

[services.middle]
service_time = { histogram = [["200us", 1]] }
calls = [{ to = "leaf", policy = "leaf" }]

[services.leaf]
service_time = { histogram = [["3ms", 1]] }
hang_rate = 1.0

[traffic]
segments = [{ kind = "steady", rate = 10, for = "2s" }]
"#;

    fn hanging_chain_under(file: usize) -> Outcome {
        let graph = fill(HANGING_CHAIN).expect("filled in");
        let graph = Graph::parse(&graph, None).expect("the chain's graph is valid");
        let (_, name, text) = FILES[file];
        let policies = toml::from_str(text).expect("the policy file parses");
        let file = PolicyFile::check(Path::new(name), policies, &graph).expect("it checks");
        crate::graph::run(&graph, &file.resolved, 1).expect("the run succeeds")
    }

    #[test]
    fn a_hung_leaf_request_takes_the_deadline_so_the_baseline_sends_no_retry() {
        // As rampart-http's outbound layer does, every client reads the ambient deadline. The
        // leaf answers 504 at its deadline (485 ms): the middle has 5 ms of its own left, the
        // edge 10 ms of its own, neither more than the 10 ms floor, so neither retries.
        let baseline = hanging_chain_under(0);
        assert!(baseline.roots > 0);
        assert_eq!(baseline.answered_in_time, 0.0);
        assert_eq!(baseline.leaf_per_root(), 1.0);
        // A 50 ms attempt timeout leaves time for all three of the middle's attempts, and
        // for all three of the edge's, each a middle request of three.
        assert_eq!(hanging_chain_under(1).leaf_per_root(), 9.0);
    }

    /// The chain simulated in place of the real one: [`HANGING_CHAIN`] with one leaf request
    /// in ten hanging, traced under `file`'s policies, counted as the chain counts itself (a
    /// leaf request is one the middle sent: a hung one records no SERVER span).
    fn simulated_chain(file: &Policies) -> Result<chain::Run, SimError> {
        let graph = fill(HANGING_CHAIN)?
            .replace("hang_rate = 1.0", "hang_rate = 0.1")
            .replace("rate = 10", "rate = 30");
        let graph = Graph::parse(&graph, None).map_err(|e| SimError::new(e.to_string()))?;
        let resolved: BTreeMap<String, PolicyConfig> = ["middle", "leaf"]
            .into_iter()
            .filter_map(|name| Some((name.to_owned(), file.resolved(name)?)))
            .collect();
        let (_, spans) = crate::graph::run::trace(&graph, &resolved, 1)?;
        let handled = |service: &'static str| {
            spans
                .iter()
                .filter(move |s| s.service == service && s.kind == SpanKind::Server)
        };
        let mut latencies: Vec<Duration> = handled("edge")
            .filter(|s| s.status == SpanStatus::Http(200) && s.duration() <= PATIENCE)
            .map(RecordedSpan::duration)
            .collect();
        latencies.sort_unstable();
        Ok(chain::Run {
            roots: handled("edge").count(),
            in_time: latencies.len(),
            latencies,
            leaf_requests: spans
                .iter()
                .filter(|s| s.service == "middle" && s.kind == SpanKind::Client)
                .count(),
            spans,
            drained: true,
        })
    }

    #[test]
    fn the_html_page_is_self_contained_and_holds_every_cell_of_the_tables() {
        let v = run_with(60, 1, &Runner::new(1, false), simulated_chain).expect("it runs");
        let page = v.html();
        assert!(
            page.starts_with("<!DOCTYPE html>"),
            "{}",
            &page[..40.min(page.len())]
        );
        assert!(page.trim_end().ends_with("</html>"));
        for linked in ["<script", "<link", "src=", "@import"] {
            assert!(!page.contains(linked), "the page links {linked}");
        }
        for table in v.tables() {
            for row in &table.rows {
                for cell in row {
                    assert!(page.contains(&escape(cell)), "{cell} is not on the page");
                }
            }
        }
        assert!(
            page.contains(&escape(FILES[0].1)),
            "the recorded file is named"
        );
    }

    #[test]
    fn the_json_holds_every_number_of_the_tables_and_what_was_imported() {
        let v = run_with(60, 1, &Runner::new(1, false), simulated_chain).expect("it runs");
        let json = v.json();
        assert_eq!(json["seed"], 1);
        assert_eq!(json["roots_per_real_run"], 60);
        assert_eq!(json["rate_per_s"], RATE);
        assert_eq!(json["imported"]["entry"], "edge");
        assert_eq!(json["imported"]["spans"], v.imported.spans);
        let leaf = json["imported"]["services"]
            .as_array()
            .expect("services")
            .iter()
            .find(|s| s["name"] == "leaf")
            .expect("the leaf was imported");
        assert!(leaf["requests"].as_u64() > Some(0));
        assert_eq!(json["filled"]["traffic.deadline"], "500ms");
        assert_eq!(json["filled"]["services.*.inbound"], true);
        assert_eq!(json["filled"]["services.*.workers"], 10_000);

        let files = json["files"].as_array().expect("files");
        assert_eq!(files.len(), FILES.len());
        assert!(
            v.rows.iter().any(|r| r.phases.iter().any(Option::is_some)),
            "some root sent a second leaf attempt"
        );
        for ((file, row), (name, path, _)) in files.iter().zip(&v.rows).zip(FILES) {
            assert_eq!((&file["name"], &file["path"]), (&name.into(), &path.into()));
            assert_eq!(file["change"], row.change.as_str());
            let leaf = &file["policies"]["leaf"];
            assert!(leaf["explain"].is_string(), "{leaf}");
            assert_eq!(leaf["resolved"]["use_ambient_deadline"], true);
            for (side, numbers) in [("predicted", row.predicted), ("measured", row.measured)] {
                let n = &file[side];
                assert_eq!(n["answered_in_time"], numbers.in_time, "{path} {side}");
                assert_eq!(n["p99_ms"], ms(numbers.p99), "{path} {side}");
                assert_eq!(n["leaf_requests_per_root"], numbers.leaf_per_root);
            }
            let error = row.predicted.leaf_per_root - row.measured.leaf_per_root;
            assert_eq!(file["error"]["leaf_requests_per_root"], error);
            assert_eq!(file["predicted_roots"], row.predicted_roots);
            for (phases, side) in row.phases.iter().zip(["predicted", "measured"]) {
                let json = &file["second_attempt_roots"][side];
                match phases {
                    Some(p) => {
                        assert_eq!(json["roots"], p.roots, "{path} {side}");
                        for (part, mean) in PARTS.iter().zip(p.means) {
                            assert_eq!(json["mean_ms"][part], mean, "{path} {side} {part}");
                        }
                    }
                    None => assert!(json.is_null(), "{path} {side}: {json}"),
                }
            }
            assert_eq!(file["drained"], true);
            assert_eq!(file["outcome"]["measured_roots"], row.outcome.roots);
            assert_eq!(
                file["outcome"]["leaf_requests_per_root"],
                row.predicted.leaf_per_root
            );
        }
        assert_eq!(files[0]["change"], "");
        assert_eq!(
            files[1]["change"],
            "policies.leaf.attempt_timeout: 1s → 50ms"
        );

        let effects = json["effects"].as_array().expect("effects");
        let names: Vec<&Value> = effects.iter().map(|e| &e["change"]).collect();
        assert_eq!(names, ["shorter attempt timeout", "hedging on"]);
        let (base, hedged) = (&v.rows[0], &v.rows[2]);
        let predicted = hedged.predicted.leaf_per_root - base.predicted.leaf_per_root;
        let measured = hedged.measured.leaf_per_root - base.measured.leaf_per_root;
        let effect = &effects[1];
        assert_eq!(effect["predicted"]["leaf_requests_per_root"], predicted);
        assert_eq!(effect["measured"]["leaf_requests_per_root"], measured);
        assert_eq!(
            effect["error"]["leaf_requests_per_root"],
            predicted - measured
        );

        // Written as `--json` writes it: the same JSON, pretty, one line at the end.
        let path =
            std::env::temp_dir().join(format!("rampart-sim-validate-{}.json", std::process::id()));
        v.write_json(&path).expect("written");
        let text = std::fs::read_to_string(&path).expect("the JSON file");
        std::fs::remove_file(&path).expect("cleaned up");
        let pretty = serde_json::to_string_pretty(&json).expect("formatted");
        assert_eq!(text, pretty + "\n");
    }

    #[test]
    fn every_validate_policy_reads_the_ambient_deadline_as_the_outbound_layer_does() {
        for (_, name, text) in FILES {
            let file: Policies = toml::from_str(text).expect("the policy file parses");
            for policy in ["middle", "leaf"] {
                let config = file.resolved(policy).expect("the policy is there");
                assert_eq!(config.use_ambient_deadline, Some(true), "{name}: {policy}");
            }
        }
    }

    #[test]
    fn filling_in_sets_the_deadline_every_services_inbound_layer_and_no_worker_limit() {
        let imported = "entry = \"a\"\n[services.a]\nworkers = 3\n[services.b]\nworkers = 1\n\
                        [traffic]\ndeadline = \"9s\"\n";
        let filled: toml::Table = toml::from_str(&fill(imported).expect("filled")).expect("toml");
        assert_eq!(filled["traffic"]["deadline"].as_str(), Some("500ms"));
        for service in ["a", "b"] {
            let s = &filled["services"][service];
            assert_eq!(s["inbound"].as_bool(), Some(true));
            assert_eq!(s["reserve"].as_str(), Some("5ms"));
            assert_eq!(s["reject_expired"].as_bool(), Some(true));
            assert_eq!(s["enforce"].as_bool(), Some(true));
            assert_eq!(s["workers"].as_integer(), Some(10_000));
        }
    }
}
