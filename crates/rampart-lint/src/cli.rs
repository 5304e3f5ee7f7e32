//! The command line: argument parsing, the lint run and the exit status.
//!
//! Both binaries (`rampart-lint` and `cargo-rampart-lint`) call [`main`].

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::finding::{Finding, Rule};
use crate::report::{self, Format};
use crate::walk;

/// Exit status when nothing is reported.
pub const EXIT_CLEAN: u8 = 0;
/// Exit status when at least one finding is reported.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit status on bad usage, unreadable input or a file that does not parse.
pub const EXIT_ERROR: u8 = 2;

/// Stack for the lint thread: syntax trees are walked recursively, and
/// deeply nested (machine-generated) code must not overflow the stack.
const STACK_SIZE: usize = 256 * 1024 * 1024;

/// Runs the command with the process's arguments, stdout and stderr.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let lint = move || {
        let stdout = io::stdout();
        let stderr = io::stderr();
        run(args, &mut stdout.lock(), &mut stderr.lock())
    };
    let status = match std::thread::Builder::new()
        .name("rampart-lint".to_owned())
        .stack_size(STACK_SIZE)
        .spawn(lint)
    {
        Ok(handle) => handle.join().unwrap_or(EXIT_ERROR),
        Err(error) => {
            eprintln!("error: cannot start the lint thread: {error}");
            EXIT_ERROR
        }
    };
    ExitCode::from(status)
}

/// Runs the command: `args` includes the program name (and, under cargo,
/// the `rampart-lint` subcommand name). Findings go to `out`, errors to
/// `err`. Returns the exit status: [`EXIT_CLEAN`], [`EXIT_FINDINGS`] or
/// [`EXIT_ERROR`].
///
/// Write errors (a closed pipe) are ignored: the exit status still says what
/// was found.
pub fn run(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let options = match parse_args(args) {
        Ok(Command::Lint(options)) => options,
        Ok(Command::Help) => {
            let _ = out.write_all(usage().as_bytes());
            return EXIT_CLEAN;
        }
        Ok(Command::Version) => {
            let _ = writeln!(out, "rampart-lint {}", env!("CARGO_PKG_VERSION"));
            return EXIT_CLEAN;
        }
        Err(message) => {
            let _ = writeln!(
                err,
                "error: {message}\n\nRun `rampart-lint --help` for usage."
            );
            return EXIT_ERROR;
        }
    };

    let mut failed = false;
    let mut files = Vec::new();
    let mut seen = HashSet::new();
    for root in &options.paths {
        let (found, errors) = walk::rust_files(root);
        for error in errors {
            failed = true;
            let _ = writeln!(
                err,
                "error: cannot read {}: {}",
                error.path.display(),
                error.error
            );
        }
        files.extend(found.into_iter().filter(|file| seen.insert(file.clone())));
    }

    let mut findings: Vec<Finding> = Vec::new();
    for file in &files {
        let name = file.display().to_string();
        match std::fs::read_to_string(file) {
            Err(error) => {
                failed = true;
                let _ = writeln!(err, "error: cannot read {name}: {error}");
            }
            Ok(source) => match crate::lint_source(&name, &source) {
                Ok(found) => findings.extend(found),
                Err(error) => {
                    failed = true;
                    let _ = writeln!(err, "error: cannot parse {name}: {error}");
                }
            },
        }
        // Every span of this file has been turned into a line and column:
        // free the thread's source map so that memory does not grow with
        // the size of the tree.
        proc_macro2::extra::invalidate_current_thread_spans();
    }

    findings.sort();
    findings.dedup();
    let clean = !failed && findings.is_empty();
    let rendered = match options.format {
        Format::Text if clean => report::clean_summary(files.len()),
        format => report::render(&findings, format),
    };
    let _ = out.write_all(rendered.as_bytes());
    let _ = out.flush();

    if failed {
        EXIT_ERROR
    } else if clean {
        EXIT_CLEAN
    } else {
        EXIT_FINDINGS
    }
}

