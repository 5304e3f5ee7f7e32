//! Static checks for code that uses [rampart]: mistakes that compile but
//! quietly defeat a policy's timeouts, cancellation or shared state.
//!
//! `rampart-lint` parses Rust sources with `syn` and looks at how policies
//! are built and run. It is syntactic: it sees the code as written, not
//! types or name resolution.
//!
//! | Code | Finds | Why it matters |
//! |------|-------|----------------|
//! | R001 | a callback passed to `run`, `try_run`, `run_blocking` or `try_run_blocking` that never uses its attempt handle (`_`, `_attempt`, or a name the body never mentions) | in the default abandon mode the ceiling drops the attempt's future, but work that outlives it (a spawned task, a thread), a blocking callback and a cooperative-mode attempt run on |
//! | R002 | inside such a callback, the token given to `.call().token(..)` earlier in the chain, or a fresh `CancellationToken::new()` | the caller's token does not fire at the attempt's ceiling; a fresh token never fires |
//! | R003 | `.max_attempts(0)`, or a literal zero `.attempt_timeout(..)` / `.total_timeout(..)`, unless the chain goes on to `.expect_err(..)`, `.unwrap_err()`, `.is_err()` or `.err()` (a test of the rejection) | `build()` rejects them |
//! | R004 | a literal attempt timeout longer than the literal total timeout in the same builder chain | every attempt is cut to the deadline, so the attempt timeout means nothing |
//! | R005 | `Policy::builder()`, `RetryBudget::builder()` or `Breaker::builder()` inside a loop body or a callback (not `Policy::none()`, a clone of one shared pass-through policy) | the component's state (budget, breaker, latency estimate) never accumulates across calls |
//! | R006 | `Policy::builder()...build()` inside a request handler that then runs that policy | breaker state, retry budget and latency estimate are per policy: one built per request never opens its breaker and never spends its budget |
//! | R007 | a plain `tokio::spawn` (or `task::spawn`, `spawn_blocking`, `std::thread::spawn`) in a request handler or ambient scope, of work that runs a policy or reads the ambient context | the ambient deadline and criticality do not cross it; `rampart::Ambient::spawn` (`bind`, `spawn_blocking`, `carry`) carries them |
//! | R008 | `.bypass_policy()` on rampart-http's reqwest `Client`, unless the chain goes on to `.build()` the request (which the client's `execute` then governs) | what is sent through the raw reqwest client has no deadline, timeout, retry, breaker, budget or quota, and carries no deadline or criticality to the next service |
//!
//! R006 and R007 recognise a request handler by its signs: an `async fn`
//! with an extractor parameter (`Request<..>`, `State<..>`, `Json<..>`...),
//! a route attribute, or a name the file passes to a router (`get(health)`),
//! and async closures given to a router. The crate README lists them, with
//! each rule's limits.
//!
//! The command prints findings rustc-style (or as JSON with `--format json`):
//!
//! ```text
//! src/client.rs:12:30: warning[R001]: callback never uses its attempt handle `attempt`; the ceiling drops the attempt's future (the default abandon mode) but cannot stop work that outlives it (a spawned task, a thread) or a cooperative-mode attempt
//!   help: pass `attempt.token()` (or `attempt`) to the work so the ceiling can cancel it
//! ```
//!
//! and, when there is nothing to report, one line of summary
//! (`rampart-lint: 12 files checked, no findings`; JSON prints `[]`).
//!
//! The same checks are available as a library:
//!
//! ```
//! let source = r#"
//!     fn fetch(policy: &rampart::Policy) {
//!         let _ = policy.call().run_blocking(|_attempt| std::fs::read("data"));
//!     }
//! "#;
//! let findings = rampart_lint::lint_source("src/fetch.rs", source)?;
//! assert_eq!(findings.len(), 1);
//! assert_eq!(findings[0].rule, rampart_lint::Rule::R001);
//! assert_eq!((findings[0].line, findings[0].column), (3, 44));
//! # Ok::<(), rampart_lint::ParseError>(())
//! ```
//!
//! [rampart]: https://github.com/rampart-rs/rampart

pub mod cli;
pub mod duration;
mod finding;
pub mod report;
mod rules;
mod syntax;
pub mod walk;

use std::fmt;

pub use finding::{Finding, Rule};

/// A source file that is not valid Rust syntax.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line of the error.
    pub line: usize,
    /// 1-based column of the error.
    pub column: usize,
    /// What the parser expected.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses `source` and runs every rule over it. `file` is only used to
/// label the findings, which come back sorted by line and column.
pub fn lint_source(file: &str, source: &str) -> Result<Vec<Finding>, ParseError> {
    let syntax = syn::parse_file(source).map_err(|error| {
        let start = error.span().start();
        ParseError {
            line: start.line,
            column: start.column + 1,
            message: error.to_string(),
        }
    })?;
    let mut findings: Vec<Finding> = rules::check_file(&syntax)
        .into_iter()
        .map(|raw| raw.in_file(file))
        .collect();
    findings.sort();
    findings.dedup();
    Ok(findings)
}
