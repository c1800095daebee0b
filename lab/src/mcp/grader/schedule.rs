//! Which replies the grader loses or holds back: `--lose-replies` and `--delay-replies`.
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
    /// Runs the call and sends its answer this much later, unless the client cancels first.
    Delay(Duration),
}

/// Both schedules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The calls whose reply is lost.
    pub lose: Calls,
    /// The calls whose reply is late.
    pub delay: Option<Delay>,
}

impl Schedule {
    /// Both schedules, refused when one call would be both lost and delayed.
    ///
    /// # Errors
    /// A message naming the overlap.
    pub fn new(lose: Calls, delay: Option<Delay>) -> Result<Schedule, String> {
        if let Some(delay) = &delay {
            if lose.first_of_each && delay.calls.first_of_each {
                return Err("--lose-replies and --delay-replies both name first".to_owned());
            }
            if let Some(both) = lose.numbers.intersection(&delay.calls.numbers).next() {
                return Err(format!(
                    "call {both} is in both --lose-replies and --delay-replies"
                ));
            }
        }
        Ok(Schedule { lose, delay })
    }

    /// The fate of call `number`.
    pub fn fate(&self, number: u64, first_of_intention: bool) -> Fate {
        if self.lose.contains(number, first_of_intention) {
            return Fate::Lose;
        }
        match &self.delay {
            Some(delay) if delay.calls.contains(number, first_of_intention) => {
                Fate::Delay(delay.by)
            }
            _ => Fate::Deliver,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replies lost: {}", self.lose)?;
        match &self.delay {
            Some(delay) => write!(f, "; delayed by {:?}: {}", delay.by, delay.calls),
            None => f.write_str("; delayed: none"),
        }
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
}
