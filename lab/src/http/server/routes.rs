//! The router: the contract's endpoints, the extractors that turn a request into the contract's
//! terms (or refuse it with a problem before a handler runs), and the limits as layers around it.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use serde_json::json;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use super::Limits;
use crate::error::Result;
use crate::http::problem::{self as problem_response, Problem};
use crate::http::sf;
use crate::http::wire::{self, problem};
use crate::key::{OperationKey, Scope};
use crate::payload::Payload;
use crate::service::{
    Created, LostReply, Refusal, ServiceStore, StoreThreads, TicketService, bearer_token,
};
use crate::sqlite::StoredTicket;
use crate::tool::{Fault, TicketId};

/// What every handler shares.
#[derive(Clone)]
pub(super) struct App {
    pub(super) service: Arc<TicketService>,
    pub(super) stores: Arc<StoreThreads>,
    pub(super) openapi: Arc<str>,
}

/// The router with its layers: the limits are here, in one place, and no handler repeats them.
pub(super) fn router(app: App, limits: &Limits) -> Router {
    let mut routes = Router::new()
        .route("/openapi.json", get(openapi))
        .route("/tickets", post(create_keyed).get(list_tickets))
        .route("/tickets/{id}", get(one_ticket));
    if app.service.faults() {
        routes = routes.route("/unkeyed-tickets", post(create_unkeyed));
    }
    if app.service.has_admin() {
        routes = routes
            .route("/admin/tickets", get(admin_tickets))
            .route("/admin/records", get(admin_records).delete(admin_forget))
            .route("/admin/reset", post(admin_reset))
            .route("/admin/prune", post(admin_prune));
    }
    let max_body = usize::try_from(wire::MAX_BODY_BYTES).unwrap_or(usize::MAX);
    routes
        .fallback(no_endpoint)
        .with_state(app)
        // Innermost first: the header check, then the body's size and pace, then the request's
        // total time, and outermost the step that turns any bare error status into a problem.
        .layer(middleware::from_fn(refuse_non_ascii_headers))
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(RequestBodyTimeoutLayer::new(limits.body_idle))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request,
        ))
        .layer(middleware::map_response(bare_status_as_problem))
}

/// Any error answer that is not a problem yet (a layer's 408, 413 or 503, the router's 405 with
/// its `Allow` header, a 404) gets the contract's problem body; its headers are kept.
async fn bare_status_as_problem(response: Response) -> Response {
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes() == wire::PROBLEM_JSON.as_bytes());
    let status = response.status();
    if is_problem || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let Some(kind) = problem_response::for_status(status) else {
        return response;
    };
    let detail = match status.as_u16() {
        405 => "see the Allow header for the methods this path takes".to_owned(),
        408 => "the request did not arrive, or was not answered, in time".to_owned(),
        413 => format!("the body is over {} bytes", wire::MAX_BODY_BYTES),
        _ => kind.title.to_owned(),
    };
    let (parts, _) = response.into_parts();
    let mut problem = Problem::new(kind, detail).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            problem.headers_mut().insert(name.clone(), value.clone());
        }
    }
    problem
}

/// A header value with a byte outside visible ASCII (and tab) is refused with 400 naming the
/// header: the contract's headers are ASCII, and an answer beats a closed connection.
async fn refuse_non_ascii_headers(request: Request, next: Next) -> Response {
    let bad = request.headers().iter().find(|(_, value)| {
        !value
            .as_bytes()
            .iter()
            .all(|b| *b == b'\t' || (0x20..=0x7e).contains(b))
    });
    if let Some((name, _)) = bad {
        let detail = format!("the {name} header holds a byte outside printable ASCII");
        return Problem::new(problem::INVALID_REQUEST, detail).into_response();
    }
    next.run(request).await
}

async fn no_endpoint(request: Request) -> Problem {
    let detail = format!("no endpoint {} {}", request.method(), request.uri().path());
    Problem::new(problem::NOT_FOUND, detail)
}

async fn openapi(State(app): State<App>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        app.openapi.to_string(),
    )
        .into_response()
}

/// The single value of header `name`, or a problem when it is repeated.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &str,
    kind: wire::ProblemType,
) -> Result<Option<&'h HeaderValue>, Problem> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        let detail = format!("the {name} header is sent more than once; send it once");
        return Err(Problem::new(kind, detail));
    }
    Ok(first)
}

/// The caller the bearer token names; 401 otherwise.
pub(super) struct Caller(Scope);

impl FromRequestParts<App> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Caller, Problem> {
        let unknown = || {
            Problem::new(
                problem::UNAUTHORIZED,
                "send Authorization: Bearer TOKEN with a token this server knows",
            )
        };
        let value =
            single(&parts.headers, "authorization", problem::UNAUTHORIZED)?.ok_or_else(unknown)?;
        let token = bearer_token(value.as_bytes()).ok_or_else(unknown)?;
        app.service.caller(token).map(Caller).ok_or_else(unknown)
    }
}

