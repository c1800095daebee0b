//! The grader's report: the recorded calls grouped into intentions, each with its calls, its
//! keys, its tickets and a verdict, and what one run cannot know.
//!
//! How intentions are told apart: calls with the same `operation_key` are one intention. A call
//! with a key not seen before joins an earlier intention when it carries the same fields (the
//! arguments without the key) and no ticket of that intention had reached the client when it
//! arrived (a reply still held back had not): it is then a retry with a new key. Otherwise it
//! starts a new intention; when it comes right after a call whose answer never reached the
//! client, and shares a field's value with it, it is marked as a possible re-plan of it.
//!
//! Whether a reply reached the client is judged by what the client did, from the journal: a
//! reply sent after the client showed it had left (it cancelled the call, closed stdin, sent its
//! session's DELETE) or after its next call for the same intention arrived did not reach it. A
//! reply held back and then sent may have come after the client's own timeout, which the server
//! cannot see when the client sends no cancellation: it reached the client only when a later
//! request of its session named its ticket; without that, its receipt is unknown.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::journal::{Call, Judged};
use crate::sqlite::StoredTicket;

/// What the report says of one intention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// A lost or late reply was retried with the same key and the same arguments, and one
    /// ticket exists.
    Pass,
    /// More than one ticket, or a retry with a new key.
    Fail,
    /// No ticket ever reached the client and it stopped asking: a ticket may exist that it was
    /// never told of.
    Unresolved,
    /// No reply of this intention was lost or late, so its retries were never tested.
    NotExercised,
}

impl Verdict {
    /// The word the report prints.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Unresolved => "UNRESOLVED",
            Verdict::NotExercised => "NOT EXERCISED",
        }
    }
}

/// One intention.
#[derive(Clone, Debug, Serialize)]
pub struct Intention {
    /// Its number in the report, from 1, in order of its first call.
    pub number: usize,
    /// The numbers of its calls.
    pub calls: Vec<u64>,
    /// The keys it used, in order of first use (`(none)` for a call without a key).
    pub keys: Vec<String>,
    /// Its fields, as the first call sent them.
    pub fields: String,
    /// Whether every call carried the same fields.
    pub same_arguments: bool,
    /// How many of its replies were lost, and how many held back.
    pub lost: usize,
    /// How many of its replies were held back.
    pub delayed: usize,
    /// How many of its calls were answered `in_progress` after their ticket was made.
    pub in_progress: usize,
    /// How many of its calls ended with the connection dropped instead of a reply.
    pub dropped: usize,
    /// The tickets its calls created.
    pub tickets: Vec<String>,
    /// How many tickets in the store have these fields (from any intention).
    pub tickets_with_these_fields: usize,
    /// Whether a ticket reached the client.
    pub resolved: bool,
    /// Tickets its calls created that no reply the client received named: effects nobody
    /// was told of.
    pub tickets_never_told: Vec<String>,
    /// The intention this one may be a re-plan of.
    pub possible_replan_of: Option<usize>,
    /// The verdict.
    pub verdict: Verdict,
    /// The contract's promises the verdict judges (ids of [`crate::contract`]).
    pub promises: &'static [crate::contract::PromiseId],
    /// Why, in a sentence.
    pub reason: String,
    /// The calls the verdict rests on, each with its part and what became of it.
    pub rests_on: Vec<String>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The design served (`host`, `task-id`, `prepare`).
    pub key_source: String,
    /// The schedule, as text.
    pub schedule: String,
    /// How many `create_ticket` calls were recorded.
    pub calls: usize,
    /// The sessions they came in.
    pub sessions: usize,
    /// The clients that sent them (name and version).
    pub clients: Vec<String>,
    /// How many tickets the store holds.
    pub tickets_in_store: usize,
    /// How intentions were told apart.
    pub intentions_told_apart_by: String,
    /// Each intention.
    pub intentions: Vec<Intention>,
    /// The verdict of the run: FAIL or UNRESOLVED if any intention is; PASS if one passed and
    /// none failed; NOT EXERCISED otherwise.
    pub verdict: Verdict,
    /// Every call, as recorded.
    pub recorded: Vec<Call>,
    /// What this run cannot know.
    pub cannot_know: Vec<String>,
}

/// How the report tells intentions apart, as it prints it.
pub const TOLD_APART_BY: &str = "by operation_key; a call with a new key joins an earlier \
intention when its fields (the arguments without the key) are the same and no ticket of that \
intention had reached the client when it arrived; a reply sent after the client cancelled, \
left its session or called again for the intention did not reach it, and a reply held back \
reached it only when a later request of its session named its ticket";

