//! The target file of `lab check --target`: which service to check, how to call it, and how to
//! observe it from outside. Read from TOML, then validated as a whole before anything is sent;
//! every refusal names the field at fault (`create.path`, `callers[1].headers`).
//!
//! Nothing here speaks HTTP: a request is a method, a path, headers and a body template, so an
//! MCP variant can reuse the parts it shares (callers, fields, counting, statuses).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

/// A validated target file.
#[derive(Clone, Debug)]
pub struct Target {
    /// The file it was read from, for messages.
    pub path: PathBuf,
    /// Where the service is.
    pub service: Service,
    /// The keyed create request every point sends.
    pub create: Endpoint,
    /// Where the key goes and in which form.
    pub key: KeySpec,
    /// How the created thing's identity is read from a success.
    pub identity: Identity,
    /// How a replayed answer is recognised.
    pub replay: Replay,
    /// Which statuses mean what.
    pub statuses: Statuses,
    /// Two or more callers, each with its credentials (the first is the default caller).
    pub callers: Vec<Caller>,
    /// How effects are counted.
    pub count: Count,
    /// Another endpoint that takes keys, for the "same key on another endpoint" point.
    pub other_endpoint: Option<Endpoint>,
    /// How the error points provoke an error.
    pub errors: Errors,
    /// Fault hooks the service offers, for points a black box cannot reach otherwise.
    pub faults: Faults,
    /// How much concurrency the concurrent points use.
    pub load: Load,
    /// How one effect is read back by its identity, to see an overwrite counting cannot see.
    pub read: Option<ReadBack>,
    /// `[upstream]`: the service is a gateway in front of an HTTP API, which the lab serves,
    /// records and faults (the hop points).
    pub upstream: Option<Upstream>,
    /// The target file's folder: relative paths in the file are read from it, and every command
    /// the file names runs in it.
    pub folder: PathBuf,
}

/// The sections of a target file `lab audit` reads ([`Target::audit_parts`]).
#[derive(Clone, Debug)]
pub struct AuditParts {
    /// `[create]`: the route whose requests are audited, and its success statuses.
    pub create: Endpoint,
    /// `[key]`: the header that carries the key, and its form.
    pub key: KeySpec,
    /// `[identity]`: where a success names its effect.
    pub identity: Identity,
    /// `[[callers]]`: the callers the recording's credentials name (none, one or more).
    pub callers: Vec<Caller>,
}

/// `[service]`.
#[derive(Clone, Debug)]
pub struct Service {
    /// The base URL as written (`http://127.0.0.1:8000`), or as `--url` replaced it.
    pub base_url: String,
    /// The base URL read: the host and port to connect to, the path prefix every request path
    /// is appended to (empty, or `/api`), and whether the host is loopback.
    pub url: crate::BaseUrl,
    /// A request that resets the service's state before the run.
    pub reset: Option<Endpoint>,
    /// A command that resets the service's state before the run.
    pub reset_command: Option<Vec<String>>,
    /// How long one request may take before it counts as "no answer".
    pub timeout: Duration,
    /// A command that starts the service (a gateway the check points at the API it serves, with
    /// `{{upstream}}`); the check starts it before the reset, waits for its port, and stops it
    /// at the end. `None`: the service is already running.
    pub command: Option<Vec<String>>,
    /// Variables added to the command's environment.
    pub env: Vec<(String, String)>,
}

/// A request the check sends: method, path, headers and a JSON body template.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `POST`, `PUT`, ...
    pub method: String,
    /// The path after the base URL's prefix, starting with `/`.
    pub path: String,
    /// Headers sent with every such request (the caller's are added).
    pub headers: Vec<(String, String)>,
    /// The JSON body, with `"{{field}}"` placeholders; `None` sends no body.
    pub body: Option<Value>,
    /// The fields' values, sent exactly as given unless `vary` names the field.
    pub fields: BTreeMap<String, Value>,
    /// The fields the check may vary, and how (`vary = { title = "text" }`).
    pub vary: BTreeMap<String, Vary>,
    /// The statuses that mean success (default: any 2xx).
    pub success: Vec<u16>,
}

/// How the check may vary one field.
#[derive(Clone, Debug, PartialEq)]
pub enum Vary {
    /// Free text: the check may append ` (check RUN-N)`.
    Text,
    /// Only these values (the field's own value among them): the check sends nothing else.
    OneOf(Vec<Value>),
}

/// The characters of every key the check makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyShape {
    /// A fresh random UUID v4, lowercase with hyphens: what middlewares that require UUIDs
    /// accept, and those that take any string.
    Uuid,
    /// `chk-RUN-N`.
    Text,
}

/// How the service reads the key header's value (`key.form`): what the check sends, and which
/// of the draft's sf-string sub-checks it grades as required.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyForm {
    /// An RFC 8941 sf-string, `"..."`, as the draft's section 2.1 asks: the service claims the
    /// draft's form, so a malformed sf-string and the key written bare are graded.
    SfString,
    /// The key's characters bare, a token; a quote is no token character, so a quoted key is
    /// malformed, or read as the same key.
    Token,
    /// The header's value taken as it comes, any string, as Stripe reads it: the key is sent
    /// bare, nothing is malformed (unless `key.pattern` says so), and a quoted key is another
    /// key; what the draft asks of sf-strings is a SHOULD line only.
    Opaque,
}

/// `key.pattern`: the keys the service accepts. The whole key must match (the expression is
/// anchored at both ends); for `form = "sf-string"` the key is the string inside the quotes.
#[derive(Clone, Debug)]
pub struct KeyPattern {
    /// The expression as the file writes it.
    pub text: String,
    anchored: regex::Regex,
}

impl KeyPattern {
    /// Whether the service's pattern takes `key`.
    pub fn matches(&self, key: &str) -> bool {
        self.anchored.is_match(key)
    }

    /// A key outside the pattern, built around `fresh` (a key no run has used, in the file's
    /// shape) so that no run meets another's: the first of a few that the pattern refuses.
    /// `None` when the pattern takes them all.
    pub fn outside(&self, fresh: &str) -> Option<String> {
        let other_shape = if is_uuid(fresh) {
            format!("chk-{}", fresh.replace('-', ""))
        } else {
            uuid::Uuid::new_v4().to_string()
        };
        [
            other_shape,
            format!("{fresh}!"),
            format!("x{fresh}"),
            format!("{fresh} {fresh}"),
            format!("{fresh}-").repeat(300 / fresh.len().max(1) + 1),
        ]
        .into_iter()
        .find(|key| !self.matches(key))
    }
}

/// `[key]`.
#[derive(Clone, Debug)]
pub struct KeySpec {
    /// The header name (`Idempotency-Key`).
    pub header: String,
    /// How the service reads it.
    pub form: KeyForm,
    /// Whether the file names `key.form` (a file without it is graded as the draft's
    /// sf-string, and its report says how to declare an opaque key).
    pub form_declared: bool,
    /// The keys the service accepts (`key.pattern`): every key the check makes matches it, and
    /// one outside it must be refused.
    pub pattern: Option<KeyPattern>,
    /// The characters of the keys the check makes (`key.shape`).
    pub shape: KeyShape,
    /// Whether the endpoint requires a key (`key.required`); when not, a request without one is
    /// a plain request, which the draft's section 2.7 leaves unrefused.
    pub required: bool,
}

/// Where a success names what it created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A JSON pointer into the answer's body (`/ticket_id`).
    Pointer(String),
    /// A header of the answer (`Location`).
    Header(String),
}

/// How a replay is recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replay {
    /// The answer carries this header (with this value, when given).
    Header {
        /// The header's name.
        name: String,
        /// The value it must have, or any value.
        value: Option<String>,
    },
    /// The answer has this status, with the stored body (any status: `409` with the first
    /// answer's body is a replay when the body names the first effect).
    Status(u16),
    /// Nothing marks a replay; it is known by the identity alone.
    Inferred,
}

/// `[statuses]`: what the service answers in each case the contract names.
#[derive(Clone, Debug)]
pub struct Statuses {
    /// A key reused with another payload (default 422, the draft's section 2.7).
    pub conflict: Vec<u16>,
    /// A key whose first request is still being processed (default 409); empty when the
    /// service never answers so (a second request with the key waits for the first).
    pub in_progress: Vec<u16>,
    /// A malformed key (default 400).
    pub bad_key: Vec<u16>,
    /// No key at all (default 400).
    pub missing_key: Vec<u16>,
}

/// One caller and its credentials.
#[derive(Clone, Debug)]
pub struct Caller {
    /// A name for the report.
    pub name: String,
    /// The headers that say who it is (`Authorization`); redacted in the report.
    pub headers: Vec<(String, String)>,
}

