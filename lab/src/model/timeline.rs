//! A counterexample as the simulator prints a history: one numbered line per step, then what the
//! store and the runners' files hold at the end, then the violation. Each step is also a
//! [`Moment`] between lanes, for the book to draw.

use std::fmt::Write as _;

use crate::sim::CallResult;
use crate::sim::timeline::{list, result_label};
use crate::tool::TicketId;

use super::protocol::{
    Action, FINAL_ANSWER, INTENTS, Message, ONE_EFFECT, ORIGINAL_EFFECT, OWN_PAYLOAD, Process,
    Protocol, REJECTED_CHANGES_NOTHING, Row, RowState, State, UNKNOWN_IS_NOT_NOTHING, tag,
};
use super::service::{Answer, Request};

/// Who acts in a moment of a drawn counterexample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The runner of intent `0`.
    Runner(u8),
    /// The network between the runners and the service.
    Network,
    /// The service and its database.
    Service,
}

/// How a moment is marked when drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A ticket and its record were committed.
    Commit,
    /// A record was found and replayed.
    Replay,
    /// Something was lost, refused, rejected, crashed or deleted.
    Loss,
    /// Anything else.
    Plain,
}

/// One step of a counterexample, for a drawing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moment {
    /// Who acts.
    pub from: Lane,
    /// Who receives, or `None` when the actor acts alone.
    pub to: Option<Lane>,
    /// The step, in the timeline's words.
    pub text: String,
    /// How to mark it.
    pub mark: Mark,
    /// The tickets the service holds after the step.
    pub tickets: String,
}

fn caller(intent: u8) -> String {
    format!("c{}", INTENTS[usize::from(intent)].scope + 1)
}

fn name(intent: u8) -> &'static str {
    INTENTS[usize::from(intent)].name
}

fn result(answer: Answer) -> CallResult {
    match answer {
        Answer::Created(id) => CallResult::Created(TicketId::from(i64::from(id))),
        Answer::Replayed(id) => CallResult::Replayed(TicketId::from(i64::from(id))),
        Answer::Conflict => CallResult::Conflict,
        Answer::Expired => CallResult::Failed("key expired (410)".to_owned()),
    }
}

fn spelled(request: &Request) -> &'static str {
    if request.text.spelling == 0 {
        ""
    } else {
        ", payload text in another key order"
    }
}

fn request_of(message: &Message) -> String {
    match message {
        Message::Request {
            from,
            attempt,
            request,
        } => format!(
            "the request of {} for {} (attempt {attempt}, key {})",
            caller(*from),
            name(*from),
            request.key
        ),
        Message::Reply {
            to,
            attempt,
            answer,
        } => format!(
            "the reply to {} for {} (attempt {attempt}: {})",
            caller(*to),
            name(*to),
            result_label(&result(*answer))
        ),
    }
}

/// What a run start did, after a save, a restart or a rerun.
fn run_start(before: &State, after: &State, i: u8) -> String {
    let me = &after.runners[usize::from(i)];
    match (me.process, me.row.map(|r| r.state)) {
        (Process::Exited, Some(RowState::Held)) => {
            "; the service is unreachable: held, nothing sent (\"nothing took effect\")".to_owned()
        }
        (Process::Done, Some(RowState::Review)) if before.runners[usize::from(i)].row.is_some() => {
            "; the service is unreachable after a send that may have acted: needs review".to_owned()
        }
        (Process::Ready { .. }, _) if before.runners[usize::from(i)].row.is_some() => {
            format!(" and resumes {} (key {})", name(i), me.key)
        }
        _ => String::new(),
    }
}

/// What one step says: its line in the text timeline and the parts of its moment.
struct Said {
    line: String,
    from: Lane,
    to: Option<Lane>,
    text: String,
    mark: Mark,
}

impl Said {
    /// A step of `who` (the text timeline's left column), from `from` to `to`.
    fn by(who: &str, from: Lane, to: Option<Lane>, text: String, mark: Mark) -> Said {
        Said {
            line: format!("{who}  {text}"),
            from,
            to,
            text,
            mark,
        }
    }

    /// A step of runner `i` on its own lane.
    fn runner(i: u8, text: String, mark: Mark) -> Said {
        Said::by(&caller(i), Lane::Runner(i), None, text, mark)
    }

