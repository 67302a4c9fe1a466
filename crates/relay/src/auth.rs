//! Proof of cluster membership at the start of every relay connection (wire format version 2).
//!
//! Before anything else is read or written on a connection, both ends prove they hold the cluster secret:
//!
//! ```text
//! server → client  hello   = "PFRL", u32 version, [32] server nonce, u8 n, server name (n bytes)
//! client → server  answer  = "PFRL", u32 version, [32] client nonce, u8 n, client name (n bytes),
//!                            [32] client proof
//! server → client  verdict = u8 0, [32] server proof                     (accepted: the header follows)
//!                          | u8 1, u8 n, reason (n bytes)                (refused: the server closes)
//!
//! transcript   = "permafrost-relay", u32 version, server nonce, client nonce,
//!                u8 n, server name, u8 n, client name
//! client proof = HMAC-SHA256(secret, "client" ‖ transcript)
//! server proof = HMAC-SHA256(secret, "server" ‖ transcript)
//! ```
//!
//! - Each nonce is 32 bytes from the operating system's generator, fresh per connection: an answer recorded
//!   on one connection does not match the next server nonce (no replay), and the server's proof covers the
//!   client's nonce (a recorded verdict does not fool a client either).
//! - The two proofs carry different labels, so neither end's proof can be reflected back as the other's.
//! - Proofs are compared in constant time (`hmac`'s `verify_slice`).
//! - The server waits at most [`HANDSHAKE_TIMEOUT`] for the answer: a peer that says nothing holds a
//!   connection for that long, not for the stream timeout.
//! - A peer of the unauthenticated version 1 sends its JSON header first; the server recognises it (a length
//!   and `{` where the magic belongs) and says so in its refusal.
//!
//! Not here: confidentiality or integrity of the stream after the handshake (see docs/security.md "Cluster
//! traffic"): the handshake proves who opened the connection, not that nobody on the path altered it later.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Version of the wire format that starts with this handshake (the header's `version` too).
pub const AUTH_VERSION: u32 = 2;
/// The first four bytes of a hello and of an answer.
pub const MAGIC: [u8; 4] = *b"PFRL";
/// Shortest secret accepted, bytes.
pub const SECRET_BYTES_MIN: usize = 16;
/// Longest node name a handshake carries, bytes.
pub const NAME_BYTES_MAX: usize = 255;
/// How long each end waits for the other's next handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A peer refused again within this time is counted, not logged again.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Peers remembered for rate-limiting refusal lines (the memory bound; the table starts over when full).
const REFUSAL_PEERS_MAX: usize = 4096;

const NONCE_BYTES: usize = 32;
const PROOF_BYTES: usize = 32;
const TRANSCRIPT_LABEL: &[u8] = b"permafrost-relay";
const VERDICT_OK: u8 = 0;
const VERDICT_REFUSED: u8 = 1;

/// The cluster secret: every relay, data node and sender of one cluster holds the same one. Its bytes are
/// never printed (`Debug` shows only its length).
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

