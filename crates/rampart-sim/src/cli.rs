//! The command line, parsed by clap: with no subcommand, the report (`--scenario NAME`,
//! `--seed N`, `--quick`, `--out DIR`, `--jobs N`, `--loopback`, `--list`); `what-if` runs a
//! graph file under two policy files (see [`crate::whatif`]); `import` learns a graph file
//! from OTLP JSON spans (see [`crate::import`]); `trace` runs a graph file under one policy
//! file and writes its spans as OTLP JSON (see [`crate::spans`]).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::scenario::{self, Scenario};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenarios, in report order.
    pub scenarios: Vec<Scenario>,
    /// The seed.
    pub seed: u64,
    /// CI size.
    pub quick: bool,
    /// Where the report goes.
    pub out: PathBuf,
    /// OS threads running simulations.
    pub jobs: usize,
    /// Run the deadline scenario over real HTTP on 127.0.0.1 instead of the simulations.
    pub loopback: bool,
}

/// The default number of threads: the cores, at most 8.
fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().min(8))
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scenarios: scenario::ALL.to_vec(),
            seed: 1,
            quick: false,
            out: PathBuf::from("target/rampart-report"),
            jobs: default_jobs(),
            loopback: false,
        }
    }
}

/// What `what-if` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhatIfOptions {
    /// The graph file.
    pub graph: PathBuf,
    /// The two policy files, A then B.
    pub policies: [PathBuf; 2],
    /// The graph's scenario (its own traffic and faults when `None`).
    pub scenario: Option<String>,
    /// The seed of every run.
    pub seed: u64,
    /// Where to write every number as JSON.
    pub json: Option<PathBuf>,
    /// Where to write the report as one HTML page.
    pub html: Option<PathBuf>,
    /// OS threads running simulations.
    pub jobs: usize,
}

/// What `trace` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOptions {
    /// The graph file.
    pub graph: PathBuf,
    /// The policy file.
    pub policies: PathBuf,
    /// The graph's scenario (its own traffic and faults when `None`).
    pub scenario: Option<String>,
    /// The seed of the run.
    pub seed: u64,
    /// Where the spans go.
    pub otlp: PathBuf,
}

/// A file of recorded spans, and its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanFile {
    /// OTLP JSON, one export request per line (the OpenTelemetry collector's file exporter).
    Otlp(PathBuf),
    /// Jaeger's JSON (its query API's answer, its UI's download).
    Jaeger(PathBuf),
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// Run the scenarios and write the report.
    Run(Options),
    /// List the scenarios.
    List,
    /// Run a graph file under two policy files.
    WhatIf(WhatIfOptions),
    /// Learn a graph file from recorded spans (OTLP or Jaeger JSON) and print it.
    Import(SpanFile),
    /// Run a graph file under one policy file and write its spans (OTLP JSON).
    Trace(TraceOptions),
    /// Check the what-if against the real loopback chain (see [`crate::validate`]).
    Validate(ValidateArgs),
}

/// rampart-sim: the real rampart executor against simulated services, in virtual time.
///
/// With no subcommand: runs every scenario (or those named), prints their tables and writes
/// the report.
#[derive(Debug, Parser)]
#[command(name = "rampart-sim", args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// A subcommand instead of the report.
    #[command(subcommand)]
    pub command: Option<Sub>,
    /// The report's options.
    #[command(flatten)]
    pub report: ReportArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Run a call graph described in a file under two policy files, side by side, and show
    /// which changed setting moved which number.
    WhatIf(WhatIfArgs),
    /// Learn a call graph file from recorded spans (OTLP JSON, one export request per line,
    /// as the OpenTelemetry collector's file exporter writes them; or Jaeger's JSON, as its
    /// query API answers and its UI downloads) and print it.
    Import(ImportArgs),
    /// Run a call graph under one policy file and write the spans its services would have
    /// recorded (a SERVER span per request, a CLIENT span per attempt) as OTLP JSON, in the
    /// form `import` reads.
    Trace(TraceArgs),
    /// Check the what-if against real traffic: trace the loopback chain under a baseline
    /// policy file, import its spans, predict two policy changes on that graph, run each for
    /// real, and print predicted against measured.
    Validate(ValidateArgs),
}

