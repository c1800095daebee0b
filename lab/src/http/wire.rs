//! The HTTP wire format both sides share (the module is `wire`, so that `contract` names the retry
//! contract alone): header names, the test-only fault header, and the problem types of error
//! bodies. The server and the client adapter read them from here, so they cannot drift apart.

use crate::tool::{Fault, Step};

/// The request header that carries the operation key, as one RFC 8941 sf-string
/// ([`super::sf`]).
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The response header that marks a replayed response (the name Stripe uses).
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";

/// The test-only request header that asks the server to inject a fault. The server honours it only
/// when started with `--faults`, and rejects it with 400 otherwise; the published OpenAPI names it
/// only then.
pub const FAULT_HEADER: &str = "Lab-Fault";

/// The request header that carries the admin token on `/admin/...` endpoints.
pub const ADMIN_TOKEN: &str = "Lab-Admin-Token";

/// How many seconds a caller is asked to wait (`Retry-After`) when its key is in flight.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The largest request body the server reads, in bytes.
pub const MAX_BODY_BYTES: u64 = 64 * 1024;

/// The operation type of `POST /tickets`: the scope of a key is (the token's caller, this).
pub const CREATE_TICKET: &str = "create_ticket";

/// The media type of every error body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The chapter of the book that documents the contract. Each problem type's URI is an anchor in
/// it, so a person who receives an error can open its explanation. The base is the lab's chosen
/// home for the published book; the anchors are checked against `src/http-boundary.md` by a test.
pub const CONTRACT_CHAPTER: &str = "https://tool-retries-lab.github.io/book/http-boundary.html";

/// One kind of error the service answers, as an RFC 9457 problem type: the client matches on
/// [`uri`](ProblemType::uri), never on the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProblemType {
    /// The anchor in the contract chapter, without `#`: `problem-payload-conflict`.
    pub anchor: &'static str,
    /// The problem's short, fixed summary (`title`).
    pub title: &'static str,
    /// The HTTP status it is sent with.
    pub status: u16,
}

impl ProblemType {
    /// The `type` URI: the contract chapter with this problem's anchor.
    pub fn uri(&self) -> String {
        format!("{CONTRACT_CHAPTER}#{}", self.anchor)
    }

    /// Whether the draft asks this problem's responses to carry `Link: <...>; rel="describedby"`
    /// (400, 409 and 422).
    pub fn is_described_by_link(&self) -> bool {
        matches!(self.status, 400 | 409 | 422)
    }
}

/// The problem types of the server's error bodies,
/// `{"type": URI, "title": TEXT, "status": N, "detail": TEXT}`.
pub mod problem {
    use super::ProblemType;

    /// 400: no `Idempotency-Key` header.
    pub const MISSING_KEY: ProblemType = ProblemType {
        anchor: "problem-missing-key",
        title: "The Idempotency-Key header is missing",
        status: 400,
    };
    /// 400: the `Idempotency-Key` field is not one sf-string key (malformed, repeated, a list,
    /// with parameters, or breaking the key rule).
    pub const INVALID_KEY: ProblemType = ProblemType {
        anchor: "problem-invalid-key",
        title: "The Idempotency-Key header is not one valid key",
        status: 400,
    };
    /// 400: the body or another header broke a rule.
    pub const INVALID_REQUEST: ProblemType = ProblemType {
        anchor: "problem-invalid-request",
        title: "The request is malformed",
        status: 400,
    };
    /// 401: no bearer token, or one the server does not know.
    pub const UNAUTHORIZED: ProblemType = ProblemType {
        anchor: "problem-unauthorized",
        title: "The credentials are missing or unknown",
        status: 401,
    };
    /// 404: no such ticket for this caller, or no such endpoint.
    pub const NOT_FOUND: ProblemType = ProblemType {
        anchor: "problem-not-found",
        title: "Nothing is here for this caller",
        status: 404,
    };
    /// 405: the path exists, the method does not; `Allow` lists the methods.
    pub const METHOD_NOT_ALLOWED: ProblemType = ProblemType {
        anchor: "problem-method-not-allowed",
        title: "The method is not allowed on this path",
        status: 405,
    };
    /// 408: the body did not arrive in time.
    pub const REQUEST_TIMEOUT: ProblemType = ProblemType {
        anchor: "problem-request-timeout",
        title: "The request did not arrive in time",
        status: 408,
    };
    /// 409: another request with the same key is being processed; retry after `Retry-After`.
    pub const IN_FLIGHT: ProblemType = ProblemType {
        anchor: "problem-in-flight",
        title: "A request with this key is still being processed",
        status: 409,
    };
    /// 410: the key's record was pruned after the retention window; the service cannot say what
    /// happened and will not create again under this key.
    pub const KEY_EXPIRED: ProblemType = ProblemType {
        anchor: "problem-key-expired",
        title: "The key's record has expired",
        status: 410,
    };
    /// 413: the body is larger than [`MAX_BODY_BYTES`](super::MAX_BODY_BYTES).
    pub const TOO_LARGE: ProblemType = ProblemType {
        anchor: "problem-too-large",
        title: "The body is too large",
        status: 413,
    };
    /// 422: the key was first used with another payload; nothing was written.
    pub const PAYLOAD_CONFLICT: ProblemType = ProblemType {
        anchor: "problem-payload-conflict",
        title: "The key was first used with another payload",
        status: 422,
    };
    /// 500: a fault injected on purpose (test only); the transaction was rolled back.
    pub const INJECTED_FAILURE: ProblemType = ProblemType {
        anchor: "problem-injected-failure",
        title: "A failure was injected on purpose",
        status: 500,
    };
    /// 500: something failed inside the service. The body carries only an opaque id, which the
    /// service's log records beside the cause.
    pub const INTERNAL: ProblemType = ProblemType {
        anchor: "problem-internal",
        title: "The service failed",
        status: 500,
    };
    /// 503: the service holds as many connections as it allows; try again later.
    pub const OVERLOADED: ProblemType = ProblemType {
        anchor: "problem-overloaded",
        title: "The service is at its connection limit",
        status: 503,
    };

