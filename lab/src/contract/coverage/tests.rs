use std::collections::BTreeSet;

use super::super::{Cell, Checker, PROMISES, PromiseId, cell};
use super::coverage;

/// Every promise checked nowhere, by id.
fn unchecked_promises() -> Vec<PromiseId> {
    PROMISES
        .iter()
        .filter(|p| {
            Checker::ALL
                .iter()
                .all(|&checker| !matches!(cell(checker, p.id), Cell::Checked(_)))
        })
        .map(|p| p.id)
        .collect()
}

#[test]
fn every_promise_has_a_checker() {
    assert_eq!(
        unchecked_promises(),
        Vec::<PromiseId>::new(),
        "these promises have no checker: add a point that covers each, or drop the promise"
    );
}

/// A coverage entry names a promise by [`PromiseId`], so an unknown one does not compile; what is
/// left to hold is that every table is its own checker's, and that `PROMISES` states every id
/// once, in the enum's order, which [`super::super::promise`] relies on.
#[test]
fn every_table_is_its_checkers_and_every_id_has_its_promise() {
    for checker in Checker::ALL {
        assert_eq!(
            coverage(checker).checker,
            checker,
            "the table of {checker:?} says it is another's"
        );
    }
    let stated: Vec<PromiseId> = PROMISES.iter().map(|p| p.id).collect();
    assert_eq!(stated, PromiseId::ALL, "PROMISES and PromiseId::ALL differ");
    for id in PromiseId::ALL {
        assert_eq!(super::super::promise(id).id, id);
        assert_eq!(PromiseId::parse(id.as_str()), Some(id));
    }
    assert_eq!(PromiseId::parse("lost-result"), None);
    assert_eq!(
        serde_json::to_value(PromiseId::ErrorFreesKey).unwrap(),
        serde_json::json!("error-frees-key")
    );
}

#[test]
fn every_cell_says_how_or_why_not_and_never_both() {
    let mut problems = Vec::new();
    for checker in Checker::ALL {
        let table = coverage(checker);
        for p in PROMISES {
            let excused = table
                .not_checked
                .iter()
                .filter(|(id, _)| *id == p.id)
                .count();
            match cell(checker, p.id) {
                Cell::Checked(points) if excused > 0 => problems.push(format!(
                    "{} × {}: checked by {points:?} and also said to be unchecked",
                    checker.name(),
                    p.id
                )),
                Cell::NotChecked(_) if excused > 1 => {
                    problems.push(format!("{} × {}: two reasons", checker.name(), p.id))
                }
                Cell::Missing => problems.push(format!(
                    "{} × {}: neither a point nor a reason",
                    checker.name(),
                    p.id
                )),
                _ => {}
            }
        }
    }
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn promise_ids_are_unique_short_and_lowercase() {
    let mut seen = BTreeSet::new();
    for p in PROMISES {
        assert!(seen.insert(p.id), "{} appears twice", p.id);
        let id = p.id.as_str();
        assert!(
            !id.is_empty()
                && id.len() <= 16
                && id.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
            "{:?}: an id is a few lowercase words joined by hyphens",
            p.id
        );
        assert!(p.statement.ends_with('.'), "{}: one sentence, ended", p.id);
    }
}

/// Compares a checker's table with the names its code gives its points, both ways.
fn assert_table_matches(checker: Checker, actual: BTreeSet<String>) {
    let table: Vec<&str> = coverage(checker).points.iter().map(|(n, _)| *n).collect();
    let listed: BTreeSet<String> = table.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        listed.len(),
        table.len(),
        "{}: a point is listed twice",
        checker.name()
    );
    let unknown: Vec<&String> = listed.difference(&actual).collect();
    let unlisted: Vec<&String> = actual.difference(&listed).collect();
    assert!(
        unknown.is_empty() && unlisted.is_empty(),
        "{}: the table names points the checker does not have: {unknown:?}; the checker has \
         points the table does not list: {unlisted:?}",
        checker.name()
    );
}

#[test]
fn the_suite_table_names_the_seven_scenarios() {
    let actual = crate::suite::SCENARIOS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_table_matches(Checker::Suite, actual);
}

#[test]
fn the_conformance_table_names_every_contract_point() {
    let actual = crate::conformance::point_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_table_matches(Checker::Conformance, actual);
}

/// The HTTP and MCP checks' tables are the registry's points for each front (a run's report
/// lists exactly those: `check::lab_check_over_http_*` and `check_mcp::*` compare them).
#[test]
fn the_http_and_mcp_tables_are_the_registrys_points_for_their_front() {
    use super::super::points::{self, Front};
    for (checker, front) in [(Checker::Http, Front::Http), (Checker::Mcp, Front::Mcp)] {
        let table: Vec<&str> = coverage(checker).points.iter().map(|(n, _)| *n).collect();
        let registry: Vec<&str> = points::on(front).map(|p| p.id).collect();
        assert_eq!(table, registry, "{}", checker.name());
    }
    let http: Vec<&str> = coverage(Checker::Http)
        .points
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert!(
        http.contains(&"crash") && http.contains(&"hop-key"),
        "{http:?}"
    );
    assert!(!http.contains(&"cancelled"), "{http:?}");
}

