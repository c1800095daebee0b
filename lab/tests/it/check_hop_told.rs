//! Issue 46, the hop's wrappers as a new user meets them: an API error the wrapper returns in a
//! result not marked `isError` (the agent reads a success), a `401` that is the caller's token,
//! a key the wrapper puts in the body of an API that reads a header, the starting file
//! `--init-mcp` writes for a wrapper whose tool list names the key, and `--upstream-port`. Each
//! runs the planted wrapper (`lab/tests/wrappers/planted/wrapper.py`) on the clients' venv.

use std::path::{Path, PathBuf};
use std::process::Command;

use lab::serde_json::Value;

use crate::check_hop::{check_outcome, hop_points_with, planted_with};
use crate::check_mcp::{fitted, python, verdicts};
use crate::repository_root;

const LAB: &str = env!("CARGO_BIN_EXE_lab");

fn wrapper() -> String {
    let path = repository_root().join("lab/tests/wrappers/planted/wrapper.py");
    format!("{:?}", path.to_str().unwrap())
}

/// The planted wrapper's `target.toml`, fitted to `python`, with `more` replacements.
fn planted_file(python: &Path, folder: &Path, more: &[(&str, &str)]) -> PathBuf {
    let python = format!("{:?}", python.to_str().unwrap());
    let wrapper = wrapper();
    let mut replace: Vec<(&str, &str)> =
        vec![("\"python3\"", &python), ("\"wrapper.py\"", &wrapper)];
    replace.extend_from_slice(more);
    fitted("lab/tests/wrappers/planted/target.toml", &replace, folder)
}

fn point<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no point {name}: {report:#}"))
}