impl Secret {
    /// A secret of these bytes; refused when shorter than [`SECRET_BYTES_MIN`].
    pub fn new(bytes: &[u8]) -> Result<Secret, String> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "the cluster secret is {} bytes long; it needs at least {SECRET_BYTES_MIN} (make one with \
                 `openssl rand -hex 32`)",
                bytes.len()
            ));
        }
        Ok(Secret(Arc::from(bytes)))
    }

    /// The secret in a file: its content without leading and trailing white space (a final newline).
    pub fn from_file(path: &Path) -> Result<Secret, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the cluster secret {}: {e}", path.display()))?;
        Secret::new(bytes.trim_ascii()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A fresh secret: 32 bytes from the operating system's generator, as 64 hex digits (the form the
    /// catalog keeps and a secret file may hold).
    pub fn generate_hex() -> String {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, label: &[u8], transcript: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(label);
        mac.update(transcript);
        mac
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Who opens connections (a sender's or relay's name, for the peer's log) and the secret it proves.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The name this process goes by in the cluster (a node's name; `relay send`'s `--name`).
    pub name: String,
    /// The cluster secret.
    pub secret: Secret,
}

/// Why a server refused a peer (said in its log line and, briefly, to the peer).
#[derive(Debug)]
pub struct Refusal(pub String);

fn nonce() -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

fn transcript(server_nonce: &[u8], client_nonce: &[u8], server: &str, client: &str) -> Vec<u8> {
    let mut t = Vec::with_capacity(
        TRANSCRIPT_LABEL.len() + 4 + 2 * NONCE_BYTES + 2 + server.len() + client.len(),
    );
    t.extend_from_slice(TRANSCRIPT_LABEL);
    t.extend_from_slice(&AUTH_VERSION.to_le_bytes());
    t.extend_from_slice(server_nonce);
    t.extend_from_slice(client_nonce);
    t.push(server.len() as u8);
    t.extend_from_slice(server.as_bytes());
    t.push(client.len() as u8);
    t.extend_from_slice(client.as_bytes());
    t
}

fn short_name(name: &str) -> io::Result<u8> {
    u8::try_from(name.len())
        .ok()
        .filter(|n| usize::from(*n) <= NAME_BYTES_MAX)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "node name of {} bytes is longer than {NAME_BYTES_MAX}",
                    name.len()
                ),
            )
        })
}

fn read_name(r: &mut impl Read) -> io::Result<String> {
    let mut n = [0u8; 1];
    r.read_exact(&mut n)?;
    let mut bytes = vec![0u8; usize::from(n[0])];
    r.read_exact(&mut bytes)?;
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a name that is not UTF-8"))
}

/// What a read error during the handshake says about the peer.
fn cut_short(e: &io::Error, what: &str) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted => {
            format!("closed the connection during the handshake ({what})")
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("sent no {what} within {} s", HANDSHAKE_TIMEOUT.as_secs())
        }
        _ => format!("{what}: {e}"),
    }
}

/// At the server, before anything else: send the hello, check the peer's answer, and prove the server
/// back. Returns the peer's name, or why it was refused (the refusal is also sent to the peer, best
/// effort). `conn` should time out after [`HANDSHAKE_TIMEOUT`].
pub fn accept(
    conn: &mut (impl Read + Write),
    own_name: &str,
    secret: &Secret,
) -> Result<String, Refusal> {
    let server_nonce = nonce();
    let mut hello = Vec::with_capacity(4 + 4 + NONCE_BYTES + 1 + own_name.len());
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&AUTH_VERSION.to_le_bytes());
    hello.extend_from_slice(&server_nonce);
    let n = short_name(own_name).map_err(|e| Refusal(e.to_string()))?;
    hello.push(n);
    hello.extend_from_slice(own_name.as_bytes());
    // An old peer writes its header without reading: the hello may not get through, the refusal still does.
    let _ = conn.write_all(&hello).and_then(|_| conn.flush());
    let mut start = [0u8; 8];
    conn.read_exact(&mut start)
        .map_err(|e| Refusal(cut_short(&e, "answer")))?;
    if start[..4] != MAGIC {
        let length = u32::from_le_bytes(start[..4].try_into().expect("4 bytes"));
        let why = if start[4] == b'{' && length <= crate::wire::HEADER_BYTES_MAX {
            "speaks the unauthenticated relay protocol (wire version 1, a build older than the cluster secret)".to_string()
        } else {
            "does not speak the relay protocol (no handshake)".to_string()
        };
        return Err(refuse(conn, why));
    }
    let version = u32::from_le_bytes(start[4..].try_into().expect("4 bytes"));
    if version != AUTH_VERSION {
        return Err(refuse(
            conn,
            format!("speaks relay wire version {version}; this build speaks {AUTH_VERSION}"),
        ));
    }
    let mut client_nonce = [0u8; NONCE_BYTES];
    conn.read_exact(&mut client_nonce)
        .map_err(|e| Refusal(cut_short(&e, "answer")))?;
    let client = read_name(conn).map_err(|e| Refusal(cut_short(&e, "answer")))?;
    let mut proof = [0u8; PROOF_BYTES];
    conn.read_exact(&mut proof)
        .map_err(|e| Refusal(cut_short(&e, "proof")))?;
    let t = transcript(&server_nonce, &client_nonce, own_name, &client);
    if secret.mac(b"client", &t).verify_slice(&proof).is_err() {
        return Err(refuse(
            conn,
            format!("{client:?} did not prove the cluster secret (a wrong secret, or a replayed handshake)"),
        ));
    }
    let mut verdict = Vec::with_capacity(1 + PROOF_BYTES);
    verdict.push(VERDICT_OK);
    verdict.extend_from_slice(&secret.mac(b"server", &t).finalize().into_bytes());
    conn.write_all(&verdict)
        .and_then(|_| conn.flush())
        .map_err(|e| Refusal(format!("{client:?}: sending the server's proof: {e}")))?;
    Ok(client)
}

