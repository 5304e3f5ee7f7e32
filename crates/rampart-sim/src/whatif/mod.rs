//! `rampart-sim what-if`: a graph file ([`crate::graph`]) run under two policy files, the
//! same traffic, faults and seed for both, side by side; then which changed setting moved
//! which number.
//!
//! Changing a retry, timeout, budget or hedging setting is otherwise tested in production:
//! "what will 4 attempts instead of 3, or a 200 ms attempt timeout, do to us in the next
//! overload?" This command answers it on a model of the service's own call graph, with the
//! real rampart executor in virtual time. It prints, for each file: the resolved configuration
//! of every policy the graph calls through, then answered in time, goodput, the edge's p50,
//! p99 and p99.9, requests per root at each service, the work done for callers that had gone,
//! and each client's breaker and budget activity. Then, for each setting that differs (see
//! [`diff`]), the first file with only that setting changed to the second's value, and the
//! change it makes to the headline numbers: one change at a time, as the built-in scenarios'
//! ablations remove one feature at a time. Effects need not add up: the last rows give the
//! sum of the single changes beside the whole second file.
//!
//! Beside each file's configuration, a note names every call from a service with an inbound
//! layer through a policy that does not read the ambient deadline ([`unread_deadlines`]): a
//! policy file written for rampart-http's outbound layer, which always reads it, needs
//! `use_ambient_deadline = true` to model it, and a file without it predicts retries after
//! the caller has gone.
//!
//! `--json PATH` writes every number as JSON; `--html PATH` writes the report as one
//! self-contained page (the default report's styles; no scripts, fonts or linked files), each
//! policy file's resolved configuration in the column of its results.
//!
//! Every run uses the same seed: the traffic, the services' draws and each client's jitter
//! repeat, so a difference comes from the policies. The numbers are one seed's; run a few
//! seeds (`--seed`) before trusting a small difference.

pub mod diff;
pub mod print;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rampart::ConfigProblem;
use rampart::config::{Policies, PolicyConfig};
use serde_json::Value;

use crate::SimError;
use crate::cli::WhatIfOptions;
use crate::graph::{self, Graph, Outcome};
use crate::scenario::{Job, Runner};
use diff::Change;

/// A policy file, read and checked against a graph.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    /// Where it was read from (its name in the report).
    pub path: PathBuf,
    /// The file.
    pub file: Policies,
    /// The resolved configuration of each policy the graph calls through.
    pub resolved: BTreeMap<String, PolicyConfig>,
    /// What the report should warn of: each call from a service that receives deadlines
    /// (`inbound`) through a policy that does not read them (see [`unread_deadlines`]).
    pub notes: Vec<String>,
}

impl PolicyFile {
    /// Reads the policy file at `path`; see [`check`](Self::check).
    ///
    /// # Errors
    ///
    /// It cannot be read or is not a policy file (unknown keys refused with their name), or
    /// [`check`](Self::check) fails.
    pub fn load(path: &Path, graph: &Graph) -> Result<PolicyFile, SimError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SimError::new(format!("cannot read {}: {e}", path.display())))?;
        PolicyFile::parse(path, &text, graph)
    }

    /// Reads a policy file's text (named `path` in messages); see [`check`](Self::check).
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    pub fn parse(path: &Path, text: &str, graph: &Graph) -> Result<PolicyFile, SimError> {
        let file: Policies =
            toml::from_str(text).map_err(|e| SimError::new(format!("{}: {e}", path.display())))?;
        PolicyFile::check(path, file, graph)
    }

    /// Checks `file` for `graph`, every problem at once: each policy the graph names is in
    /// the file (the problem under the graph's key path), and every policy of the file builds
    /// (under the file's key paths, as [`Policies::build`] reports them).
    ///
    /// # Errors
    ///
    /// A [`SimError`] naming the file and listing the problems.
    pub fn check(path: &Path, file: Policies, graph: &Graph) -> Result<PolicyFile, SimError> {
        let mut problems: Vec<ConfigProblem> = Vec::new();
        let have: Vec<&str> = file.policies.keys().map(String::as_str).collect();
        for (at, name) in graph.uses() {
            if !file.policies.contains_key(name) {
                problems.push(ConfigProblem::new(
                    format!("graph {at}"),
                    format!(
                        "names no policy in the file (was {name:?}, the file has: {})",
                        have.join(", ")
                    ),
                ));
            }
        }
        if let Err(e) = file.build() {
            problems.extend(e.problems().iter().cloned());
        }
        if !problems.is_empty() {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Err(SimError::new(format!(
                "{}: {}",
                path.display(),
                lines.join("; ")
            )));
        }
        let resolved = graph
            .policies()
            .into_iter()
            .filter_map(|name| Some((name.to_owned(), file.resolved(name)?)))
            .collect();
        let notes = unread_deadlines(graph, &resolved);
        Ok(PolicyFile {
            path: path.to_owned(),
            file,
            resolved,
            notes,
        })
    }

    /// Its name in tables: the file name without its folder.
    pub fn label(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }
}

