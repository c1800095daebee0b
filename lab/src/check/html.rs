//! `lab check --target FILE --html PATH`: the report as one self-contained page a person reads:
//! the summary table, the calibration, each point with every sub-check, and each failed point
//! drawn as the sequence of its exchanges (the client on the left, the service on the right,
//! what was sent, what came back or that nothing did, the count before and after), in the
//! colours of the book's timelines.
//!
//! The page loads nothing: its style is inline ([`STYLE`]), it has no script and no font, so it
//! can be opened from a CI system's artifacts as it is. Everything from the service or the
//! target file is HTML-escaped. It follows the reader's light or dark setting and fits a 390 px
//! phone (the browser check, `cargo xtask browser-check`, measures both).

use std::fmt::Write;

use super::excerpt::{self, Excerpt};
use super::history::{Answer, Exchange, WRAPPER_TO_API};
use super::report::{Coverage, DRAFT_URL, PointReport, Report, SubCheck, Verdict};

/// The page's whole style sheet, inlined into it.
pub const STYLE: &str = include_str!("report.css");

/// The report as one HTML page.
pub fn to_html(report: &Report) -> String {
    let failed: Vec<&str> = report.failed().map(|p| p.name).collect();
    let headline = if failed.is_empty() {
        "every MUST and LAB sub-check passed".to_owned()
    } else {
        format!("failed: {}", failed.join(", "))
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"color-scheme\" content=\"light dark\">\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <title>{}: {} ({})</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n\
         <header>\n<h1>{} --target {}</h1>\n\
         <p class=\"verdict {}\" id=\"verdict\">{}</p>\n\
         <p>Service: <code>{}</code>. Graded against <a href=\"{DRAFT_URL}\">{}</a>. \
         {} exchanges in {:.1} s.</p>\n</header>\n",
        report.command,
        escape(&report.target),
        escape(&headline),
        report.command,
        escape(&report.target),
        if report.passed { "v-PASS" } else { "v-FAIL" },
        escape(&headline),
        escape(&report.base_url),
        escape(&report.graded_against),
        report.history.len(),
        report.elapsed.as_secs_f64(),
    );
    summary(&mut out, report);
    calibration(&mut out, report);
    out.push_str("<section id=\"points\">\n<h2>Points</h2>\n");
    for point in &report.points {
        point_section(&mut out, report, point);
    }
    out.push_str("</section>\n</main>\n</body>\n</html>\n");
    out
}

fn verdict_class(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "v-PASS",
        Verdict::PassWithWarnings => "v-WARN",
        Verdict::Fail => "v-FAIL",
        Verdict::NotCovered => "v-NOT_COVERED",
    }
}

