//! Extents as read back from a disk: any bytes parse, verify and stream without a panic (a failed check is an
//! error); an extent written by `write_extent` from fuzzed fields reads back to the same header and payload,
//! and with one byte changed it no longer verifies.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use permafrost_format::{
    extent_bytes, extent_to_vec, is_extent_start, parse_extent_header, read_extent, verify_extent,
    EXTENT_HEADER_BYTES,
};

#[derive(Debug, Arbitrary)]
enum Input {
    Raw(Vec<u8>),
    Written {
        object_id: u128,
        replica_id: u8,
        extent_id: u16,
        payload: Vec<u8>,
        flip_at: u32,
        flip: u8,
    },
}

fuzz_target!(|input: Input| match input {
    Input::Raw(bytes) => {
        let _ = is_extent_start(&bytes);
        if let Ok(header) = verify_extent(&bytes) {
            let mut payload = Vec::new();
            let again = read_extent(&bytes[..], &mut payload).expect("a verified extent reads");
            assert_eq!(again, header);
            assert_eq!(
                payload,
                bytes[EXTENT_HEADER_BYTES..][..header.payload_len as usize]
            );
        } else {
            let _ = parse_extent_header(&bytes);
            let _ = read_extent(&bytes[..], std::io::sink());
        }
    }
    Input::Written {
        object_id,
        replica_id,
        extent_id,
        payload,
        flip_at,
        flip,
    } => {
        let bytes = extent_to_vec(object_id, replica_id, extent_id, &payload)
            .expect("an extent is written");
        assert_eq!(bytes.len() as u64, extent_bytes(payload.len() as u32));
        assert_eq!(bytes.len() % 4096, 0);
        assert!(is_extent_start(&bytes));
        let header = verify_extent(&bytes).expect("a written extent verifies");
        assert_eq!(
            (
                header.object_id,
                header.replica_id,
                header.extent_id,
                header.payload_len as usize
            ),
            (object_id, replica_id, extent_id, payload.len())
        );
        let mut read = Vec::new();
        assert_eq!(
            read_extent(&bytes[..], &mut read).expect("a written extent reads"),
            header
        );
        assert_eq!(read, payload);
        // One changed byte among header, payload and checksum is caught.
        let covered = EXTENT_HEADER_BYTES + payload.len() + 4;
        let mut damaged = bytes.clone();
        damaged[flip_at as usize % covered] ^= flip | 1;
        let caught = match verify_extent(&damaged) {
            Err(_) => true,
            // A changed length can still land on a valid-looking extent only if its checksum holds: never here.
            Ok(h) => h != header && verify_extent(&damaged).is_err(),
        };
        assert!(
            caught,
            "a changed byte at {} went unnoticed",
            flip_at as usize % covered
        );
    }
});