#[cfg(feature = "mcp")]
#[test]
fn the_grader_table_names_every_verdict() {
    use crate::mcp::grader::Verdict;
    let all = [
        Verdict::Pass,
        Verdict::Fail,
        Verdict::Unresolved,
        Verdict::NotExercised,
    ];
    for verdict in all {
        // A new verdict fails to compile here until it is added to `all` and to the table.
        match verdict {
            Verdict::Pass | Verdict::Fail | Verdict::Unresolved | Verdict::NotExercised => {}
        }
    }
    assert_table_matches(
        Checker::Grader,
        all.iter().map(|v| v.word().to_owned()).collect(),
    );
}

#[cfg(feature = "http")]
#[test]
fn the_audit_table_names_every_point() {
    assert_table_matches(
        Checker::Audit,
        crate::audit::judge::POINTS
            .iter()
            .map(|p| p.id.to_owned())
            .collect(),
    );
}

#[test]
fn the_simulator_table_names_every_invariant() {
    use crate::sim::ViolationKind as K;
    let all = [
        K::DuplicateTicket,
        K::DivergentSuccess,
        K::CrossScope,
        K::ConflictChangedOriginal,
        K::SpuriousConflict,
        K::AcceptedChangedPayload,
        K::Unpaired,
        K::Unresolved,
        K::UnexpectedTicket,
    ];
    for kind in all {
        // A new invariant fails to compile here until it is added to `all` and to the table.
        match kind {
            K::DuplicateTicket
            | K::DivergentSuccess
            | K::CrossScope
            | K::ConflictChangedOriginal
            | K::SpuriousConflict
            | K::AcceptedChangedPayload
            | K::Unpaired
            | K::Unresolved
            | K::UnexpectedTicket => {}
        }
    }
    assert_table_matches(
        Checker::Simulator,
        all.iter().map(|k| k.name().to_owned()).collect(),
    );
}

#[cfg(feature = "model")]
#[test]
fn the_model_table_names_every_property() {
    use stateright::Model as _;

    use crate::model::{Bounds, Protocol, Variant};
    let protocol = Protocol::new(Bounds::default(), Variant::Design);
    let actual = protocol
        .properties()
        .iter()
        .map(|p| p.name.to_owned())
        .collect();
    assert_table_matches(Checker::Model, actual);
}

#[test]
fn reports_look_up_the_ids_of_a_point_and_nothing_for_an_unknown_one() {
    assert_eq!(
        super::super::label(Checker::Http, "reply-dropped"),
        "[lost-reply, replay]"
    );
    assert_eq!(super::super::label(Checker::Http, "no-such-point"), "[]");
}

#[test]
fn the_matrix_has_a_row_per_promise_and_no_missing_cell() {
    let matrix = super::super::matrix_markdown();
    for p in PROMISES {
        assert!(
            matrix.contains(&format!("| `{}` |", p.id)),
            "no row for {}",
            p.id
        );
    }
    assert!(!matrix.contains("**missing**"), "{matrix}");
    let list = super::super::promises_markdown();
    assert_eq!(list.matches("\n- **`").count() + 1, PROMISES.len());
}

#[cfg(feature = "http")]
#[test]
fn a_check_report_names_each_points_promises_by_its_own_checkers_table() {
    use crate::check::report::{PointReport, Report};
    let points = vec![
        PointReport::covered("key-forms", "title", Vec::new()),
        PointReport::covered("key-required", "title", Vec::new()),
    ];
    let mut report = Report::new(
        "t.toml".into(),
        "http://127.0.0.1:1".into(),
        points,
        std::time::Duration::ZERO,
        Vec::new(),
    );
    // An HTTP report by default: `key-required` is no point of the HTTP check.
    assert_eq!(
        report.points[0].promises,
        [PromiseId::KeyIntact, PromiseId::NoKey]
    );
    assert!(report.points[1].promises.is_empty());
    report.name_promises(Checker::Mcp);
    assert_eq!(report.points[1].promises, [PromiseId::NoKey]);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["points"][1]["promises"], serde_json::json!(["no-key"]));
    assert!(
        report
            .to_string()
            .contains("PASS key-required: title [no-key]"),
        "{report}"
    );
}

#[test]
fn a_violation_prints_the_promises_its_invariant_stands_for() {
    use crate::sim::{Violation, ViolationKind};
    let violation = Violation {
        kind: ViolationKind::CrossScope,
        detail: "bob saw ticket 1".into(),
    };
    assert_eq!(
        violation.to_string(),
        "visible across scopes [scope]: bob saw ticket 1"
    );
}

/// The list's closing note quotes two grades as a report prints them; they are the report's own.
#[cfg(feature = "http")]
#[test]
fn the_notes_grades_are_the_ones_a_report_prints() {
    use crate::check::report::Grade;
    let list = super::super::promises_markdown();
    for grade in [
        Grade::lab_over_should("2.6"),
        Grade {
            section: Some("5"),
            ..Grade::lab()
        },
    ] {
        let shown = format!("`{grade}`");
        assert!(list.contains(&shown), "{shown} not in the note: {list}");
        assert!(grade.required(), "{grade} is said to fail a run");
    }
    assert!(!Grade::should("2.6").required());
}
