//! The calibration's proof that `[identity]` names the effect, not something else each answer
//! happens to hold once (a title tagged per create, a timestamp, a request id): the same value
//! on a replay that made no new effect, two values for two new keys even with identical
//! fields, and a value the count's listing or `[read]` finds.
//!
//! Every step is judged against what the count saw, so a service that ignores keys still
//! calibrates: its replay makes a new effect, and a new effect may rightly name a new value.
//! Where a step refutes the file, the message names the answer's pointers that behaved as an
//! identity in every exchange the calibration made.

use serde_json::Value;

use super::count::{Counter, Created, id_like, identity_field, scalars};
use crate::check::probe::{KeyWire, Probe, Seen};
use crate::check::report::{Calibration, POINT, Proved, Stop};
use crate::check::target::{Count, FieldError, Identity};

/// The answers the calibration's creates got, as JSON, to find the pointer that behaves as an
/// identity when the file's does not.
pub(crate) struct Answers {
    /// The first create's answer.
    pub first: Value,
    /// The second create's answer.
    pub second: Value,
    /// The first create's replay's answer, when it was sent and named something.
    pub replay: Option<Value>,
    /// The answers of two creates with new keys and identical fields.
    pub twins: Option<(Value, Value)>,
}

/// A scalar's text as the identity is read: a string as it is, a number as written.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn body(seen: &Seen) -> Value {
    match &seen.answer {
        crate::check::history::Answer::Reply { body, .. } => {
            serde_json::from_str(body).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    }
}

/// Whether a listing holds `identity` as a value: equal, or the last segment of it (a URL
/// names the effect by its id).
pub fn mentions(value: &Value, identity: &str) -> bool {
    match value {
        Value::Array(items) => items.iter().any(|v| mentions(v, identity)),
        Value::Object(map) => map.values().any(|v| mentions(v, identity)),
        other => text(other).is_some_and(|said| {
            said == identity || (!said.is_empty() && identity.ends_with(&format!("/{said}")))
        }),
    }
}

impl Answers {
    /// The first answer's pointers whose value differs between any two effects, is the same on
    /// a replay, and (given a listing) is one the listing holds; id-like names first.
    pub(crate) fn identities(&self, listing: Option<&Value>, but: &str) -> Vec<String> {
        let mut all = Vec::new();
        scalars(&self.first, String::new(), 0, &mut all);
        let at = |json: &Value, p: &str| json.pointer(p).and_then(text);
        let mut found: Vec<String> = all
            .into_iter()
            .filter(|p| p != but)
            .filter(|p| {
                let Some(first) = at(&self.first, p) else {
                    return false;
                };
                let per_effect = at(&self.second, p).is_some_and(|v| v != first)
                    && self
                        .twins
                        .as_ref()
                        .is_none_or(|(a, b)| at(a, p).is_some_and(|a| Some(a) != at(b, p)));
                let stable = self
                    .replay
                    .as_ref()
                    .is_none_or(|r| at(r, p).as_deref() == Some(first.as_str()));
                per_effect && stable && listing.is_none_or(|l| mentions(l, &first))
            })
            .collect();
        found.sort_by_key(|p| !id_like(p));
        found.truncate(3);
        found
    }

    /// The advice that ends a refutation: the pointers that behaved as an identity.
    fn advice(&self, probe: &Probe, listing: Option<&Value>) -> String {
        let but = match &probe.target.identity {
            Identity::Pointer(pointer) => pointer.as_str(),
            Identity::Header(_) => "",
        };
        let found = self.identities(listing, but);
        if found.is_empty() {
            return "No pointer in the answer held one value per effect in every exchange: \
                    name the created thing's id (identity.json_pointer or identity.header)"
                .to_owned();
        }
        let quoted: Vec<String> = found.iter().map(|p| format!("{p:?}")).collect();
        format!(
            "The answer's pointers that held one value per effect, the same on a replay: {}. \
             Set identity.json_pointer = {}",
            quoted.join(", "),
            quoted[0]
        )
    }
}

