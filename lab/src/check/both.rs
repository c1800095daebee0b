//! The points an HTTP service and an MCP server share, written once against a [`Front`]: the
//! create is called, counted and read in the file's terms, whichever front takes it. Here:
//! `retry-replays`, `reply-dropped`, `changed-payload`, `new-key-same-payload`,
//! `concurrent-fresh-key`, `other-caller` and `error-then-corrected`. A point moves here from
//! `points.rs` and `mcp/points.rs` when both copies say the same thing; what only one front
//! adds is a hook of `Front` that front implements (an HTTP replay's status, body and mark:
//! [`Front::replay_marks`]; an effect read back: [`content::ReadBack`]), and a point only one
//! front has (an MCP tool's annotations, a cut-off request) stays with it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::content;
use super::history::{Answer, History};
use super::probe::{Change, same_effect};
use super::report::{Calibration, Callers, Checks, Grade, PointReport};
use super::upstream::UpstreamApi;
use crate::contract::points as registry;

/// The draft's sections the grades cite (draft-06 numbering).
pub mod section {
    /// 2.1 Syntax: the value is an sf-string.
    pub const SYNTAX: &str = "2.1";
    /// 2.2 Uniqueness: a key names one request payload.
    pub const UNIQUENESS: &str = "2.2";
    /// 2.6 Idempotency Enforcement: a retry gets the first result; a concurrent one a 409.
    pub const ENFORCEMENT: &str = "2.6";
    /// 2.7 Error Handling: 400 without a key, 422 for another payload, 409 in progress.
    pub const ERRORS: &str = "2.7";
    /// 5 Security Considerations: a composite key, so one client cannot reach another's.
    pub const SECURITY: &str = "5";
}

/// The grade of a retry's promise: the lab's rule, over the draft's SHOULD at 2.6.
pub fn lab26() -> Grade {
    Grade::lab_over_should(section::ENFORCEMENT)
}

/// A create's fields, by name.
pub type Fields = std::collections::BTreeMap<String, Value>;

