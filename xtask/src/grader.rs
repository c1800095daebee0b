//! `{{#lab-grader NAME}}`: the client grader's report on the lab's scripted loops, made while the
//! book builds (`lab::mcp::grader::loops`).
//!
//! `table` runs every scripted loop and gives one Markdown row per loop; the name of a loop
//! (`fresh-call`, `saved-key`, `host-key-replan`, `task-id-replan`, `prepare-replan`) gives that
//! loop's whole report as a `text` block.

use std::fmt::Write as _;

use anyhow::{Result, anyhow, bail};
use lab::mcp::grader::loops::{self, ScriptedLoop};

/// The expansion of `{{#lab-grader NAME}}`.
pub fn expand(name: &str) -> Result<String> {
    if name == "table" {
        return table();
    }
    let Some(scripted) = ScriptedLoop::named(name) else {
        let known: Vec<&str> = ScriptedLoop::ALL.iter().map(|each| each.name()).collect();
        bail!(
            "lab-grader: unknown loop `{name}` (known: table, {})",
            known.join(", ")
        );
    };
    let report = loops::run(scripted).map_err(|err| anyhow!("lab-grader {name}: {err}"))?;
    Ok(format!("```text\n{}```", report))
}

fn table() -> Result<String> {
    let mut out = String::from(
        "| Loop | What it does | Key design | Calls | Sessions | Keys | Tickets | Verdict |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for scripted in ScriptedLoop::ALL {
        let report =
            loops::run(scripted).map_err(|err| anyhow!("lab-grader {}: {err}", scripted.name()))?;
        let keys: usize = report.intentions.iter().map(|i| i.keys.len()).sum();
        let verdict = report.verdict.word();
        let _ = writeln!(
            out,
            "| `{}` | {} | `{}` | {} | {} | {} | {} | {} |",
            scripted.name(),
            scripted.describe(),
            report.key_source,
            report.calls,
            report.sessions,
            keys,
            report.tickets_in_store,
            verdict
        );
    }
    Ok(out)
}