/// `validate`'s options.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ValidateArgs {
    /// CI size: 50 roots per real run instead of 2,000
    #[arg(long)]
    pub quick: bool,
    /// Seed the leaf's draws and every simulation with N
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Also write the baseline's spans (spans.jsonl) and the imported graph (imported.toml) here
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write every number as JSON to PATH
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page to PATH
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
}

/// `trace`'s options.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The call graph (TOML; see crates/rampart-sim/graphs/shop.toml)
    #[arg(long, value_name = "FILE")]
    pub graph: PathBuf,
    /// The policy file (rampart::config::Policies, TOML)
    #[arg(long = "policies", value_name = "FILE")]
    pub policies: PathBuf,
    /// The graph's scenario to run [default: the file's own traffic and faults]
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,
    /// Seed the run with N; the same seed writes the same spans
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Write the spans here: OTLP JSON, one export request per line
    #[arg(long, value_name = "FILE")]
    pub otlp: PathBuf,
}

/// `import`'s options: one file, OTLP or Jaeger.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ImportArgs {
    /// The spans: OTLP JSON, one export request per line (the collector's file exporter)
    #[arg(long, value_name = "FILE")]
    pub otlp: Option<PathBuf>,
    /// The spans: Jaeger's JSON ({"data": [...]}, its query API's answer or its UI's download)
    #[arg(long, value_name = "FILE")]
    pub jaeger: Option<PathBuf>,
}

/// The report's options.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run only this scenario (repeatable; see --list)
    #[arg(long = "scenario", value_name = "NAME", value_parser = scenario_named)]
    pub scenarios: Vec<Scenario>,
    /// Seed every random draw with N; the same seed prints the same numbers
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// CI size: every scenario in a second or two
    #[arg(long)]
    pub quick: bool,
    /// Write index.html, report.json and the charts here
    #[arg(long, value_name = "DIR", default_value = "target/rampart-report")]
    pub out: PathBuf,
    /// Simulations run at once on N threads [default: the cores, at most 8]
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    /// Instead: the deadline scenario on three real axum services on 127.0.0.1 through
    /// rampart-http's layers, in real time (200 roots, 40 with --quick); prints its table only
    #[arg(long)]
    pub loopback: bool,
    /// List the scenarios (and the loopback mode)
    #[arg(long)]
    pub list: bool,
}

/// `what-if`'s options.
#[derive(Debug, Args)]
pub struct WhatIfArgs {
    /// The call graph (TOML; see crates/rampart-sim/graphs/shop.toml)
    #[arg(long, value_name = "FILE")]
    pub graph: PathBuf,
    /// A policy file (rampart::config::Policies, TOML); give two: A, then B
    #[arg(long = "policies", value_name = "FILE", required = true, num_args = 1)]
    pub policies: Vec<PathBuf>,
    /// The graph's scenario to run [default: the file's own traffic and faults]
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,
    /// Seed every run with N; the same seed prints the same numbers
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Also write every number as JSON to PATH
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page to PATH
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// Simulations run at once on N threads [default: the cores, at most 8]
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
}

fn scenario_named(name: &str) -> Result<Scenario, String> {
    scenario::find(name).ok_or_else(|| {
        let names: Vec<_> = scenario::ALL.iter().map(|s| s.name).collect();
        format!(
            "no scenario named {name:?}; there are: {}",
            names.join(", ")
        )
    })
}

