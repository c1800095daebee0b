//! The ticket tools: each call's arguments become the ticket service's terms, or a JSON-RPC
//! error before any work; the service's answer becomes a tool result with the contract's code.
//! Nothing here decides an outcome: that is the service's (`crate::service`), as for the HTTP
//! routes.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::Shared;
use crate::error::Result;
use crate::http::wire::parse_fault_header;
use crate::key::{OperationKey, Scope};
use crate::mcp::wire::{self, code};
use crate::payload::Payload;
use crate::service::retention::Retention;
use crate::service::{Created, LostReply, Refusal, ServiceStore, TicketService};
use crate::tool::{Fault, TicketId};

/// The most a tool call's arguments may take as JSON text: the body limit of `lab serve`. More is
/// refused with a JSON-RPC error (invalid params) before any work, over either transport.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// The caller a request acts for, put into the request by the token layer.
#[derive(Clone, Debug)]
pub(super) struct Caller(pub(super) Scope);

/// The MCP server handler: the three ticket tools, and the admin tools when enabled.
#[derive(Clone)]
pub(crate) struct TicketTools {
    shared: Arc<Shared>,
}

/// A tool's answer, before it becomes a `CallToolResult`.
type Answer = std::result::Result<CallToolResult, ErrorData>;

/// A create's arguments in the service's terms.
struct CreateCall {
    scope: Scope,
    key: Option<OperationKey>,
    payload: Payload,
    fault: Fault,
}

/// A contract failure: a tool result with `isError: true` and a code a client matches on.
fn failure(code: &str, message: &str) -> CallToolResult {
    CallToolResult::structured_error(json!({"code": code, "message": message}))
}

fn bad_arguments(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

/// The tools this server lists.
fn tools(faults: bool, admin: bool) -> Vec<Tool> {
    // ANCHOR: mcp_annotations
    let create = ToolAnnotations::with_title("Create a ticket (idempotent per operation_key)")
        .read_only(false)
        .destructive(false)
        // Repeating a call with the same arguments, key included, has no further effect.
        .idempotent(true)
        .open_world(false);
    let read = |title: &str| {
        ToolAnnotations::with_title(title)
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false)
    };
    // ANCHOR_END: mcp_annotations
    let mut tools = vec![
        tool(
            wire::CREATE_TICKET,
            wire::CREATE_TICKET_DESCRIPTION,
            wire::create_ticket_input(faults),
            Some(wire::create_ticket_output()),
            create,
        ),
        tool(
            wire::GET_TICKET,
            wire::GET_TICKET_DESCRIPTION,
            wire::get_ticket_input(),
            Some(wire::ticket_output()),
            read("Read one of your tickets"),
        ),
        tool(
            wire::LIST_TICKETS,
            wire::LIST_TICKETS_DESCRIPTION,
            wire::list_tickets_input(),
            Some(wire::list_tickets_output()),
            read("List your tickets"),
        ),
    ];
    tools.extend(test_only_tools(faults, admin));
    tools
}

/// The test-only tools: the naive create with `--faults`, the admin tools with a token.
fn test_only_tools(faults: bool, admin: bool) -> Vec<Tool> {
    let mut tools = Vec::new();
    if faults {
        let annotations = ToolAnnotations::with_title("Test only: create without a key")
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false);
        tools.push(tool(
            wire::UNKEYED_CREATE_TICKET,
            "Test only: the naive create. Every call makes a new ticket, retries included.",
            wire::unkeyed_create_ticket_input(),
            Some(wire::create_ticket_output()),
            annotations,
        ));
    }
    if admin {
        for name in wire::ADMIN_TOOLS {
            let annotations = ToolAnnotations::with_title("Test only")
                .read_only(false)
                .destructive(true)
                .open_world(false);
            tools.push(tool(
                name,
                "Test only: the lab's inspection hooks, with the admin token.",
                wire::admin_input(name == wire::ADMIN_FORGET_RECORD),
                None,
                annotations,
            ));
        }
    }
    tools
}

fn tool(
    name: &'static str,
    description: &'static str,
    input: JsonObject,
    output: Option<JsonObject>,
    annotations: ToolAnnotations,
) -> Tool {
    let mut tool = Tool::new(name, description, input);
    tool.output_schema = output.map(Arc::new);
    tool.annotations = Some(annotations);
    tool
}

