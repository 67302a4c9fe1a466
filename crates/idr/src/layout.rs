//! The physical stripe: scrambling and the check block. Byte-by-byte in docs/idr.md.
//!
//! ```text
//! stripe = [check A][s·(n+k) scrambled blocks][check B]      (2 + s·(n+k) blocks of 4 KiB)
//! block j (0 ≤ j < n+k, data then parity) of iPG g (0 ≤ g < s) at position 1 + j·s + g
//! ```

use permafrost_disk::BLOCK_BYTES;

/// Magic at the start of every check block.
pub(crate) const CHECK_MAGIC: [u8; 8] = *b"PFIDRCHK";
/// Version of the stripe layout and check block format written by this code.
pub const LAYOUT_VERSION: u16 = 1;
/// Byte offset of the crc table inside a check block.
const TABLE_OFFSET: usize = 32;
/// Byte offset of the check block's own crc32c (over bytes `[0, CRC_OFFSET)`).
const CRC_OFFSET: usize = BLOCK_BYTES - 4;
/// Most scrambled blocks one check block can describe (one crc32c each).
pub(crate) const MAX_SCRAMBLED_BLOCKS: usize = (CRC_OFFSET - TABLE_OFFSET) / 4;

/// Shape of one stripe: `s` iPGs of `n + k` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Data blocks per iPG.
    pub n: usize,
    /// Parity blocks per iPG.
    pub k: usize,
    /// Scramble groups: iPGs per stripe.
    pub s: usize,
    /// Codec id written to the check block.
    pub codec_id: u8,
}

impl Geometry {
    /// Blocks per iPG.
    pub fn width(&self) -> usize {
        self.n + self.k
    }
    /// Scrambled (data + parity) blocks per stripe.
    pub fn scrambled_blocks(&self) -> usize {
        self.s * self.width()
    }
    /// Physical blocks per stripe, check blocks included.
    pub fn physical_blocks(&self) -> usize {
        self.scrambled_blocks() + 2
    }
    /// Logical (data) blocks per stripe.
    pub fn logical_blocks(&self) -> usize {
        self.s * self.n
    }
    /// Physical position (within the stripe) of block `j` of iPG `g`.
    pub fn position(&self, ipg: usize, j: usize) -> usize {
        debug_assert!(ipg < self.s && j < self.width());
        1 + j * self.s + ipg
    }
    /// Physical position of logical block `b` of the stripe (iPG `b / n` holds logical
    /// blocks `[g·n, g·n + n)`, so an iPG is 64 KiB of contiguous logical data for n = 16).
    pub fn logical_position(&self, block: usize) -> usize {
        self.position(block / self.n, block % self.n)
    }
    /// `(iPG, j)` of a scrambled physical position; `None` for the two check blocks.
    pub fn ipg_of(&self, position: usize) -> Option<(usize, usize)> {
        if position == 0 || position > self.scrambled_blocks() {
            return None;
        }
        let p = position - 1;
        Some((p % self.s, p / self.s))
    }
    /// Position of check block B.
    pub fn check_b(&self) -> usize {
        self.physical_blocks() - 1
    }
}

/// What a check block slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckState {
    /// The disk reported an I/O error for it.
    Unreadable,
    /// All zeros: never written.
    Zero,
    /// Not a valid check block (bad magic or bad crc).
    Corrupt,
    /// A valid check block that belongs elsewhere (another stripe index or another layout):
    /// a misdirected write.
    Foreign(String),
    /// Valid and ours.
    Valid,
}

