//! Regenerates the table of `BENCHMARKS.md` from a run of the peer benchmarks: criterion's
//! median times (`<target>/criterion/<workload>/<contender>/new/estimates.json`) joined with the
//! allocation harness' output, each contender's time beside the hand-written floor doing the
//! same work (`name::floor_of`), then checks the goals of issues 7 and 11.
//!
//! ```sh
//! cargo bench -p rampart-bench --bench peers -- --warm-up-time 1 --measurement-time 2
//! cargo run --release -p rampart-bench --example allocations > target/peer-allocations.tsv
//! cargo run --release -p rampart-bench --example table
//! ```
//!
//! Arguments (optional): the criterion directory (default `$CARGO_TARGET_DIR/criterion`, else
//! `target/criterion`), the allocation file (default `peer-allocations.tsv` beside it), and
//! the criterion baselines to read (default `new`, the last run). Given several (`run1 run2
//! ...`, saved with criterion's `--save-baseline`), a cell's time is the median of their
//! medians, and the table shows their range. A workload none of them measured is left out.

#[path = "../benches/contenders/mod.rs"]
#[allow(dead_code)] // the table needs the contenders' names and floors, not the contenders
mod contenders;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use contenders::{Workload, name};

/// One (workload, contender) cell.
struct Cell {
    contender: String,
    /// Median time per call in nanoseconds, if criterion measured it (the median over the
    /// baselines read).
    time: Option<f64>,
    /// The fastest and slowest of the baselines' medians, and how many there were.
    range: Option<(f64, f64, usize)>,
    /// Allocations and bytes per call, or why the contender cannot run the workload.
    allocations: Result<(f64, f64), String>,
}

/// One workload's rows.
struct Rows {
    workload: Option<Workload>,
    id: String,
    title: String,
    cells: Vec<Cell>,
}

impl Rows {
    fn time(&self, contender: &str) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.contender == contender)
            .and_then(|c| c.time)
    }

    fn allocations(&self, contender: &str) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.contender == contender)
            .and_then(|c| c.allocations.as_ref().ok().map(|a| a.0))
    }

    /// The floor `contender` is compared with here, and its time.
    fn floor(&self, contender: &str) -> Option<(&'static str, f64)> {
        let floor = name::floor_of(self.workload?, contender)?;
        Some((floor, self.time(floor)?))
    }

    /// The fastest of rampart (its full configuration) and its peers.
    fn fastest(&self) -> Option<&Cell> {
        self.cells
            .iter()
            .filter(|c| c.contender == "rampart" || is_peer(&c.contender))
            .filter(|c| c.time.is_some())
            .min_by(|a, b| {
                a.time
                    .partial_cmp(&b.time)
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
    }
}

fn median_ns(criterion: &Path, workload: &str, contender: &str, baseline: &str) -> Option<f64> {
    let path = criterion
        .join(workload)
        .join(contender)
        .join(baseline)
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// The median of the baselines' medians, and their range.
fn measured(
    criterion: &Path,
    workload: &str,
    contender: &str,
    baselines: &[String],
) -> (Option<f64>, Option<(f64, f64, usize)>) {
    let mut times: Vec<f64> = baselines
        .iter()
        .filter_map(|b| median_ns(criterion, workload, contender, b))
        .collect();
    if times.is_empty() {
        return (None, None);
    }
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    };
    (Some(median), Some((times[0], times[n - 1], n)))
}

fn time(ns: f64) -> String {
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.2} µs", ns / 1_000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

fn read(criterion: &Path, allocations: &str, baselines: &[String]) -> Vec<Rows> {
    let mut workloads: Vec<Rows> = Vec::new();
    for line in allocations.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["#workload", id, title] => workloads.push(Rows {
                workload: Workload::from_id(id),
                id: (*id).to_owned(),
                title: (*title).to_owned(),
                cells: Vec::new(),
            }),
            [id, contender, count, rest] => {
                let Some(workload) = workloads.iter_mut().find(|w| w.id == *id) else {
                    continue;
                };
                let allocations = match (count.parse::<f64>(), rest.parse::<f64>()) {
                    (Ok(count), Ok(bytes)) => Ok((count, bytes)),
                    _ => Err((*rest).to_owned()),
                };
                let (time, range) = measured(criterion, id, contender, baselines);
                workload.cells.push(Cell {
                    contender: (*contender).to_owned(),
                    time,
                    range,
                    allocations,
                });
            }
            _ => {}
        }
    }
    workloads.retain(|w| w.cells.iter().any(|c| c.time.is_some()));
    workloads
}

