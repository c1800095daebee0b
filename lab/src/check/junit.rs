//! `lab check --target FILE --junit PATH`: the report as JUnit XML, the format every CI system
//! shows in its test tab (GitHub Actions' reporters, GitLab, Jenkins, Buildkite).
//!
//! One `<testsuite>` for the calibration (a test case per step) and one per point (a test case
//! per sub-check), named by the point and the sub-check, so a test's name stays the same from
//! run to run. Names are unique: a case name that comes again within its suite (a step made once
//! per caller, a sub-check made twice), or a suite name that comes again in the file, gets its
//! ordinal, `name (2)`, since readers key cases and suites by name and a repeat either stops a
//! strict one or is folded into the first by another. A suite's properties are each written
//! once. A failed sub-check is a `<failure>` whose `type` is its level (MUST, SHOULD,
//! LAB) and whose text holds the grade, what was expected and observed, the count before and
//! after, and the exchanges it rests on, bodies trimmed. A failed SHOULD is a failure of type
//! SHOULD although it does not fail the run (the exit status stays 0): a CI system shows it,
//! and a job that must not turn red on it filters failures by type. A point a black box cannot
//! check is one test case, `<skipped message="the reason">`.
//!
//! Everything the service sent is escaped, and characters XML 1.0 cannot carry (control
//! characters other than tab and line breaks) are written as `\u{..}`.

use std::fmt::Write;

use super::excerpt::{self, Excerpt};
use super::report::Step;
use super::report::{Coverage, Level, PointReport, Report, SubCheck};

/// The report as a JUnit XML document.
pub fn to_junit(report: &Report) -> String {
    let mut suites = String::new();
    let mut totals = Totals::default();
    let mut suite_names = Unique::default();
    if !report.calibration.steps.is_empty() {
        // The audit's first steps say what its recordings held: no calibration of a service.
        let first = if report.command == super::report::AUDIT {
            "recordings"
        } else {
            "calibration"
        };
        suite_names.name(first);
        calibration_suite(&mut suites, (first, &report.calibration.steps), &mut totals);
    }
    for point in &report.points {
        let name = suite_names.name(point.name);
        point_suite(&mut suites, report, (&name, point), &mut totals);
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{:.3}\">",
        attribute(&format!("{} --target {}", report.command, report.target)),
        totals.tests,
        totals.failures,
        report.elapsed.as_secs_f64()
    );
    out.push_str(&suites);
    out.push_str("</testsuites>\n");
    out
}

/// Names made unique within one scope (a suite's cases, or the file's suites): the first use of
/// a name keeps it, the n-th gets ` (n)`.
#[derive(Default)]
struct Unique {
    taken: std::collections::HashSet<String>,
}

impl Unique {
    fn name(&mut self, wanted: &str) -> String {
        let mut name = wanted.to_owned();
        let mut ordinal = 1;
        while self.taken.contains(&name) {
            ordinal += 1;
            name = format!("{wanted} ({ordinal})");
        }
        self.taken.insert(name.clone());
        name
    }
}

/// The whole run's counts, for `<testsuites>`. The JUnit schema CI systems read (Jenkins'
/// junit-10.xsd) has no `skipped` there, only on each suite, so none is counted.
#[derive(Default)]
struct Totals {
    tests: usize,
    failures: usize,
}

fn calibration_suite(out: &mut String, (suite, steps): (&str, &[Step]), totals: &mut Totals) {
    let failures = steps.iter().filter(|s| !s.passed).count();
    totals.tests += steps.len();
    totals.failures += failures;
    let _ = writeln!(
        out,
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">",
        steps.len()
    );
    let mut names = Unique::default();
    for step in steps {
        let name = attribute(&names.name(&format!("{}: {}", step.name, step.field)));
        let _ = write!(out, "    <testcase classname=\"{suite}\" name=\"{name}\"");
        if step.passed {
            out.push_str("/>\n");
            continue;
        }
        let _ = writeln!(
            out,
            ">\n      <failure type=\"{suite}\" message=\"{}\">{}</failure>\n    </testcase>",
            attribute(&excerpt::trimmed(&step.detail, 200)),
            text(&step.detail)
        );
    }
    out.push_str("  </testsuite>\n");
}

