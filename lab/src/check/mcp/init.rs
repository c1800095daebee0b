//! The commented `[mcp]` starting file `lab check --target FILE --init-mcp SERVER` writes, from
//! the server's own `tools/list`: the transport as given, the tool that looks like a create
//! (and the argument that looks like its key), its required arguments as fields, and every
//! other section with its choices spelt out. It parses as written; its guesses are marked.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;

use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::mcp::http_client::LoopbackHttpClient;

/// Where the server is, as `--init-mcp` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    /// A Streamable HTTP endpoint.
    Url(String),
    /// A command line, split as a shell splits words.
    Command(Vec<String>),
}

impl Server {
    /// Reads `--init-mcp SERVER`: an `http://` URL (loopback unless `allow_remote`), or a
    /// command line.
    ///
    /// # Errors
    /// The problem, naming the value.
    pub fn parse(text: &str, allow_remote: bool) -> std::result::Result<Server, String> {
        if text.starts_with("https://") {
            return Err(format!(
                "{text}: https is not spoken by the check; give an http:// URL or a command"
            ));
        }
        if text.starts_with("http://") {
            crate::check::target::base_url_in(text, "--init-mcp", allow_remote)
                .map_err(|err| err.to_string())?;
            return Ok(Server::Url(text.to_owned()));
        }
        let words = shell_words(text)?;
        if words.is_empty() {
            return Err("an empty command".to_owned());
        }
        Ok(Server::Command(words))
    }
}

/// `text` split into words as a POSIX shell would: blanks separate, '...' keeps everything,
/// "..." keeps all but `\"` and `\\`, and a backslash outside quotes keeps the next character.
///
/// # Errors
/// An unclosed quote or a trailing backslash.
pub fn shell_words(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => current.push(c),
                        None => return Err(format!("{text:?}: an unclosed ' quote")),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => current.push(c),
                            Some(c) => {
                                current.push('\\');
                                current.push(c);
                            }
                            None => return Err(format!("{text:?}: an unclosed \" quote")),
                        },
                        Some(c) => current.push(c),
                        None => return Err(format!("{text:?}: an unclosed \" quote")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err(format!("{text:?}: a backslash at the end")),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// Lists the server's tools and writes the starting file to `path`, never replacing a file.
///
/// # Errors
/// [`Error::InputInvalid`] when `path` exists or the server cannot be reached (naming
/// `--init-mcp`); [`Error::OutputUnwritable`] when the file cannot be written.
pub fn write(path: &Path, server: &Server) -> Result<()> {
    if path.exists() {
        return Err(exists(path));
    }
    let tools = list_tools(server).map_err(|problem| Error::InputInvalid {
        subject: "--init-mcp".to_owned(),
        problem,
    })?;
    let text = starting_file(server, &tools);
    super::super::init::write_new(path, &text, "--init-mcp")
}

fn exists(path: &Path) -> Error {
    super::super::init::exists(path, "--init-mcp")
}

/// The server's tools as JSON (`name`, `inputSchema`, `outputSchema`, `annotations`), from one
/// session opened for the purpose, given as long to start as a checked server is
/// ([`super::probe::START_BOUND`]: a wrapper on a loaded machine may take seconds to import).
fn list_tools(server: &Server) -> std::result::Result<Vec<Value>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("starting a runtime: {err}"))?;
    runtime.block_on(async {
        // `{{dir}}` in a command is the check's folder per run; here, one for this session.
        let dir = tempfile::tempdir().map_err(|err| format!("making a folder: {err}"))?;
        let server = match server {
            Server::Command(words) => Server::Command(
                words
                    .iter()
                    .map(|w| w.replace("{{dir}}", &dir.path().display().to_string()))
                    .collect(),
            ),
            url => url.clone(),
        };
        let listing = async {
            let session = open_plain(&server).await?;
            let tools = session
                .peer()
                .list_all_tools()
                .await
                .map_err(|err| format!("tools/list: {err}"))?;
            let _ = session.cancel().await;
            Ok::<_, String>(tools)
        };
        let bound = super::probe::START_BOUND;
        let tools = tokio::time::timeout(bound, listing)
            .await
            .map_err(|_| format!("no tools/list answer within {} s", bound.as_secs()))??;
        Ok(tools
            .iter()
            .map(|tool| serde_json::to_value(tool).unwrap_or(Value::Null))
            .collect())
    })
}

