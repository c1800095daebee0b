//! The checker: the contract's invariants, tested over one history and the store it left behind.
//!
//! Callers are judged by what they were told, the store by what it holds. Every ticket carries its
//! intent's tag in its payload, so the checker can trace each ticket back to the intent (and so the
//! key) that asked for it, whatever the tool did with the key on its way.

use std::collections::BTreeMap;
use std::fmt;

use crate::payload::Payload;
use crate::tool::TicketId;

use super::history::{CallResult, History, IntentEnd, What};
use super::subject::TicketRow;

/// Which invariant a violation breaks, most serious first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// More than one ticket for one key while its record is retained.
    DuplicateTicket,
    /// Two successes for one key carried different ticket identifiers.
    DivergentSuccess,
    /// A caller was shown a ticket or record of another scope.
    CrossScope,
    /// A payload conflict changed the original ticket or record.
    ConflictChangedOriginal,
    /// A retry with the same payload was rejected as a conflict.
    SpuriousConflict,
    /// A call with a changed payload under a used key was told it succeeded with the ticket made
    /// for the other payload, instead of being rejected.
    AcceptedChangedPayload,
    /// A ticket without its record, or a record without its ticket.
    Unpaired,
    /// An uncertain outcome neither resolved by a retry with the same key nor marked for review.
    Unresolved,
    /// A ticket that no saved intent asked for.
    UnexpectedTicket,
}

impl ViolationKind {
    /// A short name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::DuplicateTicket => "duplicate ticket",
            ViolationKind::DivergentSuccess => "divergent success",
            ViolationKind::CrossScope => "visible across scopes",
            ViolationKind::ConflictChangedOriginal => "conflict changed the original",
            ViolationKind::SpuriousConflict => "same payload rejected as a conflict",
            ViolationKind::AcceptedChangedPayload => "changed payload accepted",
            ViolationKind::Unpaired => "ticket and record not paired",
            ViolationKind::Unresolved => "unknown outcome left unresolved",
            ViolationKind::UnexpectedTicket => "ticket nobody asked for",
        }
    }
}

/// One broken invariant, with what showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub kind: ViolationKind,
    /// What the checker saw, naming callers, keys and tickets.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = crate::contract::label(crate::contract::Checker::Simulator, self.kind.name());
        write!(f, "{} {ids}: {}", self.kind.name(), self.detail)
    }
}

/// What the checker noticed that is allowed: a late retry that created a second ticket because
/// the record had been pruned within the contract.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allowed {
    /// Keys with a new ticket after their record was legitimately pruned: the retention
    /// boundary.
    pub retention_boundary: usize,
}

/// The checker's findings on one history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Broken invariants, most serious first.
    pub violations: Vec<Violation>,
    /// Allowed outcomes worth counting.
    pub allowed: Allowed,
}

/// One key of one caller, and everything that happened under it.
#[derive(Default)]
struct KeyLog<'h> {
    /// (event index, intent, result) of each finished call.
    calls: Vec<(usize, usize, &'h CallResult)>,
    /// (event index, idle ticks, watermark) of each deletion of the key's record.
    prunes: Vec<(usize, u64, TicketId)>,
    tickets: Vec<&'h TicketRow>,
}