/// How effects are counted.
#[derive(Clone, Debug)]
pub enum Count {
    /// A read-back request; the JSON pointer names a list (its length counts) or a number.
    Request {
        /// The request (its body is not sent).
        request: Endpoint,
        /// Where the list or number is in the answer.
        pointer: String,
        /// Which callers it is sent as: all of them, summed (a per-caller list), or one.
        callers: CountCallers,
    },
    /// A read-only query against the service's SQLite file; its first column is the count.
    Sqlite {
        /// The database file.
        file: PathBuf,
        /// The query.
        query: String,
    },
    /// A read-only query against the service's PostgreSQL database.
    Postgres {
        /// The connection URL.
        url: String,
        /// The query.
        query: String,
    },
    /// A command that prints one number.
    Command(Vec<String>),
    /// The tickets in the API the lab serves (`[upstream]`).
    Upstream,
}

/// Which callers a counting request is sent as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountCallers {
    /// Each caller, and the counts are added: for lists that show a caller its own effects.
    Each,
    /// This caller only (an index into [`Target::callers`]); or none of them, with `None`.
    One(Option<usize>),
}

/// How to provoke an error answer.
#[derive(Clone, Debug, Default)]
pub struct Provocation {
    /// Headers added to the create request.
    pub headers: Vec<(String, String)>,
    /// Fields whose values replace the create's.
    pub fields: BTreeMap<String, Value>,
    /// A raw body sent instead of the template.
    pub body_text: Option<String>,
}

/// `[errors]`.
#[derive(Clone, Debug, Default)]
pub struct Errors {
    /// A request the service refuses with a 4xx (default: a body that is not JSON).
    pub validation: Provocation,
    /// Whether `validation` came from the file or is the default.
    pub validation_given: bool,
    /// Requests the service answers with a handled 5xx, each graded on its own; none, and the
    /// point is not covered.
    pub server: Vec<Provocation>,
}

/// `[faults]`: hooks a black box cannot do without.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Makes the service fail after the effect and before its record is saved.
    pub between_effect_and_record: Option<Provocation>,
}

/// `[read]`: how one effect is read back by its identity.
#[derive(Clone, Debug)]
pub struct ReadBack {
    /// A request by identity (`{{id}}` in its path), sent as the first caller.
    pub request: Option<ReadRequest>,
    /// A read-only query with `?1` bound to the identity.
    pub sql: Option<ReadSql>,
}

/// `read.request`.
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// The method (default `GET`).
    pub method: String,
    /// The path, with `{{id}}` where the identity goes.
    pub path: String,
    /// Headers added to the first caller's.
    pub headers: Vec<(String, String)>,
    /// Where the effect is in the answer (default: the whole body).
    pub pointer: String,
}

/// `read.sql`: a read-only SQLite query whose first row is the effect as stored.
#[derive(Clone, Debug)]
pub struct ReadSql {
    /// The file (relative to the target file's folder).
    pub file: PathBuf,
    /// The query, `?1` the identity.
    pub query: String,
}

/// `[load]`: the concurrent points' size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Rounds on a fresh key.
    pub fresh_rounds: usize,
    /// Rounds on a completed key.
    pub completed_rounds: usize,
    /// Requests released together in each round.
    pub callers: usize,
}

/// What the command line changes in a file's meaning.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--url`: another base URL than the file's.
    pub base_url: Option<String>,
    /// `--allow-remote`: a host other than loopback is allowed.
    pub allow_remote: bool,
    /// `--upstream-port`: another loopback port than the file's `upstream.port` for the API the
    /// lab serves behind a wrapper.
    pub upstream_port: Option<u16>,
}

/// `[upstream]` with the command line's `--upstream-port` laid over its `port`.
///
/// # Errors
/// `--upstream-port` for a file without `[upstream]`.
pub(crate) fn with_upstream_port(
    upstream: Option<Upstream>,
    overrides: &Overrides,
) -> Checked<Option<Upstream>> {
    match (upstream, overrides.upstream_port) {
        (None, Some(port)) => Err(FieldError::new(
            "--upstream-port",
            format!(
                "{port}: the file has no [upstream] section, so the lab serves \
                 no API for it to name the port of"
            ),
        )),
        (Some(mut upstream), Some(port)) => {
            upstream.port = Some(port);
            Ok(Some(upstream))
        }
        (upstream, None) => Ok(upstream),
    }
}

