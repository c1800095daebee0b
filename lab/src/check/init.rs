//! The commented starting file `lab check --target FILE --init URL` writes: every section the
//! check reads, with the choices spelt out, for a person to fit to their service. How the
//! service reads its key (`key.form`, `key.pattern`) is the one guess `--init` makes from a
//! probe of its own: a few creates with the starting file's request.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::Value;

use super::history::Answer;
use super::probe::{KeyWire, Probe};
use super::target::{KeyForm, Overrides, Target, Vary};
use crate::error::{Error, Result};

/// The expression `--init` writes as `key.pattern` for a service that takes only UUIDs.
pub const UUID_PATTERN: &str =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

/// What `--init`'s probe found about how the service reads keys, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGuess {
    /// `key.form`'s value.
    pub form: &'static str,
    /// `key.pattern`, when the probe showed that the service takes only UUIDs.
    pub pattern: Option<&'static str>,
    /// What the probe saw, for the file's comment.
    pub why: String,
}

impl KeyGuess {
    /// The probe could not tell: the draft's form, and why not.
    fn untold(why: String) -> KeyGuess {
        KeyGuess {
            form: "sf-string",
            pattern: None,
            why: format!(
                "{why}, so it could not tell how the service reads keys; the form below is \
                 the draft's (set it once [create] and [[callers]] fit the service)"
            ),
        }
    }

    fn found(form: &'static str, why: &str) -> KeyGuess {
        KeyGuess {
            form,
            pattern: None,
            why: why.to_owned(),
        }
    }
}

/// The starting file for a service at `base_url`, with the key's form as `key` guesses it. It
/// parses as it is (a test holds it to that), but its paths, fields and callers are guesses to
/// be replaced.
pub fn starting_file(base_url: &str, key: &KeyGuess) -> String {
    let mut lines = format!("# --init's probe: {}.\nform = \"{}\"", key.why, key.form);
    if let Some(pattern) = key.pattern {
        lines.push_str(&format!(
            "\n# The keys the service takes (the whole key must match); a key outside it must \
             be refused with statuses.bad_key.\npattern = \"{pattern}\""
        ));
    }
    TEMPLATE
        .replace("BASE_URL", base_url)
        .replace("KEY_FORM", &wrapped(&lines))
}

/// Comment lines cut at the template's width.
fn wrapped(text: &str) -> String {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(comment) = line.strip_prefix("# ") else {
            out.push(line.to_owned());
            continue;
        };
        let mut current = String::from("#");
        for word in comment.split(' ') {
            if current.len() + 1 + word.len() > 99 && current != "#" {
                out.push(std::mem::replace(&mut current, String::from("#")));
            }
            current.push(' ');
            current.push_str(word);
        }
        out.push(current);
    }
    out.join("\n")
}

/// Writes the starting file to `path`, refusing to replace a file that exists, after probing
/// the service at `base_url` with the starting file's create for how it reads keys.
///
/// # Errors
/// [`Error::InputInvalid`] when `path` exists; [`Error::OutputUnwritable`] when it cannot be
/// written; [`Error::Io`] when the probe's runtime cannot start.
pub fn write(path: &Path, base_url: &str) -> Result<KeyGuess> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => exists(path, "--init"),
            _ => Error::OutputUnwritable {
                path: path.to_owned(),
                source,
            },
        })?;
    let key = guess_key(base_url).inspect_err(|_| {
        // Nothing was written: the empty file is not left behind.
        let _ = std::fs::remove_file(path);
    })?;
    file.write_all(starting_file(base_url, &key).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| Error::OutputUnwritable {
            path: path.to_owned(),
            source,
        })?;
    Ok(key)
}

