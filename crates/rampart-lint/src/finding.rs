//! What a check reports: the rule that fired, where, and what to do about it.

use std::fmt;

/// One of the checks `rampart-lint` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A callback never uses its attempt handle.
    R001,
    /// A callback uses the caller's token (or a fresh one) instead of the attempt's.
    R002,
    /// A literal builder value that `build()` rejects.
    R003,
    /// A literal attempt timeout longer than the literal total timeout.
    R004,
    /// A policy, breaker or budget built inside a loop body or a callback.
    R005,
    /// A policy built per request in a handler, and run there.
    R006,
    /// A plain spawn, in a request scope, of work that needs the ambient context.
    R007,
    /// A request sent through the raw reqwest client under rampart-http's `Client`.
    R008,
}

impl Rule {
    /// Every rule, in code order.
    pub const ALL: [Rule; 8] = [
        Rule::R001,
        Rule::R002,
        Rule::R003,
        Rule::R004,
        Rule::R005,
        Rule::R006,
        Rule::R007,
        Rule::R008,
    ];

    /// The rule's code as printed, e.g. `"R001"`.
    pub fn code(self) -> &'static str {
        match self {
            Rule::R001 => "R001",
            Rule::R002 => "R002",
            Rule::R003 => "R003",
            Rule::R004 => "R004",
            Rule::R005 => "R005",
            Rule::R006 => "R006",
            Rule::R007 => "R007",
            Rule::R008 => "R008",
        }
    }

    /// A one-line description of what the rule looks for.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::R001 => "callback never uses its attempt handle",
            Rule::R002 => {
                "callback uses the caller's token (or a fresh one) instead of the attempt's"
            }
            Rule::R003 => "literal builder value that `build()` rejects",
            Rule::R004 => "literal attempt timeout longer than the literal total timeout",
            Rule::R005 => "policy, breaker or budget built inside a loop body or a callback",
            Rule::R006 => "policy built per request in a handler and run there",
            Rule::R007 => "plain spawn in a request scope of work that needs the ambient deadline",
            Rule::R008 => "request sent through the raw reqwest client, bypassing rampart",
        }
    }

    /// Parses a code such as `"R003"` (case-insensitive).
    pub fn from_code(code: &str) -> Option<Rule> {
        Rule::ALL
            .into_iter()
            .find(|rule| rule.code().eq_ignore_ascii_case(code))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One reported problem, located in a source file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    /// The file, as the path was given or found while walking.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// The rule that fired.
    pub rule: Rule,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

/// A finding before it is attached to a file: what the rules produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) rule: Rule,
    pub(crate) message: String,
    pub(crate) help: String,
}

impl Raw {
    /// Creates a finding at the start of `span`.
    pub(crate) fn at(
        span: proc_macro2::Span,
        rule: Rule,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> Raw {
        let start = span.start();
        Raw {
            line: start.line,
            column: start.column + 1,
            rule,
            message: message.into(),
            help: help.into(),
        }
    }

    /// Attaches the finding to `file`.
    pub(crate) fn in_file(self, file: &str) -> Finding {
        Finding {
            file: file.to_owned(),
            line: self.line,
            column: self.column,
            rule: self.rule,
            message: self.message,
            help: self.help,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rule;

    #[test]
    fn codes_round_trip_through_from_code() {
        for rule in Rule::ALL {
            assert_eq!(Rule::from_code(rule.code()), Some(rule));
        }
        assert_eq!(Rule::from_code("r004"), Some(Rule::R004));
        assert_eq!(Rule::from_code("R999"), None);
    }
}
