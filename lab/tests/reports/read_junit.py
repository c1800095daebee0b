"""Reads a JUnit XML file with junitparser, as CI tooling does, and prints what it understood as
JSON: each suite with its counts as junitparser computes them from the test cases (not as the
file's attributes say), and each case with its result. lab/tests/it/reports.rs compares this with
the check's own JSON report.

Usage: read_junit.py FILE
"""

import json
import sys

from junitparser import JUnitXml, TestSuite


def case_result(case):
    results = []
    for result in case.result:
        results.append(
            {
                "kind": type(result).__name__,
                "type": result.type,
                "message": result.message,
                "text": result.text,
            }
        )
    return results


def suite_json(suite):
    declared = {
        "tests": suite.tests,
        "failures": suite.failures,
        "errors": suite.errors,
        "skipped": suite.skipped,
    }
    cases = [
        {
            "classname": case.classname,
            "name": case.name,
            "time": case.time,
            "passed": case.is_passed,
            "skipped": case.is_skipped,
            "results": case_result(case),
        }
        for case in suite
    ]
    # junitparser recounts from the cases; a file whose attributes disagree is caught here.
    suite.update_statistics()
    counted = {
        "tests": suite.tests,
        "failures": suite.failures,
        "errors": suite.errors,
        "skipped": suite.skipped,
    }
    properties = {p.name: p.value for p in suite.properties()}
    return {
        "name": suite.name,
        "declared": declared,
        "counted": counted,
        "properties": properties,
        "cases": cases,
    }


def main():
    xml = JUnitXml.fromfile(sys.argv[1])
    suites = [suite_json(s) for s in xml if isinstance(s, TestSuite)]
    print(json.dumps({"name": xml.name, "suites": suites}, indent=1))


if __name__ == "__main__":
    main()