/// Tell the peer why (best effort: it may not listen) and return the refusal.
fn refuse(conn: &mut impl Write, why: String) -> Refusal {
    let reason: &str = {
        let mut end = why.len().min(NAME_BYTES_MAX);
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        &why[..end]
    };
    let mut verdict = vec![VERDICT_REFUSED, reason.len() as u8];
    verdict.extend_from_slice(reason.as_bytes());
    let _ = conn.write_all(&verdict).and_then(|_| conn.flush());
    Refusal(why)
}

/// At the client, right after connecting: answer the server's hello and check its proof. Returns the
/// server's name; an error says why the connection cannot carry a stream (refused, or the server did not
/// prove the secret).
pub fn connect(conn: &mut (impl Read + Write), credentials: &Credentials) -> io::Result<String> {
    let denied = |what: String| io::Error::new(io::ErrorKind::PermissionDenied, what);
    let mut start = [0u8; 8];
    conn.read_exact(&mut start).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "no handshake from the server ({}): is it a permafrost relay of this version?",
                cut_short(&e, "hello")
            ),
        )
    })?;
    if start[..4] != MAGIC {
        return Err(denied(
            "the server does not speak the relay handshake".to_string(),
        ));
    }
    let version = u32::from_le_bytes(start[4..].try_into().expect("4 bytes"));
    if version != AUTH_VERSION {
        return Err(denied(format!(
            "the server speaks relay wire version {version}; this build speaks {AUTH_VERSION}"
        )));
    }
    let mut server_nonce = [0u8; NONCE_BYTES];
    conn.read_exact(&mut server_nonce)?;
    let server = read_name(conn)?;
    let client_nonce = nonce();
    let t = transcript(&server_nonce, &client_nonce, &server, &credentials.name);
    let mut answer =
        Vec::with_capacity(4 + 4 + NONCE_BYTES + 1 + credentials.name.len() + PROOF_BYTES);
    answer.extend_from_slice(&MAGIC);
    answer.extend_from_slice(&AUTH_VERSION.to_le_bytes());
    answer.extend_from_slice(&client_nonce);
    answer.push(short_name(&credentials.name)?);
    answer.extend_from_slice(credentials.name.as_bytes());
    answer.extend_from_slice(
        &credentials
            .secret
            .mac(b"client", &t)
            .finalize()
            .into_bytes(),
    );
    conn.write_all(&answer)?;
    conn.flush()?;
    let mut verdict = [0u8; 1];
    conn.read_exact(&mut verdict).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{server:?} sent no verdict on the handshake: {e}"),
        )
    })?;
    match verdict[0] {
        VERDICT_OK => {
            let mut proof = [0u8; PROOF_BYTES];
            conn.read_exact(&mut proof)?;
            credentials
                .secret
                .mac(b"server", &t)
                .verify_slice(&proof)
                .map_err(|_| denied(format!("{server:?} did not prove the cluster secret (a wrong secret on it, or not a node of this cluster)")))?;
            Ok(server)
        }
        VERDICT_REFUSED => {
            let reason = read_name(conn).unwrap_or_else(|e| e.to_string());
            Err(denied(format!(
                "{server:?} refused the connection: {reason}"
            )))
        }
        other => Err(denied(format!(
            "{server:?} answered the handshake with verdict {other}"
        ))),
    }
}