/// What the arguments ask for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Lint(Options),
    Help,
    Version,
}

#[derive(Debug, PartialEq, Eq)]
struct Options {
    format: Format,
    paths: Vec<PathBuf>,
}

fn parse_args(args: Vec<OsString>) -> Result<Command, String> {
    let mut args = args.into_iter().skip(1).peekable();
    // `cargo rampart-lint ARGS` runs `cargo-rampart-lint rampart-lint ARGS`.
    if args.peek().is_some_and(|first| first == "rampart-lint") {
        args.next();
    }

    let mut format = Format::Text;
    let mut paths = Vec::new();
    let mut only_paths = false;
    while let Some(arg) = args.next() {
        if only_paths {
            paths.push(PathBuf::from(arg));
            continue;
        }
        let Some(text) = arg.to_str() else {
            // Not UTF-8, so not one of our options: a path.
            paths.push(PathBuf::from(arg));
            continue;
        };
        match text {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--" => only_paths = true,
            "--format" => {
                let value = args
                    .next()
                    .ok_or("`--format` needs a value: `text` or `json`")?;
                format = format_value(&value.to_string_lossy())?;
            }
            _ if text.starts_with("--format=") => {
                format = format_value(&text["--format=".len()..])?;
            }
            _ if text.starts_with('-') && text.len() > 1 => {
                return Err(format!("unknown option `{text}`"));
            }
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    if paths.is_empty() {
        paths.push(PathBuf::from("."));
    }
    Ok(Command::Lint(Options { format, paths }))
}

fn format_value(value: &str) -> Result<Format, String> {
    Format::from_name(value)
        .ok_or_else(|| format!("unknown format `{value}`: expected `text` or `json`"))
}

/// The `--help` text.
pub fn usage() -> String {
    let mut rules = String::new();
    for rule in Rule::ALL {
        rules.push_str(&format!("  {rule}  {}\n", rule.summary()));
    }
    format!(
        "\
rampart-lint: static checks for code that uses rampart

Usage: rampart-lint [OPTIONS] [PATH...]
       cargo rampart-lint [OPTIONS] [PATH...]

Checks every *.rs file under each PATH (default: the current directory),
skipping target/ and hidden directories. A file named directly is checked
whatever its extension.

Options:
      --format <FORMAT>  `text` (rustc-style, the default) or `json`
  -h, --help             print this help
  -V, --version          print the version

Rules:
{rules}
A clean run prints one line in text format (`rampart-lint: N files
checked, no findings`) and `[]` in JSON.

Exit status: 0 when clean, 1 when anything is reported, 2 on bad usage,
an unreadable path or a file that does not parse.
"
    )
}

#[cfg(test)]
mod tests {
    use super::{Command, Options, parse_args};
    use crate::report::Format;
    use std::ffi::OsString;
    use std::path::PathBuf;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(OsString::from).collect())
    }

    #[test]
    fn cargo_subcommand_name_is_skipped() {
        assert_eq!(
            parse(&["cargo-rampart-lint", "rampart-lint", "--format=json", "src"]),
            Ok(Command::Lint(Options {
                format: Format::Json,
                paths: vec![PathBuf::from("src")],
            }))
        );
    }

    #[test]
    fn no_path_means_the_current_directory() {
        assert_eq!(
            parse(&["rampart-lint"]),
            Ok(Command::Lint(Options {
                format: Format::Text,
                paths: vec![PathBuf::from(".")],
            }))
        );
    }

    #[test]
    fn bad_options_are_rejected() {
        assert!(parse(&["rampart-lint", "--frobnicate"]).is_err());
        assert!(parse(&["rampart-lint", "--format"]).is_err());
        assert!(parse(&["rampart-lint", "--format", "xml"]).is_err());
    }

    #[test]
    fn double_dash_ends_options() {
        assert_eq!(
            parse(&["rampart-lint", "--", "--help"]),
            Ok(Command::Lint(Options {
                format: Format::Text,
                paths: vec![PathBuf::from("--help")],
            }))
        );
    }
}