/// What the agent or client calls: an MCP server's create tool, or an HTTP service's (or a
/// gateway's) create route. The shared points here, and the hop points, are written once
/// against it; what only one front has (an HTTP replay's status and mark) is a method with a
/// default the other leaves alone.
#[allow(async_fn_in_trait)]
pub(crate) trait Front: content::ReadBack {
    /// One call, as a point means it.
    type Call: Clone;
    /// A session (MCP) or a run of the gateway's process (HTTP), for the restart point.
    type Session;
    /// The API the lab serves, when the file has `[upstream]`.
    fn api(&self) -> Option<&UpstreamApi>;
    /// What was sent and what came back.
    fn history(&self) -> &History;
    /// Whether the create takes a key.
    fn keyed(&self) -> bool;
    /// The create, for messages: `createTicket`, `POST /tickets`.
    fn create_name(&self) -> String;
    /// What takes the key, for messages: `the tool`, `the route`.
    fn subject(&self) -> &'static str;
    /// One call, for messages: `tool call`, `request`.
    fn call_word(&self) -> &'static str;
    /// A success the agent is told, for messages: `a tool result`, `a success reply`.
    fn result_word(&self) -> &'static str;
    /// Where the agent's key goes, for messages: `a key argument (mcp.tool.key_argument)`.
    fn key_place(&self) -> String;
    /// The field that says which fields may change, for messages: `mcp.tool.vary`.
    fn vary_field(&self) -> &'static str;
    /// The field that describes `caller`'s create, for messages: `create` for the first,
    /// `callers[1]`, `mcp.callers[1]`.
    fn caller_field(&self, caller: usize) -> String;
    /// The count's section, for messages: `[mcp.count]`.
    fn count_section(&self) -> &'static str;
    /// How many calls the concurrent point sends together (the file's load).
    fn together(&self) -> usize;
    /// How long the check waits for one call's answer (the file's timeout): a hold of the API's
    /// reply must end well before it, or the check would judge its own timeout.
    fn call_timeout(&self) -> Duration;
    /// Whether the front lists its key where an agent looks (an MCP tool's input schema), as a
    /// sub-check: its name, whether it holds, what was expected, what was seen. `None` where
    /// nothing lists inputs.
    fn key_listed(&self) -> Option<(String, bool, String, String)>;
    /// Fresh fields for a new intention.
    fn fresh_fields(&self) -> Fields;
    /// The changed payloads the file allows from `fields`.
    fn changes(&self, fields: &Fields) -> Vec<Change>;
    /// A call with a new intention's key.
    fn keyed_call(&self, step: &str, fields: &Fields) -> Self::Call;
    /// A call without a key.
    fn unkeyed_call(&self, step: &str, fields: &Fields) -> Self::Call;
    /// `call` again, under another step's name, with other fields when given.
    fn again(&self, call: &Self::Call, step: &str, fields: Option<Fields>) -> Self::Call;
    /// The file's own field values for the create, the ones `vary` varies from.
    fn given_fields(&self) -> Fields;
    /// The fields `call` was made from; `None` where it sends something else (a raw body).
    fn fields_of(&self, call: &Self::Call) -> Option<Fields>;
    /// `call` as a new intention with `fields`: a fresh key (none where the create takes none),
    /// under another step's name.
    fn afresh(&self, call: &Self::Call, step: &str, fields: Fields) -> Self::Call;
    /// The key the agent sent with `call`, as written.
    fn key_of(&self, call: &Self::Call) -> String;
    /// What the agent sent as the create's body: the tool's arguments without the key
    /// argument, the request's JSON body.
    fn sent_body(&self, call: &Self::Call) -> Value;
    /// Sends `call` (on `session`, or the front's own) and reads what the agent is told.
    async fn send(
        &self,
        point: &'static str,
        session: Option<&Self::Session>,
        call: &Self::Call,
    ) -> Told;
    /// Sends `call` until it is no longer answered "in progress" (the file's statuses or codes
    /// say which), at most ten times; every answer, in order.
    async fn send_settled(&self, point: &'static str, call: &Self::Call) -> Vec<Told>;
    /// Whether the restart point ends the front's process (`false`: it can only close a session
    /// and open another on the same process, and says so).
    fn restarts_process(&self) -> bool;
    /// Why the restart point cannot run against this front, when it cannot.
    fn cannot_restart(&self) -> Option<String>;
    /// Opens a new session, or starts the front again.
    async fn open(&self) -> Result<Self::Session, String>;
    /// Ends the session or the front's process; says how it ended (`still running` when it did
    /// not).
    async fn close(&self, session: Self::Session) -> String;
    /// The effects now.
    async fn count(&self) -> Result<i64, String>;
    /// The front's own sub-checks of a replay (`retry` the immediate retry of `first`), or of
    /// the first answer itself (`retry` is `None`): an HTTP reply's status, body and replay
    /// mark. An MCP result has none of them.
    fn replay_marks(&self, _checks: &mut Checks, _first: &Told, _retry: Option<&Told>) {}
    /// Whether `retry` is answered with `first`'s answer as it was (an HTTP reply's body, as
    /// JSON); `None` where the front's answers are not compared whole.
    fn same_answer(&self, _first: &Told, _retry: &Told) -> Option<bool> {
        None
    }
    /// The file's own refusal of a changed payload, for `refused`: the sub-check's words, whether
    /// `refused` is it, and what the file names (`None` where the file names none).
    fn conflict(&self, refused: &Told) -> Option<(&'static str, bool, String)>;
    /// How many rounds the concurrent point runs (the file's load).
    fn rounds(&self) -> usize;
    /// Sends `calls` together, each on its own connection or task, released at once; every
    /// answer.
    async fn send_together(
        self: &Arc<Self>,
        point: &'static str,
        calls: Vec<Self::Call>,
    ) -> Vec<Told>;
    /// Whether `told` says the key is still in progress, as the file's statuses or codes say.
    fn in_progress(&self, told: &Told) -> bool;
    /// The callers' names, as the file gives them.
    fn caller_names(&self) -> Vec<String>;
    /// Where the file names its callers, for messages: `[[callers]]`.
    fn callers_field(&self) -> &'static str;
    /// `call` sent by `caller` instead, under another step's name.
    fn by_caller(&self, call: &Self::Call, caller: usize, step: &str) -> Self::Call;
    /// The kind of error `error-then-corrected` provokes, in words: `validation error (4xx)`.
    fn validation_kind(&self) -> &'static str;
    /// Sends `call` made to fail with `provoked` (the file's validation error, or its
    /// server error `Some(i)`), and adds the sub-check that says whether the fault fired (the
    /// error came back as the agent is told one); the answer, when it fired.
    async fn provoke(
        &self,
        point: &'static str,
        checks: &mut Checks,
        call: &Self::Call,
        provoked: &Provoked,
    ) -> Option<Told>;
    /// The file's in-progress answers, for messages: `the in-progress status
    /// (statuses.in_progress)`, and the list.
    fn in_progress_words(&self) -> (&'static str, String);
}

/// What the agent was told, read in the file's terms.
#[derive(Clone, Debug)]
pub struct Told {
    /// The exchange's number in the history.
    pub id: usize,
    /// What came back.
    pub answer: Answer,
    /// A success, as the agent reads it: a tool result not marked `isError` (whatever its text
    /// holds), a success reply.
    pub success: bool,
    /// A refusal the agent is told as one (an error result, a JSON-RPC error, a 4xx).
    pub refused: bool,
    /// A refusal the agent is told is a success: an MCP result not marked `isError` that holds
    /// a refusal the file's code reader finds. `success` is true of it, as the agent reads it.
    pub flagged: bool,
    /// The identity a success names.
    pub identity: Option<String>,
    /// The text the agent reads: a result's text blocks, an error's message, a reply's body.
    pub text: String,
    /// The answer in words, for a report line.
    pub described: String,
}

/// Notes that `what`, a create as `caller` (`who`), succeeded as exchange `id`, naming
/// `identity`.
pub fn held_created<F: Front>(
    front: &F,
    calibration: &mut Calibration,
    (caller, who): (usize, &str),
    what: &str,
    (identity, id): (&str, usize),
) {
    calibration.held(
        "create",
        front.caller_field(caller),
        format!("{what} as {who} succeeds, naming {identity}"),
        &[id],
    );
}

impl Told {
    /// Whether the front did what was asked: a success, and not a refusal dressed as one.
    pub fn succeeded(&self) -> bool {
        self.success && !self.flagged
    }
}

/// The exchanges of `told`, in order, as a sub-check's evidence.
fn ids(told: &[Told]) -> Vec<usize> {
    told.iter().map(|one| one.id).collect()
}

/// `one effect`, `2 effects`.
pub(crate) fn effects(delta: i64) -> String {
    match delta {
        1 => "one effect".to_owned(),
        n => format!("{n} effects"),
    }
}

/// A point that needs a key, on a create that takes none: it cannot pass, and says why.
pub fn needs_key<F: Front>(
    front: &F,
    name: &'static str,
    title: &'static str,
) -> Option<PointReport> {
    without_key(
        front,
        (name, title),
        ", which this point needs",
        "a retry cannot be told from a new call, so this point cannot pass",
    )
}

/// The report of a point on a create that takes no key (`None` when it takes one): `why` the
/// point needs one (the sentence's end, from its comma or space), and what is `lost` without it.
pub fn without_key<F: Front>(
    front: &F,
    (name, title): (&'static str, &'static str),
    why: &str,
    lost: &str,
) -> Option<PointReport> {
    if front.keyed() {
        return None;
    }
    let mut checks = Checks::new();
    checks.add(
        Grade::lab(),
        format!("{} takes an operation key{why}", front.subject()),
        false,
        front.key_place(),
        format!("{} takes no key: {lost}", front.create_name()),
        &[],
    );
    Some(PointReport::covered(name, title, checks.0))
}

/// The effects now; `None`, with a failed sub-check saying why, when they cannot be counted.
pub async fn counted<F: Front>(front: &F, checks: &mut Checks) -> Option<i64> {
    match front.count().await {
        Ok(n) => Some(n),
        Err(problem) => {
            count_failed(checks, front.count_section(), &problem);
            None
        }
    }
}

/// A count the check could not read as `section` (`[count]`) says: the point stops there,
/// reported failed, since nothing after it can be judged.
pub fn count_failed(checks: &mut Checks, section: &str, problem: &impl std::fmt::Display) {
    checks.add(
        Grade::lab(),
        format!("the effects can be counted as {section} says"),
        false,
        "a count",
        problem.to_string(),
        &[],
    );
}

/// The effects now, or else the point's report as it stands, returned from the point: `front`
/// is a probe (or an `Arc` of one) with [`Front`] in scope.
macro_rules! count_or_stop {
    ($front:expr, $checks:expr, $name:expr, $title:expr) => {
        match $front.count().await {
            Ok(n) => n,
            Err(problem) => {
                $crate::check::both::count_failed(&mut $checks, $front.count_section(), &problem);
                return $crate::check::report::PointReport::covered($name, $title, $checks.0);
            }
        }
    };
}
pub(crate) use count_or_stop;

/// Sends a point's first call and checks that it succeeded and named its effect; `None` (with
/// the failed sub-check added) when it did not, since nothing after it can be judged.
pub async fn first<F: Front>(
    front: &F,
    point: &'static str,
    checks: &mut Checks,
    call: &F::Call,
    step: &str,
) -> Option<Told> {
    let told = front.send(point, None, call).await;
    let ok = checks.add(
        Grade::lab(),
        format!("{step} succeeds and names its effect"),
        told.succeeded() && told.identity.is_some(),
        format!("{} naming its effect", front.result_word()),
        told.described.clone(),
        &[told.id],
    );
    ok.then_some(told)
}

/// `new-key-same-payload`: the same payload under a new key is a new intention, and makes an
/// effect of its own (a service that found the first effect by its payload would merge them).
pub async fn new_key<F: Front>(front: &F) -> PointReport {
    let point = &registry::NEW_KEY_SAME_PAYLOAD;
    if let Some(report) = needs_key(front, point.id, point.title) {
        return report;
    }
    let mut checks = Checks::new();
    new_key_checks(front, &mut checks).await;
    PointReport::covered(point.id, point.title, checks.0)
}

/// The sub-checks of `new-key-same-payload`; `None` where it stopped.
async fn new_key_checks<F: Front>(front: &F, checks: &mut Checks) -> Option<()> {
    let name = registry::NEW_KEY_SAME_PAYLOAD.id;
    let fields = front.fresh_fields();
    let before = counted(front, checks).await?;
    let step = format!("the first {}", front.call_word());
    let call = front.keyed_call(&step, &fields);
    let first = first(front, name, checks, &call, &step).await?;
    let second = front.keyed_call("the same payload under a new key", &fields);
    let seen = front.send_settled(name, &second).await;
    let last = seen.last()?;
    let mut exchanges = vec![first.id];
    exchanges.extend(ids(&seen));
    let merged = last.succeeded() && same_effect(&last.identity, &first.identity);
    checks.add(
        Grade::lab_over_should(section::UNIQUENESS),
        "the new key makes a new effect, not a replay of the first",
        last.succeeded() && last.identity.is_some() && !merged,
        format!("{} naming another effect", front.result_word()),
        if merged {
            format!(
                "{}: the first effect, found by its payload alone",
                last.described
            )
        } else {
            last.described.clone()
        },
        &exchanges,
    );
    let after = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        "two keys made two effects",
        after - before == 2,
        "two effects",
        effects(after - before),
        &exchanges,
    );
    Some(())
}

/// `no new effect`, `one new effect`, `2 new effects`.
pub(crate) fn new_effects(delta: i64) -> String {
    match delta {
        0 => "no new effect".to_owned(),
        1 => "one new effect".to_owned(),
        n => format!("{n} new effects"),
    }
}

/// `retry-replays`: the same call under the same key, at once and after a pause, gets the
/// first effect again and makes none of its own.
pub async fn replay<F: Front>(front: &F) -> PointReport {
    let point = &registry::RETRY_REPLAYS;
    if let Some(report) = needs_key(front, point.id, point.title) {
        return report;
    }
    let mut checks = Checks::new();
    replay_checks(front, &mut checks).await;
    PointReport::covered(point.id, point.title, checks.0)
}

/// The sub-checks of `retry-replays`; `None` where it stopped.
async fn replay_checks<F: Front>(front: &F, checks: &mut Checks) -> Option<()> {
    let name = registry::RETRY_REPLAYS.id;
    let before = counted(front, checks).await?;
    let step = format!("the first {}", front.call_word());
    let call = front.keyed_call(&step, &front.fresh_fields());
    let first = first(front, name, checks, &call, &step).await?;
    front.replay_marks(checks, &first, None);
    let after_first = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        format!("{step} made one effect"),
        after_first - before == 1,
        "one effect",
        effects(after_first - before),
        &[first.id],
    );
    let effect = content::content_of(front, first.identity.as_deref()).await;
    let identity = first.identity.as_deref();
    let now = front
        .send(name, None, &front.again(&call, "an immediate retry", None))
        .await;
    let what = (
        lab26(),
        "an immediate retry succeeds and names the first effect",
    );
    retry_matches(front, checks, what, identity, &now, &[now.id]);
    front.replay_marks(checks, &first, Some(&now));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = front.again(&call, "a retry after a pause", None);
    let later = front.send(name, None, &retry).await;
    let what = (
        lab26(),
        "a retry after a pause still replays the first effect",
    );
    retry_matches(front, checks, what, identity, &later, &[later.id]);
    let after = counted(front, checks).await?;
    content::judged(
        checks,
        (
            lab26(),
            "the retries made no effect".to_owned(),
            "no new effect",
        ),
        (after == after_first, new_effects(after - after_first)),
        content::since(front, &effect).await,
        &[now.id, later.id],
    );
    Some(())
}

/// The retry after a fault (`retried`, every answer until it settled): it names the effect
/// the first call's answer named (`first`, which the caller never read, with its content as
/// read then), or some effect where that answer named none; and the first call and its retry
/// made one effect since `before`. `texts`: the two sub-checks.
pub async fn judge_retry<F: Front>(
    front: &F,
    checks: &mut Checks,
    (matched, one): (&str, &str),
    (first, effect): (&Told, &Result<content::Content, String>),
    retried: &[Told],
    before: i64,
) -> Option<()> {
    let last = retried.last()?;
    let mut exchanges = vec![first.id];
    exchanges.extend(ids(retried));
    if first.identity.is_some() {
        let identity = first.identity.as_deref();
        retry_matches(
            front,
            checks,
            (lab26(), matched),
            identity,
            last,
            &exchanges,
        );
    } else {
        checks.add(
            lab26(),
            "the retry succeeds and names the effect the first call made",
            last.succeeded() && last.identity.is_some(),
            format!("{} naming the effect", front.result_word()),
            last.described.clone(),
            &exchanges,
        );
    }
    let after = counted(front, checks).await?;
    content::judged(
        checks,
        (lab26(), one.to_owned(), "one effect"),
        (after - before == 1, effects(after - before)),
        content::since(front, effect).await,
        &exchanges,
    );
    Some(())
}

/// `changed-payload`: another payload under a key already used is refused, makes no effect,
/// and leaves the key naming its first effect, for each change the file allows.
pub async fn changed_payload<F: Front>(front: &F) -> PointReport {
    let point = &registry::CHANGED_PAYLOAD;
    if let Some(report) = needs_key(front, point.id, point.title) {
        return report;
    }
    let changes = front.changes(&front.fresh_fields());
    if changes.is_empty() {
        let reason = format!(
            "{} names no field the check may change, so it cannot send another payload under \
             one key. Name one: vary = {{ title = \"text\" }} for free text, or a list of values \
             {} accepts (vary = {{ priority = [\"low\", \"high\"] }}).",
            front.vary_field(),
            front.subject()
        );
        return PointReport::not_covered(point.id, point.title, reason);
    }
    let mut checks = Checks::new();
    for change in &changes {
        changed_payload_checks(front, &mut checks, change).await;
    }
    PointReport::covered(point.id, point.title, checks.0)
}

/// The sub-checks of `changed-payload` for one change; `None` where it stopped. The plain
/// change keeps the point's sentences; a pair of values a loose comparison merges names itself.
async fn changed_payload_checks<F: Front>(
    front: &F,
    checks: &mut Checks,
    change: &Change,
) -> Option<()> {
    let name = registry::CHANGED_PAYLOAD.id;
    let pair = if change.loose {
        format!(" ({}, values a loose comparison merges)", change.what)
    } else {
        String::new()
    };
    let before = counted(front, checks).await?;
    let step = format!("the first {}", front.call_word());
    let call = front.keyed_call(&step, &change.first);
    let first = first(front, name, checks, &call, &step).await?;
    let after_first = counted(front, checks).await?;
    let effect = content::content_of(front, first.identity.as_deref()).await;
    let step = format!("the same key with another payload ({})", change.what);
    let changed = front.again(&call, &step, Some(change.changed.clone()));
    let seen = front.send_settled(name, &changed).await;
    let exchanges = ids(&seen);
    changed_refused(front, checks, &first, seen.last()?, (&exchanges, &pair));
    let after_changed = counted(front, checks).await?;
    content::judged(
        checks,
        (
            Grade::must(section::ERRORS),
            format!("the changed payload made no effect{pair}"),
            "no new effect, and the first effect as it was",
        ),
        (
            after_changed == after_first,
            new_effects(after_changed - after_first),
        ),
        content::since(front, &effect).await,
        &exchanges,
    );
    let again = front.again(&call, "the first payload again", None);
    let replayed = front.send_settled(name, &again).await;
    let last = replayed.last()?;
    let what = format!("the key still names the first effect with the first payload{pair}");
    let identity = first.identity.as_deref();
    retry_matches(front, checks, (lab26(), &what), identity, last, &[last.id]);
    if let Some(same) = front.same_answer(&first, last) {
        checks.add(
            Grade::should(section::ENFORCEMENT),
            format!("and answers the first body{pair}"),
            same,
            "the first body",
            "another body",
            &[first.id, last.id],
        );
    }
    let after = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        format!("one effect in all{pair}"),
        after - before == 1,
        "one effect",
        effects(after - before),
        &[first.id],
    );
    Some(())
}

