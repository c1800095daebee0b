//! The audit's judgement: the creates of a recording grouped into intentions, by the rules of
//! the check (one caller; one key; or, after a lost or failed reply, the same canonical payload
//! sent again), and each finding with the exchanges it rests on.
//!
//! An intention never spans callers. Within a caller, the requests with one key are one
//! intention's attempts; a request sent after another's reply was lost or failed, with the same
//! canonical payload, continues that intention (a retry without the key, or a re-plan under a
//! new key). A payload sent again after a reply that arrived is a new intention, as a new key
//! is: the recording cannot tell a second ticket with the same title from a mistake, and the
//! audit does not guess.

use std::collections::{BTreeSet, HashMap};

use super::record::Delivery;
use super::rules::Effect;
use super::texts::{Text, Texts};
use crate::check::report::{Checks, Coverage, Grade, PointReport, SubCheck, Verdict};

/// One create, as the judgement keeps it: small, so that a long recording's creates fit. Its
/// texts (key, effect) are kept in the audit's [`Texts`].
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When it started (ns since the epoch), if recorded.
    pub start_ns: Option<i64>,
    /// How long until its reply was complete, if recorded.
    pub took_ms: Option<u64>,
    /// The key it carried.
    pub key: Option<Text>,
    /// Its canonical payload's digest, when the body was recorded.
    pub payload: Option<u64>,
    /// What its reply says of the effect.
    pub effect: Effect<Text>,
    /// Its caller, as an index into the audit's list of callers.
    pub caller: u32,
    /// Whether the recording cannot say which key it carried (a span that records no key
    /// header, a tool call whose arguments were not recorded): then `key` is `None`.
    pub key_unknown: bool,
    /// Whether the caller got the reply.
    pub delivery: Delivery,
    /// Whether the reply it got was a failure (a server error, a failed tool call).
    pub failed: bool,
    /// Whether it is a server's record of the request (a server span), not its sender's.
    pub server_side: bool,
}

impl Attempt {
    /// When its reply was complete (ns since the epoch), if recorded.
    fn end_ns(&self) -> Option<i64> {
        let took = self.took_ms?.saturating_mul(1_000_000);
        Some(self.start_ns?.saturating_add_unsigned(took))
    }
}

/// How an attempt ended for its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// A reply arrived and was no failure.
    Answered,
    /// A reply arrived and was a failure.
    Failed,
    /// No reply arrived.
    Lost,
    /// The recording cannot say whether a reply arrived.
    Unknown,
}

/// Whether an attempt's caller may not have the answer: its reply lost, failed, or (a
/// recording that cannot say whether it arrived) naming no effect.
fn unanswered(attempt: &Attempt) -> bool {
    match end_of(attempt) {
        End::Lost | End::Failed => true,
        End::Unknown => !matches!(attempt.effect, Effect::Made(_) | Effect::Unnamed),
        End::Answered => false,
    }
}

fn end_of(attempt: &Attempt) -> End {
    match attempt.delivery {
        Delivery::Lost => End::Lost,
        Delivery::Unknown => End::Unknown,
        Delivery::Received if attempt.failed => End::Failed,
        Delivery::Received => End::Answered,
    }
}

/// One key's attempts, or one attempt without a key, in the order they were sent.
struct Set<'m> {
    caller: u32,
    key: Option<&'m str>,
    /// The recording does not say which key its one attempt carried.
    key_unknown: bool,
    /// Indices into the attempts, in order.
    attempts: &'m [usize],
    /// The payload of its first attempt whose body was recorded.
    payload: Option<u64>,
}

/// The points of the audit, each with its id and title; the promises each covers are the
/// contract's table of the audit (`contract::coverage`), which a test holds to this list.
pub struct AuditPoint {
    /// Its id.
    pub id: &'static str,
    /// What it checks.
    pub title: &'static str,
    /// What a recording without a case of it lacks.
    pub absent: &'static str,
}

