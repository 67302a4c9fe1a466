//! The extent format (thesis Fig. 5.4, SPEC idea 8): 32 bytes of overhead.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "PFXE"            (50 46 58 45)
//!      4     1  format version (1)      (the magic's fifth byte: 40-bit magic)
//!      5    16  object id, u128 LE
//!     21     1  replica id
//!     22     2  extent id, u16 LE
//!     24     4  payload length, u32 LE
//!     28     n  payload
//!   28+n     4  crc32c over bytes [0, 28+n), u32 LE
//!   32+n     …  zero padding to the next multiple of 4096
//! ```

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};

/// The first four bytes of every extent: `"PFXE"`.
pub const EXTENT_MAGIC: [u8; 4] = *b"PFXE";
/// The extent format version, byte 4 of the header.
pub const EXTENT_VERSION: u8 = 1;
/// Header bytes before the payload.
pub const EXTENT_HEADER_BYTES: usize = 28;
/// Checksum bytes after the payload.
pub const EXTENT_TRAILER_BYTES: usize = 4;
/// Bytes an extent adds to its payload (before alignment padding): 32.
pub const EXTENT_OVERHEAD_BYTES: usize = EXTENT_HEADER_BYTES + EXTENT_TRAILER_BYTES;
/// Extents start and end on multiples of this.
pub const EXTENT_ALIGN_BYTES: u64 = 4096;
/// Largest payload: 4 GiB − 1 (the length field is 32 bits).
pub const EXTENT_PAYLOAD_BYTES_MAX: u64 = u32::MAX as u64;

/// The fixed header of an extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExtentHeader {
    /// The content's object id, or the pack id for a pack extent.
    pub object_id: u128,
    /// Which replica (0 for the only copy).
    pub replica_id: u8,
    /// Position among the extents of the object: 0 holds the manifest (or is
    /// the pack), 1, 2, … continue the stored bytes.
    pub extent_id: u16,
    /// Payload bytes that follow the header.
    pub payload_len: u32,
}

impl ExtentHeader {
    /// The 28 header bytes.
    pub fn to_bytes(&self) -> [u8; EXTENT_HEADER_BYTES] {
        let mut b = [0u8; EXTENT_HEADER_BYTES];
        b[0..4].copy_from_slice(&EXTENT_MAGIC);
        b[4] = EXTENT_VERSION;
        b[5..21].copy_from_slice(&self.object_id.to_le_bytes());
        b[21] = self.replica_id;
        b[22..24].copy_from_slice(&self.extent_id.to_le_bytes());
        b[24..28].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Total bytes of this extent on disk, padding included.
    pub fn extent_bytes(&self) -> u64 {
        extent_bytes(self.payload_len)
    }
}

/// Bytes an extent with `payload_len` payload bytes occupies on disk: header,
/// payload and checksum, rounded up to 4 KiB.
pub fn extent_bytes(payload_len: u32) -> u64 {
    (payload_len as u64 + EXTENT_OVERHEAD_BYTES as u64).div_ceil(EXTENT_ALIGN_BYTES)
        * EXTENT_ALIGN_BYTES
}

/// Does `bytes` start with the extent magic and a known version?
pub fn is_extent_start(bytes: &[u8]) -> bool {
    bytes.len() >= 5 && bytes[0..4] == EXTENT_MAGIC && bytes[4] == EXTENT_VERSION
}

/// Parses the 28-byte header at the start of `bytes` (no checksum check: the
/// checksum covers the payload too; see [`verify_extent`]).
pub fn parse_extent_header(bytes: &[u8]) -> Result<ExtentHeader> {
    let what = "extent header";
    if bytes.len() < EXTENT_HEADER_BYTES {
        return Err(FormatError::malformed(
            what,
            format!("{} bytes, need {EXTENT_HEADER_BYTES}", bytes.len()),
        ));
    }
    if bytes[0..4] != EXTENT_MAGIC {
        return Err(FormatError::malformed(
            what,
            format!(
                "magic {:02x?}, expected {:02x?}",
                &bytes[0..4],
                EXTENT_MAGIC
            ),
        ));
    }
    if bytes[4] != EXTENT_VERSION {
        return Err(FormatError::malformed(
            what,
            format!(
                "unknown version {} (this build reads {EXTENT_VERSION})",
                bytes[4]
            ),
        ));
    }
    Ok(ExtentHeader {
        object_id: u128::from_le_bytes(bytes[5..21].try_into().unwrap()),
        replica_id: bytes[21],
        extent_id: u16::from_le_bytes(bytes[22..24].try_into().unwrap()),
        payload_len: u32::from_le_bytes(bytes[24..28].try_into().unwrap()),
    })
}

/// Writes a whole extent to `sink`: header, exactly `header.payload_len` bytes
/// taken from `payload` (streamed in 64 KiB pieces), the crc32c, and zero
/// padding to 4 KiB, i.e. [`extent_bytes`] bytes in all. Returns the crc32c.
/// A payload shorter than announced is an error (`UnexpectedEof`); extra
/// payload bytes are left unread.
pub fn write_extent<R: Read, W: Write>(
    header: &ExtentHeader,
    payload: R,
    mut sink: W,
) -> Result<u32> {
    let head = header.to_bytes();
    sink.write_all(&head)?;
    let mut crc = crc_fast::crc32_iscsi(&head);
    let mut payload = payload.take(header.payload_len as u64);
    let mut buf = vec![0u8; 64 << 10];
    let mut copied = 0u64;
    loop {
        let n = match payload.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        crc = crate::crc32c_append(crc, &buf[..n]);
        sink.write_all(&buf[..n])?;
        copied += n as u64;
    }
    if copied != header.payload_len as u64 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "extent payload ended after {copied} of {} bytes",
                header.payload_len
            ),
        )
        .into());
    }
    sink.write_all(&crc.to_le_bytes())?;
    let padding = (header.extent_bytes() - copied - EXTENT_OVERHEAD_BYTES as u64) as usize;
    buf[..padding].fill(0);
    sink.write_all(&buf[..padding])?;
    Ok(crc)
}

