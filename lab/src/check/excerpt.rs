//! What the JUnit and HTML reports quote of a run: a failed point's exchanges (as many as a
//! reader can follow), each trimmed to a readable length, and the effect count read just
//! before and just after them.
//!
//! Both reports take the same excerpt, so a CI system's failure text and the page a person
//! reads show the same evidence.

use super::history::{Answer, CountRead, Exchange};
use super::report::{PointReport, Report};

/// The most exchanges a report draws for one point; the rest are named by number.
pub const MOST_DRAWN: usize = 12;

/// The most characters of a body a report quotes.
pub const QUOTED_BODY: usize = 300;

/// How many of the drawn exchanges come from the end of a long run (the rest from its start):
/// a point that retries shows how it began and how it ended.
pub const DRAWN_FROM_THE_END: usize = 4;

/// A point's evidence: the exchanges drawn, those left out, and the counts around them.
#[derive(Debug)]
pub struct Excerpt<'a> {
    /// The exchanges drawn, in order.
    pub drawn: Vec<&'a Exchange>,
    /// The numbers of the exchanges the evidence rests on that are not drawn: they come after
    /// the first `gap_at` drawn ones.
    pub left_out: Vec<usize>,
    /// Where the exchanges left out belong among the drawn ones.
    pub gap_at: usize,
    /// The last count read before the first drawn exchange.
    pub before: Option<CountRead>,
    /// The first count read after the last drawn exchange.
    pub after: Option<CountRead>,
    /// An audit's: where the recordings hold the exchanges (`#2 traffic.har entries[1]`), in
    /// place of the counts a run reads.
    pub recorded_at: Option<String>,
}

impl Excerpt<'_> {
    /// The lines around the exchanges: the counts read before and after them, or where the
    /// recordings hold them.
    pub fn framing(&self) -> (String, String) {
        match &self.recorded_at {
            Some(places) => (format!("recorded at: {places}"), String::new()),
            None => (
                format!("count before: {}", count_line(self.before)),
                format!("count after: {}", count_line(self.after)),
            ),
        }
    }
}

/// The evidence of `point`: its own exchanges when there are few; otherwise (and in an audit,
/// whose exchanges are the recordings', no point's own) those its failed sub-checks rest on,
/// the first [`MOST_DRAWN`] of them drawn.
pub fn of_point<'a>(report: &'a Report, point: &PointReport) -> Excerpt<'a> {
    let own: Vec<usize> = report
        .history
        .iter()
        .filter(|e| e.point == point.name)
        .map(|e| e.id)
        .collect();
    let mut ids: Vec<usize> = if own.len() <= MOST_DRAWN && report.command != super::report::AUDIT {
        own
    } else {
        point
            .checks
            .iter()
            .filter(|c| c.failed())
            .flat_map(|c| c.exchanges.iter().copied())
            .collect()
    };
    ids.sort_unstable();
    ids.dedup();
    of_exchanges(report, &ids)
}

/// The evidence resting on the exchanges `ids` (in order, without repeats): all of them, or
/// when there are more than [`MOST_DRAWN`], the first ones and the last [`DRAWN_FROM_THE_END`].
pub fn of_exchanges<'a>(report: &'a Report, ids: &[usize]) -> Excerpt<'a> {
    let (shown, left_out, gap_at) = if ids.len() <= MOST_DRAWN {
        (ids.to_vec(), Vec::new(), ids.len())
    } else {
        let head = MOST_DRAWN - DRAWN_FROM_THE_END;
        let tail = ids.len() - DRAWN_FROM_THE_END;
        let mut shown = ids[..head].to_vec();
        shown.extend_from_slice(&ids[tail..]);
        (shown, ids[head..tail].to_vec(), head)
    };
    let drawn: Vec<&Exchange> = shown.iter().filter_map(|&id| report.exchange(id)).collect();
    let first = drawn.first().map(|e| e.id);
    let last = drawn.last().map(|e| e.id);
    let before = first.and_then(|first| {
        report
            .counts
            .iter()
            .rev()
            .find(|c| c.after < first)
            .copied()
    });
    let after = last.and_then(|last| report.counts.iter().find(|c| c.after >= last).copied());
    Excerpt {
        drawn,
        left_out,
        gap_at,
        before,
        after,
        recorded_at: if report.command == super::report::AUDIT {
            report.places_of(ids)
        } else {
            None
        },
    }
}

/// The most characters of a reply a calibration message quotes.
pub const QUOTED: usize = 300;

/// `text` cut to [`QUOTED`] characters on one line, marking the cut.
pub fn one_line(text: &str) -> String {
    let one_line = crate::error::folded(text);
    let mut out: String = one_line.chars().take(QUOTED).collect();
    if out.len() < one_line.len() {
        out.push_str(&format!("… ({} bytes in all)", text.len()));
    }
    out
}

/// An answer for a message: `500 {"error": ...}`, or why none came.
pub fn quoted(answer: &Answer) -> String {
    match answer {
        Answer::Reply { status, body, .. } if body.trim().is_empty() => {
            format!("{status} with an empty body")
        }
        Answer::Reply { status, body, .. } => format!("{status} {}", one_line(body)),
        other => one_line(&other.summary()),
    }
}

/// `text` cut to `most` characters, the cut marked with how long it was.
pub fn trimmed(text: &str, most: usize) -> String {
    let count = text.chars().count();
    if count <= most {
        return text.to_owned();
    }
    let kept: String = text.chars().take(most).collect();
    format!("{kept}… ({count} characters in all)")
}

