//! Entry points for the fuzz targets in `fuzz/` (not an API): the engine's decoders of what it reads back from
//! its own disks and files after a crash. A panic here is a finding.

/// A parity delta file (`<grid>/deltas/<txn>.delta`) as recovery reads it: `(txn_id, offset, data)` when the
/// file is whole and its checksums hold.
pub fn delta_file(bytes: &[u8]) -> Option<(u64, u64, Vec<u8>)> {
    crate::delta::parse_delta(bytes).map(|d| (d.txn_id, d.offset, d.data))
}

/// A disk header block as the engine reads it when it opens a grid: its layout text when the block is a valid
/// header. A header that decodes encodes back to a block that decodes to the same header.
pub fn disk_header(block: &[u8]) -> Option<String> {
    let header = crate::header::DiskHeader::decode(block)?;
    let again = crate::header::DiskHeader::decode(&header.encode());
    assert_eq!(
        again.as_ref(),
        Some(&header),
        "a disk header survives encode and decode"
    );
    Some(header.layout)
}