/// Every point of the audit, in the order the report shows them.
pub const POINTS: [AuditPoint; 5] = [
    AuditPoint {
        id: "retry-without-key",
        title: "a request sent again without its key after a lost or failed reply made no second effect",
        absent: "no request was sent again without a key after a lost or failed reply",
    },
    AuditPoint {
        id: "new-key-after-lost-reply",
        title: "a request re-planned under a new key after a lost or failed reply made no second effect",
        absent: "no request was sent again under a new key after a lost or failed reply",
    },
    AuditPoint {
        id: "changed-payload",
        title: "a key sent again with another payload was not accepted",
        absent: "no key was sent again with another payload",
    },
    AuditPoint {
        id: "one-key-one-effect",
        title: "every success under one key names one effect",
        absent: "no success under a key named its effect",
    },
    AuditPoint {
        id: "unresolved-intention",
        title: "every request whose reply never arrived was asked for again",
        absent: "no create at all",
    },
];

/// How many requests with the same payload, sent just before one, are asked whether it went
/// out while their reply was on its way.
const OVERLAP_WINDOW: usize = 8;

/// How many findings of one kind are listed one by one; the rest are counted.
const LISTED: usize = 20;

/// What one point found: its failures, the things it could not judge (by reason), and how many
/// cases it judged.
#[derive(Default)]
struct Tally {
    failures: Vec<(String, String, Vec<usize>)>,
    unjudged: Vec<(String, Vec<usize>)>,
    judged: usize,
}

impl Tally {
    fn fail(&mut self, observed: String, expected: &str, ids: Vec<usize>) {
        self.judged += 1;
        self.failures.push((observed, expected.to_owned(), ids));
    }

    fn unjudged(&mut self, why: &str, id: usize) {
        if let Some((_, ids)) = self.unjudged.iter_mut().find(|(w, _)| w == why) {
            ids.push(id);
        } else {
            self.unjudged.push((why.to_owned(), vec![id]));
        }
    }