/// A note for each call made by a service with an inbound layer (it receives its callers'
/// deadlines) through a policy that does not read the ambient deadline: such a call neither
/// stops when the caller's deadline passes nor sends what is left of it, so a hung request
/// downstream can be retried after the caller has gone. rampart-http's outbound layer always
/// reads it, so a policy file written for such a client needs `use_ambient_deadline = true`
/// to model it (a file that leaves it out may be right for another client).
pub fn unread_deadlines(graph: &Graph, resolved: &BTreeMap<String, PolicyConfig>) -> Vec<String> {
    let reads = |name: &str| resolved.get(name).and_then(|c| c.use_ambient_deadline) == Some(true);
    graph
        .services
        .iter()
        .filter(|node| node.server.inbound)
        .flat_map(|node| node.steps.iter().flatten().map(move |edge| (node, edge)))
        .filter(|(_, edge)| !reads(&edge.policy))
        .map(|(node, edge)| {
            format!(
                "{}.policy: {:?} does not read the deadline {} receives (use_ambient_deadline): its calls neither stop at it nor send what is left of it; rampart-http's outbound layer always reads it",
                edge.path, edge.policy, node.config.name
            )
        })
        .collect()
}

/// One setting changed alone, and what the run measured.
#[derive(Debug, Clone)]
pub struct Attributed {
    /// The setting.
    pub change: Change,
    /// The first file with only that setting changed.
    pub outcome: Outcome,
}

/// Everything `what-if` measured.
#[derive(Debug, Clone)]
pub struct WhatIf {
    /// The graph run.
    pub graph: Arc<Graph>,
    /// The seed of every run.
    pub seed: u64,
    /// The two policy files.
    pub files: [PolicyFile; 2],
    /// Each file's run.
    pub outcomes: [Outcome; 2],
    /// Each differing setting changed alone in the first file.
    pub attribution: Vec<Attributed>,
}

/// Runs `graph` under `a` and `b`, then `a` with each differing setting changed to `b`'s
/// value alone; every run with `seed`, on `runner`'s threads.
///
/// # Errors
///
/// A run fails (a policy does not build, the runtime cannot start), or a setting cannot be
/// changed alone.
pub fn run(
    graph: Graph,
    a: PolicyFile,
    b: PolicyFile,
    seed: u64,
    runner: &Runner,
) -> Result<WhatIf, SimError> {
    let graph = Arc::new(graph);
    let names = graph.policies();
    let changes = diff::changes(&a.resolved, &b.resolved, &names)?;
    let mut jobs = Vec::new();
    let mut job = |label: String, policies: BTreeMap<String, PolicyConfig>| {
        let graph = Arc::clone(&graph);
        jobs.push(Job::new(label, move || graph::run(&graph, &policies, seed)));
    };
    job(a.label(), a.resolved.clone());
    job(b.label(), b.resolved.clone());
    for change in &changes {
        job(change.path.clone(), change.policies.clone());
    }
    let mut outcomes = runner.run("what-if", jobs)?.into_iter();
    let (Some(first), Some(second)) = (outcomes.next(), outcomes.next()) else {
        return Err(SimError::new("the runs of the two files did not finish"));
    };
    let attribution = changes
        .into_iter()
        .zip(outcomes)
        .map(|(change, outcome)| Attributed { change, outcome })
        .collect();
    Ok(WhatIf {
        graph,
        seed,
        files: [a, b],
        outcomes: [first, second],
        attribution,
    })
}

/// The command: reads the graph (with the chosen scenario) and both policy files, reporting
/// the problems of every file at once, then [`run`]s them.
///
/// # Errors
///
/// Every problem of the files, or what [`run`] returns.
pub fn command(options: &WhatIfOptions, runner: &Runner) -> Result<WhatIf, SimError> {
    let graph = Graph::load(&options.graph, options.scenario.as_deref())?;
    let [a, b] = options
        .policies
        .clone()
        .map(|path| PolicyFile::load(&path, &graph));
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => return Err(e),
        (Err(ea), Err(eb)) => return Err(SimError::new(format!("{ea}\n{eb}"))),
    };
    run(graph, a, b, options.seed, runner)
}

impl WhatIf {
    /// The report as text: the graph, each file's configuration, the results side by side,
    /// each client's activity, the attribution.
    pub fn text(&self) -> String {
        print::text(self)
    }

    /// Every number, as JSON.
    pub fn json(&self) -> Value {
        print::json(self)
    }

    /// The report as one self-contained HTML page (no scripts, fonts or linked files), each
    /// policy file's configuration in the column of its results; `graph_file` names the graph
    /// in its heading.
    pub fn html(&self, graph_file: &Path) -> String {
        print::html(self, &graph_file.display().to_string())
    }

    /// Writes what `options` asks for beyond the text: the JSON (with `graph_file`, the
    /// graph's path, added) to `--json`, the HTML page to `--html`. Returns each path written,
    /// with its kind (`json`, `html`).
    ///
    /// # Errors
    ///
    /// A file cannot be written (or the JSON cannot be formatted).
    pub fn write(&self, options: &WhatIfOptions) -> Result<Vec<(&'static str, PathBuf)>, SimError> {
        let cannot = |path: &Path, e: &dyn std::fmt::Display| {
            SimError::new(format!("cannot write {}: {e}", path.display()))
        };
        let mut written = Vec::new();
        if let Some(path) = &options.json {
            let mut json = self.json();
            json["graph_file"] = options.graph.display().to_string().into();
            print::write_json(path, &json)?;
            written.push(("json", path.clone()));
        }
        if let Some(path) = &options.html {
            std::fs::write(path, self.html(&options.graph)).map_err(|e| cannot(path, &e))?;
            written.push(("html", path.clone()));
        }
        Ok(written)
    }
}