fn string_argument<'a>(
    arguments: &'a JsonObject,
    name: &str,
    required: bool,
) -> std::result::Result<Option<&'a str>, ErrorData> {
    match arguments.get(name) {
        None if required => Err(bad_arguments(format!("missing required argument {name:?}"))),
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(bad_arguments(format!(
            "argument {name:?} must be a string, found {}",
            crate::payload::json_type(other)
        ))),
    }
}

impl TicketTools {
    pub(super) fn new(shared: Arc<Shared>) -> TicketTools {
        TicketTools { shared }
    }

    fn service(&self) -> Arc<TicketService> {
        Arc::clone(&self.shared.service)
    }

    /// The caller this request acts for: the process's over stdio, the token's over HTTP.
    fn caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> std::result::Result<Scope, ErrorData> {
        if let Some(caller) = &self.shared.stdio_caller {
            return Ok(caller.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .map(|caller| caller.0.clone())
            // The token layer refuses a request without a caller before rmcp sees it.
            .ok_or_else(|| ErrorData::invalid_request("no authenticated caller", None))
    }

    /// Runs store work on the service's store threads; a failure is logged behind an id.
    async fn on_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn ServiceStore) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, CallToolResult> {
        match self.shared.stores.run(work).await {
            Some(Ok(value)) => Ok(value),
            Some(Err(err)) => Err(refused(Refusal::internal(err))),
            None => Err(refused(Refusal::internal("the store threads have stopped"))),
        }
    }

    /// The arguments of a create, checked; `Ok(Err(result))` is a contract failure to answer.
    fn create_call(
        &self,
        mut arguments: JsonObject,
        keyed: bool,
        context: &RequestContext<RoleServer>,
    ) -> std::result::Result<std::result::Result<CreateCall, CallToolResult>, ErrorData> {
        let scope = self.caller(context)?;
        let key_text = if keyed {
            string_argument(&arguments, wire::OPERATION_KEY, true)?.map(str::to_owned)
        } else {
            None
        };
        string_argument(&arguments, "title", true)?;
        // null is a value of its own here: a payload with `"priority": null` is another payload.
        for optional in ["priority", "body"] {
            if arguments.get(optional) != Some(&Value::Null) {
                string_argument(&arguments, optional, false)?;
            }
        }
        let fault = self.fault(&arguments)?;
        let key = match key_text.map(OperationKey::try_from).transpose() {
            Ok(key) => key,
            Err(err) => return Ok(Err(failure(code::INVALID_KEY, &err.to_string()))),
        };
        arguments.remove(wire::OPERATION_KEY);
        arguments.remove(wire::FAULT);
        let payload =
            Payload::new(Value::Object(arguments)).map_err(|err| bad_arguments(err.to_string()))?;
        Ok(Ok(CreateCall {
            scope,
            key,
            payload,
            fault,
        }))
    }

    /// The test-only fault a create asks for.
    fn fault(&self, arguments: &JsonObject) -> std::result::Result<Fault, ErrorData> {
        match string_argument(arguments, wire::FAULT, false)? {
            None => Ok(Fault::None),
            Some(_) if !self.shared.service.faults() => Err(bad_arguments(format!(
                "{} is test-only: start the server with --faults",
                wire::FAULT
            ))),
            Some(value) => parse_fault_header(value)
                .ok_or_else(|| bad_arguments(format!("unknown {} {value:?}", wire::FAULT))),
        }
    }

    async fn create_ticket(
        &self,
        arguments: JsonObject,
        keyed: bool,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let call = match self.create_call(arguments, keyed, &context)? {
            Ok(call) => call,
            Err(failure) => return Ok(failure),
        };
        let service = self.service();
        let created = self
            .shared
            .stores
            .run(move |store| {
                let key = call.key.as_ref();
                service.create(store, &call.scope, key, &call.payload, call.fault)
            })
            .await
            .unwrap_or_else(|| Err(Refusal::internal("the store threads have stopped")));
        match created {
            Ok(Created::New { id, .. }) => Ok(created_result(&id, false)),
            Ok(Created::Replayed { id, .. }) => Ok(created_result(&id, true)),
            Ok(Created::LostReply) => self.lose(&context).await,
            Err(refusal) => Ok(refused(refusal)),
        }
    }

    /// Loses a reply after its commit. Over HTTP the connection's switch makes it close instead
    /// of answering; over stdio the answer is never written: the call waits until the client
    /// cancels it or goes away.
    async fn lose(&self, context: &RequestContext<RoleServer>) -> Answer {
        let switch = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<LostReply>());
        if let Some(switch) = switch {
            switch.lose();
            // Never written: the connection closes before a byte of it.
            return Ok(CallToolResult::structured(json!({})));
        }
        context.ct.cancelled().await;
        Err(ErrorData::internal_error(
            "the reply was lost on purpose",
            None,
        ))
    }

