//! The MCP wire format both sides share (the module is `wire`; `contract` is the retry contract):
//! tool names, argument names, the codes a failed call carries in its `structuredContent`, the
//! descriptions written for a model, the schemas and the annotations.

use serde_json::{Map, Value, json};

/// The tool that creates a ticket under an operation key.
pub const CREATE_TICKET: &str = "create_ticket";
/// The tool that reads one of the caller's tickets.
pub const GET_TICKET: &str = "get_ticket";
/// The tool that lists the caller's own tickets.
pub const LIST_TICKETS: &str = "list_tickets";

/// Test-only, listed under `--faults`: the naive create without a key, the baseline whose
/// retry makes a duplicate (`POST /unkeyed-tickets` over HTTP).
pub const UNKEYED_CREATE_TICKET: &str = "lab_create_ticket_without_key";
/// Test-only: the identifiers of every ticket, across callers (`GET /admin/tickets` over HTTP).
pub const ADMIN_TICKET_IDS: &str = "lab_admin_ticket_ids";
/// Test-only: how many operation records exist, across callers.
pub const ADMIN_COUNT_RECORDS: &str = "lab_admin_count_records";
/// Test-only: forgets the record of one key of the session's caller, as expiry would.
pub const ADMIN_FORGET_RECORD: &str = "lab_admin_forget_record";
/// Test-only: deletes every ticket and record, so the next ticket is number 1 again.
pub const ADMIN_RESET: &str = "lab_admin_reset";
/// Test-only: one retention pass with a window of zero (`lab/src/service/retention.rs`): every
/// replay record is pruned and leaves a tombstone, so a retry of any key gets `expired`.
pub const ADMIN_EXPIRE_RECORDS: &str = "lab_admin_expire_records";
/// The admin tools, listed only when the server was started with an admin token.
pub const ADMIN_TOOLS: [&str; 5] = [
    ADMIN_TICKET_IDS,
    ADMIN_COUNT_RECORDS,
    ADMIN_FORGET_RECORD,
    ADMIN_RESET,
    ADMIN_EXPIRE_RECORDS,
];

/// What an `expired` failure tells the model, after naming the key.
pub const EXPIRED_ADVICE: &str = "the server no longer keeps this key's record, so it cannot \
tell whether the ticket was created. Do not retry with a new key: call list_tickets to look for \
the ticket, and ask a person before creating it again.";

/// The argument that carries the operation key.
pub const OPERATION_KEY: &str = "operation_key";
/// The test-only argument that asks for a fault (`lose-reply`, `before-commit`, `fail-at=STEP`),
/// honoured only under `--faults` and never part of the payload. An argument rather than `_meta`
/// so that any client, a model's included, can send it, and the schema can say it exists only on
/// a test server.
pub const FAULT: &str = "lab_fault";
/// The argument of the admin tools that carries the admin token.
pub const ADMIN_TOKEN: &str = "admin_token";

/// The machine-readable codes of a failed tool call (`isError: true`), in
/// `structuredContent.code`. A client matches on these, never on the text.
pub mod code {
    /// The key was first used with a different payload; nothing was written.
    pub const CONFLICT: &str = "conflict";
    /// Another call with this key is still being processed; retry the same call shortly.
    pub const IN_PROGRESS: &str = "in_progress";
    /// The record of this key is no longer kept; the outcome must be checked by a person.
    pub const EXPIRED: &str = "expired";
    /// The key breaks the key rule (printable ASCII, no leading or trailing space, at most 255
    /// bytes); nothing was written.
    pub const INVALID_KEY: &str = "invalid_key";
    /// No ticket of this caller has that identifier.
    pub const NOT_FOUND: &str = "not_found";
    /// A fault injected on purpose (test only); the transaction was rolled back.
    pub const INJECTED_FAILURE: &str = "injected_failure";
    /// The admin token is missing or wrong.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// The store failed; nothing is known about the outcome beyond what a retry with the same key
    /// will tell.
    pub const INTERNAL: &str = "internal";
}

// ANCHOR: mcp_description
/// The description of `create_ticket`, written for the model that calls it. `lab mcp` follows
/// [`KeySource::Host`]: the key is made outside the model, once per approved intention.
pub const CREATE_TICKET_DESCRIPTION: &str = "\
Create a support ticket. Every call needs an operation_key that names ONE intention (one ticket \
you were asked to create). Do not make the key up: your host (the application or runner that \
runs you) makes it once, when the ticket is approved, saves it, and gives it to you with the \
task or fills it in for you. Copy it exactly. Keep it even when you reword the ticket or start \
the task over. If the task came without a key, ask for one instead of inventing it.

Retries: if a call times out, fails on the way, or you are not sure it ran, call create_ticket \
AGAIN WITH THE SAME operation_key AND THE SAME arguments. The server then returns the ticket the \
first call created (replayed: true, the same ticket_id) instead of creating a second one. Never \
invent a new key for a call whose outcome you do not know: that is how duplicates are made.