/// The answer to a changed payload (`other`, the last of `exchanges`): refused, as the
/// file's conflict where it names one.
fn changed_refused<F: Front>(
    front: &F,
    checks: &mut Checks,
    first: &Told,
    other: &Told,
    (exchanges, pair): (&[usize], &str),
) {
    let observed = if other.succeeded() && same_effect(&other.identity, &first.identity) {
        format!(
            "{}: the changed payload was answered as a replay of the first {}",
            other.described,
            front.call_word()
        )
    } else if other.succeeded() {
        format!(
            "{}: the changed payload was accepted as a new {}",
            other.described,
            front.call_word()
        )
    } else {
        other.described.clone()
    };
    checks.add(
        Grade::must(section::ERRORS),
        format!("the changed payload is refused{pair}"),
        other.refused,
        "a refusal",
        observed,
        exchanges,
    );
    if let Some((what, held, expected)) = front.conflict(other) {
        checks.add(
            Grade::should(section::ERRORS),
            format!("{what}{pair}"),
            held,
            expected,
            other.described.clone(),
            &[other.id],
        );
    }
}

/// A retry's answer against the first effect (`first`, the identity it was named by): a
/// success naming the same one.
pub fn retry_matches<F: Front>(
    front: &F,
    checks: &mut Checks,
    (grade, what): (Grade, &str),
    first: Option<&str>,
    retry: &Told,
    exchanges: &[usize],
) -> bool {
    let expected = first.unwrap_or("none");
    let passed = retry.succeeded() && first.is_some() && retry.identity.as_deref() == first;
    let observed = if retry.succeeded() && (retry.identity.is_none() || first.is_none()) {
        format!(
            "{}: no identity on one side, so which effect it names cannot be told",
            retry.described
        )
    } else if retry.succeeded() && !passed {
        format!(
            "{}: another effect than the first ({expected})",
            retry.described
        )
    } else {
        retry.described.clone()
    };
    checks.add(
        grade,
        what,
        passed,
        format!(
            "{} naming the first effect ({expected})",
            front.result_word()
        ),
        observed,
        exchanges,
    )
}