impl Cli {
    /// What the parsed command line asks for.
    ///
    /// # Errors
    ///
    /// `what-if` was given other than two policy files.
    pub fn into_command(self) -> Result<Command, clap::Error> {
        if let Some(Sub::Import(i)) = self.command {
            let file = match (i.otlp, i.jaeger) {
                (Some(path), _) => SpanFile::Otlp(path),
                (None, Some(path)) => SpanFile::Jaeger(path),
                (None, None) => {
                    use clap::CommandFactory;
                    return Err(<Cli as CommandFactory>::command().error(
                        clap::error::ErrorKind::MissingRequiredArgument,
                        "import reads one file: give --otlp FILE or --jaeger FILE",
                    ));
                }
            };
            return Ok(Command::Import(file));
        }
        if let Some(Sub::Validate(v)) = self.command {
            return Ok(Command::Validate(v));
        }
        if let Some(Sub::Trace(t)) = self.command {
            return Ok(Command::Trace(TraceOptions {
                graph: t.graph,
                policies: t.policies,
                scenario: t.scenario,
                seed: t.seed,
                otlp: t.otlp,
            }));
        }
        if let Some(Sub::WhatIf(w)) = self.command {
            let [a, b]: [PathBuf; 2] = w.policies.try_into().map_err(|given: Vec<PathBuf>| {
                use clap::CommandFactory;
                <Cli as CommandFactory>::command().error(
                    clap::error::ErrorKind::WrongNumberOfValues,
                    format!(
                        "what-if compares two policy files: give --policies twice (was {})",
                        given.len()
                    ),
                )
            })?;
            return Ok(Command::WhatIf(WhatIfOptions {
                graph: w.graph,
                policies: [a, b],
                scenario: w.scenario,
                seed: w.seed,
                json: w.json,
                html: w.html,
                jobs: w.jobs.map_or_else(default_jobs, NonZeroUsize::get),
            }));
        }
        let r = self.report;
        if r.list {
            return Ok(Command::List);
        }
        let mut options = Options {
            seed: r.seed,
            quick: r.quick,
            out: r.out,
            loopback: r.loopback,
            ..Options::default()
        };
        if let Some(jobs) = r.jobs {
            options.jobs = jobs.get();
        }
        if !r.scenarios.is_empty() {
            // Report order, whatever order they were named in, each once.
            options.scenarios = scenario::ALL
                .into_iter()
                .filter(|s| r.scenarios.iter().any(|c| c.name == s.name))
                .collect();
        }
        Ok(Command::Run(options))
    }
}

