//! Error responses as RFC 9457 problem details: `application/problem+json` with the contract's
//! `type` URI, its `title`, the `status` and a `detail` for this occurrence.
//!
//! A failure inside the service is answered with an opaque id and nothing else; the log (stderr)
//! records the id beside the cause, so an operator can find one from the other while a caller
//! learns nothing about the storage engine.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::wire::{self, ProblemType, problem};
use crate::service::Refusal;

/// One error answer: its problem type, what happened this time, and any extra headers.
#[derive(Debug)]
pub struct Problem {
    kind: ProblemType,
    detail: String,
    error_id: Option<String>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem of `kind`, with `detail` saying what was wrong in this request.
    pub fn new(kind: ProblemType, detail: impl std::fmt::Display) -> Problem {
        let mut problem = Problem {
            kind,
            detail: detail.to_string(),
            error_id: None,
            headers: Vec::new(),
        };
        if kind == problem::UNAUTHORIZED {
            // RFC 9110 asks every 401 to name the authentication scheme it wants.
            problem = problem.with_header(header::WWW_AUTHENTICATE, "Bearer");
        }
        if kind == problem::IN_FLIGHT {
            problem =
                problem.with_header(header::RETRY_AFTER, &wire::RETRY_AFTER_SECONDS.to_string());
        }
        problem
    }

    /// A failure inside the service: logged with a fresh opaque id, answered with the id only.
    pub fn internal(cause: impl std::fmt::Display) -> Problem {
        match Refusal::internal(cause) {
            Refusal::Internal { error_id } => Problem::internal_with_id(error_id),
            // `Refusal::internal` makes only the internal kind.
            other => Problem::new(problem::INTERNAL, format!("{other:?}")),
        }
    }

    /// The answer to a failure already logged under `error_id`.
    pub(crate) fn internal_with_id(error_id: String) -> Problem {
        Problem {
            kind: problem::INTERNAL,
            detail: Refusal::internal_detail(&error_id),
            error_id: Some(error_id),
            headers: Vec::new(),
        }
    }

    /// The problem type.
    pub fn kind(&self) -> ProblemType {
        self.kind
    }

    /// The same problem with one more response header. `value` is built by this crate from
    /// ASCII text; a value that is not valid header text is left out rather than sent broken.
    pub fn with_header(mut self, name: HeaderName, value: &str) -> Problem {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers.push((name, value));
        }
        self
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut body = json!({
            "type": self.kind.uri(),
            "title": self.kind.title,
            "status": self.kind.status,
            "detail": self.detail,
        });
        if let Some(id) = &self.error_id {
            body["error_id"] = json!(id);
        }
        let status =
            StatusCode::from_u16(self.kind.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(wire::PROBLEM_JSON),
        );
        if self.kind.is_described_by_link() {
            let link = format!("<{}>; rel=\"describedby\"", self.kind.uri());
            if let Ok(link) = HeaderValue::from_str(&link) {
                headers.insert(header::LINK, link);
            }
        }
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}

/// The problem for a bare error status that a layer or the router answered on its own (405, 408,
/// 413, 503, a 404 for an unknown path), so that every error the service sends is a problem.
pub(crate) fn for_status(status: StatusCode) -> Option<ProblemType> {
    match status.as_u16() {
        404 => Some(problem::NOT_FOUND),
        405 => Some(problem::METHOD_NOT_ALLOWED),
        408 => Some(problem::REQUEST_TIMEOUT),
        413 => Some(problem::TOO_LARGE),
        503 => Some(problem::OVERLOADED),
        _ => None,
    }
}