/// `reply-dropped`: a call's reply is lost after its work was done, and the caller retries
/// under the same key (a create without a key is retried as it is, and shows what that does).
/// The check reads the lost reply only after the retry, as the history's record of what the
/// front said: the caller never saw it.
pub async fn lost_reply<F: Front>(front: &F) -> PointReport {
    let point = &registry::REPLY_DROPPED;
    let mut checks = Checks::new();
    lost_reply_checks(front, &mut checks).await;
    PointReport::covered(point.id, point.title, checks.0)
}

/// The sub-checks of `reply-dropped`; `None` where it stopped.
async fn lost_reply_checks<F: Front>(front: &F, checks: &mut Checks) -> Option<()> {
    let name = registry::REPLY_DROPPED.id;
    let before = counted(front, checks).await?;
    let step = format!("the {} whose reply is lost", front.call_word());
    let call = front.keyed_call(&step, &front.fresh_fields());
    let lost = front.send(name, None, &call).await;
    let after_lost = counted(front, checks).await?;
    let fired = checks.add(
        Grade::lab(),
        "the fault fired: the lost call's work happened before the retry",
        after_lost - before == 1,
        "one effect before the retry, its reply discarded unread",
        format!("{}; its reply discarded", effects(after_lost - before)),
        &[lost.id],
    );
    if !fired {
        return None;
    }
    let effect = content::content_of(front, lost.identity.as_deref()).await;
    let retry = front.again(&call, "the retry after the lost reply", None);
    let retried = front.send_settled(name, &retry).await;
    let texts = (
        "the retry succeeds and names the effect whose reply was lost",
        "the lost reply and its retry made one effect",
    );
    judge_retry(front, checks, texts, (&lost, &effect), &retried, before).await;
    Some(())
}

