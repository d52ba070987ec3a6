//! What `lease run`'s link between `lease`, its guard and the command takes from the system, in
//! one place (issue 34; `docs/platforms.md` item 3). Linux keeps its own calls; macOS and
//! FreeBSD take the portable paths below, and so does Linux with the `portable-paths` test
//! feature, so that Linux's tests hold those paths to the same promise: the command never
//! outlives its lease.
//!
//! | need | Linux | macOS, FreeBSD (and `portable-paths`) |
//! |---|---|---|
//! | `lease` started again | `/proc/self/exe` | [`std::env::current_exe`] |
//! | the guard learns that `lease` died | `PR_SET_PDEATHSIG` | kqueue `EVFILT_PROC`/`NOTE_EXIT` on `lease`'s pid (macOS, FreeBSD) and the guard's `getppid` poll; on files `lease hold-lock` reads the parent link's end-of-file and kills the group, the guard with it |
//! | `lease exec` (`--foreground`) dies with `lease` | `PR_SET_PDEATHSIG` (SIGKILL) | refused: nothing of `lease` watches after the `exec` |
//! | the guard's own copy of the inherited link | reopens `/proc/self/fd/N` | a FIFO in the run's private relay directory, opened by path |
//!
//! The other choices live beside their use: the group's liveness without `/proc` in `run.rs`
//! (`group_alive`), the relay's clock in `relay.rs`, stop detection in `terminal.rs`.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

/// Whether this build takes Linux's own calls (true) or the portable paths (false).
pub(crate) const LINUX_CALLS: bool =
    cfg!(all(target_os = "linux", not(feature = "portable-paths")));

/// Why `--foreground` is refused where [`LINUX_CALLS`] is false.
pub(crate) const NO_FOREGROUND: &str = "--foreground is not available on this system: `lease \
     exec` replaces itself with the command, and only Linux's parent-death signal \
     (PR_SET_PDEATHSIG) then kills the command when `lease` dies; here nothing would, and the \
     command could outlive its lease. Run without --foreground (the command gets its own process \
     group, watched by a guard)";

/// The name of the parent link's FIFO in the run's relay directory (portable paths).
const LINK_FIFO: &str = "link";

/// The program `lease run` and its guard start again (`lease guard`, `lease exec`, `lease
/// hold-lock`): this very binary.
pub(crate) fn own_program() -> std::io::Result<PathBuf> {
    if LINUX_CALLS {
        // The running image itself, even if the file was replaced or removed since.
        Ok(PathBuf::from("/proc/self/exe"))
    } else {
        // `_NSGetExecutablePath` on macOS, `sysctl(KERN_PROC_PATHNAME)` on FreeBSD: the path
        // this binary was started from.
        std::env::current_exe()
    }
}

/// The parent link (see `hold.rs`): its writing end, which only `lease run` holds
/// (close-on-exec), and its reading end, for the guard to inherit. On Linux an anonymous pipe
/// (the guard reopens the end it inherits through `/proc/self/fd`); on the portable paths a
/// FIFO named [`LINK_FIFO`] in `relay_dir`, the run's private (0700) directory, which the guard
/// opens by path (see [`open_link`]); the inherited end only keeps a reader until then.
pub(crate) fn link_pipe(relay_dir: &Path) -> std::io::Result<(File, OwnedFd)> {
    if LINUX_CALLS {
        let (reader, writer) = std::io::pipe()?;
        return Ok((File::from(OwnedFd::from(writer)), reader.into()));
    }
    let fifo = relay_dir.join(LINK_FIFO);
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )?;
    // A reader first (a non-blocking open for reading returns at once), so that opening the
    // writer does not block waiting for one.
    let reader = open_reader(&fifo)?;
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo)?;
    Ok((writer, reader.into()))
}

/// Opens the FIFO at `path` for reading without waiting for a writer, then makes reads block:
/// a read returns end-of-file once no writer is left, at once if `lease run` is gone already.
fn open_reader(path: &Path) -> std::io::Result<File> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)?;
    fcntl(&file, FcntlArg::F_SETFL(OFlag::empty()))?;
    Ok(file)
}

/// In the guard: the parent link's read end as a file of its own, from the inherited
/// descriptor `fd` (Linux: `/proc/self/fd/N`, since adopting an inherited descriptor number
/// needs `unsafe`) or from the FIFO beside `deadline_file` (portable paths: macOS's `/dev/fd/N`
/// would do, but FreeBSD's reaches 0 to 2 only unless `fdescfs` is mounted). A pipe's
/// end-of-file comes once no writer is left, however many readers there are.
pub(crate) fn open_link(fd: i32, deadline_file: Option<&Path>) -> std::io::Result<File> {
    if LINUX_CALLS {
        return File::open(format!("/proc/self/fd/{fd}"));
    }
    let dir = deadline_file.and_then(Path::parent).ok_or_else(|| {
        std::io::Error::other("the parent link needs the deadline relay's directory")
    })?;
    open_reader(&dir.join(LINK_FIFO))
}