    /// A step the state does not explain (it cannot happen in a counterexample): no line.
    fn nothing(from: Lane) -> Said {
        Said {
            line: String::new(),
            from,
            to: None,
            text: String::new(),
            mark: Mark::Plain,
        }
    }
}

/// The line and the moment of one step.
fn describe(
    protocol: &Protocol,
    before: &State,
    action: Action,
    after: &State,
) -> (String, Moment) {
    let said = match action {
        Action::Save(i) => save(before, after, i),
        Action::Send(i) => send(before, after, i),
        Action::Timeout(i) => timeout(before, after, i),
        Action::Receive(i) => receive(before, after, i),
        Action::Crash(i) => Said::runner(i, "crashes".to_owned(), Mark::Loss),
        Action::Restart(i) | Action::Rerun(i) => {
            let verb = if matches!(action, Action::Restart(_)) {
                "restarts"
            } else {
                "runs again"
            };
            let text = format!("{verb}{}", run_start(before, after, i));
            Said::runner(i, text, Mark::Plain)
        }
        Action::Deliver(index) => deliver(protocol, before, after, index),
        Action::Write(index) => write(before, after, index),
        Action::Lose(index) => {
            let text = format!("loses {}", request_of(&before.network[index]));
            Said::by("network", Lane::Network, None, text, Mark::Loss)
        }
        Action::Duplicate(index) => {
            let text = format!("delivers {} twice", request_of(&before.network[index]));
            Said::by("network", Lane::Network, None, text, Mark::Plain)
        }
        Action::CrashService => {
            let lost = before.network.len() - after.network.len() + before.lookups.len();
            let text = if lost == 0 {
                "crashes".to_owned()
            } else {
                format!("crashes; {lost} create(s) in progress are lost")
            };
            Said::by("service", Lane::Service, None, text, Mark::Loss)
        }
        Action::RestartService => {
            let text = "restarts on the same database".to_owned();
            Said::by("service", Lane::Service, None, text, Mark::Plain)
        }
        Action::Prune(index) => prune(protocol, before, index),
    };
    let moment = Moment {
        from: said.from,
        to: said.to,
        text: said.text,
        mark: said.mark,
        tickets: tickets_text(after),
    };
    (said.line, moment)
}

fn save(before: &State, after: &State, i: u8) -> Said {
    let row = after.runners[usize::from(i)].row;
    let key = match row.and_then(|r| r.key) {
        Some(key) => format!(" with key {key}"),
        None => format!(
            "; its key {} stays in memory",
            after.runners[usize::from(i)].key
        ),
    };
    let reuse = if i == 1 {
        " (the key of i1, with another payload)"
    } else {
        ""
    };
    let text = format!(
        "saves {}{key}{reuse}{}",
        name(i),
        run_start(before, after, i)
    );
    Said::runner(i, text, Mark::Plain)
}

/// "; marks iN for review: ..." when runner `i` gave up after this step.
fn review(after: &State, i: u8) -> String {
    if after.runners[usize::from(i)].process == Process::Done {
        format!(
            "; marks {} for review: no answer after every attempt",
            name(i)
        )
    } else {
        String::new()
    }
}

fn send(before: &State, after: &State, i: u8) -> Said {
    let attempt = after.runners[usize::from(i)]
        .row
        .map_or(0, |r: Row| r.attempts);
    let sent = after.network.iter().find_map(|m| match m {
        Message::Request {
            from,
            attempt: a,
            request,
        } if *from == i && *a == attempt => Some(*request),
        _ => None,
    });
    match sent.filter(|_| before.network.len() < after.network.len()) {
        Some(request) => {
            let text = format!(
                "sends create {} for {} (attempt {attempt}{})",
                request.key,
                name(i),
                spelled(&request)
            );
            let to = Some(Lane::Network);
            Said::by(&caller(i), Lane::Runner(i), to, text, Mark::Plain)
        }
        None => {
            let text = format!(
                "create for {} (attempt {attempt}) -> connection refused{}",
                name(i),
                review(after, i)
            );
            Said::runner(i, text, Mark::Loss)
        }
    }
}

