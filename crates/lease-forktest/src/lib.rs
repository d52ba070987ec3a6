//! Test support for fork safety: [`fork`], a `fork(2)` without `exec`, and [`wait`].
//!
//! A process that holds a lease and forks hands its child a copy of everything: the lease
//! handles, their open descriptors (and so the kernel lock, which lives on the shared open file
//! description), their state in memory. lease-file promises that nothing the child does with
//! that copy (dropping it, returning from `main`, unwinding, exiting, an explicit release)
//! frees the parent's lease. Testing that needs a real fork without `exec`, which is `unsafe`;
//! this unpublished crate holds the workspace's only `unsafe` blocks (`fork`, a child's read of
//! its own copy in [`drop_copy_and_exit`], and the `_exit` of [`exit_child`]) so that every
//! published crate keeps `unsafe_code = "forbid"`.
//!
//! ```no_run
//! match lease_forktest::fork()? {
//!     lease_forktest::Forked::Child => lease_forktest::exit_child(0),
//!     lease_forktest::Forked::Parent(child) => assert_eq!(lease_forktest::wait(child)?, 0),
//! }
//! # Ok::<(), nix::Error>(())
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

/// Which side of a [`fork`] this process is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process: a copy of the caller with only the calling thread.
    Child,
    /// The caller, with the child's pid.
    Parent(Pid),
}

/// `fork(2)`: the calling process continues as the parent, a copy of it as the child.
///
/// Only the calling thread exists in the child. Locks that other threads held at the moment of
/// the fork stay locked there, so a child that touches them hangs (a test sees a timeout, never
/// a false pass). Dropping a lease handle in the child must never be one of those: the `busy`
/// scenario forks while another thread holds the handle's lock.
///
/// # Errors
/// `fork` failed (no memory, the process limit).
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: `fork` is unsafe because a child of a multi-threaded process may only call
    // async-signal-safe functions until it execs, or it may find a lock held forever by a thread
    // that does not exist in it. The callers are test scenarios that accept that hazard as a
    // hang (a failing test), never as undefined behaviour in the parent, which is unaffected.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() }?;
    Ok(match forked {
        ForkResult::Child => {
            IN_CHILD.store(true, Ordering::SeqCst);
            Forked::Child
        }
        ForkResult::Parent { child } => Forked::Parent(child),
    })
}

/// Set in the child of [`fork`]: only there may [`drop_copy_and_exit`] take its copy.
static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// In the child of [`fork`]: drops this process's copy of `value` (destructors run, as when a
/// child that owns its copy drops it), then exits with `code`. For a value the parent shares
/// with a thread of its own at the fork (which the child cannot move out of a borrow).
///
/// Aborts the process when called anywhere but in a child of [`fork`].
pub fn drop_copy_and_exit<T>(value: &T, code: i32) -> ! {
    if !IN_CHILD.load(Ordering::SeqCst) {
        eprintln!("lease-forktest: drop_copy_and_exit outside a forked child");
        std::process::abort();
    }
    // SAFETY: this process is a child of `fork`, so `value` lies in memory that is this
    // process's own copy, and the only thread is this one, which never returns from here (it
    // exits, running no other destructor): nothing reads `value` again after it is read out.
    #[allow(unsafe_code)]
    let copy = unsafe { std::ptr::read(value) };
    drop(copy);
    exit_child(code)
}

/// In the child of [`fork`]: ends the process with `code` at once (`_exit(2)`), running
/// nothing: no destructor, no `atexit` handler, none of std's clean-up.
///
/// A child's test harness ends so, unless how a child ends is what it tests: std's exit (like a
/// return from `main`) takes a lock of std's own, the list of threads its stack-overflow handler
/// knows, which a thread of the parent starting or ending at the moment of the fork holds
/// forever in the child. A CI run on ed01e71 hung there: a child of the cached-directory rounds
/// blocked in `std::process::exit`, its parent waiting for it, until the test runner's timeout.
pub fn exit_child(code: i32) -> ! {
    // SAFETY: `_exit` takes no pointer and touches no memory of the caller's; it is
    // async-signal-safe, what a child of a multi-threaded process may call (fork(2)).
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::_exit(code)
    }
}

/// Waits for `child` to end: its exit code, or 128 + N when signal N killed it.
///
/// # Errors
/// `waitpid` failed (not our child).
pub fn wait(child: Pid) -> nix::Result<i32> {
    loop {
        match waitpid(child, None)? {
            WaitStatus::Exited(_, code) => return Ok(code),
            WaitStatus::Signaled(_, signal, _) => return Ok(128 + signal as i32),
            _ => {}
        }
    }
}