/// What the rounds of a concurrent point found, for one sub-check each.
#[derive(Default)]
pub(crate) struct Rounds {
    pub rounds: usize,
    pub wrong_effects: Vec<(usize, i64, Vec<usize>)>,
    pub split_identities: Vec<(usize, Vec<String>, Vec<usize>)>,
    pub other_statuses: Vec<(String, usize)>,
    pub unanswered: Vec<(String, usize)>,
    pub in_progress: Vec<usize>,
    pub bad_retries: Vec<(String, usize)>,
    /// What `[read]` showed of each round's first effect after its retries.
    pub contents: Vec<(usize, content::Since)>,
}

/// The exchanges of the first three findings, as a sub-check's evidence.
fn first_ids(list: &[(String, usize)]) -> Vec<usize> {
    list.iter().take(3).map(|u| u.1).collect()
}

/// `concurrent-fresh-key`: in each round, the file's load of calls with one fresh key sent
/// together make one effect, every success names it, and a retry after the round replays it.
pub async fn concurrent<F: Front>(front: &Arc<F>) -> PointReport {
    let point = &registry::CONCURRENT_FRESH_KEY;
    if let Some(report) = needs_key(front.as_ref(), point.id, point.title) {
        return report;
    }
    let mut checks = Checks::new();
    let mut found = Rounds::default();
    for round in 1..=front.rounds() {
        if fresh_round(front, &mut checks, round, &mut found)
            .await
            .is_none()
        {
            return PointReport::covered(point.id, point.title, checks.0);
        }
    }
    fresh_effects(front.as_ref(), &mut checks, &found);
    fresh_answers(front.as_ref(), &mut checks, &found);
    PointReport::covered(point.id, point.title, checks.0)
}

