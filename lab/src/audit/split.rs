//! A recording cut into the JSON values the audit judges, in one pass over the bytes: HAR's
//! entries, OTLP's spans, a proxy record's lines. Each value's bytes are handed on whole, to be
//! parsed from memory (serde_json's fast path); nothing else of the file is kept. The cut walks
//! the structure (objects, arrays, strings and their escapes) down the paths it was given, and
//! inside a value it only counts brackets, so it reads at the speed of a copy.
//!
//! It checks what it walks: brackets that match, strings that end, a file that does not end
//! inside a value. A value's own content is checked by the parse it is handed to.

use std::io::Read;

/// One step of a path from the root: a member (any of these names), or every element of an
/// array.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A member of an object, by any of these names.
    Key(&'static [&'static str]),
    /// Each element of an array.
    Each,
}

/// A value wanted: where, and the number it is reported under.
pub struct Wanted {
    /// The path from a root value (a file may hold several, one per line).
    pub path: &'static [Step],
    /// Passed back with the value.
    pub kind: u8,
}

/// Where a value starts, for messages: line and column, from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The line.
    pub line: u64,
    /// The column (bytes).
    pub column: u64,
}

/// A wanted value: its kind, the indices of the arrays around it (the root value's number
/// first), its bytes and where it starts.
pub struct Found<'a> {
    /// [`Wanted::kind`].
    pub kind: u8,
    /// The root value's number, then each enclosing array's index.
    pub indices: &'a [usize],
    /// The value's JSON text.
    pub bytes: &'a [u8],
    /// Where it starts.
    pub at: Place,
}

/// Why the walk stopped: what, and where.
#[derive(Debug)]
pub struct Stopped {
    /// What was wrong (or what the handler said).
    pub problem: String,
    /// Where.
    pub at: Place,
    /// Whether the file ended inside a value.
    pub truncated: bool,
}

/// One open container of the walk.
struct Frame {
    array: bool,
    /// An object's member name being read or just read.
    key: Vec<u8>,
    /// An array's next element's index.
    index: usize,
    /// In an object: a member name is expected next (after `{` or `,`).
    expect_key: bool,
}

/// Walks `reader` and calls `handle` with each value at a wanted path. The handler's error
/// stops the walk, at the value's place.
///
/// # Errors
/// [`Stopped`]: a read failed, the structure is not JSON, the file ends inside a value, or the
/// handler refused a value.
pub fn split(
    reader: &mut dyn Read,
    wanted: &[Wanted],
    handle: &mut dyn FnMut(Found<'_>) -> Result<(), String>,
) -> Result<(), Stopped> {
    Walk {
        wanted,
        frames: Vec::new(),
        indices: vec![0],
        roots: 0,
        line: 1,
        column: 0,
        value: Vec::new(),
    }
    .run(reader, handle)
}

struct Walk<'w> {
    wanted: &'w [Wanted],
    frames: Vec<Frame>,
    /// The root value's number, then the enclosing arrays' indices.
    indices: Vec<usize>,
    roots: usize,
    line: u64,
    column: u64,
    /// The value being copied, when inside one.
    value: Vec<u8>,
}

/// The state of a copy: inside a wanted value.
struct Copy {
    kind: u8,
    depth: usize,
    in_string: bool,
    escaped: bool,
    scalar: bool,
    at: Place,
}

/// What the walk is inside of, outside the structure it tracks.
#[derive(Default)]
struct Scan {
    /// A wanted value being copied.
    copy: Option<Copy>,
    /// A string being read: a member name (`true`) or a skipped value; whether the last byte
    /// was a backslash.
    string: Option<(bool, bool)>,
    /// A skipped container.
    skip: Option<Skip>,
    /// A skipped scalar.
    scalar: bool,
}