/// Parses the arguments after the program name. `--help` and `--version` come back as clap
/// errors of their kind, which print themselves ([`clap::Error::exit`]).
///
/// # Errors
///
/// What clap refuses (an unknown flag, a missing value, an unknown scenario), with the usage.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, clap::Error> {
    let args = std::iter::once("rampart-sim".to_owned()).chain(args);
    Cli::try_parse_from(args)?.into_command()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_arguments_run_every_scenario_with_seed_one() {
        let Ok(Command::Run(o)) = parse(args(&[])) else {
            panic!("expected a run");
        };
        let names: Vec<_> = o.scenarios.iter().map(|s| s.name).collect();
        let all: Vec<_> = scenario::ALL.iter().map(|s| s.name).collect();
        assert_eq!(names, all);
        assert_eq!((o.seed, o.quick, o.loopback), (1, false, false));
        assert_eq!(o.out, PathBuf::from("target/rampart-report"));
        assert_eq!(o.jobs, default_jobs());
    }

    #[test]
    fn parses_every_option() {
        let Ok(Command::Run(o)) = parse(args(&[
            "--scenario",
            "tail",
            "--seed=7",
            "--quick",
            "--out",
            "x",
            "--jobs",
            "3",
            "--scenario",
            "retry-storm",
        ])) else {
            panic!("expected a run");
        };
        let names: Vec<_> = o.scenarios.iter().map(|s| s.name).collect();
        assert_eq!(names, ["retry-storm", "tail"]);
        assert_eq!((o.seed, o.quick, o.jobs), (7, true, 3));
        assert_eq!(o.out, PathBuf::from("x"));
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        assert!(parse(args(&["--scenario", "nope"])).is_err());
        assert!(parse(args(&["--seed", "x"])).is_err());
        assert!(parse(args(&["--seed"])).is_err());
        assert!(parse(args(&["--jobs", "0"])).is_err());
        assert!(parse(args(&["--bogus"])).is_err());
        assert!(matches!(parse(args(&["--list"])), Ok(Command::List)));
        assert!(matches!(parse(args(&["--loopback"])), Ok(Command::Run(o)) if o.loopback));
        let help = parse(args(&["--help"])).expect_err("help prints itself");
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
    }

    #[test]
    fn import_takes_one_otlp_or_jaeger_file() {
        let Ok(Command::Import(file)) = parse(args(&["import", "--otlp", "spans.jsonl"])) else {
            panic!("expected an import");
        };
        assert_eq!(file, SpanFile::Otlp(PathBuf::from("spans.jsonl")));
        let Ok(Command::Import(file)) = parse(args(&["import", "--jaeger", "traces.json"])) else {
            panic!("expected an import");
        };
        assert_eq!(file, SpanFile::Jaeger(PathBuf::from("traces.json")));
        assert!(parse(args(&["import"])).is_err(), "a file is required");
        let both = ["import", "--otlp", "a", "--jaeger", "b"];
        assert!(parse(args(&both)).is_err(), "one file only");
    }

    #[test]
    fn trace_takes_a_graph_one_policy_file_and_where_the_spans_go() {
        let Ok(Command::Trace(t)) = parse(args(&[
            "trace",
            "--graph",
            "g.toml",
            "--policies",
            "p.toml",
            "--seed",
            "4",
            "--otlp",
            "spans.jsonl",
        ])) else {
            panic!("expected trace");
        };
        assert_eq!(
            t,
            TraceOptions {
                graph: PathBuf::from("g.toml"),
                policies: PathBuf::from("p.toml"),
                scenario: None,
                seed: 4,
                otlp: PathBuf::from("spans.jsonl"),
            }
        );
        assert!(parse(args(&["trace", "--graph", "g", "--policies", "p"])).is_err());
    }

    #[test]
    fn validate_takes_quick_a_seed_and_where_to_write_its_files_json_and_html() {
        let Ok(Command::Validate(v)) = parse(args(&["validate", "--quick", "--seed", "3"])) else {
            panic!("expected validate");
        };
        assert_eq!((v.quick, v.seed, v.out, v.json), (true, 3, None, None));
        let Ok(Command::Validate(v)) = parse(args(&["validate", "--out", "d", "--json", "v.json"]))
        else {
            panic!("expected validate");
        };
        assert_eq!(
            (v.quick, v.seed, v.out, v.json),
            (
                false,
                1,
                Some(PathBuf::from("d")),
                Some(PathBuf::from("v.json"))
            )
        );
        assert_eq!(v.html, None);
        let Ok(Command::Validate(v)) = parse(args(&["validate", "--html", "v.html"])) else {
            panic!("expected validate");
        };
        assert_eq!(v.html, Some(PathBuf::from("v.html")));
    }

    #[test]
    fn what_if_takes_a_graph_two_policy_files_and_its_options() {
        let Ok(Command::WhatIf(w)) = parse(args(&[
            "what-if",
            "--graph",
            "g.toml",
            "--policies",
            "a.toml",
            "--policies",
            "b.toml",
            "--scenario",
            "spike",
            "--seed",
            "9",
            "--json",
            "out.json",
            "--html",
            "out.html",
        ])) else {
            panic!("expected what-if");
        };
        assert_eq!(w.html, Some(PathBuf::from("out.html")));
        assert_eq!(w.graph, PathBuf::from("g.toml"));
        assert_eq!(
            w.policies,
            [PathBuf::from("a.toml"), PathBuf::from("b.toml")]
        );
        assert_eq!(w.scenario.as_deref(), Some("spike"));
        assert_eq!((w.seed, w.json), (9, Some(PathBuf::from("out.json"))));
        let one = parse(args(&["what-if", "--graph", "g", "--policies", "a"]));
        assert!(one.is_err(), "one policy file is refused");
        assert!(parse(args(&["what-if", "--policies", "a", "--policies", "b"])).is_err());
        assert!(parse(args(&["--quick", "what-if", "--graph", "g"])).is_err());
    }
}