    /// The point's sub-checks: each failure (the first twenty, then a count), each reason a
    /// case was not judged (with its first exchanges), and one line for what held.
    fn into_checks(self, grade: Grade, held: &str, cited: &mut BTreeSet<usize>) -> Vec<SubCheck> {
        let mut checks = Checks::new();
        let failures = self.failures.len();
        for (i, (observed, expected, ids)) in self.failures.into_iter().enumerate() {
            if i == LISTED {
                checks.add(
                    grade,
                    format!("and {} more like these", failures - LISTED),
                    false,
                    "none",
                    format!("{failures} in all"),
                    &[],
                );
                break;
            }
            cited.extend(&ids);
            let what = observed.clone();
            checks.add(grade, what, false, expected, observed, &ids);
        }
        for (why, ids) in self.unjudged {
            let shown: Vec<usize> = ids.iter().copied().take(5).collect();
            cited.extend(&shown);
            checks.not_covered(
                grade,
                format!(
                    "{} case{} the recording cannot decide",
                    ids.len(),
                    plural(ids.len())
                ),
                held,
                why,
                &shown,
            );
        }
        if failures == 0 && self.judged > 0 {
            checks.add(
                grade,
                format!(
                    "{held} ({} case{} judged)",
                    self.judged,
                    plural(self.judged)
                ),
                true,
                held,
                format!("{} held", self.judged),
                &[],
            );
        }
        checks.0
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The exchange number a report cites for attempt `index`.
fn id(index: usize) -> usize {
    index + 1
}

fn ids(attempts: &[usize]) -> Vec<usize> {
    attempts.iter().map(|&i| id(i)).collect()
}

/// Judges `attempts` (in the order they were read); returns each point's report and the
/// exchanges the report cites.
pub fn judge(attempts: &[Attempt], texts: &Texts) -> (Vec<PointReport>, BTreeSet<usize>) {
    let mut members = Vec::new();
    let sets = sets(attempts, texts, &mut members);
    let mut tallies: [Tally; 5] = Default::default();
    let [retry, replan, changed, one_effect, unresolved] = &mut tallies;
    let by_payload = by_payload(attempts, &sets);
    let next = continuations(attempts, &sets, &by_payload);
    let prev = predecessors(&next);
    let ends = Ends::of((attempts, texts), &sets, &next);
    for (s, set) in sets.iter().enumerate() {
        if set.key.is_some() {
            judge_key((attempts, texts), set, changed, one_effect);
        }
        // A lost reply asked for again: under its key, or by the set that continues it.
        let lost_before_last = set.attempts[..set.attempts.len() - 1]
            .iter()
            .any(|&i| end_of(&attempts[i]) == End::Lost);
        let lost_and_continued = next[s].is_some()
            && set
                .attempts
                .last()
                .is_some_and(|&i| end_of(&attempts[i]) == End::Lost);
        if lost_before_last || lost_and_continued {
            unresolved.judged += 1;
        }
        match next[s] {
            Some(t) if sets[t].key_unknown => retry.unjudged(
                "the request sent again carries a key the recording does not show",
                id(sets[t].attempts[0]),
            ),
            Some(t) if sets[t].key.is_none() => {
                judge_continuation((attempts, texts), set, &sets[t], retry);
            }
            Some(t) => judge_continuation((attempts, texts), set, &sets[t], replan),
            None => judge_end(
                attempts,
                (&sets, &prev, s),
                &ends,
                [retry, replan, unresolved],
            ),
        }
    }
    for (s, t) in overlaps(attempts, &sets, &next, &by_payload) {
        let (first, _) = effects((attempts, texts), &sets[s]);
        let (then, _) = effects((attempts, texts), &sets[t]);
        if first.is_empty() || then.is_empty() || first == then {
            continue;
        }
        let (tally, how) = if sets[t].key.is_none() {
            (&mut *retry, "sent without a key")
        } else {
            (&mut *replan, "sent under a new key")
        };
        tally.unjudged(
            &format!(
                "{how} while an earlier request with the same payload was still on its way, and \
                 the two made two effects: a retry whose client gave up waiting, or a second \
                 intention sent in parallel. The recording does not mark a reply the caller \
                 never got (lab proxy --record does)"
            ),
            id(sets[t].attempts[0]),
        );
    }
    reports(tallies)
}

/// A set nothing continues: an intention's end. Its last reply lost and never asked for again
/// is unresolved, when the recording could have shown a request sent again: under its key, or
/// (without one) with its payload, from a caller whose every body was recorded.
fn judge_end(
    attempts: &[Attempt],
    (sets, prev, s): (&[Set], &[Option<usize>], usize),
    ends: &Ends,
    [retry, replan, unresolved]: [&mut Tally; 3],
) {
    let set = &sets[s];
    let last = *set.attempts.last().expect("a set holds an attempt");
    let end = end_of(&attempts[last]);
    let matchable =
        set.key.is_some() || (set.payload.is_some() && !ends.unmatched.contains(&set.caller));
    if unanswered(&attempts[last]) && !matchable {
        let why = "its body or its key is not in the recording: a request sent again cannot be \
                   matched to it";
        retry.unjudged(why, id(last));
        replan.unjudged(why, id(last));
    }
    let chain = chain_to(sets, prev, s);
    let answered = chain
        .iter()
        .any(|&id| end_of(&attempts[id - 1]) == End::Answered);
    match end {
        End::Lost if answered => {}
        End::Lost if !matchable => unresolved.unjudged(
            "its body or its key is not in the recording: whether it was asked for again cannot \
             be read",
            id(last),
        ),
        End::Lost if ends.elsewhere.contains(&s) => unresolved.unjudged(
            "its key or its payload was sent again later by a caller told apart by other \
             credentials (a token refreshed, or another caller): whether that was its retry \
             cannot be read",
            id(last),
        ),
        End::Lost => unresolved.fail(
            format!(
                "#{} got no reply, and the intention was never asked for again",
                id(last)
            ),
            "a request whose reply never arrived is sent again with its key",
            chain,
        ),
        End::Unknown => unresolved.unjudged(
            "the recording does not say whether its reply reached the caller (a server's span, \
             or a tool call the framework ended with an error of its own)",
            id(last),
        ),
        End::Answered | End::Failed => {}
    }
}

/// What an intention's end is judged against.
struct Ends {
    /// Callers some of whose requests have no recorded body: a request sent again by them may
    /// be one the audit cannot match.
    unmatched: BTreeSet<u32>,
    /// The sets whose last reply was lost, nothing of their caller continues them, and whose
    /// key or payload another caller sent later: the same client under a refreshed token
    /// looks like another caller.
    elsewhere: BTreeSet<usize>,
}

impl Ends {
    fn of(creates: Creates, sets: &[Set], next: &[Option<usize>]) -> Ends {
        let attempts = creates.0;
        let lost_ends: Vec<usize> = (0..sets.len())
            .filter(|&s| next[s].is_none())
            .filter(|&s| {
                let last = sets[s].attempts.last();
                last.is_some_and(|&i| end_of(&attempts[i]) == End::Lost)
            })
            .collect();
        Ends {
            unmatched: attempts
                .iter()
                .filter(|a| a.payload.is_none())
                .map(|a| a.caller)
                .collect(),
            elsewhere: sent_again_by_others(creates, sets, &lost_ends),
        }
    }
}

/// When an attempt was sent (its start, then the order read) and by whom.
type Sent = ((Option<i64>, usize), u32);

/// The latest attempt carrying one key or payload, and the latest of another caller than its.
#[derive(Default)]
struct Latest {
    first: Option<Sent>,
    other: Option<Sent>,
}

impl Latest {
    fn saw(&mut self, sent: Sent) {
        match self.first {
            None => self.first = Some(sent),
            Some(first) if first.1 == sent.1 => self.first = Some(first.max(sent)),
            Some(first) if sent.0 > first.0 => (self.first, self.other) = (Some(sent), Some(first)),
            Some(_) => self.other = self.other.max(Some(sent)),
        }
    }

    /// Whether a caller other than `caller` sent it after `at`.
    fn by_another_after(&self, caller: u32, at: (Option<i64>, usize)) -> bool {
        let latest = match self.first {
            Some(first) if first.1 != caller => Some(first),
            _ => self.other,
        };
        latest.is_some_and(|(when, _)| when > at)
    }
}

/// The sets among `ends` whose key, or payload, a caller other than theirs sent after their
/// last attempt: one pass over the attempts, keeping per key and payload of `ends` the latest
/// two senders.
fn sent_again_by_others(
    (attempts, texts): Creates,
    sets: &[Set],
    ends: &[usize],
) -> BTreeSet<usize> {
    let mut keys: HashMap<&str, Latest> = HashMap::new();
    let mut payloads: HashMap<u64, Latest> = HashMap::new();
    for &s in ends {
        if let Some(key) = sets[s].key {
            keys.entry(key).or_default();
        }
        if let Some(payload) = sets[s].payload {
            payloads.entry(payload).or_default();
        }
    }
    // A server's span of a request is no request sent again: its caller is the server.
    for (i, attempt) in attempts.iter().enumerate().filter(|(_, a)| !a.server_side) {
        let sent = ((attempt.start_ns, i), attempt.caller);
        if let Some(latest) = attempt.key.and_then(|k| keys.get_mut(texts.get(k))) {
            latest.saw(sent);
        }
        if let Some(latest) = attempt.payload.and_then(|p| payloads.get_mut(&p)) {
            latest.saw(sent);
        }
    }
    ends.iter()
        .copied()
        .filter(|&s| {
            let set = &sets[s];
            let last = *set.attempts.last().expect("a set holds an attempt");
            let at = (attempts[last].start_ns, last);
            let by_key = set.key.and_then(|k| keys.get(k));
            let by_payload = set.payload.and_then(|p| payloads.get(&p));
            [by_key, by_payload]
                .into_iter()
                .flatten()
                .any(|latest| latest.by_another_after(set.caller, at))
        })
        .collect()
}

/// Each point's report from its tally, and the exchanges they cite.
fn reports(tallies: [Tally; 5]) -> (Vec<PointReport>, BTreeSet<usize>) {
    let mut cited = BTreeSet::new();
    let grades = [
        Grade::lab(),
        Grade::lab(),
        Grade::must("2.7"),
        Grade::lab_over_should("2.6"),
        Grade::lab(),
    ];
    let held = [
        "the retries after a lost or failed reply made no second effect",
        "the re-plans after a lost or failed reply made no second effect",
        "no key was accepted with another payload",
        "every key's successes name one effect",
        "every reply that never arrived was asked for again",
    ];
    let reports = tallies
        .into_iter()
        .zip(POINTS.iter().zip(grades.into_iter().zip(held)))
        .map(|(tally, (point, (grade, held)))| {
            let judged = tally.judged;
            let undecided = !tally.unjudged.is_empty();
            let mut report = PointReport::covered(
                point.id,
                point.title,
                tally.into_checks(grade, held, &mut cited),
            );
            if judged == 0 {
                report.verdict = Verdict::NotCovered;
                report.coverage = Coverage::NotCovered {
                    reason: if undecided {
                        "every case the recordings hold lacks what deciding it needs (below)"
                            .to_owned()
                    } else {
                        format!("the recordings hold no case of it: {}", point.absent)
                    },
                };
            }
            report
        })
        .collect();
    (reports, cited)
}

/// The attempts grouped into sets: per caller, one set per key, and one per attempt without a
/// key; each set's attempts in the order they were sent (by start time where every attempt of
/// the caller has one, else as read), and the sets in the order of their first attempts.
/// `members` holds every set's attempts, set after set: a vector per set cost an allocation
/// for each of a recording's creates.
fn sets<'m>(attempts: &[Attempt], texts: &'m Texts, members: &'m mut Vec<usize>) -> Vec<Set<'m>> {
    let mut by_caller: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, attempt) in attempts.iter().enumerate() {
        by_caller.entry(attempt.caller).or_default().push(i);
    }
    let mut callers: Vec<(u32, Vec<usize>)> = by_caller.into_iter().collect();
    callers.sort_by_key(|(caller, _)| *caller);
    let mut sets = Vec::new();
    // Each attempt and its set, in the order sent.
    let mut sent = Vec::with_capacity(attempts.len());
    for (caller, mut order) in callers {
        if order.iter().all(|&i| attempts[i].start_ns.is_some()) {
            order.sort_by_key(|&i| (attempts[i].start_ns, i));
        }
        let mut keyed: HashMap<&str, usize> = HashMap::new();
        for i in order {
            let attempt = &attempts[i];
            let key = attempt.key.map(|key| texts.get(key));
            let new = Set {
                caller,
                key,
                key_unknown: key.is_none() && attempt.key_unknown,
                attempts: &[],
                payload: None,
            };
            let set = match key {
                Some(key) => *keyed.entry(key).or_insert_with(|| {
                    sets.push(new);
                    sets.len() - 1
                }),
                None => {
                    sets.push(new);
                    sets.len() - 1
                }
            };
            sent.push((i, set));
            if sets[set].payload.is_none() {
                sets[set].payload = attempt.payload;
            }
        }
    }
    // Each set's first place in `members`, then its next free one.
    let mut next = vec![0; sets.len()];
    for &(_, s) in &sent {
        next[s] += 1;
    }
    let mut at = 0;
    for slot in &mut next {
        (*slot, at) = (at, at + *slot);
    }
    let first = next.clone();
    members.clear();
    members.resize(sent.len(), 0);
    for (i, s) in sent {
        members[next[s]] = i;
        next[s] += 1;
    }
    let members: &'m [usize] = members;
    for (s, set) in sets.iter_mut().enumerate() {
        set.attempts = &members[first[s]..next[s]];
    }
    sets
}

/// The sets with a recorded payload, grouped by caller and payload, each group in the order
/// its sets were sent.
fn by_payload(attempts: &[Attempt], sets: &[Set]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sets.len())
        .filter(|&s| sets[s].payload.is_some())
        .collect();
    order.sort_by_key(|&s| {
        let first = sets[s].attempts[0];
        (
            sets[s].caller,
            sets[s].payload,
            attempts[first].start_ns,
            first,
        )
    });
    order
}

