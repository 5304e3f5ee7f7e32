//! Regenerates the table of `BENCHMARKS.md` from a run of the peer benchmarks: criterion's
//! median times (`<target>/criterion/<workload>/<contender>/new/estimates.json`) joined with the
//! allocation harness' output, then checks the goals of issue 7.
//!
//! ```sh
//! cargo bench -p rampart-bench --bench peers -- --warm-up-time 1 --measurement-time 2
//! cargo run --release -p rampart-bench --example allocations > target/peer-allocations.tsv
//! cargo run --release -p rampart-bench --example table
//! ```
//!
//! Arguments (optional): the criterion directory (default `$CARGO_TARGET_DIR/criterion`, else
//! `target/criterion`) and the allocation file (default `peer-allocations.tsv` beside it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One (workload, contender) cell.
struct Cell {
    contender: String,
    /// Median time per call in nanoseconds, if criterion measured it.
    time: Option<f64>,
    /// Allocations and bytes per call, or why the contender cannot run the workload.
    allocations: Result<(f64, f64), String>,
}

/// One workload's rows.
struct Workload {
    id: String,
    title: String,
    cells: Vec<Cell>,
}

impl Workload {
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

fn median_ns(criterion: &Path, workload: &str, contender: &str) -> Option<f64> {
    let path = criterion
        .join(workload)
        .join(contender)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
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

fn read(criterion: &Path, allocations: &str) -> Vec<Workload> {
    let mut workloads: Vec<Workload> = Vec::new();
    for line in allocations.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["#workload", id, title] => workloads.push(Workload {
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
                workload.cells.push(Cell {
                    contender: (*contender).to_owned(),
                    time: median_ns(criterion, id, contender),
                    allocations,
                });
            }
            _ => {}
        }
    }
    workloads
}

fn render(workloads: &[Workload]) -> String {
    let mut out = String::new();
    for w in workloads {
        let rampart = w.time("rampart");
        let fastest = w.fastest().map(|c| c.contender.as_str());
        let _ = writeln!(out, "### {}\n", w.title);
        let _ = writeln!(
            out,
            "| contender | median time per call | vs rampart | allocations per call | bytes per call |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
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
            match &c.allocations {
                Ok((count, bytes)) => {
                    let _ = writeln!(
                        out,
                        "| {} | {t} | {ratio} | {count:.2} | {bytes:.0} |",
                        c.contender
                    );
                }
                Err(why) => {
                    let _ = writeln!(out, "| {} | n/a: {why} | | | |", c.contender);
                }
            }
        }
        let _ = writeln!(out);
    }
    out
}

/// Whether a contender is a peer (not the floor, not a rampart variant).
fn is_peer(contender: &str) -> bool {
    contender != "floor" && !contender.starts_with("rampart")
}

fn goals(workloads: &[Workload]) -> String {
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
        if let Some(floor) = w.time("floor") {
            let above = rampart / floor - 1.0;
            let met = if above <= 0.15 { "met" } else { "not met" };
            let _ = writeln!(
                out,
                "- {}: rampart within 15% of the floor: {met} ({:+.0}%)",
                w.id,
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
    let workloads = read(&criterion, &text);
    print!("{}{}", render(&workloads), goals(&workloads));
}
