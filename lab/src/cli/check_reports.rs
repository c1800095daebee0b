//! `lab check --target FILE --junit PATH --html PATH`: the report files beside the printed
//! report. Each path is claimed before anything is sent (a temporary file in its folder), so a
//! path that cannot be written stops the check with exit status 2 before the service sees a
//! request; each file is renamed into place whole once the report exists, as `lab run --output`
//! writes its evidence (`lab::evidence::AtomicFile`).

use std::path::{Path, PathBuf};

use lab::Error;
use lab::check::{Report, html, junit};
use lab::evidence::AtomicFile;

/// The report files a check writes, claimed and not yet written.
pub struct ReportFiles {
    claimed: Vec<Claim>,
}

/// How a report file is drawn from the report.
type Render = fn(&Report) -> String;

/// One report file: its option, its path, the file claimed, and how it is drawn.
struct Claim {
    option: &'static str,
    path: PathBuf,
    file: AtomicFile,
    render: Render,
}

impl ReportFiles {
    /// Claims `--junit` and `--html` (either may be absent).
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming the option and the path when its folder is missing or not
    /// writable, or the path is a folder or another non-file; or when both name one path.
    pub fn claim(junit: Option<&Path>, html: Option<&Path>) -> lab::Result<ReportFiles> {
        if let (Some(a), Some(b)) = (junit, html)
            && a == b
        {
            return Err(Error::InputInvalid {
                subject: "--junit, --html".to_owned(),
                problem: format!("both name {}: give each report its own file", a.display()),
            });
        }
        let mut claimed = Vec::new();
        let wanted: [(&'static str, Option<&Path>, Render); 2] = [
            ("--junit", junit, junit::to_junit),
            ("--html", html, html::to_html),
        ];
        for (option, path, render) in wanted {
            if let Some(path) = path {
                let file = AtomicFile::create(path).map_err(|err| named(option, path, err))?;
                claimed.push(Claim {
                    option,
                    path: path.to_owned(),
                    file,
                    render,
                });
            }
        }
        Ok(ReportFiles { claimed })
    }

    /// Writes each claimed file from `report`, whole.
    ///
    /// # Errors
    /// [`Error::InputInvalid`] naming the option, when a file could not be written (an earlier
    /// file at its path is then unchanged).
    pub fn write(self, report: &Report) -> lab::Result<()> {
        for claim in self.claimed {
            let content = (claim.render)(report);
            claim
                .file
                .commit(content.as_bytes())
                .map_err(|err| named(claim.option, &claim.path, err))?;
        }
        Ok(())
    }
}

/// An unwritable report path, as bad input naming the option.
fn named(option: &str, path: &Path, err: Error) -> Error {
    let problem = match err {
        Error::OutputUnwritable { source, .. } => {
            format!("cannot write {}: {source}", path.display())
        }
        other => other.to_string(),
    };
    Error::InputInvalid {
        subject: option.to_owned(),
        problem,
    }
}

/// How a command ends on `report`: succeeded, or [`Error::ScenarioFailed`] (exit status 1) for
/// `scenario`, naming the points that failed.
pub fn finished(
    report: &Report,
    scenario: &'static str,
    expected: &str,
) -> lab::Result<super::Finished> {
    if report.passed {
        return Ok(super::Finished::Succeeded);
    }
    let failed: Vec<&str> = report.failed().map(|point| point.name).collect();
    Err(Error::ScenarioFailed {
        scenario,
        expected: expected.to_owned(),
        observed: format!(
            "{} point{} failed: {}",
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            failed.join(", ")
        ),
    })
}
