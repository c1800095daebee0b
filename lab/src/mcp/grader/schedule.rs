//! Which replies the grader loses, holds back, answers as still in progress, or ends the
//! connection instead of sending: `--lose-replies`, `--delay-replies`, `--in-progress` and
//! `--drop-connection`.
//!
//! Calls are numbered by arrival: the first `create_ticket` call the grader sees is call 1,
//! counted across every session and every process that shares the grader's database. A
//! schedule is a comma-separated list of call numbers (`2`), ranges (`3-5`) and the word
//! `first`, the first call of every intention (a call whose key and fields no earlier call had).
//! A delay adds `@DURATION`: `first@1500ms`, `2,4@2s`.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

/// The longest delay a schedule may ask for: a delay is there to outlast a client's timeout,
/// and every wait of the lab is bounded.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// The largest call number a schedule may name.
pub const MAX_CALL: u64 = 10_000;

/// A set of calls: numbered ones, and perhaps the first call of every intention.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    numbers: BTreeSet<u64>,
    first_of_each: bool,
}

impl Calls {
    /// Whether call `number`, the first of its intention or not, is in the set.
    pub fn contains(&self, number: u64, first_of_intention: bool) -> bool {
        self.numbers.contains(&number) || (self.first_of_each && first_of_intention)
    }

    /// The first call of every intention.
    pub fn first() -> Calls {
        Calls {
            numbers: BTreeSet::new(),
            first_of_each: true,
        }
    }

    /// Whether the set names `first`.
    pub fn names_first(&self) -> bool {
        self.first_of_each
    }

    /// Whether the set names no call.
    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty() && !self.first_of_each
    }

    /// Parses `none`, or a comma-separated list of `N`, `N-M` and `first`.
    ///
    /// # Errors
    /// A message naming the part at fault.
    pub fn parse(text: &str) -> Result<Calls, String> {
        let mut calls = Calls::default();
        if text.trim() == "none" {
            return Ok(calls);
        }
        for part in text.split(',') {
            let part = part.trim();
            if part == "first" {
                calls.first_of_each = true;
                continue;
            }
            let (low, high) = match part.split_once('-') {
                Some((low, high)) => (number(low, part)?, number(high, part)?),
                None => (number(part, part)?, number(part, part)?),
            };
            if low > high {
                return Err(format!(
                    "{part:?}: a range runs from the lower call number up"
                ));
            }
            calls.numbers.extend(low..=high);
        }
        Ok(calls)
    }
}

fn number(text: &str, part: &str) -> Result<u64, String> {
    let expected = || {
        format!(
            "{part:?}: expected a call number from 1 to {MAX_CALL}, a range N-M, or first (the first call of every intention)"
        )
    };
    let value: u64 = text.trim().parse().map_err(|_| expected())?;
    if value == 0 || value > MAX_CALL {
        return Err(expected());
    }
    Ok(value)
}

impl fmt::Display for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.numbers.iter().map(u64::to_string).collect();
        if self.first_of_each {
            parts.push("first".to_owned());
        }
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join(","))
    }
}

/// Calls whose reply is held back, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delay {
    /// The calls.
    pub calls: Calls,
    /// How long each reply waits after its work finished.
    pub by: Duration,
}

impl Delay {
    /// Parses `CALLS@DURATION`, the duration in `ms` or `s` (at most [`MAX_DELAY`]).
    ///
    /// # Errors
    /// A message naming the part at fault.
    pub fn parse(text: &str) -> Result<Delay, String> {
        let Some((calls, by)) = text.rsplit_once('@') else {
            return Err(format!(
                "{text:?}: expected CALLS@DURATION, for example first@1500ms or 2,4@2s"
            ));
        };
        let calls = Calls::parse(calls)?;
        let by = duration(by)?;
        Ok(Delay { calls, by })
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?}: expected a duration such as 1500ms or 2s, at most 60s");
    let by = if let Some(millis) = text.strip_suffix("ms") {
        Duration::from_millis(millis.parse().map_err(|_| bad())?)
    } else if let Some(seconds) = text.strip_suffix('s') {
        Duration::from_secs(seconds.parse().map_err(|_| bad())?)
    } else {
        return Err(bad());
    };
    if by.is_zero() || by > MAX_DELAY {
        return Err(bad());
    }
    Ok(by)
}

