//! The `[mcp]` section of a target file: which MCP server to check, over which transport, which
//! tool creates, which argument carries its key (or that none does), and how the check reads
//! identities, errors and counts from outside. Validated as a whole before anything is started
//! or sent; every refusal names its field (`mcp.tool.key_argument`, `mcp.callers[1].args`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::super::excerpt::one_line;
use super::super::target::{Checked, FieldError, Overrides, Vary, argv, required};
pub use super::super::target::{CreateRoute, UPSTREAM_PLACEHOLDER, Upstream, UpstreamKeyForm};
use super::super::target::{UpstreamFile, upstream};
use super::super::target::{base_url_in, folder_of, not_toml, placeholders, vary};

/// A validated MCP target.
#[derive(Clone, Debug)]
pub struct McpTarget {
    /// The file it was read from, for messages.
    pub path: PathBuf,
    /// How the check reaches the server.
    pub transport: McpTransport,
    /// How long one call may take before it counts as "no answer".
    pub timeout: Duration,
    /// The create tool and its arguments.
    pub tool: CreateTool,
    /// Where a success names what it created.
    pub identity: McpIdentity,
    /// How errors are told apart.
    pub errors: McpErrors,
    /// One or more callers (the first is the default caller).
    pub callers: Vec<McpCaller>,
    /// How effects are counted.
    pub count: McpCount,
    /// The concurrent point's size.
    pub load: McpLoad,
    /// `[upstream]`: the server wraps an HTTP API, which the lab serves and records.
    pub upstream: Option<Upstream>,
    /// The target file's folder: `mcp.command` and `mcp.count.command` run in it, and a
    /// relative `mcp.count.sql.sqlite` is read from it.
    pub folder: PathBuf,
}

/// The two transports of MCP.
#[derive(Clone, Debug)]
pub enum McpTransport {
    /// A command the check starts; each session is a process of its own (a reconnect is a new
    /// process). `{{dir}}` in any word or value is a folder the check makes for the run.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Variables added to the environment.
        env: Vec<(String, String)>,
    },
    /// Streamable HTTP at a URL (a reconnect is a new session).
    Http {
        /// The endpoint, `http://127.0.0.1:PORT/mcp`.
        url: String,
        /// Headers sent with every request (the caller's are added).
        headers: Vec<(String, String)>,
    },
}

/// `[mcp.tool]`.
#[derive(Clone, Debug)]
pub struct CreateTool {
    /// The tool's name.
    pub name: String,
    /// The argument that carries the key; `None` when the tool takes none.
    pub key_argument: Option<String>,
    /// The arguments, a JSON object with `"{{field}}"` placeholders.
    pub arguments: Value,
    /// The fields' values, sent exactly as given unless `vary` names the field.
    pub fields: BTreeMap<String, Value>,
    /// The fields the check may vary, and how (`mcp.tool.vary`).
    pub vary: BTreeMap<String, Vary>,
}

/// Where a success names its effect.
#[derive(Clone, Debug)]
pub enum McpIdentity {
    /// A JSON pointer into `structuredContent`.
    Structured(String),
    /// A regex over the text content (the first group, or the whole match).
    Text(regex::Regex),
}

/// `[mcp.errors]`.
#[derive(Clone, Debug)]
pub struct McpErrors {
    /// A JSON pointer into an error result's `structuredContent` naming its code.
    pub code_pointer: Option<String>,
    /// A JSON pointer into the text content read as JSON: any result (marked `isError` or not)
    /// with a code there is a refusal with that code.
    pub text_code_pointer: Option<String>,
    /// The same for plain text: the regex's first group is the code.
    pub text_code_pattern: Option<regex::Regex>,
    /// The codes of "this key was used with other arguments".
    pub conflict: Vec<String>,
    /// The codes of "a call with this key is still running".
    pub in_progress: Vec<String>,
    /// The codes of a malformed key.
    pub bad_key: Vec<String>,
    /// Fields laid over the create's to provoke a refusal (default: the first text field as
    /// the number 7).
    pub validation: BTreeMap<String, Value>,
}

