//! Erasure codes over equal-sized blocks (4 KiB in the IDR layout).
//!
//! A codec turns `n` data blocks into `k` parity blocks and, given the indices of up to
//! `k` missing blocks (an *erasure*: the caller knows which ones are bad), rebuilds them.
//! Shards are always ordered data first, then parity.

use std::cell::RefCell;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::xor::xor_all_into;

/// Why a codec could not rebuild the missing shards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// More shards are missing than the code has parity blocks.
    #[error("{codec}: {missing} blocks missing, the code rebuilds at most {max}")]
    TooManyMissing {
        codec: String,
        missing: usize,
        max: usize,
    },
    /// The shards do not fit the code (count, size, or an index out of range).
    #[error("{codec}: {message}")]
    BadShards { codec: String, message: String },
}

/// An erasure code over blocks: `data_blocks()` data + `parity_blocks()` parity.
///
/// Implementations are stateless from the caller's view and safe to share between threads.
pub trait Codec: Send + Sync {
    /// Human-readable name, e.g. `spc-16+1`.
    fn name(&self) -> &str;
    /// `n`: data blocks per group.
    fn data_blocks(&self) -> usize;
    /// `k`: parity blocks per group (= how many erasures it repairs).
    fn parity_blocks(&self) -> usize;

    /// Compute the parity of `data` into `parity`.
    ///
    /// # Panics
    /// If the shard counts differ from `data_blocks()`/`parity_blocks()` or the shards are
    /// not all of one non-zero, even length (caller bugs).
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]);

    /// Rebuild the shards listed in `missing` (indices into `shards`, data then parity) from
    /// the others, in place. The other shards are not changed.
    fn reconstruct(&self, shards: &mut [&mut [u8]], missing: &[usize]) -> Result<(), CodecError>;

    /// True when the parity shards equal the encoding of the data shards (check on read).
    /// `shards` is data then parity. The default encodes into scratch space and compares.
    fn verify(&self, shards: &[&[u8]]) -> bool {
        let n = self.data_blocks();
        assert_eq!(
            shards.len(),
            n + self.parity_blocks(),
            "{}: wrong shard count",
            self.name()
        );
        let len = shards[0].len();
        let mut scratch = vec![vec![0u8; len]; self.parity_blocks()];
        let mut parity: Vec<&mut [u8]> = scratch.iter_mut().map(|p| p.as_mut_slice()).collect();
        self.encode(&shards[..n], &mut parity);
        parity
            .iter()
            .zip(&shards[n..])
            .all(|(computed, stored)| **computed == **stored)
    }
}

/// Validate the shape of a reconstruct call: count, equal non-zero length, indices.
fn check_reconstruct_shape(
    codec: &dyn Codec,
    shards: &[&mut [u8]],
    missing: &[usize],
) -> Result<(), CodecError> {
    let bad = |message: String| {
        Err(CodecError::BadShards {
            codec: codec.name().to_string(),
            message,
        })
    };
    let count = codec.data_blocks() + codec.parity_blocks();
    if shards.len() != count {
        return bad(format!("expected {count} shards, got {}", shards.len()));
    }
    let len = shards[0].len();
    if len == 0 || len % 2 != 0 || shards.iter().any(|s| s.len() != len) {
        return bad("shards must all have one non-zero, even length".to_string());
    }
    for (i, &index) in missing.iter().enumerate() {
        if index >= count {
            return bad(format!(
                "missing shard index {index} out of range (have {count} shards)"
            ));
        }
        if missing[..i].contains(&index) {
            return bad(format!("missing shard index {index} listed twice"));
        }
    }
    if missing.len() > codec.parity_blocks() {
        return Err(CodecError::TooManyMissing {
            codec: codec.name().to_string(),
            missing: missing.len(),
            max: codec.parity_blocks(),
        });
    }
    Ok(())
}

fn assert_encode_shape(codec: &dyn Codec, data: &[&[u8]], parity: &[&mut [u8]]) {
    assert_eq!(
        data.len(),
        codec.data_blocks(),
        "{}: wrong data shard count",
        codec.name()
    );
    assert_eq!(
        parity.len(),
        codec.parity_blocks(),
        "{}: wrong parity shard count",
        codec.name()
    );
    let len = data[0].len();
    assert!(
        len > 0 && len % 2 == 0,
        "{}: shard length {len} must be non-zero and even",
        codec.name()
    );
    assert!(
        data.iter().all(|d| d.len() == len) && parity.iter().all(|p| p.len() == len),
        "{}: shards of different length",
        codec.name()
    );
}

