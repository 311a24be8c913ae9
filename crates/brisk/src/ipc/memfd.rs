//! Bytes too large for one `SOCK_SEQPACKET` message go between processes in a sealed memfd:
//! an anonymous file written once, then sealed so that no process can change, grow or shrink
//! it, and passed as a descriptor ([`super::fds`]). The reader checks the seals, so what it
//! reads is what the writer wrote, even from a process it does not trust to stay still.

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The seals a reader requires: no write, no size change, no further seal change.
const SEALS: libc::c_int =
    libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;

/// A new memfd named `name` (shown in `/proc/PID/fd`) holding `parts` one after the other,
/// sealed.
pub(crate) fn sealed(name: &CStr, parts: &[&[u8]]) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string; the flags are memfd_create's.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor, owned by nothing else.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    for part in parts {
        file.write_all(part)?;
    }
    // SAFETY: fcntl on a descriptor this function owns.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

/// All the bytes of a memfd made by [`sealed`]; an error if it is not sealed as that seals
/// it, or longer than `max` bytes.
pub(crate) fn read_sealed(fd: OwnedFd, max: u64) -> std::io::Result<Vec<u8>> {
    // SAFETY: fcntl on a descriptor this function owns.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::other(format!("not a sealed memfd: {e}")));
    }
    if seals & SEALS != SEALS {
        return Err(std::io::Error::other(
            "a memfd that is not sealed against writes could change as it is read",
        ));
    }
    let mut file = File::from(fd);
    let len = file.metadata()?.len();
    if len > max {
        return Err(std::io::Error::other(format!(
            "a memfd of {len} bytes, more than the {max} expected"
        )));
    }
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back_and_cannot_change() {
        let fd = sealed(c"brisk-test", &[b"one ", b"", b"two"]).unwrap();
        let copy = fd.try_clone().unwrap();
        // No process can write to it any more.
        let mut file = File::from(copy);
        assert!(file.write_all(b"x").is_err());
        assert!(file.set_len(1).is_err());
        assert_eq!(read_sealed(fd, 100).unwrap(), b"one two");
    }

    #[test]
    fn unsealed_or_oversized_memfds_are_refused() {
        let fd = sealed(c"brisk-test", &[&[7u8; 100]]).unwrap();
        let err = read_sealed(fd, 99).unwrap_err();
        assert!(err.to_string().contains("more than the 99"), "{err}");
        // An ordinary file, and a memfd whose seals still allow writes.
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"data").unwrap();
        let err = read_sealed(file.into(), 100).unwrap_err();
        assert!(err.to_string().contains("not a sealed memfd"), "{err}");
        // SAFETY: a valid C string and memfd_create's flags.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: memfd_create just returned it.
        let unsealed = unsafe { OwnedFd::from_raw_fd(fd) };
        let err = read_sealed(unsealed, 100).unwrap_err();
        assert!(err.to_string().contains("could change"), "{err}");
    }
}