/// Proves that the identity names the effect, after the first two creates (whose count steps
/// held, `now` the count after them); the count after its own exchanges.
///
/// # Errors
/// [`Stop::Mismatch`] naming `identity.json_pointer` (or `identity.header`, or `[read]`'s
/// field) with what was seen and the likely right pointer.
pub(super) async fn names_the_effect(
    probe: &Probe,
    calibration: &mut Calibration,
    counter: &Counter<'_>,
    now: i64,
    first: &Created,
    second: &Created,
) -> Proved<i64> {
    let mut answers = Answers {
        first: body(&first.seen),
        second: body(&second.seen),
        replay: None,
        twins: None,
    };
    let (now, replayed) = replay(probe, counter, now, first).await?;
    if let Some((seen, _)) = &replayed {
        answers.replay = Some(body(seen));
    }
    let (now, twins) = twins(probe, counter, now).await?;
    if let Some((a, b, _)) = &twins {
        answers.twins = Some((body(&a.seen), body(&b.seen)));
    }
    let listing = counter.listing();
    let seen_by = seen_by(probe, &answers, listing.as_ref(), first).await?;
    if let Some((a, b, made)) = &twins {
        let wrong = || {
            format!(
                "{} does not name the effect: two creates with new keys and identical fields \
                 (#{} and #{}) made two effects, counted, and both named {:?}, a value the \
                 fields decide (a title, a content field). {}",
                named(probe),
                a.seen.id,
                b.seen.id,
                a.identity,
                answers.advice(probe, listing.as_ref())
            )
        };
        let field = identity_field(probe);
        let twins = (
            (a.seen.id, a.identity.as_str()),
            (b.seen.id, b.identity.as_str()),
        );
        judge_twins(calibration, (field, "fields"), twins, *made, wrong)?;
    }
    if let Some((seen, made)) = &replayed {
        let confirmed = seen_by.is_some();
        judge_replay(
            probe,
            calibration,
            &answers,
            listing.as_ref(),
            (first, seen, *made),
            confirmed,
        )?;
    }
    if let Some(by) = seen_by {
        calibration.held(
            "identity-seen",
            identity_field(probe),
            format!(
                "{by} finds the first create's effect by its identity, {}",
                first.identity
            ),
            &[first.seen.id],
        );
    }
    Ok(now)
}

/// The first create sent again, same key and payload: its answer and the effects it made.
async fn replay(
    probe: &Probe,
    counter: &Counter<'_>,
    now: i64,
    first: &Created,
) -> Proved<(i64, Option<(Seen, i64)>)> {
    let mut again = first.call.clone();
    again.step = "calibration: the first create again, same key and payload".to_owned();
    let seen = probe.send(POINT, &again).await;
    let read = probe.read(&seen.answer, false);
    let Some(identity) = read.identity else {
        let after = counter.settled(now, |_| true).await?;
        return Ok((after, None));
    };
    // The same identity needs no wait; another one is judged on a count that has settled.
    let after = if identity == first.identity {
        counter.settled(now, |_| true).await?
    } else {
        counter.settled(now, |n| n != now).await?
    };
    Ok((after, Some((seen, after - now))))
}

/// Two creates with fresh keys and identical fields: the creates and the effects they made.
async fn twins(
    probe: &Probe,
    counter: &Counter<'_>,
    now: i64,
) -> Proved<(i64, Option<(Created, Created, i64)>)> {
    let fields = probe.fresh_fields(false);
    let mut made = Vec::new();
    for which in ["first", "second"] {
        let call = probe.call(
            &format!("calibration: the {which} of two new keys with identical fields"),
            KeyWire::Normal(probe.fresh_key()),
            &fields,
        );
        let seen = probe.send(POINT, &call).await;
        if let Some(identity) = probe.read(&seen.answer, false).identity {
            made.push(Created {
                call,
                seen,
                identity,
            });
        }
    }
    let after = counter.settled(now, |n| n >= now + 2).await?;
    let (Some(b), Some(a)) = (made.pop(), made.pop()) else {
        return Ok((after, None));
    };
    Ok((after, Some((a, b, after - now))))
}

/// Two new keys, identical fields (`words`: `fields`, `arguments`), `made` effects counted:
/// held when `a` and `b` (exchange, identity) name two; when they name one value for two
/// effects, `field` names a value the fields decide, and `wrong` says so with its advice.
pub(crate) fn judge_twins(
    calibration: &mut Calibration,
    (field, words): (&str, &str),
    (a, b): ((usize, &str), (usize, &str)),
    made: i64,
    wrong: impl FnOnce() -> String,
) -> Proved<()> {
    if a.1 != b.1 {
        calibration.held(
            "identity-not-content",
            field,
            format!(
                "two new keys with identical {words} name two effects: {} and {}",
                a.1, b.1
            ),
            &[a.0, b.0],
        );
        return Ok(());
    }
    // Fewer: the service merged them (or the count did not see both), and equal identities
    // are what it answers, not the file's fault.
    if made != 2 {
        return Ok(());
    }
    Err(Stop::mismatch(field, wrong()))
}

/// A replay that made no new effect names the first effect, unless the count's listing or
/// `[read]` `confirmed` that the identity names it (then another value is the service's own
/// fault, which the points report).
fn judge_replay(
    probe: &Probe,
    calibration: &mut Calibration,
    answers: &Answers,
    listing: Option<&Value>,
    (first, seen, made): (&Created, &Seen, i64),
    confirmed: bool,
) -> Proved<()> {
    let field = identity_field(probe);
    let identity = probe.read(&seen.answer, false).identity.unwrap_or_default();
    if identity == first.identity || made != 0 {
        let how = if identity == first.identity {
            format!("a replay (same key and payload) names the first effect again, {identity}")
        } else {
            format!(
                "a replay made a new effect, named {identity}: the service does not hold the \
                 key, which the points report"
            )
        };
        calibration.held("identity-replayed", field, how, &[first.seen.id, seen.id]);
        return Ok(());
    }
    // Without a listing or a read to say which, a replay naming another value is the file's
    // fault only when another pointer of the answer held still on the replay: else it may be
    // the service's replay that names another effect, which the points report.
    let but = match &probe.target.identity {
        Identity::Pointer(pointer) => pointer.as_str(),
        Identity::Header(_) => "",
    };
    if confirmed || answers.identities(listing, but).is_empty() {
        return Ok(());
    }
    Err(Stop::mismatch(
        field,
        format!(
            "{} does not name the effect: a replay of #{} (same key, same payload) made no new \
             effect, counted, yet #{} named {identity:?}, not {:?}: a value each answer has of \
             its own (a request id, a timestamp). {}",
            named(probe),
            first.seen.id,
            seen.id,
            first.identity,
            answers.advice(probe, listing)
        ),
    ))
}

