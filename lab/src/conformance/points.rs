//! The contract points a single caller can check, one function each, each on fresh tools.

use serde_json::{Value, json};

use crate::error::Error;
use crate::payload::Payload;
use crate::suite::{self, Operation};
use crate::tool::{CreateRequest, Fault, Step, TicketId, TicketTool};

use super::probe::{Check, Fresh, Probe, caller, key, payload, payload_of, payload_value, scope};
use super::report::Failure;

/// Runs one of the suite's seven scenarios as a contract point; `cause` is what usually breaks it.
pub fn scenario<T, R>(
    fresh: &mut Fresh<'_, T>,
    scenario: fn(&T, &Operation) -> crate::Result<R>,
    cause: &str,
) -> Check
where
    T: TicketTool,
{
    let tool = fresh.tool()?;
    match scenario(&tool, &Operation::example()) {
        Ok(_) => Ok(()),
        Err(Error::ScenarioFailed {
            expected, observed, ..
        }) => Err(Failure::new(expected, observed, cause)),
        Err(err) => Err(Failure::from(err)),
    }
}

/// The seven scenarios: each point's name, promise, scenario and likely cause.
pub fn scenarios<T: TicketTool + Send>() -> [super::Point<T>; 7] {
    // Each point runs one scenario of the suite; only the four texts differ.
    macro_rules! point {
        ($name:literal, $promise:literal, $run:path, $cause:literal) => {
            super::Point::new($name, $promise, |fresh| scenario(fresh, $run, $cause))
        };
    }
    [
        point!(
            "scenario_naive_retry",
            "without a key, a lost reply and a retry make two tickets (the failure the key fixes)",
            suite::naive_retry,
            "a lost reply is treated as a rollback, or calls without a key are merged by \
             their content"
        ),
        point!(
            "scenario_stable_key_retry",
            "after a lost reply, retries with the same key replay the one ticket",
            suite::stable_key_retry,
            "the key is ignored, the record is not written with the ticket, or the \
             replay returns another ticket"
        ),
        point!(
            "scenario_changed_payload",
            "the same key with another payload is rejected and writes nothing",
            suite::changed_payload,
            "the payload is not compared, or only some of it is"
        ),
        point!(
            "scenario_failure_before_commit",
            "a failure between the two inserts leaves nothing, and the retry creates once",
            suite::failure_before_commit,
            "the ticket and its record are not written in one transaction, or \
             Fault::BeforeCommit is ignored"
        ),
        point!(
            "scenario_concurrent_same_key",
            "eight callers released together on one key converge on one ticket",
            suite::concurrent_same_key,
            "the lookup and the insert are not one atomic step (check, then write)"
        ),
        point!(
            "scenario_new_key_same_payload",
            "a new key with the same payload is a new intention and a new ticket",
            suite::new_key_same_payload,
            "the tool deduplicates by content instead of by key"
        ),
        point!(
            "scenario_deleted_replay_record",
            "once the record is gone, the same key creates again (the retention boundary)",
            suite::deleted_replay_record,
            "forget_record does not delete the record, or the key is found elsewhere"
        ),
    ]
}

/// The lost reply commits: the ticket and its record exist although the caller heard nothing.
pub fn a_lost_reply_leaves_the_ticket_committed<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let (scope, key, payload) = (caller(), key("lost-reply-1"), payload());
    let request = CreateRequest::keyed(&scope, &key, &payload);
    probe.reply_lost(
        request.with_fault(Fault::LoseReply),
        "a create whose reply is lost",
    )?;
    let tickets = probe.tickets()?;
    if tickets.len() != 1 {
        return Err(Failure::new(
            "one ticket after a lost reply: the commit happened, only the answer was lost",
            format!("tickets {tickets:?}"),
            "the lost reply is treated as a rollback: Fault::LoseReply must strike after the \
             commit, so the retry has something to replay",
        ));
    }
    probe.stored(&tickets, 1, "the record is not committed with the ticket")?;
    probe.replays(request, &tickets[0], "the retry with the same key")?;
    probe.replays(request, &tickets[0], "a second retry")?;
    probe.stored(&tickets, 1, "a replay wrote something")
}

