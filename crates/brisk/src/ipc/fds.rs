//! Descriptors between processes: one `SOCK_SEQPACKET` message carries some bytes and up to
//! [`MAX_FDS`] descriptors (`SCM_RIGHTS`). `upgrade` hands its listeners over with it; the
//! WebSocket handover (`docs/design/ws-handover.md`) is to carry connections with it.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

/// The most descriptors one message carries (the kernel's `SCM_MAX_FD` is 253).
pub(crate) const MAX_FDS: usize = 250;

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec: each message keeps its
/// bounds, and its descriptors arrive with it.
pub(crate) fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

/// Sends `bytes` (not empty) and `fds` (at most [`MAX_FDS`]) as one message on `socket`.
/// The descriptors stay open here too: the kernel duplicates them into the receiver.
pub(crate) fn send_fds(socket: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    send(socket, bytes, fds, MsgFlags::empty())
}

/// [`send_fds`] without waiting: [`std::io::ErrorKind::WouldBlock`] at once if the
/// receiver's queue is full.
pub(crate) fn send_fds_now(socket: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    send(socket, bytes, fds, MsgFlags::MSG_DONTWAIT)
}

fn send(socket: &OwnedFd, bytes: &[u8], fds: &[RawFd], flags: MsgFlags) -> std::io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::other(format!(
            "{} descriptors in one message, at most {MAX_FDS} can be",
            fds.len()
        )));
    }
    if bytes.is_empty() {
        // An empty message reads as the peer's end of stream.
        return Err(std::io::Error::other("a message needs at least one byte"));
    }
    let rights = [ControlMessage::ScmRights(fds)];
    let rights: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    loop {
        let sent = sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(bytes)],
            rights,
            MsgFlags::MSG_NOSIGNAL | flags,
            None,
        );
        match sent {
            // A signal came first: nothing was sent.
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map(drop).map_err(Into::into),
        }
    }
}

/// Receives one message of at most `max_bytes` and its descriptors (close-on-exec). A
/// message that was cut short (longer than `max_bytes`, or its descriptors past
/// [`MAX_FDS`]) or empty (the peer closed) is an error; a socket with a receive timeout
/// that passes fails with [`std::io::ErrorKind::WouldBlock`].
pub(crate) fn recv_fds(
    socket: &OwnedFd,
    max_bytes: usize,
) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    receive(socket, max_bytes, MsgFlags::empty())
}

/// [`recv_fds`] for a message that must be there already (its sender said so on another
/// channel): [`std::io::ErrorKind::WouldBlock`] at once if it is not, instead of waiting.
pub(crate) fn recv_fds_now(
    socket: &OwnedFd,
    max_bytes: usize,
) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    receive(socket, max_bytes, MsgFlags::MSG_DONTWAIT)
}

fn receive(
    socket: &OwnedFd,
    max_bytes: usize,
    flags: MsgFlags,
) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; max_bytes];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = loop {
        let received = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC | flags,
        );
        match received {
            // A signal came first: nothing was taken.
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        // nix will not list the descriptors of a cut message, but those that fit are open
        // in this process now: close them, or each such message leaks up to MAX_FDS.
        close_cut_rights(&space);
        return Err(std::io::Error::other(
            "a message carried more descriptors than can be received",
        ));
    }
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(list) = c {
            // SAFETY: the kernel just installed these descriptors in this process for us.
            fds.extend(
                list.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(std::io::Error::other(format!(
            "a message longer than {max_bytes} bytes was cut short"
        )));
    }
    let len = msg.bytes;
    if len == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the peer closed the socket",
        ));
    }
    buf.truncate(len);
    Ok((buf, fds))
}

