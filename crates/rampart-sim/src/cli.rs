//! The command line, parsed by hand: `--scenario NAME`, `--seed N`, `--quick`, `--out DIR`,
//! `--list`, `--jobs N`, `--loopback`, `--help`.

use std::path::PathBuf;

use crate::SimError;
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

impl Default for Options {
    fn default() -> Self {
        Options {
            scenarios: scenario::ALL.to_vec(),
            seed: 1,
            quick: false,
            out: PathBuf::from("target/rampart-report"),
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get().min(8)),
            loopback: false,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// Run the scenarios and write the report.
    Run(Options),
    /// List the scenarios.
    List,
    /// Print the usage.
    Help,
}

/// The usage text.
pub const USAGE: &str = "\
rampart-sim: the real rampart executor against simulated services, in virtual time

usage: rampart-sim [--scenario NAME]... [--seed N] [--quick] [--out DIR] [--jobs N]
       rampart-sim --loopback [--seed N] [--quick]
       rampart-sim --list

  --scenario NAME  run only this scenario (repeatable; see --list)
  --seed N         seed every random draw with N (default 1); the same seed prints the same numbers
  --quick          CI size: every scenario in a second or two
  --out DIR        write index.html, report.json and the charts here (default target/rampart-report)
  --jobs N         simulations run at once on N threads (default: the cores, at most 8)
  --loopback       instead: the deadline scenario on three real axum services on 127.0.0.1
                   through rampart-http's layers, in real time (200 roots, 40 with --quick);
                   prints its table only
  --list           list the scenarios (and the loopback mode)
";

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, SimError> {
    let mut options = Options::default();
    let mut chosen: Vec<Scenario> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| SimError::new(format!("{name} needs a value\n\n{USAGE}")))
        };
        match flag.as_str() {
            "--list" => return Ok(Command::List),
            "-h" | "--help" => return Ok(Command::Help),
            "--quick" => options.quick = true,
            "--loopback" => options.loopback = true,
            "--scenario" => {
                let name = value("--scenario")?;
                let found = scenario::find(&name).ok_or_else(|| {
                    let names: Vec<_> = scenario::ALL.iter().map(|s| s.name).collect();
                    SimError::new(format!(
                        "no scenario named {name:?}; there are: {}",
                        names.join(", ")
                    ))
                })?;
                if !chosen.iter().any(|s| s.name == found.name) {
                    chosen.push(found);
                }
            }
            "--seed" => {
                let text = value("--seed")?;
                options.seed = text.parse().map_err(|_| {
                    SimError::new(format!("--seed takes a whole number (was {text:?})"))
                })?;
            }
            "--out" => options.out = PathBuf::from(value("--out")?),
            "--jobs" => {
                let text = value("--jobs")?;
                options.jobs = text
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .ok_or_else(|| {
                        SimError::new(format!("--jobs takes a positive number (was {text:?})"))
                    })?;
            }
            other => {
                return Err(SimError::new(format!(
                    "unknown argument {other:?}\n\n{USAGE}"
                )));
            }
        }
    }
    if !chosen.is_empty() {
        // Report order, whatever order they were named in.
        options.scenarios = scenario::ALL
            .into_iter()
            .filter(|s| chosen.iter().any(|c| c.name == s.name))
            .collect();
    }
    Ok(Command::Run(options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
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
        assert!(parse(args(&["--bogus"])).is_err());
        assert!(matches!(parse(args(&["--list"])), Ok(Command::List)));
        assert!(matches!(parse(args(&["--loopback"])), Ok(Command::Run(o)) if o.loopback));
    }
}
