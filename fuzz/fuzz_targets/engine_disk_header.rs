//! The header block at the start of each grid disk, as the engine reads it to open a grid (and the grid layout
//! text it names). The fuzzed bytes are the header's fields: the target gives them the right magic, version
//! and checksum (first input byte even) or takes them as they are. Never a panic; a header that decodes
//! encodes back to a block that decodes to the same header (checked inside `disk_header`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_engine::fuzzing::disk_header;

const ENCODED_BYTES: usize = 8 + 4 + 16 + 32 + 4 + 1 + 8 + 1 + 4 + 4;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let block = if mode & 1 == 1 {
        rest.to_vec()
    } else {
        let mut b = Vec::with_capacity(4096);
        b.extend_from_slice(b"PFDISK01");
        b.extend_from_slice(&1u32.to_le_bytes());
        let fields = &rest[..rest.len().min(ENCODED_BYTES - 16)];
        b.extend_from_slice(fields);
        b.resize(ENCODED_BYTES - 4, 0);
        let crc = crc_fast::crc32_iscsi(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(4096, 0);
        b
    };
    if let Some(layout) = disk_header(&block) {
        let _ = layout.parse::<permafrost_grid::Layout>();
    }
});