/// Writes `text` to `path`, a new file (never replacing one), whole and synced; `option` names
/// the command-line option in the refusal (`--init`, `--init-mcp`).
///
/// # Errors
/// [`Error::InputInvalid`] when `path` exists; [`Error::OutputUnwritable`] when it cannot be
/// written.
pub fn write_new(path: &Path, text: &str, option: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => exists(path, option),
            _ => Error::OutputUnwritable {
                path: path.to_owned(),
                source,
            },
        })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| Error::OutputUnwritable {
            path: path.to_owned(),
            source,
        })
}

/// The refusal of a path that exists, for `option`.
pub fn exists(path: &Path, option: &str) -> Error {
    Error::InputInvalid {
        subject: "--target".to_owned(),
        problem: format!(
            "{}: exists; {option} writes a new file and never replaces one",
            path.display()
        ),
    }
}

/// Probes the service with the starting file's create (its path, body and first caller).
fn guess_key(base_url: &str) -> Result<KeyGuess> {
    let overrides = Overrides {
        base_url: Some(base_url.to_owned()),
        // The command line has already held the URL to loopback unless --allow-remote.
        allow_remote: true,
        upstream_port: None,
    };
    let text = starting_file(base_url, &KeyGuess::untold(String::new()));
    let mut target = match Target::parse(&text, Path::new("--init"), &overrides) {
        Ok(target) => target,
        Err(err) => return Ok(KeyGuess::untold(format!("the starting file: {err}"))),
    };
    // Bare as the normal form, quoted as the other.
    target.key.form = KeyForm::Opaque;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "starting --init's probe".to_owned(),
            source,
        })?;
    Ok(runtime.block_on(probe_key(&Probe::new(target))))
}

/// A UUID key bare, the same again (a replay shows that keys are honoured), the same quoted,
/// and where the quoted key is refused, a key of a UUID's length that is no UUID.
async fn probe_key(probe: &Probe) -> KeyGuess {
    const STEP: &str = "--init";
    // A UUID that opens with a digit: bare, it is no sf-item at all (a token opens with a
    // letter), so a service that parses the draft's syntax refuses it on every run alike.
    let key = format!("0{}", &uuid::Uuid::new_v4().to_string()[1..]);
    // The same words on every run, so the effects the probe leaves say where they came from.
    let create = &probe.target.create;
    let fields: BTreeMap<String, Value> = create
        .fields
        .iter()
        .map(|(name, value)| match (value, create.vary.get(name)) {
            (Value::String(text), Some(Vary::Text)) => (
                name.clone(),
                Value::String(format!("{text} (lab check --init)")),
            ),
            (other, _) => (name.clone(), other.clone()),
        })
        .collect();
    let call = |key: KeyWire| probe.call(STEP, key, &fields);
    let bare = probe
        .send(STEP, &call(KeyWire::Normal(key.clone())))
        .await
        .answer;
    if bare.status().is_none() {
        return KeyGuess::untold(format!(
            "its create with a fresh key had {}",
            bare.summary()
        ));
    }
    if !probe.read(&bare, false).success {
        let other = uuid::Uuid::new_v4().to_string();
        let quoted = probe
            .send(STEP, &call(KeyWire::OtherForm(other)))
            .await
            .answer;
        if probe.read(&quoted, false).success {
            return KeyGuess::found(
                "sf-string",
                &format!(
                    "a key sent bare was refused ({}), and sent quoted, as the draft's \
                     sf-string, it was taken ({})",
                    bare.summary(),
                    quoted.summary()
                ),
            );
        }
        return KeyGuess::untold(format!(
            "its create was answered {} with the key bare and {} with it quoted",
            bare.summary(),
            quoted.summary()
        ));
    }
    let again = probe
        .send(STEP, &call(KeyWire::Normal(key.clone())))
        .await
        .answer;
    if !bare.same_body(&again) {
        return KeyGuess::untold(format!(
            "the same key sent twice was answered {} then {} with another body, not a replay",
            bare.summary(),
            again.summary()
        ));
    }
    let quoted = probe
        .send(STEP, &call(KeyWire::OtherForm(key)))
        .await
        .answer;
    read_quoted(probe, &call, &bare, &quoted).await
}