    async fn get_ticket(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let scope = self.caller(&context)?;
        let id = match arguments.get("ticket_id") {
            Some(Value::Number(n)) => n
                .as_i64()
                .map(TicketId::from)
                .ok_or_else(|| bad_arguments("ticket_id must be an integer".to_owned()))?,
            Some(Value::String(text)) => text.parse().unwrap_or_else(|never| match never {}),
            _ => {
                return Err(bad_arguments(
                    "ticket_id must be an integer or a string".to_owned(),
                ));
            }
        };
        let lookup = id.clone();
        let found = self
            .on_store(move |store| store.ticket_of(scope.caller(), &lookup))
            .await;
        Ok(match found {
            Ok(Some(ticket)) => {
                CallToolResult::structured(ticket_json(&ticket.id, &ticket.payload))
            }
            Ok(None) => failure(code::NOT_FOUND, &format!("you have no ticket {id}")),
            Err(failure) => failure,
        })
    }

    async fn list_tickets(&self, context: RequestContext<RoleServer>) -> Answer {
        let scope = self.caller(&context)?;
        let found = self
            .on_store(move |store| store.tickets_of(scope.caller()))
            .await;
        Ok(match found {
            Ok(tickets) => {
                let tickets: Vec<Value> = tickets
                    .iter()
                    .map(|ticket| ticket_json(&ticket.id, &ticket.payload))
                    .collect();
                CallToolResult::structured(json!({"tickets": tickets}))
            }
            Err(failure) => failure,
        })
    }

    async fn admin(
        &self,
        name: &str,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let presented = string_argument(&arguments, wire::ADMIN_TOKEN, true)?.unwrap_or_default();
        if !self.shared.service.is_admin(presented.as_bytes()) {
            return Ok(failure(code::UNAUTHORIZED, "the admin token is wrong"));
        }
        let service = self.service();
        let done = match name {
            wire::ADMIN_TICKET_IDS => self
                .on_store(|store| store.ticket_ids())
                .await
                .map(|ids| json!({"ticket_ids": ids})),
            wire::ADMIN_COUNT_RECORDS => self
                .on_store(|store| store.count_records())
                .await
                .map(|records| json!({"records": records})),
            wire::ADMIN_FORGET_RECORD => {
                let scope = self.caller(&context)?;
                let key_text = string_argument(&arguments, wire::OPERATION_KEY, true)?
                    .unwrap_or_default()
                    .to_owned();
                let key = match OperationKey::try_from(key_text) {
                    Ok(key) => key,
                    Err(err) => return Ok(failure(code::INVALID_KEY, &err.to_string())),
                };
                self.on_store(move |store| store.forget_record(&scope, &key))
                    .await
                    .map(|forgotten| json!({"forgotten": forgotten}))
            }
            wire::ADMIN_EXPIRE_RECORDS => {
                let window = Retention {
                    records: std::time::Duration::ZERO,
                    tombstones: std::time::Duration::from_secs(24 * 60 * 60),
                };
                self.on_store(move |_| service.prune_with(window))
                    .await
                    .map(|pruned| json!({"expired": pruned.records}))
            }
            _ => self
                .on_store(move |store| service.reset(store))
                .await
                .map(|()| json!({"reset": true})),
        };
        Ok(done.map_or_else(|failure| failure, CallToolResult::structured))
    }
}

/// The result of a create that went through.
fn created_result(id: &TicketId, replayed: bool) -> CallToolResult {
    CallToolResult::structured(json!({"ticket_id": id, "replayed": replayed}))
}

