//! The Linux system calls that send files: `preadv2` with `RWF_NOWAIT` (read a range only if
//! it is in the page cache), `cachestat` (is a range in the page cache?) and `sendfile` (from
//! a file to a socket without a copy through user space).
//!
//! They live here, beside neither of their users, because two layers need them: a
//! `FileBody` (`file_body.rs`) reads with the first two, and Brisk's own HTTP/1.1 writer
//! sends with the last two (`HttpIo` in `io.rs` calls [`sendfile`]). Each one that a kernel or a seccomp filter refuses is remembered, process
//! wide, and not tried again.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Cleared for good when the kernel has no `preadv2` (`ENOSYS`).
static PREADV2_EXISTS: AtomicBool = AtomicBool::new(true);

/// Whether `preadv2` is worth trying (the kernel did not say it has none).
pub(crate) fn preadv2_exists() -> bool {
    PREADV2_EXISTS.load(Relaxed)
}

/// `NowaitRead` (of `file_body`) for real: `preadv2` with `RWF_NOWAIT`, into `buf`'s spare
/// capacity (no zeroing first).
pub(crate) fn read_nowait(
    file: &std::fs::File,
    buf: &mut Vec<u8>,
    len: usize,
    pos: u64,
) -> io::Result<usize> {
    let offset = libc::off_t::try_from(pos).map_err(|_| io::ErrorKind::InvalidInput)?;
    buf.reserve(len);
    let spare = &mut buf.spare_capacity_mut()[..len];
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // SAFETY: `iov` describes `len` bytes of `buf`'s spare capacity, valid
    // for writes and not aliased while the call runs; the kernel writes at
    // most that many bytes and returns how many.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    let Ok(read) = usize::try_from(read) else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            PREADV2_EXISTS.store(false, Relaxed);
        }
        return Err(e);
    };
    // SAFETY: the kernel initialized the first `read <= len` bytes of the
    // spare capacity.
    unsafe { buf.set_len(buf.len() + read) };
    Ok(read)
}

/// `cachestat(2)` (Linux 6.5): the same number on every architecture, and
/// not in every `libc` release yet.
const SYS_CACHESTAT: libc::c_long = 451;

/// Cleared for good when `cachestat` is missing (`ENOSYS`) or forbidden
/// (`EPERM`, a seccomp filter).
static CACHESTAT_WORKS: AtomicBool = AtomicBool::new(true);

/// `struct cachestat_range` of `cachestat(2)`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `cachestat(2)`: page counts over the range.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// The page size, read once.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

/// `Resident` (of `file_body`) for real: `cachestat(2)` counts the range's pages that are in
/// the page cache; all of them must be. Anything unexpected is "not known".
pub(crate) fn in_page_cache(file: &std::fs::File, pos: u64, len: u64) -> bool {
    // A zero length would ask about the whole file.
    if len == 0 || !CACHESTAT_WORKS.load(Relaxed) {
        return false;
    }
    let range = CachestatRange { off: pos, len };
    let mut stat = Cachestat::default();
    // SAFETY: both structs have the kernel's layout and outlive the call,
    // which only reads `range` and writes `stat`.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd() as libc::c_uint,
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
            tracing::debug!(error = %e, "static file: cachestat refused, not using sendfile");
            CACHESTAT_WORKS.store(false, Relaxed);
        }
        return false;
    }
    let page = page_size();
    let Some(last) = pos.checked_add(len - 1) else {
        return false;
    };
    let pages = last / page - pos / page + 1;
    stat.nr_cache >= pages
}

/// Whether `cachestat` is worth trying (it was not refused as missing or forbidden).
#[cfg(test)]
pub(crate) fn cachestat_works() -> bool {
    CACHESTAT_WORKS.load(Relaxed)
}

/// `sendfile(2)`: up to `len` bytes of `file` from `*offset` to the socket `socket`,
/// advancing `*offset`; returns how many bytes went (0: the file ends at `*offset`).
/// `WouldBlock` when the socket is full. Reading the file may wait for the disk: callers
/// send only ranges [`in_page_cache`] just found in memory.
pub(crate) fn sendfile(
    socket: RawFd,
    file: &std::fs::File,
    offset: &mut u64,
    len: usize,
) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(*offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: both descriptors are open; `off` is a valid offset the kernel reads and
    // advances.
    let n = unsafe { libc::sendfile(socket, file.as_raw_fd(), &mut off, len) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    *offset += n as u64;
    Ok(n)
}
