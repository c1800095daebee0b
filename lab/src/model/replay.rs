//! A path of the model, done by the real system: real runners (`lab::runner::Runner`, each on its
//! own thread with its own SQLite file) and a real `lab serve` ([`TicketServer`] on its SQLite
//! file), stepped one action at a time. Every step is checked both ways: the real system must be
//! able to take it (a runner must be waiting to send when the model sends, must have finished
//! when the model's runner has), and what it did must be what the model's step did (the key and
//! payload sent, the service's answer, the tickets, each runner's row at the end). The first
//! disagreement is a [`Mismatch`] naming the step. At the end the contract's properties are
//! evaluated on what the real system holds ([`Replayed::broken`]).
//!
//! The harness is the network: a runner's tool is a [`Wire`] that hands each request to the
//! replay and blocks until the path says what happens to it. A delivery is a real HTTP create on
//! `lab serve`; a lost request is never sent; a lost reply is a timeout error given to the
//! runner after the real create committed; a duplicate is the same create sent twice; a runner
//! crash unwinds the runner's thread mid-call (its memory is gone, its file is what it
//! committed), and its restart opens the file again and resumes; a service crash stops the
//! server and its restart opens the same database; a prune is a real pruning pass.
//!
//! The anti-patterns are real code too: fresh-key and memory-key are wires that mint keys as
//! those client libraries would, held-after-send a wire that counts every send as refused when
//! it goes out, early-prune the admin endpoint's delete without a tombstone. Check-then-write
//! and raw-payload are mistakes of the service, which `lab serve` does not make; their paths
//! replay against the simulator's stores of those mistakes, with the same harness.

mod harness;
mod service;
mod wire;

pub use harness::{Mismatch, Replayed, replay, replay_with};
pub use service::Served;