/// Set once a watcher of [`watch_parent`] saw `lease` die.
static PARENT_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a watcher of [`watch_parent`] saw `lease` die (always false on Linux, where the
/// kernel's signal and `getppid` tell).
pub(crate) fn parent_gone() -> bool {
    PARENT_GONE.load(std::sync::atomic::Ordering::SeqCst)
}

/// The watchers' report: `lease` is gone; `signal` (the one the guard waits on) wakes the guard.
#[cfg_attr(
    not(any(target_os = "macos", target_os = "freebsd")),
    allow(
        dead_code,
        reason = "only the kqueue watch of macOS and FreeBSD reports"
    )
)]
fn report_parent_gone(signal: Signal) {
    PARENT_GONE.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Err(error) = nix::sys::signal::raise(signal) {
        tracing::debug!(%error, "cannot wake the guard");
    }
}

/// In the guard, before it checks that `lease` (`parent`) is still its parent: makes sure it
/// hears of `lease`'s death with `signal`. Linux: the kernel's parent-death signal. macOS and
/// FreeBSD: a thread waiting on kqueue for `lease`'s exit, which then sets [`parent_gone`] and
/// raises `signal`. The portable paths on Linux have neither; there, as everywhere, the guard's
/// `getppid` poll tells within its interval. On files `lease hold-lock` also hears of the death
/// from the parent link's end-of-file and kills the group, the guard with it. (The guard does
/// not read the link itself: the byte that says `lease` ended on its own terms must reach the
/// holder, and a FIFO gives each byte to one reader only.)
pub(crate) fn watch_parent(parent: i32, signal: Signal) -> Result<(), String> {
    if LINUX_CALLS {
        return arm_parent_death_signal(signal);
    }
    watch_exit(parent, signal)
}

#[cfg(target_os = "linux")]
fn arm_parent_death_signal(signal: Signal) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(signal).map_err(|e| e.to_string())
}

#[cfg(not(target_os = "linux"))]
fn arm_parent_death_signal(_signal: Signal) -> Result<(), String> {
    Err("no parent-death signal on this system".to_owned())
}

/// kqueue's `EVFILT_PROC` with `NOTE_EXIT` on `parent` (kqueue(2) on macOS and FreeBSD), in a
/// thread. Registering for a process that is gone already fails (`ESRCH`), which reads as its
/// death; a `parent` that is no longer this process's parent by then (its pid reused) is gone
/// too.
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
fn watch_exit(parent: i32, signal: Signal) -> Result<(), String> {
    use nix::sys::event::{EvFlags, EventFilter, FilterFlag, KEvent, Kqueue};
    let queue = Kqueue::new().map_err(|e| format!("kqueue: {e}"))?;
    let ident = usize::try_from(parent).map_err(|e| e.to_string())?;
    let event = KEvent::new(
        ident,
        EventFilter::EVFILT_PROC,
        EvFlags::EV_ADD | EvFlags::EV_ONESHOT,
        FilterFlag::NOTE_EXIT,
        0,
        0,
    );
    let registered = queue.kevent(&[event], &mut [], None);
    if registered.is_err() || nix::unistd::getppid() != nix::unistd::Pid::from_raw(parent) {
        // Gone already: the flag alone, no signal, whose handler may not be installed yet (the
        // guard checks its parent next, and acts on the flag).
        PARENT_GONE.store(true, std::sync::atomic::Ordering::SeqCst);
        return Ok(());
    }
    std::thread::Builder::new()
        .name("parent-exit".into())
        .spawn(move || {
            let mut fired = [event];
            loop {
                match queue.kevent(&[], &mut fired, None) {
                    Ok(0) | Err(nix::errno::Errno::EINTR) => {}
                    Ok(_) => return report_parent_gone(signal),
                    // The guard's `getppid` poll still tells, within its interval.
                    Err(error) => return tracing::warn!(%error, "cannot wait for lease's exit"),
                }
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}

/// No kqueue here (the portable paths on Linux): the parent link and the `getppid` poll tell.
#[cfg(not(any(target_os = "macos", target_os = "freebsd")))]
#[allow(clippy::unnecessary_wraps)]
fn watch_exit(_parent: i32, _signal: Signal) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::hold::link_ended;

    /// The portable parent link (what macOS and FreeBSD run) read to its end: a writer that
    /// ends on its own terms wrote its byte, one that died did not; a reader opened after the
    /// writer is gone reads the end at once instead of waiting for a writer.
    #[test]
    fn the_fifo_link_tells_an_end_from_a_death() {
        let dir = tempfile::tempdir().expect("dir");
        let fifo = dir.path().join(LINK_FIFO);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let first = open_reader(&fifo).expect("reader");
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("writer");
        let second = open_reader(&fifo).expect("a second reader");
        std::io::Write::write_all(&mut writer, b"e").expect("the end's byte");
        drop(writer);
        assert!(link_ended(first), "ended on its own terms");
        // The byte went to the first reader: the second sees end-of-file alone, as for a death.
        assert!(!link_ended(second), "no byte: died");
        let late = open_reader(&fifo).expect("a reader after the writer is gone");
        assert!(!link_ended(late), "no writer left: end-of-file at once");
    }

    #[test]
    fn the_program_started_again_is_this_one() {
        let program = own_program().expect("own program");
        if LINUX_CALLS {
            assert_eq!(program, PathBuf::from("/proc/self/exe"));
        } else {
            assert_eq!(program, std::env::current_exe().expect("current_exe"));
        }
    }
}
