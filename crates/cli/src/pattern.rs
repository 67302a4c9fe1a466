//! Deterministic test data: the bytes the soak workload writes at `(bucket, offset)` are a pure
//! function of the seed, so a test can check any committed chunk without having kept it.
//! (Shared with the integration tests through `#[path]`.)

use rand::{RngCore, SeedableRng};

/// `len` pseudo-random bytes for `(seed, bucket, offset)`.
pub fn pattern_bytes(seed: u64, bucket: usize, offset: u64, len: usize) -> Vec<u8> {
    let key = seed ^ (bucket as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ offset.rotate_left(17);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(key);
    let mut bytes = vec![0u8; len];
    rng.fill_bytes(&mut bytes);
    bytes
}

/// The seed of generation `generation` of a run seeded `seed`: the soak writer overwrites a full
/// region with the next generation, whose bytes differ from the previous one's everywhere.
#[allow(dead_code)] // the binary's soak and the crash test use it; other tests include this file too
pub fn generation_seed(seed: u64, generation: u64) -> u64 {
    seed ^ generation.wrapping_mul(0xA24B_AED4_963E_E407)
}