Errors (isError: true, structuredContent.code):
- conflict: this key was already used with different arguments. Nothing was written. Resend the \
arguments the key was first sent with, or ask your host; do not pick another key yourself.
- in_progress: another call with this key is still running. Wait a second and retry the same call.
- expired: the server no longer remembers this key, so it cannot tell whether the ticket was \
created. Do not retry with a new key; list_tickets and ask a person.
- invalid_key: the key is not printable ASCII, has a leading or trailing space, or is longer than \
255 bytes. Nothing was written; ask your host for the key again.

Annotations: idempotentHint is true because calling again with the same arguments (the key \
included) has no further effect. That is a hint for you, not a guarantee the server enforces for \
other arguments.";
// ANCHOR_END: mcp_description

/// The tool a server of the [`KeySource::Prepare`] design adds: it issues a key.
pub const PREPARE_TICKET: &str = "prepare_ticket";

/// Where `create_ticket`'s key comes from: the three designs a server author has, each with the
/// description the model reads and what it guarantees when the model re-plans. `lab mcp` serves
/// [`KeySource::Host`]; `lab mcp --grade-client --key-source` serves any of them, so a client
/// can be graded under each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The host or runner makes the key once per approved intention, saves it, and passes it in.
    Host,
    /// The model derives the key from a stable task id the host gives it.
    TaskId,
    /// The server issues the key in a first `prepare_ticket` call.
    Prepare,
}

// ANCHOR: key_sources
impl KeySource {
    /// Every design, the recommended one first.
    pub const ALL: [KeySource; 3] = [KeySource::Host, KeySource::TaskId, KeySource::Prepare];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeySource::Host => "host",
            KeySource::TaskId => "task-id",
            KeySource::Prepare => "prepare",
        }
    }

    /// What the design guarantees when the model re-plans (rewords the call, or starts over
    /// after a reconnect).
    pub fn guarantee(self) -> &'static str {
        match self {
            KeySource::Host => {
                "the key is made outside the model and saved before the first send, so a \
                 re-plan keeps it: the same arguments replay, other arguments get conflict and \
                 write nothing. One ticket per approved intention, across reconnects and, if the \
                 host saved the key durably, its restarts."
            }
            KeySource::TaskId => {
                "the key is as stable as the text the model derives it from: a re-plan that \
                 builds the same string replays, one that picks another suffix, or a host that \
                 gives each attempt a new task id, makes a second ticket."
            }
            KeySource::Prepare => {
                "the key lives only in the model's context: a retry that keeps it replays, but a \
                 re-plan or a reconnect that calls prepare_ticket again gets a new key, and the \
                 server cannot tell a second prepare for the same ticket from one for a new ticket."
            }
        }
    }

    /// The description of `create_ticket` under this design.
    pub fn create_description(self) -> &'static str {
        match self {
            KeySource::Host => CREATE_TICKET_DESCRIPTION,
            KeySource::TaskId => {
                "Create a support ticket. operation_key: build it from the task id your host \
                 gave you, as ticket-<task id>, the same way on every call; add -2, -3 only for \
                 a second or third ticket of one task. Retries: if a call times out or you are \
                 not sure it ran, call again with the same operation_key and the same arguments; \
                 the server then returns the first ticket (replayed: true). Errors are \
                 isError: true with structuredContent.code: conflict, in_progress, expired, \
                 invalid_key."
            }
            KeySource::Prepare => {
                "Create a support ticket. operation_key: first call prepare_ticket, which returns \
                 a key the server made, and pass that key here. Retries: if a call times out or \
                 you are not sure it ran, call again with the same operation_key and the same \
                 arguments (do not prepare again); the server then returns the first ticket \
                 (replayed: true). Errors are isError: true with structuredContent.code: \
                 conflict, in_progress, expired, invalid_key."
            }
        }
    }

    /// The schema's description of the `operation_key` argument under this design.
    pub fn key_description(self) -> &'static str {
        match self {
            KeySource::Host => {
                "The key your host made for this intention and gave you. Copy it; never make one \
                 up. Reuse it for every retry."
            }
            KeySource::TaskId => {
                "ticket-<task id>, built the same way on every call of this intention."
            }
            KeySource::Prepare => "The key prepare_ticket returned for this intention.",
        }
    }
}
// ANCHOR_END: key_sources

impl std::str::FromStr for KeySource {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<KeySource, String> {
        KeySource::ALL
            .into_iter()
            .find(|source| source.name() == text)
            .ok_or_else(|| format!("{text:?}: expected host, task-id or prepare"))
    }
}

/// The description of `prepare_ticket`.
pub const PREPARE_TICKET_DESCRIPTION: &str = "Returns a new operation_key for one ticket you \
are about to create. Call it once per ticket, before create_ticket, and keep the key for every \
retry of that create.";

/// The description of `get_ticket`.
pub const GET_TICKET_DESCRIPTION: &str = "Read one of your own tickets by its ticket_id. Tickets of \
other callers are not found. Use it to check what a create_ticket call made.";

