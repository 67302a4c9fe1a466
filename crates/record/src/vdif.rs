//! VDIF frames (VLBI Data Interchange Format, version 1.0, vlbi.org): the 32-byte header (16 bytes in legacy
//! mode) of eight little-endian 32-bit words, and jive5ab's `udps` prefix (a 64-bit little-endian sequence
//! number before each frame in a datagram).
//!
//! | word | bits | field |
//! |---|---|---|
//! | 0 | 31 | invalid data (the sender marks the frame's samples unusable) |
//! | 0 | 30 | legacy mode (header of 4 words) |
//! | 0 | 29–0 | seconds since the reference epoch |
//! | 1 | 29–24 | reference epoch (half-years since 2000) |
//! | 1 | 23–0 | data frame number within the second |
//! | 2 | 31–29 | VDIF version |
//! | 2 | 28–24 | log2(number of channels) |
//! | 2 | 23–0 | frame length in units of 8 bytes, header included |
//! | 3 | 31 | complex data |
//! | 3 | 30–26 | bits per sample − 1 |
//! | 3 | 25–16 | thread id |
//! | 3 | 15–0 | station id |
//! | 4–7 | | extended user data (word 4, bits 31–24: its version) |

/// Bytes of a VDIF header (legacy headers have 16).
pub const HEADER_BYTES: usize = 32;
/// Bytes of a legacy VDIF header.
pub const LEGACY_HEADER_BYTES: usize = 16;
/// Bytes of jive5ab's `udps` sequence number before each frame.
pub const UDPS_PREFIX_BYTES: usize = 8;
/// Largest frame the recorder accepts (a jumbo Ethernet frame's payload).
pub const FRAME_BYTES_MAX: usize = 9000 - 28;
/// The usual frame: 32-byte header and 8,000 bytes of samples.
pub const FRAME_BYTES_TYPICAL: usize = 8032;

/// Why a datagram is not a VDIF frame the recorder takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated: {len} bytes is shorter than a VDIF header")]
    Truncated { len: usize },
    #[error("the header says the frame has {header_bytes} bytes but {len} arrived")]
    LengthMismatch { header_bytes: usize, len: usize },
    #[error("the header says the frame has {header_bytes} bytes, shorter than its own header")]
    ShorterThanHeader { header_bytes: usize },
    #[error("frame of {len} bytes where this scan's frames have {expected}")]
    WrongFrameSize { len: usize, expected: usize },
    #[error("datagram of {len} bytes is larger than the {max} bytes this scan receives (cut by the kernel)")]
    Oversize { len: usize, max: usize },
}

impl FrameError {
    /// A short name for counters (`truncated`, `length-mismatch`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::Truncated { .. } => "truncated",
            FrameError::LengthMismatch { .. } => "length-mismatch",
            FrameError::ShorterThanHeader { .. } => "shorter-than-header",
            FrameError::WrongFrameSize { .. } => "wrong-frame-size",
            FrameError::Oversize { .. } => "oversize",
        }
    }
}

/// The fields of a VDIF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub invalid: bool,
    pub legacy: bool,
    /// Seconds since the reference epoch (30 bits).
    pub seconds: u32,
    /// Reference epoch: half-years since 2000 (6 bits).
    pub ref_epoch: u8,
    /// Frame number within the second (24 bits).
    pub frame_number: u32,
    /// VDIF version (3 bits).
    pub version: u8,
    /// log2 of the number of channels (5 bits).
    pub log2_channels: u8,
    /// Frame length in units of 8 bytes, header included (24 bits).
    pub frame_len_8: u32,
    pub complex: bool,
    /// Bits per sample (1–32).
    pub bits_per_sample: u8,
    /// Thread id (10 bits).
    pub thread_id: u16,
    /// Station id (16 bits: two ASCII characters or a number).
    pub station_id: u16,
    /// Extended user data version (word 4, bits 31–24; 0 in legacy mode).
    pub edv: u8,
}

fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"))
}

impl Header {
    /// Parse a header from the start of `bytes`; checks only that the header is there.
    pub fn parse(bytes: &[u8]) -> Result<Header, FrameError> {
        if bytes.len() < LEGACY_HEADER_BYTES {
            return Err(FrameError::Truncated { len: bytes.len() });
        }
        let w0 = word(bytes, 0);
        let legacy = w0 & (1 << 30) != 0;
        if !legacy && bytes.len() < HEADER_BYTES {
            return Err(FrameError::Truncated { len: bytes.len() });
        }
        let (w1, w2, w3) = (word(bytes, 1), word(bytes, 2), word(bytes, 3));
        Ok(Header {
            invalid: w0 & (1 << 31) != 0,
            legacy,
            seconds: w0 & 0x3FFF_FFFF,
            ref_epoch: ((w1 >> 24) & 0x3F) as u8,
            frame_number: w1 & 0xFF_FFFF,
            version: (w2 >> 29) as u8,
            log2_channels: ((w2 >> 24) & 0x1F) as u8,
            frame_len_8: w2 & 0xFF_FFFF,
            complex: w3 & (1 << 31) != 0,
            bits_per_sample: (((w3 >> 26) & 0x1F) + 1) as u8,
            thread_id: ((w3 >> 16) & 0x3FF) as u16,
            station_id: (w3 & 0xFFFF) as u16,
            edv: if legacy {
                0
            } else {
                (word(bytes, 4) >> 24) as u8
            },
        })
    }

    /// Bytes of this header (16 or 32).
    pub fn header_bytes(&self) -> usize {
        if self.legacy {
            LEGACY_HEADER_BYTES
        } else {
            HEADER_BYTES
        }
    }

    /// Bytes of the whole frame, as the header says.
    pub fn frame_bytes(&self) -> usize {
        self.frame_len_8 as usize * 8
    }

