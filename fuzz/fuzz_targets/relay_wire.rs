//! The relay wire format as a node reads it from a peer: length-prefixed JSON messages (stream header, leaf
//! acknowledgement) and piece frames. Never a panic, allocation bounded by the announced limits; a header that
//! validates has pieces whose lengths add up to the object; every message read writes back and reads again
//! to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_relay::wire::{
    read_json, read_piece, write_json, write_piece, Header, LeafAck, Piece,
};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let mut r = rest;
    match kind % 3 {
        0 => {
            let Ok(header) = read_json::<Header>(&mut r) else {
                return;
            };
            let mut buf = Vec::new();
            write_json(&mut buf, &header).unwrap();
            assert_eq!(read_json::<Header>(&mut &buf[..]).unwrap(), header);
            let _ = header.hop.leaves();
            if header.validate(&header.hop.name.clone()).is_ok() {
                let pieces = header.pieces();
                let mut total = 0u64;
                // The first and the last few pieces (an object may have billions).
                for i in (0..pieces.min(4)).chain(pieces.saturating_sub(4).max(4)..pieces) {
                    let len = header.piece_len(i);
                    assert!(len >= 1 && len <= header.piece_bytes);
                    total += u64::from(len);
                }
                if pieces <= 8 {
                    assert_eq!(total, header.object_bytes);
                }
            }
        }
        1 => {
            let Ok(ack) = read_json::<LeafAck>(&mut r) else {
                return;
            };
            let mut buf = Vec::new();
            write_json(&mut buf, &ack).unwrap();
            assert_eq!(read_json::<LeafAck>(&mut &buf[..]).unwrap(), ack);
        }
        _ => {
            let Some((len, mut frames)) = rest.split_at_checked(2) else {
                return;
            };
            let len = u32::from(u16::from_le_bytes(len.try_into().unwrap()));
            while let Ok(piece) = read_piece(&mut frames, len) {
                assert_eq!(piece.payload.len() as u32, len);
                let mut buf = Vec::new();
                write_piece(&mut buf, &piece).unwrap();
                let again: Piece = read_piece(&mut &buf[..], len).unwrap();
                assert_eq!((again.hash, again.payload), (piece.hash, piece.payload));
            }
        }
    }
});