fn render(workloads: &[Rows]) -> String {
    let mut out = String::new();
    for w in workloads {
        let rampart = w.time("rampart");
        let fastest = w.fastest().map(|c| c.contender.as_str());
        let ranges = w.cells.iter().any(|c| c.range.is_some_and(|r| r.2 > 1));
        let _ = writeln!(out, "### {}\n", w.title);
        let _ = write!(
            out,
            "| contender | median time per call | vs its floor | vs rampart | allocations per call | bytes per call |"
        );
        let _ = writeln!(out, "{}", if ranges { " range over runs |" } else { "" });
        let _ = write!(out, "|---|---:|---:|---:|---:|---:|");
        let _ = writeln!(out, "{}", if ranges { "---:|" } else { "" });
        for c in &w.cells {
            let (t, ratio) = match (c.time, rampart) {
                (Some(t), Some(r)) => (time(t), format!("{:.2}x", t / r)),
                (Some(t), None) => (time(t), "–".to_owned()),
                (None, _) => ("not measured".to_owned(), "–".to_owned()),
            };
            let t = if Some(c.contender.as_str()) == fastest {
                format!("**{t}**")
            } else {
                t
            };
            let vs_floor = match (c.time, w.floor(&c.contender)) {
                (Some(t), Some((floor, f))) => format!("{:.2}x {floor}", t / f),
                _ => "–".to_owned(),
            };
            let range = match c.range {
                _ if !ranges => String::new(),
                Some((lo, hi, n)) => format!(" {}–{} ({n}) |", time(lo), time(hi)),
                None => " |".to_owned(),
            };
            match &c.allocations {
                Ok((count, bytes)) => {
                    let _ = writeln!(
                        out,
                        "| {} | {t} | {vs_floor} | {ratio} | {count:.2} | {bytes:.0} |{range}",
                        c.contender
                    );
                }
                Err(why) => {
                    let _ = writeln!(out, "| {} | n/a: {why} | | | | |{range}", c.contender);
                }
            }
        }
        let _ = writeln!(out);
    }
    out
}

/// Whether a contender is a peer (not a floor, not a rampart variant).
fn is_peer(contender: &str) -> bool {
    !name::is_floor(contender) && !contender.starts_with(name::RAMPART)
}

fn goals(workloads: &[Rows]) -> String {
    let mut out = String::from("### Goals\n\n");
    for w in workloads {
        let Some(rampart) = w.time("rampart") else {
            continue;
        };
        let faster: Vec<String> = w
            .cells
            .iter()
            .filter(|c| is_peer(&c.contender))
            .filter_map(|c| Some((c.contender.as_str(), c.time?)))
            .filter(|&(_, t)| t < rampart)
            .map(|(name, t)| format!("{name} {:.2}x", t / rampart))
            .collect();
        let verdict = if faster.is_empty() {
            "met".to_owned()
        } else {
            format!("not met (faster: {})", faster.join(", "))
        };
        let _ = writeln!(out, "- {}: rampart faster than every peer: {verdict}", w.id);
        // bench/BUDGETS.md's goals: a policy within 15% of a hand-written loop doing the same work,
        // `Policy::none()` within 5% of calling the callback directly.
        for c in w
            .cells
            .iter()
            .filter(|c| c.contender.starts_with("rampart"))
        {
            let (Some(t), Some((floor, f))) = (c.time, w.floor(&c.contender)) else {
                continue;
            };
            let budget = if floor == name::DIRECT { 0.05 } else { 0.15 };
            let above = t / f - 1.0;
            let met = if above <= budget { "met" } else { "not met" };
            let _ = writeln!(
                out,
                "- {}: {} within {:.0}% of {floor}: {met} ({:+.0}%)",
                w.id,
                c.contender,
                budget * 100.0,
                above * 100.0
            );
        }
        if let Some(count) = w.allocations("rampart") {
            let met = if count == 0.0 { "met" } else { "not met" };
            let _ = writeln!(
                out,
                "- {}: rampart allocates nothing: {met} ({count:.2} per call)",
                w.id
            );
        }
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let criterion = args.next().map_or_else(
        || {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| PathBuf::from("target"), PathBuf::from);
            target.join("criterion")
        },
        PathBuf::from,
    );
    let allocations = args.next().map_or_else(
        || criterion.with_file_name("peer-allocations.tsv"),
        PathBuf::from,
    );
    let text = match std::fs::read_to_string(&allocations) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "cannot read {}: {error}; run the allocation harness first (see the docs)",
                allocations.display()
            );
            std::process::exit(1);
        }
    };
    let mut baselines: Vec<String> = args.collect();
    if baselines.is_empty() {
        baselines.push("new".to_owned());
    }
    let workloads = read(&criterion, &text, &baselines);
    print!("{}{}", render(&workloads), goals(&workloads));
}