/// What one run cannot know, printed with every report.
pub const CANNOT_KNOW: [&str; 6] = [
    "A model may re-plan differently under another prompt, task or sampling: a PASS is evidence \
about this run, not a proof about the loop.",
    "Two tickets the client really wanted with the same fields look like a retry with a new key \
when the second follows an unanswered first; a re-plan that changes both the key and the fields \
looks like a new intention, and is only marked as a possible re-plan when it follows an \
unanswered call and keeps one of its field values.",
    "A reply held back and then sent, into a session that gave no sign (a cancellation, a \
closed stdin or response stream, its DELETE, a next call for the intention), may have come \
after the client's own timeout: it counts as received only when a later request of the session \
names its ticket (a ticket_id argument), and otherwise its receipt is unknown. A client that \
read it and acted on it without naming the ticket looks the same as one that never read it.",
    "A resend is the same bytes again with no other request of the session between: a \
framework's own retry always looks like that, but so does a model that repeats the call word \
for word without the framework listing tools between its turns; a retry (other requests \
between, another session, the arguments written anew) went through the model or the host.",
    "The client's own state is out of sight: whether it saved the key durably before sending, so \
that a crash of the host (not only the reconnects this run showed) keeps it.",
    "Only this server's create_ticket is graded; other tools and other servers the agent calls \
are not.",
];

struct Group<'a> {
    calls: Vec<&'a Call>,
    keys: Vec<String>,
}

impl Group<'_> {
    /// Whether a ticket of this intention reached the client.
    fn resolved(&self) -> bool {
        self.resolved_by(u64::MAX)
    }

    /// Whether a ticket of this intention had reached the client by the time `at`.
    fn resolved_by(&self, at: u64) -> bool {
        self.calls.iter().any(|call| {
            call.ticket_id.is_some() && reached(call, &self.calls) && sent_at(call) <= at
        })
    }
}

/// When a call's reply was sent or given up (a journal from before the lab recorded it: when
/// the call arrived).
fn sent_at(call: &Call) -> u64 {
    call.settled_ms.unwrap_or(call.started_ms)
}

/// Whether the client showed it had left `call`'s session (stdin closed, the session's DELETE)
/// while the call still waited: before its reply was sent, or at any time for a reply the
/// grader lost (it waits until the client gives a sign).
fn left_while_waiting(call: &Call) -> bool {
    call.left_ms
        .is_some_and(|left| call.fate == "lost" || left <= sent_at(call))
}

/// Whether `call`'s reply never went out: lost, or held and not sent.
fn never_sent(call: &Call) -> bool {
    call.fate == "lost" || (call.fate.starts_with("delayed") && !call.reached_client)
}

/// Whether `call`'s reply reached the client, judged by what the client did: it was written
/// while the client had not shown it stopped waiting ([`written_unrefused`]), and, for a reply
/// held back, a later request of its session named its ticket. A held reply may be written
/// after the client's own timeout, and a client that times out without a cancellation looks,
/// on the wire, like one still waiting.
fn reached(call: &Call, members: &[&Call]) -> bool {
    written_unrefused(call, members) && (!held(call) || call.ticket_named_ms.is_some())
}

/// Whether nobody can tell if `call`'s reply reached the client: held back, written into a
/// session that gave no sign either way, and never acted on by name.
fn receipt_unknown(call: &Call, members: &[&Call]) -> bool {
    written_unrefused(call, members) && held(call) && call.ticket_named_ms.is_none()
}

fn held(call: &Call) -> bool {
    call.fate.starts_with("delayed")
}

/// Whether `call`'s reply was written while the client had not shown it stopped waiting: it
/// was sent (not lost or cancelled), before the client showed it had left the session, and,
/// for a reply held back, before the client's next call of the same intention (`members`)
/// arrived: a client that sends again has stopped waiting.
fn written_unrefused(call: &Call, members: &[&Call]) -> bool {
    if !call.reached_client || call.cancelled {
        return false;
    }
    if left_while_waiting(call) {
        return false;
    }
    let sent = sent_at(call);
    // A held reply goes out when the client's next request is on record, so in the same
    // millisecond as a next call of the intention: that call came first.
    !(call.fate.starts_with("delayed")
        && members
            .iter()
            .any(|other| other.number > call.number && other.started_ms <= sent))
}

/// Whether two intentions' fields share a value under one name (a reworded title, the same
/// priority): what a re-plan keeps, and an unrelated intention need not.
fn share_a_field(a: &str, b: &str) -> bool {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) = (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) else {
        return false;
    };
    a.iter().any(|(name, value)| b.get(name) == Some(value))
}

fn key_name(call: &Call) -> String {
    call.operation_key
        .clone()
        .unwrap_or_else(|| "(none)".to_owned())
}

/// A call's part in its intention, from the recorded calls alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The intention's first call.
    First,
    /// The previous call of the intention sent again verbatim (the same arguments, byte for
    /// byte), in the same session, with no other request of the session between them: what a
    /// framework's own retry does before the model hears of the failure. A model that repeats
    /// the call word for word without listing tools or calling anything else between looks
    /// the same.
    Resend,
    /// The same key and fields again, after other requests, in another session, or written
    /// anew: a retry that went through the model (or the host).
    Retry,
    /// The same key with fields other than the intention's first call had.
    RetryWithOtherArguments,
    /// A key the intention had not used, for the same fields, before any ticket of it reached
    /// the client: a re-plan that minted a new key.
    Replan,
}