/// The description of `list_tickets`.
pub const LIST_TICKETS_DESCRIPTION: &str = "List your own tickets (never other callers'), in \
ascending ticket_id order. Use it before asking a person about an expired key.";

/// The input schema of `create_ticket`: the key, the ticket's fields, and (on a test server with
/// `faults`) the fault argument. Other fields are allowed and become part of the payload.
pub fn create_ticket_input(faults: bool) -> Map<String, Value> {
    let mut properties = json!({
        OPERATION_KEY: {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": KeySource::Host.key_description()
        },
        "title": {"type": "string", "description": "The ticket's title."},
        "priority": {"type": ["string", "null"], "description": "For example low, normal, urgent."},
        "body": {"type": ["string", "null"], "description": "The ticket's text."}
    });
    if faults {
        properties[FAULT] = json!({
            "type": "string",
            "description": "Test only: lose-reply, before-commit or fail-at=STEP. Not part of the ticket."
        });
    }
    object(json!({
        "type": "object",
        "properties": properties,
        "required": [OPERATION_KEY, "title"],
        "additionalProperties": true
    }))
}

/// The input schema of the test-only create without a key: the ticket's fields and the fault.
pub fn unkeyed_create_ticket_input() -> Map<String, Value> {
    let mut schema = create_ticket_input(true);
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.remove(OPERATION_KEY);
    }
    schema.insert("required".to_owned(), json!(["title"]));
    schema
}

/// The output schema of `create_ticket`.
pub fn create_ticket_output() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "ticket_id": {"type": ["integer", "string"]},
            "replayed": {"type": "boolean", "description": "True when an earlier call with this key created the ticket and this call wrote nothing."}
        },
        "required": ["ticket_id", "replayed"]
    }))
}

/// The input schema of `get_ticket`.
pub fn get_ticket_input() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {"ticket_id": {"type": ["integer", "string"]}},
        "required": ["ticket_id"]
    }))
}

/// The output schema of one ticket, as `get_ticket` returns it.
pub fn ticket_output() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "ticket_id": {"type": ["integer", "string"]},
            "payload": {"type": "object"}
        },
        "required": ["ticket_id", "payload"]
    }))
}

/// The input schema of `list_tickets`: no arguments.
pub fn list_tickets_input() -> Map<String, Value> {
    object(json!({"type": "object", "properties": {}}))
}

/// The output schema of `list_tickets`.
pub fn list_tickets_output() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {"tickets": {"type": "array", "items": ticket_output()}},
        "required": ["tickets"]
    }))
}

/// The input schema of an admin tool: the admin token, and for forgetting a record, its key.
pub fn admin_input(with_key: bool) -> Map<String, Value> {
    let mut schema = json!({
        "type": "object",
        "properties": {ADMIN_TOKEN: {"type": "string"}},
        "required": [ADMIN_TOKEN]
    });
    if with_key {
        schema["properties"][OPERATION_KEY] = json!({"type": "string"});
        schema["required"] = json!([ADMIN_TOKEN, OPERATION_KEY]);
    }
    object(schema)
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        // Every caller passes a `json!({...})` literal.
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_every_code_a_create_can_fail_with_and_says_to_reuse_the_key() {
        for failure in [
            code::CONFLICT,
            code::IN_PROGRESS,
            code::EXPIRED,
            code::INVALID_KEY,
        ] {
            assert!(
                CREATE_TICKET_DESCRIPTION.contains(&format!("- {failure}:")),
                "{failure} is not explained"
            );
        }
        assert!(CREATE_TICKET_DESCRIPTION.contains("AGAIN WITH THE SAME operation_key"));
        assert!(CREATE_TICKET_DESCRIPTION.contains("Never invent a new key"));
    }

    #[test]
    fn the_lab_server_tells_the_model_the_key_comes_from_its_host_not_from_itself() {
        // The contradiction of issue 25: the book says the key is the runner's, so the text
        // the model reads must not ask it to build one.
        assert!(CREATE_TICKET_DESCRIPTION.contains("Do not make the key up"));
        assert!(!CREATE_TICKET_DESCRIPTION.contains("<task id>"));
        assert_eq!(
            create_ticket_input(false)["properties"][OPERATION_KEY]["description"],
            json!(KeySource::Host.key_description())
        );
        for source in KeySource::ALL {
            assert_eq!(source.name().parse::<KeySource>(), Ok(source));
            assert!(
                source
                    .create_description()
                    .to_lowercase()
                    .contains("same operation_key")
            );
        }
        assert!(
            "model"
                .parse::<KeySource>()
                .unwrap_err()
                .contains("\"model\"")
        );
    }

    #[test]
    fn the_fault_argument_is_in_the_schema_only_on_a_test_server() {
        let listed = |faults: bool| {
            create_ticket_input(faults)["properties"]
                .get(FAULT)
                .is_some()
        };
        assert!(listed(true));
        assert!(!listed(false));
        assert_eq!(
            create_ticket_input(false)["required"],
            json!([OPERATION_KEY, "title"])
        );
    }
}