/// The admin token is right; 401 otherwise.
pub(super) struct Admin;

impl FromRequestParts<App> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Admin, Problem> {
        let refused = || {
            let detail = format!("send {} with the admin token", wire::ADMIN_TOKEN);
            Problem::new(problem::UNAUTHORIZED, detail)
        };
        let value = single(&parts.headers, wire::ADMIN_TOKEN, problem::UNAUTHORIZED)?
            .ok_or_else(refused)?;
        if app.service.is_admin(value.as_bytes()) {
            Ok(Admin)
        } else {
            Err(refused())
        }
    }
}

/// The `Idempotency-Key`, read as one sf-string; 400 when missing, repeated or malformed.
pub(super) struct Key(OperationKey);

impl<S: Sync> FromRequestParts<S> for Key {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Key, Problem> {
        let name = wire::IDEMPOTENCY_KEY;
        let Some(value) = single(&parts.headers, name, problem::INVALID_KEY)? else {
            let detail = format!("send an {name} header, such as {name}: \"8e03978e-40d5\"");
            return Err(Problem::new(problem::MISSING_KEY, detail));
        };
        let text = value.to_str().map_err(|_| {
            Problem::new(
                problem::INVALID_KEY,
                format!("the {name} header holds a byte outside printable ASCII"),
            )
        })?;
        sf::parse_key(text)
            .map(Key)
            .map_err(|err| Problem::new(problem::INVALID_KEY, format!("{name}: {err}")))
    }
}

/// The test-only fault the `Lab-Fault` header asks for; 400 when faults are off or the value is
/// unknown.
pub(super) struct FaultField(Fault);

impl FromRequestParts<App> for FaultField {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<FaultField, Problem> {
        let name = wire::FAULT_HEADER;
        let Some(value) = single(&parts.headers, name, problem::INVALID_REQUEST)? else {
            return Ok(FaultField(Fault::None));
        };
        if !app.service.faults() {
            let detail = format!("{name} is honoured only by a server started with --faults");
            return Err(Problem::new(problem::INVALID_REQUEST, detail));
        }
        value
            .to_str()
            .ok()
            .and_then(wire::parse_fault_header)
            .map(FaultField)
            .ok_or_else(|| {
                let detail = format!("unknown {name} value {value:?}");
                Problem::new(problem::INVALID_REQUEST, detail)
            })
    }
}

/// The body as a payload. Its size and pace are bounded by the layers; this maps what they
/// report to the contract's problems.
pub(super) struct JsonPayload(Payload);

impl<S: Sync> FromRequest<S> for JsonPayload {
    type Rejection = Problem;

    async fn from_request(request: Request, _: &S) -> Result<JsonPayload, Problem> {
        let bytes = read_body(request.into_body()).await?;
        let text = std::str::from_utf8(&bytes).map_err(|err| {
            Problem::new(
                problem::INVALID_REQUEST,
                format!("the body is not UTF-8: {err}"),
            )
        })?;
        Payload::from_json_text(text)
            .map(JsonPayload)
            .map_err(|err| Problem::new(problem::INVALID_REQUEST, err))
    }
}

async fn read_body(body: Body) -> Result<Bytes, Problem> {
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
            while let Some(error) = cause {
                if error.is::<http_body_util::LengthLimitError>() {
                    let detail = format!("the body is over {} bytes", wire::MAX_BODY_BYTES);
                    return Err(Problem::new(problem::TOO_LARGE, detail));
                }
                if error.is::<tower_http::timeout::TimeoutError>() {
                    let detail = "the body stopped arriving before it was complete";
                    return Err(Problem::new(problem::REQUEST_TIMEOUT, detail));
                }
                cause = error.source();
            }
            Err(Problem::new(
                problem::INVALID_REQUEST,
                format!("unreadable body: {err}"),
            ))
        }
    }
}

// ANCHOR: http_handlers
async fn create_keyed(
    State(app): State<App>,
    Caller(scope): Caller,
    Key(key): Key,
    FaultField(fault): FaultField,
    switch: Option<axum::Extension<LostReply>>,
    JsonPayload(payload): JsonPayload,
) -> Response {
    create(app, scope, Some(key), fault, switch, payload).await
}

async fn create_unkeyed(
    State(app): State<App>,
    Caller(scope): Caller,
    FaultField(fault): FaultField,
    switch: Option<axum::Extension<LostReply>>,
    JsonPayload(payload): JsonPayload,
) -> Response {
    create(app, scope, None, fault, switch, payload).await
}

