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
# values, and counts the change, so a service holding other data can be checked. Every value
# below is a guess: replace it with your service's. Before any point, a calibration proves
# most of them against the service, but not [statuses], [replay] and key.required: these
# state what the service promises, and the points grade it against them, so take them from
# its documentation.

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
# number); "{{name}}" inside a longer text takes its text.
body = { title = "{{title}}", priority = "{{priority}}" }
fields = { title = "Printer on floor three is jammed", priority = "high" }
# The fields the check may change, and how: "text" (free text: it appends " (check RUN-N)"), or
# a list of values the service accepts (the field's own among them; a list with values a loose
# comparison would merge, such as 1024 and "1024", checks each such pair). Every other field is
# sent exactly as given. Without any, the changed-payload point is not covered.
vary = { title = "text" }
# vary = { title = "text", priority = ["high", "low"] }
# Which statuses mean success (default: any 2xx).
# success = [201]

[key]
header = "Idempotency-Key"
# "sf-string" sends "KEY" (the draft's syntax); "token" sends KEY bare.
form = "sf-string"
# The keys the check makes: "uuid" (a fresh random UUID, which most middlewares accept) or
# "text" (chk-RUN-N).
shape = "uuid"
# false when the key is optional: a request without one is then a plain request, and
# statuses.missing_key may be [].
required = true

[identity]
# Where a success names what it created: a JSON pointer into the body, or a header.
json_pointer = "/id"
# header = "Location"

[replay]
# How a replay is recognised: a header (with an optional value), a status, or neither. A status
# may be any one (409 with the stored body, when the body names the first effect).
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
# A relative path is read from this file's folder; commands run in it too.
# sql = { sqlite = "service.sqlite", query = "SELECT COUNT(*) FROM tickets" }
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
# Optional: how to provoke a handled 5xx (a test hook), one table or a list of them, each its
# own sub-checks; without it the point is not covered.
# server = { headers = { "X-Test-Fail" = "500" } }
# server = [{ headers = { "X-Test-Fail" = "500" } }, { fields = { title = "boom" } }]

# Optional: how to read one effect back by its identity, so an overwrite in place is seen (a
# changed payload that changed the first effect): a request with {{id}} in its path (the
# pointer names the effect in the answer), a read-only SQLite query with ?1 the identity, or both.
# [read]
# request = { method = "GET", path = "/tickets/{{id}}", json_pointer = "" }
# sql = { sqlite = "service.sqlite", query = "SELECT title, priority FROM tickets WHERE id = ?1" }

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
        assert!(!target.create.vary.is_empty());
        // The commented [read] and the list of server errors parse once uncommented.
        let uncommented = text
            .replace("# [read]\n# request", "[read]\nrequest")
            .replace(
                "# sql = { sqlite = \"service.sqlite\", query = \"SELECT title",
                "sql = { sqlite = \"service.sqlite\", query = \"SELECT title",
            )
            .replace("# server = [", "server = [");
        let target =
            Target::parse(&uncommented, Path::new("init.toml"), &Overrides::default()).unwrap();
        let read = target.read.expect("[read] uncommented");
        assert!(read.request.is_some() && read.sql.is_some());
        assert_eq!(target.errors.server.len(), 2);
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
