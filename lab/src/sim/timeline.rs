//! A history as a short timeline, one line per step, for people.

use std::fmt::Write as _;

use crate::payload::Payload;
use crate::tool::Fault;

use super::check::Findings;
use super::history::{CallResult, History, What};
use super::tally::step_name;

// ANCHOR: timeline
/// The history as numbered lines: time, who, what happened; then what the store held at the end
/// and what the checker found.
pub fn timeline(history: &History, findings: &Findings) -> String {
    let mut out = String::new();
    for event in &history.events {
        let _ = writeln!(out, "{:>4}  {}", event.time, describe(history, &event.what));
    }
    let tickets: Vec<String> = history
        .end
        .tickets
        .iter()
        .map(|t| {
            let tag = Payload::from_json_text(&t.payload)
                .ok()
                .and_then(|p| p.as_object().get("intent")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("{} ({tag})", t.id)
        })
        .collect();
    let _ = writeln!(out, "end   tickets: {}", list(&tickets));
    match &history.end.records {
        Some(records) => {
            let records: Vec<String> = records
                .iter()
                .map(|r| format!("{} of {} -> ticket {}", r.key, r.caller, r.ticket_id))
                .collect();
            let _ = writeln!(out, "      records: {}", list(&records));
        }
        None => {
            let _ = writeln!(out, "      records: none kept in the store");
        }
    }
    if findings.violations.is_empty() {
        let _ = writeln!(out, "no violation");
    }
    for violation in &findings.violations {
        let _ = writeln!(out, "VIOLATION {violation}");
    }
    out
}
// ANCHOR_END: timeline

pub(crate) fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

fn describe(history: &History, what: &What) -> String {
    let intent = |i: usize| &history.intents[i];
    match what {
        What::Received { intent: i } => {
            format!("{}  receives {}", intent(*i).caller_name, intent(*i).name)
        }
        What::Saved { intent: i } => {
            let info = intent(*i);
            let reuse = info
                .reuses
                .as_ref()
                .map(|r| format!(" (the key of {r}, with another payload)"))
                .unwrap_or_default();
            format!(
                "{}  saves {} with key {}{reuse}",
                info.caller_name, info.name, info.key
            )
        }
        What::Call {
            intent: i,
            lane,
            attempt,
            fault,
            text,
            result,
        } => {
            let info = intent(*i);
            let order = Payload::from_json_text(text)
                .ok()
                .filter(|p| p.canonical() != text)
                .map(|_| format!(", payload text {text}"))
                .unwrap_or_default();
            format!(
                "{}  create {} for {} (dispatch {lane}, attempt {attempt}{}{order}) -> {}",
                info.caller_name,
                info.key,
                info.name,
                fault_label(*fault),
                result_label(result)
            )
        }
        What::Reviewed { intent: i, reason } => {
            format!(
                "{}  marks {} for review: {reason}",
                intent(*i).caller_name,
                intent(*i).name
            )
        }
        What::Crashed { caller, lost } => {
            let name = &history.plan.callers[*caller].name;
            if lost.is_empty() {
                format!("{name}  crashes")
            } else {
                let lost: Vec<&str> = lost.iter().map(|&i| intent(i).name.as_str()).collect();
                format!(
                    "{name}  crashes; {} was never saved and is lost",
                    lost.join(", ")
                )
            }
        }
        What::Restarted { caller, resumed } => {
            let name = &history.plan.callers[*caller].name;
            if resumed.is_empty() {
                format!("{name}  restarts; nothing to resume")
            } else {
                let resumed: Vec<String> = resumed
                    .iter()
                    .map(|&i| format!("{} (key {})", intent(i).name, intent(i).key))
                    .collect();
                format!("{name}  restarts and resumes {}", resumed.join(", "))
            }
        }
        What::Pruned {
            caller, key, idle, ..
        } => format!(
            "retention job deletes the record of key {key} of {} ({idle} ticks after its last call)",
            history.plan.callers[*caller].name
        ),
    }
}

fn fault_label(fault: Fault) -> String {
    match fault {
        Fault::LoseReply => ", reply lost".to_owned(),
        Fault::BeforeCommit => ", fails before commit".to_owned(),
        Fault::FailAt(step) => format!(", fails at {}", step_name(step)),
        _ => String::new(),
    }
}

pub(crate) fn result_label(result: &CallResult) -> String {
    match result {
        CallResult::Created(id) => format!("created ticket {id}"),
        CallResult::Replayed(id) => format!("replayed ticket {id}"),
        CallResult::Conflict => "payload conflict".to_owned(),
        CallResult::Unknown => "outcome unknown".to_owned(),
        CallResult::Failed(why) => format!("failed: {why}"),
        CallResult::Pending(did) => did.clone(),
        CallResult::Abandoned => "abandoned by the crash".to_owned(),
    }
}