    /// Every problem type, for documentation checks.
    pub const ALL: [ProblemType; 14] = [
        MISSING_KEY,
        INVALID_KEY,
        INVALID_REQUEST,
        UNAUTHORIZED,
        NOT_FOUND,
        METHOD_NOT_ALLOWED,
        REQUEST_TIMEOUT,
        IN_FLIGHT,
        KEY_EXPIRED,
        TOO_LARGE,
        PAYLOAD_CONFLICT,
        INJECTED_FAILURE,
        INTERNAL,
        OVERLOADED,
    ];

    /// The problem type whose URI is `uri`, if the contract defines one.
    pub fn from_uri(uri: &str) -> Option<ProblemType> {
        let anchor = uri
            .strip_prefix(super::CONTRACT_CHAPTER)?
            .strip_prefix('#')?;
        ALL.into_iter().find(|problem| problem.anchor == anchor)
    }
}

/// The value of the [`FAULT_HEADER`] for `fault`, or `None` for [`Fault::None`].
pub fn fault_header_value(fault: Fault) -> Option<String> {
    match fault {
        Fault::LoseReply => Some("lose-reply".to_owned()),
        Fault::BeforeCommit => Some("before-commit".to_owned()),
        Fault::FailAt(step) => Some(format!("fail-at={}", step_name(step))),
        _ => None,
    }
}

/// The fault a [`FAULT_HEADER`] value asks for, or `None` for a value the contract does not define.
pub fn parse_fault_header(value: &str) -> Option<Fault> {
    match value {
        "lose-reply" => Some(Fault::LoseReply),
        "before-commit" => Some(Fault::BeforeCommit),
        other => {
            let name = other.strip_prefix("fail-at=")?;
            Step::ALL
                .into_iter()
                .find(|step| step_name(*step) == name)
                .map(Fault::FailAt)
        }
    }
}

fn step_name(step: Step) -> &'static str {
    match step {
        Step::Begin => "begin",
        Step::Lookup => "lookup",
        Step::InsertTicket => "insert-ticket",
        Step::InsertRecord => "insert-record",
        Step::Commit => "commit",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_type_is_found_again_from_its_uri() {
        for problem in problem::ALL {
            assert_eq!(problem::from_uri(&problem.uri()), Some(problem));
        }
        assert_eq!(problem::from_uri("about:blank"), None);
    }

    #[test]
    fn every_fault_survives_the_header_round_trip() {
        let faults = [Fault::LoseReply, Fault::BeforeCommit]
            .into_iter()
            .chain(Step::ALL.map(Fault::FailAt));
        for fault in faults {
            let value = fault_header_value(fault).unwrap();
            assert_eq!(parse_fault_header(&value), Some(fault), "{value}");
        }
        assert_eq!(fault_header_value(Fault::None), None);
        assert_eq!(parse_fault_header("fail-at=nowhere"), None);
    }
}