/// The guess from the quoted key's answer (and a key that is no UUID, where it was refused).
async fn read_quoted(
    probe: &Probe,
    call: &impl Fn(KeyWire) -> super::probe::Call,
    bare: &Answer,
    quoted: &Answer,
) -> KeyGuess {
    if bare.same_body(quoted) {
        return KeyGuess::found(
            "sf-string",
            "the key sent bare and then quoted, as the draft's sf-string, was read as one key \
             (the quoted request was answered as a replay)",
        );
    }
    if probe.read(quoted, false).success {
        return KeyGuess::found(
            "opaque",
            "the key sent bare and then quoted made two effects: the service takes the \
             header's value as it comes, quotes and all",
        );
    }
    if !quoted.status().is_some_and(|s| (400..=499).contains(&s)) {
        return KeyGuess::untold(format!(
            "the key sent quoted was answered {}",
            quoted.summary()
        ));
    }
    // A key as long as a UUID, of the same characters, that is no UUID.
    let simple = uuid::Uuid::new_v4().simple().to_string();
    let not_uuid = format!("chk-{simple}");
    let other = probe
        .send("--init", &call(KeyWire::Normal(not_uuid)))
        .await
        .answer;
    if probe.read(&other, false).success {
        return KeyGuess::found(
            "token",
            &format!(
                "a key sent quoted was refused ({}) and keys sent bare were taken: the service \
                 reads the key bare, as a token",
                quoted.summary()
            ),
        );
    }
    KeyGuess {
        form: "opaque",
        pattern: Some(UUID_PATTERN),
        why: format!(
            "a UUID key sent bare was taken, and refused quoted ({}) and a key of a UUID's \
             length that is no UUID ({}): the service takes only UUIDs, as they come",
            quoted.summary(),
            other.summary()
        ),
    }
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
# How the service reads the header's value: "opaque" (the value as it comes, any string, as
# Stripe reads it: the check sends KEY bare, and what the draft asks of sf-strings is only a
# SHOULD), "sf-string" (the service claims the draft's quoted String: the check sends "KEY",
# and a malformed or bare key must be refused or read as the same key) or "token" (KEY bare; a
# quoted key refused or read as the same key). Optional: pattern, a regular expression the
# whole key must match, for a service that takes only such keys (UUIDs).
KEY_FORM
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

# Two or more callers, each with credentials the service tells apart (for the other-caller point).
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

    #[test]
    fn the_starting_file_parses_as_it_is() {
        let text = starting_file("http://127.0.0.1:8000", &KeyGuess::untold("x".to_owned()));
        let target = Target::parse(&text, Path::new("init.toml"), &Overrides::default()).unwrap();
        assert_eq!(target.service.url.port(), 8000);
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
    fn the_guessed_form_and_pattern_are_written_with_their_reason_and_parse() {
        let guess = KeyGuess {
            form: "opaque",
            pattern: Some(UUID_PATTERN),
            why: "a UUID key sent bare was taken, and refused quoted (400) and a key of a \
                  UUID's length that is no UUID (400): the service takes only UUIDs, as they come"
                .to_owned(),
        };
        let text = starting_file("http://127.0.0.1:8000", &guess);
        assert!(text.lines().all(|line| line.len() <= 100), "{text}");
        assert!(
            text.contains("# --init's probe: a UUID key sent bare"),
            "{text}"
        );
        let target = Target::parse(&text, Path::new("init.toml"), &Overrides::default()).unwrap();
        assert_eq!(target.key.form, KeyForm::Opaque);
        let pattern = target.key.pattern.expect("the pattern is written");
        assert!(pattern.matches(&uuid::Uuid::new_v4().to_string()));
        assert!(!pattern.matches("chk-5f0c1a2b3d4e4f609a7b8c9d0e1f2a3b"));
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