/// One round of racers on a fresh key, then a retry, into `found`; `None` when the point stops.
async fn fresh_round<F: Front>(
    front: &Arc<F>,
    checks: &mut Checks,
    round: usize,
    found: &mut Rounds,
) -> Option<()> {
    let name = registry::CONCURRENT_FRESH_KEY.id;
    let fields = front.fresh_fields();
    let before = counted(front.as_ref(), checks).await?;
    let call = front.keyed_call(&format!("round {round}, racer"), &fields);
    let calls = (0..front.together())
        .map(|i| front.again(&call, &format!("round {round}, racer {}", i + 1), None))
        .collect();
    let seen = front.send_together(name, calls).await;
    let identities = sort_racers(front.as_ref(), &seen, found);
    let after = counted(front.as_ref(), checks).await?;
    let round_ids = ids(&seen);
    if after - before != 1 {
        found
            .wrong_effects
            .push((round, after - before, round_ids.clone()));
    }
    if identities.len() > 1 {
        found
            .split_identities
            .push((round, identities.clone(), round_ids));
    }
    let retry = front.again(
        &call,
        &format!("round {round}, a retry after the race"),
        None,
    );
    let settled = front.send_settled(name, &retry).await;
    let last = settled.last()?;
    let fits = last.succeeded()
        && (identities.is_empty()
            || last
                .identity
                .as_ref()
                .is_some_and(|i| identities.contains(i)));
    if !fits {
        found.bad_retries.push((last.described.clone(), last.id));
    }
    found.rounds += 1;
    Some(())
}

/// Sorts a round's racers' answers into `found`; the distinct identities their successes named.
fn sort_racers<F: Front>(front: &F, seen: &[Told], found: &mut Rounds) -> Vec<String> {
    let mut identities: Vec<String> = Vec::new();
    for one in seen {
        match &one.identity {
            Some(id) if one.succeeded() => {
                if !identities.contains(id) {
                    identities.push(id.clone());
                }
            }
            _ if front.in_progress(one) => found.in_progress.push(one.id),
            _ if answered(&one.answer) => {
                found.other_statuses.push((one.described.clone(), one.id));
            }
            _ => found.unanswered.push((one.answer.summary(), one.id)),
        }
    }
    identities
}

/// Whether the front answered at all: a reply, a tool result or a JSON-RPC error, not a
/// connection that failed or a call the check hung up on.
fn answered(answer: &Answer) -> bool {
    !matches!(answer, Answer::NoAnswer { .. } | Answer::HungUp { .. })
}