fn timeout(before: &State, after: &State, i: u8) -> Said {
    let Process::Awaiting { attempt, .. } = before.runners[usize::from(i)].process else {
        return Said::nothing(Lane::Runner(i));
    };
    let text = format!(
        "create for {} (attempt {attempt}) -> {}{}",
        name(i),
        result_label(&CallResult::Unknown),
        review(after, i)
    );
    Said::runner(i, text, Mark::Loss)
}

fn receive(before: &State, after: &State, i: u8) -> Said {
    let Process::Awaiting { attempt, .. } = before.runners[usize::from(i)].process else {
        return Said::nothing(Lane::Runner(i));
    };
    let answer = before.network.iter().find_map(|m| match m {
        Message::Reply {
            to,
            attempt: a,
            answer,
        } if *to == i && *a == attempt => Some(*answer),
        _ => None,
    });
    let verdict = match after.runners[usize::from(i)].row.map(|r| r.state) {
        Some(RowState::Succeeded(id)) => format!("succeeded, ticket {id}"),
        Some(RowState::Rejected) => "rejected".to_owned(),
        Some(RowState::Review) => "needs review".to_owned(),
        _ => "pending".to_owned(),
    };
    let text = format!(
        "reads the answer to attempt {attempt}: {} -> {}",
        answer.map_or_else(String::new, |a| result_label(&result(a))),
        verdict
    );
    let mark = match answer {
        Some(Answer::Replayed(_)) => Mark::Replay,
        Some(Answer::Conflict | Answer::Expired) => Mark::Loss,
        _ => Mark::Plain,
    };
    let to = Some(Lane::Runner(i));
    Said::by(&caller(i), Lane::Network, to, text, mark)
}

fn deliver(protocol: &Protocol, before: &State, after: &State, index: usize) -> Said {
    let Message::Request {
        from,
        attempt,
        request,
    } = before.network[index]
    else {
        return Said::nothing(Lane::Service);
    };
    let looked_up = after.lookups.len() > before.lookups.len();
    let answer = after.network.iter().find_map(|m| match m {
        Message::Reply {
            to,
            attempt: a,
            answer,
        } if *to == from && *a == attempt => Some(*answer),
        _ => None,
    });
    let what = format!(
        "create {} of {} for {} (attempt {attempt}{})",
        request.key,
        caller(from),
        name(from),
        spelled(&request)
    );
    let (text, mark) = if looked_up {
        (format!("{what}: looked up the key: no record"), Mark::Plain)
    } else {
        let committed = after.store.tickets.len() > before.store.tickets.len();
        // The service's answer, whether or not anyone still waits for it.
        let answered = before.store.clone().create(&request, protocol.compare());
        let waiting = answer.is_some();
        let outcome = if waiting {
            result_label(&result(answered))
        } else {
            format!(
                "{}; nobody waits for the reply",
                result_label(&result(answered))
            )
        };
        let mark = if committed {
            Mark::Commit
        } else if matches!(answered, Answer::Replayed(_)) {
            Mark::Replay
        } else {
            Mark::Loss
        };
        (format!("{what} -> {outcome}"), mark)
    };
    Said::by("service", Lane::Network, Some(Lane::Service), text, mark)
}

fn write(before: &State, after: &State, index: usize) -> Said {
    let lookup = before.lookups[index];
    let id = after.store.tickets.last().map_or(0, |t| t.id);
    let waiting = after.network.len() > before.network.len();
    let text = format!(
        "create {} of {} for {} (attempt {}): writes ticket {id} and its record -> {}",
        lookup.request.key,
        caller(lookup.from),
        name(lookup.from),
        lookup.attempt,
        if waiting {
            result_label(&CallResult::Created(TicketId::from(i64::from(id))))
        } else {
            "nobody waits for the reply".to_owned()
        }
    );
    Said::by("service", Lane::Service, None, text, Mark::Commit)
}

fn prune(protocol: &Protocol, before: &State, index: usize) -> Said {
    let record = before.store.records[index];
    let left = if protocol.variant == super::Variant::EarlyPrune {
        "leaving nothing behind"
    } else {
        "leaving a tombstone"
    };
    let text = format!(
        "retention job deletes the record of key {} of c{}, {left}",
        record.key,
        record.scope + 1
    );
    // The retention job is no actor of the text timeline: its line is the text alone.
    Said {
        line: text.clone(),
        from: Lane::Service,
        to: None,
        text,
        mark: Mark::Loss,
    }
}