// ANCHOR: check
/// Checks every invariant over `history`.
pub fn check(history: &History) -> Findings {
    let mut findings = Findings::default();
    let retention = history.plan.retention;
    let by_tag: BTreeMap<String, usize> = history
        .intents
        .iter()
        .enumerate()
        .map(|(i, intent)| (intent.tag(), i))
        .collect();
    let mut keys: BTreeMap<(usize, &str), KeyLog<'_>> = BTreeMap::new();
    for (at, event) in history.events.iter().enumerate() {
        match &event.what {
            What::Call { intent, result, .. } if !matches!(result, CallResult::Pending(_)) => {
                let info = &history.intents[*intent];
                keys.entry((info.caller, &info.key))
                    .or_default()
                    .calls
                    .push((at, *intent, result));
            }
            What::Pruned {
                caller,
                key,
                idle,
                watermark,
            } => {
                keys.entry((*caller, key))
                    .or_default()
                    .prunes
                    .push((at, *idle, watermark.clone()))
            }
            _ => {}
        }
    }
    let mut owner: BTreeMap<TicketId, usize> = BTreeMap::new();
    for ticket in &history.end.tickets {
        let intent = tag_of(&ticket.payload).and_then(|tag| by_tag.get(&tag).copied());
        let Some(intent) = intent else {
            findings.violations.push(violation(
                ViolationKind::UnexpectedTicket,
                format!("ticket {} belongs to no intent of this history", ticket.id),
            ));
            continue;
        };
        let info = &history.intents[intent];
        owner.insert(ticket.id.clone(), intent);
        if info.end == IntentEnd::NeverSaved {
            findings.violations.push(violation(
                ViolationKind::UnexpectedTicket,
                format!(
                    "ticket {} is for {}, which was never saved and so never sent",
                    ticket.id,
                    info.tag()
                ),
            ));
        }
        if ticket.caller != info.caller_name {
            findings.violations.push(violation(
                ViolationKind::CrossScope,
                format!(
                    "ticket {} for {} is stored under caller {}",
                    ticket.id,
                    info.tag(),
                    ticket.caller
                ),
            ));
        }
        keys.entry((info.caller, &info.key))
            .or_default()
            .tickets
            .push(ticket);
    }
    for ((caller, key), log) in &keys {
        let who = format!("key {key} of {}", history.plan.callers[*caller].name);
        check_key(history, &who, log, &owner, retention, &mut findings);
    }
    check_pairs(history, &keys, &mut findings);
    check_resolution(history, &mut findings);
    findings.violations.sort_by_key(|v| v.kind);
    findings
}
// ANCHOR_END: check

fn violation(kind: ViolationKind, detail: String) -> Violation {
    Violation { kind, detail }
}

/// The `intent` field of a payload, `caller/intent`.
fn tag_of(payload: &str) -> Option<String> {
    let payload = Payload::from_json_text(payload).ok()?;
    Some(payload.as_object().get("intent")?.as_str()?.to_owned())
}

fn canonical(payload: &str) -> String {
    Payload::from_json_text(payload)
        .map_or_else(|_| payload.to_owned(), |p| p.canonical().to_owned())
}

// ANCHOR: check_key
/// One key: tickets and answers within each retention epoch. An epoch ends when the record is
/// pruned within the contract (idle at least the promised retention); only then may the next
/// call create a new ticket.
fn check_key(
    history: &History,
    who: &str,
    log: &KeyLog<'_>,
    owner: &BTreeMap<TicketId, usize>,
    retention: u64,
    findings: &mut Findings,
) {
    // ANCHOR: retention_epochs
    // A prune after the promised retention starts a new epoch, where
    // a new ticket for the key is allowed; an earlier prune does not.
    let boundaries: Vec<&(usize, u64, TicketId)> = log
        .prunes
        .iter()
        .filter(|(_, idle, _)| *idle >= retention)
        .collect();
    let epoch_of_ticket =
        |id: &TicketId| boundaries.iter().filter(|(_, _, mark)| id > mark).count();
    let epoch_of_event = |at: usize| boundaries.iter().filter(|(e, _, _)| at > *e).count();
    // ANCHOR_END: retention_epochs
    for epoch in 0..=boundaries.len() {
        let tickets: Vec<&TicketRow> = log
            .tickets
            .iter()
            .copied()
            .filter(|t| epoch_of_ticket(&t.id) == epoch)
            .collect();
        if epoch > 0 && !tickets.is_empty() {
            findings.allowed.retention_boundary += 1;
        }
        if tickets.len() > 1 {
            duplicate_tickets(who, log, &tickets, retention, findings);
        }
        let calls = log
            .calls
            .iter()
            .filter(|(at, _, _)| epoch_of_event(*at) == epoch);
        let mut told: Vec<TicketId> = Vec::new();
        for &(_, intent, result) in calls {
            let call = Call {
                history,
                who,
                log,
                tickets: &tickets,
                intent,
            };
            if let Some(id) = call.check(result, owner, findings)
                && !told.contains(&id)
            {
                told.push(id);
            }
        }
        if told.len() > 1 {
            let ids: Vec<String> = told.iter().map(ToString::to_string).collect();
            findings.violations.push(violation(
                ViolationKind::DivergentSuccess,
                format!("callers of {who} were told tickets {}", ids.join(" and ")),
            ));
        }
    }
}