fn summary(out: &mut String, report: &Report) {
    out.push_str(
        "<section id=\"summary\">\n<h2>Summary</h2>\n<table>\n<thead><tr><th>point</th>\
         <th>verdict</th><th class=\"num\">required</th><th class=\"num\">should</th></tr>\
         </thead>\n<tbody>\n",
    );
    for point in &report.points {
        let tally = |required: bool| {
            let mine: Vec<&SubCheck> = point
                .checks
                .iter()
                .filter(|c| c.grade.required() == required)
                .collect();
            let passed = mine.iter().filter(|c| c.passed).count();
            let judged = mine.iter().filter(|c| c.not_covered.is_none()).count();
            if judged == 0 {
                "-".to_owned()
            } else {
                format!("{passed}/{judged}")
            }
        };
        let _ = writeln!(
            out,
            "<tr><td><a href=\"#point-{name}\">{name}</a></td><td class=\"{}\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            verdict_class(point.verdict),
            point.verdict,
            tally(true),
            tally(false),
            name = escape(point.name),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

fn calibration(out: &mut String, report: &Report) {
    let steps = &report.calibration.steps;
    out.push_str(if report.command == super::report::AUDIT {
        "<section id=\"calibration\">\n<h2>What was read</h2>\n"
    } else {
        "<section id=\"calibration\">\n<h2>Calibration</h2>\n"
    });
    if steps.is_empty() {
        out.push_str("<p>No calibration steps were recorded.</p>\n</section>\n");
        return;
    }
    let heading = match (
        &report.calibration.wrapper_at_fault,
        report.calibration.passed,
    ) {
        (_, true) if report.command == super::report::AUDIT => {
            "What each recording held, read in one pass".to_owned()
        }
        (_, true) => "The file describes the service".to_owned(),
        (Some(reason), false) => format!(
            "The file describes the wrapper, but the API it wraps refuses its creates: {reason}"
        ),
        (None, false) => "The file does not describe the service".to_owned(),
    };
    let _ = writeln!(
        out,
        "<p>{} ({} steps, before any point).</p>\n<ul class=\"checks\">",
        escape(&heading),
        steps.len()
    );
    for step in steps {
        let _ = writeln!(
            out,
            "<li class=\"{}\"><span class=\"badge {}\">{}</span> <b>{}</b> \
             (<code>{}</code>): {}{}</li>",
            if step.passed { "passed" } else { "failed" },
            if step.passed { "v-PASS" } else { "v-FAIL" },
            if step.passed { "ok" } else { "FAIL" },
            escape(step.name),
            escape(&step.field),
            escape(&step.detail),
            refs(&step.exchanges, None),
        );
    }
    out.push_str("</ul>\n</section>\n");
}

/// Exchange numbers, ` [#1 #2]`; each a link to its arrow when `drawn` (the point and the
/// exchanges its diagram draws) has it.
fn refs(ids: &[usize], drawn: Option<(&str, &[usize])>) -> String {
    if ids.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = ids
        .iter()
        .map(|id| match drawn {
            Some((point, drawn)) if drawn.contains(id) => {
                format!("<a href=\"#{}\">#{id}</a>", anchor(point, *id))
            }
            _ => format!("#{id}"),
        })
        .collect();
    format!(" <span class=\"refs\">[{}]</span>", ids.join(" "))
}

/// The id of an exchange's arrow in a point's diagram.
fn anchor(point: &str, id: usize) -> String {
    format!("{}-x{id}", escape(point))
}

fn point_section(out: &mut String, report: &Report, point: &PointReport) {
    let name = escape(point.name);
    let _ = writeln!(
        out,
        "<section class=\"point\" id=\"point-{name}\" data-verdict=\"{:?}\">\n\
         <h3><span class=\"badge {}\">{}</span> {name}</h3>\n<p>{}</p>",
        point.verdict,
        verdict_class(point.verdict),
        point.verdict,
        escape(point.title),
    );
    if let Coverage::NotCovered { reason } = &point.coverage {
        let _ = writeln!(
            out,
            "<p class=\"reason\">Not covered: {}</p>",
            escape(reason)
        );
    }
    let excerpt = (point.verdict == Verdict::Fail).then(|| excerpt::of_point(report, point));
    let drawn: Vec<usize> = excerpt
        .iter()
        .flat_map(|e| e.drawn.iter().map(|x| x.id))
        .collect();
    if !point.checks.is_empty() {
        out.push_str("<ul class=\"checks\">\n");
        for check in &point.checks {
            sub_check(out, check, (point.name, &drawn));
        }
        out.push_str("</ul>\n");
    }
    if let Some(excerpt) = &excerpt {
        sequence(out, point.name, excerpt);
    }
    out.push_str("</section>\n");
}

fn sub_check(out: &mut String, check: &SubCheck, drawn: (&str, &[usize])) {
    let (class, mark) = match (check.passed, check.grade.required()) {
        _ if check.not_covered.is_some() => (
            "not-covered",
            "<span class=\"badge v-NOT_COVERED\">NOT COVERED</span>",
        ),
        (true, _) => ("passed", "<span class=\"badge v-PASS\">ok</span>"),
        (false, true) => ("failed", "<span class=\"badge v-FAIL\">FAIL</span>"),
        (false, false) => ("failed", "<span class=\"badge v-WARN\">WARN</span>"),
    };
    let _ = write!(
        out,
        "<li class=\"{class}\">{mark} <span class=\"grade\">{}</span> {}{}",
        escape(&check.grade.to_string()),
        escape(&check.what),
        refs(&check.exchanges, Some(drawn)),
    );
    if let Some(why) = &check.not_covered {
        let _ = write!(out, "<dl><dt>why</dt><dd>{}</dd></dl>", escape(why));
    } else if !check.passed {
        let _ = write!(
            out,
            "<dl><dt>expected</dt><dd>{}</dd><dt>observed</dt><dd>{}</dd></dl>",
            escape(&check.expected),
            escape(&check.observed)
        );
    }
    out.push_str("</li>\n");
}

/// A failed point's exchanges as a sequence diagram.
fn sequence(out: &mut String, point: &str, excerpt: &Excerpt) {
    // With a wrapper in the middle (`[upstream]`), three lifelines: the agent's calls end at the
    // wrapper's, and the wrapper's requests to the API start there.
    let hop = excerpt.drawn.iter().any(|e| is_upstream(e));
    let _ = writeln!(
        out,
        "<figure class=\"seq{}\" data-point=\"{point}\" data-exchanges=\"{}\">\n\
         <figcaption>The exchanges of {point}, in order</figcaption>\n\
         <div class=\"seq-heads\">{}</div>\n\
         <div class=\"seq-lanes\">\n<p class=\"seq-count\"><span>{}</span></p>",
        if hop { " hop" } else { "" },
        excerpt.drawn.len(),
        if hop {
            "<span>agent</span><span>wrapper</span><span>API</span>"
        } else {
            "<span>client</span><span>service</span>"
        },
        escape(&excerpt.framing().0),
        point = escape(point),
    );
    let drawn = &excerpt.drawn;
    let mut index = 0;
    while index < drawn.len() {
        if index == excerpt.gap_at {
            left_out(out, &excerpt.left_out);
        }
        let exchange = &drawn[index];
        index += 1;
        if !hop {
            request(out, point, exchange, "");
            answer(out, &exchange.answer, "");
            continue;
        }
        if is_upstream(exchange) {
            request(out, point, exchange, " seq-up");
            answer(out, &exchange.answer, " seq-up");
            continue;
        }
        // The wrapper's requests made during this call happened before its result: draw them
        // between the call and its result.
        request(out, point, exchange, " seq-agent");
        while index < drawn.len() && index != excerpt.gap_at && is_upstream(drawn[index]) {
            request(out, point, drawn[index], " seq-up");
            answer(out, &drawn[index].answer, " seq-up");
            index += 1;
        }
        answer(out, &exchange.answer, " seq-agent");
    }
    if excerpt.gap_at == excerpt.drawn.len() {
        left_out(out, &excerpt.left_out);
    }
    let after = excerpt.framing().1;
    if !after.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"seq-count\"><span>{}</span></p>",
            escape(&after)
        );
    }
    out.push_str("</div>\n</figure>\n");
}

/// The exchanges not drawn, where they belong in the sequence.
fn left_out(out: &mut String, ids: &[usize]) {
    if !ids.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"seq-more\">… {} more exchanges, not drawn:{}</p>",
            ids.len(),
            refs(ids, None)
        );
    }
}

