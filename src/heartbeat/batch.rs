//! The beats' datagrams in and out by the batch. At 10,000 beats a second the system
//! calls cost more than the beats: on Linux one `recvmmsg` (waiting for the first,
//! then taking every one queued, up to [`BATCH`]) and one `sendmmsg` for their
//! acknowledgements replace two calls a datagram (`nix`'s safe wrappers). Elsewhere,
//! one `recv_from` and one `send_to` each. [`serve`] is the loop around them; it is
//! public so that `companions_at_scale` can measure the same loop with nothing behind
//! it (the floor: what any answerer of these datagrams costs on that machine).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Datagrams taken (and answered) per system call at most.
pub const BATCH: usize = 128;

/// The socket's receive buffer asked for: room for the beats that queue while the
/// loop lets them (the default, about 200 KiB, holds a few hundred; 5,000 companions
/// send 200 in 20 ms). The kernel grants at most `net.core.rmem_max` (doubled).
pub const RECEIVE_BUFFER: usize = 4 << 20;

/// How often an idle [`serve`] looks at its stop flag.
pub const STOP_CHECK: Duration = Duration::from_millis(200);

/// The datagrams of one batch, as [`serve`] hands them to its answerer.
pub struct Received<'a> {
    buffers: &'a Buffers,
    got: &'a [(usize, SocketAddr)],
}

impl Received<'_> {
    /// Each datagram's bytes and its sender, in the order they were queued.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> + '_ {
        self.got
            .iter()
            .enumerate()
            .map(|(i, (len, from))| (self.buffers.datagram(i, *len), *from))
    }
}

/// The answers to one batch: their bytes end to end in one buffer, kept from batch to
/// batch (no allocation an answer), and where each ends and goes.
#[derive(Debug, Default)]
pub struct Answers {
    bytes: Vec<u8>,
    ends: Vec<(usize, SocketAddr)>,
}

impl Answers {
    /// One answer to `to`: `answer` copied in.
    pub fn push(&mut self, answer: &[u8], to: SocketAddr) {
        self.bytes.extend_from_slice(answer);
        self.ends.push((self.bytes.len(), to));
    }

    /// One answer to `to`, written by `write` at the end of the buffer; none when it
    /// fails (whatever it wrote is taken back) or writes nothing.
    pub fn push_with<E>(
        &mut self,
        to: SocketAddr,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.bytes.len();
        match write(&mut self.bytes) {
            Ok(()) => {
                if self.bytes.len() > start {
                    self.ends.push((self.bytes.len(), to));
                }
                Ok(())
            }
            Err(e) => {
                self.bytes.truncate(start);
                Err(e)
            }
        }
    }

    /// Each answer and where it goes, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|(end, _)| *end));
        starts
            .zip(&self.ends)
            .map(|(start, (end, to))| (self.bytes.get(start..*end).unwrap_or_default(), *to))
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Empty, its room kept.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// Answers datagrams on `socket` (made blocking here) by the batch until `stop` is
/// set: waits for one (looking at `stop` every [`STOP_CHECK`]), takes every one
/// queued up to [`BATCH`], has `answer` push an answer and its destination for each
/// it answers, sends them, and unless the batch was full (more are queued: taken at
/// once) sleeps `coalesce` to let the next ones queue. An error only when the socket
/// cannot be set up; a datagram that cannot be read or answered is skipped (at debug
/// level).
pub fn serve(
    socket: &UdpSocket,
    coalesce: Duration,
    stop: &AtomicBool,
    mut answer: impl FnMut(Received<'_>, &mut Answers),
) -> io::Result<()> {
    socket.set_nonblocking(false)?;
    socket.set_read_timeout(Some(STOP_CHECK))?;
    match enlarge_receive_buffer(socket) {
        Ok(granted) => tracing::debug!(bytes = granted, "datagram socket receive buffer"),
        Err(e) => tracing::debug!(error = %e, "the socket's receive buffer stays as it was"),
    }
    if let Err(e) = never_fragment(socket) {
        tracing::debug!(error = %e, "the socket's path MTU discovery stays as it was");
    }
    let mut buffers = Buffers::new();
    let mut got: Vec<(usize, SocketAddr)> = Vec::with_capacity(BATCH);
    let mut answers = Answers::default();
    while !stop.load(Ordering::Relaxed) {
        // Every datagram queued, up to a batch, in one call; more are left queued for
        // the next turn, which comes at once.
        match receive(socket, &mut buffers, &mut got) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "datagram socket");
                continue;
            }
        }
        answer(
            Received {
                buffers: &buffers,
                got: &got,
            },
            &mut answers,
        );
        send(socket, &mut buffers, &answers);
        answers.clear();
        if got.len() < BATCH {
            std::thread::sleep(coalesce);
        }
    }
    Ok(())
}

