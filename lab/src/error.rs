//! The crate's one error type.
//!
//! Callers match on it: a payload conflict, an outcome nobody knows and a failed scenario check are
//! different situations that need different handling, so each has its own variant with named fields.

use std::path::PathBuf;

/// Everything that can go wrong in the lab, from a malformed key to a failed scenario check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key, caller or operation name broke a validation rule.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidIdentifier {
        /// Which identifier was at fault: `operation key`, `caller` or `operation`.
        field: &'static str,
        /// The rejected value (cut short when it is very long).
        value: String,
        /// The rule it broke.
        reason: &'static str,
    },

    /// A payload was valid JSON but not a JSON object.
    #[error("payload must be a JSON object, found {found}")]
    PayloadNotObject {
        /// The JSON type that was found instead (`array`, `string`, ...).
        found: &'static str,
    },

    /// Payload text could not be read: not JSON, a key repeated within one object, nesting too
    /// deep, or characters after the value.
    #[error("invalid payload text: {source}")]
    PayloadText {
        /// The parser's error, with the line and column.
        source: serde_json::Error,
    },

    /// The key already names an operation whose saved payload differs from this one.
    /// Nothing was written.
    #[error("operation key {key:?} was first used with a different payload; nothing was written")]
    PayloadConflict {
        /// The reused key.
        key: String,
    },

    /// The call may or may not have taken effect, and the caller cannot tell which.
    ///
    /// Retry with the same key to learn the outcome; never switch to a new key.
    #[error("outcome unknown for {}: {reason}; retry with the same key", key_label(.key))]
    OutcomeUnknown {
        /// The key the call carried, if any.
        key: Option<String>,
        /// What made the outcome unknown (a lost reply, a wait that ran out, ...).
        reason: String,
    },

    /// The service no longer keeps the record of this key: its retention window passed. It cannot
    /// tell whether the operation took effect, and it will not create it again under this key.
    /// A person must look.
    #[error("operation key {key:?} has expired on the service; its outcome must be reviewed")]
    KeyExpired {
        /// The expired key.
        key: String,
    },

    /// The tool cannot do what the request asks, and says so rather than do something else: an
    /// adapter that speaks for one caller asked to act for another, or a fault its service has
    /// no hook for. The conformance run reports the point as not covered.
    #[error("unsupported by this tool: {what}")]
    Unsupported {
        /// What the tool cannot do, and why.
        what: String,
    },

    /// A fault injected on purpose before the commit; the transaction was rolled back.
    #[error("injected failure before commit; the transaction was rolled back")]
    InjectedFailure,

    /// The SQLite store reported an error.
    #[error("SQLite store: {source}")]
    Store {
        /// The underlying rusqlite error.
        #[from]
        source: rusqlite::Error,
    },

    /// A PostgreSQL connection URL could not be read.
    #[cfg(feature = "postgres")]
    #[error("invalid PostgreSQL URL {url:?}: {}", describe_postgres(.source))]
    DatabaseUrl {
        /// The URL as given, with any password replaced by `***`.
        url: String,
        /// The parse error.
        source: ::postgres::Error,
    },

    /// A connection to the PostgreSQL server could not be opened.
    #[cfg(feature = "postgres")]
    #[error("cannot connect to PostgreSQL at {target}: {}", describe_postgres(.source))]
    PostgresConnect {
        /// Host, port, database and user (never the password).
        target: String,
        /// The connection error.
        source: ::postgres::Error,
    },

    /// The PostgreSQL store reported an error.
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL store: {}", describe_postgres(.source))]
    Postgres {
        /// The underlying rust-postgres error; for a server error, its SQLSTATE code is in
        /// [`postgres::Error::code`](::postgres::Error::code).
        #[from]
        source: ::postgres::Error,
    },

    /// A temporary folder for a fresh store could not be created.
    #[error("cannot create a temporary folder: {source}")]
    TemporaryFolder {
        /// The I/O error.
        source: std::io::Error,
    },

    /// An operating-system call the store needs failed (resolving a path, starting a thread).
    #[error("{action}: {source}")]
    Io {
        /// What was being done, naming the file where there is one.
        action: String,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A ticket tool adapter written outside this crate reported an error of its own.
    ///
    /// `?` converts a boxed error (`Box<dyn Error + Send + Sync>`, what `"text".into()` and most
    /// client libraries' errors become) into this; [`Error::adapter`] wraps any other error.
    #[error("adapter: {source}")]
    Adapter {
        /// The adapter's error.
        #[from]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// `lab serve` could not listen on its address.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address asked for, such as `127.0.0.1:8080`.
        address: String,
        /// The server library's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An HTTP ticket service answered something the contract does not allow, or could not be
    /// reached for a call whose outcome does not matter (a listing, a count).
    #[error("HTTP {method} {url}: {problem}")]
    Http {
        /// The request method.
        method: &'static str,
        /// The URL called.
        url: String,
        /// The status the service answered with, or `None` when no answer came or the call
        /// never reached the point of asking for anything (a refused handshake).
        status: Option<u16>,
        /// What was wrong: the status and body received, or the transport error.
        problem: String,
    },

    /// An MCP server could not be started or reached, or a call whose outcome does not matter
    /// (the handshake, the first count) failed; named by its transport and where it is
    /// (`stdio: lab mcp ...`, `Streamable HTTP: http://...`), never as HTTP when it is stdio.
    #[error("MCP {place}: {problem}")]
    Mcp {
        /// The transport and the command or URL.
        place: String,
        /// What went wrong.
        problem: String,
    },

    /// A scenario check failed: the tool under test broke the retry contract.
    #[error("{scenario}: expected {expected}, observed {observed}")]
    ScenarioFailed {
        /// The scenario's name, as printed in the report.
        scenario: &'static str,
        /// What the contract requires.
        expected: String,
        /// What the tool did.
        observed: String,
    },

    /// An input file (the fixture, an evidence file) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    InputUnreadable {
        /// The file's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// An input was read but is wrong: a file's content, or a command-line option's value.
    #[error("{subject}: {problem}")]
    InputInvalid {
        /// What holds the wrong input: the file's path, or the option's name (`--caller`).
        subject: String,
        /// What is wrong, naming the field at fault.
        problem: String,
    },

    /// A `lab check --target` file has a field whose value the check cannot use: `field`
    /// names it, `problem` says what is wrong and `fix`, where there is one, what to write.
    /// Nothing was sent; exit status 2.
    #[error("{file}: {error}")]
    TargetInvalid {
        /// The target file's path.
        file: String,
        /// The field at fault, the problem and the fix.
        error: FieldError,
    },

    /// A `lab check --target` file does not describe the service it names: the check's own
    /// exchanges (its calibration, before any point, or a later count or reset) met an answer
    /// that only a fault in the file explains. Nothing was graded; exit status 2.
    #[error("{file} does not describe the service: {field}: {problem}")]
    TargetMismatch {
        /// The target file's path.
        file: String,
        /// The field at fault (`identity.json_pointer`, `count.sql.sqlite`, `key.shape`).
        field: String,
        /// The exchange (method, path, status), what came back (trimmed), and the likely fix.
        problem: String,
    },

    /// The evidence file could not be written; any earlier file at that path is unchanged.
    #[error("cannot write output {}: {source}", path.display())]
    OutputUnwritable {
        /// The output path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps an adapter's own error, for `map_err(Error::adapter)?` in a [`TicketTool`]
    /// implementation outside this crate.
    ///
    /// [`TicketTool`]: crate::TicketTool
    ///
    /// ```
    /// let err = std::fs::read("/nonexistent/ticket").map_err(lab::Error::adapter).unwrap_err();
    /// assert!(err.to_string().starts_with("adapter: "));
    /// ```
    pub fn adapter(source: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Adapter {
            source: Box::new(source),
        }
    }

    /// True for errors caused by the input the user gave (fixture, output path, identifiers), as
    /// opposed to a tool that broke the contract or failed at run time. The command line exits with
    /// status 2 for these and 1 for the rest.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::InvalidIdentifier { .. }
            | Error::PayloadNotObject { .. }
            | Error::PayloadText { .. }
            | Error::InputUnreadable { .. }
            | Error::InputInvalid { .. }
            | Error::TargetMismatch { .. }
            | Error::OutputUnwritable { .. }
            | Error::TargetInvalid { .. } => true,
            #[cfg(feature = "postgres")]
            Error::DatabaseUrl { .. } => true,
            _ => false,
        }
    }
}

