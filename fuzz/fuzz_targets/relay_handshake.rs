//! The relay's mutual HMAC handshake from both ends, against a peer that sends arbitrary bytes: the server
//! side (`accept`, reading a client's answer and proof) and the client side (`connect`, reading a server's
//! hello, verdict and proof or refusal). Never a panic; a peer without the secret is never accepted.
#![no_main]
use std::io::{self, Read, Write};

use libfuzzer_sys::fuzz_target;
use permafrost_relay::auth::{accept, connect};
use permafrost_relay::{Credentials, Secret};

/// A connection whose peer has sent `incoming`; what we send is kept.
struct Peer<'a> {
    incoming: &'a [u8],
    sent: Vec<u8>,
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.incoming.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sent.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&side, incoming)) = data.split_first() else {
        return;
    };
    let secret = Secret::new(b"fuzzing cluster secret 0123456789").unwrap();
    let mut peer = Peer {
        incoming,
        sent: Vec::new(),
    };
    if side & 1 == 0 {
        // The client's proof is over the server's fresh random nonce: no fixed input can carry it.
        assert!(
            accept(&mut peer, "node-a", &secret).is_err(),
            "a peer without the secret was accepted"
        );
    } else {
        let credentials = Credentials {
            name: "sender".into(),
            secret,
        };
        assert!(
            connect(&mut peer, &credentials).is_err(),
            "a server without the secret was trusted"
        );
    }
});