/// Asks for [`RECEIVE_BUFFER`]; what the kernel granted.
#[cfg(target_os = "linux")]
pub fn enlarge_receive_buffer(socket: &UdpSocket) -> io::Result<usize> {
    use nix::sys::socket::{getsockopt, setsockopt, sockopt::RcvBuf};
    setsockopt(socket, RcvBuf, &RECEIVE_BUFFER)?;
    Ok(getsockopt(socket, RcvBuf)?)
}

/// Has an IPv4 socket send with DF set and never fragment (`IP_PMTUDISC_DO`). The
/// kernel then gives each datagram the IP id 0 instead of hashing one for it
/// (`__ip_select_ident`: a SipHash a datagram, 2–3 % of the beats' loop's samples at
/// 10,000 a second); an acknowledgement (82 bytes) never needs fragmenting. An IPv6
/// socket is left as it is (IPv6 has no id outside a fragment header).
#[cfg(target_os = "linux")]
pub fn never_fragment(socket: &UdpSocket) -> io::Result<()> {
    use rustix::net::sockopt::{Ipv4PathMtuDiscovery, set_ip_mtu_discover};
    if socket.local_addr()?.is_ipv4() {
        set_ip_mtu_discover(socket, Ipv4PathMtuDiscovery::DO)?;
    }
    Ok(())
}

/// Left as the system set it (elsewhere than Linux).
#[cfg(not(target_os = "linux"))]
pub fn never_fragment(_socket: &UdpSocket) -> io::Result<()> {
    Ok(())
}

/// Left as the system set it (elsewhere than Linux).
#[cfg(not(target_os = "linux"))]
pub fn enlarge_receive_buffer(_socket: &UdpSocket) -> io::Result<usize> {
    Ok(0)
}

/// Receive buffers for a batch: one byte more than any datagram, so a longer one is
/// seen as longer (and dropped).
pub struct Buffers {
    bufs: Vec<[u8; nodefence_watchdog::wire::MAX_DATAGRAM + 1]>,
    #[cfg(target_os = "linux")]
    recv: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
    #[cfg(target_os = "linux")]
    send: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
    /// The addresses of a `sendmmsg`, kept from call to call.
    #[cfg(target_os = "linux")]
    to: Vec<Option<nix::sys::socket::SockaddrStorage>>,
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

impl Buffers {
    pub fn new() -> Self {
        Self {
            bufs: vec![[0u8; nodefence_watchdog::wire::MAX_DATAGRAM + 1]; BATCH],
            #[cfg(target_os = "linux")]
            recv: nix::sys::socket::MultiHeaders::preallocate(BATCH, None),
            #[cfg(target_os = "linux")]
            send: nix::sys::socket::MultiHeaders::preallocate(BATCH, None),
            #[cfg(target_os = "linux")]
            to: Vec::with_capacity(BATCH),
        }
    }