/// `other-caller`: a second caller's call under the first caller's key, with the same payload,
/// is a call of its own, never given the first caller's effect. A reply that names the first
/// effect is a leak only between two callers, so `proved` must say the file's callers are two.
pub async fn other_caller<F: Front>(front: &F, proved: &Callers) -> PointReport {
    let point = &registry::OTHER_CALLER;
    if let Some(report) = needs_key(front, point.id, point.title) {
        return report;
    }
    if front.caller_names().len() < 2 {
        let reason = format!(
            "The file names one caller; name a second in {} to check that keys are scoped by \
             caller.",
            front.callers_field()
        );
        return PointReport::not_covered(point.id, point.title, reason);
    }
    if let Callers::Unproved(why) = proved {
        return PointReport::not_covered(point.id, point.title, why.clone());
    }
    let mut checks = Checks::new();
    other_caller_checks(front, &mut checks).await;
    PointReport::covered(point.id, point.title, checks.0)
}

/// The other-caller point's grade: the lab's, citing the draft's security section.
fn scope_grade() -> Grade {
    Grade {
        section: Some(section::SECURITY),
        ..Grade::lab()
    }
}

/// The sub-checks of `other-caller`; `None` where it stopped.
async fn other_caller_checks<F: Front>(front: &F, checks: &mut Checks) -> Option<()> {
    let name = registry::OTHER_CALLER.id;
    let names = front.caller_names();
    let (a, b, word) = (&names[0], &names[1], front.call_word());
    let before = counted(front, checks).await?;
    let step = format!("{a}'s {word}");
    let call = front.keyed_call(&step, &front.fresh_fields());
    let first = first(front, name, checks, &call, &step).await?;
    let after_first = counted(front, checks).await?;
    let other = front.by_caller(&call, 1, &format!("{b}'s {word}, same key and payload"));
    let seen = front.send_settled(name, &other).await;
    let exchanges = ids(&seen);
    let theirs = seen.last()?;
    let leak = second_caller(front, checks, &first, theirs, &exchanges);
    let after_other = counted(front, checks).await?;
    checks.add(
        scope_grade(),
        format!("{b}'s {word} made an effect of its own"),
        after_other - after_first == 1,
        "one new effect",
        effects(after_other - after_first),
        &exchanges,
    );
    if theirs.succeeded() && !leak {
        let again = front.again(&other, &format!("{b}'s retry"), None);
        let retried = front.send_settled(name, &again).await;
        let what = format!("{b}'s retry names {b}'s effect");
        let last = retried.last()?;
        retry_matches(
            front,
            checks,
            (lab26(), &what),
            theirs.identity.as_deref(),
            last,
            &[last.id],
        );
    }
    let mine = front.again(&call, &format!("{a}'s retry"), None);
    let retried = front.send_settled(name, &mine).await;
    let what = format!("{a}'s retry still names {a}'s effect");
    let last = retried.last()?;
    retry_matches(
        front,
        checks,
        (lab26(), &what),
        first.identity.as_deref(),
        last,
        &[last.id],
    );
    let after = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        "two callers, one key each: two effects in all",
        after - before == 2,
        "two effects",
        effects(after - before),
        &[first.id],
    );
    Some(())
}

/// The second caller's answer (`theirs`, the last of `exchanges`) to the first caller's key:
/// not the first caller's effect (a leak), and a success of its own. Whether it leaked.
fn second_caller<F: Front>(
    front: &F,
    checks: &mut Checks,
    first: &Told,
    theirs: &Told,
    exchanges: &[usize],
) -> bool {
    let names = front.caller_names();
    let (a, b, word) = (&names[0], &names[1], front.call_word());
    // An identity found on neither side is no evidence: two absent identities never name one
    // effect, and two equal answers without one say nothing of whose effect it is.
    let leak = theirs.succeeded() && same_effect(&theirs.identity, &first.identity);
    let same_answer = theirs.succeeded()
        && first.identity.is_some()
        && front.same_answer(first, theirs).unwrap_or_default();
    checks.add(
        scope_grade(),
        format!("{b} is not given {a}'s effect"),
        !(leak || same_answer),
        format!("{b}'s own effect"),
        if leak {
            format!(
                "DATA LEAK: {b} got {a}'s effect {} and its answer",
                first.identity.as_deref().unwrap_or("")
            )
        } else {
            theirs.described.clone()
        },
        &[first.id, theirs.id],
    );
    let blocked = !theirs.succeeded()
        && (front.in_progress(theirs) || front.conflict(theirs).is_some_and(|c| c.1));
    checks.add(
        scope_grade(),
        format!("{b}'s {word} succeeds as a {word} of its own"),
        theirs.succeeded() && !leak,
        "a success",
        if blocked {
            format!("{}: {a}'s key blocked {b}", theirs.described)
        } else if leak {
            "a replay of the other caller's effect".to_owned()
        } else {
            theirs.described.clone()
        },
        exchanges,
    );
    leak
}

/// An error a point provokes before the corrected call: which one (`None`: the file's
/// validation error; `Some(i)`: its `errors.server[i]`), and its kind in words.
pub(crate) struct Provoked {
    pub server: Option<usize>,
    pub kind: String,
}

