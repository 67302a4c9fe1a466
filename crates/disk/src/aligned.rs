//! Heap buffers aligned to 4096 bytes, as O_DIRECT requires.
//!
//! Buffers of [`HUGE_PAGE_BYTES`] or more are aligned to it and asked to be backed by transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`, which the kernel's default `madvise` mode honours): an O_DIRECT read into one pins
//! a 2 MiB page per 512 small ones, and the checks and copies over it miss the TLB less. Without huge pages
//! (another mode, or none free) the buffer is the same, backed by small pages.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

const ALIGN: usize = crate::BLOCK_BYTES;
/// Size (and alignment) of a transparent huge page on x86-64 and aarch64 (4 KiB base pages).
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The layout of a buffer of `len` bytes.
fn layout(len: usize) -> Layout {
    let align = if len >= HUGE_PAGE_BYTES {
        HUGE_PAGE_BYTES
    } else {
        ALIGN
    };
    Layout::from_size_align(len, align).expect("buffer layout")
}

/// A zero-initialised byte buffer whose start is 4096-byte aligned.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>: moving it to another thread moves the
// only pointer to the bytes.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references give only `&[u8]` (Deref); writing needs `&mut AlignedBuf`, as for a Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf {
                ptr: NonNull::dangling(),
                len: 0,
            };
        }
        let layout = layout(len);
        if layout.align() < HUGE_PAGE_BYTES {
            // SAFETY: layout has non-zero size.
            let raw = unsafe { alloc_zeroed(layout) };
            let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
            return AlignedBuf { ptr, len };
        }
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        #[cfg(target_os = "linux")]
        {
            // Whole huge pages inside the buffer (its start is aligned); advice only, its failure changes nothing.
            let advised = len / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
            // SAFETY: the range lies inside the allocation just made; MADV_HUGEPAGE does not change its contents.
            unsafe {
                libc::madvise(ptr.as_ptr().cast(), advised, libc::MADV_HUGEPAGE);
            }
        }
        // Zeroed after the advice, so the first touch faults in huge pages.
        // SAFETY: ptr is valid for len bytes, which alloc left uninitialised.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        AlignedBuf { ptr, len }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }

    /// True when `bytes` starts at a 4096-byte boundary.
    pub fn is_aligned(bytes: &[u8]) -> bool {
        (bytes.as_ptr() as usize).is_multiple_of(ALIGN)
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in zeroed() with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout(self.len)) };
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        AlignedBuf::copy_from(self)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_and_aligned_whatever_their_size() {
        for len in [
            1,
            4096,
            HUGE_PAGE_BYTES - 4096,
            HUGE_PAGE_BYTES,
            10 << 20,
            (8 << 20) + 4096,
        ] {
            let mut buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&b| b == 0), "{len} bytes zeroed");
            assert!(AlignedBuf::is_aligned(&buf));
            if len >= HUGE_PAGE_BYTES {
                assert_eq!(buf.as_ptr() as usize % HUGE_PAGE_BYTES, 0, "{len} bytes");
            }
            buf[len - 1] = 7;
            let copy = buf.clone();
            assert_eq!(copy[len - 1], 7);
        }
    }
}