/// `identity.json_pointer "/x"` or `identity.header X`.
fn named(probe: &Probe) -> String {
    match &probe.target.identity {
        Identity::Pointer(pointer) => format!("identity.json_pointer {pointer:?}"),
        Identity::Header(name) => format!("identity.header {name}"),
    }
}

/// What sees the first effect by its identity: the count's listing (a list, so it holds every
/// effect) or `[read]`. `None` when neither can be asked; a mismatch when one is asked and
/// does not find it while another pointer's value is found.
async fn seen_by(
    probe: &Probe,
    answers: &Answers,
    listing: Option<&Value>,
    first: &Created,
) -> Proved<Option<&'static str>> {
    let pointer = matches!(probe.target.identity, Identity::Pointer(_));
    let mut by = None;
    if let (Some(listing), true) = (listing, pointer) {
        if mentions(listing, &first.identity) {
            by = Some("the count's listing");
        } else if answers
            .identities(Some(listing), "")
            .iter()
            .any(|p| id_like(p))
        {
            // Only a value named as an id counts against the file: a listing of titles alone
            // says nothing of where the id is.
            return Err(Stop::mismatch(
                identity_field(probe),
                format!(
                    "{} names {:?} for #{}, a value the count's listing ({}) does not hold, \
                     while it holds other values of that answer. {}",
                    named(probe),
                    first.identity,
                    first.seen.id,
                    counted_by(probe),
                    answers.advice(probe, Some(listing))
                ),
            ));
        }
    }
    let Some(read) = probe.read_effect(&first.identity).await else {
        return Ok(by);
    };
    match read {
        Ok(_) => Ok(Some(if by.is_some() {
            "the count's listing and [read]"
        } else {
            "[read]"
        })),
        Err(problem) => Err(unread(probe, answers, listing, first, &problem).await),
    }
}

fn counted_by(probe: &Probe) -> String {
    match &probe.target.count {
        Count::Request { request, .. } => format!("{} {}", request.method, request.path),
        _ => "the count".to_owned(),
    }
}

/// `[read]` did not find the first effect by its identity: the identity is at fault when
/// another pointer's value reads it, else `[read]` is.
async fn unread(
    probe: &Probe,
    answers: &Answers,
    listing: Option<&Value>,
    first: &Created,
    problem: &FieldError,
) -> Stop {
    let but = match &probe.target.identity {
        Identity::Pointer(pointer) => pointer.as_str(),
        Identity::Header(_) => "",
    };
    for other in answers.identities(listing, but) {
        let Some(value) = answers.first.pointer(&other).and_then(text) else {
            continue;
        };
        if let Some(Ok(_)) = probe.read_effect(&value).await {
            return Stop::mismatch(
                identity_field(probe),
                format!(
                    "[read] by {} names nothing ({problem}), and by {other:?} ({value:?}) it \
                     finds the effect #{} created. Set identity.json_pointer = {other:?}",
                    named(probe),
                    first.seen.id
                ),
            );
        }
    }
    Stop::mismatch(
        &problem.field,
        format!(
            "{}: [read] does not find the effect #{} created, named {:?} as \
             {} says. Name a read of one effect by its identity ({{{{id}}}} in read.request.path, \
             ?1 in read.sql.query)",
            problem.problem,
            first.seen.id,
            first.identity,
            identity_field(probe)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listing_mentions_an_identity_as_a_value_or_as_the_last_segment_of_a_url() {
        let listing = json!([{"id": 7, "title": "x"}, {"id": "t-8"}]);
        assert!(mentions(&listing, "7"));
        assert!(mentions(&listing, "t-8"));
        assert!(mentions(&listing, "https://desk.example/tickets/7"));
        assert!(!mentions(&listing, "17"));
        assert!(!mentions(&listing, "req-7"));
    }

    #[test]
    fn the_pointers_that_behave_as_an_identity_hold_still_on_a_replay_and_differ_per_effect() {
        let answer = |id: u64, title: &str, request: &str| json!({"id": id, "title": title, "request_id": request});
        let answers = Answers {
            first: answer(1, "a", "r1"),
            second: answer(2, "b", "r2"),
            replay: Some(answer(1, "a", "r3")),
            twins: Some((answer(3, "c", "r4"), answer(4, "c", "r5"))),
        };
        assert_eq!(answers.identities(None, ""), ["/id"]);
        assert!(answers.identities(None, "/id").is_empty());
        let listing = json!([{"title": "a"}]);
        assert!(answers.identities(Some(&listing), "").is_empty());
    }
}