/// A replay whose own reply is lost changes nothing; the next retry still replays.
pub fn a_lost_reply_on_a_replay_changes_nothing<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let (scope, key, payload) = (caller(), key("lost-replay-1"), payload());
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let id = probe.created(
        request,
        "the first create",
        "a fresh tool replayed: connect did not make an empty tool",
    )?;
    probe.reply_lost(
        request.with_fault(Fault::LoseReply),
        "a replay whose reply is lost",
    )?;
    probe.stored(
        std::slice::from_ref(&id),
        1,
        "a replay whose reply was lost wrote a ticket or a record: the lost reply must only \
         drop the answer",
    )?;
    probe.replays(request, &id, "the retry after the lost replay")
}

/// The ticket bob's first create made with alice's key and another payload; a replay or a
/// conflict there means the key was looked up outside bob's scope.
fn created_in_another_scope(
    answer: crate::Result<crate::Outcome>,
    cause: &str,
) -> std::result::Result<TicketId, Failure> {
    let expected = "bob's first create with alice's key (another payload) to create a new ticket";
    match answer {
        Ok(crate::Outcome::Created(id)) => Ok(id),
        Ok(other) => Err(Failure::new(expected, format!("{other:?}"), cause)),
        Err(Error::PayloadConflict { .. }) => Err(Failure::new(
            expected,
            "a payload conflict with alice's record",
            cause,
        )),
        Err(err) => Err(Failure::from(err)),
    }
}

/// Two callers, and two operation types, using one key get separate tickets.
pub fn keys_are_scoped_by_caller_and_operation<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let shared = key("shared-key-1");
    let (alice, bob, carol) = (
        scope("alice-agent", "create_ticket"),
        scope("bob-agent", "create_ticket"),
        scope("carol-agent", "create_ticket"),
    );
    let alice_incident = scope("alice-agent", "create_incident");
    let (p, q) = (
        payload(),
        payload_of(json!({"title": "Rotate the logs", "priority": "low"})),
    );
    let global = "keys are scoped globally: the lookup must include the caller and the operation \
                  type, not the key alone";
    let a = probe.created(
        CreateRequest::keyed(&alice, &shared, &p),
        "alice's first create",
        "a fresh tool replayed: connect did not make an empty tool",
    )?;
    let b = created_in_another_scope(tool.create(CreateRequest::keyed(&bob, &shared, &q)), global)?;
    let c = probe.created(
        CreateRequest::keyed(&carol, &shared, &p),
        "carol's first create with alice's key and payload",
        global,
    )?;
    let d = probe.created(
        CreateRequest::keyed(&alice_incident, &shared, &p),
        "alice's first create_incident with her create_ticket key",
        "keys are scoped by caller only: the operation type must be part of the lookup",
    )?;
    let ids = [a.clone(), b.clone(), c.clone(), d.clone()];
    if distinct(&ids) != ids.len() {
        return Err(Failure::new(
            "four different tickets for four scopes",
            format!("tickets {ids:?}"),
            "two scopes were given one ticket",
        ));
    }
    probe.replays(
        CreateRequest::keyed(&alice, &shared, &p),
        &a,
        "alice's retry",
    )?;
    probe.replays(CreateRequest::keyed(&bob, &shared, &q), &b, "bob's retry")?;
    probe.replays(
        CreateRequest::keyed(&carol, &shared, &p),
        &c,
        "carol's retry",
    )?;
    probe.replays(
        CreateRequest::keyed(&alice_incident, &shared, &p),
        &d,
        "alice's create_incident retry",
    )?;
    probe.conflicts(
        CreateRequest::keyed(&bob, &shared, &p),
        "bob's retry with alice's payload instead of his own",
    )?;
    let mut sorted = ids.to_vec();
    sorted.sort();
    probe.stored(
        &sorted,
        4,
        "a scope's create or conflict wrote into another scope",
    )
}

