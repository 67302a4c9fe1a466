//! VDIF frames and `udps` datagrams as the recorder receives them from the network: parsing never panics; a
//! header that parses writes back to the same header bytes (its assigned bits) and parses to the same header;
//! a frame `check_frame` accepts is exactly as long as its header says.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_record::vdif::{check_frame, udps_sequence, Header, UDPS_PREFIX_BYTES};

fuzz_target!(|datagram: &[u8]| {
    let sequence = udps_sequence(datagram);
    assert_eq!(sequence.is_some(), datagram.len() >= UDPS_PREFIX_BYTES);
    for frame in [datagram, datagram.get(UDPS_PREFIX_BYTES..).unwrap_or(&[])] {
        if let Ok(header) = check_frame(frame) {
            assert_eq!(header.frame_bytes(), frame.len());
            assert!(header.frame_bytes() >= header.header_bytes());
        }
        let Ok(header) = Header::parse(frame) else {
            continue;
        };
        let _ = header.station();
        let mut out = vec![0u8; header.header_bytes()];
        header.write(&mut out);
        let again = Header::parse(&out).expect("a written header parses");
        assert_eq!(again, header, "a header survives write and parse");
        // Words 0-3 come back bit for bit but for word 1's two unassigned bits; of the extended user data
        // only the EDV byte is kept.
        let mut first = [0u8; 16];
        first.copy_from_slice(&frame[..16]);
        first[7] &= 0x3F;
        assert_eq!(out[..16], first);
    }
});