impl Role {
    /// The word the report uses.
    pub fn word(self) -> &'static str {
        match self {
            Role::First => "first",
            Role::Resend => "resend",
            Role::Retry => "retry",
            Role::RetryWithOtherArguments => "retry with other arguments",
            Role::Replan => "re-plan",
        }
    }

    /// The part of `call`, given the calls of its intention before it.
    fn of(call: &Call, earlier: &[&Call]) -> Role {
        let Some(previous) = earlier.last() else {
            return Role::First;
        };
        if !earlier
            .iter()
            .any(|other| other.operation_key == call.operation_key)
        {
            return Role::Replan;
        }
        if earlier
            .first()
            .is_some_and(|first| call.fields != first.fields)
        {
            return Role::RetryWithOtherArguments;
        }
        let next_request = match (previous.request_in_session, call.request_in_session) {
            (Some(before), Some(now)) => now == before + 1,
            _ => false,
        };
        if call.session == previous.session && call.arguments == previous.arguments && next_request
        {
            Role::Resend
        } else {
            Role::Retry
        }
    }
}

/// What became of one call, for the line of the calls a verdict rests on.
fn call_summary(call: &Call, judged: Option<&Judged>) -> String {
    let role = judged.map_or("?", |j| j.role.as_str());
    let ticket = call.ticket_id.as_deref().unwrap_or("none");
    let answer = match call.answer.as_str() {
        "created" => format!("created ticket {ticket}"),
        "replayed" => format!("replayed ticket {ticket}"),
        "" => "no answer yet".to_owned(),
        other => other.to_owned(),
    };
    let reply = match call.fate.as_str() {
        "delivered" => "answered".to_owned(),
        "lost" => "reply lost".to_owned(),
        "in progress" => "answered in_progress".to_owned(),
        "dropped" => "connection dropped".to_owned(),
        delayed => format!("reply {delayed}"),
    };
    let seen = if judged.is_some_and(|j| j.received) {
        if call.ticket_named_ms.is_some() && held(call) {
            format!("received: a later request of its session named ticket {ticket}")
        } else {
            "received".to_owned()
        }
    } else if judged.is_some_and(|j| j.receipt_unknown) {
        format!(
            "receipt unknown: sent late into a session that gave no sign either way (no \
             cancellation, no later request naming ticket {ticket})"
        )
    } else if call.cancelled {
        "not received: the client cancelled it or closed its stream".to_owned()
    } else if left_while_waiting(call) {
        "not received: the client had left its session".to_owned()
    } else if call.fate == "in progress" {
        "the client was told in_progress, not the ticket".to_owned()
    } else {
        "not received".to_owned()
    };
    format!("call {} ({role}): {answer}, {reply}, {seen}", call.number)
}

/// The calls grouped into intentions, in order of their first call, and for each the earlier
/// intention it may be a re-plan of.
fn intentions_of(calls: &[Call]) -> (Vec<Group<'_>>, Vec<Option<usize>>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut replan_of: Vec<Option<usize>> = Vec::new();
    let mut previous: Option<usize> = None;
    for call in calls {
        let key = key_name(call);
        let same_key = if call.operation_key.is_some() {
            groups.iter().position(|group| group.keys.contains(&key))
        } else {
            None
        };
        let joined = same_key.or_else(|| {
            groups.iter().position(|group| {
                !group.resolved_by(call.started_ms)
                    && group.calls.first().is_some_and(|c| c.fields == call.fields)
            })
        });
        let index = match joined {
            Some(index) => index,
            None => {
                let follows = previous.filter(|&index| {
                    let group = &groups[index];
                    group
                        .calls
                        .last()
                        .is_some_and(|last| !reached(last, &group.calls))
                        && !group.resolved_by(call.started_ms)
                        && group
                            .calls
                            .first()
                            .is_some_and(|first| share_a_field(&first.fields, &call.fields))
                });
                groups.push(Group {
                    calls: Vec::new(),
                    keys: Vec::new(),
                });
                replan_of.push(follows);
                groups.len() - 1
            }
        };
        let group = &mut groups[index];
        group.calls.push(call);
        if !group.keys.contains(&key) {
            group.keys.push(key);
        }
        previous = Some(index);
    }
    (groups, replan_of)
}

/// Each call's part in its intention and whether its reply reached the client.
fn judged_calls(groups: &[Group]) -> std::collections::HashMap<u64, Judged> {
    let mut judged: std::collections::HashMap<u64, Judged> = std::collections::HashMap::new();
    for group in groups {
        for (index, call) in group.calls.iter().enumerate() {
            let earlier = &group.calls[..index];
            judged.insert(
                call.number,
                Judged {
                    role: Role::of(call, earlier).word().to_owned(),
                    received: reached(call, &group.calls),
                    receipt_unknown: receipt_unknown(call, &group.calls),
                },
            );
        }
    }
    judged
}