/// Field order and insignificant whitespace replay; any changed value conflicts and changes
/// nothing.
pub fn payloads_are_compared_in_canonical_form<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let (scope, key) = (caller(), key("canonical-1"));
    let compact = r#"{"title":"Disk almost full on db-1","priority":"normal","labels":["disk","database"],"details":{"host":"db-1","free_bytes":1024,"mounts":[{"path":"/","read_only":false}]}}"#;
    let reordered = "{\n  \"details\" : { \"mounts\" : [ { \"read_only\" : false, \"path\" : \"/\" } ],\n    \"free_bytes\" : 1024, \"host\" : \"db-1\" },\n\t\"labels\": [ \"disk\", \"database\" ],\r\n  \"priority\": \"normal\", \"title\": \"Disk almost full on db-1\"\n}\n";
    let first = text_payload(compact)?;
    let again = text_payload(reordered)?;
    let id = probe.created(
        CreateRequest::keyed(&scope, &key, &first),
        "the first create",
        "a fresh tool replayed: connect did not make an empty tool",
    )?;
    match tool.create(CreateRequest::keyed(&scope, &key, &again)) {
        Ok(crate::Outcome::Replayed(got)) if got == id => {}
        Err(Error::PayloadConflict { .. }) => {
            return Err(Failure::new(
                "the same payload with its fields reordered and other whitespace to replay",
                "a payload conflict",
                "the payload is compared as the text received: compare Payload::canonical(), \
                 never Payload::as_received()",
            ));
        }
        other => {
            return Err(Failure::new(
                format!("the same payload with its fields reordered to replay ticket {id}"),
                format!("{other:?}"),
                "the replay path does not return the record's ticket",
            ));
        }
    }
    for (change, value) in changed_values() {
        let changed = payload_of(value);
        probe.conflicts(
            CreateRequest::keyed(&scope, &key, &changed),
            &format!("the same key with {change}"),
        )?;
        probe.stored(
            std::slice::from_ref(&id),
            1,
            "a conflict wrote a ticket or a record, or replaced the saved payload",
        )?;
    }
    probe.replays(
        CreateRequest::keyed(&scope, &key, &first),
        &id,
        "the original payload after the conflicts",
    )
}

fn text_payload(text: &str) -> std::result::Result<Payload, Failure> {
    Payload::from_json_text(text).map_err(Failure::from)
}

/// Each change a payload can undergo that makes it another intention.
fn changed_values() -> Vec<(&'static str, Value)> {
    let base = payload_value();
    let with = |path: &[&str], value: Value| {
        let mut changed = base.clone();
        let mut at = &mut changed;
        for part in &path[..path.len() - 1] {
            at = &mut at[*part];
        }
        at[path[path.len() - 1]] = value;
        changed
    };
    let mut removed = base.clone();
    if let Some(object) = removed.as_object_mut() {
        object.remove("priority");
    }
    vec![
        (
            "another title",
            with(&["title"], json!("Disk full on db-2")),
        ),
        (
            "a nested number changed",
            with(&["details", "free_bytes"], json!(1025)),
        ),
        (
            "a number sent as a string",
            with(&["details", "free_bytes"], json!("1024")),
        ),
        (
            "a value deep in an array changed",
            with(
                &["details", "mounts"],
                json!([{"path": "/", "read_only": true}]),
            ),
        ),
        (
            "the array's items in another order",
            with(&["labels"], json!(["database", "disk"])),
        ),
        ("a field added", with(&["assignee"], json!("ops-oncall"))),
        ("a field removed", removed),
        ("a value replaced by null", with(&["priority"], Value::Null)),
    ]
}

/// Replays return their own recorded tickets while other tickets exist, in any order.
pub fn each_replay_returns_its_own_ticket<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let scope = caller();
    let keys: Vec<_> = (1..=5).map(|n| key(&format!("interleaved-{n}"))).collect();
    let payloads: Vec<_> = (1..=5)
        .map(|n| payload_of(json!({"title": format!("Interleaved ticket {n}"), "n": n})))
        .collect();
    let mut ids = Vec::new();
    for (n, (key, payload)) in keys.iter().zip(&payloads).enumerate() {
        ids.push(probe.created(
            CreateRequest::keyed(&scope, key, payload),
            &format!("the first create of key {key}"),
            "a new key replayed another key's ticket: the lookup does not use the key",
        )?);
        if n % 2 == 0 {
            // An unkeyed ticket between them, so "the newest ticket" is never a key's own.
            probe.created(
                CreateRequest::unkeyed(&scope, &payloads[0]),
                "a create without a key",
                "a call without a key was merged with a keyed one",
            )?;
        }
    }
    for n in [3, 0, 4, 1, 2, 0, 3] {
        probe.replays(
            CreateRequest::keyed(&scope, &keys[n], &payloads[n]),
            &ids[n],
            &format!("the retry of key {}", keys[n]),
        )?;
    }
    let tickets = probe.tickets()?;
    probe.stored(
        &tickets,
        5,
        "a replay wrote a record, or a call without a key stored one",
    )?;
    if tickets.len() != 8 {
        return Err(Failure::new(
            "8 tickets: 5 keyed and 3 without a key",
            format!("tickets {tickets:?}"),
            "a replay wrote a ticket, or calls were merged",
        ));
    }
    Ok(())
}