/// Whether the exchange is a wrapper's request to the API the lab served it.
fn is_upstream(exchange: &Exchange) -> bool {
    exchange.caller.as_deref() == Some(WRAPPER_TO_API)
}

fn request(out: &mut String, point: &str, exchange: &Exchange, side: &str) {
    let key = match &exchange.key {
        Some(key) => format!("key <code>{}</code>", escape(key)),
        None => "no key".to_owned(),
    };
    let _ = write!(
        out,
        "<div class=\"seq-msg seq-req{side}\" id=\"{}\"><span class=\"seq-n\">#{id}</span> \
         <b>{}</b> · {}<br><code>{} {}</code>, {key}",
        anchor(point, exchange.id),
        escape(exchange.caller.as_deref().unwrap_or("the check")),
        escape(&exchange.step),
        escape(&exchange.method),
        escape(&exchange.path),
        id = exchange.id,
    );
    if !exchange.body.is_empty() {
        let _ = write!(
            out,
            "<pre>{}</pre>",
            escape(&excerpt::trimmed(&exchange.body, excerpt::QUOTED_BODY))
        );
    }
    out.push_str("</div>\n");
}

fn answer(out: &mut String, answer: &Answer, side: &str) {
    let class = match answer {
        _ if excerpt::unanswered(answer) => "lost",
        Answer::Reply { status, .. } if *status < 400 => "",
        Answer::ToolResult {
            is_error: false, ..
        } => "",
        _ => "refused",
    };
    let _ = write!(out, "<div class=\"seq-msg seq-rep {class}{side}\">");
    match answer {
        Answer::Reply {
            status,
            headers,
            body,
        } => {
            let _ = write!(out, "<b>{status}</b>");
            for (name, value) in excerpt::telling_headers(headers) {
                let _ = write!(out, " <code>{}: {}</code>", escape(name), escape(value));
            }
            if !body.is_empty() {
                let _ = write!(
                    out,
                    "<pre>{}</pre>",
                    escape(&excerpt::trimmed(body, excerpt::QUOTED_BODY))
                );
            }
        }
        other => {
            let _ = write!(out, "<b>{}</b>", escape(&excerpt::answer_line(other)));
        }
    }
    out.push_str("</div>\n");
}

