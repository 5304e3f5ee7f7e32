//! How the what-if engine's cost grows with a graph's services and its root requests: a
//! generated call graph (a tree, each service calling up to `FANOUT` others at once, every
//! call under one client policy, no errors) run once by [`rampart_sim::graph::run`], timed
//! with the wall clock and printed. Nothing here is asserted: times are measurements, not
//! tests.
//!
//! ```text
//! cargo run --release -p rampart-sim --example scale                 # the sweep below
//! cargo run --release -p rampart-sim --example scale -- 200 100000   # one realistic graph
//! cargo run --release -p rampart-sim --example scale -- 200 100000 1 # every root everywhere
//! ```
//!
//! The realistic graph makes each call on half of its caller's requests (`share = 0.5`), so
//! a root reaches about 16 of 200 services, as a page view reaches a few services of a real
//! call graph; `share` 1 is the old graph, where every root reaches every service. A run
//! simulates `roots × requests per root` requests, and that product is what the time follows:
//! the number of services in the graph matters only through the services a root reaches.
//! The time per request grows slowly with the requests in flight at once (more live tasks
//! and timers, less of them in the cache): 1.6 µs at 6 per root, 2.0 µs at 200.
//!
//! Measured at `5a81424` (release, one thread, the 2-core development machine with another
//! engineer's builds running, load average 1.8 to 2.7; two runs of the sweep, the range
//! shown):
//!
//! | services | share | roots | requests simulated | per root | wall time | per request |
//! |---:|---:|---:|---:|---:|---:|---:|
//! | 25 | 0.5 | 19,931 | 124,146 | 6.2 | 0.20 s | 1.6 µs |
//! | 50 | 0.5 | 19,931 | 174,063 | 8.7 | 0.27–0.28 s | 1.6 µs |
//! | 100 | 0.5 | 19,931 | 236,242 | 11.9 | 0.37–0.38 s | 1.6 µs |
//! | 200 | 0.5 | 19,931 | 312,230 | 15.7 | 0.50–0.51 s | 1.6 µs |
//! | 200 | 0.5 | 99,911 | 1,564,841 | 15.7 | 2.56–2.57 s | 1.6 µs |
//! | 200 | 1 | 19,931 | 3,986,200 | 200 | 7.7–9.1 s | 1.9–2.3 µs |
//! | 200 | 1 | 99,911 | 19,982,200 | 200 | 39.2–40.6 s | 2.0 µs |
//!
//! Issue 25's goal, 200 services and 100,000 roots in under a minute on 2 cores, is **met** on
//! both graphs, on one core: 2.6 s for the realistic graph, 39 to 41 s for the old one. Before
//! `0a91c52` it was missed on the old graph: on the same machine (load 2.2 to 3.0) 200 ×
//! 100,000 took 99.5 s and 200 × 20,000 17.6 to 25.0 s, 4.4 to 6.3 µs a request (the 200 s once
//! written here was measured under a heavier load); the realistic graph took 4.0 s (2.6 µs a
//! request); after `0a91c52` alone, 46.9 to 48.4 s and 2.9 to 3.0 s. What was cut, found with
//! `perf`: every worker task carried a rampart call's future inline (2.2 KB), which tokio
//! copies as it spawns a task, stores its output and hands it over, and which glibc's allocator
//! serves from its slow large-chunk path (see `Client::call` and `Service::handle`); and each
//! call of a step was a task of its own (see `rampart_sim::plan`). What is left is mostly
//! tokio's own per-task and per-timer work and rampart's call. A run stays on one thread: its
//! roots share every service's queue, breakers and budgets, so it has no independent parts to
//! split (what-if already runs its two policy files on two threads).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use rampart_sim::graph::{self, Graph};
use rampart_sim::whatif::PolicyFile;

/// Calls each service makes (the tree's branching).
const FANOUT: usize = 3;
/// Root requests per second of virtual time.
const RATE: usize = 2_000;
/// The share of its requests on which a service calls each of its children, in the
/// realistic graph: a root reaches about 16 of 200 services.
const REALISTIC: f64 = 0.5;