/// What the grader does with one call's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Sends it.
    Deliver,
    /// Runs the call, keeps its answer from the client: the call waits until the client
    /// cancels it or goes away.
    Lose,
    /// Runs the call and sends its answer this much later, or as soon as the client's next
    /// request of the session is on record, unless the client cancels or leaves first.
    Delay(Duration),
    /// Runs the call (its ticket is committed) and answers the contract's `in_progress`
    /// error instead, as a service does while another call with the key is still running:
    /// only a retry with the same key learns the ticket.
    InProgress,
    /// Runs the call (its ticket is committed) and ends the connection instead of answering:
    /// over stdio the grader's process exits (a client must start it again, on the same
    /// `--database`, to go on), over HTTP the session is closed (its next request is told
    /// 404 and the client must open a new one), in process the pipe is closed.
    Drop,
}

/// Every schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The calls whose reply is lost.
    pub lose: Calls,
    /// The calls whose reply is late.
    pub delay: Option<Delay>,
    /// The calls answered `in_progress` after their ticket was made.
    pub in_progress: Calls,
    /// The calls after which the connection ends.
    pub drop: Calls,
}

impl Schedule {
    /// Replies lost and delayed, refused when one call would be both.
    ///
    /// # Errors
    /// A message naming the overlap.
    pub fn new(lose: Calls, delay: Option<Delay>) -> Result<Schedule, String> {
        Schedule::with(lose, delay, Calls::default(), Calls::default())
    }

    /// Every schedule, refused when one call would be in two of them; the messages name the
    /// options of `lab mcp --grade-client`.
    ///
    /// # Errors
    /// A message naming the overlap.
    pub fn with(
        lose: Calls,
        delay: Option<Delay>,
        in_progress: Calls,
        drop: Calls,
    ) -> Result<Schedule, String> {
        let empty = Calls::default();
        let named = [
            ("--lose-replies", &lose),
            (
                "--delay-replies",
                delay.as_ref().map_or(&empty, |d| &d.calls),
            ),
            ("--in-progress", &in_progress),
            ("--drop-connection", &drop),
        ];
        for (index, (one, calls)) in named.iter().enumerate() {
            for (other, others) in &named[index + 1..] {
                if calls.first_of_each && others.first_of_each {
                    return Err(format!("{one} and {other} both name first"));
                }
                if let Some(both) = calls.numbers.intersection(&others.numbers).next() {
                    return Err(format!("call {both} is in both {one} and {other}"));
                }
            }
        }
        Ok(Schedule {
            lose,
            delay,
            in_progress,
            drop,
        })
    }