/// Text for HTML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::excerpt::tests::{exchange, reply};
    use crate::check::history::CountRead;
    use crate::check::report::Grade;
    use std::time::Duration;

    fn report() -> Report {
        let failing = |name: &'static str, ids: Vec<usize>| {
            PointReport::covered(
                name,
                "t",
                vec![SubCheck {
                    what: "bob's create with alice's key".into(),
                    grade: Grade::must("2.7"),
                    passed: false,
                    expected: "a new ticket".into(),
                    observed: "alice's <ticket>".into(),
                    exchanges: ids,
                    not_covered: None,
                }],
            )
        };
        let mut report = Report::new(
            "shop.toml".into(),
            "http://127.0.0.1:1".into(),
            vec![
                failing("scope", vec![1, 2]),
                failing("hang-up", vec![3]),
                PointReport::not_covered("crash", "A crash", "no <way>".into()),
            ],
            Duration::ZERO,
            vec![],
        );
        report.history = vec![
            exchange(1, "scope", reply(201, "{\"id\":1}")),
            exchange(
                2,
                "scope",
                reply(201, "<script>alert(1)</script><img src=x onerror=y>"),
            ),
            exchange(
                3,
                "hang-up",
                Answer::NoAnswer {
                    reason: "timed out".into(),
                },
            ),
        ];
        report.counts = vec![
            CountRead { after: 0, value: 7 },
            CountRead { after: 2, value: 9 },
        ];
        report
    }

    #[test]
    fn every_failed_point_is_drawn_with_its_exchanges_and_counts() {
        let page = to_html(&report());
        assert_eq!(page.matches("<figure class=\"seq\"").count(), 2);
        assert!(page.contains("<figure class=\"seq\" data-point=\"scope\" data-exchanges=\"2\">"));
        assert!(
            page.contains("count before: 7 (read before any exchange)"),
            "{page}"
        );
        assert!(page.contains("count after: 9 (read after #2)"), "{page}");
        assert!(page.contains("<div class=\"seq-msg seq-rep lost\"><b>no answer (timed out)</b>"));
        // A sub-check's exchanges link to their arrows.
        assert!(page.contains("[<a href=\"#scope-x1\">#1</a> <a href=\"#scope-x2\">#2</a>]"));
        assert!(page.contains("id=\"scope-x2\""));
        assert!(page.contains("id=\"point-crash\" data-verdict=\"NotCovered\""));
        assert!(page.contains("Not covered: no &lt;way&gt;"));
    }

    #[test]
    fn everything_from_the_service_is_escaped_and_nothing_is_loaded() {
        let page = to_html(&report());
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("<img"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("alice&#39;s &lt;ticket&gt;"));
        for loads in [
            "src=\"",
            "@import",
            "url(",
            "@font-face",
            "http://",
            "https://",
        ] {
            let outside = page
                .replace(DRAFT_URL, "")
                .replace("http://127.0.0.1:1", "");
            assert!(!outside.contains(loads), "{loads}");
        }
        // The one link element names an empty icon inline, so a browser asks for no favicon.
        assert_eq!(page.matches("<link").count(), 1);
        assert!(page.contains("<link rel=\"icon\" href=\"data:,\">"));
    }

    #[test]
    fn a_passing_run_draws_no_sequence() {
        let mut report = report();
        report.points.truncate(0);
        report.passed = true;
        let page = to_html(&report);
        assert!(!page.contains("<figure"));
        assert!(page.contains("every MUST and LAB sub-check passed"));
    }
}