/// What was sent, on one line: `alice · first create: POST /tickets, key "k"`.
pub fn request_line(exchange: &Exchange) -> String {
    let caller = exchange.caller.as_deref().unwrap_or("the check");
    let key = match &exchange.key {
        Some(key) => format!("key {key}"),
        None => "no key".to_owned(),
    };
    format!(
        "{caller} · {}: {} {}, {key}",
        exchange.step, exchange.method, exchange.path
    )
}

/// Headers every reply carries, which say nothing about keys: the reports leave them out.
pub const ROUTINE_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "content-type",
    "date",
    "etag",
    "keep-alive",
    "server",
    "transfer-encoding",
    "vary",
    "x-powered-by",
];

/// A reply's headers that say something: all but [`ROUTINE_HEADERS`].
pub fn telling_headers(headers: &[(String, String)]) -> impl Iterator<Item = &(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !ROUTINE_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
}

/// What came back, on one line, the body trimmed: `201 {"id":1}`, `no answer (timed out)`.
pub fn answer_line(answer: &Answer) -> String {
    match answer {
        Answer::Reply {
            status,
            headers,
            body,
        } => {
            let mut line = status.to_string();
            for (name, value) in telling_headers(headers) {
                line.push_str(&format!(" ({name}: {value})"));
            }
            format!("{line} {}", trimmed(body, QUOTED_BODY))
        }
        Answer::ToolResult { body, .. } => {
            format!("{}: {}", answer.summary(), trimmed(body, QUOTED_BODY))
        }
        other => other.summary(),
    }
}

/// Whether an answer is one the client never got: no answer, or the check hung up.
pub fn unanswered(answer: &Answer) -> bool {
    matches!(answer, Answer::NoAnswer { .. } | Answer::HungUp { .. })
}

/// A count read, as a report says it: `3 (read after #12)`.
pub fn count_line(count: Option<CountRead>) -> String {
    match count {
        Some(CountRead { after: 0, value }) => format!("{value} (read before any exchange)"),
        Some(CountRead { after, value }) => format!("{value} (read after #{after})"),
        None => "not read".to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::check::report::{Grade, SubCheck};
    use std::time::Duration;

    pub(crate) fn exchange(id: usize, point: &'static str, answer: Answer) -> Exchange {
        Exchange {
            id,
            point,
            step: format!("step {id}"),
            caller: Some("alice".to_owned()),
            key: Some(format!("\"k{id}\"")),
            method: "POST".to_owned(),
            path: "/tickets".to_owned(),
            body: "{\"title\":\"t\"}".to_owned(),
            answer,
            at_ms: 0,
            took_ms: 1,
        }
    }

    pub(crate) fn reply(status: u16, body: &str) -> Answer {
        Answer::Reply {
            status,
            headers: vec![],
            body: body.to_owned(),
        }
    }

    #[test]
    fn the_counts_around_an_excerpt_are_the_nearest_reads_outside_it() {
        let history = (1..=5).map(|i| exchange(i, "scope", reply(201, "{}")));
        let mut report = Report::new("f".into(), "u".into(), vec![], Duration::ZERO, vec![]);
        report.history = history.collect();
        report.counts = [(0, 1), (1, 2), (3, 4), (4, 5), (5, 6)]
            .map(|(after, value)| CountRead { after, value })
            .to_vec();
        let excerpt = of_exchanges(&report, &[2, 3, 4]);
        assert_eq!(excerpt.drawn.len(), 3);
        assert_eq!(count_line(excerpt.before), "2 (read after #1)");
        assert_eq!(count_line(excerpt.after), "5 (read after #4)");
        let none = of_exchanges(&report, &[1]);
        assert_eq!(count_line(none.before), "1 (read before any exchange)");
    }

    #[test]
    fn a_point_with_many_exchanges_draws_its_failed_evidence_at_most_twelve() {
        let mut report = Report::new("f".into(), "u".into(), vec![], Duration::ZERO, vec![]);
        report.history = (1..=40)
            .map(|i| exchange(i, "concurrent", reply(201, "{}")))
            .collect();
        let check = SubCheck {
            what: "w".into(),
            grade: Grade::lab(),
            passed: false,
            expected: "e".into(),
            observed: "o".into(),
            exchanges: (5..=25).collect(),
            not_covered: None,
        };
        let point = PointReport::covered("concurrent", "t", vec![check]);
        let excerpt = of_point(&report, &point);
        assert_eq!(excerpt.drawn.len(), MOST_DRAWN);
        assert_eq!(excerpt.drawn[0].id, 5);
        // The first eight and the last four: how the point began and how it ended.
        assert_eq!(excerpt.gap_at, 8);
        assert_eq!(excerpt.drawn[8].id, 22);
        assert_eq!(excerpt.drawn[MOST_DRAWN - 1].id, 25);
        assert_eq!(excerpt.left_out, (13..=21).collect::<Vec<_>>());
    }

    #[test]
    fn bodies_are_trimmed_at_a_character_boundary_and_say_so() {
        assert_eq!(trimmed("abc", 3), "abc");
        assert_eq!(trimmed("éééé", 2), "éé… (4 characters in all)");
        let lost = Answer::NoAnswer {
            reason: "timed out".into(),
        };
        assert_eq!(answer_line(&lost), "no answer (timed out)");
        assert!(unanswered(&lost));
        assert!(!unanswered(&reply(500, "")));
    }
}
