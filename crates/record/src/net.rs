//! UDP as a recorder needs it: a socket with a large receive buffer (and a report when the kernel caps it),
//! batched receives and sends (`recvmmsg`/`sendmmsg`, one system call for up to [`BATCH_MAX`] datagrams), the
//! socket's own drop counter (`SO_RXQ_OVFL`: datagrams the kernel dropped because this socket's buffer was
//! full) and the system-wide UDP counters of `/proc/net/snmp`.
//!
//! The crate's unsafe code is here (but for one `getrusage` in `floor.rs`): building `mmsghdr` arrays that point into caller buffers for the
//! duration of one call, and reading the drop counter from a control message.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

/// Datagrams per `recvmmsg`/`sendmmsg` call at most.
pub const BATCH_MAX: usize = 64;
/// How long a receive waits for the first datagram before it returns (so stop requests are seen).
pub const RECEIVE_WAIT_MS: u64 = 100;
/// Control bytes per datagram: room for the `SO_RXQ_OVFL` message (a `u32`), aligned.
const CONTROL_BYTES: usize = 64;

/// What the kernel granted for the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RcvbufReport {
    pub requested_bytes: u64,
    /// What `SO_RCVBUF` reads back (Linux doubles the request for its bookkeeping, then caps it at twice
    /// `net.core.rmem_max`).
    pub granted_bytes: u64,
    /// `net.core.rmem_max`, when readable.
    pub rmem_max_bytes: Option<u64>,
    /// The kernel gave less than requested.
    pub capped: bool,
}

impl RcvbufReport {
    /// One line for the log: what was granted, and what the operator can do when it was capped.
    pub fn describe(&self) -> String {
        if self.capped {
            format!(
                "receive buffer capped by the kernel at {} bytes of the {} requested (net.core.rmem_max = {}); \
                 to allow it: sysctl -w net.core.rmem_max={}",
                self.granted_bytes / 2,
                self.requested_bytes,
                self.rmem_max_bytes.map_or("unknown".into(), |b| b.to_string()),
                self.requested_bytes
            )
        } else {
            format!("receive buffer of {} bytes", self.requested_bytes)
        }
    }
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `net.core.rmem_max`.
pub fn rmem_max() -> Option<u64> {
    read_number("/proc/sys/net/core/rmem_max")
}

/// The system-wide UDP counters of `/proc/net/snmp` that tell of drops: `(RcvbufErrors, InErrors)`.
pub fn udp_drop_counters() -> Option<(u64, u64)> {
    parse_snmp_udp(&std::fs::read_to_string("/proc/net/snmp").ok()?)
}

fn parse_snmp_udp(text: &str) -> Option<(u64, u64)> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |name: &str| -> Option<u64> {
        let i = names.iter().position(|n| *n == name)?;
        values.get(i)?.parse().ok()
    };
    Some((get("RcvbufErrors")?, get("InErrors")?))
}

/// Errors of socket setup, each naming the address.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("UDP port {port} is in use (another recorder or program receives on it)")]
    PortInUse { port: u16 },
    #[error("cannot receive on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: io::Error,
    },
    #[error("cannot set up the socket for {address}: {source}")]
    Setup {
        address: SocketAddr,
        source: io::Error,
    },
}

/// A UDP socket bound to `address` (no address reuse: a second recorder on the port is refused) with a
/// receive buffer of `rcvbuf_bytes` as far as the kernel allows, its drop counter on, and receives that wait
/// at most [`RECEIVE_WAIT_MS`].
pub fn bind_receiver(
    address: SocketAddr,
    rcvbuf_bytes: usize,
) -> Result<(UdpSocket, RcvbufReport), NetError> {
    let setup = |source| NetError::Setup { address, source };
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(setup)?;
    socket.set_recv_buffer_size(rcvbuf_bytes).map_err(setup)?;
    let granted = socket.recv_buffer_size().map_err(setup)? as u64;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(setup(io::Error::last_os_error()));
    }
    socket
        .set_read_timeout(Some(Duration::from_millis(RECEIVE_WAIT_MS)))
        .map_err(setup)?;
    socket.bind(&address.into()).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            NetError::PortInUse {
                port: address.port(),
            }
        } else {
            NetError::Bind { address, source }
        }
    })?;
    let report = RcvbufReport {
        requested_bytes: rcvbuf_bytes as u64,
        granted_bytes: granted,
        rmem_max_bytes: rmem_max(),
        capped: granted < 2 * rcvbuf_bytes as u64,
    };
    Ok((socket.into(), report))
}