/// The starting file for `server` and its `tools` (as JSON). Parses as it is.
pub fn starting_file(server: &Server, tools: &[Value]) -> String {
    let create = pick_create(tools);
    let wrapper = create.and_then(Wrapper::of);
    let mut out = String::new();
    header(&mut out, server, tools, wrapper.as_ref());
    match create {
        Some(tool) => tool_section(&mut out, tool),
        None => out.push_str(
            "[mcp.tool]\n# The server lists no tools: name the create tool here.\nname = \"create\"\n\
             no_key = true\narguments = { title = \"{{title}}\" }\nfields = { title = \"example\" }\n\
             vary = { title = \"text\" }\n\n",
        ),
    }
    identity_section(&mut out, create);
    rest(&mut out, server, tools, create, wrapper.as_ref());
    if let Some(wrapper) = &wrapper {
        upstream_section(&mut out, server, wrapper);
    }
    out
}

/// What the create's schema says of the HTTP API behind it, when the server looks like a
/// wrapper of one: its key argument is named as a header (`Idempotency-Key`), or its fields are
/// in a `body` object.
struct Wrapper {
    /// The key argument, when it is named as a header.
    key_header: Option<String>,
    /// The argument that holds the API's body, when there is one.
    body: Option<String>,
}

impl Wrapper {
    fn of(tool: &Value) -> Option<Wrapper> {
        let key = key_argument(tool);
        let key_header = key.filter(|k| k.contains('-') && is_bare_key(k));
        let body = body_argument(tool);
        (key_header.is_some() || body.is_some()).then_some(Wrapper { key_header, body })
    }
}

/// A required argument named `body` (or `requestBody`) whose schema is an object: the API's
/// body, as generic OpenAPI wrappers name it.
fn body_argument(tool: &Value) -> Option<String> {
    required_names(tool).into_iter().find(|name| {
        matches!(name.as_str(), "body" | "requestBody")
            && object_properties(tool, &tool["inputSchema"]["properties"][name.as_str()]).is_some()
    })
}

/// The properties of an object schema, following one `$ref` into the tool's `$defs` (or
/// `definitions`), and the names it requires.
fn object_properties<'t>(
    tool: &'t Value,
    schema: &'t Value,
) -> Option<(&'t serde_json::Map<String, Value>, Vec<String>)> {
    let schema = match schema["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference.strip_prefix('#')?;
            tool["inputSchema"].pointer(pointer)?
        }
        None => schema,
    };
    let properties = schema["properties"].as_object().filter(|p| !p.is_empty())?;
    let required = schema["required"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Some((properties, required))
}

/// A loopback URL in a command's word (`--api=http://127.0.0.1:8080/v1`): where the wrapper is
/// pointed at its API, which becomes `{{upstream}}`, the lab's API, path kept.
fn loopback_base(word: &str) -> Option<(usize, usize)> {
    let start = word.find("http://")?;
    let rest = &word[start + "http://".len()..];
    let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    matches!(name, "127.0.0.1" | "localhost" | "[::1]")
        .then_some((start, start + "http://".len() + host_end))
}

