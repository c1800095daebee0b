//! The HTTP contract both sides share: header names, the test-only fault header, and the error
//! codes in response bodies. The server and the client adapter read them from here, so they cannot
//! drift apart.

use crate::tool::{Fault, Step};

/// The request header that carries the operation key.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The response header that marks a replayed response (the name Stripe uses).
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";

/// The test-only request header that asks the server to inject a fault. The server honours it only
/// when started with `--faults`, and rejects it with 400 otherwise.
pub const FAULT_HEADER: &str = "Lab-Fault";

/// The request header that carries the admin token on `/admin/...` endpoints.
pub const ADMIN_TOKEN: &str = "Lab-Admin-Token";

/// How many seconds a caller is asked to wait (`Retry-After`) when its key is in flight.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The largest request body the server reads, in bytes.
pub const MAX_BODY_BYTES: u64 = 64 * 1024;

/// The operation type of `POST /tickets`: the scope of a key is (the token's caller, this).
pub const CREATE_TICKET: &str = "create_ticket";

/// The `error` codes of the server's error bodies, `{"error": CODE, "message": TEXT}`.
pub mod code {
    /// 400: no `Idempotency-Key` header.
    pub const MISSING_KEY: &str = "missing_idempotency_key";
    /// 400: the key, the body or a header broke a rule.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// 401: no bearer token, or one the server does not know.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 404: no such ticket for this caller, or no such endpoint.
    pub const NOT_FOUND: &str = "not_found";
    /// 409: another request with the same key is being processed; retry after `Retry-After`.
    pub const IN_FLIGHT: &str = "request_in_flight";
    /// 410: the key's record was pruned after the retention window; the service cannot say what
    /// happened and will not create again under this key.
    pub const KEY_EXPIRED: &str = "idempotency_key_expired";
    /// 413: the body is larger than [`MAX_BODY_BYTES`](super::MAX_BODY_BYTES).
    pub const TOO_LARGE: &str = "body_too_large";
    /// 422: the key was first used with another payload; nothing was written.
    pub const KEY_REUSED: &str = "idempotency_key_reused";
    /// 500: a fault injected on purpose (test only); the transaction was rolled back.
    pub const INJECTED_FAILURE: &str = "injected_failure";
    /// 500: the store failed.
    pub const STORE_FAILURE: &str = "store_failure";
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