/// A rust-postgres error on one line: a server error with its severity, SQLSTATE code, message and
/// detail; any other error with its cause. (The error's own `Display` says only "db error".)
///
/// It lives beside the variants whose messages use it, so the error type depends on the
/// PostgreSQL client crate and not on the store built on it.
#[cfg(feature = "postgres")]
pub(crate) fn describe_postgres(err: &::postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" ({detail})"));
        }
        return text;
    }
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

fn key_label(key: &Option<String>) -> String {
    match key {
        Some(key) => format!("operation key {key:?}"),
        None => "a call without an operation key".to_owned(),
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `text` on one line, as a message is printed: every run of white space, line breaks included,
/// becomes one space.
#[cfg(feature = "http")]
pub(crate) fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a target file's validation found wrong: the field at fault (`key.shape`,
/// `callers[1].headers`, `[count]`), what is wrong with its value, and the fix where there is one
/// to give. It prints as `field: problem; fix`, the line `lab check` prints after the file's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field at fault, as the file spells its path.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What to write instead, when there is one thing to say.
    pub fix: Option<String>,
}

impl FieldError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            problem: problem.into(),
            fix: None,
        }
    }

    /// The same problem, with its fix.
    #[must_use]
    pub fn fix(mut self, fix: impl Into<String>) -> FieldError {
        self.fix = Some(fix.into());
        self
    }

    /// The error `lab check` reports for the file at `path`.
    pub fn in_file(self, path: &std::path::Path) -> Error {
        Error::TargetInvalid {
            file: path.display().to_string(),
            error: self,
        }
    }

    /// The problem and its fix, without the field: `problem; fix`.
    pub fn what(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}; {fix}", self.problem),
            None => self.problem.clone(),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.what())
    }
}

impl std::error::Error for FieldError {}