/// Groups `calls` into intentions and judges each; `tickets` are the store's tickets.
pub fn grade(calls: &[Call], tickets: &[StoredTicket], key_source: &str, schedule: &str) -> Report {
    let (groups, replan_of) = intentions_of(calls);
    let mut judged = judged_calls(&groups);
    let intentions: Vec<Intention> = groups
        .iter()
        .zip(&replan_of)
        .enumerate()
        .map(|(index, (group, follows))| judge(index + 1, group, *follows, tickets, &judged))
        .collect();
    let verdicts: Vec<Verdict> = intentions.iter().map(|i| i.verdict).collect();
    let verdict = if verdicts.contains(&Verdict::Fail) {
        Verdict::Fail
    } else if verdicts.contains(&Verdict::Unresolved) {
        Verdict::Unresolved
    } else if verdicts.contains(&Verdict::Pass) {
        Verdict::Pass
    } else {
        Verdict::NotExercised
    };
    let sessions: BTreeSet<&str> = calls.iter().map(|call| call.session.as_str()).collect();
    let clients: BTreeSet<String> = calls.iter().map(|call| call.client.clone()).collect();
    Report {
        key_source: key_source.to_owned(),
        schedule: schedule.to_owned(),
        calls: calls.len(),
        sessions: sessions.len(),
        clients: clients.into_iter().collect(),
        tickets_in_store: tickets.len(),
        intentions_told_apart_by: TOLD_APART_BY.to_owned(),
        intentions,
        verdict,
        recorded: calls
            .iter()
            .map(|call| Call {
                judged: judged.remove(&call.number).unwrap_or_default(),
                ..call.clone()
            })
            .collect(),
        cannot_know: CANNOT_KNOW.map(str::to_owned).to_vec(),
    }
}

fn judge(
    number: usize,
    group: &Group,
    follows: Option<usize>,
    tickets: &[StoredTicket],
    judged: &std::collections::HashMap<u64, Judged>,
) -> Intention {
    let fields = group
        .calls
        .first()
        .map(|call| call.fields.clone())
        .unwrap_or_default();
    let same_arguments = group.calls.iter().all(|call| call.fields == fields);
    let mut created: Vec<String> = Vec::new();
    for call in &group.calls {
        if let (true, Some(id)) = (call.created, &call.ticket_id)
            && !created.contains(id)
        {
            created.push(id.clone());
        }
    }
    let mut intention = Intention {
        number,
        calls: group.calls.iter().map(|call| call.number).collect(),
        keys: group.keys.clone(),
        tickets_with_these_fields: tickets.iter().filter(|t| t.payload == fields).count(),
        fields,
        same_arguments,
        lost: group.calls.iter().filter(|c| c.fate == "lost").count(),
        delayed: group
            .calls
            .iter()
            .filter(|c| c.fate.starts_with("delayed"))
            .count(),
        in_progress: group
            .calls
            .iter()
            .filter(|c| c.fate == "in progress")
            .count(),
        dropped: group.calls.iter().filter(|c| c.fate == "dropped").count(),
        tickets_never_told: created
            .iter()
            .filter(|id| {
                !group.calls.iter().any(|call| {
                    call.ticket_id.as_ref() == Some(*id)
                        && judged
                            .get(&call.number)
                            .is_some_and(|j| j.received || j.receipt_unknown)
                })
            })
            .cloned()
            .collect(),
        tickets: created,
        resolved: group.resolved(),
        possible_replan_of: follows.map(|index| index + 1),
        verdict: Verdict::NotExercised,
        promises: &[],
        reason: String::new(),
        rests_on: Vec::new(),
    };
    (intention.verdict, intention.reason) = verdict(&intention, group);
    intention.rests_on = group
        .calls
        .iter()
        .filter(|call| rests_on(intention.verdict, call, judged.get(&call.number)))
        .map(|call| call_summary(call, judged.get(&call.number)))
        .collect();
    intention.promises =
        crate::contract::promises_of(crate::contract::Checker::Grader, intention.verdict.word());
    intention
}