/// One caller: how its sessions differ from another's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpCaller {
    /// A name for the report.
    pub name: String,
    /// Over stdio: words appended to the command.
    pub args: Vec<String>,
    /// Over stdio: variables added to the environment.
    pub env: Vec<(String, String)>,
    /// Over HTTP: headers (`Authorization`); redacted in the report.
    pub headers: Vec<(String, String)>,
}

/// How effects are counted.
#[derive(Clone, Debug)]
pub enum McpCount {
    /// A list or get tool called on each caller's (or one caller's) session.
    Tool {
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: Value,
        /// Where the list or number is.
        pointer: String,
        /// Whether the pointer is into `structuredContent` or into the text content read as JSON.
        from_text: bool,
        /// Which callers: `None` for each (summed), or one.
        caller: Option<usize>,
    },
    /// A read-only SQLite query; its first column is the count.
    Sqlite {
        /// The file (`{{dir}}` allowed).
        file: String,
        /// The query.
        query: String,
    },
    /// A command that prints one number (`{{dir}}` allowed).
    Command(Vec<String>),
    /// The tickets in the API the lab serves (`[upstream]`).
    Upstream,
}

/// `[mcp.load]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpLoad {
    /// Rounds of the concurrent-fresh-key point.
    pub rounds: usize,
    /// Calls released together in each round.
    pub calls: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoot {
    mcp: McpFile,
    upstream: Option<UpstreamFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpFile {
    transport: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    timeout_ms: Option<u64>,
    tool: Option<ToolFile>,
    identity: Option<IdentityFile>,
    errors: Option<ErrorsFile>,
    #[serde(default)]
    callers: Vec<CallerFile>,
    count: Option<CountFile>,
    load: Option<LoadFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    name: Option<String>,
    key_argument: Option<String>,
    no_key: Option<bool>,
    arguments: Option<Value>,
    #[serde(default)]
    fields: BTreeMap<String, Value>,
    #[serde(default)]
    vary: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityFile {
    structured_pointer: Option<String>,
    text_regex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorsFile {
    code_pointer: Option<String>,
    text_code_pointer: Option<String>,
    text_code_pattern: Option<String>,
    conflict: Option<Vec<String>>,
    in_progress: Option<Vec<String>>,
    bad_key: Option<Vec<String>>,
    validation: Option<BTreeMap<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallerFile {
    name: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountFile {
    tool: Option<CountToolFile>,
    sql: Option<SqlFile>,
    command: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountToolFile {
    name: Option<String>,
    arguments: Option<Value>,
    structured_pointer: Option<String>,
    text_pointer: Option<String>,
    caller: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlFile {
    sqlite: Option<String>,
    query: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadFile {
    rounds: Option<usize>,
    calls: Option<usize>,
}

/// The most rounds the concurrent-fresh-key point may run.
pub const MAX_ROUNDS: usize = 100;
/// The most calls released together.
pub const MAX_CALLS: usize = 64;

impl McpTarget {
    /// Validates a file whose TOML holds an `[mcp]` table; `path` names it in messages.
    ///
    /// # Errors
    /// The problem, naming the field at fault.
    pub fn parse(text: &str, path: &Path, overrides: &Overrides) -> crate::Result<McpTarget> {
        let root: FileRoot = toml::from_str(text).map_err(|err| not_toml(path, &err))?;
        McpTarget::validated(root, text, path, overrides).map_err(|err| err.in_file(path))
    }

    fn validated(
        root: FileRoot,
        text: &str,
        path: &Path,
        overrides: &Overrides,
    ) -> Checked<McpTarget> {
        let names_upstream = || {
            toml::from_str::<toml::Value>(text)
                .ok()
                .and_then(|file| file.get("mcp").map(ToString::to_string))
                .is_some_and(|mcp| mcp.contains(UPSTREAM_PLACEHOLDER))
        };
        if root.upstream.is_none() && names_upstream() {
            return Err(FieldError::new(
                "[upstream]",
                format!(
                    "the file names {UPSTREAM_PLACEHOLDER}, but has no [upstream] \
                     section to say which API the lab serves there"
                ),
            ));
        }
        let upstream = root.upstream.map(upstream).transpose()?;
        let upstream = super::super::target::with_upstream_port(upstream, overrides)?;
        let mut target = root.mcp.validate(overrides, upstream.is_some())?;
        if let Some(upstream) = &upstream {
            check_upstream_use(&target, upstream)?;
        }
        target.upstream = upstream;
        target.path = path.to_owned();
        target.folder = folder_of(path);
        Ok(target)
    }

    /// What `lab audit` reads of an `[mcp]` file: the create tool (its name and key
    /// argument) and where a result names its effect, validated as `lab check` validates
    /// them; the transport, callers and count may be left out.
    ///
    /// # Errors
    /// As [`McpTarget::parse`], for the sections it reads.
    pub fn audit_parts(text: &str, path: &Path) -> crate::Result<(CreateTool, McpIdentity)> {
        let root: FileRoot = toml::from_str(text).map_err(|err| not_toml(path, &err))?;
        let parts = || -> Checked<(CreateTool, McpIdentity)> {
            Ok((
                tool(required(root.mcp.tool, "[mcp.tool]")?)?,
                identity(required(root.mcp.identity, "[mcp.identity]")?)?,
            ))
        };
        parts().map_err(|err| err.in_file(path))
    }

    /// Whether the tool takes a key.
    pub fn keyed(&self) -> bool {
        self.tool.key_argument.is_some()
    }

    /// Where the server is, for the report's first line.
    pub fn describe(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, .. } => format!("stdio: {}", command.join(" ")),
            McpTransport::Http { url, .. } => format!("Streamable HTTP: {url}"),
        }
    }
}

impl McpFile {
    fn validate(mut self, overrides: &Overrides, upstream: bool) -> Checked<McpTarget> {
        let transport = self.transport(overrides)?;
        let timeout_ms = self.timeout_ms.unwrap_or(10_000);
        if !(100..=600_000).contains(&timeout_ms) {
            return Err(FieldError::new(
                "mcp.timeout_ms",
                format!("{timeout_ms}: expected 100 to 600000"),
            ));
        }
        let tool = tool(required(self.tool, "[mcp.tool]")?)?;
        let identity = identity(required(self.identity, "[mcp.identity]")?)?;
        let errors = errors(self.errors, &tool)?;
        let http = matches!(transport, McpTransport::Http { .. });
        let callers = callers(self.callers, http)?;
        let count = match (self.count, upstream) {
            (Some(file), _) => count(file, &callers)?,
            (None, true) => McpCount::Upstream,
            (None, false) => return Err(FieldError::new("[mcp.count]", "missing (required)")),
        };
        let load = match self.load {
            None => McpLoad::default(),
            Some(file) => load(file)?,
        };
        Ok(McpTarget {
            path: PathBuf::new(),
            transport,
            timeout: Duration::from_millis(timeout_ms),
            tool,
            identity,
            errors,
            callers,
            count,
            load,
            upstream: None,
            folder: PathBuf::new(),
        })
    }

    /// The transport, taking its fields out of the file: a command for stdio, a URL (or the
    /// `--url` given) for http, and none of the other's fields.
    fn transport(&mut self, overrides: &Overrides) -> Checked<McpTransport> {
        let transport = match self.transport.as_deref() {
            Some("stdio") => {
                if self.url.is_some() || !self.headers.is_empty() {
                    return Err(FieldError::new(
                        "mcp.url",
                        "mcp.url and mcp.headers are for transport = \"http\"",
                    ));
                }
                let command = required(self.command.take(), "mcp.command")?;
                argv(&command, "mcp.command")?;
                McpTransport::Stdio {
                    command,
                    env: env(std::mem::take(&mut self.env), "mcp.env")?,
                }
            }
            Some("http") => {
                if self.command.is_some() || !self.env.is_empty() {
                    return Err(FieldError::new(
                        "mcp.command",
                        "mcp.command and mcp.env are for transport = \"stdio\"",
                    ));
                }
                let (url, field) = match &overrides.base_url {
                    Some(url) => (url.clone(), "--url"),
                    None => (required(self.url.take(), "mcp.url")?, "mcp.url"),
                };
                base_url_in(&url, field, overrides.allow_remote)?;
                McpTransport::Http {
                    url,
                    headers: headers(std::mem::take(&mut self.headers), "mcp.headers")?,
                }
            }
            Some(other) => {
                return Err(FieldError::new(
                    "mcp.transport",
                    format!("{other:?}: expected \"stdio\" or \"http\""),
                ));
            }
            None => {
                return Err(FieldError::new(
                    "mcp.transport",
                    "missing (required): \"stdio\" or \"http\"",
                ));
            }
        };
        if overrides.base_url.is_some() && matches!(transport, McpTransport::Stdio { .. }) {
            return Err(FieldError::new("--url", "the file's transport is stdio")
                .fix("--url is for an http target"));
        }
        Ok(transport)
    }
}

impl Default for McpLoad {
    fn default() -> McpLoad {
        McpLoad {
            rounds: 4,
            calls: 6,
        }
    }
}

fn env(map: BTreeMap<String, String>, field: &str) -> Checked<Vec<(String, String)>> {
    map.into_iter()
        .map(|(name, value)| {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(FieldError::new(
                    format!("{field}.{name}"),
                    "an environment variable needs a name without = or NUL",
                ));
            }
            Ok((name, value))
        })
        .collect()
}

fn headers(map: BTreeMap<String, String>, field: &str) -> Checked<Vec<(String, String)>> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    map.into_iter()
        .map(|(name, value)| {
            if name.is_empty() || !name.bytes().all(token) {
                return Err(FieldError::new(
                    field,
                    format!("{name:?} is not a header name"),
                ));
            }
            if value
                .bytes()
                .any(|b| b != b'\t' && !(0x20..=0x7e).contains(&b))
            {
                return Err(FieldError::new(
                    format!("{field}.{name}"),
                    "the value holds a byte outside printable ASCII",
                ));
            }
            let lower = name.to_ascii_lowercase();
            if [
                "accept",
                "mcp-session-id",
                "mcp-protocol-version",
                "last-event-id",
                "content-type",
                "content-length",
                "host",
                "connection",
                "transfer-encoding",
            ]
            .contains(&lower.as_str())
            {
                return Err(FieldError::new(
                    format!("{field}.{name}"),
                    "the MCP transport sets this header itself",
                ));
            }
            Ok((name, value))
        })
        .collect()
}

fn tool(file: ToolFile) -> Checked<CreateTool> {
    let name = required(file.name, "mcp.tool.name")?;
    if name.is_empty() {
        return Err(FieldError::new("mcp.tool.name", "an empty name"));
    }
    let key_argument = match (file.key_argument, file.no_key) {
        (Some(key), None | Some(false)) if !key.is_empty() => Some(key),
        (None, Some(true)) => None,
        _ => {
            return Err(FieldError::new(
                "mcp.tool.key_argument",
                "name the argument that carries the operation key, or say \
                 no_key = true (then the check reports that the tool cannot be \
                 retried safely)",
            ));
        }
    };
    let arguments = required(file.arguments, "mcp.tool.arguments")?;
    let Value::Object(map) = &arguments else {
        return Err(FieldError::new(
            "mcp.tool.arguments",
            "a table (the tool's arguments as a JSON object)",
        ));
    };
    if let Some(key) = &key_argument
        && map.contains_key(key)
    {
        return Err(FieldError::new(
            format!("mcp.tool.arguments.{key}"),
            "the key argument is the check's to fill",
        )
        .fix("leave it out"));
    }
    let mut names = Vec::new();
    placeholders(&arguments, &mut names);
    for name in &names {
        if !file.fields.contains_key(name) {
            return Err(FieldError::new(
                "mcp.tool.arguments",
                format!(
                    "the placeholder {{{{{name}}}}} names no entry of \
                     mcp.tool.fields"
                ),
            ));
        }
    }
    for (name, value) in &file.fields {
        if !names.contains(name) {
            return Err(FieldError::new(
                format!("mcp.tool.fields.{name}"),
                format!(
                    "not used by any {{{{{name}}}}} placeholder in \
                     mcp.tool.arguments"
                ),
            ));
        }
        if !(value.is_string() || value.is_number() || value.is_boolean()) {
            return Err(FieldError::new(
                format!("mcp.tool.fields.{name}"),
                "a text, a number or a boolean",
            ));
        }
    }
    let vary = vary(file.vary, &file.fields, "mcp.tool")?;
    Ok(CreateTool {
        name,
        key_argument,
        arguments,
        fields: file.fields,
        vary,
    })
}

fn pointer(pointer: String, field: &str) -> Checked<String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(FieldError::new(
            field,
            format!(
                "{pointer:?} is not a JSON pointer (RFC 6901: empty, or \
                 starting with /)"
            ),
        ));
    }
    Ok(pointer)
}

fn identity(file: IdentityFile) -> Checked<McpIdentity> {
    match (file.structured_pointer, file.text_regex) {
        (Some(p), None) => Ok(McpIdentity::Structured(pointer(
            p,
            "mcp.identity.structured_pointer",
        )?)),
        (None, Some(text)) => regex::Regex::new(&text)
            .map(McpIdentity::Text)
            .map_err(|err| FieldError::new("mcp.identity.text_regex", one_line(&err.to_string()))),
        _ => Err(FieldError::new(
            "[mcp.identity]",
            "give exactly one of structured_pointer or text_regex",
        )),
    }
}

/// `mcp.errors.text_code_pattern`: a regex with a group for the code.
fn code_pattern(text: &str) -> Checked<regex::Regex> {
    let regex = regex::Regex::new(text).map_err(|err| {
        FieldError::new("mcp.errors.text_code_pattern", one_line(&err.to_string()))
    })?;
    if regex.captures_len() < 2 {
        return Err(FieldError::new(
            "mcp.errors.text_code_pattern",
            format!("{text:?} has no group"),
        )
        .fix("its first group is the code"));
    }
    Ok(regex)
}

fn codes(value: Option<Vec<String>>, field: &str) -> Checked<Vec<String>> {
    let list = value.unwrap_or_default();
    if list.iter().any(String::is_empty) {
        return Err(FieldError::new(
            format!("mcp.errors.{field}"),
            "an empty code",
        ));
    }
    Ok(list)
}

fn errors(file: Option<ErrorsFile>, tool: &CreateTool) -> Checked<McpErrors> {
    let default_validation = || {
        tool.fields
            .iter()
            .find(|(_, v)| v.is_string())
            .map(|(name, _)| (name.clone(), Value::from(7)))
            .into_iter()
            .collect::<BTreeMap<_, _>>()
    };
    let Some(file) = file else {
        return Ok(McpErrors {
            code_pointer: None,
            text_code_pointer: None,
            text_code_pattern: None,
            conflict: Vec::new(),
            in_progress: Vec::new(),
            bad_key: Vec::new(),
            validation: default_validation(),
        });
    };
    let code_pointer = file
        .code_pointer
        .map(|p| pointer(p, "mcp.errors.code_pointer"))
        .transpose()?;
    let text_code_pointer = file
        .text_code_pointer
        .map(|p| pointer(p, "mcp.errors.text_code_pointer"))
        .transpose()?;
    let text_code_pattern = file
        .text_code_pattern
        .map(|text| code_pattern(&text))
        .transpose()?;
    let lists = [&file.conflict, &file.in_progress, &file.bad_key];
    let somewhere =
        code_pointer.is_some() || text_code_pointer.is_some() || text_code_pattern.is_some();
    if !somewhere && lists.iter().any(|l| l.is_some()) {
        return Err(FieldError::new(
            "mcp.errors.code_pointer",
            "codes are given, but not where a result holds its code \
             (code_pointer, text_code_pointer or text_code_pattern)",
        ));
    }
    let validation = match file.validation {
        None => default_validation(),
        Some(fields) => {
            if fields.is_empty() {
                return Err(FieldError::new(
                    "mcp.errors.validation",
                    "say which fields to change",
                ));
            }
            for name in fields.keys() {
                if !tool.fields.contains_key(name) {
                    return Err(FieldError::new(
                        format!("mcp.errors.validation.{name}"),
                        "names no entry of mcp.tool.fields",
                    ));
                }
            }
            fields
        }
    };
    Ok(McpErrors {
        code_pointer,
        text_code_pointer,
        text_code_pattern,
        conflict: codes(file.conflict, "conflict")?,
        in_progress: codes(file.in_progress, "in_progress")?,
        bad_key: codes(file.bad_key, "bad_key")?,
        validation,
    })
}

fn count(file: CountFile, callers: &[McpCaller]) -> Checked<McpCount> {
    match (file.tool, file.sql, file.command) {
        (Some(tool), None, None) => {
            let name = required(tool.name, "mcp.count.tool.name")?;
            let arguments = tool
                .arguments
                .unwrap_or_else(|| Value::Object(Default::default()));
            if !arguments.is_object() {
                return Err(FieldError::new("mcp.count.tool.arguments", "a table"));
            }
            let (p, from_text) = match (tool.structured_pointer, tool.text_pointer) {
                (Some(p), None) => (pointer(p, "mcp.count.tool.structured_pointer")?, false),
                (None, Some(p)) => (pointer(p, "mcp.count.tool.text_pointer")?, true),
                _ => {
                    return Err(FieldError::new(
                        "mcp.count.tool",
                        "give exactly one of structured_pointer or text_pointer (into \
                         the text content read as JSON)",
                    ));
                }
            };
            let caller = match tool.caller.as_deref() {
                None | Some("each") => None,
                Some(name) => {
                    Some(callers.iter().position(|c| c.name == name).ok_or_else(|| {
                        FieldError::new(
                            "mcp.count.tool.caller",
                            format!("{name:?} names no caller (or use \"each\")"),
                        )
                    })?)
                }
            };
            Ok(McpCount::Tool {
                name,
                arguments,
                pointer: p,
                from_text,
                caller,
            })
        }
        (None, Some(sql), None) => Ok(McpCount::Sqlite {
            file: required(sql.sqlite, "mcp.count.sql.sqlite")?,
            query: required(sql.query, "mcp.count.sql.query")?,
        }),
        (None, None, Some(command)) => {
            argv(&command, "mcp.count.command")?;
            Ok(McpCount::Command(command))
        }
        _ => Err(FieldError::new(
            "[mcp.count]",
            "give exactly one of tool, sql or command",
        )),
    }
}

/// `[[mcp.callers]]`: at least one, each named once, with the transport's own credentials (args
/// and env over stdio, headers over http), no two alike.
fn callers(list: Vec<CallerFile>, http: bool) -> Checked<Vec<McpCaller>> {
    if list.is_empty() {
        return Err(FieldError::new("[[mcp.callers]]", "none given")
            .fix("name at least one (two for the other-caller point)"));
    }
    let mut callers: Vec<McpCaller> = Vec::new();
    for (i, caller) in list.into_iter().enumerate() {
        let field = format!("mcp.callers[{i}]");
        let name = required(caller.name, &format!("{field}.name"))?;
        if name.is_empty() || name.len() > 64 {
            return Err(FieldError::new(
                format!("{field}.name"),
                format!("{name:?}: one to sixty-four characters"),
            ));
        }
        if callers.iter().any(|c| c.name == name) {
            return Err(FieldError::new(
                format!("{field}.name"),
                format!("{name:?} is named twice"),
            ));
        }
        if http && (!caller.args.is_empty() || !caller.env.is_empty()) {
            return Err(
                FieldError::new(format!("{field}.args"), "args and env are for stdio")
                    .fix("over http a caller is its headers"),
            );
        }
        if !http && !caller.headers.is_empty() {
            return Err(
                FieldError::new(format!("{field}.headers"), "headers are for http")
                    .fix("over stdio a caller is its args and env"),
            );
        }
        let caller = McpCaller {
            name,
            args: caller.args,
            env: env(caller.env, &format!("{field}.env"))?,
            headers: headers(caller.headers, &format!("{field}.headers"))?,
        };
        if let Some(same) = callers.iter().position(|c| {
            (&c.args, &c.env, &c.headers) == (&caller.args, &caller.env, &caller.headers)
        }) {
            return Err(FieldError::new(
                field,
                format!(
                    "the same {} as mcp.callers[{same}]",
                    if http { "headers" } else { "args and env" }
                ),
            )
            .fix("the other-caller point needs callers the server can tell apart"));
        }
        callers.push(caller);
    }
    Ok(callers)
}

/// `[mcp.load]`: the rounds and the calls per round, each within its bounds.
fn load(file: LoadFile) -> Checked<McpLoad> {
    let rounds = file.rounds.unwrap_or(McpLoad::default().rounds);
    if !(1..=MAX_ROUNDS).contains(&rounds) {
        return Err(FieldError::new(
            "mcp.load.rounds",
            format!("{rounds}: expected 1 to {MAX_ROUNDS}"),
        ));
    }
    let calls = file.calls.unwrap_or(McpLoad::default().calls);
    if !(2..=MAX_CALLS).contains(&calls) {
        return Err(FieldError::new(
            "mcp.load.calls",
            format!("{calls}: expected 2 to {MAX_CALLS}"),
        ));
    }
    Ok(McpLoad { rounds, calls })
}

/// Every field an `[mcp]` target file may hold (`create.path`, `callers[].headers`), read from the parser's
/// own structs: the book's reference table is compared with this list.
pub fn accepted_fields() -> Vec<String> {
    crate::check::fields::accepted::<FileRoot>()
}

/// Every word and value of the `[mcp]` section a wrapper could be pointed with.
fn words(target: &McpTarget) -> Vec<&str> {
    let mut words: Vec<&str> = Vec::new();
    match &target.transport {
        McpTransport::Stdio { command, env } => {
            words.extend(command.iter().map(String::as_str));
            words.extend(env.iter().map(|(_, v)| v.as_str()));
        }
        McpTransport::Http { url, headers } => {
            words.push(url);
            words.extend(headers.iter().map(|(_, v)| v.as_str()));
        }
    }
    for caller in &target.callers {
        words.extend(caller.args.iter().map(String::as_str));
        words.extend(caller.env.iter().map(|(_, v)| v.as_str()));
    }
    words
}

fn uses_upstream(target: &McpTarget) -> bool {
    words(target)
        .iter()
        .any(|w| w.contains(UPSTREAM_PLACEHOLDER))
}

/// A wrapper the file never points at the lab's API would call someone else's, or nobody.
fn check_upstream_use(target: &McpTarget, upstream: &Upstream) -> Checked<()> {
    for caller in &target.callers {
        if !upstream.tokens.iter().any(|(name, _)| *name == caller.name) {
            return Err(FieldError::new(
                "upstream.tokens",
                format!(
                    "names no token for the caller {:?} of [[mcp.callers]]",
                    caller.name
                ),
            ));
        }
    }
    match target.transport {
        // The check does not start this wrapper: whoever does points it at the port named here.
        McpTransport::Http { .. } if upstream.port.is_none() => Err(FieldError::new(
            "upstream.port",
            "a wrapper over HTTP is started by you, not by the check, so \
             name the loopback port the lab serves the API on, and point \
             the wrapper at http://127.0.0.1:PORT",
        )),
        McpTransport::Http { .. } => Ok(()),
        McpTransport::Stdio { .. } if !uses_upstream(target) => Err(FieldError::new(
            "mcp.command",
            format!(
                "names {UPSTREAM_PLACEHOLDER} nowhere (nor mcp.env or a \
                 caller's args or env), so the wrapper cannot be pointed at the \
                 API the lab serves"
            ),
        )),
        McpTransport::Stdio { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::target::tests::each_edit_names;

    const GOOD: &str = r#"
[mcp]
transport = "stdio"
command = ["lab", "mcp", "--database", "{{dir}}/lab.sqlite"]
[mcp.tool]
name = "create_ticket"
key_argument = "operation_key"
arguments = { title = "{{title}}", priority = "{{priority}}" }
fields = { title = "Jammed", priority = "high" }
[mcp.identity]
structured_pointer = "/ticket_id"
[mcp.errors]
code_pointer = "/code"
conflict = ["conflict"]
[[mcp.callers]]
name = "alice"
args = ["--stdio-caller", "alice"]
[[mcp.callers]]
name = "bob"
args = ["--stdio-caller", "bob"]
[mcp.count]
tool = { name = "list_tickets", structured_pointer = "/tickets" }
"#;

    /// The file read, or the field error its validation stops at (as its message, for the tests
    /// that look for words in it; `field_error` for the field itself).
    fn parse(text: &str) -> Result<McpTarget, String> {
        McpTarget::parse(text, Path::new("t.toml"), &Overrides::default())
            .map_err(|err| err.to_string())
    }

    fn field_error(text: &str) -> FieldError {
        match McpTarget::parse(text, Path::new("t.toml"), &Overrides::default()) {
            Err(crate::Error::TargetInvalid { error, .. }) => error,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_complete_mcp_file_is_read_with_its_defaults() {
        let target = parse(GOOD).unwrap();
        assert!(target.keyed());
        assert_eq!(target.load, McpLoad::default());
        assert_eq!(target.errors.validation["priority"], Value::from(7));
        assert!(target.describe().starts_with("stdio: lab mcp"));
    }

    #[test]
    fn each_fault_in_an_mcp_file_is_named_by_its_field() {
        let edits = [
            ("\"stdio\"", "\"sse\"", "mcp.transport"),
            (
                "key_argument = \"operation_key\"\n",
                "",
                "mcp.tool.key_argument",
            ),
            ("{{priority}}\"", "{{prio}}\"", "mcp.tool.arguments"),
            (
                "\"/ticket_id\"",
                "\"ticket_id\"",
                "mcp.identity.structured_pointer",
            ),
            (
                "structured_pointer = \"/ticket_id\"",
                "text_regex = \"(\"",
                "mcp.identity.text_regex",
            ),
            (
                "\"--stdio-caller\", \"bob\"",
                "\"--stdio-caller\", \"alice\"",
                "mcp.callers[1]",
            ),
            ("code_pointer = \"/code\"\n", "", "mcp.errors.code_pointer"),
            (
                "tool = { name = \"list_tickets\", structured_pointer = \"/tickets\" }",
                "tool = { name = \"list_tickets\" }",
                "mcp.count.tool",
            ),
            ("", "[mcp.load]\ncalls = 1000\n", "mcp.load.calls"),
            (
                "priority = \"high\" }",
                "priority = \"high\" }\nvary = { priority = [\"low\", \"med\"] }",
                "mcp.tool.vary.priority",
            ),
            (
                "transport = \"stdio\"",
                "transport = \"http\"",
                "mcp.command",
            ),
        ];
        each_edit_names(GOOD, &edits, |text| field_error(text).field);
    }

    #[test]
    fn refusal_codes_may_be_read_from_the_text_and_fields_vary_only_when_named() {
        let text = GOOD.replace(
            "code_pointer = \"/code\"",
            "text_code_pointer = \"/error/code\"\ntext_code_pattern = '^Error \\[(\\w+)\\]'",
        );
        let target = parse(&text).unwrap();
        assert_eq!(
            target.errors.text_code_pointer.as_deref(),
            Some("/error/code")
        );
        let pattern = target.errors.text_code_pattern.unwrap();
        assert_eq!(
            &pattern.captures("Error [conflict] no").unwrap()[1],
            "conflict"
        );
        assert!(target.tool.vary.is_empty());
        let varied = GOOD.replace(
            "fields = { title = \"Jammed\", priority = \"high\" }",
            "fields = { title = \"Jammed\", priority = \"high\" }\nvary = { priority = [\"high\", \"low\"] }",
        );
        assert_eq!(
            parse(&varied).unwrap().tool.vary["priority"],
            Vary::OneOf(vec![Value::from("high"), Value::from("low")])
        );
        let bad = GOOD.replace("code_pointer = \"/code\"", "text_code_pattern = \"^Error\"");
        assert!(
            parse(&bad)
                .unwrap_err()
                .contains("mcp.errors.text_code_pattern")
        );
        let folder = McpTarget::parse(GOOD, Path::new("a/b/t.toml"), &Overrides::default());
        let here = std::env::current_dir().unwrap();
        assert_eq!(folder.unwrap().folder, here.join("a/b"));
    }

    #[test]
    fn an_http_target_is_loopback_unless_allowed() {
        let http = GOOD
            .replace(
                "transport = \"stdio\"\ncommand = [\"lab\", \"mcp\", \"--database\", \"{{dir}}/lab.sqlite\"]",
                "transport = \"http\"\nurl = \"http://192.0.2.1:9/mcp\"",
            )
            .replace("args = [\"--stdio-caller\", \"alice\"]", "headers = { Authorization = \"Bearer a\" }")
            .replace("args = [\"--stdio-caller\", \"bob\"]", "headers = { Authorization = \"Bearer b\" }");
        assert!(parse(&http).unwrap_err().contains("--allow-remote"));
        let overrides = Overrides {
            allow_remote: true,
            ..Overrides::default()
        };
        assert!(McpTarget::parse(&http, Path::new("t"), &overrides).is_ok());
    }
}