/// Whether sets `a` and `b` are of one caller and payload.
fn same_payload(sets: &[Set], a: usize, b: usize) -> bool {
    (sets[a].caller, sets[a].payload) == (sets[b].caller, sets[b].payload)
}

/// The sets of `caller` with `payload`, from [`by_payload`]'s order.
fn with_payload<'g>(
    by_payload: &'g [usize],
    sets: &[Set],
    caller: u32,
    payload: u64,
) -> &'g [usize] {
    let group = |s: &usize| (sets[*s].caller, sets[*s].payload);
    let from = by_payload.partition_point(|s| group(s) < (caller, Some(payload)));
    let to = by_payload.partition_point(|s| group(s) <= (caller, Some(payload)));
    &by_payload[from..to]
}

/// For each set, the set that continues it: the caller's next set, begun after this one's last
/// attempt, with the same canonical payload, when this one's last reply was lost or failed.
fn continuations(attempts: &[Attempt], sets: &[Set], later: &[usize]) -> Vec<Option<usize>> {
    let mut sending_order: Vec<usize> = (0..sets.len()).collect();
    sending_order.sort_by_key(|&s| {
        let first = sets[s].attempts[0];
        (sets[s].caller, attempts[first].start_ns, first)
    });
    let start = |s: usize| {
        let first = sets[s].attempts[0];
        (attempts[first].start_ns, first)
    };
    let mut next = vec![None; sets.len()];
    let mut taken = vec![false; sets.len()];
    for &s in &sending_order {
        let set = &sets[s];
        let Some(payload) = set.payload else { continue };
        let last = *set.attempts.last().expect("a set holds an attempt");
        if !unanswered(&attempts[last]) {
            continue;
        }
        let after_last = (attempts[last].start_ns, last);
        // The candidates are in the order they were sent: the first one sent after the last
        // attempt, found by halving, then the first of those not yet taken.
        let candidates = with_payload(later, sets, set.caller, payload);
        let from = candidates.partition_point(|&t| start(t) <= after_last);
        if let Some(&t) = candidates[from..]
            .iter()
            .find(|&&t| t != s && !taken[t] && start(t) > start(s))
        {
            next[s] = Some(t);
            taken[t] = true;
        }
    }
    next
}

