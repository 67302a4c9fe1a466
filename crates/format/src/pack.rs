//! Pack extents: many small contents in one extent.
//!
//! ```text
//! pack payload = magic "PFPK" | version u8 (1) | entry…      (entries run to the end of the payload)
//! entry        = entry_len u32 LE | manifest record | stored bytes (manifest.stored_len)
//! ```
//! `entry_len` counts the bytes after itself, so a reader can skip an entry
//! whose manifest it cannot decode.

use std::io::{self, Read, Write};

use crate::error::{FormatError, Result};
use crate::manifest::Manifest;

/// First bytes of a pack extent's payload: `"PFPK"`.
pub const PACK_MAGIC: [u8; 4] = *b"PFPK";
/// Pack format version.
pub const PACK_VERSION: u8 = 1;
/// Bytes of the pack header (magic + version).
pub const PACK_HEADER_BYTES: usize = 5;
/// Largest entry a [`PackReader`] accepts: 256 MiB.
pub const PACK_ENTRY_BYTES_MAX: u32 = 256 << 20;

/// Where an appended entry landed, offsets relative to the start of the pack
/// payload (add [`crate::EXTENT_HEADER_BYTES`] for offsets within the extent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntryPlacement {
    /// Offset of the entry's `entry_len` field.
    pub entry_offset: u64,
    /// Offset of the entry's first stored byte (the catalog's segment offset).
    pub stored_offset: u64,
    /// Stored bytes of the entry.
    pub stored_len: u64,
}

/// Writes a pack payload to a sink, never beyond `payload_bytes_max`.
pub struct PackWriter<W: Write> {
    sink: W,
    payload_bytes_max: u32,
    payload_len: u64,
    entries: usize,
}

impl<W: Write> PackWriter<W> {
    /// Writes the pack header; `payload_bytes_max` bounds the whole payload
    /// (at most 4 GiB − 1, the extent limit).
    pub fn new(mut sink: W, payload_bytes_max: u32) -> Result<PackWriter<W>> {
        if (payload_bytes_max as usize) < PACK_HEADER_BYTES {
            return Err(FormatError::InvalidArgument(format!(
                "pack payload_bytes_max {payload_bytes_max} is below the header size"
            )));
        }
        sink.write_all(&PACK_MAGIC)?;
        sink.write_all(&[PACK_VERSION])?;
        Ok(PackWriter {
            sink,
            payload_bytes_max,
            payload_len: PACK_HEADER_BYTES as u64,
            entries: 0,
        })
    }

    /// Payload bytes written so far.
    pub fn payload_len(&self) -> u64 {
        self.payload_len
    }

    /// Entries appended so far.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Bytes an entry with this manifest record length and stored length takes.
    pub fn entry_bytes(manifest_record_len: usize, stored_len: u64) -> u64 {
        4 + manifest_record_len as u64 + stored_len
    }

    /// Would an entry of `entry_bytes` (see [`PackWriter::entry_bytes`]) still fit?
    pub fn fits(&self, entry_bytes: u64) -> bool {
        self.payload_len + entry_bytes <= self.payload_bytes_max as u64
    }

    /// Appends `manifest | stored bytes`, taking exactly `manifest.stored_len`
    /// bytes from `stored`. Fails without writing if the entry does not fit;
    /// a short `stored` is an error that leaves the pack unusable.
    pub fn append<R: Read>(
        &mut self,
        manifest: &Manifest,
        stored: R,
    ) -> Result<PackEntryPlacement> {
        let record = manifest.encode()?;
        let entry_bytes = Self::entry_bytes(record.len(), manifest.stored_len);
        if !self.fits(entry_bytes) || entry_bytes - 4 > PACK_ENTRY_BYTES_MAX as u64 {
            return Err(FormatError::InvalidArgument(format!(
                "pack entry of {entry_bytes} bytes does not fit: {} of {} payload bytes used",
                self.payload_len, self.payload_bytes_max
            )));
        }
        let entry_offset = self.payload_len;
        self.sink
            .write_all(&((entry_bytes - 4) as u32).to_le_bytes())?;
        self.sink.write_all(&record)?;
        let copied = io::copy(&mut stored.take(manifest.stored_len), &mut self.sink)?;
        if copied != manifest.stored_len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "pack entry {}/{}: stored bytes ended after {copied} of {}",
                    manifest.bucket, manifest.key, manifest.stored_len
                ),
            )
            .into());
        }
        self.payload_len += entry_bytes;
        self.entries += 1;
        Ok(PackEntryPlacement {
            entry_offset,
            stored_offset: entry_offset + 4 + record.len() as u64,
            stored_len: manifest.stored_len,
        })
    }

    /// Flushes and returns the payload length and the sink.
    pub fn finish(mut self) -> Result<(u32, W)> {
        self.sink.flush()?;
        assert!(self.payload_len <= self.payload_bytes_max as u64);
        Ok((self.payload_len as u32, self.sink))
    }
}