/// Single parity check: `n` data blocks + 1 XOR parity block. Repairs one erasure per group.
#[derive(Debug, Clone)]
pub struct Spc {
    data_blocks: usize,
    name: String,
}

impl Spc {
    /// SPC over `data_blocks` data blocks (`data_blocks >= 1`).
    pub fn new(data_blocks: usize) -> Spc {
        assert!(data_blocks >= 1, "SPC needs at least one data block");
        Spc {
            data_blocks,
            name: format!("spc-{data_blocks}+1"),
        }
    }
}

impl Default for Spc {
    /// SPC 16+1, the thesis's choice.
    fn default() -> Spc {
        Spc::new(16)
    }
}

impl Codec for Spc {
    fn name(&self) -> &str {
        &self.name
    }
    fn data_blocks(&self) -> usize {
        self.data_blocks
    }
    fn parity_blocks(&self) -> usize {
        1
    }
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        assert_encode_shape(self, data, parity);
        xor_all_into(parity[0], data);
    }
    fn reconstruct(&self, shards: &mut [&mut [u8]], missing: &[usize]) -> Result<(), CodecError> {
        check_reconstruct_shape(self, shards, missing)?;
        let Some(&lost) = missing.first() else {
            return Ok(());
        };
        // The lost shard is the XOR of all the others (data and parity alike).
        let (before, rest) = shards.split_at_mut(lost);
        let (target, after) = rest.split_first_mut().expect("index checked");
        let others: Vec<&[u8]> = before.iter().chain(after.iter()).map(|s| &**s).collect();
        xor_all_into(target, &others);
        Ok(())
    }
    fn verify(&self, shards: &[&[u8]]) -> bool {
        assert_eq!(
            shards.len(),
            self.data_blocks + 1,
            "{}: wrong shard count",
            self.name
        );
        // XOR of data and parity is zero exactly when the parity is right. Work in
        // 4 KiB pieces so the scratch stays in L1 whatever the shard size.
        const PIECE_BYTES: usize = 4096;
        let len = shards[0].len();
        let mut scratch = [0u8; PIECE_BYTES];
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(shards.len());
        let mut at = 0;
        while at < len {
            let end = (at + PIECE_BYTES).min(len);
            pieces.clear();
            pieces.extend(shards.iter().map(|s| &s[at..end]));
            let acc = &mut scratch[..end - at];
            xor_all_into(acc, &pieces);
            if !crate::xor::is_zero(acc) {
                return false;
            }
            at = end;
        }
        true
    }
}

/// Reed–Solomon `n + k` from the crate `reed-solomon-simd` (an FFT-based code over
/// GF(2^16); SSSE3/AVX2/NEON chosen at run time). Repairs any `k` erasures per group.
///
/// The parity bytes are defined by that crate's encoding: it is part of the on-disk
/// format (codec id 2 in docs/idr.md).
#[derive(Debug, Clone)]
pub struct ReedSolomon {
    data_blocks: usize,
    parity_blocks: usize,
    name: String,
}

impl ReedSolomon {
    /// RS over `data_blocks` + `parity_blocks`; an error if the library does not support it.
    pub fn new(data_blocks: usize, parity_blocks: usize) -> Result<ReedSolomon, CodecError> {
        let name = format!("rs-{data_blocks}+{parity_blocks}");
        if data_blocks == 0
            || parity_blocks == 0
            || !ReedSolomonEncoder::supports(data_blocks, parity_blocks)
        {
            return Err(CodecError::BadShards {
                codec: name,
                message: "unsupported shard counts".to_string(),
            });
        }
        Ok(ReedSolomon {
            data_blocks,
            parity_blocks,
            name,
        })
    }
}

impl Default for ReedSolomon {
    /// RS 16+2.
    fn default() -> ReedSolomon {
        ReedSolomon::new(16, 2).expect("16+2 is supported")
    }
}

thread_local! {
    // The library's encoder/decoder own working space; one per thread is reused across calls.
    static RS_ENCODER: RefCell<Option<ReedSolomonEncoder>> = const { RefCell::new(None) };
    static RS_DECODER: RefCell<Option<ReedSolomonDecoder>> = const { RefCell::new(None) };
}

