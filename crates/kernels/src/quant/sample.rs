//! Sample blocks for tests and benches: random bytes (so every code occurs) with sane f16
//! scales, from a seed, with no random-number crate in the library.

use super::GgmlType;

/// `n` random blocks of `ty`, the same for the same seed: every byte random except the f16
/// scale (and min) fields, which hold values in ±0.05 (random bits there would make infinities
/// and NaNs no file has).
pub fn sample_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let (_, bytes) = ty.block();
    let mut state = seed;
    let mut data: Vec<u8> = (0..n * bytes)
        .map(|_| splitmix64(&mut state) as u8)
        .collect();
    for blk in data.chunks_exact_mut(bytes) {
        for &at in ty.f16_fields() {
            // A uniform value in [-0.05, 0.05) from the top 24 bits.
            let u = (splitmix64(&mut state) >> 40) as f32 / (1u32 << 24) as f32;
            let d = half::f16::from_f32((u - 0.5) * 0.1);
            blk[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    data
}

/// SplitMix64: one 64-bit output a call.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
