//! The benchmarks measure what their names say: each probe leaves the rows its kind of call
//! writes, and the bursts and retained-record measurements report every figure the book reads.
//! No test here looks at a timing's size; only that it was taken.

use lab::bench::probe::{self, Operation, PREFILLED, Rows};
use lab::bench::{bursts, retained};

const CALLS: u32 = 7;

#[test]
fn each_probe_writes_exactly_what_its_call_writes() {
    let prefilled = u64::from(PREFILLED);
    let calls = u64::from(CALLS);
    for (name, operation) in Operation::ALL {
        let (tickets, records) = match operation {
            Operation::PlainInsert | Operation::NaiveCreate => (calls, 0),
            Operation::KeyedCreate
            | Operation::KeyedCreateBusyHandler
            | Operation::TicketAndRecord => (calls, calls),
            Operation::PlainSelect | Operation::Replay => (0, 0),
        };
        assert_eq!(
            probe::run(operation, CALLS).unwrap(),
            Rows {
                tickets: prefilled + tickets,
                records: prefilled + records,
            },
            "probe {name}"
        );
        assert_eq!(Operation::named(name), Some(operation));
    }
    assert_eq!(Operation::named("plain-update"), None);
}

#[test]
fn bursts_report_both_floors_and_every_run_for_each_size() {
    let report = bursts::measure(&[3, 5], 1).unwrap();
    for floors in [&report.idle_floor_ms, &report.read_floor_ms] {
        let sizes: Vec<usize> = floors.iter().map(|(threads, _)| *threads).collect();
        assert_eq!(sizes, [3, 5]);
        assert!(floors.iter().all(|(_, ms)| ms.is_finite() && *ms >= 0.0));
    }
    assert_eq!(report.runs.len(), 8);
    for callers in [3, 5] {
        for one_key in [true, false] {
            for coordination in ["group_commit", "busy_handler"] {
                let run = report.find(callers, one_key, coordination).unwrap();
                let tickets = if one_key { 1 } else { callers as u64 };
                assert_eq!(run.tickets, tickets, "{callers} {one_key} {coordination}");
                assert!(run.elapsed_ms > 0.0 && run.creates_per_second > 0.0);
                assert_eq!(run.transactions.is_some(), coordination == "group_commit");
            }
        }
    }
    assert!(report.fdatasync_per_second > 0.0);
    let table = report.to_string();
    assert!(table.contains("reads ms"), "{table}");
}

#[test]
fn retained_records_are_measured_per_size_with_the_bare_select_beside_them() {
    let rows = retained::measure(&[10, 200], 20, 2).unwrap();
    let sizes: Vec<u64> = rows.iter().map(|row| row.records).collect();
    assert_eq!(sizes, [10, 200]);
    for row in &rows {
        for (name, ns) in [
            ("create", row.create_ns),
            ("replay", row.replay_ns),
            ("first pass", row.replay_cold_ns),
            ("select", row.select_ns),
        ] {
            assert!(ns.is_finite() && ns > 0.0, "{name}: {ns}");
        }
    }
}