/// The requests sent (without a key, or under a key of their own) with a payload another
/// request of the caller carried, while that one's reply was still on its way: `(first set,
/// second)`. A retry or re-plan its client gave up waiting for, or a second intention sent in
/// parallel: a recording that does not mark a reply the caller never got cannot say which.
fn overlaps(
    attempts: &[Attempt],
    sets: &[Set],
    next: &[Option<usize>],
    by_payload: &[usize],
) -> Vec<(usize, usize)> {
    let continued: BTreeSet<usize> = next.iter().flatten().copied().collect();
    let mut found = Vec::new();
    for group in by_payload.chunk_by(|&a, &b| same_payload(sets, a, b)) {
        // In the order they were sent; a request is compared with the few sent just before it
        // (a retry follows its request closely), so a payload sent a million times costs a
        // million steps, not a million squared.
        for (j, &t) in group.iter().enumerate() {
            let first = &attempts[sets[t].attempts[0]];
            if continued.contains(&t) {
                continue;
            }
            let in_flight = group[j.saturating_sub(OVERLAP_WINDOW)..j]
                .iter()
                .copied()
                .find(|&s| {
                    let last = &attempts[*sets[s].attempts.last().unwrap_or(&0)];
                    matches!((last.start_ns, last.end_ns(), first.start_ns),
                    (Some(a), Some(b), Some(c)) if a < c && c < b)
                });
            if let Some(s) = in_flight {
                found.push((s, t));
            }
        }
    }
    found.sort_unstable();
    found
}