/// More than one ticket for a key within one epoch, with the early prunes that explain it.
fn duplicate_tickets(
    who: &str,
    log: &KeyLog<'_>,
    tickets: &[&TicketRow],
    retention: u64,
    findings: &mut Findings,
) {
    let ids: Vec<String> = tickets.iter().map(|t| t.id.to_string()).collect();
    let early: Vec<String> = log
        .prunes
        .iter()
        .filter(|(_, idle, _)| *idle < retention)
        .map(|(_, idle, _)| format!("{idle}"))
        .collect();
    let why = if early.is_empty() {
        String::new()
    } else {
        format!(
            "; its record was pruned after {} ticks idle, before the promised {retention}",
            early.join(", ")
        )
    };
    findings.violations.push(violation(
        ViolationKind::DuplicateTicket,
        format!(
            "{who} has tickets {} while its record is retained{why}",
            ids.join(" and ")
        ),
    ));
}

/// One answered call of a key, with the epoch's tickets it is judged against.
struct Call<'a> {
    history: &'a History,
    who: &'a str,
    log: &'a KeyLog<'a>,
    tickets: &'a [&'a TicketRow],
    intent: usize,
}

impl Call<'_> {
    /// The violations one answer shows; returns the ticket it was told, if any.
    fn check(
        &self,
        result: &CallResult,
        owner: &BTreeMap<TicketId, usize>,
        findings: &mut Findings,
    ) -> Option<TicketId> {
        let id = result.ticket();
        if let Some(id) = &id {
            self.success(id, owner, findings);
        }
        if *result == CallResult::Conflict {
            self.conflict(findings);
        }
        id
    }

    /// A success must carry a ticket of the caller's own scope, made for its payload.
    fn success(&self, id: &TicketId, owner: &BTreeMap<TicketId, usize>, findings: &mut Findings) {
        let (history, who) = (self.history, self.who);
        let info = &history.intents[self.intent];
        if let Some(&other) = owner.get(id)
            && history.intents[other].caller != info.caller
        {
            findings.violations.push(violation(
                ViolationKind::CrossScope,
                format!(
                    "{} was told ticket {id}, which belongs to {}",
                    info.tag(),
                    history.intents[other].tag()
                ),
            ));
        }
        // A success carries the ticket made for this payload; one made for another
        // payload means the changed payload was accepted instead of rejected.
        if let Some(made) = self.log.tickets.iter().find(|t| t.id == *id)
            && canonical(&made.payload) != info.payload
        {
            findings.violations.push(violation(
                ViolationKind::AcceptedChangedPayload,
                format!(
                    "{} sent another payload under {who} and was told ticket {id}, made \
                     for the first payload",
                    info.tag()
                ),
            ));
        }
    }

    /// A conflict is wrong for the caller's own payload, and the rejected payload must not
    /// have been stored.
    fn conflict(&self, findings: &mut Findings) {
        let (info, who) = (&self.history.intents[self.intent], self.who);
        let original = self.tickets.first().map(|t| canonical(&t.payload));
        if original.as_deref() == Some(info.payload.as_str()) {
            findings.violations.push(violation(
                ViolationKind::SpuriousConflict,
                format!(
                    "{} retried {who} with its own payload and was told it conflicts",
                    info.tag()
                ),
            ));
        }
        if self
            .tickets
            .iter()
            .skip(1)
            .any(|t| canonical(&t.payload) == info.payload)
        {
            findings.violations.push(violation(
                ViolationKind::ConflictChangedOriginal,
                format!("{}'s rejected payload was stored under {who}", info.tag()),
            ));
        }
    }
}
// ANCHOR_END: check_key

