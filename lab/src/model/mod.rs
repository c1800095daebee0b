//! Every interleaving to a bound: the durable runner and the keyed ticket service as a
//! [Stateright](https://docs.rs/stateright) model, explored breadth-first (feature `model`).
//!
//! The simulator samples histories; this explores all of them within stated bounds: runners that
//! save their key, send, time out, retry, crash and resume; a network that loses, duplicates and
//! reorders messages; a service that crashes, restarts on the same database and prunes records
//! into tombstones. The contract's rules are properties of every reachable state, and a broken
//! one comes back as a shortest path, printed as the simulator prints a history.
//!
//! ```
//! use lab::model::{Bounds, Variant, check};
//!
//! let small = Bounds { callers: 1, sends: 2, losses: 1, duplicates: 0, crashes: 1, prunes: 0 };
//! assert!(check(small, Variant::Design)?.holds());
//!
//! let found = check(small, Variant::FreshKey)?.counterexample.expect("a duplicate");
//! assert_eq!(Some(found.property), Variant::FreshKey.breaks());
//! # Ok::<(), lab::Error>(())
//! ```
//!
//! The service's step is tied to the real service by [`TRANSITIONS`]: the model's step answers
//! every row of the table (a unit test), and so does `lab serve` on its SQLite store (a test in
//! `lab/tests/it/model.rs`). The runner's steps are tied to the real runner by replays
//! ([`replay`], with the `http` feature): a path of the model done by real runners and a real
//! `lab serve`, each step compared with the model's.
//!
//! The checker explores one representative of each class of states the protocol cannot tell
//! apart ([`Reduced`]), on one thread, so every run of the same bounds prints the same figures.

mod bounds;
mod check;
mod protocol;
mod reduce;
#[cfg(feature = "http")]
pub mod replay;
mod service;
mod timeline;

pub use bounds::{Bounds, Variant};
pub use check::{Counterexample, Report, check, check_within};
pub use protocol::{
    Action, FINAL_ANSWER, Ghost, INTENTS, Intent, Left, Lookup, Message, ONE_EFFECT,
    ORIGINAL_EFFECT, OWN_PAYLOAD, Process, Protocol, REJECTED_CHANGES_NOTHING, Row, RowState,
    Runner, State, UNKNOWN_IS_NOT_NOTHING, tag,
};
pub use reduce::Reduced;
pub use service::{
    Answer, Before, Compare, Expect, FIRST, Key, Record, Request, ScopeId, Sent, Store,
    TRANSITIONS, Text, Ticket, Transition,
};
pub use timeline::{Lane, Mark, Moment, violation};