/// An intention's verdict and its reason, from what its calls did (the first rule that applies).
fn verdict(intention: &Intention, group: &Group) -> (Verdict, String) {
    let (created, keys) = (&intention.tickets, &intention.keys);
    if created.len() > 1 {
        (
            Verdict::Fail,
            format!(
                "duplicate: tickets {} for one intention, made by keys {}",
                created.join(", "),
                keys.join(", ")
            ),
        )
    } else if keys.len() > 1 {
        (
            Verdict::Fail,
            format!(
                "a retry changed the key ({}), so the server could not tell it from a new ticket",
                keys.join(" then ")
            ),
        )
    } else if !intention.resolved {
        // A held reply with a ticket was perhaps read, perhaps not: say so, not "never told".
        let maybe = group
            .calls
            .iter()
            .any(|call| call.ticket_id.is_some() && receipt_unknown(call, &group.calls));
        let (reached, told) = if maybe {
            ("is known to have reached", "may never have been told of it")
        } else {
            ("reached", "was never told of it")
        };
        let ticket = match created.first() {
            Some(id) => format!("ticket {id} exists and the client {told}"),
            None => format!("no ticket {reached} the client"),
        };
        (
            Verdict::Unresolved,
            format!(
                "no answer with a ticket {reached} the client and it did not ask again with its key: {ticket}; {}",
                how_it_stopped(group)
            ),
        )
    } else if intention.lost + intention.delayed + intention.in_progress + intention.dropped == 0 {
        (
            Verdict::NotExercised,
            "no reply of it was lost or late, so its retry was not tested".to_owned(),
        )
    } else if intention.calls.len() == 1 {
        // Resolved by its one call: a held reply, which counts only when acted on by name.
        let ticket = group
            .calls
            .first()
            .and_then(|call| call.ticket_id.as_deref())
            .unwrap_or("none");
        (
            Verdict::Pass,
            format!(
                "the client waited for the late reply instead of sending again: a later request \
                 of its session named ticket {ticket}; one ticket"
            ),
        )
    } else if intention.same_arguments {
        (
            Verdict::Pass,
            "every retry reused the key and the arguments; one ticket".to_owned(),
        )
    } else {
        (
            Verdict::Pass,
            "the key was kept; a retry with other arguments got conflict and wrote nothing; one ticket"
                .to_owned(),
        )
    }
}

/// How the client stopped, for an intention no ticket of which reached it: from its last call.
fn how_it_stopped(group: &Group) -> String {
    let Some(last) = group.calls.last() else {
        return "it sent nothing".to_owned();
    };
    let number = last.number;
    if receipt_unknown(last, &group.calls) {
        let ticket = last.ticket_id.as_deref().unwrap_or("none");
        format!(
            "call {number}'s reply was held back and sent late into its session, which had sent \
             no cancellation; no later request named ticket {ticket}, so whether the client still \
             waited for the reply or had timed out and moved on cannot be known"
        )
    } else if last.cancelled {
        format!(
            "call {number} timed out at the client, which cancelled it or closed its stream: \
             whatever it reported was a failure"
        )
    } else if last.fate == "in progress" {
        format!("call {number} was answered in_progress and the client never asked again")
    } else if last.fate == "dropped" {
        format!(
            "the connection dropped after call {number} and the client never came back with its key"
        )
    } else if left_while_waiting(last) {
        format!("the client left its session while call {number} waited, without a word")
    } else if never_sent(last) {
        // Neither cancelled nor left: the grader stopped first (a signal, its --calls bound).
        format!(
            "call {number} still waited for its reply when the grader was stopped (by a signal, \
             as a host closes a stdio server, or by its --calls bound); the client had not \
             cancelled it or left before"
        )
    } else {
        format!("call {number} got no ticket and the client stopped, without a sign")
    }
}

