//! The commented starting file `lab check --target FILE --init URL` writes: every section the
//! check reads, with the choices spelt out, for a person to fit to their service.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The starting file for a service at `base_url`. It parses as it is (a test holds it to that),
/// but its paths, fields and callers are guesses to be replaced.
pub fn starting_file(base_url: &str) -> String {
    TEMPLATE.replace("BASE_URL", base_url)
}

/// Writes the starting file to `path`, refusing to replace a file that exists.
///
/// # Errors
/// [`Error::InputInvalid`] when `path` exists; [`Error::OutputUnwritable`] when it cannot be
/// written.
pub fn write(path: &Path, base_url: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => Error::InputInvalid {
                subject: "--target".to_owned(),
                problem: format!(
                    "{}: exists; --init writes a new file and never replaces one",
                    path.display()
                ),
            },
            _ => Error::OutputUnwritable {
                path: path.to_owned(),
                source,
            },
        })?;
    file.write_all(starting_file(base_url).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| Error::OutputUnwritable {
            path: path.to_owned(),
            source,
        })
}

const TEMPLATE: &str = r#"# A target file for `lab check --target THIS_FILE`: a black-box check of a service that
# takes an operation key. The check creates real effects, each with fresh keys and field
# values, and counts the change, so a service holding other data can be checked. Replace the
# guesses below (paths, fields, callers) with your service's.

[service]
# Loopback only, unless `lab check --allow-remote`.
base_url = "BASE_URL"
# How long one request may take before it counts as "no answer" (milliseconds).
timeout_ms = 10000
# Optional: a fresh state before the run, as a request or a command (argv list).
# reset = { method = "POST", path = "/admin/reset", headers = { Authorization = "Bearer admin" } }
# reset_command = ["sh", "-c", "rm -f /tmp/service.sqlite"]

[create]
method = "POST"
path = "/tickets"
headers = { "Content-Type" = "application/json" }
# The JSON body. A text that is exactly "{{name}}" takes the field's value (a number stays a
# number); "{{name}}" inside a longer text takes its text. Every point varies the text fields.
body = { title = "{{title}}", priority = "{{priority}}" }
fields = { title = "Printer on floor three is jammed", priority = "high" }
# Which statuses mean success (default: any 2xx).
# success = [201]

[key]
header = "Idempotency-Key"
# "sf-string" sends "KEY" (the draft's syntax); "token" sends KEY bare.
form = "sf-string"

[identity]
# Where a success names what it created: a JSON pointer into the body, or a header.
json_pointer = "/id"
# header = "Location"

[replay]
# How a replay is recognised: a header (with an optional value), a status, or neither.
# header = "Idempotent-Replayed"
# value = "true"
# status = 200
inferred = true

[statuses]
# What the service answers in each case (the draft's section 2.7 suggests these).
conflict = [422]
in_progress = [409]
bad_key = [400]
missing_key = [400]

# Two or more callers, each with credentials the service tells apart (for the scope point).
[[callers]]
name = "alice"
headers = { Authorization = "Bearer alice-token" }

[[callers]]
name = "bob"
headers = { Authorization = "Bearer bob-token" }

[count]
# Exactly one of request, sql or command. A request's JSON pointer names a list (its length
# counts) or a number; caller = "each" sums the count over the callers (a list that shows each
# caller its own), a caller's name sends it as that caller, "none" sends no credentials.
request = { method = "GET", path = "/tickets", json_pointer = "", caller = "each" }
# sql = { sqlite = "/tmp/service.sqlite", query = "SELECT COUNT(*) FROM tickets" }
# sql = { postgres = "postgresql://user@127.0.0.1/db", query = "SELECT COUNT(*) FROM tickets" }
# command = ["sh", "-c", "sqlite3 /tmp/service.sqlite 'SELECT COUNT(*) FROM tickets'"]

# Optional: another endpoint that takes keys, for "the same key on another endpoint".
# [other_endpoint]
# method = "POST"
# path = "/comments"
# headers = { "Content-Type" = "application/json" }
# body = { text = "{{text}}" }
# fields = { text = "A comment" }

[errors]
# How to provoke a validation 4xx (fields laid over the create's, or a raw body).
validation = { fields = { title = "" } }
# Optional: how to provoke a handled 5xx (a test hook); without it the point is not covered.
# server = { headers = { "X-Test-Fail" = "500" } }

# Optional: a hook that fails the service after its effect and before the key's record.
# [faults]
# between_effect_and_record = { headers = { "X-Test-Fault" = "after-effect" } }

[load]
# The concurrent points: rounds on a fresh key, rounds on a completed key, requests per round.
fresh_rounds = 12
completed_rounds = 6
callers = 8
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Overrides, Target};

    #[test]
    fn the_starting_file_parses_as_it_is() {
        let text = starting_file("http://127.0.0.1:8000");
        let target = Target::parse(&text, Path::new("init.toml"), &Overrides::default()).unwrap();
        assert_eq!(target.service.port, 8000);
        assert!(target.errors.validation_given);
    }

    #[test]
    fn init_never_replaces_a_file() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("t.toml");
        std::fs::write(&path, "mine").unwrap();
        let err = write(&path, "http://127.0.0.1:1").unwrap_err();
        assert!(err.to_string().contains("exists"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
    }
}