/// A container the walk skips: its depth and where it is in its strings.
struct Skip {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Default for Skip {
    fn default() -> Skip {
        Skip {
            depth: 1,
            in_string: false,
            escaped: false,
        }
    }
}

impl Skip {
    /// Takes one byte; whether the container ended with it.
    fn byte(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

impl Walk<'_> {
    fn place(&self) -> Place {
        Place {
            line: self.line,
            column: self.column,
        }
    }

    fn stop(&self, problem: impl Into<String>) -> Stopped {
        Stopped {
            problem: problem.into(),
            at: self.place(),
            truncated: false,
        }
    }

    /// The wanted kind of a value starting here, if any.
    fn wanted_here(&self) -> Option<u8> {
        'next: for wanted in self.wanted {
            if wanted.path.len() != self.frames.len() {
                continue;
            }
            for (step, frame) in wanted.path.iter().zip(&self.frames) {
                let fits = match step {
                    Step::Each => frame.array,
                    Step::Key(names) => {
                        !frame.array && names.iter().any(|n| n.as_bytes() == frame.key.as_slice())
                    }
                };
                if !fits {
                    continue 'next;
                }
            }
            return Some(wanted.kind);
        }
        None
    }

    /// Whether a wanted path goes through a value starting here (so it is walked, not skipped).
    fn leads_somewhere(&self) -> bool {
        self.wanted.iter().any(|wanted| {
            wanted.path.len() > self.frames.len()
                && wanted
                    .path
                    .iter()
                    .zip(&self.frames)
                    .all(|(step, frame)| match step {
                        Step::Each => frame.array,
                        Step::Key(names) => {
                            !frame.array
                                && names.iter().any(|n| n.as_bytes() == frame.key.as_slice())
                        }
                    })
        })
    }