/// One entry read from a pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackEntry {
    /// The entry's manifest.
    pub manifest: Manifest,
    /// The entry's stored bytes.
    pub stored: Vec<u8>,
    /// Where the entry starts in the payload.
    pub entry_offset: u64,
    /// Where its stored bytes start in the payload.
    pub stored_offset: u64,
}

/// Iterates the entries of a pack payload of known length. An entry whose
/// manifest is damaged is yielded as an error and skipped; an entry length
/// that runs past the payload ends the iteration (after an error).
pub struct PackReader<R: Read> {
    reader: R,
    payload_len: u64,
    pos: u64,
    done: bool,
}

impl<R: Read> PackReader<R> {
    /// Reads and checks the pack header from `reader` (positioned at the payload start).
    pub fn new(mut reader: R, payload_len: u64) -> Result<PackReader<R>> {
        let mut head = [0u8; PACK_HEADER_BYTES];
        if payload_len < PACK_HEADER_BYTES as u64 {
            return Err(FormatError::malformed(
                "pack",
                format!("payload of {payload_len} bytes is shorter than the header"),
            ));
        }
        reader.read_exact(&mut head)?;
        if !is_pack_start(&head) {
            return Err(FormatError::malformed(
                "pack",
                format!("header {head:02x?}, expected {PACK_MAGIC:02x?} version {PACK_VERSION}"),
            ));
        }
        Ok(PackReader {
            reader,
            payload_len,
            pos: PACK_HEADER_BYTES as u64,
            done: false,
        })
    }

    fn next_entry(&mut self) -> Result<PackEntry> {
        let entry_offset = self.pos;
        let mut len = [0u8; 4];
        self.reader
            .read_exact(&mut len)
            .inspect_err(|_| self.done = true)?;
        self.pos += 4;
        let entry_len = u32::from_le_bytes(len);
        if entry_len as u64 > self.payload_len - self.pos || entry_len > PACK_ENTRY_BYTES_MAX {
            self.done = true;
            return Err(FormatError::malformed(
                "pack",
                format!(
                    "entry at payload offset {entry_offset} claims {entry_len} bytes, {} left",
                    self.payload_len - self.pos
                ),
            ));
        }
        let mut entry = Vec::new();
        (&mut self.reader)
            .take(entry_len as u64)
            .read_to_end(&mut entry)?;
        self.pos += entry.len() as u64;
        if entry.len() != entry_len as usize {
            self.done = true;
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("pack entry at payload offset {entry_offset} is truncated"),
            )
            .into());
        }
        let (manifest, record_len) = Manifest::decode(&entry)?;
        if (entry.len() - record_len) as u64 != manifest.stored_len {
            return Err(FormatError::malformed(
                "pack",
                format!("entry at payload offset {entry_offset} holds {} stored bytes, its manifest says {}", entry.len() - record_len, manifest.stored_len),
            ));
        }
        entry.drain(..record_len);
        Ok(PackEntry {
            manifest,
            stored: entry,
            entry_offset,
            stored_offset: entry_offset + 4 + record_len as u64,
        })
    }
}

impl<R: Read> Iterator for PackReader<R> {
    type Item = Result<PackEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.payload_len {
            return None;
        }
        Some(self.next_entry())
    }
}

/// Does `bytes` start with the pack header?
pub fn is_pack_start(bytes: &[u8]) -> bool {
    bytes.len() >= PACK_HEADER_BYTES && bytes[0..4] == PACK_MAGIC && bytes[4] == PACK_VERSION
}