/// The exchanges of the chain that ends in set `end`: every set before it that it continues.
fn chain_to(sets: &[Set], prev: &[Option<usize>], end: usize) -> Vec<usize> {
    let mut chain = vec![end];
    while let Some(before) = prev[*chain.last().unwrap_or(&end)] {
        chain.push(before);
    }
    chain
        .into_iter()
        .rev()
        .flat_map(|s| ids(sets[s].attempts))
        .collect()
}

/// For each set, the set it continues (the inverse of [`continuations`]).
fn predecessors(next: &[Option<usize>]) -> Vec<Option<usize>> {
    let mut prev = vec![None; next.len()];
    for (s, t) in next.iter().enumerate() {
        if let Some(t) = t {
            prev[*t] = Some(s);
        }
    }
    prev
}

/// The creates with their texts.
type Creates<'a> = (&'a [Attempt], &'a Texts);

/// The effects a set's successes name, and whether one of its successes names none.
fn effects<'a>((attempts, texts): Creates<'a>, set: &Set) -> (BTreeSet<&'a str>, bool) {
    let mut named = BTreeSet::new();
    let mut unnamed = false;
    for &i in set.attempts {
        match attempts[i].effect {
            Effect::Made(id) => {
                named.insert(texts.get(id));
            }
            Effect::Unnamed => unnamed = true,
            Effect::Refused | Effect::Unknown => {}
        }
    }
    (named, unnamed)
}

