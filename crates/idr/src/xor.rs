//! XOR over byte buffers: the whole of single parity check, and the engine's grid parity.
//!
//! Dispatch happens at run time: AVX-512 when the CPU has `avx512f`, else AVX2, else a
//! portable loop over `u64` words (which LLVM turns into SSE2 on x86-64). All variants
//! give identical results; `benches/idr.rs` measures them side by side (see docs/idr.md).

/// `target ^= source`, byte by byte.
///
/// # Panics
/// If the lengths differ (a caller bug).
pub fn xor_into(target: &mut [u8], source: &[u8]) {
    assert_eq!(
        target.len(),
        source.len(),
        "xor_into: buffers of different length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { x86::xor_into_avx512(target, source) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { x86::xor_into_avx2(target, source) };
        }
    }
    xor_into_portable(target, source)
}

/// `target = sources[0] ^ sources[1] ^ …` in one pass (each source read once, `target`
/// written once). With no sources, `target` becomes zeros.
///
/// # Panics
/// If any source's length differs from `target`'s (a caller bug).
pub fn xor_all_into(target: &mut [u8], sources: &[&[u8]]) {
    for source in sources {
        assert_eq!(
            source.len(),
            target.len(),
            "xor_all_into: buffers of different length"
        );
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { x86::xor_all_into_avx512(target, sources) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { x86::xor_all_into_avx2(target, sources) };
        }
    }
    xor_all_into_portable(target, sources)
}