/// One received datagram of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Bytes received (at most the stride).
    pub len: usize,
    /// The datagram was longer than the stride and was cut (`MSG_TRUNC`).
    pub truncated: bool,
}

/// Batched receives on one socket, with the socket's drop counter.
pub struct BatchReceiver {
    socket: UdpSocket,
    control: Vec<u64>,
    /// `SO_RXQ_OVFL`: datagrams the kernel dropped on this socket so far (as last reported).
    kernel_drops: u64,
}

impl BatchReceiver {
    pub fn new(socket: UdpSocket) -> BatchReceiver {
        BatchReceiver {
            socket,
            control: vec![0u64; BATCH_MAX * CONTROL_BYTES / 8],
            kernel_drops: 0,
        }
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Datagrams this socket's full buffer made the kernel drop, as of the last receive.
    pub fn kernel_drops(&self) -> u64 {
        self.kernel_drops
    }

    /// Receive up to `buf.len() / stride` (at most [`BATCH_MAX`]) datagrams, datagram `i` into
    /// `buf[i * stride ..]`. Waits at most [`RECEIVE_WAIT_MS`] for the first; returns the datagrams received
    /// (none after the wait).
    pub fn receive(
        &mut self,
        buf: &mut [u8],
        stride: usize,
        out: &mut Vec<Datagram>,
    ) -> io::Result<()> {
        out.clear();
        let count = (buf.len() / stride).min(BATCH_MAX);
        if count == 0 {
            return Ok(());
        }
        let mut iovecs: Vec<libc::iovec> = buf
            .chunks_exact_mut(stride)
            .take(count)
            .map(|datagram| libc::iovec {
                iov_base: datagram.as_mut_ptr().cast(),
                iov_len: stride,
            })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = iovecs
            .iter_mut()
            .zip(self.control.chunks_exact_mut(CONTROL_BYTES / 8))
            .map(|(iovec, control)| {
                // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_iov = iovec;
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = control.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = CONTROL_BYTES as _;
                h
            })
            .collect();
        // SAFETY: every header points at an iovec of `iovecs` and a control area of `self.control`, each
        // iovec at `stride` bytes of `buf`; all outlive the call, which writes only into them.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(()),
                _ => Err(e),
            };
        }
        for h in &headers[..n as usize] {
            out.push(Datagram {
                len: h.msg_len as usize,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            });
            if let Some(drops) = rxq_overflow(&h.msg_hdr) {
                self.kernel_drops = self.kernel_drops.max(drops as u64);
            }
        }
        drop(iovecs);
        Ok(())
    }

    /// The length of the next datagram (`MSG_PEEK | MSG_TRUNC`) and its first bytes, without taking it;
    /// `None` after [`RECEIVE_WAIT_MS`] without one.
    pub fn peek(&mut self, head: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: recv writes at most head.len() bytes into head.
        let n = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                head.as_mut_ptr() as *mut libc::c_void,
                head.len(),
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(n as usize))
    }

    /// Take and discard the next datagram.
    pub fn discard(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        match self.socket.recv(&mut byte) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The `SO_RXQ_OVFL` counter of a received message, if it carries one.
fn rxq_overflow(header: &libc::msghdr) -> Option<u32> {
    if header.msg_controllen == 0 || header.msg_control.is_null() {
        return None;
    }
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of cmsg records; CMSG_* walk them within
    // those bounds and the data of an SO_RXQ_OVFL record is a u32 (read unaligned).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const u32));
            }
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    None
}

/// Batched sends of equal-sized datagrams to one address.
pub struct BatchSender {
    socket: UdpSocket,
}