/// A set `t` that continues `s`: two effects for one intention, or not.
fn judge_continuation(creates: Creates, s: &Set, t: &Set, tally: &mut Tally) {
    let attempts = creates.0;
    let (first, first_unnamed) = effects(creates, s);
    let (then, then_unnamed) = effects(creates, t);
    let cite: Vec<usize> = ids(s.attempts).into_iter().chain(ids(t.attempts)).collect();
    let retry = t.attempts[0];
    let how = match (&s.key, &t.key) {
        (_, None) => "sent again without a key".to_owned(),
        (Some(_), Some(key)) => format!("re-planned under a new key ({key})"),
        (None, Some(key)) => format!("sent again under a key ({key}) the first lacked"),
    };
    let expected = "one effect for one intention: the retry keeps the first request's key";
    if !first.is_empty() && !then.is_empty() {
        let new: Vec<&&str> = then.difference(&first).collect();
        if new.is_empty() {
            tally.judged += 1;
        } else {
            tally.fail(
                format!(
                    "#{} {how} while #{}'s reply was {}: two effects, {} and {}",
                    id(retry),
                    id(*s.attempts.last().unwrap_or(&retry)),
                    lost_or_failed(attempts, s),
                    first.iter().next().copied().unwrap_or_default(),
                    new[0]
                ),
                expected,
                cite,
            );
        }
        return;
    }
    let made_then = !then.is_empty() || then_unnamed;
    if !made_then
        && t.attempts
            .iter()
            .all(|&i| attempts[i].effect == Effect::Refused)
    {
        tally.judged += 1;
        return;
    }
    let why = if first.is_empty() && !first_unnamed {
        "the first request's reply is not in the recording (or was a server error): whether it \
         made an effect cannot be read"
    } else if !made_then {
        "the retry's outcome is not in the recording"
    } else {
        "a success whose effect the recording does not name (no body recorded, or nothing at \
         the file's identity): whether the two are one effect cannot be read"
    };
    tally.unjudged(why, id(retry));
}

/// What became of `set`'s last reply: lost, or a failure.
fn lost_or_failed(attempts: &[Attempt], set: &Set) -> &'static str {
    match set.attempts.last().map(|&i| end_of(&attempts[i])) {
        Some(End::Lost) => "lost",
        _ => "a failure",
    }
}

/// One key's attempts: another payload accepted, and two effects named.
fn judge_key(creates: Creates, set: &Set, changed: &mut Tally, one_effect: &mut Tally) {
    let attempts = creates.0;
    let key = set.key.unwrap_or_default();
    let (named, _) = effects(creates, set);
    if named.len() > 1 {
        let mut names = named.iter();
        one_effect.fail(
            format!(
                "the key {key} was answered with {} effects: {}",
                named.len(),
                names
                    .by_ref()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "every success under one key names the first effect",
            ids(set.attempts),
        );
    } else if !named.is_empty() {
        one_effect.judged += 1;
    }
    let Some(first) = set.payload else {
        if set.attempts.len() > 1 {
            changed.unjudged(
                "no body was recorded: the payloads cannot be compared",
                id(set.attempts[0]),
            );
        }
        return;
    };
    let origin = set
        .attempts
        .iter()
        .copied()
        .find(|&i| attempts[i].payload == Some(first))
        .unwrap_or(set.attempts[0]);
    for &i in set.attempts {
        let attempt = &attempts[i];
        match attempt.payload {
            Some(p) if p != first => {
                if matches!(attempt.effect, Effect::Made(_) | Effect::Unnamed) {
                    changed.fail(
                        format!(
                            "#{} reused the key {key} of #{} with another payload, and was \
                             accepted",
                            id(i),
                            id(origin)
                        ),
                        "another payload under a used key is refused (422)",
                        vec![id(origin), id(i)],
                    );
                } else {
                    changed.judged += 1;
                }
            }
            Some(_) => {}
            None => changed.unjudged(
                "no body was recorded for this attempt: its payload cannot be compared",
                id(i),
            ),
        }
    }
}