/// Builds a whole extent in memory (convenience over [`write_extent`]).
pub fn extent_to_vec(
    object_id: u128,
    replica_id: u8,
    extent_id: u16,
    payload: &[u8],
) -> Result<Vec<u8>> {
    let payload_len = u32::try_from(payload.len()).map_err(|_| {
        FormatError::InvalidArgument(format!(
            "payload of {} bytes exceeds 4 GiB − 1",
            payload.len()
        ))
    })?;
    let header = ExtentHeader {
        object_id,
        replica_id,
        extent_id,
        payload_len,
    };
    let mut out = Vec::with_capacity(header.extent_bytes() as usize);
    write_extent(&header, payload, &mut out)?;
    Ok(out)
}

/// Checks a whole extent held in memory (`bytes` starts with the header and
/// holds at least header, payload and checksum; padding may follow). Returns
/// the header; the payload is `bytes[28 .. 28 + payload_len]`.
pub fn verify_extent(bytes: &[u8]) -> Result<ExtentHeader> {
    let header = parse_extent_header(bytes)?;
    let end = EXTENT_HEADER_BYTES + header.payload_len as usize;
    if bytes.len() < end + EXTENT_TRAILER_BYTES {
        return Err(FormatError::malformed(
            "extent",
            format!(
                "{} bytes, the header announces {} (header, payload and checksum)",
                bytes.len(),
                end + EXTENT_TRAILER_BYTES
            ),
        ));
    }
    let stored = u32::from_le_bytes(bytes[end..end + 4].try_into().unwrap());
    let computed = crc_fast::crc32_iscsi(&bytes[..end]);
    if stored != computed {
        return Err(FormatError::ChecksumMismatch {
            what: "extent",
            stored,
            computed,
        });
    }
    Ok(header)
}

/// Reads one extent from `reader` (positioned at its header), streams its
/// payload into `payload_sink` and checks the checksum. Reads header, payload
/// and checksum, not the padding. The payload has reached the sink before the
/// checksum is known: on error, discard what the sink got.
pub fn read_extent<R: Read, W: Write>(mut reader: R, mut payload_sink: W) -> Result<ExtentHeader> {
    let mut head = [0u8; EXTENT_HEADER_BYTES];
    reader.read_exact(&mut head)?;
    let header = parse_extent_header(&head)?;
    let mut crc = crc_fast::crc32_iscsi(&head);
    let mut buf = vec![0u8; 64 << 10];
    let mut left = header.payload_len as u64;
    while left > 0 {
        let n = (left.min(buf.len() as u64)) as usize;
        reader.read_exact(&mut buf[..n])?;
        crc = crate::crc32c_append(crc, &buf[..n]);
        payload_sink.write_all(&buf[..n])?;
        left -= n as u64;
    }
    let mut trailer = [0u8; 4];
    reader.read_exact(&mut trailer)?;
    let stored = u32::from_le_bytes(trailer);
    if stored != crc {
        return Err(FormatError::ChecksumMismatch {
            what: "extent",
            stored,
            computed: crc,
        });
    }
    Ok(header)
}