/// A point's suite, under `suite` (its name, made unique in the file).
fn point_suite(
    out: &mut String,
    report: &Report,
    (suite, point): (&str, &PointReport),
    totals: &mut Totals,
) {
    let name = attribute(suite);
    if let Coverage::NotCovered { reason } = &point.coverage {
        totals.tests += 1;
        let _ = writeln!(
            out,
            "  <testsuite name=\"{name}\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\">\n    \
             <testcase classname=\"{name}\" name=\"{}\">\n      <skipped message=\"{}\"/>\n    \
             </testcase>\n  </testsuite>",
            attribute(point.title),
            attribute(reason)
        );
        return;
    }
    let failures = point.checks.iter().filter(|c| c.failed()).count();
    let skipped = point.checks.len() - point.checks.iter().filter(|c| c.passed).count() - failures;
    totals.tests += point.checks.len();
    totals.failures += failures;
    let _ = writeln!(
        out,
        "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">\n    \
         <properties>\n      <property name=\"title\" value=\"{}\"/>\n      \
         <property name=\"verdict\" value=\"{}\"/>\n    </properties>",
        point.checks.len(),
        attribute(point.title),
        point.verdict
    );
    let mut names = Unique::default();
    for check in &point.checks {
        let case = names.name(&check.what);
        test_case(out, report, (&name, &case), check);
    }
    out.push_str("  </testsuite>\n");
}

/// One sub-check's case: `classname` (the suite's name, escaped) and `case` (its unique name).
fn test_case(out: &mut String, report: &Report, (classname, case): (&str, &str), check: &SubCheck) {
    let took: u64 = check
        .exchanges
        .iter()
        .filter_map(|&id| report.exchange(id))
        .map(|e| e.took_ms)
        .sum();
    let _ = write!(
        out,
        "    <testcase classname=\"{classname}\" name=\"{}\" time=\"{:.3}\"",
        attribute(case),
        took as f64 / 1000.0
    );
    if check.passed {
        out.push_str("/>\n");
        return;
    }
    if let Some(why) = &check.not_covered {
        let _ = writeln!(
            out,
            ">\n      <skipped message=\"{}\"/>\n    </testcase>",
            attribute(why)
        );
        return;
    }
    let level = match check.grade.level {
        Level::Must => "MUST",
        Level::Should => "SHOULD",
        Level::Lab => "LAB",
    };
    let message = format!(
        "{}: expected {}; observed {}",
        check.grade,
        check.expected,
        excerpt::trimmed(&check.observed, 200)
    );
    let evidence = failure_text(check, &excerpt::of_exchanges(report, &check.exchanges));
    let _ = writeln!(
        out,
        ">\n      <failure type=\"{level}\" message=\"{}\">{}</failure>\n    </testcase>",
        attribute(&message),
        text(&evidence)
    );
}

/// The failure's text: the grade, expected and observed, the counts, and each exchange.
pub fn failure_text(check: &SubCheck, excerpt: &Excerpt) -> String {
    let binding = if check.grade.required() {
        "required: this failure fails the run"
    } else {
        "recommended: reported, does not fail the run"
    };
    let mut out = format!(
        "grade: {} ({binding})\nchecked: {}\nexpected: {}\nobserved: {}\n",
        check.grade, check.what, check.expected, check.observed,
    );
    for line in <[String; 2]>::from(excerpt.framing()) {
        if !line.is_empty() {
            let _ = writeln!(out, "{line}");
        }
    }
    if !excerpt.drawn.is_empty() {
        out.push_str("exchanges:\n");
    }
    for (index, exchange) in excerpt.drawn.iter().enumerate() {
        if index == excerpt.gap_at && !excerpt.left_out.is_empty() {
            let _ = writeln!(out, "  {}", left_out(&excerpt.left_out));
        }
        let _ = writeln!(
            out,
            "  #{} {}",
            exchange.id,
            excerpt::request_line(exchange)
        );
        if !exchange.body.is_empty() {
            let _ = writeln!(
                out,
                "      sent: {}",
                excerpt::trimmed(&exchange.body, excerpt::QUOTED_BODY)
            );
        }
        let _ = writeln!(out, "      got: {}", excerpt::answer_line(&exchange.answer));
    }
    if excerpt.gap_at == excerpt.drawn.len() && !excerpt.left_out.is_empty() {
        let _ = writeln!(out, "  {}", left_out(&excerpt.left_out));
    }
    out
}