fn header(out: &mut String, server: &Server, tools: &[Value], wrapper: Option<&Wrapper>) {
    out.push_str(
        "# A target file for `lab check --target THIS_FILE` on an MCP server, written by\n\
         # --init-mcp from the server's tools/list. The guesses (which tool creates, which\n\
         # argument is its key, the fields, the identity, the count) are marked GUESS: check\n\
         # each against the server before trusting a verdict.\n#\n# The server lists:\n",
    );
    for tool in tools {
        let name = tool["name"].as_str().unwrap_or("?");
        let required = required_names(tool).join(", ");
        let _ = writeln!(out, "#   {name}({required})");
    }
    out.push_str("\n[mcp]\n");
    match server {
        Server::Url(url) => {
            let _ = writeln!(
                out,
                "transport = \"http\"\nurl = {}",
                Value::from(url.as_str())
            );
        }
        Server::Command(words) => {
            let _ = writeln!(
                out,
                "transport = \"stdio\"\n# Run in this file's folder; {{{{dir}}}} is a fresh folder per run."
            );
            let upstream = super::target::UPSTREAM_PLACEHOLDER;
            let mut words = words.clone();
            let pointed = words.iter().any(|w| w.contains(upstream));
            let at = words.iter().position(|w| loopback_base(w).is_some());
            match (wrapper, pointed, at) {
                (Some(_), false, Some(at)) => {
                    if let Some((start, end)) = loopback_base(&words[at]) {
                        words[at].replace_range(start..end, upstream);
                    }
                    let _ = writeln!(
                        out,
                        "# GUESS: the wrapper's API was at a loopback URL: {upstream} is the API the lab\n\
                         # serves in its place for the hop points ([upstream] below)."
                    );
                }
                (Some(_), false, None) => {
                    let _ = writeln!(
                        out,
                        "# GUESS: point the wrapper at {upstream}, the API the lab serves for the hop\n\
                         # points ([upstream] below): in a word of the command, in mcp.env (as here, under\n\
                         # the variable the wrapper reads) or in a caller's args or env."
                    );
                    let _ = writeln!(out, "env = {{ API_BASE_URL = \"{upstream}\" }}");
                }
                _ => {}
            }
            let _ = writeln!(out, "command = {}", Value::from(words));
        }
    }
    out.push_str("timeout_ms = 10000\n\n");
}