// The file as TOML has it. Unknown fields are refused, so a misspelt name is reported, not
// ignored.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    service: Option<ServiceFile>,
    create: Option<EndpointFile>,
    key: Option<KeyFile>,
    identity: Option<IdentityFile>,
    replay: Option<ReplayFile>,
    statuses: Option<StatusesFile>,
    #[serde(default)]
    callers: Vec<CallerFile>,
    count: Option<CountFile>,
    other_endpoint: Option<EndpointFile>,
    errors: Option<ErrorsFile>,
    faults: Option<FaultsFile>,
    load: Option<LoadFile>,
    read: Option<ReadFile>,
    upstream: Option<UpstreamFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadFile {
    request: Option<ReadRequestFile>,
    sql: Option<SqlFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadRequestFile {
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    json_pointer: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceFile {
    base_url: Option<String>,
    reset: Option<EndpointFile>,
    reset_command: Option<Vec<String>>,
    timeout_ms: Option<u64>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EndpointFile {
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<Value>,
    #[serde(default)]
    fields: BTreeMap<String, Value>,
    #[serde(default)]
    vary: BTreeMap<String, Value>,
    success: Option<Vec<u16>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    header: Option<String>,
    form: Option<String>,
    pattern: Option<String>,
    shape: Option<String>,
    required: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityFile {
    json_pointer: Option<String>,
    header: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayFile {
    header: Option<String>,
    value: Option<String>,
    status: Option<u16>,
    inferred: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusesFile {
    conflict: Option<Vec<u16>>,
    in_progress: Option<Vec<u16>>,
    bad_key: Option<Vec<u16>>,
    missing_key: Option<Vec<u16>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallerFile {
    name: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountFile {
    request: Option<CountRequestFile>,
    sql: Option<SqlFile>,
    command: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountRequestFile {
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    json_pointer: Option<String>,
    caller: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlFile {
    sqlite: Option<PathBuf>,
    postgres: Option<String>,
    query: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorsFile {
    validation: Option<ProvocationFile>,
    /// One table or a list of tables: read as JSON first, so a fault in the second names it.
    server: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultsFile {
    between_effect_and_record: Option<ProvocationFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvocationFile {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    fields: BTreeMap<String, Value>,
    body_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadFile {
    fresh_rounds: Option<usize>,
    completed_rounds: Option<usize>,
    callers: Option<usize>,
}

/// The most rounds and callers a file may ask for: the concurrent points stay bounded.
pub const MAX_ROUNDS: usize = 1000;
/// The most requests released together.
pub const MAX_LOAD_CALLERS: usize = 64;

impl Target {
    /// Validates a target file's text; `path` names it in messages.
    ///
    /// # Errors
    /// [`Error::TargetInvalid`] naming the field at fault; [`Error::InputInvalid`] for TOML that
    /// does not parse.
    pub fn parse(text: &str, path: &Path, overrides: &Overrides) -> Result<Target> {
        let file: File = toml::from_str(text).map_err(|err| not_toml(path, &err))?;
        let folder = folder_of(path);
        let mut target = file
            .validate(overrides, &folder)
            .map_err(|err| err.in_file(path))?;
        target.path = path.to_owned();
        Ok(target)
    }

    /// What `lab audit` reads of a target file: the create route, the key, the identity and
    /// the callers, each validated as `lab check` validates it. The sections only a run needs
    /// (`[service]`, `[count]`) may be left out, and one caller, or none, is enough: a
    /// recording has the callers it has.
    ///
    /// # Errors
    /// As [`Target::parse`], for the sections it reads.
    pub fn audit_parts(text: &str, path: &Path) -> Result<AuditParts> {
        let file: File = toml::from_str(text).map_err(|err| not_toml(path, &err))?;
        let parts = || -> Checked<AuditParts> {
            Ok(AuditParts {
                create: endpoint(required(file.create, "[create]")?, "create")?,
                key: key_spec(required(file.key, "[key]")?)?,
                identity: identity(required(file.identity, "[identity]")?, "identity")?,
                callers: named_callers(file.callers)?,
            })
        };
        parts().map_err(|err| err.in_file(path))
    }

    /// The caller index named `name`.
    pub fn caller_index(&self, name: &str) -> Option<usize> {
        self.callers.iter().position(|caller| caller.name == name)
    }
}

pub use crate::error::FieldError;

/// A validation step's result.
pub(crate) type Checked<T> = std::result::Result<T, FieldError>;

/// An argv list (`field`) whose first word names the program.
pub(crate) fn argv(command: &[String], field: &str) -> Checked<()> {
    if command.first().is_none_or(String::is_empty) {
        return Err(FieldError::new(
            field,
            "an argv list whose first word is the program",
        ));
    }
    Ok(())
}

/// A target file's TOML that does not parse: toml's message names the line, the column and the
/// key; kept on one line.
pub(crate) fn not_toml(path: &Path, err: &toml::de::Error) -> Error {
    Error::InputInvalid {
        subject: path.display().to_string(),
        problem: crate::error::folded(&err.to_string()),
    }
}

/// The folder a target file's relative paths and commands start from: the file's own, made
/// absolute (from the working directory) so that a command run in it can still be named by it.
pub fn folder_of(path: &Path) -> PathBuf {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    std::path::absolute(&folder).unwrap_or(folder)
}

/// A command's program as the target file names it: a bare name is looked up on `PATH`; a
/// relative path (`./count.sh`, `bin/x`) is the file's folder's.
pub fn program_in(folder: &Path, program: &str) -> PathBuf {
    if program.contains('/') {
        in_folder(folder, Path::new(program))
    } else {
        PathBuf::from(program)
    }
}

/// `file` read from `folder` when it is relative.
pub fn in_folder(folder: &Path, file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_owned()
    } else {
        folder.join(file)
    }
}

pub(crate) fn required<T>(value: Option<T>, field: &str) -> Checked<T> {
    value.ok_or_else(|| FieldError::new(field, "missing (required)"))
}

impl File {
    fn validate(self, overrides: &Overrides, folder: &Path) -> Checked<Target> {
        let service_file = required(self.service, "[service]")?;
        let service = service(service_file, overrides)?;
        let create = endpoint(required(self.create, "[create]")?, "create")?;
        let key = key_spec(required(self.key, "[key]")?)?;
        let identity = identity(required(self.identity, "[identity]")?, "identity")?;
        let replay = match self.replay {
            None => Replay::Inferred,
            Some(file) => replay(file)?,
        };
        let statuses = match self.statuses {
            None => Statuses::default(),
            Some(file) => statuses(file, key.required)?,
        };
        let callers = callers(self.callers)?;
        let upstream = self.upstream.map(upstream).transpose()?;
        let upstream = with_upstream_port(upstream, overrides)?;
        let count = match (self.count, &upstream) {
            (Some(file), _) => count(file, &callers, folder)?,
            (None, Some(_)) => Count::Upstream,
            (None, None) => return Err(FieldError::new("[count]", "missing (required)")),
        };
        let other_endpoint = self
            .other_endpoint
            .map(|file| endpoint(file, "other_endpoint"))
            .transpose()?;
        let errors = errors(self.errors, &create)?;
        let faults = match self.faults {
            None => Faults::default(),
            Some(file) => Faults {
                between_effect_and_record: file
                    .between_effect_and_record
                    .map(|p| provocation(p, "faults.between_effect_and_record", &create))
                    .transpose()?,
            },
        };
        let load = match self.load {
            None => Load::default(),
            Some(file) => load(file)?,
        };
        let read = self.read.map(|file| read_back(file, folder)).transpose()?;
        Ok(Target {
            path: PathBuf::new(),
            service,
            create,
            key,
            identity,
            replay,
            statuses,
            callers,
            count,
            other_endpoint,
            errors,
            faults,
            load,
            read,
            upstream,
            folder: folder.to_owned(),
        })
        .and_then(check_upstream_use)
        .and_then(|target| key_header_elsewhere(&target).map(|()| target))
    }
}

impl Default for Statuses {
    fn default() -> Statuses {
        Statuses {
            conflict: vec![422],
            in_progress: vec![409],
            bad_key: vec![400],
            missing_key: vec![400],
        }
    }
}

impl Default for Load {
    fn default() -> Load {
        Load {
            fresh_rounds: 12,
            completed_rounds: 6,
            callers: 8,
        }
    }
}

fn default_validation() -> Provocation {
    Provocation {
        body_text: Some("{\"this body\": \"is not JSON\"".to_owned()),
        ..Provocation::default()
    }
}

/// `[key]`: the header (`Idempotency-Key` unless named), how the service reads its value, the
/// keys it accepts, the shape of the keys the check makes (a UUID unless named) and whether the
/// endpoint requires one.
fn key_spec(file: KeyFile) -> Checked<KeySpec> {
    let shape = match file.shape.as_deref() {
        None | Some("uuid") => KeyShape::Uuid,
        Some("text") => KeyShape::Text,
        Some(other) => {
            return Err(FieldError::new(
                "key.shape",
                format!("{other:?}: expected \"uuid\" or \"text\""),
            ));
        }
    };
    Ok(KeySpec {
        pattern: match file.pattern {
            Some(text) => Some(key_pattern(text, shape)?),
            None => None,
        },
        shape,
        required: file.required.unwrap_or(true),
        header: header_name(
            &file.header.unwrap_or_else(|| "Idempotency-Key".to_owned()),
            "key.header",
        )?,
        form_declared: file.form.is_some(),
        form: match file.form.as_deref() {
            None | Some("sf-string") => KeyForm::SfString,
            Some("token") => KeyForm::Token,
            Some("opaque") => KeyForm::Opaque,
            Some(other) => {
                return Err(FieldError::new(
                    "key.form",
                    format!(
                        "{other:?}: expected \"opaque\" (the header's value taken as it \
                         comes, any string), \"sf-string\" (the draft's quoted String) \
                         or \"token\" (the key bare)"
                    ),
                ));
            }
        },
    })
}

/// The name of `shape` in the file, and keys of that shape such as the check makes, for
/// `key.pattern` to take: the check's own keys must match it, or every point would be refused.
fn shape_samples(shape: KeyShape) -> (&'static str, &'static [&'static str]) {
    match shape {
        KeyShape::Uuid => (
            "uuid",
            &[
                "00000000-0000-4000-8000-000000000000",
                "5f0c1a2b-3d4e-4f60-9a7b-8c9d0e1f2a3b",
                "ffffffff-ffff-4fff-bfff-ffffffffffff",
            ],
        ),
        KeyShape::Text => ("text", &["chk-0123456789ab-1", "chk-fedcba987654-42"]),
    }
}

/// `key.pattern`: a regular expression the whole key must match, which the keys of `shape`
/// match, and which refuses some key the check can send (or it says nothing to grade).
fn key_pattern(text: String, shape: KeyShape) -> Checked<KeyPattern> {
    let anchored = regex::Regex::new(&format!("^(?:{text})$")).map_err(|err| {
        FieldError::new(
            "key.pattern",
            format!("{text:?} is not a regular expression: {err}"),
        )
    })?;
    let pattern = KeyPattern { text, anchored };
    let takes = |shape: KeyShape| shape_samples(shape).1.iter().all(|k| pattern.matches(k));
    let (name, samples) = shape_samples(shape);
    if !takes(shape) {
        let other = match shape {
            KeyShape::Uuid => KeyShape::Text,
            KeyShape::Text => KeyShape::Uuid,
        };
        let fix = if takes(other) {
            format!(
                "set key.shape = \"{}\", whose keys it takes",
                shape_samples(other).0
            )
        } else {
            "the check makes its keys as UUIDs or as chk-RUN-N (key.shape); write the pattern \
             so that it takes one of them"
                .to_owned()
        };
        let sample = samples.iter().find(|k| !pattern.matches(k)).unwrap_or(&"");
        return Err(FieldError::new(
            "key.pattern",
            format!(
                "{:?} does not take the keys of key.shape = \"{name}\" (such as \
                 {sample:?}), and every key the check sends must match it: \
                 {fix}",
                pattern.text
            ),
        ));
    }
    if pattern.outside(samples[0]).is_none() {
        return Err(FieldError::new(
            "key.pattern",
            format!(
                "{:?} takes every key the check would send outside it, so it \
                 says nothing to grade",
                pattern.text
            ),
        )
        .fix("leave it out (key.form = \"opaque\" takes any string)"));
    }
    Ok(pattern)
}

/// At least two callers, each named once and with credentials of its own.
fn callers(list: Vec<CallerFile>) -> Checked<Vec<Caller>> {
    if list.len() < 2 {
        return Err(
            FieldError::new("[[callers]]", format!("{} given", list.len())).fix(
                "name at least two callers, each with its own credentials, so \
                 the other-caller point can tell them apart",
            ),
        );
    }
    named_callers(list)
}

/// `[[callers]]`, however many: each named once, each with credentials of its own.
fn named_callers(list: Vec<CallerFile>) -> Checked<Vec<Caller>> {
    let mut callers = Vec::new();
    for (i, caller) in list.into_iter().enumerate() {
        let field = format!("callers[{i}]");
        let name = required(caller.name, &format!("{field}.name"))?;
        if name.is_empty() || name.len() > 64 {
            return Err(FieldError::new(
                format!("{field}.name"),
                format!("{name:?}: one to sixty-four characters"),
            ));
        }
        if callers.iter().any(|c: &Caller| c.name == name) {
            return Err(FieldError::new(
                format!("{field}.name"),
                format!("{name:?} is named twice"),
            ));
        }
        let headers = headers(caller.headers, &format!("{field}.headers"))?;
        callers.push(Caller { name, headers });
    }
    // Header names compare without case, as HTTP compares them: `authorization` is the same
    // header as `Authorization`, and two callers that send one token under it are one caller.
    fn credentials(caller: &Caller) -> Vec<(String, &str)> {
        let mut sent: Vec<(String, &str)> = caller
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str()))
            .collect();
        sent.sort();
        sent
    }
    for (i, caller) in callers.iter().enumerate().skip(1) {
        if let Some(same) = callers[..i]
            .iter()
            .position(|other| credentials(other) == credentials(caller))
        {
            return Err(FieldError::new(
                format!("callers[{i}].headers"),
                format!(
                    "the same credentials as callers[{same}] (header names are not \
                     case-sensitive)"
                ),
            )
            .fix(
                "the other-caller point needs callers the service can tell \
                 apart: give each caller its own credentials",
            ));
        }
    }
    Ok(callers)
}

/// The key header is the check's to send (fresh, malformed, absent, in either form): another
/// section that sends a header of that name, in any case, would send a second key.
fn key_header_elsewhere(target: &Target) -> Checked<()> {
    let key = &target.key.header;
    let mut sections: Vec<(String, &[(String, String)])> =
        vec![("create.headers".to_owned(), &target.create.headers)];
    if let Some(other) = &target.other_endpoint {
        sections.push(("other_endpoint.headers".to_owned(), &other.headers));
    }
    for (i, caller) in target.callers.iter().enumerate() {
        sections.push((format!("callers[{i}].headers"), &caller.headers));
    }
    for (field, headers) in sections {
        if let Some((name, _)) = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) {
            return Err(FieldError::new(
                format!("{field}.{name}"),
                format!(
                    "the key header (key.header = {key:?}) is the check's to send, \
                     a fresh key each time"
                ),
            )
            .fix("leave it out here"));
        }
    }
    Ok(())
}

fn errors(file: Option<ErrorsFile>, create: &Endpoint) -> Checked<Errors> {
    Ok(match file {
        None => Errors {
            validation: default_validation(),
            validation_given: false,
            server: Vec::new(),
        },
        Some(file) => Errors {
            validation_given: file.validation.is_some(),
            validation: match file.validation {
                Some(p) => provocation(p, "errors.validation", create)?,
                None => default_validation(),
            },
            server: server_errors(file.server, create)?,
        },
    })
}

/// `errors.server`: one table, or a list of tables, each its own provocation.
fn server_errors(value: Option<Value>, create: &Endpoint) -> Checked<Vec<Provocation>> {
    let tables = match value {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(FieldError::new(
                "errors.server",
                "an empty list (leave it out instead)",
            ));
        }
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| (format!("errors.server[{i}]"), item))
            .collect::<Vec<_>>(),
        Some(table @ Value::Object(_)) => vec![("errors.server".to_owned(), table)],
        Some(other) => {
            return Err(FieldError::new(
                "errors.server",
                format!("{other}: a table, or a list of tables"),
            ));
        }
    };
    tables
        .into_iter()
        .map(|(field, table)| {
            let file: ProvocationFile = serde_json::from_value(table)
                .map_err(|err| FieldError::new(&field, err.to_string()))?;
            provocation(file, &field, create)
        })
        .collect()
}

/// `[load]`: each count the file gives within its bounds, the default for one it leaves out.
fn load(file: LoadFile) -> Checked<Load> {
    let default = Load::default();
    let bounded = |value: Option<usize>, field: &str, default: usize, min: usize, max: usize| {
        let value = value.unwrap_or(default);
        if value < min || value > max {
            Err(FieldError::new(
                field.to_string(),
                format!("{value}: expected {min} to {max}"),
            ))
        } else {
            Ok(value)
        }
    };
    Ok(Load {
        fresh_rounds: bounded(
            file.fresh_rounds,
            "load.fresh_rounds",
            default.fresh_rounds,
            1,
            MAX_ROUNDS,
        )?,
        completed_rounds: bounded(
            file.completed_rounds,
            "load.completed_rounds",
            default.completed_rounds,
            1,
            MAX_ROUNDS,
        )?,
        callers: bounded(
            file.callers,
            "load.callers",
            default.callers,
            2,
            MAX_LOAD_CALLERS,
        )?,
    })
}

fn service(file: ServiceFile, overrides: &Overrides) -> Checked<Service> {
    let (base_url, field) = match &overrides.base_url {
        Some(url) => (url.clone(), "--url"),
        None => (
            required(file.base_url, "service.base_url")?,
            "service.base_url",
        ),
    };
    let url = base_url_in(&base_url, field, overrides.allow_remote)?;
    let reset = file
        .reset
        .map(|r| endpoint(r, "service.reset"))
        .transpose()?;
    if let Some(command) = &file.reset_command {
        argv(command, "service.reset_command")?;
    }
    let timeout_ms = file.timeout_ms.unwrap_or(10_000);
    if !(100..=600_000).contains(&timeout_ms) {
        return Err(FieldError::new(
            "service.timeout_ms",
            format!("{timeout_ms}: expected 100 to 600000"),
        ));
    }
    if let Some(command) = &file.command {
        argv(command, "service.command")?;
        if !url.is_loopback() {
            return Err(FieldError::new(
                "service.command",
                format!(
                    "the check starts the service on this machine, so {field} must \
                     be a loopback address, not {base_url:?}"
                ),
            ));
        }
    }
    if file.command.is_none() && !file.env.is_empty() {
        return Err(FieldError::new(
            "service.env",
            "only with service.command (the variables are its)",
        ));
    }
    Ok(Service {
        base_url,
        url,
        reset,
        reset_command: file.reset_command,
        timeout: Duration::from_millis(timeout_ms),
        command: file.command,
        env: file.env.into_iter().collect(),
    })
}

/// A gateway the file never points at the API the lab serves would call someone else's, or
/// nobody; `{{upstream}}` without `[upstream]` names an API nobody serves.
fn check_upstream_use(target: Target) -> Checked<Target> {
    let service = &target.service;
    let words: Vec<&str> = service
        .command
        .iter()
        .flatten()
        .chain(service.env.iter().map(|(_, v)| v))
        .map(String::as_str)
        .collect();
    let names = words.iter().any(|w| w.contains(UPSTREAM_PLACEHOLDER));
    match &target.upstream {
        None if names => Err(FieldError::new(
            "[upstream]",
            format!(
                "service.command names {UPSTREAM_PLACEHOLDER}, but the file has \
                 no [upstream] section to say which API the lab serves there"
            ),
        )),
        Some(upstream) if service.command.is_none() && upstream.port.is_none() => {
            Err(FieldError::new(
                "upstream.port",
                "the gateway is started by you, not by the check (no \
                 service.command), so name the loopback port the lab serves the \
                 API on, and point the gateway at http://127.0.0.1:PORT",
            ))
        }
        Some(upstream) if service.command.is_some() && !names && upstream.port.is_none() => {
            Err(FieldError::new(
                "service.command",
                format!(
                    "names {UPSTREAM_PLACEHOLDER} nowhere (nor service.env), so the \
                     gateway cannot be pointed at the API the lab serves (or name \
                     upstream.port)"
                ),
            ))
        }
        _ => Ok(target),
    }
}

/// `http://HOST[:PORT][/PREFIX]` into its parts.
/// A base URL the file (or `--url`) gives at `field`: on loopback, or anywhere with
/// `allow_remote`.
pub(crate) fn base_url_in(url: &str, field: &str, allow_remote: bool) -> Checked<crate::BaseUrl> {
    let parsed = crate::BaseUrl::parse(url).map_err(|problem| FieldError::new(field, problem))?;
    if !parsed.is_loopback() && !allow_remote {
        return Err(FieldError::new(
            field.to_string(),
            format!(
                "{url:?} is not a loopback address (localhost, 127.x.x.x, \
                 [::1])"
            ),
        )
        .fix(
            "the check creates real effects, so another host needs \
             --allow-remote",
        ));
    }
    Ok(parsed)
}

fn method(value: Option<String>, field: &str, default: &str) -> Checked<String> {
    let method = value.unwrap_or_else(|| default.to_owned());
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(FieldError::new(
            field.to_string(),
            format!("{method:?}: an HTTP method in capitals (POST, PUT, ...)"),
        ));
    }
    Ok(method)
}

fn request_path(value: Option<String>, field: &str) -> Checked<String> {
    let path = required(value, field)?;
    if !path.starts_with('/') || path.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(FieldError::new(
            field.to_string(),
            format!(
                "{path:?}: a path starting with / in printable ASCII without \
                 spaces"
            ),
        ));
    }
    Ok(path)
}

pub(crate) fn header_name(name: &str, field: &str) -> Checked<String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(FieldError::new(
            field.to_string(),
            format!("{name:?} is not a header name"),
        ));
    }
    Ok(name.to_owned())
}

/// A map of headers as the file gives them. HTTP compares header names without case, so two
/// names that differ only in case are one header given twice, refused.
fn headers(map: BTreeMap<String, String>, field: &str) -> Checked<Vec<(String, String)>> {
    let names: Vec<&String> = map.keys().collect();
    for (i, name) in names.iter().enumerate() {
        if let Some(other) = names[i + 1..].iter().find(|n| n.eq_ignore_ascii_case(name)) {
            return Err(FieldError::new(
                format!("{field}.{other}"),
                format!(
                    "the header {name} is given twice (header names are not \
                     case-sensitive)"
                ),
            )
            .fix("keep one"));
        }
    }
    map.into_iter()
        .map(|(name, value)| {
            let name = header_name(&name, &format!("{field}.{name}"))?;
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
            if ["content-length", "host", "connection", "transfer-encoding"]
                .contains(&lower.as_str())
            {
                return Err(FieldError::new(
                    format!("{field}.{name}"),
                    "the check sets this header itself",
                ));
            }
            Ok((name, value))
        })
        .collect()
}

fn endpoint(file: EndpointFile, field: &str) -> Checked<Endpoint> {
    let method = method(file.method, &format!("{field}.method"), "POST")?;
    let path = request_path(file.path, &format!("{field}.path"))?;
    let headers = headers(file.headers, &format!("{field}.headers"))?;
    if let Some(body) = &file.body {
        let mut names = Vec::new();
        placeholders(body, &mut names);
        for name in &names {
            if !file.fields.contains_key(name) {
                return Err(FieldError::new(
                    format!("{field}.body"),
                    format!(
                        "the placeholder {{{{{name}}}}} names no entry of \
                         {field}.fields"
                    ),
                ));
            }
        }
        for name in file.fields.keys() {
            if !names.contains(name) {
                return Err(FieldError::new(
                    format!("{field}.fields.{name}"),
                    format!("not used by any {{{{{name}}}}} placeholder in {field}.body"),
                ));
            }
        }
    } else if !file.fields.is_empty() {
        return Err(FieldError::new(
            format!("{field}.fields"),
            format!("given without a {field}.body"),
        ));
    }
    for (name, value) in &file.fields {
        if !(value.is_string() || value.is_number() || value.is_boolean()) {
            return Err(FieldError::new(
                format!("{field}.fields.{name}"),
                "a text, a number or a boolean",
            ));
        }
    }
    let vary = vary(file.vary, &file.fields, field)?;
    let success = file.success.unwrap_or_default();
    if let Some(bad) = success.iter().find(|s| !(100..=599).contains(*s)) {
        return Err(FieldError::new(
            format!("{field}.success"),
            format!("{bad} is not an HTTP status"),
        ));
    }
    Ok(Endpoint {
        method,
        path,
        headers,
        body: file.body,
        fields: file.fields,
        vary,
        success,
    })
}

/// `{field}.vary`: each name a field of `fields`, varied as free text (`"text"`, a text field
/// only) or within a list of values that holds the field's own value.
pub fn vary(
    file: BTreeMap<String, Value>,
    fields: &BTreeMap<String, Value>,
    field: &str,
) -> Checked<BTreeMap<String, Vary>> {
    let mut vary = BTreeMap::new();
    for (name, how) in file {
        let at = format!("{field}.vary.{name}");
        let Some(value) = fields.get(&name) else {
            return Err(FieldError::new(
                at.to_string(),
                format!("names no entry of {field}.fields"),
            ));
        };
        let how = match how {
            Value::String(word) if word == "text" => {
                if !value.is_string() {
                    return Err(FieldError::new(
                        at.to_string(),
                        format!("\"text\" varies a text, and {field}.fields.{name} is {value}"),
                    )
                    .fix("give a list of the values the service accepts instead"));
                }
                Vary::Text
            }
            Value::Array(values) => {
                if values.len() < 2 {
                    return Err(FieldError::new(
                        at.to_string(),
                        "a list of at least two values the service accepts (one to \
                         create with, another to change the payload)",
                    ));
                }
                if let Some(bad) = values
                    .iter()
                    .find(|v| !(v.is_string() || v.is_number() || v.is_boolean()))
                {
                    return Err(FieldError::new(
                        at.to_string(),
                        format!("{bad}: a text, a number or a boolean"),
                    ));
                }
                if !values.contains(value) {
                    return Err(FieldError::new(
                        at.to_string(),
                        format!("the list does not hold {field}.fields.{name} = {value}"),
                    )
                    .fix("the check sends only values from the list"));
                }
                Vary::OneOf(values)
            }
            other => {
                return Err(FieldError::new(
                    at.to_string(),
                    format!(
                        "{other}: \"text\" (free text), or a list of the values the \
                         service accepts"
                    ),
                ));
            }
        };
        vary.insert(name, how);
    }
    Ok(vary)
}

/// `[read]`: a request by identity (`{{id}}` in its path), a query (`?1` the identity), or both.
fn read_back(file: ReadFile, folder: &Path) -> Checked<ReadBack> {
    let request = file
        .request
        .map(|request| {
            let method = method(request.method, "read.request.method", "GET")?;
            let path = request_path(request.path, "read.request.path")?;
            if !path.contains("{{id}}") {
                return Err(FieldError::new(
                    "read.request.path",
                    format!("{path:?} has no {{{{id}}}} where the identity goes"),
                ));
            }
            Ok(ReadRequest {
                method,
                path,
                headers: headers(request.headers, "read.request.headers")?,
                pointer: json_pointer(
                    request.json_pointer.unwrap_or_default(),
                    "read.request.json_pointer",
                )?,
            })
        })
        .transpose()?;
    let sql = file
        .sql
        .map(|sql| {
            let query = required(sql.query, "read.sql.query")?;
            match (sql.sqlite, sql.postgres) {
                (Some(file), None) => Ok(ReadSql {
                    file: in_folder(folder, &file),
                    query,
                }),
                (_, Some(_)) => Err(FieldError::new("read.sql.postgres", "not read back yet")
                    .fix("use read.sql.sqlite or read.request")),
                (None, None) => Err(FieldError::new("read.sql.sqlite", "missing (required)")),
            }
        })
        .transpose()?;
    if request.is_none() && sql.is_none() {
        return Err(FieldError::new("[read]", "give request, sql, or both"));
    }
    Ok(ReadBack { request, sql })
}

/// The `{{name}}` placeholders in the text values of `value`.
pub fn placeholders(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("{{") {
                let after = &rest[start + 2..];
                let Some(end) = after.find("}}") else { break };
                let name = after[..end].trim().to_owned();
                if !names.contains(&name) {
                    names.push(name);
                }
                rest = &after[end + 2..];
            }
        }
        Value::Array(items) => items.iter().for_each(|v| placeholders(v, names)),
        Value::Object(map) => map.values().for_each(|v| placeholders(v, names)),
        _ => {}
    }
}

fn identity(file: IdentityFile, field: &str) -> Checked<Identity> {
    match (file.json_pointer, file.header) {
        (Some(pointer), None) => Ok(Identity::Pointer(json_pointer(
            pointer,
            &format!("{field}.json_pointer"),
        )?)),
        (None, Some(header)) => Ok(Identity::Header(header_name(
            &header,
            &format!("{field}.header"),
        )?)),
        _ => Err(FieldError::new(
            format!("[{field}]"),
            "give exactly one of json_pointer or header",
        )),
    }
}

pub(crate) fn json_pointer(pointer: String, field: &str) -> Checked<String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(FieldError::new(
            field.to_string(),
            format!(
                "{pointer:?} is not a JSON pointer (RFC 6901: empty, or \
                 starting with /)"
            ),
        ));
    }
    Ok(pointer)
}

fn replay(file: ReplayFile) -> Checked<Replay> {
    match (file.header, file.status, file.inferred) {
        (Some(name), None, None | Some(false)) => Ok(Replay::Header {
            name: header_name(&name, "replay.header")?,
            value: file.value,
        }),
        (None, Some(status), None | Some(false)) if file.value.is_none() => {
            if (200..=599).contains(&status) {
                Ok(Replay::Status(status))
            } else {
                Err(FieldError::new(
                    "replay.status",
                    format!(
                        "{status}: an HTTP status from 200 to 599 (a replay's status, \
                         with the stored body)"
                    ),
                ))
            }
        }
        (None, None, Some(true)) if file.value.is_none() => Ok(Replay::Inferred),
        _ => Err(FieldError::new(
            "[replay]",
            "give exactly one of header (with an optional value), status, \
             or inferred = true",
        )),
    }
}

fn statuses(file: StatusesFile, key_required: bool) -> Checked<Statuses> {
    let default = Statuses::default();
    let list = |value: Option<Vec<u16>>, field: &str, default: Vec<u16>| {
        let list = value.unwrap_or(default);
        // An empty list says that the service never sends the status: a service that makes a
        // second request with a key in use wait for the first never answers "in progress", and
        // one whose key is optional never refuses a request for lacking one. A service always
        // answers a changed payload or a malformed key with some status.
        let never_sent = match field {
            "in_progress" => true,
            "missing_key" => !key_required,
            _ => false,
        };
        if list.is_empty() && !never_sent {
            return Err(FieldError::new(
                format!("statuses.{field}"),
                format!(
                    "an empty list{}",
                    if field == "missing_key" {
                        " (it may be empty when key.required = false: the key is optional)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        match list.iter().find(|s| !(400..=599).contains(*s)) {
            Some(bad) => Err(FieldError::new(
                format!("statuses.{field}"),
                format!("{bad} is not an error status (4xx or 5xx)"),
            )),
            None => Ok(list),
        }
    };
    Ok(Statuses {
        conflict: list(file.conflict, "conflict", default.conflict)?,
        in_progress: list(file.in_progress, "in_progress", default.in_progress)?,
        bad_key: list(file.bad_key, "bad_key", default.bad_key)?,
        missing_key: list(file.missing_key, "missing_key", default.missing_key)?,
    })
}

fn count(file: CountFile, callers: &[Caller], folder: &Path) -> Checked<Count> {
    match (file.request, file.sql, file.command) {
        (Some(request), None, None) => {
            let pointer = json_pointer(
                required(request.json_pointer, "count.request.json_pointer")?,
                "count.request.json_pointer",
            )?;
            let callers = match request.caller.as_deref() {
                None | Some("each") => CountCallers::Each,
                Some("none") => CountCallers::One(None),
                Some(name) => CountCallers::One(Some(
                    callers.iter().position(|c| c.name == name).ok_or_else(|| {
                        FieldError::new(
                            "count.request.caller",
                            format!("{name:?} names no caller (or use \"each\" or \"none\")"),
                        )
                    })?,
                )),
            };
            let endpoint = endpoint(
                EndpointFile {
                    method: Some(method(request.method, "count.request.method", "GET")?),
                    path: request.path,
                    headers: request.headers,
                    ..EndpointFile::default()
                },
                "count.request",
            )?;
            Ok(Count::Request {
                request: endpoint,
                pointer,
                callers,
            })
        }
        (None, Some(sql), None) => {
            let query = required(sql.query, "count.sql.query")?;
            match (sql.sqlite, sql.postgres) {
                (Some(file), None) => Ok(Count::Sqlite {
                    file: in_folder(folder, &file),
                    query,
                }),
                (None, Some(url)) => Ok(Count::Postgres { url, query }),
                _ => Err(FieldError::new(
                    "count.sql",
                    "give exactly one of sqlite (a file) or postgres (a URL)",
                )),
            }
        }
        (None, None, Some(command)) => {
            argv(&command, "count.command")?;
            Ok(Count::Command(command))
        }
        _ => Err(FieldError::new(
            "[count]",
            "give exactly one of request, sql or command",
        )),
    }
}

fn provocation(file: ProvocationFile, field: &str, create: &Endpoint) -> Checked<Provocation> {
    let headers = headers(file.headers, &format!("{field}.headers"))?;
    for name in file.fields.keys() {
        if !create.fields.contains_key(name) {
            return Err(FieldError::new(
                format!("{field}.fields.{name}"),
                "names no entry of create.fields",
            ));
        }
    }
    if file.body_text.is_some() && !file.fields.is_empty() {
        return Err(FieldError::new(
            field.to_string(),
            "give fields or body_text, not both",
        ));
    }
    if headers.is_empty() && file.fields.is_empty() && file.body_text.is_none() {
        return Err(FieldError::new(
            field.to_string(),
            "say how to provoke it: headers, fields or body_text",
        ));
    }
    Ok(Provocation {
        headers,
        fields: file.fields,
        body_text: file.body_text,
    })
}

/// Every field a `[service]` target file may hold (`create.path`, `callers[].headers`), read from the parser's
/// own structs: the book's reference table is compared with this list.
pub fn accepted_fields() -> Vec<String> {
    crate::check::fields::accepted::<File>()
}

/// Whether `key` has a UUID's characters.
pub fn is_uuid(key: &str) -> bool {
    let groups: Vec<&str> = key.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The path the lab's API creates on.
pub const CREATE_PATH: &str = "/tickets";

/// `[upstream]`: the HTTP API a wrapper calls, which the lab serves on loopback (its own ticket
/// contract), records and faults. `{{upstream}}` in the `[mcp]` section (or in `service.command`
/// and `service.env` of an HTTP gateway's file) is its base URL.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// Callers' names and the bearer tokens the API accepts for them.
    pub tokens: Vec<(String, String)>,
    /// The request header the API reads its key from.
    pub key_header: String,
    /// Where in a create's JSON body the API reads its key instead (a JSON pointer, as Square's
    /// `idempotency_key` member), when it does.
    pub key_pointer: Option<String>,
    /// How the agent's key argument is written: as the header's value, an RFC 8941 string
    /// (`"<uuid>"`, quotes included) or a token.
    pub key_form: UpstreamKeyForm,
    /// Where the API's body is in the tool's arguments (a JSON pointer); empty: the arguments
    /// without the key argument.
    pub body_argument: String,
    /// The header the wrapper sends its caller's token in, bare; `None`: `Authorization: Bearer`.
    pub token_header: Option<String>,
    /// The create route of the API the wrapper was written for, when it is not the lab's own.
    pub create: Option<CreateRoute>,
    /// `[[upstream.routes]]`: the other requests of that API the wrapper makes (a token check at
    /// its start, a read after a create), each answered as the file says, never forwarded.
    pub routes: Vec<DeclaredRoute>,
    /// The loopback port the API is served on; `None` picks a free one. A wrapper the check does
    /// not start (over HTTP) must be pointed at a port known beforehand.
    pub port: Option<u16>,
    /// The wrapper's own timeout for one API request, when the file knows it: the lab then holds
    /// a create's reply past it once (`hop-upstream-retry`).
    pub wrapper_timeout: Option<Duration>,
}

impl Upstream {
    /// Where the API reads its key, for messages: `Idempotency-Key`, `the body's
    /// /idempotency_key`.
    pub fn key_place(&self) -> String {
        match &self.key_pointer {
            Some(pointer) => format!("the body's {pointer}"),
            None => self.key_header.clone(),
        }
    }

    /// The field of the file that says where the key is.
    pub fn key_field(&self) -> &'static str {
        if self.key_pointer.is_some() {
            "upstream.key_pointer"
        } else {
            "upstream.key_header"
        }
    }
}

/// `[upstream.create]`: another API's create route, which the lab plays on its own store. The
/// wrapper's request is forwarded as a create of the lab's (`POST /tickets`, its key moved to
/// `Idempotency-Key`), and a success is answered with the file's status and body.
#[derive(Clone, Debug)]
pub struct CreateRoute {
    /// The method (`POST` unless named).
    pub method: String,
    /// The path, `/v1/messages` (no query).
    pub path: String,
    /// The status of a create's answer (`201` unless named).
    pub status: u16,
    /// The body of a create's answer: JSON in which every string `{{id}}` is the new id (and
    /// `{{id}}` inside a longer string is replaced within it). `None`: the lab's own answer.
    pub answer: Option<Value>,
}

/// `[[upstream.routes]]`: one more route of the API the wrapper was written for, which the lab
/// answers itself, as the file says, without forwarding: the routes a wrapper calls besides the
/// create (`GET /v1/me` at its start, `GET /v1/messages/{id}` after a create) that the lab's own
/// API does not have.
#[derive(Clone, Debug)]
pub struct DeclaredRoute {
    /// The method.
    pub method: String,
    /// The path, whose `{name}` segments match any one segment.
    pub path: String,
    /// The status of its answer.
    pub status: u16,
    /// Its JSON body, in whose strings `{{name}}` is the segment `{name}` matched; `None`: an
    /// empty body.
    pub answer: Option<Value>,
}

/// The written form of the key the agent passes (and the API reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamKeyForm {
    /// `"<uuid>"`, quotes included.
    SfString,
    /// `k-<uuid>`.
    Token,
    /// `<uuid>`, bare, as most APIs take it; the lab quotes it when it plays its own API.
    Plain,
}

/// The placeholder of the upstream API's base URL.
pub const UPSTREAM_PLACEHOLDER: &str = "{{upstream}}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamFile {
    api: Option<String>,
    #[serde(default)]
    tokens: BTreeMap<String, String>,
    key_header: Option<String>,
    key_pointer: Option<String>,
    key_form: Option<String>,
    body_argument: Option<String>,
    token_header: Option<String>,
    create: Option<CreateRouteFile>,
    #[serde(default)]
    routes: Vec<DeclaredRouteFile>,
    port: Option<u16>,
    wrapper_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredRouteFile {
    method: Option<String>,
    path: Option<String>,
    status: Option<u16>,
    answer: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRouteFile {
    method: Option<String>,
    path: Option<String>,
    status: Option<u16>,
    answer: Option<Value>,
}

/// Validates an `[upstream]` section; every refusal names its field.
pub(crate) fn upstream(file: UpstreamFile) -> Checked<Upstream> {
    match file.api.as_deref() {
        None | Some("lab") => {}
        Some(other) => {
            return Err(FieldError::new(
                "upstream.api",
                format!(
                    "{other:?}: expected \"lab\" (the lab's ticket contract, the \
                     only API the lab serves so far)"
                ),
            ));
        }
    }
    if file.tokens.is_empty() {
        return Err(FieldError::new(
            "upstream.tokens",
            "name at least one caller and the bearer token the API accepts for it, e.g. \
             { alice = \"alice-token\" }",
        ));
    }
    let tokens = tokens(file.tokens)?;
    let key_pointer = key_pointer(file.key_pointer, file.key_header.is_some())?;
    let key_header = file
        .key_header
        .unwrap_or_else(|| "Idempotency-Key".to_owned());
    header_name(&key_header, "upstream.key_header")?;
    let token_header = file
        .token_header
        .map(|name| header_name(&name, "upstream.token_header"))
        .transpose()?;
    let key_form = upstream_key_form(file.key_form.as_deref())?;
    let body_argument = json_pointer(
        file.body_argument.unwrap_or_default(),
        "upstream.body_argument",
    )?;
    let create = file.create.map(create_route).transpose()?;
    body_key_of_another_api(key_pointer.as_ref(), create.as_ref(), &key_header)?;
    let routes = file
        .routes
        .into_iter()
        .enumerate()
        .map(|(i, route)| declared_route(route, i, create.as_ref()))
        .collect::<Checked<Vec<_>>>()?;
    if file.port == Some(0) {
        return Err(FieldError::new(
            "upstream.port",
            "0: a port from 1 to 65535 (or leave it out for a free one)",
        ));
    }
    let wrapper_timeout = file.wrapper_timeout_ms.map(wrapper_timeout).transpose()?;
    Ok(Upstream {
        tokens,
        key_header,
        key_pointer,
        key_form,
        body_argument,
        token_header,
        create,
        routes,
        port: file.port,
        wrapper_timeout,
    })
}

/// `upstream.key_form`: how the API reads its key header.
fn upstream_key_form(form: Option<&str>) -> Checked<UpstreamKeyForm> {
    match form {
        None | Some("sf-string") => Ok(UpstreamKeyForm::SfString),
        Some("token") => Ok(UpstreamKeyForm::Token),
        Some("plain") => Ok(UpstreamKeyForm::Plain),
        Some(other) => Err(FieldError::new(
            "upstream.key_form",
            format!("{other:?}: expected \"sf-string\", \"token\" or \"plain\""),
        )),
    }
}

/// `upstream.wrapper_timeout_ms`: how long the wrapper waits for the API, within bounds.
fn wrapper_timeout(ms: u64) -> Checked<Duration> {
    if (100..=60_000).contains(&ms) {
        return Ok(Duration::from_millis(ms));
    }
    Err(FieldError::new(
        "upstream.wrapper_timeout_ms",
        format!("{ms}: expected 100 to 60000 (the lab holds a reply that long and a little more)"),
    ))
}

/// `upstream.tokens`: each caller's name and a token of printable ASCII, no token twice.
fn tokens(file: BTreeMap<String, String>) -> Checked<Vec<(String, String)>> {
    let mut tokens = Vec::new();
    for (name, token) in file {
        if token.is_empty() || token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(FieldError::new(
                format!("upstream.tokens.{name}"),
                format!("{token:?}: a token of printable ASCII without spaces"),
            ));
        }
        if tokens.iter().any(|(_, t)| *t == token) {
            return Err(FieldError::new(
                format!("upstream.tokens.{name}"),
                format!("{token:?} is given twice"),
            ));
        }
        tokens.push((name, token));
    }
    Ok(tokens)
}

/// The lab's own API reads its key in a header, as its OpenAPI document declares: a body key
/// there would have the check grade an API that reads it from the body, and pass a wrapper whose
/// key never reaches the header. A body key is for another API (`[upstream.create]`).
fn body_key_of_another_api(
    key_pointer: Option<&String>,
    create: Option<&CreateRoute>,
    key_header: &str,
) -> Checked<()> {
    if key_pointer.is_some() && create.is_none() {
        return Err(FieldError::new(
            "upstream.key_pointer",
            format!(
                "the lab's own API (no [upstream.create]) reads its key in the \
                 header upstream.key_header ({key_header}), as its OpenAPI \
                 document declares"
            ),
        )
        .fix(
            "a body key is for another API, whose create route \
             [upstream.create] declares",
        ));
    }
    Ok(())
}

/// `upstream.key_pointer`: a pointer to a member of the body, and never beside a key header.
fn key_pointer(file: Option<String>, key_header: bool) -> Checked<Option<String>> {
    Ok(match file {
        Some(_) if key_header => {
            return Err(FieldError::new(
                "upstream.key_pointer",
                "the API reads its key from a header (upstream.key_header) or \
                 from the body (upstream.key_pointer): give one of them",
            ));
        }
        Some(pointer) if pointer.is_empty() => {
            return Err(FieldError::new(
                "upstream.key_pointer",
                "\"\": a pointer to a member of the body, such as \
                 /idempotency_key",
            ));
        }
        Some(pointer) => Some(json_pointer(pointer, "upstream.key_pointer")?),
        None => None,
    })
}

fn create_route(file: CreateRouteFile) -> Checked<CreateRoute> {
    let method = file.method.unwrap_or_else(|| "POST".to_owned());
    if !["POST", "PUT", "PATCH"].contains(&method.as_str()) {
        return Err(FieldError::new(
            "upstream.create.method",
            format!("{method:?}: expected \"POST\", \"PUT\" or \"PATCH\""),
        ));
    }
    let path = required(file.path, "upstream.create.path")?;
    if !path.starts_with('/') || path.contains(['?', '#', ' ']) {
        return Err(FieldError::new(
            "upstream.create.path",
            format!("{path:?}: a path such as /v1/messages (no query)"),
        ));
    }
    let status = file.status.unwrap_or(201);
    if !(200..=299).contains(&status) {
        return Err(FieldError::new(
            "upstream.create.status",
            format!("{status}: a success status (2xx)"),
        ));
    }
    if let Some(answer) = &file.answer
        && !answer.to_string().contains("{{id}}")
    {
        return Err(FieldError::new(
            "upstream.create.answer",
            "names no {{id}}, so the wrapper could not tell what was created",
        ));
    }
    Ok(CreateRoute {
        method,
        path,
        status,
        answer: file.answer,
    })
}

/// One `[[upstream.routes]]` entry, the `index`th (from 0), checked: a method, a path of
/// segments (`{name}` for any one), a status, and an answer; never the create route.
fn declared_route(
    file: DeclaredRouteFile,
    index: usize,
    create: Option<&CreateRoute>,
) -> Checked<DeclaredRoute> {
    let field = |name: &str| format!("upstream.routes[{index}].{name}");
    let method = required(file.method, &field("method"))?.to_ascii_uppercase();
    if !["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
        return Err(FieldError::new(
            field("method"),
            format!("{method:?}: expected GET, HEAD, POST, PUT, PATCH or DELETE"),
        ));
    }
    let path = required(file.path, &field("path"))?;
    let segments_ok = path.split('/').skip(1).all(|segment| {
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }
            None => !segment.contains(['{', '}']),
        }
    });
    if !path.starts_with('/') || path.contains(['?', '#', ' ']) || !segments_ok {
        return Err(FieldError::new(
            field("path"),
            format!(
                "{path:?}: a path such as /v1/messages/{{id}} (no query; a {{name}} segment \
                 matches any one segment)"
            ),
        ));
    }
    let (create_method, create_path) = create.map_or(("POST", CREATE_PATH), |c| {
        (c.method.as_str(), c.path.as_str())
    });
    if method == create_method && path == create_path {
        return Err(FieldError::new(
            field("path"),
            format!(
                "{method} {path} is the create route, which the lab plays on its store (see \
                 upstream.create)"
            ),
        ));
    }
    let status = file.status.unwrap_or(200);
    if !(200..=599).contains(&status) {
        return Err(FieldError::new(
            field("status"),
            format!("{status}: a status from 200 to 599"),
        ));
    }
    Ok(DeclaredRoute {
        method,
        path,
        status,
        answer: file.answer,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid target file, for the tests of the check's other files too.
    pub(crate) const GOOD: &str = r#"
[service]
base_url = "http://127.0.0.1:8000"
[create]
path = "/tickets"
body = { title = "{{title}}", n = "{{n}}" }
fields = { title = "Jammed", n = 3 }
vary = { title = "text" }
[key]
form = "sf-string"
[identity]
json_pointer = "/ticket_id"
[[callers]]
name = "alice"
headers = { Authorization = "Bearer a" }
[[callers]]
name = "bob"
headers = { Authorization = "Bearer b" }
[count]
request = { path = "/tickets", json_pointer = "/tickets" }
"#;

    #[test]
    fn every_base_url_of_a_target_file_is_read_by_the_same_rules() {
        // Before one reader: service.base_url took the port +80, and mcp.url and --init-mcp
        // took any port at all.
        for (url, problem) in [
            ("http://127.0.0.1:+80", "port \"+80\""),
            ("http://127.0.0.1:99999/mcp", "port \"99999\""),
            ("http://10.0.0.1:80", "is not a loopback address"),
        ] {
            for field in ["service.base_url", "mcp.url", "--init-mcp"] {
                let err = base_url_in(url, field, false).unwrap_err();
                assert!(
                    err.field == field && err.problem.contains(problem),
                    "{url}: {err}"
                );
            }
        }
        assert!(base_url_in("http://127.0.0.2:8000", "mcp.url", false).is_ok());
        assert!(base_url_in("http://10.0.0.1:80", "mcp.url", true).is_ok());
    }

    fn parse(text: &str) -> std::result::Result<Target, String> {
        Target::parse(text, Path::new("t.toml"), &Overrides::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_complete_file_is_read_with_its_defaults() {
        let target = parse(GOOD).unwrap();
        assert_eq!(target.create.method, "POST");
        assert_eq!(target.service.url.port(), 8000);
        assert_eq!(target.key.header, "Idempotency-Key");
        assert_eq!(target.replay, Replay::Inferred);
        assert_eq!(target.statuses.conflict, vec![422]);
        assert_eq!(target.callers[1].name, "bob");
        assert!(!target.errors.validation_given);
    }

    #[test]
    fn each_fault_in_a_file_is_named_by_its_field() {
        let edits = [
            ("127.0.0.1", "192.0.2.1", "service.base_url"),
            ("form = \"sf-string\"", "form = \"quoted\"", "key.form"),
            ("{{n}}", "{{m}}", "create.body"),
            ("Bearer b", "Bearer a", "callers[1].headers"),
            (
                "json_pointer = \"/tickets\"",
                "json_pointer = \"tickets\"",
                "count.request.json_pointer",
            ),
            (
                "[identity]\njson_pointer = \"/ticket_id\"",
                "[identity]",
                "[identity]",
            ),
            ("title = \"Jammed\", ", "title = 7, ", "create.vary.title"),
            (
                "vary = { title = \"text\" }",
                "vary = { n = [4, 5] }",
                "create.vary.n",
            ),
            (
                "vary = { title = \"text\" }",
                "vary = { m = \"text\" }",
                "create.vary.m",
            ),
            ("form = \"sf-string\"", "shape = \"ulid\"", "key.shape"),
            (
                "",
                "\n[statuses]\nmissing_key = []\n",
                "statuses.missing_key",
            ),
            ("", "\n[replay]\nstatus = 99\n", "replay.status"),
            (
                "",
                "\n[errors]\nserver = [{ headers = { X = \"1\" } }, { fields = { z = 1 } }]\n",
                "errors.server[1].fields.z",
            ),
            (
                "",
                "\n[read]\nrequest = { path = \"/tickets\" }\n",
                "read.request.path",
            ),
            ("", "\n[load]\ncallers = 1000\n", "load.callers"),
            ("", "\n[errors]\nserver = {}\n", "errors.server"),
        ];
        each_edit_names(GOOD, &edits, |text| field_error(text).field);
        // An unknown field is serde's to name, in the TOML error.
        let err = parse(&GOOD.replace("path = \"/tickets\"\nbody", "pth = \"/tickets\"\nbody"));
        assert!(err.unwrap_err().contains("unknown field `pth`"));
    }

    /// Each edit of `good` (`from` replaced by `to`, or `to` appended where `from` is empty) is
    /// refused naming its field, as `named` reads the refusal.
    pub(crate) fn each_edit_names(
        good: &str,
        edits: &[(&str, &str, &str)],
        named: impl Fn(&str) -> String,
    ) {
        for (from, to, field) in edits {
            let text = if from.is_empty() {
                format!("{good}{to}")
            } else {
                assert!(good.contains(from), "{from:?} is not in the good file");
                good.replace(from, to)
            };
            assert_eq!(named(&text), *field, "{text}");
        }
    }

    /// The field error a file's validation stops at; a file that parses, or TOML that does not,
    /// fails the test.
    pub(crate) fn field_error(text: &str) -> FieldError {
        match Target::parse(text, Path::new("t.toml"), &Overrides::default()) {
            Err(Error::TargetInvalid { error, .. }) => error,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn the_key_form_and_pattern_say_how_the_service_reads_keys() {
        let target = parse(&GOOD.replace("form = \"sf-string\"\n", "")).unwrap();
        assert_eq!(target.key.form, KeyForm::SfString);
        assert!(!target.key.form_declared && target.key.pattern.is_none());
        let target = parse(&GOOD.replace(
            "form = \"sf-string\"",
            "form = \"opaque\"\npattern = \"[0-9a-f-]{36}\"",
        ))
        .unwrap();
        assert_eq!(target.key.form, KeyForm::Opaque);
        assert!(target.key.form_declared);
        let pattern = target.key.pattern.unwrap();
        // Anchored: the whole key must match.
        assert!(pattern.matches("5f0c1a2b-3d4e-4f60-9a7b-8c9d0e1f2a3b"));
        assert!(!pattern.matches("5f0c1a2b-3d4e-4f60-9a7b-8c9d0e1f2a3b!"));
        let outside = pattern
            .outside("5f0c1a2b-3d4e-4f60-9a7b-8c9d0e1f2a3b")
            .unwrap();
        assert!(!pattern.matches(&outside), "{outside}");
        for (pattern, fix) in [
            ("[0-9a-f", "not a regular expression"),
            ("chk-.*", "set key.shape = \"text\""),
            ("[0-9]+", "UUIDs or as chk-RUN-N"),
            (".+", "leave it out"),
        ] {
            let text = GOOD.replace("form = \"sf-string\"", &format!("pattern = \"{pattern}\""));
            let err = parse(&text).unwrap_err();
            assert!(
                err.contains("key.pattern") && err.contains(fix),
                "{pattern}: {err}"
            );
        }
    }

    #[test]
    fn keys_are_uuids_required_unless_the_file_says_otherwise() {
        let target = parse(GOOD).unwrap();
        assert_eq!(target.key.shape, KeyShape::Uuid);
        assert!(target.key.required);
        let text = GOOD.replace(
            "form = \"sf-string\"",
            "form = \"sf-string\"\nshape = \"text\"\nrequired = false",
        );
        let target = parse(&format!("{text}\n[statuses]\nmissing_key = []\n")).unwrap();
        assert_eq!(target.key.shape, KeyShape::Text);
        assert!(!target.key.required);
        assert!(target.statuses.missing_key.is_empty());
    }

    #[test]
    fn an_empty_in_progress_list_says_the_service_never_sends_it_and_other_lists_may_not_be_empty()
    {
        let never = parse(&format!("{GOOD}\n[statuses]\nin_progress = []\n")).unwrap();
        assert!(never.statuses.in_progress.is_empty());
        assert_eq!(never.statuses.conflict, vec![422]);
        for field in ["conflict", "bad_key", "missing_key"] {
            let err = parse(&format!("{GOOD}\n[statuses]\n{field} = []\n")).unwrap_err();
            assert!(
                err.contains(&format!("statuses.{field}: an empty list")),
                "{err}"
            );
        }
    }

    #[test]
    fn only_the_fields_named_in_vary_are_varied_and_lists_keep_their_values() {
        let target = parse(GOOD).unwrap();
        assert_eq!(
            target.create.vary,
            BTreeMap::from([("title".to_owned(), Vary::Text)])
        );
        let listed = GOOD.replace(
            "vary = { title = \"text\" }",
            "vary = { n = [3, \"3\", 3.0] }",
        );
        let target = parse(&listed).unwrap();
        assert_eq!(
            target.create.vary["n"],
            Vary::OneOf(vec![Value::from(3), Value::from("3"), Value::from(3.0)])
        );
        let none = GOOD.replace("vary = { title = \"text\" }\n", "");
        assert!(parse(&none).unwrap().create.vary.is_empty());
    }

    #[test]
    fn a_replay_status_may_be_any_status_and_server_errors_a_list() {
        let text = format!(
            "{GOOD}\n[replay]\nstatus = 409\n[errors]\nserver = [{{ headers = {{ X = \"a\" }} }}, \
             {{ fields = {{ n = 500 }} }}]\n"
        );
        let target = parse(&text).unwrap();
        assert_eq!(target.replay, Replay::Status(409));
        assert_eq!(target.errors.server.len(), 2);
        let one = format!("{GOOD}\n[errors]\nserver = {{ headers = {{ X = \"a\" }} }}\n");
        assert_eq!(parse(&one).unwrap().errors.server.len(), 1);
    }

    #[test]
    fn relative_paths_are_read_from_the_target_files_folder() {
        let text = GOOD.replace(
            "request = { path = \"/tickets\", json_pointer = \"/tickets\" }",
            "sql = { sqlite = \"db/t.sqlite\", query = \"SELECT COUNT(*) FROM t\" }",
        );
        let text = format!(
            "{text}\n[read]\nsql = {{ sqlite = \"/abs/t.sqlite\", query = \"SELECT 1 WHERE ?1\" }}\n"
        );
        let target =
            Target::parse(&text, Path::new("some/where/t.toml"), &Overrides::default()).unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!(target.folder, here.join("some/where"));
        match &target.count {
            Count::Sqlite { file, .. } => assert_eq!(file, &here.join("some/where/db/t.sqlite")),
            other => panic!("{other:?}"),
        }
        assert_eq!(program_in(&target.folder, "sh"), Path::new("sh"));
        assert_eq!(
            program_in(&target.folder, "./c.sh"),
            here.join("some/where/./c.sh")
        );
        let read = target.read.and_then(|r| r.sql).unwrap();
        assert_eq!(read.file, Path::new("/abs/t.sqlite"));
        let plain = Target::parse(GOOD, Path::new("t.toml"), &Overrides::default()).unwrap();
        assert_eq!(plain.folder, here.join("."));
    }

    #[test]
    fn a_remote_host_needs_the_explicit_option() {
        let text = GOOD.replace("127.0.0.1", "192.0.2.1");
        let overrides = Overrides {
            allow_remote: true,
            ..Overrides::default()
        };
        let target = Target::parse(&text, Path::new("t.toml"), &overrides).unwrap();
        assert!(!target.service.url.is_loopback());
    }
}
