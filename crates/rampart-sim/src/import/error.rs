//! Why a trace file could not be imported: the line (of an OTLP file, or of a Jaeger file
//! that is not JSON) or the place in the document (`data[0].spans[3].startTime`, Jaeger), and
//! what was wrong.
//!
//! Every error is permanent for the file as given (reading it again gives the same error),
//! except a read error, which the source reported. A file that is merely thin (spans with
//! missing parents, calls into services that were not traced) is not an error: the graph is
//! built from what is there and the rest is listed in [`ImportedGraph::notes`].
//!
//! [`ImportedGraph::notes`]: super::ImportedGraph::notes

use std::fmt;
use std::io;

/// Why a trace file could not be imported.
#[derive(Debug)]
pub struct ImportError {
    line: Option<usize>,
    message: String,
    source: Option<io::Error>,
}

impl ImportError {
    /// A problem with line `line`.
    #[cold]
    pub(super) fn at(line: usize, message: impl Into<String>) -> ImportError {
        ImportError {
            line: Some(line),
            message: message.into(),
            source: None,
        }
    }

    /// A problem with the file as a whole.
    #[cold]
    pub(super) fn whole(message: impl Into<String>) -> ImportError {
        ImportError {
            line: None,
            message: message.into(),
            source: None,
        }
    }

    /// The source failed while line `line` was read.
    #[cold]
    pub(super) fn io(line: usize, source: io::Error) -> ImportError {
        ImportError {
            line: Some(line),
            message: format!("cannot be read: {source}"),
            source: Some(source),
        }
    }

    /// Line `line` is not the JSON of an export request. serde_json's own position (always
    /// line 1 of the one line it was given) becomes a column.
    #[cold]
    pub(super) fn json(line: usize, e: &serde_json::Error) -> ImportError {
        let text = e.to_string();
        let what = text
            .rfind(" at line ")
            .map_or(text.as_str(), |at| &text[..at]);
        let why = match e.classify() {
            serde_json::error::Category::Eof => "cut short (is the file truncated?)",
            serde_json::error::Category::Syntax => "not JSON",
            _ => "not an OTLP JSON export request",
        };
        ImportError::at(line, format!("{why}: {what}, at column {}", e.column()))
    }

    /// The source failed while the whole document was read (a Jaeger file).
    #[cold]
    pub(super) fn read(source: io::Error) -> ImportError {
        ImportError {
            line: None,
            message: format!("cannot be read: {source}"),
            source: Some(source),
        }
    }

    /// The document is not JSON (a Jaeger file): serde_json's line, and its column in the
    /// message.
    #[cold]
    pub(super) fn document(e: &serde_json::Error) -> ImportError {
        let text = e.to_string();
        let what = text
            .rfind(" at line ")
            .map_or(text.as_str(), |at| &text[..at]);
        let why = match e.classify() {
            serde_json::error::Category::Eof => "cut short (is the file truncated?)",
            serde_json::error::Category::Io => "cannot be read",
            _ => "not JSON",
        };
        ImportError::at(e.line(), format!("{why}: {what}, at column {}", e.column()))
    }

    /// The line (1-based) the problem is on, when it is on one.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// What was wrong, without the line.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ImportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
