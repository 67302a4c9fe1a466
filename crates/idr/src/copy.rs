//! Copying verified blocks out of a stripe image into the caller's buffer, with streaming stores where the CPU
//! has them: the target (a reader's chunk, megabytes long, read next by another thread) is not read first and
//! does not evict the stripe image being checked.

/// `target.copy_from_slice(source)`; with AVX-512 and `target` 64-byte aligned and a multiple of 64 long, by
/// non-temporal stores. The caller calls [`copies_done`] before it hands `target` to another thread.
///
/// # Panics
/// If the lengths differ (a caller bug).
pub(crate) fn copy_block(target: &mut [u8], source: &[u8]) {
    assert_eq!(
        target.len(),
        source.len(),
        "copy_block: buffers of different length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if (target.as_ptr() as usize) % 64 == 0
            && target.len() % 64 == 0
            && std::arch::is_x86_feature_detected!("avx512f")
        {
            // SAFETY: the CPU supports AVX-512F (checked just above); target is 64-byte aligned and both hold the
            // same multiple of 64 bytes.
            return unsafe { x86::copy_streaming_avx512(target, source) };
        }
    }
    target.copy_from_slice(source)
}

/// Order the streaming stores of [`copy_block`] before whatever the thread does next (a hand-over to another
/// thread): `sfence`.
pub(crate) fn copies_done() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions (SSE, part of x86-64).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512F; `target` 64-byte aligned; lengths equal and a multiple of 64.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn copy_streaming_avx512(target: &mut [u8], source: &[u8]) {
        let t = target.as_mut_ptr();
        let s = source.as_ptr();
        let mut i = 0;
        while i < target.len() {
            // SAFETY: i + 64 <= len for both buffers (the caller's contract); the load needs no alignment, the
            // streaming store's 64-byte alignment holds as target is aligned and i a multiple of 64.
            unsafe {
                let v = _mm512_loadu_si512(s.add(i).cast());
                _mm512_stream_si512(t.add(i).cast(), v);
            }
            i += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_exact_whatever_the_alignment_and_touch_nothing_else() {
        let source: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut space = vec![0xA5u8; 8192 + 256];
        let base = space.as_ptr().align_offset(64);
        for shift in [0, 1, 16, 32, 63, 64] {
            for len in [0, 64, 4032, 4096, 8192, 100] {
                space.fill(0xA5);
                let at = base + shift;
                copy_block(&mut space[at..at + len], &source[..len]);
                copies_done();
                assert_eq!(
                    &space[at..at + len],
                    &source[..len],
                    "shift {shift}, {len} bytes"
                );
                assert!(
                    space[..at].iter().all(|&b| b == 0xA5),
                    "before, shift {shift}"
                );
                assert!(
                    space[at + len..].iter().all(|&b| b == 0xA5),
                    "after, shift {shift}"
                );
            }
        }
    }
}
