//! Salvage of an arbitrary disk image (what a damaged or foreign disk holds): the scanner and `salvage_objects`
//! finish without a panic, stay inside the image and write only under their output directory.
#![no_main]
use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use permafrost_format::{salvage_objects, scan_extents};

fuzz_target!(|image: &[u8]| {
    let mut found = 0u64;
    let mut scanner = scan_extents(Cursor::new(image), image.len() as u64);
    for item in &mut scanner {
        if let Ok(extent) = item {
            assert!(extent.offset_bytes < image.len() as u64);
            assert!(
                extent.payload_offset() + u64::from(extent.header.payload_len)
                    <= image.len() as u64
            );
            found += 1;
        }
    }
    assert!(scanner.scanned_bytes() <= image.len() as u64);
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("out");
    let report = salvage_objects(Cursor::new(image), image.len() as u64, &out, &mut |_| {});
    if let Ok(report) = report {
        assert_eq!(report.extents_found, found);
    }
    // Nothing outside the output directory.
    let entries: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
    assert!(
        entries.len() <= 1,
        "salvage wrote beside its output directory"
    );
});