/// Fill `out` (one block) with the check block of stripe `stripe_index` whose table is `crcs`
/// (one crc32c per scrambled block, in physical order).
pub(crate) fn build_check_block(
    geometry: &Geometry,
    stripe_index: u64,
    crcs: &[u32],
    out: &mut [u8],
) {
    assert_eq!(out.len(), BLOCK_BYTES);
    assert_eq!(crcs.len(), geometry.scrambled_blocks());
    out.fill(0);
    out[0..8].copy_from_slice(&CHECK_MAGIC);
    out[8..10].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
    out[10] = geometry.codec_id;
    out[11] = geometry.n as u8;
    out[12] = geometry.k as u8;
    out[16..20].copy_from_slice(&(geometry.s as u32).to_le_bytes());
    out[24..32].copy_from_slice(&stripe_index.to_le_bytes());
    for (i, crc) in crcs.iter().enumerate() {
        let at = TABLE_OFFSET + 4 * i;
        out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let own = crc_fast::crc32_iscsi(&out[..CRC_OFFSET]);
    out[CRC_OFFSET..].copy_from_slice(&own.to_le_bytes());
}

/// Classify a check block read from the disk for stripe `stripe_index`.
pub(crate) fn parse_check_block(
    geometry: &Geometry,
    stripe_index: u64,
    block: &[u8],
) -> CheckState {
    assert_eq!(block.len(), BLOCK_BYTES);
    if crate::xor::is_zero(block) {
        return CheckState::Zero;
    }
    let stored = u32::from_le_bytes(block[CRC_OFFSET..].try_into().unwrap());
    if block[0..8] != CHECK_MAGIC || crc_fast::crc32_iscsi(&block[..CRC_OFFSET]) != stored {
        return CheckState::Corrupt;
    }
    let version = u16::from_le_bytes([block[8], block[9]]);
    if version != LAYOUT_VERSION {
        return CheckState::Foreign(format!(
            "layout version {version}, this code reads {LAYOUT_VERSION}"
        ));
    }
    let s = u32::from_le_bytes(block[16..20].try_into().unwrap()) as usize;
    if (block[10], block[11] as usize, block[12] as usize, s)
        != (geometry.codec_id, geometry.n, geometry.k, geometry.s)
    {
        return CheckState::Foreign(format!(
            "written with codec {} ({}+{}) and s = {s}, expected codec {} ({}+{}) and s = {}",
            block[10], block[11], block[12], geometry.codec_id, geometry.n, geometry.k, geometry.s
        ));
    }
    let index = u64::from_le_bytes(block[24..32].try_into().unwrap());
    if index != stripe_index {
        return CheckState::Foreign(format!(
            "check block of stripe {index} found at stripe {stripe_index}"
        ));
    }
    CheckState::Valid
}

/// Entry `i` of a valid check block's crc table.
pub(crate) fn table_crc(block: &[u8], i: usize) -> u32 {
    let at = TABLE_OFFSET + 4 * i;
    u32::from_le_bytes(block[at..at + 4].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(s: usize, n: usize, k: usize) -> Geometry {
        Geometry {
            n,
            k,
            s,
            codec_id: 1,
        }
    }

    #[test]
    fn any_run_of_s_adjacent_blocks_hits_each_ipg_at_most_once() {
        for (s, n, k) in [(16, 16, 1), (16, 16, 2), (3, 2, 1), (1, 16, 1), (10, 16, 1)] {
            let g = geometry(s, n, k);
            // Two stripes back to back: positions 0..2P (stripe = pos / P).
            let p = g.physical_blocks();
            for start in 0..2 * p - s {
                let mut seen = std::collections::HashSet::new();
                for pos in start..start + s {
                    if let Some((ipg, _)) = g.ipg_of(pos % p) {
                        assert!(
                            seen.insert((pos / p, ipg)),
                            "s={s}: run at {start} hits iPG {ipg} twice"
                        );
                    }
                }
                // And a burst of s never covers both check blocks of one stripe.
                let checks: Vec<usize> = (start..start + s)
                    .filter(|pos| g.ipg_of(pos % p).is_none())
                    .collect();
                for pair in checks.windows(2) {
                    assert_ne!(
                        pair[0] / p,
                        pair[1] / p,
                        "s={s}: run at {start} covers both check blocks"
                    );
                }
            }
        }
    }

    #[test]
    fn positions_are_a_bijection_onto_the_scrambled_area() {
        let g = geometry(16, 16, 2);
        let mut hit = vec![false; g.physical_blocks()];
        for ipg in 0..16 {
            for j in 0..18 {
                let pos = g.position(ipg, j);
                assert!(!hit[pos]);
                hit[pos] = true;
                assert_eq!(g.ipg_of(pos), Some((ipg, j)));
            }
        }
        assert!(!hit[0] && !hit[g.check_b()]);
        assert!(hit[1..g.check_b()].iter().all(|&h| h));
        assert_eq!(g.physical_blocks(), 2 + 16 * 18);
        assert_eq!(geometry(16, 16, 1).physical_blocks(), 274);
    }

    #[test]
    fn check_block_roundtrips_and_rejects_damage_and_misplacement() {
        let g = geometry(16, 16, 1);
        let crcs: Vec<u32> = (0..g.scrambled_blocks() as u32)
            .map(|i| i.wrapping_mul(2654435761))
            .collect();
        let mut block = vec![0u8; BLOCK_BYTES];
        assert_eq!(parse_check_block(&g, 7, &block), CheckState::Zero);
        build_check_block(&g, 7, &crcs, &mut block);
        assert_eq!(parse_check_block(&g, 7, &block), CheckState::Valid);
        for (i, crc) in crcs.iter().enumerate() {
            assert_eq!(table_crc(&block, i), *crc);
        }
        assert!(matches!(
            parse_check_block(&g, 8, &block),
            CheckState::Foreign(_)
        ));
        assert!(matches!(
            parse_check_block(&geometry(16, 16, 2), 7, &block),
            CheckState::Foreign(_)
        ));
        block[100] ^= 1;
        assert_eq!(parse_check_block(&g, 7, &block), CheckState::Corrupt);
    }

    #[test]
    fn largest_scramble_fits_in_one_check_block() {
        assert_eq!(MAX_SCRAMBLED_BLOCKS, 1015);
        let g = geometry(59, 16, 1);
        assert!(g.scrambled_blocks() <= MAX_SCRAMBLED_BLOCKS);
        let crcs = vec![0xFFFF_FFFF; g.scrambled_blocks()];
        let mut block = vec![0u8; BLOCK_BYTES];
        build_check_block(&g, u64::MAX, &crcs, &mut block);
        assert_eq!(parse_check_block(&g, u64::MAX, &block), CheckState::Valid);
    }
}