/// Whether the verdict rests on `call`: a PASS on the calls whose reply was kept from the
/// client and the ones that told it the ticket; a FAIL on the calls that made tickets or
/// brought a new key; an UNRESOLVED on the calls that made a ticket and the last one; a NOT
/// EXERCISED on every call.
fn rests_on(verdict: Verdict, call: &Call, judged: Option<&Judged>) -> bool {
    let role = judged.map_or("", |j| j.role.as_str());
    let received = judged.is_some_and(|j| j.received);
    match verdict {
        Verdict::Pass => !received || call.ticket_id.is_some(),
        Verdict::Fail => call.created || role == Role::Replan.word() || role == "first",
        Verdict::Unresolved | Verdict::NotExercised => true,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "client grader: {} create_ticket call(s) in {} session(s); key source: {}; {}",
            self.calls, self.sessions, self.key_source, self.schedule
        )?;
        writeln!(f, "clients: {}", self.clients.join(", "))?;
        writeln!(f, "intentions told apart {}", self.intentions_told_apart_by)?;
        for intention in &self.intentions {
            writeln!(f, "intention {}: {}", intention.number, intention.fields)?;
            let calls: Vec<String> = intention.calls.iter().map(u64::to_string).collect();
            write!(
                f,
                "  calls: {} (call {}); replies lost: {}, late: {}",
                intention.calls.len(),
                calls.join(", "),
                intention.lost,
                intention.delayed
            )?;
            if intention.in_progress > 0 {
                write!(f, ", answered in_progress: {}", intention.in_progress)?;
            }
            if intention.dropped > 0 {
                write!(f, ", connection dropped: {}", intention.dropped)?;
            }
            writeln!(f)?;
            let keys: Vec<String> = intention.keys.iter().map(|k| format!("{k:?}")).collect();
            writeln!(
                f,
                "  keys: {}; arguments: {}",
                keys.join(", "),
                if intention.same_arguments {
                    "the same on every call"
                } else {
                    "changed"
                }
            )?;
            let tickets = if intention.tickets.is_empty() {
                "none".to_owned()
            } else {
                intention.tickets.join(", ")
            };
            writeln!(
                f,
                "  tickets created: {} ({tickets}); tickets with these fields in the store: {}",
                intention.tickets.len(),
                intention.tickets_with_these_fields
            )?;
            if let Some(earlier) = intention.possible_replan_of {
                writeln!(
                    f,
                    "  began right after intention {earlier} went unanswered: possibly its re-plan"
                )?;
            }
            if !intention.tickets_never_told.is_empty() {
                writeln!(
                    f,
                    "  tickets the client was never told of: {}",
                    intention.tickets_never_told.join(", ")
                )?;
            }
            writeln!(
                f,
                "  verdict: {} {}: {}",
                intention.verdict.word(),
                crate::contract::label(crate::contract::Checker::Grader, intention.verdict.word()),
                intention.reason
            )?;
            for call in &intention.rests_on {
                writeln!(f, "    rests on {call}")?;
            }
        }
        writeln!(f, "tickets in the store: {}", self.tickets_in_store)?;
        writeln!(f, "verdict: {}", self.verdict.word())?;
        writeln!(f, "what this run cannot know:")?;
        for line in &self.cannot_know {
            writeln!(f, "- {line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        number: u64,
        key: Option<&str>,
        fields: &str,
        fate: &str,
        ticket: u64,
        created: bool,
    ) -> Call {
        Call {
            number,
            session: "s".to_owned(),
            client: "c".to_owned(),
            request_id: number.to_string(),
            operation_key: key.map(str::to_owned),
            arguments: format!("{key:?} {fields}"),
            fields: fields.to_owned(),
            // One call a second, each answered ten milliseconds after it arrived.
            started_ms: number * 1000 - 10,
            fate: fate.to_owned(),
            answer: if created { "created" } else { "replayed" }.to_owned(),
            ticket_id: Some(ticket.to_string()),
            created,
            reached_client: fate != "lost",
            cancelled: fate == "lost",
            settled_ms: Some(number * 1000),
            left_ms: None,
            request_in_session: Some(number),
            ticket_named_ms: None,
            judged: Judged::default(),
        }
    }

    /// A call at `started` whose reply was held and sent at `sent`.
    fn held(
        number: u64,
        key: &str,
        fields: &str,
        (started, sent): (u64, u64),
        ticket: u64,
    ) -> Call {
        Call {
            started_ms: started,
            settled_ms: Some(sent),
            ..call(number, Some(key), fields, "delayed 4000ms", ticket, true)
        }
    }

    #[test]
    fn a_new_key_with_the_same_fields_while_a_reply_is_held_is_a_retry_of_that_intention() {
        // The client gave up on call 1 at its own timeout and re-planned with a new key while
        // the grader still held call 1's reply: one intention, two tickets.
        let fields = "{\"title\":\"x\"}";
        let calls = [
            held(1, "a", fields, (1000, 5000), 1),
            Call {
                started_ms: 3000,
                settled_ms: Some(3010),
                ..call(2, Some("b"), fields, "delivered", 2, true)
            },
        ];
        let report = grade(&calls, &[], "host", "");
        assert_eq!(report.intentions.len(), 1, "{report}");
        assert_eq!(report.intentions[0].verdict, Verdict::Fail);
        assert_eq!(report.intentions[0].tickets, ["1", "2"]);
    }

    #[test]
    fn a_held_reply_sent_after_the_client_left_or_called_again_did_not_reach_it() {
        let fields = "{\"title\":\"x\"}";
        // Left (stdin closed, DELETE) before the reply went out, and never asked again.
        let left = [Call {
            left_ms: Some(4000),
            ..held(1, "a", fields, (1000, 5000), 1)
        }];
        let report = grade(&left, &[], "host", "");
        assert_eq!(
            report.intentions[0].verdict,
            Verdict::Unresolved,
            "{report}"
        );
        assert!(!report.intentions[0].resolved);
        // Its retry with the same key came before the held reply: that retry, not the held
        // reply, is what told the client.
        let again = [
            held(1, "a", fields, (1000, 5000), 1),
            Call {
                started_ms: 3000,
                settled_ms: Some(3010),
                ..call(2, Some("a"), fields, "delivered", 1, false)
            },
        ];
        let report = grade(&again, &[], "host", "");
        assert_eq!(report.intentions[0].verdict, Verdict::Pass, "{report}");
        assert!(
            report.intentions[0]
                .reason
                .starts_with("every retry reused the key"),
            "{report}"
        );
    }

    #[test]
    fn a_held_reply_sent_without_a_sign_is_received_only_when_a_later_request_names_its_ticket() {
        // Issue 46: a client that times out without a cancellation, its session left open, is
        // indistinguishable on the wire from one that waits; the late reply it may never have
        // read was reported as "the client waited" and PASS.
        let fields = "{\"title\":\"x\"}";
        let silent = [held(1, "a", fields, (1000, 5000), 1)];
        let report = grade(&silent, &[], "host", "");
        let intention = &report.intentions[0];
        assert_eq!(intention.verdict, Verdict::Unresolved, "{report}");
        assert!(
            !intention.reason.contains("waited for the late reply"),
            "{report}"
        );
        assert!(
            intention.reason.starts_with(
                "no answer with a ticket is known to have reached the client and it did not ask \
                 again with its key: ticket 1 exists and the client may never have been told of it; \
                 call 1's reply was held back and sent late"
            ),
            "{report}"
        );
        assert!(intention.reason.ends_with("cannot be known"), "{report}");
        assert!(intention.tickets_never_told.is_empty(), "{report}");
        assert!(report.recorded[0].judged.receipt_unknown);
        assert!(!report.recorded[0].judged.received);
        // A later request of the session named the ticket: the client read the reply.
        let named = [Call {
            ticket_named_ms: Some(6000),
            ..held(1, "a", fields, (1000, 5000), 1)
        }];
        let report = grade(&named, &[], "host", "");
        let intention = &report.intentions[0];
        assert_eq!(intention.verdict, Verdict::Pass, "{report}");
        assert_eq!(
            intention.reason,
            "the client waited for the late reply instead of sending again: a later request of \
             its session named ticket 1; one ticket"
        );
        assert!(report.recorded[0].judged.received);
        assert!(!report.recorded[0].judged.receipt_unknown);
    }

    #[test]
    fn a_lost_reply_is_said_to_end_by_what_the_grader_saw_first() {
        let lost = call(1, Some("a"), "{\"title\":\"x\"}", "lost", 1, true);
        let reason = |call: Call| grade(&[call], &[], "host", "").intentions[0].reason.clone();
        // The client cancelled it.
        assert!(
            reason(lost.clone()).ends_with("call 1 timed out at the client, which cancelled it or closed its stream: whatever it reported was a failure"),
        );
        // The client closed stdin after the reply was lost: a lost reply waits until the
        // client gives a sign, however long after its loss that comes.
        let left = Call {
            cancelled: false,
            left_ms: Some(60_000),
            ..lost.clone()
        };
        assert!(
            reason(left)
                .ends_with("the client left its session while call 1 waited, without a word")
        );
        // Neither: the grader stopped first (a signal, its --calls bound).
        let stopped = Call {
            cancelled: false,
            ..lost.clone()
        };
        assert!(reason(stopped).ends_with(
            "call 1 still waited for its reply when the grader was stopped (by a signal, as a host \
             closes a stdio server, or by its --calls bound); the client had not cancelled it or \
             left before"
        ));
        // A held reply the grader never sent, likewise.
        let held = Call {
            cancelled: false,
            reached_client: false,
            ..held(1, "a", "{\"title\":\"x\"}", (1000, 5000), 1)
        };
        assert!(reason(held).ends_with("the client had not cancelled it or left before"));
        // A reply that went out without a ticket: the client stopped after it.
        let refused = Call {
            ticket_id: None,
            answer: "error conflict".to_owned(),
            created: false,
            ..call(1, Some("a"), "{\"title\":\"x\"}", "delivered", 1, false)
        };
        assert!(
            reason(refused)
                .ends_with("call 1 got no ticket and the client stopped, without a sign")
        );
    }

    #[test]
    fn an_unrelated_intention_after_an_unanswered_one_is_not_called_its_replan() {
        let calls = [
            call(
                1,
                Some("a"),
                "{\"priority\":\"high\",\"title\":\"x\"}",
                "lost",
                1,
                true,
            ),
            call(
                2,
                Some("b"),
                "{\"priority\":\"low\",\"title\":\"y\"}",
                "delivered",
                2,
                true,
            ),
        ];
        let report = grade(&calls, &[], "host", "");
        assert_eq!(report.intentions[1].possible_replan_of, None, "{report}");
    }

    #[test]
    fn a_new_key_after_a_lost_reply_is_the_same_intention_and_a_duplicate() {
        let calls = [
            call(1, Some("a"), "{\"title\":\"x\"}", "lost", 1, true),
            call(2, Some("b"), "{\"title\":\"x\"}", "delivered", 2, true),
        ];
        let report = grade(&calls, &[], "host", "");
        assert_eq!(report.intentions.len(), 1);
        assert_eq!(report.intentions[0].verdict, Verdict::Fail);
        assert_eq!(report.intentions[0].tickets, ["1", "2"]);
        assert_eq!(report.verdict, Verdict::Fail);
    }

    #[test]
    fn the_same_fields_after_a_delivered_ticket_are_a_new_intention() {
        let calls = [
            call(1, Some("a"), "{\"title\":\"x\"}", "lost", 1, true),
            call(2, Some("a"), "{\"title\":\"x\"}", "delivered", 1, false),
            call(3, Some("b"), "{\"title\":\"x\"}", "delivered", 2, true),
        ];
        let report = grade(&calls, &[], "host", "");
        let verdicts: Vec<Verdict> = report.intentions.iter().map(|i| i.verdict).collect();
        assert_eq!(verdicts, [Verdict::Pass, Verdict::NotExercised]);
        assert_eq!(report.verdict, Verdict::Pass);
    }

    #[test]
    fn a_lost_reply_never_retried_is_unresolved_and_the_next_call_a_possible_replan() {
        let calls = [
            call(
                1,
                Some("a"),
                "{\"priority\":\"high\",\"title\":\"x\"}",
                "lost",
                1,
                true,
            ),
            call(
                2,
                Some("b"),
                "{\"priority\":\"high\",\"title\":\"y\"}",
                "delivered",
                2,
                true,
            ),
        ];
        let report = grade(&calls, &[], "host", "");
        assert_eq!(report.intentions[0].verdict, Verdict::Unresolved);
        assert_eq!(report.intentions[1].possible_replan_of, Some(1));
        assert_eq!(report.verdict, Verdict::Unresolved);
    }

    #[test]
    fn a_repeat_with_nothing_between_is_a_resend_and_one_after_other_requests_a_retry() {
        let fields = "{\"title\":\"x\"}";
        let same = |number, request| Call {
            arguments: "{\"operation_key\":\"a\",\"title\":\"x\"}".to_owned(),
            request_in_session: Some(request),
            ..call(number, Some("a"), fields, "lost", 1, number == 1)
        };
        let roles = |calls: &[Call]| -> Vec<String> {
            grade(calls, &[], "host", "")
                .recorded
                .into_iter()
                .map(|call| call.judged.role)
                .collect()
        };
        // Requests 1 and 2 of one session: nothing between them.
        assert_eq!(roles(&[same(1, 1), same(2, 2)]), ["first", "resend"]);
        // A tools/list (request 2) between them: the model had a turn.
        assert_eq!(roles(&[same(1, 1), same(2, 3)]), ["first", "retry"]);
        // Another session: a reconnect, then the call again.
        let other = Call {
            session: "t".to_owned(),
            ..same(2, 2)
        };
        assert_eq!(roles(&[same(1, 1), other]), ["first", "retry"]);
        // The same key and fields written anew (another order of the arguments).
        let rewritten = Call {
            arguments: "{\"title\":\"x\",\"operation_key\":\"a\"}".to_owned(),
            ..same(2, 2)
        };
        assert_eq!(roles(&[same(1, 1), rewritten]), ["first", "retry"]);
        // A new key for the same fields, and the same key with other fields.
        let replan = call(2, Some("b"), fields, "delivered", 2, true);
        assert_eq!(roles(&[same(1, 1), replan]), ["first", "re-plan"]);
        let reworded = call(2, Some("a"), "{\"title\":\"y\"}", "delivered", 1, false);
        // The approved arguments again after the reworded call: a retry, not other arguments.
        let approved = call(3, Some("a"), fields, "delivered", 1, false);
        assert_eq!(
            roles(&[same(1, 1), reworded, approved]),
            ["first", "retry with other arguments", "retry"]
        );
    }

    #[test]
    fn a_verdict_names_its_calls_and_the_tickets_nobody_was_told_of() {
        let fields = "{\"title\":\"x\"}";
        let calls = [
            call(1, Some("a"), fields, "lost", 1, true),
            call(2, Some("b"), fields, "delivered", 2, true),
        ];
        let report = grade(&calls, &[], "host", "");
        let intention = &report.intentions[0];
        assert_eq!(intention.verdict, Verdict::Fail);
        assert_eq!(intention.tickets_never_told, ["1"]);
        assert_eq!(
            intention.rests_on,
            [
                "call 1 (first): created ticket 1, reply lost, not received: the client cancelled it or closed its stream",
                "call 2 (re-plan): created ticket 2, answered, received",
            ]
        );
        assert!(report.recorded[1].judged.received);
        assert!(!report.recorded[0].judged.received);
        // Given up after its timeout: the report says how it stopped.
        let report = grade(&calls[..1], &[], "host", "");
        assert!(
            report.intentions[0]
                .reason
                .ends_with("call 1 timed out at the client, which cancelled it or closed its stream: whatever it reported was a failure"),
            "{report}"
        );
        assert!(
            report
                .to_string()
                .contains("tickets the client was never told of: 1")
        );
    }
}