fn required_names(tool: &Value) -> Vec<String> {
    tool["inputSchema"]["required"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The tool that looks like a create, not marked read-only: first by its schema (an argument
/// named like an idempotency or operation key, the create's own mark), a create-named one among
/// those first; then by its name (create, add, new, insert, submit or open, as a whole word:
/// `createTicket`, `add_item`, not `openapi`); else the first tool not marked read-only.
fn pick_create(tools: &[Value]) -> Option<&Value> {
    let writable = |t: &&Value| t["annotations"]["readOnlyHint"] != Value::Bool(true);
    let named = |t: &&Value| {
        let name = t["name"].as_str().unwrap_or_default();
        ["create", "add", "new", "insert", "submit", "open"]
            .iter()
            .any(|w| starts_with_word(name, w))
    };
    let keyed = |t: &&Value| key_argument(t).is_some();
    let writable_tools = || tools.iter().filter(writable);
    writable_tools()
        .filter(keyed)
        .find(named)
        .or_else(|| writable_tools().find(keyed))
        .or_else(|| writable_tools().find(named))
        .or_else(|| writable_tools().next())
}

/// Whether `name` starts with the word `word`, any case: the whole name, or the word followed by
/// a separator or an upper-case letter (`createTicket`, `create_ticket`, `Create-Ticket`).
fn starts_with_word(name: &str, word: &str) -> bool {
    let Some(head) = name.get(..word.len()) else {
        return false;
    };
    if !head.eq_ignore_ascii_case(word) {
        return false;
    }
    name[word.len()..]
        .chars()
        .next()
        .is_none_or(|next| !next.is_ascii_lowercase())
}

/// The argument that looks like an operation key: a text property named like one.
fn key_argument(tool: &Value) -> Option<String> {
    let properties = tool["inputSchema"]["properties"].as_object()?;
    properties
        .iter()
        .find(|(name, schema)| {
            let lower = name.to_ascii_lowercase();
            (lower.contains("idempot") || lower.ends_with("key") || lower.contains("request_id"))
                && schema["type"] != "object"
        })
        .map(|(name, _)| name.clone())
}

fn tool_section(out: &mut String, tool: &Value) {
    let name = tool["name"].as_str().unwrap_or("create");
    let _ = writeln!(
        out,
        "[mcp.tool]\n# GUESS: the tool that looks like a create.\nname = {}",
        Value::from(name)
    );
    let key = key_argument(tool);
    match &key {
        Some(key) => {
            let _ = writeln!(
                out,
                "# GUESS: the argument that looks like an operation key (the check fills it).\n\
                 key_argument = {}",
                Value::from(key.as_str())
            );
        }
        None => out.push_str(
            "# No argument looks like an operation key: the check reports that a retry cannot\n\
             # be told from a new call. Name it with key_argument = \"...\" if there is one.\nno_key = true\n",
        ),
    }
    let (arguments, fields, vary) = arguments_of(tool, key.as_deref());
    let _ = writeln!(
        out,
        "# The required arguments. \"{{{{name}}}}\" takes a field's value; other values are sent as\n\
         # they are.\narguments = {arguments}\n# Example values: replace them with values the tool accepts.\n\
         fields = {fields}\n# Which fields the check may change: \"text\" (free text, it appends\n\
         # \" (check RUN-N)\"), or a list of values the tool accepts. Others are sent as given.\n\
         vary = {vary}\n"
    );
}

/// The arguments template, the fields and `vary`, as TOML inline tables, from the required
/// properties (the key aside). A text property is a free-text field, an enum a list, a number
/// or a boolean a field sent as given, anything else a literal empty value.
fn arguments_of(tool: &Value, key: Option<&str>) -> (String, String, String) {
    let properties = tool["inputSchema"]["properties"].clone();
    let mut arguments = Vec::new();
    let mut fields = Vec::new();
    let mut vary = Vec::new();
    for name in required_names(tool) {
        if Some(name.as_str()) == key || !is_bare_key(&name) {
            continue;
        }
        let schema = &properties[name.as_str()];
        let placeholder = format!("{name} = \"{{{{{name}}}}}\"");
        if let Some(values) = schema["enum"].as_array().filter(|v| !v.is_empty()) {
            arguments.push(placeholder);
            fields.push(format!("{name} = {}", toml_value(&values[0])));
            if values.len() > 1 {
                let list: Vec<String> = values.iter().map(toml_value).collect();
                vary.push(format!("{name} = [{}]", list.join(", ")));
            }
            continue;
        }
        match schema["type"].as_str() {
            None if object_properties(tool, schema).is_some() => {
                arguments.push(format!(
                    "{name} = {}",
                    members_of(tool, schema, &mut fields, &mut vary)
                ));
            }
            Some("string") | None => {
                arguments.push(placeholder);
                fields.push(format!("{name} = \"example {name}\""));
                vary.push(format!("{name} = \"text\""));
            }
            Some("integer" | "number") => {
                arguments.push(placeholder);
                fields.push(format!("{name} = 1"));
            }
            Some("boolean") => {
                arguments.push(placeholder);
                fields.push(format!("{name} = true"));
            }
            Some("array") => arguments.push(format!("{name} = []")),
            _ if object_properties(tool, schema).is_some() => {
                arguments.push(format!(
                    "{name} = {}",
                    members_of(tool, schema, &mut fields, &mut vary)
                ));
            }
            Some(_) => arguments.push(format!("{name} = {{}}")),
        }
    }
    let table = |items: Vec<String>| {
        if items.is_empty() {
            "{}".to_owned()
        } else {
            format!("{{ {} }}", items.join(", "))
        }
    };
    (table(arguments), table(fields), table(vary))
}

/// An object argument (a wrapper's `body`) as an inline table of its members: a text member a
/// free-text field, an enum a list, a number or a boolean a field sent as given; its required
/// members, or all when it requires none. A member named as another's field keeps the first.
fn members_of(
    tool: &Value,
    schema: &Value,
    fields: &mut Vec<String>,
    vary: &mut Vec<String>,
) -> String {
    let Some((properties, required)) = object_properties(tool, schema) else {
        return "{}".to_owned();
    };
    let names: Vec<&String> = if required.is_empty() {
        properties.keys().collect()
    } else {
        properties.keys().filter(|k| required.contains(k)).collect()
    };
    let mut members = Vec::new();
    for name in names.into_iter().filter(|n| is_bare_key(n)) {
        let member = &properties[name.as_str()];
        let placeholder = format!("{name} = \"{{{{{name}}}}}\"");
        let taken = fields.iter().any(|f| f.starts_with(&format!("{name} = ")));
        if let Some(values) = member["enum"].as_array().filter(|v| !v.is_empty()) {
            members.push(placeholder);
            if !taken {
                fields.push(format!("{name} = {}", toml_value(&values[0])));
            }
            continue;
        }
        match member["type"].as_str() {
            Some("string") | None => {
                members.push(placeholder);
                if !taken {
                    fields.push(format!("{name} = \"example {name}\""));
                    if vary.is_empty() {
                        vary.push(format!("{name} = \"text\""));
                    }
                }
            }
            Some("integer" | "number") => {
                members.push(placeholder);
                if !taken {
                    fields.push(format!("{name} = 1"));
                }
            }
            Some("boolean") => {
                members.push(placeholder);
                if !taken {
                    fields.push(format!("{name} = true"));
                }
            }
            Some("array") => members.push(format!("{name} = []")),
            Some(_) => members.push(format!("{name} = {{}}")),
        }
    }
    if members.is_empty() {
        "{}".to_owned()
    } else {
        format!("{{ {} }}", members.join(", "))
    }
}

fn is_bare_key(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn toml_value(value: &Value) -> String {
    match value {
        Value::String(text) => Value::from(text.as_str()).to_string(),
        other => other.to_string(),
    }
}

/// `[mcp.identity]`: a property of the output schema named like an id, else a guess.
fn identity_section(out: &mut String, create: Option<&Value>) {
    let named = create
        .and_then(|tool| tool["outputSchema"]["properties"].as_object())
        .and_then(|props| {
            props
                .keys()
                .find(|k| *k == "id" || k.ends_with("_id") || k.ends_with("Id"))
                .cloned()
        });
    out.push_str("[mcp.identity]\n");
    match named {
        Some(name) => {
            let _ = writeln!(
                out,
                "# From the tool's outputSchema.\nstructured_pointer = {}\n",
                Value::from(format!("/{name}"))
            );
        }
        None => out.push_str(
            "# GUESS: where a success names what it created: a JSON pointer into\n\
             # structuredContent, or text_regex = \"id (\\\\S+)\" over the text content.\n\
             structured_pointer = \"/id\"\n\n",
        ),
    }
}

fn rest(
    out: &mut String,
    server: &Server,
    tools: &[Value],
    create: Option<&Value>,
    wrapper: Option<&Wrapper>,
) {
    out.push_str(
        "[mcp.errors]\n# Where a refusal's code is: in an error result's structuredContent, or in any\n\
         # result's text read as JSON, or matched in plain text (the first group).\n\
         # code_pointer = \"/code\"\n# text_code_pointer = \"/error/code\"\n\
         # text_code_pattern = '^Error \\[(\\w+)\\]'\n# conflict = [\"conflict\"]\n\
         # in_progress = [\"in_progress\"]\n# bad_key = [\"invalid_key\"]\n\n",
    );
    match server {
        Server::Url(_) => out.push_str(
            "# Callers, told apart by their headers (two for the other-caller point).\n[[mcp.callers]]\n\
             name = \"agent\"\n# headers = { Authorization = \"Bearer TOKEN\" }\n\n",
        ),
        Server::Command(_) => out.push_str(
            "# Callers, told apart by the words added to the command and their environment\n\
             # (two for the other-caller point).\n[[mcp.callers]]\nname = \"agent\"\n# args = [\"--caller\", \"agent\"]\n\n",
        ),
    }
    if wrapper.is_some() {
        out.push_str(
            "# No [mcp.count]: with [upstream], the lab counts the effects in the API it serves.\n\
             [mcp.load]\n# The concurrent point: rounds, and calls released together in each.\n\
             rounds = 4\ncalls = 6\n\n",
        );
        return;
    }
    // A tool that takes no required argument, named list, count, read, search or get (in that
    // order of preference), other than the create.
    let create_name = create.and_then(|t| t["name"].as_str());
    let lister = ["list", "count", "read", "search", "get"]
        .iter()
        .find_map(|word| {
            tools.iter().find(|t| {
                let name = t["name"].as_str().unwrap_or_default();
                Some(name) != create_name
                    && name.to_ascii_lowercase().starts_with(word)
                    && required_names(t).is_empty()
            })
        });
    out.push_str("[mcp.count]\n# How effects are counted: one of tool, sql or command.\n");
    match lister.and_then(|t| t["name"].as_str()) {
        Some(name) => {
            let _ = writeln!(
                out,
                "# GUESS: a tool that lists; the pointer names a list (its length) or a number.\n\
                 tool = {{ name = {}, structured_pointer = \"\" }}",
                Value::from(name)
            );
        }
        None => out.push_str(
            "# GUESS: no tool lists; count with a command that prints one number, or SQL.\n\
             command = [\"sh\", \"-c\", \"echo 0\"]\n",
        ),
    }
    out.push_str(
        "# sql = { sqlite = \"{{dir}}/state.sqlite\", query = \"SELECT COUNT(*) FROM items\" }\n\n\
         [mcp.load]\n# The concurrent point: rounds, and calls released together in each.\nrounds = 4\ncalls = 6\n",
    );
}

/// `[upstream]` for a server that looks like a wrapper of an HTTP API: the lab serves its own
/// ticket API in place of the wrapped one, and the hop points grade what reaches it.
fn upstream_section(out: &mut String, server: &Server, wrapper: &Wrapper) {
    out.push_str(
        "\n# The tool list looks like a wrapper of an HTTP API: the lab serves its own ticket API in\n\
         # its place, records what reaches it, and grades the key across the hop (the hop points).\n\
         [upstream]\n# GUESS: each caller's name and the token the API takes from it; the wrapper must\n\
         # send that caller's token (in the caller's args, env or headers).\n\
         tokens = { agent = \"TOKEN\" }\n",
    );
    match &wrapper.key_header {
        Some(header) => {
            let _ = writeln!(
                out,
                "# The key argument is named as the header the wrapper sends it in.\nkey_header = {}",
                Value::from(header.as_str())
            );
        }
        None => out.push_str(
            "# The header the wrapper sends the key in (key_pointer = \"/member\" only for another\n\
             # API, declared with [upstream.create], that reads it in the body).\n\
             key_header = \"Idempotency-Key\"\n",
        ),
    }
    if let Some(body) = &wrapper.body {
        let _ = writeln!(
            out,
            "# The API's body is this argument.\nbody_argument = {}",
            Value::from(format!("/{body}"))
        );
    }
    if let Server::Url(_) = server {
        out.push_str(
            "# GUESS: you start the wrapper over HTTP, pointed at http://127.0.0.1:PORT: the port the\n\
             # lab serves the API on. --upstream-port PORT replaces it on the command line.\n\
             port = 8080\n",
        );
    }
}

/// A session with the server `--init-mcp` names, no target file yet: a process started in
/// the working directory, or a Streamable HTTP session.
///
/// # Errors
/// The reason, naming the command or the URL.
pub async fn open_plain(server: &Server) -> Result<RunningService<RoleClient, ()>, String> {
    match server {
        Server::Command(words) => {
            let mut process = tokio::process::Command::new(&words[0]);
            process.args(&words[1..]);
            let (child, _) = TokioChildProcess::builder(process)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|err| format!("{:?}: {err}", words[0]))?;
            ().serve(child)
                .await
                .map_err(|err| format!("the MCP handshake over stdio failed: {err}"))
        }
        Server::Url(url) => {
            let client = LoopbackHttpClient::for_url(url)?;
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let transport = StreamableHttpClientTransport::with_client(client, config);
            ().serve(transport)
                .await
                .map_err(|err| format!("the MCP handshake with {url} failed: {err}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Overrides;
    use crate::check::mcp::McpTarget;
    use serde_json::json;

    fn tools() -> Vec<Value> {
        vec![
            json!({"name": "list_tickets", "inputSchema": {"type": "object"},
                   "annotations": {"readOnlyHint": true}}),
            json!({"name": "create_ticket", "inputSchema": {"type": "object",
                "properties": {"title": {"type": "string"},
                               "priority": {"type": "string", "enum": ["low", "high"]},
                               "size": {"type": "integer"},
                               "operation_key": {"type": "string"},
                               "tags": {"type": "array"}},
                "required": ["title", "priority", "size", "operation_key", "tags"]},
                "outputSchema": {"type": "object", "properties": {"ticket_id": {"type": "string"}}}}),
        ]
    }

    #[test]
    fn the_starting_file_names_the_create_its_key_and_its_fields_and_parses() {
        let server = Server::Command(vec!["lab".into(), "mcp".into()]);
        let text = starting_file(&server, &tools());
        let target = McpTarget::parse(&text, Path::new("t.toml"), &Overrides::default())
            .unwrap_or_else(|err| panic!("{err}\n{text}"));
        assert_eq!(target.tool.name, "create_ticket");
        assert_eq!(target.tool.key_argument.as_deref(), Some("operation_key"));
        assert_eq!(target.tool.fields["priority"], json!("low"));
        assert_eq!(target.tool.vary.len(), 2, "{text}");
        assert!(
            text.contains("structured_pointer = \"/ticket_id\""),
            "{text}"
        );
        assert!(text.contains("tool = { name = \"list_tickets\""), "{text}");
        let http = starting_file(&Server::Url("http://127.0.0.1:9/mcp".into()), &[]);
        McpTarget::parse(&http, Path::new("t.toml"), &Overrides::default())
            .unwrap_or_else(|err| panic!("{err}\n{http}"));
    }

    /// A generic OpenAPI wrapper's tool list: a tool named like "open..." first, then the create,
    /// whose key argument is named as the API's header and whose fields are in a `body` object
    /// its schema defines under `$defs`.
    fn wrapper_tools() -> Vec<Value> {
        vec![
            json!({"name": "openapi", "inputSchema": {"type": "object", "properties": {}}}),
            json!({"name": "createTicket", "inputSchema": {"type": "object",
                "$defs": {"Body": {"type": "object",
                    "properties": {"title": {"type": "string"}, "priority": {"type": "string"}},
                    "required": ["title", "priority"]}},
                "properties": {"Idempotency-Key": {"type": "string"},
                               "body": {"$ref": "#/$defs/Body"}},
                "required": ["Idempotency-Key", "body"]}}),
        ]
    }

    #[test]
    fn a_wrapper_whose_tool_list_names_the_key_gets_its_create_its_key_and_an_upstream_section() {
        let server = Server::Command(vec![
            "node".into(),
            "wrapper.js".into(),
            "--base-url=http://127.0.0.1:8080/v1".into(),
        ]);
        let text = starting_file(&server, &wrapper_tools());
        let target = McpTarget::parse(&text, Path::new("t.toml"), &Overrides::default())
            .unwrap_or_else(|err| panic!("{err}\n{text}"));
        assert_eq!(target.tool.name, "createTicket", "{text}");
        assert_eq!(target.tool.key_argument.as_deref(), Some("Idempotency-Key"));
        assert_eq!(
            target.tool.arguments,
            json!({"body": {"title": "{{title}}", "priority": "{{priority}}"}}),
            "{text}"
        );
        let upstream = target.upstream.expect("an [upstream] section");
        assert_eq!(upstream.key_header, "Idempotency-Key");
        assert_eq!(upstream.body_argument, "/body");
        assert!(text.contains("\"--base-url={{upstream}}/v1\""), "{text}");
        // Over HTTP, the wrapper is yours to start: a port, and the flag that replaces it.
        let http = starting_file(
            &Server::Url("http://127.0.0.1:9/mcp".into()),
            &wrapper_tools(),
        );
        let target = McpTarget::parse(&http, Path::new("t.toml"), &Overrides::default())
            .unwrap_or_else(|err| panic!("{err}\n{http}"));
        assert!(target.upstream.and_then(|u| u.port).is_some(), "{http}");
        assert!(http.contains("--upstream-port"), "{http}");
    }

    #[test]
    fn a_server_is_a_loopback_url_or_a_command_split_as_a_shell_would() {
        assert_eq!(
            Server::parse("node 'my server.js' --db \"a b\" x\\ y", false).unwrap(),
            Server::Command(vec![
                "node".into(),
                "my server.js".into(),
                "--db".into(),
                "a b".into(),
                "x y".into()
            ])
        );
        assert!(matches!(
            Server::parse("http://127.0.0.1:8000/mcp", false),
            Ok(Server::Url(_))
        ));
        assert!(
            Server::parse("http://192.0.2.1/mcp", false)
                .unwrap_err()
                .contains("--allow-remote")
        );
        assert!(Server::parse("http://192.0.2.1/mcp", true).is_ok());
        assert!(Server::parse("https://127.0.0.1/mcp", false).is_err());
        assert!(
            Server::parse("node 'open", false)
                .unwrap_err()
                .contains("unclosed")
        );
        assert!(Server::parse("  ", false).is_err());
    }

    #[test]
    fn init_mcp_never_replaces_a_file_and_reaches_no_server_then() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("t.toml");
        std::fs::write(&path, "mine").unwrap();
        let marker = folder.path().join("started");
        let server = Server::Command(vec!["touch".into(), marker.display().to_string()]);
        let err = write(&path, &server).unwrap_err();
        assert!(err.to_string().contains("exists"), "{err}");
        assert!(!marker.exists());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
    }
}
