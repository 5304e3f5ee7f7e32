//! Rendering findings: rustc-style text or a JSON array.

use std::fmt::Write as _;

use crate::finding::Finding;

/// How findings are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// `file:line:col: warning[R001]: message` followed by an indented help line.
    #[default]
    Text,
    /// One JSON array of objects with `file`, `line`, `column`, `code`,
    /// `message` and `help`.
    Json,
}

impl Format {
    /// Parses a `--format` value: `text` or `json`.
    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// Renders `findings` in `format`. Text output for no findings is empty (the
/// command then prints [`clean_summary`]); JSON output is always an array.
pub fn render(findings: &[Finding], format: Format) -> String {
    match format {
        Format::Text => render_text(findings),
        Format::Json => render_json(findings),
    }
}

/// The line the text format prints when a run is clean: nothing reported
/// and no file unreadable or unparsable. JSON output has no summary: a clean
/// run prints `[]`.
///
/// ```
/// assert_eq!(
///     rampart_lint::report::clean_summary(12),
///     "rampart-lint: 12 files checked, no findings\n"
/// );
/// assert_eq!(
///     rampart_lint::report::clean_summary(1),
///     "rampart-lint: 1 file checked, no findings\n"
/// );
/// ```
pub fn clean_summary(files: usize) -> String {
    let noun = if files == 1 { "file" } else { "files" };
    format!("rampart-lint: {files} {noun} checked, no findings\n")
}

/// Renders findings rustc-style, two lines each.
///
/// ```
/// use rampart_lint::{Finding, Rule};
///
/// let finding = Finding {
///     file: "src/lib.rs".into(),
///     line: 12,
///     column: 5,
///     rule: Rule::R003,
///     message: "`max_attempts(0)`: ...".into(),
///     help: "use `.max_attempts(1)` ...".into(),
/// };
/// assert_eq!(
///     rampart_lint::report::render_text(&[finding]),
///     "src/lib.rs:12:5: warning[R003]: `max_attempts(0)`: ...\n  help: use `.max_attempts(1)` ...\n"
/// );
/// ```
pub fn render_text(findings: &[Finding]) -> String {
    let mut text = String::new();
    for finding in findings {
        // Writing to a `String` cannot fail.
        let _ = writeln!(
            text,
            "{}:{}:{}: warning[{}]: {}\n  help: {}",
            finding.file, finding.line, finding.column, finding.rule, finding.message, finding.help
        );
    }
    text
}

/// Renders findings as a JSON array, one object per line.
///
/// ```
/// assert_eq!(rampart_lint::report::render_json(&[]), "[]\n");
/// ```
pub fn render_json(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "[]\n".to_owned();
    }
    let mut json = String::from("[\n");
    for (index, finding) in findings.iter().enumerate() {
        let separator = if index + 1 < findings.len() { "," } else { "" };
        let _ = writeln!(
            json,
            "  {{\"file\":{},\"line\":{},\"column\":{},\"code\":{},\"message\":{},\"help\":{}}}{separator}",
            json_string(&finding.file),
            finding.line,
            finding.column,
            json_string(finding.rule.code()),
            json_string(&finding.message),
            json_string(&finding.help),
        );
    }
    json.push_str("]\n");
    json
}

/// Quotes and escapes `text` as a JSON string.
///
/// ```
/// assert_eq!(rampart_lint::report::json_string("a \"b\"\n"), r#""a \"b\"\n""#);
/// ```
pub fn json_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            control if u32::from(control) < 0x20 || control == '\u{7f}' => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(control));
            }
            // Separators that are valid JSON but break JavaScript consumers.
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(character));
            }
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::{json_string, render_json, render_text};
    use crate::{Finding, Rule};

    fn finding(file: &str, message: &str) -> Finding {
        Finding {
            file: file.to_owned(),
            line: 3,
            column: 9,
            rule: Rule::R001,
            message: message.to_owned(),
            help: "help".to_owned(),
        }
    }

    #[test]
    fn control_characters_and_quotes_are_escaped_in_json() {
        assert_eq!(json_string("tab\there"), "\"tab\\there\"");
        assert_eq!(json_string("bell\u{7}"), "\"bell\\u0007\"");
        assert_eq!(json_string("back\\slash"), "\"back\\\\slash\"");
        assert_eq!(json_string("ünïcode"), "\"ünïcode\"");
    }

    #[test]
    fn json_objects_are_separated_by_commas() {
        let json = render_json(&[finding("a.rs", "one"), finding("b \"q\".rs", "two")]);
        assert_eq!(
            json,
            "[\n  {\"file\":\"a.rs\",\"line\":3,\"column\":9,\"code\":\"R001\",\"message\":\"one\",\"help\":\"help\"},\n  {\"file\":\"b \\\"q\\\".rs\",\"line\":3,\"column\":9,\"code\":\"R001\",\"message\":\"two\",\"help\":\"help\"}\n]\n"
        );
    }

    #[test]
    fn no_findings_render_no_text() {
        assert_eq!(render_text(&[]), "");
    }
}
