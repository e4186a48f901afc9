//! `Draw`: the one source of choices of every generator, a stream of bytes read front to back.
//!
//! Proptest feeds it a vector of bytes, the fuzz target feeds it libFuzzer's input, so both drive
//! one generator. A byte past the end reads as 0, and choice 0 is always the simplest one, so a
//! shorter or smaller input gives a simpler case: proptest's shrinking of the bytes shrinks the case.

/// A stream of choices read from bytes.
#[derive(Clone, Debug)]
pub struct Draw<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Draw<'a> {
    pub fn new(bytes: &'a [u8]) -> Draw<'a> {
        Draw { bytes, at: 0 }
    }

    /// The next byte, or 0 past the end.
    pub fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        b
    }

    /// A number in `0..n` (0 when `n` ≤ 1): one byte for `n` ≤ 256, two above.
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => self.byte() as usize % n,
            _ => (usize::from(self.byte()) << 8 | usize::from(self.byte())) % n,
        }
    }

    /// A number in `lo..=hi` (`lo` when `hi` ≤ `lo`).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `k/256` (never past the end).
    pub(crate) fn chance(&mut self, k: u8) -> bool {
        self.byte() >= 255 - k.saturating_sub(1) && k > 0
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }

    /// A 64-bit number from the next eight bytes.
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |x, _| x << 8 | u64::from(self.byte()))
    }
}

/// The 256 bytes case `index` of the measurement examples is drawn from (`gen_run`,
/// `stage_costs`): both examples, and the figures docs/PERFORMANCE.md gives for them, see the same
/// cases.
pub fn measured_case_bytes(index: u64) -> Vec<u8> {
    seeded_bytes(index.wrapping_mul(GOLDEN) ^ 0xD1B5_4A32_D192_ED03, 256)
}

/// `len` pseudo-random bytes of the SplitMix64 stream that starts at `seed`: the inputs that
/// deterministic sweeps and benchmarks draw their cases from.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|k| splitmix(seed.wrapping_add(k.wrapping_mul(GOLDEN))) as u8).collect()
}

/// The increment of SplitMix64: 2⁶⁴ over the golden ratio.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One output of SplitMix64 at state `z` (advanced by one increment first).
pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::Draw;

    #[test]
    fn past_the_end_every_choice_is_the_first() {
        let mut d = Draw::new(&[]);
        assert_eq!((d.byte(), d.below(7), d.range(3, 9), d.chance(200), d.u64()), (0, 0, 3, false, 0));
    }

    #[test]
    fn choices_stay_in_range() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut d = Draw::new(&bytes);
        for n in [1, 2, 3, 255, 256, 257, 1000] {
            assert!(d.below(n) < n.max(1));
        }
        assert!((4..=6).contains(&d.range(4, 6)));
        assert_eq!(d.range(5, 5), 5);
    }

    #[test]
    fn chance_is_k_in_256() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut d = Draw::new(&bytes);
        let hits = (0..256).filter(|_| d.chance(64)).count();
        assert_eq!(hits, 64);
    }
}