fn left_out(ids: &[usize]) -> String {
    let ids: Vec<String> = ids.iter().map(|i| format!("#{i}")).collect();
    format!("… {} more, not quoted: {}", ids.len(), ids.join(" "))
}

/// Text content: `&`, `<` and `>` escaped, characters XML cannot carry made visible.
fn text(value: &str) -> String {
    escape(value, false)
}

/// An attribute's value: as [`text`], and quotes and line breaks escaped too (a parser would
/// otherwise turn a line break into a space).
fn attribute(value: &str) -> String {
    escape(value, true)
}

fn escape(value: &str, in_attribute: bool) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if in_attribute => out.push_str("&quot;"),
            '\'' if in_attribute => out.push_str("&apos;"),
            '\n' if in_attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if in_attribute => out.push_str("&#9;"),
            '\t' | '\n' => out.push(c),
            c if allowed_in_xml(c) => out.push(c),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    out
}

/// XML 1.0's `Char` production (§2.2), less tab and line breaks, which the caller handles.
fn allowed_in_xml(c: char) -> bool {
    matches!(c, '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::excerpt::tests::{exchange, reply};
    use crate::check::history::Answer;
    use crate::check::report::Calibration;
    use crate::check::report::Grade;
    use std::time::Duration;

    fn sub(what: &str, grade: Grade, passed: bool, exchanges: Vec<usize>) -> SubCheck {
        SubCheck {
            what: what.into(),
            grade,
            passed,
            expected: "one effect".into(),
            observed: "2 effects".into(),
            exchanges,
            not_covered: None,
        }
    }

    fn report() -> Report {
        let scope = PointReport::covered(
            "scope",
            "Callers' keys are apart",
            vec![
                sub("alice's create succeeds", Grade::lab(), true, vec![1]),
                sub(
                    "bob's create <with> alice's key",
                    Grade::must("2.7"),
                    false,
                    vec![1, 2],
                ),
                sub("a replay is marked", Grade::should("2.6"), false, vec![2]),
            ],
        );
        let crash = PointReport::not_covered(
            "crash",
            "A crash",
            "A black box cannot crash \"the service\" & <more>".into(),
        );
        let mut report = Report::new(
            "shop.toml".into(),
            "http://127.0.0.1:1".into(),
            vec![scope, crash],
            Duration::from_millis(1500),
            vec![],
        );
        report.history = vec![
            exchange(1, "scope", reply(201, "{\"id\":1}")),
            exchange(2, "scope", reply(201, "<b>\u{1}\"bob\"</b>")),
        ];
        report.calibration = Calibration {
            steps: vec![Step {
                name: "create",
                field: "create.fields".into(),
                passed: true,
                detail: "201".into(),
                exchanges: vec![],
            }],
            passed: true,
            ..Calibration::default()
        };
        report
    }

    #[test]
    fn a_suite_per_point_a_case_per_sub_check_and_one_for_the_calibration() {
        let xml = to_junit(&report());
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"));
        assert!(xml.contains(
            "<testsuites name=\"lab check --target shop.toml\" tests=\"5\" failures=\"2\" errors=\"0\" time=\"1.500\">"
        ), "{xml}");
        assert!(xml.contains("<testsuite name=\"calibration\" tests=\"1\" failures=\"0\""));
        assert!(
            xml.contains("<testcase classname=\"calibration\" name=\"create: create.fields\"/>")
        );
        assert!(xml.contains("<testsuite name=\"scope\" tests=\"3\" failures=\"2\""));
        assert!(
            xml.contains("<testcase classname=\"scope\" name=\"alice&apos;s create succeeds\"")
        );
        assert!(xml.contains(
            "<failure type=\"MUST\" message=\"MUST §2.7: expected one effect; observed 2 effects\">"
        ));
        assert!(xml.contains("<failure type=\"SHOULD\""));
        assert_eq!(xml.matches("<testsuite ").count(), 3);
        assert_eq!(xml.matches("</testsuite>").count(), 3);
    }

    #[test]
    fn a_name_that_comes_again_gets_its_ordinal_so_every_name_is_unique() {
        let mut report = report();
        // A step made once per caller, a sub-check made twice, a point name twice.
        let step = report.calibration.steps[0].clone();
        report.calibration.steps.push(step);
        let mut scope = report.points[0].clone();
        let again = scope.checks[0].clone();
        scope.checks.push(again);
        report.points[0].checks = scope.checks.clone();
        report.points.push(scope);
        let xml = to_junit(&report);
        assert!(xml.contains("name=\"create: create.fields\"/>"), "{xml}");
        assert!(
            xml.contains("name=\"create: create.fields (2)\"/>"),
            "{xml}"
        );
        assert!(xml.contains("<testsuite name=\"scope\" "), "{xml}");
        assert!(xml.contains("<testsuite name=\"scope (2)\" "), "{xml}");
        assert!(
            xml.contains(
                "<testcase classname=\"scope (2)\" name=\"alice&apos;s create succeeds (2)\""
            ),
            "{xml}"
        );
        for suite in xml.split("<testsuite ").skip(1) {
            let mut names: Vec<&str> = suite
                .split("<testcase ")
                .skip(1)
                .filter_map(|case| case.split(" name=\"").nth(1)?.split('"').next())
                .collect();
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "{suite}");
        }
    }

    #[test]
    fn a_point_not_covered_is_one_skipped_case_with_its_reason() {
        let xml = to_junit(&report());
        assert!(xml.contains(
            "<testsuite name=\"crash\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\">"
        ));
        assert!(xml.contains(
            "<skipped message=\"A black box cannot crash &quot;the service&quot; &amp; &lt;more&gt;\"/>"
        ), "{xml}");
    }

    #[test]
    fn the_failure_text_carries_the_grade_counts_and_escaped_exchanges() {
        let xml = to_junit(&report());
        let start = xml.find("<failure type=\"MUST\"").unwrap();
        let failure = &xml[start..xml[start..].find("</failure>").unwrap() + start];
        assert!(failure.contains("grade: MUST §2.7 (required: this failure fails the run)"));
        assert!(
            failure.contains("checked: bob's create &lt;with&gt; alice's key"),
            "{failure}"
        );
        assert!(
            failure.contains("#1 alice · step 1: POST /tickets, key \"k1\""),
            "{failure}"
        );
        assert!(
            failure.contains("got: 201 &lt;b&gt;\\u{1}\"bob\"&lt;/b&gt;"),
            "{failure}"
        );
        assert!(failure.contains("count before: not read"), "{failure}");
        assert!(!failure.contains('\u{1}'));
    }

    #[test]
    fn no_answer_is_said_and_attributes_keep_their_line_breaks() {
        let mut report = report();
        report.history[1].answer = Answer::NoAnswer {
            reason: "timed out".into(),
        };
        report.points[0].checks[1].observed = "line one\nline two".into();
        let xml = to_junit(&report);
        assert!(xml.contains("got: no answer (timed out)"), "{xml}");
        assert!(xml.contains("observed line one&#10;line two\""), "{xml}");
    }

    #[test]
    fn characters_xml_cannot_carry_are_made_visible() {
        assert_eq!(text("a\u{0}b\u{1b}c\u{fffe}"), "a\\u{0}b\\u{1b}c\\u{fffe}");
        assert_eq!(text("tab\tline\n"), "tab\tline\n");
        assert_eq!(attribute("a\t'b'"), "a&#9;&apos;b&apos;");
        assert_eq!(text("🦀 é"), "🦀 é");
    }
}