    /// Datagram `i` of the last batch received, `len` bytes long.
    pub fn datagram(&self, i: usize, len: usize) -> &[u8] {
        self.bufs.get(i).map_or(&[][..], |b| &b[..len.min(b.len())])
    }
}

/// Waits for a datagram (up to the socket's read timeout: `WouldBlock` or `TimedOut`
/// then), and takes every one queued with it, up to [`BATCH`]: `(length, sender)`
/// each, in `got` (cleared first); their bytes are [`Buffers::datagram`].
#[cfg(target_os = "linux")]
pub fn receive(
    socket: &UdpSocket,
    buffers: &mut Buffers,
    got: &mut Vec<(usize, SocketAddr)>,
) -> io::Result<()> {
    use nix::sys::socket::{MsgFlags, SockaddrStorage, recvmmsg};
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;
    got.clear();
    let Buffers { bufs, recv, .. } = buffers;
    let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs
        .iter_mut()
        .map(|b| [IoSliceMut::new(&mut b[..])])
        .collect();
    let results = recvmmsg(
        socket.as_raw_fd(),
        recv,
        slices.iter_mut(),
        MsgFlags::MSG_WAITFORONE,
        None,
    )
    .map_err(io::Error::from)?;
    for r in results {
        let from = r.address.and_then(|a: SockaddrStorage| {
            if let Some(v4) = a.as_sockaddr_in() {
                Some(SocketAddr::V4((*v4).into()))
            } else {
                a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
            }
        });
        // A datagram from no address cannot be answered: dropped.
        if let Some(from) = from {
            got.push((r.bytes, from));
        }
    }
    Ok(())
}

/// Sends every answer, as few system calls as it takes; an answer that cannot be sent
/// is skipped (said at debug level: the companion beats again).
#[cfg(target_os = "linux")]
pub fn send(socket: &UdpSocket, buffers: &mut Buffers, answers: &Answers) {
    use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrStorage, sendmmsg};
    use std::io::IoSlice;
    use std::os::fd::AsRawFd;
    let Buffers { send, to, .. } = buffers;
    let all: Vec<(&[u8], SocketAddr)> = answers.iter().collect();
    let mut start = 0;
    while start < all.len() {
        let chunk = &all[start..all.len().min(start + BATCH)];
        let slices: Vec<[IoSlice<'_>; 1]> = chunk.iter().map(|(a, _)| [IoSlice::new(a)]).collect();
        to.clear();
        to.extend(
            chunk
                .iter()
                .map(|(_, addr)| Some(SockaddrStorage::from(*addr))),
        );
        let none: [ControlMessage<'_>; 0] = [];
        match sendmmsg(
            socket.as_raw_fd(),
            send,
            slices.iter(),
            &to[..],
            none,
            MsgFlags::empty(),
        ) {
            Ok(results) => {
                let sent = results.count();
                // The first one not sent failed: skip it.
                start += sent.max(1);
            }
            Err(e) => {
                tracing::debug!(error = %e, to = %chunk[0].1, "heartbeat socket");
                start += 1;
            }
        }
    }
}

/// One datagram, then every one already queued (elsewhere than Linux).
#[cfg(not(target_os = "linux"))]
pub fn receive(
    socket: &UdpSocket,
    buffers: &mut Buffers,
    got: &mut Vec<(usize, SocketAddr)>,
) -> io::Result<()> {
    got.clear();
    let first = socket.recv_from(&mut buffers.bufs[0])?;
    got.push(first);
    if socket.set_nonblocking(true).is_ok() {
        while got.len() < BATCH {
            match socket.recv_from(&mut buffers.bufs[got.len()]) {
                Ok(r) => got.push(r),
                Err(_) => break,
            }
        }
        let _ = socket.set_nonblocking(false);
    }
    Ok(())
}

/// Sends every answer, one call each (elsewhere than Linux).
#[cfg(not(target_os = "linux"))]
pub fn send(socket: &UdpSocket, _buffers: &mut Buffers, answers: &Answers) {
    for (answer, to) in answers.iter() {
        if let Err(e) = socket.send_to(answer, to) {
            tracing::debug!(error = %e, "heartbeat socket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_loop_hands_each_datagram_to_its_answerer_sends_what_it_answers_and_stops_when_told() {
        use std::sync::Arc;
        let server = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let to = server.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let looping = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                serve(
                    &server,
                    Duration::from_millis(5),
                    &stop,
                    |received, answers| {
                        // Answers the even-numbered ones, each with its byte doubled.
                        for (datagram, from) in received.iter() {
                            if datagram.first().is_some_and(|b| b % 2 == 0) {
                                let doubled: Vec<u8> = datagram.iter().map(|b| b * 2).collect();
                                answers.push(&doubled, from);
                            }
                        }
                    },
                )
            })
        };
        let clients: Vec<UdpSocket> = (0..4)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for (i, c) in clients.iter().enumerate() {
            c.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap_or_else(|e| panic!("{e}"));
            c.send_to(&[i as u8; 3], to)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for (i, c) in clients.iter().enumerate() {
            let mut b = [0u8; 8];
            match c.recv_from(&mut b) {
                Ok((n, from)) => {
                    assert_eq!(i % 2, 0, "datagram {i} was not to be answered");
                    assert_eq!((&b[..n], from), (&[2 * i as u8; 3][..], to));
                }
                Err(e) => assert_eq!(i % 2, 1, "datagram {i} unanswered: {e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let served = looping
            .join()
            .unwrap_or_else(|_| panic!("the loop panicked"));
        assert!(served.is_ok(), "{served:?}");
    }

    #[test]
    fn answers_keep_their_order_and_bytes_and_a_failed_or_empty_one_leaves_nothing() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.0.0.1:1".parse().unwrap_or_else(|e| panic!("{e}")),
            "10.0.0.2:2".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        let mut answers = Answers::default();
        answers.push(b"one", a);
        let failed = answers.push_with(b, |out| {
            out.extend_from_slice(b"half written");
            Err("refused")
        });
        assert_eq!(failed, Err("refused"));
        assert_eq!(answers.push_with(b, |_| Ok::<(), ()>(())), Ok(()));
        assert_eq!(
            answers.push_with(b, |out| {
                out.extend_from_slice(b"two");
                Ok::<(), ()>(())
            }),
            Ok(())
        );
        answers.push(b"", a);
        answers.push(b"three", a);
        let all: Vec<(&[u8], SocketAddr)> = answers.iter().collect();
        assert_eq!(
            all,
            [
                (&b"one"[..], a),
                (&b"two"[..], b),
                (&b""[..], a),
                (&b"three"[..], a)
            ]
        );
        assert_eq!(answers.len(), 4);
        answers.clear();
        assert!(answers.is_empty() && answers.iter().next().is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_receive_buffer_grows_as_far_as_the_kernel_allows() {
        use nix::sys::socket::{getsockopt, sockopt::RcvBuf};
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let before = getsockopt(&socket, RcvBuf).unwrap_or_else(|e| panic!("{e}"));
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let granted = enlarge_receive_buffer(&socket).unwrap_or_else(|e| panic!("{e}"));
        // Linux doubles what it grants (for its bookkeeping), up to rmem_max.
        assert_eq!(granted, 2 * RECEIVE_BUFFER.min(max), "before: {before}");
        assert_eq!(getsockopt(&socket, RcvBuf).ok(), Some(granted));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_ipv4_socket_sends_unfragmented_and_an_ipv6_one_is_left_as_it_was() {
        use rustix::net::sockopt::{Ipv4PathMtuDiscovery, ip_mtu_discover};
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(
            ip_mtu_discover(&v4).ok(),
            Some(Ipv4PathMtuDiscovery::DO),
            "already so before"
        );
        never_fragment(&v4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ip_mtu_discover(&v4).ok(), Some(Ipv4PathMtuDiscovery::DO));
        // Still answers on it (82 bytes: no path needs them fragmented).
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let to = peer.local_addr().unwrap_or_else(|e| panic!("{e}"));
        v4.send_to(&[7u8; 82], to).unwrap_or_else(|e| panic!("{e}"));
        peer.set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut b = [0u8; 128];
        assert_eq!(peer.recv(&mut b).ok(), Some(82));
        if let Ok(v6) = UdpSocket::bind("[::1]:0") {
            assert!(never_fragment(&v6).is_ok());
        }
    }

    #[test]
    fn a_batch_is_taken_in_one_go_answered_to_each_sender_and_an_oversized_one_is_seen_as_such() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        server
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap_or_else(|e| panic!("{e}"));
        let to = server.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let clients: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for (i, c) in clients.iter().enumerate() {
            c.send_to(&[i as u8; 10], to)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        clients[0]
            .send_to(&[9u8; 1000], to)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut buffers = Buffers::new();
        let mut got = Vec::new();
        // Every one queued, in one call (they are all queued on the loopback by now).
        std::thread::sleep(Duration::from_millis(50));
        receive(&server, &mut buffers, &mut got).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.len(), 4, "{got:?}");
        for (i, c) in clients.iter().enumerate() {
            assert_eq!(got[i].1, c.local_addr().unwrap_or_else(|e| panic!("{e}")));
            assert_eq!(buffers.datagram(i, got[i].0), &[i as u8; 10]);
        }
        assert_eq!(
            got[3].0,
            nodefence_watchdog::wire::MAX_DATAGRAM + 1,
            "cut one byte past any datagram: seen as too long"
        );
        // Nothing more: the read timeout.
        let idle =
            receive(&server, &mut buffers, &mut got).expect_err("nothing queued: the read timeout");
        assert!(matches!(
            idle.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ));
        // Each answer to its sender.
        let mut answers = Answers::default();
        for (i, c) in clients.iter().enumerate() {
            let to = c.local_addr().unwrap_or_else(|e| panic!("{e}"));
            answers.push(&vec![100 + i as u8; 5 + i], to);
        }
        send(&server, &mut buffers, &answers);
        for (i, c) in clients.iter().enumerate() {
            c.set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap_or_else(|e| panic!("{e}"));
            let mut b = [0u8; 16];
            let (n, from) = c.recv_from(&mut b).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((&b[..n], from), (&vec![100 + i as u8; 5 + i][..], to));
        }
    }
}