impl BatchSender {
    /// A socket connected to `target` with a large send buffer.
    pub fn connect(target: SocketAddr) -> io::Result<BatchSender> {
        let local: SocketAddr = if target.is_ipv4() {
            "0.0.0.0:0".parse().expect("address")
        } else {
            "[::]:0".parse().expect("address")
        };
        let socket = Socket::new(
            Domain::for_address(target),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        let _ = socket.set_send_buffer_size(8 << 20);
        socket.bind(&local.into())?;
        socket.connect(&target.into())?;
        Ok(BatchSender {
            socket: socket.into(),
        })
    }

    /// Send the datagrams `buf[i * stride .. (i + 1) * stride]`, `i < count`. Returns how many were sent
    /// (all; datagrams nobody receives are sent all the same).
    ///
    /// # Panics
    /// If `buf` is shorter than `count * stride` (a caller bug).
    pub fn send(&self, buf: &[u8], stride: usize, count: usize) -> io::Result<usize> {
        let mut sent = 0;
        while sent < count {
            let n = (count - sent).min(BATCH_MAX);
            // Slicing, not pointer arithmetic: a `buf` shorter than `count * stride` panics here instead of
            // handing the kernel addresses past its end.
            let mut iovecs: Vec<libc::iovec> = (sent..sent + n)
                .map(|i| libc::iovec {
                    iov_base: buf[i * stride..(i + 1) * stride].as_ptr() as *mut libc::c_void,
                    iov_len: stride,
                })
                .collect();
            let mut headers: Vec<libc::mmsghdr> = iovecs
                .iter_mut()
                .map(|iovec| {
                    // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
                    let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    h.msg_hdr.msg_iov = iovec;
                    h.msg_hdr.msg_iovlen = 1;
                    h
                })
                .collect();
            // SAFETY: the headers point at iovecs over `buf` (read only by the kernel) that outlive the call.
            let r = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    headers.as_mut_ptr(),
                    n as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                // ECONNREFUSED reports an earlier datagram nobody received (no receiver yet): a sender streams
                // on regardless, as a telescope does; the error is cleared by reporting it.
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::ConnectionRefused
                ) {
                    continue;
                }
                return Err(e);
            }
            sent += r as usize;
            drop(iovecs);
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_udp_counters_are_found_by_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 100 2 7 90 5 0\nUdpLite: InDatagrams\nUdpLite: 0\n";
        assert_eq!(parse_snmp_udp(text), Some((5, 7)));
        assert!(
            udp_drop_counters().is_some(),
            "this kernel has /proc/net/snmp"
        );
    }

    #[test]
    fn a_second_receiver_on_a_port_is_refused_by_name() {
        let (first, _) = bind_receiver("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        let address = first.local_addr().unwrap();
        let err = bind_receiver(address, 1 << 20).unwrap_err();
        assert!(
            matches!(err, NetError::PortInUse { port } if port == address.port()),
            "{err}"
        );
        assert!(err.to_string().contains("in use"), "{err}");
    }

    #[test]
    fn batches_arrive_whole_and_oversize_datagrams_are_flagged() {
        let (socket, report) = bind_receiver("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        assert!(report.granted_bytes > 0);
        let address = socket.local_addr().unwrap();
        let mut receiver = BatchReceiver::new(socket);
        let sender = BatchSender::connect(address).unwrap();
        let data: Vec<u8> = (0..10 * 100).map(|i| (i % 251) as u8).collect();
        assert_eq!(sender.send(&data, 100, 10).unwrap(), 10);
        let mut buf = vec![0u8; 64 * 100];
        let mut got = Vec::new();
        let mut total = 0;
        while total < 10 {
            receiver
                .receive(&mut buf[total * 100..], 100, &mut got)
                .unwrap();
            assert!(got.iter().all(|d| d.len == 100 && !d.truncated));
            total += got.len();
        }
        assert_eq!(&buf[..1000], &data[..]);
        // A datagram longer than the stride is cut and flagged.
        assert_eq!(sender.send(&data, 150, 1).unwrap(), 1);
        loop {
            receiver.receive(&mut buf, 100, &mut got).unwrap();
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(
            got[0],
            Datagram {
                len: 100,
                truncated: true
            }
        );
        assert_eq!(receiver.kernel_drops(), 0);
    }
}