impl ReedSolomon {
    /// Encode `data`, then hand each recovery shard (index, bytes) to `sink`.
    fn with_recovery(&self, data: &[&[u8]], mut sink: impl FnMut(usize, &[u8])) {
        let (n, k, len) = (self.data_blocks, self.parity_blocks, data[0].len());
        RS_ENCODER.with(|cell| {
            let mut slot = cell.borrow_mut();
            match slot.as_mut() {
                Some(encoder) => encoder.reset(n, k, len).expect("shape checked"),
                None => *slot = Some(ReedSolomonEncoder::new(n, k, len).expect("shape checked")),
            }
            let encoder = slot.as_mut().expect("just set");
            for shard in data {
                encoder.add_original_shard(shard).expect("shape checked");
            }
            let result = encoder.encode().expect("all original shards added");
            for (index, recovery) in result.recovery_iter().enumerate() {
                sink(index, recovery);
            }
        });
    }
}

impl Codec for ReedSolomon {
    fn name(&self) -> &str {
        &self.name
    }
    fn data_blocks(&self) -> usize {
        self.data_blocks
    }
    fn parity_blocks(&self) -> usize {
        self.parity_blocks
    }
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        assert_encode_shape(self, data, parity);
        self.with_recovery(data, |index, recovery| {
            parity[index].copy_from_slice(recovery)
        });
    }
    fn reconstruct(&self, shards: &mut [&mut [u8]], missing: &[usize]) -> Result<(), CodecError> {
        check_reconstruct_shape(self, shards, missing)?;
        let (n, k, len) = (self.data_blocks, self.parity_blocks, shards[0].len());
        if missing.iter().any(|&i| i < n) {
            RS_DECODER.with(|cell| {
                let mut slot = cell.borrow_mut();
                match slot.as_mut() {
                    Some(decoder) => decoder.reset(n, k, len).expect("shape checked"),
                    None => {
                        *slot = Some(ReedSolomonDecoder::new(n, k, len).expect("shape checked"))
                    }
                }
                let decoder = slot.as_mut().expect("just set");
                for (index, shard) in shards.iter().enumerate() {
                    if missing.contains(&index) {
                        continue;
                    }
                    if index < n {
                        decoder
                            .add_original_shard(index, &**shard)
                            .expect("shape checked");
                    } else {
                        decoder
                            .add_recovery_shard(index - n, &**shard)
                            .expect("shape checked");
                    }
                }
                let result = decoder.decode().map_err(|e| CodecError::BadShards {
                    codec: self.name.clone(),
                    message: format!("decode failed: {e}"),
                })?;
                for &index in missing.iter().filter(|&&i| i < n) {
                    let restored = result
                        .restored_original(index)
                        .expect("missing original is restored");
                    shards[index].copy_from_slice(restored);
                }
                Ok::<(), CodecError>(())
            })?;
        }
        if missing.iter().any(|&i| i >= n) {
            let (data, parity) = shards.split_at_mut(n);
            let data: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
            self.with_recovery(&data, |index, recovery| {
                if missing.contains(&(n + index)) {
                    parity[index].copy_from_slice(recovery);
                }
            });
        }
        Ok(())
    }
    fn verify(&self, shards: &[&[u8]]) -> bool {
        let n = self.data_blocks;
        assert_eq!(
            shards.len(),
            n + self.parity_blocks,
            "{}: wrong shard count",
            self.name
        );
        let mut equal = true;
        self.with_recovery(&shards[..n], |index, recovery| {
            equal &= shards[n + index] == recovery
        });
        equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: usize = 4096;

    fn shards_for(codec: &dyn Codec, seed: u64) -> Vec<Vec<u8>> {
        let n = codec.data_blocks();
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut shards: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                (0..LEN)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (state >> 56) as u8
                    })
                    .collect()
            })
            .collect();
        let mut parity = vec![vec![0u8; LEN]; codec.parity_blocks()];
        {
            let data: Vec<&[u8]> = shards.iter().map(|s| s.as_slice()).collect();
            let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|s| s.as_mut_slice()).collect();
            codec.encode(&data, &mut p);
        }
        shards.extend(parity);
        shards
    }

    fn erase_and_rebuild(
        codec: &dyn Codec,
        original: &[Vec<u8>],
        missing: &[usize],
    ) -> Result<Vec<Vec<u8>>, CodecError> {
        let mut damaged = original.to_vec();
        for &m in missing {
            damaged[m].fill(0x5A);
        }
        let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(|s| s.as_mut_slice()).collect();
        codec.reconstruct(&mut refs, missing)?;
        Ok(damaged)
    }

    #[test]
    fn spc_rebuilds_any_single_missing_shard() {
        let codec = Spc::default();
        let original = shards_for(&codec, 1);
        let refs: Vec<&[u8]> = original.iter().map(|s| s.as_slice()).collect();
        assert!(codec.verify(&refs));
        for lost in 0..17 {
            assert_eq!(
                erase_and_rebuild(&codec, &original, &[lost]).unwrap(),
                original,
                "lost {lost}"
            );
        }
    }

    #[test]
    fn spc_refuses_two_missing_shards() {
        let codec = Spc::default();
        let original = shards_for(&codec, 2);
        let err = erase_and_rebuild(&codec, &original, &[0, 16]).unwrap_err();
        assert_eq!(
            err,
            CodecError::TooManyMissing {
                codec: "spc-16+1".into(),
                missing: 2,
                max: 1
            }
        );
    }

    #[test]
    fn verify_detects_one_flipped_bit_in_any_shard() {
        let codecs: [Box<dyn Codec>; 2] =
            [Box::new(Spc::default()), Box::new(ReedSolomon::default())];
        for codec in &codecs {
            let mut shards = shards_for(codec.as_ref(), 3);
            for i in 0..shards.len() {
                shards[i][100 + i] ^= 0x10;
                let refs: Vec<&[u8]> = shards.iter().map(|s| s.as_slice()).collect();
                assert!(!codec.verify(&refs), "{} flip in shard {i}", codec.name());
                shards[i][100 + i] ^= 0x10;
            }
            let refs: Vec<&[u8]> = shards.iter().map(|s| s.as_slice()).collect();
            assert!(codec.verify(&refs));
            // The trait's default verify agrees with the specialised one.
            struct Plain<'a>(&'a dyn Codec);
            impl Codec for Plain<'_> {
                fn name(&self) -> &str {
                    self.0.name()
                }
                fn data_blocks(&self) -> usize {
                    self.0.data_blocks()
                }
                fn parity_blocks(&self) -> usize {
                    self.0.parity_blocks()
                }
                fn encode(&self, d: &[&[u8]], p: &mut [&mut [u8]]) {
                    self.0.encode(d, p)
                }
                fn reconstruct(&self, s: &mut [&mut [u8]], m: &[usize]) -> Result<(), CodecError> {
                    self.0.reconstruct(s, m)
                }
            }
            assert!(Plain(codec.as_ref()).verify(&refs));
        }
    }

    #[test]
    fn rs_16_2_rebuilds_every_pair_of_missing_shards() {
        let codec = ReedSolomon::default();
        let original = shards_for(&codec, 4);
        for a in 0..18 {
            assert_eq!(
                erase_and_rebuild(&codec, &original, &[a]).unwrap(),
                original,
                "lost {a}"
            );
            for b in a + 1..18 {
                assert_eq!(
                    erase_and_rebuild(&codec, &original, &[b, a]).unwrap(),
                    original,
                    "lost {a},{b}"
                );
            }
        }
    }

    #[test]
    fn rs_16_2_refuses_three_missing_shards() {
        let codec = ReedSolomon::default();
        let original = shards_for(&codec, 5);
        let err = erase_and_rebuild(&codec, &original, &[0, 5, 17]).unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::TooManyMissing {
                    missing: 3,
                    max: 2,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn reconstruct_rejects_bad_indices_and_shapes() {
        let codec = Spc::default();
        let mut original = shards_for(&codec, 6);
        let mut refs: Vec<&mut [u8]> = original.iter_mut().map(|s| s.as_mut_slice()).collect();
        assert!(matches!(
            codec.reconstruct(&mut refs, &[17]),
            Err(CodecError::BadShards { .. })
        ));
        assert!(matches!(
            codec.reconstruct(&mut refs[..16], &[0]),
            Err(CodecError::BadShards { .. })
        ));
        let rs = ReedSolomon::default();
        assert!(matches!(
            rs.reconstruct(&mut refs, &[1, 1]),
            Err(CodecError::BadShards { .. })
        ));
    }
}
