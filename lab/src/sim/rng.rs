//! The simulator's only source of randomness: SplitMix64, seeded once per history.
//!
//! We write the ten lines ourselves rather than take `rand`'s `StdRng`: `rand` documents that
//! `StdRng`'s algorithm may change between releases, and a seed printed today must replay the same
//! history after any dependency upgrade. SplitMix64's output is fixed by its definition.

// ANCHOR: rng
/// A small, fast, seeded pseudo-random generator (SplitMix64). Same seed, same numbers, forever.
///
/// ```
/// use lab::sim::SplitMix64;
///
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole output is decided by `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    // ANCHOR_END: rng

    /// A number in `0..n`, or 0 when `n` is 0. Multiply-and-shift keeps the bias below one part
    /// in 2^32 for the small ranges the simulator uses.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `low..=high` (`low` when the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index into a slice of `len` items (`len` must not be 0 for the answer to be valid).
    pub fn index(&mut self, len: usize) -> usize {
        // usize fits in u64 on every platform Rust supports, and the result is below `len`.
        self.below(len as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_outputs_match_the_reference_implementation() {
        // The reference values for seed 1234567 that Rosetta Code's "Pseudo-random
        // numbers/Splitmix64" task lists.
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn below_stays_in_range_and_reaches_both_ends() {
        let mut rng = SplitMix64::new(3);
        let draws: Vec<u64> = (0..1000).map(|_| rng.below(4)).collect();
        assert!(draws.iter().all(|&d| d < 4));
        assert!(draws.contains(&0) && draws.contains(&3));
        assert_eq!(rng.below(0), 0);
    }
}
