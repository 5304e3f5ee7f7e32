//! `rampart-sim`: runs the scenarios, prints their tables and writes the report; `rampart-sim
//! what-if` runs a graph file under two policy files; `rampart-sim import` learns a graph file
//! from recorded spans. See the library's documentation for
//! what they do; `rampart-sim trace` writes a graph run's spans. This file only wires the
//! command line to it.

use std::process::ExitCode;

use rampart_sim::cli::{self, Command, SpanFile, TraceOptions, ValidateArgs, WhatIfOptions};
use rampart_sim::scenario::{self, Runner};

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::WhatIf(options)) => return what_if(&options),
        Ok(Command::Import(file)) => return import(&file),
        Ok(Command::Trace(options)) => return trace(&options),
        Ok(Command::Validate(options)) => return validate(&options),
        Ok(Command::List) => {
            for s in scenario::ALL {
                println!("{:<12} {}", s.name, s.summary);
            }
            println!(
                "{:<12} --loopback: the deadline scenario on three real axum services on 127.0.0.1",
                "(loopback)"
            );
            return ExitCode::SUCCESS;
        }
        // Help and version print themselves and exit 0; a refused command line exits 2.
        Err(e) => e.exit(),
    };
    if options.loopback {
        return loopback(&options);
    }
    let names: Vec<_> = options.scenarios.iter().map(|s| s.name).collect();
    eprintln!(
        "rampart-sim: seed {}{}, running calibration, then {}",
        options.seed,
        if options.quick { " (quick)" } else { "" },
        names.join(", ")
    );
    let runner = Runner::new(options.jobs, true);
    let mut report = match rampart_sim::run(&options, &runner) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("rampart-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The whole default run ends with the deadline on real sockets (a few seconds of real
    // time); `--scenario` picks simulated scenarios only.
    if options.scenarios.len() == scenario::ALL.len() {
        let roots = if options.quick {
            rampart_sim::loopback::QUICK_ROOTS
        } else {
            rampart_sim::loopback::ROOTS
        };
        eprintln!("rampart-sim: loopback, {roots} roots per contender and shape on 127.0.0.1");
        match rampart_sim::loopback::scenario(roots, options.seed) {
            Ok(section) => report.scenarios.push(section),
            Err(e) => {
                eprintln!("rampart-sim: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{}", report.text());
    match report.write(&options.out) {
        Ok(index) => println!("\nreport: {}", index.display()),
        Err(e) => {
            eprintln!("rampart-sim: {e}");
            return ExitCode::FAILURE;
        }
    }
    if report.calibrated() {
        ExitCode::SUCCESS
    } else {
        eprintln!("rampart-sim: a calibration check FAILED; do not believe the comparisons");
        ExitCode::FAILURE
    }
}

/// `rampart-sim import --otlp FILE` (or `--jaeger FILE`): the graph the spans describe, on
/// stdout; what could not be inferred is marked in it, and the notes go to stderr as well.
fn import(file: &SpanFile) -> ExitCode {
    let path = match file {
        SpanFile::Otlp(path) | SpanFile::Jaeger(path) => path,
    };
    let reader = match std::fs::File::open(path) {
        Ok(reader) => std::io::BufReader::new(reader),
        Err(e) => {
            eprintln!("rampart-sim import: cannot open {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let graph = match file {
        SpanFile::Otlp(_) => rampart_sim::import::otlp_to_graph(reader),
        SpanFile::Jaeger(_) => rampart_sim::import::jaeger_to_graph(reader),
    };
    match graph {
        Ok(graph) => {
            for note in &graph.notes {
                eprintln!("note: {note}");
            }
            print!("{}", graph.to_toml());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart-sim import: {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}

/// `rampart-sim trace`: one run of the graph, its spans to `--otlp`, a line of what was
/// written on stdout.
fn trace(options: &TraceOptions) -> ExitCode {
    match rampart_sim::spans::command(options) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart-sim trace: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `rampart-sim validate`: the report on stdout, progress on stderr.
fn validate(options: &ValidateArgs) -> ExitCode {
    use rampart_sim::validate;
    let roots = if options.quick {
        validate::QUICK_ROOTS
    } else {
        validate::ROOTS
    };
    eprintln!(
        "rampart-sim validate: seed {}, {roots} roots per real run on 127.0.0.1 (3 runs), then the what-if",
        options.seed
    );
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let result = match validate::run(roots, options.seed, &Runner::new(jobs, false)) {
        Ok(result) => result,
        Err(e) => {
            eprintln!("rampart-sim validate: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", result.text());
    type Write = fn(&validate::Validation, &std::path::Path) -> Result<(), rampart_sim::SimError>;
    let pages: [(&Option<_>, Write); 2] = [
        (&options.json, validate::Validation::write_json),
        (&options.html, validate::Validation::write_html),
    ];
    for (path, write) in pages {
        let Some(path) = path else { continue };
        if let Err(e) = write(&result, path) {
            eprintln!("rampart-sim validate: {e}");
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &options.out {
        match result.write(dir) {
            Ok(paths) => {
                for path in paths {
                    println!("wrote {}", path.display());
                }
            }
            Err(e) => {
                eprintln!("rampart-sim validate: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn what_if(options: &WhatIfOptions) -> ExitCode {
    let runner = Runner::new(options.jobs, true);
    let report = match rampart_sim::whatif::command(options, &runner) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("rampart-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("graph: {}", options.graph.display());
    print!("{}", report.text());
    match report.write(options) {
        Ok(written) => {
            if !written.is_empty() {
                println!();
            }
            for (kind, path) in written {
                println!("{kind}: {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn loopback(options: &cli::Options) -> ExitCode {
    let roots = if options.quick {
        rampart_sim::loopback::QUICK_ROOTS
    } else {
        rampart_sim::loopback::ROOTS
    };
    eprintln!(
        "rampart-sim: loopback, seed {}, {roots} roots per contender on 127.0.0.1",
        options.seed
    );
    use rampart_sim::loopback::{self, Shape};
    for shape in [Shape::Direct, Shape::QueuedMiddle] {
        match loopback::run(shape, roots, options.seed) {
            Ok(points) => {
                println!("{}", loopback::table(shape, &points).text());
                for contender in ["rampart", "rampart+hedge"] {
                    println!("> {}", loopback::finding(&points, contender));
                }
                println!();
            }
            Err(e) => {
                eprintln!("rampart-sim: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("{}", loopback::COUNTING);
    println!("note, direct: {}", loopback::WHY);
    println!("note, queued middle tier: {}", loopback::QUEUED_WHY);
    ExitCode::SUCCESS
}