    fn run(
        mut self,
        reader: &mut dyn Read,
        handle: &mut dyn FnMut(Found<'_>) -> Result<(), String>,
    ) -> Result<(), Stopped> {
        let mut chunk = vec![0u8; 1 << 20];
        let mut scan = Scan::default();
        let mut first = true;
        loop {
            let n = reader
                .read(&mut chunk)
                .map_err(|err| self.stop(format!("reading failed: {err}")))?;
            if n == 0 {
                break;
            }
            let mut bytes = &chunk[..n];
            if first && bytes.starts_with(&[0xef, 0xbb, 0xbf]) {
                bytes = &bytes[3..];
            }
            first = false;
            let mut i = 0;
            while i < bytes.len() {
                if scan.copy.is_some() {
                    i = self.copy(bytes, i, &mut scan, handle)?;
                } else {
                    self.walk(bytes[i], &mut scan)?;
                    i += 1;
                }
            }
        }
        self.end(scan, handle)
    }

    /// Copies a wanted value's bytes from `i` until it ends (then hands it on) or the chunk
    /// does; returns where the walk goes on.
    fn copy(
        &mut self,
        bytes: &[u8],
        mut i: usize,
        scan: &mut Scan,
        handle: &mut dyn FnMut(Found<'_>) -> Result<(), String>,
    ) -> Result<usize, Stopped> {
        let state = scan.copy.as_mut().expect("copying");
        let start = i;
        let mut ended = false;
        while i < bytes.len() {
            let b = bytes[i];
            if state.scalar && (matches!(b, b',' | b']' | b'}') || b.is_ascii_whitespace()) {
                // The delimiter belongs to the structure: left for the walk.
                ended = true;
                break;
            }
            self.count(b);
            i += 1;
            if state.in_string {
                if state.escaped {
                    state.escaped = false;
                } else if b == b'\\' {
                    state.escaped = true;
                } else if b == b'"' {
                    state.in_string = false;
                    ended = state.depth == 0;
                }
            } else if !state.scalar {
                match b {
                    b'"' => state.in_string = true,
                    b'{' | b'[' => state.depth += 1,
                    b'}' | b']' => {
                        state.depth -= 1;
                        ended = state.depth == 0;
                    }
                    _ => {}
                }
            }
            if ended {
                break;
            }
        }
        self.value.extend_from_slice(&bytes[start..i]);
        if ended {
            let state = scan.copy.take().expect("copying");
            self.hand_on(&state, handle)?;
            self.value.clear();
            self.after_value();
        }
        Ok(i)
    }

    fn hand_on(
        &self,
        state: &Copy,
        handle: &mut dyn FnMut(Found<'_>) -> Result<(), String>,
    ) -> Result<(), Stopped> {
        handle(Found {
            kind: state.kind,
            indices: &self.indices,
            bytes: &self.value,
            at: state.at,
        })
        .map_err(|problem| Stopped {
            problem,
            at: state.at,
            truncated: false,
        })
    }

    /// Counts a byte into the line and column.
    fn count(&mut self, b: u8) {
        if b == b'\n' {
            self.line += 1;
            self.column = 0;
        } else {
            self.column += 1;
        }
    }

    /// One byte outside a wanted value: a skipped value's, a string's, or the structure's.
    fn walk(&mut self, b: u8, scan: &mut Scan) -> Result<(), Stopped> {
        self.count(b);
        if let Some(skip) = &mut scan.skip {
            if skip.byte(b) {
                scan.skip = None;
                self.after_value();
            }
            return Ok(());
        }
        if let Some((is_key, escaped)) = &mut scan.string {
            if *escaped {
                *escaped = false;
            } else if b == b'\\' {
                *escaped = true;
            } else if b == b'"' {
                let is_key = *is_key;
                scan.string = None;
                if !is_key {
                    self.after_value();
                }
                return Ok(());
            }
            if *is_key && let Some(frame) = self.frames.last_mut() {
                frame.key.push(b);
            }
            return Ok(());
        }
        if scan.scalar {
            if !(matches!(b, b',' | b']' | b'}') || b.is_ascii_whitespace()) {
                return Ok(());
            }
            scan.scalar = false;
            self.after_value();
        }
        if b.is_ascii_whitespace() {
            return Ok(());
        }
        self.structure(b, scan)
    }

    /// A structural byte, or the first of a value.
    fn structure(&mut self, b: u8, scan: &mut Scan) -> Result<(), Stopped> {
        let expecting_key = self.frames.last().is_some_and(|f| !f.array && f.expect_key);
        match b {
            b'"' if expecting_key => {
                let frame = self.frames.last_mut().expect("an object");
                frame.key.clear();
                frame.expect_key = false;
                scan.string = Some((true, false));
            }
            b':' if self.frames.last().is_some_and(|f| !f.array) => {}
            b',' => match self.frames.last_mut() {
                Some(frame) if frame.array => {}
                Some(frame) => frame.expect_key = true,
                None => return Err(self.stop("not JSON: a comma outside any value")),
            },
            b'}' | b']' => match self.frames.pop() {
                Some(frame) if frame.array == (b == b']') => {
                    if frame.array {
                        self.indices.pop();
                    }
                    self.after_value();
                }
                _ => {
                    return Err(self.stop(format!(
                        "not JSON: a `{}` that closes nothing open",
                        b as char
                    )));
                }
            },
            _ if expecting_key => {
                return Err(self.stop(format!(
                    "not JSON: `{}` where a member name was expected",
                    b as char
                )));
            }
            _ => self.value_starts(b, scan),
        }
        Ok(())
    }

    /// A value starts with `b`: copied when wanted, walked into when a wanted path goes
    /// through it, skipped otherwise.
    fn value_starts(&mut self, b: u8, scan: &mut Scan) {
        if self.frames.is_empty() {
            *self.indices.first_mut().expect("the root") = self.roots;
            self.roots += 1;
        }
        if let Some(kind) = self.wanted_here() {
            self.value.clear();
            self.value.push(b);
            let container = matches!(b, b'{' | b'[');
            scan.copy = Some(Copy {
                kind,
                depth: usize::from(container),
                in_string: b == b'"',
                escaped: false,
                scalar: !container && b != b'"',
                at: self.place(),
            });
            return;
        }
        match b {
            b'{' | b'[' if self.leads_somewhere() => {
                let array = b == b'[';
                if array {
                    self.indices.push(0);
                }
                self.frames.push(Frame {
                    array,
                    key: Vec::new(),
                    index: 0,
                    expect_key: !array,
                });
            }
            b'{' | b'[' => scan.skip = Some(Skip::default()),
            b'"' => scan.string = Some((false, false)),
            _ => scan.scalar = true,
        }
    }

    /// The end of the file: a value still open means the file was cut.
    fn end(
        mut self,
        mut scan: Scan,
        handle: &mut dyn FnMut(Found<'_>) -> Result<(), String>,
    ) -> Result<(), Stopped> {
        let open_copy = scan.copy.as_ref().is_some_and(|c| !c.scalar);
        if open_copy || !self.frames.is_empty() || scan.skip.is_some() || scan.string.is_some() {
            return Err(Stopped {
                problem: "the file ends inside a JSON value".to_owned(),
                at: self.place(),
                truncated: true,
            });
        }
        if let Some(state) = scan.copy.take() {
            self.hand_on(&state, handle)?;
            self.value.clear();
        }
        Ok(())
    }

    /// A value ended: the enclosing array's next element gets the next index.
    fn after_value(&mut self) {
        if let Some(frame) = self.frames.last_mut()
            && frame.array
        {
            frame.index += 1;
            if let Some(last) = self.indices.last_mut() {
                *last = frame.index;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value found: its kind, indices, text and line.
    type Cut = (u8, Vec<usize>, String, u64);

    fn cut(text: &str, wanted: &[Wanted]) -> Result<Vec<Cut>, Stopped> {
        let mut found = Vec::new();
        split(&mut text.as_bytes(), wanted, &mut |f| {
            found.push((
                f.kind,
                f.indices.to_vec(),
                String::from_utf8_lossy(f.bytes).into_owned(),
                f.at.line,
            ));
            Ok(())
        })?;
        Ok(found)
    }

    const ENTRIES: &[Step] = &[Step::Key(&["log"]), Step::Key(&["entries"]), Step::Each];
    const VERSION: &[Step] = &[Step::Key(&["log"]), Step::Key(&["version"])];

    #[test]
    fn the_values_at_a_path_come_whole_with_their_indices_and_lines() {
        let text = "{\"log\": {\"version\": \"1.2\", \"pages\": [{\"x\": \"]}\"}],\n \"entries\": [{\"a\": [1, {\"b\": \"}\\\"\"}]}, 7, \"s\"]}}";
        let found = cut(
            text,
            &[
                Wanted {
                    path: VERSION,
                    kind: 1,
                },
                Wanted {
                    path: ENTRIES,
                    kind: 2,
                },
            ],
        )
        .unwrap();
        let shown: Vec<(u8, String)> = found.iter().map(|(k, _, s, _)| (*k, s.clone())).collect();
        assert_eq!(
            shown,
            [
                (1, "\"1.2\"".to_owned()),
                (2, r#"{"a": [1, {"b": "}\""}]}"#.to_owned()),
                (2, "7".to_owned()),
                (2, "\"s\"".to_owned()),
            ]
        );
        assert_eq!(found[1].1, [0, 0]);
        assert_eq!(found[3].1, [0, 2]);
        assert_eq!(found[1].3, 2);
    }

    #[test]
    fn one_root_value_per_line_is_each_a_value_of_the_empty_path() {
        let found = cut(
            "{\"a\": 1}\n{\"b\": [2]}\n",
            &[Wanted { path: &[], kind: 0 }],
        )
        .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].1, [1]);
        assert_eq!(found[1].2, "{\"b\": [2]}");
    }

    #[test]
    fn a_cut_file_and_a_stray_bracket_are_refused_where_they_are() {
        let cut_off = cut(
            "{\"log\": {\"entries\": [{\"a\": 1}, {\"b\"",
            &[Wanted {
                path: ENTRIES,
                kind: 0,
            }],
        );
        assert!(cut_off.is_err_and(|s| s.truncated));
        let stray = cut(
            "{\"log\": {\"entries\": [1]]}}",
            &[Wanted {
                path: ENTRIES,
                kind: 0,
            }],
        );
        let stopped = stray.unwrap_err();
        assert!(!stopped.truncated);
        assert!(
            stopped.problem.contains("closes nothing"),
            "{}",
            stopped.problem
        );
    }
}
