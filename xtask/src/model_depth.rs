//! `cargo xtask model-depth`: how far the model checker gets, and at what cost. Builds the lab in
//! release mode, runs `lab model` at each bound the book names ([`Bounds::NAMED`]) for the
//! design, each under a time limit, and writes what it printed to `model-depth.json`, with the
//! machine's cores and load average, for the model chapter's table (`{{#lab-model depth}}`).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lab::model::Bounds;
use serde_json::{Value, json};

/// The file the measurements go to, at the repository's root.
pub const FILE: &str = "model-depth.json";

/// How long one bound may run before it is stopped and reported unfinished.
const LIMIT: Duration = Duration::from_secs(600);

/// What one `lab model` report says about its search.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// Distinct states.
    pub states: u64,
    /// States generated, revisits included.
    pub generated: u64,
    /// The longest path, in steps.
    pub depth: u64,
    /// Seconds of the search.
    pub seconds: f64,
    /// Distinct states per second.
    pub rate: f64,
}

/// Reads the line `explored N distinct states (G generated), paths up to D steps in T s (R
/// states per second)` of a `lab model` report.
pub fn figures(report: &str) -> Result<Figures> {
    let line = report
        .lines()
        .find(|l| l.starts_with("explored "))
        .context("no `explored ...` line in the report")?;
    let numbers: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| !w.is_empty() && *w != ".")
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("a number in `{line}`"))?;
    let [states, generated, depth, seconds, rate] = numbers[..] else {
        bail!("expected five numbers in `{line}`");
    };
    Ok(Figures {
        states: states as u64,
        generated: generated as u64,
        depth: depth as u64,
        seconds,
        rate,
    })
}

/// The load average over 1, 5 and 15 minutes, where the system says it.
fn load_average() -> Value {
    std::fs::read_to_string("/proc/loadavg").map_or(Value::Null, |text| {
        let loads: Vec<f64> = text
            .split_whitespace()
            .take(3)
            .filter_map(|w| w.parse().ok())
            .collect();
        json!(loads)
    })
}

fn release_lab(root: &Path) -> Result<PathBuf> {
    // Built where the path below looks, whatever target folder xtask itself was built in.
    let status = crate::cargo()
        .args(["build", "--release", "-q", "-p", "lab"])
        .env_remove("CARGO_TARGET_DIR")
        .current_dir(root)
        .status()?;
    if !status.success() {
        bail!("building the lab in release mode failed");
    }
    Ok(root.join("target/release/lab"))
}

/// Runs `lab model` with `arguments`, stopped after [`LIMIT`]: its figures, or `None` if it
/// did not finish.
fn measure(lab: &Path, arguments: &str) -> Result<Option<Figures>> {
    let mut child = Command::new(lab)
        .arg("model")
        .args(arguments.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", lab.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut out)?;
            }
            if status.code() != Some(0) {
                bail!("lab model {arguments} exited with {status}:\n{out}");
            }
            return figures(&out).map(Some);
        }
        if started.elapsed() > LIMIT {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Measures every named bound and writes [`FILE`].
pub fn run(root: &Path) -> Result<()> {
    let lab = release_lab(root)?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let load_before = load_average();
    let mut runs = Vec::new();
    for (name, bounds) in Bounds::NAMED {
        let arguments = bounds.arguments();
        println!("lab model {arguments}");
        let run = match measure(&lab, &arguments)? {
            Some(f) => json!({
                "name": name, "arguments": arguments, "finished": true,
                "states": f.states, "generated": f.generated, "depth": f.depth,
                "seconds": f.seconds, "rate": f.rate,
            }),
            None => json!({
                "name": name, "arguments": arguments, "finished": false,
                "seconds": LIMIT.as_secs_f64(),
            }),
        };
        println!("  {run}");
        runs.push(run);
    }
    let report = json!({
        "build": "release",
        "cores": cores,
        "limit_s": LIMIT.as_secs_f64(),
        "load_before": load_before,
        "load_after": load_average(),
        "runs": runs,
    });
    let path = root.join(FILE);
    let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
    lab::evidence::AtomicFile::create(&path)?.commit(text.as_bytes())?;
    println!("wrote {}", path.display());
    Ok(())
}

fn loads(value: &Value) -> String {
    value.as_array().map_or_else(
        || "not known".to_owned(),
        |l| {
            l.iter()
                .filter_map(Value::as_f64)
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
    )
}

/// The chapter's table, from [`FILE`].
pub fn table(root: &Path) -> Result<String> {
    let path = root.join(FILE);
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    let runs = report["runs"]
        .as_array()
        .with_context(|| format!("{}: no `runs`", path.display()))?;
    let mut out = String::from(
        "| Bounds | Command | Distinct states | Longest path (steps) | Seconds | States per second |\n\
         | --- | --- | ---: | ---: | ---: | ---: |\n",
    );
    for run in runs {
        let field = |name: &str| {
            run.get(name)
                .with_context(|| format!("{}: a run without `{name}`", path.display()))
        };
        let name = field("name")?.as_str().unwrap_or_default();
        let arguments = field("arguments")?.as_str().unwrap_or_default();
        if field("finished")?.as_bool() == Some(true) {
            out.push_str(&format!(
                "| {name} | `lab model {arguments}` | {} | {} | {:.1} | {:.0} |\n",
                field("states")?,
                field("depth")?,
                field("seconds")?.as_f64().unwrap_or_default(),
                field("rate")?.as_f64().unwrap_or_default(),
            ));
        } else {
            out.push_str(&format!(
                "| {name} | `lab model {arguments}` | not finished | | over {:.0} | |\n",
                field("seconds")?.as_f64().unwrap_or_default()
            ));
        }
    }
    out.push_str(&format!(
        "\nMeasured by `cargo xtask model-depth` on a release build, the search on one thread of \
         the machine's {} cores, the load average (1, 5 and 15 minutes) {} before and {} after.\n",
        report["cores"],
        loads(&report["load_before"]),
        loads(&report["load_after"]),
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::model::{self, Variant};

    #[test]
    fn the_figures_are_read_from_the_report_lab_model_prints() {
        let small = Bounds {
            callers: 1,
            sends: 1,
            losses: 0,
            duplicates: 0,
            crashes: 0,
            prunes: 0,
        };
        let report = model::check(small, Variant::Design).unwrap();
        let read = figures(&report.text(true)).unwrap();
        assert_eq!(read.states, report.states as u64);
        assert_eq!(read.generated, report.generated as u64);
        assert_eq!(read.depth, report.depth.saturating_sub(1) as u64);
        assert!(figures("no such line").is_err());
    }
}