/// True when `bytes` is all zeros.
pub(crate) fn is_zero(bytes: &[u8]) -> bool {
    let (head, words, tail) = {
        // SAFETY: every bit pattern is a valid u64.
        unsafe { bytes.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

/// Portable `target ^= source` over 8-byte words.
#[doc(hidden)]
pub fn xor_into_portable(target: &mut [u8], source: &[u8]) {
    assert_eq!(target.len(), source.len());
    let mut target_words = target.chunks_exact_mut(8);
    let mut source_words = source.chunks_exact(8);
    for (t, s) in (&mut target_words).zip(&mut source_words) {
        let x =
            u64::from_ne_bytes(t.try_into().unwrap()) ^ u64::from_ne_bytes(s.try_into().unwrap());
        t.copy_from_slice(&x.to_ne_bytes());
    }
    for (t, s) in target_words
        .into_remainder()
        .iter_mut()
        .zip(source_words.remainder())
    {
        *t ^= *s;
    }
}

/// Portable one-pass XOR of all sources into `target`.
#[doc(hidden)]
pub fn xor_all_into_portable(target: &mut [u8], sources: &[&[u8]]) {
    match sources.split_first() {
        None => target.fill(0),
        Some((first, rest)) => {
            target.copy_from_slice(first);
            for source in rest {
                xor_into_portable(target, source);
            }
        }
    }
}

/// The plain byte loop compiled with AVX-512 enabled: what LLVM's auto-vectoriser makes of
/// it. Kept only so the benchmark can compare it with the hand-written intrinsics.
///
/// # Safety
/// The CPU must support AVX-512F.
#[doc(hidden)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn xor_into_autovec_avx512(target: &mut [u8], source: &[u8]) {
    for (t, s) in target.iter_mut().zip(source) {
        *t ^= *s;
    }
}

/// The explicit variants, exposed for the benchmark and the equivalence tests.
#[doc(hidden)]
#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512F; lengths must be equal.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn xor_into_avx512(target: &mut [u8], source: &[u8]) {
        debug_assert_eq!(target.len(), source.len());
        let len = target.len();
        let t = target.as_mut_ptr();
        let s = source.as_ptr();
        let mut i = 0;
        // 256 bytes per iteration: four independent load-xor-store chains.
        while i + 256 <= len {
            for lane in 0..4 {
                let at = i + lane * 64;
                // SAFETY: at + 64 <= len, and both buffers hold len bytes (the caller's contract); unaligned
                // loads and stores need no alignment; `target` is borrowed mutably, so nothing else sees it.
                unsafe {
                    let a = _mm512_loadu_si512(t.add(at).cast());
                    let b = _mm512_loadu_si512(s.add(at).cast());
                    _mm512_storeu_si512(t.add(at).cast(), _mm512_xor_si512(a, b));
                }
            }
            i += 256;
        }
        while i + 64 <= len {
            // SAFETY: i + 64 <= len, and both buffers hold len bytes (the caller's contract).
            unsafe {
                let a = _mm512_loadu_si512(t.add(i).cast());
                let b = _mm512_loadu_si512(s.add(i).cast());
                _mm512_storeu_si512(t.add(i).cast(), _mm512_xor_si512(a, b));
            }
            i += 64;
        }
        super::xor_into_portable(&mut target[i..], &source[i..]);
    }

    /// # Safety
    /// The CPU must support AVX2; lengths must be equal.
    #[target_feature(enable = "avx2")]
    pub unsafe fn xor_into_avx2(target: &mut [u8], source: &[u8]) {
        debug_assert_eq!(target.len(), source.len());
        let len = target.len();
        let t = target.as_mut_ptr();
        let s = source.as_ptr();
        let mut i = 0;
        while i + 128 <= len {
            for lane in 0..4 {
                let at = i + lane * 32;
                // SAFETY: at + 32 <= len, and both buffers hold len bytes (the caller's contract); unaligned
                // loads and stores need no alignment; `target` is borrowed mutably, so nothing else sees it.
                unsafe {
                    let a = _mm256_loadu_si256(t.add(at).cast());
                    let b = _mm256_loadu_si256(s.add(at).cast());
                    _mm256_storeu_si256(t.add(at).cast(), _mm256_xor_si256(a, b));
                }
            }
            i += 128;
        }
        while i + 32 <= len {
            // SAFETY: i + 32 <= len, and both buffers hold len bytes (the caller's contract).
            unsafe {
                let a = _mm256_loadu_si256(t.add(i).cast());
                let b = _mm256_loadu_si256(s.add(i).cast());
                _mm256_storeu_si256(t.add(i).cast(), _mm256_xor_si256(a, b));
            }
            i += 32;
        }
        super::xor_into_portable(&mut target[i..], &source[i..]);
    }

    /// # Safety
    /// The CPU must support AVX-512F; every source as long as `target`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn xor_all_into_avx512(target: &mut [u8], sources: &[&[u8]]) {
        let Some((first, rest)) = sources.split_first() else {
            target.fill(0);
            return;
        };
        let len = target.len();
        let t = target.as_mut_ptr();
        let mut i = 0;
        while i + 256 <= len {
            // SAFETY: i + 256 <= len and every source holds len bytes (the caller's contract), so the four
            // 64-byte lanes at i lie inside `first`, each source and `target`; the loads and stores are unaligned.
            unsafe {
                let f = first.as_ptr().add(i);
                let mut acc = [
                    _mm512_loadu_si512(f.cast()),
                    _mm512_loadu_si512(f.add(64).cast()),
                    _mm512_loadu_si512(f.add(128).cast()),
                    _mm512_loadu_si512(f.add(192).cast()),
                ];
                for source in rest {
                    let p = source.as_ptr().add(i);
                    for (lane, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_xor_si512(*a, _mm512_loadu_si512(p.add(lane * 64).cast()));
                    }
                }
                for (lane, a) in acc.iter().enumerate() {
                    _mm512_storeu_si512(t.add(i + lane * 64).cast(), *a);
                }
            }
            i += 256;
        }
        if i < len {
            target[i..].copy_from_slice(&first[i..]);
            for source in rest {
                super::xor_into_portable(&mut target[i..], &source[i..]);
            }
        }
    }

    /// # Safety
    /// The CPU must support AVX2; every source as long as `target`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn xor_all_into_avx2(target: &mut [u8], sources: &[&[u8]]) {
        let Some((first, rest)) = sources.split_first() else {
            target.fill(0);
            return;
        };
        let len = target.len();
        let t = target.as_mut_ptr();
        let mut i = 0;
        while i + 128 <= len {
            // SAFETY: i + 128 <= len and every source holds len bytes (the caller's contract), so the four
            // 32-byte lanes at i lie inside `first`, each source and `target`; the loads and stores are unaligned.
            unsafe {
                let f = first.as_ptr().add(i);
                let mut acc = [
                    _mm256_loadu_si256(f.cast()),
                    _mm256_loadu_si256(f.add(32).cast()),
                    _mm256_loadu_si256(f.add(64).cast()),
                    _mm256_loadu_si256(f.add(96).cast()),
                ];
                for source in rest {
                    let p = source.as_ptr().add(i);
                    for (lane, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_xor_si256(*a, _mm256_loadu_si256(p.add(lane * 32).cast()));
                    }
                }
                for (lane, a) in acc.iter().enumerate() {
                    _mm256_storeu_si256(t.add(i + lane * 32).cast(), *a);
                }
            }
            i += 128;
        }
        if i < len {
            target[i..].copy_from_slice(&first[i..]);
            for source in rest {
                super::xor_into_portable(&mut target[i..], &source[i..]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn reference_xor(a: &[u8], b: &[u8]) -> Vec<u8> {
        a.iter().zip(b).map(|(x, y)| x ^ y).collect()
    }

    #[test]
    fn every_xor_variant_matches_the_byte_loop_at_every_length() {
        for len in [
            0, 1, 7, 8, 31, 33, 63, 64, 65, 127, 129, 255, 256, 257, 1000, 4096, 4099,
        ] {
            let a = bytes(len, 1);
            let b = bytes(len, 77);
            let expected = reference_xor(&a, &b);

            let mut t = a.clone();
            xor_into(&mut t, &b);
            assert_eq!(t, expected, "dispatch, len {len}");

            let mut t = a.clone();
            xor_into_portable(&mut t, &b);
            assert_eq!(t, expected, "portable, len {len}");

            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut t = a.clone();
                    // SAFETY: the CPU has AVX2 (checked above); t and b have the same length.
                    unsafe { x86::xor_into_avx2(&mut t, &b) };
                    assert_eq!(t, expected, "avx2, len {len}");
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    let mut t = a.clone();
                    // SAFETY: the CPU has AVX-512F (checked above); t and b have the same length.
                    unsafe { x86::xor_into_avx512(&mut t, &b) };
                    assert_eq!(t, expected, "avx512, len {len}");
                    let mut t = a.clone();
                    // SAFETY: the CPU has AVX-512F (checked above).
                    unsafe { xor_into_autovec_avx512(&mut t, &b) };
                    assert_eq!(t, expected, "autovec, len {len}");
                }
            }
        }
    }

    #[test]
    fn xor_all_into_equals_folded_xor_for_any_source_count() {
        for len in [0, 5, 64, 300, 4096] {
            for count in 0..5 {
                let sources: Vec<Vec<u8>> =
                    (0..count).map(|i| bytes(len, i as u8 * 13 + 3)).collect();
                let refs: Vec<&[u8]> = sources.iter().map(|s| s.as_slice()).collect();
                let mut expected = vec![0u8; len];
                for s in &sources {
                    expected = reference_xor(&expected, s);
                }
                let mut t = vec![0xAA; len];
                xor_all_into(&mut t, &refs);
                assert_eq!(t, expected, "dispatch len {len} count {count}");
                let mut t = vec![0xAA; len];
                xor_all_into_portable(&mut t, &refs);
                assert_eq!(t, expected, "portable len {len} count {count}");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut t = vec![0xAA; len];
                    // SAFETY: the CPU has AVX2 (checked above); every source is len bytes long, as t is.
                    unsafe { x86::xor_all_into_avx2(&mut t, &refs) };
                    assert_eq!(t, expected, "avx2 len {len} count {count}");
                }
            }
        }
    }

    #[test]
    fn is_zero_sees_a_single_set_bit_anywhere() {
        let mut buf = vec![0u8; 4099];
        assert!(is_zero(&buf));
        assert!(is_zero(&buf[1..]));
        for at in [0, 1, 8, 4095, 4098] {
            buf[at] = 1;
            assert!(!is_zero(&buf), "bit at {at}");
            buf[at] = 0;
        }
    }
}