fn tickets_text(state: &State) -> String {
    let tickets: Vec<String> = state
        .store
        .tickets
        .iter()
        .map(|t| format!("{} ({})", t.id, tag(t.payload)))
        .collect();
    list(&tickets)
}

/// Why `property` fails in `state`, naming intents and tickets.
pub fn violation(property: &str, state: &State) -> String {
    let intents = 0..state.runners.len() as u8;
    let detail = match property {
        ONE_EFFECT => intents
            .filter_map(|i| {
                let ids: Vec<String> = state
                    .store
                    .tickets_of(i)
                    .map(|t| t.id.to_string())
                    .collect();
                (ids.len() > 1).then(|| format!("{} has tickets {}", tag(i), ids.join(" and ")))
            })
            .collect::<Vec<_>>()
            .join("; "),
        ORIGINAL_EFFECT => intents
            .filter_map(|i| match state.runners[usize::from(i)].row?.state {
                RowState::Succeeded(id)
                    if state.store.tickets_of(i).next().map(|t| t.id) != Some(id) =>
                {
                    Some(format!(
                        "{} was told ticket {id}, not the ticket made for it",
                        tag(i)
                    ))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("; "),
        REJECTED_CHANGES_NOTHING => "a conflict answer came with a change to the store".to_owned(),
        OWN_PAYLOAD => {
            "a retry was told its own payload conflicts with its key's record".to_owned()
        }
        UNKNOWN_IS_NOT_NOTHING => intents
            .filter_map(|i| {
                let held = state.runners[usize::from(i)].row?.state == RowState::Held;
                let ticket = state.store.tickets_of(i).next()?;
                held.then(|| {
                    format!(
                        "{} is held (\"nothing took effect\") while ticket {} carries its payload",
                        tag(i),
                        ticket.id
                    )
                })
            })
            .collect::<Vec<_>>()
            .join("; "),
        FINAL_ANSWER => intents
            .filter(|&i| {
                !state.runners[usize::from(i)]
                    .row
                    .is_some_and(|r| r.state.is_final())
            })
            .map(|i| format!("{} ended without a final answer", tag(i)))
            .collect::<Vec<_>>()
            .join("; "),
        _ => String::new(),
    };
    format!("{property}: {detail}")
}

/// The counterexample's lines and moments: `path` is the states with the action taken from each.
pub fn render(
    protocol: &Protocol,
    path: &[(State, Option<Action>)],
    property: &str,
) -> (String, Vec<Moment>) {
    let mut out = String::new();
    let mut moments = Vec::new();
    for (time, window) in path.windows(2).enumerate() {
        let (before, Some(action)) = &window[0] else {
            continue;
        };
        let (line, moment) = describe(protocol, before, *action, &window[1].0);
        let _ = writeln!(out, "{time:>4}  {line}");
        moments.push(moment);
    }
    let Some((last, _)) = path.last() else {
        return (out, moments);
    };
    let _ = writeln!(out, "end   tickets: {}", tickets_text(last));
    let records: Vec<String> = last
        .store
        .records
        .iter()
        .map(|r| format!("{} of c{} -> ticket {}", r.key, r.scope + 1, r.ticket))
        .collect();
    let _ = writeln!(out, "      records: {}", list(&records));
    let tombstones: Vec<String> = last
        .store
        .tombstones
        .iter()
        .map(|(scope, key)| format!("{key} of c{}", scope + 1))
        .collect();
    let _ = writeln!(out, "      tombstones: {}", list(&tombstones));
    let rows: Vec<String> = last
        .runners
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let row = r.row?;
            let state = match row.state {
                RowState::Pending => "pending".to_owned(),
                RowState::Held => "held".to_owned(),
                RowState::Succeeded(id) => format!("succeeded, ticket {id}"),
                RowState::Rejected => "rejected".to_owned(),
                RowState::Review => "needs review".to_owned(),
            };
            Some(format!(
                "{} {state} after {} send(s)",
                tag(i as u8),
                row.attempts
            ))
        })
        .collect();
    let _ = writeln!(out, "      runners: {}", list(&rows));
    let _ = writeln!(out, "VIOLATION {}", violation(property, last));
    (out, moments)
}