/// One line per refused peer address at most every [`REFUSAL_LOG_INTERVAL`]; the refusals in between are
/// counted and the next line says how many.
pub(crate) fn log_refusal(node: &str, peer: Option<SocketAddr>, why: &str) {
    struct Seen {
        logged: Option<Instant>,
        quiet: u64,
    }
    static SEEN: OnceLock<Mutex<BTreeMap<Option<IpAddr>, Seen>>> = OnceLock::new();
    let ip = peer.map(|p| p.ip());
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if seen.len() >= REFUSAL_PEERS_MAX && !seen.contains_key(&ip) {
        seen.clear();
    }
    let now = Instant::now();
    let entry = seen.entry(ip).or_insert(Seen {
        logged: None,
        quiet: 0,
    });
    if entry
        .logged
        .is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL)
    {
        entry.quiet += 1;
        return;
    }
    let quiet = std::mem::take(&mut entry.quiet);
    entry.logged = Some(now);
    drop(seen);
    let peer = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
    let more = if quiet > 0 {
        format!(" ({quiet} more refusals from this address since the last line)")
    } else {
        String::new()
    };
    tracing::warn!("relay {node}: refused a connection from {peer}: {why}{more}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    fn secret(text: &str) -> Secret {
        Secret::new(text.as_bytes()).unwrap()
    }

    fn credentials(name: &str, text: &str) -> Credentials {
        Credentials {
            name: name.into(),
            secret: secret(text),
        }
    }

    const RIGHT: &str = "the right cluster secret";
    const WRONG: &str = "some other cluster secret";

    /// A connection that keeps a copy of everything written to it.
    struct Tap {
        inner: UnixStream,
        sent: Vec<u8>,
    }

    impl Read for Tap {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.inner.read(buf)
        }
    }

    impl Write for Tap {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.sent.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    /// Run the server side on one end of a socket pair and `client` on the other.
    fn pair<T: Send + 'static>(
        server_secret: &str,
        client: impl FnOnce(UnixStream) -> T + Send + 'static,
    ) -> (Result<String, Refusal>, T) {
        let (mut s, c) = UnixStream::pair().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let client = thread::spawn(move || client(c));
        let accepted = accept(&mut s, "n1", &secret(server_secret));
        drop(s);
        (accepted, client.join().unwrap())
    }

    #[test]
    fn peers_with_the_same_secret_accept_each_other_and_learn_each_others_names() {
        let (accepted, connected) =
            pair(RIGHT, |mut c| connect(&mut c, &credentials("root", RIGHT)));
        assert_eq!(accepted.unwrap(), "root");
        assert_eq!(connected.unwrap(), "n1");
    }

    #[test]
    fn a_wrong_secret_is_refused_and_the_client_is_told_why() {
        let (accepted, connected) =
            pair(RIGHT, |mut c| connect(&mut c, &credentials("root", WRONG)));
        let refusal = accepted.unwrap_err().0;
        assert!(
            refusal.contains("did not prove the cluster secret"),
            "{refusal}"
        );
        let e = connected.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("refused the connection"), "{e}");
    }

    #[test]
    fn a_peer_of_the_unauthenticated_protocol_is_refused_naming_it() {
        let (accepted, _) = pair(RIGHT, |mut c| {
            // What a sender of wire version 1 does: its header, at once.
            let header = br#"{"version":1,"transfer":"t","object_bytes":3,"piece_bytes":1024}"#;
            c.write_all(&(header.len() as u32).to_le_bytes()).unwrap();
            c.write_all(header).unwrap();
            let mut answer = Vec::new();
            let _ = c.read_to_end(&mut answer);
            answer
        });
        let refusal = accepted.unwrap_err().0;
        assert!(
            refusal.contains("unauthenticated relay protocol"),
            "{refusal}"
        );
    }

    #[test]
    fn a_peer_speaking_something_else_or_nothing_is_refused() {
        let (accepted, _) = pair(RIGHT, |mut c| c.write_all(b"GET / HTTP/1.1\r\n\r\n"));
        let refusal = accepted.unwrap_err().0;
        assert!(
            refusal.contains("does not speak the relay protocol"),
            "{refusal}"
        );
        let (accepted, _) = pair(RIGHT, drop);
        let refusal = accepted.unwrap_err().0;
        assert!(
            refusal.contains("closed the connection during the handshake"),
            "{refusal}"
        );
    }

    #[test]
    fn a_truncated_answer_is_refused() {
        for keep in [4, 8, 40, 45, 60] {
            let (accepted, _) = pair(RIGHT, move |c| {
                let mut c = c;
                let mut hello = [0u8; 8 + NONCE_BYTES + 1 + 2];
                c.read_exact(&mut hello).unwrap();
                // The first `keep` bytes of an answer, then the end of the stream.
                let mut answer = Vec::new();
                answer.extend_from_slice(&MAGIC);
                answer.extend_from_slice(&AUTH_VERSION.to_le_bytes());
                answer.extend_from_slice(&[7u8; NONCE_BYTES]);
                answer.push(4);
                answer.extend_from_slice(b"root");
                answer.extend_from_slice(&[9u8; PROOF_BYTES]);
                c.write_all(&answer[..keep]).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let refusal = accepted.unwrap_err().0;
            assert!(
                refusal.contains("closed the connection during the handshake"),
                "{keep}: {refusal}"
            );
        }
    }

    #[test]
    fn a_replayed_answer_is_refused() {
        // A recorded, valid handshake of a member…
        let (accepted, recorded) = pair(RIGHT, |c| {
            let mut tap = Tap {
                inner: c,
                sent: Vec::new(),
            };
            connect(&mut tap, &credentials("root", RIGHT)).unwrap();
            tap.sent
        });
        assert_eq!(accepted.unwrap(), "root");
        // …played back on a new connection by someone without the secret: the server's nonce is new.
        let (accepted, verdict) = pair(RIGHT, move |mut c| {
            let mut hello = [0u8; 8 + NONCE_BYTES + 1 + 2];
            c.read_exact(&mut hello).unwrap();
            c.write_all(&recorded).unwrap();
            let mut verdict = [0u8; 1];
            c.read_exact(&mut verdict).unwrap();
            verdict[0]
        });
        let refusal = accepted.unwrap_err().0;
        assert!(refusal.contains("replayed"), "{refusal}");
        assert_eq!(verdict, VERDICT_REFUSED);
    }

    #[test]
    fn a_server_that_cannot_prove_the_secret_is_not_trusted() {
        // A listener that accepts any answer but does not know the secret.
        let (s, mut c) = UnixStream::pair().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let server = thread::spawn(move || {
            let mut s = s;
            let mut hello = Vec::new();
            hello.extend_from_slice(&MAGIC);
            hello.extend_from_slice(&AUTH_VERSION.to_le_bytes());
            hello.extend_from_slice(&[1u8; NONCE_BYTES]);
            hello.push(2);
            hello.extend_from_slice(b"n1");
            s.write_all(&hello).unwrap();
            let mut answer = [0u8; 8 + NONCE_BYTES + 1 + 4 + PROOF_BYTES];
            s.read_exact(&mut answer).unwrap();
            let mut verdict = vec![VERDICT_OK];
            verdict.extend_from_slice(&[0u8; PROOF_BYTES]);
            s.write_all(&verdict).unwrap();
            let mut after = Vec::new();
            let _ = s.read_to_end(&mut after);
            after
        });
        let e = connect(&mut c, &credentials("root", RIGHT)).unwrap_err();
        assert!(
            e.to_string().contains("did not prove the cluster secret"),
            "{e}"
        );
        drop(c);
        assert!(
            server.join().unwrap().is_empty(),
            "nothing follows a failed handshake"
        );
    }

    #[test]
    fn secrets_shorter_than_the_minimum_are_refused_and_never_printed() {
        assert!(Secret::new(b"short").unwrap_err().contains("at least 16"));
        let s = secret(RIGHT);
        assert_eq!(format!("{s:?}"), format!("Secret({} bytes)", RIGHT.len()));
        assert_eq!(Secret::generate_hex().len(), 64);
        assert_ne!(Secret::generate_hex(), Secret::generate_hex());
    }
}
