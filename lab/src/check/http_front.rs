//! The HTTP service, or a gateway in front of an API, as a front of the hop points
//! ([`super::hop`]): a call is an HTTP request the file describes, a session is nothing, and
//! restarting the front restarts the gateway the check started ([`super::gateway`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::both::{Fields, Front, Provoked, Told, section};
use super::content::{NO_READ, ReadBack};
use super::history::{Answer, History};
use super::probe::{BodyForm, Call, Change, KeyWire, Probe, Seen, render};
use super::report::{Checks, Grade};
use super::target::Replay;
use super::upstream::UpstreamApi;

impl Front for Probe {
    type Call = Call;
    /// The gateway's process is the check's own; a session is nothing more.
    type Session = ();

    fn api(&self) -> Option<&UpstreamApi> {
        self.upstream.as_ref()
    }

    fn history(&self) -> &History {
        &self.history
    }

    fn keyed(&self) -> bool {
        true
    }

    fn create_name(&self) -> String {
        format!("{} {}", self.target.create.method, self.target.create.path)
    }

    fn subject(&self) -> &'static str {
        "the route"
    }

    fn call_word(&self) -> &'static str {
        "request"
    }

    fn result_word(&self) -> &'static str {
        "a success reply"
    }

    fn key_place(&self) -> String {
        format!("the key header {} (key.header)", self.target.key.header)
    }

    fn vary_field(&self) -> &'static str {
        "create.vary"
    }

    fn caller_field(&self, caller: usize) -> String {
        if caller == 0 {
            "create".to_owned()
        } else {
            format!("callers[{caller}]")
        }
    }

    fn count_section(&self) -> &'static str {
        "[count]"
    }

    fn together(&self) -> usize {
        self.target.load.callers
    }

    fn call_timeout(&self) -> Duration {
        self.target.service.timeout
    }

    fn key_listed(&self) -> Option<(String, bool, String, String)> {
        None
    }

    fn fresh_fields(&self) -> Fields {
        Probe::fresh_fields(self, false)
    }

    fn changes(&self, fields: &Fields) -> Vec<Change> {
        Probe::changes(self, fields)
    }

    fn keyed_call(&self, step: &str, fields: &Fields) -> Call {
        self.call(step, KeyWire::Normal(self.fresh_key()), fields)
    }

    fn unkeyed_call(&self, step: &str, fields: &Fields) -> Call {
        self.call(step, KeyWire::Absent, fields)
    }

    fn again(&self, call: &Call, step: &str, fields: Option<Fields>) -> Call {
        let mut again = call.clone();
        step.clone_into(&mut again.step);
        if let Some(fields) = fields {
            again.body = BodyForm::Compact(fields);
        }
        again
    }

    fn given_fields(&self) -> Fields {
        self.endpoint(false).fields.clone()
    }

    fn fields_of(&self, call: &Call) -> Option<Fields> {
        match &call.body {
            BodyForm::Compact(fields) => Some(fields.clone()),
            _ => None,
        }
    }

    fn afresh(&self, call: &Call, step: &str, fields: Fields) -> Call {
        let mut again = self.again(call, step, Some(fields));
        again.key = KeyWire::Normal(self.fresh_key());
        again
    }

    fn key_of(&self, call: &Call) -> String {
        self.key_value(&call.key).unwrap_or_default()
    }

    fn sent_body(&self, call: &Call) -> Value {
        match (&call.body, &self.target.create.body) {
            (BodyForm::Compact(fields) | BodyForm::Reordered(fields), Some(template)) => {
                render(template, fields)
            }
            (BodyForm::Text(text), _) => serde_json::from_str(text).unwrap_or(Value::Null),
            (_, None) => Value::Null,
        }
    }

    async fn send(&self, point: &'static str, _session: Option<&()>, call: &Call) -> Told {
        told(self, Probe::send(self, point, call).await)
    }

    async fn send_settled(&self, point: &'static str, call: &Call) -> Vec<Told> {
        let seen = Probe::send_settled(self, point, call).await;
        seen.into_iter().map(|seen| told(self, seen)).collect()
    }

    fn restarts_process(&self) -> bool {
        true
    }

    fn cannot_restart(&self) -> Option<String> {
        self.gateway.is_none().then(|| {
            "the check does not start this gateway (the file has no service.command), so it \
             cannot restart it between a call and its retry"
                .to_owned()
        })
    }

    async fn open(&self) -> Result<(), String> {
        match &self.gateway {
            Some(gateway) => gateway.ensure().await,
            None => Ok(()),
        }
    }

    async fn close(&self, (): ()) -> String {
        match &self.gateway {
            Some(gateway) => gateway.stop().await,
            None => "the gateway is still running".to_owned(),
        }
    }

    async fn count(&self) -> Result<i64, String> {
        Probe::count(self).await.map_err(|err| err.to_string())
    }

    fn rounds(&self) -> usize {
        self.target.load.fresh_rounds
    }

    async fn send_together(self: &Arc<Self>, point: &'static str, calls: Vec<Call>) -> Vec<Told> {
        let seen = Probe::send_together(self, point, calls).await;
        seen.into_iter().map(|seen| told(self, seen)).collect()
    }

    fn in_progress(&self, told: &Told) -> bool {
        let statuses = &self.target.statuses.in_progress;
        told.answer.status().is_some_and(|s| statuses.contains(&s))
    }

    fn caller_names(&self) -> Vec<String> {
        self.target.callers.iter().map(|c| c.name.clone()).collect()
    }

    fn callers_field(&self) -> &'static str {
        "[[callers]]"
    }

    fn by_caller(&self, call: &Call, caller: usize, step: &str) -> Call {
        let mut other = self.again(call, step, None);
        other.caller = caller;
        other
    }

    fn validation_kind(&self) -> &'static str {
        "validation error (4xx)"
    }

    async fn provoke(
        &self,
        point: &'static str,
        checks: &mut Checks,
        call: &Call,
        provoked: &Provoked,
    ) -> Option<Told> {
        let errors = &self.target.errors;
        let (provocation, statuses, how) = match provoked.server {
            Some(i) => (&errors.server[i], 500..=599, ""),
            None if errors.validation_given => (&errors.validation, 400..=499, ""),
            None => (
                &errors.validation,
                400..=499,
                " (the file gives no [errors.validation]; the check sent a body that is not JSON)",
            ),
        };
        let kind = &provoked.kind;
        let mut bad = self.again(call, &format!("a request provoking a {kind}"), None);
        if let BodyForm::Compact(fields) = &call.body {
            bad.body = self.provoked(fields, provocation);
        }
        bad.extra.clone_from(&provocation.headers);
        let seen = told(self, Probe::send(self, point, &bad).await);
        checks
            .add(
                Grade::lab(),
                format!("the provoked request is answered with a {kind}{how}"),
                seen.answer.status().is_some_and(|s| statuses.contains(&s)),
                format!("a {kind}"),
                seen.described.clone(),
                &[seen.id],
            )
            .then_some(seen)
    }

    fn in_progress_words(&self) -> (&'static str, String) {
        (
            "the in-progress status (statuses.in_progress)",
            format!("{:?}", self.target.statuses.in_progress),
        )
    }

    fn same_answer(&self, first: &Told, retry: &Told) -> Option<bool> {
        Some(first.answer.same_body(&retry.answer))
    }

    fn conflict(&self, refused: &Told) -> Option<(&'static str, bool, String)> {
        let statuses = &self.target.statuses.conflict;
        Some((
            "it is refused with the file's conflict status (statuses.conflict)",
            refused
                .answer
                .status()
                .is_some_and(|s| statuses.contains(&s)),
            format!("{statuses:?}"),
        ))
    }

    fn replay_marks(&self, checks: &mut Checks, first: &Told, retry: Option<&Told>) {
        let Some(now) = retry else {
            if let Some(marked) = self.read(&first.answer, false).marked_replay {
                checks.add(
                    Grade::lab(),
                    "the first answer is not marked as a replay",
                    !marked,
                    "no replay mark on a first answer",
                    "marked as a replay",
                    &[first.id],
                );
            }
            return;
        };
        let expected_status = match self.target.replay {
            Replay::Status(status) => Some(status),
            _ => first.answer.status(),
        };
        checks.add(
            Grade::should(section::ENFORCEMENT),
            "the retry has the first answer's status (or the file's replay status)",
            now.answer.status() == expected_status,
            expected_status.map_or("-".to_owned(), |s| s.to_string()),
            now.answer.summary(),
            &[first.id, now.id],
        );
        checks.add(
            Grade::should(section::ENFORCEMENT),
            "the retry's body is the first answer's body (as JSON)",
            self.same_answer(first, now).unwrap_or_default(),
            "the same body",
            if now.success {
                "another body"
            } else {
                "not a success"
            },
            &[first.id, now.id],
        );
        if let Some(marked) = self.read(&now.answer, false).marked_replay {
            checks.add(
                Grade::lab(),
                "the retry is marked as a replay, as [replay] says",
                marked,
                "the replay mark",
                "no replay mark",
                &[now.id],
            );
        }
    }
}

impl ReadBack for Probe {
    async fn content(&self, identity: &str) -> Result<Value, String> {
        match self.read_effect(identity).await {
            None => Err(NO_READ.to_owned()),
            Some(read) => read.map_err(|problem| {
                format!("[read] could not read the effect {identity}: {problem}")
            }),
        }
    }
}

/// What the agent was told by one reply, in the file's terms.
pub(crate) fn told(probe: &Probe, seen: Seen) -> Told {
    let read = probe.read(&seen.answer, false);
    let text = match &seen.answer {
        Answer::Reply { body, .. } => body.clone(),
        other => other.summary(),
    };
    Told {
        id: seen.id,
        refused: !read.success && seen.answer.status().is_some_and(|s| s >= 400),
        flagged: false,
        success: read.success,
        identity: read.identity,
        text,
        described: probe.describe(&seen.answer),
        answer: seen.answer,
    }
}