/// Calls without a key are never merged, even with one payload, and store no record.
pub fn calls_without_a_key_are_never_merged<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let (scope, payload) = (caller(), payload());
    let merged = "calls without a key are merged by their content: without a key nothing says \
                  two calls are one intention";
    let first = probe.created(
        CreateRequest::unkeyed(&scope, &payload),
        "a create without a key",
        "a fresh tool replayed: connect did not make an empty tool",
    )?;
    let second = probe.created(
        CreateRequest::unkeyed(&scope, &payload),
        "a second create without a key, same payload",
        merged,
    )?;
    probe.reply_lost(
        CreateRequest::unkeyed(&scope, &payload).with_fault(Fault::LoseReply),
        "a create without a key whose reply is lost",
    )?;
    let third = probe.created(
        CreateRequest::unkeyed(&scope, &payload),
        "the blind retry",
        merged,
    )?;
    let tickets = probe.tickets()?;
    if tickets.len() != 4 || distinct(&[first, second, third]) != 3 {
        return Err(Failure::new(
            "4 different tickets from 4 creates without a key, one of them with a lost reply",
            format!("tickets {tickets:?}"),
            "calls without a key were merged, or the lost reply rolled back",
        ));
    }
    probe.stored(
        &tickets,
        0,
        "a call without a key stored an operation record",
    )
}

/// A failure injected at each step leaves nothing behind, and the retry then creates exactly once.
pub fn a_failure_at_any_step_leaves_nothing<T: TicketTool>(fresh: &mut Fresh<'_, T>) -> Check {
    for step in Step::ALL {
        let tool = fresh.tool()?;
        let probe = Probe::new(&tool);
        let (scope, key, payload) = (caller(), key("fail-at-step-1"), payload());
        let request = CreateRequest::keyed(&scope, &key, &payload);
        let at = format!("a create failed at {step:?}");
        probe
            .injected_failure(request.with_fault(Fault::FailAt(step)), &at)
            .map_err(|failure| in_step(failure, step))?;
        probe
            .stored(
                &[],
                0,
                "the failure left a ticket or a record behind: write the ticket and its record \
                 in one transaction and roll it back on any error",
            )
            .map_err(|failure| in_step(failure, step))?;
        let id = probe
            .created(
                request,
                &format!("the retry after {at}"),
                "the failed create left a record behind",
            )
            .map_err(|failure| in_step(failure, step))?;
        probe
            .stored(
                std::slice::from_ref(&id),
                1,
                "the retry did not create exactly once",
            )
            .map_err(|failure| in_step(failure, step))?;
        probe
            .replays(request, &id, "a later retry")
            .map_err(|failure| in_step(failure, step))?;
    }
    Ok(())
}

fn in_step(mut failure: Failure, step: Step) -> Failure {
    failure.expected = format!("(at step {step:?}) {}", failure.expected);
    failure
}

/// After its record is forgotten, the key creates a new ticket, as the retention boundary says.
pub fn a_forgotten_record_lets_the_key_create_again<T: TicketTool>(
    fresh: &mut Fresh<'_, T>,
) -> Check {
    let tool = fresh.tool()?;
    let probe = Probe::new(&tool);
    let (scope, key, payload) = (caller(), key("forgotten-1"), payload());
    let request = CreateRequest::keyed(&scope, &key, &payload);
    let first = probe.created(
        request,
        "the first create",
        "a fresh tool replayed: connect did not make an empty tool",
    )?;
    let unknown = self::key("never-used-1");
    if tool.forget_record(&scope, &unknown)? {
        return Err(Failure::new(
            "forget_record of a key never used to report false",
            "true",
            "forget_record reports success without finding the record",
        ));
    }
    if !tool.forget_record(&scope, &key)? {
        return Err(Failure::new(
            "forget_record of a used key to report true",
            "false",
            "forget_record does not find the record by caller, operation and key",
        ));
    }
    probe.stored(
        std::slice::from_ref(&first),
        0,
        "forget_record removed the ticket too, or left the record",
    )?;
    let second = probe.created(
        request,
        "the same key after its record was forgotten",
        "the key was found although its record was forgotten: the tool keeps a second copy",
    )?;
    if second == first {
        return Err(Failure::new(
            "a new ticket id after the record was forgotten",
            format!("ticket {second} again"),
            "the tool reuses ticket ids",
        ));
    }
    probe.stored(
        &[first, second],
        1,
        "the new create did not write its record",
    )
}

/// How many different identifiers there are among `ids`.
pub fn distinct(ids: &[TicketId]) -> usize {
    let mut sorted = ids.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted.len()
}