    /// The fate of call `number`: a numbered schedule before `first`, so that `--lose-replies
    /// first --in-progress 3` answers call 3 in progress even when it begins an intention.
    pub fn fate(&self, number: u64, first_of_intention: bool) -> Fate {
        let delay = self.delay.as_ref();
        let fates = [
            (Some(&self.lose), Fate::Lose),
            (
                delay.map(|d| &d.calls),
                Fate::Delay(delay.map_or(Duration::ZERO, |d| d.by)),
            ),
            (Some(&self.in_progress), Fate::InProgress),
            (Some(&self.drop), Fate::Drop),
        ];
        let chosen = fates
            .iter()
            .find(|(calls, _)| calls.is_some_and(|c| c.numbers.contains(&number)))
            .or_else(|| {
                fates
                    .iter()
                    .find(|(calls, _)| calls.is_some_and(|c| c.first_of_each && first_of_intention))
            });
        chosen.map_or(Fate::Deliver, |(_, fate)| *fate)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replies lost: {}", self.lose)?;
        match &self.delay {
            Some(delay) => write!(f, "; delayed by {:?}: {}", delay.by, delay.calls)?,
            None => f.write_str("; delayed: none")?,
        }
        // Named only when used, so a report of the first two schedules reads as it always did.
        if !self.in_progress.is_empty() {
            write!(f, "; answered in progress: {}", self.in_progress)?;
        }
        if !self.drop.is_empty() {
            write!(f, "; connection dropped after: {}", self.drop)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_ranges_and_first_name_the_calls_they_say() {
        let calls = Calls::parse("2, 4-5,first").unwrap();
        assert!(calls.contains(2, false));
        assert!(!calls.contains(3, false));
        assert!(calls.contains(3, true));
        assert!(calls.contains(5, false));
        assert!(!calls.contains(6, false));
        assert_eq!(calls.to_string(), "2,4,5,first");
        assert!(Calls::parse("none").unwrap().is_empty());
    }

    #[test]
    fn a_bad_schedule_is_refused_with_the_part_at_fault() {
        for (text, names) in [
            ("0", "\"0\""),
            ("two", "\"two\""),
            ("5-3", "\"5-3\""),
            ("1,,2", "\"\""),
            ("10001", "\"10001\""),
        ] {
            let err = Calls::parse(text).unwrap_err();
            assert!(err.contains(names), "{text}: {err}");
        }
        assert!(
            Delay::parse("first")
                .unwrap_err()
                .contains("CALLS@DURATION")
        );
        assert!(Delay::parse("first@0ms").unwrap_err().contains("\"0ms\""));
        assert!(Delay::parse("first@61s").unwrap_err().contains("\"61s\""));
        assert!(Delay::parse("2@5m").unwrap_err().contains("\"5m\""));
        assert_eq!(
            Delay::parse("2,4@1500ms").unwrap().by,
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn a_call_lost_and_delayed_at_once_is_refused_and_loss_wins_otherwise() {
        let lose = Calls::parse("1-2").unwrap();
        let err = Schedule::new(lose.clone(), Some(Delay::parse("2@1s").unwrap())).unwrap_err();
        assert!(err.contains("call 2"), "{err}");
        let schedule = Schedule::new(lose, Some(Delay::parse("first@1s").unwrap())).unwrap();
        assert_eq!(schedule.fate(1, true), Fate::Lose);
        assert_eq!(schedule.fate(3, true), Fate::Delay(Duration::from_secs(1)));
        assert_eq!(schedule.fate(3, false), Fate::Deliver);
    }

    #[test]
    fn in_progress_and_dropped_calls_are_refused_in_two_schedules_and_numbers_come_before_first() {
        let calls = |text| Calls::parse(text).unwrap();
        let err =
            Schedule::with(calls("first"), None, calls("first"), Calls::default()).unwrap_err();
        assert_eq!(err, "--lose-replies and --in-progress both name first");
        let err = Schedule::with(calls("none"), None, calls("2-3"), calls("3")).unwrap_err();
        assert_eq!(err, "call 3 is in both --in-progress and --drop-connection");
        let err = Schedule::with(
            calls("none"),
            Some(Delay::parse("4@1s").unwrap()),
            Calls::default(),
            calls("4"),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "call 4 is in both --delay-replies and --drop-connection"
        );
        let schedule = Schedule::with(calls("first"), None, calls("3"), calls("5")).unwrap();
        assert_eq!(schedule.fate(1, true), Fate::Lose);
        assert_eq!(schedule.fate(3, true), Fate::InProgress);
        assert_eq!(schedule.fate(5, false), Fate::Drop);
        assert_eq!(schedule.fate(6, false), Fate::Deliver);
        assert_eq!(
            schedule.to_string(),
            "replies lost: first; delayed: none; answered in progress: 3; connection dropped after: 5"
        );
        let old = Schedule::new(calls("first"), None).unwrap();
        assert_eq!(old.to_string(), "replies lost: first; delayed: none");
    }
}