async fn create(
    app: App,
    scope: Scope,
    key: Option<OperationKey>,
    fault: Fault,
    switch: Option<axum::Extension<LostReply>>,
    payload: Payload,
) -> Response {
    let service = app.service.clone();
    let created = app
        .stores
        .run(move |store| service.create(store, &scope, key.as_ref(), &payload, fault))
        .await;
    match created {
        Some(Ok(Created::New { text, .. })) => created_response(text, false),
        Some(Ok(Created::Replayed { text, .. })) => created_response(text, true),
        Some(Ok(Created::LostReply)) => {
            if let Some(axum::Extension(switch)) = switch {
                switch.lose();
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Some(Err(refusal)) => refused(refusal).into_response(),
        None => Problem::internal("the store threads have stopped").into_response(),
    }
}
// ANCHOR_END: http_handlers

/// The problem for a refused create.
fn refused(refusal: Refusal) -> Problem {
    match refusal {
        Refusal::InProgress { key } => {
            let detail = format!(
                "a request with key {:?} is being processed; retry after {} s with the same key",
                key.as_str(),
                wire::RETRY_AFTER_SECONDS
            );
            Problem::new(problem::IN_FLIGHT, detail)
        }
        Refusal::Expired { key } => {
            let detail = format!(
                "the record of key {:?} was pruned after the retention window; this service \
                 cannot say whether it took effect and will not create again under it: review \
                 before any new key",
                key.as_str()
            );
            Problem::new(problem::KEY_EXPIRED, detail)
        }
        Refusal::Conflict(detail) => Problem::new(problem::PAYLOAD_CONFLICT, detail),
        Refusal::InjectedFailure(detail) => Problem::new(problem::INJECTED_FAILURE, detail),
        Refusal::Internal { error_id } => Problem::internal_with_id(error_id),
    }
}

fn created_response(text: String, replayed: bool) -> Response {
    let mut response = (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert(wire::IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

fn json_response(body: &serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Runs a read or an admin action on a store thread and answers its JSON, or a 500.
async fn on_store(
    app: &App,
    job: impl FnOnce(&dyn ServiceStore) -> Result<serde_json::Value, Problem> + Send + 'static,
) -> Response {
    match app.stores.run(job).await {
        Some(Ok(body)) => json_response(&body),
        Some(Err(problem)) => problem.into_response(),
        None => Problem::internal("the store threads have stopped").into_response(),
    }
}

async fn list_tickets(State(app): State<App>, Caller(scope): Caller) -> Response {
    on_store(&app, move |store| {
        let tickets = store
            .tickets_of(scope.caller())
            .map_err(Problem::internal)?;
        let list: Vec<_> = tickets.into_iter().map(ticket_json).collect();
        Ok(json!({ "tickets": list }))
    })
    .await
}

async fn one_ticket(
    State(app): State<App>,
    Caller(scope): Caller,
    Path(id): Path<String>,
) -> Response {
    // The served stores' tickets are integers: anything else names no ticket.
    let Ok(id) = id.parse::<i64>().map(TicketId::from) else {
        return Problem::new(problem::NOT_FOUND, format!("no ticket {id:?}")).into_response();
    };
    on_store(&app, move |store| {
        match store
            .ticket_of(scope.caller(), &id)
            .map_err(Problem::internal)?
        {
            Some(ticket) => Ok(ticket_json(ticket)),
            None => Err(Problem::new(
                problem::NOT_FOUND,
                format!("no ticket {id} of yours"),
            )),
        }
    })
    .await
}

async fn admin_tickets(State(app): State<App>, _: Admin) -> Response {
    on_store(&app, |store| {
        let ids = store.ticket_ids().map_err(Problem::internal)?;
        Ok(json!({ "ticket_ids": ids }))
    })
    .await
}

async fn admin_records(State(app): State<App>, _: Admin) -> Response {
    on_store(&app, |store| {
        let records = store.count_records().map_err(Problem::internal)?;
        Ok(json!({ "records": records }))
    })
    .await
}

async fn admin_forget(
    State(app): State<App>,
    _: Admin,
    Caller(scope): Caller,
    Key(key): Key,
) -> Response {
    on_store(&app, move |store| {
        let forgotten = store
            .forget_record(&scope, &key)
            .map_err(Problem::internal)?;
        Ok(json!({ "forgotten": forgotten }))
    })
    .await
}

async fn admin_reset(State(app): State<App>, _: Admin) -> Response {
    let service = app.service.clone();
    on_store(&app, move |store| {
        service.reset(store).map_err(Problem::internal)?;
        Ok(json!({ "cleared": true }))
    })
    .await
}

async fn admin_prune(State(app): State<App>, _: Admin) -> Response {
    let service = app.service.clone();
    on_store(&app, move |_| match service.prune() {
        Ok(pruned) => Ok(json!({"records": pruned.records, "tombstones": pruned.tombstones})),
        Err(err @ crate::Error::InputInvalid { .. }) => {
            Err(Problem::new(problem::INVALID_REQUEST, err))
        }
        Err(err) => Err(Problem::internal(err)),
    })
    .await
}

fn ticket_json(ticket: StoredTicket) -> serde_json::Value {
    // The payload was stored as canonical JSON by this crate, so it parses; show it as text if not.
    let payload =
        serde_json::from_str(&ticket.payload).unwrap_or(serde_json::Value::String(ticket.payload));
    json!({"id": ticket.id, "payload": payload})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs an extractor or a body read to completion on a runtime of its own.
    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = axum::http::Request::builder();
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn key_of(headers: &[(&str, &str)]) -> std::result::Result<String, &'static str> {
        block_on(Key::from_request_parts(&mut parts(headers), &()))
            .map(|Key(key)| key.as_str().to_owned())
            .map_err(|problem| problem.kind().anchor)
    }

    fn body_of(response: Response) -> serde_json::Value {
        let bytes = block_on(response.into_body().collect()).unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn the_key_header_is_read_as_one_sf_string_or_refused_with_its_problem() {
        let name = wire::IDEMPOTENCY_KEY;
        assert_eq!(key_of(&[(name, "\"ticket-7\"")]), Ok("ticket-7".to_owned()));
        assert_eq!(key_of(&[]), Err(problem::MISSING_KEY.anchor));
        // A bare token-shaped value is read as the key; an unterminated string, a bare value
        // that starts with a digit and a repeated header are not one key.
        assert_eq!(key_of(&[(name, "ticket-7")]), Ok("ticket-7".to_owned()));
        assert_eq!(
            key_of(&[(name, "\"ticket-7")]),
            Err(problem::INVALID_KEY.anchor)
        );
        assert_eq!(
            key_of(&[(name, "7-ticket")]),
            Err(problem::INVALID_KEY.anchor)
        );
        assert_eq!(
            key_of(&[(name, "\"a\""), (name, "\"a\"")]),
            Err(problem::INVALID_KEY.anchor)
        );
    }

    #[test]
    fn a_header_sent_twice_is_a_problem_and_a_missing_one_is_none() {
        let headers = parts(&[("x-one", "1"), ("x-two", "2"), ("x-two", "2")]).headers;
        assert_eq!(
            single(&headers, "x-one", problem::INVALID_KEY).unwrap(),
            Some(&HeaderValue::from_static("1"))
        );
        assert_eq!(
            single(&headers, "x-none", problem::INVALID_KEY).unwrap(),
            None
        );
        let twice = single(&headers, "x-two", problem::INVALID_KEY).unwrap_err();
        assert_eq!(twice.kind().anchor, problem::INVALID_KEY.anchor);
    }

    #[test]
    fn each_refusal_becomes_its_own_problem_and_an_internal_one_shows_only_its_id() {
        let key = OperationKey::try_from("ticket-7").unwrap();
        let cases = [
            (Refusal::InProgress { key: key.clone() }, problem::IN_FLIGHT),
            (Refusal::Expired { key }, problem::KEY_EXPIRED),
            (
                Refusal::Conflict("other payload".into()),
                problem::PAYLOAD_CONFLICT,
            ),
            (
                Refusal::InjectedFailure("fault".into()),
                problem::INJECTED_FAILURE,
            ),
        ];
        for (refusal, kind) in cases {
            let problem = refused(refusal);
            assert_eq!(problem.kind().anchor, kind.anchor);
            let response = problem.into_response();
            assert_eq!(response.status().as_u16(), kind.status);
        }
        let internal = Refusal::internal("disk I/O error at /secret/path");
        let Refusal::Internal { error_id } = &internal else {
            panic!("not internal: {internal:?}");
        };
        let error_id = error_id.clone();
        let response = refused(internal).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_of(response).to_string();
        assert!(body.contains(&error_id), "{body}");
        assert!(!body.contains("/secret/path"), "the cause leaked: {body}");
    }

    #[test]
    fn only_a_replay_is_marked_replayed() {
        let text = r#"{"ticket_id": 1}"#.to_owned();
        let created = created_response(text.clone(), false);
        assert_eq!(created.status(), StatusCode::CREATED);
        assert!(created.headers().get(wire::IDEMPOTENT_REPLAYED).is_none());
        let replayed = created_response(text, true);
        assert_eq!(
            replayed.headers().get(wire::IDEMPOTENT_REPLAYED).unwrap(),
            "true"
        );
        assert_eq!(body_of(replayed)["ticket_id"], 1);
    }
}
