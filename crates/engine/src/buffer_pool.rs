//! Byte buffers handed back for reuse within one bounded piece of work: one recovery chunk, one degraded read,
//! one write promise. Every fresh chunk-sized buffer costs page faults and the kernel's clearing of its pages
//! (a third of a rebuild's CPU time, and a third of a persist step's before its write buffers were reused).
//!
//! **Invariants.** A pool holds only buffers given back and frees them when dropped, so it never holds more than
//! the most its work had in use at once. The contents of a taken buffer are unspecified: every user overwrites
//! each byte it reads.

use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A buffer of `len` bytes (contents unspecified).
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.free.lock().pop().unwrap_or_default();
        buf.resize(len, 0);
        buf
    }

    /// An empty buffer with room for at least `capacity` bytes.
    pub(crate) fn take_empty(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self.take(0);
        buf.reserve(capacity);
        buf
    }

    /// Hand `buf` back for the next `take` (a buffer that never allocated is dropped).
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > 0 {
            self.free.lock().push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_at_the_asked_length() {
        let pool = BufferPool::default();
        let buf = pool.take(1 << 20);
        assert_eq!(buf.len(), 1 << 20);
        let ptr = buf.as_ptr();
        pool.give(buf);
        let again = pool.take(4096);
        assert_eq!((again.len(), again.as_ptr()), (4096, ptr));
        pool.give(again);
        let empty = pool.take_empty(2 << 20);
        assert!(empty.is_empty() && empty.capacity() >= 2 << 20);
        pool.give(Vec::new());
        assert_eq!(
            pool.free.lock().len(),
            0,
            "an unallocated buffer is not kept"
        );
    }
}