/// Closes the descriptors of the one `SCM_RIGHTS` header a cut message left at the start of
/// `space` (its length counts only those that fit).
fn close_cut_rights(space: &[u8]) {
    let head = std::mem::size_of::<libc::cmsghdr>();
    if space.len() < head {
        return;
    }
    // SAFETY: `space` holds at least one header; it may be unaligned for it.
    let header: libc::cmsghdr =
        unsafe { std::ptr::read_unaligned(space.as_ptr().cast::<libc::cmsghdr>()) };
    if header.cmsg_level != libc::SOL_SOCKET || header.cmsg_type != libc::SCM_RIGHTS {
        return;
    }
    // SAFETY: CMSG_LEN only computes a length.
    let data_at = unsafe { libc::CMSG_LEN(0) } as usize;
    let end = (header.cmsg_len as usize).min(space.len());
    for fd in space.get(data_at..end).unwrap_or_default().chunks_exact(4) {
        let fd = RawFd::from_ne_bytes([fd[0], fd[1], fd[2], fd[3]]);
        // SAFETY: the kernel installed this descriptor in this process for us, and nothing
        // else knows its number.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Read, Seek, Write};
    use std::os::unix::net::UnixStream;

    /// A signal that interrupts a receive that waits (`EINTR`, its handler installed
    /// without `SA_RESTART`) does not fail it: the message sent afterwards arrives.
    #[test]
    fn a_signal_does_not_fail_a_receive_that_waits() {
        extern "C" fn noted(_: libc::c_int) {}
        let signal = libc::SIGRTMIN() + 7;
        // SAFETY: a handler that does nothing, for a real-time signal no other code uses.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = noted as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
        }
        let (a, b) = seqpacket_pair().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
            recv_fds(&b, 64)
        });
        let tid = tid_rx.recv().unwrap();
        // Interrupt it (a few times: it may not be waiting in recvmsg yet), then send.
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            // SAFETY: the thread is alive until `recv_fds` returns, after the send below.
            assert_eq!(unsafe { libc::pthread_kill(tid, signal) }, 0);
        }
        // (Without the retry the receive has failed and closed its end: the send fails too.)
        let sent = send_fds(&a, b"after the signal", &[]);
        let (bytes, fds) = receiver.join().unwrap().expect("the receive goes on");
        sent.unwrap();
        assert_eq!((bytes.as_slice(), fds.len()), (&b"after the signal"[..], 0));
    }

    #[test]
    fn a_message_carries_bytes_and_working_descriptors() {
        let (a, b) = seqpacket_pair().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"the file").unwrap();
        send_fds(&a, b"header", &[theirs.as_raw_fd(), file.as_raw_fd()]).unwrap();
        drop((theirs, file));

        let (bytes, mut fds) = recv_fds(&b, 64).unwrap();
        assert_eq!(bytes, b"header");
        assert_eq!(fds.len(), 2);
        // Both arrived open: the file with its offset shared, the socket connected.
        let mut file = File::from(fds.pop().unwrap());
        file.rewind().unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "the file");
        let mut received = UnixStream::from(fds.pop().unwrap());
        received.write_all(b"through").unwrap();
        let mut got = [0u8; 7];
        (&ours).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"through");
    }

    fn open_descriptors() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn too_many_descriptors_or_too_long_a_message_is_an_error() {
        let (a, b) = seqpacket_pair().unwrap();
        let many = vec![b.as_raw_fd(); MAX_FDS + 1];
        let err = send_fds(&a, b"x", &many).unwrap_err();
        assert!(
            err.to_string().contains(&format!("at most {MAX_FDS}")),
            "{err}"
        );
        assert!(send_fds(&a, b"", &[]).is_err());

        send_fds(&a, b"longer than eight bytes", &[]).unwrap();
        let err = recv_fds(&b, 8).unwrap_err();
        assert!(err.to_string().contains("cut short"), "{err}");

        // More than fit in the receiver's space (another sender, not `send_fds`): refused,
        // not some of them silently dropped.
        // (Not copies of `a`: those left open here would keep its peer from seeing it closed.)
        let file = tempfile::tempfile().unwrap();
        let over = vec![file.as_raw_fd(); MAX_FDS + 3];
        sendmsg::<()>(
            a.as_raw_fd(),
            &[IoSlice::new(b"x")],
            &[ControlMessage::ScmRights(&over)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let open_before = open_descriptors();
        let err = recv_fds(&b, 8).unwrap_err();
        assert!(err.to_string().contains("more descriptors"), "{err}");
        // The 250 that fit were closed again (other tests of this process may open or
        // close a few meanwhile; a leak would be 250).
        let open_after = open_descriptors();
        assert!(
            open_after < open_before + 50,
            "{open_before} descriptors open before, {open_after} after"
        );

        // The peer gone: an end of stream, not an empty message.
        drop(a);
        let err = recv_fds(&b, 8).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