/// `error-then-corrected`: a call refused for its payload leaves its key free, so the
/// corrected call under that key is processed, once.
pub async fn error_then_corrected<F: Front>(front: &F) -> PointReport {
    let point = &registry::ERROR_THEN_CORRECTED;
    let provoked = Provoked {
        server: None,
        kind: front.validation_kind().to_owned(),
    };
    let mut checks = Checks::new();
    error_then_fix(front, &mut checks, point.id, &provoked).await;
    PointReport::covered(point.id, point.title, checks.0)
}

/// The sub-checks of a point that provokes an error and then sends the corrected call under
/// the same key; `None` where it stopped.
pub async fn error_then_fix<F: Front>(
    front: &F,
    checks: &mut Checks,
    name: &'static str,
    provoked: &Provoked,
) -> Option<()> {
    let (kind, word) = (&provoked.kind, front.call_word());
    let before = counted(front, checks).await?;
    let call = front.keyed_call(
        &format!("the corrected {word} under the same key"),
        &front.fresh_fields(),
    );
    let refused = front.provoke(name, checks, &call, provoked).await?;
    let after_bad = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        format!("the {kind} made no effect"),
        after_bad == before,
        "no effect",
        effects(after_bad - before),
        &[refused.id],
    );
    if !front.keyed() {
        return None;
    }
    let settled = front.send_settled(name, &call).await;
    let exchanges = ids(&settled);
    let last = settled.last()?;
    let replayed_error = !last.succeeded()
        && last.answer.status().is_some()
        && last.answer.status() == refused.answer.status();
    checks.add(
        lab26(),
        format!("the corrected {word} after the {kind} is processed"),
        last.succeeded(),
        "a success",
        if replayed_error {
            format!(
                "{}: the saved {kind} was replayed; the key is burned",
                last.described
            )
        } else if last.refused {
            format!(
                "{}: the {kind} left a record that holds the key; the key is burned",
                last.described
            )
        } else {
            last.described.clone()
        },
        &exchanges,
    );
    let after = counted(front, checks).await?;
    checks.add(
        Grade::lab(),
        format!("the corrected {word} made one effect"),
        after - before == 1,
        "one effect",
        effects(after - before),
        &exchanges,
    );
    if last.succeeded() {
        let again = front.send_settled(name, &call).await;
        let retry = again.last()?;
        let what = (lab26(), "its retry names the same effect");
        retry_matches(
            front,
            checks,
            what,
            last.identity.as_deref(),
            retry,
            &[retry.id],
        );
    }
    Some(())
}

/// The rounds' effects: one per round, one identity per round.
fn fresh_effects<F: Front>(front: &F, checks: &mut Checks, found: &Rounds) {
    let rounds = found.rounds;
    checks.add(
        lab26(),
        format!(
            "each of {rounds} rounds of {} racers made exactly one effect",
            front.together()
        ),
        found.wrong_effects.is_empty(),
        "one effect per round",
        found
            .wrong_effects
            .first()
            .map_or("every round made one".to_owned(), |(round, n, _)| {
                format!(
                    "{} of {rounds} rounds did not; round {round} made {}",
                    found.wrong_effects.len(),
                    effects(*n)
                )
            }),
        &found
            .wrong_effects
            .first()
            .map(|w| w.2.clone())
            .unwrap_or_default(),
    );
    checks.add(
        lab26(),
        "every success in a round names the same effect",
        found.split_identities.is_empty(),
        "one identity per round",
        found
            .split_identities
            .first()
            .map_or("so they did".to_owned(), |(round, ids, _)| {
                format!("round {round}: successes named {}", ids.join(", "))
            }),
        &found
            .split_identities
            .first()
            .map(|w| w.2.clone())
            .unwrap_or_default(),
    );
}

/// The rounds' answers: every racer answered, the losers with the in-progress status, and a
/// retry after each round replaying its effect.
fn fresh_answers<F: Front>(front: &F, checks: &mut Checks, found: &Rounds) {
    let (in_progress, listed) = front.in_progress_words();
    checks.add(
        Grade::lab(),
        "every racer was answered",
        found.unanswered.is_empty(),
        format!("an answer to each {}", front.call_word()),
        found
            .unanswered
            .first()
            .map_or("all were".to_owned(), |(why, _)| {
                format!("{} were not; the first: {why}", found.unanswered.len())
            }),
        &first_ids(&found.unanswered),
    );
    checks.add(
        Grade::should(section::ENFORCEMENT),
        format!("a racer that did not get the success got {in_progress}"),
        found.other_statuses.is_empty(),
        format!("success or {listed}"),
        found.other_statuses.first().map_or(
            format!(
                "so it did ({} in-progress answers)",
                found.in_progress.len()
            ),
            |(what, _)| {
                format!(
                    "{} other answers; the first: {what}",
                    found.other_statuses.len()
                )
            },
        ),
        &first_ids(&found.other_statuses),
    );
    checks.add(
        lab26(),
        "after each round, a retry replays the round's effect",
        found.bad_retries.is_empty(),
        "a success naming the round's effect",
        found
            .bad_retries
            .first()
            .map_or("so it did".to_owned(), |(what, _)| {
                format!("{} did not; the first: {what}", found.bad_retries.len())
            }),
        &first_ids(&found.bad_retries),
    );
}