    /// Write the header into the first [`Header::header_bytes`] of `out` (extended user data words zero but
    /// for the EDV byte).
    pub fn write(&self, out: &mut [u8]) {
        let w0 =
            (self.invalid as u32) << 31 | (self.legacy as u32) << 30 | (self.seconds & 0x3FFF_FFFF);
        let w1 = (self.ref_epoch as u32 & 0x3F) << 24 | (self.frame_number & 0xFF_FFFF);
        let w2 = (self.version as u32 & 0x7) << 29
            | (self.log2_channels as u32 & 0x1F) << 24
            | (self.frame_len_8 & 0xFF_FFFF);
        let w3 = (self.complex as u32) << 31
            | ((self.bits_per_sample.clamp(1, 32) as u32 - 1) & 0x1F) << 26
            | (self.thread_id as u32 & 0x3FF) << 16
            | self.station_id as u32;
        let mut words = vec![w0, w1, w2, w3];
        if !self.legacy {
            words.extend([(self.edv as u32) << 24, 0, 0, 0]);
        }
        for (i, w) in words.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// The station id as text: two ASCII letters when it is printable, else the number.
    pub fn station(&self) -> String {
        let [hi, lo] = self.station_id.to_be_bytes();
        if hi.is_ascii_graphic() && lo.is_ascii_graphic() {
            format!("{}{}", hi as char, lo as char)
        } else {
            self.station_id.to_string()
        }
    }
}

/// A station id from two ASCII characters (`"Ef"` → 0x4566).
pub fn station_id(name: &str) -> u16 {
    let b = name.as_bytes();
    match b {
        [hi, lo, ..] => u16::from_be_bytes([*hi, *lo]),
        [one] => *one as u16,
        [] => 0,
    }
}

/// Check that `frame` is one whole VDIF frame: a header whose frame length is the length received and covers
/// the header. Returns the header.
pub fn check_frame(frame: &[u8]) -> Result<Header, FrameError> {
    let header = Header::parse(frame)?;
    let header_bytes = header.frame_bytes();
    if header_bytes < header.header_bytes() {
        return Err(FrameError::ShorterThanHeader { header_bytes });
    }
    if header_bytes != frame.len() {
        return Err(FrameError::LengthMismatch {
            header_bytes,
            len: frame.len(),
        });
    }
    Ok(header)
}

/// The `udps` sequence number at the start of a datagram.
pub fn udps_sequence(datagram: &[u8]) -> Option<u64> {
    datagram
        .get(..UDPS_PREFIX_BYTES)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = Header> {
        (
            (
                any::<bool>(),
                any::<bool>(),
                0u32..1 << 30,
                0u8..64,
                0u32..1 << 24,
            ),
            (0u8..8, 0u8..32, 0u32..1 << 24, any::<bool>(), 1u8..=32),
            (0u16..1024, any::<u16>(), any::<u8>()),
        )
            .prop_map(
                |(
                    (invalid, legacy, seconds, ref_epoch, frame_number),
                    (version, log2_channels, frame_len_8, complex, bits_per_sample),
                    (thread_id, station_id, edv),
                )| Header {
                    invalid,
                    legacy,
                    seconds,
                    ref_epoch,
                    frame_number,
                    version,
                    log2_channels,
                    frame_len_8,
                    complex,
                    bits_per_sample,
                    thread_id,
                    station_id,
                    edv: if legacy { 0 } else { edv },
                },
            )
    }

    proptest! {
        #[test]
        fn every_header_reads_back_as_written(h in any_header()) {
            let mut buf = [0u8; HEADER_BYTES];
            h.write(&mut buf);
            prop_assert_eq!(Header::parse(&buf[..h.header_bytes()]).unwrap(), h);
        }

        #[test]
        fn parsing_any_bytes_never_panics_and_accepts_only_whole_frames(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            match check_frame(&bytes) {
                Ok(h) => {
                    prop_assert_eq!(h.frame_bytes(), bytes.len());
                    prop_assert!(bytes.len() >= h.header_bytes());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn a_frame_cut_short_or_padded_is_refused(len_8 in 4u32..1200, cut in 1usize..64) {
            let h = Header { frame_len_8: len_8, bits_per_sample: 2, ..Header::default() };
            let mut frame = vec![0u8; h.frame_bytes() + 64];
            h.write(&mut frame);
            prop_assert!(check_frame(&frame[..h.frame_bytes()]).is_ok());
            let short = check_frame(&frame[..h.frame_bytes() - cut.min(h.frame_bytes() - HEADER_BYTES).max(1)]);
            prop_assert!(short.is_err(), "{:?}", short);
            let long = check_frame(&frame[..h.frame_bytes() + cut]);
            prop_assert!(matches!(long, Err(FrameError::LengthMismatch { .. })), "{:?}", long);
        }
    }

    #[test]
    fn the_typical_frame_is_1004_units_of_8_bytes() {
        let h = Header {
            seconds: 12_345_678,
            ref_epoch: 53,
            frame_number: 25_000,
            frame_len_8: (FRAME_BYTES_TYPICAL / 8) as u32,
            bits_per_sample: 2,
            thread_id: 3,
            station_id: station_id("Ef"),
            ..Header::default()
        };
        let mut frame = vec![0u8; FRAME_BYTES_TYPICAL];
        h.write(&mut frame);
        // Word 2 holds the length 1004 = 0x3EC in its low 24 bits.
        assert_eq!(&frame[8..11], &[0xEC, 0x03, 0x00]);
        let back = check_frame(&frame).unwrap();
        assert_eq!(
            (back.thread_id, back.station(), back.frame_number),
            (3, "Ef".to_string(), 25_000)
        );
        assert_eq!(
            check_frame(&frame[..8000]),
            Err(FrameError::LengthMismatch {
                header_bytes: 8032,
                len: 8000
            })
        );
        assert_eq!(
            check_frame(&frame[..10]),
            Err(FrameError::Truncated { len: 10 })
        );
    }
}