/// No ticket without its record (unless the record was pruned), no record without its ticket,
/// and a record always holds its ticket's payload.
fn check_pairs(
    history: &History,
    keys: &BTreeMap<(usize, &str), KeyLog<'_>>,
    findings: &mut Findings,
) {
    // A tool that keeps no durable records at all is judged by what its callers see.
    let Some(records) = &history.end.records else {
        return;
    };
    let tickets: BTreeMap<TicketId, &TicketRow> = history
        .end
        .tickets
        .iter()
        .map(|t| (t.id.clone(), t))
        .collect();
    for record in records {
        match tickets.get(&record.ticket_id) {
            None => findings.violations.push(violation(
                ViolationKind::Unpaired,
                format!(
                    "the record of key {} of {} names ticket {}, which does not exist",
                    record.key, record.caller, record.ticket_id
                ),
            )),
            Some(ticket) if ticket.caller != record.caller => {
                findings.violations.push(violation(
                    ViolationKind::CrossScope,
                    format!(
                        "the record of key {} of {} names ticket {} of {}",
                        record.key, record.caller, ticket.id, ticket.caller
                    ),
                ));
            }
            Some(ticket) if canonical(&ticket.payload) != canonical(&record.payload) => {
                findings.violations.push(violation(
                    ViolationKind::ConflictChangedOriginal,
                    format!(
                        "the record of key {} of {} holds another payload than ticket {}",
                        record.key, record.caller, ticket.id
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    for log in keys.values() {
        for ticket in &log.tickets {
            let pruned_since = log.prunes.iter().any(|(_, _, mark)| ticket.id <= *mark);
            if !pruned_since && !records.iter().any(|r| r.ticket_id == ticket.id) {
                findings.violations.push(violation(
                    ViolationKind::Unpaired,
                    format!("ticket {} has no operation record", ticket.id),
                ));
            }
        }
    }
}

// ANCHOR: check_resolution
/// Every saved intent ends answered or marked for review; an uncertain call is followed by a
/// retry with the same key (which the scheduler guarantees by construction: it only ever sends the
/// saved key) or by the review mark.
fn check_resolution(history: &History, findings: &mut Findings) {
    for (index, intent) in history.intents.iter().enumerate() {
        if intent.end == IntentEnd::Open {
            findings.violations.push(violation(
                ViolationKind::Unresolved,
                format!(
                    "{} was saved but never answered nor marked for review",
                    intent.tag()
                ),
            ));
            continue;
        }
        let calls: Vec<&CallResult> = history
            .events
            .iter()
            .filter_map(|e| match &e.what {
                What::Call { intent, result, .. } if *intent == index => Some(result),
                _ => None,
            })
            .filter(|r| !matches!(r, CallResult::Pending(_)))
            .collect();
        let last_uncertain = calls.iter().rposition(|r| r.is_uncertain());
        let answered_after = last_uncertain.is_some_and(|at| {
            calls[at + 1..]
                .iter()
                .any(|r| r.ticket().is_some() || **r == CallResult::Conflict)
        });
        let reviewed = matches!(intent.end, IntentEnd::Review(_));
        let done_elsewhere = matches!(intent.end, IntentEnd::Done(_));
        if last_uncertain.is_some() && !answered_after && !reviewed && !done_elsewhere {
            findings.violations.push(violation(
                ViolationKind::Unresolved,
                format!(
                    "{}'s last call had an unknown outcome and nothing followed",
                    intent.tag()
                ),
            ));
        }
    }
}
// ANCHOR_END: check_resolution