/// The tool result for a create whose key another call is still processing: the contract's
/// `in_progress` code and what to do.
pub(crate) fn in_progress_result(key: &str) -> CallToolResult {
    failure(
        code::IN_PROGRESS,
        &format!(
            "another call with operation_key {key:?} is still being processed; retry the same \
             call shortly"
        ),
    )
}

/// The tool result for a refused create: the contract's code and what to do.
fn refused(refusal: Refusal) -> CallToolResult {
    match refusal {
        Refusal::InProgress { key } => in_progress_result(key.as_str()),
        Refusal::Expired { key } => failure(
            code::EXPIRED,
            &format!("operation_key {:?}: {}", key.as_str(), wire::EXPIRED_ADVICE),
        ),
        Refusal::Conflict(message) => failure(code::CONFLICT, &message),
        Refusal::InjectedFailure(message) => failure(code::INJECTED_FAILURE, &message),
        Refusal::Internal { error_id } => {
            failure(code::INTERNAL, &Refusal::internal_detail(&error_id))
        }
    }
}

fn ticket_json(id: &TicketId, payload: &str) -> Value {
    let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    json!({"ticket_id": id, "payload": payload})
}

impl ServerHandler for TicketTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("lab", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Support tickets. create_ticket takes an operation_key: reuse it for every \
                 retry of one intention, and never replace it with a new key when an outcome \
                 is unknown.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(
            self.shared.service.faults(),
            self.shared.service.has_admin(),
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools(
            self.shared.service.faults(),
            self.shared.service.has_admin(),
        )
        .into_iter()
        .find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let size = serde_json::to_vec(&arguments).map_or(usize::MAX, |text| text.len());
        if size > MAX_ARGUMENT_BYTES {
            return Err(bad_arguments(format!(
                "the arguments are {size} bytes of JSON; at most {MAX_ARGUMENT_BYTES} are read"
            )));
        }
        let admin_enabled = self.shared.service.has_admin();
        let answer = match request.name.as_ref() {
            wire::CREATE_TICKET => self.create_ticket(arguments, true, context).await,
            wire::UNKEYED_CREATE_TICKET if self.shared.service.faults() => {
                self.create_ticket(arguments, false, context).await
            }
            wire::GET_TICKET => self.get_ticket(arguments, context).await,
            wire::LIST_TICKETS => self.list_tickets(context).await,
            name if admin_enabled && wire::ADMIN_TOOLS.contains(&name) => {
                self.admin(name, arguments, context).await
            }
            name => Err(ErrorData::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            )),
        };
        answer.map(CallToolResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(result: &CallToolResult) -> &Value {
        result
            .structured_content
            .as_ref()
            .expect("structured content")
    }

    #[test]
    fn an_internal_failure_reaches_the_client_as_an_id_without_its_cause() {
        let result = refused(Refusal::internal(
            "disk I/O error in /var/secret/tickets.db",
        ));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(content(&result)["code"], code::INTERNAL);
        let message = content(&result)["message"].as_str().unwrap();
        assert!(message.contains("error id"), "{message}");
        assert!(
            !message.contains("secret") && !message.contains("I/O"),
            "{message}"
        );
    }

    #[test]
    fn each_refusal_has_the_contracts_code() {
        let key = OperationKey::try_from("k-1").unwrap();
        for (refusal, expected) in [
            (Refusal::InProgress { key: key.clone() }, code::IN_PROGRESS),
            (Refusal::Expired { key }, code::EXPIRED),
            (Refusal::Conflict("c".into()), code::CONFLICT),
            (Refusal::InjectedFailure("f".into()), code::INJECTED_FAILURE),
        ] {
            assert_eq!(content(&refused(refusal))["code"], expected);
        }
    }

    #[test]
    fn the_test_only_tools_are_listed_only_when_asked_for() {
        let names = |faults, admin| -> Vec<String> {
            tools(faults, admin)
                .into_iter()
                .map(|tool| tool.name.to_string())
                .collect()
        };
        assert_eq!(names(false, false).len(), 3);
        assert!(names(true, false).contains(&wire::UNKEYED_CREATE_TICKET.to_owned()));
        assert_eq!(
            names(false, true).len(),
            3 + wire::ADMIN_TOOLS.len(),
            "{:?}",
            names(false, true)
        );
    }
}
