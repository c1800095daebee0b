//! What the model explores: how many callers, sends and faults, and which design.

use std::fmt;

/// The design the model checks: the lab's, or one mistake on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The lab's runner and service: the key saved before the first send, lookup and write in
    /// one transaction, tombstones for pruned records, "held" only when nothing could have acted.
    Design,
    /// A new key on every attempt.
    FreshKey,
    /// Look the key up, then write in a second step, with no unique constraint between them.
    CheckThenWrite,
    /// Records pruned while retries are still within the promised retention, leaving nothing
    /// behind.
    EarlyPrune,
    /// The runner saves the operation but keeps its key in memory only; a restart makes another.
    MemoryKey,
    /// Payloads compared as the text received, so the same fields in another order conflict.
    RawPayload,
    /// The runner reports "held" (nothing took effect) whenever the service is unreachable at the
    /// start of a run, even after an earlier send that the service committed.
    HeldAfterSend,
}

impl Variant {
    /// Every variant, the design first.
    pub const ALL: [Variant; 7] = [
        Variant::Design,
        Variant::FreshKey,
        Variant::CheckThenWrite,
        Variant::EarlyPrune,
        Variant::MemoryKey,
        Variant::RawPayload,
        Variant::HeldAfterSend,
    ];

    /// The anti-patterns only.
    pub const ANTI_PATTERNS: [Variant; 6] = [
        Variant::FreshKey,
        Variant::CheckThenWrite,
        Variant::EarlyPrune,
        Variant::MemoryKey,
        Variant::RawPayload,
        Variant::HeldAfterSend,
    ];

    /// The name on the command line; the five the simulator also has keep its names.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Design => "design",
            Variant::FreshKey => "fresh-key",
            Variant::CheckThenWrite => "check-then-write",
            Variant::EarlyPrune => "early-prune",
            Variant::MemoryKey => "memory-key",
            Variant::RawPayload => "raw-payload",
            Variant::HeldAfterSend => "held-after-send",
        }
    }

    /// The variant with this name.
    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// One line on what the variant does.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Design => {
                "the lab's design: key saved first, one transaction, tombstones, honest verdicts"
            }
            Variant::FreshKey => "a new key on every attempt",
            Variant::CheckThenWrite => "look the key up, then write in a second step",
            Variant::EarlyPrune => "records pruned inside the promised retention, no tombstone",
            Variant::MemoryKey => "the key kept in the runner's memory only",
            Variant::RawPayload => "payloads compared as received text",
            Variant::HeldAfterSend => {
                "the runner says held when the service is down, even after a send it committed"
            }
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The bounds of one exploration. Every interleaving of the callers' and the service's steps
/// within them is explored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Runner processes, one intent each (1 to 3): `c1/i1`; `c1/i2`, which reuses `c1/i1`'s key
    /// with another payload; `c2/i1`, the same key name in another scope.
    pub callers: u8,
    /// Sends per run of an operation: the runner's retry budget (1 to 4).
    pub sends: u8,
    /// Requests the network may lose, in all (a lost reply is a runner's timeout, which is
    /// always possible while it waits).
    pub losses: u8,
    /// Requests the network may deliver twice, in all.
    pub duplicates: u8,
    /// Crashes, of any caller or of the service, in all.
    pub crashes: u8,
    /// Records the retention job may prune, in all.
    pub prunes: u8,
}

impl Bounds {
    /// The bounds `lab model` uses by default, and CI with it: every anti-pattern breaks a
    /// property within them, and the design's full search takes under a minute on a small
    /// machine in a debug build. A duplicated request multiplies the states several times over,
    /// so it is left to the deeper run.
    pub const DEFAULT: Bounds = Bounds {
        callers: 2,
        sends: 2,
        losses: 1,
        duplicates: 0,
        crashes: 2,
        prunes: 1,
    };

    /// The deeper run the book names as a command: the third caller, and a duplicated request.
    pub const DEEPER: Bounds = Bounds {
        callers: 3,
        duplicates: 1,
        ..Bounds::DEFAULT
    };

    /// The bounds the book names, with a name each: the default, each of the two additions of
    /// the deeper run alone, and the deeper run. `cargo xtask model-depth` measures each.
    pub const NAMED: [(&'static str, Bounds); 4] = [
        ("default", Bounds::DEFAULT),
        (
            "a duplicate",
            Bounds {
                duplicates: 1,
                ..Bounds::DEFAULT
            },
        ),
        (
            "a third caller",
            Bounds {
                callers: 3,
                ..Bounds::DEFAULT
            },
        ),
        ("deeper", Bounds::DEEPER),
    ];

    /// The most callers the model has intents for.
    pub const MAX_CALLERS: u8 = 3;

    /// The largest retry budget.
    pub const MAX_SENDS: u8 = 4;

    /// The largest count of each fault.
    pub const MAX_FAULTS: u8 = 4;

    /// The bounds as the command line would give them.
    pub fn arguments(&self) -> String {
        format!(
            "--callers {} --sends {} --losses {} --duplicates {} --crashes {} --prunes {}",
            self.callers, self.sends, self.losses, self.duplicates, self.crashes, self.prunes
        )
    }

    /// Why these bounds cannot be explored, if they cannot: the option at fault and its value.
    pub fn problem(&self) -> Option<String> {
        let out_of = |name: &str, value: u8, low: u8, high: u8| {
            (value < low || value > high)
                .then(|| format!("--{name} {value}: expected {low} to {high}"))
        };
        out_of("callers", self.callers, 1, Bounds::MAX_CALLERS)
            .or_else(|| out_of("sends", self.sends, 1, Bounds::MAX_SENDS))
            .or_else(|| out_of("losses", self.losses, 0, Bounds::MAX_FAULTS))
            .or_else(|| out_of("duplicates", self.duplicates, 0, Bounds::MAX_FAULTS))
            .or_else(|| out_of("crashes", self.crashes, 0, Bounds::MAX_FAULTS))
            .or_else(|| out_of("prunes", self.prunes, 0, Bounds::MAX_FAULTS))
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_out_of_range_are_refused_naming_the_option() {
        assert_eq!(Bounds::DEFAULT.problem(), None);
        assert_eq!(Bounds::DEEPER.problem(), None);
        let refused = Bounds {
            callers: Bounds::MAX_CALLERS + 1,
            ..Bounds::DEFAULT
        };
        assert!(refused.problem().unwrap().starts_with("--callers"));
        let refused = Bounds {
            sends: 0,
            ..Bounds::DEFAULT
        };
        assert!(refused.problem().unwrap().starts_with("--sends"));
    }

    #[test]
    fn every_variant_is_found_by_its_name() {
        for variant in Variant::ALL {
            assert_eq!(Variant::from_name(variant.name()), Some(variant));
            assert_eq!(variant.breaks().is_none(), variant == Variant::Design);
        }
        assert_eq!(Variant::from_name("correct"), None);
    }
}
