//! Randomized tests' numbers: a xorshift64 stream (Marsaglia, "Xorshift RNGs", 2003),
//! the same sequence for a seed on every run and machine.

/// The xorshift64 stream from `seed` (nonzero).
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
