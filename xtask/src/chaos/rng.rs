//! The seeded randomness of a chaos run: the simulator's SplitMix64 (one copy of it in the
//! workspace), so a seed names one fault schedule on every machine and Rust version.
//!
//! The generator's source file is compiled in here by path rather than depended on: xtask builds
//! first and depends on std (and nix) only.

#[allow(dead_code, unreachable_pub)]
#[path = "../../../crates/lessor-sim/src/rng.rs"]
mod splitmix;

pub(crate) use splitmix::Rng;

/// What a fault schedule draws, on top of the generator's own 64 bits.
impl Rng {
    /// A number in `low..=high` (`low` if the range is empty).
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// An index below `len` (0 for an empty range).
    pub(crate) fn index(&mut self, len: usize) -> usize {
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        usize::try_from(self.between(0, len.saturating_sub(1))).unwrap_or(0)
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance_percent(&mut self, percent: u64) -> bool {
        self.between(1, 100) <= percent
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_sequence_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.between(3, 9);
            assert!((3..=9).contains(&x));
            b.between(3, 9);
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut items: Vec<u32> = (0..20).collect();
        Rng::new(3).shuffle(&mut items);
        let mut sorted = items.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        assert_ne!(items, sorted);
    }

    /// A seed's schedule did not change when the chaos run took the simulator's generator:
    /// the draws and shuffle of seed 1 are the ones the chaos run's former copy made.
    #[test]
    fn seed_one_draws_what_it_always_drew() {
        let mut rng = Rng::new(1);
        let draws: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            draws,
            [
                0x910a_2dec_8902_5cc1,
                0xbeeb_8da1_658e_ec67,
                0xf893_a2ee_fb32_555e
            ]
        );
        let mut items: Vec<u32> = (0..8).collect();
        Rng::new(1).shuffle(&mut items);
        assert_eq!(items, SHUFFLED_BY_SEED_ONE);
    }

    const SHUFFLED_BY_SEED_ONE: [u32; 8] = [4, 3, 2, 7, 5, 6, 0, 1];
}