/// Every sub-check that passed, as (point, what, observed).
fn passed_checks(report: &Value) -> Vec<(String, String, String)> {
    let mut passed = Vec::new();
    for point in report["points"].as_array().unwrap() {
        for check in point["checks"].as_array().into_iter().flatten() {
            if check["passed"] == true {
                passed.push((
                    point["name"].as_str().unwrap_or_default().to_owned(),
                    check["what"].as_str().unwrap_or_default().to_owned(),
                    check["observed"].as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
    }
    passed
}

/// A wrapper that hands the API's refusals (a 400, a 422, a 409, a 503: each a problem document)
/// to the agent in a result not marked `isError` tells the agent each call succeeded. With the
/// file's `text_code_pattern` reading the problem's type, every point that asks whether the agent
/// was told of the failure fails, and no sub-check passes on such a result; without a code
/// reader, the calibration does not stop to ask for one (it would hide the fault): the points
/// grade the wrapper.
#[test]
fn api_errors_in_results_not_marked_is_error_fail_where_the_agent_is_told_whatever_the_file_reads()
{
    let Some(python) = python(
        "check_hop_told::api_errors_in_results_not_marked_is_error_fail_where_the_agent_is_told_whatever_the_file_reads",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let report = planted_with(
        "target.toml",
        &python,
        "error-as-success",
        folder.path(),
        &[],
    );
    let failed: Vec<String> = verdicts(&report)
        .into_iter()
        .filter(|(_, v)| v == "FAIL")
        .map(|(n, _)| n)
        .collect();
    // (error-then-corrected is not among them: its refusal, a title that is not text, is the
    // SDK's own, an error result.)
    for name in [
        "changed-payload",
        "key-forms",
        "hop-upstream-retry",
        "hop-errors",
    ] {
        assert!(
            failed.contains(&name.to_owned()),
            "{name} passed on errors flagged as success: {failed:?}\n{:#}",
            point(&report, name)
        );
    }
    let on_flagged: Vec<_> = passed_checks(&report)
        .into_iter()
        .filter(|(_, _, observed)| observed.contains("not marked isError"))
        .collect();
    assert!(
        on_flagged.is_empty(),
        "sub-checks passed on a result not marked isError: {on_flagged:#?}"
    );

    // Without a code reader: graded, not stopped with advice to add one.
    let python_word = format!("{:?}", python.to_str().unwrap());
    let wrapper = wrapper();
    let file = fitted(
        "lab/tests/wrappers/planted/target.toml",
        &[
            ("\"python3\"", &python_word),
            ("\"wrapper.py\"", &wrapper),
            ("\"--bug\", \"none\"", "\"--bug\", \"error-as-success\""),
            (
                "text_code_pattern = 'http-boundary\\.html#problem-([a-z-]+)'\n\
                 conflict = [\"payload-conflict\"]\n\
                 in_progress = [\"in-flight\"]\n\
                 bad_key = [\"invalid-key\", \"missing-key\"]\n",
                "",
            ),
        ],
        folder.path(),
    );
    let (code, report, stderr) = check_outcome(&file);
    assert!(
        !stderr.contains("text_code_pattern"),
        "the calibration advises a setting that hides the fault: {stderr}"
    );
    let report = report.unwrap_or_else(|| panic!("exit {code:?}, no report: {stderr}"));
    assert_eq!(code, Some(1), "{stderr}");
    for name in ["hop-upstream-retry", "hop-errors"] {
        assert!(
            hop_points_with(&report, "FAIL").contains(&name.to_owned()),
            "{name}: {:#}",
            point(&report, name)
        );
    }
}

/// The API answers the wrapper `401` for a caller's stale token: the file's slip is in that
/// caller's credentials (here its args), not in the tool's arguments, and the message says so.
#[test]
fn a_401_through_a_wrapper_names_the_callers_token_not_the_tools_arguments() {
    let Some(python) = python(
        "check_hop_told::a_401_through_a_wrapper_names_the_callers_token_not_the_tools_arguments",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let file = planted_file(
        &python,
        folder.path(),
        &[(
            "args = [\"--token\", \"alice-token\"]",
            "args = [\"--token\", \"alice-old-token\"]",
        )],
    );
    let (code, report, stderr) = check_outcome(&file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(report.is_none(), "nothing is graded");
    assert!(
        stderr.contains("mcp.callers[0].args") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("mcp.tool.arguments") && !stderr.contains("key.shape"),
        "{stderr}"
    );
}

/// The lab's own API reads the key in its `Idempotency-Key` header, as its OpenAPI document
/// declares. A wrapper that puts the agent's key in the create's body is graded for it (the key
/// never reached the header), never told to declare a body key; and a file that declares one for
/// the lab's API is refused, since the check would then grade an API that reads the body.
#[test]
fn a_key_the_wrapper_puts_in_the_body_of_an_api_that_reads_a_header_is_the_wrappers_finding() {
    let Some(python) = python(
        "check_hop_told::a_key_the_wrapper_puts_in_the_body_of_an_api_that_reads_a_header_is_the_wrappers_finding",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let in_body = (
        "\"--bug\", \"none\"",
        "\"--bug\", \"none\", \"--key-in-body\", \"idempotency_key\"",
    );
    let file = planted_file(&python, folder.path(), &[in_body]);
    let (code, report, stderr) = check_outcome(&file);
    assert!(!stderr.contains("key_pointer"), "{stderr}");
    let report = report.unwrap_or_else(|| panic!("exit {code:?}, no report: {stderr}"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        hop_points_with(&report, "FAIL").contains(&"hop-key".to_owned()),
        "{report:#}"
    );
    let key = point(&report, "hop-key");
    assert!(
        key.to_string().contains("the body's /idempotency_key"),
        "hop-key says where the key went: {key:#}"
    );

    let tokens = "tokens = { alice = \"alice-token\", bob = \"bob-token\" }\n";
    let declared = format!("{tokens}key_pointer = \"/idempotency_key\"\n");
    let file = planted_file(&python, folder.path(), &[in_body, (tokens, &declared)]);
    let (code, report, stderr) = check_outcome(&file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(report.is_none(), "nothing is graded: {report:#?}");
    assert!(
        stderr.contains("upstream.key_pointer") && stderr.contains("upstream.create"),
        "{stderr}"
    );
}

/// `--init-mcp` on a wrapper whose tool list is `openapi()` first, then
/// `createTicket(Idempotency-Key, body)`: the starting file picks the create by its key, not by
/// a name that starts like "open"; takes `Idempotency-Key` as the key argument, the body's
/// members as fields, and writes the `[upstream]` section the hop needs (the key's header, the
/// body's place, the wrapper's API URL as `{{upstream}}`). With its two marked token and identity
/// guesses filled in, the file checks the wrapper and passes.
#[test]
fn init_mcp_on_a_wrapper_whose_tool_list_names_the_key_starts_from_its_create_and_its_upstream() {
    let Some(python) = python(
        "check_hop_told::init_mcp_on_a_wrapper_whose_tool_list_names_the_key_starts_from_its_create_and_its_upstream",
    ) else {
        return;
    };
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("wrapper.toml");
    let server = format!(
        "{} {} --api http://127.0.0.1:9 --token alice-token --openapi-names",
        python.to_str().unwrap(),
        repository_root()
            .join("lab/tests/wrappers/planted/wrapper.py")
            .to_str()
            .unwrap()
    );
    let output = Command::new(LAB)
        .args(["check", "--target"])
        .arg(&file)
        .args(["--init-mcp", &server])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let target = match lab::check::TargetFile::from_file(&file, &Default::default()) {
        Ok(lab::check::TargetFile::Mcp(target)) => target,
        Ok(_) => panic!("not an MCP file:\n{text}"),
        Err(err) => panic!("{err}\n{text}"),
    };
    assert_eq!(target.tool.name, "createTicket", "{text}");
    assert_eq!(
        target.tool.key_argument.as_deref(),
        Some("Idempotency-Key"),
        "{text}"
    );
    let upstream = target
        .upstream
        .as_ref()
        .unwrap_or_else(|| panic!("no [upstream]:\n{text}"));
    assert_eq!(upstream.key_header, "Idempotency-Key", "{text}");
    assert_eq!(upstream.body_argument, "/body", "{text}");
    assert!(
        text.contains("\"--api\",\"{{upstream}}\"") && !text.contains("127.0.0.1:9"),
        "{text}"
    );
    assert_eq!(
        target.tool.arguments["body"]["title"], "{{title}}",
        "{text}"
    );

    // The guesses the file marks, filled in as its comments say, and nothing else.
    let filled = text
        .replace("agent = \"TOKEN\"", "agent = \"alice-token\"")
        .replace(
            "structured_pointer = \"/id\"",
            "structured_pointer = \"/ticket_id\"",
        );
    assert_ne!(filled, text);
    std::fs::write(&file, filled).unwrap();
    let (code, report, stderr) = check_outcome(&file);
    let report = report.unwrap_or_else(|| panic!("exit {code:?}, no report: {stderr}"));
    assert_eq!(
        hop_points_with(&report, "FAIL"),
        Vec::<String>::new(),
        "{report:#}"
    );
}
