//! Runs the `rampart-lint` and `cargo-rampart-lint` binaries end to end.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lint(args: &[&str]) -> Output {
    run(env!("CARGO_BIN_EXE_rampart-lint"), args)
}

fn run(binary: &str, args: &[&str]) -> Output {
    match Command::new(binary)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        Ok(output) => output,
        Err(error) => panic!("cannot run {binary}: {error}"),
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    write(&dir.join(".keep"), "");
    dir
}

fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent()
        && let Err(error) = fs::create_dir_all(parent)
    {
        panic!("cannot create {}: {error}", parent.display());
    }
    if let Err(error) = fs::write(path, contents) {
        panic!("cannot write {}: {error}", path.display());
    }
}

const DIRTY: &str = "fn f(p: &Policy) { p.call().run_blocking(|_| work()); }\n";

#[test]
fn a_clean_file_exits_zero_with_a_one_line_summary() {
    let output = lint(&["tests/fixtures/clean.rs"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "rampart-lint: 1 file checked, no findings\n"
    );
    assert_eq!(stderr(&output), "");
}

#[test]
fn the_clean_summary_counts_every_file_checked_once() {
    let dir = scratch("clean-summary");
    write(&dir.join("src/a.rs"), "fn a() {}\n");
    write(&dir.join("src/nested/b.rs"), "fn b() {}\n");
    write(&dir.join("target/debug/skipped.rs"), DIRTY);
    let root = dir.display().to_string();
    let again = dir.join("src/a.rs").display().to_string();
    let output = lint(&[&root, &again]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "rampart-lint: 2 files checked, no findings\n"
    );
}

#[test]
fn no_summary_when_there_are_findings_or_errors() {
    let output = lint(&["tests/fixtures/r001.rs"]);
    assert!(
        !stdout(&output).contains("no findings"),
        "{}",
        stdout(&output)
    );

    let dir = scratch("summary-error");
    write(&dir.join("broken.rs"), "fn main( {\n");
    let output = lint(&[&dir.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(&output), "");
}

#[test]
fn a_dirty_file_exits_one_with_rustc_style_lines() {
    let output = lint(&["tests/fixtures/r001.rs"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "tests/fixtures/r001.rs:13:16: warning[R001]: callback never uses its attempt handle `_`; the ceiling drops the attempt's future (the default abandon mode) but cannot stop work that outlives it (a spawned task, a thread) or a cooperative-mode attempt"
        )
    );
    assert_eq!(
        lines.next(),
        Some(
            "  help: pass `attempt.token()` (or `attempt`) to the work so the ceiling can cancel it"
        )
    );
    assert!(text.lines().count() >= 4);
}

#[test]
fn json_output_is_one_array_of_findings() {
    let output = lint(&["--format", "json", "tests/fixtures/r001.rs"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let json = stdout(&output);
    assert!(json.starts_with('['), "{json}");
    assert!(json.trim_end().ends_with(']'), "{json}");
    assert!(json.contains(r#""code":"R001""#), "{json}");
    assert!(
        json.contains(r#"{"file":"tests/fixtures/r001.rs","line":13,"column":16,"code":"R001","#),
        "{json}"
    );

    let clean = lint(&["--format=json", "tests/fixtures/clean.rs"]);
    assert_eq!(clean.status.code(), Some(0));
    assert_eq!(stdout(&clean), "[]\n");
}

#[test]
fn a_missing_path_exits_two_with_the_reason() {
    let output = lint(&["tests/fixtures/no-such-file.rs"]);
    assert_eq!(output.status.code(), Some(2));
    let errors = stderr(&output);
    let prefix = "error: cannot read tests/fixtures/no-such-file.rs: ";
    assert!(errors.starts_with(prefix), "{errors}");
    assert!(
        errors.trim_end().len() > prefix.len(),
        "no reason given: {errors}"
    );
}

#[test]
fn a_file_that_does_not_parse_exits_two_even_with_findings() {
    let dir = scratch("parse-error");
    write(&dir.join("broken.rs"), "fn main( {\n");
    write(&dir.join("dirty.rs"), DIRTY);
    let output = lint(&[&dir.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("error: cannot parse "),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("broken.rs: 1:"),
        "{}",
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("warning[R001]"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn directories_are_walked_skipping_target_and_hidden_ones() {
    let dir = scratch("walk");
    write(&dir.join("src/nested/dirty.rs"), DIRTY);
    write(&dir.join("target/debug/build.rs"), DIRTY);
    write(&dir.join(".git/hook.rs"), DIRTY);
    write(&dir.join("notes.txt"), DIRTY);
    let output = lint(&[&dir.display().to_string()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text.matches("warning[").count(), 1, "{text}");
    assert!(text.contains("dirty.rs:1:"), "{text}");
}

#[test]
fn help_prints_usage_and_every_rule_and_exits_zero() {
    let output = lint(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert!(text.contains("Usage: rampart-lint"), "{text}");
    for rule in rampart_lint::Rule::ALL {
        assert!(
            text.contains(&format!("  {rule}  {}", rule.summary())),
            "{text}"
        );
    }
}

#[test]
fn unknown_flags_exit_two_with_a_message() {
    let output = lint(&["--frobnicate", "tests/fixtures/clean.rs"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("unknown option `--frobnicate`"));

    let output = lint(&["--format", "xml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("unknown format `xml`"));
}

#[test]
fn the_cargo_subcommand_skips_its_own_name() {
    let binary = env!("CARGO_BIN_EXE_cargo-rampart-lint");
    let output = run(binary, &["rampart-lint", "tests/fixtures/clean.rs"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = run(
        binary,
        &["rampart-lint", "--format", "json", "tests/fixtures/r005.rs"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stdout(&output).contains(r#""code":"R005""#));
}

#[test]
fn the_workspace_examples_and_benchmarks_lint_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths: Vec<String> = [
        "crates/rampart/examples",
        "crates/rampart/src",
        "crates/rampart-sim/src",
        "bench",
    ]
    .iter()
    .map(|p| root.join(p).to_string_lossy().into_owned())
    .collect();
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    let output = lint(&args);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}