/// The graph file of a tree of `services` services and `roots` root requests, each call made
/// on `share` of the caller's requests (1: on every request).
fn graph_text(services: usize, roots: usize, share: f64) -> String {
    let mut text = String::from("entry = \"s0\"\n\n");
    for i in 0..services {
        let children: Vec<usize> = (1..=FANOUT)
            .map(|k| i * FANOUT + k)
            .filter(|&c| c < services)
            .collect();
        // The children at once (each after the first `with_previous`), so that a root's time
        // is the tree's depth, not its size, and no service runs out of workers.
        let calls: Vec<String> = children
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let together = if k > 0 { ", with_previous = true" } else { "" };
                let share = if share < 1.0 {
                    format!(", share = {share}")
                } else {
                    String::new()
                };
                format!("{{ to = \"s{c}\", policy = \"client\"{share}{together} }}")
            })
            .collect();
        let _ = write!(
            text,
            "[services.s{i}]\nworkers = 256\nqueue = 256\nservice_time = {{ median = \"1ms\", p99 = \"5ms\" }}\nerror_rate = 0.0\ncalls = [{}]\n\n",
            calls.join(", ")
        );
    }
    // Whole seconds of traffic at RATE, at least one.
    let seconds = roots.div_ceil(RATE).max(1);
    let _ = write!(
        text,
        "[traffic]\ndeadline = \"2s\"\nwarmup = \"0s\"\nsegments = [{{ kind = \"steady\", rate = {RATE}, for = \"{seconds}s\" }}]\n"
    );
    text
}

const POLICIES: &str = r#"
[defaults]
max_attempts = 3
total_timeout = "1s"
attempt_timeout = "200ms"
use_ambient_deadline = true

[policies.client]
"#;

/// Runs one graph; prints its row and returns its wall time in seconds.
fn measure(services: usize, roots: usize, share: f64) -> Result<f64, Box<dyn std::error::Error>> {
    let graph = Graph::parse(&graph_text(services, roots, share), None)?;
    let policies = PolicyFile::parse(Path::new("scale.toml"), POLICIES, &graph)?;
    let started = Instant::now();
    let outcome = graph::run(&graph, &policies.resolved, 1)?;
    let took = started.elapsed().as_secs_f64();
    let requests: f64 = outcome
        .services
        .iter()
        .map(|s| s.per_root * outcome.roots as f64)
        .sum();
    println!(
        "| {services} | {share} | {} | {:.0} | {:.1} | {took:.2} s | {:.1} µs | {:.2} µs | {:.1}% |",
        outcome.roots,
        requests,
        requests / outcome.roots.max(1) as f64,
        took * 1e6 / outcome.roots.max(1) as f64,
        took * 1e6 / requests.max(1.0),
        outcome.answered_in_time * 100.0,
    );
    Ok(took)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "| services | share | roots | requests simulated | per root | wall time | per root | per request | answered in time |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let started = Instant::now();
    match &args[..] {
        [] => {
            for (services, roots, share) in [
                (25, 20_000, REALISTIC),
                (50, 20_000, REALISTIC),
                (100, 20_000, REALISTIC),
                (200, 20_000, REALISTIC),
                (200, 100_000, REALISTIC),
                (200, 20_000, 1.0),
                (200, 100_000, 1.0),
            ] {
                measure(services, roots, share)?;
            }
        }
        [services, roots] => {
            measure(services.parse()?, roots.parse()?, REALISTIC)?;
        }
        [services, roots, share] => {
            let share: f64 = share.parse()?;
            if !(share > 0.0 && share <= 1.0) {
                return Err(format!("a share is above 0 and at most 1 (was {share})").into());
            }
            measure(services.parse()?, roots.parse()?, share)?;
        }
        _ => return Err("usage: scale [SERVICES ROOTS [SHARE]]".into()),
    }
    println!("\ntotal wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
